/* SPDX-License-Identifier: MIT */
/* Token embedding: a lookup table E (V, C); its gradient is a scatter-add. */
#include <string.h>

#include "core/internal.h"

/* ids (N) -> y (N, C) = E[ids] */
qkv_status qkv_embedding_forward(float *y, const int *ids, const float *E, int N, int V, int C,
                                 qkv_error *err)
{
    for (int i = 0; i < N; i++)
        if (ids[i] < 0 || ids[i] >= V)
            return qkv_fail(err, QKV_ERR_ARG, "embedding: token id %d at position %d is outside "
                            "the vocabulary [0, %d)", ids[i], i, V);
    for (int i = 0; i < N; i++)
        memcpy(y + (size_t)i * C, E + (size_t)ids[i] * C, (size_t)C * sizeof *y);
    return QKV_OK;
}

/* dE[ids[i]] += dy[i]. Serial: two positions with the same id write the same row. */
void qkv_embedding_backward(float *dE, const float *dy, const int *ids, int N, int C)
{
    for (int i = 0; i < N; i++) {
        float *row = dE + (size_t)ids[i] * C;
        const float *g = dy + (size_t)i * C;
        #pragma omp simd
        for (int c = 0; c < C; c++) row[c] += g[c];
    }
}
