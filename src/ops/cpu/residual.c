/* SPDX-License-Identifier: MIT */
/* Residual connections around each sublayer (paper, section 5.4: dropout on the sublayer's
 * output before it is added). Post-norm AddNorm is the paper's LayerNorm(x + Sublayer(x));
 * the pre-norm form x + Sublayer(LayerNorm(x)) uses the plain residual add. AddNorm runs row
 * by row, the residual, the dropout and the LayerNorm of a row in one pass while the row is
 * in L1. */
#include <string.h>

#include "core/internal.h"
#include "ops/cpu/dropout_mask.h"
#include "ops/cpu/fused.h"

/* One row of z = x + dropout(s) (C values from flat index i0, the dropout counter). */
static void residual_row(float *z, const float *x, const float *s, int C, float p,
                         uint64_t seed, uint64_t i0)
{
    if (p <= 0.0f) {
        #pragma omp simd
        for (int c = 0; c < C; c++) z[c] = x[c] + s[c];
        return;
    }
    const dropout_rule d = dropout_rule_of(p, seed);
    for (int c = 0; c < C; c++) z[c] = x[c] + dropout_apply(&d, i0 + c, s[c]);
}

/* x, s, y (n):  y = x + dropout(s) */
void qkv_residual_forward(float *y, const float *x, const float *s, size_t n, qkv_dropout drop)
{
    const float p = drop.p;
    const uint64_t seed = drop.seed;
    if (p <= 0.0f) {
        #pragma omp parallel for simd if (n > 65536)
        for (size_t i = 0; i < n; i++) y[i] = x[i] + s[i];
        return;
    }
    const dropout_rule d = dropout_rule_of(p, seed);
    #pragma omp parallel for if (n > 16384)
    for (size_t i = 0; i < n; i++) y[i] = x[i] + dropout_apply(&d, drop.offset + i, s[i]);
}

/* dx += dy;  ds += dropout'(dy) */
void qkv_residual_backward(float *dx, float *ds, const float *dy, size_t n, qkv_dropout drop)
{
    if (dx) {
        #pragma omp parallel for simd if (n > 65536)
        for (size_t i = 0; i < n; i++) dx[i] += dy[i];
    }
    if (ds) qkv_dropout_backward(ds, dy, n, drop.p, drop.seed, drop.offset);
}

/* x, s, y, z (N, C):  z = x + dropout(s),  y = LayerNorm(z) */
void qkv_addnorm_forward(float *y, qkv_addnorm_cache *c, const float *x, const float *s,
                         const qkv_layernorm_weights *w, int N, int C, float eps,
                         qkv_dropout drop)
{
    float *z = c->z, *mean = c->mean, *rstd = c->rstd;
    const float *gamma = w->gamma, *beta = w->beta, p = drop.p;
    const uint64_t seed = drop.seed;
    #pragma omp parallel for if ((long)N * C > 16384)
    for (int i = 0; i < N; i++) {
        const size_t row = (size_t)i * C;
        residual_row(z + row, x + row, s + row, C, p, seed, drop.offset + row);
        layernorm_row_forward(y + row, mean + i, rstd + i, z + row, gamma, beta, C, eps);
    }
}

/* dz = LayerNorm'(dy) row by row into scratch (N, C), then dx += dz and ds += dropout'(dz)
 * while the row is in L1. */
void qkv_addnorm_backward(float *dx, float *ds, qkv_layernorm_weights *dw, const float *dy,
                          const qkv_addnorm_cache *c, const qkv_layernorm_weights *w, int N,
                          int C, qkv_dropout drop, float *scratch)
{
    const float *z = c->z, *mean = c->mean, *rstd = c->rstd, *gamma = w->gamma, p = drop.p;
    float *dgamma = dw ? dw->gamma : NULL, *dbeta = dw ? dw->beta : NULL;
    const uint64_t seed = drop.seed;
    const dropout_rule d = dropout_rule_of(p, seed);
    #pragma omp parallel for if ((long)N * C > 16384)
    for (int i = 0; i < N; i++) {
        const size_t row = (size_t)i * C;
        float *dz = scratch + row;
        memset(dz, 0, (size_t)C * sizeof *dz);
        layernorm_row_backward(dz, dy + row, z + row, mean[i], rstd[i], gamma, C);
        if (dx) {
            #pragma omp simd
            for (int c = 0; c < C; c++) dx[row + c] += dz[c];
        }
        if (!ds) continue;
        if (p <= 0.0f) {
            #pragma omp simd
            for (int c = 0; c < C; c++) ds[row + c] += dz[c];
        } else {
            for (int c = 0; c < C; c++) ds[row + c] += dropout_apply(&d, drop.offset + row + c, dz[c]);
        }
    }
    layernorm_param_backward(dgamma, dbeta, dy, z, mean, rstd, N, C);
}
