/* SPDX-License-Identifier: MIT */
/* y = x W^T + b for a few rows of x with W in bf16 (a decoding step under
 * QKV_PRECISION_BF16); see bf16.h.
 * A decoding step is bound by reading the weights: every row of W crosses the memory bus once
 * per token. Stored in bf16, W is half the bytes; each weight is widened back to float32
 * (exactly: a bf16 is the top half of a float32) and multiplied in float32 with the float32
 * activations, so the only rounding beyond float32's is the weights' own. The tiling is
 * ops/cpu/row_tiles.h's, as for float32 weights. Every y[i, o] is the same sequence of
 * operations whichever kernel computes it (16 lanes of partial sums over k in order, then one
 * fixed reduction), so a row's result does not depend on M. */
#include <immintrin.h>

#include "core/internal.h"
#include "ops/cpu/bf16.h"
#include "ops/cpu/row_tiles.h"

#define AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))

/* Weight matrices smaller than this many values (in * out) run on one thread, as in the
 * float32 kernel: waking a second one costs more than reading them. */
#define PARALLEL_MIN (1L << 15)

static inline __mmask16 first16(int n) { return n >= 16 ? 0xffff : (__mmask16)((1u << n) - 1); }

/* 16 bf16 weights from w (the first n; the rest 0) as float32. */
AVX512_BF16 static inline __m512 widen(const uint16_t *w, __mmask16 m)
{
    __m256i h = _mm256_maskz_loadu_epi16(m, w);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* y[o] = x . w_o for 1 row of x and 8 rows of W (in, row stride in): 8 streams from memory. */
AVX512_BF16 static void dot_1x8(float *y, const float *x, const void *W_, int in)
{
    const uint16_t *W = W_;
    __m512 acc[8];
    for (int o = 0; o < 8; o++) acc[o] = _mm512_setzero_ps();
    for (int k = 0; k < in; k += 16) {
        const __mmask16 m = first16(in - k);
        const __m512 xv = _mm512_maskz_loadu_ps(m, x + k);
        #pragma GCC unroll 8
        for (int o = 0; o < 8; o++)
            acc[o] = _mm512_fmadd_ps(xv, widen(W + (size_t)o * in + k, m), acc[o]);
    }
    for (int o = 0; o < 8; o++) y[o] = _mm512_reduce_add_ps(acc[o]);
}

/* y[i, o] = x_i . w_o for 2 rows of x (row stride in) and 4 rows of W; y row stride ldy. */
AVX512_BF16 static void dot_2x4(float *y, int ldy, const float *x, const void *W_, int in)
{
    const uint16_t *W = W_;
    __m512 a0[4], a1[4];
    for (int o = 0; o < 4; o++) a0[o] = a1[o] = _mm512_setzero_ps();
    for (int k = 0; k < in; k += 16) {
        const __mmask16 m = first16(in - k);
        const __m512 x0 = _mm512_maskz_loadu_ps(m, x + k);
        const __m512 x1 = _mm512_maskz_loadu_ps(m, x + in + k);
        #pragma GCC unroll 4
        for (int o = 0; o < 4; o++) {
            const __m512 w = widen(W + (size_t)o * in + k, m);
            a0[o] = _mm512_fmadd_ps(x0, w, a0[o]);
            a1[o] = _mm512_fmadd_ps(x1, w, a1[o]);
        }
    }
    for (int o = 0; o < 4; o++) {
        y[o] = _mm512_reduce_add_ps(a0[o]);
        y[ldy + o] = _mm512_reduce_add_ps(a1[o]);
    }
}

/* x . w for one row of each (the out % 8 rows of W left over by the tiles). */
AVX512_BF16 static float dot_1x1(const float *x, const void *w_, int in)
{
    const uint16_t *w = w_;
    __m512 acc = _mm512_setzero_ps();
    for (int k = 0; k < in; k += 16) {
        const __mmask16 m = first16(in - k);
        acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, x + k), widen(w + k, m), acc);
    }
    return _mm512_reduce_add_ps(acc);
}

static const row_kernels BF16_ROWS = {dot_1x8, dot_2x4, dot_1x1, sizeof(uint16_t),
                                      PARALLEL_MIN};

/* x (M, in), W (out, in) bf16, b (out) or NULL -> y (M, out) */
void linear_rows_bf16(float *y, const float *x, const uint16_t *W, const float *b, int M,
                      int in, int out)
{
    row_tiles_forward(&BF16_ROWS, y, x, W, b, M, in, out);
}
