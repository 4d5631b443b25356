/* e^x as a polynomial that GCC vectorises (libm's expf is a call per element), for the
 * kernels whose loops are mostly exponentials (flash attention, the cross-entropy over the
 * vocabulary), and the row reductions around it. Private to the library. */
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

/* Row reductions over n floats for softmax-like kernels (the cross-entropy). They
 * keep VEC_LANES partial results and take VEC_LANES values per step, a fixed-size inner loop
 * that GCC vectorises at -O2 (a loop over n alone it leaves scalar). */
enum { VEC_LANES = 8 };

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
