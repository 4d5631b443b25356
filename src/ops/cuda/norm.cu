/* SPDX-License-Identifier: MIT */
/* LayerNorm over the last axis (Ba et al. 2016; ops/cpu/norm.c): one block per row, whose
 * threads share its C values and meet in block-wide sums.
 *   forward   mu = mean(x),  rstd = 1 / sqrt(mean((x - mu)^2) + eps),
 *             y = (x - mu) rstd gamma + beta
 *   backward  xhat = (x - mu) rstd,  g = dy gamma,
 *             dx += rstd (g - mean(g) - xhat mean(g xhat)),
 *             dgamma += sum_rows dy xhat,  dbeta += sum_rows dy  (one thread per column) */
#include "ops/cuda/common.cuh"

enum { ROW_THREADS = 256 };

__global__ void layernorm_forward_kernel(float *y, float *mean, float *rstd, const float *x,
                                         const float *gamma, const float *beta, int C, float eps)
{
    __shared__ float shared[32];
    const size_t row = (size_t)blockIdx.x * C;
    const float *xr = x + row;
    float s = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) s += xr[c];
    const float mu = block_sum(s, shared) / (float)C;
    float q = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) q += (xr[c] - mu) * (xr[c] - mu);
    const float r = rsqrtf(block_sum(q, shared) / (float)C + eps);
    float *yr = y + row;
    for (int c = threadIdx.x; c < C; c += blockDim.x) yr[c] = (xr[c] - mu) * r * gamma[c] + beta[c];
    if (threadIdx.x == 0) mean[blockIdx.x] = mu, rstd[blockIdx.x] = r;
}

__global__ void layernorm_backward_kernel(float *dx, const float *dy, const float *x,
                                          const float *mean, const float *rstd,
                                          const float *gamma, int C)
{
    __shared__ float shared[32];
    const size_t row = (size_t)blockIdx.x * C;
    const float *xr = x + row, *dyr = dy + row;
    const float mu = mean[blockIdx.x], r = rstd[blockIdx.x];
    float g_sum = 0.0f, gx_sum = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        const float g = dyr[c] * gamma[c];
        g_sum += g;
        gx_sum += g * (xr[c] - mu) * r;
    }
    const float g_mean = block_sum(g_sum, shared) / (float)C;
    const float gx_mean = block_sum(gx_sum, shared) / (float)C;
    float *dxr = dx + row;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        const float xhat = (xr[c] - mu) * r;
        dxr[c] += r * (dyr[c] * gamma[c] - g_mean - xhat * gx_mean);
    }
}

/* one thread per column, the rows in order */
__global__ void layernorm_param_kernel(float *dgamma, float *dbeta, const float *dy,
                                       const float *x, const float *mean, const float *rstd,
                                       int N, int C)
{
    GRID_STRIDE(c, (size_t)C)
    {
        float g = 0.0f, b = 0.0f;
        for (int i = 0; i < N; i++) {
            const float d = dy[(size_t)i * C + c];
            g += d * (x[(size_t)i * C + c] - mean[i]) * rstd[i];
            b += d;
        }
        if (dgamma) dgamma[c] += g;
        if (dbeta) dbeta[c] += b;
    }
}

extern "C" void cuda_layernorm_forward(float *y, float *mean, float *rstd, const float *x,
                                       const float *gamma, const float *beta, int N, int C,
                                       float eps)
{
    if (N > 0)
        layernorm_forward_kernel<<<N, ROW_THREADS>>>(y, mean, rstd, x, gamma, beta, C, eps);
}

extern "C" void cuda_layernorm_backward(float *dx, float *dgamma, float *dbeta, const float *dy,
                                        const float *x, const float *mean, const float *rstd,
                                        const float *gamma, int N, int C)
{
    if (N <= 0) return;
    if (dx) layernorm_backward_kernel<<<N, ROW_THREADS>>>(dx, dy, x, mean, rstd, gamma, C);
    if (dgamma || dbeta)
        layernorm_param_kernel<<<blocks_for(C), THREADS>>>(dgamma, dbeta, dy, x, mean, rstd, N,
                                                            C);
}
