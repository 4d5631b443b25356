/* SPDX-License-Identifier: MIT */
/* PyTorch parity of the attention blocks: masked softmax, scaled dot-product attention,
 * additive attention and multi-head attention (our explicit formula, and once against
 * torch.nn.MultiheadAttention itself).
 *
 * Each case is a file written by tests/parity/make_reference.py with torch's outputs and
 * gradients for the same inputs, mask and dropout stream. We require
 *   forward   |qkv - torch| <= 1e-5 + 1e-5 |torch|           (every element)
 *   gradient  max |qkv - torch| <= 1e-4 max |torch|           (every input and parameter)
 * The cases cover: a valid length of 0 (a row with no visible key must be all zeros, not
 * uniform or NaN), per-query lengths, causal masks with n < m, n != m, d != v, several heads,
 * and dropout on the weights. Outputs start as NaN so an unwritten element fails; gradients
 * start at zero because backward accumulates. */
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

/* A writable copy of reference tensor `name` (weight structs hold non-const pointers). */
static float *ref_copy(const qkv_tensor_file *f, const char *name, size_t n)
{
    return tu_copy(ref(f, name, n), n);
}

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

/* The case's qkv_mask: valid_lens (B or B*n ints) when has_lens, per_query, causal. */
static qkv_mask ref_mask(const qkv_tensor_file *f, int B, int n)
{
    qkv_mask mask = {0};
    mask.per_query = tu_ref_int(f, "per_query");
    mask.causal = tu_ref_int(f, "causal");
    if (tu_ref_int(f, "has_lens")) {
        size_t want = mask.per_query ? (size_t)B * n : (size_t)B, got = 0;
        mask.valid_lens = tu_ref_i32(f, "valid_lens", &got);
        if (got != want) fail_msg("valid_lens has %zu values, expected %zu", got, want);
    }
    return mask;
}

#define CHECK_FWD(f, name, got, n) \
    tu_check_close(name, got, ref(f, name, n), n, TU_FWD_ATOL, TU_FWD_RTOL)
#define CHECK_GRAD(f, name, got, n) tu_check_grad(name, got, ref(f, name, n), n, TU_GRAD_REL)

/* ----------------------------------------------------------------------------------------
 * Masked softmax
 * ---------------------------------------------------------------------------------------- */

static void test_masked_softmax(void **state)
{
    qkv_tensor_file f;
    tu_reference_load(&f, (const char *)*state);
    int B = tu_ref_int(&f, "B"), H = tu_ref_int(&f, "H"), n = tu_ref_int(&f, "n");
    int m = tu_ref_int(&f, "m");
    qkv_mask mask = ref_mask(&f, B, n);
    size_t nS = (size_t)B * H * n * m;
    const float *S = ref(&f, "S", nS), *dP = ref(&f, "dP", nS);

    float *P = nans(nS), *dS = tu_zeros(nS);
    qkv_masked_softmax_forward(P, S, B, H, n, m, &mask);
    CHECK_FWD(&f, "P", P, nS);
    qkv_masked_softmax_backward(dS, dP, P, B * H * n, m);
    CHECK_GRAD(&f, "dS", dS, nS);
    free(P), free(dS);
    qkv_tensor_file_free(&f);
}

/* ----------------------------------------------------------------------------------------
 * Scaled dot-product attention, heads interleaved: Q (B, n, H, d), P (B, H, n, m)
 * ---------------------------------------------------------------------------------------- */

static void test_attention(void **state)
{
    qkv_tensor_file f;
    tu_reference_load(&f, (const char *)*state);
    int B = tu_ref_int(&f, "B"), H = tu_ref_int(&f, "H"), n = tu_ref_int(&f, "n");
    int m = tu_ref_int(&f, "m"), d = tu_ref_int(&f, "d"), v = tu_ref_int(&f, "v");
    float p = tu_ref_float(&f, "p");
    uint64_t seed = meta_u64(&f, "seed");
    qkv_mask mask = ref_mask(&f, B, n);
    size_t nQ = (size_t)B * n * H * d, nK = (size_t)B * m * H * d, nV = (size_t)B * m * H * v;
    size_t nO = (size_t)B * n * H * v, nP = (size_t)B * H * n * m;
    const float *Q = ref(&f, "Q", nQ), *K = ref(&f, "K", nK), *V = ref(&f, "V", nV);
    const float *dO = ref(&f, "dO", nO);

    float *O = nans(nO), *P = nans(nP);
    const qkv_attention_inputs x = {Q, K, V};
    const qkv_attention_shape shape = {B, H, n, m, d, v};
    float *scratch = tu_zeros(qkv_attention_scratch_floats(&shape));
    float *dQ = tu_zeros(nQ), *dK = tu_zeros(nK), *dV = tu_zeros(nV);
    qkv_attention_forward(O, P, &x, &shape, &mask, (qkv_dropout){p, seed, 0}, scratch);
    CHECK_FWD(&f, "P", P, nP);
    CHECK_FWD(&f, "O", O, nO);
    qkv_attention_backward(&(qkv_attention_grads){dQ, dK, dV}, dO, P, &x, &shape,
                           (qkv_dropout){p, seed, 0}, scratch);
    CHECK_GRAD(&f, "dQ", dQ, nQ);
    CHECK_GRAD(&f, "dK", dK, nK);
    CHECK_GRAD(&f, "dV", dV, nV);
    free(O), free(P), free(scratch), free(dQ), free(dK), free(dV);
    qkv_tensor_file_free(&f);
}

/* ----------------------------------------------------------------------------------------
 * Additive attention: s_ij = w_v . tanh(W_q q_i + W_k k_j)
 * ---------------------------------------------------------------------------------------- */

static void test_additive(void **state)
{
    qkv_tensor_file f;
    tu_reference_load(&f, (const char *)*state);
    int B = tu_ref_int(&f, "B"), n = tu_ref_int(&f, "n"), m = tu_ref_int(&f, "m");
    int dq = tu_ref_int(&f, "dq"), dk = tu_ref_int(&f, "dk"), v = tu_ref_int(&f, "v");
    int h = tu_ref_int(&f, "h");
    float p = tu_ref_float(&f, "p");
    uint64_t seed = meta_u64(&f, "seed");
    qkv_mask mask = ref_mask(&f, B, n);
    size_t nQ = (size_t)B * n * dq, nK = (size_t)B * m * dk, nV = (size_t)B * m * v;
    size_t nO = (size_t)B * n * v, nP = (size_t)B * n * m;
    const float *Q = ref(&f, "Q", nQ), *K = ref(&f, "K", nK), *V = ref(&f, "V", nV);
    const float *dO = ref(&f, "dO", nO);
    qkv_additive_weights w = {ref_copy(&f, "W_q", (size_t)h * dq),
                              ref_copy(&f, "W_k", (size_t)h * dk), ref_copy(&f, "w_v", (size_t)h)};
    qkv_additive_weights dw = {tu_zeros((size_t)h * dq), tu_zeros((size_t)h * dk),
                               tu_zeros((size_t)h)};
    qkv_additive_cache c = {nans((size_t)B * n * h), nans((size_t)B * m * h),
                            nans((size_t)B * n * m * h), nans(nP)};

    const qkv_attention_inputs x = {Q, K, V};
    const qkv_additive_shape shape = {B, n, m, dq, dk, v, h};
    const qkv_dropout drop = {p, seed, 0};
    float *O = nans(nO), *scratch = tu_zeros(qkv_additive_attention_scratch_floats(&shape));
    float *dQ = tu_zeros(nQ), *dK = tu_zeros(nK), *dV = tu_zeros(nV);
    qkv_additive_attention_forward(O, &c, &x, &w, &shape, &mask, drop, scratch);
    CHECK_FWD(&f, "q", c.q, (size_t)B * n * h);
    CHECK_FWD(&f, "k", c.k, (size_t)B * m * h);
    CHECK_FWD(&f, "F", c.F, (size_t)B * n * m * h);
    CHECK_FWD(&f, "P", c.P, nP);
    CHECK_FWD(&f, "O", O, nO);
    qkv_additive_attention_backward(&(qkv_attention_grads){dQ, dK, dV}, &dw, dO, &c, &x, &w,
                                    &shape, drop, scratch);
    CHECK_GRAD(&f, "dQ", dQ, nQ);
    CHECK_GRAD(&f, "dK", dK, nK);
    CHECK_GRAD(&f, "dV", dV, nV);
    CHECK_GRAD(&f, "dW_q", dw.W_q, (size_t)h * dq);
    CHECK_GRAD(&f, "dW_k", dw.W_k, (size_t)h * dk);
    CHECK_GRAD(&f, "dw_v", dw.w_v, (size_t)h);
    free(w.W_q), free(w.W_k), free(w.w_v), free(dw.W_q), free(dw.W_k), free(dw.w_v);
    free(c.q), free(c.k), free(c.F), free(c.P);
    free(O), free(scratch), free(dQ), free(dK), free(dV);
    qkv_tensor_file_free(&f);
}

/* A gradient that is exactly zero in exact arithmetic, so that both qkv's and torch's values
 * are rounding noise and a tolerance relative to torch's means nothing: the key bias b_k adds
 * q_i . b_k to every score of row i, which softmax ignores. Both must be negligible next to
 * a gradient of the same scale (that of b_q). */
static void check_zero_grad(const char *name, const float *got, const float *want, size_t n,
                            const float *scale_of, size_t ns)
{
    double scale = 0.0, worst = 0.0;
    for (size_t i = 0; i < ns; i++) scale = fmax(scale, fabs((double)scale_of[i]));
    tu_check_finite(name, got, n);
    for (size_t i = 0; i < n; i++)
        worst = fmax(worst, fmax(fabs((double)got[i]), fabs((double)want[i])));
    if (worst > TU_GRAD_REL * scale)
        fail_msg("%s should be 0: max |qkv|, |torch| = %g > %g * %g", name, worst,
                 (double)TU_GRAD_REL, scale);
}

/* ----------------------------------------------------------------------------------------
 * Multi-head attention. Self-attention passes the same pointer as queries and keys/values and
 * the same gradient buffer for both, which must then hold the sum of the two contributions.
 * ---------------------------------------------------------------------------------------- */

static void test_mha(void **state)
{
    qkv_tensor_file f;
    tu_reference_load(&f, (const char *)*state);
    int B = tu_ref_int(&f, "B"), n = tu_ref_int(&f, "n"), m = tu_ref_int(&f, "m");
    int self = tu_ref_int(&f, "self");
    qkv_mha_config cfg = {tu_ref_int(&f, "d_q"), tu_ref_int(&f, "d_kv"), tu_ref_int(&f, "heads"),
                          tu_ref_int(&f, "head_dim"), tu_ref_int(&f, "bias")};
    float p = tu_ref_float(&f, "p");
    uint64_t seed = meta_u64(&f, "seed");
    qkv_mask mask = ref_mask(&f, B, n);
    size_t hp = (size_t)cfg.heads * cfg.head_dim;
    size_t nq = (size_t)B * n * cfg.d_q, nkv = (size_t)B * m * cfg.d_kv;
    size_t nP = (size_t)B * cfg.heads * n * m;
    const float *xq = ref(&f, "xq", nq), *dy = ref(&f, "dy", nq);
    const float *xkv = self ? xq : ref(&f, "xkv", nkv);

    /* Weights and gradients in one flat buffer each, laid out by the library's view. */
    size_t nw = qkv_mha_weights_floats(&cfg);
    float *wbuf = nans(nw), *dwbuf = tu_zeros(nw);
    qkv_mha_weights w = qkv_mha_weights_view(wbuf, &cfg), dw = qkv_mha_weights_view(dwbuf, &cfg);
    struct { const char *name; float *at, *grad; size_t n; } t[] = {
        {"W_q", w.W_q, dw.W_q, hp * cfg.d_q},  {"W_k", w.W_k, dw.W_k, hp * cfg.d_kv},
        {"W_v", w.W_v, dw.W_v, hp * cfg.d_kv}, {"W_o", w.W_o, dw.W_o, (size_t)cfg.d_q * hp},
        {"b_q", w.b_q, dw.b_q, hp},            {"b_k", w.b_k, dw.b_k, hp},
        {"b_v", w.b_v, dw.b_v, hp},            {"b_o", w.b_o, dw.b_o, (size_t)cfg.d_q},
    };
    int nt = cfg.bias ? 8 : 4;
    if (!cfg.bias) assert_true(!w.b_q && !w.b_k && !w.b_v && !w.b_o);
    for (int i = 0; i < nt; i++)
        memcpy(t[i].at, ref(&f, t[i].name, t[i].n), t[i].n * sizeof(float));
    for (size_t i = 0; i < nw; i++) /* the view must cover the buffer exactly */
        if (isnan(wbuf[i])) fail_msg("weights buffer element %zu is not covered by the view", i);

    float *cbuf = nans(qkv_mha_cache_floats(&cfg, B, n, m));
    qkv_mha_cache c = qkv_mha_cache_view(cbuf, &cfg, B, n, m);
    float *scratch = tu_zeros(qkv_mha_scratch_floats(&cfg, B, n, m));
    float *y = nans(nq), *dxq = tu_zeros(nq), *dxkv = self ? dxq : tu_zeros(nkv);
    const qkv_attention_inputs x = {xq, xkv, xkv};
    const qkv_attention_shape shape = qkv_mha_shape(&cfg, B, n, m);
    qkv_mha_forward(y, &c, &x, &w, &cfg, &shape, &mask, (qkv_dropout){p, seed, 0}, scratch);
    CHECK_FWD(&f, "P", c.P, nP);
    CHECK_FWD(&f, "y", y, nq);
    qkv_mha_backward(&(qkv_attention_grads){dxq, dxkv, dxkv}, &dw, dy, &c, &x, &w, &cfg, &shape,
                     (qkv_dropout){p, seed, 0}, scratch);
    CHECK_GRAD(&f, "dxq", dxq, nq);
    if (!self) CHECK_GRAD(&f, "dxkv", dxkv, nkv);
    for (int i = 0; i < nt; i++) {
        char name[16];
        snprintf(name, sizeof name, "d%s", t[i].name);
        if (strcmp(t[i].name, "b_k") == 0)
            check_zero_grad(name, t[i].grad, ref(&f, name, hp), hp, ref(&f, "db_q", hp), hp);
        else
            CHECK_GRAD(&f, name, t[i].grad, t[i].n);
    }
    if (!self) free(dxkv);
    free(wbuf), free(dwbuf), free(cbuf), free(scratch), free(y), free(dxq);
    qkv_tensor_file_free(&f);
}

/* One cmocka test per reference file, named after it. */
#define CASE(fn, name) { name, fn, NULL, NULL, (void *)name }

int main(void)
{
    const struct CMUnitTest tests[] = {
        CASE(test_masked_softmax, "softmax_nomask"),
        CASE(test_masked_softmax, "softmax_seq"),
        CASE(test_masked_softmax, "softmax_query"),
        CASE(test_masked_softmax, "softmax_causal"),
        CASE(test_masked_softmax, "softmax_causal_seq"),
        CASE(test_attention, "attn_n1"),
        CASE(test_attention, "attn_seq_zero"),
        CASE(test_attention, "attn_causal_heads"),
        CASE(test_attention, "attn_query_causal_drop"),
        CASE(test_attention, "attn_heads_drop"),
        CASE(test_additive, "additive_n1"),
        CASE(test_additive, "additive_seq_zero"),
        CASE(test_additive, "additive_query_causal_drop"),
        CASE(test_additive, "additive_causal_rect"),
        CASE(test_mha, "mha_torch"),
        CASE(test_mha, "mha_self_bias"),
        CASE(test_mha, "mha_self_nobias_causal_drop"),
        CASE(test_mha, "mha_cross_bias_drop"),
        CASE(test_mha, "mha_cross_query_causal"),
        CASE(test_mha, "mha_self_n1"),
    };
    return cmocka_run_group_tests_name("parity_attention", tests, NULL, NULL);
}
