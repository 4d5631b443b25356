/* SPDX-License-Identifier: MIT */
/* The float32 linear layer's kernels: y (N, out) = x (N, in) W^T + b over few rows
 * (matrix-vector products that read W once) or through OpenBLAS's GEMM, and the backward.
 * Private to the library. */
#ifndef QKV_OPS_CPU_LINEAR_H
#define QKV_OPS_CPU_LINEAR_H

/* Up to this many rows the matrix-vector kernel is faster (ops/cpu/linear.c says why). */
#define SMALL_ROWS 12

void linear_rows_f32(float *y, const float *x, const float *W, const float *b, int N, int in,
                     int out);
void linear_gemm_f32(float *y, const float *x, const float *W, const float *b, int N, int in,
                     int out);
/* dx (N, in) += dy W;  dW (out, in) += dy^T x;  db (out) += column sums of dy (any may be
 * NULL) */
void linear_backward_f32(float *dx, float *dW, float *db, const float *dy, const float *x,
                         const float *W, int N, int in, int out);
/* db (out) += sum_i dy[i] */
void linear_bias_backward(float *db, const float *dy, int N, int out);

#endif
