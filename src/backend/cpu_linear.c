/* SPDX-License-Identifier: MIT */
/* The linear entries of the CPU backends' tables (backend.h): float32 (ops/cpu/linear.c), bf16
 * products with float32 sums (ops/cpu/bf16.h) and int8 products with int32 sums
 * (ops/cpu/int8.h), each finding the weights' copy of its type where the model holds one. */
#include <omp.h>

#include "backend/cpu_linear.h"
#include "ops/cpu/linear.h"

/* ---- float32 ------------------------------------------------------------------------------ */

void cpu_linear_rows_f32(const backend *be, float *y, const float *x, const weight *W,
                         const float *b, int N, int in, int out)
{
    (void)be;
    linear_rows_f32(y, x, W->f32, b, N, in, out);
}

void cpu_linear_gemm_f32(const backend *be, float *y, const float *x, const weight *W,
                         const float *b, int N, int in, int out)
{
    (void)be;
    linear_gemm_f32(y, x, W->f32, b, N, in, out);
}

void cpu_linear_backward_f32(const backend *be, float *dx, float *dW, float *db, const float *dy,
                             const float *x, const float *W, int N, int in, int out)
{
    (void)be;
    linear_backward_f32(dx, dW, db, dy, x, W, N, in, out);
}

/* ---- bf16 products, float32 sums --------------------------------------------------------- */

/* W's bf16 copy, or NULL: W is not typed bf16, or its copy is older than the parameters (a
 * training pass: the products round the float32 weights as they go). */
static const uint16_t *bf16_copy(const backend *be, const weight *W)
{
    return W->type == WEIGHT_BF16 && be->typed_current ? W->bf16 : NULL;
}

/* Decoding reads the weights' bf16 copy at half the bytes; without one (a training pass of a
 * few rows), the float32 kernel. */
void cpu_linear_rows_bf16(const backend *be, float *y, const float *x, const weight *W,
                          const float *b, int N, int in, int out)
{
    const uint16_t *W16 = bf16_copy(be, W);
    if (W16)
        linear_rows_bf16(y, x, W16, b, N, in, out);
    else
        linear_rows_f32(y, x, W->f32, b, N, in, out);
}

void cpu_linear_gemm_bf16(const backend *be, float *y, const float *x, const weight *W,
                          const float *b, int N, int in, int out)
{
    gemm_bf16_linear(N, out, in, x, W->f32, bf16_copy(be, W), b, y, be->ws);
}

void cpu_linear_backward_bf16(const backend *be, float *dx, float *dW, float *db,
                              const float *dy, const float *x, const float *W, int N, int in,
                              int out)
{
    if (dx) gemm_bf16(0, 0, N, in, out, 1.0f, dy, out, W, in, 1.0f, dx, in, be->ws);
    if (dW) gemm_bf16(1, 0, out, in, N, 1.0f, dy, out, x, in, 1.0f, dW, in, be->ws);
    if (db) linear_bias_backward(db, dy, N, out);
}

/* ---- the choice after the output layer -------------------------------------------------- */

void cpu_linear_best_written(const backend *be, const best_request *rq, const float *x,
                             const weight *W, const float *b, int N, int in, int out,
                             float *scratch)
{
    op_linear_forward(be, scratch, x, W, b, N, in, out);
    #pragma omp parallel for if (N > 1 && rq->lse)
    for (int r = 0; r < N; r++) {
        const float *y = scratch + (size_t)r * out;
        row_best(y, out, rq->k, rq->banned, rq->ids + (size_t)r * rq->k,
                 rq->vals + (size_t)r * rq->k);
        if (rq->lse) rq->lse[r] = log_normaliser(y, out);
    }
    if (rq->nonfinite) *rq->nonfinite = !all_finite(scratch, (size_t)N * out);
}

void cpu_linear_best_int8(const backend *be, const best_request *rq, const float *x,
                          const weight *W, const float *b, int N, int in, int out,
                          float *scratch)
{
    if (W->type == WEIGHT_INT8 && be->typed_current && be->ws8 &&
        !gemm_int8_reserve(be->ws8, N, in, NULL) &&
        !gemm_int8_reserve_best(be->ws8, N, out, rq->k, omp_get_max_threads(), NULL)) {
        gemm_int8_best(rq, x, W->int8, b, N, be->ws8);
        return;
    }
    cpu_linear_best_written(be, rq, x, W, b, N, in, out, scratch);
}

/* ---- int8 weights and activations, int32 sums ------------------------------------------- */

/* One kernel for few rows and many (ops/cpu/gemm_int8.c tiles both) for a weight typed int8
 * (models/precision.c says which are, and why); float32 for any other, and where the
 * activations' buffer cannot grow (no memory: slower, still right). */
void cpu_linear_int8(const backend *be, float *y, const float *x, const weight *W, const float *b,
                     int N, int in, int out)
{
    if (W->type == WEIGHT_INT8 && be->typed_current && be->ws8 &&
        !gemm_int8_reserve(be->ws8, N, in, NULL)) {
        gemm_int8(y, x, W->int8, b, N, be->ws8);
        return;
    }
    if (N <= SMALL_ROWS)
        linear_rows_f32(y, x, W->f32, b, N, in, out);
    else
        linear_gemm_f32(y, x, W->f32, b, N, in, out);
}
