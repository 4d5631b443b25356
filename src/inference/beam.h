/* SPDX-License-Identifier: MIT */
/* Beam search as one object per sentence, so that a search runs wherever its rows are stepped:
 * the lockstep search of a batch (beam_decode, beam_search_steps) and the slots of continuous
 * batching (slots.h), beside greedy and sampled rows. A sentence's search owns its live
 * hypotheses (each in one of its K cache rows), their histories and ancestry, and its finished
 * list; each step it lists its live rows, and the logits of those rows advance it. Over any
 * step function too, so that its rules can be tested on scripted logits (tests/unit/test_beam.c
 * against tests/parity/make_beam_reference.py). Not part of the API. */
#ifndef QKV_BEAM_H
#define QKV_BEAM_H

#include "inference/search.h"

/* One step's rows as a search lists them: decoder_rows' arrays with room for cap rows, an
 * ancestry table of ld positions a row, and (when hist is not NULL) each row's tokens so far. */
typedef struct {
    int n, cap, ld;
    int *row, *pos, *src, *tok; /* (cap) */
    int *ancestry;              /* (cap, ld) */
    int *hist;                  /* (cap, ld) or NULL */
} step_rows;

/* Room for cap rows of ld positions (hist: whether histories are listed too). */
qkv_status step_rows_init(step_rows *r, int cap, int ld, int hist, qkv_error *err);
void step_rows_free(step_rows *r);

typedef struct beam_sentence beam_sentence;

/* A sentence's search with o's beam, n_best, alpha and stop, its own limit of max_len tokens
 * (<= o->max_len, the length of its histories), over a vocabulary of V with the rules given
 * (copied; a forced prefix is kept by the caller). Its hypotheses live in cache rows rows[0 ..
 * o->beam) (copied) and read source slot src. It starts with one live hypothesis: the start
 * token at position 0. */
qkv_status beam_sentence_create(beam_sentence **out, const qkv_beam_options *o, int max_len,
                                int V, const decoding_rules *rules, const int *rows, int src,
                                qkv_error *err);
void beam_sentence_free(beam_sentence *b);
/* Live hypotheses: the rows its next step has; 0 once it is done. */
int beam_sentence_live(const beam_sentence *b);
/* Appends its live rows to r (rank order) and returns how many. */
int beam_sentence_list(const beam_sentence *b, step_rows *r);
/* The step's logits of the rows it listed last (live, V), and their log normalisers lse (NULL:
 * computed here): ranks their extensions, finishes and keeps hypotheses, moves on a position. */
void beam_sentence_advance(beam_sentence *b, const float *logits, const double *lse);
/* The same from each listed row's beam_sentence_best best tokens (ids and their logits,
 * (live, k) each; ops/cpu/best.h) and log normaliser (live), all an extension can be. */
void beam_sentence_advance_best(beam_sentence *b, const int *ids, const float *vals, int k,
                                const double *lse);
/* How many best tokens of each row a step needs (2 K, at most V), and which are banned. */
int beam_sentence_best(const beam_sentence *b, uint32_t *banned);
/* Finished hypotheses kept, best first (at most n_best); hypothesis k's tokens (without <eos>)
 * with their count, score log P / lp and log P. */
int beam_sentence_found(const beam_sentence *b);
const int *beam_sentence_hypothesis(const beam_sentence *b, int k, int *len, double *score,
                                    double *logprob);

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

/* The options a search of B sentences accepts, T_cap the longest length possible. */
qkv_status beam_check_options(const qkv_beam_options *o, int B, int T_cap, qkv_error *err);

#endif
