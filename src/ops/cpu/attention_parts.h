/* SPDX-License-Identifier: MIT */
/* What the attention layers do the same way: where a head's matrices lie when heads stay
 * interleaved, and the attention weights as dropout leaves them. Private to the library. */
#ifndef QKV_ATTENTION_PARTS_H
#define QKV_ATTENTION_PARTS_H

#include "core/internal.h"

/* Heads stay interleaved, (B, T, H, w), so that the projections feed attention without
 * transposes: row t of head h of sequence b starts at ((b T + t) H + h) w, and the rows of
 * one head are H w floats apart. */
static inline size_t head_row(int b, int T, int t, int H, int h, int w)
{
    return (((size_t)b * T + t) * H + h) * w;
}

/* Where head h of sequence b starts in Q (B, n, H, d), K (B, m, H, d), V (B, m, H, v) and
 * O (B, n, H, v), and in their gradients. */
typedef struct {
    size_t q, k, v, o;
} head_offsets;

static inline head_offsets head_offsets_of(int b, int h, int H, int n, int m, int d, int v)
{
    return (head_offsets){head_row(b, n, 0, H, h, d), head_row(b, m, 0, H, h, d),
                          head_row(b, m, 0, H, h, v), head_row(b, n, 0, H, h, v)};
}

/* The weights as dropout leaves them, dropout(P) with the stream (seed, offset + i), written
 * to buf; P itself when p = 0. Backward recomputes them from P rather than keep a copy. */
static inline const float *dropped_weights(float *buf, const float *P, size_t count, float p,
                                           uint64_t seed, uint64_t offset)
{
    if (!(p > 0.0f)) return P;
    qkv_dropout_forward(buf, P, count, p, seed, offset);
    return buf;
}

#endif
