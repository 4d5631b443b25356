/* SPDX-License-Identifier: MIT */
/* Counter-based random numbers (the generator itself is inline in core/internal.h): no state
 * to carry between calls, so any element of any stream can be produced by any thread in any
 * order. */
#include <math.h>

#include "core/internal.h"

uint32_t qkv_random_u32(uint64_t seed, uint64_t i) { return random_u32(seed, i); }

float qkv_random_uniform(uint64_t seed, uint64_t i) { return random_uniform(seed, i); }

float qkv_random_normal(uint64_t seed, uint64_t i)
{
    /* Box-Muller on two uniforms from counters 2i and 2i+1; u1 in (0, 1]. */
    double u1 = 1.0 - (double)qkv_random_uniform(seed, 2 * i);
    double u2 = (double)qkv_random_uniform(seed, 2 * i + 1);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

void qkv_fill_uniform(float *x, size_t n, float lo, float hi, uint64_t seed)
{
    for (size_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * qkv_random_uniform(seed, i);
}

void qkv_fill_normal(float *x, size_t n, float mean, float std, uint64_t seed)
{
    for (size_t i = 0; i < n; i++) x[i] = mean + std * qkv_random_normal(seed, i);
}

void qkv_init_xavier_uniform(float *W, int fan_out, int fan_in, uint64_t seed)
{
    float a = sqrtf(6.0f / (float)(fan_in + fan_out));
    qkv_fill_uniform(W, (size_t)fan_out * fan_in, -a, a, seed);
}
