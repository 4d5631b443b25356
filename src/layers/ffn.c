/* Position-wise feed-forward network (paper, eq. 2): FFN(x) = act(x W_1^T + b_1) W_2^T + b_2,
 * the same two-layer MLP applied to every position independently. */
#include "core/internal.h"
#include "layers/layers.h"

/* x, y (N, C); h_pre, h (N, F) */
void ffn_forward(const backend *be, float *y, float *h_pre, float *h, const float *x,
                 const float *W1, const float *b1, const float *W2, const float *b2, int N, int C,
                 int F, qkv_activation act)
{
    op_linear_forward(be, h_pre, x, W1, b1, N, C, F);
    be->ops->activation_forward(act, h, h_pre, (size_t)N * F);
    op_linear_forward(be, y, h, W2, b2, N, F, C);
}

/* scratch (N, F) holds dh, then d(h_pre). */
void ffn_backward(const backend *be, float *dx, float *dW1, float *db1, float *dW2, float *db2,
                  const float *dy, const float *h_pre, const float *h, const float *x,
                  const float *W1, const float *W2, int N, int C, int F, qkv_activation act,
                  float *scratch)
{
    float *dh = scratch;
    be->ops->zero(dh, (size_t)N * F);
    op_linear_backward(be, dh, dW2, db2, dy, h, W2, N, F, C);
    be->ops->activation_backward(act, dh, h_pre, (size_t)N * F); /* d(h_pre), in place */
    op_linear_backward(be, dx, dW1, db1, dh, x, W1, N, C, F);
}

void qkv_ffn_forward(float *y, float *h_pre, float *h, const float *x, const float *W1,
                     const float *b1, const float *W2, const float *b2, int N, int C, int F,
                     qkv_activation act)
{
    const backend be = backend_cpu();
    ffn_forward(&be, y, h_pre, h, x, W1, b1, W2, b2, N, C, F, act);
}

void qkv_ffn_backward(float *dx, float *dW1, float *db1, float *dW2, float *db2,
                      const float *dy, const float *h_pre, const float *h, const float *x,
                      const float *W1, const float *W2, int N, int C, int F, qkv_activation act,
                      float *scratch)
{
    const backend be = backend_cpu();
    ffn_backward(&be, dx, dW1, db1, dW2, db2, dy, h_pre, h, x, W1, W2, N, C, F, act, scratch);
}
