/* SPDX-License-Identifier: MIT */
/* e^x as a polynomial that GCC vectorises (libm's expf is a call per element), for the
 * kernels whose loops are mostly exponentials (flash attention, the cross-entropy over the
 * vocabulary, GELU's normal CDF), and the row reductions around it. Private to the library. */
#ifndef QKV_FAST_EXP_H
#define QKV_FAST_EXP_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* a b + c, fused where the hardware has FMA (-std=c11 keeps the compiler from fusing it) */
#ifdef FP_FAST_FMAF
#define MULADD(a, b, c) fmaf(a, b, c)
#else
#define MULADD(a, b, c) ((a) * (b) + (c))
#endif

/* e^x for -88 <= x <~ 1 (Cephes expf): x = k ln2 + r with |r| <= ln2 / 2, e^r by a degree-7
 * polynomial, 2^k written into the exponent bits. Relative error < 1e-7; x = -88 gives k =
 * -127, whose 2^k bits are +0, so it returns exactly 0 (e^-88 is below FLT_MIN anyway). The
 * caller clamps x to >= -88. */
static inline float exp_poly(float x)
{
    float k = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* round(x / ln2) */
    float r = MULADD(k, -0.693359375f, x); /* x - k ln2, ln2 in two parts so r stays exact */
    r = MULADD(k, 2.12194440e-4f, r);
    float e = 1.9875691500e-4f;
    e = MULADD(e, r, 1.3981999507e-3f);
    e = MULADD(e, r, 8.3334519073e-3f);
    e = MULADD(e, r, 4.1665795894e-2f);
    e = MULADD(e, r, 1.6666665459e-1f);
    e = MULADD(e, r, 5.0000001201e-1f);
    e = MULADD(e * r, r, r) + 1.0f;
    /* k is in [-127, 127] for such x; a NaN x makes k NaN, whose conversion to int would be
     * undefined: it becomes -127, and the NaN in e carries through to the result. */
    k = k > -127.0f ? k : -127.0f;
    uint32_t bits = (uint32_t)((int32_t)k + 127) << 23;
    float two_k;
    memcpy(&two_k, &bits, sizeof two_k);
    return e * two_k;
}

/* The standard normal CDF Phi(x) = erfc(-x / sqrt 2) / 2, for the exact GELU (libm's erff
 * is a call per element, and was a quarter of a GELU model's training step). erfc(z), z >= 0,
 * is Numerical Recipes' Chebyshev fit (Press et al., "Numerical Recipes", 6.2, erfcc):
 *   erfc(z) = t exp(-z^2 - 1.26551223 + t (1.00002368 + ... + t 0.17087277)), t = 1 / (1 + z/2),
 * relative error < 1.2e-7 for every z >= 0. Taking the tail of whichever side x is on keeps
 * Phi accurate relative to itself for x << 0 too (1 - (1 - e) would cancel). NaN gives NaN.
 */

/* Phi(x) for CDF_LANES values at once, in and out of local arrays. Each select is a loop of
 * its own, and every loop works on locals (no pointer that might alias another): that is
 * what GCC's -O2 cost model vectorises. 32 values are four AVX registers, four independent
 * chains of dependent multiply-adds: one register's chain alone waits on each latency (2x
 * slower, measured). */
enum { VEC_LANES = 8, CDF_LANES = 32 };
#if defined(__GNUC__)
#define LANES_INLINE static inline __attribute__((always_inline))
#else
#define LANES_INLINE static inline
#endif
/* (always inlined: a call of its own, with pointer arguments, is not vectorised) */
LANES_INLINE void normal_cdf_lanes(float *phi, const float *x)
{
    float t[CDF_LANES], a[CDF_LANES];
    for (int l = 0; l < CDF_LANES; l++) {
        float z = fabsf(x[l]) * 0.7071067811865476f;
        t[l] = 1.0f / MULADD(0.5f, z, 1.0f);
        float p = 0.17087277f;
        p = MULADD(p, t[l], -0.82215223f);
        p = MULADD(p, t[l], 1.48851587f);
        p = MULADD(p, t[l], -1.13520398f);
        p = MULADD(p, t[l], 0.27886807f);
        p = MULADD(p, t[l], -0.18628806f);
        p = MULADD(p, t[l], 0.09678418f);
        p = MULADD(p, t[l], 0.37409196f);
        p = MULADD(p, t[l], 1.00002368f);
        p = MULADD(p, t[l], -1.26551223f);
        a[l] = MULADD(-z, z, p);
    }
    for (int l = 0; l < CDF_LANES; l++) a[l] = a[l] < -88.0f ? -88.0f : a[l];
    for (int l = 0; l < CDF_LANES; l++) a[l] = 0.5f * t[l] * exp_poly(a[l]); /* Phi(-|x|) */
    /* Phi(-|x|) + [x >= 0] (1 - 2 Phi(-|x|)): 1 - tail for x >= 0, else the tail itself
     * (exact, so relative accuracy holds far into the lower tail), without a branch */
    float up[CDF_LANES];
    for (int l = 0; l < CDF_LANES; l++) up[l] = (float)(x[l] >= 0.0f);
    for (int l = 0; l < CDF_LANES; l++) phi[l] = MULADD(up[l], MULADD(-2.0f, a[l], 1.0f), a[l]);
}

/* Phi(x) for one value (the tails of the lane loops). */
static inline float normal_cdf(float x)
{
    float z = fabsf(x) * 0.7071067811865476f;
    float t = 1.0f / MULADD(0.5f, z, 1.0f);
    float p = 0.17087277f;
    p = MULADD(p, t, -0.82215223f);
    p = MULADD(p, t, 1.48851587f);
    p = MULADD(p, t, -1.13520398f);
    p = MULADD(p, t, 0.27886807f);
    p = MULADD(p, t, -0.18628806f);
    p = MULADD(p, t, 0.09678418f);
    p = MULADD(p, t, 0.37409196f);
    p = MULADD(p, t, 1.00002368f);
    p = MULADD(p, t, -1.26551223f);
    float a = MULADD(-z, z, p);
    float tail = 0.5f * t * exp_poly(a < -88.0f ? -88.0f : a);
    return x >= 0.0f ? 1.0f - tail : tail;
}

/* GELU's loops also built for AVX-512 where the CPU has it, chosen when the program loads:
 * twice the lanes of the AVX2 baseline the library is compiled for. Each value goes through
 * the same operations either way (no reductions), so the results are bit-identical. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define WIDE_CLONES __attribute__((target_clones("arch=x86-64-v4", "default")))
#else
#define WIDE_CLONES
#endif

/* y = GELU(x) = x Phi(x) over n values: the exact (erf) form of torch.nn.GELU(). */
WIDE_CLONES static inline void gelu_block(float *y, const float *x, size_t n)
{
    size_t i = 0;
    float xs[CDF_LANES], phi[CDF_LANES];
    for (; i + CDF_LANES <= n; i += CDF_LANES) {
        for (int l = 0; l < CDF_LANES; l++) xs[l] = x[i + l];
        normal_cdf_lanes(phi, xs);
        for (int l = 0; l < CDF_LANES; l++) phi[l] *= xs[l];
        for (int l = 0; l < CDF_LANES; l++) y[i + l] = phi[l];
    }
    for (; i < n; i++) y[i] = x[i] * normal_cdf(x[i]);
}

/* g = dy * GELU'(x) over n values, GELU'(x) = Phi(x) + x phi(x), phi(x) = e^(-x^2/2) /
 * sqrt(2 pi). g may be dy (in place). */
WIDE_CLONES static inline void gelu_grad_block(float *g, const float *dy, const float *x, size_t n)
{
    size_t i = 0;
    float xs[CDF_LANES], d[CDF_LANES], phi[CDF_LANES], e[CDF_LANES];
    for (; i + CDF_LANES <= n; i += CDF_LANES) {
        for (int l = 0; l < CDF_LANES; l++) xs[l] = x[i + l];
        for (int l = 0; l < CDF_LANES; l++) d[l] = dy[i + l];
        normal_cdf_lanes(phi, xs);
        for (int l = 0; l < CDF_LANES; l++) e[l] = -0.5f * xs[l] * xs[l];
        for (int l = 0; l < CDF_LANES; l++) e[l] = e[l] < -88.0f ? -88.0f : e[l];
        for (int l = 0; l < CDF_LANES; l++) e[l] = exp_poly(e[l]);
        for (int l = 0; l < CDF_LANES; l++)
            d[l] *= MULADD(xs[l] * 0.3989422804014327f, e[l], phi[l]);
        for (int l = 0; l < CDF_LANES; l++) g[i + l] = d[l];
    }
    for (; i < n; i++) {
        float a = -0.5f * x[i] * x[i];
        g[i] = dy[i] * MULADD(x[i] * 0.3989422804014327f, exp_poly(a < -88.0f ? -88.0f : a),
                              normal_cdf(x[i]));
    }
}

/* Row reductions over n floats for softmax-like kernels (the cross-entropy). They
 * keep VEC_LANES partial results and take VEC_LANES values per step, a fixed-size inner loop
 * that GCC vectorises at -O2 (a loop over n alone it leaves scalar). */

/* max_k z_k (a NaN is passed over here and caught by vec_sum_exp) */
static inline float vec_max(const float *z, int n)
{
    float m[VEC_LANES];
    for (int l = 0; l < VEC_LANES; l++) m[l] = -INFINITY;
    int k = 0;
    for (; k + VEC_LANES <= n; k += VEC_LANES)
        for (int l = 0; l < VEC_LANES; l++) m[l] = z[k + l] > m[l] ? z[k + l] : m[l];
    float mx = -INFINITY;
    for (int l = 0; l < VEC_LANES; l++) mx = m[l] > mx ? m[l] : mx;
    for (; k < n; k++) mx = z[k] > mx ? z[k] : mx;
    return mx;
}

/* e^(z - mx), 0 for z - mx < -88; a NaN stays NaN (so a non-finite input shows in the sum). */
static inline float exp_shifted(float z, float mx)
{
    float x = z - mx;
    return exp_poly(x < -88.0f ? -88.0f : x);
}

/* sum_k e^(z_k - mx); with e not NULL, e_k is also written there (e may be z). The clamp
 * of a lane block is a loop of its own, so that it stays branch-free. */
static inline float vec_sum_exp(float *e, const float *z, int n, float mx)
{
    float part[VEC_LANES] = {0}, x[VEC_LANES];
    int k = 0;
    for (; k + VEC_LANES <= n; k += VEC_LANES) {
        for (int l = 0; l < VEC_LANES; l++) x[l] = z[k + l] - mx;
        for (int l = 0; l < VEC_LANES; l++) x[l] = x[l] < -88.0f ? -88.0f : x[l];
        for (int l = 0; l < VEC_LANES; l++) x[l] = exp_poly(x[l]);
        for (int l = 0; l < VEC_LANES; l++) part[l] += x[l];
        if (e)
            for (int l = 0; l < VEC_LANES; l++) e[k + l] = x[l];
    }
    float s = 0.0f;
    for (int l = 0; l < VEC_LANES; l++) s += part[l];
    for (; k < n; k++) {
        float v = exp_shifted(z[k], mx);
        s += v;
        if (e) e[k] = v;
    }
    return s;
}

/* sum_k z_k */
static inline float vec_sum(const float *z, int n)
{
    float part[VEC_LANES] = {0};
    int k = 0;
    for (; k + VEC_LANES <= n; k += VEC_LANES)
        for (int l = 0; l < VEC_LANES; l++) part[l] += z[k + l];
    float s = 0.0f;
    for (int l = 0; l < VEC_LANES; l++) s += part[l];
    for (; k < n; k++) s += z[k];
    return s;
}

#endif
