/* SPDX-License-Identifier: MIT */
/* PyTorch parity of the elementwise and per-row building blocks: random numbers, linear,
 * embedding, activations, dropout, LayerNorm, RMSNorm, cross-entropy, positional encoding,
 * FFN, residual, AddNorm, a pre-norm block composed of them, and the AdamW update.
 *
 * Each case is a file written by tests/parity/make_reference.py: inputs, weights, the
 * upstream gradient dy, and torch's output and gradients. We run qkv's forward and backward
 * on the same numbers and require
 *   forward   |qkv - torch| <= 1e-5 + 1e-5 |torch|           (every element)
 *   gradient  max |qkv - torch| <= 1e-4 max |torch|           (every input and parameter)
 * Outputs start as NaN so an element the forward forgets to write fails; gradients start at
 * zero because backward accumulates. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

/* ----------------------------------------------------------------------------------------
 * Reference access
 * ---------------------------------------------------------------------------------------- */

/* Float tensor `name` of f, which must hold exactly n values. */
static const float *ref(const qkv_tensor_file *f, const char *name, size_t n)
{
    size_t got = 0;
    const float *x = tu_ref_f32(f, name, &got);
    if (got != n) fail_msg("reference '%s' has %zu values, the test expects %zu", name, got, n);
    return x;
}

static const int *ref_ids(const qkv_tensor_file *f, const char *name, size_t n)
{
    size_t got = 0;
    const int *x = tu_ref_i32(f, name, &got);
    if (got != n) fail_msg("reference '%s' has %zu values, the test expects %zu", name, got, n);
    return x;
}

/* Seeds and counters do not fit in an int. */
static uint64_t meta_u64(const qkv_tensor_file *f, const char *key)
{
    const char *s = qkv_tensor_file_meta(f, key);
    if (!s) fail_msg("reference metadata '%s' missing", key);
    return strtoull(s, NULL, 10);
}

/* n floats, all NaN: a forward output that must be written everywhere. */
static float *nans(size_t n)
{
    float *x = tu_zeros(n);
    for (size_t i = 0; i < n; i++) x[i] = NAN;
    return x;
}

#define CHECK_FWD(f, name, got, n) \
    tu_check_close(name, got, ref(f, name, n), n, TU_FWD_ATOL, TU_FWD_RTOL)
#define CHECK_GRAD(f, name, got, n) tu_check_grad(name, got, ref(f, name, n), n, TU_GRAD_REL)

/* ----------------------------------------------------------------------------------------
 * Random numbers: the Python port of the generator must agree bit for bit, or no dropout
 * case below means anything.
 * ---------------------------------------------------------------------------------------- */

static void test_rng(void **state)
{
    qkv_tensor_file f;
    tu_reference_load(&f, (const char *)*state);
    int n_seeds = tu_ref_int(&f, "n_seeds"), n_counters = tu_ref_int(&f, "n_counters");
    for (int s = 0; s < n_seeds; s++) {
        char key[64];
        snprintf(key, sizeof key, "seed_%d", s);
        uint64_t seed = meta_u64(&f, key);
        snprintf(key, sizeof key, "u32_%d", s);
        const int *u32 = ref_ids(&f, key, (size_t)n_counters);
        snprintf(key, sizeof key, "uniform_%d", s);
        const float *uni = ref(&f, key, (size_t)n_counters);
        for (int c = 0; c < n_counters; c++) {
            snprintf(key, sizeof key, "counter_%d", c);
            uint64_t i = meta_u64(&f, key);
            assert_int_equal(qkv_random_u32(seed, i), (uint32_t)u32[c]);
            assert_true(qkv_random_uniform(seed, i) == uni[c]);
        }
    }
    qkv_tensor_file_free(&f);
}

/* ----------------------------------------------------------------------------------------
 * Linear, embedding, activations, dropout
 * ---------------------------------------------------------------------------------------- */

static void test_linear(void **state)
{
    qkv_tensor_file f;
    tu_reference_load(&f, (const char *)*state);
    int N = tu_ref_int(&f, "N"), in = tu_ref_int(&f, "in"), out = tu_ref_int(&f, "out");
    int bias = tu_ref_int(&f, "bias");
    size_t nx = (size_t)N * in, ny = (size_t)N * out, nW = (size_t)out * in;
    const float *x = ref(&f, "x", nx), *W = ref(&f, "W", nW), *dy = ref(&f, "dy", ny);
    const float *b = bias ? ref(&f, "b", (size_t)out) : NULL;

    float *y = nans(ny), *dx = tu_zeros(nx), *dW = tu_zeros(nW), *db = tu_zeros((size_t)out);
    qkv_linear_forward(y, x, W, b, N, in, out);
    CHECK_FWD(&f, "y", y, ny);
    qkv_linear_backward(dx, dW, bias ? db : NULL, dy, x, W, N, in, out);
    CHECK_GRAD(&f, "dx", dx, nx);
    CHECK_GRAD(&f, "dW", dW, nW);
    if (bias) CHECK_GRAD(&f, "db", db, (size_t)out);
    free(y), free(dx), free(dW), free(db);
    qkv_tensor_file_free(&f);
}

static void test_embedding(void **state)
{
    qkv_tensor_file f;
    tu_reference_load(&f, (const char *)*state);
    int N = tu_ref_int(&f, "N"), V = tu_ref_int(&f, "V"), C = tu_ref_int(&f, "C");
    const int *ids = ref_ids(&f, "ids", (size_t)N);
    const float *E = ref(&f, "E", (size_t)V * C), *dy = ref(&f, "dy", (size_t)N * C);

    float *y = nans((size_t)N * C), *dE = tu_zeros((size_t)V * C);
    qkv_error err = {0};
    assert_int_equal(qkv_embedding_forward(y, ids, E, N, V, C, &err), QKV_OK);
    CHECK_FWD(&f, "y", y, (size_t)N * C);
    qkv_embedding_backward(dE, dy, ids, N, C);
    CHECK_GRAD(&f, "dE", dE, (size_t)V * C);
    free(y), free(dE);
    qkv_tensor_file_free(&f);
}

static void activation_case(const char *name, int gelu)
{
    qkv_tensor_file f;
    tu_reference_load(&f, name);
    size_t n = (size_t)tu_ref_int(&f, "n");
    const float *x = ref(&f, "x", n), *dy = ref(&f, "dy", n);
    float *y = nans(n), *dx = tu_zeros(n);
    if (gelu) {
        qkv_gelu_forward(y, x, n);
        qkv_gelu_backward(dx, dy, x, n);
    } else {
        qkv_relu_forward(y, x, n);
        qkv_relu_backward(dx, dy, x, n);
    }
    CHECK_FWD(&f, "y", y, n);
    CHECK_GRAD(&f, "dx", dx, n);
    free(y), free(dx);
    qkv_tensor_file_free(&f);
}

static void test_relu(void **state) { activation_case((const char *)*state, 0); }
static void test_gelu(void **state) { activation_case((const char *)*state, 1); }

static void test_dropout(void **state)
{
    qkv_tensor_file f;
    tu_reference_load(&f, (const char *)*state);
    size_t n = (size_t)tu_ref_int(&f, "n");
    float p = tu_ref_float(&f, "p");
    uint64_t seed = meta_u64(&f, "seed"), offset = meta_u64(&f, "offset");
    const float *x = ref(&f, "x", n), *dy = ref(&f, "dy", n);
    float *y = nans(n), *dx = tu_zeros(n);
    qkv_dropout_forward(y, x, n, p, seed, offset);
    CHECK_FWD(&f, "y", y, n);
    qkv_dropout_backward(dx, dy, n, p, seed, offset);
    CHECK_GRAD(&f, "dx", dx, n);
    free(y), free(dx);
    qkv_tensor_file_free(&f);
}

/* ----------------------------------------------------------------------------------------
 * Normalisation (the saved mean and rstd are checked too: the backward relies on them)
 * ---------------------------------------------------------------------------------------- */

static void test_layernorm(void **state)
{
    qkv_tensor_file f;
    tu_reference_load(&f, (const char *)*state);
    int N = tu_ref_int(&f, "N"), C = tu_ref_int(&f, "C");
    float eps = tu_ref_float(&f, "eps");
    size_t nx = (size_t)N * C;
    const float *x = ref(&f, "x", nx), *g = ref(&f, "gamma", (size_t)C);
    const float *b = ref(&f, "beta", (size_t)C), *dy = ref(&f, "dy", nx);

    float *y = nans(nx), *mean = nans((size_t)N), *rstd = nans((size_t)N);
    float *dx = tu_zeros(nx), *dg = tu_zeros((size_t)C), *db = tu_zeros((size_t)C);
    /* the weights' struct holds non-const pointers; LayerNorm only reads them */
    const qkv_layernorm_weights w = {(float *)g, (float *)b};
    qkv_layernorm_forward(y, mean, rstd, x, &w, N, C, eps);
    CHECK_FWD(&f, "y", y, nx);
    CHECK_FWD(&f, "mean", mean, (size_t)N);
    CHECK_FWD(&f, "rstd", rstd, (size_t)N);
    qkv_layernorm_backward(dx, &(qkv_layernorm_weights){dg, db}, dy, x, mean, rstd, &w, N, C);
    CHECK_GRAD(&f, "dx", dx, nx);
    CHECK_GRAD(&f, "dgamma", dg, (size_t)C);
    CHECK_GRAD(&f, "dbeta", db, (size_t)C);
    free(y), free(mean), free(rstd), free(dx), free(dg), free(db);
    qkv_tensor_file_free(&f);
}

static void test_rmsnorm(void **state)
{
    qkv_tensor_file f;
    tu_reference_load(&f, (const char *)*state);
    int N = tu_ref_int(&f, "N"), C = tu_ref_int(&f, "C");
    float eps = tu_ref_float(&f, "eps");
    size_t nx = (size_t)N * C;
    const float *x = ref(&f, "x", nx), *g = ref(&f, "g", (size_t)C), *dy = ref(&f, "dy", nx);

    float *y = nans(nx), *rstd = nans((size_t)N), *dx = tu_zeros(nx), *dg = tu_zeros((size_t)C);
    qkv_rmsnorm_forward(y, rstd, x, g, N, C, eps);
    CHECK_FWD(&f, "y", y, nx);
    CHECK_FWD(&f, "rstd", rstd, (size_t)N);
    qkv_rmsnorm_backward(dx, dg, dy, x, rstd, g, N, C);
    CHECK_GRAD(&f, "dx", dx, nx);
    CHECK_GRAD(&f, "dg", dg, (size_t)C);
    free(y), free(rstd), free(dx), free(dg);
    qkv_tensor_file_free(&f);
}

/* ----------------------------------------------------------------------------------------
 * Cross-entropy: per-row loss with ignored rows and label smoothing; the gradient of
 * upstream * mean over counted rows (scale = upstream / count).
 * ---------------------------------------------------------------------------------------- */

static void test_cross_entropy(void **state)
{
    qkv_tensor_file f;
    tu_reference_load(&f, (const char *)*state);
    int N = tu_ref_int(&f, "N"), V = tu_ref_int(&f, "V");
    int ignore = tu_ref_int(&f, "ignore_index");
    float eps = tu_ref_float(&f, "label_smoothing"), scale = tu_ref_float(&f, "scale");
    size_t nz = (size_t)N * V;
    const float *z = ref(&f, "logits", nz);
    const int *targets = ref_ids(&f, "targets", (size_t)N);

    float *loss = nans((size_t)N), *lse = nans((size_t)N), *dz = nans(nz);
    double sum = NAN;
    qkv_error err = {0};
    int count = qkv_cross_entropy_forward(loss, lse, &sum, z, targets, N, V, ignore, eps, &err);
    assert_int_equal(count, tu_ref_int(&f, "count"));
    CHECK_FWD(&f, "loss", loss, (size_t)N);
    CHECK_FWD(&f, "lse", lse, (size_t)N);
    double want_sum = strtod(qkv_tensor_file_meta(&f, "sum"), NULL);
    if (!(fabs(sum - want_sum) <= 1e-5 * N * (1.0 + fabs(want_sum))))
        fail_msg("sum of losses: got %.9g, want %.9g", sum, want_sum);
    /* dlogits is written, not accumulated: it starts as NaN here. */
    qkv_cross_entropy_backward(dz, z, lse, targets, N, V, ignore, eps, scale);
    CHECK_GRAD(&f, "dlogits", dz, nz);
    free(loss), free(lse), free(dz);
    qkv_tensor_file_free(&f);
}

/* ----------------------------------------------------------------------------------------
 * Positional encoding
 * ---------------------------------------------------------------------------------------- */

/* The table against the formula evaluated in float64 and rounded once. */
static void test_sinusoidal(void **state)
{
    qkv_tensor_file f;
    tu_reference_load(&f, (const char *)*state);
    int T = tu_ref_int(&f, "T"), C = tu_ref_int(&f, "C");
    float *P = nans((size_t)T * C);
    qkv_sinusoidal_table(P, T, C);
    CHECK_FWD(&f, "P", P, (size_t)T * C);
    free(P);
    qkv_tensor_file_free(&f);
}

static void test_positional(void **state)
{
    qkv_tensor_file f;
    tu_reference_load(&f, (const char *)*state);
    int B = tu_ref_int(&f, "B"), T = tu_ref_int(&f, "T"), C = tu_ref_int(&f, "C");
    int pos0 = tu_ref_int(&f, "pos0"), learned = tu_ref_int(&f, "learned");
    int Tmax = tu_ref_int(&f, "Tmax");
    float scale = tu_ref_float(&f, "scale");
    size_t nx = (size_t)B * T * C, nP = (size_t)Tmax * C;
    const float *x = ref(&f, "x", nx), *P = ref(&f, "P", nP), *dy = ref(&f, "dy", nx);

    float *y = nans(nx), *dx = tu_zeros(nx), *dP = tu_zeros(nP);
    qkv_positional_forward(y, x, P, B, T, C, pos0, scale);
    CHECK_FWD(&f, "y", y, nx);
    qkv_positional_backward(dx, learned ? dP : NULL, dy, B, T, C, pos0, scale);
    CHECK_GRAD(&f, "dx", dx, nx);
    if (learned) CHECK_GRAD(&f, "dP", dP, nP);
    free(y), free(dx), free(dP);
    qkv_tensor_file_free(&f);
}

/* ----------------------------------------------------------------------------------------
 * FFN, residual, AddNorm, pre-norm block
 * ---------------------------------------------------------------------------------------- */

static void test_ffn(void **state)
{
    qkv_tensor_file f;
    tu_reference_load(&f, (const char *)*state);
    int N = tu_ref_int(&f, "N"), C = tu_ref_int(&f, "C"), Fd = tu_ref_int(&f, "F");
    int bias = tu_ref_int(&f, "bias");
    qkv_activation act = tu_ref_int(&f, "act") ? QKV_ACT_GELU : QKV_ACT_RELU;
    size_t nx = (size_t)N * C, nh = (size_t)N * Fd, nW = (size_t)Fd * C;
    const float *x = ref(&f, "x", nx), *dy = ref(&f, "dy", nx);
    const float *W1 = ref(&f, "W1", nW), *W2 = ref(&f, "W2", nW);
    const float *b1 = bias ? ref(&f, "b1", (size_t)Fd) : NULL;
    const float *b2 = bias ? ref(&f, "b2", (size_t)C) : NULL;

    float *y = nans(nx), *h_pre = nans(nh), *h = nans(nh), *scratch = tu_zeros(nh);
    float *dx = tu_zeros(nx), *dW1 = tu_zeros(nW), *dW2 = tu_zeros(nW);
    float *db1 = tu_zeros((size_t)Fd), *db2 = tu_zeros((size_t)C);
    /* the weights' struct holds non-const pointers; forward and backward only read them */
    const qkv_ffn_weights w = {(float *)W1, (float *)b1, (float *)W2, (float *)b2};
    const qkv_ffn_config cfg = {C, Fd, act};
    qkv_ffn_cache c = {h_pre, h};
    qkv_ffn_forward(y, &c, x, &w, &cfg, N);
    CHECK_FWD(&f, "h_pre", h_pre, nh);
    CHECK_FWD(&f, "h", h, nh);
    CHECK_FWD(&f, "y", y, nx);
    qkv_ffn_backward(dx, &(qkv_ffn_weights){dW1, bias ? db1 : NULL, dW2, bias ? db2 : NULL}, dy,
                     &c, x, &w, &cfg, N, scratch);
    CHECK_GRAD(&f, "dx", dx, nx);
    CHECK_GRAD(&f, "dW1", dW1, nW);
    CHECK_GRAD(&f, "dW2", dW2, nW);
    if (bias) {
        CHECK_GRAD(&f, "db1", db1, (size_t)Fd);
        CHECK_GRAD(&f, "db2", db2, (size_t)C);
    }
    free(y), free(h_pre), free(h), free(scratch), free(dx), free(dW1), free(dW2), free(db1),
        free(db2);
    qkv_tensor_file_free(&f);
}

static void test_residual(void **state)
{
    qkv_tensor_file f;
    tu_reference_load(&f, (const char *)*state);
    size_t n = (size_t)tu_ref_int(&f, "n");
    float p = tu_ref_float(&f, "p");
    uint64_t seed = meta_u64(&f, "seed");
    const float *x = ref(&f, "x", n), *s = ref(&f, "s", n), *dy = ref(&f, "dy", n);
    float *y = nans(n), *dx = tu_zeros(n), *ds = tu_zeros(n);
    qkv_residual_forward(y, x, s, n, (qkv_dropout){p, seed, 0});
    CHECK_FWD(&f, "y", y, n);
    qkv_residual_backward(dx, ds, dy, n, (qkv_dropout){p, seed, 0});
    CHECK_GRAD(&f, "dx", dx, n);
    CHECK_GRAD(&f, "ds", ds, n);
    free(y), free(dx), free(ds);
    qkv_tensor_file_free(&f);
}

static void test_addnorm(void **state)
{
    qkv_tensor_file f;
    tu_reference_load(&f, (const char *)*state);
    int N = tu_ref_int(&f, "N"), C = tu_ref_int(&f, "C");
    float eps = tu_ref_float(&f, "eps"), p = tu_ref_float(&f, "p");
    uint64_t seed = meta_u64(&f, "seed");
    size_t nx = (size_t)N * C;
    const float *x = ref(&f, "x", nx), *s = ref(&f, "s", nx), *dy = ref(&f, "dy", nx);
    const float *g = ref(&f, "gamma", (size_t)C), *b = ref(&f, "beta", (size_t)C);

    float *y = nans(nx), *z = nans(nx), *mean = nans((size_t)N), *rstd = nans((size_t)N);
    float *scratch = tu_zeros(nx), *dx = tu_zeros(nx), *ds = tu_zeros(nx);
    float *dg = tu_zeros((size_t)C), *db = tu_zeros((size_t)C);
    const qkv_layernorm_weights w = {(float *)g, (float *)b};
    const qkv_dropout drop = {p, seed, 0};
    qkv_addnorm_cache c = {z, mean, rstd};
    qkv_addnorm_forward(y, &c, x, s, &w, N, C, eps, drop);
    CHECK_FWD(&f, "z", z, nx);
    CHECK_FWD(&f, "mean", mean, (size_t)N);
    CHECK_FWD(&f, "rstd", rstd, (size_t)N);
    CHECK_FWD(&f, "y", y, nx);
    qkv_addnorm_backward(dx, ds, &(qkv_layernorm_weights){dg, db}, dy, &c, &w, N, C, drop,
                         scratch);
    CHECK_GRAD(&f, "dx", dx, nx);
    CHECK_GRAD(&f, "ds", ds, nx);
    CHECK_GRAD(&f, "dgamma", dg, (size_t)C);
    CHECK_GRAD(&f, "dbeta", db, (size_t)C);
    free(y), free(z), free(mean), free(rstd), free(scratch), free(dx), free(ds), free(dg),
        free(db);
    qkv_tensor_file_free(&f);
}

/* y = x + dropout(FFN(LN(x))): the pre-norm sublayer built from three blocks. dx receives the
 * identity path from the residual and the LayerNorm path, accumulated in one buffer. */
static void test_prenorm(void **state)
{
    qkv_tensor_file f;
    tu_reference_load(&f, (const char *)*state);
    int N = tu_ref_int(&f, "N"), C = tu_ref_int(&f, "C"), Fd = tu_ref_int(&f, "F");
    qkv_activation act = tu_ref_int(&f, "act") ? QKV_ACT_GELU : QKV_ACT_RELU;
    float eps = tu_ref_float(&f, "eps"), p = tu_ref_float(&f, "p");
    uint64_t seed = meta_u64(&f, "seed");
    size_t nx = (size_t)N * C, nh = (size_t)N * Fd, nW = (size_t)Fd * C;
    const float *x = ref(&f, "x", nx), *dy = ref(&f, "dy", nx);
    const float *g = ref(&f, "gamma", (size_t)C), *b = ref(&f, "beta", (size_t)C);
    const float *W1 = ref(&f, "W1", nW), *b1 = ref(&f, "b1", (size_t)Fd);
    const float *W2 = ref(&f, "W2", nW), *b2 = ref(&f, "b2", (size_t)C);

    float *ln = nans(nx), *mean = nans((size_t)N), *rstd = nans((size_t)N);
    float *h_pre = nans(nh), *h = nans(nh), *s = nans(nx), *y = nans(nx);
    const qkv_layernorm_weights norm = {(float *)g, (float *)b};
    qkv_layernorm_forward(ln, mean, rstd, x, &norm, N, C, eps);
    const qkv_ffn_weights w = {(float *)W1, (float *)b1, (float *)W2, (float *)b2};
    const qkv_ffn_config cfg = {C, Fd, act};
    qkv_ffn_cache c = {h_pre, h};
    qkv_ffn_forward(s, &c, ln, &w, &cfg, N);
    qkv_residual_forward(y, x, s, nx, (qkv_dropout){p, seed, 0});
    CHECK_FWD(&f, "y", y, nx);

    float *dx = tu_zeros(nx), *ds = tu_zeros(nx), *dln = tu_zeros(nx), *scratch = tu_zeros(nh);
    float *dg = tu_zeros((size_t)C), *db = tu_zeros((size_t)C);
    float *dW1 = tu_zeros(nW), *db1 = tu_zeros((size_t)Fd), *dW2 = tu_zeros(nW);
    float *db2 = tu_zeros((size_t)C);
    qkv_residual_backward(dx, ds, dy, nx, (qkv_dropout){p, seed, 0});
    qkv_ffn_backward(dln, &(qkv_ffn_weights){dW1, db1, dW2, db2}, ds, &c, ln, &w, &cfg, N,
                     scratch);
    qkv_layernorm_backward(dx, &(qkv_layernorm_weights){dg, db}, dln, x, mean, rstd, &norm, N, C);
    CHECK_GRAD(&f, "dx", dx, nx);
    CHECK_GRAD(&f, "dgamma", dg, (size_t)C);
    CHECK_GRAD(&f, "dbeta", db, (size_t)C);
    CHECK_GRAD(&f, "dW1", dW1, nW);
    CHECK_GRAD(&f, "db1", db1, (size_t)Fd);
    CHECK_GRAD(&f, "dW2", dW2, nW);
    CHECK_GRAD(&f, "db2", db2, (size_t)C);
    free(ln), free(mean), free(rstd), free(h_pre), free(h), free(s), free(y);
    free(dx), free(ds), free(dln), free(scratch), free(dg), free(db), free(dW1), free(db1),
        free(dW2), free(db2);
    qkv_tensor_file_free(&f);
}

/* ----------------------------------------------------------------------------------------
 * The optimizer: AdamW, step by step, with the learning rate changed between steps
 * ---------------------------------------------------------------------------------------- */

static void test_adamw(void **state)
{
    qkv_tensor_file f;
    tu_reference_load(&f, (const char *)*state);
    int n = tu_ref_int(&f, "n"), steps = tu_ref_int(&f, "steps");
    const float *p0 = ref(&f, "p0", (size_t)n), *lrs = ref(&f, "lrs", (size_t)steps);
    const float *G = ref(&f, "grads", (size_t)steps * n), *P = ref(&f, "P", (size_t)steps * n);
    qkv_adam opt;
    qkv_error err = {0};
    assert_int_equal(qkv_adam_init(&opt, (size_t)n, tu_ref_float(&f, "beta1"),
                                   tu_ref_float(&f, "beta2"), tu_ref_float(&f, "eps"),
                                   tu_ref_float(&f, "wd"), &err),
                     QKV_OK);
    float *p = tu_zeros((size_t)n);
    memcpy(p, p0, (size_t)n * sizeof *p);
    for (int k = 0; k < steps; k++) {
        qkv_adam_update(&opt, p, G + (size_t)k * n, lrs[k]);
        char what[32];
        snprintf(what, sizeof what, "P after step %d", k + 1);
        tu_check_close(what, p, P + (size_t)k * n, (size_t)n, TU_FWD_ATOL, TU_FWD_RTOL);
    }
    qkv_adam_free(&opt);
    free(p);
    qkv_tensor_file_free(&f);
}

/* One cmocka test per reference file, named after it. */
#define CASE(fn, name) { name, fn, NULL, NULL, (void *)name }

int main(void)
{
    const struct CMUnitTest tests[] = {
        CASE(test_rng, "rng"),
        CASE(test_linear, "linear_n1"),
        CASE(test_linear, "linear_bias"),
        CASE(test_linear, "linear_nobias"),
        CASE(test_embedding, "embedding_n1"),
        CASE(test_embedding, "embedding_repeat"),
        CASE(test_embedding, "embedding_same"),
        CASE(test_relu, "relu_1"),
        CASE(test_relu, "relu_37"),
        CASE(test_relu, "relu_300"),
        CASE(test_gelu, "gelu_1"),
        CASE(test_gelu, "gelu_37"),
        CASE(test_gelu, "gelu_300"),
        CASE(test_dropout, "dropout_n1"),
        CASE(test_dropout, "dropout_p10"),
        CASE(test_dropout, "dropout_offset"),
        CASE(test_dropout, "dropout_p0"),
        CASE(test_layernorm, "layernorm_n1"),
        CASE(test_layernorm, "layernorm_odd"),
        CASE(test_layernorm, "layernorm_shift"),
        CASE(test_layernorm, "layernorm_eps_large"),
        CASE(test_layernorm, "layernorm_eps_one"),
        CASE(test_layernorm, "layernorm_small_var"),
        CASE(test_rmsnorm, "rmsnorm_n1"),
        CASE(test_rmsnorm, "rmsnorm_odd"),
        CASE(test_rmsnorm, "rmsnorm_wide"),
        CASE(test_cross_entropy, "xent_n1"),
        CASE(test_cross_entropy, "xent_pad_smooth"),
        CASE(test_cross_entropy, "xent_pad_inside"),
        CASE(test_cross_entropy, "xent_large"),
        CASE(test_sinusoidal, "sinusoidal_512x64"),
        CASE(test_sinusoidal, "sinusoidal_9x5"),
        CASE(test_positional, "positional_sin"),
        CASE(test_positional, "positional_learned"),
        CASE(test_positional, "positional_one"),
        CASE(test_ffn, "ffn_relu"),
        CASE(test_ffn, "ffn_gelu_n1"),
        CASE(test_ffn, "ffn_gelu_nobias"),
        CASE(test_residual, "residual_n1"),
        CASE(test_residual, "residual_drop"),
        CASE(test_residual, "residual_nodrop"),
        CASE(test_addnorm, "addnorm_n1"),
        CASE(test_addnorm, "addnorm_drop"),
        CASE(test_addnorm, "addnorm_odd"),
        CASE(test_addnorm, "addnorm_eps_large"),
        CASE(test_adamw, "adamw_decay"),
        CASE(test_adamw, "adamw_strong_decay"),
        CASE(test_prenorm, "prenorm_gelu_drop"),
        CASE(test_prenorm, "prenorm_relu_n1"),
    };
    return cmocka_run_group_tests_name("parity_layers", tests, NULL, NULL);
}
