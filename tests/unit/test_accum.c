/* SPDX-License-Identifier: MIT */
/* Gradient accumulation and the schedule by steps in the training loops. A run of batch B with
 * accum N trains the model a run of batch N x B trains, up to float rounding, dropout included
 * (the encoder-decoder with d2l's fixed batches, both loss scalings, and the language model);
 * a run of batch B alone does not (the check can fail). Validation every N steps records each
 * validation's step, keeps the best model and stops on patience mid-epoch; --save-every keeps
 * the models of the last keep_last saves; and a run stopped at any step (a validation, a save,
 * a step between) and resumed ends bit for bit as the run that never stopped. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_util.h"

enum { V = 12, T = TU_COPY_T, NTRAIN = 96, NVALID = 16 };

typedef tu_copy_data data; /* tu_copy_task */

static qkv_transformer *small_model(void) { return tu_small_transformer(V, 0.2f, 5); }

/* max |a - b| / max |a| */
static double rel_diff(const float *a, const float *b, size_t n)
{
    double d = 0.0, s = 0.0;
    for (size_t i = 0; i < n; i++) d = fmax(d, fabs((double)a[i] - b[i])), s = fmax(s, fabs(a[i]));
    return d / s;
}

/* The parameters after training from the same start with batch and accum for `steps` steps
 * (0: two epochs). */
static float *trained_for(const data *x, int batch, int accum, int d2l, int steps, size_t *n)
{
    qkv_transformer *m = small_model();
    char dir[64];
    tu_temp_dir(dir, sizeof dir, "qkv_accum");
    qkv_train_options o = qkv_train_default_options();
    /* Adam with epsilon 1 is near SGD: m / (sqrt(v) + 1) is linear in small gradients, where
     * with 1e-8 a gradient near zero moves its weight by about lr whatever its size, so that
     * float rounding in a sum that nearly cancels would move it one way or the other */
    o.out_dir = dir, o.batch = batch, o.accum = accum, o.epochs = 2, o.lr = 0.2f;
    o.adam_eps = 1.0f;
    o.d2l_loss_scale = d2l, o.clip = 0.0f; /* the norm of another batch clips otherwise */
    o.stop_after_steps = steps;
    qkv_error err = {0};
    assert_int_equal(qkv_train(m, &x->d, &o, &err), QKV_OK);
    *n = qkv_transformer_num_params(m);
    float *p = malloc(*n * sizeof *p);
    memcpy(p, qkv_transformer_params(m), *n * sizeof *p);
    qkv_transformer_free(m);
    tu_remove_tree(dir);
    return p;
}

static float *trained(const data *x, int batch, int accum, int d2l, size_t *n)
{
    return trained_for(x, batch, accum, d2l, 0, n);
}

/* After one step and after a run of two epochs, the micro-batches' model is the larger batch's
 * up to float rounding, and the smaller batch's alone is not. */
static void compare(const data *x, int batch, int accum, int d2l)
{
    size_t n;
    float *big1 = trained_for(x, batch * accum, 1, d2l, 1, &n);
    float *acc1 = trained_for(x, batch, accum, d2l, 1, &n);
    float *small1 = trained_for(x, batch, 1, d2l, 1, &n);
    float *big = trained(x, batch * accum, 1, d2l, &n), *acc = trained(x, batch, accum, d2l, &n);
    float *small = trained(x, batch, 1, d2l, &n);
    const double one = rel_diff(big1, acc1, n), one_other = rel_diff(big1, small1, n);
    const double run = rel_diff(big, acc, n), run_other = rel_diff(big, small, n);
    printf("  %s loss, batch %d vs %d x accum %d: after a step %.2g (batch %d alone: %.2g), "
           "after the run %.2g (%.2g)\n", d2l ? "d2l's" : "per-token", batch * accum, batch,
           accum, one, batch, one_other, run, run_other);
    assert_true(one < 1e-5 && one_other > 1e-3);
    assert_true(run < 1e-5 && run_other > 1e-3);
    free(big1), free(acc1), free(small1), free(big), free(acc), free(small);
}

static void test_accumulation_is_a_larger_batch(void **state)
{
    (void)state;
    static data x;
    tu_copy_task(&x, NTRAIN, V, 11);
    compare(&x, 8, 4, 0);
    compare(&x, 8, 4, 1);
    compare(&x, 4, 3, 0);
}

/* An epoch of 90 pairs in steps of 4 x 8: the last step takes the 26 left, as batch 32's
 * last batch does. */
static void test_accumulation_ends_the_epoch_as_the_larger_batch(void **state)
{
    (void)state;
    static data x;
    tu_copy_task(&x, 90, V, 12);
    compare(&x, 8, 4, 0);
}

static qkv_lm *small_lm(void)
{
    qkv_lm_config c = qkv_lm_default_config();
    c.vocab = V, c.d_model = 16, c.heads = 2, c.ffn = 24, c.layers = 1, c.max_len = 8;
    c.dropout = 0.2f;
    qkv_lm *m;
    assert_int_equal(qkv_lm_create(&m, &c, 6, NULL), QKV_OK);
    return m;
}

static float *lm_trained(const int *text, size_t n_text, int batch, int accum, int steps,
                         size_t *n)
{
    qkv_lm *m = small_lm();
    char dir[64];
    tu_temp_dir(dir, sizeof dir, "qkv_accum");
    qkv_lm_train_options o = qkv_lm_train_default_options();
    o.out_dir = dir, o.batch = batch, o.accum = accum, o.context = 8, o.steps = steps;
    o.clip = 0.0f, o.warmup = 0, o.eval_every = 0, o.lr = 1.0f, o.adam_eps = 1.0f;
    qkv_error err = {0};
    assert_int_equal(qkv_lm_train(m, text, n_text, NULL, 0, &o, &err), QKV_OK);
    *n = qkv_lm_num_params(m);
    float *p = malloc(*n * sizeof *p);
    memcpy(p, qkv_lm_params(m), *n * sizeof *p);
    qkv_lm_free(m);
    tu_remove_tree(dir);
    return p;
}

static void test_lm_accumulation(void **state)
{
    (void)state;
    int text[400];
    for (int i = 0; i < 400; i++) text[i] = QKV_N_RESERVED + (int)(qkv_random_u32(7, i) % (V - 4));
    size_t n;
    float *big = lm_trained(text, 400, 8, 1, 1, &n), *acc = lm_trained(text, 400, 2, 4, 1, &n);
    float *small = lm_trained(text, 400, 2, 1, 1, &n);
    printf("  language model, batch 8 vs 2 x accum 4 after a step: %.2g (batch 2 alone: %.2g)\n",
           rel_diff(big, acc, n), rel_diff(big, small, n));
    assert_true(rel_diff(big, acc, n) < 1e-5 && rel_diff(big, small, n) > 1e-3);
    free(big), free(acc), free(small);
    big = lm_trained(text, 400, 8, 1, 6, &n), acc = lm_trained(text, 400, 2, 4, 6, &n);
    small = lm_trained(text, 400, 2, 1, 6, &n);
    printf("  after 6 steps: %.2g (%.2g)\n", rel_diff(big, acc, n), rel_diff(big, small, n));
    assert_true(rel_diff(big, acc, n) < 1e-5 && rel_diff(big, small, n) > 1e-3);
    free(big), free(acc), free(small);
}

/* ---- the schedule by steps ---------------------------------------------------------------- */

static int exists(const char *dir, const char *name)
{
    char path[256];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return !stat(path, &st);
}

static char *read_text(const char *dir, const char *name)
{
    char path[256], *text = NULL;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    qkv_error err = {0};
    assert_int_equal(qkv_read_file(path, 1 << 20, &text, NULL, &err), QKV_OK);
    return text;
}

/* qkv_train by steps into dir: validation every 5 steps, a save every 4 (the last 2 kept),
 * patience 1; stopped at stop_after (0: not), or resumed. */
static void run_by_steps(const data *x, const data *valid, const char *dir, int stop_after,
                         int resume, int64_t *steps)
{
    qkv_transformer *m = small_model();
    qkv_train_options o = qkv_train_default_options();
    o.out_dir = dir, o.batch = 16, o.accum = 2, o.epochs = 8, o.lr = 0.05f;
    o.valid = &valid->d, o.valid_every = 5, o.patience = 1, o.save_every = 4, o.keep_last = 2;
    o.stop_after_steps = stop_after, o.resume = resume;
    qkv_error err = {0};
    qkv_status st = qkv_train(m, &x->d, &o, &err);
    if (st) printf("  %s\n", err.msg);
    assert_int_equal(st, QKV_OK);
    if (steps) {
        char *h = read_text(dir, "validation.json");
        *steps = 0;
        for (const char *p = strstr(h, "\"step\": "); p; p = strstr(p + 1, "\"step\": "))
            *steps = atoll(p + 8);
        free(h);
    }
    qkv_transformer_free(m);
}

static int same_file(const char *a, const char *b, const char *name)
{
    char *x = read_text(a, name), *y = read_text(b, name);
    const int same = !strcmp(x, y);
    free(x), free(y);
    return same;
}

static int same_bytes(const char *a, const char *b, const char *name)
{
    char pa[256], pb[256], *x = NULL, *y = NULL;
    size_t nx = 0, ny = 0;
    qkv_error err = {0};
    snprintf(pa, sizeof pa, "%s/%s", a, name);
    snprintf(pb, sizeof pb, "%s/%s", b, name);
    assert_int_equal(qkv_read_file(pa, 1 << 24, &x, &nx, &err), QKV_OK);
    assert_int_equal(qkv_read_file(pb, 1 << 24, &y, &ny, &err), QKV_OK);
    const int same = nx == ny && !memcmp(x, y, nx);
    free(x), free(y);
    return same;
}

static void test_schedule_by_steps(void **state)
{
    (void)state;
    static data x, valid;
    tu_copy_task(&x, NTRAIN, V, 21);
    tu_copy_task(&valid, NVALID, V, 22);
    for (int e = 0; e < NVALID; e++) /* reversed targets: as the model learns to copy, the
                                      * validation loss rises, and patience stops the run */
        for (int i = 0, j = valid.tgt_valid[e] - 2; i < j; i++, j--) {
            const int t = valid.tgt[e * T + i];
            valid.tgt[e * T + i] = valid.tgt[e * T + j], valid.tgt[e * T + j] = t;
        }
    char full[64];
    tu_temp_dir(full, sizeof full, "qkv_accum");
    int64_t last = 0;
    run_by_steps(&x, &valid, full, 0, 0, &last);
    /* 3 steps an epoch (96 pairs, 2 x 16 a step): 24 steps at most; patience stops earlier,
     * mid-epoch */
    char *h = read_text(full, "validation.json");
    printf("  validations up to step %lld\n%s", (long long)last, h);
    assert_true(last % 5 == 0 && last < 24 && last % 3 != 0);
    /* and it stopped there: the last checkpoint is of that step */
    char ckpt[128];
    qkv_tensor_file f = {0};
    qkv_error err = {0};
    snprintf(ckpt, sizeof ckpt, "%s/checkpoint.safetensors", full);
    assert_int_equal(qkv_tensor_file_load(&f, ckpt, &err), QKV_OK);
    assert_int_equal(atoll(qkv_tensor_file_meta(&f, "step")), last);
    qkv_tensor_file_free(&f);
    assert_non_null(strstr(h, "\"step\": 5,"));
    free(h);
    char name[32];
    snprintf(name, sizeof name, "step-%07lld", (long long)(last / 4 * 4));
    assert_true(exists(full, name));                 /* the last save is kept */
    snprintf(name, sizeof name, "step-%07lld", (long long)(last / 4 * 4 - 8));
    assert_false(exists(full, name));                /* keep_last 2: the third last is gone */
    assert_true(exists(full, "best/model.safetensors"));
    assert_true(exists(full, "model.safetensors"));
    /* stopped at a validation, at a save, and between, each resumed: the same end */
    const int stops[] = {5, 8, 7};
    for (int i = 0; i < 3; i++) {
        char cut[64];
        tu_temp_dir(cut, sizeof cut, "qkv_accum");
        run_by_steps(&x, &valid, cut, stops[i], 0, NULL);
        assert_false(exists(cut, "model.safetensors"));
        run_by_steps(&x, &valid, cut, 0, 1, NULL);
        assert_true(same_bytes(full, cut, "model.safetensors"));
        assert_true(same_bytes(full, cut, "best/model.safetensors"));
        assert_true(same_file(full, cut, "validation.json"));
        tu_remove_tree(cut);
    }
    tu_remove_tree(full);
}

static void test_rejects_bad_options(void **state)
{
    (void)state;
    static data x;
    tu_copy_task(&x, NTRAIN, V, 31);
    qkv_transformer *m = small_model();
    qkv_train_options o = qkv_train_default_options();
    o.out_dir = "/nonexistent/qkv", o.valid_every = 5; /* no validation data */
    qkv_error err = {0};
    assert_int_equal(qkv_train(m, &x.d, &o, &err), QKV_ERR_ARG);
    o.valid_every = 0, o.accum = -1;
    assert_int_equal(qkv_train(m, &x.d, &o, &err), QKV_ERR_ARG);
    qkv_transformer_free(m);
}

int main(void)
{
    qkv_set_threads(1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_accumulation_is_a_larger_batch),
        cmocka_unit_test(test_accumulation_ends_the_epoch_as_the_larger_batch),
        cmocka_unit_test(test_lm_accumulation),
        cmocka_unit_test(test_schedule_by_steps),
        cmocka_unit_test(test_rejects_bad_options),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
