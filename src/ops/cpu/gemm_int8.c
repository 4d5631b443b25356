/* SPDX-License-Identifier: MIT */
/* int8 GEMM with exact int32 sums on AVX512-VNNI; see int8.h.
 *
 * One kernel for both shapes the models ask for. A tile is MR_MAX (4) or fewer rows of x by a
 * group of 64 output channels: per 4 consecutive k, the group's 4 weight vectors are loaded
 * once and each row's 4 bytes broadcast against them (4 VPDPBUSD per row). With one row (a
 * decoding step at batch 1) that streams the weights from memory at a byte per weight, a
 * quarter of float32's bytes; with many rows (the encoder's pass) the group's weights (64 x
 * in bytes: 32 KiB at in = 512) stay in L1/L2 while the rows stream past them. Threads split
 * the groups, so each reads only its own weights, taken in order as threads come free (a
 * late-waking thread finds its share done by the others instead of holding them back).
 * The AVX-512 code is compiled for AVX-512 function by function (target attributes), so the
 * rest of the library keeps its x86-64-v3 baseline; callers check gemm_int8_supported().
 *
 * Where the CPU has AMX (Sapphire Rapids and later) and the operating system grants its tile
 * state, products of many rows (AMX_MIN_ROWS and more: a batch's decoding step, the encoder)
 * run on the tiles instead: TDPBUSD multiplies a 16 x 64 tile of unsigned activation bytes by
 * a 64 x 16 tile of signed weights into 16 x 16 int32 sums, 16,384 multiply-adds an
 * instruction where VPDPBUSD does 64. It is the same product of the same bytes (unsigned
 * activations xq + 128, signed weights, the compensation subtracted after), summed exactly in
 * int32, so the results are bit for bit those of the VNNI kernel. The packed weights are
 * already the layout the tiles read: a block of 16 channels holds, per 4 consecutive k, the 16
 * channels' 4 bytes in 64 bytes, so 16 such rows (64 k) are one weight tile of stride 64. */
#define _DEFAULT_SOURCE /* syscall(): asking the kernel for the AMX tile state */
#include <cpuid.h>
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/internal.h"
#include "ops/cpu/best.h"
#include "ops/cpu/int8.h"

#define AVX512_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")))
#define AMX __attribute__((target("amx-tile,amx-int8,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")))
#define ALWAYS_INLINE __attribute__((always_inline)) inline

enum {
    MR_MAX = 4, /* rows per tile: 4 x 4 accumulators + 4 weight vectors + a broadcast (at 6
                   rows, 24 accumulators, GCC 12 spilled them to the stack every k) */
    BLOCKS = INT8_GROUP / INT8_BLOCK,
};

/* Products of fewer multiply-adds than this (N x in x out) run on one thread: waking a second
 * one costs more. */
#define PARALLEL_MIN (1L << 16)

int gemm_int8_supported(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512vnni");
}

/* ---- quantising the weights, once ------------------------------------------------------ */

/* One row's scale s = max |w| / 127 and 1 / s (0 for a row of zeros). */
static inline float row_scale(const float *row, int in, float *inv)
{
    float amax = 0.0f;
    for (int k = 0; k < in; k++) amax = fmaxf(amax, fabsf(row[k]));
    *inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    return amax / 127.0f;
}

/* round(w / s) in [-127, 127], to nearest (even) as lrintf rounds under the default mode */
static inline int8_t quantise_value(float w, float inv)
{
    long v = lrintf(w * inv);
    return (int8_t)(v > 127 ? 127 : v < -127 ? -127 : v);
}

void int8_quantise_row(int8_t *wq, float *s, const float *row, int in)
{
    float inv;
    *s = row_scale(row, in, &inv);
    for (int k = 0; k < in; k++) wq[k] = quantise_value(row[k], inv);
}

/* q laid out for (out, in) with zero weights, scales and compensations. */
static qkv_status matrix_alloc(int8_matrix *q, int out, int in, qkv_error *err)
{
    memset(q, 0, sizeof *q);
    const int k4 = (in + 3) / 4, out_pad = (out + INT8_GROUP - 1) / INT8_GROUP * INT8_GROUP;
    const size_t bytes = (size_t)out_pad * k4 * 4;
    void *w = NULL;
    if (posix_memalign(&w, 64, bytes ? bytes : 64) ||
        !(q->scale = calloc((size_t)out_pad, sizeof *q->scale)) ||
        !(q->comp = calloc((size_t)out_pad, sizeof *q->comp))) {
        free(w), free(q->scale), free(q->comp);
        memset(q, 0, sizeof *q);
        return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for a (%d, %d) int8 weight matrix",
                        out, in);
    }
    memset(w, 0, bytes); /* the padding: zero weights */
    q->w = w, q->in = in, q->out = out, q->k4 = k4, q->out_pad = out_pad;
    return QKV_OK;
}

/* Channel o's place in the packed layout (int8.h), for weight k at dst[(k / 4) * 64 + k % 4]. */
static int8_t *channel_at(const int8_matrix *q, int o)
{
    return q->w + (size_t)(o / INT8_BLOCK) * q->k4 * 64 + (o % INT8_BLOCK) * 4;
}

qkv_status int8_matrix_quantise(int8_matrix *q, const float *W, int out, int in, qkv_error *err)
{
    qkv_status st = matrix_alloc(q, out, in, err);
    if (st) return st;
    #pragma omp parallel for schedule(static) if ((long)out * in >= PARALLEL_MIN)
    for (int o = 0; o < out; o++) {
        const float *row = W + (size_t)o * in;
        float inv;
        const float s = row_scale(row, in, &inv);
        int8_t *dst = channel_at(q, o);
        int32_t sum = 0;
        for (int k = 0; k < in; k++) {
            const int8_t v = quantise_value(row[k], inv);
            dst[(size_t)(k / 4) * 64 + k % 4] = v;
            sum += v;
        }
        q->scale[o] = s;
        q->comp[o] = 128 * sum;
    }
    return QKV_OK;
}

qkv_status int8_matrix_pack(int8_matrix *q, const int8_t *wq, const float *scale, int out, int in,
                            qkv_error *err)
{
    qkv_status st = matrix_alloc(q, out, in, err);
    if (st) return st;
    #pragma omp parallel for schedule(static) if ((long)out * in >= PARALLEL_MIN)
    for (int o = 0; o < out; o++) {
        const int8_t *row = wq + (size_t)o * in;
        int8_t *dst = channel_at(q, o);
        int32_t sum = 0;
        for (int k = 0; k < in; k++) dst[(size_t)(k / 4) * 64 + k % 4] = row[k], sum += row[k];
        q->scale[o] = scale[o];
        q->comp[o] = 128 * sum;
    }
    return QKV_OK;
}

void int8_matrix_row(float *y, const int8_matrix *q, int o)
{
    const int8_t *src = channel_at(q, o);
    const float s = q->scale[o];
    for (int k = 0; k < q->in; k++) y[k] = int8_dequantise(src[(size_t)(k / 4) * 64 + k % 4], s);
}

void int8_matrix_free(int8_matrix *q)
{
    free(q->w), free(q->scale), free(q->comp);
    memset(q, 0, sizeof *q);
}

/* ---- AMX: whether the tiles may be used ------------------------------------------------- */

/* Linux gives a process the AMX tile state (8 KiB more to save at each context switch) only
 * when asked, once (arch_prctl ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA, Linux 5.16). */
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

/* CPUID leaf 7, subleaf 0, EDX: AMX-TILE bit 24, AMX-INT8 bit 25 (read directly: not every
 * compiler's __builtin_cpu_supports knows the AMX names) */
static int cpu_has_amx_int8(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
    return (d >> 24 & 1) && (d >> 25 & 1);
}

int gemm_int8_amx_supported(void)
{
    return gemm_int8_supported() && cpu_has_amx_int8() &&
           syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
}

/* ---- the workspace and the activations, each call ---------------------------------------- */

qkv_status gemm_int8_reserve(gemm_int8_workspace *ws, int N, int in, qkv_error *err)
{
    if (!ws->amx) ws->amx = gemm_int8_amx_supported() ? 1 : -1;
    /* rows up to a whole AMX block: the tiles read them (the padding is zero: 128) */
    const size_t rows = N > 0 ? ((size_t)N + AMX_ROWS - 1) / AMX_ROWS * AMX_ROWS : AMX_ROWS;
    const size_t bytes = rows * (size_t)((in + 3) / 4) * 4;
    if (ws->xu && ws->bytes >= bytes && ws->rows >= rows) return QKV_OK;
    const size_t nb = bytes > ws->bytes ? bytes : ws->bytes, nr = rows > ws->rows ? rows : ws->rows;
    void *xu = NULL;
    float *s = malloc(nr * sizeof *s);
    if (!s || posix_memalign(&xu, 64, nb ? nb : 64)) {
        free(s);
        return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for the int8 GEMM's activations "
                        "(%zu KiB)", nb >> 10);
    }
    free(ws->xu), free(ws->scale);
    ws->xu = xu, ws->scale = s, ws->bytes = nb, ws->rows = nr;
    return QKV_OK;
}

void gemm_int8_workspace_free(gemm_int8_workspace *ws)
{
    free(ws->xu), free(ws->scale), free(ws->best);
    memset(ws, 0, sizeof *ws);
}

static inline __mmask16 lanes16(int n)
{
    return n >= 16 ? 0xffff : n <= 0 ? 0 : (__mmask16)((1u << n) - 1);
}

/* One row: s_x = max |x| / 127, xu = round(x 127 / max |x|) + 128 (to nearest even, as
 * VCVTPS2DQ rounds under the default MXCSR), 128 past `in`. */
AVX512_VNNI static void quantise_row(uint8_t *xu, float *s_x, const float *x, int in, int k4)
{
    __m512 amax = _mm512_setzero_ps();
    for (int k = 0; k < in; k += 16)
        amax = _mm512_max_ps(amax, _mm512_abs_ps(_mm512_maskz_loadu_ps(lanes16(in - k), x + k)));
    const float m = _mm512_reduce_max_ps(amax);
    *s_x = m / 127.0f;
    const __m512 inv = _mm512_set1_ps(m > 0.0f ? 127.0f / m : 0.0f);
    const __m512i bias = _mm512_set1_epi32(128);
    for (int k = 0; k < 4 * k4; k += 16) {
        const __mmask16 lanes = lanes16(4 * k4 - k);
        const __m512 v = _mm512_maskz_loadu_ps(lanes16(in - k), x + k);
        __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(v, inv));
        q = _mm512_add_epi32(_mm512_max_epi32(_mm512_min_epi32(q, _mm512_set1_epi32(127)),
                                              _mm512_set1_epi32(-127)),
                             bias);
        _mm512_mask_cvtepi32_storeu_epi8(xu + k, lanes, q);
    }
}

void int8_quantise_rows(uint8_t *xu, float *s_x, const float *x, int N, int in, int k4)
{
    #pragma omp parallel for schedule(static) if ((long)N * in >= PARALLEL_MIN)
    for (int n = 0; n < N; n++)
        quantise_row(xu + (size_t)n * k4 * 4, s_x + n, x + (size_t)n * in, in, k4);
}

/* ---- the tile ------------------------------------------------------------------------------ */

typedef struct {
    const int8_matrix *W;
    const uint8_t *xu;
    const float *s_x, *b;
    float *y;       /* dequantised output, or */
    int32_t *z;     /* the exact int32 sums */
    int N;
    size_t ldy;     /* row stride of y (or z) */
    int first;      /* the channel in y's (or z's) column 0 */
} call;

/* Row r's outputs for the 16 channels from o of block sums acc (z: the int32 sums, before the
 * compensation), stored below W->out: the one epilogue of both kernels, so that they give the
 * same bits. */
AVX512_VNNI static ALWAYS_INLINE void store16(const call *c, int r, int o, __m512i acc)
{
    const __mmask16 m = lanes16(c->W->out - o);
    const __m512i z = _mm512_sub_epi32(acc, _mm512_loadu_si512(c->W->comp + o)); /* exact */
    const size_t at = (size_t)r * c->ldy + (size_t)(o - c->first);
    if (c->z) {
        _mm512_mask_storeu_epi32(c->z + at, m, z);
        return;
    }
    const __m512 b = c->b ? _mm512_maskz_loadu_ps(m, c->b + o) : _mm512_setzero_ps();
    const __m512 s = _mm512_mul_ps(_mm512_set1_ps(c->s_x[r]), _mm512_loadu_ps(c->W->scale + o));
    _mm512_mask_storeu_ps(c->y + at, m, _mm512_fmadd_ps(_mm512_cvtepi32_ps(z), s, b));
}

/* Rows r0 .. r0 + R - 1 by channels o0 .. o0 + 63: the sums over k, then z or y stored for
 * the channels below W->out. R is a constant in each instance (the loops unroll). */
AVX512_VNNI static ALWAYS_INLINE void tile(const call *c, int R, int r0, int o0)
{
    const int8_matrix *W = c->W;
    const int k4 = W->k4;
    const size_t ldx = (size_t)k4 * 4, ldb = (size_t)k4 * 64;
    const int8_t *wg = W->w + (size_t)(o0 / INT8_BLOCK) * ldb;
    const uint8_t *xr = c->xu + (size_t)r0 * ldx;
    __m512i acc[MR_MAX][BLOCKS];
    /* every loop over r and j unrolled, so that acc lives in registers (16 of the 32 zmm) */
    #pragma GCC unroll 4
    for (int r = 0; r < R; r++)
        #pragma GCC unroll 4
        for (int j = 0; j < BLOCKS; j++) acc[r][j] = _mm512_setzero_si512();
    for (int p = 0; p < k4; p++) {
        __m512i w[BLOCKS];
        #pragma GCC unroll 4
        for (int j = 0; j < BLOCKS; j++) w[j] = _mm512_load_si512(wg + j * ldb + (size_t)p * 64);
        #pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            int32_t four;
            memcpy(&four, xr + r * ldx + (size_t)p * 4, sizeof four);
            const __m512i a = _mm512_set1_epi32(four);
            #pragma GCC unroll 4
            for (int j = 0; j < BLOCKS; j++) acc[r][j] = _mm512_dpbusd_epi32(acc[r][j], a, w[j]);
        }
    }
    /* masked: past `out` nothing is stored (and nothing indexes acc at run time, which would
     * put it in memory) */
    #pragma GCC unroll 4
    for (int j = 0; j < BLOCKS; j++)
        #pragma GCC unroll 4
        for (int r = 0; r < R; r++) store16(c, r0 + r, o0 + j * INT8_BLOCK, acc[r][j]);
}

/* Every row of x against one group of 64 channels. */
AVX512_VNNI static void group(const call *c, int o0)
{
    int r = 0;
    for (; r + MR_MAX <= c->N; r += MR_MAX) tile(c, MR_MAX, r, o0);
    switch (c->N - r) {
    case 3: tile(c, 3, r, o0); break;
    case 2: tile(c, 2, r, o0); break;
    case 1: tile(c, 1, r, o0); break;
    default: break;
    }
}

static void run(const call *c)
{
    const int groups = c->W->out_pad / INT8_GROUP;
    const long work = (long)c->N * c->W->k4 * 4 * c->W->out_pad;
    #pragma omp parallel for schedule(dynamic, 1) if (work >= PARALLEL_MIN && groups > 1)
    for (int g = 0; g < groups; g++) group(c, g * INT8_GROUP);
}

/* ---- the AMX kernel ------------------------------------------------------------------------
 * A block is 32 rows by 32 channels: four int32 tiles of sums (0-3), two of activations (4,
 * 5: rows r0 .. r0 + 15 and r0 + 16 .. r0 + 31, 64 k each), two of weights (6, 7: channel
 * blocks o0 and o0 + 16, the same 64 k), so each tile loaded serves two products. */

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

/* Every tile 16 rows of 64 bytes. A constant: GCC 12 takes _tile_loadconfig for a call that
 * does not read its argument, and drops the stores that would fill a local one. */
static const tile_config TILES = {
    .palette = 1,
    .colsb = {64, 64, 64, 64, 64, 64, 64, 64},
    .rows = {16, 16, 16, 16, 16, 16, 16, 16},
};

AMX static void amx_configure(void) { _tile_loadconfig(&TILES); }

AMX static void amx_release(void) { _tile_release(); }

/* The sums of rows r0 .. r0 + 31 by channels o0 .. o0 + 31 into sums (32 x 32, row-major). */
AMX static void amx_block(const call *c, int r0, int o0, int32_t *sums)
{
    const int8_matrix *W = c->W;
    const size_t ldx = (size_t)W->k4 * 4, ldb = (size_t)W->k4 * 64;
    const uint8_t *x0 = c->xu + (size_t)r0 * ldx, *x1 = x0 + 16 * ldx;
    const int8_t *w0 = W->w + (size_t)(o0 / INT8_BLOCK) * ldb, *w1 = w0 + ldb;
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int p = 0; p < W->k4; p += 16) { /* 64 k: 16 groups of 4 */
        _tile_loadd(4, x0 + (size_t)p * 4, ldx);
        _tile_loadd(5, x1 + (size_t)p * 4, ldx);
        _tile_loadd(6, w0 + (size_t)p * 64, 64);
        _tile_loadd(7, w1 + (size_t)p * 64, 64);
        _tile_dpbusd(0, 4, 6);
        _tile_dpbusd(1, 4, 7);
        _tile_dpbusd(2, 5, 6);
        _tile_dpbusd(3, 5, 7);
    }
    _tile_stored(0, sums, 128);
    _tile_stored(1, sums + 16, 128);
    _tile_stored(2, sums + 16 * 32, 128);
    _tile_stored(3, sums + 16 * 32 + 16, 128);
}

/* Every row of x against one group of 64 channels, in blocks of 32 x 32. */
AMX static void amx_group(const call *c, int o0)
{
    _Alignas(64) int32_t sums[AMX_ROWS * 32];
    for (int o = o0; o < o0 + INT8_GROUP; o += 32)
        for (int r0 = 0; r0 < c->N; r0 += AMX_ROWS) {
            amx_block(c, r0, o, sums);
            const int rows = c->N - r0 < AMX_ROWS ? c->N - r0 : AMX_ROWS;
            for (int r = 0; r < rows; r++) {
                store16(c, r0 + r, o, _mm512_load_si512(sums + r * 32));
                store16(c, r0 + r, o + 16, _mm512_load_si512(sums + r * 32 + 16));
            }
        }
}

static void run_amx(const call *c)
{
    const int groups = c->W->out_pad / INT8_GROUP;
    const long work = (long)c->N * c->W->k4 * 4 * c->W->out_pad;
    #pragma omp parallel if (work >= PARALLEL_MIN && groups > 1)
    {
        amx_configure();
        #pragma omp for schedule(dynamic, 1)
        for (int g = 0; g < groups; g++) amx_group(c, g * INT8_GROUP);
        amx_release();
    }
}

/* x's rows quantised into ws; returns whether the AMX kernel takes them (it reads 64 k at a
 * time, and pays from a block's rows up), their padding to a whole block then zero. */
static int quantise(gemm_int8_workspace *ws, const float *x, const int8_matrix *W, int N)
{
    int8_quantise_rows(ws->xu, ws->scale, x, N, W->in, W->k4);
    if (!(ws->amx > 0 && N >= AMX_MIN_ROWS && W->k4 % 16 == 0)) return 0;
    const size_t ldx = (size_t)W->k4 * 4, padded = ((size_t)N + AMX_ROWS - 1) / AMX_ROWS * AMX_ROWS;
    memset(ws->xu + (size_t)N * ldx, 128, (padded - N) * ldx); /* zeros */
    return 1;
}

void gemm_int8_i32(int32_t *z, const uint8_t *xu, int N, const int8_matrix *W, int amx)
{
    if (N <= 0 || W->out <= 0) return;
    const call c = {W, xu, NULL, NULL, NULL, z, N, (size_t)W->out, 0};
    if (amx && W->k4 % 16 == 0) run_amx(&c);
    else run(&c);
}

void gemm_int8(float *y, const float *x, const int8_matrix *W, const float *b, int N,
               gemm_int8_workspace *ws)
{
    if (N <= 0 || W->out <= 0) return;
    const call c = {W, ws->xu, ws->scale, b, y, NULL, N, (size_t)W->out, 0};
    if (quantise(ws, x, W, N)) run_amx(&c);
    else run(&c);
}

/* ---- the output layer fused with the choice (ops/cpu/best.h) ------------------------------ */

/* Where the fused output keeps its buffers in ws->best: per thread a chunk's logits (N,
 * BEST_CHUNK), and per row and chunk its k best and its part of the normaliser. */
typedef struct {
    float *y;
    int *ids;
    float *vals;
    lse_part *parts;
} best_buffers;

static size_t best_layout(best_buffers *b, void *base, int N, int out, int k, int threads)
{
    const size_t chunks = (size_t)(out + BEST_CHUNK - 1) / BEST_CHUNK;
    const size_t y = (size_t)threads * N * BEST_CHUNK * sizeof(float);
    const size_t lists = (size_t)N * chunks * k, parts = (size_t)N * chunks * sizeof(lse_part);
    char *at = base;
    if (b) {
        b->parts = (lse_part *)at;
        b->y = (float *)(at + parts);
        b->vals = (float *)(at + parts + y);
        b->ids = (int *)(at + parts + y + lists * sizeof(float));
    }
    return parts + y + lists * (sizeof(float) + sizeof(int));
}

qkv_status gemm_int8_reserve_best(gemm_int8_workspace *ws, int N, int out, int k, int threads,
                                  qkv_error *err)
{
    const size_t bytes = best_layout(NULL, NULL, N, out, k, threads);
    if (ws->best && ws->best_bytes >= bytes) return QKV_OK;
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes))
        return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for the output layer's choice "
                        "(%zu KiB)", bytes >> 10);
    free(ws->best);
    ws->best = p, ws->best_bytes = bytes;
    return QKV_OK;
}

void gemm_int8_best(const best_request *rq, const float *x, const int8_matrix *W, const float *b,
                    int N, gemm_int8_workspace *ws)
{
    if (N <= 0 || W->out <= 0) return;
    const int out = W->out, k = rq->k, chunks = (out + BEST_CHUNK - 1) / BEST_CHUNK;
    const int amx = quantise(ws, x, W, N), threads = omp_get_max_threads();
    best_buffers buf;
    best_layout(&buf, ws->best, N, out, k, threads);
    const long work = (long)N * W->k4 * 4 * W->out_pad;
    int bad = 0;
    #pragma omp parallel if (work >= PARALLEL_MIN && chunks > 1)
    {
        float *y = buf.y + (size_t)omp_get_thread_num() * N * BEST_CHUNK;
        if (amx) amx_configure();
        #pragma omp for schedule(dynamic, 1) reduction(|: bad)
        for (int ch = 0; ch < chunks; ch++) {
            const int first = ch * BEST_CHUNK, n = out - first < BEST_CHUNK ? out - first : BEST_CHUNK;
            const call c = {W, ws->xu, ws->scale, b, y, NULL, N, BEST_CHUNK, first};
            for (int o = first; o < first + n; o += INT8_GROUP) {
                if (amx) amx_group(&c, o);
                else group(&c, o);
            }
            for (int r = 0; r < N; r++) {
                const size_t at = (size_t)r * chunks + ch;
                bad |= chunk_best(y + (size_t)r * BEST_CHUNK, n, first, k, rq->banned,
                                  buf.ids + at * k, buf.vals + at * k,
                                  rq->lse ? buf.parts + at : NULL);
            }
        }
        if (amx) amx_release();
    }
    if (rq->nonfinite) *rq->nonfinite = bad;
    #pragma omp parallel for if (N > 1 && work >= PARALLEL_MIN)
    for (int r = 0; r < N; r++) {
        const size_t at = (size_t)r * chunks;
        best_merge(buf.ids + at * k, buf.vals + at * k, buf.parts + at, chunks, k,
                   rq->ids + (size_t)r * k, rq->vals + (size_t)r * k, rq->lse ? rq->lse + r : NULL);
    }
}
