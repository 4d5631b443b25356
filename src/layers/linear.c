/* Linear layer: y = x W^T + b (the projections W_q, W_k, W_v, W_o and the FFN's two layers). */
#include "core/internal.h"

/* x (N, in), W (out, in), b (out) -> y (N, out) */
void qkv_linear_forward(float *y, const float *x, const float *W, const float *b, int N, int in,
                        int out)
{
    gemm(0, 1, N, out, in, 1.0f, x, in, W, in, 0.0f, y, out);
    if (!b) return;
    #pragma omp parallel for if ((long)N * out > 65536)
    for (int i = 0; i < N; i++)
        for (int o = 0; o < out; o++) y[(size_t)i * out + o] += b[o];
}

/* dx (N, in) += dy W;  dW (out, in) += dy^T x;  db (out) += sum_i dy[i] */
void qkv_linear_backward(float *dx, float *dW, float *db, const float *dy, const float *x,
                         const float *W, int N, int in, int out)
{
    if (dx) gemm(0, 0, N, in, out, 1.0f, dy, out, W, in, 1.0f, dx, in);
    if (dW) gemm(1, 0, out, in, N, 1.0f, dy, out, x, in, 1.0f, dW, in);
    if (db) {
        /* Column sums, walking dy row by row (contiguous) over one block of columns per
         * thread: a strided walk down each column would miss the cache on every element. */
        const int block = 256;
        #pragma omp parallel for if ((long)N * out > 65536)
        for (int o0 = 0; o0 < out; o0 += block) {
            const int o1 = o0 + block < out ? o0 + block : out;
            for (int i = 0; i < N; i++) {
                const float *row = dy + (size_t)i * out;
                for (int o = o0; o < o1; o++) db[o] += row[o];
            }
        }
    }
}
