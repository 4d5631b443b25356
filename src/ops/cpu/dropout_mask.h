/* SPDX-License-Identifier: MIT */
/* Dropout's keep decision as a bit mask instead of a branch. Private to the library.
 * Element i of a dropout stream is kept when u(seed, i) >= p (core/internal.h's
 * dropout_keep). Branching on that random bit is mispredicted on about p of the elements,
 * which made the dropout loops 3x slower than the hash they compute; here the decision
 * becomes an all-ones or all-zeros mask that selects the value's bits. The elements kept,
 * and every value, are exactly dropout_keep's. */
#ifndef QKV_DROPOUT_MASK_H
#define QKV_DROPOUT_MASK_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "core/internal.h"

typedef struct {
    uint64_t seed;
    uint32_t threshold; /* kept iff the 24 bits of u are >= threshold */
    float scale;        /* 1 / (1 - p) */
} dropout_rule;

/* u = k / 2^24 (k the top 24 bits) >= p  <=>  k >= p 2^24  <=>  k >= ceil(p 2^24): p 2^24
 * is exact in float (a power-of-two scaling), and below 2^24 as p < 1. p <= 0 keeps all. */
static inline dropout_rule dropout_rule_of(float p, uint64_t seed)
{
    dropout_rule d = {seed, 0, 1.0f};
    if (p > 0.0f) {
        d.threshold = (uint32_t)ceilf(p * 16777216.0f);
        d.scale = 1.0f / (1.0f - p);
    }
    return d;
}

/* All ones if element i is kept, else 0. */
static inline uint32_t dropout_mask(const dropout_rule *d, uint64_t i)
{
    return -(uint32_t)((random_u32(d->seed, i) >> 8) >= d->threshold);
}

/* v where mask is all ones, +0 where it is 0. */
static inline float dropout_select(float v, uint32_t mask)
{
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    bits &= mask;
    memcpy(&v, &bits, sizeof v);
    return v;
}

/* v / (1 - p) if element i is kept, else +0. */
static inline float dropout_apply(const dropout_rule *d, uint64_t i, float v)
{
    return dropout_select(v * d->scale, dropout_mask(d, i));
}

#endif
