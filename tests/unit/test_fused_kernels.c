/* SPDX-License-Identifier: MIT */
/* The fused and branch-free kernels behind the training step (src/ops/cpu/fused.h,
 * src/ops/cpu/dropout_mask.h) against the plain definitions they replace.
 *
 *   dropout_threshold   dropout_rule_of's integer threshold decides u >= p exactly: for p
 *                       just below, at and just above multiples of 2^-24 (where u can equal
 *                       p), every k near the threshold agrees with the float comparison.
 *   dropout_exact       qkv_dropout_forward/_backward, qkv_residual_forward and the
 *                       attention-weight dropout of qkv_attention_forward keep exactly the
 *                       elements with qkv_random_uniform(seed, offset + i) >= p, scaled by
 *                       1/(1 - p), bit for bit, at several rates.
 *   addnorm_fused       qkv_addnorm_forward/_backward (one pass per row) give the bits of
 *                       qkv_residual_* followed by / preceded by qkv_layernorm_*.
 *   cross_entropy_fused loss, lse, count and sum as qkv_cross_entropy_forward, dlogits as
 *                       qkv_cross_entropy_backward (1e-6 relative), the bias gradient as the
 *                       column sums in double; padding rows, label smoothing, a row count that
 *                       is not a multiple of the chunk, the mean scale; the same bits with 1 and
 *                       2 threads; a bad target fails. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#include "ops/cpu/dropout_mask.h"
#include "ops/cpu/fused.h"

static void test_dropout_threshold(void **state)
{
    (void)state;
    const float two24 = 16777216.0f;
    const float ks[] = {1, 2, 3, 1000, 1677721, 1677722, 5592405, 8388608, 16777215};
    for (size_t a = 0; a < sizeof ks / sizeof *ks; a++) {
        const float exact = ks[a] / two24;
        const float ps[] = {nextafterf(exact, 0.0f), exact, nextafterf(exact, 1.0f)};
        for (int b = 0; b < 3; b++) {
            const float p = ps[b];
            if (!(p > 0.0f && p < 1.0f)) continue;
            dropout_rule d = dropout_rule_of(p, 1);
            for (int64_t k = (int64_t)d.threshold - 3; k <= (int64_t)d.threshold + 3; k++) {
                if (k < 0 || k >= (1 << 24)) continue;
                int want = (float)k * (1.0f / two24) >= p; /* random_uniform's comparison */
                int got = (uint32_t)k >= d.threshold;
                if (want != got)
                    fail_msg("p = %.9g: k = %lld kept %d, u >= p says %d", (double)p,
                             (long long)k, got, want);
            }
        }
    }
    assert_int_equal(dropout_rule_of(0.0f, 1).threshold, 0); /* p = 0 keeps everything */
}

/* x * (1/(1-p)) if u(seed, i) >= p, else 0: the documented dropout. */
static float reference_drop(float x, float p, uint64_t seed, uint64_t i)
{
    return qkv_random_uniform(seed, i) >= p ? x * (1.0f / (1.0f - p)) : 0.0f;
}

static void test_dropout_exact(void **state)
{
    (void)state;
    enum { n = 50000 };
    const uint64_t seed = 42, offset = 12345;
    const float ps[] = {0.1f, 0.5f, 1.0f / 3.0f, 1e-7f, 0.9999f, 0.5f / 16777216.0f};
    float *x = tu_rand(n, 1), *s = tu_rand(n, 2), *y = tu_zeros(n), *dx = tu_rand(n, 3);
    float *want = tu_zeros(n), *dx0 = tu_copy(dx, n);
    for (size_t a = 0; a < sizeof ps / sizeof *ps; a++) {
        const float p = ps[a];
        qkv_dropout_forward(y, x, n, p, seed, offset);
        for (size_t i = 0; i < n; i++) want[i] = reference_drop(x[i], p, seed, offset + i);
        for (size_t i = 0; i < n; i++)
            if (y[i] != want[i])
                fail_msg("dropout p = %g, element %zu: %g, want %g", (double)p, i, (double)y[i],
                         (double)want[i]);
        memcpy(dx, dx0, n * sizeof *dx);
        qkv_dropout_backward(dx, x, n, p, seed, offset);
        for (size_t i = 0; i < n; i++)
            if (dx[i] != dx0[i] + reference_drop(x[i], p, seed, offset + i))
                fail_msg("dropout backward p = %g, element %zu", (double)p, i);
        qkv_residual_forward(y, x, s, n, (qkv_dropout){p, seed, 0});
        for (size_t i = 0; i < n; i++)
            if (y[i] != x[i] + reference_drop(s[i], p, seed, i))
                fail_msg("residual p = %g, element %zu", (double)p, i);
    }
    /* the attention weights' dropout: counter = flat index into (B, H, n, m) */
    enum { B = 2, H = 3, N = 5, M = 7, D = 4 };
    float *Q = tu_rand(B * N * H * D, 4), *K = tu_rand(B * M * H * D, 5);
    float *V = tu_rand(B * M * H * D, 6), *O = tu_zeros(B * N * H * D);
    float *P = tu_zeros(B * H * N * M);
    const qkv_attention_shape shape = {B, H, N, M, D, D};
    float *scratch = tu_zeros(qkv_attention_scratch_floats(&shape));
    qkv_attention_forward(O, P, &(qkv_attention_inputs){Q, K, V}, &shape, NULL,
                          (qkv_dropout){0.3f, seed, 0}, scratch);
    for (size_t e = 0; e < (size_t)B * H * N * M; e++)
        if (scratch[e] != reference_drop(P[e], 0.3f, seed, e))
            fail_msg("attention dropout, weight %zu", e);
    free(Q), free(K), free(V), free(O), free(P), free(scratch);
    free(x), free(s), free(y), free(dx), free(want), free(dx0);
}

static void test_addnorm_fused(void **state)
{
    (void)state;
    enum { N = 37, C = 48 };
    const size_t n = (size_t)N * C;
    float *x = tu_rand(n, 1), *s = tu_rand(n, 2), *g = tu_rand(C, 3), *b = tu_rand(C, 4);
    float *dy = tu_rand(n, 5);
    for (int pi = 0; pi < 2; pi++) {
        const float p = pi ? 0.2f : 0.0f;
        const uint64_t seed = 9;
        /* fused */
        float *y = tu_zeros(n), *z = tu_zeros(n), *mean = tu_zeros(N), *rstd = tu_zeros(N);
        float *dx = tu_rand(n, 6), *ds = tu_rand(n, 7), *dg = tu_zeros(C), *db = tu_zeros(C);
        float *scratch = tu_zeros(n);
        const qkv_layernorm_weights w = {g, b};
        const qkv_dropout drop = {p, seed, 0};
        qkv_addnorm_cache c = {z, mean, rstd};
        qkv_addnorm_forward(y, &c, x, s, &w, N, C, 1e-5f, drop);
        qkv_addnorm_backward(dx, ds, &(qkv_layernorm_weights){dg, db}, dy, &c, &w, N, C, drop,
                             scratch);
        /* composed */
        float *y2 = tu_zeros(n), *z2 = tu_zeros(n), *mean2 = tu_zeros(N), *rstd2 = tu_zeros(N);
        float *dx2 = tu_rand(n, 6), *ds2 = tu_rand(n, 7), *dg2 = tu_zeros(C), *db2 = tu_zeros(C);
        float *dz = tu_zeros(n);
        qkv_residual_forward(z2, x, s, n, drop);
        qkv_layernorm_forward(y2, mean2, rstd2, z2, &w, N, C, 1e-5f);
        qkv_layernorm_backward(dz, &(qkv_layernorm_weights){dg2, db2}, dy, z2, mean2, rstd2, &w, N,
                               C);
        qkv_residual_backward(dx2, ds2, dz, n, drop);
        assert_memory_equal(z, z2, n * sizeof *z);
        assert_memory_equal(y, y2, n * sizeof *y);
        assert_memory_equal(mean, mean2, N * sizeof *mean);
        assert_memory_equal(rstd, rstd2, N * sizeof *rstd);
        assert_memory_equal(dx, dx2, n * sizeof *dx);
        assert_memory_equal(ds, ds2, n * sizeof *ds);
        assert_memory_equal(dg, dg2, C * sizeof *dg);
        assert_memory_equal(db, db2, C * sizeof *db);
        free(y), free(z), free(mean), free(rstd), free(dx), free(ds), free(dg), free(db);
        free(scratch), free(y2), free(z2), free(mean2), free(rstd2), free(dx2), free(ds2);
        free(dg2), free(db2), free(dz);
    }
    free(x), free(s), free(g), free(b), free(dy);
}

/* One fused call on a copy of z0; returns the count. */
static int fused(float *dz, float *loss, float *lse, double *sum, float *db, const float *z0,
                 const int *t, int N, int V, float ls, float scale)
{
    memcpy(dz, z0, (size_t)N * V * sizeof *dz);
    memset(db, 0, (size_t)V * sizeof *db);
    float *scratch = tu_zeros(cross_entropy_fused_scratch_floats(N, V));
    int count = cross_entropy_fused(loss, lse, sum, dz, db, t, N, V, QKV_PAD, ls, scale, scratch,
                                    NULL);
    free(scratch);
    return count;
}

static void test_cross_entropy_fused(void **state)
{
    (void)state;
    enum { N = 150, V = 1003 };
    const size_t n = (size_t)N * V;
    float *z0 = tu_rand(n, 1);
    for (size_t i = 0; i < n; i++) z0[i] *= 6.0f;
    int t[N];
    for (int i = 0; i < N; i++) t[i] = i % 7 == 3 ? QKV_PAD : (int)(qkv_random_u32(2, i) % V);
    for (int variant = 0; variant < 2; variant++) {
        const float ls = variant ? 0.1f : 0.0f, scale = variant ? 0.0f : 0.25f;
        float loss[N], lse[N], loss2[N], lse2[N];
        double sum, sum2;
        float *dz = tu_zeros(n), *db = tu_zeros(V), *dz1 = tu_zeros(n), *db1 = tu_zeros(V);
        int count = fused(dz, loss, lse, &sum, db, z0, t, N, V, ls, scale);
        int count2 = qkv_cross_entropy_forward(loss2, lse2, &sum2, z0, t, N, V, QKV_PAD, ls, NULL);
        assert_int_equal(count, count2);
        float *want = tu_zeros(n);
        const float s = scale > 0.0f ? scale : 1.0f / (float)count2;
        qkv_cross_entropy_backward(want, z0, lse2, t, N, V, QKV_PAD, ls, s);
        if (!(fabs(sum - sum2) <= 1e-6 * fabs(sum2)))
            fail_msg("sum %.9g, want %.9g", sum, sum2);
        for (int i = 0; i < N; i++) {
            if (t[i] == QKV_PAD) {
                assert_true(loss[i] == 0.0f);
                for (int k = 0; k < V; k++)
                    if (dz[(size_t)i * V + k] != 0.0f) fail_msg("padding row %d has a gradient", i);
                continue;
            }
            tu_check_close("loss", &loss[i], &loss2[i], 1, 1e-6f, 1e-6f);
            tu_check_close("lse", &lse[i], &lse2[i], 1, 1e-6f, 1e-6f);
        }
        tu_check_close("dlogits", dz, want, n, 1e-9f, 1e-5f);
        double *cols = calloc(V, sizeof *cols);
        for (int i = 0; i < N; i++)
            for (int k = 0; k < V; k++) cols[k] += want[(size_t)i * V + k];
        float colsf[V];
        for (int k = 0; k < V; k++) colsf[k] = (float)cols[k];
        tu_check_close("bias gradient", db, colsf, V, 1e-7f, 1e-5f);
        /* the same bits whatever the thread count */
        int threads = qkv_get_threads();
        qkv_set_threads(1);
        fused(dz1, loss2, lse2, &sum2, db1, z0, t, N, V, ls, scale);
        qkv_set_threads(threads);
        assert_memory_equal(dz, dz1, n * sizeof *dz);
        assert_memory_equal(db, db1, V * sizeof *db);
        free(dz), free(db), free(dz1), free(db1), free(want), free(cols);
    }
    /* a counted target outside the vocabulary */
    t[5] = V;
    qkv_error err = {0};
    float loss[N], lse[N];
    float *dz = tu_copy(z0, n), *scratch = tu_zeros(cross_entropy_fused_scratch_floats(N, V));
    assert_int_equal(cross_entropy_fused(loss, lse, NULL, dz, NULL, t, N, V, QKV_PAD, 0.0f, 0.0f,
                                         scratch, &err), -1);
    assert_int_equal(err.code, QKV_ERR_ARG);
    free(dz), free(scratch), free(z0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dropout_threshold),
        cmocka_unit_test(test_dropout_exact),
        cmocka_unit_test(test_addnorm_fused),
        cmocka_unit_test(test_cross_entropy_fused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
