/* SPDX-License-Identifier: MIT */
/* Kernels of one value at a time, and the few that sum along one axis (the bias's gradient,
 * the positions' gradient): one thread per value or per column, grid-stride loops. Each
 * computes what the CPU function named in its comment does. */
#include "ops/cuda/common.cuh"

/* ---- memory arithmetic: y += x, x *= s ----------------------------------------------------- */

__global__ void add_kernel(float *y, const float *x, size_t n)
{
    GRID_STRIDE(i, n) y[i] += x[i];
}

__global__ void scale_kernel(float *x, size_t n, float s)
{
    GRID_STRIDE(i, n) x[i] *= s;
}

extern "C" void cuda_add(float *y, const float *x, size_t n)
{
    if (n) add_kernel<<<blocks_for(n), THREADS>>>(y, x, n);
}

extern "C" void cuda_scale(float *x, size_t n, float s)
{
    if (n) scale_kernel<<<blocks_for(n), THREADS>>>(x, n, s);
}

/* ---- activations (ops/cpu/activations.c): ReLU, GELU = x Phi(x), SiLU = x sigmoid(x) ------ */

__device__ __forceinline__ float sigmoid(float x)
{
    const float e = expf(-fabsf(x)); /* no overflow for either sign */
    return x >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
}

__device__ __forceinline__ float activate(qkv_activation act, float x)
{
    if (act == QKV_ACT_GELU) return x * normcdff(x);
    if (act == QKV_ACT_SILU) return x * sigmoid(x);
    return x > 0.0f ? x : 0.0f;
}

/* act'(x): GELU' = Phi(x) + x phi(x);  SiLU' = s (1 + x (1 - s)) */
__device__ __forceinline__ float activate_grad(qkv_activation act, float x)
{
    if (act == QKV_ACT_GELU) return normcdff(x) + x * 0.3989422804014327f * expf(-0.5f * x * x);
    if (act == QKV_ACT_SILU) {
        const float s = sigmoid(x);
        return s * (1.0f + x * (1.0f - s));
    }
    return x > 0.0f ? 1.0f : 0.0f;
}

__global__ void activation_forward_kernel(qkv_activation act, float *h, const float *h_pre,
                                          size_t n)
{
    GRID_STRIDE(i, n) h[i] = activate(act, h_pre[i]);
}

/* dh *= act'(h_pre), in place (activation_grad_inplace); ReLU passes dh or 0 */
__global__ void activation_backward_kernel(qkv_activation act, float *dh, const float *h_pre,
                                           size_t n)
{
    GRID_STRIDE(i, n)
    {
        if (act == QKV_ACT_RELU)
            dh[i] = h_pre[i] > 0.0f ? dh[i] : 0.0f;
        else
            dh[i] *= activate_grad(act, h_pre[i]);
    }
}

extern "C" void cuda_activation_forward(qkv_activation act, float *h, const float *h_pre,
                                        size_t n)
{
    if (n) activation_forward_kernel<<<blocks_for(n), THREADS>>>(act, h, h_pre, n);
}

extern "C" void cuda_activation_backward(qkv_activation act, float *dh, const float *h_pre,
                                         size_t n)
{
    if (n) activation_backward_kernel<<<blocks_for(n), THREADS>>>(act, dh, h_pre, n);
}

/* ---- dropout and the residual connection (ops/cpu/dropout.c, residual.c) --------------- */

__global__ void dropout_forward_kernel(float *y, const float *x, size_t n, dropout_rule r)
{
    GRID_STRIDE(i, n) y[i] = dropout_apply(r, i, x[i]);
}

__global__ void dropout_backward_kernel(float *dx, const float *dy, size_t n, dropout_rule r)
{
    GRID_STRIDE(i, n) dx[i] += dropout_apply(r, i, dy[i]);
}

__global__ void residual_forward_kernel(float *y, const float *x, const float *s, size_t n,
                                        dropout_rule r)
{
    GRID_STRIDE(i, n) y[i] = x[i] + dropout_apply(r, i, s[i]);
}

extern "C" void cuda_dropout_forward(float *y, const float *x, size_t n, qkv_dropout drop)
{
    if (n) dropout_forward_kernel<<<blocks_for(n), THREADS>>>(y, x, n, dropout_rule_of(drop));
}

extern "C" void cuda_dropout_backward(float *dx, const float *dy, size_t n, qkv_dropout drop)
{
    if (n) dropout_backward_kernel<<<blocks_for(n), THREADS>>>(dx, dy, n, dropout_rule_of(drop));
}

extern "C" void cuda_residual_forward(float *y, const float *x, const float *s, size_t n,
                                      qkv_dropout drop)
{
    if (n)
        residual_forward_kernel<<<blocks_for(n), THREADS>>>(y, x, s, n, dropout_rule_of(drop));
}

/* ---- the embedding: y[i] = E[ids[i]]; dE[ids[i]] += dy[i] (ops/cpu/embedding.c) -------- */

__global__ void embedding_forward_kernel(float *y, const int *ids, const float *E, int N, int C)
{
    GRID_STRIDE(e, (size_t)N * C)
    {
        const size_t i = e / C, c = e % C;
        y[e] = E[(size_t)ids[i] * C + c];
    }
}

/* Two positions with one id add into one row: atomically, so the sum's order varies. */
__global__ void embedding_backward_kernel(float *dE, const float *dy, const int *ids, int N,
                                          int C)
{
    GRID_STRIDE(e, (size_t)N * C)
    {
        const size_t i = e / C, c = e % C;
        atomicAdd(&dE[(size_t)ids[i] * C + c], dy[e]);
    }
}

extern "C" void cuda_embedding_forward(float *y, const int *ids, const float *E, int N, int C)
{
    const size_t n = (size_t)N * C;
    if (n) embedding_forward_kernel<<<blocks_for(n), THREADS>>>(y, ids, E, N, C);
}

extern "C" void cuda_embedding_backward(float *dE, const float *dy, const int *ids, int N, int C)
{
    const size_t n = (size_t)N * C;
    if (n) embedding_backward_kernel<<<blocks_for(n), THREADS>>>(dE, dy, ids, N, C);
}

/* ---- positions: y[b, t] = scale x[b, t] + P[pos0 + t] (ops/cpu/positional_encoding.c) --- */

__global__ void positional_forward_kernel(float *y, const float *x, const float *P, int T, int C,
                                          size_t n, int pos0, float scale)
{
    GRID_STRIDE(e, n)
    {
        const size_t t = (e / C) % T, c = e % C;
        y[e] = x[e] * scale + P[(pos0 + t) * C + c];
    }
}

/* dP[pos0 + t, c] += sum_b dy[b, t, c]: one thread per (t, c), the batch in order */
__global__ void positional_backward_kernel(float *dP, const float *dy, int B, int T, int C,
                                           int pos0)
{
    GRID_STRIDE(e, (size_t)T * C)
    {
        const size_t t = e / C, c = e % C;
        float s = 0.0f;
        for (int b = 0; b < B; b++) s += dy[((size_t)b * T + t) * C + c];
        dP[(pos0 + t) * C + c] += s;
    }
}

__global__ void axpy_kernel(float *dx, const float *dy, size_t n, float a)
{
    GRID_STRIDE(i, n) dx[i] += dy[i] * a;
}

extern "C" void cuda_positional_forward(float *y, const float *x, const float *P, int B, int T,
                                        int C, int pos0, float scale)
{
    const size_t n = (size_t)B * T * C;
    if (n) positional_forward_kernel<<<blocks_for(n), THREADS>>>(y, x, P, T, C, n, pos0, scale);
}

extern "C" void cuda_positional_backward(float *dx, float *dP, const float *dy, int B, int T,
                                         int C, int pos0, float scale)
{
    const size_t n = (size_t)B * T * C, tc = (size_t)T * C;
    if (dx && n) axpy_kernel<<<blocks_for(n), THREADS>>>(dx, dy, n, scale);
    if (dP && tc) positional_backward_kernel<<<blocks_for(tc), THREADS>>>(dP, dy, B, T, C, pos0);
}

/* ---- a linear layer's bias: y += b per row; db += column sums (ops/cpu/linear.c) -------- */

__global__ void bias_forward_kernel(float *y, const float *b, size_t n, int out)
{
    GRID_STRIDE(e, n) y[e] += b[e % out];
}

/* one thread per column, the rows in order: the sum does not depend on the launch */
__global__ void bias_backward_kernel(float *db, const float *dy, int N, int out)
{
    GRID_STRIDE(o, (size_t)out)
    {
        float s = 0.0f;
        for (int i = 0; i < N; i++) s += dy[(size_t)i * out + o];
        db[o] += s;
    }
}

extern "C" void cuda_bias_forward(float *y, const float *b, int N, int out)
{
    const size_t n = (size_t)N * out;
    if (n) bias_forward_kernel<<<blocks_for(n), THREADS>>>(y, b, n, out);
}

extern "C" void cuda_bias_backward(float *db, const float *dy, int N, int out)
{
    if (N > 0 && out > 0) bias_backward_kernel<<<blocks_for(out), THREADS>>>(db, dy, N, out);
}

/* ---- bf16 (ops/cpu/bf16.h: round to nearest even) ------------------------------------------ */

__global__ void round_bf16_kernel(__nv_bfloat16 *dst, const float *src, size_t n)
{
    GRID_STRIDE(i, n) dst[i] = __float2bfloat16_rn(src[i]);
}

extern "C" void cuda_round_bf16(uint16_t *dst, const float *src, size_t n)
{
    if (n) round_bf16_kernel<<<blocks_for(n), THREADS>>>((__nv_bfloat16 *)dst, src, n);
}

extern "C" void cuda_kv_store_bf16(uint16_t *cache, size_t at, const float *x, size_t n)
{
    if (n) round_bf16_kernel<<<blocks_for(n), THREADS>>>((__nv_bfloat16 *)cache + at, x, n);
}

/* ---- Adam (ops/cpu/optimizer.c) ------------------------------------------------------------ */

__global__ void adam_kernel(float *p, const float *g, float *m, float *v, size_t n,
                            adam_hyper h)
{
    GRID_STRIDE(i, n)
    {
        const float gi = g[i];
        const float mi = h.beta1 * m[i] + (1.0f - h.beta1) * gi;
        const float vi = h.beta2 * v[i] + (1.0f - h.beta2) * gi * gi;
        m[i] = mi, v[i] = vi;
        const float update = (mi * h.c1) / (sqrtf(vi * h.c2) + h.eps);
        p[i] -= h.lr * (update + h.weight_decay * p[i]);
    }
}

extern "C" void cuda_adam_update(float *p, const float *g, float *m, float *v, size_t n,
                                 const adam_hyper *h)
{
    if (n) adam_kernel<<<blocks_for(n), THREADS>>>(p, g, m, v, n, *h);
}
