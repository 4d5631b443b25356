/* SPDX-License-Identifier: MIT */
/* Generation from the decoder-only language model, one token per step (llama2.c's forward):
 *   softmax attention  each layer caches the keys and values of every position so far; a
 *                      step appends one row and attends over t + 1 of them: O(t) at position t
 *   linear attention   each layer keeps the recurrent state S = sum phi(k) v^T, z = sum phi(k)
 *                      (Katharopoulos et al. 2020, eq. 18-20): O(1) in t
 * A prompt is absorbed by one batched forward pass (prefill), whose keys and values fill the
 * cache. Sampling: temperature, top-k, then top-p (nucleus) over what is left, with draws from
 * the counter-based generator, so a seed reproduces a text exactly. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "models/language_model_internal.h"

struct qkv_lm_state {
    int len;         /* tokens held */
    decode_state st; /* one row of max_len positions */
};

qkv_status qkv_lm_state_create(qkv_lm_state **out, const qkv_lm *m, qkv_error *err)
{
    *out = NULL;
    qkv_lm_state *s = calloc(1, sizeof *s);
    if (!s) return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for a generation state");
    qkv_status st = decode_state_init(&s->st, &m->dims, 1, m->cfg.max_len, 0, 0, 0,
                                      core_kv_cache(&m->core), err);
    if (st) return free(s), st;
    *out = s;
    return QKV_OK;
}

void qkv_lm_state_free(qkv_lm_state *s)
{
    if (!s) return;
    decode_state_free(&s->st);
    free(s);
}

int qkv_lm_state_length(const qkv_lm_state *s) { return s->len; }

qkv_status qkv_lm_step(qkv_lm *m, qkv_lm_state *s, int token, float *logits, qkv_error *err)
{
    const int t = s->len;
    if (t >= s->st.T)
        return qkv_fail(err, QKV_ERR_ARG, "the generation state is full: the model has %d "
                        "positions (prefill a shorter window to go on)", s->st.T);
    if (token < 0 || token >= m->cfg.vocab)
        return qkv_fail(err, QKV_ERR_ARG, "token id %d outside the vocabulary [0, %d)", token,
                        m->cfg.vocab);
    qkv_status st = precision_prepare(&m->core.prec, m->core.params, m->core.n_params, 1, err);
    if (st) return st;
    const backend be = core_backend(&m->core);
    stack_step(&be, &m->dims, &m->w.stack, m->core.pos_table, &s->st, &token, t, NULL);
    head_step(&be, &m->dims, &m->w.stack, m->w.out_W, m->w.out_b, &s->st, logits, m->cfg.vocab);
    s->len = t + 1;
    return QKV_OK;
}

qkv_status qkv_lm_prefill(qkv_lm *m, qkv_lm_state *s, const int *ids, int n, float *logits,
                          qkv_error *err)
{
    const qkv_lm_config *c = &m->cfg;
    const int C = c->d_model, T = s->st.T;
    if (n < 1 || n > T)
        return qkv_fail(err, QKV_ERR_ARG, "a prefill of %d tokens: the model takes 1 to %d", n,
                        T);
    s->len = 0;
    qkv_status st = precision_prepare(&m->core.prec, m->core.params, m->core.n_params, 1, err);
    if (!st) st = lm_forward(m, ids, 1, n, 0.0f, 0, err);
    if (st) return st;
    const backend be = core_backend(&m->core);
    for (int l = 0; l < c->layers; l++) {
        const qkv_mha_cache *a = &m->acts.s.blocks[l].self_att.c;
        if (!m->dims.linear_attention) {
            be.ops->kv_store(s->st.self_k, s->st.kv, (size_t)l * T * C, a->k, (size_t)n * C);
            be.ops->kv_store(s->st.self_v, s->st.kv, (size_t)l * T * C, a->v, (size_t)n * C);
        } else { /* absorb the keys and values into S, z (the outputs are the forward's) */
            qkv_linear_attention_state_reset(&s->st.sums[l]);
            for (int j = 0; j < n; j++)
                be.ops->linear_attention_step(s->st.ctx, &s->st.sums[l], a->q + (size_t)j * C,
                                              a->k + (size_t)j * C, a->v + (size_t)j * C);
        }
    }
    be.ops->copy(logits, m->acts.logits + (size_t)(n - 1) * c->vocab, c->vocab);
    s->len = n;
    return QKV_OK;
}

/* ---- sampling -------------------------------------------------------------------------- */

/* Whether token a comes before token b: more probable first, ties to the lower id. */
static int before(const float *p, int a, int b)
{
    return p[a] > p[b] || (p[a] == p[b] && a < b);
}

/* Sorts ids so that before() holds along it: heapsort, O(V log V) in place, no allocation. */
static void sort_by_probability(int *ids, int n, const float *p)
{
    for (int start = n / 2 - 1, end = n;; ) {
        int root;
        if (start >= 0) {
            root = start--; /* heapify: a heap whose root comes last in the order */
        } else {
            if (--end <= 0) return;
            int t = ids[0];
            ids[0] = ids[end], ids[end] = t;
            root = 0;
        }
        for (int child; (child = 2 * root + 1) < end; root = child) {
            if (child + 1 < end && before(p, ids[child], ids[child + 1])) child++;
            if (!before(p, ids[root], ids[child])) break;
            int t = ids[root];
            ids[root] = ids[child], ids[child] = t;
        }
    }
}

int qkv_sampling_probs(float *probs, int *order, const float *logits, int V,
                       const qkv_sampling *s)
{
    for (int i = 0; i < V; i++) order[i] = i;
    if (!(s->temperature > 0.0f)) { /* greedy: the first largest logit */
        int best = 0;
        for (int i = 1; i < V; i++)
            if (logits[i] > logits[best]) best = i;
        memset(probs, 0, (size_t)V * sizeof *probs);
        probs[best] = 1.0f;
        order[0] = best;
        for (int i = 0, j = 1; i < V; i++) /* the rest in id order */
            if (i != best) order[j++] = i;
        return 1;
    }
    /* softmax(logits / temperature), non-finite logits weighing 0 */
    float mx = -INFINITY;
    for (int i = 0; i < V; i++)
        if (isfinite(logits[i]) && logits[i] > mx) mx = logits[i];
    double sum = 0.0;
    for (int i = 0; i < V; i++) {
        probs[i] = isfinite(logits[i]) ? expf((logits[i] - mx) / s->temperature) : 0.0f;
        sum += probs[i];
    }
    for (int i = 0; i < V; i++) probs[i] = (float)(probs[i] / sum);
    sort_by_probability(order, V, probs);
    int kept = s->top_k > 0 && s->top_k < V ? s->top_k : V;
    if (s->top_p < 1.0f) { /* the smallest prefix whose mass reaches top_p of what is kept */
        double mass = 0.0, cum = 0.0;
        for (int i = 0; i < kept; i++) mass += probs[order[i]];
        int j = 0;
        while (j < kept && (j == 0 || cum < (double)s->top_p * mass)) cum += probs[order[j++]];
        kept = j;
    }
    double total = 0.0;
    for (int i = 0; i < kept; i++) total += probs[order[i]];
    for (int i = kept; i < V; i++) probs[order[i]] = 0.0f;
    if (!(total > 0.0)) { /* no finite logit at all: the first token */
        probs[order[0]] = 1.0f;
        return 1;
    }
    for (int i = 0; i < kept; i++) probs[order[i]] = (float)(probs[order[i]] / total);
    return kept;
}

int qkv_sample_token(const float *probs, const int *order, int kept, float u)
{
    double total = 0.0, cum = 0.0;
    for (int i = 0; i < kept; i++) total += probs[order[i]];
    const double target = (double)u * total; /* total is 1 up to rounding */
    for (int i = 0; i < kept; i++) {
        cum += probs[order[i]];
        if (cum > target) return order[i];
    }
    return order[kept - 1];
}

/* ---- the generation loop --------------------------------------------------------------- */

qkv_status qkv_lm_generate(qkv_lm *m, const int *prompt, int n_prompt, int *out, int *n_out,
                           const qkv_lm_generation *g, qkv_error *err)
{
    const qkv_lm_config *c = &m->cfg;
    const int V = c->vocab, T = c->max_len;
    if (n_out) *n_out = 0;
    if (n_prompt < 1)
        return qkv_fail(err, QKV_ERR_ARG, "generation needs a prompt of at least one token");
    if (g->tokens < 0) return qkv_fail(err, QKV_ERR_ARG, "tokens must be >= 0, got %d", g->tokens);
    for (int i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= V)
            return qkv_fail(err, QKV_ERR_ARG, "prompt token %d: id %d outside the vocabulary "
                            "[0, %d)", i, prompt[i], V);
    if (g->tokens == 0) return QKV_OK;
    qkv_lm_state *s = NULL;
    qkv_status st = qkv_lm_state_create(&s, m, err);
    if (st) return st;
    /* the text so far (prompt, then what is drawn): a full state restarts from its end */
    const size_t total = (size_t)n_prompt + (size_t)g->tokens;
    int *text = malloc(total * sizeof *text), *order = malloc((size_t)V * sizeof *order);
    float *logits = malloc((size_t)V * sizeof *logits), *probs = malloc((size_t)V * sizeof *probs);
    if (!text || !order || !logits || !probs) {
        st = qkv_fail(err, QKV_ERR_NOMEM, "out of memory for generation");
        goto done;
    }
    memcpy(text, prompt, (size_t)n_prompt * sizeof *text);
    size_t len = (size_t)n_prompt;
    int window = n_prompt < T ? n_prompt : T;
    st = qkv_lm_prefill(m, s, text + len - window, window, logits, err);
    for (int i = 0; !st && i < g->tokens; i++) {
        if (g->text_only)
            for (int r = 0; r < QKV_N_RESERVED && r < V - 1; r++) logits[r] = -INFINITY;
        int kept = qkv_sampling_probs(probs, order, logits, V, &g->sampling);
        int tok = qkv_sample_token(probs, order, kept, qkv_random_uniform(g->seed, (uint64_t)i));
        out[i] = tok, text[len++] = tok;
        if (n_out) *n_out = i + 1;
        if ((g->on_token && g->on_token(tok, g->ctx)) || i + 1 == g->tokens) break;
        if (qkv_lm_state_length(s) < T) {
            st = qkv_lm_step(m, s, tok, logits, err);
        } else { /* out of positions: go on from the last half of the context */
            int keep = T / 2 > 0 ? T / 2 : 1;
            st = qkv_lm_prefill(m, s, text + len - keep, keep, logits, err);
        }
    }
done:
    free(text), free(order), free(logits), free(probs);
    qkv_lm_state_free(s);
    return st;
}

/* ---- continuous batching --------------------------------------------------------------
 * Texts that arrive at different times generated together (a server's concurrent requests):
 * each slot is one cache row of max_len positions; a text joins a free slot with a prefill of
 * its prompt, every step draws each running text's next token from its own logits and then
 * runs the model once on all of them, each at its own position (stack_step with per-row
 * positions), and a text that ends frees its slot. Each text is qkv_lm_generate's loop: the
 * same draws, the same restart from the last max_len / 2 tokens when its row is full. */

typedef enum { LM_SLOT_FREE, LM_SLOT_RUNNING, LM_SLOT_DONE } lm_slot_state;

typedef struct {
    lm_slot_state state;
    qkv_lm_generation g;
    int *text;       /* (n_prompt + g.tokens) the prompt, then what is drawn */
    size_t len;      /* tokens of text */
    int drawn;       /* tokens drawn so far (i of qkv_lm_generate) */
    int held;        /* positions the cache row holds */
    float *logits;   /* (V) the next token's */
} lm_slot;

struct qkv_lm_batch {
    qkv_lm *m;
    int cap, T, V;
    decode_state st;
    lm_slot *slots;
    int *row, *pos, *tok, *row_len; /* (cap) one step's rows */
    float *probs;    /* (V) sampling work space */
    int *order;      /* (V) */
};

qkv_status qkv_lm_batch_create(qkv_lm_batch **out, qkv_lm *m, int slots, qkv_error *err)
{
    *out = NULL;
    if (!m || slots < 1)
        return qkv_fail(err, QKV_ERR_ARG, "a generation batch needs a model and slots >= 1 (got "
                        "%d)", slots);
    qkv_lm_batch *b = calloc(1, sizeof *b);
    if (!b) return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for a generation batch");
    b->m = m, b->cap = slots, b->T = m->cfg.max_len, b->V = m->cfg.vocab;
    const size_t n = (size_t)slots;
    b->slots = calloc(n, sizeof *b->slots);
    b->row = malloc(n * sizeof *b->row), b->pos = malloc(n * sizeof *b->pos);
    b->tok = malloc(n * sizeof *b->tok), b->row_len = calloc(n, sizeof *b->row_len);
    b->probs = malloc((size_t)b->V * sizeof *b->probs);
    b->order = malloc((size_t)b->V * sizeof *b->order);
    int ok = b->slots && b->row && b->pos && b->tok && b->row_len && b->probs && b->order;
    for (int s = 0; ok && s < slots; s++)
        ok = !!(b->slots[s].logits = malloc((size_t)b->V * sizeof(float)));
    if (!ok) {
        qkv_lm_batch_free(b);
        return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for a generation batch of %d", slots);
    }
    qkv_status st = decode_state_init(&b->st, &m->dims, slots, b->T, 0, 0, b->V,
                                      core_kv_cache(&m->core), err);
    if (st) return qkv_lm_batch_free(b), st;
    *out = b;
    return QKV_OK;
}

void qkv_lm_batch_free(qkv_lm_batch *b)
{
    if (!b) return;
    decode_state_free(&b->st);
    for (int s = 0; b->slots && s < b->cap; s++) free(b->slots[s].logits), free(b->slots[s].text);
    free(b->slots), free(b->row), free(b->pos), free(b->tok), free(b->row_len);
    free(b->probs), free(b->order);
    free(b);
}

int qkv_lm_batch_slots(const qkv_lm_batch *b) { return b->cap; }

int qkv_lm_batch_free_slots(const qkv_lm_batch *b)
{
    int n = 0;
    for (int s = 0; s < b->cap; s++) n += b->slots[s].state == LM_SLOT_FREE;
    return n;
}

int qkv_lm_batch_running(const qkv_lm_batch *b)
{
    int n = 0;
    for (int s = 0; s < b->cap; s++) n += b->slots[s].state == LM_SLOT_RUNNING;
    return n;
}

/* The slot's cache row from a prefill of the last n tokens of its text (qkv_lm_prefill into
 * one row of the batch's cache); its logits become the last position's. */
static qkv_status slot_prefill(qkv_lm_batch *b, int s, int n, qkv_error *err)
{
    qkv_lm *m = b->m;
    lm_slot *q = &b->slots[s];
    const int C = m->cfg.d_model, T = b->T;
    qkv_status st = precision_prepare(&m->core.prec, m->core.params, m->core.n_params, 1, err);
    if (!st) st = lm_forward(m, q->text + q->len - n, 1, n, 0.0f, 0, err);
    if (st) return st;
    const backend be = core_backend(&m->core);
    for (int l = 0; l < m->cfg.layers; l++) {
        const qkv_mha_cache *a = &m->acts.s.blocks[l].self_att.c;
        if (!m->dims.linear_attention) {
            const size_t at = ((size_t)l * b->cap + s) * T * C;
            be.ops->kv_store(b->st.self_k, b->st.kv, at, a->k, (size_t)n * C);
            be.ops->kv_store(b->st.self_v, b->st.kv, at, a->v, (size_t)n * C);
        } else {
            qkv_linear_attention_state *S = &b->st.sums[l * b->cap + s];
            qkv_linear_attention_state_reset(S);
            for (int j = 0; j < n; j++)
                be.ops->linear_attention_step(b->st.ctx, S, a->q + (size_t)j * C,
                                              a->k + (size_t)j * C, a->v + (size_t)j * C);
        }
    }
    be.ops->copy(q->logits, m->acts.logits + (size_t)(n - 1) * b->V, b->V);
    q->held = n;
    return QKV_OK;
}

qkv_status qkv_lm_batch_add(qkv_lm_batch *b, const int *prompt, int n_prompt,
                            const qkv_lm_generation *g, int *slot, qkv_error *err)
{
    *slot = -1;
    if (n_prompt < 1)
        return qkv_fail(err, QKV_ERR_ARG, "generation needs a prompt of at least one token");
    if (g->tokens < 1) return qkv_fail(err, QKV_ERR_ARG, "tokens must be >= 1, got %d", g->tokens);
    for (int i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= b->V)
            return qkv_fail(err, QKV_ERR_ARG, "prompt token %d: id %d outside the vocabulary "
                            "[0, %d)", i, prompt[i], b->V);
    int s = 0;
    while (s < b->cap && b->slots[s].state != LM_SLOT_FREE) s++;
    if (s == b->cap) return qkv_fail(err, QKV_ERR_ARG, "no free slot (%d running)", b->cap);
    lm_slot *q = &b->slots[s];
    free(q->text);
    if (!(q->text = malloc(((size_t)n_prompt + (size_t)g->tokens) * sizeof *q->text)))
        return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for generation");
    memcpy(q->text, prompt, (size_t)n_prompt * sizeof *q->text);
    q->len = (size_t)n_prompt, q->drawn = 0, q->g = *g;
    qkv_status st = slot_prefill(b, s, n_prompt < b->T ? n_prompt : b->T, err);
    if (st) return st;
    q->state = LM_SLOT_RUNNING;
    *slot = s;
    return QKV_OK;
}

qkv_status qkv_lm_batch_step(qkv_lm_batch *b, int *drawn, qkv_error *err)
{
    qkv_lm *m = b->m;
    const int V = b->V;
    int B = 0;
    for (int s = 0; s < b->cap; s++) {
        drawn[s] = -1;
        lm_slot *q = &b->slots[s];
        if (q->state != LM_SLOT_RUNNING) continue;
        /* qkv_lm_generate's draw i */
        if (q->g.text_only)
            for (int r = 0; r < QKV_N_RESERVED && r < V - 1; r++) q->logits[r] = -INFINITY;
        const int kept = qkv_sampling_probs(b->probs, b->order, q->logits, V, &q->g.sampling);
        const int tok = qkv_sample_token(b->probs, b->order, kept,
                                         qkv_random_uniform(q->g.seed, (uint64_t)q->drawn));
        q->text[q->len++] = tok, drawn[s] = tok;
        if (++q->drawn == q->g.tokens) {
            q->state = LM_SLOT_DONE;
        } else if (q->held < b->T) { /* joins this step's rows */
            b->row[B] = s, b->pos[B] = q->held, b->tok[B] = tok, b->row_len[s] = q->held + 1;
            B++;
        } else { /* out of positions: go on from the last half of the context */
            const int keep = b->T / 2 > 0 ? b->T / 2 : 1;
            qkv_status st = slot_prefill(b, s, keep, err);
            if (st) return st;
        }
    }
    if (!B) return QKV_OK;
    qkv_status st = precision_prepare(&m->core.prec, m->core.params, m->core.n_params, 1, err);
    if (st) return st;
    decode_state *ds = &b->st;
    ds->B = B, ds->row = b->row, ds->pos = b->pos, ds->row_len = b->row_len;
    const backend be = core_backend(&m->core);
    stack_step(&be, &m->dims, &m->w.stack, m->core.pos_table, ds, b->tok, 0, NULL);
    head_step(&be, &m->dims, &m->w.stack, m->w.out_W, m->w.out_b, ds, ds->logits, V);
    for (int r = 0; r < B; r++) {
        lm_slot *q = &b->slots[b->row[r]];
        memcpy(q->logits, ds->logits + (size_t)r * V, (size_t)V * sizeof *q->logits);
        q->held++;
    }
    return QKV_OK;
}

int qkv_lm_batch_finished(const qkv_lm_batch *b, int slot)
{
    return slot >= 0 && slot < b->cap && b->slots[slot].state == LM_SLOT_DONE;
}

void qkv_lm_batch_release(qkv_lm_batch *b, int slot)
{
    if (slot >= 0 && slot < b->cap) b->slots[slot].state = LM_SLOT_FREE;
}
