/* SPDX-License-Identifier: MIT */
/* Linear layer: y = x W^T + b (the projections W_q, W_k, W_v, W_o and the FFN's two layers)
 * in float32: matrix-vector kernels for a decoding step's few rows, OpenBLAS's sgemm for many,
 * and the backward. The CPU backends' tables choose among these and the bf16 and int8 kernels
 * (backend/cpu_linear.c). */
#include "core/internal.h"
#include "ops/cpu/row_tiles.h"
#include "ops/cpu/dot_lanes.h"
#include "ops/cpu/linear.h"

/* ---- few rows: one token per sequence, as in a decoding step ---------------------------
 * With a handful of rows y = x W^T is a few matrix-vector products, and its cost is reading
 * W from memory once. A GEMM would first copy W into its packed layout (which for one row
 * costs more than the product), so these rows get kernels of their own, tiled as
 * ops/cpu/row_tiles.h describes. Every y[i, o] is the same sequence of operations whichever
 * kernel computes it (8 lanes of partial sums over k, summed in a fixed order, then the
 * k % 8 tail). */

/* The CPU tables' few_rows (backend.h): up to this many rows, the matrix-vector kernel; from
 * SMALL_ROWS + 1, the GEMM. Measured on
 * the decoder's shapes (512 x 512, 512 x 2048, 2048 x 512, 512 x 10000; 2 threads of an AMD
 * EPYC with AVX-512): against OpenBLAS's GEMM the kernel is 2-3x faster at 1 to 4 rows, where it
 * reads W at the memory's speed, and still 1.7-2x at 8 to 12, where it is bound by its
 * multiply-adds; 1.3x at 14, even at 15, 0.75x at 16. */

/* Weight matrices smaller than this many floats (in * out) run on one thread: waking a
 * second one costs more than reading them. */
#define SMALL_PARALLEL_MIN (1L << 15)


/* x . w over the tail k0 <= k < in that the lanes did not cover, added to s. */
static inline float dot_tail(float s, const float *x, const float *w, int k0, int in)
{
    for (int k = k0; k < in; k++) s = MULADD(x[k], w[k], s);
    return s;
}

/* y[i, o] = x_i . w_o for 2 rows of x and 4 rows of W: 8 dot products, whose accumulators
 * (8 registers) each meet a load of x or of w, so the loads are shared across products.
 * x (2, in) with row stride in; W (4, in); y (2, ldy). */
static void dot_2x4(float *y, int ldy, const float *x, const void *W_, int in)
{
    const float *W = W_;
    const float *x0 = x, *x1 = x + in;
    const float *w0 = W, *w1 = w0 + in, *w2 = w1 + in, *w3 = w2 + in;
    float a00[LANES] = {0}, a01[LANES] = {0}, a02[LANES] = {0}, a03[LANES] = {0};
    float a10[LANES] = {0}, a11[LANES] = {0}, a12[LANES] = {0}, a13[LANES] = {0};
    int k = 0;
    for (; k + LANES <= in; k += LANES)
        for (int l = 0; l < LANES; l++) {
            a00[l] = MULADD(x0[k + l], w0[k + l], a00[l]);
            a01[l] = MULADD(x0[k + l], w1[k + l], a01[l]);
            a02[l] = MULADD(x0[k + l], w2[k + l], a02[l]);
            a03[l] = MULADD(x0[k + l], w3[k + l], a03[l]);
            a10[l] = MULADD(x1[k + l], w0[k + l], a10[l]);
            a11[l] = MULADD(x1[k + l], w1[k + l], a11[l]);
            a12[l] = MULADD(x1[k + l], w2[k + l], a12[l]);
            a13[l] = MULADD(x1[k + l], w3[k + l], a13[l]);
        }
    y[0] = dot_tail(lanes_sum(a00), x0, w0, k, in);
    y[1] = dot_tail(lanes_sum(a01), x0, w1, k, in);
    y[2] = dot_tail(lanes_sum(a02), x0, w2, k, in);
    y[3] = dot_tail(lanes_sum(a03), x0, w3, k, in);
    y[ldy + 0] = dot_tail(lanes_sum(a10), x1, w0, k, in);
    y[ldy + 1] = dot_tail(lanes_sum(a11), x1, w1, k, in);
    y[ldy + 2] = dot_tail(lanes_sum(a12), x1, w2, k, in);
    y[ldy + 3] = dot_tail(lanes_sum(a13), x1, w3, k, in);
}

/* y[o] = x . w_o for 1 row of x and 8 rows of W: the matrix-vector product proper. Eight
 * rows are eight streams from memory at once, which keeps more reads in flight than four
 * (about 20% faster at in = 512).  x (in), W (8, in), y (8). */
static void dot_1x8(float *y, const float *x, const void *W_, int in)
{
    const float *W = W_;
    const float *w0 = W, *w1 = w0 + in, *w2 = w1 + in, *w3 = w2 + in;
    const float *w4 = w3 + in, *w5 = w4 + in, *w6 = w5 + in, *w7 = w6 + in;
    float a0[LANES] = {0}, a1[LANES] = {0}, a2[LANES] = {0}, a3[LANES] = {0};
    float a4[LANES] = {0}, a5[LANES] = {0}, a6[LANES] = {0}, a7[LANES] = {0};
    int k = 0;
    for (; k + LANES <= in; k += LANES)
        for (int l = 0; l < LANES; l++) {
            a0[l] = MULADD(x[k + l], w0[k + l], a0[l]);
            a1[l] = MULADD(x[k + l], w1[k + l], a1[l]);
            a2[l] = MULADD(x[k + l], w2[k + l], a2[l]);
            a3[l] = MULADD(x[k + l], w3[k + l], a3[l]);
            a4[l] = MULADD(x[k + l], w4[k + l], a4[l]);
            a5[l] = MULADD(x[k + l], w5[k + l], a5[l]);
            a6[l] = MULADD(x[k + l], w6[k + l], a6[l]);
            a7[l] = MULADD(x[k + l], w7[k + l], a7[l]);
        }
    y[0] = dot_tail(lanes_sum(a0), x, w0, k, in);
    y[1] = dot_tail(lanes_sum(a1), x, w1, k, in);
    y[2] = dot_tail(lanes_sum(a2), x, w2, k, in);
    y[3] = dot_tail(lanes_sum(a3), x, w3, k, in);
    y[4] = dot_tail(lanes_sum(a4), x, w4, k, in);
    y[5] = dot_tail(lanes_sum(a5), x, w5, k, in);
    y[6] = dot_tail(lanes_sum(a6), x, w6, k, in);
    y[7] = dot_tail(lanes_sum(a7), x, w7, k, in);
}

/* x . w for one row of each (the out % 8 features left over by the tiles). */
static float dot_1x1(const float *x, const void *w_, int in)
{
    const float *w = w_;
    float a[LANES] = {0};
    int k = 0;
    for (; k + LANES <= in; k += LANES)
        for (int l = 0; l < LANES; l++) a[l] = MULADD(x[k + l], w[k + l], a[l]);
    return dot_tail(lanes_sum(a), x, w, k, in);
}

static const row_kernels FLOAT_ROWS = {dot_1x8, dot_2x4, dot_1x1, sizeof(float),
                                       SMALL_PARALLEL_MIN};

/* ---- float32 ---------------------------------------------------------------------------- */

/* y += b on every row */
static void add_bias(float *y, const float *b, int N, int out)
{
    #pragma omp parallel for if ((long)N * out > 65536)
    for (int i = 0; i < N; i++)
        for (int o = 0; o < out; o++) y[(size_t)i * out + o] += b[o];
}

/* a decoding step: bound by reading W once */
void linear_rows_f32(float *y, const float *x, const float *W, const float *b, int N, int in,
                     int out)
{
    row_tiles_forward(&FLOAT_ROWS, y, x, W, b, N, in, out);
}

void linear_gemm_f32(float *y, const float *x, const float *W, const float *b, int N, int in,
                     int out)
{
    gemm(0, 1, N, out, in, 1.0f, x, in, W, in, 0.0f, y, out);
    if (b) add_bias(y, b, N, out);
}

void linear_bias_backward(float *db, const float *dy, int N, int out)
{
    /* Column sums, walking dy row by row (contiguous) over one block of columns per
     * thread: a strided walk down each column would miss the cache on every element. */
    const int block = 256;
    #pragma omp parallel for if ((long)N * out > 65536)
    for (int o0 = 0; o0 < out; o0 += block) {
        const int o1 = o0 + block < out ? o0 + block : out;
        for (int i = 0; i < N; i++) {
            const float *row = dy + (size_t)i * out;
            /* vectorised (GCC's -O2 cost model leaves it scalar otherwise): 3.5x faster */
            #pragma omp simd
            for (int o = o0; o < o1; o++) db[o] += row[o];
        }
    }
}

/* dx (N, in) += dy W;  dW (out, in) += dy^T x;  db (out) += sum_i dy[i] */
void linear_backward_f32(float *dx, float *dW, float *db, const float *dy, const float *x,
                         const float *W, int N, int in, int out)
{
    if (dx) gemm(0, 0, N, in, out, 1.0f, dy, out, W, in, 1.0f, dx, in);
    if (dW) gemm(1, 0, out, in, N, 1.0f, dy, out, x, in, 1.0f, dW, in);
    if (db) linear_bias_backward(db, dy, N, out);
}

