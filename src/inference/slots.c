/* SPDX-License-Identifier: MIT */
/* The slots of continuous batching (slots.h). A slot is a small machine: its last token
 * awaits the model (input), or the model's logits await its choice, until it is done. A step
 * runs the first kind of every slot through the decoder together, then lets every slot with
 * logits choose. */
#include <stdlib.h>
#include <string.h>

#include "inference/slots.h"

typedef struct {
    slot_state state;
    slot_goal goal;
    int *prefix;      /* (goal.rules.n_prefix) the slot's copy of its forced tokens */
    int *text;        /* (n_prompt + goal.tokens) the prompt, then what is produced */
    int n_prompt, len;
    int draws;        /* choices made (draw i of the sampling stream) */
    int held;         /* positions its cache row holds */
    int input;        /* the token awaiting the model at position held, or -1 */
    float *logits;    /* the logits awaiting its choice (a row of the last step's, or own) */
    float *own;       /* (V) the logits of a prefill */
} slot;

struct slots {
    decoder *d;
    decoder_info info;
    int n;
    slot *slot;
    int *row, *pos, *tok; /* (n) one step's rows */
    sampler work;
};

qkv_status slots_create(slots **out, decoder *d, int n, qkv_error *err)
{
    *out = NULL;
    const decoder_info info = decoder_get_info(d);
    if (n < 1 || n > info.rows || (info.encoder && n > info.sources))
        return qkv_fail(err, QKV_ERR_ARG, "%d slots: the decoder holds %d rows and %d sources", n,
                        info.rows, info.sources);
    slots *s = calloc(1, sizeof *s);
    if (!s) return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for %d slots", n);
    s->d = d, s->info = info, s->n = n;
    s->slot = calloc((size_t)n, sizeof *s->slot);
    s->row = malloc((size_t)n * sizeof *s->row), s->pos = malloc((size_t)n * sizeof *s->pos);
    s->tok = malloc((size_t)n * sizeof *s->tok);
    s->work.probs = malloc((size_t)info.vocab * sizeof *s->work.probs);
    s->work.order = malloc((size_t)info.vocab * sizeof *s->work.order);
    if (!s->slot || !s->row || !s->pos || !s->tok || !s->work.probs || !s->work.order) {
        s->d = NULL; /* the caller keeps d on failure */
        slots_free(s);
        return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for %d slots", n);
    }
    *out = s;
    return QKV_OK;
}

void slots_free(slots *s)
{
    if (!s) return;
    for (int i = 0; s->slot && i < s->n; i++)
        free(s->slot[i].text), free(s->slot[i].own), free(s->slot[i].prefix);
    free(s->slot), free(s->row), free(s->pos), free(s->tok);
    free(s->work.probs), free(s->work.order);
    decoder_free(s->d);
    free(s);
}

int slots_count(const slots *s) { return s->n; }
decoder_info slots_info(const slots *s) { return s->info; }

int slots_in(const slots *s, slot_state q)
{
    int k = 0;
    for (int i = 0; i < s->n; i++) k += s->slot[i].state == q;
    return k;
}

slot_state slot_of(const slots *s, int i)
{
    return i >= 0 && i < s->n ? s->slot[i].state : SLOT_FREE;
}

const int *slot_tokens(const slots *s, int i, int *n)
{
    const slot *q = &s->slot[i];
    *n = q->len - q->n_prompt;
    return q->text + q->n_prompt;
}

void slots_release(slots *s, int i)
{
    if (i >= 0 && i < s->n) s->slot[i].state = SLOT_FREE, s->slot[i].logits = NULL;
}

/* Slot i made ready for a sequence: its goal (prefix copied) and room for n_prompt + tokens. */
static qkv_status slot_reset(slots *s, int i, const slot_goal *g, int n_prompt, qkv_error *err)
{
    slot *q = &s->slot[i];
    if (g->tokens < 1 || g->rules.n_prefix < 0)
        return qkv_fail(err, QKV_ERR_ARG, "a slot produces >= 1 tokens (got %d)", g->tokens);
    int *text = realloc(q->text, ((size_t)n_prompt + g->tokens) * sizeof *text);
    if (text) q->text = text;
    int *prefix = realloc(q->prefix, ((size_t)g->rules.n_prefix + 1) * sizeof *prefix);
    if (prefix) q->prefix = prefix;
    if (!text || !prefix)
        return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for a sequence of %d tokens",
                        n_prompt + g->tokens);
    if (g->rules.n_prefix)
        memcpy(q->prefix, g->rules.prefix, (size_t)g->rules.n_prefix * sizeof *q->prefix);
    q->goal = *g, q->goal.rules.prefix = q->prefix;
    q->n_prompt = q->len = n_prompt, q->draws = 0, q->held = 0, q->input = -1, q->logits = NULL;
    return QKV_OK;
}

/* The first n free slots, into slot (n); -1 when there are fewer. */
static int free_slots(const slots *s, int n, int *slot)
{
    for (int i = 0, k = 0; k < n; i++) {
        if (i == s->n) return -1;
        if (s->slot[i].state == SLOT_FREE) slot[k++] = i;
    }
    return 0;
}

qkv_status slots_start_sources(slots *s, const int *ids, const int *valid, int n, int Ts,
                               const slot_goal *goals, int *at, qkv_error *err)
{
    if (!s->info.encoder)
        return qkv_fail(err, QKV_ERR_ARG, "a language model's slots start from prompts");
    if (n < 1 || free_slots(s, n, at))
        return qkv_fail(err, QKV_ERR_ARG, "%d sources but %d free slots", n,
                        slots_in(s, SLOT_FREE));
    for (int i = 0; i < n; i++) {
        qkv_status st = slot_reset(s, at[i], &goals[i], 0, err);
        if (st) return st;
    }
    qkv_status st = decoder_encode(s->d, ids, valid, n, Ts, at, err);
    if (st) return st;
    for (int i = 0; i < n; i++) {
        slot *q = &s->slot[at[i]];
        q->input = q->goal.rules.start, q->state = SLOT_RUNNING;
    }
    return QKV_OK;
}

/* The last n tokens of slot i's text into its row, the logits after them its own. */
static qkv_status prefill(slots *s, int i, int n, qkv_error *err)
{
    slot *q = &s->slot[i];
    if (!q->own && !(q->own = malloc((size_t)s->info.vocab * sizeof *q->own)))
        return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for a slot's logits");
    qkv_status st = decoder_prefill(s->d, i, i, q->text + q->len - n, n, q->own, err);
    if (st) return st;
    q->held = n, q->logits = q->own, q->input = -1;
    return QKV_OK;
}

qkv_status slots_start_prompt(slots *s, const int *prompt, int n, const slot_goal *goal,
                              int *at, qkv_error *err)
{
    *at = -1;
    if (s->info.encoder)
        return qkv_fail(err, QKV_ERR_ARG, "an encoder-decoder's slots start from sources");
    if (n < 1) return qkv_fail(err, QKV_ERR_ARG, "generation needs a prompt of at least one token");
    for (int i = 0; i < n; i++)
        if (prompt[i] < 0 || prompt[i] >= s->info.vocab)
            return qkv_fail(err, QKV_ERR_ARG, "prompt token %d: id %d outside the vocabulary "
                            "[0, %d)", i, prompt[i], s->info.vocab);
    int i;
    if (free_slots(s, 1, &i))
        return qkv_fail(err, QKV_ERR_ARG, "no free slot (%d running)", s->n);
    qkv_status st = slot_reset(s, i, goal, n, err);
    if (st) return st;
    memcpy(s->slot[i].text, prompt, (size_t)n * sizeof *prompt);
    const int T = s->info.positions;
    if ((st = prefill(s, i, n < T ? n : T, err))) return st;
    s->slot[i].state = SLOT_RUNNING;
    *at = i;
    return QKV_OK;
}

/* Every running slot whose token awaits the model, through it in one decoder step. */
static qkv_status advance(slots *s, qkv_error *err)
{
    int B = 0;
    for (int i = 0; i < s->n; i++) {
        const slot *q = &s->slot[i];
        if (q->state != SLOT_RUNNING || q->input < 0) continue;
        s->row[B] = i, s->pos[B] = q->held, s->tok[B] = q->input;
        B++;
    }
    if (!B) return QKV_OK;
    const decoder_rows r = {B, s->row, s->pos, s->info.encoder ? s->row : NULL, NULL, 0};
    float *logits;
    qkv_status st = decoder_step(s->d, &r, s->tok, &logits, err);
    if (st) return st;
    for (int b = 0; b < B; b++) {
        slot *q = &s->slot[s->row[b]];
        q->logits = logits + (size_t)b * s->info.vocab, q->input = -1, q->held++;
    }
    return QKV_OK;
}

/* Slot i's choice from its logits, and what follows it: the end, the token's turn through
 * the model, or (a full row) a restart from the last half of the text. */
static qkv_status choose(slots *s, int i, int *drawn, qkv_error *err)
{
    slot *q = &s->slot[i];
    const int V = s->info.vocab, T = s->info.positions;
    /* the logits are the decoder's (or the slot's own) until the next step: filtered in place */
    const int tok = choose_token(&q->goal.rules, &q->goal.sampling, q->goal.seed,
                                 (uint64_t)q->draws, q->logits, V,
                                 q->len - q->n_prompt, &s->work);
    q->draws++, q->logits = NULL;
    if (drawn) drawn[i] = tok;
    if (q->goal.stop_at_eos && tok == QKV_EOS) {
        q->state = SLOT_DONE;
        return QKV_OK;
    }
    q->text[q->len++] = tok;
    if (q->len - q->n_prompt == q->goal.tokens) {
        q->state = SLOT_DONE;
    } else if (q->held < T) {
        q->input = tok;
    } else if (q->goal.restart) { /* out of positions: go on from the last half of the text */
        return prefill(s, i, T / 2 > 0 ? T / 2 : 1, err);
    } else {
        q->state = SLOT_DONE;
    }
    return QKV_OK;
}

qkv_status slots_step(slots *s, int *drawn, qkv_error *err)
{
    for (int i = 0; drawn && i < s->n; i++) drawn[i] = -1;
    qkv_status st = advance(s, err);
    for (int i = 0; !st && i < s->n; i++)
        if (s->slot[i].state == SLOT_RUNNING && s->slot[i].logits) st = choose(s, i, drawn, err);
    return st;
}
