/* SPDX-License-Identifier: MIT */
/* Beam search over any step function, so that its rules can be tested on scripted logits
 * (tests/unit/test_beam.c against tests/parity/make_beam_reference.py). Not part of the API. */
#ifndef QKV_BEAM_H
#define QKV_BEAM_H

#include "inference/search.h"

/* Logits (rows, V) of position t for rows whose input tokens are tok (rows), whose sources
 * are row_src (rows) and whose tokens so far are hist (rows, T: positions 0 .. t-1, <bos> not
 * included); slot (rows, T) is where each position's key and value lie in a cache. NULL
 * ends the search (the step failed and keeps its own error). */
typedef const float *(*beam_step_fn)(void *ctx, int rows, const int *row_src, const int *tok,
                                     const int *hist, const int *slot, int T, int t);

/* qkv_transformer_beam for B sentences over a vocabulary of V, with step in place of the
 * decoder; o->max_len at most T_cap; the rules as a model's (inference/search.h: start token,
 * banned and forced tokens, forced_eos). */
qkv_status beam_search_steps(beam_step_fn step, void *ctx, int B, int V, int T_cap,
                             const decoding_rules *rules, const qkv_beam_options *o,
                             qkv_beam_results *results, qkv_error *err);

#endif
