/* SPDX-License-Identifier: MIT */
/* The reversal task of qkv demo, for the tests that compare a model at one precision with the
 * same model at another (test_bf16.c, test_gemm_int8.c): a source of 3 to 8 symbols (ids 4 ..
 * V-1), the target its reverse, then <eos>. src (B, TS), valid (B), tin / tout (B, TT). */
#ifndef QKV_TEST_REVERSAL_H
#define QKV_TEST_REVERSAL_H

#include <stdint.h>

#include "qkv.h"

enum { V = 24, TS = 8, TT = TS + 1 };

/* B examples drawn from `seed`; teacher forcing's input tin starts with <bos>. */
void reversal_batch(int *src, int *valid, int *tin, int *tout, int B, uint64_t seed);
/* A d64, 2 + 2 block model (seed 3) at precision p. */
qkv_transformer *reversal_model(qkv_precision p);
/* `steps` Adam steps (lr 3e-3, clip 1) on batches of `batch` drawn from seeds 1000 + step;
 * returns the mean loss per token over the last `last` steps (0 if last is 0). */
double train_reversal(qkv_transformer *m, int steps, int batch, int last);
/* Greedy translations of n held-out sources (seed 99), `chunk` sentences per call (a few:
 * the few-rows kernel; many: the GEMM): out (n, TT), len (n); returns how many are the exact
 * reverse. */
int translate_reversal(qkv_transformer *m, int *out, int *len, int n, int chunk);
/* How many of n translations are identical. */
int same_translations(const int *out1, const int *len1, const int *out2, const int *len2, int n);
/* Decoding at precision p never reads a stale low-precision copy: a model at p (used once, so
 * that its copy exists) and a float32 one both get new random parameters through
 * qkv_transformer_params; then the second is set to p and both must translate identically
 * (the few-rows kernel and the GEMM). */
void check_copy_follows_parameters(qkv_precision p);
/* Teacher-forced logits of the n held-out examples: (n, TT, V), the caller frees. */
float *reversal_logits(qkv_transformer *m, int n);

#endif
