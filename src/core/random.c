/* Counter-based random numbers: value(seed, i) = mix(seed, i), with the SplitMix64 finaliser
 * as the mixing function. No state to carry between calls, so any element of any stream can
 * be produced by any thread in any order. */
#include <math.h>

#include "core/internal.h"

static inline uint64_t splitmix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

uint32_t qkv_random_u32(uint64_t seed, uint64_t i)
{
    /* Two rounds so that neighbouring seeds give unrelated streams. */
    return (uint32_t)(splitmix64(splitmix64(seed + 0x9e3779b97f4a7c15ULL) ^
                                 (i * 0x9e3779b97f4a7c15ULL)) >> 32);
}

float qkv_random_uniform(uint64_t seed, uint64_t i)
{
    return (float)(qkv_random_u32(seed, i) >> 8) * (1.0f / 16777216.0f); /* 24 bits: [0,1) */
}

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
