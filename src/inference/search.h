/* SPDX-License-Identifier: MIT */
/* What every search (greedy, beam, sampling, the slots of continuous batching) applies between
 * the decoder's logits and its choice, in one place (CTranslate2's logits processors): the
 * token decoding starts from, tokens a model must never produce, tokens forced at the first
 * positions (a target-language token), and Marian's forced <eos>. A search builds its rules
 * with decoding_rules_of and asks them; it never reads a model's configuration itself. Not part
 * of the API. */
#ifndef QKV_SEARCH_H
#define QKV_SEARCH_H

#include "core/internal.h"
#include "models/decoder.h"

typedef struct {
    int start;         /* the encoder-decoder's first input token (decoder_info.start) */
    int suppress_pad;  /* <pad> is never chosen */
    int text_only;     /* no reserved token (<unk> <pad> <bos> <eos>) is chosen: a model of raw
                        * text never saw them as targets, but gives them a little probability */
    int forced_eos;    /* beam search: a hypothesis cut at its limit is followed by an <eos> of
                        * probability 1, counted in its length (Marian's) */
    const int *prefix; /* (n_prefix) the tokens of the first output positions, forced: each has
                        * probability 1 there (a target-language token) */
    int n_prefix;
} decoding_rules;

/* The model's own rules (start, suppress_pad, forced_eos); nothing forced, text_only 0. */
decoding_rules decoding_rules_of(const decoder_info *info);

/* Whether token v may never be chosen. */
static inline int rules_banned(const decoding_rules *r, int v, int V)
{
    return (r->suppress_pad && v == QKV_PAD) ||
           (r->text_only && v < QKV_N_RESERVED && v < V - 1);
}

/* The banned tokens as a mask of ids below 32 (ops/cpu/best.h): every one is a reserved id. */
static inline uint32_t rules_banned_mask(const decoding_rules *r, int V)
{
    uint32_t m = 0;
    for (int v = 0; v < QKV_N_RESERVED && v < V; v++)
        if (rules_banned(r, v, V)) m |= 1u << v;
    return m;
}

/* The token forced at output position t (tokens produced before it), or -1. */
static inline int rules_forced(const decoding_rules *r, int t)
{
    return t < r->n_prefix ? r->prefix[t] : -1;
}

/* z (V), the logits of output position t, with the rules applied: a banned token, and at a
 * forced position every token but the forced one, get -inf. For a choice from the logits
 * (argmax, sampling): the softmax of what is left is the distribution renormalised. */
void rules_filter(const decoding_rules *r, float *z, int V, int t);

/* The first largest of z (V): greedy decoding's choice (ties to the lower id). */
int argmax(const float *z, int V);

/* Work space of one choice by sampling (V each). */
typedef struct {
    float *probs;
    int *order;
} sampler;

/* The token for output position t from logits z (V, filtered in place): the argmax at
 * temperature 0 (no draw), else a draw u = qkv_random_uniform(seed, draw) from s's
 * distribution (qkv_sampling_probs, qkv_sample_token). */
int choose_token(const decoding_rules *r, const qkv_sampling *s, uint64_t seed, uint64_t draw,
                 float *z, int V, int t, sampler *work);

#endif
