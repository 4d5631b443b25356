/* SPDX-License-Identifier: MIT */
/* Inverted dropout (Srivastava et al. 2014): keep each value with probability 1 - p and scale
 * by 1/(1 - p) so the expectation is unchanged and evaluation needs no rescaling. The mask is
 * a pure function of (seed, offset + i), so backward recomputes it instead of storing it;
 * the decision selects bits instead of taking a branch (ops/cpu/dropout_mask.h). */
#include <string.h>

#include "core/internal.h"
#include "ops/cpu/dropout_mask.h"

void qkv_dropout_forward(float *y, const float *x, size_t n, float p, uint64_t seed,
                         uint64_t offset)
{
    if (p <= 0.0f) {
        if (y != x) memmove(y, x, n * sizeof *y);
        return;
    }
    const dropout_rule d = dropout_rule_of(p, seed);
    #pragma omp parallel for if (n > 16384)
    for (size_t i = 0; i < n; i++) y[i] = dropout_apply(&d, offset + i, x[i]);
}

void qkv_dropout_backward(float *dx, const float *dy, size_t n, float p, uint64_t seed,
                          uint64_t offset)
{
    if (p <= 0.0f) {
        #pragma omp parallel for simd if (n > 65536)
        for (size_t i = 0; i < n; i++) dx[i] += dy[i];
        return;
    }
    const dropout_rule d = dropout_rule_of(p, seed);
    #pragma omp parallel for if (n > 16384)
    for (size_t i = 0; i < n; i++) dx[i] += dropout_apply(&d, offset + i, dy[i]);
}
