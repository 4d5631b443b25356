/* SPDX-License-Identifier: MIT */
/* The residual sublayer connection of every block (sublayer.c), in its three uses. Private to
 * the library. */
#ifndef QKV_SUBLAYER_H
#define QKV_SUBLAYER_H

#include "models/model.h"

typedef struct {
    const stack_dims *d;
    size_t N;         /* rows: B * T */
    qkv_dropout drop; /* of the residual: rate (0 in evaluation), this sublayer's stream */
    float *scratch;
} sublayer_ctx;

/* Every dropout site of a step draws from its own stream, named by (stack, layer, site). */
uint64_t dropout_site_seed(uint64_t step_seed, int stack, int layer, int site);

/* The sublayer's input: x itself (post-norm) or LayerNorm(x) (pre-norm). */
const float *sublayer_in(const backend *be, const sublayer_ctx *k, sublayer_acts *a,
                         const float *x, const qkv_layernorm_weights *n);
/* out = LayerNorm(x + dropout(s)) (post-norm) or x + dropout(s) (pre-norm). */
void sublayer_out(const backend *be, const sublayer_ctx *k, sublayer_acts *a, const float *x,
                  const qkv_layernorm_weights *n);

/* From dh = d(out): dh becomes the residual path's share of d(x), ds = d(sublayer output),
 * and din is zeroed for the sublayer's backward to accumulate d(its input) into. */
void sublayer_out_backward(const backend *be, const sublayer_ctx *k, const sublayer_acts *a,
                           float *dh, float *ds, float *din, const qkv_layernorm_weights *n,
                           qkv_layernorm_weights *dn);
/* dh += d(input) through din directly (post-norm) or through the LayerNorm (pre-norm). */
void sublayer_in_backward(const backend *be, const sublayer_ctx *k, const sublayer_acts *a,
                          float *dh, const float *din, const float *x,
                          const qkv_layernorm_weights *n, qkv_layernorm_weights *dn);

/* One decoding step over st->x (B, C): the sublayer reads what step_in returns and leaves its
 * output in st->s; step_out folds it back into st->x. */
const float *sublayer_step_in(const backend *be, const stack_dims *d, decode_state *st, int B,
                              const qkv_layernorm_weights *n);
void sublayer_step_out(const backend *be, const stack_dims *d, decode_state *st, int B,
                       const qkv_layernorm_weights *n);

#endif
