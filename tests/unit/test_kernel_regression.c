/* SPDX-License-Identifier: MIT */
/* Nadaraya-Watson kernel regression (src/ops/cpu/kernel_regression.c): the pooling by hand,
 * finite-difference gradients, PyTorch parity of forward and backward under every kind of
 * mask, and d2l 11.2's whole experiment (non-parametric fit, 5 SGD steps of the parametric
 * one) against PyTorch running the notebook's code on the same data. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

static const float *ref(const qkv_tensor_file *f, const char *name, size_t n)
{
    size_t got = 0;
    const float *x = tu_ref_f32(f, name, &got);
    if (got != n) fail_msg("reference '%s' has %zu values, the test expects %zu", name, got, n);
    return x;
}

/* ---- by hand ----------------------------------------------------------------------------- */

static void test_forward_by_hand(void **state)
{
    (void)state;
    const float q[2] = {0.5f, 2.0f}, k[3] = {0.0f, 1.0f, 3.0f}, v[3] = {1.0f, 2.0f, 4.0f};
    float y[2], P[6];
    for (int wi = 0; wi < 3; wi++) {
        const float w = wi == 0 ? 1.0f : wi == 1 ? 2.5f : 0.0f;
        qkv_kernel_regression_forward(y, P, &(qkv_attention_inputs){q, k, v}, w, 1, 2, 3, NULL);
        for (int i = 0; i < 2; i++) {
            double e[3], z = 0.0, num = 0.0;
            for (int j = 0; j < 3; j++) {
                double d = ((double)q[i] - k[j]) * w;
                e[j] = exp(-d * d / 2), z += e[j];
            }
            for (int j = 0; j < 3; j++) {
                num += e[j] / z * v[j];
                assert_float_equal(P[i * 3 + j], e[j] / z, 1e-6);
            }
            assert_float_equal(y[i], num, 1e-6);
        }
    }
    /* w = 0: every key weighs the same, the plain average of the values */
    assert_float_equal(y[0], 7.0f / 3.0f, 1e-6);
    /* a sequence with no visible key pools to 0; one with a single key returns its value */
    const int lens[2] = {0, 1};
    const qkv_mask mask = {lens, 0, 0};
    float q2[2] = {1.0f, 9.0f}, k2[6] = {0, 1, 2, 3, 4, 5}, v2[6] = {1, 2, 3, 4, 5, 6}, P2[6];
    qkv_kernel_regression_forward(y, P2, &(qkv_attention_inputs){q2, k2, v2}, 1.0f, 2, 1, 3,
                                  &mask);
    assert_true(y[0] == 0.0f && P2[0] == 0.0f && P2[1] == 0.0f && P2[2] == 0.0f);
    assert_true(y[1] == 4.0f && P2[3] == 1.0f && P2[4] == 0.0f && P2[5] == 0.0f);
}

/* ---- finite differences ------------------------------------------------------------------ */

enum { GB = 2, GN = 3, GM = 5 };
typedef struct {
    float q[GB * GN], k[GB * GM], v[GB * GM], w, y[GB * GN], P[GB * GN * GM], r[GB * GN];
    int lens[GB];
} nw_ctx;

static double nw_loss(void *p)
{
    nw_ctx *c = p;
    const qkv_mask mask = {c->lens, 0, 0};
    qkv_kernel_regression_forward(c->y, c->P, &(qkv_attention_inputs){c->q, c->k, c->v}, c->w,
                                  GB, GN, GM, &mask);
    return tu_dot(c->y, c->r, GB * GN);
}

static void test_gradcheck(void **state)
{
    (void)state;
    nw_ctx c = {.w = 1.7f, .lens = {5, 3}};
    float *t = tu_rand(GB * GN + 2 * GB * GM + GB * GN, 31);
    for (int i = 0; i < GB * GN; i++) c.q[i] = 1.5f * t[i], c.r[i] = t[GB * GN + 2 * GB * GM + i];
    for (int i = 0; i < GB * GM; i++) c.k[i] = 1.5f * t[GB * GN + i], c.v[i] = t[GB * GN + GB * GM + i];
    free(t);
    float dq[GB * GN] = {0}, dk[GB * GM] = {0}, dv[GB * GM] = {0}, dw = 0.0f;
    nw_loss(&c);
    const qkv_attention_inputs x = {c.q, c.k, c.v};
    qkv_kernel_regression_backward(&(qkv_attention_grads){dq, dk, dv}, &dw, c.r, c.P, &x, c.w, GB,
                                   GN, GM);
    tu_gradcheck("nw dq", c.q, GB * GN, dq, nw_loss, &c, TU_FD_STEP, TU_FD_TOL, 0);
    tu_gradcheck("nw dk", c.k, GB * GM, dk, nw_loss, &c, TU_FD_STEP, TU_FD_TOL, 0);
    tu_gradcheck("nw dv", c.v, GB * GM, dv, nw_loss, &c, TU_FD_STEP, TU_FD_TOL, 0);
    tu_gradcheck("nw dw", &c.w, 1, &dw, nw_loss, &c, TU_FD_STEP, TU_FD_TOL, 0);
    /* keys the mask hides get no gradient */
    for (int j = 3; j < GM; j++) assert_true(dk[GM + j] == 0.0f && dv[GM + j] == 0.0f);
    /* NULL gradients are skipped; a second call accumulates (P as forward leaves it again: the
     * checks above ran forward on perturbed inputs last) */
    nw_loss(&c);
    float dw2 = dw;
    qkv_kernel_regression_backward(NULL, &dw2, c.r, c.P, &x, c.w, GB, GN, GM);
    assert_float_equal(dw2, 2.0f * dw, 1e-5f * fabsf(dw));
}

/* ---- PyTorch parity of one layer --------------------------------------------------------- */

static void test_parity(void **state)
{
    const char *name = *state;
    qkv_tensor_file f;
    tu_reference_load(&f, name);
    const int B = tu_ref_int(&f, "B"), n = tu_ref_int(&f, "n"), m = tu_ref_int(&f, "m");
    const float w = tu_ref_float(&f, "w");
    const size_t Bn = (size_t)B * n, Bm = (size_t)B * m;
    qkv_mask mask = {NULL, tu_ref_int(&f, "per_query"), tu_ref_int(&f, "causal")};
    if (tu_ref_int(&f, "has_lens")) mask.valid_lens = tu_ref_i32(&f, "valid_lens", NULL);
    const float *q = ref(&f, "q", Bn), *k = ref(&f, "k", Bm), *v = ref(&f, "v", Bm),
                *dy = ref(&f, "dy", Bn);
    float *y = tu_zeros(Bn), *P = tu_zeros(Bn * m), *dq = tu_zeros(Bn), *dk = tu_zeros(Bm),
          *dv = tu_zeros(Bm), dw = 0.0f;
    for (size_t i = 0; i < Bn; i++) y[i] = NAN; /* every output must be written */
    const qkv_attention_inputs x = {q, k, v};
    qkv_kernel_regression_forward(y, P, &x, w, B, n, m, &mask);
    tu_check_close("y", y, ref(&f, "y", Bn), Bn, TU_FWD_ATOL, TU_FWD_RTOL);
    tu_check_close("P", P, ref(&f, "P", Bn * m), Bn * m, TU_FWD_ATOL, TU_FWD_RTOL);
    qkv_kernel_regression_backward(&(qkv_attention_grads){dq, dk, dv}, &dw, dy, P, &x, w, B, n, m);
    tu_check_grad("dq", dq, ref(&f, "dq", Bn), Bn, TU_GRAD_REL);
    tu_check_grad("dk", dk, ref(&f, "dk", Bm), Bm, TU_GRAD_REL);
    tu_check_grad("dv", dv, ref(&f, "dv", Bm), Bm, TU_GRAD_REL);
    tu_check_grad("dw", &dw, ref(&f, "dw", 1), 1, TU_GRAD_REL);
    free(y), free(P), free(dq), free(dk), free(dv);
    qkv_tensor_file_free(&f);
}

/* ---- d2l 11.2, the whole experiment ------------------------------------------------------ */

/* Mean over rows of the largest weight in the row: 1/m for a uniform row, 1 for a one-hot. */
static double mean_row_max(const float *P, int rows, int m)
{
    double s = 0.0;
    for (int i = 0; i < rows; i++) {
        float mx = 0.0f;
        for (int j = 0; j < m; j++) mx = P[(size_t)i * m + j] > mx ? P[(size_t)i * m + j] : mx;
        s += mx;
    }
    return s / rows;
}

static void test_d2l_experiment(void **state)
{
    (void)state;
    qkv_tensor_file f;
    tu_reference_load(&f, "nw_d2l");
    const int N = tu_ref_int(&f, "n_train"), NT = tu_ref_int(&f, "n_test");
    const int E = tu_ref_int(&f, "epochs");
    const float lr = tu_ref_float(&f, "lr");
    const float *x = ref(&f, "x_train", N), *t = ref(&f, "y_train", N), *xt = ref(&f, "x_test", NT);
    float *y = tu_zeros(NT), *P = tu_zeros((size_t)NT * N);

    /* non-parametric: w = 1, every test input attends to all training inputs */
    const qkv_attention_inputs test_on_train = {xt, x, t};
    qkv_kernel_regression_forward(y, P, &test_on_train, 1.0f, 1, NT, N, NULL);
    tu_check_close("y_nonparametric", y, ref(&f, "y_nonparametric", NT), NT, 1e-5f, 1e-5f);
    tu_check_close("attention_nonparametric", P, ref(&f, "attention_nonparametric", (size_t)NT * N),
                   (size_t)NT * N, 1e-6f, 1e-5f);
    const double sharp_np = mean_row_max(P, NT, N);

    /* parametric: input i attends to the other N-1 (batch row i holds its own keys) */
    float *keys = tu_zeros((size_t)N * (N - 1)), *vals = tu_zeros((size_t)N * (N - 1));
    for (int i = 0, at = 0; i < N; i++)
        for (int j = 0; j < N; j++)
            if (j != i) keys[at] = x[j], vals[at] = t[j], at++;
    float w = tu_ref_float(&f, "w0"), *yh = tu_zeros(N), *Pt = tu_zeros((size_t)N * (N - 1)),
          *dy = tu_zeros(N);
    const float *want_loss = ref(&f, "losses", E);
    for (int epoch = 0; epoch < E; epoch++) {
        const qkv_attention_inputs leave_one_out = {x, keys, vals};
        qkv_kernel_regression_forward(yh, Pt, &leave_one_out, w, N, 1, N - 1, NULL);
        double loss = 0.0; /* MSELoss(reduction='none'), summed */
        for (int i = 0; i < N; i++) {
            loss += (double)(yh[i] - t[i]) * (yh[i] - t[i]);
            dy[i] = 2.0f * (yh[i] - t[i]);
        }
        assert_float_equal(loss, want_loss[epoch], 1e-4 * want_loss[epoch]);
        float dw = 0.0f;
        qkv_kernel_regression_backward(NULL, &dw, dy, Pt, &leave_one_out, w, N, 1, N - 1);
        w -= lr * dw;
    }
    const float want_w = ref(&f, "w", 1)[0];
    assert_float_equal(w, want_w, 1e-4f * want_w);
    qkv_kernel_regression_forward(y, P, &test_on_train, w, 1, NT, N, NULL);
    tu_check_close("y_parametric", y, ref(&f, "y_parametric", NT), NT, 1e-4f, 1e-4f);
    tu_check_close("attention_parametric", P, ref(&f, "attention_parametric", (size_t)NT * N),
                   (size_t)NT * N, 1e-5f, 1e-3f);
    /* learning narrows the kernel: each test input now leans on its nearest training inputs */
    assert_true(w > 1.0f);
    const double sharp_p = mean_row_max(P, NT, N);
    assert_true(sharp_p > 2.0 * sharp_np);
    free(y), free(P), free(keys), free(vals), free(yh), free(Pt), free(dy);
    qkv_tensor_file_free(&f);
}

int main(void)
{
    static const char *cases[] = {"nw_plain", "nw_batch_lens", "nw_query_causal", "nw_d2l_shape"};
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forward_by_hand),
        cmocka_unit_test(test_gradcheck),
        cmocka_unit_test_prestate(test_parity, (void *)cases[0]),
        cmocka_unit_test_prestate(test_parity, (void *)cases[1]),
        cmocka_unit_test_prestate(test_parity, (void *)cases[2]),
        cmocka_unit_test_prestate(test_parity, (void *)cases[3]),
        cmocka_unit_test(test_d2l_experiment),
    };
    return cmocka_run_group_tests_name("kernel_regression", tests, NULL, NULL);
}
