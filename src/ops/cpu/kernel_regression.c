/* SPDX-License-Identifier: MIT */
/* Nadaraya-Watson kernel regression as attention pooling (d2l 11.2, Nadaraya 1964, Watson
 * 1964): a query attends to the keys through a Gaussian kernel and averages their values,
 *   f(q) = sum_j softmax_j(-((q - k_j) w)^2 / 2) v_j.
 * With w = 1 nothing is learned; a learned w narrows (w > 1) or widens the kernel. */
#include "core/internal.h"

/* q (B, n), k (B, m), v (B, m) -> y (B, n), P (B, n, m). */
void qkv_kernel_regression_forward(float *y, float *P, const qkv_attention_inputs *x, float w,
                                   int B, int n, int m, const qkv_mask *mask)
{
    const float *q = x->Q, *k = x->K, *v = x->V;
    for (int b = 0; b < B; b++)
        for (int i = 0; i < n; i++) {
            const float *kb = k + (size_t)b * m;
            float *S = P + ((size_t)b * n + i) * m;
            for (int j = 0; j < m; j++) {
                float d = (q[(size_t)b * n + i] - kb[j]) * w;
                S[j] = -0.5f * d * d;
            }
        }
    qkv_masked_softmax_forward(P, P, B, 1, n, m, mask);
    for (int b = 0; b < B; b++)
        for (int i = 0; i < n; i++) {
            const float *Pi = P + ((size_t)b * n + i) * m, *vb = v + (size_t)b * m;
            float acc = 0.0f;
            for (int j = 0; j < m; j++) acc += Pi[j] * vb[j];
            y[(size_t)b * n + i] = acc;
        }
}

/* y_i = sum_j P_ij v_j gives dP_ij = dy_i v_j and dv_j += P_ij dy_i; the softmax gives
 * dS_ij = P_ij (dP_ij - sum_l P_il dP_il); and with d = q_i - k_j, S_ij = -(d w)^2 / 2:
 *   dS/dq_i = -d w^2,  dS/dk_j = d w^2,  dS/dw = -d^2 w. */
void qkv_kernel_regression_backward(qkv_attention_grads *dx, float *dw, const float *dy,
                                    const float *P, const qkv_attention_inputs *x, float w, int B,
                                    int n, int m)
{
    float *dq = dx ? dx->dQ : NULL, *dk = dx ? dx->dK : NULL, *dv = dx ? dx->dV : NULL;
    const float *q = x->Q, *k = x->K, *v = x->V;
    double dw_acc = 0.0;
    for (int b = 0; b < B; b++) {
        const float *kb = k + (size_t)b * m, *vb = v + (size_t)b * m;
        for (int i = 0; i < n; i++) {
            const size_t bi = (size_t)b * n + i;
            const float *Pi = P + bi * m;
            float r = 0.0f; /* sum_l P_il dP_il */
            for (int j = 0; j < m; j++) r += Pi[j] * dy[bi] * vb[j];
            float dqi = 0.0f;
            for (int j = 0; j < m; j++) {
                float dS = Pi[j] * (dy[bi] * vb[j] - r);
                float d = q[bi] - kb[j];
                dqi -= dS * d * w * w;
                if (dk) dk[(size_t)b * m + j] += dS * d * w * w;
                if (dv) dv[(size_t)b * m + j] += Pi[j] * dy[bi];
                dw_acc -= (double)dS * d * d * w;
            }
            if (dq) dq[bi] += dqi;
        }
    }
    if (dw) *dw += (float)dw_acc;
}
