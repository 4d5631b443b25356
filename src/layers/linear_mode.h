/* How a model's linear layers multiply: in float32 through OpenBLAS (the public qkv_linear_*,
 * qkv_ffn_*, qkv_mha_* functions, and a model at QKV_PRECISION_FP32), or in bf16 with float32
 * sums (a model at QKV_PRECISION_BF16; kernels/bf16.h). Every big matrix product of the models
 * goes through linear_forward / linear_backward: the projections, the FFN and the output
 * logits. Private to the library. */
#ifndef QKV_LINEAR_MODE_H
#define QKV_LINEAR_MODE_H

#include <stdint.h>

#include "kernels/bf16.h"

/* NULL means float32. The weights handed to the layers are views into one parameter buffer,
 * so a weight's bf16 copy sits at the same offset of the copy. */
typedef struct {
    qkv_precision precision;
    const float *params;         /* the model's parameters */
    size_t n_params;
    const uint16_t *params_bf16; /* their bf16 copy when it is current, else NULL */
    gemm_bf16_workspace *ws;     /* the bf16 GEMM's packing buffers */
} linear_mode;

/* x (N, in), W (out, in), b (out) or NULL -> y (N, out), as qkv_linear_forward. */
void linear_forward(const linear_mode *lm, float *y, const float *x, const float *W,
                    const float *b, int N, int in, int out);
/* dx (N, in) += dy W;  dW (out, in) += dy^T x;  db (out) += column sums of dy (any may be
 * NULL), as qkv_linear_backward. */
void linear_backward(const linear_mode *lm, float *dx, float *dW, float *db, const float *dy,
                     const float *x, const float *W, int N, int in, int out);

/* qkv_ffn_forward / _backward with the mode's products. */
void ffn_forward(const linear_mode *lm, float *y, float *h_pre, float *h, const float *x,
                 const float *W1, const float *b1, const float *W2, const float *b2, int N,
                 int C, int F, qkv_activation act);
void ffn_backward(const linear_mode *lm, float *dx, float *dW1, float *db1, float *dW2,
                  float *db2, const float *dy, const float *h_pre, const float *h,
                  const float *x, const float *W1, const float *W2, int N, int C, int F,
                  qkv_activation act, float *scratch);

/* qkv_mha_forward / _backward with the mode's products (the attention itself stays float32). */
void mha_forward(const linear_mode *lm, float *y, qkv_mha_cache *c, const float *xq,
                 const float *xkv, const qkv_mha_weights *w, const qkv_mha_config *cfg, int B,
                 int n, int m, const qkv_mask *mask, float p, uint64_t seed, float *scratch);
void mha_backward(const linear_mode *lm, float *dxq, float *dxkv, qkv_mha_weights *dw,
                  const float *dy, const qkv_mha_cache *c, const float *xq, const float *xkv,
                  const qkv_mha_weights *w, const qkv_mha_config *cfg, int B, int n, int m,
                  float p, uint64_t seed, float *scratch);

#endif
