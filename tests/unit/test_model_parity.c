/* SPDX-License-Identifier: MIT */
/* Whole-model PyTorch parity: the encoder-decoder Transformer trained for 20 Adam steps.
 *
 * Each case is a file written by tests/parity/make_model_reference.py: tools/qkv_torch.py's
 * model (itself checked there against torch.nn.Transformer) with random initial weights, fixed
 * padded batches, dropout 0, and per step: zero grads, mean token cross-entropy (optionally
 * label-smoothed), backward, optional clip_grad_norm_, torch.optim.Adam. We load the initial
 * weights into qkv by name through the tensor table (every name must exist on both sides with
 * the same shape), run the same steps with qkv_transformer_loss, qkv_clip_grad_norm and
 * qkv_adam_update, and require
 *   initial logits   |qkv - torch| <= 1e-5 + 1e-5 |torch|            (every element)
 *   first gradient   max |qkv - torch| <= 1e-4 max |torch|           (every tensor)
 *   each step        |loss_qkv - loss_torch| <= 1e-4 |loss_torch|   (mean loss, 20 steps)
 *                    and the same for the gradient norm before clipping
 *   final weights    max |qkv - torch| <= 1e-4 max |torch| + 1e-5    (every tensor)
 * The logits tolerance is the one of the block tests: fp32 rounding through a few blocks
 * leaves ~1e-6. Weights move by up to lr per step under Adam, whatever the gradient's size,
 * so a gradient that differs in its last bits moves its weight by a relative amount of that
 * order; after 20 steps we see max |diff| of a few 1e-6 against weights of O(0.1 .. 3).
 * The one exception is the attention's key bias b_k: the loss does not depend on it (it adds
 * q.b_k to a whole row of scores, which softmax cancels), so its true gradient is 0 and both
 * sides hold rounding noise of ~1e-9 that Adam with eps 1e-9 turns into O(lr) steps of random
 * sign. We require that gradient to be negligible next to b_q's, and leave b_k's final values
 * unchecked; the losses cover any effect it could have. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#define LOSS_RTOL 1e-4
#define NORM_RTOL 1e-4
#define FINAL_REL 1e-4
#define FINAL_ATOL 1e-5

/* ----------------------------------------------------------------------------------------
 * Reference access
 * ---------------------------------------------------------------------------------------- */

static const float *ref(const qkv_tensor_file *f, const char *name, size_t n)
{
    size_t got = 0;
    const float *x = tu_ref_f32(f, name, &got);
    if (got != n) fail_msg("reference '%s' has %zu values, the test expects %zu", name, got, n);
    return x;
}

static const int *ref_ints(const qkv_tensor_file *f, const char *name, size_t n)
{
    size_t got = 0;
    const int *x = tu_ref_i32(f, name, &got);
    if (got != n) fail_msg("reference '%s' has %zu values, the test expects %zu", name, got, n);
    return x;
}

static const char *meta_str(const qkv_tensor_file *f, const char *key)
{
    const char *s = qkv_tensor_file_meta(f, key);
    if (!s) fail_msg("reference metadata '%s' missing", key);
    return s;
}

/* The qkv_transformer_config written by make_model_reference.py (qkv_torch's keys). */
static qkv_transformer_config ref_config(const qkv_tensor_file *f)
{
    qkv_transformer_config c = qkv_transformer_default_config();
    c.src_vocab = tu_ref_int(f, "src_vocab"), c.tgt_vocab = tu_ref_int(f, "tgt_vocab");
    c.d_model = tu_ref_int(f, "d_model"), c.heads = tu_ref_int(f, "heads");
    c.ffn = tu_ref_int(f, "ffn");
    c.enc_layers = tu_ref_int(f, "enc_layers"), c.dec_layers = tu_ref_int(f, "dec_layers");
    c.max_len = tu_ref_int(f, "max_len"), c.dropout = tu_ref_float(f, "dropout");
    c.bias = tu_ref_int(f, "bias"), c.pre_norm = tu_ref_int(f, "pre_norm");
    c.final_norm = tu_ref_int(f, "final_norm");
    c.learned_pos = tu_ref_int(f, "learned_pos"), c.ln_eps = tu_ref_float(f, "ln_eps");
    const char *act = meta_str(f, "act"), *tie = meta_str(f, "tie");
    if (!strcmp(act, "relu")) c.act = QKV_ACT_RELU;
    else if (!strcmp(act, "gelu")) c.act = QKV_ACT_GELU;
    else if (!strcmp(act, "silu")) c.act = QKV_ACT_SILU;
    else fail_msg("unknown activation '%s'", act);
    const char *layout = meta_str(f, "pos_layout");
    if (!strcmp(layout, "interleaved")) c.pos_layout = QKV_POS_INTERLEAVED;
    else if (!strcmp(layout, "sin_cos")) c.pos_layout = QKV_POS_HALVES;
    else fail_msg("unknown positional layout '%s'", layout);
    c.scale_embedding = tu_ref_int(f, "scale_embedding");
    c.decoder_start = tu_ref_int(f, "decoder_start");
    if (!strcmp(tie, "none")) c.tie = QKV_TIE_NONE;
    else if (!strcmp(tie, "output")) c.tie = QKV_TIE_OUTPUT;
    else if (!strcmp(tie, "all")) c.tie = QKV_TIE_ALL;
    else fail_msg("unknown tie '%s'", tie);
    return c;
}

/* The reference tensor prefix + qkv's name for tensor i, after checking its shape. */
static const float *ref_param(const qkv_tensor_file *f, const char *prefix, qkv_param_info t)
{
    char name[128];
    snprintf(name, sizeof name, "%s%s", prefix, t.name);
    const qkv_tensor *r = qkv_tensor_file_get(f, name);
    if (!r) fail_msg("PyTorch has no tensor '%s' (qkv's '%s')", name, t.name);
    if (r->dtype != QKV_F32) fail_msg("'%s' is not float32", name);
    int same = r->ndim == t.ndim;
    for (int d = 0; same && d < t.ndim; d++) same = r->shape[d] == t.shape[d];
    if (!same)
        fail_msg("'%s': PyTorch's shape (%lld, %lld) [ndim %d], qkv's (%d, %d) [ndim %d]", name,
                 (long long)r->shape[0], r->ndim > 1 ? (long long)r->shape[1] : 0LL, r->ndim,
                 t.shape[0], t.ndim > 1 ? t.shape[1] : 0, t.ndim);
    return (const float *)r->data;
}

/* Copies every "init." tensor into the model by name; the reference must have exactly qkv's
 * tensors, no fewer (checked by ref_param) and no more. */
static void load_initial_weights(qkv_transformer *m, const qkv_tensor_file *f)
{
    float *params = qkv_transformer_params(m);
    int n = qkv_transformer_num_tensors(m), in_file = 0;
    for (int i = 0; i < n; i++) {
        qkv_param_info t = qkv_transformer_tensor(m, i);
        memcpy(params + t.offset, ref_param(f, "init.", t), t.numel * sizeof *params);
    }
    for (int i = 0; i < f->count; i++) in_file += !strncmp(f->tensors[i].name, "init.", 5);
    if (in_file != n) fail_msg("PyTorch's model has %d tensors, qkv's %d", in_file, n);
}

static int is_key_bias(const char *name)
{
    const char *leaf = strrchr(name, '.');
    return leaf && !strcmp(leaf, ".b_k");
}

/* Tensor named like t but with leaf "b_q" (the query bias of the same attention). */
static qkv_param_info query_bias_of(const qkv_transformer *m, qkv_param_info t)
{
    size_t stem = strlen(t.name) - 3;
    for (int i = 0; i < qkv_transformer_num_tensors(m); i++) {
        qkv_param_info q = qkv_transformer_tensor(m, i);
        if (!strncmp(q.name, t.name, stem) && !strcmp(q.name + stem, "b_q")) return q;
    }
    fail_msg("no query bias next to '%s'", t.name);
    return t;
}

/* ----------------------------------------------------------------------------------------
 * The test
 * ---------------------------------------------------------------------------------------- */

typedef struct {
    qkv_batch b;
    int tokens; /* labels that are not <pad> */
} ref_batch;

static ref_batch load_batch(const qkv_tensor_file *f, int k, int B, int Ts, int Tt)
{
    char name[64];
    ref_batch r = {{B, Ts, Tt, NULL, NULL, NULL, NULL}, 0};
    const size_t ns = (size_t)B * Ts, nt = (size_t)B * Tt;
    snprintf(name, sizeof name, "batch%d.src", k), r.b.src = ref_ints(f, name, ns);
    snprintf(name, sizeof name, "batch%d.src_valid", k), r.b.src_valid = ref_ints(f, name, B);
    snprintf(name, sizeof name, "batch%d.tgt_in", k), r.b.tgt_in = ref_ints(f, name, nt);
    snprintf(name, sizeof name, "batch%d.tgt_out", k), r.b.tgt_out = ref_ints(f, name, nt);
    for (int i = 0; i < B * Tt; i++) r.tokens += r.b.tgt_out[i] != QKV_PAD;
    return r;
}

/* The first step's gradient, tensor by tensor (b_k: negligible next to b_q, see above). */
static void check_first_gradient(qkv_transformer *m, const qkv_tensor_file *f)
{
    const float *grads = qkv_transformer_grads(m);
    for (int i = 0; i < qkv_transformer_num_tensors(m); i++) {
        qkv_param_info t = qkv_transformer_tensor(m, i);
        const float *want = ref_param(f, "grad0.", t), *got = grads + t.offset;
        if (!is_key_bias(t.name)) {
            tu_check_grad(t.name, got, want, t.numel, TU_GRAD_REL);
            continue;
        }
        qkv_param_info q = query_bias_of(m, t);
        double scale = 0.0, worst = 0.0;
        for (size_t k = 0; k < q.numel; k++) scale = fmax(scale, fabs((double)grads[q.offset + k]));
        for (size_t k = 0; k < t.numel; k++)
            worst = fmax(worst, fmax(fabs((double)got[k]), fabs((double)want[k])));
        if (!(worst <= TU_GRAD_REL * scale))
            fail_msg("%s should be 0: max |qkv|, |torch| = %g > %g * max |b_q grad| (%g)",
                     t.name, worst, (double)TU_GRAD_REL, scale);
    }
}

/* Final weights: max |qkv - torch| <= FINAL_REL max |torch| + FINAL_ATOL per tensor. Returns
 * the largest max |qkv - torch| / max |torch| seen. */
static double check_final_weights(qkv_transformer *m, const qkv_tensor_file *f)
{
    const float *params = qkv_transformer_params(m);
    double worst_rel = 0.0;
    for (int i = 0; i < qkv_transformer_num_tensors(m); i++) {
        qkv_param_info t = qkv_transformer_tensor(m, i);
        const float *want = ref_param(f, "final.", t), *got = params + t.offset;
        tu_check_finite(t.name, got, t.numel);
        if (is_key_bias(t.name)) continue;
        double max_want = 0.0, max_diff = 0.0;
        size_t at = 0;
        for (size_t k = 0; k < t.numel; k++) {
            double d = fabs((double)got[k] - (double)want[k]);
            max_want = fmax(max_want, fabs((double)want[k]));
            if (d > max_diff) max_diff = d, at = k;
        }
        if (max_diff > FINAL_REL * max_want + FINAL_ATOL)
            fail_msg("final %s: max |qkv - torch| = %g > %g * %g + %g, at [%zu]: %.9g vs %.9g",
                     t.name, max_diff, FINAL_REL, max_want, FINAL_ATOL, at, (double)got[at],
                     (double)want[at]);
        if (max_want > 0) worst_rel = fmax(worst_rel, max_diff / max_want);
    }
    return worst_rel;
}

static void test_model(void **state)
{
    const char *case_name = *state;
    qkv_tensor_file f;
    tu_reference_load(&f, case_name);
    qkv_transformer_config cfg = ref_config(&f);
    const int steps = tu_ref_int(&f, "steps"), n_batches = tu_ref_int(&f, "n_batches");
    const int B = tu_ref_int(&f, "B"), Ts = tu_ref_int(&f, "src_len");
    const int Tt = tu_ref_int(&f, "tgt_len");
    const float lr = tu_ref_float(&f, "lr"), clip = tu_ref_float(&f, "clip");
    const float smoothing = tu_ref_float(&f, "label_smoothing");
    const float *want_loss = ref(&f, "losses", (size_t)steps);
    const float *want_norm = ref(&f, "grad_norms", (size_t)steps);
    assert_true(n_batches > 0 && n_batches <= 16);

    qkv_error err = {0};
    qkv_transformer *m = NULL;
    if (qkv_transformer_create(&m, &cfg, 0, &err) != QKV_OK) fail_msg("create: %s", err.msg);
    assert_int_equal(qkv_transformer_num_tensors(m), tu_ref_int(&f, "n_tensors"));
    load_initial_weights(m, &f);
    ref_batch batch[16];
    for (int k = 0; k < n_batches; k++) batch[k] = load_batch(&f, k, B, Ts, Tt);

    /* initial logits, evaluation mode */
    const size_t nlogits = (size_t)B * Tt * cfg.tgt_vocab;
    float *logits = tu_zeros(nlogits);
    if (qkv_transformer_logits(m, &batch[0].b, logits, &err) != QKV_OK)
        fail_msg("logits: %s", err.msg);
    tu_check_close("logits0", logits, ref(&f, "logits0", nlogits), nlogits, TU_FWD_ATOL,
                   TU_FWD_RTOL);

    /* the training steps */
    const size_t n = qkv_transformer_num_params(m);
    float *params = qkv_transformer_params(m), *grads = qkv_transformer_grads(m);
    assert_non_null(grads);
    qkv_adam opt;
    assert_int_equal(qkv_adam_init(&opt, n, tu_ref_float(&f, "beta1"), tu_ref_float(&f, "beta2"),
                                   tu_ref_float(&f, "adam_eps"), 0.0f, &err), QKV_OK);
    double worst_loss = 0.0, worst_norm = 0.0;
    for (int s = 0; s < steps; s++) {
        const ref_batch *r = &batch[s % n_batches];
        double sum = 0.0;
        int tokens = 0;
        memset(grads, 0, n * sizeof *grads);
        const qkv_loss_options pass = {.backward = 1, .grad_scale = 1.0f / (float)r->tokens,
                                       .label_smoothing = smoothing, .train = 1,
                                       .dropout_seed = 1000 + s};
        if (qkv_transformer_loss(m, &r->b, &pass, &sum, &tokens, &err) != QKV_OK)
            fail_msg("step %d: %s", s, err.msg);
        assert_int_equal(tokens, r->tokens);
        if (s == 0) check_first_gradient(m, &f);
        double norm = qkv_clip_grad_norm(grads, n, clip > 0 ? (double)clip : 0.0);
        qkv_adam_update(&opt, params, grads, lr);

        double loss = sum / tokens, rel = fabs(loss - want_loss[s]) / fabs((double)want_loss[s]);
        double nrel = fabs(norm - want_norm[s]) / fabs((double)want_norm[s]);
        if (!(rel <= LOSS_RTOL))
            fail_msg("step %d: loss %.9g, PyTorch %.9g (relative difference %.3g > %g)", s, loss,
                     (double)want_loss[s], rel, LOSS_RTOL);
        if (!(nrel <= NORM_RTOL))
            fail_msg("step %d: gradient norm %.9g, PyTorch %.9g (relative difference %.3g > %g)",
                     s, norm, (double)want_norm[s], nrel, NORM_RTOL);
        worst_loss = fmax(worst_loss, rel), worst_norm = fmax(worst_norm, nrel);
    }
    double worst_param = check_final_weights(m, &f);
    print_message("%s: %d steps, max relative difference: loss %.2g, gradient norm %.2g, final "
                  "weights %.2g (of the tensor's max)\n", case_name, steps, worst_loss,
                  worst_norm, worst_param);

    qkv_adam_free(&opt);
    free(logits);
    qkv_transformer_free(m);
    qkv_tensor_file_free(&f);
}

/* One cmocka test per reference file, named after it. */
#define CASE(name) { name, test_model, NULL, NULL, (void *)name }

int main(void)
{
    const struct CMUnitTest tests[] = {
        CASE("model_postnorm_d2l"),
        CASE("model_prenorm_tied_clip"),
        CASE("model_tieall_learned"),
        CASE("model_marian_silu"),
    };
    return cmocka_run_group_tests_name("model_parity", tests, NULL, NULL);
}
