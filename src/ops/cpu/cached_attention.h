/* SPDX-License-Identifier: MIT */
/* Attention of one new query per sequence over a key-value cache: the attention of a decoding
 * step (greedy, beam search, language-model generation). Not part of the API. */
#ifndef QKV_CACHED_ATTENTION_H
#define QKV_CACHED_ATTENTION_H

#include <stddef.h>

/* How a key-value cache stores its values: float32, or bf16 (ops/cpu/bf16.h; half the bytes
 * that a step reads, a relative rounding of at most 2^-8 per value, widened back exactly). */
typedef enum { KV_FP32 = 0, KV_BF16 = 1 } kv_dtype;

/* Where the queries of a step find their keys and values: a cache of rows of positions, heads
 * interleaved (as qkv_attention_forward lays them out): position j of cache row r at
 * K + r * stride + j * H * d, and the same for V. Query b sees len[b] keys, positions
 * 0 .. len[b] - 1, which lie
 *   KV_ROWS      all in cache row row[b] (a sequence's own row: greedy decoding, generation,
 *                the encoder output of its source);
 *   KV_ANCESTRY  position j in cache row ancestry[b * ld + j] (beam search: hypotheses share
 *                the keys of their common prefix where their ancestors computed them, so
 *                reordering the hypotheses moves no keys).
 * K and V hold float or, with type KV_BF16, uint16_t bf16 values (offsets count values, not
 * bytes); the products and sums are float32 either way. */
typedef enum { KV_ROWS, KV_ANCESTRY } kv_walk;

typedef struct {
    const void *K, *V;
    kv_dtype type;
    size_t stride;        /* values from one cache row to the next */
    kv_walk walk;
    const int *row;       /* (B) KV_ROWS */
    const int *ancestry;  /* (B, ld) KV_ANCESTRY */
    int ld;
    const int *len;       /* (B) keys each query sees, each at most m */
} kv_view;

/* For each query b and head h, over the len[b] keys it sees:
 *     O[b, h] = sum_{j < len[b]} softmax_j(Q[b, h] . K[b, j, h] / sqrt(d)) V[b, j, h]
 * Q, O (B, H, d). A query that sees no key gets O = 0. S (B, H, m) receives the attention
 * weights (0 for keys not seen). Equal to qkv_attention_forward with n = 1 up to float
 * rounding, without its GEMM calls, which for a single query cost more in set-up than in
 * arithmetic; each query's result depends on its own keys only (not on m or on the other
 * queries). */
void cached_attention(float *O, float *S, const float *Q, const kv_view *kv, int B, int H, int d,
                      int m);

/* Values at..at + n - 1 of a cache of type kv = x (n), rounded to bf16 at KV_BF16. */
void kv_cache_store(void *cache, kv_dtype kv, size_t at, const float *x, size_t n);

/* Whether the bf16 cache runs on the AVX-512 kernel (else a plain loop, as exact). */
int cached_attention_bf16_fast(void);

#endif
