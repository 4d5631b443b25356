/* SPDX-License-Identifier: MIT */
/* Data-parallel training's math without MPI. A batch cut into shards (qkv_shard_of), each
 * loss pass told where its shard starts (first_example) and scaled by the whole batch's
 * tokens, sums to the whole batch's loss and gradient, dropout included, on the materialised
 * and the flash attention kernels; told nothing, the shards draw other dropout masks and the
 * sum is off (the check can fail). A step with a reducer sums over the ranks between
 * backward and clipping: with a "mirror" reducer (every other rank held the same shard) the
 * update is the one-process update bit for bit. A rank whose data differ from rank 0's is
 * refused before training starts. */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "models/language_model_internal.h"
#include "models/transformer_internal.h"
#include "test_util.h"

enum { V = 13, B = 5, T = 7 };

static qkv_transformer *seq2seq(int flash)
{
    qkv_transformer_config c = qkv_transformer_default_config();
    c.src_vocab = c.tgt_vocab = V, c.d_model = 16, c.heads = 2, c.ffn = 24, c.max_len = 16;
    c.enc_layers = c.dec_layers = 1, c.dropout = 0.3f;
    qkv_transformer *m;
    assert_int_equal(qkv_transformer_create(&m, &c, 3, NULL), QKV_OK);
    m->core.flash_min_keys = flash ? 1 : INT_MAX;
    return m;
}

static qkv_lm *lm(int flash)
{
    qkv_lm_config c = qkv_lm_default_config();
    c.vocab = V, c.d_model = 16, c.heads = 2, c.ffn = 24, c.layers = 2, c.max_len = 16;
    c.dropout = 0.3f;
    qkv_lm *m;
    assert_int_equal(qkv_lm_create(&m, &c, 4, NULL), QKV_OK);
    m->core.flash_min_keys = flash ? 1 : INT_MAX;
    return m;
}

/* random ids, the sources of unequal lengths, some padded targets */
typedef struct {
    int src[B * T], valid[B], tgt_in[B * T], tgt_out[B * T];
} batch;

static void make_batch(batch *x, uint64_t seed)
{
    for (int i = 0; i < B * T; i++) {
        x->src[i] = QKV_N_RESERVED + (int)(qkv_random_u32(seed, (uint64_t)i) % (V - 4));
        x->tgt_out[i] = QKV_N_RESERVED + (int)(qkv_random_u32(seed + 1, (uint64_t)i) % (V - 4));
        x->tgt_in[i] = i % T ? x->tgt_out[i - 1] : QKV_BOS;
    }
    for (int b = 0; b < B; b++) x->valid[b] = T - b % 3, x->tgt_out[b * T + T - 1 - b % 2] = QKV_PAD;
}

static qkv_batch rows(batch *x, int first, int count)
{
    return (qkv_batch){count, T, T, x->src + first * T, x->valid + first,
                       x->tgt_in + first * T, x->tgt_out + first * T};
}

static int tokens_of(const int *targets, int n)
{
    int c = 0;
    for (int i = 0; i < n; i++) c += targets[i] != QKV_PAD;
    return c;
}

/* max |a - b| / max |a| */
static double rel_diff(const float *a, const float *b, size_t n)
{
    double d = 0.0, s = 0.0;
    for (size_t i = 0; i < n; i++) d = fmax(d, fabs((double)a[i] - b[i])), s = fmax(s, fabs(a[i]));
    return d / s;
}

static void test_shards_cover_the_batch(void **state)
{
    (void)state;
    for (int n = 0; n <= 9; n++)
        for (int size = 1; size <= 4; size++) {
            int next = 0;
            for (int r = 0; r < size; r++) {
                int first, count;
                qkv_shard_of(n, r, size, &first, &count);
                assert_int_equal(first, next);
                assert_true(count == n / size || count == n / size + 1);
                next = first + count;
            }
            assert_int_equal(next, n);
        }
}

/* The gradients of the whole batch, and of shards [0, 2) and [2, 5) summed, with shard
 * offsets told (offsets = 1) or not; returns their relative difference. */
static double transformer_shards(int flash, int offsets)
{
    qkv_transformer *m = seq2seq(flash);
    batch x;
    make_batch(&x, 21);
    const size_t n = qkv_transformer_num_params(m);
    float *g = qkv_transformer_grads(m), *whole = malloc(n * sizeof *whole);
    const float scale = 1.0f / (float)tokens_of(x.tgt_out, B * T);
    qkv_loss_options o = {.backward = 1, .grad_scale = scale, .label_smoothing = 0.1f,
                          .train = 1, .dropout_seed = 77};
    memset(g, 0, n * sizeof *g);
    const qkv_batch all = rows(&x, 0, B);
    double loss_all, loss_a, loss_b;
    assert_int_equal(qkv_transformer_loss(m, &all, &o, &loss_all, NULL, NULL), QKV_OK);
    memcpy(whole, g, n * sizeof *g);
    memset(g, 0, n * sizeof *g);
    const qkv_batch a = rows(&x, 0, 2), b = rows(&x, 2, B - 2);
    assert_int_equal(qkv_transformer_loss(m, &a, &o, &loss_a, NULL, NULL), QKV_OK);
    o.first_example = offsets ? 2 : 0;
    assert_int_equal(qkv_transformer_loss(m, &b, &o, &loss_b, NULL, NULL), QKV_OK);
    const double d = fmax(rel_diff(whole, g, n), fabs(loss_a + loss_b - loss_all) / loss_all);
    free(whole);
    qkv_transformer_free(m);
    return d;
}

static double lm_shards(int flash, int offsets)
{
    qkv_lm *m = lm(flash);
    batch x;
    make_batch(&x, 31);
    const size_t n = qkv_lm_num_params(m);
    float *g = qkv_lm_grads(m), *whole = malloc(n * sizeof *whole);
    const float scale = 1.0f / (float)tokens_of(x.tgt_out, B * T);
    qkv_loss_options o = {.backward = 1, .grad_scale = scale, .train = 1, .dropout_seed = 78};
    memset(g, 0, n * sizeof *g);
    double loss_all, loss_a, loss_b;
    assert_int_equal(qkv_lm_loss(m, x.src, x.tgt_out, B, T, &o, &loss_all, NULL, NULL), QKV_OK);
    memcpy(whole, g, n * sizeof *g);
    memset(g, 0, n * sizeof *g);
    assert_int_equal(qkv_lm_loss(m, x.src, x.tgt_out, 3, T, &o, &loss_a, NULL, NULL), QKV_OK);
    o.first_example = offsets ? 3 : 0;
    assert_int_equal(qkv_lm_loss(m, x.src + 3 * T, x.tgt_out + 3 * T, B - 3, T, &o, &loss_b,
                                 NULL, NULL), QKV_OK);
    const double d = fmax(rel_diff(whole, g, n), fabs(loss_a + loss_b - loss_all) / loss_all);
    free(whole);
    qkv_lm_free(m);
    return d;
}

static void test_shards_sum_to_the_batch(void **state)
{
    (void)state;
    for (int flash = 0; flash <= 1; flash++) {
        const double t = transformer_shards(flash, 1), l = lm_shards(flash, 1);
        if (t > 1e-5 || l > 1e-5)
            fail_msg("flash %d: shards differ from the batch by %.3g (seq2seq), %.3g (lm)", flash,
                     t, l);
        /* the same shards drawing their masks from counter 0: visibly another gradient */
        const double t0 = transformer_shards(flash, 0), l0 = lm_shards(flash, 0);
        if (t0 < 1e-3 || l0 < 1e-3)
            fail_msg("flash %d: shards without offsets should differ, by %.3g and %.3g", flash,
                     t0, l0);
    }
}

/* A reducer of `size` ranks each of which held the same shard: a sum is size x the buffer
 * (exact for size 2 in floating point). */
static int mirror_floats(void *ctx, float *buf, size_t n)
{
    (void)ctx;
    for (size_t i = 0; i < n; i++) buf[i] *= 2.0f;
    return 0;
}

static int mirror_doubles(void *ctx, double *buf, size_t n)
{
    (void)ctx;
    for (size_t i = 0; i < n; i++) buf[i] *= 2.0;
    return 0;
}

static int no_broadcast(void *ctx, void *buf, size_t bytes)
{
    (void)ctx, (void)buf, (void)bytes;
    return 0;
}

static void test_a_reduced_step_is_the_whole_step(void **state)
{
    (void)state;
    qkv_transformer *a = seq2seq(0), *b = seq2seq(0);
    const size_t n = qkv_transformer_num_params(a);
    qkv_adam oa, ob;
    assert_int_equal(qkv_adam_init(&oa, n, 0.9f, 0.98f, 1e-9f, 0.0f, NULL), QKV_OK);
    assert_int_equal(qkv_adam_init(&ob, n, 0.9f, 0.98f, 1e-9f, 0.0f, NULL), QKV_OK);
    const qkv_reducer two = {0, 2, mirror_floats, mirror_doubles, no_broadcast, NULL, NULL, NULL, 0};
    for (int s = 0; s < 3; s++) {
        batch x;
        make_batch(&x, 40 + (uint64_t)s);
        const qkv_batch all = rows(&x, 0, B);
        const int tokens = tokens_of(x.tgt_out, B * T);
        qkv_step_options o = {.lr = 1e-2f, .clip = 0.5f, .grad_scale = 1.0f / (float)tokens,
                              .dropout_seed = 5u + (uint64_t)s};
        qkv_step_result ra, rb;
        assert_int_equal(qkv_transformer_train_step(a, &oa, &all, &o, &ra, NULL), QKV_OK);
        /* the same batch on "each of two ranks", each scaled by the two ranks' tokens */
        o.reducer = &two, o.grad_scale = 1.0f / (float)(2 * tokens);
        assert_int_equal(qkv_transformer_train_step(b, &ob, &all, &o, &rb, NULL), QKV_OK);
        assert_int_equal(rb.tokens, 2 * ra.tokens);
        assert_true(rb.loss == 2.0 * ra.loss && rb.grad_norm == ra.grad_norm);
        assert_memory_equal(qkv_transformer_params(a), qkv_transformer_params(b),
                            n * sizeof(float));
    }
    /* the per-token mean of one rank's shard would be the wrong weight: refused */
    qkv_step_options o = {.lr = 1e-2f, .reducer = &two};
    qkv_step_result r;
    batch x;
    make_batch(&x, 50);
    const qkv_batch all = rows(&x, 0, B);
    qkv_error err;
    assert_int_equal(qkv_transformer_train_step(b, &ob, &all, &o, &r, &err), QKV_ERR_ARG);
    assert_non_null(strstr(err.msg, "grad_scale"));
    qkv_adam_free(&oa), qkv_adam_free(&ob);
    qkv_transformer_free(a), qkv_transformer_free(b);
}

/* rank 0's bytes arrive changed: as if rank 0 had read other data */
static int other_rank0(void *ctx, void *buf, size_t bytes)
{
    (void)ctx;
    if (bytes) ((unsigned char *)buf)[0] ^= 1;
    return 0;
}

static void test_ranks_with_other_data_are_refused(void **state)
{
    (void)state;
    qkv_lm *m = lm(0);
    int text[64];
    for (int i = 0; i < 64; i++) text[i] = QKV_N_RESERVED + i % (V - 4);
    const qkv_reducer two = {1, 2, mirror_floats, mirror_doubles, other_rank0, NULL, NULL, NULL, 0};
    qkv_lm_train_options o = qkv_lm_train_default_options();
    o.out_dir = "/nonexistent/never-written", o.batch = 2, o.context = 8, o.steps = 1;
    o.reducer = &two;
    qkv_error err;
    assert_int_equal(qkv_lm_train(m, text, 64, NULL, 0, &o, &err), QKV_ERR_ARG);
    assert_non_null(strstr(err.msg, "training texts differ between ranks"));
    qkv_lm_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shards_cover_the_batch),
        cmocka_unit_test(test_shards_sum_to_the_batch),
        cmocka_unit_test(test_a_reduced_step_is_the_whole_step),
        cmocka_unit_test(test_ranks_with_other_data_are_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
