/* SPDX-License-Identifier: MIT */
/* The library's own CUDA kernels (the .cu files of ops/cuda), as the CUDA tables
 * (backend/cuda.c) launch them: every pointer is device memory, every launch goes to the
 * default stream (so kernels, copies and cuBLAS calls run in the order they are issued), and
 * a launch that fails leaves its error for cudaGetLastError, which the table's finish entry
 * reads. Each kernel computes
 * what the CPU kernel of the same name does (ops/cpu/, include/qkv/layers.h), up to float
 * rounding; dropout draws the same keep decisions from the same counters. The products are
 * cuBLAS's (backend/cuda.c); sums over many values CUB's (loss.cu). Private to the library. */
#ifndef QKV_OPS_CUDA_KERNELS_H
#define QKV_OPS_CUDA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "ops/cpu/cached_attention.h"
#include "ops/cpu/optimizer.h"
#include "qkv.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- elementwise (elementwise.cu) --------------------------------------------------------- */

void cuda_add(float *y, const float *x, size_t n);  /* y += x */
void cuda_scale(float *x, size_t n, float s);       /* x *= s */
void cuda_activation_forward(qkv_activation act, float *h, const float *h_pre, size_t n);
void cuda_activation_backward(qkv_activation act, float *dh, const float *h_pre, size_t n);
void cuda_dropout_forward(float *y, const float *x, size_t n, qkv_dropout drop);
void cuda_dropout_backward(float *dx, const float *dy, size_t n, qkv_dropout drop); /* += */
void cuda_residual_forward(float *y, const float *x, const float *s, size_t n, qkv_dropout drop);
void cuda_embedding_forward(float *y, const int *ids, const float *E, int N, int C);
void cuda_embedding_backward(float *dE, const float *dy, const int *ids, int N, int C);
void cuda_positional_forward(float *y, const float *x, const float *P, int B, int T, int C,
                             int pos0, float scale);
void cuda_positional_backward(float *dx, float *dP, const float *dy, int B, int T, int C,
                              int pos0, float scale);
/* y (N, out) += b on every row; db (out) += the column sums of dy (N, out) */
void cuda_bias_forward(float *y, const float *b, int N, int out);
void cuda_bias_backward(float *db, const float *dy, int N, int out);
/* dst = src rounded to bf16, to nearest even (ops/cpu/bf16.h's rounding) */
void cuda_round_bf16(uint16_t *dst, const float *src, size_t n);
void cuda_adam_update(float *p, const float *g, float *m, float *v, size_t n,
                      const adam_hyper *h);

/* ---- normalisation (norm.cu) ------------------------------------------------------------- */

void cuda_layernorm_forward(float *y, float *mean, float *rstd, const float *x,
                            const float *gamma, const float *beta, int N, int C, float eps);
/* dx (may be NULL), dgamma, dbeta (either may be NULL) += the gradients given dy */
void cuda_layernorm_backward(float *dx, float *dgamma, float *dbeta, const float *dy,
                             const float *x, const float *mean, const float *rstd,
                             const float *gamma, int N, int C);

/* ---- attention (attention.cu) -------------------------------------------------------------
 * Q (B, n, H, d), K (B, m, H, d), V (B, m, H, v) with heads interleaved, O (B, n, H, v);
 * row (b, i) sees keys 0 .. len - 1 under mask (ops/cpu/mask.h's rule); dropout on the
 * weights with counter offset + ((b H + h) n + i) m + j, as the CPU kernels. */
typedef struct {
    const float *Q, *K, *V;
    qkv_attention_shape s;
    qkv_mask mask; /* valid_lens in device memory */
    qkv_dropout drop;
} cuda_attention;

/* The materialised kernel: P (B, H, n, m) the weights (after the mask, before dropout). */
void cuda_attention_forward(float *O, float *P, const cuda_attention *a);
/* dQ, dK, dV (each may be NULL) += the gradients given dO; scratch (B, H, n, m). */
void cuda_attention_backward(float *dQ, float *dK, float *dV, const float *dO, const float *P,
                             const cuda_attention *a, float *scratch);
/* The flash kernel: L (B, H, n) the rows' log-sum-exp (-INFINITY: no key seen, O row 0). */
void cuda_flash_forward(float *O, float *L, const cuda_attention *a);
/* scratch (B, H, n): D = rowsum(dO O). */
void cuda_flash_backward(float *dQ, float *dK, float *dV, const float *dO, const float *O,
                         const float *L, const cuda_attention *a, float *scratch);
/* One query per row over a key-value cache (ops/cpu/cached_attention.h), kv's int arrays in
 * device memory. */
void cuda_cached_attention(float *O, float *S, const float *Q, const kv_view *kv, int B, int H,
                           int d, int m);
/* n values of a bf16 cache from at = x rounded (a float32 cache is a plain copy) */
void cuda_kv_store_bf16(uint16_t *cache, size_t at, const float *x, size_t n);

/* ---- the loss and sums (loss.cu) ---------------------------------------------------------- */

/* How many targets (N) are counted (not ignore_index); *bad the first row whose target is
 * outside [0, V), or -1. Waits for the device. */
int cuda_count_targets(const int *targets, int N, int V, int ignore_index, int *bad);
/* loss (N), lse (N) of logits (N, V) against targets; with backward the logits become
 * scale (softmax - q) in place (rows of ignore_index zero). Returns the sum of the losses,
 * on the host (waits for the device). */
double cuda_cross_entropy(float *loss, float *lse, float *logits, const int *targets, int N,
                          int V, int ignore_index, float label_smoothing, int backward,
                          float scale);
/* sum x_i^2 in double, on the host (waits for the device). */
double cuda_sum_squares(const float *x, size_t n);

#ifdef __cplusplus
}
#endif

#endif
