/* SPDX-License-Identifier: MIT */
/* Properties of the kernels that parity with PyTorch does not pin down: dropout's statistics
 * and reproducibility, exact zeros under masks, error reporting on bad ids, the causal
 * mask's equivalence with step-by-step decoding, and GELU (qkv's own normal CDF) against
 * erfc in double precision over the whole float range that matters. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

static void test_random_streams(void **state)
{
    (void)state;
    enum { n = 200000 };
    float *u = tu_zeros(n), *g = tu_zeros(n);
    qkv_fill_uniform(u, n, 0.0f, 1.0f, 123);
    qkv_fill_normal(g, n, 0.0f, 1.0f, 123);
    double su = 0, sg = 0, sg2 = 0;
    for (int i = 0; i < n; i++) {
        assert_true(u[i] >= 0.0f && u[i] < 1.0f);
        su += u[i], sg += g[i], sg2 += (double)g[i] * g[i];
    }
    assert_float_equal(su / n, 0.5, 0.005);
    assert_float_equal(sg / n, 0.0, 0.01);
    assert_float_equal(sqrt(sg2 / n), 1.0, 0.01);
    assert_true(qkv_random_u32(1, 0) != qkv_random_u32(2, 0));
    assert_int_equal(qkv_random_u32(7, 1000), qkv_random_u32(7, 1000));
    free(u), free(g);
}

static void test_dropout(void **state)
{
    (void)state;
    enum { n = 100000 };
    float *x = tu_rand(n, 1), *y = tu_zeros(n), *y2 = tu_zeros(n);
    qkv_dropout_forward(y, x, n, 0.0f, 5, 0); /* p = 0 (evaluation): identity */
    assert_memory_equal(x, y, n * sizeof *x);
    int dropped = 0;
    qkv_dropout_forward(y, x, n, 0.3f, 5, 0);
    for (int i = 0; i < n; i++) {
        if (y[i] == 0.0f) dropped++;
        else assert_float_equal(y[i], x[i] / 0.7f, 1e-6f);
    }
    assert_float_equal((double)dropped / n, 0.3, 0.01);
    /* reproducible for a seed, whatever the thread count; another offset is another mask */
    int threads = qkv_get_threads();
    qkv_set_threads(1);
    qkv_dropout_forward(y2, x, n, 0.3f, 5, 0);
    qkv_set_threads(threads);
    assert_memory_equal(y, y2, n * sizeof *y);
    qkv_dropout_forward(y2, x, n, 0.3f, 5, 1);
    assert_true(memcmp(y, y2, n * sizeof *y) != 0);
    free(x), free(y), free(y2);
}

static void test_embedding_rejects_bad_ids(void **state)
{
    (void)state;
    float E[12] = {0}, y[9];
    int ids[3] = {0, 4, 1};
    qkv_error err = {0};
    assert_int_equal(qkv_embedding_forward(y, ids, E, 3, 4, 3, &err), QKV_ERR_ARG);
    assert_non_null(strstr(err.msg, "position 1"));
    ids[1] = -1;
    assert_int_equal(qkv_embedding_forward(y, ids, E, 3, 4, 3, &err), QKV_ERR_ARG);
}

static void test_cross_entropy_values(void **state)
{
    (void)state;
    float z[3 * 5] = {0}, loss[3], lse[3];
    int t[3] = {2, 1, 4}; /* row 1 is padding (id 1) */
    double sum;
    int count = qkv_cross_entropy_forward(loss, lse, &sum, z, t, 3, 5, 1, 0.0f, NULL);
    assert_int_equal(count, 2);
    assert_float_equal(loss[0], logf(5.0f), 1e-6f); /* uniform logits: log V */
    assert_true(loss[1] == 0.0f);
    assert_float_equal(sum, 2 * log(5.0), 1e-5);
    z[4] = 10.0f; /* confident and right: small loss; smoothing adds eps * mean(-log p) */
    qkv_cross_entropy_forward(loss, lse, &sum, z, (int[]){4, 1, 4}, 3, 5, 1, 0.1f, NULL);
    double l = log(exp(10.0) + 4.0), want = 0.9 * (l - 10.0) + 0.1 * (l - 2.0);
    assert_float_equal(loss[0], want, 1e-5);
    qkv_error err = {0};
    t[2] = 5;
    assert_int_equal(qkv_cross_entropy_forward(loss, lse, &sum, z, t, 3, 5, 1, 0.0f, &err), -1);
    assert_non_null(strstr(err.msg, "row 2"));
}

static void test_softmax_edges(void **state)
{
    (void)state;
    /* a fully masked row is zeros, not NaN; huge logits do not overflow */
    float S[2 * 3] = {1000.0f, 999.0f, -1000.0f, 1, 2, 3}, P[6];
    int lens[2] = {3, 0};
    qkv_mask mask = {lens, 0, 0};
    qkv_masked_softmax_forward(P, S, 2, 1, 1, 3, &mask);
    tu_check_finite("P", P, 6);
    assert_float_equal(P[0], 1.0f / (1.0f + expf(-1.0f)), 1e-6f);
    for (int j = 0; j < 3; j++) assert_true(P[3 + j] == 0.0f);
    float dS[6] = {0}, dP[6] = {1, 2, 3, 4, 5, 6};
    qkv_masked_softmax_backward(dS, dP, P, 2, 3);
    for (int j = 0; j < 3; j++) assert_true(dS[3 + j] == 0.0f);
    /* causal with n < m: the 2 queries are the last 2 of 4 positions */
    float S2[8] = {0}, P2[8];
    qkv_mask causal = {NULL, 0, 1};
    qkv_masked_softmax_forward(P2, S2, 1, 1, 2, 4, &causal);
    const float want[8] = {1 / 3.f, 1 / 3.f, 1 / 3.f, 0, .25f, .25f, .25f, .25f};
    for (int i = 0; i < 8; i++) assert_float_equal(P2[i], want[i], 1e-6f);
}

/* Causal attention over a whole sequence equals attending one query at a time to the prefix
 * of keys (the computation a KV cache performs when decoding). */
static void test_causal_equals_incremental(void **state)
{
    (void)state;
    enum { T = 6, H = 2, d = 4 };
    float *Q = tu_rand(T * H * d, 1), *K = tu_rand(T * H * d, 2), *V = tu_rand(T * H * d, 3);
    float O[T * H * d], P[H * T * T], Ot[H * d], Pt[H * T];
    qkv_mask causal = {NULL, 0, 1};
    const qkv_dropout none = {0.0f, 0, 0};
    qkv_attention_forward(O, P, &(qkv_attention_inputs){Q, K, V},
                          &(qkv_attention_shape){1, H, T, T, d, d}, &causal, none, NULL);
    for (int t = 0; t < T; t++) {
        /* keys/values 0..t; in the (T, H, d) layout a prefix is contiguous */
        qkv_attention_forward(Ot, Pt, &(qkv_attention_inputs){Q + t * H * d, K, V},
                              &(qkv_attention_shape){1, H, 1, t + 1, d, d}, NULL, none, NULL);
        tu_check_close("incremental O", Ot, O + t * H * d, H * d, 1e-6f, 1e-5f);
    }
    free(Q), free(K), free(V);
}

static void test_sinusoidal_table(void **state)
{
    (void)state;
    enum { T = 60, C = 32 };
    float P[T * C];
    qkv_sinusoidal_table(P, T, C);
    for (int c = 0; c < C; c++) assert_float_equal(P[c], (c % 2 ? 1.0f : 0.0f), 0.0f);
    /* P[i, 2j] = sin(i / 10000^(2j/C)): row 7, column 6 (j = 3) and column 7 */
    assert_float_equal(P[7 * C + 6], sin(7.0 / pow(10000.0, 6.0 / C)), 1e-6);
    assert_float_equal(P[7 * C + 7], cos(7.0 / pow(10000.0, 6.0 / C)), 1e-6);
}

static void test_linear_bias_optional(void **state)
{
    (void)state;
    float *x = tu_rand(12, 1), *W = tu_rand(20, 2), zero[5] = {0}, y1[15], y2[15];
    qkv_linear_forward(y1, x, W, NULL, 3, 4, 5);
    qkv_linear_forward(y2, x, W, zero, 3, 4, 5);
    assert_memory_equal(y1, y2, sizeof y1);
    assert_float_equal(y1[1 * 5 + 2],
                       x[4] * W[8] + x[5] * W[9] + x[6] * W[10] + x[7] * W[11], 1e-6f);
    free(x), free(W);
}

/* GELU and its derivative over [-20, 20] in steps of 1e-3 (40,001 values: every lane and
 * tail position of the vectorised blocks, both signs, the far tails), against
 * x Phi(x) and Phi(x) + x phi(x) computed with erfc and exp in double. GELU must be within
 * 1e-6 absolute, and 5e-5 relative wherever it is above 1e-30 in size: the lower tail keeps
 * its relative accuracy (Phi(-|x|) is not computed as 1 - Phi(|x|), which would be off by
 * 100% there); what is left is the float rounding of the exponent -x^2/2, about -67 at
 * x = -11.6, which costs 1.4e-5 (measured). The derivative within 1e-6 absolute. NaN stays
 * NaN, +-Inf gives what x Phi(x) gives (as PyTorch). */
static void test_gelu_accuracy(void **state)
{
    (void)state;
    enum { N = 40001 };
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y), *dx = calloc(N, sizeof *dx),
          *ones = malloc(N * sizeof *ones);
    assert_non_null(x), assert_non_null(y), assert_non_null(dx), assert_non_null(ones);
    for (int i = 0; i < N; i++) x[i] = -20.0f + 1e-3f * (float)i, ones[i] = 1.0f;
    qkv_gelu_forward(y, x, N);
    qkv_gelu_backward(dx, ones, x, N);
    double worst_abs = 0, worst_rel = 0, worst_grad = 0;
    for (int i = 0; i < N; i++) {
        double xi = x[i], phi = 0.5 * erfc(-xi / sqrt(2.0)), ref = xi * phi;
        double dref = phi + xi * exp(-0.5 * xi * xi) / sqrt(2.0 * 3.14159265358979323846);
        double a = fabs(y[i] - ref), g = fabs(dx[i] - dref);
        if (a > worst_abs) worst_abs = a;
        if (fabs(ref) > 1e-30 && a / fabs(ref) > worst_rel) worst_rel = a / fabs(ref);
        if (g > worst_grad) worst_grad = g;
    }
    print_message("GELU: max abs error %.2g, max rel error %.2g; GELU': max abs error %.2g\n",
                  worst_abs, worst_rel, worst_grad);
    assert_true(worst_abs < 1e-6 && worst_rel < 5e-5 && worst_grad < 1e-6);
    float s[3] = {NAN, INFINITY, -INFINITY}, t[3], d[3] = {0, 0, 0}, one[3] = {1, 1, 1};
    qkv_gelu_forward(t, s, 3);
    qkv_gelu_backward(d, one, s, 3);
    assert_true(isnan(t[0]) && isnan(d[0]));
    assert_true(t[1] == INFINITY && isnan(t[2])); /* inf Phi(inf), -inf Phi(-inf) = -inf 0 */
    free(x), free(y), free(dx), free(ones);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_streams),
        cmocka_unit_test(test_dropout),
        cmocka_unit_test(test_embedding_rejects_bad_ids),
        cmocka_unit_test(test_cross_entropy_values),
        cmocka_unit_test(test_softmax_edges),
        cmocka_unit_test(test_causal_equals_incremental),
        cmocka_unit_test(test_sinusoidal_table),
        cmocka_unit_test(test_linear_bias_optional),
        cmocka_unit_test(test_gelu_accuracy),
    };
    return cmocka_run_group_tests_name("kernels", tests, NULL, NULL);
}
