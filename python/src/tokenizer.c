/* SPDX-License-Identifier: MIT */
/* _qkv.Tokenizer: a model directory's tokenizer (qkv_tokenizer_load): text to the model's
 * tokens and ids on either side, and target ids back to text. Read-only once loaded, so any
 * number of threads may use one at once. */
#include <string.h>

#include "module.h"

typedef struct {
    PyObject_HEAD
    qkv_tokenizer tok;
    int loaded;
} tokenizer_object;

static PyObject *tokenizer_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"path", NULL};
    PyObject *path_obj;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&", kwlist, PyUnicode_FSConverter, &path_obj))
        return NULL;
    allocfunc alloc = (allocfunc)PyType_GetSlot(type, Py_tp_alloc);
    tokenizer_object *self = (tokenizer_object *)alloc(type, 0);
    if (!self) {
        Py_DECREF(path_obj);
        return NULL;
    }
    const char *path = PyBytes_AsString(path_obj);
    qkv_error err = {0};
    qkv_status s;
    Py_BEGIN_ALLOW_THREADS
    s = qkv_tokenizer_load(&self->tok, path, &err);
    Py_END_ALLOW_THREADS
    Py_DECREF(path_obj);
    if (s) {
        Py_DECREF((PyObject *)self);
        return raise_qkv(state_of_type(type), s, &err);
    }
    self->loaded = 1;
    return (PyObject *)self;
}

static void tokenizer_dealloc(tokenizer_object *self)
{
    PyTypeObject *type = TYPE_OF(self);
    if (self->loaded) qkv_tokenizer_free(&self->tok);
    freefunc free_slot = (freefunc)PyType_GetSlot(type, Py_tp_free);
    free_slot(self);
    Py_DECREF(type);
}

static const qkv_vocab *side_vocab(tokenizer_object *self, int side)
{
    if (side != 0 && side != 1) {
        PyErr_Format(PyExc_ValueError, "side must be 0 (source) or 1 (target), got %d", side);
        return NULL;
    }
    return side ? &self->tok.tgt : &self->tok.src;
}

/* encode(text, side, ids): one line of text as the model's tokens on that side, or as their
 * ids (a token the vocabulary lacks is <unk>'s id). */
static PyObject *tokenizer_encode(tokenizer_object *self, PyObject *args)
{
    PyObject *text_obj;
    int side, as_ids;
    if (!PyArg_ParseTuple(args, "Oip", &text_obj, &side, &as_ids)) return NULL;
    const qkv_vocab *v = side_vocab(self, side);
    Py_ssize_t len;
    const char *text = v ? utf8_of(text_obj, &len, "text") : NULL;
    if (!text) return NULL;
    if (memchr(text, '\n', (size_t)len) || memchr(text, '\r', (size_t)len))
        return PyErr_Format(PyExc_ValueError, "text holds a line break (encode one line)");
    qkv_sentences words = {0}, tokens = {0};
    qkv_error err = {0};
    qkv_status s;
    Py_BEGIN_ALLOW_THREADS
    s = qkv_tokenizer_words(&self->tok, &words, text, (size_t)len, "text", &err);
    if (!s) s = qkv_tokenizer_tokens(&self->tok, &tokens, &words, side, &err);
    Py_END_ALLOW_THREADS
    qkv_sentences_free(&words);
    if (s) return raise_qkv(state_of_type(TYPE_OF(self)), s, &err);
    const int n = tokens.count ? qkv_sentence_len(&tokens, 0) : 0;
    PyObject *out = PyList_New(n);
    for (int k = 0; out && k < n; k++) {
        const char *t = tokens.tokens[k];
        PyObject *item = as_ids ? PyLong_FromLong(qkv_vocab_id(v, t)) : str_of(t, -1);
        if (!item) Py_CLEAR(out);
        else PyList_SetItem(out, k, item);
    }
    qkv_sentences_free(&tokens);
    return out;
}

/* Target ids (a sequence of int) -> their ints in a malloc'd array; NULL with an exception. */
static int *ids_of(PyObject *seq, Py_ssize_t *n)
{
    PyObject *list = PySequence_List(seq);
    if (!list) return NULL;
    *n = PyList_Size(list);
    int *ids = malloc((size_t)(*n ? *n : 1) * sizeof *ids);
    if (!ids) {
        Py_DECREF(list);
        return (int *)PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < *n; i++) {
        const long id = PyLong_AsLong(PyList_GetItem(list, i));
        if ((id == -1 && PyErr_Occurred()) || id < INT_MIN || id > INT_MAX) {
            if (!PyErr_Occurred()) PyErr_Format(PyExc_ValueError, "ids[%zd] is out of range", i);
            free(ids);
            Py_DECREF(list);
            return NULL;
        }
        ids[i] = (int)id;
    }
    Py_DECREF(list);
    return ids;
}

/* decode(ids): the text of target ids, up to the first <eos>, as translations are written. */
static PyObject *tokenizer_decode(tokenizer_object *self, PyObject *seq)
{
    Py_ssize_t n;
    int *ids = ids_of(seq, &n);
    if (!ids) return NULL;
    if (n > INT_MAX) {
        free(ids);
        return PyErr_Format(PyExc_ValueError, "too many ids");
    }
    const size_t need = qkv_tokenizer_decode(&self->tok, NULL, 0, ids, (int)n);
    char *text = malloc(need + 1);
    if (!text) {
        free(ids);
        return PyErr_NoMemory();
    }
    qkv_tokenizer_decode(&self->tok, text, need + 1, ids, (int)n);
    free(ids);
    PyObject *out = str_of(text, (Py_ssize_t)need);
    free(text);
    return out;
}

static PyObject *tokenizer_id_to_piece(tokenizer_object *self, PyObject *args)
{
    int id, side;
    if (!PyArg_ParseTuple(args, "ii", &id, &side)) return NULL;
    const qkv_vocab *v = side_vocab(self, side);
    if (!v) return NULL;
    const char *t = qkv_vocab_token(v, id);
    if (!t) return PyErr_Format(PyExc_IndexError, "id %d is outside the vocabulary [0, %d)", id,
                                v->size);
    return str_of(t, -1);
}

static PyObject *tokenizer_piece_to_id(tokenizer_object *self, PyObject *args)
{
    const char *piece;
    int side;
    if (!PyArg_ParseTuple(args, "si", &piece, &side)) return NULL;
    const qkv_vocab *v = side_vocab(self, side);
    return v ? PyLong_FromLong(qkv_vocab_id(v, piece)) : NULL;
}

static PyObject *tokenizer_info(tokenizer_object *self, PyObject *unused)
{
    (void)unused;
    static const char *const kinds[] = {"d2l", "whitespace", "bpe", "spm"};
    return Py_BuildValue("{s:s,s:i,s:i,s:O,s:O}", "kind",
                         (unsigned)self->tok.kind < 4 ? kinds[self->tok.kind] : "?",
                         "source_vocab", self->tok.src.size, "target_vocab", self->tok.tgt.size,
                         "source_bos", self->tok.source_bos ? Py_True : Py_False, "keep_case",
                         self->tok.keep_case ? Py_True : Py_False);
}

static PyMethodDef tokenizer_methods[] = {
    {"encode", (PyCFunction)tokenizer_encode, METH_VARARGS,
     "encode(text, side, as_ids): one line as the model's tokens or ids."},
    {"decode", (PyCFunction)tokenizer_decode, METH_O, "decode(ids): target ids as text."},
    {"id_to_piece", (PyCFunction)tokenizer_id_to_piece, METH_VARARGS, "id_to_piece(id, side)"},
    {"piece_to_id", (PyCFunction)tokenizer_piece_to_id, METH_VARARGS, "piece_to_id(piece, side)"},
    {"info", (PyCFunction)tokenizer_info, METH_NOARGS, "info(): a dict of what it is."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot tokenizer_slots[] = {
    {Py_tp_new, tokenizer_new},
    {Py_tp_dealloc, tokenizer_dealloc},
    {Py_tp_methods, tokenizer_methods},
    {Py_tp_doc, "Tokenizer(path): a model directory's tokenizer (use qkv.Tokenizer)."},
    {0, NULL},
};

static PyType_Spec tokenizer_spec = {
    "qkv._qkv.Tokenizer", sizeof(tokenizer_object), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE, tokenizer_slots,
};

int tokenizer_add(PyObject *module, module_state *st)
{
    st->Tokenizer = (PyTypeObject *)PyType_FromModuleAndSpec(module, &tokenizer_spec, NULL);
    return st->Tokenizer ? PyModule_AddType(module, st->Tokenizer) : -1;
}
