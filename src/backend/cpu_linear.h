/* SPDX-License-Identifier: MIT */
/* The linear entries of the CPU backends' tables (backend/cpu.c). Private to the library. */
#ifndef QKV_BACKEND_CPU_LINEAR_H
#define QKV_BACKEND_CPU_LINEAR_H

#include "backend/backend.h"

/* float32: matrix-vector kernels for few rows, OpenBLAS's sgemm for many */
void cpu_linear_rows_f32(const backend *be, float *y, const float *x, const weight *W,
                         const float *b, int N, int in, int out);
void cpu_linear_gemm_f32(const backend *be, float *y, const float *x, const weight *W,
                         const float *b, int N, int in, int out);
void cpu_linear_backward_f32(const backend *be, float *dx, float *dW, float *db, const float *dy,
                             const float *x, const float *W, int N, int in, int out);

/* bf16 products and float32 sums, reading a weight's bf16 copy where it is typed bf16 and
 * its copy is current (be->typed_current) */
void cpu_linear_rows_bf16(const backend *be, float *y, const float *x, const weight *W,
                          const float *b, int N, int in, int out);
void cpu_linear_gemm_bf16(const backend *be, float *y, const float *x, const weight *W,
                          const float *b, int N, int in, int out);
void cpu_linear_backward_bf16(const backend *be, float *dx, float *dW, float *db,
                              const float *dy, const float *x, const float *W, int N, int in,
                              int out);

/* The choice after the output layer from its logits written out (the float32 and bf16
 * tables: the table's own product into scratch, then each row's k best and log_normaliser, in
 * double, as beam search always computed it). */
void cpu_linear_best_written(const backend *be, const best_request *rq, const float *x,
                             const weight *W, const float *b, int N, int in, int out,
                             float *scratch);
/* int8: gemm_int8_best for a weight typed int8 (the logits a chunk at a time), else as
 * cpu_linear_best_written. */
void cpu_linear_best_int8(const backend *be, const best_request *rq, const float *x,
                          const weight *W, const float *b, int N, int in, int out,
                          float *scratch);

/* int8 weights and activations (ops/cpu/int8.h) for a weight typed int8; float32 for any
 * other W. Inference only: the backward is float32's, and the
 * models refuse to train at int8 before it could run. */
void cpu_linear_int8(const backend *be, float *y, const float *x, const weight *W, const float *b,
                     int N, int in, int out);

#endif
