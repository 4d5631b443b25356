/* SPDX-License-Identifier: MIT */
/* _qkv.Generator: a language model directory (config.json, model.safetensors, vocab.txt, as
 * `qkv train-lm` writes it) that continues prompts, as `qkv generate` does: qkv_generator_open
 * and qkv_lm_generate. _qkv.TokenStream: the same generation in a thread of its own, each
 * token handed to Python as soon as it is drawn. */
#include <string.h>

#include "module.h"

typedef struct {
    PyObject_HEAD
    qkv_generator *g;
    qkv_lm *model; /* the generator's */
    object_lock lock;
    int threads;
} generator_object;

static PyObject *generator_new(PyTypeObject *type, PyObject *args, PyObject *kw)
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
    allocfunc alloc = (allocfunc)PyType_GetSlot(type, Py_tp_alloc);
    generator_object *self = (generator_object *)alloc(type, 0);
    if (!self) {
        Py_DECREF(path_obj);
        return NULL;
    }
    const char *dir = PyBytes_AsString(path_obj);
    Py_BEGIN_ALLOW_THREADS
    s = qkv_generator_open(&self->g, dir, &err);
    if (!s) self->model = qkv_generator_model(self->g);
    if (!s) s = qkv_lm_set_precision(self->model, prec, &err);
    if (!s) s = qkv_lm_set_kv_cache(self->model, kv, &err);
    Py_END_ALLOW_THREADS
    Py_DECREF(path_obj);
    pthread_mutex_init(&self->lock, NULL);
    self->threads = threads;
    if (s) {
        Py_DECREF((PyObject *)self);
        return raise_qkv(st, s, &err);
    }
    return (PyObject *)self;
}

static void generator_dealloc(generator_object *self)
{
    PyTypeObject *type = TYPE_OF(self);
    qkv_generator_free(self->g);
    pthread_mutex_destroy(&self->lock);
    freefunc free_slot = (freefunc)PyType_GetSlot(type, Py_tp_free);
    free_slot(self);
    Py_DECREF(type);
}

/* What one generation asks for (the arguments of generate and stream). */
typedef struct {
    int *prompt;
    size_t n_prompt, unknown;
    qkv_lm_generation g;
} request;

/* Parses (prompt, tokens, temperature, top_k, top_p, seed) and encodes the prompt (an empty
 * one reads as a newline, as `qkv generate` reads it). 0, or -1 with an exception set. */
static int request_of(generator_object *self, PyObject *args, PyObject *kw, request *r)
{
    static char *kwlist[] = {"prompt", "tokens", "temperature", "top_k", "top_p", "seed", NULL};
    PyObject *prompt_obj;
    memset(r, 0, sizeof *r);
    r->g.sampling = (qkv_sampling){1.0f, 0, 1.0f};
    r->g.text_only = 1;
    unsigned long long seed = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "Oi|fifK", kwlist, &prompt_obj, &r->g.tokens,
                                     &r->g.sampling.temperature, &r->g.sampling.top_k,
                                     &r->g.sampling.top_p, &seed))
        return -1;
    r->g.seed = (uint64_t)seed;
    const qkv_sampling *sp = &r->g.sampling;
    if (r->g.tokens < 0 || !(sp->temperature >= 0.0f) || sp->top_k < 0 || !(sp->top_p > 0.0f)) {
        PyErr_Format(PyExc_ValueError, "generation needs max_length >= 0, temperature >= 0, "
                     "top_k >= 0 and top_p in (0, 1] (got %d, %g, %d, %g)", r->g.tokens,
                     (double)sp->temperature, sp->top_k, (double)sp->top_p);
        return -1;
    }
    Py_ssize_t len;
    const char *text = utf8_of(prompt_obj, &len, "prompt");
    if (!text) return -1;
    if (!len) text = "\n", len = 1;
    qkv_error err = {0};
    const qkv_status s = qkv_generator_encode(self->g, text, (size_t)len, &r->prompt,
                                              &r->n_prompt, &r->unknown, &err);
    if (s) {
        raise_qkv(state_of_type(TYPE_OF(self)), s, &err);
        return -1;
    }
    return 0;
}

/* The UTF-8 text of tokens[0..n) (malloc'd), *len bytes. */
static char *text_of(const qkv_generator *g, const int *tokens, int n, size_t *len)
{
    *len = qkv_generator_decode(g, NULL, 0, tokens, n);
    char *text = malloc(*len + 1);
    if (text) qkv_generator_decode(g, text, *len + 1, tokens, n);
    return text;
}

/* generate(prompt, tokens, temperature, top_k, top_p, seed) -> (continuation, unknown) */
static PyObject *generator_generate(generator_object *self, PyObject *args, PyObject *kw)
{
    request r;
    if (request_of(self, args, kw, &r)) return NULL;
    int *out = malloc((size_t)(r.g.tokens ? r.g.tokens : 1) * sizeof *out), n_out = 0;
    if (!out) {
        free(r.prompt);
        return PyErr_NoMemory();
    }
    qkv_error err = {0};
    qkv_status s;
    const int threads = call_threads((PyObject *)self, self->threads);
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&self->lock);
    if (threads > 0) qkv_set_threads(threads);
    s = r.g.tokens ? qkv_lm_generate(self->model, r.prompt, (int)r.n_prompt, out, &n_out, &r.g,
                                     &err)
                   : QKV_OK;
    pthread_mutex_unlock(&self->lock);
    Py_END_ALLOW_THREADS
    free(r.prompt);
    size_t len = 0;
    char *text = s ? NULL : text_of(self->g, out, n_out, &len);
    free(out);
    if (s) return raise_qkv(state_of_type(TYPE_OF(self)), s, &err);
    if (!text) return PyErr_NoMemory();
    PyObject *result = Py_BuildValue("(Nn)", str_of(text, (Py_ssize_t)len), (Py_ssize_t)r.unknown);
    free(text);
    return result;
}

static PyObject *generator_config(generator_object *self, PyObject *unused)
{
    (void)unused;
    char *json = NULL;
    qkv_error err = {0};
    const qkv_status s = qkv_lm_config_to_json(qkv_lm_get_config(self->model), &json, &err);
    if (s) return raise_qkv(state_of_type(TYPE_OF(self)), s, &err);
    PyObject *out = str_of(json, -1);
    free(json);
    return out;
}

static PyObject *generator_info(generator_object *self, PyObject *unused)
{
    (void)unused;
    return Py_BuildValue("{s:i,s:i,s:s,s:s,s:n,s:i}", "vocab", qkv_generator_vocab(self->g)->size,
                         "context",
                         qkv_lm_get_config(self->model)->max_len, "precision",
                         qkv_precision_name(qkv_lm_get_precision(self->model)), "kv_cache",
                         qkv_kv_cache_name(qkv_lm_get_kv_cache(self->model)), "parameters",
                         (Py_ssize_t)qkv_lm_num_params(self->model), "threads", self->threads);
}

/* ---- the token stream ------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    generator_object *gen; /* owned reference: the model outlives the thread */
    request r;
    pthread_t thread;
    int started;
    pthread_mutex_t m;
    pthread_cond_t more;
    int *tokens;         /* drawn so far (r.g.tokens of room) */
    int drawn, taken;    /* tokens drawn by the thread, tokens handed to Python */
    int done, cancel;    /* the thread has ended; Python asks it to end */
    int threads;         /* call_threads of the call that made it (a new thread starts with
                          * OpenMP's default) */
    qkv_status status;
    qkv_error err;
    char pending[8];     /* bytes of a UTF-8 character not yet complete (byte vocabularies) */
    int n_pending;
} stream_object;

static int on_token(int id, void *ctx)
{
    stream_object *s = ctx;
    pthread_mutex_lock(&s->m);
    s->tokens[s->drawn++] = id;
    const int cancel = s->cancel;
    pthread_cond_signal(&s->more);
    pthread_mutex_unlock(&s->m);
    return cancel;
}

static void *stream_run(void *arg)
{
    stream_object *s = arg;
    generator_object *g = s->gen;
    qkv_error err = {0};
    pthread_mutex_lock(&g->lock);
    if (s->threads > 0) qkv_set_threads(s->threads);
    const qkv_status st = qkv_lm_generate(g->model, s->r.prompt, (int)s->r.n_prompt, s->tokens,
                                          NULL, &s->r.g, &err);
    pthread_mutex_unlock(&g->lock);
    pthread_mutex_lock(&s->m);
    s->status = st, s->err = err, s->done = 1;
    pthread_cond_signal(&s->more);
    pthread_mutex_unlock(&s->m);
    return NULL;
}

/* stream(prompt, tokens, temperature, top_k, top_p, seed): a TokenStream, started. */
static PyObject *generator_stream(generator_object *self, PyObject *args, PyObject *kw)
{
    module_state *st = state_of_type(TYPE_OF(self));
    request r;
    if (request_of(self, args, kw, &r)) return NULL;
    allocfunc alloc = (allocfunc)PyType_GetSlot(st->TokenStream, Py_tp_alloc);
    stream_object *s = (stream_object *)alloc(st->TokenStream, 0);
    if (!s) {
        free(r.prompt);
        return NULL;
    }
    s->r = r, s->gen = self, s->threads = call_threads((PyObject *)self, self->threads);
    Py_INCREF((PyObject *)self);
    pthread_mutex_init(&s->m, NULL);
    pthread_cond_init(&s->more, NULL);
    if (!(s->tokens = malloc((size_t)(r.g.tokens ? r.g.tokens : 1) * sizeof *s->tokens))) {
        Py_DECREF((PyObject *)s);
        return PyErr_NoMemory();
    }
    s->r.g.on_token = on_token, s->r.g.ctx = s;
    if (!r.g.tokens) {
        s->done = 1;
    } else if (pthread_create(&s->thread, NULL, stream_run, s)) {
        Py_DECREF((PyObject *)s);
        return PyErr_Format(PyExc_RuntimeError, "cannot start the generation thread");
    } else {
        s->started = 1;
    }
    return (PyObject *)s;
}

/* Bytes of buf[0..n) that end in a complete UTF-8 character: what can be decoded now. */
static int complete_utf8(const char *buf, int n)
{
    int i = n - 1, back = 0;
    while (i >= 0 && back < 4 && ((unsigned char)buf[i] & 0xC0) == 0x80) i--, back++;
    if (i < 0) return n; /* continuation bytes alone: invalid, let the decoder replace them */
    const unsigned char lead = (unsigned char)buf[i];
    const int need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    return n - i < need ? i : n;
}

/* The next token's text (str); a byte that leaves a character incomplete waits for the
 * rest, so the pieces joined are the text. */
static PyObject *stream_next(stream_object *s)
{
    for (;;) {
        int id = -1, done;
        Py_BEGIN_ALLOW_THREADS
        pthread_mutex_lock(&s->m);
        while (s->taken == s->drawn && !s->done) pthread_cond_wait(&s->more, &s->m);
        if (s->taken < s->drawn) id = s->tokens[s->taken++];
        done = s->done;
        pthread_mutex_unlock(&s->m);
        Py_END_ALLOW_THREADS
        if (id < 0) {
            if (done && s->status) {
                const qkv_status st = s->status;
                s->status = QKV_OK; /* raised once */
                return raise_qkv(state_of_type(TYPE_OF(s)), st, &s->err);
            }
            if (!s->n_pending) return NULL; /* StopIteration */
            PyObject *rest = str_of(s->pending, s->n_pending);
            s->n_pending = 0;
            return rest;
        }
        char piece[8];
        const size_t len = qkv_generator_decode(s->gen->g, piece, sizeof piece, &id, 1);
        if (s->n_pending + (int)len > (int)sizeof s->pending) { /* never: a character is 4 */
            PyObject *rest = str_of(s->pending, s->n_pending);
            s->n_pending = 0;
            return rest;
        }
        memcpy(s->pending + s->n_pending, piece, len);
        s->n_pending += (int)len;
        const int ready = complete_utf8(s->pending, s->n_pending);
        if (ready > 0) {
            PyObject *text = str_of(s->pending, ready);
            memmove(s->pending, s->pending + ready, (size_t)(s->n_pending - ready));
            s->n_pending -= ready;
            return text;
        }
    }
}

/* Stops the thread at its next token (a stream dropped before its end) and waits for it. */
static void stream_finish(stream_object *s)
{
    if (!s->started) return;
    pthread_mutex_lock(&s->m);
    s->cancel = 1;
    pthread_mutex_unlock(&s->m);
    Py_BEGIN_ALLOW_THREADS
    pthread_join(s->thread, NULL);
    Py_END_ALLOW_THREADS
    s->started = 0;
}

static PyObject *stream_close(stream_object *s, PyObject *unused)
{
    (void)unused;
    stream_finish(s);
    pthread_mutex_lock(&s->m);
    s->taken = s->drawn, s->done = 1, s->status = QKV_OK, s->n_pending = 0;
    pthread_mutex_unlock(&s->m);
    Py_RETURN_NONE;
}

static void stream_dealloc(stream_object *s)
{
    PyTypeObject *type = TYPE_OF(s);
    stream_finish(s);
    if (s->gen) { /* initialised: the mutex and condition exist */
        pthread_mutex_destroy(&s->m);
        pthread_cond_destroy(&s->more);
    }
    free(s->tokens);
    free(s->r.prompt);
    Py_XDECREF((PyObject *)s->gen);
    freefunc free_slot = (freefunc)PyType_GetSlot(type, Py_tp_free);
    free_slot(s);
    Py_DECREF(type);
}

static PyObject *stream_iter(PyObject *self)
{
    Py_INCREF(self);
    return self;
}

static PyObject *stream_unknown(stream_object *s, PyObject *unused)
{
    (void)unused;
    return PyLong_FromSsize_t((Py_ssize_t)s->r.unknown);
}

static PyMethodDef stream_methods[] = {
    {"close", (PyCFunction)stream_close, METH_NOARGS,
     "close(): stop generating (the model is free again once the current token is drawn)."},
    {"unknown", (PyCFunction)stream_unknown, METH_NOARGS,
     "unknown(): characters of the prompt the vocabulary lacks."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot stream_slots[] = {
    {Py_tp_dealloc, stream_dealloc},
    {Py_tp_iter, stream_iter},
    {Py_tp_iternext, stream_next},
    {Py_tp_methods, stream_methods},
    {Py_tp_doc, "An iterator over the text of each token as it is drawn (Generator."
                "generate_tokens)."},
    {0, NULL},
};

static PyType_Spec stream_spec = {
    "qkv._qkv.TokenStream", sizeof(stream_object), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    stream_slots,
};

static PyMethodDef generator_methods[] = {
    {"generate", (PyCFunction)(void (*)(void))generator_generate, METH_VARARGS | METH_KEYWORDS,
     "generate(prompt, tokens, temperature=1, top_k=0, top_p=1, seed=0) -> (text, unknown)"},
    {"stream", (PyCFunction)(void (*)(void))generator_stream, METH_VARARGS | METH_KEYWORDS,
     "stream(prompt, tokens, temperature=1, top_k=0, top_p=1, seed=0) -> TokenStream"},
    {"config", (PyCFunction)generator_config, METH_NOARGS, "config(): config.json's text."},
    {"info", (PyCFunction)generator_info, METH_NOARGS, "info(): a dict of what it is."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot generator_slots[] = {
    {Py_tp_new, generator_new},
    {Py_tp_dealloc, generator_dealloc},
    {Py_tp_methods, generator_methods},
    {Py_tp_doc, "Generator(path, precision='fp32', kv_cache='auto', threads=0): a language "
                "model directory (use qkv.Generator)."},
    {0, NULL},
};

static PyType_Spec generator_spec = {
    "qkv._qkv.Generator", sizeof(generator_object), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE, generator_slots,
};

int generator_add(PyObject *module, module_state *st)
{
    st->Generator = (PyTypeObject *)PyType_FromModuleAndSpec(module, &generator_spec, NULL);
    if (!st->Generator || PyModule_AddType(module, st->Generator)) return -1;
    st->TokenStream = (PyTypeObject *)PyType_FromModuleAndSpec(module, &stream_spec, NULL);
    return st->TokenStream ? PyModule_AddType(module, st->TokenStream) : -1;
}
