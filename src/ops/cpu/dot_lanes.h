/* SPDX-License-Identifier: MIT */
/* Dot products in LANES partial sums, the shape the few-rows kernels (ops/cpu/linear.c) and
 * attention over a key-value cache (ops/cpu/cached_attention.c) share, so that a product
 * vectorises and every caller sums in the same fixed order. Private to the library. */
#ifndef QKV_DOT_LANES_H
#define QKV_DOT_LANES_H

#include <math.h>

/* a b + c, fused where the hardware has FMA (-std=c11 keeps the compiler from fusing it) */
#ifndef MULADD
#ifdef FP_FAST_FMAF
#define MULADD(a, b, c) fmaf(a, b, c)
#else
#define MULADD(a, b, c) ((a) * (b) + (c))
#endif
#endif

enum { LANES = 8 }; /* partial sums per dot product: one AVX register */

/* The LANES partial sums of a dot product, in a fixed order. */
static inline float lanes_sum(const float *a)
{
    return ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]));
}

#endif
