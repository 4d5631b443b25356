/* SPDX-License-Identifier: MIT */
/* Adam (Kingma & Ba 2015, algorithm 1) with bias correction, and decoupled weight decay
 * (Loshchilov & Hutter 2019) when weight_decay > 0; global-norm gradient clipping. */
#include <math.h>
#include <stdlib.h>

#include "core/internal.h"
#include "ops/cpu/optimizer.h"
#include "training/training.h"

qkv_status qkv_adam_init(qkv_adam *opt, size_t n, float beta1, float beta2, float eps,
                         float weight_decay, qkv_error *err)
{
    *opt = (qkv_adam){beta1, beta2, eps, weight_decay, 0, n, NULL, NULL};
    if (!(beta1 >= 0.0f && beta1 < 1.0f) || !(beta2 >= 0.0f && beta2 < 1.0f))
        return qkv_fail(err, QKV_ERR_ARG, "Adam's betas must be in [0, 1) (got %g and %g)",
                        (double)beta1, (double)beta2);
    if (!(eps > 0.0f && eps <= QKV_MAX_ADAM_EPS))
        return qkv_fail(err, QKV_ERR_ARG, "Adam's epsilon must be in (0, %g] (got %g)",
                        (double)QKV_MAX_ADAM_EPS, (double)eps);
    if (!(weight_decay >= 0.0f && weight_decay <= QKV_MAX_WEIGHT_DECAY))
        return qkv_fail(err, QKV_ERR_ARG, "the weight decay must be in [0, %g] (got %g)",
                        (double)QKV_MAX_WEIGHT_DECAY, (double)weight_decay);
    opt->m = calloc(n ? n : 1, sizeof *opt->m);
    opt->v = calloc(n ? n : 1, sizeof *opt->v);
    if (!opt->m || !opt->v) {
        qkv_adam_free(opt);
        return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for Adam's moments (%zu)", n);
    }
    return QKV_OK;
}

void qkv_adam_free(qkv_adam *opt)
{
    free(opt->m), free(opt->v);
    opt->m = opt->v = NULL;
}

/* m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
 * p -= lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)  [+ lr wd p]
 * (ops/cpu/optimizer.c: the one loop, which the backend tables' adam_update also runs) */
void qkv_adam_update(qkv_adam *opt, float *params, const float *grads, float lr)
{
    const adam_hyper h = adam_step_hyper(opt, lr);
    adam_update_f32(params, grads, opt->m, opt->v, opt->n, &h);
}

adam_hyper adam_step_hyper(qkv_adam *opt, float lr)
{
    opt->step++;
    const float b1 = opt->beta1, b2 = opt->beta2;
    const adam_hyper h = {b1, b2, opt->eps, opt->weight_decay, lr,
                          1.0f / (1.0f - powf(b1, (float)opt->step)),
                          1.0f / (1.0f - powf(b2, (float)opt->step))};
    return h;
}

double qkv_clip_grad_norm(float *grads, size_t n, double max_norm)
{
    double norm = sqrt(sum_squares_f32(grads, n));
    if (!isfinite(norm) || max_norm <= 0.0 || norm <= max_norm) return norm;
    float scale = (float)(max_norm / norm);
    #pragma omp parallel for simd if (n > 65536)
    for (size_t i = 0; i < n; i++) grads[i] *= scale;
    return norm;
}
