/* SPDX-License-Identifier: MIT */
/* The CUDA device (make CUDA=1; docs/gpu.md): two backend tables, cuda-fp32 and cuda-bf16,
 * over the memory of the first GPU.
 *   products   cuBLAS: float32 (cublasSgemm), or bf16 operands with float32 sums on the
 *              tensor cores (cublasGemmEx); the bias by a kernel of its own. The bf16 table
 *              reads a weight's bf16 copy when it is current (decoding) and otherwise rounds
 *              the float32 operands into a work space of its context first (training), as
 *              the CPU's bf16 table rounds while it packs.
 *   attention  the CPU's choice (the flash kernel from flash_min_keys keys on, unless the
 *              caller keeps the weights), and the materialised kernel for heads wider than
 *              the flash kernel's registers hold. Linear attention has no kernel here (the models keep it on the CPU): its
 *              entries run the CPU's over host copies, so that the table is whole.
 *   the rest   the kernels of ops/cuda (kernels.h); sums that come back (the loss, the
 *              gradients' norm) through CUB.
 * Everything runs in order on the default stream. A launch or a transfer that fails leaves
 * its error with the CUDA runtime and a cuBLAS call records its own in the context: the
 * finish entry, which the models call where results come back, waits for the device and
 * reports the first of them (QKV_ERR_DEVICE). The int arrays the kernels read (ids, targets,
 * lengths, cache rows) are device memory too. */
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/internal.h"
#include "ops/cuda/kernels.h"

/* Heads wider than this run the materialised kernel (ops/cuda/attention.cu). */
enum { FLASH_MAX_HEAD = 256 };

typedef struct {
    cublasHandle_t blas;
    char failure[256];   /* the first failed cuBLAS call since the last finish, or "" */
    uint16_t *work16;    /* bf16 operands rounded for one product */
    size_t work16_cap;   /* in values */
} cuda_context;

static cuda_context *context_of(const backend *be) { return be->device; }

/* Records the first failure of a cuBLAS call (finish reports it). */
static void blas_check(const backend *be, cublasStatus_t s, const char *call)
{
    cuda_context *c = context_of(be);
    if (s == CUBLAS_STATUS_SUCCESS || c->failure[0]) return;
    snprintf(c->failure, sizeof c->failure, "%s failed: %s", call, cublasGetStatusString(s));
}

/* ---- the device --------------------------------------------------------------------------- */

static qkv_status cuda_open(void **out, qkv_error *err)
{
    *out = NULL;
    int n = 0, runtime = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n < 1) {
        cudaGetLastError(); /* not a sticky error: the next try starts clean */
        cudaRuntimeGetVersion(&runtime);
        if (e == cudaErrorInsufficientDriver)
            return qkv_fail(err, QKV_ERR_ARG, "no NVIDIA driver, or one older than CUDA %d.%d "
                            "needs: is the driver installed (`nvidia-smi` says)?",
                            runtime / 1000, runtime % 1000 / 10);
        return qkv_fail(err, QKV_ERR_ARG, "no usable GPU: %s (`nvidia-smi` lists the GPUs the "
                        "driver sees)",
                        e == cudaSuccess ? "the driver sees none" : cudaGetErrorString(e));
    }
    if ((e = cudaSetDevice(0)) != cudaSuccess) {
        cudaGetLastError();
        return qkv_fail(err, QKV_ERR_ARG, "cannot use GPU 0: %s", cudaGetErrorString(e));
    }
    cuda_context *c = calloc(1, sizeof *c);
    if (!c) return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for a CUDA context");
    cublasStatus_t s = cublasCreate(&c->blas);
    if (s != CUBLAS_STATUS_SUCCESS) {
        free(c);
        cudaGetLastError();
        return qkv_fail(err, QKV_ERR_ARG, "cuBLAS does not start on GPU 0: %s",
                        cublasGetStatusString(s));
    }
    *out = c;
    return QKV_OK;
}

static void cuda_close(void *ctx)
{
    cuda_context *c = ctx;
    if (!c) return;
    cudaFree(c->work16);
    cublasDestroy(c->blas);
    free(c);
}

/* ---- memory --------------------------------------------------------------------------------- */

static void *device_alloc(size_t bytes)
{
    void *p = NULL;
    if (cudaMalloc(&p, bytes ? bytes : 256) == cudaSuccess) return p; /* 256-byte aligned */
    cudaGetLastError(); /* the caller reports it: no memory is not a sticky failure */
    return NULL;
}

static void device_release(void *p) { cudaFree(p); }

/* A failed copy's error stays with the runtime for finish to report. */
static int upload(void *dst, const void *src, size_t bytes)
{
    return bytes && cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice) != cudaSuccess ? -1 : 0;
}

static int download(void *dst, const void *src, size_t bytes)
{
    return bytes && cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost) != cudaSuccess ? -1 : 0;
}

static qkv_status finish(const backend *be, qkv_error *err)
{
    cuda_context *c = context_of(be);
    cudaError_t e = cudaDeviceSynchronize();
    const cudaError_t last = cudaGetLastError();
    if (e == cudaSuccess) e = last;
    if (c && c->failure[0]) {
        qkv_status st = qkv_fail(err, QKV_ERR_DEVICE, "cuda: %s", c->failure);
        c->failure[0] = '\0';
        return st;
    }
    if (e != cudaSuccess)
        return qkv_fail(err, QKV_ERR_DEVICE, "cuda: a kernel or transfer failed: %s (%s)",
                        cudaGetErrorString(e), cudaGetErrorName(e));
    return QKV_OK;
}

static void zero(float *x, size_t n) { cudaMemsetAsync(x, 0, n * sizeof *x, 0); }

static void copy(float *dst, const float *src, size_t n)
{
    if (n && dst != src) cudaMemcpyAsync(dst, src, n * sizeof *dst, cudaMemcpyDeviceToDevice, 0);
}

/* ---- products ---------------------------------------------------------------------------------
 * Row-major X (N, in) is column-major X^T (in, N); so y = x W^T (N, out) is, column-major,
 * y^T (out, N) = W^T' x^T with W (out, in) read as the transpose of its column-major (in, out)
 * view. Likewise dx^T (in, N) += Wcm dy^T and dW^T (in, out) += x^T dy. */

/* C (m x n, ldc) = alpha op(A) op(B) + beta C, column-major, float32. */
static void sgemm(const backend *be, int ta, int tb, int m, int n, int k, const float *A,
                  int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
    const float alpha = 1.0f;
    blas_check(be, cublasSgemm(context_of(be)->blas, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                               tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, &alpha, A, lda, B, ldb,
                               &beta, C, ldc),
               "cublasSgemm");
}

/* The same with bf16 operands and float32 sums and result (the tensor cores). */
static void gemm16(const backend *be, int ta, int tb, int m, int n, int k, const uint16_t *A,
                      int lda, const uint16_t *B, int ldb, float beta, float *C, int ldc)
{
    const float alpha = 1.0f;
    blas_check(be, cublasGemmEx(context_of(be)->blas, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                                tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, &alpha, A, CUDA_R_16BF,
                                lda, B, CUDA_R_16BF, ldb, &beta, C, CUDA_R_32F, ldc,
                                CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
               "cublasGemmEx (bf16)");
}

/* Room for n bf16 values in the context's work space (grown as needed); NULL, with the
 * failure recorded, without memory. */
static uint16_t *work16(const backend *be, size_t n)
{
    cuda_context *c = context_of(be);
    if (n > c->work16_cap) {
        cudaFree(c->work16);
        c->work16 = NULL, c->work16_cap = 0;
        if (cudaMalloc((void **)&c->work16, n * sizeof *c->work16) != cudaSuccess) {
            cudaGetLastError();
            if (!c->failure[0])
                snprintf(c->failure, sizeof c->failure, "out of device memory for %zu bf16 "
                         "operands", n);
            return NULL;
        }
        c->work16_cap = n;
    }
    return c->work16;
}

static void linear_fp32(const backend *be, float *y, const float *x, const weight *W,
                        const float *b, int N, int in, int out)
{
    sgemm(be, 1, 0, out, N, in, W->f32, in, x, in, 0.0f, y, out);
    if (b) cuda_bias_forward(y, b, N, out);
}

static void linear_backward_fp32(const backend *be, float *dx, float *dW, float *db,
                                 const float *dy, const float *x, const float *W, int N, int in,
                                 int out)
{
    if (dx) sgemm(be, 0, 0, in, N, out, W, in, dy, out, 1.0f, dx, in);
    if (dW) sgemm(be, 0, 1, in, out, N, x, in, dy, out, 1.0f, dW, in);
    if (db) cuda_bias_backward(db, dy, N, out);
}

/* bf16: x rounded into the work space, then W's bf16 copy, or W rounded after it */
static void linear_bf16(const backend *be, float *y, const float *x, const weight *W,
                        const float *b, int N, int in, int out)
{
    const int typed = W->type == WEIGHT_BF16 && be->typed_current;
    const size_t nx = (size_t)N * in;
    uint16_t *x16 = work16(be, nx + (typed ? 0 : (size_t)out * in));
    if (!x16) return;
    const uint16_t *W16 = typed ? W->bf16 : x16 + nx;
    cuda_round_bf16(x16, x, nx);
    if (!typed) cuda_round_bf16(x16 + nx, W->f32, (size_t)out * in);
    gemm16(be, 1, 0, out, N, in, W16, in, x16, in, 0.0f, y, out);
    if (b) cuda_bias_forward(y, b, N, out);
}

static void linear_backward_bf16(const backend *be, float *dx, float *dW, float *db,
                                 const float *dy, const float *x, const float *W, int N, int in,
                                 int out)
{
    const size_t ny = (size_t)N * out, nw = (size_t)out * in, nx = (size_t)N * in;
    uint16_t *dy16 = work16(be, ny + nw + nx);
    if (!dy16) return;
    uint16_t *W16 = dy16 + ny, *x16 = W16 + nw;
    cuda_round_bf16(dy16, dy, ny);
    if (dx) {
        cuda_round_bf16(W16, W, nw);
        gemm16(be, 0, 0, in, N, out, W16, in, dy16, out, 1.0f, dx, in);
    }
    if (dW) {
        cuda_round_bf16(x16, x, nx);
        gemm16(be, 0, 1, in, out, N, x16, in, dy16, out, 1.0f, dW, in);
    }
    if (db) cuda_bias_backward(db, dy, N, out);
}

/* The output layer's choice (ops/cpu/best.h) on the host: the logits written into scratch,
 * brought down and chosen there (rq's arrays are the host's). A failed copy stays with the
 * runtime for finish to report; no host memory is recorded as a failure. */
static void linear_best(const backend *be, const best_request *rq, const float *x,
                        const weight *W, const float *b, int N, int in, int out, float *scratch)
{
    op_linear_forward(be, scratch, x, W, b, N, in, out);
    const size_t n = (size_t)N * out;
    float *y = malloc((n ? n : 1) * sizeof *y);
    if (!y || download(y, scratch, n * sizeof *y)) {
        cuda_context *c = context_of(be);
        if (!y && !c->failure[0])
            snprintf(c->failure, sizeof c->failure, "out of memory for %zu logits on the host",
                     n);
        free(y);
        return;
    }
    for (int r = 0; r < N; r++) {
        row_best(y + (size_t)r * out, out, rq->k, rq->banned, rq->ids + (size_t)r * rq->k,
                 rq->vals + (size_t)r * rq->k);
        if (rq->lse) rq->lse[r] = log_normaliser(y + (size_t)r * out, out);
    }
    if (rq->nonfinite) *rq->nonfinite = !all_finite(y, n);
    free(y);
}

/* ---- attention ---------------------------------------------------------------------------- */

/* The CPU's rule (the weights kept where the caller wants them, flash from flash_min_keys
 * keys on), so that a model takes the same kernels on either device; and the materialised
 * kernel for heads wider than the flash kernel holds. */
static attention_kernel choose_attention(qkv_attention_kind kind, int keys,
                                         const attention_options *o)
{
    if (kind == QKV_ATTENTION_LINEAR) return ATTENTION_LINEAR;
    return o->need_weights || keys < o->flash_min_keys || o->head_dim > FLASH_MAX_HEAD
               ? ATTENTION_MATERIALISED
               : ATTENTION_FLASH;
}

static cuda_attention attention_of(const qkv_attention_inputs *x, const qkv_attention_shape *s,
                                   const qkv_mask *mask, qkv_dropout drop)
{
    cuda_attention a = {x->Q, x->K, x->V, *s, {NULL, 0, 0}, drop};
    if (mask) a.mask = *mask;
    return a;
}

/* ---- linear attention: the CPU's kernels over host copies ----------------------------------
 * There is no linear-attention kernel here: the models keep such a model on the CPU
 * (core_set_device refuses it). So that the table is whole (and the backend-ops test runs
 * every entry of it), these entries copy their operands down, run the CPU's kernel and copy
 * the results up: exact, and as slow as that sounds. */

typedef struct {
    float *host[8];
    size_t n[8];
    int count, failed;
} host_copies;

/* A host copy of n floats at dev (or room only, without dev); NULL after a failure. */
static float *host_copy(host_copies *h, const float *dev, size_t n)
{
    float *p = h->failed || h->count == 8 ? NULL : malloc((n ? n : 1) * sizeof *p);
    if (!p || (dev && download(p, dev, n * sizeof *p))) {
        free(p);
        h->failed = 1;
        return NULL;
    }
    h->host[h->count] = p, h->n[h->count++] = n;
    return p;
}

static void host_copies_free(host_copies *h)
{
    for (int i = 0; i < h->count; i++) free(h->host[i]);
}

static void linear_host(int backward, qkv_attention_grads *dx, float *O, const float *dO,
                        const qkv_attention_inputs *x, const qkv_attention_shape *s,
                        const qkv_mask *mask)
{
    host_copies h = {0};
    const size_t nq = (size_t)s->B * s->n * s->H, nk = (size_t)s->B * s->m * s->H;
    int *lens = NULL;
    const int causal = mask && mask->causal;
    const size_t n_lens = !mask || !mask->valid_lens ? 0
                          : mask->per_query              ? nq / s->H
                                                         : (size_t)s->B;
    if (n_lens && (!(lens = malloc(n_lens * sizeof *lens)) ||
                   download(lens, mask->valid_lens, n_lens * sizeof *lens)))
        h.failed = 1;
    const qkv_attention_inputs hx = {host_copy(&h, x->Q, nq * s->d),
                                     host_copy(&h, x->K, nk * s->d),
                                     host_copy(&h, x->V, nk * s->v)};
    float *scratch = host_copy(&h, NULL, qkv_linear_attention_scratch_floats(s, causal));
    if (!backward) {
        float *o = host_copy(&h, NULL, nq * s->v);
        if (!h.failed) {
            qkv_linear_attention_forward(o, &hx, s, lens, causal, scratch);
            upload(O, o, nq * s->v * sizeof *o);
        }
    } else {
        const float *g = host_copy(&h, dO, nq * s->v);
        qkv_attention_grads hd = {dx->dQ ? host_copy(&h, dx->dQ, nq * s->d) : NULL,
                                  dx->dK ? host_copy(&h, dx->dK, nk * s->d) : NULL,
                                  dx->dV ? host_copy(&h, dx->dV, nk * s->v) : NULL};
        if (!h.failed) {
            qkv_linear_attention_backward(&hd, g, &hx, s, lens, causal, scratch);
            if (hd.dQ) upload(dx->dQ, hd.dQ, nq * s->d * sizeof(float));
            if (hd.dK) upload(dx->dK, hd.dK, nk * s->d * sizeof(float));
            if (hd.dV) upload(dx->dV, hd.dV, nk * s->v * sizeof(float));
        }
    }
    free(lens);
    host_copies_free(&h);
}

/* The state's sums (S, z) and work space are in the table's memory, as the step's vectors. */
static void linear_attention_step(float *o, qkv_linear_attention_state *st, const float *q,
                                  const float *k, const float *v)
{
    host_copies h = {0};
    const size_t nd = (size_t)st->H * st->d, nv = (size_t)st->H * st->v;
    const float *hq = host_copy(&h, q, nd), *hk = host_copy(&h, k, nd);
    const float *hv = host_copy(&h, v, nv);
    qkv_linear_attention_state hs = *st;
    hs.S = host_copy(&h, st->S, nd * st->v), hs.z = host_copy(&h, st->z, nd);
    hs.phi = host_copy(&h, NULL, 2 * (size_t)st->d);
    float *ho = h.failed ? NULL : malloc(nv * sizeof *ho);
    if (ho) {
        qkv_linear_attention_step(ho, &hs, hq, hk, hv);
        upload(o, ho, nv * sizeof *ho);
        upload(st->S, hs.S, nd * st->v * sizeof(float));
        upload(st->z, hs.z, nd * sizeof(float));
        st->t = hs.t;
    }
    free(ho);
    host_copies_free(&h);
}

static void attention_forward(attention_kernel k, float *O, float *S,
                              const qkv_attention_inputs *x, const qkv_attention_shape *s,
                              const qkv_mask *mask, qkv_dropout drop, float *scratch)
{
    (void)scratch;
    const cuda_attention a = attention_of(x, s, mask, drop);
    if (k == ATTENTION_FLASH)
        cuda_flash_forward(O, S, &a);
    else if (k == ATTENTION_MATERIALISED)
        cuda_attention_forward(O, S, &a);
    else
        linear_host(0, NULL, O, NULL, x, s, mask);
}

static void attention_backward(attention_kernel k, qkv_attention_grads *dx, const float *dO,
                               const float *O, const float *S, const qkv_attention_inputs *x,
                               const qkv_attention_shape *s, const qkv_mask *mask,
                               qkv_dropout drop, float *scratch)
{
    const cuda_attention a = attention_of(x, s, mask, drop);
    if (k == ATTENTION_FLASH)
        cuda_flash_backward(dx->dQ, dx->dK, dx->dV, dO, O, S, &a, scratch);
    else if (k == ATTENTION_MATERIALISED)
        cuda_attention_backward(dx->dQ, dx->dK, dx->dV, dO, S, &a, scratch);
    else
        linear_host(1, dx, NULL, dO, x, s, mask);
}

/* What each kernel keeps: P (B, H, n, m), or the flash kernel's L (B, H, n); and the scratch
 * of its backward: dS (B, H, n, m), or D (B, H, n). */
static size_t attention_saved_floats(attention_kernel k, const qkv_attention_shape *s)
{
    const size_t rows = (size_t)s->B * s->H * s->n;
    return k == ATTENTION_MATERIALISED ? rows * s->m : k == ATTENTION_FLASH ? rows : 0;
}

static void cached_attention_step(float *O, float *S, const float *Q, const kv_view *kv, int B,
                                  int H, int d, int m)
{
    cuda_cached_attention(O, S, Q, kv, B, H, d, m);
}

static void kv_store(void *cache, kv_dtype kv, size_t at, const float *x, size_t n)
{
    if (kv == KV_BF16)
        cuda_kv_store_bf16(cache, at, x, n);
    else
        copy((float *)cache + at, x, n);
}

/* ---- position-wise ----------------------------------------------------------------------- */

static void layernorm_forward(float *y, float *mean, float *rstd, const float *x,
                              const qkv_layernorm_weights *w, int N, int C, float eps)
{
    cuda_layernorm_forward(y, mean, rstd, x, w->gamma, w->beta, N, C, eps);
}

static void layernorm_backward(float *dx, qkv_layernorm_weights *dw, const float *dy,
                               const float *x, const float *mean, const float *rstd,
                               const qkv_layernorm_weights *w, int N, int C)
{
    cuda_layernorm_backward(dx, dw ? dw->gamma : NULL, dw ? dw->beta : NULL, dy, x, mean, rstd,
                            w->gamma, N, C);
}

/* z = x + dropout(s), y = LayerNorm(z) */
static void addnorm_forward(float *y, qkv_addnorm_cache *c, const float *x, const float *s,
                            const qkv_layernorm_weights *w, int N, int C, float eps,
                            qkv_dropout drop)
{
    cuda_residual_forward(c->z, x, s, (size_t)N * C, drop);
    cuda_layernorm_forward(y, c->mean, c->rstd, c->z, w->gamma, w->beta, N, C, eps);
}

/* dz = LayerNorm'(dy) into scratch (N, C), then dx += dz, ds += dropout'(dz) */
static void addnorm_backward(float *dx, float *ds, qkv_layernorm_weights *dw, const float *dy,
                             const qkv_addnorm_cache *c, const qkv_layernorm_weights *w, int N,
                             int C, qkv_dropout drop, float *scratch)
{
    const size_t n = (size_t)N * C;
    zero(scratch, n);
    cuda_layernorm_backward(scratch, dw ? dw->gamma : NULL, dw ? dw->beta : NULL, dy, c->z,
                            c->mean, c->rstd, w->gamma, N, C);
    if (dx) cuda_add(dx, scratch, n);
    if (ds) cuda_dropout_backward(ds, scratch, n, drop);
}

static void residual_forward(float *y, const float *x, const float *s, size_t n,
                             qkv_dropout drop)
{
    cuda_residual_forward(y, x, s, n, drop);
}

static void residual_backward(float *dx, float *ds, const float *dy, size_t n, qkv_dropout drop)
{
    if (dx) cuda_add(dx, dy, n);
    if (ds) cuda_dropout_backward(ds, dy, n, drop);
}

/* With err, ids outside the vocabulary are refused as the CPU's kernel refuses them (one
 * wait for the device); without (a decoding step: the model's own choices) they are not
 * looked at. The models check a batch's ids on the host before they go up. */
static qkv_status embedding_forward(const backend *be, float *y, const int *ids,
                                    const weight *W, int N, int V, int C, qkv_error *err)
{
    (void)be;
    const float *E = W->f32;
    if (err) {
        int bad, id = 0;
        if (cuda_count_targets(ids, N, V, INT_MIN, &bad) < 0)
            return qkv_fail(err, QKV_ERR_DEVICE, "cuda: checking the token ids failed: %s",
                            cudaGetErrorString(cudaGetLastError()));
        if (bad >= 0) {
            download(&id, ids + bad, sizeof id);
            return qkv_fail(err, QKV_ERR_ARG, "embedding: token id %d at position %d is outside "
                            "the vocabulary [0, %d)", id, bad, V);
        }
    }
    cuda_embedding_forward(y, ids, E, N, C);
    return QKV_OK;
}

static void dropout_forward(float *y, const float *x, size_t n, float p, uint64_t seed,
                            uint64_t offset)
{
    const qkv_dropout drop = {p, seed, offset};
    cuda_dropout_forward(y, x, n, drop);
}

static void dropout_backward(float *dx, const float *dy, size_t n, float p, uint64_t seed,
                             uint64_t offset)
{
    const qkv_dropout drop = {p, seed, offset};
    cuda_dropout_backward(dx, dy, n, drop);
}

/* ---- the loss -------------------------------------------------------------------------------- */

/* The counted targets, or -1 with err filled: a target outside [0, V) (named as the CPU
 * kernel names it) or a device failure. */
static int count_targets(const int *targets, int N, int V, int ignore_index, qkv_error *err)
{
    int bad, id = 0;
    const int count = cuda_count_targets(targets, N, V, ignore_index, &bad);
    if (count < 0) {
        const cudaError_t e = cudaGetLastError();
        qkv_fail(err, QKV_ERR_DEVICE, "cuda: counting the loss's targets failed: %s",
                 cudaGetErrorString(e));
        return -1;
    }
    if (bad >= 0) {
        download(&id, targets + bad, sizeof id);
        qkv_fail(err, QKV_ERR_ARG, "cross-entropy: target id %d at row %d is outside the "
                 "vocabulary [0, %d)", id, bad, V);
        return -1;
    }
    return count;
}

static int cross_entropy_forward(float *loss, float *lse, double *sum, const float *logits,
                                 const int *targets, int N, int V, int ignore_index,
                                 float label_smoothing, qkv_error *err)
{
    const int count = count_targets(targets, N, V, ignore_index, err);
    if (count < 0) return -1;
    const double s = cuda_cross_entropy(loss, lse, (float *)logits, targets, N, V, ignore_index,
                                        label_smoothing, 0, 0.0f);
    if (sum) *sum = s;
    return count;
}

static int cross_entropy_fused(float *loss, float *lse, double *sum, float *logits, float *db,
                               const int *targets, int N, int V, int ignore_index,
                               float label_smoothing, float scale, float *scratch,
                               qkv_error *err)
{
    (void)scratch;
    const int count = count_targets(targets, N, V, ignore_index, err);
    if (count < 0) return -1;
    if (scale <= 0.0f) scale = 1.0f / (float)(count ? count : 1);
    const double s = cuda_cross_entropy(loss, lse, logits, targets, N, V, ignore_index,
                                        label_smoothing, 1, scale);
    if (db) cuda_bias_backward(db, logits, N, V); /* the logits hold their gradient now */
    if (sum) *sum = s;
    return count;
}

static size_t no_scratch(int N, int V)
{
    (void)N, (void)V;
    return 0;
}

/* ---- the tables ---------------------------------------------------------------------------- */

#define CUDA_TABLE(table_name, linear, backward)                                                \
    {                                                                                           \
        .name = table_name, .few_rows = 0, .linear_rows = linear, .linear_gemm = linear,        \
        .linear_best = linear_best, .linear_backward = backward,                                \
        .choose_attention = choose_attention,                                                   \
        .attention_forward = attention_forward, .attention_backward = attention_backward,       \
        .attention_saved_floats = attention_saved_floats,                                       \
        .attention_scratch_floats = attention_saved_floats,                                     \
        .cached_attention = cached_attention_step, .kv_store = kv_store,                        \
        .linear_attention_step = linear_attention_step,                                         \
        .activation_forward = cuda_activation_forward,                                          \
        .activation_backward = cuda_activation_backward,                                        \
        .layernorm_forward = layernorm_forward, .layernorm_backward = layernorm_backward,       \
        .addnorm_forward = addnorm_forward, .addnorm_backward = addnorm_backward,               \
        .residual_forward = residual_forward, .residual_backward = residual_backward,           \
        .embedding_forward = embedding_forward, .embedding_backward = cuda_embedding_backward,  \
        .positional_forward = cuda_positional_forward,                                          \
        .positional_backward = cuda_positional_backward, .dropout_forward = dropout_forward,    \
        .dropout_backward = dropout_backward, .cross_entropy_forward = cross_entropy_forward,   \
        .cross_entropy_fused = cross_entropy_fused, .cross_entropy_scratch_floats = no_scratch, \
        .zero = zero, .copy = copy, .add = cuda_add, .scale = cuda_scale,                       \
        .adam_update = cuda_adam_update, .sum_squares = cuda_sum_squares,                       \
        .round_bf16 = cuda_round_bf16, .host_memory = 0, .alloc = device_alloc,                 \
        .release = device_release, .upload = upload, .download = download, .finish = finish,    \
    }

/* float32 products (cuBLAS's sgemm, exact float32 without TF32) */
const backend_ops backend_cuda_fp32 =
    CUDA_TABLE("cuda-fp32", linear_fp32, linear_backward_fp32);

/* bf16 products with float32 sums on the tensor cores; everything else float32 */
const backend_ops backend_cuda_bf16 =
    CUDA_TABLE("cuda-bf16", linear_bf16, linear_backward_bf16);

static const device cuda = {"cuda", &backend_cuda_fp32, &backend_cuda_bf16, cuda_open,
                            cuda_close};

const device *device_cuda(void) { return &cuda; }
