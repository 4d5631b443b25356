/* SPDX-License-Identifier: MIT */
/* PyTorch interop: the model of PyTorch's tutorial "Language Translation with nn.Transformer",
 * converted by tools/torch2qkv.py, computes in qkv what it computes in PyTorch.
 *
 * tests/parity/make_torch2qkv_reference.py trains the tutorial's Seq2SeqTransformer (written
 * out as the tutorial has it) briefly on a toy task, saves its state_dict, converts it into
 * $QKV_PARITY_DIR/t2q/qkv_model and records in torch2qkv.safetensors what the tutorial's code
 * computes. We load the directory with qkv_transformer_load and require
 *   teacher-forced logits   |qkv - torch| <= 1e-4 + 1e-4 |torch| at every real target position
 *                           of a padded batch (forward() with create_mask's masks, eval mode)
 *   greedy translations     the very ids of the tutorial's greedy_decode(max_len = num_tokens
 *                           + 5), one sentence at a time and all of them in one padded batch
 * greedy_decode emits at most max_len - 1 = num_tokens + 4 tokens counting a final <eos>, which
 * is qkv_transformer_greedy's max_len; qkv returns the tokens without <bos> and <eos>. The
 * reference holds sentences that end with <eos> and sentences that run into that cap, and only
 * sentences whose every greedy step wins by a margin of 1e-3 (so rounding cannot flip them).
 * The logits differ by float rounding, mainly from the positional table, which the tutorial
 * computes in float32 and qkv in float64 (~1e-6 at these positions). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#define LOGIT_ATOL 1e-4f
#define LOGIT_RTOL 1e-4f

static const qkv_tensor *ref_tensor(const qkv_tensor_file *f, const char *name, int ndim)
{
    const qkv_tensor *t = qkv_tensor_file_get(f, name);
    if (!t || t->ndim != ndim) fail_msg("reference '%s' missing or not %d-D", name, ndim);
    return t;
}

typedef struct {
    qkv_tensor_file ref;
    qkv_transformer *m;
} fixture;

static int setup(void **state)
{
    qkv_tensor_file ref;
    tu_reference_load(&ref, "torch2qkv"); /* fails the test before anything is allocated */
    const char *dir = getenv("QKV_PARITY_DIR");
    char path[1024];
    snprintf(path, sizeof path, "%s/t2q/qkv_model", dir ? dir : "build/parity");
    qkv_error err = {0};
    qkv_transformer *m = NULL;
    if (qkv_transformer_load(&m, path, &err) != QKV_OK) {
        qkv_tensor_file_free(&ref);
        fail_msg("cannot load the converted model: %s", err.msg);
    }
    fixture *fx = malloc(sizeof *fx);
    if (!fx) {
        qkv_transformer_free(m), qkv_tensor_file_free(&ref);
        fail_msg("out of memory");
    }
    fx->ref = ref, fx->m = m;
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    fixture *fx = *state;
    if (fx) qkv_transformer_free(fx->m), qkv_tensor_file_free(&fx->ref), free(fx);
    return 0;
}

/* The configuration torch2qkv inferred: sizes from the state_dict, the tutorial's architecture
 * (post-norm, final norms, biases, ReLU, sinusoidal positions, separate matrices). */
static void test_config(void **state)
{
    fixture *fx = *state;
    const qkv_transformer_config *c = qkv_transformer_get_config(fx->m);
    const qkv_tensor_file *f = &fx->ref;
    assert_int_equal(c->src_vocab, tu_ref_int(f, "src_vocab"));
    assert_int_equal(c->tgt_vocab, tu_ref_int(f, "tgt_vocab"));
    assert_int_equal(c->d_model, tu_ref_int(f, "d_model"));
    assert_int_equal(c->heads, tu_ref_int(f, "heads"));
    assert_int_equal(c->ffn, tu_ref_int(f, "ffn"));
    assert_int_equal(c->enc_layers, tu_ref_int(f, "enc_layers"));
    assert_int_equal(c->dec_layers, tu_ref_int(f, "dec_layers"));
    assert_int_equal(c->max_len, tu_ref_int(f, "max_len"));
    assert_int_equal(c->bias, 1);
    assert_int_equal(c->pre_norm, 0);
    assert_int_equal(c->final_norm, 1);
    assert_int_equal(c->act, QKV_ACT_RELU);
    assert_int_equal(c->tie, QKV_TIE_NONE);
    assert_int_equal(c->learned_pos, 0);
    assert_true(c->ln_eps == 1e-5f);
}

static void test_logits(void **state)
{
    fixture *fx = *state;
    const qkv_tensor_file *f = &fx->ref;
    const qkv_tensor *src = ref_tensor(f, "logits.src", 2);
    const qkv_tensor *tgt = ref_tensor(f, "logits.tgt_in", 2);
    const qkv_tensor *want = ref_tensor(f, "logits", 3);
    const int B = (int)src->shape[0], Ts = (int)src->shape[1], Tt = (int)tgt->shape[1];
    const int V = qkv_transformer_get_config(fx->m)->tgt_vocab;
    assert_int_equal(tgt->shape[0], B);
    assert_true(want->shape[0] == B && want->shape[1] == Tt && want->shape[2] == V);
    size_t n = 0;
    const int *src_valid = tu_ref_i32(f, "logits.src_valid", &n);
    assert_int_equal(n, B);
    const int *tgt_valid = tu_ref_i32(f, "logits.tgt_valid", &n);
    assert_int_equal(n, B);
    /* the tutorial masks padded targets as keys, qkv only causally: the rows of real target
     * positions, which see no padding either way, are the ones to compare */
    qkv_batch b = {B, Ts, Tt, src->data, src_valid, tgt->data, tgt->data};
    float *got = tu_zeros((size_t)B * Tt * V);
    qkv_error err = {0};
    if (qkv_transformer_logits(fx->m, &b, got, &err) != QKV_OK) fail_msg("logits: %s", err.msg);
    float worst = 0.0f;
    int rows = 0;
    for (int i = 0; i < B; i++)
        for (int t = 0; t < tgt_valid[i]; t++, rows++) {
            const size_t off = ((size_t)i * Tt + t) * V;
            char name[64];
            snprintf(name, sizeof name, "logits[%d, %d]", i, t);
            tu_check_close(name, got + off, (const float *)want->data + off, (size_t)V,
                           LOGIT_ATOL, LOGIT_RTOL);
            for (int k = 0; k < V; k++) {
                float d = fabsf(got[off + k] - ((const float *)want->data)[off + k]);
                if (d > worst) worst = d;
            }
        }
    assert_true(rows > B); /* more than one position per sentence was compared */
    print_message("logits: %d positions x %d, max |qkv - torch| = %.2g\n", rows, V, (double)worst);
    free(got);
}

typedef struct {
    int K, S, L;
    const int *src, *src_len, *out, *out_len, *max_len, *eos;
} greedy_ref;

static greedy_ref load_greedy(const qkv_tensor_file *f)
{
    greedy_ref g;
    const qkv_tensor *src = ref_tensor(f, "greedy.src", 2), *out = ref_tensor(f, "greedy.out", 2);
    g.K = (int)src->shape[0], g.S = (int)src->shape[1], g.L = (int)out->shape[1];
    assert_int_equal(out->shape[0], g.K);
    g.src = src->data, g.out = out->data;
    size_t n = 0;
    g.src_len = tu_ref_i32(f, "greedy.src_len", &n), assert_int_equal(n, g.K);
    g.out_len = tu_ref_i32(f, "greedy.out_len", &n), assert_int_equal(n, g.K);
    g.max_len = tu_ref_i32(f, "greedy.max_len", &n), assert_int_equal(n, g.K);
    g.eos = tu_ref_i32(f, "greedy.eos", &n), assert_int_equal(n, g.K);
    int ended = 0;
    for (int k = 0; k < g.K; k++) {
        assert_true(g.max_len[k] == g.src_len[k] + 4 && g.out_len[k] <= g.L);
        /* a capped sentence emitted max_len tokens, none of them <eos> */
        assert_true(g.eos[k] ? g.out_len[k] < g.max_len[k] : g.out_len[k] == g.max_len[k]);
        ended += g.eos[k];
    }
    /* both ways of stopping are covered */
    assert_true(ended > 0 && ended < g.K);
    return g;
}

static void expect_ids(const char *what, int k, const int *got, int got_len, const int *want,
                       int want_len)
{
    for (int t = 0; t < got_len && t < want_len; t++)
        if (got[t] != want[t])
            fail_msg("%s: sentence %d, token %d: qkv %d, PyTorch %d", what, k, t, got[t], want[t]);
    if (got_len != want_len)
        fail_msg("%s: sentence %d: qkv emits %d tokens, PyTorch %d", what, k, got_len, want_len);
}

/* Each sentence alone, as the tutorial's translate() decodes it. */
static void test_greedy_each(void **state)
{
    fixture *fx = *state;
    greedy_ref g = load_greedy(&fx->ref);
    int *out = malloc((size_t)g.L * sizeof *out);
    assert_non_null(out);
    qkv_error err = {0};
    for (int k = 0; k < g.K; k++) {
        int len = -1;
        if (qkv_transformer_greedy(fx->m, g.src + (size_t)k * g.S, &g.src_len[k], 1,
                                   g.src_len[k], g.max_len[k], out, &len, &err) != QKV_OK)
            fail_msg("sentence %d: %s", k, err.msg);
        expect_ids("alone", k, out, len, g.out + (size_t)k * g.L, g.out_len[k]);
    }
    print_message("%d greedy translations equal the tutorial's\n", g.K);
    free(out);
}

/* All sentences in one padded batch, under the longest cap: a sentence that ended with <eos>
 * must come out the same, a capped one must start with the tutorial's tokens. */
static void test_greedy_batch(void **state)
{
    fixture *fx = *state;
    greedy_ref g = load_greedy(&fx->ref);
    int cap = 0;
    for (int k = 0; k < g.K; k++) cap = g.max_len[k] > cap ? g.max_len[k] : cap;
    int *out = malloc((size_t)g.K * cap * sizeof *out), *len = malloc((size_t)g.K * sizeof *len);
    assert_true(out && len);
    qkv_error err = {0};
    if (qkv_transformer_greedy(fx->m, g.src, g.src_len, g.K, g.S, cap, out, len, &err) != QKV_OK)
        fail_msg("batch: %s", err.msg);
    for (int k = 0; k < g.K; k++) {
        const int *want = g.out + (size_t)k * g.L;
        if (g.eos[k]) {
            expect_ids("batch", k, out + (size_t)k * cap, len[k], want, g.out_len[k]);
        } else {
            assert_true(len[k] >= g.out_len[k]);
            expect_ids("batch (prefix)", k, out + (size_t)k * cap, g.out_len[k], want,
                       g.out_len[k]);
        }
    }
    free(out), free(len);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_config, setup, teardown),
        cmocka_unit_test_setup_teardown(test_logits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_greedy_each, setup, teardown),
        cmocka_unit_test_setup_teardown(test_greedy_batch, setup, teardown),
    };
    return cmocka_run_group_tests_name("torch2qkv", tests, NULL, NULL);
}
