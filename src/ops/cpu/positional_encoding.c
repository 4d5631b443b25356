/* SPDX-License-Identifier: MIT */
/* Positional encoding (paper, section 3.5; d2l 11.6.3). The sinusoidal table gives each
 * position a unique code whose offsets are linear maps; learned positions use the same add
 * and receive a gradient. */
#include <math.h>

#include "core/internal.h"

/* P (T, C):  P[i, 2j] = sin(i / 10000^(2j/C)),  P[i, 2j+1] = cos(i / 10000^(2j/C)) */
void qkv_sinusoidal_table(float *P, int T, int C)
{
    for (int i = 0; i < T; i++)
        for (int c = 0; c < C; c++) {
            int two_j = c & ~1;
            double angle = (double)i / pow(10000.0, (double)two_j / (double)C);
            P[(size_t)i * C + c] = (float)((c & 1) ? cos(angle) : sin(angle));
        }
}

/* P (T, C): [sin | cos] halves, S = ceil(C/2) sines (Marian's layout: its odd-C case too) */
void qkv_sinusoidal_table_halves(float *P, int T, int C)
{
    const int S = (C + 1) / 2;
    for (int i = 0; i < T; i++)
        for (int c = 0; c < C; c++) {
            const int j = c < S ? c : c - S;
            double angle = (double)i / pow(10000.0, 2.0 * j / (double)C);
            P[(size_t)i * C + c] = (float)(c < S ? sin(angle) : cos(angle));
        }
}

void qkv_sinusoidal_table_fairseq(float *P, int T, int C)
{
    const int h = C / 2;
    const double step = log(10000.0) / (h > 1 ? h - 1 : 1);
    for (int i = 0; i < T; i++) {
        float *row = P + (size_t)i * C;
        for (int j = 0; j < h; j++) {
            /* torch: exp(arange(h).float() * -step) in float32, times the float position */
            const float w = expf((float)j * (float)-step);
            const float angle = (float)(i + 2) * w;
            row[j] = sinf(angle), row[h + j] = cosf(angle);
        }
        if (C % 2) row[C - 1] = 0.0f;
    }
}

/* x, y (B, T, C):  y[b, t] = scale x[b, t] + P[pos0 + t] */
void qkv_positional_forward(float *y, const float *x, const float *P, int B, int T, int C,
                            int pos0, float scale)
{
    #pragma omp parallel for collapse(2) if ((long)B * T * C > 32768)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const float *xt = x + ((size_t)b * T + t) * C, *pt = P + (size_t)(pos0 + t) * C;
            float *yt = y + ((size_t)b * T + t) * C;
            for (int c = 0; c < C; c++) yt[c] = xt[c] * scale + pt[c];
        }
}

void qkv_positional_backward(float *dx, float *dP, const float *dy, int B, int T, int C,
                             int pos0, float scale)
{
    if (dx)
        for (size_t e = 0; e < (size_t)B * T * C; e++) dx[e] += dy[e] * scale;
    if (dP)
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++) {
                const float *g = dy + ((size_t)b * T + t) * C;
                float *dp = dP + (size_t)(pos0 + t) * C;
                for (int c = 0; c < C; c++) dp[c] += g[c];
            }
}
