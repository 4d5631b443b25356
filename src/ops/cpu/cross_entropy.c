/* SPDX-License-Identifier: MIT */
/* Softmax cross-entropy from logits, with padding rows excluded (d2l's MaskedSoftmaxCELoss)
 * and optional label smoothing (paper, section 5.4). Works from logsumexp, so no separate
 * log-softmax buffer is materialised. A row is V logits (40 KB for V = 10,000: it stays in
 * L2 between the passes over it); its loops are vectorised, the exponential included
 * (ops/cpu/fast_exp.h). */
#include <math.h>
#include <string.h>

#include "core/internal.h"
#include "ops/cpu/fast_exp.h"
#include "ops/cpu/fused.h"

/* Logits at which the row loop is worth threads. */
#define PARALLEL_MIN 32768

/* Rows whose bias gradients cross_entropy_fused sums together before adding them to db. */
enum { CE_CHUNK = 64 };

/* Checks every counted target; returns their number, -1 (err filled) on one outside [0, V). */
static int count_targets(const int *targets, int N, int V, int ignore_index, qkv_error *err)
{
    int count = 0;
    for (int i = 0; i < N; i++) {
        if (targets[i] == ignore_index) continue;
        if (targets[i] < 0 || targets[i] >= V) {
            qkv_fail(err, QKV_ERR_ARG, "cross-entropy: target id %d at row %d is outside the "
                     "vocabulary [0, %d)", targets[i], i, V);
            return -1;
        }
        count++;
    }
    return count;
}

/* -log q-weighted probability of a row from its lse:  -log p_y = lse - z_y, and the smoothing
 * term is the mean over k of -log p_k = lse - mean_k z_k. */
static float row_loss(float lse, float z_y, float zsum, int V, float label_smoothing)
{
    float nll = lse - z_y;
    if (label_smoothing == 0.0f) return nll;
    return (1.0f - label_smoothing) * nll + label_smoothing * (lse - zsum / (float)V);
}

/* logits (N, V), targets (N) -> loss (N), lse (N); returns the number of counted rows. */
int qkv_cross_entropy_forward(float *loss, float *lse, double *sum, const float *logits,
                              const int *targets, int N, int V, int ignore_index,
                              float label_smoothing, qkv_error *err)
{
    int count = count_targets(targets, N, V, ignore_index, err);
    if (count < 0) return -1;
    double total = 0.0;
    #pragma omp parallel for reduction(+ : total) if ((long)N * V > PARALLEL_MIN)
    for (int i = 0; i < N; i++) {
        const float *z = logits + (size_t)i * V;
        float mx = vec_max(z, V);
        float l = mx + logf(vec_sum_exp(NULL, z, V, mx)); /* log sum_k exp z_k */
        lse[i] = l;
        if (targets[i] == ignore_index) {
            loss[i] = 0.0f;
            continue;
        }
        float zsum = label_smoothing != 0.0f ? vec_sum(z, V) : 0.0f;
        loss[i] = row_loss(l, z[targets[i]], zsum, V, label_smoothing);
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
    const float uniform = scale * label_smoothing / (float)V;
    #pragma omp parallel for if ((long)N * V > PARALLEL_MIN)
    for (int i = 0; i < N; i++) {
        const float *z = logits + (size_t)i * V;
        float *dz = dlogits + (size_t)i * V;
        if (targets[i] == ignore_index) {
            for (int k = 0; k < V; k++) dz[k] = 0.0f;
            continue;
        }
        vec_sum_exp(dz, z, V, lse[i]); /* softmax_k = e^(z_k - lse) */
        #pragma omp simd
        for (int k = 0; k < V; k++) dz[k] = scale * dz[k] - uniform;
        dz[targets[i]] -= scale * (1.0f - label_smoothing);
    }
}

size_t cross_entropy_fused_scratch_floats(int N, int V)
{
    return (size_t)((N + CE_CHUNK - 1) / CE_CHUNK) * V;
}

/* Both at once, row by row: max, then e_k = exp(z_k - max) written over z_k while summing,
 * then the gradient scale (e_k / sum_k e_k - q_k) over e_k: one exponential per logit, and
 * the row read from L2 rather than memory after the first pass. The bias gradient, the column
 * sums of dlogits, is taken from the same rows while they are in L2: each chunk of CE_CHUNK
 * rows sums into its own row of scratch, and the chunks are added in order at the end, so
 * the result does not depend on the thread count. */
int cross_entropy_fused(float *loss, float *lse, double *sum, float *logits, float *db,
                        const int *targets, int N, int V, int ignore_index,
                        float label_smoothing, float scale, float *scratch, qkv_error *err)
{
    int count = count_targets(targets, N, V, ignore_index, err);
    if (count < 0) return -1;
    if (scale <= 0.0f) scale = 1.0f / (float)(count ? count : 1);
    const float uniform = scale * label_smoothing / (float)V;
    const int chunks = (N + CE_CHUNK - 1) / CE_CHUNK;
    double total = 0.0;
    #pragma omp parallel for schedule(static) reduction(+ : total) if ((long)N * V > PARALLEL_MIN)
    for (int ch = 0; ch < chunks; ch++) {
        float *part = db ? scratch + (size_t)ch * V : NULL; /* this chunk's column sums */
        if (part) memset(part, 0, (size_t)V * sizeof *part);
        const int i1 = (ch + 1) * CE_CHUNK < N ? (ch + 1) * CE_CHUNK : N;
        for (int i = ch * CE_CHUNK; i < i1; i++) {
            float *z = logits + (size_t)i * V;
            const int y = targets[i];
            if (y == ignore_index) {
                lse[i] = 0.0f, loss[i] = 0.0f;
                memset(z, 0, (size_t)V * sizeof *z);
                continue;
            }
            const float mx = vec_max(z, V), z_y = z[y];
            const float zsum = label_smoothing != 0.0f ? vec_sum(z, V) : 0.0f;
            const float s = vec_sum_exp(z, z, V, mx); /* z_k <- e_k = e^(z_k - mx) */
            lse[i] = mx + logf(s);
            loss[i] = row_loss(lse[i], z_y, zsum, V, label_smoothing);
            total += loss[i];
            const float a = scale / s; /* softmax_k = e_k / s */
            #pragma omp simd
            for (int k = 0; k < V; k++) z[k] = a * z[k] - uniform;
            z[y] -= scale * (1.0f - label_smoothing);
            if (part) {
                #pragma omp simd
                for (int k = 0; k < V; k++) part[k] += z[k];
            }
        }
    }
    if (db) {
        #pragma omp parallel for if ((long)chunks * V > PARALLEL_MIN)
        for (int k0 = 0; k0 < V; k0 += 1024) {
            const int k1 = k0 + 1024 < V ? k0 + 1024 : V;
            for (int ch = 0; ch < chunks; ch++) {
                const float *part = scratch + (size_t)ch * V;
                #pragma omp simd
                for (int k = k0; k < k1; k++) db[k] += part[k];
            }
        }
    }
    if (sum) *sum = total;
    return count;
}
