/* SPDX-License-Identifier: MIT */
/* Beam search: beam 1 is greedy decoding exactly; the scores it reports are the teacher-forced
 * log-probabilities of its outputs; a wider beam finds sequences at least as probable as
 * greedy's on random models; with a beam as wide as every sequence (K = V^L) it finds the
 * exact best and the exact n best, with and without a length penalty; a sentence's result is
 * the same alone and in a batch; bad options are refused. Over scripted logits (a hash of the
 * prefix, tests/parity/make_beam_reference.py): every stopping rule gives the reference's
 * hypotheses token for token (transformers' own BeamSearchScorer for the hf rules), the exact
 * rule finds better hypotheses where the count rule stops early, and transformers' rules
 * rank as their stops do (hf-never, hf, hf-early). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inference/beam.h"
#include "test_util.h"

/* Raises the output bias of <eos> so that random models end sentences at varied lengths. */
static void favour_eos(qkv_transformer *m, float bias)
{
    for (int i = 0; i < qkv_transformer_num_tensors(m); i++) {
        qkv_param_info t = qkv_transformer_tensor(m, i);
        if (!strcmp(t.name, "output.b")) qkv_transformer_params(m)[t.offset + QKV_EOS] += bias;
    }
}

static qkv_transformer *random_model(int src_vocab, int tgt_vocab, int pre_norm, uint64_t seed)
{
    qkv_transformer_config cfg = qkv_transformer_default_config();
    cfg.src_vocab = src_vocab, cfg.tgt_vocab = tgt_vocab, cfg.dropout = 0.0f, cfg.bias = 1;
    cfg.pre_norm = pre_norm, cfg.final_norm = pre_norm, cfg.max_len = 32;
    cfg.d_model = 16, cfg.heads = 2, cfg.ffn = 24;
    qkv_transformer *m;
    assert_int_equal(qkv_transformer_create(&m, &cfg, seed, NULL), QKV_OK);
    /* sharper distributions than the initialisation's, so beams and greedy differ often */
    float *p = qkv_transformer_params(m);
    for (size_t i = 0; i < qkv_transformer_num_params(m); i++) p[i] *= 1.5f;
    return m;
}

/* log P(tokens [+ <eos>] | source) from a teacher-forced pass, in double. */
static double sequence_logprob(qkv_transformer *m, const int *src, int src_len,
                               const int *tokens, int len, int eos)
{
    const int V = qkv_transformer_get_config(m)->tgt_vocab, T = len + eos;
    int *tin = malloc((size_t)T * sizeof *tin), *tout = malloc((size_t)T * sizeof *tout);
    float *logits = tu_zeros((size_t)T * V);
    for (int t = 0; t < T; t++) {
        tin[t] = t ? tokens[t - 1] : QKV_BOS;
        tout[t] = t < len ? tokens[t] : QKV_EOS;
    }
    int valid = src_len;
    qkv_batch b = {1, src_len, T, src, &valid, tin, tout};
    assert_int_equal(qkv_transformer_logits(m, &b, logits, NULL), QKV_OK);
    double lp = 0.0;
    for (int t = 0; t < T; t++) {
        const float *z = logits + (size_t)t * V;
        double mx = z[0], s = 0.0;
        for (int v = 1; v < V; v++) mx = z[v] > mx ? z[v] : mx;
        for (int v = 0; v < V; v++) s += exp(z[v] - mx);
        lp += z[tout[t]] - mx - log(s);
    }
    free(tin), free(tout), free(logits);
    return lp;
}

enum { NB = 4, SL = 6 };
static const int SRC[NB * SL] = {5, 6, 7, 8, 3, 1, 9, 10, 3, 1, 1, 1,
                                 11, 12, 13, 14, 15, 3, 7, 3, 1, 1, 1, 1};
static const int VALID[NB] = {5, 3, 6, 2};

/* K = 1 gives greedy's ids, token for token, for a batch and every maximum length. */
static void test_beam1_is_greedy(void **state)
{
    (void)state;
    int eos_seen = 0, trunc_seen = 0;
    for (int variant = 0; variant < 6; variant++) {
        const int V = variant < 3 ? 8 : 40;
        qkv_transformer *m = random_model(20, V, variant & 1, 100 + variant);
        favour_eos(m, 0.5f * (float)variant);
        for (int ml = 1; ml <= 12; ml += 5) {
            int g[NB * 12], gl[NB], bo[NB * 12], bl[NB];
            double score[NB], lp[NB];
            assert_int_equal(qkv_transformer_greedy(m, SRC, VALID, NB, SL, ml, g, gl, NULL), QKV_OK);
            qkv_beam_options o = {1, 1, ml, 0.0f, QKV_BEAM_STOP_BOUND, NULL};
            assert_int_equal(qkv_transformer_beam(m, SRC, VALID, NB, SL, &o,
                                                  &(qkv_beam_results){bo, bl, score, lp},
                                                  NULL), QKV_OK);
            for (int b = 0; b < NB; b++) {
                assert_int_equal(bl[b], gl[b]);
                assert_memory_equal(bo + b * ml, g + b * ml, (size_t)gl[b] * sizeof *g);
                eos_seen += gl[b] < ml, trunc_seen += gl[b] == ml;
                assert_true(score[b] == lp[b]); /* alpha = 0: no penalty */
                double want = sequence_logprob(m, SRC + b * SL, VALID[b], g + b * ml, gl[b],
                                               gl[b] < ml);
                assert_true(fabs(lp[b] - want) <= 1e-4 * (1 + fabs(want)));
            }
        }
        qkv_transformer_free(m);
    }
    print_message("greedy ended %d times at <eos>, %d at max_len\n", eos_seen, trunc_seen);
    assert_true(eos_seen > 5 && trunc_seen > 5); /* both ways of ending were compared */
}

/* With alpha = 0 a wider beam's best is at least as probable as greedy's output on these
 * random models (beam search does not promise it in general: greedy's path can fall out of
 * the beam), and every reported log-probability is the teacher-forced one. */
static void test_wider_beam_not_worse(void **state)
{
    (void)state;
    int better = 0, total = 0;
    for (int variant = 0; variant < 8; variant++) {
        qkv_transformer *m = random_model(20, variant < 4 ? 10 : 30, variant & 1, 200 + variant);
        favour_eos(m, 0.3f * (float)variant);
        const int ml = 10;
        int g[NB * ml], gl[NB];
        assert_int_equal(qkv_transformer_greedy(m, SRC, VALID, NB, SL, ml, g, gl, NULL), QKV_OK);
        for (int K = 2; K <= 8; K *= 2) {
            int bo[NB * 2 * ml], bl[NB * 2];
            double score[NB * 2], lp[NB * 2];
            qkv_beam_options o = {K, 2, ml, 0.0f, QKV_BEAM_STOP_BOUND, NULL};
            assert_int_equal(qkv_transformer_beam(m, SRC, VALID, NB, SL, &o,
                                                  &(qkv_beam_results){bo, bl, score, lp},
                                                  NULL), QKV_OK);
            for (int b = 0; b < NB; b++) {
                double lg = sequence_logprob(m, SRC + b * SL, VALID[b], g + b * ml, gl[b],
                                             gl[b] < ml);
                for (int k = 0; k < 2; k++) {
                    const int i = b * 2 + k;
                    assert_true(bl[i] >= 0 && bl[i] <= ml);
                    double want = sequence_logprob(m, SRC + b * SL, VALID[b], bo + i * ml,
                                                   bl[i], bl[i] < ml);
                    assert_true(fabs(lp[i] - want) <= 1e-4 * (1 + fabs(want)));
                }
                assert_true(score[b * 2] >= score[b * 2 + 1]); /* best first */
                double lb = sequence_logprob(m, SRC + b * SL, VALID[b], bo + b * 2 * ml,
                                             bl[b * 2], bl[b * 2] < ml);
                if (lb < lg)
                    fail_msg("variant %d, K %d, sentence %d: beam %.6f < greedy %.6f", variant,
                             K, b, lb, lg);
                better += lb > lg, total++;
            }
        }
        qkv_transformer_free(m);
    }
    print_message("beam beat greedy in %d of %d searches\n", better, total);
    assert_true(better > 0); /* the comparison has teeth */
}

/* A tiny vocabulary and length, every sequence enumerated: beam K = V^L returns the exact
 * best sequence and the exact n best, with and without the length penalty. */
static void test_exhaustive_beam_is_exact(void **state)
{
    (void)state;
    enum { V = 5, L = 3, NBEST = 6, MAXSEQ = 128 };
    for (int variant = 0; variant < 4; variant++) {
        qkv_transformer *m = random_model(20, V, variant & 1, 300 + variant);
        const float alpha = variant < 2 ? 0.0f : 0.8f;
        for (int b = 0; b < NB; b++) {
            const int *src = SRC + b * SL;
            /* every sequence: k < L tokens then <eos>, or L tokens cut off */
            double scores[MAXSEQ];
            int n = 0;
            for (int k = 0; k <= L; k++) {
                int count = 1;
                for (int i = 0; i < k; i++) count *= V - 1;
                for (int c = 0; c < count; c++) {
                    int tokens[L], x = c;
                    for (int i = 0; i < k; i++) {
                        int v = x % (V - 1);
                        x /= V - 1;
                        tokens[i] = v >= QKV_EOS ? v + 1 : v; /* any id but <eos> */
                    }
                    int eos = k < L, len = k + eos;
                    double lp = sequence_logprob(m, src, VALID[b], tokens, k, eos);
                    scores[n++] = lp / pow((5.0 + len) / 6.0, alpha);
                }
            }
            /* the NBEST best scores, sorted */
            for (int i = 0; i < NBEST; i++)
                for (int j = i + 1; j < n; j++)
                    if (scores[j] > scores[i]) {
                        double t = scores[i];
                        scores[i] = scores[j], scores[j] = t;
                    }
            int K = 1;
            for (int i = 0; i < L; i++) K *= V; /* 125 >= every candidate of every step */
            int out[NBEST * L], out_len[NBEST];
            double score[NBEST], lp[NBEST];
            qkv_beam_options o = {K, NBEST, L, alpha, QKV_BEAM_STOP_BOUND, NULL};
            int valid = VALID[b];
            assert_int_equal(qkv_transformer_beam(m, src, &valid, 1, SL, &o,
                                                  &(qkv_beam_results){out, out_len, score, lp},
                                                  NULL), QKV_OK);
            for (int i = 0; i < NBEST; i++) {
                assert_true(out_len[i] >= 0);
                if (fabs(score[i] - scores[i]) > 1e-4 * (1 + fabs(scores[i])))
                    fail_msg("variant %d sentence %d: hypothesis %d scores %.6f, the %d-th best "
                             "sequence %.6f", variant, b, i, score[i], i + 1, scores[i]);
                /* and the score belongs to the sequence returned */
                int eos = out_len[i] < L;
                double want = sequence_logprob(m, src, VALID[b], out + i * L, out_len[i], eos);
                assert_true(fabs(lp[i] - want) <= 1e-4 * (1 + fabs(want)));
            }
        }
        qkv_transformer_free(m);
    }
}

/* A sentence's hypotheses and scores are the same alone and in any batch. */
/* Scores agree to float32 rounding (tol 1e-5) with a float32 cache; with a bf16 one a
 * cross-attention key projected in another batch shape can differ in its last float32 bit and
 * so round to the neighbouring bf16 value (2^-8 of it): tol 1e-3. */
static void check_batch_independence(qkv_kv_cache kv, double tol)
{
    enum { K = 4, NBEST = 3, ML = 9 };
    for (int variant = 0; variant < 2; variant++) {
        qkv_transformer *m = random_model(20, 12, variant, 400 + variant);
        assert_int_equal(qkv_transformer_set_kv_cache(m, kv, NULL), QKV_OK);
        int out[NB * NBEST * ML], len[NB * NBEST];
        double score[NB * NBEST];
        qkv_beam_options o = {K, NBEST, ML, 0.6f, QKV_BEAM_STOP_BOUND, NULL};
        assert_int_equal(qkv_transformer_beam(m, SRC, VALID, NB, SL, &o,
                                              &(qkv_beam_results){out, len, score, NULL},
                                              NULL), QKV_OK);
        for (int b = 0; b < NB; b++) {
            int one[NBEST * ML], one_len[NBEST];
            double one_score[NBEST];
            /* alone, with its own (shorter) padding */
            qkv_beam_results one_out = {one, one_len, one_score, NULL};
            assert_int_equal(qkv_transformer_beam(m, SRC + b * SL, &VALID[b], 1, VALID[b], &o,
                                                  &one_out, NULL), QKV_OK);
            for (int k = 0; k < NBEST; k++) {
                const int i = b * NBEST + k;
                assert_int_equal(one_len[k], len[i]);
                assert_memory_equal(one + k * ML, out + (size_t)i * ML, (size_t)len[i] * sizeof *one);
                assert_true(fabs(one_score[k] - score[i]) <= tol * (1 + fabs(score[i])));
            }
        }
        /* and in a batch of two, in the other order */
        int pair_src[2 * SL], pair_valid[2] = {VALID[3], VALID[0]};
        memcpy(pair_src, SRC + 3 * SL, SL * sizeof *pair_src);
        memcpy(pair_src + SL, SRC, SL * sizeof *pair_src);
        int two[2 * NBEST * ML], two_len[2 * NBEST];
        assert_int_equal(qkv_transformer_beam(m, pair_src, pair_valid, 2, SL, &o,
                                              &(qkv_beam_results){two, two_len, NULL, NULL},
                                              NULL), QKV_OK);
        for (int k = 0; k < NBEST; k++) {
            assert_int_equal(two_len[k], len[3 * NBEST + k]);
            assert_memory_equal(two + k * ML, out + (size_t)(3 * NBEST + k) * ML,
                                (size_t)two_len[k] * sizeof *two);
            assert_int_equal(two_len[NBEST + k], len[k]);
            assert_memory_equal(two + (NBEST + k) * ML, out + (size_t)k * ML,
                                (size_t)len[k] * sizeof *two);
        }
        qkv_transformer_free(m);
    }
}

static void test_batch_independence(void **state)
{
    (void)state;
    check_batch_independence(QKV_KV_CACHE_FP32, 1e-5);
}

/* With a bf16 key-value cache: beam 1 is still greedy decoding exactly (both read the same
 * bf16 cache), a batch's beams are still each sentence's alone, and every hypothesis's
 * reported log-probability is still its teacher-forced one (float32, no cache) up to the
 * cache's rounding: a hypothesis that read another's keys after the beams were reordered
 * would be far off. */
static void test_bf16_cache(void **state)
{
    (void)state;
    enum { K = 4, ML = 10 };
    check_batch_independence(QKV_KV_CACHE_BF16, 1e-3);
    double worst = 0;
    for (int variant = 0; variant < 4; variant++) {
        qkv_transformer *m = random_model(20, variant < 2 ? 8 : 40, variant & 1, 700 + variant);
        favour_eos(m, 0.5f * (float)variant);
        assert_int_equal(qkv_transformer_set_kv_cache(m, QKV_KV_CACHE_BF16, NULL), QKV_OK);
        int g[NB * ML], gl[NB], bo[NB * K * ML], bl[NB * K];
        double score[NB * K], lp[NB * K];
        assert_int_equal(qkv_transformer_greedy(m, SRC, VALID, NB, SL, ML, g, gl, NULL), QKV_OK);
        qkv_beam_options o1 = {1, 1, ML, 0.0f, QKV_BEAM_STOP_BOUND, NULL};
        assert_int_equal(qkv_transformer_beam(m, SRC, VALID, NB, SL, &o1,
                                              &(qkv_beam_results){bo, bl, score, lp}, NULL),
                         QKV_OK);
        for (int b = 0; b < NB; b++) {
            assert_int_equal(bl[b], gl[b]);
            assert_memory_equal(bo + b * ML, g + b * ML, (size_t)gl[b] * sizeof *g);
        }
        qkv_beam_options o = {K, K, ML, 0.0f, QKV_BEAM_STOP_BOUND, NULL};
        assert_int_equal(qkv_transformer_beam(m, SRC, VALID, NB, SL, &o,
                                              &(qkv_beam_results){bo, bl, score, lp}, NULL),
                         QKV_OK);
        for (int i = 0; i < NB * K; i++) {
            const int b = i / K;
            const double want = sequence_logprob(m, SRC + b * SL, VALID[b], bo + (size_t)i * ML,
                                                 bl[i], bl[i] < ML);
            const double e = fabs(lp[i] - want) / (1 + fabs(want));
            worst = e > worst ? e : worst;
            if (e > 1e-2)
                fail_msg("hypothesis %d: log-probability %g with the bf16 cache, %g teacher-"
                         "forced", i, lp[i], want);
        }
        qkv_transformer_free(m);
    }
    print_message("bf16 cache: log-probabilities within %.2g (relative) of teacher forcing\n",
                  worst);
}

/* A longer length penalty favours longer hypotheses: the best's length never shrinks as
 * alpha grows, and the n best come out best first. */
static void test_length_penalty(void **state)
{
    (void)state;
    qkv_transformer *m = random_model(20, 10, 0, 500);
    enum { K = 6, ML = 12 };
    int prev[NB] = {0};
    const float alphas[] = {0.0f, 0.6f, 1.5f, 4.0f};
    for (int a = 0; a < 4; a++) {
        int out[NB * K * ML], len[NB * K];
        double score[NB * K], lp[NB * K];
        qkv_beam_options o = {K, K, ML, alphas[a], QKV_BEAM_STOP_BOUND, NULL};
        assert_int_equal(qkv_transformer_beam(m, SRC, VALID, NB, SL, &o,
                                              &(qkv_beam_results){out, len, score, lp},
                                              NULL), QKV_OK);
        for (int b = 0; b < NB; b++) {
            for (int k = 0; k + 1 < K; k++)
                if (len[b * K + k + 1] >= 0) assert_true(score[b * K + k] >= score[b * K + k + 1]);
            for (int k = 0; k < K; k++) {
                if (len[b * K + k] < 0) continue;
                int n = len[b * K + k] + (len[b * K + k] < ML);
                double want = lp[b * K + k] / pow((5.0 + n) / 6.0, alphas[a]);
                assert_true(fabs(score[b * K + k] - want) <= 1e-9 * (1 + fabs(want)));
            }
            assert_true(len[b * K] >= prev[b]);
            prev[b] = len[b * K];
        }
    }
    qkv_transformer_free(m);
}

static void test_rejects_bad_options(void **state)
{
    (void)state;
    qkv_transformer *m = random_model(20, 10, 0, 600);
    int out[64], len[8];
    qkv_error err = {0};
#define BAD(K, N, L, A) {K, N, L, A, QKV_BEAM_STOP_BOUND, NULL}
    qkv_beam_options bad[] = {BAD(0, 1, 5, 0.0f), BAD(2, 3, 5, 0.0f), BAD(2, 0, 5, 0.0f),
                              BAD(2, 1, 5, -0.5f), BAD(2, 1, 0, 0.0f), BAD(2, 1, 33, 0.0f),
                              {2, 1, 5, 0.0f, (qkv_beam_stop)7, NULL},
                              {2, 1, 5, 0.0f, (qkv_beam_stop)(QKV_BEAM_STOP_HF_NEVER + 1), NULL}};
#undef BAD
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++)
        assert_int_equal(qkv_transformer_beam(m, SRC, VALID, 1, SL, &bad[k],
                                              &(qkv_beam_results){out, len, NULL, NULL},
                                              &err), QKV_ERR_ARG);
    int too_long = SL + 1;
    qkv_beam_options o = {2, 1, 5, 0.0f, QKV_BEAM_STOP_BOUND, NULL};
    assert_int_equal(qkv_transformer_beam(m, SRC, &too_long, 1, SL, &o,
                                          &(qkv_beam_results){out, len, NULL, NULL},
                                          &err), QKV_ERR_ARG);
    assert_non_null(strstr(err.msg, "valid length"));
    qkv_transformer_free(m);
}

/* ---- scripted logits: the hash of make_beam_reference.py, bit for bit ---- */

static uint64_t mix(uint64_t z)
{
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

typedef struct {
    uint64_t seed;
    int V;
    float *logits; /* (rows, V) */
} scripted;

static const float *scripted_logits(void *ctx, int rows, const int *row_src, const int *tok,
                                    const int *hist, const int *slot, int T, int t)
{
    scripted *sc = ctx;
    (void)tok, (void)slot;
    for (int r = 0; r < rows; r++) {
        uint64_t h = mix(mix(sc->seed) ^ (uint64_t)row_src[r]);
        for (int j = 0; j < t; j++) h = mix(h ^ (uint64_t)hist[(size_t)r * T + j]);
        for (int v = 0; v < sc->V; v++) {
            const uint64_t k = mix(h ^ (uint64_t)(v + 1000)) >> 40;
            double x = (double)((int64_t)(k % 4001) - 2000) / 500.0;
            if (v == QKV_EOS) x += 0.5 * t - 1.5;
            else if (v < QKV_N_RESERVED) x = -30.0;
            sc->logits[(size_t)r * sc->V + v] = (float)x;
        }
    }
    return sc->logits;
}

static void scripted_search(uint64_t seed, int B, int V, int forced_eos,
                            const qkv_beam_options *o, int *ids, int *len, double *score)
{
    scripted sc = {seed, V, tu_zeros((size_t)B * o->beam * V)};
    qkv_error err = {0};
    const decoding_rules rules = {QKV_BOS, 0, 0, forced_eos, NULL, 0};
    if (beam_search_steps(scripted_logits, &sc, B, V, o->max_len, &rules, o,
                          &(qkv_beam_results){ids, len, score, NULL}, &err))
        fail_msg("%s", err.msg);
    free(sc.logits);
}

/* Each rule, token for token, as the reference searches of make_beam_reference.py. */
static void test_scripted_rules_match_reference(void **state)
{
    (void)state;
    qkv_tensor_file cases;
    tu_reference_load(&cases, "beam_cases");
    const int n = tu_ref_int(&cases, "n");
    qkv_tensor_file_free(&cases);
    int compared[5] = {0};
    for (int c = 0; c < n; c++) {
        char name[32];
        snprintf(name, sizeof name, "beam_%d", c);
        qkv_tensor_file f;
        tu_reference_load(&f, name);
        const int B = tu_ref_int(&f, "B"), V = tu_ref_int(&f, "V"), T = tu_ref_int(&f, "T");
        const int K = tu_ref_int(&f, "K"), N = tu_ref_int(&f, "N"), mode = tu_ref_int(&f, "mode");
        const int *want_ids = tu_ref_i32(&f, "ids", NULL), *want_len = tu_ref_i32(&f, "len", NULL);
        const float *want_score = tu_ref_f32(&f, "score", NULL);
        const qkv_beam_options o = {K, N, T, tu_ref_float(&f, "alpha"), (qkv_beam_stop)mode,
                                    tu_ref_i32(&f, "max_lens", NULL)};
        int *ids = calloc((size_t)B * N * T, sizeof *ids), *len = malloc((size_t)B * N * sizeof *len);
        double *score = malloc((size_t)B * N * sizeof *score);
        const int forced_eos = tu_ref_int(&f, "forced_eos");
        scripted_search((uint64_t)tu_ref_int(&f, "seed"), B, V, forced_eos, &o, ids, len, score);
        for (int i = 0; i < B * N; i++) {
            if (len[i] != want_len[i] ||
                memcmp(ids + (size_t)i * T, want_ids + (size_t)i * T, (size_t)(len[i] > 0 ? len[i] : 0) * sizeof *ids))
                fail_msg("case %d (rule %d, K %d, n_best %d, alpha %g, forced_eos %d): sentence %d "
                         "hypothesis %d differs (length %d, reference %d)", c, mode, K, N,
                         (double)o.alpha, forced_eos, i / N, i % N, len[i], want_len[i]);
            if (len[i] >= 0 && fabs(score[i] - want_score[i]) > 1e-5 * (1 + fabs(score[i])))
                fail_msg("case %d sentence %d: score %.7f, reference %.7f", c, i / N, score[i],
                         (double)want_score[i]);
        }
        compared[mode] += B;
        free(ids), free(len), free(score);
        qkv_tensor_file_free(&f);
    }
    print_message("sentences compared: bound %d, count %d, hf %d, hf-early %d, hf-never %d\n",
                  compared[0], compared[1], compared[2], compared[3], compared[4]);
    for (int mode = 0; mode < 5; mode++) assert_true(compared[mode] > 0);
}

/* The exact rule never ends worse than the count rule (it runs the same search, longer), and
 * on these logits often better: the count rule stops while a live hypothesis scores higher
 * than every finished one. */
static void test_bound_beats_count(void **state)
{
    (void)state;
    enum { B = 16, V = 14, T = 12 };
    int better = 0, total = 0;
    for (int seed = 0; seed < 12; seed++)
        for (int K = 2; K <= 4; K++) {
            const float alpha = (float)(seed % 3) * 0.5f;
            int ids[2][B * T], len[2][B];
            double score[2][B];
            for (int rule = 0; rule < 2; rule++) {
                const qkv_beam_options o = {K, 1, T, alpha, (qkv_beam_stop)rule, NULL};
                scripted_search(7000 + (uint64_t)seed, B, V, 0, &o, ids[rule], len[rule],
                                score[rule]);
            }
            for (int b = 0; b < B; b++) {
                if (score[0][b] < score[1][b])
                    fail_msg("seed %d K %d sentence %d: bound %.6f below count %.6f", seed, K, b,
                             score[0][b], score[1][b]);
                better += score[0][b] > score[1][b], total++;
            }
        }
    print_message("the exact rule found a better hypothesis in %d of %d searches\n", better, total);
    assert_true(better > 0); /* 7 of 576 when written */
}

/* transformers' three rules run the same search and differ only in when a sentence stops:
 * hf-early once K have finished, hf (early_stopping=False) at that point or later, hf-never
 * at hf's point or later (lp of the longest length is the largest). A longer search only adds
 * finished hypotheses, so each best is at least the one before it; on these logits the later
 * stops often find a better one. */
static void test_hf_rules_ordered(void **state)
{
    (void)state;
    enum { B = 16, V = 14, T = 12 };
    static const qkv_beam_stop rules[3] = {QKV_BEAM_STOP_HF_EARLY, QKV_BEAM_STOP_HF,
                                           QKV_BEAM_STOP_HF_NEVER};
    int better[2] = {0}, total = 0;
    for (int seed = 0; seed < 12; seed++)
        for (int K = 2; K <= 4; K++) {
            const float alpha = (float)(seed % 3) * 0.5f + 0.5f;
            int ids[3][B * T], len[3][B];
            double score[3][B];
            for (int r = 0; r < 3; r++) {
                const qkv_beam_options o = {K, 1, T, alpha, rules[r], NULL};
                scripted_search(9000 + (uint64_t)seed, B, V, seed % 2, &o, ids[r], len[r],
                                score[r]);
            }
            for (int b = 0; b < B; b++, total++)
                for (int r = 0; r < 2; r++) {
                    if (score[r + 1][b] < score[r][b])
                        fail_msg("seed %d K %d sentence %d: %s %.6f below %s %.6f", seed, K, b,
                                 qkv_beam_stop_name(rules[r + 1]), score[r + 1][b],
                                 qkv_beam_stop_name(rules[r]), score[r][b]);
                    better[r] += score[r + 1][b] > score[r][b];
                }
        }
    print_message("hf beat hf-early in %d of %d searches, hf-never beat hf in %d\n", better[0],
                  total, better[1]);
    assert_true(better[0] > 0 && better[1] > 0);
}

int main(void)
{
    qkv_set_threads(2);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_beam1_is_greedy),
        cmocka_unit_test(test_wider_beam_not_worse),
        cmocka_unit_test(test_exhaustive_beam_is_exact),
        cmocka_unit_test(test_batch_independence),
        cmocka_unit_test(test_bf16_cache),
        cmocka_unit_test(test_length_penalty),
        cmocka_unit_test(test_rejects_bad_options),
        cmocka_unit_test(test_scripted_rules_match_reference),
        cmocka_unit_test(test_bound_beats_count),
        cmocka_unit_test(test_hf_rules_ordered),
    };
    return cmocka_run_group_tests_name("beam", tests, NULL, NULL);
}
