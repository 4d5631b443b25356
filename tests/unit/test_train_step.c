/* SPDX-License-Identifier: MIT */
/* One training step (qkv_transformer_train_step, qkv_lm_train_step) is exactly its parts:
 * zero the gradients, qkv_*_loss with backward, qkv_clip_grad_norm, qkv_adam_update, bit for
 * bit, over several steps (so a stale gradient or a missed zeroing shows). A step whose loss
 * or gradient is not finite leaves the parameters and Adam's moments untouched: it fails
 * with QKV_ERR_NUMERIC, or with skip_nonfinite is skipped and counted. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

enum { V = 11, B = 3, T = 6, STEPS = 4 };

static qkv_transformer *seq2seq(void)
{
    qkv_transformer_config c = qkv_transformer_default_config();
    c.src_vocab = c.tgt_vocab = V, c.d_model = 16, c.heads = 2, c.ffn = 24, c.max_len = 16;
    c.enc_layers = c.dec_layers = 1, c.dropout = 0.2f;
    qkv_transformer *m;
    assert_int_equal(qkv_transformer_create(&m, &c, 3, NULL), QKV_OK);
    return m;
}

static qkv_lm *lm(void)
{
    qkv_lm_config c = qkv_lm_default_config();
    c.vocab = V, c.d_model = 16, c.heads = 2, c.ffn = 24, c.layers = 2, c.max_len = 16;
    c.dropout = 0.2f;
    qkv_lm *m;
    assert_int_equal(qkv_lm_create(&m, &c, 4, NULL), QKV_OK);
    return m;
}

/* random ids in [QKV_N_RESERVED, V), targets with some padding */
typedef struct {
    int src[B * T], valid[B], tgt_in[B * T], tgt_out[B * T];
    qkv_batch b;
} batch;

static void make_batch(batch *x, uint64_t seed)
{
    for (int i = 0; i < B * T; i++) {
        x->src[i] = QKV_N_RESERVED + (int)(qkv_random_u32(seed, (uint64_t)i) % (V - 4));
        x->tgt_out[i] = QKV_N_RESERVED + (int)(qkv_random_u32(seed + 1, (uint64_t)i) % (V - 4));
        x->tgt_in[i] = i % T ? x->tgt_out[i - 1] : QKV_BOS;
    }
    for (int b = 0; b < B; b++) x->valid[b] = T - b, x->tgt_out[b * T + T - 1] = QKV_PAD;
    x->b = (qkv_batch){B, T, T, x->src, x->valid, x->tgt_in, x->tgt_out};
}

static qkv_step_options options(int step)
{
    qkv_step_options o = {1e-2f * (float)(step + 1), 0.5f, 0.0f, 0.1f, 1000u + (uint64_t)step, 0,
                          NULL, 0};
    return o;
}

static void assert_same(const float *a, const float *b, size_t n, const char *what)
{
    if (memcmp(a, b, n * sizeof *a)) fail_msg("%s differ", what);
}

static void test_transformer_step_is_its_parts(void **state)
{
    (void)state;
    qkv_transformer *a = seq2seq(), *b = seq2seq();
    const size_t n = qkv_transformer_num_params(a);
    qkv_adam oa, ob;
    assert_int_equal(qkv_adam_init(&oa, n, 0.9f, 0.98f, 1e-9f, 0.01f, NULL), QKV_OK);
    assert_int_equal(qkv_adam_init(&ob, n, 0.9f, 0.98f, 1e-9f, 0.01f, NULL), QKV_OK);
    for (int s = 0; s < STEPS; s++) {
        batch x;
        make_batch(&x, 10 + (uint64_t)s);
        const qkv_step_options o = options(s);
        qkv_step_result r;
        assert_int_equal(qkv_transformer_train_step(a, &oa, &x.b, &o, &r, NULL), QKV_OK);
        /* the same by hand */
        float *g = qkv_transformer_grads(b);
        memset(g, 0, n * sizeof *g);
        const qkv_loss_options lo = {1, o.grad_scale, o.label_smoothing, 1, o.dropout_seed, 0, NULL, NULL};
        double loss;
        int tokens;
        assert_int_equal(qkv_transformer_loss(b, &x.b, &lo, &loss, &tokens, NULL), QKV_OK);
        const double norm = qkv_clip_grad_norm(g, n, o.clip);
        qkv_adam_update(&ob, qkv_transformer_params(b), g, o.lr);
        assert_true(r.loss == loss && r.tokens == tokens && r.grad_norm == norm && !r.skipped);
        assert_true(r.grad_norm > o.clip); /* the clip did something */
        assert_same(qkv_transformer_params(a), qkv_transformer_params(b), n, "parameters");
        assert_same(oa.m, ob.m, n, "first moments");
    }
    assert_int_equal(oa.step, STEPS);
    qkv_adam_free(&oa), qkv_adam_free(&ob);
    qkv_transformer_free(a), qkv_transformer_free(b);
}

static void test_lm_step_is_its_parts(void **state)
{
    (void)state;
    qkv_lm *a = lm(), *b = lm();
    const size_t n = qkv_lm_num_params(a);
    qkv_adam oa, ob;
    assert_int_equal(qkv_adam_init(&oa, n, 0.9f, 0.99f, 1e-8f, 0.0f, NULL), QKV_OK);
    assert_int_equal(qkv_adam_init(&ob, n, 0.9f, 0.99f, 1e-8f, 0.0f, NULL), QKV_OK);
    for (int s = 0; s < STEPS; s++) {
        batch x;
        make_batch(&x, 20 + (uint64_t)s);
        qkv_step_options o = options(s);
        o.label_smoothing = 0.0f;
        qkv_step_result r;
        assert_int_equal(qkv_lm_train_step(a, &oa, x.tgt_in, x.tgt_out, B, T, &o, &r, NULL),
                         QKV_OK);
        float *g = qkv_lm_grads(b);
        memset(g, 0, n * sizeof *g);
        const qkv_loss_options lo = {1, 0.0f, 0.0f, 1, o.dropout_seed, 0, NULL, NULL};
        double loss;
        int tokens;
        assert_int_equal(qkv_lm_loss(b, x.tgt_in, x.tgt_out, B, T, &lo, &loss, &tokens, NULL),
                         QKV_OK);
        const double norm = qkv_clip_grad_norm(g, n, o.clip);
        qkv_adam_update(&ob, qkv_lm_params(b), g, o.lr);
        assert_true(r.loss == loss && r.tokens == tokens && r.grad_norm == norm);
        assert_same(qkv_lm_params(a), qkv_lm_params(b), n, "parameters");
    }
    qkv_adam_free(&oa), qkv_adam_free(&ob);
    qkv_lm_free(a), qkv_lm_free(b);
}

/* A parameter set to NaN makes the loss non-finite: the step fails or is skipped, and
 * nothing else of the model or the optimizer moves. */
static void test_nonfinite_steps_change_nothing(void **state)
{
    (void)state;
    qkv_transformer *m = seq2seq();
    const size_t n = qkv_transformer_num_params(m);
    qkv_adam opt;
    assert_int_equal(qkv_adam_init(&opt, n, 0.9f, 0.98f, 1e-9f, 0.0f, NULL), QKV_OK);
    batch x;
    make_batch(&x, 30);
    qkv_step_options o = options(0);
    qkv_step_result r;
    assert_int_equal(qkv_transformer_train_step(m, &opt, &x.b, &o, &r, NULL), QKV_OK);
    qkv_transformer_params(m)[n - 1] = NAN; /* the output bias's last value */
    float *before = tu_copy(qkv_transformer_params(m), n), *m1 = tu_copy(opt.m, n);
    qkv_error err = {0};
    assert_int_equal(qkv_transformer_train_step(m, &opt, &x.b, &o, &r, &err), QKV_ERR_NUMERIC);
    assert_non_null(strstr(err.msg, "not finite"));
    assert_int_equal(opt.step, 1);
    o.skip_nonfinite = 1;
    assert_int_equal(qkv_transformer_train_step(m, &opt, &x.b, &o, &r, &err), QKV_OK);
    assert_true(r.skipped && isnan(r.grad_norm));
    assert_int_equal(opt.step, 2); /* counted, so later steps keep their streams */
    const float *after = qkv_transformer_params(m);
    for (size_t i = 0; i < n; i++)
        if (!(after[i] == before[i] || (isnan(after[i]) && isnan(before[i]))))
            fail_msg("parameter %zu moved in a non-finite step", i);
    assert_same(opt.m, m1, n, "first moments");
    free(before), free(m1);
    qkv_adam_free(&opt);
    qkv_transformer_free(m);
}

/* Settings past the library's limits are refused, naming the setting; the limits themselves
 * are taken (a learning rate or a weight decay of 1e30 took the weights to 1e30). */
static void test_optimiser_limits(void **state)
{
    (void)state;
    qkv_adam opt;
    qkv_error err = {0};
    const struct {
        float b1, b2, eps, wd;
        const char *want;
    } bad[] = {
        {0.9f, 0.999f, 1e-8f, 1e30f, "weight decay must be in [0, 1]"},
        {0.9f, 0.999f, 1e-8f, -0.1f, "weight decay"},
        {0.9f, 0.999f, 1e-8f, NAN, "weight decay"},
        {0.9f, 0.999f, 10.0f, 0.0f, "epsilon must be in (0, 1]"},
        {0.9f, 0.999f, 0.0f, 0.0f, "epsilon"},
        {1.0f, 0.999f, 1e-8f, 0.0f, "betas must be in [0, 1)"},
        {0.9f, NAN, 1e-8f, 0.0f, "betas"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_int_equal(qkv_adam_init(&opt, 4, bad[i].b1, bad[i].b2, bad[i].eps, bad[i].wd, &err),
                         QKV_ERR_ARG);
        if (!strstr(err.msg, bad[i].want)) fail_msg("\"%s\" lacks \"%s\"", err.msg, bad[i].want);
    }
    assert_int_equal(qkv_adam_init(&opt, 4, 0.0f, 0.0f, QKV_MAX_ADAM_EPS, QKV_MAX_WEIGHT_DECAY,
                                   &err), QKV_OK);
    qkv_adam_free(&opt);
    /* the trainers: a learning rate past QKV_MAX_LR, before anything is read or written */
    qkv_train_options o = qkv_train_default_options();
    o.out_dir = "/nonexistent-qkv-dir", o.lr = 1e30f;
    qkv_transformer_config cfg = qkv_transformer_default_config();
    cfg.src_vocab = cfg.tgt_vocab = 8, cfg.d_model = 8, cfg.heads = 2, cfg.ffn = 8;
    cfg.enc_layers = cfg.dec_layers = 1, cfg.max_len = 8;
    qkv_transformer *m;
    assert_int_equal(qkv_transformer_create(&m, &cfg, 1, &err), QKV_OK);
    qkv_dataset d = {0};
    assert_int_equal(qkv_train(m, &d, &o, &err), QKV_ERR_ARG);
    assert_non_null(strstr(err.msg, "learning rate must be in (0, 10] (got 1e+30)"));
    qkv_transformer_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_transformer_step_is_its_parts),
        cmocka_unit_test(test_lm_step_is_its_parts),
        cmocka_unit_test(test_nonfinite_steps_change_nothing),
        cmocka_unit_test(test_optimiser_limits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
