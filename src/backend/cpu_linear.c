/* SPDX-License-Identifier: MIT */
/* The linear entries of the CPU backends' tables (backend.h): float32 (ops/cpu/linear.c), bf16
 * products with float32 sums (ops/cpu/bf16.h) and int8 products with int32 sums
 * (ops/cpu/int8.h), each finding the weights' copy of its type where the model holds one. */
#include "backend/cpu_linear.h"
#include "ops/cpu/linear.h"

/* ---- float32 ------------------------------------------------------------------------------ */

void cpu_linear_rows_f32(const backend *be, float *y, const float *x, const float *W,
                         const float *b, int N, int in, int out)
{
    (void)be;
    linear_rows_f32(y, x, W, b, N, in, out);
}

void cpu_linear_gemm_f32(const backend *be, float *y, const float *x, const float *W,
                         const float *b, int N, int in, int out)
{
    (void)be;
    linear_gemm_f32(y, x, W, b, N, in, out);
}

void cpu_linear_backward_f32(const backend *be, float *dx, float *dW, float *db, const float *dy,
                             const float *x, const float *W, int N, int in, int out)
{
    (void)be;
    linear_backward_f32(dx, dW, db, dy, x, W, N, in, out);
}

/* ---- bf16 products, float32 sums --------------------------------------------------------- */

/* W's bf16 copy (n values), or NULL: no current copy, or W not among the model's parameters. */
static const uint16_t *bf16_weights(const backend *be, const float *W, size_t n)
{
    if (!be->params_bf16) return NULL;
    /* compared as addresses: W need not point into the parameters at all */
    const uintptr_t w = (uintptr_t)W, p0 = (uintptr_t)be->params;
    if (w < p0 || w + n * sizeof *W > p0 + be->n_params * sizeof *W) return NULL;
    return be->params_bf16 + (w - p0) / sizeof *W;
}

/* Decoding reads the weights' bf16 copy at half the bytes; without one (a training pass of a
 * few rows), the float32 kernel. */
void cpu_linear_rows_bf16(const backend *be, float *y, const float *x, const float *W,
                          const float *b, int N, int in, int out)
{
    const uint16_t *W16 = bf16_weights(be, W, (size_t)in * out);
    if (W16)
        linear_rows_bf16(y, x, W16, b, N, in, out);
    else
        linear_rows_f32(y, x, W, b, N, in, out);
}

void cpu_linear_gemm_bf16(const backend *be, float *y, const float *x, const float *W,
                          const float *b, int N, int in, int out)
{
    gemm_bf16_linear(N, out, in, x, W, bf16_weights(be, W, (size_t)in * out), b, y, be->ws);
}

void cpu_linear_backward_bf16(const backend *be, float *dx, float *dW, float *db,
                              const float *dy, const float *x, const float *W, int N, int in,
                              int out)
{
    if (dx) gemm_bf16(0, 0, N, in, out, 1.0f, dy, out, W, in, 1.0f, dx, in, be->ws);
    if (dW) gemm_bf16(1, 0, out, in, N, 1.0f, dy, out, x, in, 1.0f, dW, in, be->ws);
    if (db) linear_bias_backward(db, dy, N, out);
}

/* ---- int8 weights and activations, int32 sums ------------------------------------------- */

/* W's quantised copy, or NULL: none current, W not among the model's parameters, or not one
 * of the weights the model quantises (precision.c says which). Binary search by offset. */
static const int8_matrix *int8_weights(const backend *be, const float *W, int in, int out)
{
    if (!be->int8) return NULL;
    const uintptr_t w = (uintptr_t)W, p0 = (uintptr_t)be->params;
    if (w < p0 || w >= p0 + be->n_params * sizeof *W || (w - p0) % sizeof *W) return NULL;
    const size_t offset = (w - p0) / sizeof *W;
    int lo = 0, hi = be->n_int8 - 1;
    while (lo <= hi) {
        const int mid = lo + (hi - lo) / 2;
        const int8_weight *q = &be->int8[mid];
        if (q->offset == offset) return q->q.in == in && q->q.out == out ? &q->q : NULL;
        if (q->offset < offset) lo = mid + 1;
        else hi = mid - 1;
    }
    return NULL;
}

/* One kernel for few rows and many (ops/cpu/gemm_int8.c tiles both); float32 where W has no
 * quantised copy or the activations' buffer cannot grow (no memory: slower, still right). */
void cpu_linear_int8(const backend *be, float *y, const float *x, const float *W, const float *b,
                     int N, int in, int out)
{
    const int8_matrix *q = int8_weights(be, W, in, out);
    if (q && be->ws8 && !gemm_int8_reserve(be->ws8, N, in, NULL)) {
        gemm_int8(y, x, q, b, N, be->ws8);
        return;
    }
    if (N <= SMALL_ROWS)
        linear_rows_f32(y, x, W, b, N, in, out);
    else
        linear_gemm_f32(y, x, W, b, N, in, out);
}

