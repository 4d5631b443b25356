/* Beam search (Wu et al. 2016, "Google's Neural Machine Translation System", section 7) with
 * the decoder's key-value cache, for a batch of sentences at once.
 *
 * Each sentence keeps up to K live hypotheses, each a row of the cache. A step runs the
 * decoder on every live row, then each sentence ranks the 2K best one-token extensions of its
 * rows by log P(y_1..t | x): an <eos> among the first K finishes a hypothesis, scored
 * log P(Y | x) / lp(Y) with lp(Y) = ((5 + |Y|) / 6)^alpha; the K best others live on. Rows are
 * then gathered from their parents, which also drops the rows of sentences that are done, so
 * a step costs the live hypotheses only. What a row inherits is its history and, per
 * position, the cache row (slot) where its ancestor's key and value lie: each key and value
 * is written once, into the cache row of the hypothesis that computed it, and never moves,
 * so reordering costs t integers per row where copying the cache would cost t keys and
 * values per layer (25 MB a step at t = 256 with 4 rows of a 6-layer, 512-wide model).
 * A sentence is done when it has K finished hypotheses, when no live one can still enter its
 * n best (a live score can only fall, and lp grows at most to lp(max_len)), or at max_len
 * tokens, where the live hypotheses finish as they are (as greedy decoding's do). With K = 1
 * this is greedy decoding: the best extension is the argmax, and an <eos> there ends the
 * sentence. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "inference/decode.h"

typedef struct {
    double score, logprob; /* log P / lp, log P */
    int len;
    int *tokens;           /* (max_len) */
} hypothesis;

typedef struct {
    int n;          /* kept, best first (at most K) */
    int found;      /* finished so far, kept or not */
    int done;
    hypothesis *h;  /* (K) */
} finished_list;

typedef struct {
    double score;
    int row, token; /* row within the sentence's live rows */
} candidate;

/* Whether a ranks before b: higher score, then lower (row, token), so K = 1 picks the first
 * maximum as greedy decoding's argmax does. */
static int before(const candidate *a, const candidate *b)
{
    if (a->score != b->score) return a->score > b->score;
    if (a->row != b->row) return a->row < b->row;
    return a->token < b->token;
}

static double length_penalty(int len, float alpha)
{
    return alpha == 0.0f ? 1.0 : pow((5.0 + len) / 6.0, (double)alpha);
}

/* Inserts a finished hypothesis of `steps` decoder steps (its len tokens, plus <eos> if it
 * ended there) if it ranks among the best K; equal scores keep the order they finished in. */
static void finish(finished_list *f, int K, const int *tokens, int len, int steps,
                   double logprob, float alpha)
{
    f->found++;
    double score = logprob / length_penalty(steps, alpha);
    int at = f->n;
    while (at > 0 && f->h[at - 1].score < score) at--;
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

qkv_status qkv_transformer_beam(qkv_transformer *m, const int *src, const int *src_valid,
                                int B, int src_len, const qkv_beam_options *o,
                                qkv_beam_results *results, qkv_error *err)
{
    int *out = results->ids, *out_len = results->len;
    double *score = results->score, *logprob = results->logprob;
    const qkv_transformer_config *c = &m->cfg;
    const int K = o->beam, N = o->n_best, T = o->max_len, V = c->tgt_vocab;
    if (K < 1 || N < 1 || N > K)
        return qkv_fail(err, QKV_ERR_ARG, "beam %d and n_best %d: need 1 <= n_best <= beam", K,
                        N);
    if (!(o->alpha >= 0.0f) || !isfinite(o->alpha))
        return qkv_fail(err, QKV_ERR_ARG, "length penalty alpha %g must be finite and >= 0",
                        (double)o->alpha);
    if (T <= 0 || T > c->max_len)
        return qkv_fail(err, QKV_ERR_ARG, "max_len %d outside [1, %d] (the model's maximum "
                        "length)", T, c->max_len);
    if (B < 1) return QKV_OK;
    for (int b = 0; b < B; b++)
        if (src_valid[b] < 0 || src_valid[b] > src_len)
            return qkv_fail(err, QKV_ERR_ARG, "source %d: valid length %d outside [0, %d]", b,
                            src_valid[b], src_len);
    if ((size_t)B * K > (size_t)1 << 30)
        return qkv_fail(err, QKV_ERR_ARG, "%d sentences x beam %d: too many hypotheses", B, K);
    const int cap = B * K, n_cand = 2 * K < K * V ? 2 * K : K * V;
    decode_state st;
    qkv_status stt = decode_begin(&st, m, src, src_valid, B, src_len, cap, T, err);
    if (stt) return stt;
    int *tok = malloc((size_t)cap * sizeof *tok), *row_src = malloc((size_t)cap * sizeof *row_src);
    int *first = malloc(((size_t)B + 1) * sizeof *first); /* sentence b's rows: first[b].. */
    int *hist = malloc((size_t)cap * T * sizeof *hist), *hist2 = malloc((size_t)cap * T * sizeof *hist2);
    /* slot[r * T + j]: the cache row that holds position j of row r's keys and values */
    int *slot = malloc((size_t)cap * T * sizeof *slot);
    int *slot2 = malloc((size_t)cap * T * sizeof *slot2);
    double *row_score = malloc((size_t)cap * sizeof *row_score);
    double *lse = malloc((size_t)cap * sizeof *lse);
    /* the next rows: parent, token, score, per sentence in rank order */
    int *next_parent = malloc((size_t)cap * sizeof *next_parent);
    int *next_tok = malloc((size_t)cap * sizeof *next_tok), *next_src = malloc((size_t)cap * sizeof *next_src);
    double *next_score = malloc((size_t)cap * sizeof *next_score);
    candidate *cand = malloc((size_t)n_cand * sizeof *cand);
    finished_list *fin = calloc((size_t)B, sizeof *fin);
    hypothesis *hyps = calloc((size_t)B * K, sizeof *hyps);
    int *hyp_tokens = malloc((size_t)B * K * T * sizeof *hyp_tokens);
    if (!slot || !slot2 || !tok || !row_src || !first || !hist || !hist2 || !row_score ||
        !lse || !next_parent || !next_tok || !next_src || !next_score || !cand || !fin ||
        !hyps || !hyp_tokens) {
        stt = qkv_fail(err, QKV_ERR_NOMEM, "out of memory for %d x %d hypotheses", B, K);
        goto done;
    }
    for (int b = 0; b < B; b++) {
        fin[b].h = hyps + (size_t)b * K;
        for (int k = 0; k < K; k++) fin[b].h[k].tokens = hyp_tokens + ((size_t)b * K + k) * T;
        /* one live hypothesis, <bos>, per sentence */
        tok[b] = QKV_BOS, row_src[b] = b, row_score[b] = 0.0, first[b] = b;
    }
    first[B] = B;
    int rows = B;
    const double lp_max = length_penalty(T, o->alpha);
    for (int t = 0; t < T && rows > 0; t++) {
        for (int r = 0; r < rows; r++) slot[(size_t)r * T + t] = r; /* where the step writes */
        st.B = rows, st.row_src = row_src, st.slot = slot;
        decode_step(m, &st, tok, t, src_valid);
        #pragma omp parallel for if (rows > 1)
        for (int r = 0; r < rows; r++) lse[r] = log_normaliser(st.logits + (size_t)r * V, V);
        int next_rows = 0;
        for (int b = 0; b < B; b++) {
            const int r0 = first[b], nr = first[b + 1] - first[b];
            first[b] = next_rows;
            if (nr == 0) continue; /* done */
            /* the n_cand best extensions of the sentence's rows, in rank order */
            int n = 0;
            const int want = n_cand < nr * V ? n_cand : nr * V;
            for (int k = 0; k < nr; k++) {
                const float *z = st.logits + (size_t)(r0 + k) * V;
                for (int v = 0; v < V; v++) {
                    candidate x = {row_score[r0 + k] + ((double)z[v] - lse[r0 + k]), k, v};
                    if (n == want && !before(&x, &cand[n - 1])) continue;
                    int at = n < want ? n++ : n - 1;
                    while (at > 0 && before(&x, &cand[at - 1])) cand[at] = cand[at - 1], at--;
                    cand[at] = x;
                }
            }
            finished_list *f = &fin[b];
            int live = 0;
            for (int i = 0; i < n && live < K; i++) {
                const candidate *x = &cand[i];
                const int *h = hist + (size_t)(r0 + x->row) * T;
                if (x->token == QKV_EOS) {
                    if (i < K) finish(f, K, h, t, t + 1, x->score, o->alpha);
                } else if (t == T - 1) { /* out of room: finishes as it is */
                    int *h2 = hist2 + (size_t)next_rows * T; /* scratch: the row is not kept */
                    memcpy(h2, h, (size_t)t * sizeof *h2);
                    h2[t] = x->token;
                    finish(f, K, h2, t + 1, t + 1, x->score, o->alpha);
                    live++;
                } else {
                    next_parent[next_rows + live] = r0 + x->row;
                    next_tok[next_rows + live] = x->token;
                    next_score[next_rows + live] = x->score;
                    next_src[next_rows + live] = b;
                    live++;
                }
            }
            int done = t == T - 1 || live == 0 || f->found >= K;
            if (!done && f->n >= N) /* can the best live hypothesis still enter the n best? */
                done = next_score[next_rows] / lp_max <= f->h[N - 1].score;
            if (!done) next_rows += live;
        }
        first[B] = next_rows;
        /* the kept rows inherit their parents' histories and cache slots up to t */
        for (int r = 0; r < next_rows; r++) {
            int *h = hist2 + (size_t)r * T;
            memcpy(h, hist + (size_t)next_parent[r] * T, (size_t)t * sizeof *h);
            h[t] = next_tok[r];
            memcpy(slot2 + (size_t)r * T, slot + (size_t)next_parent[r] * T,
                   (size_t)(t + 1) * sizeof *slot2);
            tok[r] = next_tok[r], row_src[r] = next_src[r], row_score[r] = next_score[r];
        }
        int *hs = hist;
        hist = hist2, hist2 = hs;
        hs = slot, slot = slot2, slot2 = hs;
        rows = next_rows;
    }
    for (int b = 0; b < B; b++)
        for (int k = 0; k < N; k++) {
            const size_t i = (size_t)b * N + k;
            const hypothesis *h = k < fin[b].n ? &fin[b].h[k] : NULL;
            out_len[i] = h ? h->len : -1;
            if (h) memcpy(out + i * T, h->tokens, (size_t)h->len * sizeof *out);
            if (score) score[i] = h ? h->score : -INFINITY;
            if (logprob) logprob[i] = h ? h->logprob : -INFINITY;
        }
done:
    decode_end(&st);
    free(slot), free(slot2);
    free(tok), free(row_src), free(first), free(hist), free(hist2), free(row_score), free(lse);
    free(next_parent), free(next_tok), free(next_src), free(next_score), free(cand), free(fin);
    free(hyps), free(hyp_tokens);
    return stt;
}
