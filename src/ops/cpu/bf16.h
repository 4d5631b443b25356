/* SPDX-License-Identifier: MIT */
/* Matrix products in bfloat16 with float32 accumulation (AVX512-BF16), for the models' linear
 * layers under QKV_PRECISION_BF16. Private to the library.
 *
 * bf16 is the top half of a float32: 8 exponent bits (the same range), 8 significant bits
 * (7 stored), so rounding a float to it has a relative error of at most 2^-8. VDPBF16PS
 * multiplies 32 pairs of bf16 and adds each two neighbouring products into one of 16 float32
 * sums, which is twice the multiply-adds per instruction of a float32 FMA and half the bytes
 * per operand. The operands stay float32 in memory: they are rounded (to nearest, ties to
 * even, denormals to zero, as the hardware converts) while being packed into the layout the
 * instruction reads, pairs of neighbours along K. */
#ifndef QKV_BF16_H
#define QKV_BF16_H

#include <stddef.h>
#include <stdint.h>

#include "qkv.h"

/* The packed operands of one call, owned by whoever calls (a model): sized for `threads`
 * threads, and never allocated on the hot path. */
typedef struct {
    uint32_t *buf; /* per thread: a packed block of op(B), then one of op(A) */
    int threads;   /* the threads buf has room for (0: none yet) */
} gemm_bf16_workspace;

/* Whether this CPU runs the kernels (AVX512F, BW, VL and BF16). */
int gemm_bf16_supported(void);

/* Room for `threads` threads (grows, never shrinks). */
qkv_status gemm_bf16_reserve(gemm_bf16_workspace *ws, int threads, qkv_error *err);
void gemm_bf16_workspace_free(gemm_bf16_workspace *ws);

/* Row-major C (M, N) = alpha op(A) op(B) + beta C, op(X) = X or X^T as cblas_sgemm, with
 * op(A) (M, K) and op(B) (K, N) rounded to bf16 and the sums kept in float32. beta = 0 does
 * not read C (it may hold anything, NaN included). Runs on min(ws->threads, the OpenMP
 * thread count) threads of its own: call it from outside parallel regions. */
void gemm_bf16(int transA, int transB, int M, int N, int K, float alpha, const float *A,
               int lda, const float *B, int ldb, float beta, float *C, int ldc,
               gemm_bf16_workspace *ws);

/* The same with op(B) = W^T for W (N, K) already in bf16 (row stride ldw): a linear layer's
 * y = x W^T with the weights' bf16 copy, which is read at half the bytes. */
void gemm_bf16_wt(int M, int N, int K, float alpha, const float *A, int lda,
                  const uint16_t *W, int ldw, float beta, float *C, int ldc,
                  gemm_bf16_workspace *ws);

/* A linear layer's y (N, out) = x W^T + b (b may be NULL) for x (N, in) and W (out, in):
 * from W16, W's bf16 copy, where it is not NULL, else from W rounded on the fly. The bias is
 * added as the product's rows are stored, bitwise what a separate pass adds. */
void gemm_bf16_linear(int N, int out, int in, const float *x, const float *W,
                      const uint16_t *W16, const float *b, float *y, gemm_bf16_workspace *ws);

/* x rounded to bf16 as the kernels round it: to nearest, ties to even; denormals become
 * zeros of their sign; NaN stays NaN. */
static inline uint16_t bf16_from_float(float x)
{
    union {
        float f;
        uint32_t u;
    } v = {x};
    if ((v.u & 0x7f800000u) == 0) return (uint16_t)((v.u >> 16) & 0x8000u); /* 0, denormal */
    if ((v.u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((v.u >> 16) | 0x0040u); /* NaN */
    return (uint16_t)((v.u + 0x7fffu + ((v.u >> 16) & 1u)) >> 16);
}

static inline float bf16_to_float(uint16_t h)
{
    union {
        uint32_t u;
        float f;
    } v = {(uint32_t)h << 16};
    return v.f;
}

/* dst[i] = bf16(src[i]) for n values, on the OpenMP threads (a model's weight copies). */
void bf16_convert(uint16_t *dst, const float *src, size_t n);

/* y (M, out) = x W^T + b for a few rows M (a decoding step), with W (out, in) in bf16 and x,
 * y, b in float32: each weight widened to float32 exactly, float32 multiply-adds. This reads
 * half the bytes of the float32 kernel, which is what a step's time is made of. b may be NULL.
 * Row i's result does not depend on M or the thread count. */
void linear_rows_bf16(float *y, const float *x, const uint16_t *W, const float *b, int M,
                      int in, int out);

#endif
