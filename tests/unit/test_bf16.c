/* SPDX-License-Identifier: MIT */
/* bf16 precision (ops/cpu/bf16.h, qkv_*_set_precision): tests that can fail.
 *
 * The GEMM against float64 references, with two bounds per element of C, u = 2^-8 (bf16's
 * relative rounding error, round to nearest even) and g = (K + 8) 2^-24 (float32 sums of K
 * products, the C update and one rounding per K block):
 *   bf16 bound     |C - (alpha sum a b + beta C0)| <= |alpha| (2u + u^2) sum |a b|
 *                                                     + g (|alpha| sum |a' b'| + |beta C0|)
 *                  (a', b' the operands rounded to bf16: a'b' = ab (1 + e), |e| <= 2u + u^2)
 *   rounded bound  |C - (alpha sum a' b' + beta C0)| <= g (|alpha| sum |a' b'| + |beta C0|)
 * The first is what bf16 promises; the second checks the kernel computes exactly the product
 * of the rounded operands, and is what catches a lost term at any K (a term is ~1/K of the
 * first bound's budget, but far above float32's). A planted-bug test shows both can fail. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/cpu/bf16.h"
#include "reversal.h"
#include "test_util.h"

#define U (1.0 / 256.0)  /* bf16's unit roundoff, 2^-8 */
#define SENTINEL 4321.5f /* in C's padding and past its end: must survive */

static int skip_without_bf16(void)
{
    if (qkv_bf16_supported()) return 0;
    printf("this CPU has no AVX512-BF16: skipped\n");
    return 1;
}

static double rounded(float x) { return (double)bf16_to_float(bf16_from_float(x)); }

/* ---- rounding ----------------------------------------------------------------------------- */

/* Round to nearest, ties to even; denormals to signed zero; Inf and NaN kept; and the vector
 * conversion (VCVTNE2PS2BF16) bitwise equal to the scalar one on every kind of value. */
static void test_rounding(void **state)
{
    (void)state;
    /* 1 + 2^-8 is halfway between 1 and 1 + 2^-7: to even (1); 1 + 3 2^-8: to even (1 + 2^-6) */
    assert_true(bf16_to_float(bf16_from_float(1.0f + 0x1p-8f)) == 1.0f);
    assert_true(bf16_to_float(bf16_from_float(1.0f + 3 * 0x1p-8f)) == 1.0f + 0x1p-6f);
    assert_true(bf16_to_float(bf16_from_float(1.0f + 0x1p-8f + 0x1p-20f)) == 1.0f + 0x1p-7f);
    assert_true(bf16_to_float(bf16_from_float(-1.0f - 0x1p-9f)) == -1.0f);
    assert_int_equal(bf16_from_float(0x1p-130f), 0x0000);   /* denormal -> +0 */
    assert_int_equal(bf16_from_float(-0x1p-130f), 0x8000);  /* -> -0 */
    assert_int_equal(bf16_from_float(INFINITY), 0x7f80);
    assert_true(isnan(bf16_to_float(bf16_from_float(NAN))));
    assert_true(isinf(bf16_to_float(bf16_from_float(3.4e38f)))); /* rounds past the largest */
    if (skip_without_bf16()) return;
    enum { N = 4099 }; /* not a multiple of the 32-wide vector loop: the scalar tail too */
    float *x = tu_rand(N, 7);
    const float special[] = {0.0f, -0.0f, 0x1p-130f, -0x1p-140f, 0x1p-126f, INFINITY,
                             -INFINITY, NAN, 3.4e38f, 1.0f + 0x1p-8f, 65504.0f, 1e-30f};
    for (int i = 0; i < N; i++) {
        if (i % 7 == 0) x[i] *= powf(2.0f, (float)(i % 200) - 100.0f); /* many exponents */
        if (i % 97 == 0) x[i] = special[(i / 97) % (sizeof special / sizeof *special)];
    }
    uint16_t *h = malloc(N * sizeof *h);
    assert_non_null(h);
    bf16_convert(h, x, N);
    for (int i = 0; i < N; i++) {
        if (isnan(x[i])) {
            assert_true(isnan(bf16_to_float(h[i])));
            continue;
        }
        if (h[i] != bf16_from_float(x[i]))
            fail_msg("x[%d] = %a: vector bf16 %04x, scalar %04x", i, (double)x[i], h[i],
                     bf16_from_float(x[i]));
        const double r = bf16_to_float(h[i]);
        if (isfinite(x[i]) && fabsf(x[i]) >= 0x1p-126f && fabsf(x[i]) < 3.3e38f &&
            !(fabs(r - x[i]) <= U * fabs(x[i])))
            fail_msg("x[%d] = %a: bf16 %a is off by more than 2^-8", i, (double)x[i], r);
    }
    free(x), free(h);
}

/* ---- the GEMM ------------------------------------------------------------------------------ */

typedef struct {
    int tA, tB, M, N, K;
    float alpha, beta;
} shape;

/* op(A)[i][k] and op(B)[k][j] of the stored matrices. */
static float a_at(const float *A, int lda, int tA, int i, int k)
{
    return tA ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k];
}
static float b_at(const float *B, int ldb, int tB, int k, int j)
{
    return tB ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j];
}

/* Counts the elements of C outside each bound (the header's), and any write to C's padding
 * (ldc > N) or past its last row. C0 is C before the call. */
static void count_violations(const shape *s, const float *A, int lda, const float *B, int ldb,
                             const float *C, const float *C0, int ldc, long *bf16_bad,
                             long *rounded_bad, long *guard_bad)
{
    const double g = (s->K + 8) * 0x1p-24;
    *bf16_bad = *rounded_bad = *guard_bad = 0;
    for (int i = 0; i < s->M; i++)
        for (int j = 0; j < s->N; j++) {
            double exact = 0, exact_abs = 0, rnd = 0, rnd_abs = 0;
            for (int k = 0; k < s->K; k++) {
                const float a = a_at(A, lda, s->tA, i, k), b = b_at(B, ldb, s->tB, k, j);
                exact += (double)a * b, exact_abs += fabs((double)a * b);
                rnd += rounded(a) * rounded(b), rnd_abs += fabs(rounded(a) * rounded(b));
            }
            const double c0 = s->beta == 0.0f ? 0.0 : (double)s->beta * C0[(size_t)i * ldc + j];
            const double got = C[(size_t)i * ldc + j], al = fabs((double)s->alpha);
            const double fp32 = g * (al * rnd_abs + fabs(c0));
            if (!(fabs(got - (s->alpha * exact + c0)) <= al * (2 * U + U * U) * exact_abs + fp32))
                ++*bf16_bad;
            if (!(fabs(got - (s->alpha * rnd + c0)) <= fp32)) ++*rounded_bad;
        }
    for (int i = 0; i <= s->M; i++) /* the padding of every row, and one row past the end */
        for (int j = i < s->M ? s->N : 0; j < ldc; j++)
            if (C[(size_t)i * ldc + j] != SENTINEL) ++*guard_bad;
}

typedef struct {
    float *A, *B, *C, *C0;
    int lda, ldb, ldc;
} operands;

/* Random operands of shape s with padded strides; C holds NaN where beta = 0 (it must not be
 * read), random values otherwise, and SENTINEL in its padding and one row past its end. */
static operands make_operands(const shape *s, uint64_t seed)
{
    operands o;
    o.lda = (s->tA ? s->M : s->K) + 3, o.ldb = (s->tB ? s->K : s->N) + 5, o.ldc = s->N + 2;
    o.A = tu_rand((size_t)(s->tA ? s->K : s->M) * o.lda, seed);
    o.B = tu_rand((size_t)(s->tB ? s->N : s->K) * o.ldb, seed + 1);
    const size_t nc = (size_t)(s->M + 1) * o.ldc;
    o.C = tu_rand(nc, seed + 2);
    for (int i = 0; i <= s->M; i++)
        for (int j = 0; j < o.ldc; j++) {
            float *c = &o.C[(size_t)i * o.ldc + j];
            if (i == s->M || j >= s->N) *c = SENTINEL;
            else if (s->beta == 0.0f) *c = NAN;
        }
    o.C0 = tu_copy(o.C, nc);
    return o;
}

static void free_operands(operands *o) { free(o->A), free(o->B), free(o->C), free(o->C0); }

static gemm_bf16_workspace workspace(void)
{
    gemm_bf16_workspace ws = {0};
    assert_int_equal(gemm_bf16_reserve(&ws, omp_get_max_threads(), NULL), QKV_OK);
    return ws;
}

/* Shapes around every edge of the blocking: K odd (a lone k in the last pair), K past one and
 * two K blocks (512); M and N below, at and past the 12 x 32 micro-tile, M past a row block
 * (96), N past a column block (2048); alpha, beta of every kind (beta 0 over NaN). */
static const shape shapes[] = {
    {0, 0, 1, 1, 1, 1.0f, 0.0f},     {0, 0, 13, 33, 17, 0.5f, 1.0f},
    {0, 0, 12, 32, 2, -1.5f, -0.5f}, {0, 0, 25, 70, 513, 1.0f, 0.0f},
    {0, 0, 97, 45, 300, 1.0f, 1.0f}, {0, 0, 5, 2049, 3, 2.0f, 0.0f},
    {0, 0, 40, 31, 1030, 1.0f, 0.25f}, {0, 0, 7, 9, 64, 1.0f, 0.0f},
};

/* Every shape in all four transpose combinations. */
static void test_gemm_within_bounds(void **state)
{
    (void)state;
    if (skip_without_bf16()) return;
    gemm_bf16_workspace ws = workspace();
    for (int t = 0; t < 4; t++)
        for (size_t z = 0; z < sizeof shapes / sizeof *shapes; z++) {
            shape s = shapes[z];
            s.tA = t & 1, s.tB = t >> 1;
            operands o = make_operands(&s, 100 + 10 * z + t);
            gemm_bf16(s.tA, s.tB, s.M, s.N, s.K, s.alpha, o.A, o.lda, o.B, o.ldb, s.beta, o.C,
                      o.ldc, &ws);
            long bad16, bad_rounded, bad_guard;
            count_violations(&s, o.A, o.lda, o.B, o.ldb, o.C, o.C0, o.ldc, &bad16, &bad_rounded,
                             &bad_guard);
            if (bad16 || bad_rounded || bad_guard)
                fail_msg("transA %d transB %d M %d N %d K %d alpha %g beta %g: %ld outside the "
                         "bf16 bound, %ld outside the rounded-operand bound, %ld guard cells "
                         "written", s.tA, s.tB, s.M, s.N, s.K, (double)s.alpha, (double)s.beta,
                         bad16, bad_rounded, bad_guard);
            free_operands(&o);
        }
    gemm_bf16_workspace_free(&ws);
}

/* The bounds are tight enough to fail a kernel that loses the odd K tail or one pair of k: the
 * product of operands with that k (that pair) zeroed must fall outside the rounded-operand
 * bound of the true operands at every size, and outside the bf16 bound too while K is small
 * enough for one term to exceed 2^-7 of the sum (K <= 64 here). */
static void test_bounds_catch_planted_bugs(void **state)
{
    (void)state;
    if (skip_without_bf16()) return;
    gemm_bf16_workspace ws = workspace();
    for (size_t z = 0; z < sizeof shapes / sizeof *shapes; z++) {
        shape s = shapes[z];
        if (s.K < 2 || s.M * s.N < 8) continue; /* too few terms or elements to lose one */
        s.tA = (int)z & 1, s.tB = ((int)z >> 1) & 1;
        for (int bug = 0; bug < 2; bug++) {
            operands o = make_operands(&s, 500 + z);
            /* bug 0: the last k lost (the odd tail when K is odd); bug 1: the pair at the
             * middle of K lost */
            const int k0 = bug ? 2 * (s.K / 4) : s.K - 1, k1 = bug ? k0 + 1 : k0;
            float *A2 = tu_copy(o.A, (size_t)(s.tA ? s.K : s.M) * o.lda);
            for (int i = 0; i < s.M; i++)
                for (int k = k0; k <= k1 && k < s.K; k++)
                    A2[s.tA ? (size_t)k * o.lda + i : (size_t)i * o.lda + k] = 0.0f;
            gemm_bf16(s.tA, s.tB, s.M, s.N, s.K, s.alpha, A2, o.lda, o.B, o.ldb, s.beta, o.C,
                      o.ldc, &ws);
            long bad16, bad_rounded, bad_guard;
            count_violations(&s, o.A, o.lda, o.B, o.ldb, o.C, o.C0, o.ldc, &bad16, &bad_rounded,
                             &bad_guard);
            if (bad_rounded == 0)
                fail_msg("M %d N %d K %d: losing k %d..%d went unnoticed by the rounded-operand "
                         "bound", s.M, s.N, s.K, k0, k1);
            if (s.K <= 64 && bad16 == 0)
                fail_msg("M %d N %d K %d: losing k %d..%d went unnoticed by the bf16 bound",
                         s.M, s.N, s.K, k0, k1);
            free(A2);
            free_operands(&o);
        }
    }
    gemm_bf16_workspace_free(&ws);
}

/* Each element is the same sequence of operations whatever the thread count (the threads
 * split C, never K), and the weights' bf16 copy (gemm_bf16_wt) gives bitwise what rounding
 * them on the fly gives. */
static void test_gemm_deterministic(void **state)
{
    (void)state;
    if (skip_without_bf16()) return;
    const int M = 150, N = 300, K = 700;
    gemm_bf16_workspace ws = {0};
    assert_int_equal(gemm_bf16_reserve(&ws, 3, NULL), QKV_OK);
    float *x = tu_rand((size_t)M * K, 1), *W = tu_rand((size_t)N * K, 2);
    float *y1 = tu_zeros((size_t)M * N), *y2 = tu_zeros((size_t)M * N);
    float *y3 = tu_zeros((size_t)M * N);
    uint16_t *W16 = malloc((size_t)N * K * sizeof *W16);
    assert_non_null(W16);
    bf16_convert(W16, W, (size_t)N * K);
    const int threads = qkv_get_threads();
    qkv_set_threads(1);
    gemm_bf16(0, 1, M, N, K, 1.0f, x, K, W, K, 0.0f, y1, N, &ws);
    qkv_set_threads(3);
    gemm_bf16(0, 1, M, N, K, 1.0f, x, K, W, K, 0.0f, y2, N, &ws);
    gemm_bf16_wt(M, N, K, 1.0f, x, K, W16, K, 0.0f, y3, N, &ws);
    qkv_set_threads(threads);
    assert_memory_equal(y1, y2, (size_t)M * N * sizeof *y1);
    assert_memory_equal(y1, y3, (size_t)M * N * sizeof *y1);
    free(x), free(W), free(y1), free(y2), free(y3), free(W16);
    gemm_bf16_workspace_free(&ws);
}

/* A linear layer's product with its bias fused into the stores (gemm_bf16_linear) is bitwise
 * the product followed by a separate pass adding the bias, from the float32 weights and from
 * their bf16 copy, with K over two K blocks (the bias must go in after the last one). */
static void test_linear_bias_fused(void **state)
{
    (void)state;
    if (skip_without_bf16()) return;
    const int N = 70, out = 45, in = 700;
    gemm_bf16_workspace ws = workspace();
    float *x = tu_rand((size_t)N * in, 11), *W = tu_rand((size_t)out * in, 12);
    float *b = tu_rand((size_t)out, 13);
    float *want = tu_zeros((size_t)N * out), *got = tu_zeros((size_t)N * out);
    uint16_t *W16 = malloc((size_t)out * in * sizeof *W16);
    assert_non_null(W16);
    bf16_convert(W16, W, (size_t)out * in);
    gemm_bf16(0, 1, N, out, in, 1.0f, x, in, W, in, 0.0f, want, out, &ws);
    for (int i = 0; i < N; i++)
        for (int o = 0; o < out; o++) want[(size_t)i * out + o] += b[o];
    gemm_bf16_linear(N, out, in, x, W, NULL, b, got, &ws);
    assert_memory_equal(want, got, (size_t)N * out * sizeof *got);
    memset(got, 0, (size_t)N * out * sizeof *got);
    gemm_bf16_linear(N, out, in, x, W, W16, b, got, &ws);
    assert_memory_equal(want, got, (size_t)N * out * sizeof *got);
    gemm_bf16_linear(N, out, 0, x, W, NULL, b, got, &ws); /* no product: the bias alone */
    for (int i = 0; i < N; i++) assert_memory_equal(got + (size_t)i * out, b, out * sizeof *b);
    free(x), free(W), free(b), free(want), free(got), free(W16);
    gemm_bf16_workspace_free(&ws);
}

/* The few-rows kernel (a decoding step): float32 activations times the bf16 weights, exactly
 * widened, within float32's summation bound of the float64 product with those weights; a
 * row's result is bitwise the same alone and among others; nothing past y written. */
static void test_rows_kernel(void **state)
{
    (void)state;
    if (skip_without_bf16()) return;
    const int sizes[][2] = {{1, 1}, {7, 3}, {16, 8}, {17, 9}, {37, 13}, {512, 130}, {100, 1001}};
    for (size_t z = 0; z < sizeof sizes / sizeof *sizes; z++) {
        const int in = sizes[z][0], out = sizes[z][1], M = 12;
        float *x = tu_rand((size_t)M * in, 3 + z), *W = tu_rand((size_t)out * in, 4 + z);
        float *b = tu_rand((size_t)out, 5 + z), *y = tu_zeros((size_t)M * out + 4);
        float *one = tu_zeros((size_t)out);
        uint16_t *W16 = malloc((size_t)out * in * sizeof *W16);
        assert_non_null(W16);
        bf16_convert(W16, W, (size_t)out * in);
        for (int g = 0; g < 4; g++) y[(size_t)M * out + g] = SENTINEL;
        linear_rows_bf16(y, x, W16, b, M, in, out);
        for (int i = 0; i < M; i++) {
            for (int o = 0; o < out; o++) {
                double r = b[o], scale = fabs(b[o]);
                for (int k = 0; k < in; k++) {
                    const double t = (double)x[(size_t)i * in + k] *
                                     bf16_to_float(W16[(size_t)o * in + k]);
                    r += t, scale += fabs(t);
                }
                const double got = y[(size_t)i * out + o];
                if (!(fabs(got - r) <= (in + 4) * 0x1p-24 * scale))
                    fail_msg("in %d out %d: y[%d, %d] = %.9g, float64 %.9g", in, out, i, o, got,
                             r);
            }
            linear_rows_bf16(one, x + (size_t)i * in, W16, b, 1, in, out);
            assert_memory_equal(one, y + (size_t)i * out, (size_t)out * sizeof *one);
        }
        for (int g = 0; g < 4; g++) assert_true(y[(size_t)M * out + g] == SENTINEL);
        free(x), free(W), free(b), free(y), free(one), free(W16);
    }
}

/* ---- the models ------------------------------------------------------------------------------ */

/* The reversal task of tests/common/reversal.h: steps, batch, steps averaged for the loss. */
enum { STEPS = 1000, BATCH = 64, LAST = 50 };

/* The float32 model the training test trains, kept for the decoding test. */
static qkv_transformer *trained;

/* bf16 training of the reversal task ends within 0.05 nats (or 20%) of float32's loss from the
 * same start on the same batches; the trained models' translations agree. At this size both
 * reach ~0.2 nats per token: bf16's 2^-8 rounding per product moves each step's gradient by
 * well under 1% (float32 from bf16 differ like two random seeds' runs, far less than the loss
 * itself), so a bigger gap means the bf16 path computes something else. */
static void test_training_matches_fp32(void **state)
{
    (void)state;
    if (skip_without_bf16()) return;
    qkv_transformer *m32 = reversal_model(QKV_PRECISION_FP32);
    qkv_transformer *m16 = reversal_model(QKV_PRECISION_BF16);
    const double l32 = train_reversal(m32, STEPS, BATCH, LAST);
    const double l16 = train_reversal(m16, STEPS, BATCH, LAST);
    printf("reversal, %d steps: final loss fp32 %.4f, bf16 %.4f nats per token\n", STEPS, l32,
           l16);
    assert_true(l32 < 0.5); /* it learned (the start is ln 24 = 3.2) */
    if (!(fabs(l16 - l32) <= fmax(0.05, 0.2 * l32)))
        fail_msg("bf16 training ended at %.4f, float32 at %.4f", l16, l32);
    /* each model decodes held-out sources at its own precision */
    enum { N = 200 };
    int out32[N * TT], len32[N], out16[N * TT], len16[N];
    const int ok32 = translate_reversal(m32, out32, len32, N, N);
    const int ok16 = translate_reversal(m16, out16, len16, N, N);
    printf("held-out reversals exactly right: fp32 %d/%d, bf16 %d/%d\n", ok32, N, ok16, N);
    assert_true(abs(ok32 - ok16) <= N / 10);
    qkv_transformer_free(m16);
    trained = m32;
}

/* One float32-trained model decoding at float32 and at bf16 (weights read from the bf16
 * copy), 8 sentences at a time (the few-rows kernel: bf16 weights, float32 activations) and
 * all 200 at once (the GEMM: both rounded): each agrees with float32 on at least 90% of the
 * sentences (97% here). A bf16 step's logits are float32's up to ~2^-8 relative per product,
 * so argmax changes only where the two best tokens are about that close; a trained model is
 * rarely so undecided, but one changed token changes the rest of its sentence, hence a
 * threshold per sentence below 100%, with room for another CPU's float32 model. A wrong
 * weight, row or tail in the bf16 path changes nearly every sentence. */
static void test_decoding_agrees_with_fp32(void **state)
{
    (void)state;
    if (skip_without_bf16()) return;
    qkv_transformer *m = trained;
    if (!m) train_reversal(m = reversal_model(QKV_PRECISION_FP32), STEPS, BATCH, LAST);
    trained = NULL;
    enum { N = 200 };
    static int out32[N * TT], len32[N], rows[N * TT], rows_len[N], gemm[N * TT], gemm_len[N];
    const int ok32 = translate_reversal(m, out32, len32, N, N);
    qkv_error err = {0};
    assert_int_equal(qkv_transformer_set_precision(m, QKV_PRECISION_BF16, &err), QKV_OK);
    const int ok_rows = translate_reversal(m, rows, rows_len, N, 8);
    const int ok_gemm = translate_reversal(m, gemm, gemm_len, N, N);
    const int same_rows = same_translations(out32, len32, rows, rows_len, N);
    const int same_gemm = same_translations(out32, len32, gemm, gemm_len, N);
    printf("greedy decoding of a float32-trained model, sentences identical to float32's: "
           "bf16 8 at a time %d/%d, 200 at once %d/%d (exact reversals fp32 %d, bf16 %d, %d)\n",
           same_rows, N, same_gemm, N, ok32, ok_rows, ok_gemm);
    assert_true(same_rows >= N * 90 / 100);
    assert_true(same_gemm >= N * 90 / 100);
    qkv_transformer_free(m);
}

/* Decoding never reads a stale bf16 copy: after the parameters are rewritten through
 * qkv_transformer_params, greedy decoding at bf16 gives exactly what a model built from the
 * new parameters gives. */
static void test_copy_follows_parameters(void **state)
{
    (void)state;
    if (skip_without_bf16()) return;
    check_copy_follows_parameters(QKV_PRECISION_BF16);
}

/* The language model at bf16: a generation step (bf16 weights, float32 activations) after a
 * prefill gives logits within 2% of the largest of float32's; after the parameters of both
 * models are rewritten, the bf16 one follows (its copy is made again). */
static void test_lm_generation(void **state)
{
    (void)state;
    if (skip_without_bf16()) return;
    qkv_lm_config cfg = qkv_lm_default_config();
    cfg.vocab = 40, cfg.d_model = 64, cfg.heads = 4, cfg.ffn = 256, cfg.layers = 2;
    cfg.max_len = 32, cfg.dropout = 0.0f;
    qkv_lm *m32, *m16;
    qkv_lm_state *s32, *s16;
    qkv_error err = {0};
    assert_int_equal(qkv_lm_create(&m32, &cfg, 5, &err), QKV_OK);
    assert_int_equal(qkv_lm_create(&m16, &cfg, 5, &err), QKV_OK);
    assert_int_equal(qkv_lm_set_precision(m16, QKV_PRECISION_BF16, &err), QKV_OK);
    assert_int_equal(qkv_lm_get_precision(m16), QKV_PRECISION_BF16);
    assert_int_equal(qkv_lm_state_create(&s32, m32, &err), QKV_OK);
    assert_int_equal(qkv_lm_state_create(&s16, m16, &err), QKV_OK);
    const int ids[6] = {4, 9, 17, 30, 5, 12};
    float l32[40], l16[40];
    for (int round = 0; round < 2; round++) {
        assert_int_equal(qkv_lm_prefill(m32, s32, ids, 5, l32, &err), QKV_OK);
        assert_int_equal(qkv_lm_step(m32, s32, ids[5], l32, &err), QKV_OK);
        assert_int_equal(qkv_lm_prefill(m16, s16, ids, 5, l16, &err), QKV_OK);
        assert_int_equal(qkv_lm_step(m16, s16, ids[5], l16, &err), QKV_OK);
        float top = 0.0f;
        for (int v = 0; v < 40; v++) top = fmaxf(top, fabsf(l32[v]));
        for (int v = 0; v < 40; v++)
            if (!(fabsf(l16[v] - l32[v]) <= 0.02f * top))
                fail_msg("round %d: logit %d at bf16 %g, float32 %g (largest %g)", round, v,
                         (double)l16[v], (double)l32[v], (double)top);
        /* new parameters, the same in both */
        qkv_fill_uniform(qkv_lm_params(m32), qkv_lm_num_params(m32), -0.2f, 0.2f, 9 + round);
        memcpy(qkv_lm_params(m16), qkv_lm_params(m32), qkv_lm_num_params(m32) * sizeof(float));
    }
    qkv_lm_state_free(s32), qkv_lm_state_free(s16);
    qkv_lm_free(m32), qkv_lm_free(m16);
}

static void test_precision_names(void **state)
{
    (void)state;
    qkv_precision p;
    qkv_error err = {0};
    assert_int_equal(qkv_precision_parse(&p, "bf16", &err), QKV_OK);
    assert_int_equal(p, QKV_PRECISION_BF16);
    assert_int_equal(qkv_precision_parse(&p, "fp32", &err), QKV_OK);
    assert_int_equal(p, QKV_PRECISION_FP32);
    assert_int_equal(qkv_precision_parse(&p, "fp16", &err), QKV_ERR_ARG);
    assert_non_null(strstr(err.msg, "fp32, bf16 or int8"));
    assert_string_equal(qkv_precision_name(QKV_PRECISION_BF16), "bf16");
    qkv_transformer *m = reversal_model(QKV_PRECISION_FP32);
    assert_int_equal(qkv_transformer_set_precision(m, (qkv_precision)7, &err), QKV_ERR_ARG);
    assert_int_equal(qkv_transformer_get_precision(m), QKV_PRECISION_FP32);
    qkv_transformer_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rounding),
        cmocka_unit_test(test_gemm_within_bounds),
        cmocka_unit_test(test_bounds_catch_planted_bugs),
        cmocka_unit_test(test_gemm_deterministic),
        cmocka_unit_test(test_linear_bias_fused),
        cmocka_unit_test(test_rows_kernel),
        cmocka_unit_test(test_training_matches_fp32),
        cmocka_unit_test(test_decoding_agrees_with_fp32),
        cmocka_unit_test(test_copy_follows_parameters),
        cmocka_unit_test(test_lm_generation),
        cmocka_unit_test(test_precision_names),
    };
    return cmocka_run_group_tests_name("bf16", tests, NULL, NULL);
}
