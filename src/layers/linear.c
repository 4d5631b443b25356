/* SPDX-License-Identifier: MIT */
/* The public linear layer, y = x W^T + b: float32 on the CPU backend (ops/cpu/linear.c). */
#include "layers/layers.h"

void qkv_linear_forward(float *y, const float *x, const float *W, const float *b, int N, int in,
                        int out)
{
    const backend be = backend_cpu();
    const weight w = weight_f32(W);
    op_linear_forward(&be, y, x, &w, b, N, in, out);
}

void qkv_linear_backward(float *dx, float *dW, float *db, const float *dy, const float *x,
                         const float *W, int N, int in, int out)
{
    const backend be = backend_cpu();
    op_linear_backward(&be, dx, dW, db, dy, x, W, N, in, out);
}
