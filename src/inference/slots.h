/* SPDX-License-Identifier: MIT */
/* Continuous batching (the scheduling of Orca, Yu et al. 2022, and of llama.cpp's server
 * slots), for translation and generation alike: a fixed set of slots, each a cache row of the
 * decoder (and, for an encoder-decoder, a source slot). A sequence joins a free slot between
 * two steps (a translation's source through the encoder, a prompt in one prefill), every step
 * advances all running slots by one token together, each at its own position, and a slot is
 * free again once its owner takes what it produced. The decoder's weights are read once per
 * step for all of them, which is where batching pays. Each slot's tokens are those its search
 * alone would give (greedy decoding or sampling, with the same rules): every row attends only
 * to its own cache row and source, so only the linear layers' float rounding can differ (a
 * step's rows may take a GEMM instead of matrix-vector products). Not part of the API. */
#ifndef QKV_SLOTS_H
#define QKV_SLOTS_H

#include "inference/beam.h"

typedef struct slots slots;

/* SLOT_HELD: a cache row that a beam search of another slot holds. */
typedef enum { SLOT_FREE, SLOT_RUNNING, SLOT_DONE, SLOT_HELD } slot_state;

/* What a slot produces and how it chooses. */
typedef struct {
    int tokens;            /* tokens to produce, at most (>= 1) */
    int stop_at_eos;       /* translation: an <eos> ends it (and is not produced) */
    qkv_sampling sampling; /* temperature 0: the argmax (greedy decoding) */
    uint64_t seed;         /* draw i: qkv_random_uniform(seed, i) */
    decoding_rules rules;
    /* a language model: when the row is full, go on from the last half of the text (one
     * prefill); otherwise a full row ends the slot */
    int restart;
    /* beam.beam >= 1: a translation by beam search (beam.max_len and max_lens are not read:
     * tokens is its limit); its K hypotheses hold K slots' cache rows, its own and K - 1 free
     * ones, while it runs. 0: greedy decoding or sampling. */
    qkv_beam_options beam;
} slot_goal;

/* n slots over d, which must hold n rows (and n sources for an encoder-decoder); the slots
 * use d from now on (one thread at a time for both) and free it with themselves. */
qkv_status slots_create(slots **out, decoder *d, int n, qkv_error *err);
void slots_free(slots *s);
/* Prompt tokens a step takes from a prompt that joins a running batch (0: one pass always,
 * the default). */
void slots_set_prefill_chunk(slots *s, int tokens);
int slots_count(const slots *s);
/* Slots in state q. */
int slots_in(const slots *s, slot_state q);
slot_state slot_of(const slots *s, int slot);
/* The decoder's description (the vocabulary, positions, the model's rules). */
decoder_info slots_info(const slots *s);

/* n sources (ids (n, Ts), lengths valid (n)) through the encoder together, each into a free
 * slot with its goal (goals[i]); at[i] receives source i's slot. Fewer free slots than the
 * sources' rows (K for a beam of K, else 1): QKV_ERR_ARG, nothing started. */
qkv_status slots_start_sources(slots *s, const int *ids, const int *valid, int n, int Ts,
                               const slot_goal *goals, int *at, qkv_error *err);
/* A language model's prompt (n >= 1 ids; the last `positions` of them) into a free slot, in
 * one prefill; or, when it is longer than the prefill chunk and other slots are running, fed
 * as rows of the next steps, a chunk a step (the same keys and values up to float rounding);
 * *at receives its slot. */
qkv_status slots_start_prompt(slots *s, const int *prompt, int n, const slot_goal *goal,
                              int *at, qkv_error *err);

/* One step: every running slot whose last token awaits the model goes through it (all in one
 * decoder step; a beam search's live hypotheses each a row, and the step's logits advance
 * it), then every running slot with logits chooses its next token. drawn (count;
 * may be NULL) receives the token each slot chose, -1 where none chose. A slot that has
 * produced its goal's tokens, chosen <eos> with stop_at_eos or filled its row without restart
 * is SLOT_DONE. */
qkv_status slots_step(slots *s, int *drawn, qkv_error *err);

/* The tokens a slot has produced so far (prompt not included) and their count. */
const int *slot_tokens(const slots *s, int slot, int *n);
/* The search of a beam slot (NULL for any other): its hypotheses once it is done. */
const beam_sentence *slot_beam(const slots *s, int slot);
/* Rows the slots hold: those of every running or done sequence (a beam search's K each). */
int slots_rows_used(const slots *s);
/* Frees a slot, running or done, and the rows its beam search held. */
void slots_release(slots *s, int slot);

#endif
