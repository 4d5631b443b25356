/* SPDX-License-Identifier: MIT */
/* The CUDA stand-in of shim.h: the runtime calls backend/cuda.c makes, cuBLAS's, and every
 * launcher of ops/cuda/kernels.h, on the CPU. */
#define _DEFAULT_SOURCE /* mmap's MAP_ANONYMOUS and MAP_NORESERVE, madvise */
#include <cublas_v2.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ops/cpu/bf16.h"
#include "ops/cpu/cached_attention.h"
#include "ops/cpu/fused.h"
#include "ops/cpu/linear.h"
#include "ops/cpu/optimizer.h"
#include "ops/cuda/kernels.h"
#include "shim.h"

cuda_shim shim;

/* ---- device memory: one region the host cannot touch, opened for the shim's own calls ---- */

enum { REGION_GIB = 16, ALIGN = 4096, MAX_BLOCKS = 1 << 16 };

typedef struct {
    size_t at, size;
    int live;
} block;

static struct {
    char *base;
    size_t top; /* bytes handed out so far (never reused: a stale pointer stays invalid) */
    block blocks[MAX_BLOCKS];
    int n;
    int open;          /* nested opens of the region */
    cudaError_t last;  /* what cudaGetLastError returns next */
} heap;

static void region_init(void)
{
    if (heap.base) return;
    void *p = mmap(NULL, (size_t)REGION_GIB << 30, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) abort();
    heap.base = p;
}

static void region_protect(int prot)
{
    if (heap.top) mprotect(heap.base, heap.top, prot);
}

static void device_open(void)
{
    if (heap.open++ == 0) region_protect(PROT_READ | PROT_WRITE);
}

static void device_close(void)
{
    if (--heap.open == 0) region_protect(PROT_NONE);
}

static block *block_at(const void *p)
{
    const char *c = p;
    if (!heap.base || c < heap.base || c >= heap.base + heap.top) return NULL;
    const size_t off = (size_t)(c - heap.base);
    int lo = 0, hi = heap.n - 1; /* blocks are in address order */
    while (lo <= hi) {
        const int mid = (lo + hi) / 2;
        block *b = &heap.blocks[mid];
        if (off < b->at)
            hi = mid - 1;
        else if (off >= b->at + b->size)
            lo = mid + 1;
        else
            return b;
    }
    return NULL;
}

int shim_is_device(const void *p)
{
    const block *b = block_at(p);
    return b && b->live;
}

size_t shim_size_of(const void *p)
{
    const block *b = block_at(p);
    return b && b->live && heap.base + b->at == (const char *)p ? b->size : 0;
}

void shim_reset(void)
{
    const int live = shim.live;
    const size_t live_bytes = shim.live_bytes;
    memset(&shim, 0, sizeof shim);
    shim.live = live, shim.live_bytes = live_bytes;
    heap.last = cudaSuccess;
}

/* A pointer a kernel is given must be device memory: anything else counts as a misuse. */
static void need(const void *p)
{
    if (p && !shim_is_device(p)) shim.misuse++;
}

/* ---- the runtime ------------------------------------------------------------------------------ */

static int fails(int count, int at) { return at && count == at; }

cudaError_t cudaGetDeviceCount(int *n)
{
    *n = shim.device_error == cudaSuccess ? 1 : 0;
    if (shim.device_error != cudaSuccess) heap.last = shim.device_error;
    return shim.device_error;
}

cudaError_t cudaSetDevice(int d) { return d == 0 ? cudaSuccess : cudaErrorInvalidDevice; }

cudaError_t cudaRuntimeGetVersion(int *v)
{
    *v = CUDART_VERSION;
    return cudaSuccess;
}

cudaError_t cudaMalloc(void **p, size_t bytes)
{
    region_init();
    *p = NULL;
    if (fails(++shim.mallocs, shim.fail_malloc_at) || heap.n == MAX_BLOCKS ||
        heap.top + bytes > ((size_t)REGION_GIB << 30))
        return heap.last = cudaErrorMemoryAllocation;
    const size_t size = (bytes + ALIGN - 1) / ALIGN * ALIGN;
    heap.blocks[heap.n++] = (block){heap.top, size, 1};
    *p = heap.base + heap.top;
    heap.top += size;
    if (heap.open) region_protect(PROT_READ | PROT_WRITE);
    shim.live++, shim.live_bytes += size;
    return cudaSuccess;
}

cudaError_t cudaFree(void *p)
{
    if (!p) return cudaSuccess;
    block *b = block_at(p);
    if (!b || !b->live || heap.base + b->at != (char *)p) {
        shim.misuse++;
        return heap.last = cudaErrorInvalidValue;
    }
    b->live = 0;
    madvise(heap.base + b->at, b->size, MADV_DONTNEED); /* and it reads as zeros if reused */
    shim.live--, shim.live_bytes -= b->size;
    return cudaSuccess;
}

static cudaError_t copy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind)
{
    if (fails(++shim.copies, shim.fail_copy_at)) return heap.last = cudaErrorIllegalAddress;
    const int to_dev = shim_is_device(dst), from_dev = shim_is_device(src);
    const int ok = kind == cudaMemcpyHostToDevice   ? to_dev && !from_dev
                   : kind == cudaMemcpyDeviceToHost ? !to_dev && from_dev
                   : kind == cudaMemcpyDeviceToDevice ? to_dev && from_dev
                                                      : 0;
    if (!ok) {
        shim.misuse++;
        return heap.last = cudaErrorInvalidValue;
    }
    if (kind == cudaMemcpyHostToDevice) shim.uploads++, shim.upload_bytes += bytes;
    if (kind == cudaMemcpyDeviceToHost) shim.downloads++, shim.download_bytes += bytes;
    device_open();
    memmove(dst, src, bytes);
    device_close();
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind)
{
    return copy(dst, src, bytes, kind);
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind,
                            cudaStream_t stream)
{
    (void)stream;
    return copy(dst, src, bytes, kind);
}

cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t stream)
{
    (void)stream;
    need(p);
    device_open();
    memset(p, value, bytes);
    device_close();
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }

cudaError_t cudaGetLastError(void)
{
    const cudaError_t e = heap.last;
    heap.last = cudaSuccess;
    return e;
}

const char *cudaGetErrorString(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInsufficientDriver:
        return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    default: return "unknown error";
    }
}

const char *cudaGetErrorName(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    default: return "cudaErrorUnknown";
    }
}

/* ---- cuBLAS: C = alpha op(A) op(B) + beta C, column-major, as its documentation defines ---- */

struct cublasContext {
    int live;
};

cublasStatus_t cublasCreate_v2(cublasHandle_t *h)
{
    if (shim.fail_blas_create) return CUBLAS_STATUS_NOT_INITIALIZED;
    *h = calloc(1, sizeof **h);
    return *h ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t h)
{
    free(h);
    return CUBLAS_STATUS_SUCCESS;
}

const char *cublasGetStatusString(cublasStatus_t s)
{
    return s == CUBLAS_STATUS_SUCCESS ? "CUBLAS_STATUS_SUCCESS"
           : s == CUBLAS_STATUS_EXECUTION_FAILED ? "CUBLAS_STATUS_EXECUTION_FAILED"
           : s == CUBLAS_STATUS_NOT_INITIALIZED ? "CUBLAS_STATUS_NOT_INITIALIZED"
                                                  : "CUBLAS_STATUS_INTERNAL_ERROR";
}

static float bf16_value(uint16_t u)
{
    const uint32_t bits = (uint32_t)u << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* element (i, l) of op(X), X column-major with leading dimension ld, of float or bf16 */
static float at(const void *X, int bf16, int trans, int ld, int i, int l)
{
    const size_t e = trans ? (size_t)l + (size_t)i * ld : (size_t)i + (size_t)l * ld;
    return bf16 ? bf16_value(((const uint16_t *)X)[e]) : ((const float *)X)[e];
}

static cublasStatus_t gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                           float alpha, const void *A, int a16, int lda, const void *B, int b16,
                           int ldb, float beta, float *C, int ldc)
{
    if (fails(++shim.blas_calls, shim.fail_blas_at)) return CUBLAS_STATUS_EXECUTION_FAILED;
    need(A), need(B), need(C);
    device_open();
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            float s = 0.0f;
            for (int l = 0; l < k; l++)
                s += at(A, a16, ta != CUBLAS_OP_N, lda, i, l) *
                     at(B, b16, tb != CUBLAS_OP_N, ldb, l, j);
            float *c = &C[(size_t)i + (size_t)j * ldc];
            *c = alpha * s + (beta != 0.0f ? beta * *c : 0.0f);
        }
    device_close();
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSgemm_v2(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                              int n, int k, const float *alpha, const float *A, int lda,
                              const float *B, int ldb, const float *beta, float *C, int ldc)
{
    (void)h;
    return gemm(ta, tb, m, n, k, *alpha, A, 0, lda, B, 0, ldb, *beta, C, ldc);
}

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                            int n, int k, const void *alpha, const void *A, cudaDataType Atype,
                            int lda, const void *B, cudaDataType Btype, int ldb,
                            const void *beta, void *C, cudaDataType Ctype, int ldc,
                            cublasComputeType_t compute, cublasGemmAlgo_t algo)
{
    (void)h, (void)algo;
    if (Ctype != CUDA_R_32F || compute != CUBLAS_COMPUTE_32F ||
        (Atype != CUDA_R_16BF && Atype != CUDA_R_32F) ||
        (Btype != CUDA_R_16BF && Btype != CUDA_R_32F))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    return gemm(ta, tb, m, n, k, *(const float *)alpha, A, Atype == CUDA_R_16BF, lda, B,
                Btype == CUDA_R_16BF, ldb, *(const float *)beta, C, ldc);
}

/* ---- the kernels: each launcher runs the CPU kernel of the same meaning ---------------------- */

/* A launch: counted, failed when asked (its error left for cudaGetLastError), else the region
 * opened for the kernel's body. */
static int launch(void)
{
    if (fails(++shim.launches, shim.fail_launch_at)) {
        heap.last = cudaErrorLaunchFailure;
        return 0;
    }
    device_open();
    return 1;
}

#define KERNEL(...)                                                                             \
    do {                                                                                        \
        if (!launch()) return;                                                                  \
        __VA_ARGS__;                                                                            \
        device_close();                                                                         \
    } while (0)

void cuda_add(float *y, const float *x, size_t n)
{
    need(y), need(x);
    KERNEL(for (size_t i = 0; i < n; i++) y[i] += x[i]);
}

void cuda_scale(float *x, size_t n, float s)
{
    need(x);
    KERNEL(for (size_t i = 0; i < n; i++) x[i] *= s);
}

void cuda_activation_forward(qkv_activation act, float *h, const float *h_pre, size_t n)
{
    need(h), need(h_pre);
    KERNEL(if (act == QKV_ACT_GELU) qkv_gelu_forward(h, h_pre, n);
           else if (act == QKV_ACT_SILU) qkv_silu_forward(h, h_pre, n);
           else qkv_relu_forward(h, h_pre, n));
}

void cuda_activation_backward(qkv_activation act, float *dh, const float *h_pre, size_t n)
{
    need(dh), need(h_pre);
    KERNEL(activation_grad_inplace(act, dh, h_pre, n));
}

void cuda_dropout_forward(float *y, const float *x, size_t n, qkv_dropout drop)
{
    need(y), need(x);
    KERNEL(qkv_dropout_forward(y, x, n, drop.p, drop.seed, drop.offset));
}

void cuda_dropout_backward(float *dx, const float *dy, size_t n, qkv_dropout drop)
{
    need(dx), need(dy);
    KERNEL(qkv_dropout_backward(dx, dy, n, drop.p, drop.seed, drop.offset));
}

void cuda_residual_forward(float *y, const float *x, const float *s, size_t n, qkv_dropout drop)
{
    need(y), need(x), need(s);
    KERNEL(qkv_residual_forward(y, x, s, n, drop));
}

void cuda_embedding_forward(float *y, const int *ids, const float *E, int N, int C)
{
    need(y), need(ids), need(E);
    KERNEL(for (int i = 0; i < N; i++)
               memcpy(y + (size_t)i * C, E + (size_t)ids[i] * C, (size_t)C * sizeof *y));
}

void cuda_embedding_backward(float *dE, const float *dy, const int *ids, int N, int C)
{
    need(dE), need(dy), need(ids);
    KERNEL(qkv_embedding_backward(dE, dy, ids, N, C));
}

void cuda_positional_forward(float *y, const float *x, const float *P, int B, int T, int C,
                             int pos0, float scale)
{
    need(y), need(x), need(P);
    KERNEL(qkv_positional_forward(y, x, P, B, T, C, pos0, scale));
}

void cuda_positional_backward(float *dx, float *dP, const float *dy, int B, int T, int C,
                              int pos0, float scale)
{
    need(dx), need(dP), need(dy);
    KERNEL(qkv_positional_backward(dx, dP, dy, B, T, C, pos0, scale));
}

void cuda_bias_forward(float *y, const float *b, int N, int out)
{
    need(y), need(b);
    KERNEL(for (size_t e = 0; e < (size_t)N * out; e++) y[e] += b[e % out]);
}

void cuda_bias_backward(float *db, const float *dy, int N, int out)
{
    need(db), need(dy);
    KERNEL(linear_bias_backward(db, dy, N, out));
}

void cuda_round_bf16(uint16_t *dst, const float *src, size_t n)
{
    need(dst), need(src);
    KERNEL(bf16_convert(dst, src, n));
}

void cuda_kv_store_bf16(uint16_t *cache, size_t at, const float *x, size_t n)
{
    need(cache), need(x);
    KERNEL(kv_cache_store(cache, KV_BF16, at, x, n));
}

void cuda_adam_update(float *p, const float *g, float *m, float *v, size_t n,
                      const adam_hyper *h)
{
    need(p), need(g), need(m), need(v);
    KERNEL(adam_update_f32(p, g, m, v, n, h));
}

void cuda_layernorm_forward(float *y, float *mean, float *rstd, const float *x,
                            const float *gamma, const float *beta, int N, int C, float eps)
{
    need(y), need(mean), need(rstd), need(x), need(gamma), need(beta);
    const qkv_layernorm_weights w = {(float *)gamma, (float *)beta};
    KERNEL(qkv_layernorm_forward(y, mean, rstd, x, &w, N, C, eps));
}

void cuda_layernorm_backward(float *dx, float *dgamma, float *dbeta, const float *dy,
                             const float *x, const float *mean, const float *rstd,
                             const float *gamma, int N, int C)
{
    need(dx), need(dgamma), need(dbeta), need(dy), need(x), need(mean), need(rstd), need(gamma);
    const qkv_layernorm_weights w = {(float *)gamma, NULL};
    qkv_layernorm_weights dw = {dgamma, dbeta};
    KERNEL(qkv_layernorm_backward(dx, &dw, dy, x, mean, rstd, &w, N, C));
}

static void need_attention(const cuda_attention *a)
{
    need(a->Q), need(a->K), need(a->V), need(a->mask.valid_lens);
}

void cuda_attention_forward(float *O, float *P, const cuda_attention *a)
{
    need(O), need(P), need_attention(a);
    const qkv_attention_inputs x = {a->Q, a->K, a->V};
    float *scratch = malloc(qkv_attention_scratch_floats(&a->s) * sizeof *scratch + 1);
    KERNEL(qkv_attention_forward(O, P, &x, &a->s, &a->mask, a->drop, scratch));
    free(scratch);
}

void cuda_attention_backward(float *dQ, float *dK, float *dV, const float *dO, const float *P,
                             const cuda_attention *a, float *scratch)
{
    need(dQ), need(dK), need(dV), need(dO), need(P), need(scratch), need_attention(a);
    const qkv_attention_inputs x = {a->Q, a->K, a->V};
    qkv_attention_grads dx = {dQ, dK, dV};
    KERNEL(qkv_attention_backward(&dx, dO, P, &x, &a->s, a->drop, scratch));
}

void cuda_flash_forward(float *O, float *L, const cuda_attention *a)
{
    need(O), need(L), need_attention(a);
    const qkv_attention_inputs x = {a->Q, a->K, a->V};
    KERNEL(qkv_flash_attention_forward(O, L, &x, &a->s, &a->mask, a->drop));
}

void cuda_flash_backward(float *dQ, float *dK, float *dV, const float *dO, const float *O,
                         const float *L, const cuda_attention *a, float *scratch)
{
    need(dQ), need(dK), need(dV), need(dO), need(O), need(L), need(scratch), need_attention(a);
    const qkv_attention_inputs x = {a->Q, a->K, a->V};
    qkv_attention_grads dx = {dQ, dK, dV};
    KERNEL(qkv_flash_attention_backward(&dx, dO, O, L, &x, &a->s, &a->mask, a->drop, scratch));
}

void cuda_cached_attention(float *O, float *S, const float *Q, const kv_view *kv, int B, int H,
                           int d, int m)
{
    need(O), need(S), need(Q), need(kv->K), need(kv->V), need(kv->len);
    need(kv->walk == KV_ROWS ? (const void *)kv->row : (const void *)kv->ancestry);
    KERNEL(cached_attention(O, S, Q, kv, B, H, d, m));
}

int cuda_count_targets(const int *targets, int N, int V, int ignore_index, int *bad)
{
    need(targets);
    int count = 0;
    *bad = -1;
    if (fails(++shim.launches, shim.fail_launch_at)) {
        heap.last = cudaErrorLaunchFailure;
        return -1;
    }
    device_open();
    for (int i = 0; i < N; i++) {
        if (targets[i] == ignore_index) continue;
        count++;
        if ((targets[i] < 0 || targets[i] >= V) && *bad < 0) *bad = i;
    }
    device_close();
    return count;
}

double cuda_cross_entropy(float *loss, float *lse, float *logits, const int *targets, int N,
                          int V, int ignore_index, float label_smoothing, int backward,
                          float scale)
{
    need(loss), need(lse), need(logits), need(targets);
    double sum = 0.0;
    if (fails(++shim.launches, shim.fail_launch_at)) {
        heap.last = cudaErrorLaunchFailure;
        return NAN;
    }
    device_open();
    if (backward)
        cross_entropy_fused(loss, lse, &sum, logits, NULL, targets, N, V, ignore_index,
                            label_smoothing, scale, NULL, NULL);
    else
        qkv_cross_entropy_forward(loss, lse, &sum, logits, targets, N, V, ignore_index,
                                  label_smoothing, NULL);
    device_close();
    return sum;
}

double cuda_sum_squares(const float *x, size_t n)
{
    need(x);
    if (fails(++shim.launches, shim.fail_launch_at)) {
        heap.last = cudaErrorLaunchFailure;
        return NAN;
    }
    device_open();
    const double s = sum_squares_f32(x, n);
    device_close();
    return s;
}
