/* SPDX-License-Identifier: MIT */
/* e^x for 16 floats at once with AVX-512, for the kernels that run only where the CPU has it
 * (the int8 table's). Private to the library. */
#ifndef QKV_OPS_CPU_EXP16_H
#define QKV_OPS_CPU_EXP16_H

#include <immintrin.h>

/* e^x for x <= 0 (ops/cpu/fast_exp.h's exp_poly, 16 at once): x = k ln2 + r, e^r by Cephes'
 * degree-7 polynomial (relative error < 1e-7), times 2^k by VSCALEFPS; x below -88 gives 0. */
__attribute__((target("avx512f"))) static inline __m512 exp16(__m512 x)
{
    const __mmask16 tiny = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-88.0f), _CMP_LT_OQ);
    const __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fmadd_ps(k, _mm512_set1_ps(-0.693359375f), x);
    r = _mm512_fmadd_ps(k, _mm512_set1_ps(2.12194440e-4f), r);
    __m512 e = _mm512_set1_ps(1.9875691500e-4f);
    e = _mm512_fmadd_ps(e, r, _mm512_set1_ps(1.3981999507e-3f));
    e = _mm512_fmadd_ps(e, r, _mm512_set1_ps(8.3334519073e-3f));
    e = _mm512_fmadd_ps(e, r, _mm512_set1_ps(4.1665795894e-2f));
    e = _mm512_fmadd_ps(e, r, _mm512_set1_ps(1.6666665459e-1f));
    e = _mm512_fmadd_ps(e, r, _mm512_set1_ps(5.0000001201e-1f));
    e = _mm512_add_ps(_mm512_fmadd_ps(_mm512_mul_ps(e, r), r, r), _mm512_set1_ps(1.0f));
    return _mm512_maskz_mov_ps((__mmask16)~tiny, _mm512_scalef_ps(e, k));
}

#endif
