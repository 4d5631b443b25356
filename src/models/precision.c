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

/* Whether a tensor is one of the weight matrices int8 quantises: every attention projection
 * (W_q, W_k, W_v, W_o) and both FFN layers (W1, W2), which hold nearly all of a model's
 * weights and products; the output projection (output.W): at d512 with a 10k vocabulary it
 * is a fifth of a decoding step's bytes, and measured on the models in the README it changes
 * greedy translations no more than the other layers do; and every embedding, whose lookups
 * then read a row dequantised (and a tied one is the output projection too). That is
 * CTranslate2's int8, and what makes an int8 model file a quarter of the float32 one
 * (models/precision.h). The positions, biases and LayerNorms stay float32: vectors, a few
 * bytes of a model. */
int precision_int8_tensor(const qkv_param_info *t)
{
    const char *name = t->name;
    if (t->ndim != 2) return 0;
    return ends_with(name, ".W_q") || ends_with(name, ".W_k") || ends_with(name, ".W_v") ||
           ends_with(name, ".W_o") || ends_with(name, ".W1") || ends_with(name, ".W2") ||
           !strcmp(name, "output.W") || ends_with(name, "embedding");
}

static void int8_free(model_precision *mp)
{
    for (int i = 0; i < mp->n_int8; i++) int8_matrix_free(&mp->int8[i].q);
    free(mp->int8);
    mp->int8 = NULL, mp->n_int8 = 0, mp->int8_current = 0, mp->int8_file = 0;
}

/* The table of the weights precision_int8_tensor picks, in the table's order (increasing
 * offsets: the walk hands out consecutive slices), not yet quantised. */
static qkv_status int8_table(model_precision *mp, const qkv_param_info *tensors, int n_tensors,
                             qkv_error *err)
{
    int count = 0;
    for (int i = 0; i < n_tensors; i++) count += precision_int8_tensor(&tensors[i]);
    if (count && !(mp->int8 = calloc((size_t)count, sizeof *mp->int8)))
        return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for %d int8 weight matrices", count);
    mp->tensors = tensors, mp->n_tensors = n_tensors;
    for (int i = 0; i < n_tensors; i++)
        if (precision_int8_tensor(&tensors[i])) mp->int8[mp->n_int8++].offset = tensors[i].offset;
    return QKV_OK;
}

/* Quantises every weight of the table again, each in its place (typed weights point at
 * them): the parameters changed, so a file's matrices no longer stand for them. */
static qkv_status int8_refresh(model_precision *mp, const float *params, qkv_error *err)
{
    mp->int8_current = 0, mp->int8_file = 0;
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

qkv_status precision_adopt_int8(model_precision *mp, const qkv_param_info *tensors,
                                int n_tensors, int8_matrix *file, qkv_error *err)
{
    int8_free(mp);
    qkv_status st = int8_table(mp, tensors, n_tensors, err);
    if (st) return st;
    for (int k = 0; k < mp->n_int8; k++) mp->int8[k].q = file[k], memset(&file[k], 0, sizeof *file);
    mp->int8_current = mp->int8_file = 1;
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

/* The bf16 copy and the GEMMs' buffers freed; the int8 table too, unless it holds a file's
 * matrices (kept for a later int8: they cannot be made again from their dequantised floats
 * bit for bit). */
static void typed_free(model_precision *mp)
{
    free(mp->bf16), mp->bf16 = NULL, mp->bf16_current = 0;
    gemm_bf16_workspace_free(&mp->ws);
    gemm_int8_workspace_free(&mp->ws8);
    if (!mp->int8_file) int8_free(mp);
}

qkv_status precision_set(model_precision *mp, qkv_precision p, const float *params, size_t n,
                         const qkv_param_info *tensors, int n_tensors, qkv_error *err)
{
    if (p != QKV_PRECISION_FP32 && p != QKV_PRECISION_BF16 && p != QKV_PRECISION_INT8)
        return qkv_fail(err, QKV_ERR_ARG, "unknown precision %d (fp32 0, bf16 1, int8 2)",
                        (int)p);
    if (p == QKV_PRECISION_INT8 && !gemm_int8_supported())
        return qkv_fail(err, QKV_ERR_ARG, "int8 precision needs a CPU with AVX512-VNNI "
                        "(VPDPBUSD), and this one has none: use fp32");
    if (p == QKV_PRECISION_BF16 && !gemm_bf16_supported())
        return qkv_fail(err, QKV_ERR_ARG, "bf16 precision needs a CPU with AVX512-BF16 "
                        "(VDPBF16PS), and this one has none: use fp32");
    typed_free(mp);
    mp->precision = QKV_PRECISION_FP32;
    qkv_status st = QKV_OK;
    if (p == QKV_PRECISION_INT8) {
        if (!mp->int8) st = int8_table(mp, tensors, n_tensors, err);
        if (!st && !mp->int8_current) st = int8_refresh(mp, params, err);
    } else if (p == QKV_PRECISION_BF16) {
        st = gemm_bf16_reserve(&mp->ws, omp_get_max_threads(), err);
        if (!st) st = refresh(mp, params, n, err);
    }
    if (st) return typed_free(mp), st;
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
    mp->int8_file = 0;
    typed_free(mp);
    memset(mp, 0, sizeof *mp);
}
