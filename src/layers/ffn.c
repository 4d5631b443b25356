/* SPDX-License-Identifier: MIT */
/* Position-wise feed-forward network (paper, eq. 2): FFN(x) = act(x W_1^T + b_1) W_2^T + b_2,
 * the same two-layer MLP applied to every position independently. */
#include "core/internal.h"
#include "layers/layers.h"

ffn_w ffn_w_of(qkv_ffn_weights f)
{
    ffn_w w = {f, weight_f32(f.W1), weight_f32(f.W2)};
    return w;
}

/* x, y (N, C); c->h_pre, c->h (N, F) */
void ffn_forward(const backend *be, float *y, qkv_ffn_cache *c, const float *x, const ffn_w *w,
                 const qkv_ffn_config *cfg, int N)
{
    const int C = cfg->C, F = cfg->F;
    op_linear_forward(be, c->h_pre, x, &w->W1, w->f.b1, N, C, F);
    be->ops->activation_forward(cfg->act, c->h, c->h_pre, (size_t)N * F);
    op_linear_forward(be, y, c->h, &w->W2, w->f.b2, N, F, C);
}

/* scratch (N, F) holds dh, then d(h_pre). */
void ffn_backward(const backend *be, float *dx, qkv_ffn_weights *dw, const float *dy,
                  const qkv_ffn_cache *c, const float *x, const qkv_ffn_weights *w,
                  const qkv_ffn_config *cfg, int N, float *scratch)
{
    const int C = cfg->C, F = cfg->F;
    qkv_ffn_weights none = {0};
    if (!dw) dw = &none;
    float *dh = scratch;
    be->ops->zero(dh, (size_t)N * F);
    op_linear_backward(be, dh, dw->W2, dw->b2, dy, c->h, w->W2, N, F, C);
    be->ops->activation_backward(cfg->act, dh, c->h_pre, (size_t)N * F); /* d(h_pre), in place */
    op_linear_backward(be, dx, dw->W1, dw->b1, dh, x, w->W1, N, C, F);
}

void qkv_ffn_forward(float *y, qkv_ffn_cache *c, const float *x, const qkv_ffn_weights *w,
                     const qkv_ffn_config *cfg, int N)
{
    const backend be = backend_cpu();
    const ffn_w typed = ffn_w_of(*w);
    ffn_forward(&be, y, c, x, &typed, cfg, N);
}

void qkv_ffn_backward(float *dx, qkv_ffn_weights *dw, const float *dy, const qkv_ffn_cache *c,
                      const float *x, const qkv_ffn_weights *w, const qkv_ffn_config *cfg, int N,
                      float *scratch)
{
    const backend be = backend_cpu();
    ffn_backward(&be, dx, dw, dy, c, x, w, cfg, N, scratch);
}
