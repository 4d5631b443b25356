/* SPDX-License-Identifier: MIT */
/* The models' precision setting; see precision.h. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "models/precision.h"

int qkv_bf16_supported(void) { return gemm_bf16_supported(); }
int qkv_int8_supported(void) { return gemm_int8_supported(); }

/* ---- int8: which weights, and quantising them ------------------------------------------ */

static int ends_with(const char *s, const char *tail)
{
    const size_t n = strlen(s), t = strlen(tail);
    return n >= t && !strcmp(s + n - t, tail);
}

/* Whether tensor i is a weight the int8 products read. Quantised: every attention projection
 * (W_q, W_k, W_v, W_o) and both FFN layers (W1, W2): they hold nearly all of a model's
 * weights and products. The output projection (output.W, or the embedding tied to it) too:
 * at d512 with a 10k vocabulary it is a fifth of a decoding step's bytes, and measured on
 * the models in the README it changes greedy translations no more than the other layers do
 * (CTranslate2's int8 quantises it too). Embeddings as lookups and the positions stay
 * float32: a lookup reads one row, so its bytes do not matter, and their rows enter the
 * residual stream directly. An untied embedding is never a product's weight: not
 * quantised. */
static int int8_quantised(const qkv_param_info *t, int has_output)
{
    const char *name = t->name;
    if (t->ndim != 2) return 0;
    if (ends_with(name, ".W_q") || ends_with(name, ".W_k") || ends_with(name, ".W_v") ||
        ends_with(name, ".W_o") || ends_with(name, ".W1") || ends_with(name, ".W2"))
        return 1;
    if (!strcmp(name, "output.W")) return 1;
    /* tied: the embedding is also the output projection */
    return !has_output && (!strcmp(name, "embedding") || !strcmp(name, "tgt_embedding"));
}

static void int8_free(model_precision *mp)
{
    for (int i = 0; i < mp->n_int8; i++) int8_matrix_free(&mp->int8[i].q);
    free(mp->int8);
    mp->int8 = NULL, mp->n_int8 = 0, mp->int8_current = 0;
}

/* The table of the weights int8_quantised picks, in the table's order (increasing offsets:
 * the walk hands out consecutive slices), not yet quantised. */
static qkv_status int8_table(model_precision *mp, qkv_error *err)
{
    int has_output = 0, count = 0;
    for (int i = 0; i < mp->n_tensors; i++)
        has_output |= !strcmp(mp->tensors[i].name, "output.W");
    for (int i = 0; i < mp->n_tensors; i++)
        count += int8_quantised(&mp->tensors[i], has_output);
    if (count && !(mp->int8 = calloc((size_t)count, sizeof *mp->int8)))
        return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for %d int8 weight matrices", count);
    for (int i = 0; i < mp->n_tensors; i++)
        if (int8_quantised(&mp->tensors[i], has_output))
            mp->int8[mp->n_int8++].offset = mp->tensors[i].offset;
    return QKV_OK;
}

/* Quantises every weight of the table again, each in its place (typed weights point at
 * them). */
static qkv_status int8_refresh(model_precision *mp, const float *params, qkv_error *err)
{
    mp->int8_current = 0;
    for (int i = 0, k = 0; i < mp->n_tensors && k < mp->n_int8; i++) {
        const qkv_param_info *t = &mp->tensors[i];
        if (t->offset != mp->int8[k].offset) continue;
        int8_matrix *q = &mp->int8[k++].q;
        int8_matrix_free(q);
        qkv_status st = int8_matrix_quantise(q, params + t->offset, (int)t->shape[0],
                                             (int)t->shape[1], err);
        if (st) return st;
    }
    mp->int8_current = 1;
    return QKV_OK;
}

qkv_status precision_check_training(const model_precision *mp, qkv_error *err)
{
    if (mp->precision == QKV_PRECISION_INT8)
        return qkv_fail(err, QKV_ERR_ARG, "int8 precision is for inference only: a backward "
                        "pass (training) needs fp32 or bf16");
    return QKV_OK;
}

static qkv_status refresh(model_precision *mp, const float *params, size_t n, qkv_error *err)
{
    if (!mp->bf16 && !(mp->bf16 = malloc(n * sizeof *mp->bf16)))
        return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for the bf16 copy of %zu parameters",
                        n);
    bf16_convert(mp->bf16, params, n);
    mp->bf16_current = 1;
    return QKV_OK;
}

qkv_status precision_set(model_precision *mp, qkv_precision p, const float *params, size_t n,
                         const qkv_param_info *tensors, int n_tensors, qkv_error *err)
{
    if (p != QKV_PRECISION_FP32 && p != QKV_PRECISION_BF16 && p != QKV_PRECISION_INT8)
        return qkv_fail(err, QKV_ERR_ARG, "unknown precision %d (fp32 0, bf16 1, int8 2)",
                        (int)p);
    if (p == QKV_PRECISION_FP32) {
        precision_free(mp);
        return QKV_OK;
    }
    if (p == QKV_PRECISION_INT8) {
        if (!gemm_int8_supported())
            return qkv_fail(err, QKV_ERR_ARG, "int8 precision needs a CPU with AVX512-VNNI "
                            "(VPDPBUSD), and this one has none: use fp32");
        precision_free(mp);
        mp->tensors = tensors, mp->n_tensors = n_tensors;
        qkv_status st = int8_table(mp, err);
        if (!st) st = int8_refresh(mp, params, err);
        if (st) return precision_free(mp), st;
        mp->precision = p;
        return QKV_OK;
    }
    if (!gemm_bf16_supported())
        return qkv_fail(err, QKV_ERR_ARG, "bf16 precision needs a CPU with AVX512-BF16 "
                        "(VDPBF16PS), and this one has none: use fp32");
    if (mp->precision == QKV_PRECISION_INT8) precision_free(mp);
    qkv_status st = gemm_bf16_reserve(&mp->ws, omp_get_max_threads(), err);
    if (!st) st = refresh(mp, params, n, err);
    if (st) return precision_free(mp), st;
    mp->precision = p;
    return QKV_OK;
}

qkv_status precision_prepare(model_precision *mp, const float *params, size_t n, int decoding,
                             qkv_error *err)
{
    if (mp->precision == QKV_PRECISION_INT8)
        return mp->int8_current ? QKV_OK : int8_refresh(mp, params, err);
    if (mp->precision != QKV_PRECISION_BF16) return QKV_OK;
    qkv_status st = gemm_bf16_reserve(&mp->ws, omp_get_max_threads(), err);
    if (!st && decoding && !mp->bf16_current) st = refresh(mp, params, n, err);
    return st;
}

backend precision_backend(model_precision *mp)
{
    backend be = {.ops = &backend_cpu_fp32};
    if (mp->precision == QKV_PRECISION_INT8)
        be = (backend){.ops = &backend_cpu_int8, .typed_current = mp->int8_current,
                       .ws8 = &mp->ws8};
    else if (mp->precision == QKV_PRECISION_BF16)
        be = (backend){.ops = &backend_cpu_bf16, .typed_current = mp->bf16_current,
                       .ws = &mp->ws};
    return be;
}

weight precision_weight(const model_precision *mp, const float *params, const float *W)
{
    weight w = weight_f32(W);
    const size_t offset = (size_t)(W - params);
    if (mp->precision == QKV_PRECISION_BF16) {
        w.type = WEIGHT_BF16, w.bf16 = mp->bf16 + offset;
    } else if (mp->precision == QKV_PRECISION_INT8) { /* by offset, once: the table is sorted */
        int lo = 0, hi = mp->n_int8 - 1;
        while (lo <= hi) {
            const int mid = lo + (hi - lo) / 2;
            if (mp->int8[mid].offset == offset) {
                w.type = WEIGHT_INT8, w.int8 = &mp->int8[mid].q;
                break;
            }
            if (mp->int8[mid].offset < offset) lo = mid + 1;
            else hi = mid - 1;
        }
    }
    return w;
}

void precision_free(model_precision *mp)
{
    free(mp->bf16);
    gemm_bf16_workspace_free(&mp->ws);
    int8_free(mp);
    gemm_int8_workspace_free(&mp->ws8);
    memset(mp, 0, sizeof *mp);
}
