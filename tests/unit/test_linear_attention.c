/* SPDX-License-Identifier: MIT */
/* Linear attention (src/ops/cpu/linear_attention.c): the non-causal O(N) form, the causal scan
 * with its two-sweep backward, and the recurrent step for generation.
 *
 *   gradcheck_*     central differences (TU_FD_STEP, TU_FD_TOL) of L = sum(O * r) against
 *                   backward, for dQ, dK, dV, with valid lengths (0 and 1 included) and
 *                   causal with n == m, n < m (a chunk after a cached prefix) and n > m.
 *   parity_*        files from tests/parity/make_linear_reference.py: PyTorch autograd through
 *                   the QUADRATIC formula (phi(Q) phi(K)^T materialised, masked, normalised),
 *                   so the O(N) sums, the scan and the sweeps are checked against an
 *                   independent computation. Forward |qkv - torch| <= 1e-5 + 1e-5 |torch|;
 *                   gradients max |qkv - torch| <= 1e-4 max |torch|; keys past the valid length
 *                   get exactly zero gradient. Scratch is sized exactly and fenced by
 *                   sentinels that must survive.
 *   step_*          the recurrent form token by token == the causal forward (1e-6).
 *   noncausal_prefix_equals_causal
 *                   non-causal attention of query t over keys 0..t (valid length t + 1) is row
 *                   t of the causal form; with every key valid, the last row.
 *   scratch_linear  the causal backward's scratch is affine in N (N, 2N, 3N) and O(N (d + v)
 *                   + d v), and a backward over N = 4096 runs inside it.
 *   phi_values      phi = elu + 1 itself, read from a fresh state's z after one step (z =
 *                   phi(k)) over 40 values (the vectorised 32 and a scalar tail): x + 1
 *                   exactly for x >= 0, e^x within 3e-7 relative below, 0 at -100 and -inf,
 *                   NaN stays NaN. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#define CHECK(name, x, n, g, ctx, fn) \
    tu_gradcheck(name, x, n, g, fn, ctx, TU_FD_STEP, TU_FD_TOL, 48)

/* n floats, all NaN: an output that must be written everywhere. */
static float *nans(size_t n)
{
    float *x = tu_zeros(n);
    for (size_t i = 0; i < n; i++) x[i] = NAN;
    return x;
}

/* Scratch of exactly n floats followed by FENCE sentinels, which no call may overwrite. */
enum { FENCE = 64 };
static const float SENTINEL = -12345.678f;
static float *fenced(size_t n)
{
    float *x = tu_zeros(n + FENCE);
    for (size_t i = n; i < n + FENCE; i++) x[i] = SENTINEL;
    return x;
}
static void check_fence(const float *x, size_t n)
{
    for (size_t i = n; i < n + FENCE; i++)
        if (x[i] != SENTINEL) fail_msg("scratch written past its %zu floats (at +%zu)", n, i - n);
}

/* ----------------------------------------------------------------------------------------
 * Finite differences
 * ---------------------------------------------------------------------------------------- */

typedef struct {
    int B, H, n, m, d, v, causal;
    const int *lens;
    float *Q, *K, *V, *O, *r, *scratch;
} lin_ctx;

static size_t nQ(const lin_ctx *c) { return (size_t)c->B * c->n * c->H * c->d; }
static size_t nK(const lin_ctx *c) { return (size_t)c->B * c->m * c->H * c->d; }
static size_t nV(const lin_ctx *c) { return (size_t)c->B * c->m * c->H * c->v; }
static size_t nO(const lin_ctx *c) { return (size_t)c->B * c->n * c->H * c->v; }
static qkv_attention_shape shape_of(const lin_ctx *c)
{
    return (qkv_attention_shape){c->B, c->H, c->n, c->m, c->d, c->v};
}

static double lin_loss(void *p)
{
    lin_ctx *c = p;
    const qkv_attention_shape s = shape_of(c);
    qkv_linear_attention_forward(c->O, &(qkv_attention_inputs){c->Q, c->K, c->V}, &s, c->lens,
                                 c->causal, c->scratch);
    return tu_dot(c->O, c->r, nO(c));
}

static void gradcheck(int B, int H, int n, int m, int d, int v, int causal, const int *lens,
                      const char *label)
{
    lin_ctx c = {B, H, n, m, d, v, causal, lens, NULL, NULL, NULL, NULL, NULL, NULL};
    c.Q = tu_rand(nQ(&c), 101), c.K = tu_rand(nK(&c), 102), c.V = tu_rand(nV(&c), 103);
    c.O = tu_zeros(nO(&c)), c.r = tu_rand(nO(&c), 104);
    const qkv_attention_shape s = shape_of(&c);
    c.scratch = tu_zeros(qkv_linear_attention_scratch_floats(&s, causal));
    float *dQ = tu_zeros(nQ(&c)), *dK = tu_zeros(nK(&c)), *dV = tu_zeros(nV(&c));
    lin_loss(&c);
    qkv_linear_attention_backward(&(qkv_attention_grads){dQ, dK, dV}, c.r,
                                  &(qkv_attention_inputs){c.Q, c.K, c.V}, &s, lens, causal,
                                  c.scratch);
    char name[96];
    snprintf(name, sizeof name, "%s dQ", label);
    CHECK(name, c.Q, nQ(&c), dQ, &c, lin_loss);
    snprintf(name, sizeof name, "%s dK", label);
    CHECK(name, c.K, nK(&c), dK, &c, lin_loss);
    snprintf(name, sizeof name, "%s dV", label);
    CHECK(name, c.V, nV(&c), dV, &c, lin_loss);
    free(c.Q), free(c.K), free(c.V), free(c.O), free(c.r), free(c.scratch);
    free(dQ), free(dK), free(dV);
}

static void test_gradcheck_noncausal(void **state)
{
    (void)state;
    int lens[3] = {5, 1, 0};
    gradcheck(1, 1, 1, 1, 2, 3, 0, NULL, "noncausal n1");
    gradcheck(2, 2, 3, 5, 3, 2, 0, NULL, "noncausal");
    gradcheck(3, 2, 4, 5, 2, 3, 0, lens, "noncausal lens 5,1,0");
}

static void test_gradcheck_causal(void **state)
{
    (void)state;
    int lens[2] = {4, 1}, lens_prefix[2] = {6, 4};
    gradcheck(2, 2, 4, 4, 3, 2, 1, NULL, "causal");
    gradcheck(2, 2, 4, 4, 2, 3, 1, lens, "causal lens 4,1");
    gradcheck(2, 1, 3, 6, 3, 2, 1, lens_prefix, "causal prefix n<m");
    gradcheck(1, 2, 5, 3, 2, 2, 1, NULL, "causal n>m");
}

/* ----------------------------------------------------------------------------------------
 * PyTorch parity against the quadratic form
 * ---------------------------------------------------------------------------------------- */

static const float *ref(const qkv_tensor_file *f, const char *name, size_t n)
{
    size_t got = 0;
    const float *x = tu_ref_f32(f, name, &got);
    if (got != n) fail_msg("reference '%s' has %zu values, the test expects %zu", name, got, n);
    return x;
}

#define CHECK_FWD(f, name, got, n) \
    tu_check_close(name, got, ref(f, name, n), n, TU_FWD_ATOL, TU_FWD_RTOL)
#define CHECK_GRAD(f, name, got, n) tu_check_grad(name, got, ref(f, name, n), n, TU_GRAD_REL)

/* Every element of rows [from, to) of sequence b of x (B, T, H, w) must be exactly 0. */
static void check_zero_rows(const char *name, const float *x, int b, int T, int from, int to,
                            int H, int w)
{
    for (int t = from; t < to; t++)
        for (size_t e = 0; e < (size_t)H * w; e++) {
            float g = x[((size_t)b * T + t) * H * w + e];
            if (g != 0.0f) fail_msg("%s: sequence %d row %d (past its length) has %g", name, b, t,
                                    (double)g);
        }
}

static void test_parity(void **state)
{
    qkv_tensor_file f;
    tu_reference_load(&f, (const char *)*state);
    lin_ctx c = {tu_ref_int(&f, "B"), tu_ref_int(&f, "H"), tu_ref_int(&f, "n"),
                 tu_ref_int(&f, "m"), tu_ref_int(&f, "d"), tu_ref_int(&f, "v"),
                 tu_ref_int(&f, "causal"), NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    if (tu_ref_int(&f, "has_lens")) {
        size_t got = 0;
        c.lens = tu_ref_i32(&f, "valid_lens", &got);
        if (got != (size_t)c.B) fail_msg("valid_lens has %zu values, expected %d", got, c.B);
    }
    const float *Q = ref(&f, "Q", nQ(&c)), *K = ref(&f, "K", nK(&c)), *V = ref(&f, "V", nV(&c));
    const float *dO = ref(&f, "dO", nO(&c));
    const qkv_attention_inputs x = {Q, K, V};
    const qkv_attention_shape s = shape_of(&c);
    size_t ns = qkv_linear_attention_scratch_floats(&s, c.causal);
    float *O = nans(nO(&c)), *scratch = fenced(ns);
    float *dQ = tu_zeros(nQ(&c)), *dK = tu_zeros(nK(&c)), *dV = tu_zeros(nV(&c));

    qkv_linear_attention_forward(O, &x, &s, c.lens, c.causal, scratch);
    check_fence(scratch, ns);
    CHECK_FWD(&f, "O", O, nO(&c));
    qkv_linear_attention_backward(&(qkv_attention_grads){dQ, dK, dV}, dO, &x, &s, c.lens,
                                  c.causal, scratch);
    check_fence(scratch, ns);
    CHECK_GRAD(&f, "dQ", dQ, nQ(&c));
    CHECK_GRAD(&f, "dK", dK, nK(&c));
    CHECK_GRAD(&f, "dV", dV, nV(&c));
    for (int b = 0; c.lens && b < c.B; b++) {
        int L = c.lens[b];
        check_zero_rows("dK", dK, b, c.m, L, c.m, c.H, c.d);
        check_zero_rows("dV", dV, b, c.m, L, c.m, c.H, c.v);
        if (L == 0) check_zero_rows("O", O, b, c.n, 0, c.n, c.H, c.v); /* sees nothing: 0 */
    }

    /* Backward accumulates: a second call adds the same gradients again. NULL gradients
     * are skipped: dK alone must come out as the same sum. */
    float *dK2 = tu_copy(dK, nK(&c));
    qkv_linear_attention_backward(&(qkv_attention_grads){dQ, dK, dV}, dO, &x, &s, c.lens,
                                  c.causal, scratch);
    qkv_linear_attention_backward(&(qkv_attention_grads){NULL, dK2, NULL}, dO, &x, &s, c.lens,
                                  c.causal, scratch);
    for (size_t i = 0; i < nQ(&c); i++) dQ[i] *= 0.5f;
    for (size_t i = 0; i < nV(&c); i++) dV[i] *= 0.5f;
    tu_check_grad("dQ accumulated twice / 2", dQ, ref(&f, "dQ", nQ(&c)), nQ(&c), TU_GRAD_REL);
    tu_check_grad("dV accumulated twice / 2", dV, ref(&f, "dV", nV(&c)), nV(&c), TU_GRAD_REL);
    tu_check_close("dK (only dK requested) vs dK (all)", dK2, dK, nK(&c), 0.0f, 1e-6f);

    free(O), free(scratch), free(dQ), free(dK), free(dV), free(dK2);
    qkv_tensor_file_free(&f);
}

/* ----------------------------------------------------------------------------------------
 * The recurrent step
 * ---------------------------------------------------------------------------------------- */

/* Runs each sequence of Q, K, V (B, T, H, .) through a state, token by token, into O. */
static void run_steps(float *O, qkv_linear_attention_state *s, const float *Q, const float *K,
                      const float *V, int B, int T, int H, int d, int v)
{
    for (int b = 0; b < B; b++) {
        qkv_linear_attention_state_reset(s);
        for (int t = 0; t < T; t++) {
            size_t row = (size_t)b * T + t;
            qkv_linear_attention_step(O + row * H * v, s, Q + row * H * d, K + row * H * d,
                                      V + row * H * v);
            assert_int_equal(s->t, t + 1);
        }
    }
}

static void test_step_equals_causal(void **state)
{
    (void)state;
    enum { B = 2, T = 33, H = 3, D = 5, VD = 4 };
    size_t nq = (size_t)B * T * H * D, nv = (size_t)B * T * H * VD;
    float *Q = tu_rand(nq, 201), *K = tu_rand(nq, 202), *V = tu_rand(nv, 203);
    for (size_t i = 0; i < nq; i++) Q[i] *= 2.0f, K[i] *= 2.0f; /* phi's both branches */
    float *O = nans(nv), *Os = nans(nv);
    const qkv_attention_shape shape = {B, H, T, T, D, VD};
    float *scratch = tu_zeros(qkv_linear_attention_scratch_floats(&shape, 1));
    qkv_linear_attention_forward(O, &(qkv_attention_inputs){Q, K, V}, &shape, NULL, 1, scratch);

    qkv_linear_attention_state s;
    qkv_error err = {0};
    assert_int_equal(qkv_linear_attention_state_init(&s, H, D, VD, &err), QKV_OK);
    run_steps(Os, &s, Q, K, V, B, T, H, D, VD);
    tu_check_close("step vs causal forward", Os, O, nv, 1e-6f, 1e-6f);

    /* After a reset the state has forgotten everything: the same outputs again. */
    float *Os2 = nans(nv);
    run_steps(Os2, &s, Q, K, V, B, T, H, D, VD);
    tu_check_close("steps after reset", Os2, Os, nv, 0.0f, 0.0f);

    qkv_linear_attention_state_free(&s);
    assert_null(s.S);
    qkv_linear_attention_state_free(&s); /* twice is harmless */
    free(Q), free(K), free(V), free(O), free(Os), free(Os2), free(scratch);
}

/* The step absorbs k before it reads out, so a fresh state's first output is v itself, up to
 * eps: one key of weight phi(q).phi(k) / (phi(q).phi(k) + eps). Bad sizes fail cleanly. */
static void test_step_first_token_and_errors(void **state)
{
    (void)state;
    enum { H = 2, D = 3, VD = 4 };
    float q[H * D] = {0.3f, -1.0f, 2.0f, -0.5f, 0.1f, 0.0f};
    float k[H * D] = {1.0f, 0.2f, -3.0f, 0.7f, -0.2f, 0.4f};
    float v[H * VD] = {1, -2, 3, 0.5f, -1, 0, 4, 2};
    float o[H * VD];
    qkv_linear_attention_state s;
    qkv_error err = {0};
    assert_int_equal(qkv_linear_attention_state_init(&s, H, D, VD, &err), QKV_OK);
    qkv_linear_attention_step(o, &s, q, k, v);
    tu_check_close("first step returns v", o, v, H * VD, 0.0f, 1e-5f);
    qkv_linear_attention_state_free(&s);

    assert_int_equal(qkv_linear_attention_state_init(&s, 0, D, VD, &err), QKV_ERR_ARG);
    assert_non_null(strstr(err.msg, "linear attention state"));
    assert_null(s.S);
    assert_int_equal(qkv_linear_attention_state_init(&s, H, D, -1, &err), QKV_ERR_ARG);
}

/* ----------------------------------------------------------------------------------------
 * Non-causal with keys 0..t == causal row t
 * ---------------------------------------------------------------------------------------- */

static void test_noncausal_prefix_equals_causal(void **state)
{
    (void)state;
    enum { T = 17, H = 2, D = 6, VD = 3 };
    size_t nq = (size_t)T * H * D, nv = (size_t)T * H * VD;
    float *Q = tu_rand(nq, 301), *K = tu_rand(nq, 302), *V = tu_rand(nv, 303);
    float *O = nans(nv), *row = nans((size_t)H * VD);
    /* enough for all three uses: causal, non-causal with 1 query and with T queries */
    const qkv_attention_inputs x = {Q, K, V};
    const qkv_attention_shape shape = {1, H, T, T, D, VD}, one_query = {1, H, 1, T, D, VD};
    size_t ns = qkv_linear_attention_scratch_floats(&shape, 1);
    size_t nsf = qkv_linear_attention_scratch_floats(&shape, 0);
    float *scratch = tu_zeros(ns > nsf ? ns : nsf);
    qkv_linear_attention_forward(O, &x, &shape, NULL, 1, scratch);
    for (int t = 0; t < T; t++) {
        int len = t + 1;
        qkv_linear_attention_forward(row, &(qkv_attention_inputs){Q + (size_t)t * H * D, K, V},
                                     &one_query, &len, 0, scratch);
        char name[64];
        snprintf(name, sizeof name, "non-causal, keys 0..%d vs causal row %d", t, t);
        tu_check_close(name, row, O + (size_t)t * H * VD, (size_t)H * VD, 1e-6f, 1e-5f);
    }
    /* All keys valid (valid_lens NULL), every query: the last row is the causal last row. */
    float *Of = nans(nv);
    qkv_linear_attention_forward(Of, &x, &shape, NULL, 0, scratch);
    tu_check_close("non-causal last row vs causal last row", Of + (size_t)(T - 1) * H * VD,
                   O + (size_t)(T - 1) * H * VD, (size_t)H * VD, 1e-6f, 1e-5f);
    /* ...and the rows before it differ: the non-causal ones see the future. */
    double diff = 0.0;
    for (size_t i = 0; i < (size_t)H * VD; i++) diff = fmax(diff, fabs((double)Of[i] - O[i]));
    assert_true(diff > 1e-3);
    free(Q), free(K), free(V), free(O), free(row), free(Of), free(scratch);
}

/* ----------------------------------------------------------------------------------------
 * Memory: linear in the sequence length
 * ---------------------------------------------------------------------------------------- */

static void test_phi_values(void **state)
{
    (void)state;
    enum { D = 40 }; /* 32 values through the vector loop, 8 through the scalar tail */
    float k[D], v[1] = {1.0f}, q[D] = {0}, o[1];
    for (int a = 0; a < D; a++) k[a] = (float)((a * 37) % 23 - 11) * 0.61f; /* both signs */
    k[3] = 0.0f, k[5] = -80.0f, k[7] = -100.0f, k[9] = -INFINITY, k[11] = 1e30f;
    k[13] = NAN, k[35] = NAN, k[36] = 0.0f, k[37] = -100.0f, k[38] = 3.5f;
    qkv_linear_attention_state s;
    qkv_error err = {0};
    assert_int_equal(qkv_linear_attention_state_init(&s, 1, D, 1, &err), QKV_OK);
    qkv_linear_attention_step(o, &s, q, k, v);
    for (int a = 0; a < D; a++) {
        const float x = k[a], f = s.z[a];
        if (isnan(x)) {
            if (!isnan(f)) fail_msg("phi(NaN) at %d is %g, not NaN", a, f);
        } else if (x >= 0.0f) {
            if (f != x + 1.0f) fail_msg("phi(%g) at %d is %.9g, not x + 1 exactly", x, a, f);
        } else if (x < -88.0f) {
            if (!(f >= 0.0f && f <= 1e-37f)) fail_msg("phi(%g) at %d is %g, not ~0", x, a, f);
        } else {
            const double want = exp((double)x);
            if (!(fabs(f - want) <= 3e-7 * want))
                fail_msg("phi(%g) at %d is %.9g, e^x is %.9g", x, a, f, want);
        }
    }
    qkv_linear_attention_state_free(&s);
}

static void test_scratch_linear(void **state)
{
    (void)state;
    enum { B = 2, H = 4, D = 16, VD = 8 };
    for (int causal = 0; causal < 2; causal++) {
        const int N = 1000;
        const qkv_attention_shape n1 = {B, H, N, N, D, VD}, n2 = {B, H, 2 * N, 2 * N, D, VD},
                                  n3 = {B, H, 3 * N, 3 * N, D, VD};
        size_t s1 = qkv_linear_attention_scratch_floats(&n1, causal);
        size_t s2 = qkv_linear_attention_scratch_floats(&n2, causal);
        size_t s3 = qkv_linear_attention_scratch_floats(&n3, causal);
        assert_true(s2 > s1);
        assert_int_equal(s2 - s1, s3 - s2); /* affine in N: no N^2 term */
        /* O(N (d + v) + d v) per (batch, head), with a small constant */
        size_t bound = (size_t)B * H * (4 * (size_t)N * (D + VD) + 2 * D * VD + 4 * D);
        if (s1 > bound) fail_msg("causal %d: scratch %zu > %zu", causal, s1, bound);
        /* far below softmax attention's (B, H, N, N) */
        assert_true(s1 * 10 < qkv_attention_scratch_floats(&n1));
    }

    /* A causal backward over N = 4096 in exactly its scratch (an N x N buffer would be 16M
     * floats per head, 4 orders of magnitude more than it has). */
    enum { N = 4096, H1 = 1, D1 = 4, V1 = 4 };
    const qkv_attention_shape shape = {1, H1, N, N, D1, V1};
    size_t ns = qkv_linear_attention_scratch_floats(&shape, 1);
    assert_true(ns < (size_t)N * (2 * D1 + V1 + 2) + 64); /* phi(Q), phi(K), A, c */
    size_t nq = (size_t)N * H1 * D1, nv = (size_t)N * H1 * V1;
    float *Q = tu_rand(nq, 401), *K = tu_rand(nq, 402), *V = tu_rand(nv, 403);
    float *dO = tu_rand(nv, 404), *O = nans(nv), *scratch = fenced(ns);
    float *dQ = tu_zeros(nq), *dK = tu_zeros(nq), *dV = tu_zeros(nv);
    const qkv_attention_inputs x = {Q, K, V};
    qkv_linear_attention_forward(O, &x, &shape, NULL, 1, scratch);
    qkv_linear_attention_backward(&(qkv_attention_grads){dQ, dK, dV}, dO, &x, &shape, NULL, 1,
                                  scratch);
    check_fence(scratch, ns);
    tu_check_finite("O", O, nv);
    tu_check_finite("dQ", dQ, nq);
    tu_check_finite("dK", dK, nq);
    tu_check_finite("dV", dV, nv);
    /* The first key is seen by all N queries, the last by one: the sweeps reach both ends. */
    double g0 = 0.0, gl = 0.0;
    for (int e = 0; e < D1; e++) g0 += fabs(dK[e]), gl += fabs(dK[(size_t)(N - 1) * D1 + e]);
    assert_true(g0 > 0.0 && gl > 0.0);
    free(Q), free(K), free(V), free(dO), free(O), free(scratch), free(dQ), free(dK), free(dV);
}

/* One cmocka test per reference file, named after it. */
#define CASE(name) { "parity_" name, test_parity, NULL, NULL, (void *)name }

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gradcheck_noncausal),
        cmocka_unit_test(test_gradcheck_causal),
        CASE("linattn_one_query"),
        CASE("linattn_rect_lens"),
        CASE("linattn_len0"),
        CASE("linattn_long"),
        CASE("linattn_causal"),
        CASE("linattn_causal_lens"),
        CASE("linattn_causal_prefix"),
        CASE("linattn_causal_fewkeys"),
        CASE("linattn_causal_long"),
        CASE("linattn_wide"),
        CASE("linattn_causal_wide"),
        cmocka_unit_test(test_step_equals_causal),
        cmocka_unit_test(test_step_first_token_and_errors),
        cmocka_unit_test(test_noncausal_prefix_equals_causal),
        cmocka_unit_test(test_phi_values),
        cmocka_unit_test(test_scratch_linear),
    };
    return cmocka_run_group_tests_name("linear_attention", tests, NULL, NULL);
}
