/* SPDX-License-Identifier: MIT */
/* Generation from the decoder-only language model, one token per step (llama2.c's forward),
 * over the decoder interface (models/decoder.h):
 *   softmax attention  each layer caches the keys and values of every position so far; a
 *                      step appends one row and attends over t + 1 of them: O(t) at position t
 *   linear attention   each layer keeps the recurrent state S = sum phi(k) v^T, z = sum phi(k)
 *                      (Katharopoulos et al. 2020, eq. 18-20): O(1) in t
 * A prompt is absorbed by one batched forward pass (the decoder's prefill), whose keys and
 * values fill the cache. A text of one request and the texts of a server's concurrent
 * requests are the same machine (inference/slots.h) with one slot or many. */
#include <stdlib.h>
#include <string.h>

#include "inference/slots.h"

/* ---- one sequence, step by step: the public state ---------------------------------------- */

struct qkv_lm_state {
    const qkv_lm *model; /* the model it was made for */
    decoder *d;          /* one row of max_len positions */
    int len;             /* tokens held */
};

qkv_status qkv_lm_state_create(qkv_lm_state **out, const qkv_lm *m, qkv_error *err)
{
    *out = NULL;
    qkv_lm_state *s = calloc(1, sizeof *s);
    if (!s) return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for a generation state");
    /* the state is the model's shape; qkv_lm_prefill and qkv_lm_step pass the model itself */
    qkv_status st = decoder_create_lm(&s->d, (qkv_lm *)m, 1, 0, err);
    if (st) return free(s), st;
    s->model = m;
    *out = s;
    return QKV_OK;
}

void qkv_lm_state_free(qkv_lm_state *s)
{
    if (!s) return;
    decoder_free(s->d);
    free(s);
}

int qkv_lm_state_length(const qkv_lm_state *s) { return s->len; }

static qkv_status same_model(const qkv_lm *m, const qkv_lm_state *s, qkv_error *err)
{
    if (m == s->model) return QKV_OK;
    return qkv_fail(err, QKV_ERR_ARG, "a generation state serves the model it was made for");
}

qkv_status qkv_lm_step(qkv_lm *m, qkv_lm_state *s, int token, float *logits, qkv_error *err)
{
    const decoder_info info = decoder_get_info(s->d);
    qkv_status st = same_model(m, s, err);
    if (st) return st;
    if (s->len >= info.positions)
        return qkv_fail(err, QKV_ERR_ARG, "the generation state is full: the model has %d "
                        "positions (prefill a shorter window to go on)", info.positions);
    const int row = 0;
    const decoder_rows r = {1, &row, &s->len, NULL, NULL, 0};
    float *z;
    if ((st = decoder_step(s->d, &r, &token, &z, err))) return st;
    memcpy(logits, z, (size_t)info.vocab * sizeof *logits);
    s->len++;
    return QKV_OK;
}

qkv_status qkv_lm_prefill(qkv_lm *m, qkv_lm_state *s, const int *ids, int n, float *logits,
                          qkv_error *err)
{
    qkv_status st = same_model(m, s, err);
    if (st) return st;
    s->len = 0;
    if ((st = decoder_prefill(s->d, 0, 0, ids, n, logits, err))) return st;
    s->len = n;
    return QKV_OK;
}

/* ---- texts: one, or many together ----------------------------------------------------------- */

/* What a text of g asks of its slot. */
static slot_goal goal_of(const decoder_info *info, const qkv_lm_generation *g)
{
    slot_goal s = {g->tokens, 0, g->sampling, g->seed, decoding_rules_of(info), 1, {0}};
    s.rules.text_only = g->text_only;
    return s;
}

static qkv_status check_generation(const int *prompt, int n_prompt, const qkv_lm_generation *g,
                                   int min_tokens, qkv_error *err)
{
    if (n_prompt < 1 || !prompt)
        return qkv_fail(err, QKV_ERR_ARG, "generation needs a prompt of at least one token");
    if (g->tokens < min_tokens)
        return qkv_fail(err, QKV_ERR_ARG, "tokens must be >= %d, got %d", min_tokens, g->tokens);
    return QKV_OK;
}

qkv_status qkv_lm_generate(qkv_lm *m, const int *prompt, int n_prompt, int *out, int *n_out,
                           const qkv_lm_generation *g, qkv_error *err)
{
    if (n_out) *n_out = 0;
    qkv_status st = check_generation(prompt, n_prompt, g, 0, err);
    if (st || g->tokens == 0) return st;
    decoder *d;
    slots *s = NULL;
    if ((st = decoder_create_lm(&d, m, 1, 0, err))) return st;
    if ((st = slots_create(&s, d, 1, err))) return decoder_free(d), st;
    const decoder_info info = decoder_get_info(d);
    const slot_goal goal = goal_of(&info, g);
    int slot, drawn, n = 0;
    st = slots_start_prompt(s, prompt, n_prompt, &goal, &slot, err);
    while (!st && slot_of(s, slot) == SLOT_RUNNING) {
        if ((st = slots_step(s, &drawn, err)) || drawn < 0) continue;
        out[n++] = drawn;
        if (n_out) *n_out = n;
        if (g->on_token && g->on_token(drawn, g->ctx)) break;
    }
    slots_free(s);
    return st;
}

struct qkv_lm_batch {
    slots *s;
    int *drawn; /* (slots) */
};

qkv_status qkv_lm_batch_create(qkv_lm_batch **out, qkv_lm *m, int slots_n, qkv_error *err)
{
    *out = NULL;
    if (!m || slots_n < 1)
        return qkv_fail(err, QKV_ERR_ARG, "a generation batch needs a model and slots >= 1 (got "
                        "%d)", slots_n);
    qkv_lm_batch *b = calloc(1, sizeof *b);
    decoder *d = NULL;
    if (!b || !(b->drawn = malloc((size_t)slots_n * sizeof *b->drawn))) {
        qkv_lm_batch_free(b);
        return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for a generation batch of %d", slots_n);
    }
    qkv_status st = decoder_create_lm(&d, m, slots_n, 0, err);
    if (!st && (st = slots_create(&b->s, d, slots_n, err))) decoder_free(d);
    if (st) return qkv_lm_batch_free(b), st;
    *out = b;
    return QKV_OK;
}

void qkv_lm_batch_free(qkv_lm_batch *b)
{
    if (!b) return;
    slots_free(b->s);
    free(b->drawn);
    free(b);
}

int qkv_lm_batch_slots(const qkv_lm_batch *b) { return slots_count(b->s); }
int qkv_lm_batch_free_slots(const qkv_lm_batch *b) { return slots_in(b->s, SLOT_FREE); }
int qkv_lm_batch_running(const qkv_lm_batch *b) { return slots_in(b->s, SLOT_RUNNING); }

qkv_status qkv_lm_batch_add(qkv_lm_batch *b, const int *prompt, int n_prompt,
                            const qkv_lm_generation *g, int *slot, qkv_error *err)
{
    *slot = -1;
    qkv_status st = check_generation(prompt, n_prompt, g, 1, err);
    if (st) return st;
    const decoder_info info = slots_info(b->s);
    const slot_goal goal = goal_of(&info, g);
    return slots_start_prompt(b->s, prompt, n_prompt, &goal, slot, err);
}

void qkv_lm_batch_set_prefill_chunk(qkv_lm_batch *b, int tokens)
{
    slots_set_prefill_chunk(b->s, tokens);
}

qkv_status qkv_lm_batch_step(qkv_lm_batch *b, int *drawn, qkv_error *err)
{
    return slots_step(b->s, drawn, err);
}

int qkv_lm_batch_finished(const qkv_lm_batch *b, int slot)
{
    return slot_of(b->s, slot) == SLOT_DONE;
}

void qkv_lm_batch_release(qkv_lm_batch *b, int slot) { slots_release(b->s, slot); }
