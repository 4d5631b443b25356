/* SPDX-License-Identifier: MIT */
/* Additive attention (Bahdanau et al. 2015; d2l 11.3.2):
 *   a(q, k) = w_v^T tanh(W_q q + W_k k),  O = dropout(masked_softmax(a)) V
 * Queries and keys may have different sizes; the hidden size h is the tanh layer's width. */
#include <math.h>
#include <string.h>

#include "core/internal.h"
#include "ops/cpu/attention_parts.h"

size_t qkv_additive_attention_scratch_floats(const qkv_additive_shape *s)
{
    return (size_t)s->B * s->n * s->m + (size_t)s->B * s->n * s->h + (size_t)s->B * s->m * s->h;
}

/* Q (B, n, dq), K (B, m, dk), V (B, m, v) -> O (B, n, v) */
void qkv_additive_attention_forward(float *O, qkv_additive_cache *c,
                                    const qkv_attention_inputs *x, const qkv_additive_weights *w,
                                    const qkv_additive_shape *s, const qkv_mask *mask,
                                    qkv_dropout drop, float *scratch)
{
    const float *Q = x->Q, *K = x->K, *V = x->V, p = drop.p;
    const int B = s->B, n = s->n, m = s->m, dq = s->dq, dk = s->dk, v = s->v, h = s->h;
    const uint64_t seed = drop.seed;
    qkv_linear_forward(c->q, Q, w->W_q, NULL, B * n, dq, h);
    qkv_linear_forward(c->k, K, w->W_k, NULL, B * m, dk, h);
    #pragma omp parallel for collapse(2) if ((long)B * n * m * h > 32768)
    for (int b = 0; b < B; b++)
        for (int i = 0; i < n; i++) {
            const float *qi = c->q + ((size_t)b * n + i) * h;
            for (int j = 0; j < m; j++) {
                const float *kj = c->k + ((size_t)b * m + j) * h;
                float *f = c->F + (((size_t)b * n + i) * m + j) * h, score = 0.0f;
                for (int u = 0; u < h; u++) {
                    f[u] = tanhf(qi[u] + kj[u]);
                    score += w->w_v[u] * f[u];
                }
                c->P[((size_t)b * n + i) * m + j] = score;
            }
        }
    qkv_masked_softmax_forward(c->P, c->P, B, 1, n, m, mask);
    const float *pd = dropped_weights(scratch, c->P, (size_t)B * n * m, p, seed, drop.offset);
    for (int b = 0; b < B; b++)
        gemm(0, 0, n, v, m, 1.0f, pd + (size_t)b * n * m, m, V + (size_t)b * m * v, v, 0.0f,
             O + (size_t)b * n * v, v);
}

/* Chain rule back through O = Pd V, the softmax, s = w_v . f, f = tanh(q_i + k_j) and the two
 * projections; tanh' = 1 - f^2. */
void qkv_additive_attention_backward(qkv_attention_grads *dx, qkv_additive_weights *dw,
                                     const float *dO, const qkv_additive_cache *c,
                                     const qkv_attention_inputs *x,
                                     const qkv_additive_weights *w, const qkv_additive_shape *s,
                                     qkv_dropout drop, float *scratch)
{
    float *dQ = dx->dQ, *dK = dx->dK, *dV = dx->dV;
    const float *Q = x->Q, *K = x->K, *V = x->V, p = drop.p;
    const int B = s->B, n = s->n, m = s->m, dq = s->dq, dk = s->dk, v = s->v, h = s->h;
    const uint64_t seed = drop.seed;
    float *ds = scratch;                      /* (B, n, m) */
    float *gq = ds + (size_t)B * n * m;       /* (B, n, h) gradient of W_q q */
    float *gk = gq + (size_t)B * n * h;       /* (B, m, h) gradient of W_k k */
    if (dV) {
        const float *pd = dropped_weights(ds, c->P, (size_t)B * n * m, p, seed, drop.offset);
        for (int b = 0; b < B; b++)
            gemm(1, 0, m, v, n, 1.0f, pd + (size_t)b * n * m, m, dO + (size_t)b * n * v, v, 1.0f,
                 dV + (size_t)b * m * v, v);
    }
    for (int b = 0; b < B; b++) /* dPd = dO V^T */
        gemm(0, 1, n, m, v, 1.0f, dO + (size_t)b * n * v, v, V + (size_t)b * m * v, v, 0.0f,
             ds + (size_t)b * n * m, m);
    /* dP = dropout'(dPd): dropout is diagonal, its backward the same mask and scale */
    if (p > 0.0f) qkv_dropout_forward(ds, ds, (size_t)B * n * m, p, seed, drop.offset);
    for (size_t r = 0; r < (size_t)B * n; r++) { /* softmax backward, in place */
        const float *pr = c->P + r * m;
        float *dsr = ds + r * m, dot = 0.0f;
        for (int j = 0; j < m; j++) dot += pr[j] * dsr[j];
        for (int j = 0; j < m; j++) dsr[j] = pr[j] * (dsr[j] - dot);
    }
    memset(gq, 0, ((size_t)B * n * h + (size_t)B * m * h) * sizeof *gq);
    for (int b = 0; b < B; b++)
        for (int i = 0; i < n; i++)
            for (int j = 0; j < m; j++) {
                float g = ds[((size_t)b * n + i) * m + j];
                if (g == 0.0f) continue; /* masked or dropped: nothing flows back */
                const float *f = c->F + (((size_t)b * n + i) * m + j) * h;
                float *gqi = gq + ((size_t)b * n + i) * h, *gkj = gk + ((size_t)b * m + j) * h;
                for (int u = 0; u < h; u++) {
                    if (dw && dw->w_v) dw->w_v[u] += g * f[u];
                    float dpre = g * w->w_v[u] * (1.0f - f[u] * f[u]);
                    gqi[u] += dpre;
                    gkj[u] += dpre;
                }
            }
    qkv_linear_backward(dQ, dw ? dw->W_q : NULL, NULL, gq, Q, w->W_q, B * n, dq, h);
    qkv_linear_backward(dK, dw ? dw->W_k : NULL, NULL, gk, K, w->W_k, B * m, dk, h);
}
