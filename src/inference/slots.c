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
    beam_sentence *beam; /* a beam search's (its cache rows: this slot's and held ones) */
    int listed;       /* rows the beam, or the prompt's chunk, has in this step */
    int first;        /* the first of a chunk's rows in this step */
    int pending;      /* prompt tokens still to feed in chunks (from position held) */
    int owner;        /* SLOT_HELD: the slot whose beam holds this row */
} slot;

struct slots {
    decoder *d;
    decoder_info info;
    int n;
    slot *slot;
    step_rows step;       /* one step's rows (n) */
    int *beams;           /* (n) the beam slots of a step */
    double *lse;          /* (n) their rows' log normalisers */
    int *rows;            /* (n) a beam's cache rows, while it starts */
    int chunk;            /* prompt tokens a step takes from a prompt that joins (0: one pass) */
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
    s->beams = malloc((size_t)n * sizeof *s->beams), s->lse = malloc((size_t)n * sizeof *s->lse);
    s->rows = malloc((size_t)n * sizeof *s->rows);
    s->work.probs = malloc((size_t)info.vocab * sizeof *s->work.probs);
    s->work.order = malloc((size_t)info.vocab * sizeof *s->work.order);
    const int ok = s->slot && s->beams && s->lse && s->rows && s->work.probs && s->work.order &&
                   !step_rows_init(&s->step, n, info.positions, 0, err);
    if (!ok) {
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
    for (int i = 0; s->slot && i < s->n; i++) {
        slot *q = &s->slot[i];
        free(q->text), free(q->own), free(q->prefix), beam_sentence_free(q->beam);
    }
    free(s->slot), free(s->beams), free(s->lse), free(s->rows);
    step_rows_free(&s->step);
    free(s->work.probs), free(s->work.order);
    decoder_free(s->d);
    free(s);
}

int slots_count(const slots *s) { return s->n; }
void slots_set_prefill_chunk(slots *s, int tokens) { s->chunk = tokens > 0 ? tokens : 0; }
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

int slots_rows_used(const slots *s) { return s->n - slots_in(s, SLOT_FREE); }

const int *slot_tokens(const slots *s, int i, int *n)
{
    const slot *q = &s->slot[i];
    *n = q->len - q->n_prompt;
    return q->text + q->n_prompt;
}

const beam_sentence *slot_beam(const slots *s, int i)
{
    return i >= 0 && i < s->n ? s->slot[i].beam : NULL;
}

void slots_release(slots *s, int i)
{
    if (i < 0 || i >= s->n || s->slot[i].state == SLOT_HELD) return;
    slot *q = &s->slot[i];
    for (int j = 0; j < s->n; j++) /* the rows its beam held */
        if (s->slot[j].state == SLOT_HELD && s->slot[j].owner == i)
            s->slot[j].state = SLOT_FREE;
    beam_sentence_free(q->beam);
    q->beam = NULL, q->state = SLOT_FREE, q->logits = NULL;
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
    beam_sentence_free(q->beam), q->beam = NULL;
    q->pending = 0, q->listed = 0;
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

/* Rows a goal takes: a beam search's K, else one. */
static int rows_of(const slot_goal *g) { return g->beam.beam >= 1 ? g->beam.beam : 1; }

/* Slot i's beam search over rows: its own, then K - 1 free ones (held from now on). */
static qkv_status start_beam(slots *s, int i, qkv_error *err)
{
    slot *q = &s->slot[i];
    qkv_beam_options o = q->goal.beam;
    const int K = o.beam;
    o.max_len = q->goal.tokens, o.max_lens = NULL;
    s->rows[0] = i;
    for (int j = 0, k = 1; k < K; j++)
        if (s->slot[j].state == SLOT_FREE && j != i) s->rows[k++] = j;
    qkv_status st = beam_check_options(&o, 1, s->info.positions, err);
    if (!st) st = beam_sentence_create(&q->beam, &o, o.max_len, s->info.vocab, &q->goal.rules,
                                       s->rows, i, err);
    if (st) return st;
    for (int k = 1; k < K; k++)
        s->slot[s->rows[k]].state = SLOT_HELD, s->slot[s->rows[k]].owner = i;
    return QKV_OK;
}

qkv_status slots_start_sources(slots *s, const int *ids, const int *valid, int n, int Ts,
                               const slot_goal *goals, int *at, qkv_error *err)
{
    if (!s->info.encoder)
        return qkv_fail(err, QKV_ERR_ARG, "a language model's slots start from prompts");
    int need = 0;
    for (int i = 0; i < n; i++) need += rows_of(&goals[i]);
    if (n < 1 || need > slots_in(s, SLOT_FREE))
        return qkv_fail(err, QKV_ERR_ARG, "%d sources need %d rows but there are %d free slots", n,
                        need, slots_in(s, SLOT_FREE));
    /* each source's own slot first (its source slot too), then the rows of beams */
    if (free_slots(s, n, at)) return qkv_fail(err, QKV_ERR_ARG, "no free slot");
    for (int i = 0; i < n; i++) {
        qkv_status st = slot_reset(s, at[i], &goals[i], 0, err);
        if (st) return st;
        s->slot[at[i]].state = SLOT_RUNNING; /* taken, while the beams find their rows */
    }
    qkv_status st = QKV_OK;
    for (int i = 0; !st && i < n; i++)
        if (goals[i].beam.beam >= 1) st = start_beam(s, at[i], err);
    if (!st) st = decoder_encode(s->d, ids, valid, n, Ts, at, err);
    if (st) {
        for (int i = 0; i < n; i++) slots_release(s, at[i]);
        return st;
    }
    for (int i = 0; i < n; i++) {
        slot *q = &s->slot[at[i]];
        q->input = q->beam ? -1 : q->goal.rules.start;
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
    const int T = s->info.positions, feed = n < T ? n : T;
    /* a long prompt joining a running batch is fed in chunks between its steps, so that it
     * does not stall them; alone, or short, in one pass (qkv_lm_generate's arithmetic) */
    if (s->chunk && feed > s->chunk && slots_in(s, SLOT_RUNNING) > 0) {
        slot *q = &s->slot[i];
        q->pending = feed, q->held = 0, q->input = -1, q->logits = NULL;
    } else if ((st = prefill(s, i, feed, err))) {
        return st;
    }
    s->slot[i].state = SLOT_RUNNING;
    *at = i;
    return QKV_OK;
}

/* Whether cache row i holds a beam's hypothesis (its own slot's or another's). */
static int in_beam(const slots *s, int i)
{
    return s->slot[i].state == SLOT_HELD || s->slot[i].beam;
}

/* Every running slot whose token awaits the model, and every live hypothesis of a running
 * beam search, through it in one decoder step; the beams advanced by their rows' logits. */
static qkv_status advance(slots *s, qkv_error *err)
{
    step_rows *r = &s->step;
    int n_beams = 0;
    r->n = 0;
    for (int i = 0; i < s->n; i++) {
        slot *q = &s->slot[i];
        if (q->state != SLOT_RUNNING) continue;
        if (q->beam) {
            if ((q->listed = beam_sentence_list(q->beam, r))) s->beams[n_beams++] = i;
            continue;
        }
        if (q->input < 0) continue;
        const int b = r->n++;
        r->row[b] = i, r->pos[b] = q->held, r->src[b] = i, r->tok[b] = q->input;
    }
    /* prompts being fed: a chunk each of what room the step has left, at consecutive
     * positions of their row (a layer stores every row's key and value before any row attends,
     * so the chunk's row p sees positions 0 .. p: causal) */
    for (int i = 0; i < s->n && r->n < r->cap; i++) {
        slot *q = &s->slot[i];
        if (q->state != SLOT_RUNNING || q->pending <= 0) continue;
        int c = q->pending < s->chunk ? q->pending : s->chunk;
        if (c > r->cap - r->n) c = r->cap - r->n;
        const int *tok = q->text + q->len - q->pending;
        q->first = r->n, q->listed = c;
        for (int k = 0; k < c; k++) {
            const int b = r->n++;
            r->row[b] = i, r->pos[b] = q->held + k, r->src[b] = i, r->tok[b] = tok[k];
        }
    }
    const int B = r->n;
    if (!B) return QKV_OK;
    /* beside a beam's rows, whose positions lie in other rows, every row says where its lie */
    for (int b = 0; n_beams && b < B; b++)
        if (!in_beam(s, r->row[b]))
            for (int j = 0; j <= r->pos[b]; j++) r->ancestry[(size_t)b * r->ld + j] = r->row[b];
    const decoder_rows dr = {B, r->row, r->pos, s->info.encoder ? r->src : NULL,
                             n_beams ? r->ancestry : NULL, r->ld};
    float *logits;
    qkv_status st = decoder_step(s->d, &dr, r->tok, &logits, err);
    if (st) return st;
    const int V = s->info.vocab;
    #pragma omp parallel for if (n_beams > 0 && B > 1)
    for (int b = 0; b < B; b++)
        if (in_beam(s, r->row[b]))
            s->lse[b] = log_normaliser(logits + (size_t)b * V, V);
    for (int b = 0; b < B;) {
        slot *q = &s->slot[r->row[b]];
        if (q->state == SLOT_HELD) q = &s->slot[q->owner];
        if (q->beam) {
            beam_sentence_advance(q->beam, logits + (size_t)b * V, s->lse + b);
            if (!beam_sentence_live(q->beam)) q->state = SLOT_DONE;
            b += q->listed;
            continue;
        }
        if (q->pending > 0) { /* a chunk: the logits after the prompt's last token */
            q->held += q->listed, q->pending -= q->listed;
            if (!q->pending) q->logits = logits + (size_t)(q->first + q->listed - 1) * V;
            b += q->listed;
            continue;
        }
        q->logits = logits + (size_t)b * V, q->input = -1, q->held++;
        b++;
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
        if (s->slot[i].state == SLOT_RUNNING && !s->slot[i].beam && s->slot[i].logits)
            st = choose(s, i, drawn, err);
    return st;
}
