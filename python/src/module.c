/* SPDX-License-Identifier: MIT */
/* qkv._qkv: the module, its exceptions, threads, and the conversions every file uses. */
#include <string.h>

#include "module.h"

module_state *state_of(PyObject *module)
{
    return (module_state *)PyModule_GetState(module);
}

module_state *state_of_type(PyTypeObject *t)
{
    return state_of(PyType_GetModule(t));
}

PyObject *raise_qkv(module_state *st, qkv_status status, const qkv_error *err)
{
    const int known = status > QKV_OK && status <= QKV_ERR_NUMERIC;
    PyObject *type = known ? st->by_status[status] : st->Error;
    const char *msg = err && err->msg[0] ? err->msg : qkv_status_name(status);
    PyErr_SetString(type, msg);
    return NULL;
}

PyObject *raise_type(const char *what, const char *expected, PyObject *o)
{
    PyObject *name = PyType_GetName(Py_TYPE(o));
    if (name) PyErr_Format(PyExc_TypeError, "%s must be %s, not %U", what, expected, name);
    Py_XDECREF(name);
    return NULL;
}

const char *utf8_of(PyObject *o, Py_ssize_t *len, const char *what)
{
    if (!PyUnicode_Check(o)) return (const char *)raise_type(what, "str", o);
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(o, &n);
    if (s && memchr(s, '\0', (size_t)n)) {
        PyErr_Format(PyExc_ValueError, "%s holds a NUL character", what);
        return NULL;
    }
    if (len) *len = n;
    return s;
}

void strings_free(char **s, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; s && i < n; i++) free(s[i]);
    free(s);
}

char **strings_of(PyObject *seq, Py_ssize_t *n, const char *what)
{
    if (PyUnicode_Check(seq) || PyBytes_Check(seq))
        return (char **)raise_type(what, "a list of str (not one string)", seq);
    PyObject *items = PySequence_List(seq);
    if (!items) {
        PyErr_Format(PyExc_TypeError, "%s must be a list of str", what);
        return NULL;
    }
    const Py_ssize_t count = PyList_Size(items);
    char **out = calloc((size_t)count + 1, sizeof *out);
    if (!out) {
        Py_DECREF(items);
        return (char **)PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        char name[96];
        snprintf(name, sizeof name, "%.60s[%zd]", what, i);
        Py_ssize_t len;
        const char *s = utf8_of(PyList_GetItem(items, i), &len, name);
        if (!s || !(out[i] = malloc((size_t)len + 1))) {
            if (s) PyErr_NoMemory();
            strings_free(out, i);
            Py_DECREF(items);
            return NULL;
        }
        memcpy(out[i], s, (size_t)len + 1);
    }
    Py_DECREF(items);
    *n = count;
    return out;
}

PyObject *str_of(const char *s, Py_ssize_t len)
{
    return PyUnicode_DecodeUTF8(s, len < 0 ? (Py_ssize_t)strlen(s) : len, "replace");
}

int sentences_of(PyObject *seq, qkv_sentences *out, const char *what)
{
    memset(out, 0, sizeof *out);
    PyObject *rows = PySequence_List(seq);
    if (!rows) {
        PyErr_Format(PyExc_TypeError, "%s must be a list of lists of str", what);
        return -1;
    }
    const Py_ssize_t count = PyList_Size(rows);
    char **words = NULL, **all = NULL;
    Py_ssize_t n_all = 0, n = 0;
    size_t bytes = 0;
    int rc = -1;
    if (count > INT_MAX) {
        PyErr_Format(PyExc_ValueError, "%s: too many sentences", what);
        goto done;
    }
    if (!(out->start = calloc((size_t)count + 1, sizeof *out->start))) goto nomem;
    for (Py_ssize_t i = 0; i < count; i++) { /* every sentence's words, in one list */
        char name[96];
        snprintf(name, sizeof name, "%.60s[%zd]", what, i);
        if (!(words = strings_of(PyList_GetItem(rows, i), &n, name))) goto done;
        char **grown = realloc(all, (size_t)(n_all + n + 1) * sizeof *all);
        if (!grown) {
            strings_free(words, n);
            goto nomem;
        }
        all = grown;
        for (Py_ssize_t k = 0; k < n; k++) all[n_all++] = words[k], bytes += strlen(words[k]) + 1;
        free(words);
        out->start[i + 1] = (size_t)n_all;
    }
    out->tokens = malloc((size_t)(n_all ? n_all : 1) * sizeof *out->tokens);
    out->storage = malloc(bytes ? bytes : 1);
    if (!out->tokens || !out->storage) goto nomem;
    char *at = out->storage;
    for (Py_ssize_t k = 0; k < n_all; k++) {
        const size_t len = strlen(all[k]) + 1;
        memcpy(at, all[k], len);
        out->tokens[k] = at, at += len;
    }
    out->count = (int)count, out->n_tokens = (size_t)n_all;
    rc = 0;
    goto done;
nomem:
    PyErr_NoMemory();
done:
    strings_free(all, n_all);
    Py_DECREF(rows);
    if (rc) qkv_sentences_free(out);
    return rc;
}

/* ---- module functions ------------------------------------------------------------------ */

int call_threads(PyObject *self, int own)
{
    return own > 0 ? own : state_of_type(Py_TYPE(self))->threads;
}

static PyObject *set_threads(PyObject *module, PyObject *arg)
{
    const long n = PyLong_AsLong(arg);
    if (n == -1 && PyErr_Occurred()) return NULL;
    if (n < 0 || n > 4096) return PyErr_Format(PyExc_ValueError, "threads must be in [0, 4096], "
                                               "got %ld", n);
    qkv_set_threads((int)n);
    state_of(module)->threads = (int)n;
    Py_RETURN_NONE;
}

static PyObject *get_threads(PyObject *module, PyObject *unused)
{
    (void)module, (void)unused;
    return PyLong_FromLong(qkv_get_threads());
}

static PyObject *blas_check(PyObject *module, PyObject *unused)
{
    (void)unused;
    qkv_error err = {0};
    const qkv_status st = qkv_blas_check(&err);
    if (st) return raise_qkv(state_of(module), st, &err);
    Py_RETURN_NONE;
}

static PyObject *cpu_features(PyObject *module, PyObject *unused)
{
    (void)module, (void)unused;
    return Py_BuildValue("{s:O,s:O}", "bf16", qkv_bf16_supported() ? Py_True : Py_False,
                         "int8", qkv_int8_supported() ? Py_True : Py_False);
}

static PyMethodDef module_methods[] = {
    {"set_threads", set_threads, METH_O, "set_threads(n): threads of kernels and OpenBLAS for "
     "every later call, from any thread (0: leave as is)."},
    {"get_threads", get_threads, METH_NOARGS, "get_threads(): threads kernels use."},
    {"blas_check", blas_check, METH_NOARGS, "blas_check(): raises unless the OpenBLAS loaded "
     "is its OpenMP build."},
    {"cpu_features", cpu_features, METH_NOARGS, "cpu_features(): {'bf16': bool, 'int8': bool}"},
    {NULL, NULL, 0, NULL},
};

/* ---- the module ------------------------------------------------------------------------ */

static int add_exceptions(PyObject *module, module_state *st)
{
    st->Error = PyErr_NewExceptionWithDoc(
        "qkv.Error", "A failure the qkv library reported, with its message (the file, line, "
        "tensor or option it concerns).", NULL, NULL);
    if (!st->Error || PyModule_AddObjectRef(module, "Error", st->Error)) return -1;
    static const struct {
        qkv_status status;
        const char *name, *doc;
        PyObject **builtin;
    } kinds[] = {
        {QKV_ERR_NOMEM, "qkv.OutOfMemoryError", "The library ran out of memory.",
         &PyExc_MemoryError},
        {QKV_ERR_ARG, "qkv.ArgumentError", "An argument outside its documented range.",
         &PyExc_ValueError},
        {QKV_ERR_IO, "qkv.FileError", "A file that could not be opened, read or written.",
         &PyExc_OSError},
        {QKV_ERR_FORMAT, "qkv.FormatError",
         "A malformed file: truncated, hostile, of the wrong dtype or shape.", &PyExc_ValueError},
        {QKV_ERR_NUMERIC, "qkv.NumericError", "NaN or Inf where a finite number is required.",
         &PyExc_ArithmeticError},
    };
    for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++) {
        PyObject *bases = PyTuple_Pack(2, st->Error, *kinds[i].builtin);
        if (!bases) return -1;
        PyObject *e = PyErr_NewExceptionWithDoc(kinds[i].name, kinds[i].doc, bases, NULL);
        Py_DECREF(bases);
        if (!e) return -1;
        st->by_status[kinds[i].status] = e;
        if (PyModule_AddObjectRef(module, strchr(kinds[i].name, '.') + 1, e)) return -1;
    }
    return 0;
}

static int module_exec(PyObject *module)
{
    module_state *st = state_of(module);
    if (add_exceptions(module, st) || PyModule_AddFunctions(module, text_methods) ||
        PyModule_AddFunctions(module, ops_methods) ||
        PyModule_AddFunctions(module, train_methods) || translator_add(module, st) ||
        generator_add(module, st) || tokenizer_add(module, st) ||
        PyModule_AddStringConstant(module, "__version__", QKV_VERSION) ||
        PyModule_AddStringConstant(module, "sacrebleu_signature", qkv_sacrebleu_signature()) ||
        PyModule_AddStringConstant(module, "chrf_signature", qkv_chrf_signature()))
        return -1;
    return 0;
}

static int module_traverse(PyObject *module, visitproc visit, void *arg)
{
    module_state *st = state_of(module);
    Py_VISIT(st->Error);
    for (int i = 0; i < 6; i++) Py_VISIT(st->by_status[i]);
    Py_VISIT(st->Translator);
    Py_VISIT(st->Generator);
    Py_VISIT(st->TokenStream);
    Py_VISIT(st->Tokenizer);
    return 0;
}

static int module_clear(PyObject *module)
{
    module_state *st = state_of(module);
    Py_CLEAR(st->Error);
    for (int i = 0; i < 6; i++) Py_CLEAR(st->by_status[i]);
    Py_CLEAR(st->Translator);
    Py_CLEAR(st->Generator);
    Py_CLEAR(st->TokenStream);
    Py_CLEAR(st->Tokenizer);
    return 0;
}

static void module_free(void *module)
{
    module_clear(module);
}

static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, (void *)module_exec},
    {0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    "qkv._qkv",
    "The C side of the qkv package (use the qkv package itself).",
    sizeof(module_state),
    module_methods,
    module_slots,
    module_traverse,
    module_clear,
    module_free,
};

PyMODINIT_FUNC PyInit__qkv(void)
{
    return PyModuleDef_Init(&module_def);
}
