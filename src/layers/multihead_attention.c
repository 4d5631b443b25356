/* SPDX-License-Identifier: MIT */
/* Multi-head attention (paper, section 3.2.2; d2l 11.5):
 *   MultiHead(Q, K, V) = Concat(head_1, ..., head_H) W_o,  head_i = Attention(Q W_q^i, K W_k^i, V W_v^i)
 * The H projections of size p are computed as one (H*p)-wide projection whose columns
 * h*p .. h*p+p-1 belong to head h, so the heads never need to be split into separate arrays. */
#include <string.h>

#include "core/internal.h"
#include "layers/layers.h"

size_t qkv_mha_weights_floats(const qkv_mha_config *cfg)
{
    size_t hp = (size_t)cfg->heads * cfg->head_dim, bias = cfg->bias ? 1 : 0;
    return hp * cfg->d_q + 2 * hp * cfg->d_kv + (size_t)cfg->d_q * hp + bias * (3 * hp + cfg->d_q);
}

qkv_mha_weights qkv_mha_weights_view(float *base, const qkv_mha_config *cfg)
{
    size_t hp = (size_t)cfg->heads * cfg->head_dim;
    qkv_mha_weights w = {0};
    float *at = base;
    w.W_q = at, at += hp * cfg->d_q;
    if (cfg->bias) w.b_q = at, at += hp;
    w.W_k = at, at += hp * cfg->d_kv;
    if (cfg->bias) w.b_k = at, at += hp;
    w.W_v = at, at += hp * cfg->d_kv;
    if (cfg->bias) w.b_v = at, at += hp;
    w.W_o = at, at += (size_t)cfg->d_q * hp;
    if (cfg->bias) w.b_o = at;
    return w;
}

size_t qkv_mha_cache_floats(const qkv_mha_config *cfg, int B, int n, int m)
{
    size_t hp = (size_t)cfg->heads * cfg->head_dim;
    return 2 * (size_t)B * n * hp + 2 * (size_t)B * m * hp + (size_t)B * cfg->heads * n * m;
}

qkv_mha_cache qkv_mha_cache_view(float *base, const qkv_mha_config *cfg, int B, int n, int m)
{
    size_t hp = (size_t)cfg->heads * cfg->head_dim;
    qkv_mha_cache c;
    c.q = base;
    c.k = c.q + (size_t)B * n * hp;
    c.v = c.k + (size_t)B * m * hp;
    c.ctx = c.v + (size_t)B * m * hp;
    c.P = c.ctx + (size_t)B * n * hp;
    return c;
}

size_t qkv_mha_scratch_floats(const qkv_mha_config *cfg, int B, int n, int m)
{
    const backend be = backend_cpu();
    return mha_scratch_floats(&be, ATTENTION_MATERIALISED, cfg, B, n, m);
}

qkv_attention_shape qkv_mha_shape(const qkv_mha_config *cfg, int B, int n, int m)
{
    qkv_attention_shape s = {B, cfg->heads, n, m, cfg->head_dim, cfg->head_dim};
    return s;
}

size_t mha_saved_floats(const backend *be, attention_kernel k, const qkv_mha_config *mc, int B,
                        int n, int m)
{
    const size_t hp = (size_t)mc->heads * mc->head_dim;
    const qkv_attention_shape s = qkv_mha_shape(mc, B, n, m);
    return 2 * (size_t)B * n * hp + 2 * (size_t)B * m * hp + be->ops->attention_saved_floats(k, &s);
}

/* q, k, v, ctx as qkv_mha_cache_view lays them out, then what the kernel keeps */
mha_acts mha_acts_view(const backend *be, attention_kernel k, float *base,
                       const qkv_mha_config *mc, int B, int n, int m)
{
    (void)be;
    mha_acts a = {k, qkv_mha_cache_view(base, mc, B, n, m), NULL};
    if (k != ATTENTION_LINEAR) a.S = a.c.P;
    if (k != ATTENTION_MATERIALISED) a.c.P = NULL;
    return a;
}

size_t mha_scratch_floats(const backend *be, attention_kernel k, const qkv_mha_config *mc, int B,
                          int n, int m)
{
    const size_t hp = (size_t)mc->heads * mc->head_dim;
    const qkv_attention_shape s = qkv_mha_shape(mc, B, n, m);
    /* backward's dctx, dq (B n H p), dk, dv (B m H p), then the kernel's own */
    return 2 * (size_t)B * n * hp + 2 * (size_t)B * m * hp +
           be->ops->attention_scratch_floats(k, &s);
}

mha_w mha_w_of(qkv_mha_weights f)
{
    mha_w w = {f, weight_f32(f.W_q), weight_f32(f.W_k), weight_f32(f.W_v), weight_f32(f.W_o)};
    return w;
}

/* Q (B, n, d_q), K, V (B, m, d_kv) -> y (B, n, d_q) */
void mha_forward(const backend *be, float *y, mha_acts *a, const qkv_attention_inputs *x,
                 const mha_w *w, const qkv_mha_config *mc, const qkv_attention_shape *s,
                 const qkv_mask *mask, qkv_dropout drop, float *scratch)
{
    const int hp = mc->heads * mc->head_dim, B = s->B, n = s->n, m = s->m;
    const qkv_mha_weights *f = &w->f;
    qkv_mha_cache *c = &a->c;
    op_linear_forward(be, c->q, x->Q, &w->W_q, f->b_q, B * n, mc->d_q, hp);  /* Q W_q */
    op_linear_forward(be, c->k, x->K, &w->W_k, f->b_k, B * m, mc->d_kv, hp); /* K W_k */
    op_linear_forward(be, c->v, x->V, &w->W_v, f->b_v, B * m, mc->d_kv, hp); /* V W_v */
    const qkv_attention_inputs heads = {c->q, c->k, c->v};
    be->ops->attention_forward(a->kernel, c->ctx, a->S, &heads, s, mask, drop, scratch);
    op_linear_forward(be, y, c->ctx, &w->W_o, f->b_o, B * n, hp, mc->d_q); /* Concat W_o */
}

void mha_backward(const backend *be, qkv_attention_grads *dx, qkv_mha_weights *dw,
                  const float *dy, const mha_acts *a, const qkv_attention_inputs *x,
                  const qkv_mha_weights *w, const qkv_mha_config *mc,
                  const qkv_attention_shape *s, const qkv_mask *mask, qkv_dropout drop,
                  float *scratch)
{
    const int hp = mc->heads * mc->head_dim, B = s->B, n = s->n, m = s->m;
    const qkv_mha_cache *c = &a->c;
    qkv_mha_weights none = {0};
    if (!dw) dw = &none;
    float *dctx = scratch;                 /* (B, n, H p) */
    float *dq = dctx + (size_t)B * n * hp; /* (B, n, H p) */
    float *dk = dq + (size_t)B * n * hp;   /* (B, m, H p) */
    float *dv = dk + (size_t)B * m * hp;   /* (B, m, H p) */
    float *rest = dv + (size_t)B * m * hp;
    be->ops->zero(dctx, 2 * (size_t)B * n * hp + 2 * (size_t)B * m * hp);
    op_linear_backward(be, dctx, dw->W_o, dw->b_o, dy, c->ctx, w->W_o, B * n, hp, mc->d_q);
    const qkv_attention_inputs heads = {c->q, c->k, c->v};
    qkv_attention_grads dheads = {dq, dk, dv};
    be->ops->attention_backward(a->kernel, &dheads, dctx, c->ctx, a->S, &heads, s, mask, drop,
                                rest);
    op_linear_backward(be, dx->dQ, dw->W_q, dw->b_q, dq, x->Q, w->W_q, B * n, mc->d_q, hp);
    op_linear_backward(be, dx->dK, dw->W_k, dw->b_k, dk, x->K, w->W_k, B * m, mc->d_kv, hp);
    op_linear_backward(be, dx->dV, dw->W_v, dw->b_v, dv, x->V, w->W_v, B * m, mc->d_kv, hp);
}

void qkv_mha_forward(float *y, qkv_mha_cache *c, const qkv_attention_inputs *x,
                     const qkv_mha_weights *w, const qkv_mha_config *cfg,
                     const qkv_attention_shape *s, const qkv_mask *mask, qkv_dropout drop,
                     float *scratch)
{
    const backend be = backend_cpu();
    const mha_w typed = mha_w_of(*w);
    mha_acts a = {ATTENTION_MATERIALISED, *c, c->P};
    mha_forward(&be, y, &a, x, &typed, cfg, s, mask, drop, scratch);
}

void qkv_mha_backward(qkv_attention_grads *dx, qkv_mha_weights *dw, const float *dy,
                      const qkv_mha_cache *c, const qkv_attention_inputs *x,
                      const qkv_mha_weights *w, const qkv_mha_config *cfg,
                      const qkv_attention_shape *s, qkv_dropout drop, float *scratch)
{
    const backend be = backend_cpu();
    const mha_acts a = {ATTENTION_MATERIALISED, *c, c->P};
    mha_backward(&be, dx, dw, dy, &a, x, w, cfg, s, NULL, drop, scratch);
}
