/* y = x W^T + b for a few rows of x with W in bf16 (a decoding step under
 * QKV_PRECISION_BF16); see bf16.h.
 * A decoding step is bound by reading the weights: every row of W crosses the memory bus once
 * per token. Stored in bf16, W is half the bytes; each weight is widened back to float32
 * (exactly: a bf16 is the top half of a float32) and multiplied in float32 with the float32
 * activations, so the only rounding beyond float32's is the weights' own. The tiling is that of
 * the float32 kernel in src/layers/linear.c: per tile of 8 rows of W, row 0 of x reads the tile
 * from memory, the other rows reuse it from cache, 2 rows x 4 weights at a time. Every y[i, o]
 * is the same sequence of operations whichever variant computes it (16 lanes of partial sums
 * over k in order, then one fixed reduction), so a row's result does not depend on M. */
#include <immintrin.h>

#include "core/internal.h"
#include "kernels/bf16.h"

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
AVX512_BF16 static void dot_1x8(float *y, const float *x, const uint16_t *W, int in)
{
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
AVX512_BF16 static void dot_2x4(float *y, int ldy, const float *x, const uint16_t *W, int in)
{
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
AVX512_BF16 static float dot_1x1(const float *x, const uint16_t *w, int in)
{
    __m512 acc = _mm512_setzero_ps();
    for (int k = 0; k < in; k += 16) {
        const __mmask16 m = first16(in - k);
        acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, x + k), widen(w + k, m), acc);
    }
    return _mm512_reduce_add_ps(acc);
}

AVX512_BF16 static void tile(float *yt, int out, const float *x, const uint16_t *Wt, int M,
                             int in, int width)
{
    if (width == 8 && M > 0) {
        dot_1x8(yt, x, Wt, in);
        int i = 1;
        for (; i + 2 <= M; i += 2) {
            dot_2x4(yt + (size_t)i * out, out, x + (size_t)i * in, Wt, in);
            dot_2x4(yt + (size_t)i * out + 4, out, x + (size_t)i * in, Wt + (size_t)4 * in, in);
        }
        if (i < M) dot_1x8(yt + (size_t)i * out, x + (size_t)i * in, Wt, in);
    } else {
        for (int i = 0; i < M; i++)
            for (int o = 0; o < width; o++)
                yt[(size_t)i * out + o] = dot_1x1(x + (size_t)i * in, Wt + (size_t)o * in, in);
    }
}

/* x (M, in), W (out, in) bf16, b (out) or NULL -> y (M, out) */
void linear_rows_bf16(float *y, const float *x, const uint16_t *W, const float *b, int M,
                      int in, int out)
{
    const int tiles = (out + 7) / 8; /* the last one may be partial */
    #pragma omp parallel for schedule(dynamic, 4) if ((long)in * out >= PARALLEL_MIN)
    for (int t = 0; t < tiles; t++) {
        const int o0 = 8 * t, width = out - o0 < 8 ? out - o0 : 8;
        tile(y + o0, out, x, W + (size_t)o0 * in, M, in, width);
        if (b)
            for (int i = 0; i < M; i++)
                for (int o = 0; o < width; o++) y[(size_t)i * out + o0 + o] += b[o0 + o];
    }
}
