/* SPDX-License-Identifier: MIT */
/* The decoder-only language model: finite-difference gradient checks of the whole model
 * (softmax and linear attention, post- and pre-norm, tied), causality, generation with the KV
 * cache and the recurrent state against the full forward pass, sampling, character and byte
 * vocabularies, model directories, and training with an exact resume. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "models/language_model_internal.h" /* lm_config_params */
#include "test_util.h"

enum { B = 2, T = 5, V = 11 };

static const int ids[B * T] = {4, 5, 6, 7, 8, 9, 10, 4, 4, 6};
static const int targets[B * T] = {5, 6, 7, 8, 9, 10, 4, 4, 6, 1}; /* the last is <pad> */

typedef struct {
    qkv_lm *m;
    float p;
} lm_ctx;

static double lm_mean_loss(void *p)
{
    lm_ctx *c = p;
    double sum = 0.0;
    int tokens = 0;
    qkv_error err = {0};
    const qkv_loss_options pass = {.train = c->p > 0, .dropout_seed = 99};
    if (qkv_lm_loss(c->m, ids, targets, B, T, &pass, &sum, &tokens, &err))
        fail_msg("loss: %s", err.msg);
    return sum / tokens;
}

static qkv_lm_config small_config(qkv_attention_kind attention, int pre_norm)
{
    qkv_lm_config c = qkv_lm_default_config();
    c.vocab = V, c.d_model = 8, c.heads = 2, c.ffn = 12, c.layers = 2, c.max_len = 8;
    c.dropout = 0.0f, c.pre_norm = pre_norm, c.final_norm = pre_norm, c.attention = attention;
    return c;
}

/* GELU throughout: with ReLU, some of the 2 x 10 x 12 hidden units sit within a step h of
 * their kink for most seeds, and central differences there are wrong by O(1) (ReLU models
 * are checked against PyTorch in test_lm_parity.c instead). */
static void check_variant(qkv_lm_config cfg)
{
    lm_ctx c = {NULL, cfg.dropout};
    qkv_error err = {0};
    cfg.act = QKV_ACT_GELU;
    assert_int_equal(qkv_lm_create(&c.m, &cfg, 7, &err), QKV_OK);
    float *params = qkv_lm_params(c.m), *grads = qkv_lm_grads(c.m);
    double sum;
    int tokens;
    const qkv_loss_options pass = {.backward = 1, .train = cfg.dropout > 0, .dropout_seed = 99};
    assert_int_equal(qkv_lm_loss(c.m, ids, targets, B, T, &pass, &sum, &tokens, &err), QKV_OK);
    assert_int_equal(tokens, B * T - 1); /* <pad> is not counted */
    /* central differences with a small step: two blocks are more curved than one layer */
    for (int t = 0; t < qkv_lm_num_tensors(c.m); t++) {
        qkv_param_info info = qkv_lm_tensor(c.m, t);
        tu_gradcheck(info.name, params + info.offset, info.numel, grads + info.offset,
                     lm_mean_loss, &c, 3e-3f, TU_FD_TOL, 12);
    }
    qkv_lm_free(c.m);
}

static void test_gradcheck_softmax_post_norm(void **state)
{
    (void)state;
    qkv_lm_config c = small_config(QKV_ATTENTION_SOFTMAX, 0);
    c.bias = 0;
    check_variant(c);
}

static void test_gradcheck_softmax_pre_norm_tied_learned_dropout(void **state)
{
    (void)state;
    qkv_lm_config c = small_config(QKV_ATTENTION_SOFTMAX, 1);
    c.tie = 1, c.learned_pos = 1, c.dropout = 0.1f;
    check_variant(c);
}

static void test_gradcheck_linear_post_norm_tied(void **state)
{
    (void)state;
    qkv_lm_config c = small_config(QKV_ATTENTION_LINEAR, 0);
    c.tie = 1;
    check_variant(c);
}

static void test_gradcheck_linear_pre_norm_learned_dropout(void **state)
{
    (void)state;
    qkv_lm_config c = small_config(QKV_ATTENTION_LINEAR, 1);
    c.learned_pos = 1, c.dropout = 0.2f;
    check_variant(c);
}

/* Per layer 4C^2 + 4C attention, 2CF + F + C FFN, 2 x 2C LayerNorm; then the final norm,
 * the embedding, learned positions, the output matrix (unless tied) and bias. */
static void test_parameter_table(void **state)
{
    (void)state;
    for (int tie = 0; tie < 2; tie++) {
        qkv_lm_config c = qkv_lm_default_config();
        c.vocab = 65, c.learned_pos = 1, c.final_norm = 1, c.tie = tie;
        qkv_lm *m;
        assert_int_equal(qkv_lm_create(&m, &c, 1, NULL), QKV_OK);
        const size_t C = 128, F = 512, L = 4, Vs = 65, Tm = 128;
        size_t block = 4 * C * C + 4 * C + 2 * C * F + F + C + 4 * C;
        size_t want = Vs * C + Tm * C + L * block + 2 * C + (tie ? 0 : Vs * C) + Vs;
        assert_int_equal(qkv_lm_num_params(m), want);
        size_t covered = 0;
        for (int t = 0; t < qkv_lm_num_tensors(m); t++) {
            qkv_param_info info = qkv_lm_tensor(m, t);
            assert_int_equal(info.offset, covered);
            covered += info.numel;
        }
        assert_int_equal(covered, want);
        assert_string_equal(qkv_lm_tensor(m, 0).name, "embedding");
        assert_string_equal(qkv_lm_tensor(m, 1).name, "positions");
        assert_string_equal(qkv_lm_tensor(m, 2).name, "decoder.0.attention.W_q");
        assert_string_equal(qkv_lm_tensor(m, qkv_lm_num_tensors(m) - 1).name, "output.b");
        qkv_lm_free(m);
    }
    qkv_lm_config c = qkv_lm_default_config();
    qkv_lm *m;
    qkv_error err = {0};
    c.vocab = 65, c.heads = 3;
    assert_int_equal(qkv_lm_create(&m, &c, 1, &err), QKV_ERR_ARG);
    assert_non_null(strstr(err.msg, "heads"));
    c.heads = 4, c.attention = (qkv_attention_kind)7;
    assert_int_equal(qkv_lm_create(&m, &c, 1, &err), QKV_ERR_ARG);
    assert_non_null(strstr(err.msg, "attention"));
}

/* Changing token t changes no logits before t: the model is causal, with either attention. */
static void test_causal(void **state)
{
    (void)state;
    for (int kind = 0; kind < 2; kind++) {
        qkv_lm_config c = small_config((qkv_attention_kind)kind, kind);
        qkv_lm *m;
        assert_int_equal(qkv_lm_create(&m, &c, 3, NULL), QKV_OK);
        int a[T] = {4, 5, 6, 7, 8}, b[T] = {4, 5, 6, 9, 8};
        float la[T * V], lb[T * V];
        assert_int_equal(qkv_lm_logits(m, a, 1, T, la, NULL), QKV_OK);
        assert_int_equal(qkv_lm_logits(m, b, 1, T, lb, NULL), QKV_OK);
        assert_memory_equal(la, lb, 3 * V * sizeof *la);
        assert_true(memcmp(la + 3 * V, lb + 3 * V, V * sizeof *la) != 0);
        int bad[T] = {4, 5, 11, 7, 8};
        qkv_error err = {0};
        assert_int_equal(qkv_lm_logits(m, bad, 1, T, la, &err), QKV_ERR_ARG);
        assert_non_null(strstr(err.msg, "11"));
        assert_int_equal(qkv_lm_logits(m, a, 1, 9, la, &err), QKV_ERR_ARG); /* > max_len 8 */
        qkv_lm_free(m);
    }
}

/* Every step of cached (softmax) or recurrent (linear) generation gives the logits of the full
 * causal forward pass at that position; so does a prefill followed by steps. */
static void test_step_equals_forward(void **state)
{
    (void)state;
    enum { N = 16 };
    const int seq[N] = {4, 9, 5, 5, 10, 6, 4, 7, 8, 8, 9, 4, 6, 10, 5, 7};
    for (int variant = 0; variant < 4; variant++) {
        qkv_lm_config c = small_config((qkv_attention_kind)(variant & 1), variant >> 1);
        c.max_len = N, c.d_model = 16, c.heads = 4, c.bias = 1, c.learned_pos = variant == 3;
        c.tie = variant == 1;
        qkv_lm *m;
        qkv_lm_state *s;
        qkv_error err = {0};
        assert_int_equal(qkv_lm_create(&m, &c, 5 + variant, &err), QKV_OK);
        assert_int_equal(qkv_lm_state_create(&s, m, &err), QKV_OK);
        float *full = tu_zeros((size_t)N * V), step[V];
        assert_int_equal(qkv_lm_logits(m, seq, 1, N, full, &err), QKV_OK);
        for (int t = 0; t < N; t++) {
            assert_int_equal(qkv_lm_step(m, s, seq[t], step, &err), QKV_OK);
            tu_check_close("step logits", step, full + (size_t)t * V, V, 2e-5f, 2e-5f);
        }
        assert_int_equal(qkv_lm_state_length(s), N);
        assert_int_equal(qkv_lm_step(m, s, 4, step, &err), QKV_ERR_ARG); /* full */
        /* prefill 6, then step the rest */
        assert_int_equal(qkv_lm_prefill(m, s, seq, 6, step, &err), QKV_OK);
        tu_check_close("prefill logits", step, full + 5 * V, V, 2e-5f, 2e-5f);
        for (int t = 6; t < N; t++) {
            assert_int_equal(qkv_lm_step(m, s, seq[t], step, &err), QKV_OK);
            tu_check_close("step after prefill", step, full + (size_t)t * V, V, 2e-5f, 2e-5f);
        }
        free(full);
        qkv_lm_state_free(s);
        qkv_lm_free(m);
    }
}

static int argmax(const float *z, int n)
{
    int best = 0;
    for (int k = 1; k < n; k++)
        if (z[k] > z[best]) best = k;
    return best;
}

typedef struct {
    int seen[64], n, stop_at;
} token_log;

static int record(int id, void *ctx)
{
    token_log *l = ctx;
    l->seen[l->n++] = id;
    return l->n == l->stop_at;
}

/* Greedy generation picks the argmax of the full forward over its own text at every step,
 * past the model's context too (where it restarts from the last max_len / 2 tokens); a seed
 * reproduces a sampled text; top-k = 1 is greedy; the callback sees every token and can stop. */
static void test_generate(void **state)
{
    (void)state;
    for (int kind = 0; kind < 2; kind++) {
        qkv_lm_config c = small_config((qkv_attention_kind)kind, 1);
        c.vocab = 23, c.max_len = 12;
        qkv_lm *m;
        qkv_error err = {0};
        assert_int_equal(qkv_lm_create(&m, &c, 21, &err), QKV_OK);
        enum { NP = 3, NG = 30 };
        const int prompt[NP] = {7, 12, 5};
        int greedy[NG], n_out = 0, text[NP + NG];
        qkv_lm_generation g = {NG, {0.0f, 0, 1.0f}, 1, NULL, NULL, 0};
        assert_int_equal(qkv_lm_generate(m, prompt, NP, greedy, &n_out, &g, &err), QKV_OK);
        assert_int_equal(n_out, NG);
        memcpy(text, prompt, sizeof prompt);
        memcpy(text + NP, greedy, sizeof greedy);
        /* replay: the window the model saw for token i, as qkv_lm_generate documents */
        float logits[12 * 23];
        int start = 0, len = NP; /* the state holds text[start .. start + len) */
        for (int i = 0; i < NG; i++) {
            assert_int_equal(qkv_lm_logits(m, text + start, 1, len, logits, &err), QKV_OK);
            assert_int_equal(argmax(logits + (size_t)(len - 1) * c.vocab, c.vocab), greedy[i]);
            if (len < c.max_len) len++;
            else start += len + 1 - c.max_len / 2, len = c.max_len / 2;
        }
        /* sampling: a seed gives the same text, another seed another */
        int a[NG], b[NG], d[NG];
        qkv_lm_generation s = {NG, {1.0f, 0, 0.9f}, 42, NULL, NULL, 0};
        assert_int_equal(qkv_lm_generate(m, prompt, NP, a, NULL, &s, &err), QKV_OK);
        assert_int_equal(qkv_lm_generate(m, prompt, NP, b, NULL, &s, &err), QKV_OK);
        assert_memory_equal(a, b, sizeof a);
        s.seed = 43;
        assert_int_equal(qkv_lm_generate(m, prompt, NP, d, NULL, &s, &err), QKV_OK);
        assert_true(memcmp(a, d, sizeof a) != 0);
        /* top-k = 1 at any temperature is greedy */
        s.sampling = (qkv_sampling){1.5f, 1, 1.0f};
        assert_int_equal(qkv_lm_generate(m, prompt, NP, d, NULL, &s, &err), QKV_OK);
        assert_memory_equal(d, greedy, sizeof d);
        /* the callback sees each token as it is drawn, and stops the loop */
        token_log log = {{0}, 0, 7};
        s.sampling = (qkv_sampling){1.0f, 0, 0.9f}, s.seed = 42, s.on_token = record, s.ctx = &log;
        assert_int_equal(qkv_lm_generate(m, prompt, NP, d, &n_out, &s, &err), QKV_OK);
        assert_int_equal(n_out, 7);
        assert_memory_equal(log.seen, a, 7 * sizeof *a);
        assert_memory_equal(d, a, 7 * sizeof *a);
        /* text_only never draws a reserved token (an untrained model often would) */
        qkv_lm_generation hot = {NG, {2.0f, 0, 1.0f}, 5, NULL, NULL, 0};
        int reserved = 0;
        assert_int_equal(qkv_lm_generate(m, prompt, NP, d, NULL, &hot, &err), QKV_OK);
        for (int i = 0; i < NG; i++) reserved += d[i] < QKV_N_RESERVED;
        assert_true(reserved > 0);
        hot.text_only = 1;
        assert_int_equal(qkv_lm_generate(m, prompt, NP, d, NULL, &hot, &err), QKV_OK);
        for (int i = 0; i < NG; i++) assert_true(d[i] >= QKV_N_RESERVED && d[i] < c.vocab);
        /* bad arguments */
        assert_int_equal(qkv_lm_generate(m, prompt, 0, d, NULL, &g, &err), QKV_ERR_ARG);
        const int bad[1] = {23};
        assert_int_equal(qkv_lm_generate(m, bad, 1, d, NULL, &g, &err), QKV_ERR_ARG);
        assert_non_null(strstr(err.msg, "23"));
        qkv_lm_free(m);
    }
}

/* A bf16 key-value cache: every step's logits are those of the full float32 forward pass up
 * to the cache's rounding (and do differ from them: the cache is bf16), a prefill fills it the
 * same way, and greedy generation picks at every step a token whose full-forward logit is
 * within that rounding of the best: it agrees with float32 greedy decoding but where two
 * tokens are that close. */
static void test_bf16_cache(void **state)
{
    (void)state;
    enum { VB = 23, T = 48, NP = 3, NG = 40 };
    /* the cache's values are rounded by up to 2^-8 of themselves; through these 2 blocks the
     * logits (up to ~3 in size) moved by at most 0.0014 in a trial: 7x that */
    const float tol = 0.01f;
    qkv_lm_config c = small_config(QKV_ATTENTION_SOFTMAX, 1);
    c.vocab = VB, c.max_len = T, c.d_model = 32, c.heads = 4, c.ffn = 48;
    qkv_lm *m;
    qkv_lm_state *s;
    qkv_error err = {0};
    assert_int_equal(qkv_lm_create(&m, &c, 31, &err), QKV_OK);
    assert_int_equal(qkv_lm_set_kv_cache(m, QKV_KV_CACHE_BF16, &err), QKV_OK);
    assert_int_equal(qkv_lm_get_kv_cache(m), QKV_KV_CACHE_BF16);
    assert_int_equal(qkv_lm_state_create(&s, m, &err), QKV_OK);
    int seq[T];
    for (int t = 0; t < T; t++) seq[t] = 4 + (t * 7 + 3) % (VB - 4);
    float *full = tu_zeros((size_t)T * VB), step[VB];
    assert_int_equal(qkv_lm_logits(m, seq, 1, T, full, &err), QKV_OK);
    float worst = 0.0f;
    for (int t = 0; t < T; t++) {
        assert_int_equal(qkv_lm_step(m, s, seq[t], step, &err), QKV_OK);
        for (int k = 0; k < VB; k++) {
            const float e = fabsf(step[k] - full[(size_t)t * VB + k]);
            worst = e > worst ? e : worst;
        }
        tu_check_close("bf16-cache step logits", step, full + (size_t)t * VB, VB, tol, tol);
    }
    assert_true(worst > 0.0f); /* the cache did round */
    assert_int_equal(qkv_lm_prefill(m, s, seq, 20, step, &err), QKV_OK);
    for (int t = 20; t < T; t++) {
        assert_int_equal(qkv_lm_step(m, s, seq[t], step, &err), QKV_OK);
        tu_check_close("bf16-cache step after prefill", step, full + (size_t)t * VB, VB, tol,
                       tol);
    }
    /* greedy, within the context (no restart) */
    const int prompt[NP] = {7, 12, 5};
    int g16[NG], g32[NG], text[NP + NG];
    qkv_lm_generation g = {NG, {0.0f, 0, 1.0f}, 1, NULL, NULL, 0};
    assert_int_equal(qkv_lm_generate(m, prompt, NP, g16, NULL, &g, &err), QKV_OK);
    assert_int_equal(qkv_lm_set_kv_cache(m, QKV_KV_CACHE_FP32, &err), QKV_OK);
    assert_int_equal(qkv_lm_generate(m, prompt, NP, g32, NULL, &g, &err), QKV_OK);
    memcpy(text, prompt, sizeof prompt), memcpy(text + NP, g16, sizeof g16);
    assert_int_equal(qkv_lm_logits(m, text, 1, NP + NG, full, &err), QKV_OK);
    int agree = 0;
    while (agree < NG && g16[agree] == g32[agree]) agree++;
    for (int i = 0; i < NG; i++) {
        const float *z = full + (size_t)(NP + i - 1) * VB;
        if (z[g16[i]] < z[argmax(z, VB)] - tol)
            fail_msg("token %d: bf16-cache greedy chose %d, logit %g; the best is %g", i, g16[i],
                     z[g16[i]], z[argmax(z, VB)]);
    }
    print_message("bf16 cache: logits within %.2g of float32; greedy agrees for %d of %d "
                  "tokens\n", worst, agree, NG);
    assert_int_equal(qkv_lm_set_kv_cache(m, (qkv_kv_cache)7, &err), QKV_ERR_ARG);
    qkv_kv_cache kv;
    assert_int_equal(qkv_kv_cache_parse(&kv, "bf16", &err), QKV_OK);
    assert_int_equal(kv, QKV_KV_CACHE_BF16);
    assert_int_equal(qkv_kv_cache_parse(&kv, "int4", &err), QKV_ERR_ARG);
    assert_string_equal(qkv_kv_cache_name(QKV_KV_CACHE_AUTO), "auto");
    free(full);
    qkv_lm_state_free(s);
    qkv_lm_free(m);
}

/* The sampling distribution: temperature, top-k, top-p's smallest set, exact zeros, order. */
static void test_sampling(void **state)
{
    (void)state;
    enum { N = 6 };
    /* probabilities 0.4, 0.25, 0.15, 0.1, 0.06, 0.04 at ids 3, 0, 5, 1, 4, 2 */
    const float want[N] = {0.25f, 0.1f, 0.04f, 0.4f, 0.06f, 0.15f};
    float logits[N], probs[N];
    for (int i = 0; i < N; i++) logits[i] = logf(want[i]) + 3.0f;
    int order[N];
    qkv_sampling s = {1.0f, 0, 1.0f};
    assert_int_equal(qkv_sampling_probs(probs, order, logits, N, &s), N);
    tu_check_close("probs", probs, want, N, 1e-6f, 1e-5f);
    const int sorted[N] = {3, 0, 5, 1, 4, 2};
    assert_memory_equal(order, sorted, sizeof sorted);
    /* top-p: the smallest prefix with mass >= p. 0.4 + 0.25 = 0.65 < 0.7 <= 0.8 */
    s.top_p = 0.7f;
    assert_int_equal(qkv_sampling_probs(probs, order, logits, N, &s), 3);
    assert_true(probs[1] == 0.0f && probs[4] == 0.0f && probs[2] == 0.0f);
    assert_true(fabsf(probs[3] - 0.4f / 0.8f) < 1e-6f && fabsf(probs[5] - 0.15f / 0.8f) < 1e-6f);
    s.top_p = 0.39f; /* the first alone reaches it */
    assert_int_equal(qkv_sampling_probs(probs, order, logits, N, &s), 1);
    assert_true(probs[3] == 1.0f);
    s.top_p = 0.41f;
    assert_int_equal(qkv_sampling_probs(probs, order, logits, N, &s), 2);
    s.top_p = 0.65f - 1e-4f; /* just under the mass of two: still two */
    assert_int_equal(qkv_sampling_probs(probs, order, logits, N, &s), 2);
    /* top-k, then top-p of what is left: k = 4 keeps mass 0.9; 0.7 of it is 0.63 <= 0.65 */
    s.top_k = 4, s.top_p = 0.7f;
    assert_int_equal(qkv_sampling_probs(probs, order, logits, N, &s), 2);
    s.top_p = 1.0f;
    assert_int_equal(qkv_sampling_probs(probs, order, logits, N, &s), 4);
    assert_true(fabsf(probs[1] - 0.1f / 0.9f) < 1e-6f && probs[4] == 0.0f);
    /* the draw: inverse CDF in order 3, 0, 5, 1 */
    assert_int_equal(qkv_sample_token(probs, order, 4, 0.0f), 3);
    assert_int_equal(qkv_sample_token(probs, order, 4, 0.44f), 3);
    assert_int_equal(qkv_sample_token(probs, order, 4, 0.45f), 0);
    assert_int_equal(qkv_sample_token(probs, order, 4, 0.99f), 1);
    /* temperature: sharper below 1, flatter above; 0 is the argmax */
    s = (qkv_sampling){0.5f, 0, 1.0f};
    qkv_sampling_probs(probs, order, logits, N, &s);
    assert_true(fabsf(probs[3] - 0.16f / 0.2602f) < 1e-5f); /* p^2 / sum p^2 */
    s.temperature = 0.0f;
    assert_int_equal(qkv_sampling_probs(probs, order, logits, N, &s), 1);
    assert_int_equal(order[0], 3);
    assert_true(probs[3] == 1.0f && probs[0] == 0.0f);
    const int rest[N] = {3, 0, 1, 2, 4, 5};
    assert_memory_equal(order, rest, sizeof rest);
    /* ties go to the lower id */
    float flat[4] = {1.0f, 2.0f, 2.0f, 0.0f};
    assert_int_equal(qkv_sampling_probs(probs, order, flat, 4, &s), 1);
    assert_int_equal(order[0], 1);
    s.temperature = 1.0f, s.top_k = 1;
    assert_int_equal(qkv_sampling_probs(probs, order, flat, 4, &s), 1);
    assert_int_equal(order[0], 1);
}

/* Character vocabularies: code point order, escapes that survive a vocabulary file, and
 * text -> ids -> text round trips; byte vocabularies take any bytes. */
static void test_text_tokens(void **state)
{
    (void)state;
    const char text[] = "To be,\tor not\\ to be:\r\n\xc3\xa9t\xc3\xa9 \x01!";
    qkv_vocab v, back;
    qkv_error err = {0};
    assert_int_equal(qkv_lm_vocab_build(&v, text, strlen(text), 0, &err), QKV_OK);
    const char *want[] = {"<unk>", "<pad>", "<bos>", "<eos>", "\\x01", "\\t", "\\n", "\\r",
                          "\\s", "!", ",", ":", "T", "\\\\", "b", "e", "n", "o", "r", "t",
                          "\xc3\xa9"};
    assert_int_equal(v.size, (int)(sizeof want / sizeof *want));
    for (int i = 0; i < v.size; i++) assert_string_equal(qkv_vocab_token(&v, i), want[i]);
    char dir[] = "/tmp/qkv-lm-XXXXXX", path[64];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/vocab.txt", dir);
    assert_int_equal(qkv_vocab_save(&v, path, &err), QKV_OK);
    assert_int_equal(qkv_vocab_load(&back, path, &err), QKV_OK);
    int ids[64];
    size_t n = 0, unknown = 9;
    assert_int_equal(qkv_lm_encode(ids, &n, &unknown, &back, text, strlen(text), &err), QKV_OK);
    assert_int_equal(n, strlen(text) - 2); /* two 2-byte characters */
    assert_int_equal(unknown, 0);
    char out[128] = "", piece[8];
    for (size_t i = 0; i < n; i++) {
        size_t k = qkv_lm_token_text(piece, sizeof piece, &back, ids[i]);
        assert_int_equal(k, strlen(piece));
        strcat(out, piece);
    }
    assert_string_equal(out, text);
    assert_int_equal(qkv_lm_token_text(piece, sizeof piece, &back, QKV_EOS), 0);
    assert_int_equal(qkv_lm_token_text(piece, sizeof piece, &back, 999), 0);
    /* characters outside the vocabulary are <unk>; invalid UTF-8 is refused with its offset */
    assert_int_equal(qkv_lm_encode(ids, &n, &unknown, &back, "bez?", 4, &err), QKV_OK);
    assert_int_equal(n, 4), assert_int_equal(unknown, 2);
    assert_int_equal(ids[2], QKV_UNK), assert_int_equal(ids[3], QKV_UNK);
    assert_int_equal(qkv_lm_encode(ids, &n, NULL, &back, "ab\xff", 3, &err), QKV_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "byte 2"));
    qkv_vocab bad;
    assert_int_equal(qkv_lm_vocab_build(&bad, "ok\xc3", 3, 0, &err), QKV_ERR_FORMAT);
    qkv_vocab_free(&back), qkv_vocab_free(&v);
    /* bytes: 256 tokens <0x00> .. <0xFF>, any input */
    assert_int_equal(qkv_lm_vocab_build(&v, "", 0, 1, &err), QKV_OK);
    assert_int_equal(v.size, 260);
    assert_string_equal(qkv_vocab_token(&v, 4 + 0x0A), "<0x0A>");
    assert_int_equal(qkv_vocab_save(&v, path, &err), QKV_OK);
    assert_int_equal(qkv_vocab_load(&back, path, &err), QKV_OK);
    const char raw[] = "a\xff\n\x00z";
    assert_int_equal(qkv_lm_encode(ids, &n, &unknown, &back, raw, 5, &err), QKV_OK);
    assert_int_equal(n, 5), assert_int_equal(unknown, 0);
    assert_int_equal(ids[0], 4 + 'a'), assert_int_equal(ids[1], 4 + 0xff);
    assert_int_equal(ids[3], 4);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(qkv_lm_token_text(piece, sizeof piece, &back, ids[i]), 1);
        assert_int_equal((unsigned char)piece[0], (unsigned char)raw[i]);
    }
    qkv_vocab_free(&back), qkv_vocab_free(&v);
    /* a byte vocabulary file that lacks bytes: they are <unk>, and counted as unknown (they
     * were not: found by fuzz_lm_vocab) */
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    fputs("<unk>\n<pad>\n<bos>\n<eos>\n<0x00>\n<0x61>\n", fp);
    assert_int_equal(fclose(fp), 0);
    assert_int_equal(qkv_vocab_load(&back, path, &err), QKV_OK);
    assert_int_equal(qkv_lm_encode(ids, &n, &unknown, &back, "a\0bc", 4, &err), QKV_OK);
    assert_int_equal(n, 4), assert_int_equal(unknown, 2);
    assert_int_equal(ids[0], 5), assert_int_equal(ids[1], 4);
    assert_int_equal(ids[2], QKV_UNK), assert_int_equal(ids[3], QKV_UNK);
    qkv_vocab_free(&back);
    snprintf(path, sizeof path, "rm -rf %s", dir);
    assert_int_equal(system(path), 0);
}

/* Save -> load gives identical parameters and logits; bad directories are refused. */
static void test_save_load(void **state)
{
    (void)state;
    qkv_lm_config c = small_config(QKV_ATTENTION_LINEAR, 1);
    c.tie = 1, c.learned_pos = 1, c.act = QKV_ACT_GELU;
    qkv_lm *m, *back;
    qkv_error err = {0};
    assert_int_equal(qkv_lm_create(&m, &c, 9, &err), QKV_OK);
    char dir[] = "/tmp/qkv-lm-XXXXXX", path[128];
    assert_non_null(mkdtemp(dir));
    assert_int_equal(qkv_lm_save(m, dir, &err), QKV_OK);
    assert_int_equal(qkv_lm_load(&back, dir, &err), QKV_OK);
    assert_memory_equal(qkv_lm_get_config(back), &c, sizeof c);
    assert_memory_equal(qkv_lm_params(m), qkv_lm_params(back), qkv_lm_num_params(m) * sizeof(float));
    float l1[T * V], l2[T * V];
    assert_int_equal(qkv_lm_logits(m, ids, 1, T, l1, &err), QKV_OK);
    assert_int_equal(qkv_lm_logits(back, ids, 1, T, l2, &err), QKV_OK);
    assert_memory_equal(l1, l2, sizeof l1);
    qkv_lm_free(back);
    /* a configuration that does not fit the tensors, naming the tensor */
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *fp = fopen(path, "r+");
    char json[2048] = "";
    size_t len = fread(json, 1, sizeof json - 1, fp);
    json[len] = '\0';
    char *at = strstr(json, "\"ffn\":");
    assert_non_null(at);
    memcpy(at, "\"ffn\":\t13,", 10); /* was "ffn":\t12, */
    rewind(fp), fputs(json, fp), fclose(fp);
    assert_int_equal(qkv_lm_load(&back, dir, &err), QKV_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "ffn.W1"));
    qkv_lm_config x;
    assert_int_equal(qkv_lm_config_from_json(&x, "{\"format\": \"qkv-transformer\"}", "c.json",
                                             &err), QKV_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "c.json"));
    char *good = NULL;
    assert_int_equal(qkv_lm_config_to_json(&c, &good, &err), QKV_OK);
    char *attn = strstr(good, "\"linear\"");
    assert_non_null(attn);
    memcpy(attn, "\"LINEAR\"", 8);
    assert_int_equal(qkv_lm_config_from_json(&x, good, "c.json", &err), QKV_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "attention"));
    free(good);
    qkv_lm_free(m);
    snprintf(path, sizeof path, "rm -rf %s", dir);
    assert_int_equal(system(path), 0);
}

/* A small text the model can learn: a repeated phrase with some variation. */
static int *make_text(size_t n)
{
    int *t = malloc(n * sizeof *t);
    const int pattern[] = {4, 5, 6, 7, 4, 5, 8, 9, 10, 4, 6, 6};
    for (size_t i = 0; i < n; i++) t[i] = pattern[i % 12];
    return t;
}

static void read_file(const char *path, char **buf, long *len)
{
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    fseek(fp, 0, SEEK_END);
    *len = ftell(fp);
    rewind(fp);
    *buf = malloc((size_t)*len + 1);
    assert_int_equal(fread(*buf, 1, (size_t)*len, fp), (size_t)*len);
    (*buf)[*len] = '\0';
    fclose(fp);
}

/* Training lowers the loss; a run stopped and resumed ends bit for bit where an uninterrupted
 * one does; the held-out evaluation counts every token after the first once. */
static int stop_at_13(void *ctx)
{
    return ++*(int *)ctx >= 13;
}

static void test_train_resume(void **state)
{
    (void)state;
    const size_t n = 600;
    int *text = make_text(n);
    qkv_lm_config c = small_config(QKV_ATTENTION_SOFTMAX, 1);
    c.dropout = 0.1f, c.max_len = 16, c.d_model = 16;
    qkv_error err = {0};
    char dir[] = "/tmp/qkv-lm-XXXXXX", a[96], b[96];
    assert_non_null(mkdtemp(dir));
    snprintf(a, sizeof a, "%s/a", dir), snprintf(b, sizeof b, "%s/b", dir);
    for (int kind = 0; kind < 2; kind++) {
        c.attention = (qkv_attention_kind)kind;
        qkv_lm *m, *r;
        assert_int_equal(qkv_lm_create(&m, &c, 4, &err), QKV_OK);
        assert_int_equal(qkv_lm_create(&r, &c, 4, &err), QKV_OK);
        double before, after;
        int64_t count;
        assert_int_equal(qkv_lm_evaluate(m, text + 500, 100, 16, 4, &before, &count, &err), QKV_OK);
        assert_int_equal(count, 99);
        qkv_lm_train_options o = qkv_lm_train_default_options();
        o.out_dir = a, o.batch = 4, o.context = 16, o.steps = 40, o.lr = 3e-3f, o.warmup = 5;
        o.log_every = 10, o.eval_every = 20, o.eval_tokens = 50, o.seed = 8;
        assert_int_equal(qkv_lm_train(m, text, 500, text + 500, 100, &o, &err), QKV_OK);
        assert_int_equal(qkv_lm_evaluate(m, text + 500, 100, 16, 4, &after, NULL, &err), QKV_OK);
        assert_true(after < 0.5 * before);
        /* stop at step 13 (not a log step), by stop_after_steps or asked by should_stop, then
         * resume */
        int asked = 0;
        char path[128];
        o.out_dir = b;
        snprintf(path, sizeof path, "%s/model.safetensors", b);
        remove(path); /* the previous kind's */
        if (kind == 0) o.stop_after_steps = 13;
        else o.should_stop = stop_at_13, o.should_stop_ctx = &asked;
        assert_int_equal(qkv_lm_train(r, text, 500, text + 500, 100, &o, &err), QKV_OK);
        assert_int_equal(asked, kind ? 13 : 0);
        assert_int_equal(access(path, F_OK), -1); /* stopped: checkpointed, not saved */
        o.should_stop = NULL;
        qkv_lm_free(r);
        assert_int_equal(qkv_lm_create(&r, &c, 77, &err), QKV_OK); /* other weights: all reloaded */
        o.stop_after_steps = 0, o.resume = 1;
        assert_int_equal(qkv_lm_train(r, text, 500, text + 500, 100, &o, &err), QKV_OK);
        assert_memory_equal(qkv_lm_params(m), qkv_lm_params(r), qkv_lm_num_params(m) * sizeof(float));
        char *fa, *fb;
        long la, lb;
        snprintf(path, sizeof path, "%s/model.safetensors", a), read_file(path, &fa, &la);
        snprintf(path, sizeof path, "%s/model.safetensors", b), read_file(path, &fb, &lb);
        assert_int_equal(la, lb);
        assert_memory_equal(fa, fb, (size_t)la);
        free(fa), free(fb);
        /* metrics: a line per report, with held-out loss at steps 20 and 40 */
        snprintf(path, sizeof path, "%s/metrics.jsonl", a), read_file(path, &fa, &la);
        int lines = 0, vals = 0;
        for (long i = 0; i < la; i++) lines += fa[i] == '\n';
        for (char *p = fa; (p = strstr(p, "val_loss")) && p < fa + la; p++) vals++;
        assert_int_equal(lines, 4), assert_int_equal(vals, 2);
        free(fa);
        /* resuming on other data is refused */
        assert_int_equal(qkv_lm_train(r, text, 499, NULL, 0, &o, &err), QKV_ERR_ARG);
        assert_non_null(strstr(err.msg, "same data"));
        qkv_lm_free(m), qkv_lm_free(r);
    }
    qkv_lm *m;
    assert_int_equal(qkv_lm_create(&m, &c, 4, &err), QKV_OK);
    qkv_lm_train_options o = qkv_lm_train_default_options();
    o.out_dir = a, o.batch = 2, o.context = 16, o.steps = 1;
    assert_int_equal(qkv_lm_train(m, text, 16, NULL, 0, &o, &err), QKV_ERR_ARG);
    assert_non_null(strstr(err.msg, "at least 17"));
    o.steps = 0;
    assert_int_equal(qkv_lm_train(m, text, 100, NULL, 0, &o, &err), QKV_ERR_ARG);
    qkv_lm_free(m);
    free(text);
    snprintf(a, sizeof a, "rm -rf %s", dir);
    assert_int_equal(system(a), 0);
}

/* Rewrites the safetensors file at path with metadata key set to value (the tensors and the
 * other keys as they were). */
static void set_checkpoint_meta(const char *path, const char *key, const char *value)
{
    static const char *const keys[] = {"format", "step", "seed", "elapsed_s", "loss_sum",
                                       "loss_tokens", "train_tokens"};
    enum { N_KEYS = sizeof keys / sizeof *keys };
    qkv_tensor_file f;
    qkv_error err = {0};
    assert_int_equal(qkv_tensor_file_load(&f, path, &err), QKV_OK);
    qkv_tensor_ref *refs = calloc((size_t)f.count, sizeof *refs);
    assert_non_null(refs);
    for (int i = 0; i < f.count; i++) {
        const qkv_tensor *t = &f.tensors[i];
        refs[i] = (qkv_tensor_ref){t->name, t->dtype, t->ndim, {0}, t->data};
        memcpy(refs[i].shape, t->shape, sizeof t->shape);
    }
    const char *meta[2 * N_KEYS];
    for (int k = 0; k < N_KEYS; k++) {
        meta[2 * k] = keys[k];
        meta[2 * k + 1] = strcmp(keys[k], key) ? qkv_tensor_file_meta(&f, keys[k]) : value;
        assert_non_null(meta[2 * k + 1]);
    }
    assert_int_equal(qkv_tensor_file_save(path, refs, f.count, meta, N_KEYS, &err), QKV_OK);
    free(refs);
    qkv_tensor_file_free(&f);
}

/* A training checkpoint's position must be plain decimal integers and non-negative times and
 * loss sums: strtoull alone read a seed " -5" as 2^64 - 5 (found by fuzz_lm_model). Resuming
 * from such a file is refused, naming the file and the key; the values as written resume. */
static void test_checkpoint_metadata(void **state)
{
    (void)state;
    int *text = make_text(100);
    qkv_lm_config c = small_config(QKV_ATTENTION_SOFTMAX, 0);
    qkv_error err = {0};
    char dir[] = "/tmp/qkv-lm-XXXXXX", ckpt[96], want[256];
    assert_non_null(mkdtemp(dir));
    snprintf(ckpt, sizeof ckpt, "%s/checkpoint.safetensors", dir);
    qkv_lm *m;
    assert_int_equal(qkv_lm_create(&m, &c, 4, &err), QKV_OK);
    qkv_lm_train_options o = qkv_lm_train_default_options();
    o.out_dir = dir, o.batch = 2, o.context = 8, o.steps = 2, o.log_every = 1, o.seed = 5;
    assert_int_equal(qkv_lm_train(m, text, 100, NULL, 0, &o, &err), QKV_OK);
    struct {
        const char *key, *value, *kind;
    } bad[] = {
        {"seed", " -5", "a non-negative integer"},
        {"seed", "+5", "a non-negative integer"},
        {"step", " 2", "a non-negative integer"},
        {"loss_tokens", "-1", "a non-negative integer"},
        {"elapsed_s", "-1", "a finite non-negative"},
        {"loss_sum", "-2.5", "a finite non-negative"},
        {"loss_sum", "nan", "a finite non-negative"},
    };
    enum { N_BAD = sizeof bad / sizeof *bad };
    char written[N_BAD][64]; /* what training wrote, to put back */
    qkv_tensor_file f;
    assert_int_equal(qkv_tensor_file_load(&f, ckpt, &err), QKV_OK);
    assert_string_equal(qkv_tensor_file_meta(&f, "seed"), "5");
    assert_string_equal(qkv_tensor_file_meta(&f, "step"), "2");
    for (int k = 0; k < N_BAD; k++)
        snprintf(written[k], sizeof written[k], "%s", qkv_tensor_file_meta(&f, bad[k].key));
    qkv_tensor_file_free(&f);
    o.resume = 1, o.steps = 3;
    for (int k = 0; k < N_BAD; k++) {
        set_checkpoint_meta(ckpt, bad[k].key, bad[k].value);
        assert_int_equal(qkv_lm_train(m, text, 100, NULL, 0, &o, &err), QKV_ERR_FORMAT);
        snprintf(want, sizeof want, "%s: metadata \"%s\" missing or not %s number", ckpt,
                 bad[k].key, bad[k].kind);
        assert_string_equal(err.msg, want);
        set_checkpoint_meta(ckpt, bad[k].key, written[k]);
    }
    assert_int_equal(qkv_lm_train(m, text, 100, NULL, 0, &o, &err), QKV_OK); /* step 3 */
    qkv_lm_free(m);
    free(text);
    snprintf(want, sizeof want, "rm -rf %s", dir);
    assert_int_equal(system(want), 0);
}

/* config.json read from a directory: a NUL byte is refused naming the file; a valid
 * configuration without its model.safetensors is an I/O error naming that file. */
static void test_config_file_errors(void **state)
{
    (void)state;
    char dir[] = "/tmp/qkv-lm-XXXXXX", path[96], want[256];
    assert_non_null(mkdtemp(dir));
    qkv_lm_config c = small_config(QKV_ATTENTION_SOFTMAX, 0);
    qkv_error err = {0};
    char *json = NULL;
    assert_int_equal(qkv_lm_config_to_json(&c, &json, &err), QKV_OK);
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    fputs(json, fp);
    assert_int_equal(fclose(fp), 0);
    qkv_lm *m = NULL;
    assert_int_equal(qkv_lm_load(&m, dir, &err), QKV_ERR_IO);
    assert_null(m);
    snprintf(want, sizeof want, "%s/model.safetensors: cannot open", dir);
    assert_ptr_equal(strstr(err.msg, want), err.msg);
    fp = fopen(path, "wb");
    assert_non_null(fp);
    fwrite(json, 1, strlen(json) + 1, fp); /* the terminating NUL too */
    assert_int_equal(fclose(fp), 0);
    assert_int_equal(qkv_lm_load(&m, dir, &err), QKV_ERR_FORMAT);
    assert_null(m);
    snprintf(want, sizeof want, "%s: contains a NUL byte", path);
    assert_string_equal(err.msg, want);
    free(json);
    snprintf(want, sizeof want, "rm -rf %s", dir);
    assert_int_equal(system(want), 0);
}

/* A metrics.jsonl that cannot be appended to stops training with an error naming it (it
 * used to be skipped in silence): a symbolic link, never written through (the file it
 * points at is untouched), and a directory in its place. */
static void test_metrics_append_errors(void **state)
{
    (void)state;
    int *text = make_text(100);
    qkv_lm_config c = small_config(QKV_ATTENTION_SOFTMAX, 0);
    qkv_error err = {0};
    char dir[] = "/tmp/qkv-lm-XXXXXX", metrics[96], outside[96], cmd[128], want[256];
    assert_non_null(mkdtemp(dir));
    snprintf(metrics, sizeof metrics, "%s/metrics.jsonl", dir);
    snprintf(outside, sizeof outside, "%s/outside.txt", dir);
    qkv_lm *m;
    assert_int_equal(qkv_lm_create(&m, &c, 4, &err), QKV_OK);
    qkv_lm_train_options o = qkv_lm_train_default_options();
    o.out_dir = dir, o.batch = 2, o.context = 8, o.steps = 2, o.log_every = 1, o.seed = 5;
    assert_int_equal(qkv_lm_train(m, text, 100, NULL, 0, &o, &err), QKV_OK);
    /* resumed with the log replaced by a link to another file */
    FILE *fp = fopen(outside, "w");
    assert_non_null(fp);
    fputs("not a log\n", fp);
    assert_int_equal(fclose(fp), 0);
    assert_int_equal(unlink(metrics), 0);
    assert_int_equal(symlink(outside, metrics), 0);
    o.resume = 1, o.steps = 4;
    assert_int_equal(qkv_lm_train(m, text, 100, NULL, 0, &o, &err), QKV_ERR_IO);
    snprintf(want, sizeof want, "%s: cannot append: it is a symbolic link", metrics);
    assert_ptr_equal(strstr(err.msg, want), err.msg);
    char got[64] = {0};
    fp = fopen(outside, "r");
    assert_non_null(fp);
    assert_non_null(fgets(got, sizeof got, fp));
    assert_null(fgets(got + 20, 20, fp)); /* nothing appended */
    fclose(fp);
    assert_string_equal(got, "not a log\n");
    /* a fresh run with a directory (not empty, so not removed) in its place */
    assert_int_equal(unlink(metrics), 0);
    assert_int_equal(mkdir(metrics, 0700), 0);
    snprintf(cmd, sizeof cmd, "%s/keep", metrics);
    fp = fopen(cmd, "w");
    assert_non_null(fp);
    fclose(fp);
    o.resume = 0, o.steps = 2;
    assert_int_equal(qkv_lm_train(m, text, 100, NULL, 0, &o, &err), QKV_ERR_IO);
    snprintf(want, sizeof want, "%s: cannot append: Is a directory", metrics);
    assert_ptr_equal(strstr(err.msg, want), err.msg);
    qkv_lm_free(m);
    free(text);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

/* out = text with the integer after "key":<tab> replaced by v. */
static void set_int(char *out, size_t cap, const char *text, const char *key, int v)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":\t", key);
    const char *at = strstr(text, pat);
    if (!at) fail_msg("no %s in %s", pat, text);
    const char *end = at + strlen(pat);
    while (*end >= '0' && *end <= '9') end++;
    snprintf(out, cap, "%.*s%s%d%s", (int)(at - text), text, pat, v, end);
}

/* The parameter count of a configuration is the model's in every variant; the limits on
 * their boundaries; a config.json past them, or describing more parameters than its
 * model.safetensors holds, is refused before the model is built. */
static void test_config_limits(void **state)
{
    (void)state;
    qkv_error err = {0};
    for (int v = 0; v < 8; v++) {
        qkv_lm_config c = small_config(QKV_ATTENTION_SOFTMAX, v & 1);
        c.tie = (v >> 1) & 1, c.learned_pos = (v >> 2) & 1, c.bias = v % 3 == 0;
        qkv_lm *m;
        assert_int_equal(qkv_lm_create(&m, &c, 1, &err), QKV_OK);
        if (lm_config_params(&c) != (double)qkv_lm_num_params(m))
            fail_msg("variant %d: counted %.0f parameters, the model has %zu", v,
                     lm_config_params(&c), qkv_lm_num_params(m));
        qkv_lm_free(m);
    }
    qkv_lm_config c = small_config(QKV_ATTENTION_SOFTMAX, 0);
    c.vocab = QKV_MAX_VOCAB, c.ffn = QKV_MAX_FFN, c.layers = QKV_MAX_LAYERS, c.max_len = 31622;
    assert_int_equal(qkv_lm_config_check(&c, &err), QKV_OK);
    c.vocab++;
    assert_int_equal(qkv_lm_config_check(&c, &err), QKV_ERR_ARG);
    assert_non_null(strstr(err.msg, "vocab = 2097153 is over the limit QKV_MAX_VOCAB"));
    c.vocab--, c.layers++;
    assert_int_equal(qkv_lm_config_check(&c, &err), QKV_ERR_ARG);
    assert_non_null(strstr(err.msg, "layers = 257 is over the limit QKV_MAX_LAYERS"));
    c.layers--, c.max_len++; /* 31623^2 > 10^9 */
    assert_int_equal(qkv_lm_config_check(&c, &err), QKV_ERR_ARG);
    assert_non_null(strstr(err.msg, "max_len = 31623: its attention scores"));

    /* from a model directory */
    char dir[] = "/tmp/qkv-lm-XXXXXX", path[96], json[4096];
    assert_non_null(mkdtemp(dir));
    c = small_config(QKV_ATTENTION_SOFTMAX, 0);
    qkv_lm *m, *back = NULL;
    assert_int_equal(qkv_lm_create(&m, &c, 3, &err), QKV_OK);
    assert_int_equal(qkv_lm_save(m, dir, &err), QKV_OK);
    snprintf(path, sizeof path, "%s/config.json", dir);
    const struct {
        int vocab, max_len;
        const char *want;
    } bad[] = {
        {10000000, 8, "vocab = 10000000 is over the limit QKV_MAX_VOCAB"},
        {V, 2000000000, "max_len = 2000000000 is over the limit QKV_MAX_LEN"},
        {100000, 8, "describes a model of"},
        {V, 9, NULL}, /* the table is not in the file */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        c.vocab = V, c.max_len = 8;
        char *text = NULL;
        assert_int_equal(qkv_lm_config_to_json(&c, &text, &err), QKV_OK);
        set_int(json, sizeof json, text, "vocab", bad[i].vocab);
        free(text);
        text = strdup(json);
        set_int(json, sizeof json, text, "max_len", bad[i].max_len);
        free(text);
        FILE *fp = fopen(path, "wb");
        assert_non_null(fp);
        fputs(json, fp);
        assert_int_equal(fclose(fp), 0);
        qkv_status st = qkv_lm_load(&back, dir, &err);
        if (!bad[i].want) {
            assert_int_equal(st, QKV_OK);
            qkv_lm_free(back);
            continue;
        }
        if (st == QKV_OK || !strstr(err.msg, bad[i].want))
            fail_msg("%s: got \"%s\", want \"%s\"", json, err.msg, bad[i].want);
        assert_null(back);
    }
    qkv_lm_free(m);
    snprintf(json, sizeof json, "rm -rf %s", dir);
    assert_int_equal(system(json), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gradcheck_softmax_post_norm),
        cmocka_unit_test(test_gradcheck_softmax_pre_norm_tied_learned_dropout),
        cmocka_unit_test(test_gradcheck_linear_post_norm_tied),
        cmocka_unit_test(test_gradcheck_linear_pre_norm_learned_dropout),
        cmocka_unit_test(test_parameter_table),
        cmocka_unit_test(test_bf16_cache),
        cmocka_unit_test(test_causal),
        cmocka_unit_test(test_step_equals_forward),
        cmocka_unit_test(test_generate),
        cmocka_unit_test(test_sampling),
        cmocka_unit_test(test_text_tokens),
        cmocka_unit_test(test_save_load),
        cmocka_unit_test(test_train_resume),
        cmocka_unit_test(test_checkpoint_metadata),
        cmocka_unit_test(test_config_file_errors),
        cmocka_unit_test(test_config_limits),
        cmocka_unit_test(test_metrics_append_errors),
    };
    return cmocka_run_group_tests_name("language_model", tests, NULL, NULL);
}
