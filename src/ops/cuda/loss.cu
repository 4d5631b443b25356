/* SPDX-License-Identifier: MIT */
/* Softmax cross-entropy from logits (ops/cpu/cross_entropy.c) and the sums that come back to
 * the host: the loss of a batch and the squared norm of the gradients (clipping). A row of V
 * logits is one block's: its max, its sum of exponentials and so its log-sum-exp, then the
 * loss and, in training, the gradient written over the logits,
 *     -log p_y = lse - z_y  (with smoothing eps: (1 - eps) of it + eps (lse - mean_k z_k)),
 *     dz = scale (softmax(z) - q),  q = (1 - eps) onehot(y) + eps / V.
 * Sums over many values are CUB's (DeviceReduce), in double; their work space comes from the
 * stream's memory pool. */
#include <cub/device/device_reduce.cuh>
#include <cuda/std/functional>

#include "ops/cuda/common.cuh"

enum { ROW_THREADS = 256 };

/* targets: counted ones into out[0], the first row outside [0, V) into out[1] (atomicMin) */
__global__ void count_targets_kernel(int *out, const int *targets, int N, int V, int ignore)
{
    GRID_STRIDE(i, (size_t)N)
    {
        const int y = targets[i];
        if (y == ignore) continue;
        atomicAdd(&out[0], 1);
        if (y < 0 || y >= V) atomicMin(&out[1], (int)i);
    }
}

extern "C" int cuda_count_targets(const int *targets, int N, int V, int ignore_index, int *bad)
{
    int host[2] = {0, N}, *dev = NULL;
    *bad = -1;
    if (N <= 0) return 0;
    if (cudaMallocAsync((void **)&dev, sizeof host, 0) != cudaSuccess) return -1;
    cudaMemcpyAsync(dev, host, sizeof host, cudaMemcpyHostToDevice, 0);
    count_targets_kernel<<<blocks_for((size_t)N), THREADS>>>(dev, targets, N, V, ignore_index);
    cudaMemcpyAsync(host, dev, sizeof host, cudaMemcpyDeviceToHost, 0);
    cudaFreeAsync(dev, 0);
    if (cudaStreamSynchronize(0) != cudaSuccess) return -1;
    if (host[1] < N) *bad = host[1];
    return host[0];
}

__global__ void cross_entropy_kernel(float *loss, float *lse, float *logits, const int *targets,
                                     int V, int ignore, float eps, int backward, float scale)
{
    __shared__ float shared[32];
    const size_t row = blockIdx.x;
    float *z = logits + row * V;
    const int y = targets[row];
    if (backward && y == ignore) { /* an ignored row: no loss, no gradient */
        for (int k = threadIdx.x; k < V; k += blockDim.x) z[k] = 0.0f;
        if (threadIdx.x == 0) lse[row] = 0.0f, loss[row] = 0.0f;
        return;
    }
    float mx = -INFINITY, zsum = 0.0f;
    for (int k = threadIdx.x; k < V; k += blockDim.x) mx = fmaxf(mx, z[k]), zsum += z[k];
    mx = block_max(mx, shared);
    zsum = eps != 0.0f ? block_sum(zsum, shared) : 0.0f;
    float s = 0.0f;
    for (int k = threadIdx.x; k < V; k += blockDim.x) s += expf(z[k] - mx);
    s = block_sum(s, shared);
    const float l = mx + logf(s);
    if (threadIdx.x == 0) {
        lse[row] = l;
        if (y == ignore) {
            loss[row] = 0.0f;
        } else {
            const float nll = l - z[y];
            loss[row] = eps == 0.0f ? nll : (1.0f - eps) * nll + eps * (l - zsum / (float)V);
        }
    }
    if (!backward) return;
    __syncthreads(); /* z[y] is read above before it is overwritten */
    const float uniform = scale * eps / (float)V;
    for (int k = threadIdx.x; k < V; k += blockDim.x) {
        const float g = scale * expf(z[k] - l) - uniform;
        z[k] = k == y ? g - scale * (1.0f - eps) : g;
    }
}

/* float -> double, and float -> its square in double */
struct widen {
    __device__ double operator()(float x) const { return (double)x; }
};
struct square {
    __device__ double operator()(float x) const { return (double)x * x; }
};

/* sum_i f(x_i) in double through CUB, on the host; NaN when the device fails */
template <typename F>
static double reduce(const float *x, size_t n, F f)
{
    double sum = 0.0;
    size_t bytes = 0;
    char *temp = NULL;
    if (!n) return 0.0;
    if (cub::DeviceReduce::TransformReduce(NULL, bytes, x, (double *)NULL, n,
                                           cuda::std::plus<double>{}, f, 0.0) != cudaSuccess)
        return NAN;
    const size_t room = (bytes + 255) & ~(size_t)255; /* the work space, then the sum */
    if (cudaMallocAsync((void **)&temp, room + sizeof(double), 0) != cudaSuccess) return NAN;
    double *out = (double *)(temp + room);
    cub::DeviceReduce::TransformReduce(temp, bytes, x, out, n, cuda::std::plus<double>{}, f,
                                       0.0);
    cudaMemcpyAsync(&sum, out, sizeof sum, cudaMemcpyDeviceToHost, 0);
    cudaFreeAsync(temp, 0);
    return cudaStreamSynchronize(0) == cudaSuccess ? sum : NAN;
}

extern "C" double cuda_cross_entropy(float *loss, float *lse, float *logits, const int *targets,
                                     int N, int V, int ignore_index, float label_smoothing,
                                     int backward, float scale)
{
    if (N <= 0) return 0.0;
    cross_entropy_kernel<<<N, ROW_THREADS>>>(loss, lse, logits, targets, V, ignore_index,
                                             label_smoothing, backward, scale);
    return reduce(loss, (size_t)N, widen{});
}

extern "C" double cuda_sum_squares(const float *x, size_t n) { return reduce(x, n, square{}); }
