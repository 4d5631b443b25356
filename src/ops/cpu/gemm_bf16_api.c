/* SPDX-License-Identifier: MIT */
/* The bf16 product as a public call (qkv/layers.h, qkv_gemm_bf16): the kernel of bf16.h with
 * its workspace behind a handle. */
#include <stdlib.h>

#include "core/internal.h"
#include "ops/cpu/bf16.h"

struct qkv_gemm_bf16 {
    gemm_bf16_workspace ws;
};

qkv_status qkv_gemm_bf16_create(qkv_gemm_bf16 **out, int threads, qkv_error *err)
{
    *out = NULL;
    if (!gemm_bf16_supported())
        return qkv_fail(err, QKV_ERR_ARG, "the bf16 product needs a CPU with AVX512-BF16 "
                        "(AVX512F, BW, VL, DQ and BF16); this one has not");
    qkv_gemm_bf16 *g = calloc(1, sizeof *g);
    if (!g) return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for a bf16 product");
    const qkv_status st = gemm_bf16_reserve(&g->ws, threads > 0 ? threads : qkv_get_threads(),
                                            err);
    if (st) return qkv_gemm_bf16_free(g), st;
    *out = g;
    return QKV_OK;
}

void qkv_gemm_bf16_run(qkv_gemm_bf16 *g, int trans_a, int trans_b, int M, int N, int K,
                       const float *A, const float *B, float *C)
{
    gemm_bf16(trans_a, trans_b, M, N, K, 1.0f, A, trans_a ? M : K, B, trans_b ? K : N, 0.0f, C,
              N, &g->ws);
}

void qkv_gemm_bf16_free(qkv_gemm_bf16 *g)
{
    if (!g) return;
    gemm_bf16_workspace_free(&g->ws);
    free(g);
}
