/* The linear layer's kernels, as the CPU backends' tables hold them (backend/backend.h):
 * y (N, out) = x (N, in) W^T + b over few rows (matrix-vector products that read W once) or
 * through a GEMM, and the backward. Private to the library. */
#ifndef QKV_LINEAR_H
#define QKV_LINEAR_H

#include "backend/backend.h"

/* Up to this many rows the matrix-vector kernel is faster (layers/linear.c says why). */
#define SMALL_ROWS 12

void linear_rows_f32(const backend *be, float *y, const float *x, const float *W, const float *b,
                     int N, int in, int out);
void linear_gemm_f32(const backend *be, float *y, const float *x, const float *W, const float *b,
                     int N, int in, int out);
void linear_backward_f32(const backend *be, float *dx, float *dW, float *db, const float *dy,
                         const float *x, const float *W, int N, int in, int out);

/* The same with bf16 products and float32 sums, reading the weights' bf16 copy where the
 * backend has a current one (be->params_bf16). */
void linear_rows_bf16w(const backend *be, float *y, const float *x, const float *W,
                       const float *b, int N, int in, int out);
void linear_gemm_bf16(const backend *be, float *y, const float *x, const float *W,
                      const float *b, int N, int in, int out);
void linear_backward_bf16(const backend *be, float *dx, float *dW, float *db, const float *dy,
                          const float *x, const float *W, int N, int in, int out);

/* int8 weights and activations (kernels/int8.h) for the weights the backend holds quantised
 * (be->int8); float32 for any other W. Inference only: the backward is float32's, and the
 * models refuse to train at int8 before it could run. */
void linear_forward_int8(const backend *be, float *y, const float *x, const float *W,
                         const float *b, int N, int in, int out);

#endif
