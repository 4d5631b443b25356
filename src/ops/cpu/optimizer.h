/* SPDX-License-Identifier: MIT */
/* The optimizer's kernels: Adam's update and the sum of squares of gradient clipping
 * (training/adam.c; the backend tables' adam_update and sum_squares). Private to the
 * library. */
#ifndef QKV_OPS_CPU_OPTIMIZER_H
#define QKV_OPS_CPU_OPTIMIZER_H

#include <stddef.h>

/* One Adam step's constants: c1 = 1 / (1 - beta1^t), c2 = 1 / (1 - beta2^t) at step t. */
typedef struct {
    float beta1, beta2, eps, weight_decay, lr, c1, c2;
} adam_hyper;

/* m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
 * p -= lr (m c1 / (sqrt(v c2) + eps) + wd p), over n values. */
void adam_update_f32(float *p, const float *g, float *m, float *v, size_t n, const adam_hyper *h);

/* sum x_i^2, in double. */
double sum_squares_f32(const float *x, size_t n);

#endif
