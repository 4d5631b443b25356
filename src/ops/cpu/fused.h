/* SPDX-License-Identifier: MIT */
/* Kernels that do in one pass what the public API does in two, for the models' training
 * step. Private to the library. */
#ifndef QKV_FUSED_H
#define QKV_FUSED_H

#include "qkv.h"

/* qkv_cross_entropy_forward and _backward together: loss (N), lse (N) and the return value
 * (the number of counted rows, or -1 with err filled if a counted target is outside [0, V))
 * as the forward, except that an ignored row's lse is 0; then logits (N, V) are overwritten
 * with dlogits = scale (softmax(logits) - q) as the backward writes them (scale <= 0: 1 over
 * the counted rows, the mean). db (V), if not NULL, += the column sums of dlogits: the
 * gradient of the output layer's bias, which then needs no pass of its own; it takes
 * cross_entropy_fused_scratch_floats(N, V) floats of scratch. */
int cross_entropy_fused(float *loss, float *lse, double *sum, float *logits, float *db,
                        const int *targets, int N, int V, int ignore_index,
                        float label_smoothing, float scale, float *scratch, qkv_error *err);
size_t cross_entropy_fused_scratch_floats(int N, int V);

/* SiLU(x) = x sigmoid(x) with sigmoid's exponential by exp16.h's polynomial (relative error
 * < 1e-7) instead of libm's expf, a call per value: the int8 table's (its FFN's activation
 * was a sixth of a decoding step's time there), within 3e-7 relative of qkv_silu_forward.
 * AVX-512 (the int8 table runs only where there is). */
void silu_forward_fast(float *y, const float *x, size_t n);

/* dh = dh * act'(h_pre) over n values, in place: the FFN's backward through its activation
 * without a second buffer. */
void activation_grad_inplace(qkv_activation act, float *dh, const float *h_pre, size_t n);

/* One row (C) of qkv_layernorm_forward: y, and the row's *mean and *rstd. */
void layernorm_row_forward(float *y, float *mean, float *rstd, const float *x,
                           const float *gamma, const float *beta, int C, float eps);
/* One row (C) of qkv_layernorm_backward's dx += ..., from the row's mean and rstd. */
void layernorm_row_backward(float *dx, const float *dy, const float *x, float mean, float rstd,
                            const float *gamma, int C);
/* The gain and bias gradients of qkv_layernorm_backward over N rows (either may be NULL). */
void layernorm_param_backward(float *dgamma, float *dbeta, const float *dy, const float *x,
                              const float *mean, const float *rstd, int N, int C);

#endif
