/* SPDX-License-Identifier: MIT */
/* Decoding with the encoder-decoder: the encoder once, then one decoder step per position
 * over the key-value cache (model.h's decode_state and stack_step), shared by greedy decoding
 * and beam search. Not part of the API. */
#ifndef QKV_DECODE_H
#define QKV_DECODE_H

#include "models/transformer_internal.h"

/* Runs the encoder on src (n_src, Ts) and caches every decoder layer's cross-attention keys
 * and values of its output; allocates the state for cap rows of up to T positions. */
qkv_status decode_begin(decode_state *st, qkv_transformer *m, const int *src,
                        const int *src_valid, int n_src, int Ts, int cap, int T,
                        qkv_error *err);
void decode_end(decode_state *st);

/* Logits (B, tgt_vocab) of position t for the rows' input tokens tok (B) in st->logits. */
void decode_step(qkv_transformer *m, decode_state *st, const int *tok, int t,
                 const int *src_valid);

/* qkv_transformer_greedy with each sentence's own limit, max_lens (B) in 1 .. max_len, or
 * NULL: max_len for all. */
qkv_status greedy_decode(qkv_transformer *m, const int *src, const int *src_valid, int B,
                         int src_len, int max_len, const int *max_lens, int *out, int *out_len,
                         qkv_error *err);

/* A translation's length limit for a source of n tokens: floor(o->max_len_a * n +
 * o->max_len_b), at least 1, at most cap (a = b = 0: cap), as qkv_translate allows. */
int translate_length_limit(const qkv_translate_options *o, int n, int cap);

/* The sources (n, each one sentence: NULL or a line break inside is an error naming it) as
 * words, one sentence per source, as qkv_translate reads them; on failure *words is empty
 * (qkv_sentences_free is still fine). */
qkv_status source_words(qkv_sentences *words, const qkv_tokenizer *tok,
                        const char *const *sources, int n, qkv_error *err);

#endif
