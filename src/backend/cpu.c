/* SPDX-License-Identifier: MIT */
/* The CPU backends (backend.h): float32 (OpenBLAS for the products), bf16 products
 * (AVX512-BF16, float32 sums) and int8 products (AVX512-VNNI, int32 sums). The tables differ
 * only in their linear entries; every other operation is the library's own CPU kernel. */
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/internal.h"
#include "ops/cpu/cached_attention.h"
#include "ops/cpu/fused.h"
#include "backend/cpu_linear.h"
#include "ops/cpu/linear.h"

/* The number of keys from which softmax attention runs the flash kernel: the crossover of
 * qkv bench attention (forward + backward, d = 64) on AVX2 is about 256 (models.h). */
static attention_kernel choose_attention(qkv_attention_kind kind, int keys,
                                         const attention_options *o)
{
    if (kind == QKV_ATTENTION_LINEAR) return ATTENTION_LINEAR;
    return !o->need_weights && keys >= o->flash_min_keys ? ATTENTION_FLASH
                                                         : ATTENTION_MATERIALISED;
}

static void attention_forward(attention_kernel k, float *O, float *S,
                              const qkv_attention_inputs *x, const qkv_attention_shape *s,
                              const qkv_mask *mask, qkv_dropout drop, float *scratch)
{
    switch (k) {
    case ATTENTION_MATERIALISED: qkv_attention_forward(O, S, x, s, mask, drop, scratch); break;
    case ATTENTION_FLASH: qkv_flash_attention_forward(O, S, x, s, mask, drop); break;
    case ATTENTION_LINEAR: /* no weights to drop out; the mask's lengths and causality */
        qkv_linear_attention_forward(O, x, s, mask ? mask->valid_lens : NULL,
                                     mask ? mask->causal : 0, scratch);
        break;
    }
}

static void attention_backward(attention_kernel k, qkv_attention_grads *dx, const float *dO,
                               const float *O, const float *S, const qkv_attention_inputs *x,
                               const qkv_attention_shape *s, const qkv_mask *mask,
                               qkv_dropout drop, float *scratch)
{
    switch (k) {
    case ATTENTION_MATERIALISED: qkv_attention_backward(dx, dO, S, x, s, drop, scratch); break;
    case ATTENTION_FLASH:
        qkv_flash_attention_backward(dx, dO, O, S, x, s, mask, drop, scratch);
        break;
    case ATTENTION_LINEAR:
        qkv_linear_attention_backward(dx, dO, x, s, mask ? mask->valid_lens : NULL,
                                      mask ? mask->causal : 0, scratch);
        break;
    }
}

static size_t attention_saved_floats(attention_kernel k, const qkv_attention_shape *s)
{
    const size_t BH = (size_t)s->B * s->H;
    return k == ATTENTION_MATERIALISED ? BH * s->n * s->m : k == ATTENTION_FLASH ? BH * s->n : 0;
}

static size_t attention_scratch_floats(attention_kernel k, const qkv_attention_shape *s)
{
    switch (k) {
    case ATTENTION_MATERIALISED: return qkv_attention_scratch_floats(s);
    case ATTENTION_FLASH: return qkv_flash_attention_scratch_floats(s);
    /* the non-causal form's, the larger: the entry is not told whether the mask is causal */
    case ATTENTION_LINEAR: return qkv_linear_attention_scratch_floats(s, 0);
    }
    return 0;
}

static void activation_forward(qkv_activation act, float *h, const float *h_pre, size_t n)
{
    if (act == QKV_ACT_GELU)
        qkv_gelu_forward(h, h_pre, n);
    else if (act == QKV_ACT_SILU)
        qkv_silu_forward(h, h_pre, n);
    else
        qkv_relu_forward(h, h_pre, n);
}

/* The int8 table's: SiLU by a polynomial exponential (ops/cpu/fused.h). */
static void activation_forward_int8(qkv_activation act, float *h, const float *h_pre, size_t n)
{
    if (act == QKV_ACT_SILU) silu_forward_fast(h, h_pre, n);
    else activation_forward(act, h, h_pre, n);
}

/* E's rows: dequantised from its int8 matrix where the lookups read one (precision.c), else
 * the float32 table. */
static qkv_status embedding_forward(const backend *be, float *y, const int *ids, const weight *E,
                                    int N, int V, int C, qkv_error *err)
{
    if (!(E->type == WEIGHT_INT8 && be->typed_current))
        return qkv_embedding_forward(y, ids, E->f32, N, V, C, err);
    for (int i = 0; i < N; i++)
        if (ids[i] < 0 || ids[i] >= V)
            return qkv_fail(err, QKV_ERR_ARG, "embedding: token id %d at position %d is outside "
                            "the vocabulary [0, %d)", ids[i], i, V);
    for (int i = 0; i < N; i++) int8_matrix_row(y + (size_t)i * C, E->int8, ids[i]);
    return QKV_OK;
}

/* Vectors of this many floats or more are worth a second thread. */
#define PARALLEL_MIN 65536

static void zero(float *x, size_t n) { memset(x, 0, n * sizeof *x); }
static void copy(float *dst, const float *src, size_t n) { memcpy(dst, src, n * sizeof *dst); }

static void add(float *y, const float *x, size_t n)
{
    #pragma omp parallel for simd if (n > PARALLEL_MIN)
    for (size_t i = 0; i < n; i++) y[i] += x[i];
}

static void scale(float *x, size_t n, float s)
{
    #pragma omp parallel for simd if (n > PARALLEL_MIN)
    for (size_t i = 0; i < n; i++) x[i] *= s;
}

static void *host_alloc(size_t bytes)
{
    void *p = NULL;
    return posix_memalign(&p, 64, bytes ? bytes : 64) ? NULL : p;
}
static void host_release(void *p) { free(p); }
static int host_copy(void *dst, const void *src, size_t bytes)
{
    memcpy(dst, src, bytes);
    return 0;
}

static qkv_status finished(const backend *be, qkv_error *err)
{
    (void)be, (void)err;
    return QKV_OK; /* every kernel has returned */
}

/* A CPU table: its name and linear entries, which set the precision, and the CPU's own
 * kernels for everything else. */
#define CPU_TABLE(table_name, rows, gemm, best, backward, activation)                           \
    {                                                                                           \
        .name = table_name, .few_rows = SMALL_ROWS, .linear_rows = rows, .linear_gemm = gemm,   \
        .linear_best = best, .linear_backward = backward, .choose_attention = choose_attention, \
        .attention_forward = attention_forward, .attention_backward = attention_backward,       \
        .attention_saved_floats = attention_saved_floats,                                       \
        .attention_scratch_floats = attention_scratch_floats,                                   \
        .cached_attention = cached_attention, .kv_store = kv_cache_store,                       \
        .linear_attention_step = qkv_linear_attention_step,                                     \
        .activation_forward = activation, .activation_backward = activation_grad_inplace,        \
        .layernorm_forward = qkv_layernorm_forward, .layernorm_backward = qkv_layernorm_backward,\
        .addnorm_forward = qkv_addnorm_forward, .addnorm_backward = qkv_addnorm_backward,       \
        .residual_forward = qkv_residual_forward, .residual_backward = qkv_residual_backward,   \
        .embedding_forward = embedding_forward,                                             \
        .embedding_backward = qkv_embedding_backward,                                           \
        .positional_forward = qkv_positional_forward,                                           \
        .positional_backward = qkv_positional_backward,                                         \
        .dropout_forward = qkv_dropout_forward, .dropout_backward = qkv_dropout_backward,       \
        .cross_entropy_forward = qkv_cross_entropy_forward,                                     \
        .cross_entropy_fused = cross_entropy_fused,                                             \
        .cross_entropy_scratch_floats = cross_entropy_fused_scratch_floats, .zero = zero,       \
        .copy = copy, .add = add, .scale = scale, .adam_update = adam_update_f32,               \
        .sum_squares = sum_squares_f32, .round_bf16 = bf16_convert, .host_memory = 1,           \
        .alloc = host_alloc, .release = host_release, .upload = host_copy,                      \
        .download = host_copy, .finish = finished,                                              \
    }

/* float32: OpenBLAS's sgemm, and matrix-vector kernels for a decoding step's few rows */
const backend_ops backend_cpu_fp32 =
    CPU_TABLE("cpu-fp32", cpu_linear_rows_f32, cpu_linear_gemm_f32, cpu_linear_best_written,
              cpu_linear_backward_f32, activation_forward);

/* bf16 products with float32 sums (ops/cpu/bf16.h); decoding reads a bf16 copy of the
 * weights. Parameters, gradients and everything but the products stay float32. */
const backend_ops backend_cpu_bf16 =
    CPU_TABLE("cpu-bf16", cpu_linear_rows_bf16, cpu_linear_gemm_bf16, cpu_linear_best_written,
              cpu_linear_backward_bf16, activation_forward);

/* int8 weights and activations with exact int32 sums (ops/cpu/int8.h), for inference: the
 * weights the model quantised (models/precision.c says which, and why) go through the int8
 * GEMM, any other product through float32's; the output layer, when only its best tokens are
 * wanted, a chunk of logits at a time (gemm_int8_best); SiLU by a polynomial exponential.
 * Softmax, norms, residuals and attention itself stay float32, as everywhere. No backward:
 * the models refuse to train at int8. */
const backend_ops backend_cpu_int8 =
    CPU_TABLE("cpu-int8", cpu_linear_int8, cpu_linear_int8, cpu_linear_best_int8,
              cpu_linear_backward_f32, activation_forward_int8);
