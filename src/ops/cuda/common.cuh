/* SPDX-License-Identifier: MIT */
/* What the CUDA kernels share: launch shapes, dropout's keep decision (the CPU's, from
 * core/random_stream.h and ops/cpu/dropout_mask.h, bit for bit), and block-wide sums and maxima.
 * Private to ops/cuda. */
#ifndef QKV_OPS_CUDA_COMMON_CUH
#define QKV_OPS_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "core/random_stream.h"
#include "ops/cuda/kernels.h"

/* Threads of an elementwise launch, and its blocks for n values (a grid-stride loop covers
 * whatever the grid's x limit leaves). */
enum { THREADS = 256 };

static inline unsigned blocks_for(size_t n)
{
    const size_t b = (n + THREADS - 1) / THREADS;
    return (unsigned)(b < 65535 * 64 ? (b ? b : 1) : 65535 * 64);
}

#define GRID_STRIDE(i, n)                                                                       \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                    \
         i += (size_t)gridDim.x * blockDim.x)

/* ---- dropout: keep element i of stream seed iff the top 24 bits of u(seed, i) reach
 * ceil(p 2^24); a kept value is scaled by 1 / (1 - p), a dropped one is +0 ------------------ */

typedef struct {
    uint64_t seed, offset;
    uint32_t threshold; /* 0: keep everything (p <= 0) */
    float scale;
} dropout_rule;

static inline dropout_rule dropout_rule_of(qkv_dropout d)
{
    dropout_rule r = {d.seed, d.offset, 0, 1.0f};
    if (d.p > 0.0f) {
        r.threshold = (uint32_t)ceilf(d.p * 16777216.0f);
        r.scale = 1.0f / (1.0f - d.p);
    }
    return r;
}

/* v / (1 - p) if counter i (offset added here) is kept, else +0 */
__device__ __forceinline__ float dropout_apply(const dropout_rule &r, uint64_t i, float v)
{
    if (!r.threshold) return v;
    return (random_u32(r.seed, r.offset + i) >> 8) >= r.threshold ? v * r.scale : 0.0f;
}

/* ---- block-wide reductions (blockDim.x a multiple of 32, at most 1024) ----------------- */

__device__ __forceinline__ float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* The sum (or max) of v over the block, returned to every thread. shared: 32 floats. */
__device__ __forceinline__ float block_sum(float v, float *shared)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads(); /* shared may still be read by a previous reduction */
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    v = lane < warps ? shared[lane] : 0.0f;
    return warp_sum(v);
}

__device__ __forceinline__ float block_max(float v, float *shared)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    v = lane < warps ? shared[lane] : -INFINITY;
    return warp_max(v);
}

/* ---- the mask: keys 0 .. visible - 1 of row (b, i) (ops/cpu/mask.h) --------------------- */

__device__ __forceinline__ int mask_visible(const qkv_mask &mask, int b, int i, int n, int m)
{
    int len = m;
    if (mask.valid_lens) {
        const int l = mask.per_query ? mask.valid_lens[(size_t)b * n + i] : mask.valid_lens[b];
        len = l < len ? l : len;
    }
    if (mask.causal && i + (m - n) + 1 < len) len = i + (m - n) + 1;
    return len < 0 ? 0 : len;
}

#endif
