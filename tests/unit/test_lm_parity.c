/* SPDX-License-Identifier: MIT */
/* Language-model PyTorch parity: the decoder-only model trained for 20 Adam steps.
 *
 * Each case is a file written by tests/parity/make_lm_reference.py: tools/qkv_torch.py's
 * QKVLanguageModel (its softmax models checked there against torch.nn.TransformerEncoder under a
 * causal mask; its linear attention is the quadratic form of the formula) with random initial
 * weights, fixed batches, dropout 0, and per step: zero grads, mean next-token cross-entropy
 * over targets that are not <pad>, backward, optional clip_grad_norm_, torch.optim.Adam. We
 * load the initial weights into qkv by name (every name on both sides, the same shapes), run
 * the same steps with qkv_lm_loss, qkv_clip_grad_norm and qkv_adam_update, and require, as
 * test_model_parity.c does for the encoder-decoder,
 *   initial logits   |qkv - torch| <= 1e-5 + 1e-5 |torch|            (every element)
 *   first gradient   max |qkv - torch| <= 1e-4 max |torch|           (every tensor)
 *   each step        |loss_qkv - loss_torch| <= 1e-4 |loss_torch|   (20 steps)
 *                    and the same for the gradient norm before clipping
 *   final weights    max |qkv - torch| <= 1e-4 max |torch| + 1e-5    (every tensor)
 * With softmax attention the key bias b_k cannot change the loss (it adds q.b_k to a whole row
 * of scores, which softmax cancels): its gradient is rounding noise on both sides, which Adam
 * turns into O(lr) steps of random sign, so it must be negligible next to b_q's and its final
 * value is not compared. Linear attention has no such symmetry (phi is not a shift-invariant
 * kernel), so there b_k is checked like every other tensor. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#define LOSS_RTOL 1e-4
#define NORM_RTOL 1e-4
#define FINAL_REL 1e-4
#define FINAL_ATOL 1e-5

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

/* The qkv_lm_config written by make_lm_reference.py (qkv_torch's keys). */
static qkv_lm_config ref_config(const qkv_tensor_file *f)
{
    qkv_lm_config c = qkv_lm_default_config();
    c.vocab = tu_ref_int(f, "vocab"), c.d_model = tu_ref_int(f, "d_model");
    c.heads = tu_ref_int(f, "heads"), c.ffn = tu_ref_int(f, "ffn");
    c.layers = tu_ref_int(f, "layers"), c.max_len = tu_ref_int(f, "max_len");
    c.dropout = tu_ref_float(f, "dropout"), c.bias = tu_ref_int(f, "bias");
    c.pre_norm = tu_ref_int(f, "pre_norm"), c.final_norm = tu_ref_int(f, "final_norm");
    c.tie = tu_ref_int(f, "tie"), c.learned_pos = tu_ref_int(f, "learned_pos");
    c.ln_eps = tu_ref_float(f, "ln_eps");
    const char *act = meta_str(f, "act"), *attention = meta_str(f, "attention");
    if (!strcmp(act, "relu")) c.act = QKV_ACT_RELU;
    else if (!strcmp(act, "gelu")) c.act = QKV_ACT_GELU;
    else fail_msg("unknown activation '%s'", act);
    if (!strcmp(attention, "softmax")) c.attention = QKV_ATTENTION_SOFTMAX;
    else if (!strcmp(attention, "linear")) c.attention = QKV_ATTENTION_LINEAR;
    else fail_msg("unknown attention '%s'", attention);
    return c;
}

/* The reference tensor prefix + qkv's name for t, after checking its shape. */
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

/* Every "init." tensor into the model by name; exactly qkv's tensors, no more. */
static void load_initial_weights(qkv_lm *m, const qkv_tensor_file *f)
{
    float *params = qkv_lm_params(m);
    int n = qkv_lm_num_tensors(m), in_file = 0;
    for (int i = 0; i < n; i++) {
        qkv_param_info t = qkv_lm_tensor(m, i);
        memcpy(params + t.offset, ref_param(f, "init.", t), t.numel * sizeof *params);
    }
    for (int i = 0; i < f->count; i++) in_file += !strncmp(f->tensors[i].name, "init.", 5);
    if (in_file != n) fail_msg("PyTorch's model has %d tensors, qkv's %d", in_file, n);
}

/* A softmax model's key bias: its true gradient is 0 (see above). */
static int is_free_key_bias(const qkv_lm *m, const char *name)
{
    const char *leaf = strrchr(name, '.');
    return qkv_lm_get_config(m)->attention == QKV_ATTENTION_SOFTMAX && leaf &&
           !strcmp(leaf, ".b_k");
}

static qkv_param_info query_bias_of(const qkv_lm *m, qkv_param_info t)
{
    size_t stem = strlen(t.name) - 3;
    for (int i = 0; i < qkv_lm_num_tensors(m); i++) {
        qkv_param_info q = qkv_lm_tensor(m, i);
        if (!strncmp(q.name, t.name, stem) && !strcmp(q.name + stem, "b_q")) return q;
    }
    fail_msg("no query bias next to '%s'", t.name);
    return t;
}

static void check_first_gradient(qkv_lm *m, const qkv_tensor_file *f)
{
    const float *grads = qkv_lm_grads(m);
    for (int i = 0; i < qkv_lm_num_tensors(m); i++) {
        qkv_param_info t = qkv_lm_tensor(m, i);
        const float *want = ref_param(f, "grad0.", t), *got = grads + t.offset;
        if (!is_free_key_bias(m, t.name)) {
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

static double check_final_weights(qkv_lm *m, const qkv_tensor_file *f)
{
    const float *params = qkv_lm_params(m);
    double worst_rel = 0.0;
    for (int i = 0; i < qkv_lm_num_tensors(m); i++) {
        qkv_param_info t = qkv_lm_tensor(m, i);
        const float *want = ref_param(f, "final.", t), *got = params + t.offset;
        tu_check_finite(t.name, got, t.numel);
        if (is_free_key_bias(m, t.name)) continue;
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

static void test_lm(void **state)
{
    const char *case_name = *state;
    qkv_tensor_file f;
    tu_reference_load(&f, case_name);
    qkv_lm_config cfg = ref_config(&f);
    const int steps = tu_ref_int(&f, "steps"), n_batches = tu_ref_int(&f, "n_batches");
    const int B = tu_ref_int(&f, "B"), T = tu_ref_int(&f, "T");
    const float lr = tu_ref_float(&f, "lr"), clip = tu_ref_float(&f, "clip");
    const float *want_loss = ref(&f, "losses", (size_t)steps);
    const float *want_norm = ref(&f, "grad_norms", (size_t)steps);
    assert_true(n_batches > 0 && n_batches <= 16);

    qkv_error err = {0};
    qkv_lm *m = NULL;
    if (qkv_lm_create(&m, &cfg, 0, &err) != QKV_OK) fail_msg("create: %s", err.msg);
    assert_int_equal(qkv_lm_num_tensors(m), tu_ref_int(&f, "n_tensors"));
    load_initial_weights(m, &f);
    const int *ids[16], *targets[16];
    int counted[16];
    for (int k = 0; k < n_batches; k++) {
        char name[64];
        snprintf(name, sizeof name, "batch%d.ids", k), ids[k] = ref_ints(&f, name, (size_t)B * T);
        snprintf(name, sizeof name, "batch%d.targets", k);
        targets[k] = ref_ints(&f, name, (size_t)B * T);
        counted[k] = 0;
        for (int i = 0; i < B * T; i++) counted[k] += targets[k][i] != QKV_PAD;
    }

    const size_t nlogits = (size_t)B * T * cfg.vocab;
    float *logits = tu_zeros(nlogits);
    if (qkv_lm_logits(m, ids[0], B, T, logits, &err) != QKV_OK) fail_msg("logits: %s", err.msg);
    tu_check_close("logits0", logits, ref(&f, "logits0", nlogits), nlogits, TU_FWD_ATOL,
                   TU_FWD_RTOL);

    const size_t n = qkv_lm_num_params(m);
    float *params = qkv_lm_params(m), *grads = qkv_lm_grads(m);
    assert_non_null(grads);
    qkv_adam opt;
    assert_int_equal(qkv_adam_init(&opt, n, tu_ref_float(&f, "beta1"), tu_ref_float(&f, "beta2"),
                                   tu_ref_float(&f, "adam_eps"), 0.0f, &err), QKV_OK);
    double worst_loss = 0.0, worst_norm = 0.0;
    for (int s = 0; s < steps; s++) {
        const int k = s % n_batches;
        double sum = 0.0;
        int tokens = 0;
        memset(grads, 0, n * sizeof *grads);
        const qkv_loss_options pass = {.backward = 1, .train = 1, .dropout_seed = 1000 + s};
        if (qkv_lm_loss(m, ids[k], targets[k], B, T, &pass, &sum, &tokens, &err) != QKV_OK)
            fail_msg("step %d: %s", s, err.msg);
        assert_int_equal(tokens, counted[k]);
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
    qkv_lm_free(m);
    qkv_tensor_file_free(&f);
}

#define CASE(name) { name, test_lm, NULL, NULL, (void *)name }

int main(void)
{
    const struct CMUnitTest tests[] = {
        CASE("lm_softmax_postnorm"),
        CASE("lm_softmax_prenorm_tied"),
        CASE("lm_linear_prenorm"),
        CASE("lm_linear_postnorm_tied"),
    };
    return cmocka_run_group_tests_name("lm_parity", tests, NULL, NULL);
}
