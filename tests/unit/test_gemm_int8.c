/* SPDX-License-Identifier: MIT */
/* int8 products (ops/cpu/int8.h, QKV_PRECISION_INT8): tests that can fail.
 *
 * Three checks per shape:
 *   exact        the kernel's int32 sums (gemm_int8_i32) equal a scalar integer reference,
 *                sum_k (xu - 128) wq over the quantised operands, bit for bit, and so do the
 *                AMX kernel's where the CPU has one (in a multiple of 64);
 *   dequantised  gemm_int8's y equals fma(float(z), s_x s_w, b) from those sums, bit for bit
 *                (one scale per row and channel, the right ones);
 *   bound        y against the float64 product of the unquantised operands within the bound
 *                quantisation allows: each xq is off by at most s_x / 2, each wq by s_w / 2, so
 *                |y - (x W^T + b)| <= sum_k (|x_k| s_w / 2 + |W_k| s_x / 2 + s_x s_w / 4)
 *                + 1e-6 (sum_k |x_k W_k| + |b|) (float32 roundings of the scales, the reciprocal
 *                that quantises, the conversion of z and the final fma: a few 2^-24 each).
 * The planted-bug tests corrupt what the kernel reads (the 128 compensation dropped, one
 * channel's scale wrong, one weight lost) and require the checks to notice. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/cpu/int8.h"
#include "reversal.h"
#include "test_util.h"

#define SENTINEL 4321.5f /* past the end of y: must survive */

static int skip_without_vnni(void)
{
    if (gemm_int8_supported()) return 0;
    printf("this CPU has no AVX512-VNNI: skipped\n");
    return 1;
}

static uint64_t rng_state;
static float frand(void) /* uniform in [-1, 1) */
{
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((rng_state >> 40) * 0x1p-24) * 2.0f - 1.0f;
}

typedef struct {
    int N, in, out;
} shape;

/* N = 1 (a decoding step), 3, 6, 7, 12 (around the 4-row tile), 33, 40; in = 4k + 0..3 and not a
 * multiple of 16; out around the 16-channel block and the 64-channel group. With in a multiple
 * of 64 and 16 rows or more, gemm_int8 runs the AMX kernel where there is one: N = 16, 31, 32,
 * 33 and 100 around its 32-row block. */
static const shape shapes[] = {
    {1, 1, 1},    {1, 5, 17},   {3, 6, 15},    {6, 7, 64},    {7, 64, 65},  {33, 129, 200},
    {1, 515, 64}, {3, 512, 96}, {33, 130, 33}, {12, 131, 128}, {2, 17, 1},   {40, 64, 130},
    {16, 64, 65}, {31, 128, 17}, {32, 512, 96}, {33, 192, 200}, {100, 256, 70},
};

typedef struct {
    float *x, *W, *b, *y;
    int8_matrix q;
    gemm_int8_workspace ws;
} operands;

/* Rows of x at different magnitudes (a scale per row matters), one channel of W all zero (a
 * zero scale), one row of x all zero. */
static operands make(const shape *s, uint64_t seed)
{
    operands o = {0};
    rng_state = seed;
    o.x = malloc(sizeof(float) * (size_t)s->N * s->in + 1);
    o.W = malloc(sizeof(float) * (size_t)s->out * s->in + 1);
    o.b = malloc(sizeof(float) * (size_t)s->out);
    o.y = malloc(sizeof(float) * ((size_t)s->N * s->out + 16));
    assert_non_null(o.x), assert_non_null(o.W), assert_non_null(o.b), assert_non_null(o.y);
    for (int n = 0; n < s->N; n++) {
        const float mag = n % 3 == 0 ? 10.0f : n % 3 == 1 ? 0.01f : 1.0f;
        for (int k = 0; k < s->in; k++)
            o.x[(size_t)n * s->in + k] = (n == 4 ? 0.0f : mag) * frand();
    }
    for (int i = 0; i < s->out; i++)
        for (int k = 0; k < s->in; k++)
            o.W[(size_t)i * s->in + k] = (i == 2 ? 0.0f : 0.1f) * frand();
    for (int i = 0; i < s->out; i++) o.b[i] = frand();
    for (int i = 0; i < s->N * s->out + 16; i++) o.y[i] = SENTINEL;
    qkv_error err = {0};
    assert_int_equal(int8_matrix_quantise(&o.q, o.W, s->out, s->in, &err), QKV_OK);
    assert_int_equal(gemm_int8_reserve(&o.ws, s->N, s->in, &err), QKV_OK);
    return o;
}

static void release(operands *o)
{
    free(o->x), free(o->W), free(o->b), free(o->y);
    int8_matrix_free(&o->q);
    gemm_int8_workspace_free(&o->ws);
}

/* The elements of y outside the bound (ws->xu, ws->scale hold x's quantisation). */
static long bound_violations(const shape *s, const operands *o, const float *s_x)
{
    long bad = 0;
    for (int n = 0; n < s->N; n++)
        for (int i = 0; i < s->out; i++) {
            const float *xr = o->x + (size_t)n * s->in, *wr = o->W + (size_t)i * s->in;
            const double sx = s_x[n], sw = o->q.scale[i];
            double exact = o->b[i], bound = 0.0, abs_sum = 0.0;
            for (int k = 0; k < s->in; k++) {
                exact += (double)xr[k] * wr[k];
                bound += fabs(xr[k]) * sw / 2 + fabs(wr[k]) * sx / 2 + sx * sw / 4;
                abs_sum += fabs((double)xr[k] * wr[k]);
            }
            bound += 1e-6 * (abs_sum + fabs(o->b[i])) + 1e-30;
            const double got = o->y[(size_t)n * s->out + i];
            if (!(fabs(got - exact) <= bound)) bad++;
        }
    return bad;
}

/* The elements of z differing from the scalar integer reference. */
static long exact_violations(const shape *s, const operands *o, const int32_t *z)
{
    const int k4 = o->q.k4;
    long bad = 0;
    for (int n = 0; n < s->N; n++)
        for (int i = 0; i < s->out; i++) {
            int64_t ref = 0;
            for (int k = 0; k < s->in; k++)
                ref += (int64_t)(o->ws.xu[(size_t)n * k4 * 4 + k] - 128) *
                       int8_matrix_weight(&o->q, i, k);
            if (ref != z[(size_t)n * s->out + i]) bad++;
        }
    return bad;
}

static void run_checks(const shape *s, operands *o, long *bad_exact, long *bad_deq,
                       long *bad_bound)
{
    gemm_int8(o->y, o->x, &o->q, o->b, s->N, &o->ws);
    for (int i = 0; i < 16; i++)
        if (o->y[(size_t)s->N * s->out + i] != SENTINEL)
            fail_msg("N %d in %d out %d: wrote past the end of y", s->N, s->in, s->out);
    /* gemm_int8 left x's quantisation in the workspace: the integer path from it */
    int32_t *z = malloc(sizeof *z * (size_t)s->N * s->out);
    assert_non_null(z);
    gemm_int8_i32(z, o->ws.xu, s->N, &o->q, 0);
    *bad_exact = exact_violations(s, o, z);
    if (o->ws.amx > 0 && o->q.k4 % 16 == 0) { /* the AMX kernel's sums: the same bits */
        const size_t ldx = (size_t)o->q.k4 * 4;
        memset(o->ws.xu + (size_t)s->N * ldx, 128, (o->ws.rows - (size_t)s->N) * ldx);
        int32_t *za = malloc(sizeof *za * (size_t)s->N * s->out);
        assert_non_null(za);
        gemm_int8_i32(za, o->ws.xu, s->N, &o->q, 1);
        *bad_exact += exact_violations(s, o, za);
        free(za);
    }
    *bad_deq = 0;
    for (int n = 0; n < s->N; n++)
        for (int i = 0; i < s->out; i++) {
            const float sc = o->ws.scale[n] * o->q.scale[i];
            const float want = fmaf((float)z[(size_t)n * s->out + i], sc, o->b[i]);
            if (memcmp(&want, &o->y[(size_t)n * s->out + i], sizeof want)) ++*bad_deq;
        }
    *bad_bound = bound_violations(s, o, o->ws.scale);
    free(z);
}

/* The quantiser: xq in [-127, 127], the row's largest |x| at +-127, every value within half a
 * step, padding at 128 (zero); and the weights the same per channel. */
static void test_quantisation(void **state)
{
    (void)state;
    if (skip_without_vnni()) return;
    for (size_t z = 0; z < sizeof shapes / sizeof *shapes; z++) {
        const shape *s = &shapes[z];
        operands o = make(s, 100 + z);
        const int k4 = o.q.k4;
        int8_quantise_rows(o.ws.xu, o.ws.scale, o.x, s->N, s->in, k4);
        for (int n = 0; n < s->N; n++) {
            const float *xr = o.x + (size_t)n * s->in;
            const uint8_t *u = o.ws.xu + (size_t)n * k4 * 4;
            float amax = 0.0f;
            int qmax = 0;
            for (int k = 0; k < s->in; k++) amax = fmaxf(amax, fabsf(xr[k]));
            assert_true(o.ws.scale[n] == amax / 127.0f);
            for (int k = 0; k < s->in; k++) {
                const int q = (int)u[k] - 128;
                assert_true(q >= -127 && q <= 127);
                qmax = abs(q) > qmax ? abs(q) : qmax;
                assert_true(fabs(xr[k] - (double)o.ws.scale[n] * q) <=
                            o.ws.scale[n] * (0.5 + 1e-5) + 1e-30);
            }
            assert_int_equal(qmax, amax > 0.0f ? 127 : 0);
            for (int k = s->in; k < 4 * k4; k++) assert_int_equal(u[k], 128);
        }
        for (int i = 0; i < s->out; i++) {
            const float *wr = o.W + (size_t)i * s->in;
            float amax = 0.0f;
            int32_t sum = 0;
            for (int k = 0; k < s->in; k++) amax = fmaxf(amax, fabsf(wr[k]));
            assert_true(o.q.scale[i] == amax / 127.0f);
            for (int k = 0; k < s->in; k++) {
                const int q = int8_matrix_weight(&o.q, i, k);
                assert_true(q >= -127 && q <= 127);
                assert_true(fabs(wr[k] - (double)o.q.scale[i] * q) <=
                            o.q.scale[i] * (0.5 + 1e-5) + 1e-30);
                sum += q;
            }
            assert_int_equal(o.q.comp[i], 128 * sum);
            for (int k = s->in; k < 4 * k4; k++) assert_int_equal(int8_matrix_weight(&o.q, i, k), 0);
        }
        release(&o);
    }
}

static void test_gemm_exact_and_within_bound(void **state)
{
    (void)state;
    if (skip_without_vnni()) return;
    for (size_t z = 0; z < sizeof shapes / sizeof *shapes; z++) {
        const shape *s = &shapes[z];
        operands o = make(s, 200 + z);
        long be, bd, bb;
        run_checks(s, &o, &be, &bd, &bb);
        if (be || bd || bb)
            fail_msg("N %d in %d out %d: %ld int32 sums wrong, %ld dequantised values wrong, "
                     "%ld outside the bound", s->N, s->in, s->out, be, bd, bb);
        release(&o);
    }
}

/* The largest sums the kernel can meet: every xq at +127 (+255 unsigned) and every weight at
 * +-127, at the largest in any qkv model's linear layer has (QKV_MAX_FFN): int32 holds them. */
static void test_no_overflow_at_the_largest_width(void **state)
{
    (void)state;
    if (skip_without_vnni()) return;
    const shape s = {2, QKV_MAX_FFN, 17};
    operands o = make(&s, 7);
    for (size_t k = 0; k < (size_t)s.N * s.in; k++) o.x[k] = 1.0f;          /* xq = 127 */
    for (size_t k = 0; k < (size_t)s.in; k++) o.x[(size_t)s.in + k] = -1.0f; /* xq = -127 */
    for (int i = 0; i < s.out; i++)
        for (int k = 0; k < s.in; k++) o.W[(size_t)i * s.in + k] = i % 2 ? -1.0f : 1.0f;
    int8_matrix_free(&o.q);
    qkv_error err = {0};
    assert_int_equal(int8_matrix_quantise(&o.q, o.W, s.out, s.in, &err), QKV_OK);
    long be, bd, bb;
    run_checks(&s, &o, &be, &bd, &bb);
    assert_int_equal(be, 0), assert_int_equal(bd, 0), assert_int_equal(bb, 0);
    assert_true(o.y[0] == (float)QKV_MAX_FFN * 1.0f + o.b[0]);
    release(&o);
}

/* Row n's result does not depend on how many rows come with it (a decoding step's hypotheses
 * give the same logits alone or together) or on the thread count. */
static void test_rows_independent(void **state)
{
    (void)state;
    if (skip_without_vnni()) return;
    const shape s = {33, 200, 130};
    operands o = make(&s, 9);
    gemm_int8(o.y, o.x, &o.q, o.b, s.N, &o.ws);
    float *y1 = malloc(sizeof *y1 * s.out);
    assert_non_null(y1);
    for (int n = 0; n < s.N; n += 7) {
        gemm_int8(y1, o.x + (size_t)n * s.in, &o.q, o.b, 1, &o.ws);
        assert_memory_equal(y1, o.y + (size_t)n * s.out, sizeof *y1 * s.out);
    }
    free(y1);
    release(&o);
}

/* Each planted bug must be seen: the 128 compensation dropped (every sum off by 128 sum wq),
 * one channel's scale 1.5x (that channel's values off by a third), one weight of the packed
 * matrix changed (a lost or wrong term, which only the exact check sees at wide in). */
static void test_checks_catch_planted_bugs(void **state)
{
    (void)state;
    if (skip_without_vnni()) return;
    for (size_t z = 0; z < sizeof shapes / sizeof *shapes; z++) {
        const shape *s = &shapes[z];
        if (s->in < 4 || s->out < 4) continue;
        for (int bug = 0; bug < 3; bug++) {
            operands o = make(s, 300 + z);
            const int ch = 3; /* a channel with nonzero weights */
            if (bug == 0) {
                for (int i = 0; i < s->out; i++) o.q.comp[i] = 0;
            } else if (bug == 1) {
                o.q.scale[ch] *= 1.5f;
            } else {
                int8_t *w = &o.q.w[(size_t)(ch / INT8_BLOCK) * o.q.k4 * 64 + (ch % INT8_BLOCK) * 4 +
                                   (size_t)(s->in / 2 / 4) * 64 + (s->in / 2) % 4];
                *w = (int8_t)(*w > 0 ? *w - 60 : *w + 60);
            }
            gemm_int8(o.y, o.x, &o.q, o.b, s->N, &o.ws);
            long bound_bad = bound_violations(s, &o, o.ws.scale);
            long be, bd, bb;
            if (bug == 1) o.q.scale[ch] /= 1.5f; /* the reference uses the true scale */
            if (bug == 0) {
                run_checks(s, &o, &be, &bd, &bb); /* comp still 0: int32 sums wrong */
                if (!be) fail_msg("N %d in %d out %d: dropping the 128 compensation went "
                                  "unnoticed by the exact check", s->N, s->in, s->out);
            } else if (bug == 2) {
                run_checks(s, &o, &be, &bd, &bb);
                if (!be) fail_msg("N %d in %d out %d: a changed weight went unnoticed by the "
                                  "exact check", s->N, s->in, s->out);
            } else {
                /* y computed with the wrong scale, checked against the true one */
                int32_t *zz = malloc(sizeof *zz * (size_t)s->N * s->out);
                assert_non_null(zz);
                gemm_int8_i32(zz, o.ws.xu, s->N, &o.q, 0);
                bd = 0;
                for (int n = 0; n < s->N; n++)
                    for (int i = 0; i < s->out; i++) {
                        const float want = fmaf((float)zz[(size_t)n * s->out + i],
                                                o.ws.scale[n] * o.q.scale[i], o.b[i]);
                        if (memcmp(&want, &o.y[(size_t)n * s->out + i], sizeof want)) bd++;
                    }
                free(zz);
                if (!bd) fail_msg("N %d in %d out %d: a wrong scale went unnoticed by the "
                                  "dequantisation check", s->N, s->in, s->out);
            }
            if (bug != 2 && !bound_bad)
                fail_msg("N %d in %d out %d: bug %d went unnoticed by the float64 bound", s->N,
                         s->in, s->out, bug);
            release(&o);
        }
    }
}

/* ---- the models at QKV_PRECISION_INT8 ------------------------------------------------------- */

/* The reversal task of tests/common/reversal.h, trained 250 steps of 32 in float32. */

/* How far int8's logits are from float32's: the root mean square of the difference over that
 * of the float32 logits (the largest difference and the largest |logit| into *diff, *big). A
 * mean, not the largest difference: quantisation's errors are many small independent ones, and
 * the largest of them moves with the model's few outliers (a tiny model trained at -O1 or -O2
 * differs enough to move it from 10% to 15% of the largest logit), where a wrong scale or a
 * lost term shifts every logit. */
static double logit_error(const float *l32, const float *l8, size_t n, double *diff, double *big)
{
    double s32 = 0.0, sd = 0.0;
    *diff = 0.0, *big = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double d = (double)l8[i] - l32[i];
        *big = fmax(*big, fabs(l32[i])), *diff = fmax(*diff, fabs(d));
        s32 += (double)l32[i] * l32[i], sd += d * d;
    }
    return sqrt(sd / s32);
}

/* A float32-trained model decoding at int8, 8 sentences per call (a decoding step's few
 * rows) and 200 at once (the encoder's many rows): at least 85% of the sentences identical
 * to float32's (89-92% here), and teacher-forced logits off by at most 5% RMS (logit_error:
 * 1.7% here, 2.1% in the sanitizer build; every weight's scale 5% wrong gives 9%). Each
 * product is off by the bound above, a few 1/127 relative, the embeddings' lookups by half a
 * step of their row's scale, and 4 layers of them add up, so argmax changes where the two best
 * logits are that close; a lost compensation, a wrong scale or a lost term changes nearly
 * every sentence and moves the logits by far more. (Leaving the output projection in float32,
 * with float32 embeddings, changed neither number: 183 vs 181 sentences, a largest difference
 * of 0.61 of 7.77 either way.) Also: a backward pass at int8 is refused, an evaluation pass is
 * not. */
static void test_model_int8_agrees_with_fp32(void **state)
{
    (void)state;
    if (skip_without_vnni()) return;
    qkv_transformer *m = reversal_model(QKV_PRECISION_FP32);
    train_reversal(m, 250, 32, 0);
    enum { N = 200, NL = 32 };
    static int out32[N * TT], len32[N], rows[N * TT], rows_len[N], gemm[N * TT], gemm_len[N];
    translate_reversal(m, out32, len32, N, N);
    float *l32 = reversal_logits(m, NL);
    qkv_error err = {0};
    assert_int_equal(qkv_transformer_set_precision(m, QKV_PRECISION_INT8, &err), QKV_OK);
    assert_int_equal(qkv_transformer_get_precision(m), QKV_PRECISION_INT8);
    translate_reversal(m, rows, rows_len, N, 8);
    translate_reversal(m, gemm, gemm_len, N, N);
    float *l8 = reversal_logits(m, NL);
    const int same_rows = same_translations(out32, len32, rows, rows_len, N);
    const int same_gemm = same_translations(out32, len32, gemm, gemm_len, N);
    double big, diff;
    const double rms = logit_error(l32, l8, (size_t)NL * TT * V, &diff, &big);
    printf("greedy decoding of a float32-trained model, sentences identical to float32's: int8 "
           "8 at a time %d/%d, 200 at once %d/%d; logits: RMS of int8 - fp32 %.4f of theirs, "
           "max |int8 - fp32| %.4f of max %.3f\n", same_rows, N, same_gemm, N, rms, diff, big);
    assert_true(same_rows >= N * 85 / 100);
    assert_true(same_gemm >= N * 85 / 100);
    assert_true(rms <= 0.05);
    assert_true(diff > 0.0); /* it did run at int8: a backend that never finds the quantised
                                weights falls back to float32 silently */
    /* inference only */
    int src[4 * TS], valid[4], tin[4 * TT], tout[4 * TT];
    reversal_batch(src, valid, tin, tout, 4, 5);
    qkv_batch b = {4, TS, TT, src, valid, tin, tout};
    const qkv_loss_options train = {.backward = 1, .train = 1};
    assert_int_equal(qkv_transformer_loss(m, &b, &train, NULL, NULL, &err), QKV_ERR_ARG);
    assert_non_null(strstr(err.msg, "inference only"));
    assert_int_equal(qkv_transformer_loss(m, &b, NULL, NULL, NULL, &err), QKV_OK);
    free(l32), free(l8);
    qkv_transformer_free(m);
}

/* Decoding never reads stale int8 weights: after the parameters are rewritten through
 * qkv_transformer_params, greedy decoding at int8 gives exactly what a model built from the
 * new parameters gives. */
static void test_int8_copy_follows_parameters(void **state)
{
    (void)state;
    if (skip_without_vnni()) return;
    check_copy_follows_parameters(QKV_PRECISION_INT8);
}

/* The language model at int8: logits within 12% of the largest of float32's (5.5% here),
 * and training refused. */
static void test_lm_int8(void **state)
{
    (void)state;
    if (skip_without_vnni()) return;
    qkv_lm_config cfg = qkv_lm_default_config();
    cfg.vocab = 40, cfg.d_model = 64, cfg.heads = 4, cfg.ffn = 256, cfg.layers = 2;
    cfg.max_len = 32, cfg.dropout = 0.0f;
    qkv_lm *m;
    qkv_error err = {0};
    assert_int_equal(qkv_lm_create(&m, &cfg, 5, &err), QKV_OK);
    enum { B = 3, T = 20 };
    int ids[B * T];
    for (int i = 0; i < B * T; i++) ids[i] = (int)(qkv_random_u32(9, (uint64_t)i) % cfg.vocab);
    static float l32[B * T * 40], l8[B * T * 40];
    assert_int_equal(qkv_lm_logits(m, ids, B, T, l32, &err), QKV_OK);
    assert_int_equal(qkv_lm_set_precision(m, QKV_PRECISION_INT8, &err), QKV_OK);
    assert_int_equal(qkv_lm_logits(m, ids, B, T, l8, &err), QKV_OK);
    double big, diff;
    const double rms = logit_error(l32, l8, (size_t)B * T * 40, &diff, &big);
    printf("language model logits: RMS of int8 - fp32 %.4f of theirs, max |int8 - fp32| %.4f of "
           "max %.3f\n", rms, diff, big);
    assert_true(rms <= 0.08); /* 0.049 here: random weights, small logits; a 5% wrong scale 0.12 */
    assert_true(diff > 0.0); /* it did run at int8 */
    const qkv_loss_options train = {.backward = 1, .train = 1};
    assert_int_equal(qkv_lm_loss(m, ids, ids, B, T, &train, NULL, NULL, &err), QKV_ERR_ARG);
    qkv_lm_free(m);
}

/* Names: int8 parses and prints. */
static void test_precision_names(void **state)
{
    (void)state;
    qkv_precision p = QKV_PRECISION_FP32;
    qkv_error err = {0};
    assert_int_equal(qkv_precision_parse(&p, "int8", &err), QKV_OK);
    assert_int_equal(p, QKV_PRECISION_INT8);
    assert_string_equal(qkv_precision_name(QKV_PRECISION_INT8), "int8");
    assert_int_equal(qkv_precision_parse(&p, "int4", &err), QKV_ERR_ARG);
    assert_non_null(strstr(err.msg, "int8"));
    assert_int_equal(qkv_int8_supported(), gemm_int8_supported());
}

int main(void)
{
    qkv_set_threads(1); /* small products: a second thread costs more than it brings */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quantisation),
        cmocka_unit_test(test_gemm_exact_and_within_bound),
        cmocka_unit_test(test_no_overflow_at_the_largest_width),
        cmocka_unit_test(test_rows_independent),
        cmocka_unit_test(test_checks_catch_planted_bugs),
        cmocka_unit_test(test_model_int8_agrees_with_fp32),
        cmocka_unit_test(test_int8_copy_follows_parameters),
        cmocka_unit_test(test_lm_int8),
        cmocka_unit_test(test_precision_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
