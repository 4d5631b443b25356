/* SPDX-License-Identifier: MIT */
/* Matrix products with int8 weights and int8 activations, int32 sums (AVX512-VNNI), for the
 * models' linear layers under QKV_PRECISION_INT8 (inference only). Private to the library.
 *
 * y (N, out) = x (N, in) W^T + b is computed as
 *   y[n, o] ~ s_x[n] s_w[o] sum_k xq[n, k] wq[o, k] + b[o]
 * with W quantised once, per output channel (symmetric: s_w[o] = max_k |W[o, k]| / 127,
 * wq = round(W / s_w) in [-127, 127]) and x quantised at each call, per row (s_x[n] =
 * max_k |x[n, k]| / 127, xq = round(x / s_x) in [-127, 127]). Rounding to nearest errs by at
 * most half a step: |x - s_x xq| <= s_x / 2, |W - s_w wq| <= s_w / 2, so
 *   |y - y_exact| <= sum_k (|x_k| s_w / 2 + |W_k| s_x / 2 + s_x s_w / 4)
 * (plus float32 roundings in the scales and the final multiply-add).
 *
 * VPDPBUSD multiplies unsigned bytes by signed bytes, four neighbouring products summed into
 * each of 16 int32 lanes. The activations are made unsigned by adding 128 (xu = xq + 128 in
 * [1, 255]); the extra 128 sum_k wq[o, k] is the same for every row, so it is computed once
 * when W is quantised (comp[o]) and subtracted from the int32 sum: the result is exact.
 *
 * Why the int32 sums cannot overflow: every term is at most 255 * 127 = 32,385 in magnitude,
 * so |sum_k xu wq| <= 32,385 in, which is below 2^31 - 1 for in <= 66,311; the largest `in`
 * of a qkv model is QKV_MAX_FFN = 65,536 (the FFN's second layer), so no sum ever leaves
 * int32 (VPDPBUSD wraps rather than saturates, and every partial sum is bounded the same
 * way). The compensated sum |sum_k xq wq| <= 127^2 in and 128 sum_k |wq| <= 128 * 127 in are
 * smaller still. */
#ifndef QKV_INT8_H
#define QKV_INT8_H

#include <stddef.h>
#include <stdint.h>

#include "ops/cpu/best.h"
#include "qkv.h"

/* The channels of a tile: 4 blocks of 16 output channels (4 zmm of weights). */
#define INT8_BLOCK 16
#define INT8_GROUP 64

/* W (out, in) quantised per output channel and packed as the kernel reads it: blocks of 16
 * channels; in a block, for each 4 consecutive k, 64 bytes: channel j's 4 weights in bytes
 * 4j .. 4j + 3 (one zmm, one VPDPBUSD operand). K is padded to a multiple of 4 and the
 * channels to a multiple of 64 with zero weights (scale 0, comp 0), so the kernel never
 * looks at an edge until it stores. */
typedef struct {
    int8_t *w;     /* (out_pad / 16) blocks of k4 x 64 bytes */
    float *scale;  /* (out_pad) s_w */
    int32_t *comp; /* (out_pad) 128 sum_k wq[o, k] */
    int in, out, k4, out_pad;
} int8_matrix;

/* The AMX kernel's block of rows, and the fewest rows it takes (fewer run on VNNI alone). */
#define AMX_ROWS 32
#define AMX_MIN_ROWS 16

/* The quantised activations of one call, owned by whoever calls (a model): grown as calls
 * need, never shrunk. */
typedef struct {
    uint8_t *xu;  /* (rows, 4 k4) xq + 128; rows a multiple of AMX_ROWS */
    float *scale; /* (rows) s_x */
    size_t bytes, rows;
    int amx;      /* 1: the AMX kernel runs products of AMX_MIN_ROWS rows or more; -1: the CPU
                   * or the system has no AMX; 0: not asked yet (gemm_int8_reserve asks) */
    void *best;   /* gemm_int8_best's buffers */
    size_t best_bytes;
} gemm_int8_workspace;

/* Whether this CPU runs the kernels (AVX512F, BW, VL and VNNI). */
int gemm_int8_supported(void);
/* Whether it also has AMX-INT8 and Linux grants this process the tile state. */
int gemm_int8_amx_supported(void);

/* One row of W quantised as the matrices are: *s = max_k |row[k]| / 127 (0 for a row of
 * zeros), wq[k] = round(row[k] / s) (nearest, ties to even) in [-127, 127]: an int8 model file
 * stores these (io/model_dir.c), and int8_matrix_pack of them is int8_matrix_quantise of W. */
void int8_quantise_row(int8_t *wq, float *s, const float *row, int in);

/* The float32 value a quantised weight stands for, s wq: the weight an int8 model file's
 * float32 view holds and an embedding lookup at int8 reads. */
static inline float int8_dequantise(int wq, float s) { return (float)wq * s; }

/* Quantises and packs W (out, in). q is overwritten (free it first if it held a matrix). */
qkv_status int8_matrix_quantise(int8_matrix *q, const float *W, int out, int in, qkv_error *err);
/* Packs weights already quantised, wq (out, in) in [-127, 127] with their scales (out) (an
 * int8 model file's): the matrix int8_matrix_quantise makes of the weights they came from. */
qkv_status int8_matrix_pack(int8_matrix *q, const int8_t *wq, const float *scale, int out, int in,
                            qkv_error *err);
void int8_matrix_free(int8_matrix *q);
/* y (in) = row o dequantised: s_w[o] wq[o, k] (an embedding lookup). */
void int8_matrix_row(float *y, const int8_matrix *q, int o);

/* The quantised weight wq[o, k] from the packed layout (tests, references). */
static inline int int8_matrix_weight(const int8_matrix *q, int o, int k)
{
    const size_t block = (size_t)(o / INT8_BLOCK) * q->k4 * 64;
    return q->w[block + (size_t)(k / 4) * 64 + (o % INT8_BLOCK) * 4 + k % 4];
}

/* Room for N rows of `in` values (and whether the AMX kernel may run, asked once). */
qkv_status gemm_int8_reserve(gemm_int8_workspace *ws, int N, int in, qkv_error *err);
void gemm_int8_workspace_free(gemm_int8_workspace *ws);

/* xu (N, 4 k4) = round(x / s_x) + 128 and s_x (N) for x (N, in); the padding past `in` is
 * 128 (zero). */
void int8_quantise_rows(uint8_t *xu, float *s_x, const float *x, int N, int in, int k4);

/* z (N, out) = sum_k xq[n, k] wq[o, k] exactly, from rows quantised by int8_quantise_rows:
 * the kernel's int32 result before the scales (tests check it bit for bit). amx: on the AMX
 * kernel (where W->in is a multiple of 64; gemm_int8_amx_supported, and xu must then hold N
 * rounded up to AMX_ROWS rows, the extra ones 128), else VNNI's. */
void gemm_int8_i32(int32_t *z, const uint8_t *xu, int N, const int8_matrix *W, int amx);

/* y (N, out) = s_x s_w sum_k xq wq + b for x (N, in = W->in); b may be NULL. The workspace
 * must have room for N rows (gemm_int8_reserve). Runs on the OpenMP threads (split by
 * channels): call it from outside parallel regions. Row n's result does not depend on N or
 * the thread count. */
void gemm_int8(float *y, const float *x, const int8_matrix *W, const float *b, int N,
               gemm_int8_workspace *ws);

/* The output layer fused with the choice after it (ops/cpu/best.h): for each of N rows of x,
 * rq->k best of y = x W^T + b (the values gemm_int8 would write, bit for bit) and, when
 * rq->lse is set, the log normaliser, computed a chunk of channels at a time without the
 * logits written out. The workspace must have room for N rows (gemm_int8_reserve) and for
 * the chunks' buffers (gemm_int8_reserve_best with k and the thread count to come). */
qkv_status gemm_int8_reserve_best(gemm_int8_workspace *ws, int N, int out, int k, int threads,
                                  qkv_error *err);
void gemm_int8_best(const best_request *rq, const float *x, const int8_matrix *W, const float *b,
                    int N, gemm_int8_workspace *ws);

#endif
