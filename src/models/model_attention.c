/* Multi-head attention inside the models, over the materialised or the flash kernel; see
 * model_attention.h. The materialised path is qkv_mha_* itself; the flash path is the same
 * four projections around qkv_flash_attention_*. */
#include <string.h>

#include "models/model_attention.h"

size_t model_mha_cache_floats(const qkv_mha_config *mc, int B, int n, int m, int flash)
{
    const size_t hp = (size_t)mc->heads * mc->head_dim;
    if (!flash) return qkv_mha_cache_floats(mc, B, n, m);
    return 2 * (size_t)B * n * hp + 2 * (size_t)B * m * hp + (size_t)B * mc->heads * n;
}

qkv_mha_cache model_mha_cache_view(float *base, float **L, const qkv_mha_config *mc, int B,
                                   int n, int m, int flash)
{
    /* q, k, v, ctx as qkv_mha_cache_view lays them out; what follows is P or L */
    qkv_mha_cache c = qkv_mha_cache_view(base, mc, B, n, m);
    *L = NULL;
    if (flash) *L = c.P, c.P = NULL;
    return c;
}

size_t model_mha_scratch_floats(const qkv_mha_config *mc, int B, int n, int m, int flash)
{
    const size_t hp = (size_t)mc->heads * mc->head_dim;
    if (!flash) return qkv_mha_scratch_floats(mc, B, n, m);
    /* dctx, dq (B n H p), dk, dv (B m H p), then D (B H n) */
    return 2 * (size_t)B * n * hp + 2 * (size_t)B * m * hp +
           qkv_flash_attention_scratch_floats(B, mc->heads, n);
}

/* xq (B, n, d_q), xkv (B, m, d_kv) -> y (B, n, d_q) */
void model_mha_forward(const linear_mode *lm, float *y, qkv_mha_cache *c, float *L,
                       const float *xq, const float *xkv, const qkv_mha_weights *w,
                       const qkv_mha_config *mc, int B, int n, int m, const qkv_mask *mask,
                       float p, uint64_t seed, float *scratch)
{
    if (c->P) {
        mha_forward(lm, y, c, xq, xkv, w, mc, B, n, m, mask, p, seed, scratch);
        return;
    }
    const int H = mc->heads, hd = mc->head_dim, hp = H * hd;
    linear_forward(lm, c->q, xq, w->W_q, w->b_q, B * n, mc->d_q, hp);   /* Q W_q */
    linear_forward(lm, c->k, xkv, w->W_k, w->b_k, B * m, mc->d_kv, hp); /* K W_k */
    linear_forward(lm, c->v, xkv, w->W_v, w->b_v, B * m, mc->d_kv, hp); /* V W_v */
    qkv_flash_attention_forward(c->ctx, L, c->q, c->k, c->v, B, H, n, m, hd, hd, mask, p, seed);
    linear_forward(lm, y, c->ctx, w->W_o, w->b_o, B * n, hp, mc->d_q);  /* Concat W_o */
}

void model_mha_backward(const linear_mode *lm, float *dxq, float *dxkv, qkv_mha_weights *dw,
                        const float *dy, const qkv_mha_cache *c, const float *L, const float *xq,
                        const float *xkv, const qkv_mha_weights *w, const qkv_mha_config *mc,
                        int B, int n, int m, const qkv_mask *mask, float p, uint64_t seed,
                        float *scratch)
{
    if (c->P) {
        mha_backward(lm, dxq, dxkv, dw, dy, c, xq, xkv, w, mc, B, n, m, p, seed, scratch);
        return;
    }
    const int H = mc->heads, hd = mc->head_dim, hp = H * hd;
    float *dctx = scratch;                 /* (B, n, H p) */
    float *dq = dctx + (size_t)B * n * hp; /* (B, n, H p) */
    float *dk = dq + (size_t)B * n * hp;   /* (B, m, H p) */
    float *dv = dk + (size_t)B * m * hp;   /* (B, m, H p) */
    float *D = dv + (size_t)B * m * hp;    /* (B, H, n) */
    memset(dctx, 0, (2 * (size_t)B * n * hp + 2 * (size_t)B * m * hp) * sizeof *dctx);
    linear_backward(lm, dctx, dw->W_o, dw->b_o, dy, c->ctx, w->W_o, B * n, hp, mc->d_q);
    qkv_flash_attention_backward(dq, dk, dv, dctx, c->ctx, L, c->q, c->k, c->v, B, H, n, m, hd,
                                 hd, mask, p, seed, D);
    linear_backward(lm, dxq, dw->W_q, dw->b_q, dq, xq, w->W_q, B * n, mc->d_q, hp);
    linear_backward(lm, dxkv, dw->W_k, dw->b_k, dk, xkv, w->W_k, B * m, mc->d_kv, hp);
    linear_backward(lm, dxkv, dw->W_v, dw->b_v, dv, xkv, w->W_v, B * m, mc->d_kv, hp);
}
