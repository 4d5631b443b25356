/* SPDX-License-Identifier: MIT */
/* bf16 GEMM with float32 accumulation on AVX512-BF16; see gemm_bf16.h.
 *
 * The structure is the usual one for a GEMM (Goto's, as BLIS lays it out):
 *   for each block of KC along K:
 *     pack op(B) (KC, N) into panels of NR columns           (all threads, shared)
 *     for each block of MC rows of op(A), on some thread:
 *       pack it into panels of MR rows                        (the thread's own)
 *       for each panel of B, for each panel of A: the MR x NR micro-kernel
 * A B panel (KC x NR in bf16, 16 KB) stays in L1 while the A panels (MC x KC, 96 KB) stream
 * from L2 past it. Packing is where the float32 operands become bf16, and where they are laid
 * out as VDPBF16PS reads them: element (k, j) of a B panel sits beside (k + 1, j), so one
 * 64-byte load holds 16 columns x one pair of k; an A panel holds, per pair of k, the MR rows'
 * pairs, each broadcast to all 16 lanes. An odd K gets a zero partner, partial panels get
 * zero rows and columns, so the micro-kernel never looks at an edge until it stores.
 * The AVX-512 code is compiled for AVX-512 function by function (target attributes), so the
 * rest of the library keeps its x86-64-v3 baseline; callers check gemm_bf16_supported(). */
#include <immintrin.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "ops/cpu/bf16.h"

#define AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))

enum {
    MR = 12,            /* rows of a micro-tile: 12 x 2 accumulators, 2 B vectors, 6 free */
    NR = 32,            /* columns of a micro-tile: two vectors of 16 float32 sums */
    KC = 512,           /* K per block: a B panel is KC/2 x NR pairs = 32 KB (L1) */
    KCP = KC / 2,       /* pairs per block */
    MC = 8 * MR,        /* rows of op(A) per block: MC x KCP pairs = 96 KB (L2) */
    NC = 2048,         /* columns of op(B) per block: KCP x NC pairs = 2 MB (L3) */
    B_WORDS = KCP * NC, /* the packed B block, in pairs (uint32) */
    A_WORDS = KCP * MC, /* one thread's packed A block */
};

int gemm_bf16_supported(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512bf16");
}

qkv_status gemm_bf16_reserve(gemm_bf16_workspace *ws, int threads, qkv_error *err)
{
    if (threads < 1) threads = 1;
    if (ws->buf && ws->threads >= threads) return QKV_OK;
    void *p = NULL;
    size_t bytes = ((size_t)B_WORDS + A_WORDS) * threads * sizeof(uint32_t);
    if (posix_memalign(&p, 64, bytes))
        return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for the bf16 GEMM's packing buffers "
                        "(%zu KiB)", bytes >> 10);
    free(ws->buf);
    ws->buf = p, ws->threads = threads;
    return QKV_OK;
}

void gemm_bf16_workspace_free(gemm_bf16_workspace *ws)
{
    free(ws->buf);
    ws->buf = NULL, ws->threads = 0;
}

/* ---- packing ---------------------------------------------------------------------------- */

/* The first n of 16 (32) lanes. */
static inline __mmask16 lanes16(int n)
{
    return n >= 16 ? 0xffff : n <= 0 ? 0 : (__mmask16)((1u << n) - 1);
}

static inline __mmask32 lanes32(int n)
{
    return n >= 32 ? 0xffffffffu : n <= 0 ? 0 : (__mmask32)((1u << n) - 1);
}

/* 16 floats of row r0 and 16 of row r1 (the next k) -> 16 pairs (r0[j], r1[j]) in bf16, lane
 * j of the result; the first n lanes are read, the rest are zero; r1 NULL: zero partners. */
AVX512_BF16 static inline __m512i pairs_of_rows(const float *r0, const float *r1, int n)
{
    /* cvtne2ps puts its second operand's 16 values in the low half: r0 in 0-15, r1 in 16-31;
     * the permutation interleaves them */
    const __m512i interleave = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10,
                                                25, 9, 24, 8, 23, 7, 22, 6, 21, 5, 20, 4, 19,
                                                3, 18, 2, 17, 1, 16, 0);
    const __mmask16 m = lanes16(n);
    __m512 v0 = _mm512_maskz_loadu_ps(m, r0);
    __m512 v1 = r1 ? _mm512_maskz_loadu_ps(m, r1) : _mm512_setzero_ps();
    __m512i h = (__m512i)_mm512_cvtne2ps_pbh(v1, v0);
    return _mm512_permutexvar_epi16(interleave, h);
}

/* 32 consecutive floats of a row (the first n read, the rest zero) -> 16 pairs in bf16:
 * lane q holds elements 2q and 2q + 1, which is how the pairs lie along a row already. */
AVX512_BF16 static inline __m512i pairs_along_row(const float *r, int n)
{
    __m512 lo = _mm512_maskz_loadu_ps(lanes16(n), r);
    __m512 hi = _mm512_maskz_loadu_ps(lanes16(n - 16), r + 16);
    return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
}

/* The same from a row already in bf16. */
AVX512_BF16 static inline __m512i pairs_along_row16(const uint16_t *r, int n)
{
    return _mm512_maskz_loadu_epi16(lanes32(n), r);
}

/* Transposes 16 x 16 32-bit elements: r[i] lane j -> r[j] lane i. Three rounds: pairs of
 * 32-bit lanes, then of 64-bit, leaving 4 x 4 transposed within each 128-bit block; then
 * the 4 x 4 blocks of 128 bits. */
AVX512_BF16 static inline void transpose16(__m512i r[16])
{
    __m512i t[16], u[16];
    for (int g = 0; g < 4; g++) { /* rows 4g .. 4g + 3 */
        __m512i *x = r + 4 * g;
        t[4 * g + 0] = _mm512_unpacklo_epi32(x[0], x[1]);
        t[4 * g + 1] = _mm512_unpackhi_epi32(x[0], x[1]);
        t[4 * g + 2] = _mm512_unpacklo_epi32(x[2], x[3]);
        t[4 * g + 3] = _mm512_unpackhi_epi32(x[2], x[3]);
        /* u[4g + c]: in 128-bit block b, column 4b + c of rows 4g .. 4g + 3 */
        u[4 * g + 0] = _mm512_unpacklo_epi64(t[4 * g + 0], t[4 * g + 2]);
        u[4 * g + 1] = _mm512_unpackhi_epi64(t[4 * g + 0], t[4 * g + 2]);
        u[4 * g + 2] = _mm512_unpacklo_epi64(t[4 * g + 1], t[4 * g + 3]);
        u[4 * g + 3] = _mm512_unpackhi_epi64(t[4 * g + 1], t[4 * g + 3]);
    }
    /* column 4b + c gathers block b of u[c], u[4 + c], u[8 + c], u[12 + c] */
    for (int c = 0; c < 4; c++) {
        __m512i v0 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0x44);      /* u0.b0 u0.b1 u1.b0 u1.b1 */
        __m512i v1 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0xee);      /* u0.b2 u0.b3 u1.b2 u1.b3 */
        __m512i v2 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0x44); /* u2.b0 u2.b1 u3.b0 u3.b1 */
        __m512i v3 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0xee);
        r[0 + c] = _mm512_shuffle_i32x4(v0, v2, 0x88);  /* block 0 of each */
        r[4 + c] = _mm512_shuffle_i32x4(v0, v2, 0xdd);  /* block 1 */
        r[8 + c] = _mm512_shuffle_i32x4(v1, v3, 0x88);  /* block 2 */
        r[12 + c] = _mm512_shuffle_i32x4(v1, v3, 0xdd); /* block 3 */
    }
}

/* Where a panel's rows or columns come from: a float32 matrix, or a bf16 one (weights). */
typedef struct {
    const float *f;
    const uint16_t *h;
    int ld;
} source;

/* Packs `width` (<= 32) lines of a matrix stored with K along its rows (X (width, K), row
 * stride ld: line j is row j) into a panel of `stride` lines per pair:
 * dst[p * stride + j] = (X[j][k0 + 2p], X[j][k0 + 2p + 1]) for p < ceil(kc / 2).
 * 16 lines x 16 pairs at a time: each line's 32 values become 16 pairs, then a transpose. */
AVX512_BF16 static void pack_lines_along_k(uint32_t *dst, int stride, source s, int width,
                                          int k0, int kc)
{
    for (int c = 0; c < kc; c += 32) {
        const int n = kc - c < 32 ? kc - c : 32, pairs = (n + 1) / 2;
        for (int j0 = 0; j0 < width; j0 += 16) {
            const int lines = width - j0 < 16 ? width - j0 : 16;
            __m512i r[16];
            for (int j = 0; j < 16; j++) {
                size_t at = (size_t)(j0 + j) * s.ld + k0 + c;
                r[j] = j >= lines ? _mm512_setzero_si512()
                       : s.h      ? pairs_along_row16(s.h + at, n)
                                  : pairs_along_row(s.f + at, n);
            }
            transpose16(r); /* r[q] lane j: pair q of line j0 + j */
            const __mmask16 keep = lanes16(lines);
            for (int q = 0; q < pairs; q++)
                _mm512_mask_storeu_epi32(dst + (size_t)(c / 2 + q) * stride + j0, keep, r[q]);
        }
    }
}

/* Packs `count` lines of a matrix stored with the lines along its rows (X (K, count), row
 * stride ld: line l is column l) into panels of `stride` lines, `pitch` pairs apart:
 * dst[(l / stride) pitch + p stride + l % stride] = (X[k0 + 2p][l], X[k0 + 2p + 1][l]).
 * Two rows at a time, interleaved, 16 lines (or what is left of a panel) per store. */
AVX512_BF16 static void pack_lines_across_k(uint32_t *dst, size_t pitch, int stride, source s,
                                           int count, int k0, int kc)
{
    for (int k = 0; k < kc; k += 2) {
        const float *r0 = s.f + (size_t)(k0 + k) * s.ld;
        const float *r1 = k + 1 < kc ? r0 + s.ld : NULL;
        uint32_t *d = dst + (size_t)(k / 2) * stride;
        for (int q0 = 0; q0 < count; q0 += stride) { /* panel q0 / stride */
            uint32_t *panel = d + (size_t)(q0 / stride) * pitch;
            const int width = count - q0 < stride ? count - q0 : stride;
            for (int j0 = 0; j0 < width; j0 += 16) {
                const int lines = width - j0 < 16 ? width - j0 : 16;
                const __m512i p = pairs_of_rows(r0 + q0 + j0, r1 ? r1 + q0 + j0 : NULL, lines);
                _mm512_mask_storeu_epi32(panel + j0, lanes16(lines), p);
            }
        }
    }
}

/* `count` lines of op(X) starting at line j, K block k0 .. k0 + kc, into panels of `stride`
 * lines, one after another `pitch` pairs apart: line j + l goes to panel l / stride, place
 * l % stride; the last panel's lines past count are zero. along_k: line j of op(X) is row j of
 * the stored matrix (op(A) = A, or op(B) = B^T), and each panel is packed by itself (16 x 16
 * transposes, reading each line's run of k). Otherwise line j is column j of the stored
 * matrix: two stored rows at a time, across every panel, so the rows stream from memory once
 * in order (a panel at a time read them 2 cache lines per row, one row stride apart: 4 KiB
 * strides at the FFN's width, a third of a dW product's time went there). */
static void pack_block(uint32_t *dst, size_t pitch, int stride, source s, int along_k, int j,
                       int count, int k0, int kc)
{
    const int kp = (kc + 1) / 2, panels = (count + stride - 1) / stride;
    const int tail = count - (panels - 1) * stride; /* lines in the last panel */
    if (tail < stride) { /* zero lines: the micro-kernel computes them and never stores them */
        uint32_t *last = dst + (size_t)(panels - 1) * pitch;
        for (int p = 0; p < kp; p++)
            memset(last + (size_t)p * stride + tail, 0, (size_t)(stride - tail) * sizeof *dst);
    }
    if (along_k) {
        for (int q = 0; q < panels; q++) {
            source at = s;
            const size_t first = (size_t)(j + q * stride) * s.ld;
            if (s.h) at.h += first;
            else at.f += first;
            pack_lines_along_k(dst + (size_t)q * pitch, stride, at, q < panels - 1 ? stride : tail,
                               k0, kc);
        }
    } else {
        source at = s;
        at.f += j;
        pack_lines_across_k(dst, pitch, stride, at, count, k0, kc);
    }
}

/* ---- the micro-kernel --------------------------------------------------------------------- */

/* C (m <= MR, n <= NR) = alpha a b + beta C (+ bias, one per column, where bias is not NULL)
 * over kp pairs of k: a (kp, MR) and b (kp, NR) packed pairs. beta = 0 writes C without
 * reading it. The bias is added last, to what would have been stored: the same float32 sums
 * as a separate pass over C, without that pass's read and write of all of C. */
AVX512_BF16 static void micro_kernel(int kp, const uint32_t *restrict a,
                                     const uint32_t *restrict b, float *C, int ldc, int m, int n,
                                     float alpha, float beta, const float *bias)
{
    __m512 c[MR][2];
    #pragma GCC unroll 12
    for (int i = 0; i < MR; i++) c[i][0] = c[i][1] = _mm512_setzero_ps();
    for (int p = 0; p < kp; p++) {
        const __m512bh b0 = (__m512bh)_mm512_load_si512(b);
        const __m512bh b1 = (__m512bh)_mm512_load_si512(b + 16);
        #pragma GCC unroll 12
        for (int i = 0; i < MR; i++) {
            const __m512bh ai = (__m512bh)_mm512_set1_epi32((int)a[i]);
            c[i][0] = _mm512_dpbf16_ps(c[i][0], ai, b0);
            c[i][1] = _mm512_dpbf16_ps(c[i][1], ai, b1);
        }
        a += MR, b += NR;
    }
    const __mmask16 m0 = lanes16(n), m1 = lanes16(n - 16);
    const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
    const __m512 bias0 = bias ? _mm512_maskz_loadu_ps(m0, bias) : _mm512_setzero_ps();
    const __m512 bias1 = bias ? _mm512_maskz_loadu_ps(m1, bias + 16) : _mm512_setzero_ps();
    #pragma GCC unroll 12
    for (int i = 0; i < MR; i++) {
        if (i >= m) break;
        float *row = C + (size_t)i * ldc;
        __m512 r0 = _mm512_mul_ps(va, c[i][0]), r1 = _mm512_mul_ps(va, c[i][1]);
        if (beta != 0.0f) {
            r0 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m0, row), r0);
            r1 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m1, row + 16), r1);
        }
        if (bias) r0 = _mm512_add_ps(r0, bias0), r1 = _mm512_add_ps(r1, bias1);
        _mm512_mask_storeu_ps(row, m0, r0);
        _mm512_mask_storeu_ps(row + 16, m1, r1);
    }
}

/* ---- the blocked product ------------------------------------------------------------------ */

typedef struct {
    int M, N, K;
    source a, b;
    int a_along_k, b_along_k; /* line i of op(A) is row i of A (not transposed); line j of
                                 op(B) is row j of B (transposed) */
    float alpha, beta;
    float *C;
    int ldc;
    const float *bias; /* (N) added to every row of C after the product, or NULL */
} product;

/* The rows [m0, m1) and columns [n0, n1) of C that one thread computes. */
typedef struct {
    int m0, m1, n0, n1;
} region;

/* The values one thread packs when the threads split the rows of C (or its columns) T ways:
 * its share of op(A) once per column block of NC, and all of op(B) (with columns split: all
 * of op(A) once per column block of its share, and its share of op(B)). */
static double packed_per_thread(const product *g, int T, int split_rows)
{
    const double M = g->M, N = g->N, K = g->K;
    const double m = split_rows ? M / T : M, n = split_rows ? N : N / T;
    return m * K * (double)((int)((n + NC - 1) / NC)) + n * K;
}

/* Thread t of T gets an equal share of the MR-row panels or of the NR-column panels: no two
 * threads write the same part of C, and a thread packs what it reads itself, so the threads
 * never wait for each other. Each packs its own copy of the other operand, which costs a few
 * percent of the product at the models' sizes; barriers cost more (a sleeping thread takes
 * tens of microseconds to wake). Where both ways leave every thread at least two panels, the
 * one that packs fewer values wins (columns for a dW of the FFN's second layer, whose op(B)
 * is 4x its op(A)); otherwise the way with more panels. */
static region region_of(const product *g, int t, int T)
{
    const int mp = (g->M + MR - 1) / MR, np = (g->N + NR - 1) / NR;
    region r = {0, g->M, 0, g->N};
    int split_rows = mp >= np;
    if (mp >= 2 * T && np >= 2 * T)
        split_rows = packed_per_thread(g, T, 1) <= packed_per_thread(g, T, 0);
    if (split_rows) {
        r.m0 = (int)((long)mp * t / T) * MR, r.m1 = (int)((long)mp * (t + 1) / T) * MR;
        if (r.m1 > g->M) r.m1 = g->M;
    } else {
        r.n0 = (int)((long)np * t / T) * NR, r.n1 = (int)((long)np * (t + 1) / T) * NR;
        if (r.n1 > g->N) r.n1 = g->N;
    }
    return r;
}

/* Thread t's part of the product: for each block of op(B) (KC x NC), packed, and each block
 * of op(A) (MC x KC), packed, the micro-kernel over every pair of their panels. */
static void product_run(const product *g, gemm_bf16_workspace *ws, int t, int T)
{
    uint32_t *Bp = ws->buf + (size_t)t * (B_WORDS + A_WORDS), *Ap = Bp + B_WORDS;
    const region rg = region_of(g, t, T);
    for (int jc = rg.n0; jc < rg.n1; jc += NC) {
        const int nc = rg.n1 - jc < NC ? rg.n1 - jc : NC, npanels = (nc + NR - 1) / NR;
        for (int pc = 0; pc < g->K; pc += KC) {
            const int kc = g->K - pc < KC ? g->K - pc : KC, kp = (kc + 1) / 2;
            const float beta = pc ? 1.0f : g->beta; /* later K blocks add to the first */
            const int last = pc + kc == g->K;         /* the bias goes in after the last */
            pack_block(Bp, (size_t)KCP * NR, NR, g->b, g->b_along_k, jc, nc, pc, kc);
            for (int ic = rg.m0; ic < rg.m1; ic += MC) {
                const int mc = rg.m1 - ic < MC ? rg.m1 - ic : MC, mpanels = (mc + MR - 1) / MR;
                pack_block(Ap, (size_t)KCP * MR, MR, g->a, g->a_along_k, ic, mc, pc, kc);
                for (int q = 0; q < npanels; q++) {
                    const int j = jc + q * NR, w = nc - q * NR < NR ? nc - q * NR : NR;
                    for (int r = 0; r < mpanels; r++) {
                        const int i = ic + r * MR, h = mc - r * MR < MR ? mc - r * MR : MR;
                        micro_kernel(kp, Ap + (size_t)r * KCP * MR, Bp + (size_t)q * KCP * NR,
                                     g->C + (size_t)i * g->ldc + j, g->ldc, h, w, g->alpha,
                                     beta, last && g->bias ? g->bias + j : NULL);
                    }
                }
            }
        }
    }
}

/* C = beta C where K = 0 (nothing to multiply); beta = 0 writes zeros without reading. */
static void scale_only(int M, int N, float beta, float *C, int ldc)
{
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float *c = C + (size_t)i * ldc + j;
            *c = beta == 0.0f ? 0.0f : beta * *c;
        }
}

static void product_parallel(const product *g, gemm_bf16_workspace *ws)
{
    if (g->M <= 0 || g->N <= 0) return;
    if (g->K <= 0) {
        scale_only(g->M, g->N, g->beta, g->C, g->ldc);
        return;
    }
    int T = omp_get_max_threads();
    if (T > ws->threads) T = ws->threads;
    #pragma omp parallel num_threads(T)
    product_run(g, ws, omp_get_thread_num(), omp_get_num_threads());
}

void gemm_bf16(int transA, int transB, int M, int N, int K, float alpha, const float *A,
               int lda, const float *B, int ldb, float beta, float *C, int ldc,
               gemm_bf16_workspace *ws)
{
    product g = {M, N, K, {A, NULL, lda}, {B, NULL, ldb}, !transA, transB, alpha, beta, C, ldc,
                 NULL};
    product_parallel(&g, ws);
}

void gemm_bf16_wt(int M, int N, int K, float alpha, const float *A, int lda,
                  const uint16_t *W, int ldw, float beta, float *C, int ldc,
                  gemm_bf16_workspace *ws)
{
    product g = {M, N, K, {A, NULL, lda}, {NULL, W, ldw}, 1, 1, alpha, beta, C, ldc, NULL};
    product_parallel(&g, ws);
}

void gemm_bf16_linear(int N, int out, int in, const float *x, const float *W,
                      const uint16_t *W16, const float *b, float *y, gemm_bf16_workspace *ws)
{
    product g = {N, out, in, {x, NULL, in}, {W16 ? NULL : W, W16, in}, 1, 1, 1.0f, 0.0f, y, out,
                 b};
    if (in <= 0 && b) { /* no product: y = b in every row */
        for (int i = 0; i < N; i++) memcpy(y + (size_t)i * out, b, (size_t)out * sizeof *y);
        return;
    }
    product_parallel(&g, ws);
}

/* ---- conversion and the few-rows kernel ---------------------------------------------------- */

AVX512_BF16 static void convert_avx512(uint16_t *dst, const float *src, size_t n)
{
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512bh h = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(src + i + 16), _mm512_loadu_ps(src + i));
        _mm512_storeu_si512(dst + i, (__m512i)h);
    }
    for (; i < n; i++) dst[i] = bf16_from_float(src[i]);
}

void bf16_convert(uint16_t *dst, const float *src, size_t n)
{
    const size_t chunk = (size_t)1 << 16;
    const long chunks = (long)((n + chunk - 1) / chunk);
    #pragma omp parallel for schedule(static) if (chunks > 1)
    for (long c = 0; c < chunks; c++) {
        const size_t i = (size_t)c * chunk, len = n - i < chunk ? n - i : chunk;
        convert_avx512(dst + i, src + i, len);
    }
}
