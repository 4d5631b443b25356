/* Residual connections around each sublayer (paper, section 5.4: dropout on the sublayer's
 * output before it is added). Post-norm AddNorm is the paper's LayerNorm(x + Sublayer(x));
 * the pre-norm form x + Sublayer(LayerNorm(x)) uses the plain residual add. */
#include "core/internal.h"

/* x, s, y (n):  y = x + dropout(s) */
void qkv_residual_forward(float *y, const float *x, const float *s, size_t n, float p,
                          uint64_t seed)
{
    if (p <= 0.0f) {
        for (size_t i = 0; i < n; i++) y[i] = x[i] + s[i];
        return;
    }
    const float scale = 1.0f / (1.0f - p);
    #pragma omp parallel for if (n > 16384)
    for (size_t i = 0; i < n; i++) y[i] = x[i] + (dropout_keep(p, seed, i) ? s[i] * scale : 0.0f);
}

void qkv_residual_backward(float *dx, float *ds, const float *dy, size_t n, float p,
                           uint64_t seed)
{
    if (dx)
        for (size_t i = 0; i < n; i++) dx[i] += dy[i];
    if (ds) qkv_dropout_backward(ds, dy, n, p, seed, 0);
}

/* x, s, y, z (N, C):  z = x + dropout(s),  y = LayerNorm(z) */
void qkv_addnorm_forward(float *y, float *z, float *mean, float *rstd, const float *x,
                         const float *s, const float *gamma, const float *beta, int N, int C,
                         float eps, float p, uint64_t seed)
{
    qkv_residual_forward(z, x, s, (size_t)N * C, p, seed);
    qkv_layernorm_forward(y, mean, rstd, z, gamma, beta, N, C, eps);
}

/* scratch (N, C) holds dz. */
void qkv_addnorm_backward(float *dx, float *ds, float *dgamma, float *dbeta, const float *dy,
                          const float *z, const float *mean, const float *rstd,
                          const float *gamma, int N, int C, float p, uint64_t seed,
                          float *scratch)
{
    float *dz = scratch;
    for (size_t i = 0; i < (size_t)N * C; i++) dz[i] = 0.0f;
    qkv_layernorm_backward(dz, dgamma, dbeta, dy, z, mean, rstd, gamma, N, C);
    qkv_residual_backward(dx, ds, dz, (size_t)N * C, p, seed);
}
