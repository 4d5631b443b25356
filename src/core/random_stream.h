/* SPDX-License-Identifier: MIT */
/* The counter-based generator behind qkv_random_* and dropout: value(seed, i) =
 * mix(mix(seed) ^ i), with the SplitMix64 finaliser as the mixing function. One text for the
 * host and for CUDA kernels, so that a device draws the same dropout masks bit for bit. Inline,
 * so that in a loop over i the compiler hoists mix(seed) and vectorises the rest. */
#ifndef QKV_RANDOM_STREAM_H
#define QKV_RANDOM_STREAM_H

#include <stdint.h>

#ifdef __CUDACC__
#define RANDOM_STREAM_FN static __host__ __device__ __forceinline__
#else
#define RANDOM_STREAM_FN static inline
#endif

RANDOM_STREAM_FN uint64_t splitmix64_mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

RANDOM_STREAM_FN uint32_t random_u32(uint64_t seed, uint64_t i)
{
    /* Two rounds so that neighbouring seeds give unrelated streams. */
    return (uint32_t)(splitmix64_mix(splitmix64_mix(seed + 0x9e3779b97f4a7c15ULL) ^
                                     (i * 0x9e3779b97f4a7c15ULL)) >> 32);
}

#undef RANDOM_STREAM_FN
#endif
