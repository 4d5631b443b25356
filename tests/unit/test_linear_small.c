/* SPDX-License-Identifier: MIT */
/* The linear layer's few-row path (a decoding step: one row per sequence) against the GEMM
 * path it replaces: y = x W^T + b for M = 1..16 rows, odd sizes (tails of the 8-wide tiles and
 * of the 8-lane sums), with and without bias; each y[i, o] within 1e-5 of the GEMM relative
 * to the size of its terms, sum_k |x_ik W_ok| + |b_o|. Also: a row's result is bitwise the
 * same whatever rows come with it and whatever the thread count, and nothing outside y is
 * written. */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#define MAX_ROWS 16 /* past the kernel's limit (12 rows), into the GEMM's */
#define GUARD 16 /* floats of sentinel after y */
#define SENTINEL 12345.678f

/* y (M, out) = x W^T + b by OpenBLAS, the path qkv_linear_forward takes for many rows. */
static void gemm_reference(float *y, const float *x, const float *W, const float *b, int M,
                           int in, int out)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, out, in, 1.0f, x, in, W, in, 0.0f,
                y, out);
    for (int i = 0; b && i < M; i++)
        for (int o = 0; o < out; o++) y[(size_t)i * out + o] += b[o];
}

/* |got - want| <= 1e-5 (sum_k |x_ik W_ok| + |b_o|) for every element, and the guard intact. */
static void check_rows(const char *what, const float *got, const float *want, const float *x,
                       const float *W, const float *b, int M, int in, int out)
{
    for (int i = 0; i < M; i++)
        for (int o = 0; o < out; o++) {
            double scale = b ? fabs(b[o]) : 0.0;
            for (int k = 0; k < in; k++)
                scale += fabs((double)x[(size_t)i * in + k] * W[(size_t)o * in + k]);
            const float g = got[(size_t)i * out + o], w = want[(size_t)i * out + o];
            if (!(fabs((double)g - w) <= 1e-5 * scale))
                fail_msg("%s: M %d in %d out %d: y[%d, %d] = %.9g, GEMM %.9g (scale %.3g)", what,
                         M, in, out, i, o, g, w, scale);
        }
    for (int g = 0; g < GUARD; g++)
        if (got[(size_t)M * out + g] != SENTINEL)
            fail_msg("%s: M %d in %d out %d: wrote past y (guard %d)", what, M, in, out, g);
}

static float *with_guard(size_t n)
{
    float *y = tu_zeros(n + GUARD);
    for (size_t g = 0; g < GUARD; g++) y[n + g] = SENTINEL;
    return y;
}

/* Every M in 1..16 against the GEMM, over sizes that leave tails of every kind: in and out
 * below, at and just past the 8-wide tiles and lanes, and one large enough to be split
 * across threads. */
static void test_matches_gemm(void **state)
{
    (void)state;
    const int sizes[][2] = {{1, 1},  {7, 3},   {8, 8},   {9, 17},   {37, 13},
                            {64, 9}, {100, 1}, {3, 100}, {517, 1031}};
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        const int in = sizes[s][0], out = sizes[s][1];
        float *x = tu_rand((size_t)MAX_ROWS * in, 1 + s), *W = tu_rand((size_t)out * in, 100 + s);
        float *b = tu_rand((size_t)out, 200 + s);
        float *want = tu_zeros((size_t)MAX_ROWS * out), *got = with_guard((size_t)MAX_ROWS * out);
        for (int bias = 0; bias <= 1; bias++)
            for (int M = 1; M <= MAX_ROWS; M++) {
                for (int g = 0; g < GUARD; g++) got[(size_t)M * out + g] = SENTINEL;
                gemm_reference(want, x, W, bias ? b : NULL, M, in, out);
                qkv_linear_forward(got, x, W, bias ? b : NULL, M, in, out);
                check_rows(bias ? "with bias" : "no bias", got, want, x, W, bias ? b : NULL, M,
                           in, out);
                for (int g = 0; g < GUARD; g++) got[(size_t)M * out + g] = 0.0f;
            }
        free(x), free(W), free(b), free(want), free(got);
    }
}

/* The tolerance is not vacuous: one wrong weight in the product is caught. */
static void test_check_can_fail(void **state)
{
    (void)state;
    const int M = 3, in = 37, out = 13;
    float *x = tu_rand((size_t)M * in, 7), *W = tu_rand((size_t)out * in, 8);
    float *want = tu_zeros((size_t)M * out), *got = with_guard((size_t)M * out);
    gemm_reference(want, x, W, NULL, M, in, out);
    float *W2 = tu_copy(W, (size_t)out * in);
    W2[5 * in + 11] += 1e-3f; /* feature 5 of every row moves by about 1e-3 |x| */
    qkv_linear_forward(got, x, W2, NULL, M, in, out);
    int off = 0;
    for (int i = 0; i < M; i++) {
        double scale = 0.0;
        for (int k = 0; k < in; k++) scale += fabs((double)x[i * in + k] * W[5 * in + k]);
        off += fabs((double)got[i * out + 5] - want[i * out + 5]) > 1e-5 * scale;
    }
    assert_int_equal(off, M);
    free(x), free(W), free(W2), free(want), free(got);
}

/* Row i of a product over M rows equals the product of row i alone, bit for bit (the kernels
 * compute every element by the same sequence of operations), and so do 1 and 2 threads. */
static void test_rows_independent(void **state)
{
    (void)state;
    const int in = 517, out = 1031, M = 12; /* the first row, five pairs and a last one alone */
    float *x = tu_rand((size_t)M * in, 11), *W = tu_rand((size_t)out * in, 12);
    float *b = tu_rand((size_t)out, 13);
    float *all = tu_zeros((size_t)M * out), *one = tu_zeros((size_t)out);
    qkv_linear_forward(all, x, W, b, M, in, out);
    for (int i = 0; i < M; i++) {
        qkv_linear_forward(one, x + (size_t)i * in, W, b, 1, in, out);
        if (memcmp(one, all + (size_t)i * out, (size_t)out * sizeof *one))
            fail_msg("row %d alone differs from row %d of %d", i, i, M);
    }
    const int threads = qkv_get_threads();
    float *serial = tu_zeros((size_t)M * out);
    qkv_set_threads(1);
    qkv_linear_forward(serial, x, W, b, M, in, out);
    qkv_set_threads(2);
    qkv_linear_forward(all, x, W, b, M, in, out);
    qkv_set_threads(threads);
    assert_memory_equal(serial, all, (size_t)M * out * sizeof *all);
    free(x), free(W), free(b), free(all), free(one), free(serial);
}

/* Zero rows write nothing. */
static void test_zero_rows(void **state)
{
    (void)state;
    float x[4] = {1, 2, 3, 4}, W[8] = {1, 1, 1, 1, 2, 2, 2, 2}, b[2] = {1, 1};
    float *y = with_guard(0);
    qkv_linear_forward(y, x, W, b, 0, 4, 2);
    for (int g = 0; g < GUARD; g++) assert_true(y[g] == SENTINEL);
    free(y);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_gemm),
        cmocka_unit_test(test_check_can_fail),
        cmocka_unit_test(test_rows_independent),
        cmocka_unit_test(test_zero_rows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
