/* SPDX-License-Identifier: MIT */
/* Normalisation over the last axis: LayerNorm (Ba et al. 2016), used by AddNorm, and RMSNorm
 * (Zhang & Sennrich 2019). Forward saves the per-row statistics backward needs. */
#include <math.h>

#include "core/internal.h"
#include "ops/cpu/fused.h"

/* One row: x, y (C).  y = (x - mu) / sqrt(var + eps) * gamma + beta */
void layernorm_row_forward(float *y, float *mean, float *rstd, const float *x,
                           const float *gamma, const float *beta, int C, float eps)
{
    float mu = 0.0f, var = 0.0f;
    #pragma omp simd reduction(+ : mu)
    for (int c = 0; c < C; c++) mu += x[c];
    mu /= (float)C;
    #pragma omp simd reduction(+ : var)
    for (int c = 0; c < C; c++) var += (x[c] - mu) * (x[c] - mu);
    var /= (float)C;
    float r = 1.0f / sqrtf(var + eps);
    #pragma omp simd
    for (int c = 0; c < C; c++) y[c] = (x[c] - mu) * r * gamma[c] + beta[c];
    *mean = mu;
    *rstd = r;
}

/* x, y (N, C); mean, rstd (N); gamma, beta (C). */
void qkv_layernorm_forward(float *y, float *mean, float *rstd, const float *x,
                           const qkv_layernorm_weights *w, int N, int C, float eps)
{
    const float *gamma = w->gamma, *beta = w->beta;
    #pragma omp parallel for if ((long)N * C > 32768)
    for (int i = 0; i < N; i++)
        layernorm_row_forward(y + (size_t)i * C, mean + i, rstd + i, x + (size_t)i * C, gamma,
                              beta, C, eps);
}

/* One row, with xhat = (x - mu) rstd and g = dy * gamma:
 *   dx += rstd (g - mean(g) - xhat mean(g xhat)) */
void layernorm_row_backward(float *dx, const float *dy, const float *x, float mu, float r,
                            const float *gamma, int C)
{
    float g_mean = 0.0f, gx_mean = 0.0f;
    #pragma omp simd reduction(+ : g_mean, gx_mean)
    for (int c = 0; c < C; c++) {
        float g = dy[c] * gamma[c];
        g_mean += g;
        gx_mean += g * (x[c] - mu) * r;
    }
    g_mean /= (float)C;
    gx_mean /= (float)C;
    #pragma omp simd
    for (int c = 0; c < C; c++) {
        float xhat = (x[c] - mu) * r;
        dx[c] += r * (dy[c] * gamma[c] - g_mean - xhat * gx_mean);
    }
}

/* dgamma += sum_i dy xhat,  dbeta += sum_i dy: rows in order, so each sum is the same
 * whatever the thread count. */
void layernorm_param_backward(float *dgamma, float *dbeta, const float *dy, const float *x,
                              const float *mean, const float *rstd, int N, int C)
{
    for (int i = 0; i < N; i++) {
        const float *xi = x + (size_t)i * C, *dyi = dy + (size_t)i * C;
        const float mu = mean[i], r = rstd[i];
        if (dgamma) {
            #pragma omp simd
            for (int c = 0; c < C; c++) dgamma[c] += dyi[c] * (xi[c] - mu) * r;
        }
        if (dbeta) {
            #pragma omp simd
            for (int c = 0; c < C; c++) dbeta[c] += dyi[c];
        }
    }
}

void qkv_layernorm_backward(float *dx, qkv_layernorm_weights *dw, const float *dy,
                            const float *x, const float *mean, const float *rstd,
                            const qkv_layernorm_weights *w, int N, int C)
{
    const float *gamma = w->gamma;
    float *dgamma = dw ? dw->gamma : NULL, *dbeta = dw ? dw->beta : NULL;
    if (dx) {
        #pragma omp parallel for if ((long)N * C > 32768)
        for (int i = 0; i < N; i++)
            layernorm_row_backward(dx + (size_t)i * C, dy + (size_t)i * C, x + (size_t)i * C,
                                   mean[i], rstd[i], gamma, C);
    }
    layernorm_param_backward(dgamma, dbeta, dy, x, mean, rstd, N, C);
}

/* x, y (N, C); rstd (N); g (C).  y = x / sqrt(mean(x^2) + eps) * g */
void qkv_rmsnorm_forward(float *y, float *rstd, const float *x, const float *g, int N, int C,
                         float eps)
{
    #pragma omp parallel for if ((long)N * C > 32768)
    for (int i = 0; i < N; i++) {
        const float *xi = x + (size_t)i * C;
        float *yi = y + (size_t)i * C;
        float ms = 0.0f;
        for (int c = 0; c < C; c++) ms += xi[c] * xi[c];
        float r = 1.0f / sqrtf(ms / (float)C + eps);
        for (int c = 0; c < C; c++) yi[c] = xi[c] * r * g[c];
        rstd[i] = r;
    }
}

/* With xhat = x rstd and h = dy * g:  dx = rstd (h - xhat mean(h xhat)),  dg += sum_i dy xhat */
void qkv_rmsnorm_backward(float *dx, float *dg, const float *dy, const float *x,
                          const float *rstd, const float *g, int N, int C)
{
    if (dx) {
        #pragma omp parallel for if ((long)N * C > 32768)
        for (int i = 0; i < N; i++) {
            const float *xi = x + (size_t)i * C, *dyi = dy + (size_t)i * C;
            float *dxi = dx + (size_t)i * C;
            float r = rstd[i], hx_mean = 0.0f;
            for (int c = 0; c < C; c++) hx_mean += dyi[c] * g[c] * xi[c] * r;
            hx_mean /= (float)C;
            for (int c = 0; c < C; c++) dxi[c] += r * (dyi[c] * g[c] - xi[c] * r * hx_mean);
        }
    }
    if (dg)
        for (int i = 0; i < N; i++) {
            const float *xi = x + (size_t)i * C, *dyi = dy + (size_t)i * C;
            for (int c = 0; c < C; c++) dg[c] += dyi[c] * xi[c] * rstd[i];
        }
}
