/* SPDX-License-Identifier: MIT */
/* Flash attention inside the models (the backend chooses it, src/backend/cpu.c): from
 * flash_min_keys keys on, the encoder-decoder and the language model run
 * qkv_flash_attention_* instead of the materialised kernel, and must compute the same thing.
 *
 *   lm_*, seq2seq_*   the same model and batch, once with every attention materialised
 *                     (flash_min_keys = INT_MAX) and once with flash (the threshold lowered so
 *                     that lengths of 130-150, which cross the kernel's 128-key tiles, stay
 *                     fast): the loss within 1e-5 relative and every gradient tensor within
 *                     MODEL_REL max |materialised|. With dropout 0 and 0.1 (the flash kernel must
 *                     draw the very mask the materialised one draws, or nothing would match:
 *                     another seed is checked to move the loss by far more than the
 *                     tolerance), post- and pre-norm, padded targets, source valid lengths
 *                     (0 included), causal self-attention, and thresholds that put only some
 *                     of the attentions on the flash kernel. The caches must say which kernel
 *                     ran: P without flash, L and no P with it.
 *   *_memory          the arena of a flash model is smaller than the materialised one's by at
 *                     least the weights, B H n (m - 1) floats per attention.
 *   default_threshold at the default threshold (256 keys) 255 keys are materialised and 256
 *                     use flash; qkv_transformer_logits keeps the weights (the attention maps
 *                     read them) whatever the length. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#include "models/language_model_internal.h"
#include "models/transformer_internal.h"

/* Flash and materialised attention differ by float rounding (summation order, the exp
 * polynomial); through two blocks, LayerNorms and the loss that stays near 1e-6. */
#define MODEL_REL 1e-5f

enum { MATERIALISED = INT_MAX };

/* Ids uniform over the non-reserved tokens [4, V). */
static void random_ids(int *ids, size_t n, int V, uint64_t seed)
{
    for (size_t i = 0; i < n; i++) ids[i] = 4 + (int)(qkv_random_u32(seed, i) % (uint32_t)(V - 4));
}

static void check_loss(const char *what, double got, double want)
{
    if (!(fabs(got - want) <= 1e-5 * fabs(want)))
        fail_msg("%s: loss %.9g with flash, %.9g materialised", what, got, want);
}

/* ----------------------------------------------------------------------------------------
 * The language model
 * ---------------------------------------------------------------------------------------- */

typedef struct {
    int B, T;
    int *ids, *targets;
} lm_batch;

/* B sequences of T tokens; sequence b's targets after its first len_b are padding. */
static lm_batch lm_batch_make(int B, int T, int V, const int *lens)
{
    lm_batch b = {B, T, malloc((size_t)B * T * sizeof(int)), malloc((size_t)B * T * sizeof(int))};
    assert_non_null(b.ids), assert_non_null(b.targets);
    random_ids(b.ids, (size_t)B * T, V, 11);
    random_ids(b.targets, (size_t)B * T, V, 12);
    for (int s = 0; s < B; s++)
        for (int t = lens[s]; t < T; t++) b.targets[(size_t)s * T + t] = QKV_PAD;
    return b;
}

static void lm_batch_free(lm_batch *b) { free(b->ids), free(b->targets); }

static qkv_lm_config lm_config(int pre_norm, float dropout)
{
    qkv_lm_config c = qkv_lm_default_config();
    c.vocab = 23, c.d_model = 16, c.heads = 2, c.ffn = 24, c.layers = 2, c.max_len = 300;
    c.dropout = dropout, c.pre_norm = pre_norm, c.final_norm = pre_norm, c.act = QKV_ACT_GELU;
    return c;
}

/* Whether an attention's activations say the flash kernel ran, failing if they are
 * inconsistent: flash keeps L and no weights P, the materialised kernel P. */
static int used_flash(const mha_acts *a, const char *what, int l)
{
    const int flash = a->kernel == ATTENTION_FLASH;
    if (flash ? (a->c.P || !a->S) : (a->kernel != ATTENTION_MATERIALISED || !a->c.P || a->S != a->c.P))
        fail_msg("%s %d: kernel %d with P %p and S %p", what, l, (int)a->kernel, (void *)a->c.P,
                 (void *)a->S);
    return flash;
}

/* One step of the loss (mean over tokens) with attention over min_keys keys or more on the
 * flash kernel; the gradients go to grads (n params). Returns the summed loss. */
static double lm_step(qkv_lm *m, int min_keys, const lm_batch *b, int backward, int train,
                      uint64_t seed, float *grads)
{
    m->core.flash_min_keys = min_keys;
    float *g = qkv_lm_grads(m);
    const size_t n = qkv_lm_num_params(m);
    memset(g, 0, n * sizeof *g);
    double sum = 0.0;
    int tokens = 0;
    qkv_error err = {0};
    const qkv_loss_options pass = {.backward = backward, .train = train, .dropout_seed = seed};
    if (qkv_lm_loss(m, b->ids, b->targets, b->B, b->T, &pass, &sum, &tokens, &err) != QKV_OK)
        fail_msg("qkv_lm_loss: %s", err.msg);
    if (grads) memcpy(grads, g, n * sizeof *g);
    /* the kernel that ran, by what its cache holds */
    const int flash = b->T >= min_keys;
    for (int l = 0; l < m->cfg.layers; l++) {
        if (used_flash(&m->acts.s.blocks[l].self_att, "layer", l) != flash)
            fail_msg("layer %d: T %d should%s use flash", l, b->T, flash ? "" : " not");
    }
    return sum;
}

/* Every gradient tensor of a model, flash against materialised. A key projection's bias
 * adds q_i . b_k to every score of row i, which the softmax cancels: its gradient is 0 but for
 * rounding, so both kernels' must be negligible beside the key projection's own. */
static void check_grads(const qkv_param_info *tensors, int count, const float *flash,
                        const float *ref)
{
    for (int t = 0; t < count; t++) {
        const qkv_param_info *info = &tensors[t];
        const char *leaf = strrchr(info->name, '.');
        if (leaf && !strcmp(leaf, ".b_k")) {
            const qkv_param_info *W_k = &tensors[t - 1]; /* the table's order: W_k, b_k */
            float scale = 0.0f, worst = 0.0f;
            for (size_t i = 0; i < W_k->numel; i++)
                scale = fmaxf(scale, fabsf(ref[W_k->offset + i]));
            for (size_t i = 0; i < info->numel; i++)
                worst = fmaxf(worst, fmaxf(fabsf(flash[info->offset + i]),
                                           fabsf(ref[info->offset + i])));
            if (!(worst <= MODEL_REL * scale))
                fail_msg("%s: |gradient| %g, not negligible beside W_k's %g", info->name,
                         (double)worst, (double)scale);
            continue;
        }
        tu_check_grad(info->name, flash + info->offset, ref + info->offset, info->numel,
                      MODEL_REL);
    }
}

static void check_lm_grads(const qkv_lm *m, const float *flash, const float *ref)
{
    check_grads(m->core.tensors, m->core.n_tensors, flash, ref);
}

static void lm_equal(int pre_norm, float dropout)
{
    const int B = 2, T = 150;
    const int lens[2] = {150, 97};
    qkv_lm_config cfg = lm_config(pre_norm, dropout);
    qkv_lm *m = NULL;
    qkv_error err = {0};
    if (qkv_lm_create(&m, &cfg, 5, &err) != QKV_OK) fail_msg("%s", err.msg);
    lm_batch b = lm_batch_make(B, T, cfg.vocab, lens);
    const size_t n = qkv_lm_num_params(m);
    float *ref = tu_zeros(n), *got = tu_zeros(n);
    const int train = dropout > 0.0f;
    double want = lm_step(m, MATERIALISED, &b, 1, train, 77, ref);
    double have = lm_step(m, 16, &b, 1, train, 77, got);
    check_loss("lm", have, want);
    check_lm_grads(m, got, ref);
    /* the evaluation loss (no backward) too */
    check_loss("lm eval", lm_step(m, 16, &b, 0, 0, 0, NULL),
               lm_step(m, MATERIALISED, &b, 0, 0, 0, NULL));
    if (train) { /* dropout matters: another mask moves the loss far beyond the tolerance */
        double other = lm_step(m, 16, &b, 0, 1, 78, NULL);
        if (fabs(other - want) < 1e-4 * fabs(want))
            fail_msg("dropout seed 78 gives loss %.9g, seed 77 %.9g: dropout is not acting",
                     other, want);
    }
    free(ref), free(got);
    lm_batch_free(&b);
    qkv_lm_free(m);
}

static void test_lm_post_norm(void **state)
{
    (void)state;
    lm_equal(0, 0.0f);
}

static void test_lm_pre_norm_dropout(void **state)
{
    (void)state;
    lm_equal(1, 0.1f);
}

static void test_lm_post_norm_dropout(void **state)
{
    (void)state;
    lm_equal(0, 0.1f);
}

/* Arena floats a fresh model lays out for b with the given threshold. */
static size_t lm_arena(int min_keys, const lm_batch *b)
{
    qkv_lm_config cfg = lm_config(0, 0.1f);
    qkv_lm *m = NULL;
    assert_int_equal(qkv_lm_create(&m, &cfg, 5, NULL), QKV_OK);
    lm_step(m, min_keys, b, 1, 1, 3, NULL);
    size_t cap = m->core.arena_cap;
    qkv_lm_free(m);
    return cap;
}

static void test_lm_memory(void **state)
{
    (void)state;
    const int B = 2, T = 150, lens[2] = {150, 150};
    const qkv_lm_config cfg = lm_config(0, 0.1f);
    lm_batch b = lm_batch_make(B, T, cfg.vocab, lens);
    size_t mat = lm_arena(MATERIALISED, &b), flash = lm_arena(16, &b);
    size_t weights = (size_t)cfg.layers * B * cfg.heads * T * (T - 1);
    if (!(flash + weights <= mat))
        fail_msg("arena: %zu floats with flash, %zu materialised: saves less than the %zu of "
                 "the weights", flash, mat, weights);
    lm_batch_free(&b);
}

/* ----------------------------------------------------------------------------------------
 * The encoder-decoder
 * ---------------------------------------------------------------------------------------- */

typedef struct {
    qkv_batch b;
    int *src, *valid, *tgt_in, *tgt_out;
} s2s_batch;

/* B = 3 pairs: sources of valid lengths Ts, Ts/2 + 7 and 0; targets of lengths Tt, Tt/2 and 5
 * followed by padding. */
static s2s_batch s2s_batch_make(int Ts, int Tt, int V)
{
    enum { B = 3 };
    s2s_batch s;
    s.src = malloc((size_t)B * Ts * sizeof(int)), s.valid = malloc(B * sizeof(int));
    s.tgt_in = malloc((size_t)B * Tt * sizeof(int));
    s.tgt_out = malloc((size_t)B * Tt * sizeof(int));
    assert_non_null(s.src), assert_non_null(s.valid);
    assert_non_null(s.tgt_in), assert_non_null(s.tgt_out);
    random_ids(s.src, (size_t)B * Ts, V, 21);
    random_ids(s.tgt_out, (size_t)B * Tt, V, 22);
    const int src_len[B] = {Ts, Ts / 2 + 7, 0}, tgt_len[B] = {Tt, Tt / 2, 5};
    for (int b = 0; b < B; b++) {
        s.valid[b] = src_len[b];
        for (int t = src_len[b]; t < Ts; t++) s.src[(size_t)b * Ts + t] = QKV_PAD;
        for (int t = tgt_len[b]; t < Tt; t++) s.tgt_out[(size_t)b * Tt + t] = QKV_PAD;
        s.tgt_in[(size_t)b * Tt] = QKV_BOS;
        memcpy(s.tgt_in + (size_t)b * Tt + 1, s.tgt_out + (size_t)b * Tt,
               (size_t)(Tt - 1) * sizeof(int));
    }
    s.b = (qkv_batch){B, Ts, Tt, s.src, s.valid, s.tgt_in, s.tgt_out};
    return s;
}

static void s2s_batch_free(s2s_batch *s)
{
    free(s->src), free(s->valid), free(s->tgt_in), free(s->tgt_out);
}

static qkv_transformer_config s2s_config(int pre_norm, float dropout)
{
    qkv_transformer_config c = qkv_transformer_default_config();
    c.src_vocab = 19, c.tgt_vocab = 17, c.d_model = 16, c.heads = 2, c.ffn = 24;
    c.enc_layers = 2, c.dec_layers = 2, c.max_len = 300, c.dropout = dropout, c.bias = 1;
    c.pre_norm = pre_norm, c.final_norm = pre_norm;
    return c;
}


/* The kernels of the last pass against the rule: flash from min_keys keys on. */
static void check_kernels(const qkv_transformer *m, int min_keys, int Ts, int Tt)
{
    for (int l = 0; l < m->cfg.enc_layers; l++)
        if (used_flash(&m->acts.enc.blocks[l].self_att, "encoder", l) !=
            (Ts >= min_keys))
            fail_msg("encoder %d: wrong kernel for %d keys, threshold %d", l, Ts, min_keys);
    for (int l = 0; l < m->cfg.dec_layers; l++) {
        const block_acts *d = &m->acts.dec.blocks[l];
        if (used_flash(&d->self_att, "decoder self", l) != (Tt >= min_keys))
            fail_msg("decoder self %d: wrong kernel for %d keys, threshold %d", l, Tt, min_keys);
        if (used_flash(&d->cross_att, "decoder cross", l) != (Ts >= min_keys))
            fail_msg("decoder cross %d: wrong kernel for %d keys, threshold %d", l, Ts, min_keys);
    }
}

static double s2s_step(qkv_transformer *m, int min_keys, const s2s_batch *s, int backward,
                       int train, uint64_t seed, float *grads)
{
    m->core.flash_min_keys = min_keys;
    float *g = qkv_transformer_grads(m);
    const size_t n = qkv_transformer_num_params(m);
    memset(g, 0, n * sizeof *g);
    double sum = 0.0;
    int tokens = 0;
    qkv_error err = {0};
    const qkv_loss_options pass = {.backward = backward, .label_smoothing = 0.1f, .train = train,
                                   .dropout_seed = seed};
    if (qkv_transformer_loss(m, &s->b, &pass, &sum, &tokens, &err))
        fail_msg("qkv_transformer_loss: %s", err.msg);
    if (grads) memcpy(grads, g, n * sizeof *g);
    check_kernels(m, min_keys, s->b.src_len, s->b.tgt_len);
    return sum;
}

static void s2s_equal(int Ts, int Tt, int min_keys, int pre_norm, float dropout)
{
    qkv_transformer_config cfg = s2s_config(pre_norm, dropout);
    qkv_transformer *m = NULL;
    qkv_error err = {0};
    if (qkv_transformer_create(&m, &cfg, 9, &err) != QKV_OK) fail_msg("%s", err.msg);
    s2s_batch s = s2s_batch_make(Ts, Tt, cfg.tgt_vocab);
    const size_t n = qkv_transformer_num_params(m);
    float *ref = tu_zeros(n), *got = tu_zeros(n);
    const int train = dropout > 0.0f;
    double want = s2s_step(m, MATERIALISED, &s, 1, train, 123, ref);
    double have = s2s_step(m, min_keys, &s, 1, train, 123, got);
    check_loss("seq2seq", have, want);
    check_grads(m->core.tensors, m->core.n_tensors, got, ref);
    check_loss("seq2seq eval", s2s_step(m, min_keys, &s, 0, 0, 0, NULL),
               s2s_step(m, MATERIALISED, &s, 0, 0, 0, NULL));
    if (train) {
        double other = s2s_step(m, min_keys, &s, 0, 1, 124, NULL);
        if (fabs(other - want) < 1e-4 * fabs(want))
            fail_msg("dropout seed 124 gives loss %.9g, seed 123 %.9g: dropout is not acting",
                     other, want);
    }
    free(ref), free(got);
    s2s_batch_free(&s);
    qkv_transformer_free(m);
}

static void test_seq2seq_all_flash(void **state)
{
    (void)state;
    s2s_equal(140, 131, 16, 0, 0.0f);
}

static void test_seq2seq_all_flash_dropout_pre_norm(void **state)
{
    (void)state;
    s2s_equal(140, 131, 16, 1, 0.1f);
}

static void test_seq2seq_all_flash_dropout(void **state)
{
    (void)state;
    s2s_equal(133, 140, 16, 0, 0.1f);
}

/* Long sources, short targets: encoder and cross-attention flash, decoder self not. */
static void test_seq2seq_flash_source_only(void **state)
{
    (void)state;
    s2s_equal(140, 60, 100, 0, 0.1f);
}

/* Short sources, long targets: only the decoder's self-attention on flash. */
static void test_seq2seq_flash_target_only(void **state)
{
    (void)state;
    s2s_equal(60, 140, 100, 1, 0.1f);
}

static size_t s2s_arena(int min_keys, const s2s_batch *s)
{
    qkv_transformer_config cfg = s2s_config(0, 0.1f);
    qkv_transformer *m = NULL;
    assert_int_equal(qkv_transformer_create(&m, &cfg, 9, NULL), QKV_OK);
    s2s_step(m, min_keys, s, 1, 1, 3, NULL);
    size_t cap = m->core.arena_cap;
    qkv_transformer_free(m);
    return cap;
}

static void test_seq2seq_memory(void **state)
{
    (void)state;
    const int Ts = 140, Tt = 131, B = 3;
    const qkv_transformer_config cfg = s2s_config(0, 0.1f);
    s2s_batch s = s2s_batch_make(Ts, Tt, cfg.tgt_vocab);
    size_t mat = s2s_arena(MATERIALISED, &s), flash = s2s_arena(16, &s);
    size_t weights = (size_t)B * cfg.heads *
                     ((size_t)cfg.enc_layers * Ts * (Ts - 1) +
                      (size_t)cfg.dec_layers * ((size_t)Tt * (Tt - 1) + (size_t)Tt * (Ts - 1)));
    if (!(flash + weights <= mat))
        fail_msg("arena: %zu floats with flash, %zu materialised: saves less than the %zu of "
                 "the weights", flash, mat, weights);
    s2s_batch_free(&s);
}

/* ----------------------------------------------------------------------------------------
 * The default threshold
 * ---------------------------------------------------------------------------------------- */

static void test_default_threshold(void **state)
{
    (void)state;
    assert_int_equal(FLASH_MIN_KEYS, 256);
    /* the language model: 255 keys materialised, 256 flash */
    qkv_lm_config lc = lm_config(0, 0.0f);
    lc.layers = 1;
    qkv_lm *lm = NULL;
    assert_int_equal(qkv_lm_create(&lm, &lc, 1, NULL), QKV_OK);
    assert_int_equal(lm->core.flash_min_keys, FLASH_MIN_KEYS);
    for (int T = 255; T <= 256; T++) {
        const int lens[1] = {T};
        lm_batch b = lm_batch_make(1, T, lc.vocab, lens);
        lm_step(lm, FLASH_MIN_KEYS, &b, 0, 0, 0, NULL); /* checks the kernel against T */
        lm_batch_free(&b);
    }
    qkv_lm_free(lm);

    /* the encoder-decoder: a 256-token source puts the encoder and cross-attention on flash */
    qkv_transformer_config tc = s2s_config(0, 0.0f);
    tc.enc_layers = tc.dec_layers = 1;
    qkv_transformer *m = NULL;
    assert_int_equal(qkv_transformer_create(&m, &tc, 1, NULL), QKV_OK);
    assert_int_equal(m->core.flash_min_keys, FLASH_MIN_KEYS);
    s2s_batch s = s2s_batch_make(256, 9, tc.tgt_vocab);
    s2s_step(m, FLASH_MIN_KEYS, &s, 0, 0, 0, NULL);
    /* qkv_transformer_logits keeps every attention's weights for the attention maps */
    float *logits = tu_zeros((size_t)s.b.B * s.b.tgt_len * tc.tgt_vocab);
    assert_int_equal(qkv_transformer_logits(m, &s.b, logits, NULL), QKV_OK);
    check_kernels(m, MATERIALISED, 256, 9);
    /* and its logits are the flash pass's: the loss over them is the evaluation loss */
    double sum = 0.0;
    for (int i = 0; i < s.b.B * s.b.tgt_len; i++) {
        const float *z = logits + (size_t)i * tc.tgt_vocab;
        int y = s.b.tgt_out[i];
        if (y == QKV_PAD) continue;
        double mx = z[0], se = 0.0;
        for (int k = 1; k < tc.tgt_vocab; k++) mx = z[k] > mx ? z[k] : mx;
        for (int k = 0; k < tc.tgt_vocab; k++) se += exp(z[k] - mx);
        double lse = mx + log(se), mean = 0.0;
        for (int k = 0; k < tc.tgt_vocab; k++) mean += z[k];
        mean /= tc.tgt_vocab;
        sum += 0.9 * (lse - z[y]) + 0.1 * (lse - mean); /* label smoothing 0.1, as s2s_step */
    }
    check_loss("logits against the flash evaluation loss", sum,
               s2s_step(m, FLASH_MIN_KEYS, &s, 0, 0, 0, NULL));
    free(logits);
    s2s_batch_free(&s);
    qkv_transformer_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lm_post_norm),
        cmocka_unit_test(test_lm_pre_norm_dropout),
        cmocka_unit_test(test_lm_post_norm_dropout),
        cmocka_unit_test(test_lm_memory),
        cmocka_unit_test(test_seq2seq_all_flash),
        cmocka_unit_test(test_seq2seq_all_flash_dropout_pre_norm),
        cmocka_unit_test(test_seq2seq_all_flash_dropout),
        cmocka_unit_test(test_seq2seq_flash_source_only),
        cmocka_unit_test(test_seq2seq_flash_target_only),
        cmocka_unit_test(test_seq2seq_memory),
        cmocka_unit_test(test_default_threshold),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
