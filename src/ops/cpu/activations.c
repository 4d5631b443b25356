/* SPDX-License-Identifier: MIT */
/* Elementwise nonlinearities of the position-wise FFN. */
#include <math.h>

#include "core/internal.h"
#include "ops/cpu/exp16.h"
#include "ops/cpu/fast_exp.h"

#define PARALLEL_MIN 32768
#define GELU_CHUNK 1024 /* values per GELU work item: a multiple of CDF_LANES */

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
    for (size_t i = 0; i < n; i += GELU_CHUNK)
        gelu_block(y + i, x + i, n - i < GELU_CHUNK ? n - i : GELU_CHUNK);
}

void qkv_gelu_backward(float *dx, const float *dy, const float *x, size_t n)
{
    #pragma omp parallel for if (n > PARALLEL_MIN)
    for (size_t i = 0; i < n; i += GELU_CHUNK) {
        const size_t c = n - i < GELU_CHUNK ? n - i : GELU_CHUNK;
        float g[GELU_CHUNK];
        gelu_grad_block(g, dy + i, x + i, c);
        for (size_t k = 0; k < c; k++) dx[i + k] += g[k];
    }
}

/* SiLU(x) = x sigmoid(x); sigmoid through exp(-|x|) so that no exp overflows. */
static inline float sigmoid(float x)
{
    const float e = expf(-fabsf(x));
    return x >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
}

void qkv_silu_forward(float *y, const float *x, size_t n)
{
    #pragma omp parallel for simd if (n > PARALLEL_MIN)
    for (size_t i = 0; i < n; i++) y[i] = x[i] * sigmoid(x[i]);
}

/* 16 values at i0 .. i0 + n - 1 (n <= 16) */
__attribute__((target("avx512f"))) static void silu16(float *y, const float *x, size_t i0, int n)
{
    const __mmask16 m = n >= 16 ? 0xffff : (__mmask16)((1u << n) - 1);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + i0), one = _mm512_set1_ps(1.0f);
    const __m512 e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_abs_ps(v))); /* e^-|x| */
    const __mmask16 pos = _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_GE_OQ);
    const __m512 s = _mm512_div_ps(_mm512_mask_blend_ps(pos, e, one), _mm512_add_ps(one, e));
    _mm512_mask_storeu_ps(y + i0, m, _mm512_mul_ps(v, s));
}

void silu_forward_fast(float *y, const float *x, size_t n)
{
    #pragma omp parallel for if (n > PARALLEL_MIN)
    for (size_t i = 0; i < n; i += 16) silu16(y, x, i, n - i < 16 ? (int)(n - i) : 16);
}

/* d/dx x s(x) = s(x) + x s(x) (1 - s(x)) */
static inline float silu_grad(float x)
{
    const float s = sigmoid(x);
    return s * (1.0f + x * (1.0f - s));
}

void qkv_silu_backward(float *dx, const float *dy, const float *x, size_t n)
{
    #pragma omp parallel for simd if (n > PARALLEL_MIN)
    for (size_t i = 0; i < n; i++) dx[i] += dy[i] * silu_grad(x[i]);
}

/* The FFN's backward through its activation: dh = dh * act'(h_pre), in place. */
void activation_grad_inplace(qkv_activation act, float *dh, const float *h_pre, size_t n)
{
    if (act == QKV_ACT_GELU) {
        #pragma omp parallel for if (n > PARALLEL_MIN)
        for (size_t e = 0; e < n; e += GELU_CHUNK)
            gelu_grad_block(dh + e, dh + e, h_pre + e, n - e < GELU_CHUNK ? n - e : GELU_CHUNK);
    } else if (act == QKV_ACT_SILU) {
        #pragma omp parallel for simd if (n > PARALLEL_MIN)
        for (size_t e = 0; e < n; e++) dh[e] *= silu_grad(h_pre[e]);
    } else {
        #pragma omp parallel for simd if (n > PARALLEL_MIN)
        for (size_t e = 0; e < n; e++) dh[e] = h_pre[e] > 0.0f ? dh[e] : 0.0f;
    }
}
