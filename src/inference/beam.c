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
 *   hf-early: the same scorer with early_stopping=True: done as soon as K have finished.
 *   hf-never: with early_stopping="never": as hf, but the step's best candidate is divided
 *          by lp(T), T the longest length a hypothesis may reach (when alpha > 0; lp is 1
 *          otherwise), so that a live one that could still overtake the K-th goes on.
 * Every sentence also ends at its max_len tokens, where the live hypotheses finish as they
 * are (as greedy decoding's do). With K = 1 this is greedy decoding: the best extension is
 * the argmax, and an <eos> there ends the sentence. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "inference/beam.h"
#include "inference/decode.h"
#include "ops/cpu/best.h"

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

/* Whether the rule is one of transformers' BeamSearchScorer's (its lp, ties and max_len). */
static int hf_rule(qkv_beam_stop stop)
{
    return stop == QKV_BEAM_STOP_HF || stop == QKV_BEAM_STOP_HF_EARLY ||
           stop == QKV_BEAM_STOP_HF_NEVER;
}

/* lp(len): GNMT's ((5 + len) / 6)^alpha, or Hugging Face's len^alpha. */
static double length_penalty(int len, float alpha, qkv_beam_stop stop)
{
    if (alpha == 0.0f) return 1.0;
    return hf_rule(stop) ? pow((double)len, (double)alpha)
                         : pow((5.0 + len) / 6.0, (double)alpha);
}

/* Inserts a finished hypothesis of `steps` decoder steps (its len tokens, plus <eos> if it
 * ended there) if it ranks among the best K. Equal scores keep the order they finished in;
 * under hf the later ranks first and one that only ties a full list's last is not kept. */
static void finish(finished_list *f, int K, const int *tokens, int len, int steps,
                   double logprob, float alpha, qkv_beam_stop stop)
{
    f->found++;
    const int hf = hf_rule(stop);
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

/* ---- one sentence's search ---------------------------------------------------------------- */

/* A sentence's live hypotheses (k < live: hypothesis k in cache row rows[k]), their histories
 * and ancestry (arrays named 2 are the next step's), and its finished list. */
struct beam_sentence {
    int K, N, T, Tb, V, n_cand;
    float alpha;
    qkv_beam_stop stop;
    decoding_rules rules;       /* banned and forced tokens, forced_eos (inference/search.h) */
    uint32_t banned;            /* the banned ones as best.h's mask */
    int per_row;                /* the best extensions a row can give: n_cand, at most V */
    int *row_ids;               /* (K, per_row) beam_sentence_advance's from the logits */
    float *row_vals;
    int forced_eos;             /* rules.forced_eos as 0 or 1 */
    int src, t, live;           /* source slot, the next output position, live hypotheses */
    int *rows;                  /* (K) its cache rows */
    int *tok;                   /* (K) each live hypothesis's input token at position t */
    double *score, *lse;        /* (K) log P so far; the last step's log normalisers */
    int *hist, *hist2;          /* (K, T) the tokens of each hypothesis so far */
    int *anc, *anc2;            /* (K, T) the cache row of each position's key and value */
    int *next_parent, *next_tok; /* (K) the next hypotheses, in rank order */
    double *next_score;
    int *scratch;               /* (T) a hypothesis cut at its limit */
    candidate *cand;            /* (n_cand) the best extensions */
    finished_list fin;
    hypothesis *h;              /* (K) */
};

qkv_status beam_sentence_create(beam_sentence **out, const qkv_beam_options *o, int max_len,
                                int V, const decoding_rules *rules, const int *rows, int src,
                                qkv_error *err)
{
    *out = NULL;
    const int K = o->beam, T = o->max_len;
    if (K < 1 || T < 1 || max_len < 1 || max_len > T || V < 1)
        return qkv_fail(err, QKV_ERR_ARG, "a beam of %d over %d tokens of at most %d: need beam "
                        ">= 1 and 1 <= max_len <= %d", K, max_len, T, T);
    /* one block: the struct, then the doubles, the candidates, the hypotheses, the ints, the
     * floats */
    const int per_row = 2 * K < V ? 2 * K : V;
    const size_t n_int = (size_t)K * 4 + (size_t)K * T * 5 + T + (size_t)K * per_row;
    const size_t bytes = sizeof(beam_sentence) + (size_t)3 * K * sizeof(double) +
                         (size_t)2 * K * sizeof(candidate) + (size_t)K * sizeof(hypothesis) +
                         n_int * sizeof(int) + (size_t)K * per_row * sizeof(float);
    beam_sentence *b = calloc(1, bytes);
    if (!b) return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for a beam of %d", K);
    b->K = K, b->N = o->n_best, b->T = T, b->Tb = max_len, b->V = V;
    b->n_cand = 2 * K < K * V ? 2 * K : K * V;
    b->alpha = o->alpha, b->stop = o->stop, b->rules = *rules;
    b->forced_eos = rules->forced_eos != 0;
    b->banned = rules_banned_mask(rules, V), b->per_row = per_row;
    b->src = src;
    double *d = (double *)(b + 1);
    b->score = d, b->lse = d + K, b->next_score = d + 2 * K;
    b->cand = (candidate *)(d + 3 * K);
    b->h = (hypothesis *)(b->cand + 2 * K);
    int *i = (int *)(b->h + K);
    int **small[] = {&b->rows, &b->tok, &b->next_parent, &b->next_tok};
    for (size_t k = 0; k < sizeof small / sizeof *small; k++) *small[k] = i, i += K;
    int **big[] = {&b->hist, &b->hist2, &b->anc, &b->anc2};
    for (size_t k = 0; k < sizeof big / sizeof *big; k++) *big[k] = i, i += (size_t)K * T;
    b->fin.h = b->h;
    for (int k = 0; k < K; k++) b->h[k].tokens = i, i += T;
    b->scratch = i, i += T;
    b->row_ids = i, i += (size_t)K * per_row;
    b->row_vals = (float *)i;
    memcpy(b->rows, rows, (size_t)K * sizeof *rows);
    b->live = 1, b->tok[0] = rules->start, b->score[0] = 0.0; /* the start token */
    *out = b;
    return QKV_OK;
}

void beam_sentence_free(beam_sentence *b) { free(b); }
int beam_sentence_live(const beam_sentence *b) { return b->live; }
int beam_sentence_found(const beam_sentence *b) { return b->fin.n < b->N ? b->fin.n : b->N; }

const int *beam_sentence_hypothesis(const beam_sentence *b, int k, int *len, double *score,
                                    double *logprob)
{
    const hypothesis *h = &b->fin.h[k];
    *len = h->len;
    if (score) *score = h->score;
    if (logprob) *logprob = h->logprob;
    return h->tokens;
}

int beam_sentence_list(const beam_sentence *b, step_rows *r)
{
    const int t = b->t;
    for (int k = 0; k < b->live; k++) {
        const int i = r->n++;
        r->row[i] = b->rows[k], r->pos[i] = t, r->src[i] = b->src, r->tok[i] = b->tok[k];
        int *a = r->ancestry + (size_t)i * r->ld;
        memcpy(a, b->anc + (size_t)k * b->T, (size_t)t * sizeof *a);
        a[t] = b->rows[k]; /* where this step writes its key and value */
        if (r->hist) memcpy(r->hist + (size_t)i * r->ld, b->hist + (size_t)k * b->T,
                            (size_t)t * sizeof *r->hist);
    }
    return b->live;
}

/* Candidate x among the n best so far (want at most), in rank order. */
static void rank(candidate *cand, int *n, int want, candidate x)
{
    if (*n == want && !before(&x, &cand[*n - 1])) return;
    int at = *n < want ? (*n)++ : *n - 1;
    while (at > 0 && before(&x, &cand[at - 1])) cand[at] = cand[at - 1], at--;
    cand[at] = x;
}

/* The best extensions of the live hypotheses at output position t, into b->cand in rank
 * order; returns how many. Only each row's best tokens (ids, vals (live, k): its n_cand
 * largest logits, ties to the lower id) can be among them: log P of an extension is the
 * row's score plus its logit less the row's normaliser, so within a row it ranks as the
 * logit does. The rules apply after normalising, as Hugging Face's logits processors do in
 * its beam search: a banned token is never a candidate (nor in the lists), and a forced one
 * is the only candidate, with probability 1. */
static int rank_extensions(beam_sentence *b, const int *ids, const float *vals, int k_row)
{
    const int V = b->V, nr = b->live, forced = rules_forced(&b->rules, b->t);
    const int want = b->n_cand < nr * V ? b->n_cand : nr * V;
    int n = 0;
    for (int k = 0; k < nr; k++) {
        if (forced >= 0) {
            rank(b->cand, &n, want, (candidate){b->score[k], k, forced});
            continue;
        }
        for (int i = 0; i < k_row && ids[(size_t)k * k_row + i] >= 0; i++)
            rank(b->cand, &n, want,
                 (candidate){b->score[k] + ((double)vals[(size_t)k * k_row + i] - b->lse[k]), k,
                             ids[(size_t)k * k_row + i]});
    }
    return n;
}

/* Finishes candidate x as it is, without <eos>, at the sentence's last step (its length
 * counting the forced <eos> that follows, for a model with forced_eos). */
static void finish_cut(beam_sentence *b, const candidate *x)
{
    const int t = b->t;
    memcpy(b->scratch, b->hist + (size_t)x->row * b->T, (size_t)t * sizeof *b->scratch);
    b->scratch[t] = x->token;
    finish(&b->fin, b->K, b->scratch, t + 1, t + 1 + b->forced_eos, x->score, b->alpha, b->stop);
}

/* From the n ranked extensions: an <eos> among the first K finishes a hypothesis, the K best
 * others are queued as next hypotheses. Returns how many live on (0 when it is done). */
static int choose_next(beam_sentence *b, int n)
{
    const int K = b->K, N = b->N, t = b->t, hf = hf_rule(b->stop);
    const int last = t == b->Tb - 1;
    finished_list *f = &b->fin;
    int live = 0;
    for (int i = 0; i < n && live < K; i++) {
        const candidate *x = &b->cand[i];
        if (x->token == QKV_EOS) {
            if (i < K)
                finish(f, K, b->hist + (size_t)x->row * b->T, t, t + 1, x->score, b->alpha,
                       b->stop);
        } else if (last && !hf) { /* out of room: finishes as it is */
            finish_cut(b, x);
            live++;
        } else {
            b->next_parent[live] = x->row, b->next_tok[live] = x->token;
            b->next_score[live++] = x->score;
        }
    }
    if (hf) {
        /* transformers' is_done: K finished, and (early_stopping=False) the K-th is at least
         * the step's best candidate over the current length's lp, or ("never") over the
         * longest length's; else at max_len the live ones finish */
        const int reach = b->stop == QKV_BEAM_STOP_HF_NEVER ? b->Tb + b->forced_eos : t + 1;
        const int done = f->n >= K &&
                         (b->stop == QKV_BEAM_STOP_HF_EARLY ||
                          f->h[K - 1].score >= b->cand[0].score /
                                                   length_penalty(reach, b->alpha, b->stop));
        if (last && !done)
            for (int i = 0, kept = 0; i < n && kept < K; i++)
                if (b->cand[i].token != QKV_EOS) finish_cut(b, &b->cand[i]), kept++;
        return done || last || live == 0 ? 0 : live;
    }
    int done = last || live == 0 || (b->stop == QKV_BEAM_STOP_COUNT && f->found >= K);
    if (!done && f->n >= N) /* can the best live hypothesis still enter the n best? */
        done = b->next_score[0] / length_penalty(b->Tb + b->forced_eos, b->alpha, b->stop) <=
               f->h[N - 1].score;
    return done ? 0 : live;
}

/* The kept hypotheses inherit their parents' histories and ancestry up to t, in the cache
 * rows of their rank (a key and value never move: only these integers do). */
static void inherit(beam_sentence *b, int live)
{
    const int T = b->T, t = b->t;
    for (int k = 0; k < live; k++) {
        const int p = b->next_parent[k];
        int *h = b->hist2 + (size_t)k * T, *a = b->anc2 + (size_t)k * T;
        memcpy(h, b->hist + (size_t)p * T, (size_t)t * sizeof *h);
        h[t] = b->next_tok[k];
        memcpy(a, b->anc + (size_t)p * T, (size_t)t * sizeof *a);
        a[t] = b->rows[p]; /* position t: where the parent wrote it */
        b->tok[k] = b->next_tok[k], b->score[k] = b->next_score[k];
    }
    int *swap = b->hist;
    b->hist = b->hist2, b->hist2 = swap;
    swap = b->anc, b->anc = b->anc2, b->anc2 = swap;
}

int beam_sentence_best(const beam_sentence *b, uint32_t *banned)
{
    *banned = b->banned;
    return b->per_row;
}

void beam_sentence_advance_best(beam_sentence *b, const int *ids, const float *vals, int k,
                                const double *lse)
{
    if (!b->live) return;
    for (int r = 0; r < b->live; r++) b->lse[r] = lse[r];
    const int n = rank_extensions(b, ids, vals, k);
    const int live = choose_next(b, n);
    if (live) inherit(b, live);
    b->live = live, b->t++;
}

void beam_sentence_advance(beam_sentence *b, const float *logits, const double *lse)
{
    if (!b->live) return;
    for (int r = 0; r < b->live; r++) {
        const float *z = logits + (size_t)r * b->V;
        row_best(z, b->V, b->per_row, b->banned, b->row_ids + (size_t)r * b->per_row,
                 b->row_vals + (size_t)r * b->per_row);
        b->lse[r] = lse ? lse[r] : log_normaliser(z, b->V);
    }
    beam_sentence_advance_best(b, b->row_ids, b->row_vals, b->per_row, b->lse);
}

/* ---- a batch of sentences in lockstep ---------------------------------------------------- */

qkv_status step_rows_init(step_rows *r, int cap, int ld, int hist, qkv_error *err)
{
    memset(r, 0, sizeof *r);
    r->cap = cap, r->ld = ld;
    int **ints[] = {&r->row, &r->pos, &r->src, &r->tok};
    for (size_t i = 0; i < sizeof ints / sizeof *ints; i++)
        *ints[i] = malloc((size_t)cap * sizeof(int));
    r->ancestry = malloc((size_t)cap * ld * sizeof *r->ancestry);
    if (hist) r->hist = malloc((size_t)cap * ld * sizeof *r->hist);
    if (r->row && r->pos && r->src && r->tok && r->ancestry && (!hist || r->hist)) return QKV_OK;
    step_rows_free(r);
    return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for a step of %d rows", cap);
}

void step_rows_free(step_rows *r)
{
    free(r->row), free(r->pos), free(r->src), free(r->tok), free(r->ancestry), free(r->hist);
    memset(r, 0, sizeof *r);
}

qkv_status beam_check_options(const qkv_beam_options *o, int B, int T_cap, qkv_error *err)
{
    const int K = o->beam, N = o->n_best, T = o->max_len;
    if (K < 1 || N < 1 || N > K)
        return qkv_fail(err, QKV_ERR_ARG, "beam %d and n_best %d: need 1 <= n_best <= beam", K,
                        N);
    if (!(o->alpha >= 0.0f) || !isfinite(o->alpha))
        return qkv_fail(err, QKV_ERR_ARG, "length penalty alpha %g must be finite and >= 0",
                        (double)o->alpha);
    if ((unsigned)o->stop > QKV_BEAM_STOP_HF_NEVER)
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

/* B sentences searched together: sentence b's hypotheses in cache rows b K .. b K + K - 1 and
 * source slot b; each step lists the live rows sentence by sentence, in rank order. */
typedef struct {
    int B, V;
    beam_sentence **s; /* (B) */
    step_rows rows;
    int *count;        /* (B) rows each listed in the step */
    best_request best; /* each listed row's best tokens (B K, best.k) and normaliser (B K) */
} lockstep;

static void lockstep_free(lockstep *l)
{
    for (int b = 0; l->s && b < l->B; b++) beam_sentence_free(l->s[b]);
    free(l->s), free(l->count), free(l->best.lse), free(l->best.ids), free(l->best.vals);
    step_rows_free(&l->rows);
}

static qkv_status lockstep_init(lockstep *l, int B, int V, const decoding_rules *rules,
                                const qkv_beam_options *o, int hist, qkv_error *err)
{
    const int K = o->beam, T = o->max_len;
    memset(l, 0, sizeof *l);
    l->B = B, l->V = V;
    l->s = calloc((size_t)B, sizeof *l->s);
    l->count = malloc((size_t)B * sizeof *l->count);
    const int per_row = 2 * K < V ? 2 * K : V; /* beam_sentence_best's */
    l->best = (best_request){per_row, rules_banned_mask(rules, V),
                             malloc((size_t)B * K * per_row * sizeof(int)),
                             malloc((size_t)B * K * per_row * sizeof(float)),
                             malloc((size_t)B * K * sizeof(double)), NULL};
    int *rows = malloc((size_t)K * sizeof *rows);
    qkv_status st = l->s && l->count && l->best.ids && l->best.vals && l->best.lse && rows
                        ? step_rows_init(&l->rows, B * K, T, hist, err)
                        : qkv_fail(err, QKV_ERR_NOMEM, "out of memory for %d x %d hypotheses",
                                   B, K);
    for (int b = 0; !st && b < B; b++) {
        for (int k = 0; k < K; k++) rows[k] = b * K + k;
        st = beam_sentence_create(&l->s[b], o, o->max_lens ? o->max_lens[b] : T, V, rules, rows,
                                  b, err);
    }
    free(rows);
    if (st) lockstep_free(l);
    return st;
}

/* One step of the listed rows at position t: l->best filled, or 0 when it failed (and says
 * why). */
typedef int (*lockstep_fn)(lockstep *l, void *ctx, int t);

/* The search itself, over any step (one that returns 0 ends it). */
static void lockstep_run(lockstep *l, lockstep_fn step, void *ctx)
{
    const int T = l->rows.ld, k = l->best.k;
    for (int t = 0; t < T; t++) {
        l->rows.n = 0;
        for (int b = 0; b < l->B; b++) l->count[b] = beam_sentence_list(l->s[b], &l->rows);
        if (!l->rows.n || !step(l, ctx, t)) return;
        for (int b = 0, r0 = 0; b < l->B; r0 += l->count[b++])
            if (l->count[b])
                beam_sentence_advance_best(l->s[b], l->best.ids + (size_t)r0 * k,
                                           l->best.vals + (size_t)r0 * k, k, l->best.lse + r0);
    }
}

/* A step function's logits, each row's best tokens and normaliser from them. */
typedef struct {
    beam_step_fn step;
    void *ctx;
} logits_step;

static int step_logits(lockstep *l, void *ctx, int t)
{
    const logits_step *s = ctx;
    const int rows = l->rows.n, V = l->V, k = l->best.k;
    const float *logits = s->step(s->ctx, rows, l->rows.src, l->rows.tok, l->rows.hist,
                                  l->rows.ancestry, l->rows.ld, t);
    if (!logits) return 0; /* the step failed: it says why */
    #pragma omp parallel for if (rows > 1)
    for (int r = 0; r < rows; r++) {
        const float *z = logits + (size_t)r * V;
        row_best(z, V, k, l->best.banned, l->best.ids + (size_t)r * k,
                 l->best.vals + (size_t)r * k);
        l->best.lse[r] = log_normaliser(z, V);
    }
    return 1;
}

static void write_results(const lockstep *l, const qkv_beam_options *o,
                          qkv_beam_results *results)
{
    const int N = o->n_best, T = o->max_len;
    for (int b = 0; b < l->B; b++)
        for (int k = 0; k < N; k++) {
            const size_t i = (size_t)b * N + k;
            int len = -1;
            double score = -INFINITY, logprob = -INFINITY;
            const int *ids = k < beam_sentence_found(l->s[b])
                                 ? beam_sentence_hypothesis(l->s[b], k, &len, &score, &logprob)
                                 : NULL;
            results->len[i] = len;
            if (ids) memcpy(results->ids + i * T, ids, (size_t)len * sizeof *results->ids);
            if (results->score) results->score[i] = score;
            if (results->logprob) results->logprob[i] = logprob;
        }
}

qkv_status beam_search_steps(beam_step_fn step, void *ctx, int B, int V, int T_cap,
                             const decoding_rules *rules, const qkv_beam_options *o,
                             qkv_beam_results *results, qkv_error *err)
{
    qkv_status stt = beam_check_options(o, B, T_cap, err);
    if (stt || B < 1) return stt;
    lockstep l;
    if ((stt = lockstep_init(&l, B, V, rules, o, 1, err))) return stt;
    logits_step s = {step, ctx};
    lockstep_run(&l, step_logits, &s);
    write_results(&l, o, results);
    lockstep_free(&l);
    return QKV_OK;
}

/* The decoder as a step: the rows as listed, at position t, each reading its sentence's
 * source, its earlier positions where its ancestors wrote them; only the rows' best tokens and
 * normalisers come back (decoder_step_best: at int8 the logits are never written out). */
typedef struct {
    decoder *d;
    qkv_status st;  /* the first failure of a step */
    qkv_error *err;
} model_step;

static int model_best(lockstep *l, void *ctx, int t)
{
    model_step *ms = ctx;
    (void)t;
    const step_rows *r = &l->rows;
    const decoder_rows dr = {r->n, r->row, r->pos, r->src, r->ancestry, r->ld};
    if (!ms->st) ms->st = decoder_step_best(ms->d, &dr, r->tok, &l->best, ms->err);
    return !ms->st;
}

qkv_status beam_decode(qkv_transformer *m, const int *src, const int *src_valid, int B,
                       int src_len, const qkv_beam_options *o, const decoding_rules *rules,
                       qkv_beam_results *results, qkv_error *err)
{
    const int K = o->beam, T = o->max_len;
    qkv_status stt = beam_check_options(o, B, qkv_transformer_get_config(m)->max_len, err);
    if (stt || B < 1) return stt;
    model_step ms = {NULL, QKV_OK, err};
    lockstep l;
    stt = decoder_create_transformer(&ms.d, m, B * K, T, B, src_len, err);
    if (!stt) stt = decoder_encode(ms.d, src, src_valid, B, src_len, NULL, err);
    const decoder_info info = ms.d ? decoder_get_info(ms.d) : (decoder_info){0};
    const decoding_rules own = decoding_rules_of(&info);
    if (!stt && !(stt = lockstep_init(&l, B, info.vocab, rules ? rules : &own, o, 0, err))) {
        lockstep_run(&l, model_best, &ms);
        if (!(stt = ms.st)) write_results(&l, o, results);
        lockstep_free(&l);
    }
    decoder_free(ms.d);
    return stt;
}

qkv_status qkv_transformer_beam(qkv_transformer *m, const int *src, const int *src_valid,
                                int B, int src_len, const qkv_beam_options *o,
                                qkv_beam_results *results, qkv_error *err)
{
    return beam_decode(m, src, src_valid, B, src_len, o, NULL, results, err);
}
