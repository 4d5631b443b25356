/* The models' precision setting; see precision.h. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "models/precision.h"

int qkv_bf16_supported(void) { return gemm_bf16_supported(); }

const char *qkv_precision_name(qkv_precision p)
{
    return p == QKV_PRECISION_BF16 ? "bf16" : p == QKV_PRECISION_FP32 ? "fp32" : "unknown";
}

qkv_status qkv_precision_parse(qkv_precision *p, const char *name, qkv_error *err)
{
    if (name && !strcmp(name, "fp32")) return *p = QKV_PRECISION_FP32, QKV_OK;
    if (name && !strcmp(name, "bf16")) return *p = QKV_PRECISION_BF16, QKV_OK;
    return qkv_fail(err, QKV_ERR_ARG, "unknown precision '%s' (fp32 or bf16)",
                    name ? name : "(null)");
}

const char *qkv_kv_cache_name(qkv_kv_cache c)
{
    return c == QKV_KV_CACHE_AUTO ? "auto" : c == QKV_KV_CACHE_FP32 ? "fp32"
           : c == QKV_KV_CACHE_BF16 ? "bf16" : "unknown";
}

qkv_status qkv_kv_cache_parse(qkv_kv_cache *c, const char *name, qkv_error *err)
{
    if (name && !strcmp(name, "auto")) return *c = QKV_KV_CACHE_AUTO, QKV_OK;
    if (name && !strcmp(name, "fp32")) return *c = QKV_KV_CACHE_FP32, QKV_OK;
    if (name && !strcmp(name, "bf16")) return *c = QKV_KV_CACHE_BF16, QKV_OK;
    return qkv_fail(err, QKV_ERR_ARG, "unknown key-value cache type '%s' (auto, fp32 or bf16)",
                    name ? name : "(null)");
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
                         qkv_error *err)
{
    if (p != QKV_PRECISION_FP32 && p != QKV_PRECISION_BF16)
        return qkv_fail(err, QKV_ERR_ARG, "unknown precision %d (fp32 0, bf16 1)", (int)p);
    if (p == QKV_PRECISION_FP32) {
        precision_free(mp);
        return QKV_OK;
    }
    if (!gemm_bf16_supported())
        return qkv_fail(err, QKV_ERR_ARG, "bf16 precision needs a CPU with AVX512-BF16 "
                        "(VDPBF16PS), and this one has none: use fp32");
    qkv_status st = gemm_bf16_reserve(&mp->ws, omp_get_max_threads(), err);
    if (!st) st = refresh(mp, params, n, err);
    if (st) return precision_free(mp), st;
    mp->precision = p;
    return QKV_OK;
}

qkv_status precision_prepare(model_precision *mp, const float *params, size_t n, int decoding,
                             qkv_error *err)
{
    if (mp->precision != QKV_PRECISION_BF16) return QKV_OK;
    qkv_status st = gemm_bf16_reserve(&mp->ws, omp_get_max_threads(), err);
    if (!st && decoding && !mp->bf16_current) st = refresh(mp, params, n, err);
    return st;
}

backend precision_backend(model_precision *mp, const float *params, size_t n)
{
    if (mp->precision != QKV_PRECISION_BF16) return backend_cpu();
    backend be = {&backend_cpu_bf16, params, n, mp->bf16_current ? mp->bf16 : NULL, &mp->ws};
    return be;
}

void precision_free(model_precision *mp)
{
    free(mp->bf16);
    gemm_bf16_workspace_free(&mp->ws);
    memset(mp, 0, sizeof *mp);
}
