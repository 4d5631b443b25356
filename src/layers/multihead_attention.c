/* Multi-head attention (paper, section 3.2.2; d2l 11.5):
 *   MultiHead(Q, K, V) = Concat(head_1, ..., head_H) W_o,  head_i = Attention(Q W_q^i, K W_k^i, V W_v^i)
 * The H projections of size p are computed as one (H*p)-wide projection whose columns
 * h*p .. h*p+p-1 belong to head h, so the heads never need to be split into separate arrays. */
#include <string.h>

#include "core/internal.h"
#include "layers/linear_mode.h"

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
    size_t hp = (size_t)cfg->heads * cfg->head_dim;
    return qkv_attention_scratch_floats(B, cfg->heads, n, m) + 2 * (size_t)B * n * hp +
           2 * (size_t)B * m * hp;
}

/* xq (B, n, d_q), xkv (B, m, d_kv) -> y (B, n, d_q) */
void mha_forward(const linear_mode *lm, float *y, qkv_mha_cache *c, const float *xq,
                 const float *xkv, const qkv_mha_weights *w, const qkv_mha_config *cfg, int B,
                 int n, int m, const qkv_mask *mask, float p, uint64_t seed, float *scratch)
{
    const int H = cfg->heads, hd = cfg->head_dim, hp = H * hd;
    linear_forward(lm, c->q, xq, w->W_q, w->b_q, B * n, cfg->d_q, hp);
    linear_forward(lm, c->k, xkv, w->W_k, w->b_k, B * m, cfg->d_kv, hp);
    linear_forward(lm, c->v, xkv, w->W_v, w->b_v, B * m, cfg->d_kv, hp);
    qkv_attention_forward(c->ctx, c->P, c->q, c->k, c->v, B, H, n, m, hd, hd, mask, p, seed,
                          scratch);
    linear_forward(lm, y, c->ctx, w->W_o, w->b_o, B * n, hp, cfg->d_q);
}

void mha_backward(const linear_mode *lm, float *dxq, float *dxkv, qkv_mha_weights *dw,
                  const float *dy, const qkv_mha_cache *c, const float *xq, const float *xkv,
                  const qkv_mha_weights *w, const qkv_mha_config *cfg, int B, int n, int m,
                  float p, uint64_t seed, float *scratch)
{
    const int H = cfg->heads, hd = cfg->head_dim, hp = H * hd;
    qkv_mha_weights none = {0};
    if (!dw) dw = &none;
    float *att_scratch = scratch;
    float *dctx = att_scratch + qkv_attention_scratch_floats(B, H, n, m);
    float *dq = dctx + (size_t)B * n * hp;
    float *dk = dq + (size_t)B * n * hp;
    float *dv = dk + (size_t)B * m * hp;
    memset(dctx, 0, (2 * (size_t)B * n * hp + 2 * (size_t)B * m * hp) * sizeof *dctx);
    linear_backward(lm, dctx, dw->W_o, dw->b_o, dy, c->ctx, w->W_o, B * n, hp, cfg->d_q);
    qkv_attention_backward(dq, dk, dv, dctx, c->P, c->q, c->k, c->v, B, H, n, m, hd, hd, p, seed,
                           att_scratch);
    linear_backward(lm, dxq, dw->W_q, dw->b_q, dq, xq, w->W_q, B * n, cfg->d_q, hp);
    linear_backward(lm, dxkv, dw->W_k, dw->b_k, dk, xkv, w->W_k, B * m, cfg->d_kv, hp);
    linear_backward(lm, dxkv, dw->W_v, dw->b_v, dv, xkv, w->W_v, B * m, cfg->d_kv, hp);
}

void qkv_mha_forward(float *y, qkv_mha_cache *c, const float *xq, const float *xkv,
                     const qkv_mha_weights *w, const qkv_mha_config *cfg, int B, int n, int m,
                     const qkv_mask *mask, float p, uint64_t seed, float *scratch)
{
    mha_forward(NULL, y, c, xq, xkv, w, cfg, B, n, m, mask, p, seed, scratch);
}

void qkv_mha_backward(float *dxq, float *dxkv, qkv_mha_weights *dw, const float *dy,
                      const qkv_mha_cache *c, const float *xq, const float *xkv,
                      const qkv_mha_weights *w, const qkv_mha_config *cfg, int B, int n, int m,
                      float p, uint64_t seed, float *scratch)
{
    mha_backward(NULL, dxq, dxkv, dw, dy, c, xq, xkv, w, cfg, B, n, m, p, seed, scratch);
}
