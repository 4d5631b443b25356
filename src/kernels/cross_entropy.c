/* Softmax cross-entropy from logits, with padding rows excluded (d2l's MaskedSoftmaxCELoss)
 * and optional label smoothing (paper, section 5.4). Works from logsumexp, so no separate
 * log-softmax buffer is materialised. */
#include <math.h>

#include "core/internal.h"

/* logits (N, V), targets (N) -> loss (N), lse (N); returns the number of counted rows. */
int qkv_cross_entropy_forward(float *loss, float *lse, double *sum, const float *logits,
                              const int *targets, int N, int V, int ignore_index,
                              float label_smoothing, qkv_error *err)
{
    for (int i = 0; i < N; i++)
        if (targets[i] != ignore_index && (targets[i] < 0 || targets[i] >= V)) {
            qkv_fail(err, QKV_ERR_ARG, "cross-entropy: target id %d at row %d is outside the "
                     "vocabulary [0, %d)", targets[i], i, V);
            return -1;
        }
    int count = 0;
    double total = 0.0;
    #pragma omp parallel for reduction(+ : count, total) if ((long)N * V > 32768)
    for (int i = 0; i < N; i++) {
        const float *z = logits + (size_t)i * V;
        float mx = -INFINITY, s = 0.0f, zsum = 0.0f;
        for (int k = 0; k < V; k++) mx = z[k] > mx ? z[k] : mx;
        for (int k = 0; k < V; k++) {
            s += expf(z[k] - mx);
            zsum += z[k];
        }
        float l = mx + logf(s); /* log sum_k exp z_k */
        lse[i] = l;
        if (targets[i] == ignore_index) {
            loss[i] = 0.0f;
            continue;
        }
        /* -log p_y = lse - z_y;  the smoothing term is the mean over k of -log p_k. */
        float nll = l - z[targets[i]];
        float smooth = l - zsum / (float)V;
        loss[i] = (1.0f - label_smoothing) * nll + label_smoothing * smooth;
        count += 1;
        total += loss[i];
    }
    if (sum) *sum = total;
    return count;
}

/* dlogits = scale (softmax(z) - q), q = (1 - eps) onehot(y) + eps / V */
void qkv_cross_entropy_backward(float *dlogits, const float *logits, const float *lse,
                                const int *targets, int N, int V, int ignore_index,
                                float label_smoothing, float scale)
{
    const float uniform = label_smoothing / (float)V;
    #pragma omp parallel for if ((long)N * V > 32768)
    for (int i = 0; i < N; i++) {
        const float *z = logits + (size_t)i * V;
        float *dz = dlogits + (size_t)i * V;
        if (targets[i] == ignore_index) {
            for (int k = 0; k < V; k++) dz[k] = 0.0f;
            continue;
        }
        for (int k = 0; k < V; k++) dz[k] = scale * (expf(z[k] - lse[i]) - uniform);
        dz[targets[i]] -= scale * (1.0f - label_smoothing);
    }
}
