/* SPDX-License-Identifier: MIT */
/* qkv._qkv, the extension module under the qkv package: what its files share. It is written
 * against CPython's limited API (3.11), so one build serves every later Python. The Python
 * side (qkv/__init__.py) gives every name its defaults and documentation; this side checks
 * every argument again, since a wrong one must raise, never crash.
 *
 * Threads: every long call copies its arguments out of Python objects, releases the GIL and
 * then takes the object's own lock (a model serves one call at a time: its decoding buffers
 * are its own), in that order, so a thread waiting for the lock never holds the GIL. */
#ifndef QKV_PY_MODULE_H
#define QKV_PY_MODULE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "qkv.h"

/* The module's exception classes and types (module state, not globals). */
typedef struct {
    PyObject *Error;         /* qkv.Error: every failure the library reports */
    PyObject *by_status[6];  /* its subclass for each qkv_status (QKV_OK unused) */
    PyTypeObject *Translator, *Generator, *TokenStream, *Tokenizer;
    int threads; /* qkv.set_threads's (0: the runtime's): OpenMP's count is per thread, so
                  * every call applies it in the thread it runs in */
} module_state;

module_state *state_of(PyObject *module);
/* The state of the module that defined type t (a type made by PyType_FromModuleAndSpec). */
module_state *state_of_type(PyTypeObject *t);

/* The type of one of our objects (a struct that starts with PyObject_HEAD). */
#define TYPE_OF(o) Py_TYPE((PyObject *)(o))

/* Raises the qkv.Error subclass of status with err's message; returns NULL. */
PyObject *raise_qkv(module_state *st, qkv_status status, const qkv_error *err);

/* Raises TypeError "<what> must be <expected>, not <o's type>"; returns NULL. */
PyObject *raise_type(const char *what, const char *expected, PyObject *o);
/* The UTF-8 bytes of a str (valid while o lives), or NULL with TypeError naming what. */
const char *utf8_of(PyObject *o, Py_ssize_t *len, const char *what);
/* A copy of the strings of a sequence of str, NUL-terminated (free with strings_free); NULL
 * with TypeError/ValueError naming what (and the index) otherwise. An embedded NUL is
 * refused: C reads the string only up to it. */
char **strings_of(PyObject *seq, Py_ssize_t *n, const char *what);
void strings_free(char **s, Py_ssize_t n);
/* A str from UTF-8 bytes that the library made; invalid bytes are replaced, never raised on
 * (a model can put any piece anywhere). */
PyObject *str_of(const char *s, Py_ssize_t len);
/* qkv_sentences holding copies of a sequence of sequences of str. 0, or -1 with an
 * exception set. */
int sentences_of(PyObject *seq, qkv_sentences *out, const char *what);

/* The threads a call uses: the object's own (> 0), else qkv.set_threads's; 0 leaves the
 * runtime's. Read with the GIL held, applied (qkv_set_threads) in the thread that computes. */
int call_threads(PyObject *self, int own);

/* A mutex per object: taken with the GIL released (see above). */
typedef pthread_mutex_t object_lock;

/* The types, one file each; *_add registers the type with the module (0 or -1). */
int translator_add(PyObject *module, module_state *st);
int generator_add(PyObject *module, module_state *st);
int tokenizer_add(PyObject *module, module_state *st);
/* Module-level functions of the other files. */
extern PyMethodDef text_methods[];  /* text.c: eval_bleu, import_marian, ... */
extern PyMethodDef ops_methods[];   /* ops.c: the layers' forward and backward */
extern PyMethodDef train_methods[]; /* train.c: the training runs */

#endif
