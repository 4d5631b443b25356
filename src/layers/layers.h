/* SPDX-License-Identifier: MIT */
/* The layers as the models run them: on a backend (backend/backend.h), whose table supplies
 * every kernel. The public qkv_ffn_* and qkv_mha_* are these on the float32 CPU backend.
 * Private to the library. */
#ifndef QKV_LAYERS_H
#define QKV_LAYERS_H

#include "backend/backend.h"

/* A layer's weights as a model holds them: the float32 views (f: the parameters, or in a
 * gradient struct the gradients) and each weight matrix as the products read it (typed when
 * the model's precision is set; float32 views of f until then). */
typedef struct {
    qkv_ffn_weights f;
    weight W1, W2;
} ffn_w;

typedef struct {
    qkv_mha_weights f;
    weight W_q, W_k, W_v, W_o;
} mha_w;

/* The layers' float32 weights as typed weights of type WEIGHT_F32. */
ffn_w ffn_w_of(qkv_ffn_weights f);
mha_w mha_w_of(qkv_mha_weights f);

/* ---- position-wise feed-forward network (paper, eq. 2) ----------------------------------
 * y = act(x W1^T + b1) W2^T + b2 over N rows; x, y (N, C); c->h_pre, c->h (N, F). */
void ffn_forward(const backend *be, float *y, qkv_ffn_cache *c, const float *x, const ffn_w *w,
                 const qkv_ffn_config *cfg, int N);
/* dx += its gradient and the weights' into dw (dw and any of its members may be NULL);
 * scratch (N, F). */
void ffn_backward(const backend *be, float *dx, qkv_ffn_weights *dw, const float *dy,
                  const qkv_ffn_cache *c, const float *x, const qkv_ffn_weights *w,
                  const qkv_ffn_config *cfg, int N, float *scratch);

/* ---- multi-head attention (paper, section 3.2.2) -----------------------------------------
 *   MultiHead(Q, K, V) = Concat(head_1..head_H) W_o,  head_i = Attention(Q W_q^i, K W_k^i, V W_v^i)
 * with Attention one of the backend's kernels. What one call keeps for its backward: */
typedef struct {
    attention_kernel kernel;
    qkv_mha_cache c; /* q, ctx (B n H p), k, v (B m H p); c.P the weights when materialised */
    float *S;        /* what the kernel keeps beside ctx: c.P, the flash kernel's L, or NULL */
} mha_acts;

/* Floats of one attention's saved activations over B x (n queries, m keys), and their views
 * in base (mha_saved_floats long). */
size_t mha_saved_floats(const backend *be, attention_kernel k, const qkv_mha_config *mc, int B,
                        int n, int m);
mha_acts mha_acts_view(const backend *be, attention_kernel k, float *base,
                       const qkv_mha_config *mc, int B, int n, int m);
/* Floats of scratch forward and backward need. */
size_t mha_scratch_floats(const backend *be, attention_kernel k, const qkv_mha_config *mc, int B,
                          int n, int m);

/* x->Q (B, n, d_q) attends to x->K, x->V (B, m, d_kv) under mask -> y (B, n, d_q); s =
 * qkv_mha_shape(mc, B, n, m); dropout on the weights (not with linear attention). */
void mha_forward(const backend *be, float *y, mha_acts *a, const qkv_attention_inputs *x,
                 const mha_w *w, const qkv_mha_config *mc, const qkv_attention_shape *s,
                 const qkv_mask *mask, qkv_dropout drop, float *scratch);
/* dx (its buffers may be one: self-attention) and dw (may be NULL) += the gradients given
 * dy; the same mask and dropout as forward. */
void mha_backward(const backend *be, qkv_attention_grads *dx, qkv_mha_weights *dw,
                  const float *dy, const mha_acts *a, const qkv_attention_inputs *x,
                  const qkv_mha_weights *w, const qkv_mha_config *mc,
                  const qkv_attention_shape *s, const qkv_mask *mask, qkv_dropout drop,
                  float *scratch);

#endif
