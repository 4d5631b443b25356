/* SPDX-License-Identifier: MIT */
/* Masked softmax over the last axis (d2l 11.3): attention weights for keys a query may not see
 * are exactly 0. We skip masked keys instead of adding a large negative number, so a row with
 * no visible key comes out all zeros rather than uniform or NaN. */
#include <math.h>
#include <string.h>

#include "core/internal.h"
#include "ops/cpu/mask.h"

/* One row: P[j] = exp(S[j] - max) / sum for j < len, 0 beyond. */
static void softmax_row(float *P, const float *S, int len, int m)
{
    float mx = -INFINITY, sum = 0.0f;
    for (int j = 0; j < len; j++) mx = S[j] > mx ? S[j] : mx;
    for (int j = 0; j < len; j++) {
        P[j] = expf(S[j] - mx);
        sum += P[j];
    }
    float inv = len > 0 ? 1.0f / sum : 0.0f;
    for (int j = 0; j < len; j++) P[j] *= inv;
    for (int j = len; j < m; j++) P[j] = 0.0f;
}

/* S, P (B, H, n, m) */
void qkv_masked_softmax_forward(float *P, const float *S, int B, int H, int n, int m,
                                const qkv_mask *mask)
{
    #pragma omp parallel for collapse(2) if ((long)B * H * n * m > 32768)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < n; i++) {
                size_t row = (((size_t)b * H + h) * n + i) * m;
                softmax_row(P + row, S + row, mask_visible_keys(mask, b, i, n, m), m);
            }
}

/* dS = P * (dP - <P, dP>) per row (the softmax Jacobian-vector product). */
void qkv_masked_softmax_backward(float *dS, const float *dP, const float *P, int rows, int m)
{
    #pragma omp parallel for if ((long)rows * m > 32768)
    for (int r = 0; r < rows; r++) {
        const float *p = P + (size_t)r * m, *dp = dP + (size_t)r * m;
        float *ds = dS + (size_t)r * m;
        float dot = 0.0f;
        for (int j = 0; j < m; j++) dot += p[j] * dp[j];
        for (int j = 0; j < m; j++) ds[j] += p[j] * (dp[j] - dot);
    }
}
