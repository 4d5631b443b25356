/* Position-wise feed-forward network (paper, eq. 2): FFN(x) = act(x W_1^T + b_1) W_2^T + b_2,
 * the same two-layer MLP applied to every position independently. */
#include <string.h>

#include "core/internal.h"
#include "layers/linear_mode.h"
#include "kernels/fast_exp.h"

/* x, y (N, C); h_pre, h (N, F) */
void ffn_forward(const linear_mode *lm, float *y, float *h_pre, float *h, const float *x,
                 const float *W1, const float *b1, const float *W2, const float *b2, int N,
                 int C, int F, qkv_activation act)
{
    linear_forward(lm, h_pre, x, W1, b1, N, C, F);
    if (act == QKV_ACT_GELU)
        qkv_gelu_forward(h, h_pre, (size_t)N * F);
    else
        qkv_relu_forward(h, h_pre, (size_t)N * F);
    linear_forward(lm, y, h, W2, b2, N, F, C);
}

/* scratch (N, F) holds dh, then d(h_pre). */
void ffn_backward(const linear_mode *lm, float *dx, float *dW1, float *db1, float *dW2,
                  float *db2, const float *dy, const float *h_pre, const float *h,
                  const float *x, const float *W1, const float *W2, int N, int C, int F,
                  qkv_activation act, float *scratch)
{
    float *dh = scratch;
    memset(dh, 0, (size_t)N * F * sizeof *dh);
    linear_backward(lm, dh, dW2, db2, dy, h, W2, N, F, C);
    /* d(h_pre) = dh * act'(h_pre), in place */
    const size_t NF = (size_t)N * F;
    if (act == QKV_ACT_GELU) {
        #pragma omp parallel for if (NF > 32768)
        for (size_t e = 0; e < NF; e += 1024)
            gelu_grad_block(dh + e, dh + e, h_pre + e, NF - e < 1024 ? NF - e : 1024);
    } else {
        #pragma omp parallel for simd if (NF > 32768)
        for (size_t e = 0; e < NF; e++) dh[e] = h_pre[e] > 0.0f ? dh[e] : 0.0f;
    }
    linear_backward(lm, dx, dW1, db1, dh, x, W1, N, C, F);
}

void qkv_ffn_forward(float *y, float *h_pre, float *h, const float *x, const float *W1,
                     const float *b1, const float *W2, const float *b2, int N, int C, int F,
                     qkv_activation act)
{
    ffn_forward(NULL, y, h_pre, h, x, W1, b1, W2, b2, N, C, F, act);
}

void qkv_ffn_backward(float *dx, float *dW1, float *db1, float *dW2, float *db2,
                      const float *dy, const float *h_pre, const float *h, const float *x,
                      const float *W1, const float *W2, int N, int C, int F, qkv_activation act,
                      float *scratch)
{
    ffn_backward(NULL, dx, dW1, db1, dW2, db2, dy, h_pre, h, x, W1, W2, N, C, F, act, scratch);
}
