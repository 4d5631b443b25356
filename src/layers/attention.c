/* Scaled dot-product attention (paper, eq. 1):  Attention(Q, K, V) = softmax(Q K^T / sqrt(d)) V
 * with the masked softmax and dropout on the weights (d2l 11.3.3). Each (batch, head) pair is
 * an independent GEMM -> softmax -> GEMM chain; heads stay interleaved in memory, so the
 * matrices of one head are strided views (leading dimension H*d) and no transpose is needed. */
#include <math.h>

#include "core/internal.h"
#include "kernels/dropout_mask.h"

/* The mask of sequence b alone: lengths are indexed by b, so shift the pointer to it. */
static qkv_mask mask_of_sequence(const qkv_mask *mask, int b, int n)
{
    qkv_mask sub = {0};
    if (!mask) return sub;
    sub = *mask;
    if (sub.valid_lens) sub.valid_lens += sub.per_query ? (size_t)b * n : (size_t)b;
    return sub;
}

size_t qkv_attention_scratch_floats(const qkv_attention_shape *s)
{
    return (size_t)s->B * s->H * s->n * s->m;
}

/* Q (B, n, H, d), K (B, m, H, d), V (B, m, H, v) -> O (B, n, H, v), P (B, H, n, m) */
void qkv_attention_forward(float *O, float *P, const qkv_attention_inputs *x,
                           const qkv_attention_shape *s, const qkv_mask *mask, qkv_dropout drop,
                           float *scratch)
{
    const float *Q = x->Q, *K = x->K, *V = x->V, p = drop.p;
    const int B = s->B, H = s->H, n = s->n, m = s->m, d = s->d, v = s->v;
    const uint64_t seed = drop.seed;
    const float scale = 1.0f / sqrtf((float)d);
    #pragma omp parallel for collapse(2) if (B * H > 1)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            const float *q = Q + ((size_t)b * n * H + h) * d;
            const float *k = K + ((size_t)b * m * H + h) * d;
            const float *vv = V + ((size_t)b * m * H + h) * v;
            float *o = O + ((size_t)b * n * H + h) * v;
            size_t bh = ((size_t)b * H + h) * n * m;
            float *pw = P + bh;
            qkv_mask mb = mask_of_sequence(mask, b, n);
            gemm(0, 1, n, m, d, scale, q, H * d, k, H * d, 0.0f, pw, m); /* S = Q K^T / sqrt d */
            qkv_masked_softmax_forward(pw, pw, 1, 1, n, m, &mb);
            const float *pd = pw;
            if (p > 0.0f) {
                qkv_dropout_forward(scratch + bh, pw, (size_t)n * m, p, seed, bh);
                pd = scratch + bh;
            }
            gemm(0, 0, n, v, m, 1.0f, pd, m, vv, H * v, 0.0f, o, H * v); /* O = P V */
        }
}

/* With Pd = dropout(P), S the scaled scores:
 *   dV += Pd^T dO,  dPd = dO V^T,  dP = dropout'(dPd),  dS = P (dP - rowsum(P dP)),
 *   dQ += dS K / sqrt d,  dK += dS^T Q / sqrt d */
void qkv_attention_backward(qkv_attention_grads *dx, const float *dO, const float *P,
                            const qkv_attention_inputs *x, const qkv_attention_shape *s,
                            qkv_dropout drop, float *scratch)
{
    float *dQ = dx->dQ, *dK = dx->dK, *dV = dx->dV;
    const float *Q = x->Q, *K = x->K, *V = x->V, p = drop.p;
    const int B = s->B, H = s->H, n = s->n, m = s->m, d = s->d, v = s->v;
    const uint64_t seed = drop.seed;
    const float scale = 1.0f / sqrtf((float)d);
    #pragma omp parallel for collapse(2) if (B * H > 1)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            const float *q = Q + ((size_t)b * n * H + h) * d;
            const float *k = K + ((size_t)b * m * H + h) * d;
            const float *vv = V + ((size_t)b * m * H + h) * v;
            const float *dout = dO + ((size_t)b * n * H + h) * v;
            size_t bh = ((size_t)b * H + h) * n * m;
            const float *pw = P + bh;
            float *ds = scratch + bh;
            if (dV) {
                const float *pd = pw;
                if (p > 0.0f) {
                    qkv_dropout_forward(ds, pw, (size_t)n * m, p, seed, bh);
                    pd = ds;
                }
                gemm(1, 0, m, v, n, 1.0f, pd, m, dout, H * v, 1.0f,
                     dV + ((size_t)b * m * H + h) * v, H * v);
            }
            if (!dQ && !dK) continue;
            gemm(0, 1, n, m, v, 1.0f, dout, H * v, vv, H * v, 0.0f, ds, m); /* dPd = dO V^T */
            if (p > 0.0f) { /* dP = dropout'(dPd) */
                const dropout_rule dr = dropout_rule_of(p, seed);
                for (size_t e = 0; e < (size_t)n * m; e++)
                    ds[e] = dropout_apply(&dr, bh + e, ds[e]);
            }
            for (int i = 0; i < n; i++) { /* softmax backward, in place */
                const float *pr = pw + (size_t)i * m;
                float *r = ds + (size_t)i * m, dot = 0.0f;
                #pragma omp simd reduction(+ : dot)
                for (int j = 0; j < m; j++) dot += pr[j] * r[j];
                #pragma omp simd
                for (int j = 0; j < m; j++) r[j] = pr[j] * (r[j] - dot);
            }
            if (dQ)
                gemm(0, 0, n, d, m, scale, ds, m, k, H * d, 1.0f,
                     dQ + ((size_t)b * n * H + h) * d, H * d);
            if (dK)
                gemm(1, 0, m, d, n, scale, ds, m, q, H * d, 1.0f,
                     dK + ((size_t)b * m * H + h) * d, H * d);
        }
}
