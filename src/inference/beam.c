/* SPDX-License-Identifier: MIT */
/* Beam search (Wu et al. 2016, "Google's Neural Machine Translation System", section 7) with
 * the decoder's key-value cache, for a batch of sentences at once.
 *
 * Each sentence keeps up to K live hypotheses, each a row of the cache. A step runs the
 * decoder on every live row, then each sentence ranks the 2K best one-token extensions of its
 * rows by log P(y_1..t | x): an <eos> among the first K finishes a hypothesis, scored
 * log P(Y | x) / lp(Y), and the K best others live on. Rows are then gathered from their
 * parents, which also drops the rows of sentences that are done, so a step costs the live
 * hypotheses only. What a row inherits is its history and, per position, the cache row
 * (slot) where its ancestor's key and value lie: each key and value is written once, into the
 * cache row of the hypothesis that computed it, and never moves, so reordering costs t
 * integers per row where copying the cache would cost t keys and values per layer (25 MB a
 * step at t = 256 with 4 rows of a 6-layer, 512-wide model).
 *
 * When a sentence is done is the stopping rule (qkv_beam_stop):
 *   bound: when no live hypothesis can still enter the n best. A live log P can only fall as
 *          it grows, and it is <= 0, so its best possible score is log P / lp(T), T the
 *          longest length it may reach, lp growing with length (GNMT's lp with alpha >= 0).
 *          This is exact: what stops could never have been overtaken.
 *   count: the same, or as soon as K hypotheses have finished, even when a live one scores
 *          higher already (the common rule; qkv's before 0.x).
 *   hf:    Hugging Face transformers' BeamSearchScorer (early_stopping=False): lp = |Y|^alpha
 *          and a sentence is done once K have finished and the K-th best is at least the best
 *          candidate of the step divided by the current length's lp (not a bound when
 *          alpha > 0: longer hypotheses divide by more); at max_len the live hypotheses of
 *          sentences not done finish as they are. Ties rank the later finished first, and a
 *          finished hypothesis that only ties the K-th is not kept, as there.
 * Every sentence also ends at its max_len tokens, where the live hypotheses finish as they
 * are (as greedy decoding's do). With K = 1 this is greedy decoding: the best extension is
 * the argmax, and an <eos> there ends the sentence. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "inference/beam.h"
#include "inference/decode.h"

typedef struct {
    double score, logprob; /* log P / lp, log P */
    int len;
    int *tokens;           /* (max_len) */
} hypothesis;

typedef struct {
    int n;          /* kept, best first (at most K) */
    int found;      /* finished so far, kept or not */
    hypothesis *h;  /* (K) */
} finished_list;

typedef struct {
    double score;
    int row, token; /* row within the sentence's live rows */
} candidate;

/* Whether a ranks before b: higher score, then lower (row, token), so K = 1 picks the first
 * maximum as greedy decoding's argmax does (and as torch.topk over row * V + token does). */
static int before(const candidate *a, const candidate *b)
{
    if (a->score != b->score) return a->score > b->score;
    if (a->row != b->row) return a->row < b->row;
    return a->token < b->token;
}

/* lp(len): GNMT's ((5 + len) / 6)^alpha, or Hugging Face's len^alpha. */
static double length_penalty(int len, float alpha, qkv_beam_stop stop)
{
    if (alpha == 0.0f) return 1.0;
    return stop == QKV_BEAM_STOP_HF ? pow((double)len, (double)alpha)
                                    : pow((5.0 + len) / 6.0, (double)alpha);
}

/* Inserts a finished hypothesis of `steps` decoder steps (its len tokens, plus <eos> if it
 * ended there) if it ranks among the best K. Equal scores keep the order they finished in;
 * under hf the later ranks first and one that only ties a full list's last is not kept. */
static void finish(finished_list *f, int K, const int *tokens, int len, int steps,
                   double logprob, float alpha, qkv_beam_stop stop)
{
    f->found++;
    const int hf = stop == QKV_BEAM_STOP_HF;
    double score = logprob / length_penalty(steps, alpha, stop);
    if (hf && f->n == K && score <= f->h[K - 1].score) return;
    int at = f->n;
    while (at > 0 && (hf ? f->h[at - 1].score <= score : f->h[at - 1].score < score)) at--;
    if (at >= K) return;
    int *spare = f->n == K ? f->h[K - 1].tokens : f->h[f->n].tokens; /* the slot that goes */
    int last = f->n == K ? K - 1 : f->n;
    for (int i = last; i > at; i--) f->h[i] = f->h[i - 1];
    f->h[at] = (hypothesis){score, logprob, len, spare};
    memcpy(spare, tokens, (size_t)len * sizeof *tokens);
    if (f->n < K) f->n++;
}

/* log-softmax of z (V) as z - logsumexp(z), in double. */
static double log_normaliser(const float *z, int V)
{
    float mx = z[0];
    for (int v = 1; v < V; v++) mx = z[v] > mx ? z[v] : mx;
    double s = 0.0;
    for (int v = 0; v < V; v++) s += exp((double)z[v] - mx);
    return mx + log(s);
}

/* The search's state: the live rows (hypotheses in the cache), their histories and cache
 * slots, and each sentence's finished list. Arrays named 2 are the next step's. */
typedef struct {
    int B, K, N, T, V, n_cand;
    float alpha;
    qkv_beam_stop stop;
    const int *max_lens;        /* (B) or NULL: each sentence's own limit, <= T */
    decoding_rules rules;       /* banned and forced tokens, forced_eos (inference/search.h) */
    int forced_eos;             /* rules.forced_eos as 0 or 1 */
    int *tok, *row_src, *first; /* per row; first[b]: sentence b's first row */
    int *hist, *hist2;          /* (cap, T) the tokens of each row so far */
    int *slot, *slot2;          /* (cap, T) the cache row of each position's key and value */
    double *row_score, *lse;
    int *next_parent, *next_tok, *next_src; /* the next rows, per sentence in rank order */
    double *next_score;
    candidate *cand; /* (n_cand) one sentence's best extensions */
    finished_list *fin;
    hypothesis *hyps;
    int *hyp_tokens;
} beam_search;

static void beam_free(beam_search *s)
{
    free(s->tok), free(s->row_src), free(s->first), free(s->hist), free(s->hist2);
    free(s->slot), free(s->slot2), free(s->row_score), free(s->lse), free(s->next_parent);
    free(s->next_tok), free(s->next_src), free(s->next_score), free(s->cand), free(s->fin);
    free(s->hyps), free(s->hyp_tokens);
}

static qkv_status beam_alloc(beam_search *s, int B, int V, const qkv_beam_options *o,
                             const decoding_rules *rules, qkv_error *err)
{
    const int K = o->beam, T = o->max_len;
    const size_t cap = (size_t)B * K;
    memset(s, 0, sizeof *s);
    s->B = B, s->K = K, s->N = o->n_best, s->T = T, s->V = V, s->alpha = o->alpha;
    s->stop = o->stop, s->max_lens = o->max_lens;
    s->rules = *rules, s->forced_eos = rules->forced_eos != 0;
    s->n_cand = 2 * K < K * V ? 2 * K : K * V;
    int **ints[] = {&s->tok, &s->row_src, &s->next_parent, &s->next_tok, &s->next_src};
    for (size_t i = 0; i < sizeof ints / sizeof *ints; i++) *ints[i] = malloc(cap * sizeof(int));
    int **rows[] = {&s->hist, &s->hist2, &s->slot, &s->slot2};
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) *rows[i] = malloc(cap * T * sizeof(int));
    s->first = malloc(((size_t)B + 1) * sizeof *s->first);
    s->row_score = malloc(cap * sizeof *s->row_score), s->lse = malloc(cap * sizeof *s->lse);
    s->next_score = malloc(cap * sizeof *s->next_score);
    s->cand = malloc((size_t)s->n_cand * sizeof *s->cand);
    s->fin = calloc((size_t)B, sizeof *s->fin);
    s->hyps = calloc(cap, sizeof *s->hyps);
    s->hyp_tokens = malloc(cap * T * sizeof *s->hyp_tokens);
    if (!s->tok || !s->row_src || !s->next_parent || !s->next_tok || !s->next_src || !s->hist ||
        !s->hist2 || !s->slot || !s->slot2 || !s->first || !s->row_score || !s->lse ||
        !s->next_score || !s->cand || !s->fin || !s->hyps || !s->hyp_tokens) {
        beam_free(s);
        return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for %d x %d hypotheses", B, K);
    }
    for (int b = 0; b < B; b++) {
        s->fin[b].h = s->hyps + (size_t)b * K;
        for (int k = 0; k < K; k++) s->fin[b].h[k].tokens = s->hyp_tokens + ((size_t)b * K + k) * T;
        /* one live hypothesis, the start token, per sentence */
        s->tok[b] = rules->start, s->row_src[b] = b, s->row_score[b] = 0.0, s->first[b] = b;
    }
    s->first[B] = B;
    return QKV_OK;
}

/* Candidate x among the n best so far (want at most), in rank order. */
static void rank(candidate *cand, int *n, int want, candidate x)
{
    if (*n == want && !before(&x, &cand[*n - 1])) return;
    int at = *n < want ? (*n)++ : *n - 1;
    while (at > 0 && before(&x, &cand[at - 1])) cand[at] = cand[at - 1], at--;
    cand[at] = x;
}

/* The best extensions of the nr rows from r0 at output position t (logits (rows, V)), into
 * s->cand in rank order; returns how many. The rules apply after normalising, as Hugging
 * Face's logits processors do in its beam search: a banned token is never a candidate, and a
 * forced one is the only candidate, with probability 1. */
static int rank_extensions(beam_search *s, const float *logits, int r0, int nr, int t)
{
    const int V = s->V, forced = rules_forced(&s->rules, t);
    const int want = s->n_cand < nr * V ? s->n_cand : nr * V;
    int n = 0;
    for (int k = 0; k < nr; k++) {
        const float *z = logits + (size_t)(r0 + k) * V;
        if (forced >= 0) {
            rank(s->cand, &n, want, (candidate){s->row_score[r0 + k], k, forced});
            continue;
        }
        for (int v = 0; v < V; v++)
            if (!rules_banned(&s->rules, v, V))
                rank(s->cand, &n, want,
                     (candidate){s->row_score[r0 + k] + ((double)z[v] - s->lse[r0 + k]), k, v});
    }
    return n;
}

/* Finishes candidate x of rows r0.. as it is, without <eos>, at its sentence's last step t
 * (its length counting the forced <eos> that follows, for a model with forced_eos). */
static void finish_cut(beam_search *s, finished_list *f, const candidate *x, int r0, int t,
                       int scratch_row)
{
    const int T = s->T;
    int *h2 = s->hist2 + (size_t)scratch_row * T; /* scratch: the row is not kept */
    memcpy(h2, s->hist + (size_t)(r0 + x->row) * T, (size_t)t * sizeof *h2);
    h2[t] = x->token;
    finish(f, s->K, h2, t + 1, t + 1 + s->forced_eos, x->score, s->alpha, s->stop);
}

/* Sentence b at step t, from its n ranked extensions of rows r0..: an <eos> among the first
 * K finishes a hypothesis, the K best others are queued as next rows from next_rows on.
 * Returns how many rows the sentence keeps (0 when it is done). */
static int advance_sentence(beam_search *s, int b, int r0, int n, int t, int next_rows)
{
    const int K = s->K, N = s->N, T = s->T, hf = s->stop == QKV_BEAM_STOP_HF;
    const int Tb = s->max_lens ? s->max_lens[b] : T, last = t == Tb - 1;
    finished_list *f = &s->fin[b];
    int live = 0;
    for (int i = 0; i < n && live < K; i++) {
        const candidate *x = &s->cand[i];
        if (x->token == QKV_EOS) {
            if (i < K)
                finish(f, K, s->hist + (size_t)(r0 + x->row) * T, t, t + 1, x->score, s->alpha,
                       s->stop);
        } else if (last && !hf) { /* out of room: finishes as it is */
            finish_cut(s, f, x, r0, t, next_rows);
            live++;
        } else {
            const int r = next_rows + live++;
            s->next_parent[r] = r0 + x->row, s->next_tok[r] = x->token;
            s->next_score[r] = x->score, s->next_src[r] = b;
        }
    }
    if (hf) {
        /* transformers' is_done: K finished, and the K-th is at least the step's best
         * candidate over the current length's lp; else at max_len the live ones finish */
        const int done = f->n >= K &&
                         f->h[K - 1].score >= s->cand[0].score / length_penalty(t + 1, s->alpha,
                                                                                 s->stop);
        if (last && !done)
            for (int i = 0, kept = 0; i < n && kept < K; i++)
                if (s->cand[i].token != QKV_EOS) finish_cut(s, f, &s->cand[i], r0, t, next_rows),
                                                 kept++;
        return done || last || live == 0 ? 0 : live;
    }
    int done = last || live == 0 || (s->stop == QKV_BEAM_STOP_COUNT && f->found >= K);
    if (!done && f->n >= N) /* can the best live hypothesis still enter the n best? */
        done = s->next_score[next_rows] /
                   length_penalty(Tb + s->forced_eos, s->alpha, s->stop) <=
               f->h[N - 1].score;
    return done ? 0 : live;
}

/* The kept rows inherit their parents' histories and cache slots up to t. */
static void inherit_rows(beam_search *s, int rows, int t)
{
    const int T = s->T;
    for (int r = 0; r < rows; r++) {
        int *h = s->hist2 + (size_t)r * T;
        memcpy(h, s->hist + (size_t)s->next_parent[r] * T, (size_t)t * sizeof *h);
        h[t] = s->next_tok[r];
        memcpy(s->slot2 + (size_t)r * T, s->slot + (size_t)s->next_parent[r] * T,
               (size_t)(t + 1) * sizeof *s->slot2);
        s->tok[r] = s->next_tok[r], s->row_src[r] = s->next_src[r];
        s->row_score[r] = s->next_score[r];
    }
    int *swap = s->hist;
    s->hist = s->hist2, s->hist2 = swap;
    swap = s->slot, s->slot = s->slot2, s->slot2 = swap;
}

/* The options a search of B sentences accepts, with T_cap the longest length possible. */
static qkv_status check_options(const qkv_beam_options *o, int B, int T_cap, qkv_error *err)
{
    const int K = o->beam, N = o->n_best, T = o->max_len;
    if (K < 1 || N < 1 || N > K)
        return qkv_fail(err, QKV_ERR_ARG, "beam %d and n_best %d: need 1 <= n_best <= beam", K,
                        N);
    if (!(o->alpha >= 0.0f) || !isfinite(o->alpha))
        return qkv_fail(err, QKV_ERR_ARG, "length penalty alpha %g must be finite and >= 0",
                        (double)o->alpha);
    if ((unsigned)o->stop > QKV_BEAM_STOP_HF)
        return qkv_fail(err, QKV_ERR_ARG, "unknown beam stopping rule %d", (int)o->stop);
    if (T <= 0 || T > T_cap)
        return qkv_fail(err, QKV_ERR_ARG, "max_len %d outside [1, %d] (the model's maximum "
                        "length)", T, T_cap);
    for (int b = 0; o->max_lens && b < B; b++)
        if (o->max_lens[b] < 1 || o->max_lens[b] > T)
            return qkv_fail(err, QKV_ERR_ARG, "sentence %d: max_len %d outside [1, %d]", b,
                            o->max_lens[b], T);
    if ((size_t)B * K > (size_t)1 << 30)
        return qkv_fail(err, QKV_ERR_ARG, "%d sentences x beam %d: too many hypotheses", B, K);
    return QKV_OK;
}

static void write_results(const beam_search *s, qkv_beam_results *results)
{
    const int N = s->N, T = s->T;
    for (int b = 0; b < s->B; b++)
        for (int k = 0; k < N; k++) {
            const size_t i = (size_t)b * N + k;
            const hypothesis *h = k < s->fin[b].n ? &s->fin[b].h[k] : NULL;
            results->len[i] = h ? h->len : -1;
            if (h) memcpy(results->ids + i * T, h->tokens, (size_t)h->len * sizeof *results->ids);
            if (results->score) results->score[i] = h ? h->score : -INFINITY;
            if (results->logprob) results->logprob[i] = h ? h->logprob : -INFINITY;
        }
}

/* The search itself, over any step function (one that returns NULL ends it). */
static void run_search(beam_search *s, beam_step_fn step, void *ctx)
{
    const int B = s->B, T = s->T, V = s->V;
    int rows = B;
    for (int t = 0; t < T && rows > 0; t++) {
        for (int r = 0; r < rows; r++) s->slot[(size_t)r * T + t] = r; /* where the step writes */
        const float *logits = step(ctx, rows, s->row_src, s->tok, s->hist, s->slot, T, t);
        if (!logits) return; /* the step failed: it says why */
        #pragma omp parallel for if (rows > 1)
        for (int r = 0; r < rows; r++) s->lse[r] = log_normaliser(logits + (size_t)r * V, V);
        int next_rows = 0;
        for (int b = 0; b < B; b++) {
            const int r0 = s->first[b], nr = s->first[b + 1] - s->first[b];
            s->first[b] = next_rows;
            if (nr == 0) continue; /* done */
            const int n = rank_extensions(s, logits, r0, nr, t);
            next_rows += advance_sentence(s, b, r0, n, t, next_rows);
        }
        s->first[B] = next_rows;
        inherit_rows(s, next_rows, t);
        rows = next_rows;
    }
}

qkv_status beam_search_steps(beam_step_fn step, void *ctx, int B, int V, int T_cap,
                             const decoding_rules *rules, const qkv_beam_options *o,
                             qkv_beam_results *results, qkv_error *err)
{
    qkv_status stt = check_options(o, B, T_cap, err);
    if (stt || B < 1) return stt;
    beam_search s;
    if ((stt = beam_alloc(&s, B, V, o, rules, err))) return stt;
    run_search(&s, step, ctx);
    write_results(&s, results);
    beam_free(&s);
    return QKV_OK;
}

/* The decoder as a step function: row r of a step is cache row r, at position t, reading the
 * source of its sentence, its earlier positions where its ancestors wrote them. */
typedef struct {
    decoder *d;
    int *row, *pos; /* (rows) */
    qkv_status st;  /* the first failure of a step */
    qkv_error *err;
} model_step;

static const float *model_logits(void *ctx, int rows, const int *row_src, const int *tok,
                                 const int *hist, const int *slot, int T, int t)
{
    model_step *ms = ctx;
    (void)hist;
    for (int r = 0; r < rows; r++) ms->row[r] = r, ms->pos[r] = t;
    const decoder_rows dr = {rows, ms->row, ms->pos, row_src, slot, T};
    float *logits = NULL;
    if (!ms->st) ms->st = decoder_step(ms->d, &dr, tok, &logits, ms->err);
    return ms->st ? NULL : logits;
}

qkv_status beam_decode(qkv_transformer *m, const int *src, const int *src_valid, int B,
                       int src_len, const qkv_beam_options *o, const decoding_rules *rules,
                       qkv_beam_results *results, qkv_error *err)
{
    const int K = o->beam, T = o->max_len;
    qkv_status stt = check_options(o, B, qkv_transformer_get_config(m)->max_len, err);
    if (stt || B < 1) return stt;
    model_step ms = {NULL, NULL, NULL, QKV_OK, err};
    beam_search s;
    stt = decoder_create_transformer(&ms.d, m, B * K, T, B, src_len, err);
    if (!stt) stt = decoder_encode(ms.d, src, src_valid, B, src_len, NULL, err);
    const decoder_info info = ms.d ? decoder_get_info(ms.d) : (decoder_info){0};
    const decoding_rules own = decoding_rules_of(&info);
    if (!stt) stt = beam_alloc(&s, B, info.vocab, o, rules ? rules : &own, err);
    if (!stt) {
        ms.row = malloc((size_t)B * K * sizeof *ms.row);
        ms.pos = malloc((size_t)B * K * sizeof *ms.pos);
        if (!ms.row || !ms.pos) stt = qkv_fail(err, QKV_ERR_NOMEM, "out of memory for a beam");
        if (!stt) run_search(&s, model_logits, &ms);
        if (!stt && !(stt = ms.st)) write_results(&s, results);
        beam_free(&s);
    }
    free(ms.row), free(ms.pos);
    decoder_free(ms.d);
    return stt;
}

qkv_status qkv_transformer_beam(qkv_transformer *m, const int *src, const int *src_valid,
                                int B, int src_len, const qkv_beam_options *o,
                                qkv_beam_results *results, qkv_error *err)
{
    return beam_decode(m, src, src_valid, B, src_len, o, NULL, results, err);
}
