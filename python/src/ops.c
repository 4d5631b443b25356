/* SPDX-License-Identifier: MIT */
/* The building blocks' forward and backward over buffers (qkv/ops.py passes numpy arrays):
 * every array is checked here to be C-contiguous, of the right type (float32, or int32 for
 * lengths) and of exactly the size the dimensions imply, so a wrong one raises instead of
 * reading or writing out of bounds. Outputs are written; gradients ACCUMULATE as in the
 * library (qkv/ops.py passes zeros). Arguments follow the library's order: outputs, saved
 * activations, inputs, weights, dimensions. */
#include <stdarg.h>
#include <string.h>

#include "module.h"

/* The buffers one call holds, released together. */
typedef struct {
    Py_buffer view[24];
    int n;
} buffers;

static void release(buffers *bs)
{
    while (bs->n > 0) PyBuffer_Release(&bs->view[--bs->n]);
}

/* n1 * n2 * ... (count factors), or 0 with ValueError when one is below 1 or it overflows. */
static size_t product(const char *what, int count, ...)
{
    va_list ap;
    va_start(ap, count);
    size_t p = 1;
    for (int i = 0; i < count && p; i++) {
        const long long d = va_arg(ap, long long);
        if (d < 1 || d > INT_MAX || p > SIZE_MAX / 4 / (size_t)d) p = 0;
        else p *= (size_t)d;
    }
    va_end(ap);
    if (!p) PyErr_Format(PyExc_ValueError, "%s: every dimension must be in [1, %d] and the "
                         "sizes must fit in memory", what, INT_MAX);
    return p;
}

/* The data of o, a C-contiguous buffer of count float32 (kind 'f') or int32 ('i') values,
 * writable when asked; o None: NULL and no error when optional. NULL with an exception set
 * otherwise (check PyErr_Occurred after an optional one). */
static void *take(buffers *bs, PyObject *o, char kind, size_t count, int writable, int optional,
                  const char *name)
{
    if (o == Py_None && optional) return NULL;
    if (bs->n == (int)(sizeof bs->view / sizeof *bs->view)) {
        PyErr_SetString(PyExc_SystemError, "too many buffers");
        return NULL;
    }
    Py_buffer *b = &bs->view[bs->n];
    const int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(o, b, flags)) {
        PyErr_Clear();
        char expected[64];
        snprintf(expected, sizeof expected, "a C-contiguous%s %s array",
                 writable ? ", writable" : "", kind == 'f' ? "float32" : "int32");
        return raise_type(name, expected, o);
    }
    bs->n++;
    const char *f = b->format ? b->format : "B";
    if (*f == '<' || *f == '=' || *f == '@') f++;
    const int int32 = (!strcmp(f, "i") || !strcmp(f, "l")) && b->itemsize == 4;
    const int ok = kind == 'f' ? !strcmp(f, "f") && b->itemsize == 4 : int32;
    if (!ok) {
        PyErr_Format(PyExc_TypeError, "%s must be %s, got buffer format '%s'", name,
                     kind == 'f' ? "float32" : "int32", b->format ? b->format : "B");
        return NULL;
    }
    if ((size_t)b->len != count * 4) {
        PyErr_Format(PyExc_ValueError, "%s has %zd values; its shape needs %zu", name,
                     b->len / 4, count);
        return NULL;
    }
    return b->buf;
}

#define F(o, count, name) take(&bs, (o), 'f', (count), 0, 0, (name))
#define F_OUT(o, count, name) take(&bs, (o), 'f', (count), 1, 0, (name))
#define F_OPT_OUT(o, count, name) take(&bs, (o), 'f', (count), 1, 1, (name))
#define I_OPT(o, count, name) take(&bs, (o), 'i', (count), 0, 1, (name))

/* Fails the call (goto fail) when a buffer taken into p raised. */
#define NEED(p) do { if (!(p) && PyErr_Occurred()) goto fail; } while (0)

/* A mask's valid lengths: None, B values (per sequence) or B * n (per query). */
static int mask_of(buffers *bs, PyObject *lens, int B, int n, int causal, qkv_mask *mask)
{
    memset(mask, 0, sizeof *mask);
    mask->causal = causal != 0;
    if (lens == Py_None) return 0;
    Py_buffer probe;
    if (PyObject_GetBuffer(lens, &probe, PyBUF_ND)) {
        PyErr_Clear();
        PyErr_SetString(PyExc_TypeError, "valid_lens must be an int32 array or None");
        return -1;
    }
    const Py_ssize_t count = probe.len / (probe.itemsize ? probe.itemsize : 1);
    PyBuffer_Release(&probe);
    mask->per_query = count == (Py_ssize_t)B * n && n != 1;
    mask->valid_lens = take(bs, lens, 'i', mask->per_query ? (size_t)B * n : (size_t)B, 0, 0,
                            "valid_lens");
    return mask->valid_lens ? 0 : -1;
}

static qkv_dropout dropout_of(float p, unsigned long long seed)
{
    return (qkv_dropout){p, (uint64_t)seed, 0};
}

static int check_rate(float p)
{
    if (p >= 0.0f && p < 1.0f) return 0;
    PyErr_Format(PyExc_ValueError, "dropout must be in [0, 1), got %g", (double)p);
    return -1;
}

/* ---- masked softmax ------------------------------------------------------------------- */

static PyObject *masked_softmax_forward(PyObject *m, PyObject *args)
{
    (void)m;
    PyObject *P_o, *S_o, *lens;
    int B, H, n, k, causal;
    if (!PyArg_ParseTuple(args, "OOiiiiOp", &P_o, &S_o, &B, &H, &n, &k, &lens, &causal))
        return NULL;
    buffers bs = {0};
    qkv_mask mask;
    const size_t size = product("masked_softmax", 4, (long long)B, (long long)H, (long long)n,
                                (long long)k);
    if (!size) return NULL;
    float *P = F_OUT(P_o, size, "P"), *S = P ? F(S_o, size, "S") : NULL;
    if (!S || mask_of(&bs, lens, B, n, causal, &mask)) goto fail;
    Py_BEGIN_ALLOW_THREADS
    qkv_masked_softmax_forward(P, S, B, H, n, k, &mask);
    Py_END_ALLOW_THREADS
    release(&bs);
    Py_RETURN_NONE;
fail:
    release(&bs);
    return NULL;
}

static PyObject *masked_softmax_backward(PyObject *m, PyObject *args)
{
    (void)m;
    PyObject *dS_o, *dP_o, *P_o;
    int rows, k;
    if (!PyArg_ParseTuple(args, "OOOii", &dS_o, &dP_o, &P_o, &rows, &k)) return NULL;
    buffers bs = {0};
    const size_t size = product("masked_softmax", 2, (long long)rows, (long long)k);
    if (!size) return NULL;
    float *dS = F_OUT(dS_o, size, "dS"), *dP = dS ? F(dP_o, size, "dP") : NULL,
          *P = dP ? F(P_o, size, "P") : NULL;
    if (!P) goto fail;
    Py_BEGIN_ALLOW_THREADS
    qkv_masked_softmax_backward(dS, dP, P, rows, k);
    Py_END_ALLOW_THREADS
    release(&bs);
    Py_RETURN_NONE;
fail:
    release(&bs);
    return NULL;
}

/* ---- scaled dot-product attention ------------------------------------------------------ */

static int shape_of(PyObject *t, qkv_attention_shape *s)
{
    return PyArg_ParseTuple(t, "iiiiii", &s->B, &s->H, &s->n, &s->m, &s->d, &s->v) ? 0 : -1;
}

/* The sizes of Q, K, V, O and P for shape s; 0 (ValueError) when a dimension is bad. */
static int attention_sizes(const qkv_attention_shape *s, size_t z[5])
{
    z[0] = product("attention", 4, (long long)s->B, (long long)s->n, (long long)s->H, (long long)s->d);
    z[1] = z[0] ? product("attention", 4, (long long)s->B, (long long)s->m, (long long)s->H, (long long)s->d) : 0;
    z[2] = z[1] ? product("attention", 4, (long long)s->B, (long long)s->m, (long long)s->H, (long long)s->v) : 0;
    z[3] = z[2] ? product("attention", 4, (long long)s->B, (long long)s->n, (long long)s->H, (long long)s->v) : 0;
    z[4] = z[3] ? product("attention", 4, (long long)s->B, (long long)s->H, (long long)s->n, (long long)s->m) : 0;
    return z[4] ? 0 : -1;
}

static PyObject *attention_forward(PyObject *m, PyObject *args)
{
    (void)m;
    PyObject *O_o, *P_o, *Q_o, *K_o, *V_o, *shape, *lens;
    int causal;
    float p;
    unsigned long long seed;
    if (!PyArg_ParseTuple(args, "OOOOOO!OpfK", &O_o, &P_o, &Q_o, &K_o, &V_o, &PyTuple_Type,
                          &shape, &lens, &causal, &p, &seed))
        return NULL;
    qkv_attention_shape s;
    size_t z[5];
    if (shape_of(shape, &s) || attention_sizes(&s, z) || check_rate(p)) return NULL;
    buffers bs = {0};
    qkv_mask mask;
    float *scratch = NULL;
    float *O = F_OUT(O_o, z[3], "O"), *P = O ? F_OUT(P_o, z[4], "P") : NULL;
    qkv_attention_inputs x = {P ? F(Q_o, z[0], "Q") : NULL, NULL, NULL};
    x.K = x.Q ? F(K_o, z[1], "K") : NULL;
    x.V = x.K ? F(V_o, z[2], "V") : NULL;
    if (!x.V || mask_of(&bs, lens, s.B, s.n, causal, &mask)) goto fail;
    if (p > 0.0f && !(scratch = malloc(qkv_attention_scratch_floats(&s) * sizeof *scratch))) {
        PyErr_NoMemory();
        goto fail;
    }
    Py_BEGIN_ALLOW_THREADS
    qkv_attention_forward(O, P, &x, &s, &mask, dropout_of(p, seed), scratch);
    Py_END_ALLOW_THREADS
    free(scratch);
    release(&bs);
    Py_RETURN_NONE;
fail:
    release(&bs);
    return NULL;
}

static PyObject *attention_backward(PyObject *m, PyObject *args)
{
    (void)m;
    PyObject *dQ_o, *dK_o, *dV_o, *dO_o, *P_o, *Q_o, *K_o, *V_o, *shape;
    float p;
    unsigned long long seed;
    if (!PyArg_ParseTuple(args, "OOOOOOOOO!fK", &dQ_o, &dK_o, &dV_o, &dO_o, &P_o, &Q_o, &K_o,
                          &V_o, &PyTuple_Type, &shape, &p, &seed))
        return NULL;
    qkv_attention_shape s;
    size_t z[5];
    if (shape_of(shape, &s) || attention_sizes(&s, z) || check_rate(p)) return NULL;
    buffers bs = {0};
    float *scratch = NULL;
    qkv_attention_grads dx = {F_OUT(dQ_o, z[0], "dQ"), NULL, NULL};
    if (dx.dQ) dx.dK = F_OUT(dK_o, z[1], "dK");
    if (dx.dK) dx.dV = F_OUT(dV_o, z[2], "dV");
    const float *dO = dx.dV ? F(dO_o, z[3], "dO") : NULL, *P = dO ? F(P_o, z[4], "P") : NULL;
    qkv_attention_inputs x = {P ? F(Q_o, z[0], "Q") : NULL, NULL, NULL};
    x.K = x.Q ? F(K_o, z[1], "K") : NULL;
    x.V = x.K ? F(V_o, z[2], "V") : NULL;
    if (!x.V) goto fail;
    if (!(scratch = malloc(qkv_attention_scratch_floats(&s) * sizeof *scratch))) {
        PyErr_NoMemory();
        goto fail;
    }
    Py_BEGIN_ALLOW_THREADS
    qkv_attention_backward(&dx, dO, P, &x, &s, dropout_of(p, seed), scratch);
    Py_END_ALLOW_THREADS
    free(scratch);
    release(&bs);
    Py_RETURN_NONE;
fail:
    release(&bs);
    return NULL;
}

/* ---- additive attention ---------------------------------------------------------------- */

static int additive_shape_of(PyObject *t, qkv_additive_shape *s, size_t z[10])
{
    if (!PyArg_ParseTuple(t, "iiiiiii", &s->B, &s->n, &s->m, &s->dq, &s->dk, &s->v, &s->h))
        return -1;
    const char *w = "additive_attention";
    long long B = s->B, n = s->n, m = s->m, h = s->h;
    z[0] = product(w, 3, B, n, (long long)s->dq);       /* Q */
    z[1] = z[0] ? product(w, 3, B, m, (long long)s->dk) : 0; /* K */
    z[2] = z[1] ? product(w, 3, B, m, (long long)s->v) : 0;  /* V */
    z[3] = z[2] ? product(w, 3, B, n, (long long)s->v) : 0;  /* O */
    z[4] = z[3] ? product(w, 2, h, (long long)s->dq) : 0;    /* W_q */
    z[5] = z[4] ? product(w, 2, h, (long long)s->dk) : 0;    /* W_k */
    z[6] = z[5] ? product(w, 3, B, n, h) : 0;                 /* cache q */
    z[7] = z[6] ? product(w, 3, B, m, h) : 0;                 /* cache k */
    z[8] = z[7] ? product(w, 4, B, n, m, h) : 0;              /* cache F */
    z[9] = z[8] ? product(w, 3, B, n, m) : 0;                 /* cache P */
    return z[9] ? 0 : -1;
}

static PyObject *additive_attention_forward(PyObject *mod, PyObject *args)
{
    (void)mod;
    PyObject *O_o, *cq, *ck, *cF, *cP, *Q_o, *K_o, *V_o, *Wq, *Wk, *wv, *shape, *lens;
    float p;
    unsigned long long seed;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOOO!OfK", &O_o, &cq, &ck, &cF, &cP, &Q_o, &K_o, &V_o,
                          &Wq, &Wk, &wv, &PyTuple_Type, &shape, &lens, &p, &seed))
        return NULL;
    qkv_additive_shape s;
    size_t z[10];
    if (additive_shape_of(shape, &s, z) || check_rate(p)) return NULL;
    buffers bs = {0};
    qkv_mask mask;
    float *scratch = NULL, *O = F_OUT(O_o, z[3], "O");
    qkv_additive_cache c = {O ? F_OUT(cq, z[6], "cache q") : NULL, NULL, NULL, NULL};
    if (c.q) c.k = F_OUT(ck, z[7], "cache k");
    if (c.k) c.F = F_OUT(cF, z[8], "cache F");
    if (c.F) c.P = F_OUT(cP, z[9], "P");
    qkv_attention_inputs x = {c.P ? F(Q_o, z[0], "Q") : NULL, NULL, NULL};
    x.K = x.Q ? F(K_o, z[1], "K") : NULL;
    x.V = x.K ? F(V_o, z[2], "V") : NULL;
    qkv_additive_weights w = {x.V ? F(Wq, z[4], "W_q") : NULL, NULL, NULL};
    w.W_k = w.W_q ? F(Wk, z[5], "W_k") : NULL;
    w.w_v = w.W_k ? F(wv, (size_t)s.h, "w_v") : NULL;
    if (!w.w_v || mask_of(&bs, lens, s.B, s.n, 0, &mask)) goto fail;
    if (p > 0.0f &&
        !(scratch = malloc(qkv_additive_attention_scratch_floats(&s) * sizeof *scratch))) {
        PyErr_NoMemory();
        goto fail;
    }
    Py_BEGIN_ALLOW_THREADS
    qkv_additive_attention_forward(O, &c, &x, &w, &s, &mask, dropout_of(p, seed), scratch);
    Py_END_ALLOW_THREADS
    free(scratch);
    release(&bs);
    Py_RETURN_NONE;
fail:
    release(&bs);
    return NULL;
}

static PyObject *additive_attention_backward(PyObject *mod, PyObject *args)
{
    (void)mod;
    PyObject *dQ_o, *dK_o, *dV_o, *dWq, *dWk, *dwv, *dO_o, *cq, *ck, *cF, *cP, *Q_o, *K_o, *V_o,
        *Wq, *Wk, *wv, *shape;
    float p;
    unsigned long long seed;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOOOOOOOOO!fK", &dQ_o, &dK_o, &dV_o, &dWq, &dWk, &dwv,
                          &dO_o, &cq, &ck, &cF, &cP, &Q_o, &K_o, &V_o, &Wq, &Wk, &wv,
                          &PyTuple_Type, &shape, &p, &seed))
        return NULL;
    qkv_additive_shape s;
    size_t z[10];
    if (additive_shape_of(shape, &s, z) || check_rate(p)) return NULL;
    buffers bs = {0};
    float *scratch = NULL;
    qkv_attention_grads dx = {F_OUT(dQ_o, z[0], "dQ"), NULL, NULL};
    if (dx.dQ) dx.dK = F_OUT(dK_o, z[1], "dK");
    if (dx.dK) dx.dV = F_OUT(dV_o, z[2], "dV");
    qkv_additive_weights dw = {dx.dV ? F_OUT(dWq, z[4], "dW_q") : NULL, NULL, NULL};
    if (dw.W_q) dw.W_k = F_OUT(dWk, z[5], "dW_k");
    if (dw.W_k) dw.w_v = F_OUT(dwv, (size_t)s.h, "dw_v");
    const float *dO = dw.w_v ? F(dO_o, z[3], "dO") : NULL;
    qkv_additive_cache c = {dO ? F(cq, z[6], "cache q") : NULL, NULL, NULL, NULL};
    if (c.q) c.k = F(ck, z[7], "cache k");
    if (c.k) c.F = F(cF, z[8], "cache F");
    if (c.F) c.P = F(cP, z[9], "P");
    qkv_attention_inputs x = {c.P ? F(Q_o, z[0], "Q") : NULL, NULL, NULL};
    x.K = x.Q ? F(K_o, z[1], "K") : NULL;
    x.V = x.K ? F(V_o, z[2], "V") : NULL;
    qkv_additive_weights w = {x.V ? F(Wq, z[4], "W_q") : NULL, NULL, NULL};
    w.W_k = w.W_q ? F(Wk, z[5], "W_k") : NULL;
    w.w_v = w.W_k ? F(wv, (size_t)s.h, "w_v") : NULL;
    if (!w.w_v) goto fail;
    if (!(scratch = malloc(qkv_additive_attention_scratch_floats(&s) * sizeof *scratch))) {
        PyErr_NoMemory();
        goto fail;
    }
    Py_BEGIN_ALLOW_THREADS
    qkv_additive_attention_backward(&dx, &dw, dO, &c, &x, &w, &s, dropout_of(p, seed), scratch);
    Py_END_ALLOW_THREADS
    free(scratch);
    release(&bs);
    Py_RETURN_NONE;
fail:
    release(&bs);
    return NULL;
}

/* ---- multi-head attention -------------------------------------------------------------- */

/* cfg from (d_q, d_kv, heads, head_dim, bias) and the sizes: Q, K, V, y, weights, cache. */
static int mha_of(PyObject *cfg_t, int B, int n, int m, qkv_mha_config *cfg, size_t z[6])
{
    if (!PyArg_ParseTuple(cfg_t, "iiiip", &cfg->d_q, &cfg->d_kv, &cfg->heads, &cfg->head_dim,
                          &cfg->bias))
        return -1;
    const char *w = "multihead_attention";
    z[0] = product(w, 3, (long long)B, (long long)n, (long long)cfg->d_q);
    z[1] = z[0] ? product(w, 3, (long long)B, (long long)m, (long long)cfg->d_kv) : 0;
    z[2] = z[1];
    z[3] = z[0];
    /* the weights and cache sizes, once every factor is known to be sane */
    if (!z[1] || !product(w, 2, (long long)cfg->heads, (long long)cfg->head_dim) ||
        !product(w, 4, (long long)B, (long long)cfg->heads, (long long)n, (long long)m))
        return -1;
    z[4] = qkv_mha_weights_floats(cfg);
    z[5] = qkv_mha_cache_floats(cfg, B, n, m);
    return 0;
}

static PyObject *mha_forward(PyObject *mod, PyObject *args)
{
    (void)mod;
    PyObject *y_o, *cache_o, *Q_o, *K_o, *V_o, *W_o, *cfg_t, *lens;
    int B, n, m, causal;
    float p;
    unsigned long long seed;
    if (!PyArg_ParseTuple(args, "OOOOOOO!iiiOpfK", &y_o, &cache_o, &Q_o, &K_o, &V_o, &W_o,
                          &PyTuple_Type, &cfg_t, &B, &n, &m, &lens, &causal, &p, &seed))
        return NULL;
    qkv_mha_config cfg;
    size_t z[6];
    if (mha_of(cfg_t, B, n, m, &cfg, z) || check_rate(p)) return NULL;
    buffers bs = {0};
    qkv_mask mask;
    float *scratch = NULL, *y = F_OUT(y_o, z[3], "y"), *cache = y ? F_OUT(cache_o, z[5], "cache") : NULL;
    qkv_attention_inputs x = {cache ? F(Q_o, z[0], "queries") : NULL, NULL, NULL};
    x.K = x.Q ? F(K_o, z[1], "keys") : NULL;
    x.V = x.K ? F(V_o, z[2], "values") : NULL;
    float *weights = x.V ? F(W_o, z[4], "weights") : NULL;
    if (!weights || mask_of(&bs, lens, B, n, causal, &mask)) goto fail;
    const size_t ns = qkv_mha_scratch_floats(&cfg, B, n, m);
    if (p > 0.0f && !(scratch = malloc(ns * sizeof *scratch))) {
        PyErr_NoMemory();
        goto fail;
    }
    qkv_mha_weights w = qkv_mha_weights_view(weights, &cfg);
    qkv_mha_cache c = qkv_mha_cache_view(cache, &cfg, B, n, m);
    qkv_attention_shape s = qkv_mha_shape(&cfg, B, n, m);
    Py_BEGIN_ALLOW_THREADS
    qkv_mha_forward(y, &c, &x, &w, &cfg, &s, &mask, dropout_of(p, seed), scratch);
    Py_END_ALLOW_THREADS
    free(scratch);
    release(&bs);
    Py_RETURN_NONE;
fail:
    release(&bs);
    return NULL;
}

static PyObject *mha_backward(PyObject *mod, PyObject *args)
{
    (void)mod;
    PyObject *dQ_o, *dK_o, *dV_o, *dW_o, *dy_o, *cache_o, *Q_o, *K_o, *V_o, *W_o, *cfg_t;
    int B, n, m;
    float p;
    unsigned long long seed;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOO!iiifK", &dQ_o, &dK_o, &dV_o, &dW_o, &dy_o, &cache_o,
                          &Q_o, &K_o, &V_o, &W_o, &PyTuple_Type, &cfg_t, &B, &n, &m, &p, &seed))
        return NULL;
    qkv_mha_config cfg;
    size_t z[6];
    if (mha_of(cfg_t, B, n, m, &cfg, z) || check_rate(p)) return NULL;
    buffers bs = {0};
    float *scratch = NULL;
    qkv_attention_grads dx = {F_OUT(dQ_o, z[0], "dqueries"), NULL, NULL};
    if (dx.dQ) dx.dK = F_OUT(dK_o, z[1], "dkeys");
    if (dx.dK) dx.dV = F_OUT(dV_o, z[2], "dvalues");
    float *dweights = dx.dV ? F_OUT(dW_o, z[4], "dweights") : NULL;
    const float *dy = dweights ? F(dy_o, z[3], "dy") : NULL;
    float *cache = dy ? (float *)F(cache_o, z[5], "cache") : NULL;
    qkv_attention_inputs x = {cache ? F(Q_o, z[0], "queries") : NULL, NULL, NULL};
    x.K = x.Q ? F(K_o, z[1], "keys") : NULL;
    x.V = x.K ? F(V_o, z[2], "values") : NULL;
    float *weights = x.V ? (float *)F(W_o, z[4], "weights") : NULL;
    if (!weights) goto fail;
    if (!(scratch = malloc(qkv_mha_scratch_floats(&cfg, B, n, m) * sizeof *scratch))) {
        PyErr_NoMemory();
        goto fail;
    }
    qkv_mha_weights w = qkv_mha_weights_view(weights, &cfg);
    qkv_mha_weights dw = qkv_mha_weights_view(dweights, &cfg);
    qkv_mha_cache c = qkv_mha_cache_view(cache, &cfg, B, n, m);
    qkv_attention_shape s = qkv_mha_shape(&cfg, B, n, m);
    Py_BEGIN_ALLOW_THREADS
    qkv_mha_backward(&dx, &dw, dy, &c, &x, &w, &cfg, &s, dropout_of(p, seed), scratch);
    Py_END_ALLOW_THREADS
    free(scratch);
    release(&bs);
    Py_RETURN_NONE;
fail:
    release(&bs);
    return NULL;
}

/* ---- linear attention ------------------------------------------------------------------ */

static PyObject *linear_attention(PyObject *mod, PyObject *args, int backward)
{
    (void)mod;
    PyObject *O_o, *dK_o = Py_None, *dV_o = Py_None, *dO_o = Py_None, *Q_o, *K_o, *V_o, *shape,
        *lens;
    int causal;
    const int ok = backward
        ? PyArg_ParseTuple(args, "OOOOOOOO!Op", &O_o, &dK_o, &dV_o, &dO_o, &Q_o, &K_o, &V_o,
                           &PyTuple_Type, &shape, &lens, &causal)
        : PyArg_ParseTuple(args, "OOOOO!Op", &O_o, &Q_o, &K_o, &V_o, &PyTuple_Type, &shape, &lens,
                           &causal);
    if (!ok) return NULL;
    qkv_attention_shape s;
    size_t z[5];
    if (shape_of(shape, &s) || attention_sizes(&s, z)) return NULL;
    buffers bs = {0};
    float *scratch = NULL;
    /* forward: O; backward: dQ, dK, dV and dO */
    float *out = F_OUT(O_o, backward ? z[0] : z[3], backward ? "dQ" : "O");
    float *dK = out && backward ? F_OUT(dK_o, z[1], "dK") : NULL;
    float *dV = dK ? F_OUT(dV_o, z[2], "dV") : NULL;
    const float *dO = dV ? F(dO_o, z[3], "dO") : NULL;
    qkv_attention_inputs x = {(backward ? dO != NULL : out != NULL) ? F(Q_o, z[0], "Q") : NULL,
                              NULL, NULL};
    x.K = x.Q ? F(K_o, z[1], "K") : NULL;
    x.V = x.K ? F(V_o, z[2], "V") : NULL;
    const int *valid = x.V ? I_OPT(lens, (size_t)s.B, "valid_lens") : NULL;
    if (!x.V || (!valid && PyErr_Occurred())) goto fail;
    if (!(scratch = malloc(qkv_linear_attention_scratch_floats(&s, causal) * sizeof *scratch))) {
        PyErr_NoMemory();
        goto fail;
    }
    Py_BEGIN_ALLOW_THREADS
    if (backward) {
        qkv_attention_grads dx = {out, dK, dV};
        qkv_linear_attention_backward(&dx, dO, &x, &s, valid, causal, scratch);
    } else {
        qkv_linear_attention_forward(out, &x, &s, valid, causal, scratch);
    }
    Py_END_ALLOW_THREADS
    free(scratch);
    release(&bs);
    Py_RETURN_NONE;
fail:
    release(&bs);
    return NULL;
}

static PyObject *linear_attention_forward(PyObject *mod, PyObject *args)
{
    return linear_attention(mod, args, 0);
}

static PyObject *linear_attention_backward(PyObject *mod, PyObject *args)
{
    return linear_attention(mod, args, 1);
}

/* ---- positional encoding --------------------------------------------------------------- */

static PyObject *sinusoidal_table(PyObject *mod, PyObject *args)
{
    (void)mod;
    PyObject *P_o;
    int T, C, halves;
    if (!PyArg_ParseTuple(args, "Oiip", &P_o, &T, &C, &halves)) return NULL;
    const size_t size = product("positional_encoding", 2, (long long)T, (long long)C);
    if (!size) return NULL;
    buffers bs = {0};
    float *P = F_OUT(P_o, size, "P");
    if (!P) goto fail;
    (halves ? qkv_sinusoidal_table_halves : qkv_sinusoidal_table)(P, T, C);
    release(&bs);
    Py_RETURN_NONE;
fail:
    release(&bs);
    return NULL;
}

static PyObject *positional_forward(PyObject *mod, PyObject *args)
{
    (void)mod;
    PyObject *y_o, *x_o, *P_o;
    int B, T, C, Tp, pos0;
    float scale;
    if (!PyArg_ParseTuple(args, "OOOiiiiif", &y_o, &x_o, &P_o, &B, &T, &C, &Tp, &pos0, &scale))
        return NULL;
    const size_t size = product("positional_encoding", 3, (long long)B, (long long)T, (long long)C);
    const size_t psize = size ? product("positional_encoding", 2, (long long)Tp, (long long)C) : 0;
    if (!psize) return NULL;
    if (pos0 < 0 || (long long)pos0 + T > Tp)
        return PyErr_Format(PyExc_ValueError, "positions %d..%d are outside the table's %d rows",
                            pos0, pos0 + T - 1, Tp);
    buffers bs = {0};
    float *y = F_OUT(y_o, size, "y");
    const float *x = y ? F(x_o, size, "x") : NULL, *P = x ? F(P_o, psize, "P") : NULL;
    if (!P) goto fail;
    Py_BEGIN_ALLOW_THREADS
    qkv_positional_forward(y, x, P, B, T, C, pos0, scale);
    Py_END_ALLOW_THREADS
    release(&bs);
    Py_RETURN_NONE;
fail:
    release(&bs);
    return NULL;
}

static PyObject *positional_backward(PyObject *mod, PyObject *args)
{
    (void)mod;
    PyObject *dx_o, *dP_o, *dy_o;
    int B, T, C, Tp, pos0;
    float scale;
    if (!PyArg_ParseTuple(args, "OOOiiiiif", &dx_o, &dP_o, &dy_o, &B, &T, &C, &Tp, &pos0, &scale))
        return NULL;
    const size_t size = product("positional_encoding", 3, (long long)B, (long long)T, (long long)C);
    const size_t psize = size ? product("positional_encoding", 2, (long long)Tp, (long long)C) : 0;
    if (!psize) return NULL;
    if (pos0 < 0 || (long long)pos0 + T > Tp)
        return PyErr_Format(PyExc_ValueError, "positions %d..%d are outside the table's %d rows",
                            pos0, pos0 + T - 1, Tp);
    buffers bs = {0};
    float *dx = F_OUT(dx_o, size, "dx");
    float *dP = dx ? F_OPT_OUT(dP_o, psize, "dP") : NULL;
    const float *dy = dx && !PyErr_Occurred() ? F(dy_o, size, "dy") : NULL;
    if (!dy) goto fail;
    Py_BEGIN_ALLOW_THREADS
    qkv_positional_backward(dx, dP, dy, B, T, C, pos0, scale);
    Py_END_ALLOW_THREADS
    release(&bs);
    Py_RETURN_NONE;
fail:
    release(&bs);
    return NULL;
}

/* ---- the FFN --------------------------------------------------------------------------- */

static int activation_of(int act)
{
    if (act >= QKV_ACT_RELU && act <= QKV_ACT_SILU) return 0;
    PyErr_Format(PyExc_ValueError, "activation %d: expected 0 (relu), 1 (gelu) or 2 (silu)", act);
    return -1;
}

static PyObject *ffn_forward(PyObject *mod, PyObject *args)
{
    (void)mod;
    PyObject *y_o, *hpre_o, *h_o, *x_o, *W1_o, *b1_o, *W2_o, *b2_o;
    int N, C, Fh, act;
    if (!PyArg_ParseTuple(args, "OOOOOOOOiiii", &y_o, &hpre_o, &h_o, &x_o, &W1_o, &b1_o, &W2_o,
                          &b2_o, &N, &C, &Fh, &act))
        return NULL;
    const size_t nc = product("ffn", 2, (long long)N, (long long)C);
    const size_t nf = nc ? product("ffn", 2, (long long)N, (long long)Fh) : 0;
    const size_t fc = nf ? product("ffn", 2, (long long)Fh, (long long)C) : 0;
    if (!fc || activation_of(act)) return NULL;
    buffers bs = {0};
    float *y = F_OUT(y_o, nc, "y");
    qkv_ffn_cache c = {y ? F_OUT(hpre_o, nf, "h_pre") : NULL, NULL};
    if (c.h_pre) c.h = F_OUT(h_o, nf, "h");
    const float *x = c.h ? F(x_o, nc, "x") : NULL;
    qkv_ffn_weights w = {x ? F(W1_o, fc, "W1") : NULL, NULL, NULL, NULL};
    if (w.W1) w.b1 = take(&bs, b1_o, 'f', (size_t)Fh, 0, 1, "b1");
    if (w.W1 && !PyErr_Occurred()) w.W2 = F(W2_o, fc, "W2");
    if (w.W2) w.b2 = take(&bs, b2_o, 'f', (size_t)C, 0, 1, "b2");
    if (!w.W2 || PyErr_Occurred()) goto fail;
    const qkv_ffn_config cfg = {C, Fh, (qkv_activation)act};
    Py_BEGIN_ALLOW_THREADS
    qkv_ffn_forward(y, &c, x, &w, &cfg, N);
    Py_END_ALLOW_THREADS
    release(&bs);
    Py_RETURN_NONE;
fail:
    release(&bs);
    return NULL;
}

static PyObject *ffn_backward(PyObject *mod, PyObject *args)
{
    (void)mod;
    PyObject *dx_o, *dW1_o, *db1_o, *dW2_o, *db2_o, *dy_o, *hpre_o, *h_o, *x_o, *W1_o, *b1_o,
        *W2_o, *b2_o;
    int N, C, Fh, act;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOOOOiiii", &dx_o, &dW1_o, &db1_o, &dW2_o, &db2_o,
                          &dy_o, &hpre_o, &h_o, &x_o, &W1_o, &b1_o, &W2_o, &b2_o, &N, &C, &Fh,
                          &act))
        return NULL;
    const size_t nc = product("ffn", 2, (long long)N, (long long)C);
    const size_t nf = nc ? product("ffn", 2, (long long)N, (long long)Fh) : 0;
    const size_t fc = nf ? product("ffn", 2, (long long)Fh, (long long)C) : 0;
    if (!fc || activation_of(act)) return NULL;
    buffers bs = {0};
    float *scratch = NULL, *dx = F_OUT(dx_o, nc, "dx");
    qkv_ffn_weights dw = {dx ? F_OUT(dW1_o, fc, "dW1") : NULL, NULL, NULL, NULL};
    if (dw.W1) dw.b1 = F_OPT_OUT(db1_o, (size_t)Fh, "db1");
    if (dw.W1 && !PyErr_Occurred()) dw.W2 = F_OUT(dW2_o, fc, "dW2");
    if (dw.W2) dw.b2 = F_OPT_OUT(db2_o, (size_t)C, "db2");
    const float *dy = dw.W2 && !PyErr_Occurred() ? F(dy_o, nc, "dy") : NULL;
    qkv_ffn_cache c = {dy ? (float *)F(hpre_o, nf, "h_pre") : NULL, NULL};
    if (c.h_pre) c.h = (float *)F(h_o, nf, "h");
    const float *x = c.h ? F(x_o, nc, "x") : NULL;
    qkv_ffn_weights w = {x ? (float *)F(W1_o, fc, "W1") : NULL, NULL, NULL, NULL};
    if (w.W1) w.b1 = take(&bs, b1_o, 'f', (size_t)Fh, 0, 1, "b1");
    if (w.W1 && !PyErr_Occurred()) w.W2 = (float *)F(W2_o, fc, "W2");
    if (w.W2) w.b2 = take(&bs, b2_o, 'f', (size_t)C, 0, 1, "b2");
    if (!w.W2 || PyErr_Occurred()) goto fail;
    if (!(scratch = malloc(nf * sizeof *scratch))) {
        PyErr_NoMemory();
        goto fail;
    }
    const qkv_ffn_config cfg = {C, Fh, (qkv_activation)act};
    Py_BEGIN_ALLOW_THREADS
    qkv_ffn_backward(dx, &dw, dy, &c, x, &w, &cfg, N, scratch);
    Py_END_ALLOW_THREADS
    free(scratch);
    release(&bs);
    Py_RETURN_NONE;
fail:
    release(&bs);
    return NULL;
}

/* ---- LayerNorm and AddNorm ------------------------------------------------------------- */

static PyObject *layernorm_forward(PyObject *mod, PyObject *args)
{
    (void)mod;
    PyObject *y_o, *mean_o, *rstd_o, *x_o, *g_o, *b_o;
    int N, C;
    float eps;
    if (!PyArg_ParseTuple(args, "OOOOOOiif", &y_o, &mean_o, &rstd_o, &x_o, &g_o, &b_o, &N, &C,
                          &eps))
        return NULL;
    const size_t nc = product("layer_norm", 2, (long long)N, (long long)C);
    if (!nc) return NULL;
    buffers bs = {0};
    float *y = F_OUT(y_o, nc, "y"), *mean = y ? F_OUT(mean_o, (size_t)N, "mean") : NULL;
    float *rstd = mean ? F_OUT(rstd_o, (size_t)N, "rstd") : NULL;
    const float *x = rstd ? F(x_o, nc, "x") : NULL;
    qkv_layernorm_weights w = {x ? (float *)F(g_o, (size_t)C, "gamma") : NULL, NULL};
    w.beta = w.gamma ? (float *)F(b_o, (size_t)C, "beta") : NULL;
    if (!w.beta) goto fail;
    Py_BEGIN_ALLOW_THREADS
    qkv_layernorm_forward(y, mean, rstd, x, &w, N, C, eps);
    Py_END_ALLOW_THREADS
    release(&bs);
    Py_RETURN_NONE;
fail:
    release(&bs);
    return NULL;
}

static PyObject *layernorm_backward(PyObject *mod, PyObject *args)
{
    (void)mod;
    PyObject *dx_o, *dg_o, *db_o, *dy_o, *x_o, *mean_o, *rstd_o, *g_o, *b_o;
    int N, C;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOii", &dx_o, &dg_o, &db_o, &dy_o, &x_o, &mean_o,
                          &rstd_o, &g_o, &b_o, &N, &C))
        return NULL;
    const size_t nc = product("layer_norm", 2, (long long)N, (long long)C);
    if (!nc) return NULL;
    buffers bs = {0};
    float *dx = F_OUT(dx_o, nc, "dx");
    qkv_layernorm_weights dw = {dx ? F_OUT(dg_o, (size_t)C, "dgamma") : NULL, NULL};
    dw.beta = dw.gamma ? F_OUT(db_o, (size_t)C, "dbeta") : NULL;
    const float *dy = dw.beta ? F(dy_o, nc, "dy") : NULL, *x = dy ? F(x_o, nc, "x") : NULL;
    const float *mean = x ? F(mean_o, (size_t)N, "mean") : NULL;
    const float *rstd = mean ? F(rstd_o, (size_t)N, "rstd") : NULL;
    qkv_layernorm_weights w = {rstd ? (float *)F(g_o, (size_t)C, "gamma") : NULL, NULL};
    w.beta = w.gamma ? (float *)F(b_o, (size_t)C, "beta") : NULL;
    if (!w.beta) goto fail;
    Py_BEGIN_ALLOW_THREADS
    qkv_layernorm_backward(dx, &dw, dy, x, mean, rstd, &w, N, C);
    Py_END_ALLOW_THREADS
    release(&bs);
    Py_RETURN_NONE;
fail:
    release(&bs);
    return NULL;
}

static PyObject *addnorm_forward(PyObject *mod, PyObject *args)
{
    (void)mod;
    PyObject *y_o, *z_o, *mean_o, *rstd_o, *x_o, *s_o, *g_o, *b_o;
    int N, C;
    float eps, p;
    unsigned long long seed;
    if (!PyArg_ParseTuple(args, "OOOOOOOOiiffK", &y_o, &z_o, &mean_o, &rstd_o, &x_o, &s_o, &g_o,
                          &b_o, &N, &C, &eps, &p, &seed))
        return NULL;
    const size_t nc = product("add_norm", 2, (long long)N, (long long)C);
    if (!nc || check_rate(p)) return NULL;
    buffers bs = {0};
    float *y = F_OUT(y_o, nc, "y");
    qkv_addnorm_cache c = {y ? F_OUT(z_o, nc, "z") : NULL, NULL, NULL};
    if (c.z) c.mean = F_OUT(mean_o, (size_t)N, "mean");
    if (c.mean) c.rstd = F_OUT(rstd_o, (size_t)N, "rstd");
    const float *x = c.rstd ? F(x_o, nc, "x") : NULL, *s = x ? F(s_o, nc, "s") : NULL;
    qkv_layernorm_weights w = {s ? (float *)F(g_o, (size_t)C, "gamma") : NULL, NULL};
    w.beta = w.gamma ? (float *)F(b_o, (size_t)C, "beta") : NULL;
    if (!w.beta) goto fail;
    Py_BEGIN_ALLOW_THREADS
    qkv_addnorm_forward(y, &c, x, s, &w, N, C, eps, dropout_of(p, seed));
    Py_END_ALLOW_THREADS
    release(&bs);
    Py_RETURN_NONE;
fail:
    release(&bs);
    return NULL;
}

static PyObject *addnorm_backward(PyObject *mod, PyObject *args)
{
    (void)mod;
    PyObject *dx_o, *ds_o, *dg_o, *db_o, *dy_o, *z_o, *mean_o, *rstd_o, *g_o, *b_o;
    int N, C;
    float p;
    unsigned long long seed;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOiifK", &dx_o, &ds_o, &dg_o, &db_o, &dy_o, &z_o,
                          &mean_o, &rstd_o, &g_o, &b_o, &N, &C, &p, &seed))
        return NULL;
    const size_t nc = product("add_norm", 2, (long long)N, (long long)C);
    if (!nc || check_rate(p)) return NULL;
    buffers bs = {0};
    float *scratch = NULL, *dx = F_OUT(dx_o, nc, "dx"), *ds = dx ? F_OUT(ds_o, nc, "ds") : NULL;
    qkv_layernorm_weights dw = {ds ? F_OUT(dg_o, (size_t)C, "dgamma") : NULL, NULL};
    dw.beta = dw.gamma ? F_OUT(db_o, (size_t)C, "dbeta") : NULL;
    const float *dy = dw.beta ? F(dy_o, nc, "dy") : NULL;
    qkv_addnorm_cache c = {dy ? (float *)F(z_o, nc, "z") : NULL, NULL, NULL};
    if (c.z) c.mean = (float *)F(mean_o, (size_t)N, "mean");
    if (c.mean) c.rstd = (float *)F(rstd_o, (size_t)N, "rstd");
    qkv_layernorm_weights w = {c.rstd ? (float *)F(g_o, (size_t)C, "gamma") : NULL, NULL};
    w.beta = w.gamma ? (float *)F(b_o, (size_t)C, "beta") : NULL;
    if (!w.beta) goto fail;
    if (!(scratch = malloc(nc * sizeof *scratch))) {
        PyErr_NoMemory();
        goto fail;
    }
    Py_BEGIN_ALLOW_THREADS
    qkv_addnorm_backward(dx, ds, &dw, dy, &c, &w, N, C, dropout_of(p, seed), scratch);
    Py_END_ALLOW_THREADS
    free(scratch);
    release(&bs);
    Py_RETURN_NONE;
fail:
    release(&bs);
    return NULL;
}

PyMethodDef ops_methods[] = {
    {"masked_softmax_forward", masked_softmax_forward, METH_VARARGS, NULL},
    {"masked_softmax_backward", masked_softmax_backward, METH_VARARGS, NULL},
    {"attention_forward", attention_forward, METH_VARARGS, NULL},
    {"attention_backward", attention_backward, METH_VARARGS, NULL},
    {"additive_attention_forward", additive_attention_forward, METH_VARARGS, NULL},
    {"additive_attention_backward", additive_attention_backward, METH_VARARGS, NULL},
    {"mha_forward", mha_forward, METH_VARARGS, NULL},
    {"mha_backward", mha_backward, METH_VARARGS, NULL},
    {"linear_attention_forward", linear_attention_forward, METH_VARARGS, NULL},
    {"linear_attention_backward", linear_attention_backward, METH_VARARGS, NULL},
    {"sinusoidal_table", sinusoidal_table, METH_VARARGS, NULL},
    {"positional_forward", positional_forward, METH_VARARGS, NULL},
    {"positional_backward", positional_backward, METH_VARARGS, NULL},
    {"ffn_forward", ffn_forward, METH_VARARGS, NULL},
    {"ffn_backward", ffn_backward, METH_VARARGS, NULL},
    {"layernorm_forward", layernorm_forward, METH_VARARGS, NULL},
    {"layernorm_backward", layernorm_backward, METH_VARARGS, NULL},
    {"addnorm_forward", addnorm_forward, METH_VARARGS, NULL},
    {"addnorm_backward", addnorm_backward, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};
