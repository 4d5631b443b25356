/* SPDX-License-Identifier: MIT */
/* BLEU: d2l's sentence score on the chapter's own examples and hand-computed cases, the
 * policy for predictions shorter than k, and corpus BLEU-4 against numbers sacreBLEU 2.6.0
 * printed for the same pairs. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qkv.h"
#include "test_util.h"

static void check_double(const char *what, double got, double want, double tol)
{
    if (!(fabs(got - want) <= tol)) {
        print_error("%s: got %.17g, want %.17g (tolerance %g)\n", what, got, want, tol);
        fail();
    }
}

/* ---------------------------------------------------------------------------------------
 * Words to ids: BLEU sees only ids, so a tiny dictionary turns the test sentences into
 * them (equal words, equal ids), independent of the vocabulary code.
 * ------------------------------------------------------------------------------------- */

typedef struct {
    char words[512][32];
    int n;
} dictionary;

/* The ids of the space-separated words of s; returns how many (at most cap). */
static int ids_of(dictionary *d, const char *s, int *ids, int cap)
{
    int n = 0;
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *save = NULL, *w = strtok_r(buf, " ", &save); w && n < cap;
         w = strtok_r(NULL, " ", &save)) {
        int id = 0;
        while (id < d->n && strcmp(d->words[id], w) != 0) id++;
        if (id == d->n) {
            assert_true(d->n < 512 && strlen(w) < 32);
            strcpy(d->words[d->n++], w);
        }
        ids[n++] = id;
    }
    return n;
}

/* d2l's bleu(pred, label, k) on two sentences given as text. */
static double sentence_bleu(const char *pred, const char *label, int k)
{
    dictionary *d = calloc(1, sizeof *d);
    assert_non_null(d);
    int p[64], l[64];
    int np = ids_of(d, pred, p, 64), nl = ids_of(d, label, l, 64);
    double score = -1.0;
    qkv_error err = {0};
    assert_int_equal(qkv_bleu(&score, p, np, l, nl, k, &err), QKV_OK);
    free(d);
    return score;
}

/* ---------------------------------------------------------------------------------------
 * d2l's sentence BLEU
 * ------------------------------------------------------------------------------------- */

/* The examples d2l's seq2seq chapter prints (k = 2): "go . => va !, bleu 1.000",
 * "he's calm . => il est riche ., bleu 0.658", "i'm home . => je suis en retard ?, bleu
 * 0.447". The last two by hand: equal lengths (no penalty);
 *   il est riche . / il est calme .:        p1 = 3/4, p2 = 1/3 -> (3/4)^(1/2) (1/3)^(1/4)
 *   je suis en retard ? / je suis chez moi .: p1 = 2/5, p2 = 1/4 -> (2/5)^(1/2) (1/4)^(1/4) */
static void test_d2l_examples(void **state)
{
    (void)state;
    check_double("va !", sentence_bleu("va !", "va !", 2), 1.0, 1e-15);
    check_double("j'ai perdu .", sentence_bleu("j'ai perdu .", "j'ai perdu .", 2), 1.0, 1e-15);
    double calm = sentence_bleu("il est riche .", "il est calme .", 2);
    check_double("il est riche .", calm, sqrt(0.75) * pow(1.0 / 3, 0.25), 1e-12);
    check_double("il est riche . (as printed)", round(calm * 1000) / 1000, 0.658, 1e-12);
    double home = sentence_bleu("je suis en retard ?", "je suis chez moi .", 2);
    check_double("je suis en retard ?", home, sqrt(0.4) * pow(0.25, 0.25), 1e-12);
    check_double("je suis en retard ? (as printed)", round(home * 1000) / 1000, 0.447, 1e-12);
}

static void test_brevity_penalty(void **state)
{
    (void)state;
    /* Too short: exp(1 - 4/2) with every n-gram matched. */
    check_double("short", sentence_bleu("a b", "a b c d", 2), exp(-1.0), 1e-15);
    /* Too long is no bonus: exp(min(0, 1 - 2/4)) = 1; p1 = 2/4. */
    check_double("long", sentence_bleu("a b c d", "a b", 1), sqrt(0.5), 1e-15);
}

/* A label n-gram matches at most as often as it occurs: Papineni's "the the the ..."
 * example has p1 = 2/7, not 7/7. */
static void test_clipping(void **state)
{
    (void)state;
    check_double("the x7",
                 sentence_bleu("the the the the the the the", "the cat is on the mat", 1),
                 sqrt(2.0 / 7), 1e-15);
    /* Bigrams clip too: "a a a" has bigrams (a a) x2, the label one; p1 = 3/3, p2 = 1/2,
     * len_label = 4 > 3 gives the penalty exp(1 - 4/3). */
    check_double("a a a", sentence_bleu("a a a", "a a b a", 2),
                 exp(1.0 - 4.0 / 3) * pow(1.0 / 2, 0.25), 1e-15);
    /* Order matters from n = 2 on: a permutation keeps p1 = 1 but matches no bigram. */
    check_double("c b a", sentence_bleu("c b a", "a b c", 2), 0.0, 0.0);
    check_double("c b a, k=1", sentence_bleu("c b a", "a b c", 1), 1.0, 1e-15);
}

/* d2l divides by zero when the prediction has fewer than k tokens; we score 0 (see bleu.c),
 * like d2l does when the label is the short one. */
static void test_short_prediction_scores_zero(void **state)
{
    (void)state;
    check_double("pred shorter than k", sentence_bleu("va", "va", 2), 0.0, 0.0);
    check_double("pred of k tokens", sentence_bleu("va !", "va !", 2), 1.0, 1e-15);
    check_double("label shorter than k (as d2l)", sentence_bleu("va ! ! !", "va", 2), 0.0, 0.0);
    double s = -1.0;
    int label[2] = {5, 7};
    assert_int_equal(qkv_bleu(&s, NULL, 0, label, 2, 1, NULL), QKV_OK);
    check_double("empty prediction", s, 0.0, 0.0);
    assert_int_equal(qkv_bleu(&s, label, 2, NULL, 0, 1, NULL), QKV_OK);
    check_double("empty label", s, 0.0, 0.0);
}

static void test_bad_arguments(void **state)
{
    (void)state;
    int x[2] = {1, 2};
    double s = -1.0;
    qkv_error err = {0};
    assert_int_equal(qkv_bleu(&s, x, 2, x, 2, 0, &err), QKV_ERR_ARG);
    assert_non_null(strstr(err.msg, "k must be"));
    assert_int_equal(qkv_bleu(&s, x, -1, x, 2, 1, &err), QKV_ERR_ARG);
    qkv_bleu_stats st = {0};
    assert_int_equal(qkv_bleu_stats_add(&st, x, 2, x, -3, &err), QKV_ERR_ARG);
    const int *h[1] = {x};
    int bad_len[1] = {-1}, len[1] = {2};
    assert_int_equal(qkv_corpus_bleu(&s, h, bad_len, h, len, 1, &err), QKV_ERR_ARG);
    assert_non_null(strstr(err.msg, "pair 0"));
}

/* Ids are compared, never used as indices: extreme values and long sequences are fine. */
static void test_any_ids_and_long_sequences(void **state)
{
    (void)state;
    int pred[4] = {INT_MIN, INT_MAX, -1, 0}, label[4] = {INT_MIN, INT_MAX, -1, 0};
    double s = -1.0;
    assert_int_equal(qkv_bleu(&s, pred, 4, label, 4, 4, NULL), QKV_OK);
    check_double("extreme ids", s, 1.0, 1e-15);
    label[3] = INT_MAX; /* pred's last bigram (-1, 0) and 0 itself no longer match */
    assert_int_equal(qkv_bleu(&s, pred, 4, label, 4, 2, NULL), QKV_OK);
    check_double("extreme ids, one change", s, sqrt(0.75) * pow(2.0 / 3, 0.25), 1e-15);

    /* 200000 tokens of a period-7 pattern against the same pattern shifted by one: both
     * hold the same 7 n-gram types per order, so matches = sum over types of the smaller
     * count, counted here by the residue i % 7 where the type starts. */
    int L = 200000;
    int *a = malloc((size_t)L * sizeof *a), *b = malloc((size_t)L * sizeof *b);
    assert_true(a && b);
    for (int i = 0; i < L; i++) a[i] = i % 7, b[i] = (i + 1) % 7;
    qkv_bleu_stats st = {0};
    assert_int_equal(qkv_bleu_stats_add(&st, a, L, b, L, NULL), QKV_OK);
    for (int n = 1; n <= QKV_BLEU_ORDER; n++) {
        int64_t want = 0, count_a[7] = {0}, count_b[7] = {0};
        for (int i = 0; i + n <= L; i++) count_a[i % 7]++, count_b[(i + 1) % 7]++;
        for (int r = 0; r < 7; r++) want += count_a[r] < count_b[r] ? count_a[r] : count_b[r];
        assert_int_equal(st.matches[n - 1], want);
        assert_int_equal(st.totals[n - 1], L - n + 1);
    }
    free(a);
    free(b);
}

/* ---------------------------------------------------------------------------------------
 * Corpus BLEU-4 against sacreBLEU
 * Pairs (hypothesis, reference) are French sentences of fra.txt, preprocessed as d2l,
 * with hypotheses randomly perturbed; expectations are
 *   sacrebleu.corpus_bleu(hyps, [refs], tokenize='none', smooth_method='none',
 *                         force=True).score / 100
 * from sacreBLEU 2.6.0 (with its counts, totals, sys_len, ref_len). The same harness agreed
 * to 1e-15 on 12 corpora of 1 to 400 pairs, and qkv_bleu with d2l's Python bleu() on all
 * 400 pairs for k = 1..4.
 * ------------------------------------------------------------------------------------- */

typedef struct {
    const char *hyp, *ref;
} pair;

static const pair pairs_5_10[] = {
    {"il semble qu'il y aura bientôt une qui vois-tu",
     "il semble qu'il y aura bientôt une tempête ."},
    {"doit ma fille .", "c'est ma fille ."},
    {"vous ne pas très concernées", "vous ne semblez pas très concernées ."},
    {"je ne parle pas français bien . pour accomplir cette tâche assez",
     "je ne parle pas assez bien français pour accomplir cette tâche ."},
    {"! continue", "continue !"},
};

static const pair pairs_37_41[] = {
    {"nous .h reprendront demandé de . revenir", "nous lui avons demandé de revenir ."},
    {"j'aimerais une tasse de café vous plaît .",
     "j'aimerais une tasse de café , s'il vous plaît ."},
    {"tu es une vraie loque désespéré .", "tu es une vraie loque ."},
    {"drôle pour autant que je sache , ne s'est . encore mariée pas",
     "pour autant que je sache , elle ne s'est pas encore mariée ."},
};

/* No 4-gram matches: sacreBLEU says 0.0. */
static const pair pairs_0_2[] = {
    {"comment oses-tu ? parler ainsi", "comment oses-tu ainsi parler ?"},
    {"ne . te combien pourrais", "je ne pourrais te mentir ."},
};

static qkv_bleu_stats corpus_stats(const pair *pairs, int count, double *score)
{
    dictionary *d = calloc(1, sizeof *d);
    assert_non_null(d);
    int h[16][32], r[16][32], hl[16], rl[16];
    const int *hp[16], *rp[16];
    qkv_bleu_stats st = {0};
    assert_true(count <= 16);
    for (int i = 0; i < count; i++) {
        hl[i] = ids_of(d, pairs[i].hyp, h[i], 32);
        rl[i] = ids_of(d, pairs[i].ref, r[i], 32);
        hp[i] = h[i], rp[i] = r[i];
        assert_int_equal(qkv_bleu_stats_add(&st, h[i], hl[i], r[i], rl[i], NULL), QKV_OK);
    }
    assert_int_equal(qkv_corpus_bleu(score, hp, hl, rp, rl, count, NULL), QKV_OK);
    check_double("stats vs corpus", qkv_bleu_stats_score(&st), *score, 0.0);
    free(d);
    return st;
}

static void check_counts(const qkv_bleu_stats *st, const int64_t matches[4],
                         const int64_t totals[4], int64_t sys_len, int64_t ref_len)
{
    for (int n = 0; n < 4; n++) {
        assert_int_equal(st->matches[n], matches[n]);
        assert_int_equal(st->totals[n], totals[n]);
    }
    assert_int_equal(st->hyp_len, sys_len);
    assert_int_equal(st->ref_len, ref_len);
}

static void test_corpus_bleu_matches_sacrebleu(void **state)
{
    (void)state;
    double s;
    qkv_bleu_stats st = corpus_stats(pairs_5_10, 5, &s);
    check_counts(&st, (int64_t[]){29, 17, 11, 6}, (int64_t[]){32, 27, 22, 18}, 32, 34);
    check_double("pairs 5..10", s, 0.5216774645891071, 1e-14);

    st = corpus_stats(pairs_37_41, 4, &s);
    check_counts(&st, (int64_t[]){31, 18, 11, 7}, (int64_t[]){35, 31, 27, 23}, 35, 36);
    check_double("pairs 37..41", s, 0.48836269609248634, 1e-14);

    /* One pair by hand: "... café vous plaît ." (8 tokens) against "... café , s'il vous
     * plaît ." (10): 8/8 unigrams, 6/7 bigrams, 4/6 trigrams, 2/5 4-grams, shorter: BP. */
    st = corpus_stats(pairs_37_41 + 1, 1, &s);
    check_counts(&st, (int64_t[]){8, 6, 4, 2}, (int64_t[]){8, 7, 6, 5}, 8, 10);
    double by_hand = exp((log(8.0 / 8) + log(6.0 / 7) + log(4.0 / 6) + log(2.0 / 5)) / 4) *
                     exp(1.0 - 10.0 / 8);
    check_double("pair 38 by hand", s, by_hand, 1e-15);
    check_double("pair 38, sacreBLEU", s, 0.5384952356064088, 1e-14);

    st = corpus_stats(pairs_0_2, 2, &s);
    check_counts(&st, (int64_t[]){9, 1, 0, 0}, (int64_t[]){10, 8, 6, 4}, 10, 11);
    check_double("pairs 0..2", s, 0.0, 0.0);
}

static void test_corpus_bleu_edges(void **state)
{
    (void)state;
    double s = -1.0;
    assert_int_equal(qkv_corpus_bleu(&s, NULL, NULL, NULL, NULL, 0, NULL), QKV_OK);
    check_double("empty corpus", s, 0.0, 0.0);
    static const pair same[] = {{"a b c d e", "a b c d e"}, {"x y z w", "x y z w"}};
    corpus_stats(same, 2, &s);
    check_double("perfect", s, 1.0, 1e-15);
    /* Hypotheses of three tokens have no 4-grams at all: 0, as sacreBLEU without smoothing. */
    static const pair short3[] = {{"a b c", "a b c"}};
    corpus_stats(short3, 1, &s);
    check_double("no 4-grams", s, 0.0, 0.0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_d2l_examples),
        cmocka_unit_test(test_brevity_penalty),
        cmocka_unit_test(test_clipping),
        cmocka_unit_test(test_short_prediction_scores_zero),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_any_ids_and_long_sequences),
        cmocka_unit_test(test_corpus_bleu_matches_sacrebleu),
        cmocka_unit_test(test_corpus_bleu_edges),
    };
    return cmocka_run_group_tests_name("bleu", tests, NULL, NULL);
}
