/* Elementwise nonlinearities of the position-wise FFN. */
#include <math.h>

#include "core/internal.h"

#define PARALLEL_MIN 32768

void qkv_relu_forward(float *y, const float *x, size_t n)
{
    #pragma omp parallel for simd if (n > PARALLEL_MIN)
    for (size_t i = 0; i < n; i++) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void qkv_relu_backward(float *dx, const float *dy, const float *x, size_t n)
{
    #pragma omp parallel for simd if (n > PARALLEL_MIN)
    for (size_t i = 0; i < n; i++) dx[i] += x[i] > 0.0f ? dy[i] : 0.0f;
}

/* GELU(x) = x Phi(x), Phi the standard normal CDF = (1 + erf(x / sqrt 2)) / 2. */
void qkv_gelu_forward(float *y, const float *x, size_t n)
{
    #pragma omp parallel for if (n > PARALLEL_MIN)
    for (size_t i = 0; i < n; i++) y[i] = 0.5f * x[i] * (1.0f + erff(x[i] * 0.7071067811865476f));
}

void qkv_gelu_backward(float *dx, const float *dy, const float *x, size_t n)
{
    #pragma omp parallel for if (n > PARALLEL_MIN)
    for (size_t i = 0; i < n; i++) dx[i] += dy[i] * gelu_grad(x[i]);
}
