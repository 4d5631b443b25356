/* SPDX-License-Identifier: MIT */
/* The choice after the output layer, without the softmax written out (CTranslate2's and
 * Marian's fused output): for each row of logits y (V), the k best tokens and, for beam
 * search, the log normaliser log sum_v exp(y_v). Greedy decoding needs the best one, beam
 * search of width K the 2K best of each live row and the row's normaliser, never the rest.
 * Private to the library.
 *
 * The k best: the k largest values over the ids not banned, best first; equal values rank
 * the lower id first, as argmax picks the first maximum; only values above -inf count (a
 * banned or masked token's logit), so a row may have fewer: the rest of the list is id -1,
 * value -inf. Banned ids are those below 32 whose bit is set in `banned` (the reserved
 * tokens a search never chooses: inference/search.h). */
#ifndef QKV_OPS_CPU_BEST_H
#define QKV_OPS_CPU_BEST_H

#include <stddef.h>
#include <stdint.h>

/* What a caller wants of each row: its k best (into ids and vals, (rows, k)) and, when lse
 * is not NULL, its log normaliser (rows); when nonfinite is not NULL, it is set to whether
 * any logit of any row was infinite or NaN (weights past float's range: no choice among
 * them means anything, and a NaN is never among the k best). */
typedef struct {
    int k;
    uint32_t banned;
    int *ids;
    float *vals;
    double *lse;
    int *nonfinite;
} best_request;

/* Row z (V): its k best into ids, vals (k each). */
void row_best(const float *z, int V, int k, uint32_t banned, int *ids, float *vals);

/* Whether all n values of z are finite. */
int all_finite(const float *z, size_t n);

/* log sum_v exp(z_v), in double (libm's exp of z_v - max): what beam search has always used
 * over written logits. */
double log_normaliser(const float *z, int V);

/* ---- the fused int8 output layer (ops/cpu/gemm_int8.c): the logits a chunk at a time ------
 * The channels are cut into chunks of BEST_CHUNK; each chunk's logits, computed into a buffer
 * of its own, give per row the chunk's k best and its part of the normaliser: its largest
 * value m_c and s_c = sum exp(y - m_c) over the chunk (exp by a polynomial in float, summed
 * in double, in channel order). The parts are merged in chunk order: the k best of the
 * chunks' lists (the same as of the whole row), and log normaliser M + log sum_c s_c exp(m_c -
 * M), M = max m_c. Chunks are fixed by the channels alone, so the result does not depend on
 * the thread count or on which thread took which chunk.
 * Against log_normaliser of the same logits it differs by at most 2^-24 (log V + 2) + 3e-7:
 * each exp(y - m_c) carries the polynomial's relative error (< 1e-7, and its argument's float
 * rounding, 2^-24 |y - m_c|), the softmax weights of the terms averaging |y - m| to at most
 * log V (the weights' entropy); the double sums and the merge add a few 2^-53 more. */
#define BEST_CHUNK 1024

/* One chunk's part of a row. */
typedef struct {
    float max;
    double sum;
} lse_part;

/* The chunk of n logits y (ids first .. first + n - 1): its k best into ids, vals, and (when
 * part is not NULL) its part of the normaliser; returns 1 when a value is infinite or NaN,
 * else 0. AVX-512 (callers check the CPU). */
int chunk_best(const float *y, int n, int first, int k, uint32_t banned, int *ids, float *vals,
               lse_part *part);
/* A row's result from its chunks' (n_chunks lists of k, and their parts when lse is wanted). */
void best_merge(const int *ids, const float *vals, const lse_part *parts, int n_chunks, int k,
                int *out_ids, float *out_vals, double *lse);

#endif
