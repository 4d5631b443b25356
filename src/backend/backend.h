/* SPDX-License-Identifier: MIT */
/* The seam between the models and the kernels (ggml's backends, the Linux kernel's ops tables).
 *
 * A backend is a table of the operations the models run (backend_ops) and the state those
 * kernels need (a backend). The models, their blocks and the decoding loops compute only
 * through it: they never call a kernel by name, never choose between kernels, and never touch
 * activation memory except through zero/copy/add. So the choices live here, in one place:
 *   precision   the table: backend_cpu_fp32 (OpenBLAS), backend_cpu_bf16 (qkv's AVX512-BF16
 *               GEMM; ops/cpu/bf16.h) or backend_cpu_int8 (int8 weights and activations,
 *               AVX512-VNNI; ops/cpu/int8.h), picked by qkv_transformer_set_precision /
 *               qkv_lm_set_precision;
 *   few rows    op_linear_forward takes ops->linear_rows (matrix-vector products that read
 *               the weights once: a decoding step) up to ops->few_rows rows, else
 *               ops->linear_gemm;
 *   attention   ops->choose_attention picks the kernel of each attention when the activations
 *               are laid out: linear attention if the model has it, else the materialised
 *               softmax (keeps the weights P: short sequences, and whenever the caller needs
 *               the weights) or the flash kernel (keeps only the row log-sum-exp L; from
 *               attention_options.flash_min_keys keys on).
 * A new precision (int8) or device (CUDA) is one more table: fill every entry, and the
 * models run on it unchanged. Private to the library. */
#ifndef QKV_BACKEND_H
#define QKV_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "ops/cpu/best.h"
#include "ops/cpu/cached_attention.h"
#include "ops/cpu/bf16.h"
#include "ops/cpu/int8.h"
#include "ops/cpu/optimizer.h"
#include "qkv.h"

typedef enum {
    ATTENTION_MATERIALISED, /* softmax, keeping P (B, H, n, m) */
    ATTENTION_FLASH,        /* softmax, keeping L (B, H, n): memory linear in the length */
    ATTENTION_LINEAR,       /* phi(Q) (phi(K)^T V), phi = elu + 1: O(n) (no weights dropout) */
} attention_kernel;

/* What the models ask of softmax attention when its activations are laid out. */
typedef struct {
    int need_weights;   /* keep the weights P of every attention (attention maps) */
    int flash_min_keys; /* otherwise the flash kernel from this many keys on */
    int head_dim;       /* the heads' width (a GPU's flash kernel holds heads up to a size) */
} attention_options;

typedef struct backend backend;

/* A linear layer's weight matrix W (out, in) as the products read it (CTranslate2's typed
 * weights): the model's float32 parameters, always there (training, the backward, any
 * float32 product), and, once the model's precision is set, the copy of the type its
 * products read, fixed then (models/precision.h). The linear entries dispatch on type. */
typedef enum { WEIGHT_F32, WEIGHT_BF16, WEIGHT_INT8 } weight_type;

typedef struct {
    weight_type type;
    const float *f32;        /* (out, in) */
    const uint16_t *bf16;    /* WEIGHT_BF16: the same rounded to bf16 */
    const int8_matrix *int8; /* WEIGHT_INT8: quantised per output channel, with its scales */
} weight;

/* A float32 weight, as the public layer functions and any untyped caller pass it. */
static inline weight weight_f32(const float *W)
{
    weight w = {WEIGHT_F32, W, NULL, NULL};
    return w;
}

typedef struct {
    const char *name;
    /* the host may read and write this table's memory directly (the CPU tables), so that
     * results need no download; 0: a device's memory (alloc and the transfers below) */
    int host_memory;

    /* ---- y (N, out) = x (N, in) W^T + b; W (out, in) a model's weight, typed ------------ */
    int few_rows; /* up to this many rows linear_rows, more linear_gemm (op_linear_forward) */
    void (*linear_rows)(const backend *be, float *y, const float *x, const weight *W,
                        const float *b, int N, int in, int out);
    void (*linear_gemm)(const backend *be, float *y, const float *x, const weight *W,
                        const float *b, int N, int in, int out);
    /* the output layer fused with the choice after it (ops/cpu/best.h): rq->k best of each
     * of N rows of y = x W^T + b and, when rq->lse is set, their log normalisers (rq's arrays
     * on the host); scratch (N, out) floats in the table's memory, for a table that writes y
     * out first */
    void (*linear_best)(const backend *be, const best_request *rq, const float *x,
                        const weight *W, const float *b, int N, int in, int out, float *scratch);
    /* dx (N, in) += dy W;  dW (out, in) += dy^T x;  db (out) += column sums of dy (any may be
     * NULL) */
    void (*linear_backward)(const backend *be, float *dx, float *dW, float *db, const float *dy,
                            const float *x, const float *W, int N, int in, int out);

    /* ---- attention O (B, n, H v) from Q (B, n, H d), K (B, m, H d), V (B, m, H v) --------- */
    attention_kernel (*choose_attention)(qkv_attention_kind kind, int keys,
                                         const attention_options *o);
    /* S holds what backward needs beside O: P (materialised), L (flash), nothing (linear).
     * The linear kernel takes a mask's per-sequence lengths and causality only (no per-query
     * lengths) and has no dropout. */
    void (*attention_forward)(attention_kernel k, float *O, float *S,
                              const qkv_attention_inputs *x, const qkv_attention_shape *s,
                              const qkv_mask *mask, qkv_dropout drop, float *scratch);
    /* dx (zeroed by the caller) += the gradients given dO */
    void (*attention_backward)(attention_kernel k, qkv_attention_grads *dx, const float *dO,
                               const float *O, const float *S, const qkv_attention_inputs *x,
                               const qkv_attention_shape *s, const qkv_mask *mask,
                               qkv_dropout drop, float *scratch);
    size_t (*attention_saved_floats)(attention_kernel k, const qkv_attention_shape *s); /* S */
    size_t (*attention_scratch_floats)(attention_kernel k, const qkv_attention_shape *s);
    /* one query per row over a key-value cache of float32 or bf16 values
     * (ops/cpu/cached_attention.h), and writing n values into one */
    void (*cached_attention)(float *O, float *S, const float *Q, const kv_view *kv, int B, int H,
                             int d, int m);
    void (*kv_store)(void *cache, kv_dtype kv, size_t at, const float *x, size_t n);
    /* one position of causal linear attention from its recurrent state */
    void (*linear_attention_step)(float *o, qkv_linear_attention_state *s, const float *q,
                                  const float *k, const float *v);

    /* ---- position-wise: as the qkv_ functions of the same names -------------------------- */
    void (*activation_forward)(qkv_activation act, float *h, const float *h_pre, size_t n);
    /* dh *= act'(h_pre), in place */
    void (*activation_backward)(qkv_activation act, float *dh, const float *h_pre, size_t n);
    void (*layernorm_forward)(float *y, float *mean, float *rstd, const float *x,
                              const qkv_layernorm_weights *w, int N, int C, float eps);
    void (*layernorm_backward)(float *dx, qkv_layernorm_weights *dw, const float *dy,
                               const float *x, const float *mean, const float *rstd,
                               const qkv_layernorm_weights *w, int N, int C);
    void (*addnorm_forward)(float *y, qkv_addnorm_cache *c, const float *x, const float *s,
                            const qkv_layernorm_weights *w, int N, int C, float eps,
                            qkv_dropout drop);
    void (*addnorm_backward)(float *dx, float *ds, qkv_layernorm_weights *dw, const float *dy,
                             const qkv_addnorm_cache *c, const qkv_layernorm_weights *w, int N,
                             int C, qkv_dropout drop, float *scratch);
    void (*residual_forward)(float *y, const float *x, const float *s, size_t n,
                             qkv_dropout drop);
    void (*residual_backward)(float *dx, float *ds, const float *dy, size_t n, qkv_dropout drop);
    /* y (N, C) = E[ids]: E's rows, dequantised where E is typed int8 (and current) */
    qkv_status (*embedding_forward)(const backend *be, float *y, const int *ids, const weight *E,
                                    int N, int V, int C, qkv_error *err);
    void (*embedding_backward)(float *dE, const float *dy, const int *ids, int N, int C);
    void (*positional_forward)(float *y, const float *x, const float *P, int B, int T, int C,
                               int pos0, float scale);
    void (*positional_backward)(float *dx, float *dP, const float *dy, int B, int T, int C,
                                int pos0, float scale);
    void (*dropout_forward)(float *y, const float *x, size_t n, float p, uint64_t seed,
                            uint64_t offset);
    void (*dropout_backward)(float *dx, const float *dy, size_t n, float p, uint64_t seed,
                             uint64_t offset);

    /* ---- the loss: as qkv_cross_entropy_forward and ops/cpu/fused.h ---------------------- */
    int (*cross_entropy_forward)(float *loss, float *lse, double *sum, const float *logits,
                                 const int *targets, int N, int V, int ignore_index,
                                 float label_smoothing, qkv_error *err);
    int (*cross_entropy_fused)(float *loss, float *lse, double *sum, float *logits, float *db,
                               const int *targets, int N, int V, int ignore_index,
                               float label_smoothing, float scale, float *scratch,
                               qkv_error *err);
    size_t (*cross_entropy_scratch_floats)(int N, int V);

    /* ---- activation memory (copy also hands results to the caller: logits, attention maps) */
    void (*zero)(float *x, size_t n);
    void (*copy)(float *dst, const float *src, size_t n);
    void (*add)(float *y, const float *x, size_t n); /* y += x */
    void (*scale)(float *x, size_t n, float s);     /* x *= s */

    /* ---- the optimizer (training/step.c): as qkv_adam_update and qkv_clip_grad_norm ------ */
    void (*adam_update)(float *p, const float *g, float *m, float *v, size_t n,
                        const adam_hyper *h);
    double (*sum_squares)(const float *x, size_t n); /* the sum, on the host */
    /* dst (n) = src rounded to bf16 (the weights' copy a bf16 table's products read) */
    void (*round_bf16)(uint16_t *dst, const float *src, size_t n);

    /* ---- memory the kernels read and write (the host's on the CPU; a device's on a GPU) ---
     * alloc gives 64-byte aligned memory, NULL when there is none; upload and download copy
     * between it and the host's, returning 0, or -1 when the copy failed (finish says why, and
     * the models stop there: nothing reads what did not arrive). Every pointer an entry takes
     * is this memory, the int arrays (ids, targets, lengths, cache rows) included; what an
     * entry returns (a count, a sum) is on the host (host_memory above says whether the host
     * may touch it directly). */
    void *(*alloc)(size_t bytes);
    void (*release)(void *p);
    int (*upload)(void *dst, const void *src, size_t bytes);
    int (*download)(void *dst, const void *src, size_t bytes);
    /* Waits for the kernels queued so far and reports the first failure among them, and
     * among the transfers, since the last call (a device's launches fail late): QKV_OK on
     * the CPU. */
    qkv_status (*finish)(const backend *be, qkv_error *err);
} backend_ops;

struct backend {
    const backend_ops *ops;
    /* whether the weights' typed copies hold the parameters as they are now: a pass after
     * the parameters changed (training) reads the float32 ones instead */
    int typed_current;
    gemm_bf16_workspace *ws;  /* bf16: the GEMM's packing buffers */
    gemm_int8_workspace *ws8; /* int8: the activations' buffer (grown by the calls that need
                               * more) */
    void *device;             /* a device's tables: its context (device.open), else NULL */
};

extern const backend_ops backend_cpu_fp32, backend_cpu_bf16, backend_cpu_int8;

/* A device: where a model's buffers and kernels live instead of the host's (CUDA: backend/
 * cuda.c). Its tables, one per precision it runs (NULL: not on this device; int8 runs on
 * the CPU only), take memory the host cannot read (host_memory 0): a model on a device keeps
 * its buffers there and moves only inputs and results (models/model.h, "devices"). */
typedef struct {
    const char *name;
    const backend_ops *fp32, *bf16;
    /* finds the device (QKV_ERR_ARG naming what is missing: no driver, no GPU) and makes the
     * context its tables' entries receive as backend.device */
    qkv_status (*open)(void **ctx, qkv_error *err);
    void (*close)(void *ctx);
} device;

/* The CUDA device (make CUDA=1), or NULL in a build without it; its tables (backend/cuda.c,
 * defined in a CUDA build only). */
const device *device_cuda(void);
extern const backend_ops backend_cuda_fp32, backend_cuda_bf16;

/* The float32 CPU backend with no model behind it: what the public qkv_ layer functions run. */
static inline backend backend_cpu(void)
{
    backend be = {.ops = &backend_cpu_fp32};
    return be;
}

/* y (N, out) = x (N, in) W^T + b, on the table's few-rows or GEMM kernel. */
static inline void op_linear_forward(const backend *be, float *y, const float *x, const weight *W,
                                     const float *b, int N, int in, int out)
{
    if (N <= be->ops->few_rows)
        be->ops->linear_rows(be, y, x, W, b, N, in, out);
    else
        be->ops->linear_gemm(be, y, x, W, b, N, in, out);
}

static inline void op_linear_backward(const backend *be, float *dx, float *dW, float *db,
                                      const float *dy, const float *x, const float *W, int N,
                                      int in, int out)
{
    be->ops->linear_backward(be, dx, dW, db, dy, x, W, N, in, out);
}

#endif
