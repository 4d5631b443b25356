/* SPDX-License-Identifier: MIT */
/*
 * BLEU (Papineni et al., 2002): d2l.ai's sentence-level variant, with which its translation
 * chapters score each example, and the standard corpus BLEU-4 that sacreBLEU reports.
 *
 * Both rest on clipped n-gram matches: an n-gram of the hypothesis counts as matched at
 * most as many times as it occurs in the reference, i.e. sum over distinct n-grams g of
 * min(count_hyp(g), count_ref(g)).
 */
#include <limits.h>
#include <math.h>
#include <stdlib.h>

#include "core/internal.h"
#include "qkv.h"

/* ---------------------------------------------------------------------------------------
 * Clipped n-gram matches
 *
 * Every n-gram gets a class id, equal n-grams sharing one, so that counting is a sort and a
 * walk over runs of equal ids. The n-gram starting at position e is its (n-1)-gram prefix
 * followed by one token, so its class is the rank of the pair (class of the prefix, last
 * token) among all such pairs: comparing two n-grams costs O(1) whatever n, and order n
 * costs one O(L log L) sort.
 * ------------------------------------------------------------------------------------- */

typedef struct {
    int prefix; /* class of the (n-1)-gram at `at` (the token itself for n = 1) */
    int last;   /* the n-gram's last token (0 for n = 1) */
    int at;     /* start: hypothesis positions first, then reference positions */
} ngram;

static int by_ngram(const void *pa, const void *pb)
{
    const ngram *a = pa, *b = pb;
    if (a->prefix != b->prefix) return a->prefix < b->prefix ? -1 : 1;
    return (a->last > b->last) - (a->last < b->last);
}

typedef struct {
    const int *hyp, *ref;
    int len_hyp, len_ref;
    int order;   /* n of the classes in class_at (0 before the first call) */
    int *class_at; /* (len_hyp + len_ref) class of the n-gram starting there */
    ngram *grams;  /* (len_hyp + len_ref) scratch */
} ngram_counter;

static qkv_status counter_init(ngram_counter *c, const int *hyp, int len_hyp, const int *ref,
                               int len_ref, qkv_error *err)
{
    *c = (ngram_counter){hyp, ref, len_hyp, len_ref, 0, NULL, NULL};
    if (len_hyp < 0 || len_ref < 0 || len_hyp > INT_MAX - len_ref)
        return qkv_fail(err, QKV_ERR_ARG, "BLEU: bad lengths %d (hypothesis), %d (reference)",
                        len_hyp, len_ref);
    size_t total = (size_t)len_hyp + (size_t)len_ref + 1;
    c->class_at = malloc(total * sizeof *c->class_at);
    c->grams = malloc(total * sizeof *c->grams);
    if (!c->class_at || !c->grams) {
        free(c->class_at);
        free(c->grams);
        return qkv_fail(err, QKV_ERR_NOMEM, "BLEU: out of memory for %zu tokens", total - 1);
    }
    return QKV_OK;
}

static void counter_free(ngram_counter *c)
{
    free(c->class_at);
    free(c->grams);
}

/* Clipped matches of the next order, n = c->order + 1 (call for n = 1, 2, ... in turn). */
static int64_t clipped_matches(ngram_counter *c)
{
    int n = ++c->order, m = 0;
    for (int e = 0; e < c->len_hyp + c->len_ref; e++) {
        int in_hyp = e < c->len_hyp, p = in_hyp ? e : e - c->len_hyp;
        const int *seq = in_hyp ? c->hyp : c->ref;
        if (p + n > (in_hyp ? c->len_hyp : c->len_ref)) continue; /* runs off the end */
        c->grams[m++] = n == 1 ? (ngram){seq[p], 0, e}
                               : (ngram){c->class_at[e], seq[p + n - 1], e};
    }
    qsort(c->grams, (size_t)m, sizeof *c->grams, by_ngram);
    int64_t matches = 0;
    for (int a = 0, cls = 0; a < m; cls++) {
        int b = a, in_hyp = 0;
        for (; b < m && by_ngram(&c->grams[a], &c->grams[b]) == 0; b++) {
            in_hyp += c->grams[b].at < c->len_hyp;
            c->class_at[c->grams[b].at] = cls;
        }
        int in_ref = (b - a) - in_hyp;
        matches += in_hyp < in_ref ? in_hyp : in_ref;
        a = b;
    }
    return matches;
}

/* ---------------------------------------------------------------------------------------
 * d2l's sentence BLEU
 * ------------------------------------------------------------------------------------- */

qkv_status qkv_bleu(double *score, const int *pred, int len_pred, const int *label,
                    int len_label, int k, qkv_error *err)
{
    *score = 0.0;
    if (k < 1) return qkv_fail(err, QKV_ERR_ARG, "BLEU: k must be at least 1, got %d", k);
    ngram_counter c;
    qkv_status st = counter_init(&c, pred, len_pred, label, len_label, err);
    if (st != QKV_OK) return st;
    /* A prediction shorter than k has no k-grams: d2l divides 0 by 0 there. We count that
     * order's precision as 0, so the product is 0: the same score d2l gives when the label
     * is the one too short (p_n = 0 / (len_pred - n + 1)), and what corpus BLEU does with an
     * order that has no match. Scoring short sentences needs a small k; d2l uses k = 2. */
    if (len_pred >= k) {
        double s = exp(fmin(0.0, 1.0 - (double)len_label / len_pred)); /* brevity penalty */
        for (int n = 1; n <= k; n++) {
            double p_n = (double)clipped_matches(&c) / (len_pred - n + 1);
            s *= pow(p_n, pow(0.5, n)); /* longer n-grams weigh more: p_n^(1/2^n) */
        }
        *score = s;
    }
    counter_free(&c);
    return QKV_OK;
}

/* ---------------------------------------------------------------------------------------
 * Corpus BLEU-4
 * ------------------------------------------------------------------------------------- */

qkv_status qkv_bleu_stats_add(qkv_bleu_stats *st, const int *hyp, int hyp_len,
                              const int *ref, int ref_len, qkv_error *err)
{
    ngram_counter c;
    qkv_status s = counter_init(&c, hyp, hyp_len, ref, ref_len, err);
    if (s != QKV_OK) return s;
    for (int n = 1; n <= QKV_BLEU_ORDER; n++) {
        st->matches[n - 1] += clipped_matches(&c);
        st->totals[n - 1] += hyp_len >= n ? hyp_len - n + 1 : 0;
    }
    st->hyp_len += hyp_len;
    st->ref_len += ref_len;
    counter_free(&c);
    return QKV_OK;
}

double qkv_bleu_stats_score(const qkv_bleu_stats *st)
{
    if (st->hyp_len == 0) return 0.0;
    double log_precision = 0.0;
    for (int n = 0; n < QKV_BLEU_ORDER; n++) {
        if (st->matches[n] == 0) return 0.0; /* geometric mean with a zero factor */
        log_precision += log((double)st->matches[n] / (double)st->totals[n]);
    }
    double bp = st->hyp_len < st->ref_len
                    ? exp(1.0 - (double)st->ref_len / (double)st->hyp_len)
                    : 1.0;
    return bp * exp(log_precision / QKV_BLEU_ORDER);
}

qkv_status qkv_corpus_bleu(double *score, const int *const *hyps, const int *hyp_lens,
                           const int *const *refs, const int *ref_lens, int count,
                           qkv_error *err)
{
    *score = 0.0;
    qkv_bleu_stats st = {0};
    for (int i = 0; i < count; i++) {
        qkv_error why = {0};
        if (qkv_bleu_stats_add(&st, hyps[i], hyp_lens[i], refs[i], ref_lens[i], &why) != QKV_OK)
            return qkv_fail(err, why.code, "pair %d: %s", i, why.msg);
    }
    *score = qkv_bleu_stats_score(&st);
    return QKV_OK;
}
