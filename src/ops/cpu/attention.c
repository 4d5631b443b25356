/* SPDX-License-Identifier: MIT */
/* Scaled dot-product attention (paper, eq. 1):  Attention(Q, K, V) = softmax(Q K^T / sqrt(d)) V
 * with the masked softmax and dropout on the weights (d2l 11.3.3). Each (batch, head) pair is
 * an independent GEMM -> softmax -> GEMM chain; heads stay interleaved in memory, so the
 * matrices of one head are strided views (leading dimension H*d) and no transpose is needed. */
#include <math.h>

#include "core/internal.h"
#include "ops/cpu/attention_parts.h"

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

/* Q (B, n, H, d), K (B, m, H, d), V (B, m, H, v) -> O (B, n, H, v), P (B, H, n, m);
 * S = Q K^T / sqrt d, P = masked_softmax(S), O = dropout(P) V */
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
            const head_offsets at = head_offsets_of(b, h, H, n, m, d, v);
            size_t bh = ((size_t)b * H + h) * n * m;
            float *pw = P + bh;
            qkv_mask mb = mask_of_sequence(mask, b, n);
            gemm(0, 1, n, m, d, scale, Q + at.q, H * d, K + at.k, H * d, 0.0f, pw, m); /* S */
            qkv_masked_softmax_forward(pw, pw, 1, 1, n, m, &mb);
            const float *pd = dropped_weights(scratch + bh, pw, (size_t)n * m, p, seed, drop.offset + bh);
            gemm(0, 0, n, v, m, 1.0f, pd, m, V + at.v, H * v, 0.0f, O + at.o, H * v);
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
            const head_offsets at = head_offsets_of(b, h, H, n, m, d, v);
            const float *dout = dO + at.o;
            size_t bh = ((size_t)b * H + h) * n * m;
            const float *pw = P + bh;
            float *ds = scratch + bh;
            if (dV) {
                const float *pd = dropped_weights(ds, pw, (size_t)n * m, p, seed, drop.offset + bh);
                gemm(1, 0, m, v, n, 1.0f, pd, m, dout, H * v, 1.0f, dV + at.v, H * v);
            }
            if (!dQ && !dK) continue;
            gemm(0, 1, n, m, v, 1.0f, dout, H * v, V + at.v, H * v, 0.0f, ds, m); /* dPd = dO V^T */
            /* dP = dropout'(dPd): dropout is diagonal, its backward the same mask and scale */
            if (p > 0.0f) qkv_dropout_forward(ds, ds, (size_t)n * m, p, seed, drop.offset + bh);
            for (int i = 0; i < n; i++) { /* softmax backward, in place */
                const float *pr = pw + (size_t)i * m;
                float *r = ds + (size_t)i * m, dot = 0.0f;
                #pragma omp simd reduction(+ : dot)
                for (int j = 0; j < m; j++) dot += pr[j] * r[j];
                #pragma omp simd
                for (int j = 0; j < m; j++) r[j] = pr[j] * (r[j] - dot);
            }
            if (dQ) gemm(0, 0, n, d, m, scale, ds, m, K + at.k, H * d, 1.0f, dQ + at.q, H * d);
            if (dK) gemm(1, 0, m, d, n, scale, ds, m, Q + at.q, H * d, 1.0f, dK + at.k, H * d);
        }
}
