/* SPDX-License-Identifier: MIT */
/* The linear entries of the CPU backends' tables (backend/cpu.c). Private to the library. */
#ifndef QKV_BACKEND_CPU_LINEAR_H
#define QKV_BACKEND_CPU_LINEAR_H

#include "backend/backend.h"

/* float32: matrix-vector kernels for few rows, OpenBLAS's sgemm for many */
void cpu_linear_rows_f32(const backend *be, float *y, const float *x, const float *W,
                         const float *b, int N, int in, int out);
void cpu_linear_gemm_f32(const backend *be, float *y, const float *x, const float *W,
                         const float *b, int N, int in, int out);
void cpu_linear_backward_f32(const backend *be, float *dx, float *dW, float *db, const float *dy,
                             const float *x, const float *W, int N, int in, int out);

/* bf16 products and float32 sums, reading the weights' bf16 copy where the backend has a
 * current one (be->params_bf16) */
void cpu_linear_rows_bf16(const backend *be, float *y, const float *x, const float *W,
                          const float *b, int N, int in, int out);
void cpu_linear_gemm_bf16(const backend *be, float *y, const float *x, const float *W,
                          const float *b, int N, int in, int out);
void cpu_linear_backward_bf16(const backend *be, float *dx, float *dW, float *db,
                              const float *dy, const float *x, const float *W, int N, int in,
                              int out);

/* int8 weights and activations (ops/cpu/int8.h) for the weights the backend holds quantised
 * (be->int8); float32 for any other W. Inference only: the backward is float32's, and the
 * models refuse to train at int8 before it could run. */
void cpu_linear_int8(const backend *be, float *y, const float *x, const float *W, const float *b,
                     int N, int in, int out);

#endif
