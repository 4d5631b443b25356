/* SPDX-License-Identifier: MIT */
/* Scaled dot-product attention on the GPU (paper, eq. 1), O = dropout(softmax(Q K^T / sqrt d)) V,
 * three ways, each the CPU kernel's arithmetic (ops/cpu/attention.c, flash_attention.c,
 * cached_attention.c) in simple CUDA:
 *
 *   materialised  one block per query row: the row's scores into P, the masked softmax in
 *                 place, then the row of O. Backward: dS = P (dP - rowsum(P dP)) per row,
 *                 dQ per query row and dK, dV per key row, each a plain sum in order.
 *   flash         (Dao et al. 2022; FA-2's loop order) one thread per query row, tiles of
 *                 keys and values in shared memory, the online softmax in registers: the
 *                 n x m weights never exist, only L = the rows' log-sum-exp. Backward
 *                 recomputes P = exp(S - L): dQ with a thread per query, dK and dV with a
 *                 thread per key, so that no sum needs atomics.
 *   cached        one query per row over a decoding step's key-value cache (rows, or a
 *                 beam's ancestry; float32 or bf16 values): one block per (row, head).
 *
 * The threads of the flash kernels keep a head's vectors in registers: head sizes up to 256
 * (the template's D; the table sends larger heads to the materialised kernel). */
#include "ops/cuda/common.cuh"

enum { ROW_THREADS = 128, FLASH_ROWS = 64, MAX_TILE_KEYS = 32 };

/* Where head h of row t of a (B, T, H, w) tensor starts. */
__device__ __forceinline__ size_t at(int b, int t, int h, int T, int H, int w)
{
    return (((size_t)b * T + t) * H + h) * w;
}

__device__ __forceinline__ float dot(const float *x, const float *y, int d)
{
    float s = 0.0f;
    for (int c = 0; c < d; c++) s += x[c] * y[c];
    return s;
}

/* One row's softmax by the block's threads together: p[0, len) holds the scores, each thread's
 * partial maximum mx of those it wrote; p becomes softmax(p) over [0, len) and 0 over
 * [len, m) (a row that sees no key is all 0). */
__device__ void block_softmax(float *p, float mx, int len, int m, float *shared)
{
    mx = block_max(mx, shared);
    float sum = 0.0f;
    for (int j = threadIdx.x; j < len; j += blockDim.x) {
        p[j] = expf(p[j] - mx);
        sum += p[j];
    }
    sum = block_sum(sum, shared);
    const float inv = len > 0 ? 1.0f / sum : 0.0f;
    for (int j = threadIdx.x; j < m; j += blockDim.x) p[j] = j < len ? p[j] * inv : 0.0f;
    __syncthreads();
}

/* ---- materialised ------------------------------------------------------------------------- */

__global__ void attention_forward_kernel(float *O, float *P, cuda_attention a, dropout_rule r,
                                         float scale)
{
    __shared__ float shared[32];
    const int i = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int H = a.s.H, n = a.s.n, m = a.s.m, d = a.s.d, v = a.s.v;
    const float *q = a.Q + at(b, i, h, n, H, d);
    const size_t row = (((size_t)b * H + h) * n + i) * m; /* also the dropout counters' base */
    float *p = P + row;
    const int len = mask_visible(a.mask, b, i, n, m);
    float mx = -INFINITY;
    for (int j = threadIdx.x; j < len; j += blockDim.x) {
        p[j] = dot(q, a.K + at(b, j, h, m, H, d), d) * scale;
        mx = fmaxf(mx, p[j]);
    }
    block_softmax(p, mx, len, m, shared);
    float *o = O + at(b, i, h, n, H, v);
    for (int c = threadIdx.x; c < v; c += blockDim.x) {
        float acc = 0.0f;
        for (int j = 0; j < len; j++)
            acc += dropout_apply(r, row + j, p[j]) * a.V[at(b, j, h, m, H, v) + c];
        o[c] = acc;
    }
}

/* dS (one row) = P (dP - rowsum(P dP)), dP = dropout'(dO V^T) */
__global__ void attention_ds_kernel(float *dS, const float *dO, const float *P, cuda_attention a,
                                    dropout_rule r)
{
    __shared__ float shared[32];
    const int i = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int H = a.s.H, n = a.s.n, m = a.s.m, v = a.s.v;
    const size_t row = (((size_t)b * H + h) * n + i) * m;
    const float *p = P + row, *g = dO + at(b, i, h, n, H, v);
    float *ds = dS + row, dotp = 0.0f;
    for (int j = threadIdx.x; j < m; j += blockDim.x) {
        ds[j] = dropout_apply(r, row + j, dot(g, a.V + at(b, j, h, m, H, v), v));
        dotp += p[j] * ds[j];
    }
    dotp = block_sum(dotp, shared);
    for (int j = threadIdx.x; j < m; j += blockDim.x) ds[j] = p[j] * (ds[j] - dotp);
}

/* dQ (row i) += scale dS K */
__global__ void attention_dq_kernel(float *dQ, const float *dS, cuda_attention a, float scale)
{
    const int i = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int H = a.s.H, n = a.s.n, m = a.s.m, d = a.s.d;
    const float *ds = dS + (((size_t)b * H + h) * n + i) * m;
    for (int c = threadIdx.x; c < d; c += blockDim.x) {
        float acc = 0.0f;
        for (int j = 0; j < m; j++) acc += ds[j] * a.K[at(b, j, h, m, H, d) + c];
        dQ[at(b, i, h, n, H, d) + c] += scale * acc;
    }
}

/* dK (key j) += scale dS^T Q;  dV (key j) += dropout(P)^T dO */
__global__ void attention_dkv_kernel(float *dK, float *dV, const float *dO, const float *P,
                                     const float *dS, cuda_attention a, dropout_rule r,
                                     float scale)
{
    const int j = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int H = a.s.H, n = a.s.n, m = a.s.m, d = a.s.d, v = a.s.v;
    const size_t head = ((size_t)b * H + h) * n * m;
    for (int c = threadIdx.x; dK && c < d; c += blockDim.x) {
        float acc = 0.0f;
        for (int i = 0; i < n; i++)
            acc += dS[head + (size_t)i * m + j] * a.Q[at(b, i, h, n, H, d) + c];
        dK[at(b, j, h, m, H, d) + c] += scale * acc;
    }
    for (int c = threadIdx.x; dV && c < v; c += blockDim.x) {
        float acc = 0.0f;
        for (int i = 0; i < n; i++) {
            const size_t k = head + (size_t)i * m + j;
            acc += dropout_apply(r, k, P[k]) * dO[at(b, i, h, n, H, v) + c];
        }
        dV[at(b, j, h, m, H, v) + c] += acc;
    }
}

static float scale_of(const cuda_attention *a) { return 1.0f / sqrtf((float)a->s.d); }

extern "C" void cuda_attention_forward(float *O, float *P, const cuda_attention *a)
{
    const dim3 grid(a->s.n, a->s.H, a->s.B);
    if (a->s.n && a->s.H && a->s.B)
        attention_forward_kernel<<<grid, ROW_THREADS>>>(O, P, *a, dropout_rule_of(a->drop),
                                                        scale_of(a));
}

extern "C" void cuda_attention_backward(float *dQ, float *dK, float *dV, const float *dO,
                                        const float *P, const cuda_attention *a, float *scratch)
{
    if (!a->s.n || !a->s.m || !a->s.H || !a->s.B) return;
    const dim3 rows(a->s.n, a->s.H, a->s.B), keys(a->s.m, a->s.H, a->s.B);
    const dropout_rule r = dropout_rule_of(a->drop);
    if (dQ || dK) attention_ds_kernel<<<rows, ROW_THREADS>>>(scratch, dO, P, *a, r);
    if (dQ) attention_dq_kernel<<<rows, ROW_THREADS>>>(dQ, scratch, *a, scale_of(a));
    if (dK || dV)
        attention_dkv_kernel<<<keys, ROW_THREADS>>>(dK, dV, dO, P, scratch, *a, r, scale_of(a));
}

/* ---- flash ---------------------------------------------------------------------------------- */

/* Rows per shared tile: rows of d + v (+ extra) floats in 48 KiB. */
static int tile_rows(const cuda_attention *a, int extra)
{
    const int k = 12288 / (a->s.d + a->s.v + extra);
    return k < MAX_TILE_KEYS ? (k > 0 ? k : 1) : MAX_TILE_KEYS;
}

/* The most keys any row of this block sees (tiles past it are skipped: a causal mask halves
 * the work). */
__device__ int block_keys(int len)
{
    __shared__ int most;
    if (threadIdx.x == 0) most = 0;
    __syncthreads();
    atomicMax(&most, len);
    __syncthreads();
    return most;
}

/* keys j0 .. j0 + cnt - 1 of head h: K rows into Kt (cnt, d), V rows into Vt (cnt, v) */
__device__ void load_tile(float *Kt, float *Vt, const cuda_attention &a, int b, int h, int j0,
                          int cnt)
{
    const int H = a.s.H, m = a.s.m, d = a.s.d, v = a.s.v;
    for (int e = threadIdx.x; e < cnt * d; e += blockDim.x)
        Kt[e] = a.K[at(b, j0 + e / d, h, m, H, d) + e % d];
    for (int e = threadIdx.x; e < cnt * v; e += blockDim.x)
        Vt[e] = a.V[at(b, j0 + e / v, h, m, H, v) + e % v];
}

template <int D>
__global__ void flash_forward_kernel(float *O, float *L, cuda_attention a, dropout_rule r,
                                     float scale, int tk)
{
    extern __shared__ float tile[];
    const int h = blockIdx.y, b = blockIdx.z, i = blockIdx.x * FLASH_ROWS + threadIdx.x;
    const int H = a.s.H, n = a.s.n, m = a.s.m, d = a.s.d, v = a.s.v;
    const int len = i < n ? mask_visible(a.mask, b, i, n, m) : 0;
    const int keys = block_keys(len);
    const size_t row = (((size_t)b * H + h) * n + i) * m;
    float q[D], o[D];
    #pragma unroll
    for (int c = 0; c < D; c++) q[c] = c < d && i < n ? a.Q[at(b, i, h, n, H, d) + c] : 0.0f;
    #pragma unroll
    for (int c = 0; c < D; c++) o[c] = 0.0f;
    float mx = -INFINITY, l = 0.0f;
    float *Kt = tile, *Vt = tile + tk * d;
    for (int j0 = 0; j0 < keys; j0 += tk) {
        const int cnt = min(tk, keys - j0);
        __syncthreads(); /* the previous tile is read */
        load_tile(Kt, Vt, a, b, h, j0, cnt);
        __syncthreads();
        for (int t = 0; t < cnt && j0 + t < len; t++) {
            float s = 0.0f;
            #pragma unroll
            for (int c = 0; c < D; c++) s += c < d ? q[c] * Kt[t * d + c] : 0.0f;
            s *= scale;
            if (s > mx) { /* a new row max: what was summed so far shrinks by e^(mx - s) */
                const float f = expf(mx - s);
                l *= f;
                #pragma unroll
                for (int c = 0; c < D; c++) o[c] *= f;
                mx = s;
            }
            const float p = expf(s - mx), pd = dropout_apply(r, row + j0 + t, p);
            l += p;
            #pragma unroll
            for (int c = 0; c < D; c++) o[c] += c < v ? pd * Vt[t * v + c] : 0.0f;
        }
    }
    if (i >= n) return;
    const float inv = len > 0 ? 1.0f / l : 0.0f;
    #pragma unroll
    for (int c = 0; c < D; c++)
        if (c < v) O[at(b, i, h, n, H, v) + c] = o[c] * inv;
    L[((size_t)b * H + h) * n + i] = len > 0 ? mx + logf(l) : -INFINITY;
}

/* D_i = rowsum(dO_i O_i), one thread per row */
__global__ void flash_d_kernel(float *Dsum, const float *dO, const float *O, cuda_attention a)
{
    const int H = a.s.H, n = a.s.n, v = a.s.v;
    GRID_STRIDE(e, (size_t)a.s.B * H * n)
    {
        const int i = (int)(e % n), h = (int)(e / n % H), b = (int)(e / n / H);
        const size_t o = at(b, i, h, n, H, v);
        Dsum[e] = dot(dO + o, O + o, v);
    }
}

/* dQ_i += scale sum_j dS_ij K_j, dS = P (dropout'(dO_i V_j) - D_i), P = exp(S - L_i) */
template <int D>
__global__ void flash_dq_kernel(float *dQ, const float *dO, const float *L, const float *Dsum,
                                cuda_attention a, dropout_rule r, float scale, int tk)
{
    extern __shared__ float tile[];
    const int h = blockIdx.y, b = blockIdx.z, i = blockIdx.x * FLASH_ROWS + threadIdx.x;
    const int H = a.s.H, n = a.s.n, m = a.s.m, d = a.s.d, v = a.s.v;
    const int len = i < n ? mask_visible(a.mask, b, i, n, m) : 0;
    const int keys = block_keys(len);
    const size_t row = (((size_t)b * H + h) * n + i) * m, li = ((size_t)b * H + h) * n + i;
    const float Li = i < n ? L[li] : 0.0f, Di = i < n ? Dsum[li] : 0.0f;
    float q[D], g[D], dq[D];
    #pragma unroll
    for (int c = 0; c < D; c++) {
        q[c] = c < d && i < n ? a.Q[at(b, i, h, n, H, d) + c] : 0.0f;
        g[c] = c < v && i < n ? dO[at(b, i, h, n, H, v) + c] : 0.0f;
        dq[c] = 0.0f;
    }
    float *Kt = tile, *Vt = tile + tk * d;
    for (int j0 = 0; j0 < keys; j0 += tk) {
        const int cnt = min(tk, keys - j0);
        __syncthreads();
        load_tile(Kt, Vt, a, b, h, j0, cnt);
        __syncthreads();
        for (int t = 0; t < cnt && j0 + t < len; t++) {
            float s = 0.0f, dp = 0.0f;
            #pragma unroll
            for (int c = 0; c < D; c++) {
                s += c < d ? q[c] * Kt[t * d + c] : 0.0f;
                dp += c < v ? g[c] * Vt[t * v + c] : 0.0f;
            }
            const float p = expf(s * scale - Li);
            const float ds = p * (dropout_apply(r, row + j0 + t, dp) - Di);
            #pragma unroll
            for (int c = 0; c < D; c++) dq[c] += c < d ? ds * Kt[t * d + c] : 0.0f;
        }
    }
    if (i >= n) return;
    #pragma unroll
    for (int c = 0; c < D; c++)
        if (c < d) dQ[at(b, i, h, n, H, d) + c] += scale * dq[c];
}

/* Per key j: dV_j += sum_i dropout(P_ij) dO_i, dK_j += scale sum_i dS_ij Q_i. Tiles of
 * queries (Q, dO rows, L, D and each row's visible keys) in shared memory. */
template <int D>
__global__ void flash_dkv_kernel(float *dK, float *dV, const float *dO, const float *L,
                                 const float *Dsum, cuda_attention a, dropout_rule r, float scale,
                                 int tq)
{
    extern __shared__ float tile[];
    const int h = blockIdx.y, b = blockIdx.z, j = blockIdx.x * FLASH_ROWS + threadIdx.x;
    const int H = a.s.H, n = a.s.n, m = a.s.m, d = a.s.d, v = a.s.v;
    float k[D], vv[D], dk[D], dv[D];
    #pragma unroll
    for (int c = 0; c < D; c++) {
        k[c] = c < d && j < m ? a.K[at(b, j, h, m, H, d) + c] : 0.0f;
        vv[c] = c < v && j < m ? a.V[at(b, j, h, m, H, v) + c] : 0.0f;
        dk[c] = dv[c] = 0.0f;
    }
    float *Qt = tile, *Gt = tile + tq * d, *Lt = Gt + tq * v, *Dt = Lt + tq;
    int *lens = (int *)(Dt + tq);
    const size_t head = ((size_t)b * H + h) * n;
    for (int i0 = 0; i0 < n; i0 += tq) {
        const int cnt = min(tq, n - i0);
        __syncthreads();
        for (int e = threadIdx.x; e < cnt * d; e += blockDim.x)
            Qt[e] = a.Q[at(b, i0 + e / d, h, n, H, d) + e % d];
        for (int e = threadIdx.x; e < cnt * v; e += blockDim.x)
            Gt[e] = dO[at(b, i0 + e / v, h, n, H, v) + e % v];
        for (int e = threadIdx.x; e < cnt; e += blockDim.x) {
            Lt[e] = L[head + i0 + e], Dt[e] = Dsum[head + i0 + e];
            lens[e] = mask_visible(a.mask, b, i0 + e, n, m);
        }
        __syncthreads();
        for (int t = 0; t < cnt; t++) {
            if (j >= lens[t]) continue; /* query i0 + t does not see this key */
            float s = 0.0f, dp = 0.0f;
            #pragma unroll
            for (int c = 0; c < D; c++) {
                s += c < d ? Qt[t * d + c] * k[c] : 0.0f;
                dp += c < v ? Gt[t * v + c] * vv[c] : 0.0f;
            }
            const size_t counter = (head + i0 + t) * m + j;
            const float p = expf(s * scale - Lt[t]);
            const float pd = dropout_apply(r, counter, p);
            const float ds = p * (dropout_apply(r, counter, dp) - Dt[t]);
            #pragma unroll
            for (int c = 0; c < D; c++) {
                dv[c] += c < v ? pd * Gt[t * v + c] : 0.0f;
                dk[c] += c < d ? ds * Qt[t * d + c] : 0.0f;
            }
        }
    }
    if (j >= m) return;
    #pragma unroll
    for (int c = 0; c < D; c++) {
        if (dK && c < d) dK[at(b, j, h, m, H, d) + c] += scale * dk[c];
        if (dV && c < v) dV[at(b, j, h, m, H, v) + c] += dv[c];
    }
}

/* The smallest head size template that holds d and v. */
static int head_template(const cuda_attention *a)
{
    const int w = a->s.d > a->s.v ? a->s.d : a->s.v;
    return w <= 16 ? 16 : w <= 32 ? 32 : w <= 64 ? 64 : w <= 128 ? 128 : 256;
}

#define FLASH_DISPATCH(kernel, grid, smem, ...)                                                 \
    switch (head_template(a)) {                                                                 \
    case 16: kernel<16><<<grid, FLASH_ROWS, smem>>>(__VA_ARGS__); break;                        \
    case 32: kernel<32><<<grid, FLASH_ROWS, smem>>>(__VA_ARGS__); break;                        \
    case 64: kernel<64><<<grid, FLASH_ROWS, smem>>>(__VA_ARGS__); break;                        \
    case 128: kernel<128><<<grid, FLASH_ROWS, smem>>>(__VA_ARGS__); break;                      \
    default: kernel<256><<<grid, FLASH_ROWS, smem>>>(__VA_ARGS__); break;                       \
    }

extern "C" void cuda_flash_forward(float *O, float *L, const cuda_attention *a)
{
    if (!a->s.n || !a->s.H || !a->s.B) return;
    const dim3 grid((a->s.n + FLASH_ROWS - 1) / FLASH_ROWS, a->s.H, a->s.B);
    const int tk = tile_rows(a, 0);
    const size_t smem = (size_t)tk * (a->s.d + a->s.v) * sizeof(float);
    FLASH_DISPATCH(flash_forward_kernel, grid, smem, O, L, *a, dropout_rule_of(a->drop),
                   scale_of(a), tk)
}

extern "C" void cuda_flash_backward(float *dQ, float *dK, float *dV, const float *dO,
                                    const float *O, const float *L, const cuda_attention *a,
                                    float *scratch)
{
    if (!a->s.n || !a->s.m || !a->s.H || !a->s.B) return;
    const dropout_rule r = dropout_rule_of(a->drop);
    const size_t rows = (size_t)a->s.B * a->s.H * a->s.n;
    flash_d_kernel<<<blocks_for(rows), THREADS>>>(scratch, dO, O, *a);
    if (dQ) {
        const int tk = tile_rows(a, 0);
        const dim3 grid((a->s.n + FLASH_ROWS - 1) / FLASH_ROWS, a->s.H, a->s.B);
        const size_t smem = (size_t)tk * (a->s.d + a->s.v) * sizeof(float);
        FLASH_DISPATCH(flash_dq_kernel, grid, smem, dQ, dO, L, scratch, *a, r, scale_of(a), tk)
    }
    if (dK || dV) { /* tiles of queries: Q and dO rows, L, D and the visible keys */
        const int tq = tile_rows(a, 3);
        const dim3 grid((a->s.m + FLASH_ROWS - 1) / FLASH_ROWS, a->s.H, a->s.B);
        const size_t smem = (size_t)tq * (a->s.d + a->s.v + 3) * sizeof(float);
        FLASH_DISPATCH(flash_dkv_kernel, grid, smem, dK, dV, dO, L, scratch, *a, r,
                       scale_of(a), tq)
    }
}

/* ---- cached: one query per row over a key-value cache --------------------------------------- */

/* Value c of position j of row b's keys (or values, base V) in head h. */
__device__ __forceinline__ float cache_value(const void *base, const kv_view &kv, int b, int j,
                                             size_t head, size_t c)
{
    const int r = kv.walk == KV_ANCESTRY ? kv.ancestry[(size_t)b * kv.ld + j] : kv.row[b];
    const size_t e = (size_t)r * kv.stride + head + c;
    return kv.type == KV_BF16 ? __bfloat162float(((const __nv_bfloat16 *)base)[e])
                              : ((const float *)base)[e];
}

__global__ void cached_attention_kernel(float *O, float *S, const float *Q, kv_view kv, int H,
                                        int d, int m, float scale)
{
    __shared__ float shared[32];
    const int h = blockIdx.x, b = blockIdx.y, len = kv.len[b];
    const float *q = Q + ((size_t)b * H + h) * d;
    float *s = S + ((size_t)b * H + h) * m;
    float mx = -INFINITY;
    for (int j = threadIdx.x; j < len; j += blockDim.x) {
        const size_t head = (size_t)j * H * d + (size_t)h * d;
        float acc = 0.0f;
        for (int c = 0; c < d; c++) acc += q[c] * cache_value(kv.K, kv, b, j, head, c);
        s[j] = acc * scale;
        mx = fmaxf(mx, s[j]);
    }
    block_softmax(s, mx, len, m, shared);
    for (int c = threadIdx.x; c < d; c += blockDim.x) {
        float acc = 0.0f;
        for (int j = 0; j < len; j++)
            acc += s[j] * cache_value(kv.V, kv, b, j, (size_t)j * H * d + (size_t)h * d, c);
        O[((size_t)b * H + h) * d + c] = acc;
    }
}

extern "C" void cuda_cached_attention(float *O, float *S, const float *Q, const kv_view *kv,
                                      int B, int H, int d, int m)
{
    if (B > 0 && H > 0)
        cached_attention_kernel<<<dim3(H, B), ROW_THREADS>>>(O, S, Q, *kv, H, d, m,
                                                             1.0f / sqrtf((float)d));
}
