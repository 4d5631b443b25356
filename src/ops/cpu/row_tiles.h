/* SPDX-License-Identifier: MIT */
/* y = x W^T + b for a few rows of x (a decoding step: one row per sequence or hypothesis),
 * tiled the same way whatever type W is stored in: float32 (ops/cpu/linear.c) or bf16
 * (ops/cpu/matvec_bf16.c). Private to the library.
 *
 * The cost is reading W: a model's weights do not fit in cache, so each row of W crosses the
 * memory bus once per token. Per tile of 8 rows of W, row 0 of x reads the tile from memory
 * (dot_1x8: eight streams at once keep more reads in flight than four), the other rows of x
 * reuse it from cache two at a time (dot_2x4 on each half), an unpaired last row alone;
 * out % 8 leftover rows of W go one dot product at a time (dot_1x1). Threads split the
 * output features, so each reads its own part of W, in chunks of 4 tiles taken as threads
 * come free: a thread that starts late (a sleeping OpenMP worker takes ~10 us to wake, more
 * on a busy core) finds its share taken instead of holding the others at the closing barrier.
 * Each kernel must compute every y[i, o] by the same sequence of operations, so that a row's
 * result depends neither on how many rows come with it nor on the thread count. */
#ifndef QKV_ROW_TILES_H
#define QKV_ROW_TILES_H

#include <stddef.h>

/* The dot-product kernels of one weight type; W points at rows of `in` weights. */
typedef struct {
    /* y[o] = x . w_o, 1 row of x, 8 rows of W */
    void (*dot_1x8)(float *y, const float *x, const void *W, int in);
    /* y[i * ldy + o] = x_i . w_o, 2 rows of x (row stride in), 4 rows of W */
    void (*dot_2x4)(float *y, int ldy, const float *x, const void *W, int in);
    /* x . w, one row of each */
    float (*dot_1x1)(const float *x, const void *w, int in);
    size_t weight_bytes; /* bytes per stored weight */
    long parallel_min;   /* in * out below which one thread reads W (waking another costs more) */
} row_kernels;

/* x (M, in), W (out, in), b (out) or NULL -> y (M, out) */
static inline void row_tiles_forward(const row_kernels *k, float *y, const float *x,
                                     const void *W, const float *b, int M, int in, int out)
{
    const int tiles = (out + 7) / 8; /* the last one may be partial */
    const size_t row = (size_t)in * k->weight_bytes;
    #pragma omp parallel for schedule(dynamic, 4) if ((long)in * out >= k->parallel_min)
    for (int t = 0; t < tiles; t++) {
        const int o0 = 8 * t, width = out - o0 < 8 ? out - o0 : 8;
        const char *Wt = (const char *)W + o0 * row;
        float *yt = y + o0;
        if (width == 8 && M > 0) {
            k->dot_1x8(yt, x, Wt, in);
            int i = 1;
            for (; i + 2 <= M; i += 2) {
                k->dot_2x4(yt + (size_t)i * out, out, x + (size_t)i * in, Wt, in);
                k->dot_2x4(yt + (size_t)i * out + 4, out, x + (size_t)i * in, Wt + 4 * row, in);
            }
            if (i < M) k->dot_1x8(yt + (size_t)i * out, x + (size_t)i * in, Wt, in);
        } else {
            for (int i = 0; i < M; i++)
                for (int o = 0; o < width; o++)
                    yt[(size_t)i * out + o] = k->dot_1x1(x + (size_t)i * in, Wt + o * row, in);
        }
        if (b)
            for (int i = 0; i < M; i++)
                for (int o = 0; o < width; o++) yt[(size_t)i * out + o] += b[o0 + o];
    }
}

#endif
