/* SPDX-License-Identifier: MIT */
/* _qkv.Translator: a model directory (qkv_translator) that translates batches of sentences,
 * given as raw text or as the model's source tokens. qkv.Translator (qkv/__init__.py) wraps
 * it with CTranslate2's names and the result objects. */
#include <math.h>
#include <string.h>

#include "module.h"

typedef struct {
    PyObject_HEAD
    qkv_translator *t;
    object_lock lock;
    int threads; /* > 0: set in the calling thread before each translation */
} translator_object;

static PyObject *translator_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"path", "precision", "kv_cache", "threads", NULL};
    module_state *st = state_of_type(type);
    PyObject *path_obj;
    const char *precision = "fp32", *kv_cache = "auto";
    int threads = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&|ssi", kwlist, PyUnicode_FSConverter,
                                     &path_obj, &precision, &kv_cache, &threads))
        return NULL;
    qkv_error err = {0};
    qkv_precision prec;
    qkv_kv_cache kv;
    qkv_status s = qkv_precision_parse(&prec, precision, &err);
    if (!s) s = qkv_kv_cache_parse(&kv, kv_cache, &err);
    if (!s && (threads < 0 || threads > 4096)) {
        s = QKV_ERR_ARG;
        snprintf(err.msg, sizeof err.msg, "threads must be in [0, 4096], got %d", threads);
    }
    if (s) {
        Py_DECREF(path_obj);
        return raise_qkv(st, s, &err);
    }
    const char *path = PyBytes_AsString(path_obj);
    qkv_translator *t = NULL;
    Py_BEGIN_ALLOW_THREADS
    s = qkv_translator_open(&t, path, &err);
    if (!s) s = qkv_transformer_set_precision(qkv_translator_model(t), prec, &err);
    if (!s) s = qkv_transformer_set_kv_cache(qkv_translator_model(t), kv, &err);
    Py_END_ALLOW_THREADS
    Py_DECREF(path_obj);
    if (s) {
        qkv_translator_free(t);
        return raise_qkv(st, s, &err);
    }
    allocfunc alloc = (allocfunc)PyType_GetSlot(type, Py_tp_alloc);
    translator_object *self = (translator_object *)alloc(type, 0);
    if (!self) {
        qkv_translator_free(t);
        return NULL;
    }
    self->t = t, self->threads = threads;
    pthread_mutex_init(&self->lock, NULL);
    return (PyObject *)self;
}

static void translator_dealloc(translator_object *self)
{
    PyTypeObject *type = TYPE_OF(self);
    if (self->t) {
        qkv_translator_free(self->t);
        pthread_mutex_destroy(&self->lock);
    }
    freefunc free_slot = (freefunc)PyType_GetSlot(type, Py_tp_free);
    free_slot(self);
    Py_DECREF(type);
}

/* Hypothesis h of r: its text, or its target tokens (the vocabulary's) when as_tokens. */
static PyObject *hypothesis(const qkv_translations *r, size_t h, const qkv_tokenizer *tok,
                            int as_tokens)
{
    if (!as_tokens) return str_of(r->text[h], -1);
    PyObject *list = PyList_New(r->len[h]);
    for (int k = 0; list && k < r->len[h]; k++) {
        const char *piece = qkv_vocab_token(&tok->tgt, r->ids[h * r->max_len + k]);
        PyObject *s = str_of(piece ? piece : "<unk>", -1);
        if (!s) Py_CLEAR(list);
        else PyList_SetItem(list, k, s);
    }
    return list;
}

/* [(hypotheses, scores, source tokens, unknown source tokens)] per sentence, then the count
 * of truncated sources, the first one and its length. */
static PyObject *results_of(const qkv_translations *r, const qkv_tokenizer *tok, int as_tokens)
{
    PyObject *list = PyList_New(r->count);
    for (int i = 0; list && i < r->count; i++) {
        PyObject *hyps = PyList_New(0), *scores = PyList_New(0), *item = NULL;
        for (int k = 0; hyps && scores && k < r->n_best; k++) {
            const size_t h = (size_t)i * r->n_best + k;
            if (!r->text[h]) continue; /* beam search found fewer than n_best */
            PyObject *text = hypothesis(r, h, tok, as_tokens), *score = PyFloat_FromDouble(r->score[h]);
            const int bad = !text || !score || PyList_Append(hyps, text) ||
                            PyList_Append(scores, score);
            Py_XDECREF(text), Py_XDECREF(score);
            if (bad) Py_CLEAR(hyps);
        }
        if (hyps && scores)
            item = Py_BuildValue("(OOii)", hyps, scores, r->src_len ? r->src_len[i] : 0,
                                 r->unknown ? r->unknown[i] : 0);
        Py_XDECREF(hyps), Py_XDECREF(scores);
        if (!item) Py_CLEAR(list);
        else PyList_SetItem(list, i, item);
    }
    if (!list) return NULL;
    return Py_BuildValue("(Niii)", list, r->truncated, r->first_truncated,
                         r->first_truncated_len);
}

/* translate(sources, tokens_in, tokens_out, beam, n_best, alpha, stop, max_len, max_len_a,
 * max_len_b, batch, source_lang, target_lang): sources a list of str (tokens_in 0) or of lists
 * of source tokens; stop the stopping rule's name (the library's table); the languages of a
 * multilingual model (None: as they are). */
static PyObject *translator_translate(translator_object *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"sources", "tokens_in", "tokens_out", "beam", "n_best", "alpha",
                             "stop", "max_len", "max_len_a", "max_len_b", "batch",
                             "source_lang", "target_lang", NULL};
    module_state *st = state_of_type(TYPE_OF(self));
    PyObject *sources;
    int tokens_in, tokens_out;
    const char *stop = NULL, *source_lang = NULL, *target_lang = NULL;
    qkv_translate_options o = qkv_translate_default_options();
    if (!PyArg_ParseTupleAndKeywords(args, kw, "Opp|$iifzifiizz", kwlist, &sources, &tokens_in,
                                     &tokens_out, &o.beam, &o.n_best, &o.alpha, &stop,
                                     &o.max_len, &o.max_len_a, &o.max_len_b, &o.batch,
                                     &source_lang, &target_lang))
        return NULL;
    qkv_error err = {0};
    if (stop && qkv_beam_stop_parse(&o.stop, stop, &err))
        return PyErr_Format(PyExc_ValueError, "beam_stop: %s", err.msg);
    char **strings = NULL;
    Py_ssize_t n = 0;
    qkv_sentences tokens = {0};
    if (tokens_in ? sentences_of(sources, &tokens, "source") != 0
                  : !(strings = strings_of(sources, &n, "source")))
        return NULL;
    if (n > INT_MAX) {
        strings_free(strings, n);
        return PyErr_Format(PyExc_ValueError, "too many sources (%zd)", n);
    }
    qkv_translations r = {0};
    qkv_status s;
    const int threads = call_threads((PyObject *)self, self->threads);
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&self->lock);
    o.precision = qkv_transformer_get_precision(qkv_translator_model(self->t));
    if (threads > 0) qkv_set_threads(threads);
    /* a language chosen holds for later calls, as the library keeps it */
    s = source_lang || target_lang
            ? qkv_translator_set_languages(self->t, source_lang, target_lang, &err)
            : QKV_OK;
    if (!s)
        s = tokens_in ? qkv_translate_tokens(&r, self->t, &tokens, &o, &err)
                      : qkv_translate(&r, self->t, (const char *const *)strings, (int)n, &o, &err);
    pthread_mutex_unlock(&self->lock);
    Py_END_ALLOW_THREADS
    strings_free(strings, n);
    qkv_sentences_free(&tokens);
    if (s) return raise_qkv(st, s, &err);
    PyObject *out = results_of(&r, qkv_translator_tokenizer(self->t), tokens_out);
    qkv_translations_free(&r);
    return out;
}

/* The sentences (str) as the model's source tokens: how translate reads raw text. */
static PyObject *translator_source_tokens(translator_object *self, PyObject *sources)
{
    module_state *st = state_of_type(TYPE_OF(self));
    Py_ssize_t n;
    char **strings = strings_of(sources, &n, "source");
    if (!strings) return NULL;
    size_t bytes = 1;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (strchr(strings[i], '\n')) {
            strings_free(strings, n);
            return PyErr_Format(PyExc_ValueError, "source[%zd] holds a line break (one "
                                "sentence per source)", i);
        }
        bytes += strlen(strings[i]) + 1;
    }
    char *text = malloc(bytes), *at = text;
    if (!text) {
        strings_free(strings, n);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) at = stpcpy(at, strings[i]), *at++ = '\n';
    strings_free(strings, n);
    const qkv_tokenizer *tok = qkv_translator_tokenizer(self->t);
    qkv_sentences words = {0}, pieces = {0};
    qkv_error err = {0};
    qkv_status s;
    Py_BEGIN_ALLOW_THREADS
    s = qkv_tokenizer_words(tok, &words, text, (size_t)(at - text), "source", &err);
    if (!s) s = qkv_tokenizer_tokens(tok, &pieces, &words, 0, &err);
    Py_END_ALLOW_THREADS
    free(text);
    qkv_sentences_free(&words);
    if (s) return raise_qkv(st, s, &err);
    PyObject *out = PyList_New(n);
    for (int i = 0; out && i < (int)n; i++) {
        /* a blank source is no line of words: fewer sentences than sources is not possible,
         * since every source ends in its own line break */
        const int len = i < pieces.count ? qkv_sentence_len(&pieces, i) : 0;
        PyObject *row = PyList_New(len);
        for (int k = 0; row && k < len; k++) {
            PyObject *piece = str_of(pieces.tokens[pieces.start[i] + k], -1);
            if (!piece) Py_CLEAR(row);
            else PyList_SetItem(row, k, piece);
        }
        if (!row) Py_CLEAR(out);
        else PyList_SetItem(out, i, row);
    }
    qkv_sentences_free(&pieces);
    return out;
}

/* The id of a token in the source (side 0) or target (1) vocabulary; -1 when it lacks it. */
static PyObject *translator_token_id(translator_object *self, PyObject *args)
{
    const char *token;
    int side;
    if (!PyArg_ParseTuple(args, "si", &token, &side)) return NULL;
    const qkv_tokenizer *tok = qkv_translator_tokenizer(self->t);
    const qkv_vocab *v = side ? &tok->tgt : &tok->src;
    const int id = qkv_vocab_id(v, token);
    return PyLong_FromLong(id == QKV_UNK && strcmp(token, "<unk>") ? -1 : id);
}

static PyObject *translator_config(translator_object *self, PyObject *unused)
{
    (void)unused;
    char *json = NULL;
    qkv_error err = {0};
    const qkv_status s =
        qkv_config_to_json(qkv_transformer_get_config(qkv_translator_model(self->t)), &json, &err);
    if (s) return raise_qkv(state_of_type(TYPE_OF(self)), s, &err);
    PyObject *out = str_of(json, -1);
    free(json);
    return out;
}

static PyObject *translator_info(translator_object *self, PyObject *unused)
{
    (void)unused;
    qkv_transformer *m = qkv_translator_model(self->t);
    const qkv_tokenizer *tok = qkv_translator_tokenizer(self->t);
    static const char *const kinds[] = {"d2l", "whitespace", "bpe", "spm"};
    return Py_BuildValue("{s:i,s:i,s:i,s:s,s:s,s:s,s:n,s:i}", "num_steps",
                         qkv_translator_num_steps(self->t), "source_vocab", tok->src.size,
                         "target_vocab", tok->tgt.size, "tokenizer",
                         (unsigned)tok->kind < 4 ? kinds[tok->kind] : "?", "precision",
                         qkv_precision_name(qkv_transformer_get_precision(m)), "kv_cache",
                         qkv_kv_cache_name(qkv_transformer_get_kv_cache(m)), "parameters",
                         (Py_ssize_t)qkv_transformer_num_params(m), "threads", self->threads);
}

static PyMethodDef translator_methods[] = {
    {"translate", (PyCFunction)(void (*)(void))translator_translate, METH_VARARGS | METH_KEYWORDS,
     "translate(sources, tokens_in, tokens_out, *, beam, n_best, alpha, stop, max_len, "
     "max_len_a, max_len_b, batch)"},
    {"source_tokens", (PyCFunction)translator_source_tokens, METH_O,
     "source_tokens(sources): each sentence as the model's source tokens."},
    {"token_id", (PyCFunction)translator_token_id, METH_VARARGS,
     "token_id(token, side): its id in the source (0) or target (1) vocabulary, -1 if none."},
    {"config", (PyCFunction)translator_config, METH_NOARGS, "config(): config.json's text."},
    {"info", (PyCFunction)translator_info, METH_NOARGS, "info(): a dict of what it is."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot translator_slots[] = {
    {Py_tp_new, translator_new},
    {Py_tp_dealloc, translator_dealloc},
    {Py_tp_methods, translator_methods},
    {Py_tp_doc, "Translator(path, precision='fp32', kv_cache='auto', threads=0): a model "
                "directory opened for translation (use qkv.Translator)."},
    {0, NULL},
};

static PyType_Spec translator_spec = {
    "qkv._qkv.Translator", sizeof(translator_object), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE, translator_slots,
};

int translator_add(PyObject *module, module_state *st)
{
    st->Translator = (PyTypeObject *)PyType_FromModuleAndSpec(module, &translator_spec, NULL);
    return st->Translator ? PyModule_AddType(module, st->Translator) : -1;
}
