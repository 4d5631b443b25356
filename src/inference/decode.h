/* SPDX-License-Identifier: MIT */
/* Translation's searches over the decoder interface (models/decoder.h), shared by the
 * translator, the batch decoder and the public qkv_transformer_greedy / _beam. Not part of
 * the API. */
#ifndef QKV_DECODE_H
#define QKV_DECODE_H

#include "inference/search.h"

/* Greedy decoding of B sentences in lockstep: the encoder once, then one decoder step per
 * position for every sentence, each taking the first largest of its filtered logits, until
 * each has produced its <eos> or max_lens[b] tokens (max_lens NULL: max_len for all, <= the
 * model's max_len). out (B, max_len) receives the tokens without <eos>, out_len (B) their
 * counts. */
qkv_status greedy_decode(qkv_transformer *m, const int *src, const int *src_valid, int B,
                         int src_len, int max_len, const int *max_lens,
                         const decoding_rules *rules, int *out, int *out_len, qkv_error *err);

/* qkv_transformer_beam with the rules given (NULL: the model's own). */
qkv_status beam_decode(qkv_transformer *m, const int *src, const int *src_valid, int B,
                       int src_len, const qkv_beam_options *o, const decoding_rules *rules,
                       qkv_beam_results *results, qkv_error *err);

/* The options qkv_translate accepts (QKV_ERR_ARG naming what is wrong); batched: batch >= 1 is
 * asked too (a batch decoder has no batches of its own). */
qkv_status translate_check_options(const qkv_translate_options *o, int batched,
                                   qkv_error *err);

/* Whether qkv_translate decodes with o greedily: beam search with K = 1 is greedy decoding
 * unless its rule may carry on past an <eos> for a longer hypothesis. */
int translate_greedy(const qkv_translate_options *o);

/* A translation's length limit for a source of n tokens: floor(o->max_len_a * n +
 * o->max_len_b), at least 1, at most cap (a = b = 0: cap), as qkv_translate allows. */
int translate_length_limit(const qkv_translate_options *o, int n, int cap);

/* The sources (n, each one sentence: NULL or a line break inside is an error naming it) as
 * the model's tokens, one sentence per source, as qkv_translate reads them; on failure *tokens
 * is empty (qkv_sentences_free is still fine). */
qkv_status source_tokens(qkv_sentences *tokens, const qkv_tokenizer *tok,
                         const char *const *sources, int n, qkv_error *err);

/* Sources first .. first + B - 1 of src as padded rows of ids (B, *Ts) for the encoder, each
 * [<bos>] + its tokens + <eos> cut to the model's max_len (losing <eos>, as d2l's
 * truncate_pad cuts it), and valid (B) their lengths. A source's own tokens are text: one
 * spelling a reserved token (<pad>, <bos>, <eos>) becomes <unk>. ids holds B * max_len. */
void source_rows(int *ids, int *valid, int *Ts, const qkv_tokenizer *tok,
                 const qkv_sentences *src, int first, int B, int max_len);

#endif
