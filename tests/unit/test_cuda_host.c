/* SPDX-License-Identifier: MIT */
/* The CUDA device's host side, where there is no GPU: backend/cuda.c, compiled against the
 * toolkit's headers, over the stand-in of tests/cuda (shim.h), whose device memory the host
 * cannot touch and whose kernels and cuBLAS products are the CPU's. So this runs every line
 * of the CUDA table and of the models' device paths except the kernels themselves (which
 * tests/device/check.sh runs on a GPU), and checks:
 *   - models on the device train, decode and draw attention maps as on the CPU;
 *   - every pointer a kernel gets is device memory and every transfer goes the way it says
 *     (the stand-in counts misuses; host code that touched device memory would crash);
 *   - the memory plan: what lives on the device, of which size, and that steps allocate
 *     nothing and a freed model leaves nothing;
 *   - the transfer schedule: what goes up and down per training step and decoding step;
 *   - options and refusals: device names, no driver, no GPU, int8, linear attention, a
 *     decoder made before the move;
 *   - failures: every cudaMalloc, and spread samples of launches, cuBLAS calls and copies,
 *     made to fail one at a time: each is reported (QKV_ERR_NOMEM or QKV_ERR_DEVICE) and
 *     nothing leaks. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/decoder.h"
#include "models/language_model_internal.h"
#include "models/transformer_internal.h"
#include "shim.h"
#include "test_util.h"

enum { VOCAB = 13, B = 3, T = 7, MAX_LEN = 16, C = 16, HEADS = 2, FFN = 24 };

static qkv_transformer *seq2seq(float dropout)
{
    qkv_transformer_config c = qkv_transformer_default_config();
    c.src_vocab = c.tgt_vocab = VOCAB, c.d_model = C, c.heads = HEADS, c.ffn = FFN;
    c.max_len = MAX_LEN, c.enc_layers = c.dec_layers = 2, c.dropout = dropout, c.bias = 1;
    qkv_transformer *m;
    assert_int_equal(qkv_transformer_create(&m, &c, 7, NULL), QKV_OK);
    return m;
}

static qkv_lm *language_model(int linear)
{
    qkv_lm_config c = qkv_lm_default_config();
    c.vocab = VOCAB, c.d_model = C, c.heads = HEADS, c.ffn = FFN, c.layers = 2;
    c.max_len = MAX_LEN, c.dropout = 0.1f;
    if (linear) c.attention = QKV_ATTENTION_LINEAR;
    qkv_lm *m;
    assert_int_equal(qkv_lm_create(&m, &c, 5, NULL), QKV_OK);
    return m;
}

typedef struct {
    int src[B * T], valid[B], tgt_in[B * T], tgt_out[B * T];
    qkv_batch b;
} batch;

static void make_batch(batch *x, uint64_t seed)
{
    const int span = VOCAB - QKV_N_RESERVED;
    for (int i = 0; i < B * T; i++) {
        x->src[i] = QKV_N_RESERVED + (int)(qkv_random_u32(seed, (uint64_t)i) % span);
        x->tgt_out[i] = QKV_N_RESERVED + (int)(qkv_random_u32(seed + 1, (uint64_t)i) % span);
        x->tgt_in[i] = i % T ? x->tgt_out[i - 1] : QKV_BOS;
    }
    for (int b = 0; b < B; b++) x->valid[b] = T - b, x->tgt_out[b * T + T - 1] = QKV_EOS;
    x->tgt_out[T - 2] = QKV_PAD;
    x->b = (qkv_batch){B, T, T, x->src, x->valid, x->tgt_in, x->tgt_out};
}

static qkv_step_options step_options(int step)
{
    qkv_step_options o = {3e-3f, 1.0f, 0.0f, 0.1f, 500u + (uint64_t)step, 0, NULL, 0};
    return o;
}

static void to_device(qkv_transformer *m)
{
    qkv_error err = {0};
    if (qkv_transformer_set_device(m, QKV_DEVICE_CUDA, &err)) fail_msg("%s", err.msg);
}

/* Fresh counts and no faults for each test; the misuse count must stay 0 throughout, and a
 * test frees what it made (counted from what an earlier failed test may have left). */
static int live_before;

static int setup(void **state)
{
    (void)state;
    shim_reset();
    live_before = shim.live;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    assert_int_equal(shim.misuse, 0);
    assert_int_equal(shim.live, live_before);
    return 0;
}

static void expect_error(qkv_status got, qkv_status want, const qkv_error *err, const char *part)
{
    if (got != want) fail_msg("status %d, expected %d (%s)", got, want, err->msg);
    if (!strstr(err->msg, part)) fail_msg("message \"%s\" lacks \"%s\"", err->msg, part);
}

/* ---- options and refusals ------------------------------------------------------------------ */

static void test_device_names(void **state)
{
    (void)state;
    qkv_device d;
    qkv_error err = {0};
    assert_int_equal(qkv_device_parse(&d, "cuda", &err), QKV_OK);
    assert_int_equal(d, QKV_DEVICE_CUDA);
    assert_int_equal(qkv_device_parse(&d, "cpu", &err), QKV_OK);
    assert_int_equal(d, QKV_DEVICE_CPU);
    expect_error(qkv_device_parse(&d, "gpu", &err), QKV_ERR_ARG, &err, "(cpu or cuda)");
    assert_string_equal(qkv_device_name(QKV_DEVICE_CUDA), "cuda");
    assert_string_equal(qkv_device_name(QKV_DEVICE_CPU), "cpu");
    assert_int_equal(qkv_device_check(QKV_DEVICE_CUDA, &err), QKV_OK);
    assert_int_equal(qkv_device_check(QKV_DEVICE_CPU, &err), QKV_OK);
}

/* No driver, no GPU, no cuBLAS: the model stays on the CPU, whole, and nothing is left on the
 * device. */
static void test_no_gpu(void **state)
{
    (void)state;
    const struct {
        cudaError_t device;
        int blas;
        const char *says;
    } cases[] = {{cudaErrorInsufficientDriver, 0, "no NVIDIA driver"},
                 {cudaErrorNoDevice, 0, "no usable GPU"},
                 {cudaSuccess, 1, "cuBLAS does not start"}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        shim_reset();
        shim.device_error = cases[i].device, shim.fail_blas_create = cases[i].blas;
        qkv_error err = {0};
        expect_error(qkv_device_check(QKV_DEVICE_CUDA, &err), QKV_ERR_ARG, &err, cases[i].says);
        qkv_transformer *m = seq2seq(0.0f);
        expect_error(qkv_transformer_set_device(m, QKV_DEVICE_CUDA, &err), QKV_ERR_ARG, &err,
                     cases[i].says);
        assert_int_equal(qkv_transformer_get_device(m), QKV_DEVICE_CPU);
        assert_int_equal(shim.live, live_before);
        batch x;
        make_batch(&x, 1);
        double loss;
        assert_int_equal(qkv_transformer_loss(m, &x.b, NULL, &loss, NULL, &err), QKV_OK);
        assert_true(isfinite(loss));
        qkv_transformer_free(m);
    }
    shim_reset();
}

static void test_refusals(void **state)
{
    (void)state;
    qkv_error err = {0};
    qkv_lm *linear = language_model(1);
    expect_error(qkv_lm_set_device(linear, QKV_DEVICE_CUDA, &err), QKV_ERR_ARG, &err,
                 "linear attention runs on the CPU only");
    assert_int_equal(qkv_lm_get_device(linear), QKV_DEVICE_CPU);
    qkv_lm_free(linear);

    qkv_transformer *m = seq2seq(0.0f);
    if (qkv_int8_supported()) { /* int8 first, then the move: refused, the model as it was */
        assert_int_equal(qkv_transformer_set_precision(m, QKV_PRECISION_INT8, &err), QKV_OK);
        expect_error(qkv_transformer_set_device(m, QKV_DEVICE_CUDA, &err), QKV_ERR_ARG, &err,
                     "int8 precision runs on the CPU only");
        assert_int_equal(qkv_transformer_get_device(m), QKV_DEVICE_CPU);
        assert_int_equal(qkv_transformer_set_precision(m, QKV_PRECISION_FP32, &err), QKV_OK);
    }
    to_device(m);
    expect_error(qkv_transformer_set_precision(m, QKV_PRECISION_INT8, &err), QKV_ERR_ARG, &err,
                 "int8 precision runs on the CPU only");
    /* a decoder made on one side is refused on the other */
    decoder *d;
    assert_int_equal(decoder_create_transformer(&d, m, 2, 0, 2, 0, &err), QKV_OK);
    assert_int_equal(qkv_transformer_set_device(m, QKV_DEVICE_CPU, &err), QKV_OK);
    const int src[T] = {4, 5, 6, 7, 8, 9, 10}, valid = T;
    expect_error(decoder_encode(d, src, &valid, 1, T, NULL, &err), QKV_ERR_ARG, &err,
                 "moved to cpu after this decoder was made");
    decoder_free(d);
    qkv_transformer_free(m);
}

/* ---- the same results as the CPU -------------------------------------------------------- */

/* The stand-in's products sum in another order than OpenBLAS: close, not equal. */
#define CLOSE 2e-4f

/* Tensor by tensor, but for the attention's key biases: softmax ignores what a key bias adds
 * to every score of a query, so their gradient is 0 up to rounding, and Adam, dividing by its
 * root mean square, turns that noise into steps of the full learning rate either way. */
static void check_params_close(qkv_transformer *a, qkv_transformer *b, const char *what)
{
    const float *pa = qkv_transformer_params(a), *pb = qkv_transformer_params(b);
    for (int i = 0; i < qkv_transformer_num_tensors(a); i++) {
        const qkv_param_info t = qkv_transformer_tensor(a, i);
        if (strstr(t.name, ".b_k")) continue;
        char name[160];
        snprintf(name, sizeof name, "%s: %s", what, t.name);
        tu_check_close(name, pb + t.offset, pa + t.offset, t.numel, CLOSE, CLOSE);
    }
}

/* Losses within tol relative (float32: 1e-4; bf16 against float32: 1e-2). */
static void train_both(qkv_transformer *cpu, qkv_transformer *gpu, int steps, double tol)
{
    const size_t n = qkv_transformer_num_params(cpu);
    qkv_adam oc, og;
    assert_int_equal(qkv_adam_init(&oc, n, 0.9f, 0.98f, 1e-9f, 0.01f, NULL), QKV_OK);
    assert_int_equal(qkv_adam_init(&og, n, 0.9f, 0.98f, 1e-9f, 0.01f, NULL), QKV_OK);
    for (int s = 0; s < steps; s++) {
        batch x;
        make_batch(&x, 20 + (uint64_t)s);
        const qkv_step_options o = step_options(s);
        qkv_step_result rc, rg;
        qkv_error err = {0};
        assert_int_equal(qkv_transformer_train_step(cpu, &oc, &x.b, &o, &rc, &err), QKV_OK);
        if (qkv_transformer_train_step(gpu, &og, &x.b, &o, &rg, &err)) fail_msg("%s", err.msg);
        assert_int_equal(rc.tokens, rg.tokens);
        if (fabs(rc.loss - rg.loss) > tol * fabs(rc.loss) || !isfinite(rg.loss))
            fail_msg("step %d: loss %.9g on the device, %.9g on the CPU", s, rg.loss, rc.loss);
        if (fabs(rc.grad_norm - rg.grad_norm) > 10 * tol * rc.grad_norm)
            fail_msg("step %d: gradient norm %.9g vs %.9g", s, rg.grad_norm, rc.grad_norm);
    }
    qkv_adam_free(&oc), qkv_adam_free(&og);
}

/* Training with dropout, label smoothing and clipping: the same losses, gradient norms and
 * parameters; the parameters come back when the host asks for them. */
static void test_training_matches_cpu(void **state)
{
    (void)state;
    qkv_transformer *cpu = seq2seq(0.1f), *gpu = seq2seq(0.1f);
    to_device(gpu);
    /* one backward pass: the gradients, every one */
    batch x;
    make_batch(&x, 19);
    const qkv_loss_options lo = {1, 0.0f, 0.1f, 1, 77, 0, NULL, NULL};
    const size_t n = qkv_transformer_num_params(cpu);
    qkv_error err = {0};
    memset(qkv_transformer_grads(cpu), 0, n * sizeof(float));
    assert_int_equal(qkv_transformer_loss(cpu, &x.b, &lo, NULL, NULL, &err), QKV_OK);
    if (qkv_transformer_loss(gpu, &x.b, &lo, NULL, NULL, &err)) fail_msg("%s", err.msg);
    float *gc = tu_copy(qkv_transformer_grads(cpu), n), *gg = tu_copy(qkv_transformer_grads(gpu), n);
    tu_check_grad("gradients", gg, gc, n, 1e-5f);
    free(gc), free(gg);
    train_both(cpu, gpu, 5, 1e-4);
    check_params_close(cpu, gpu, "parameters after 5 steps");
    /* the host writes the parameters: they go up before the next pass */
    float *pc = qkv_transformer_params(cpu), *pg = qkv_transformer_params(gpu);
    for (size_t i = 0; i < n; i += 7) pc[i] *= 0.5f, pg[i] = pc[i];
    train_both(cpu, gpu, 2, 1e-4);
    check_params_close(cpu, gpu, "parameters after a write and 2 steps");
    qkv_transformer_free(cpu), qkv_transformer_free(gpu);
}

static void test_language_model_matches_cpu(void **state)
{
    (void)state;
    qkv_lm *cpu = language_model(0), *gpu = language_model(0);
    qkv_error err = {0};
    if (qkv_lm_set_device(gpu, QKV_DEVICE_CUDA, &err)) fail_msg("%s", err.msg);
    const size_t n = qkv_lm_num_params(cpu);
    qkv_adam oc, og;
    assert_int_equal(qkv_adam_init(&oc, n, 0.9f, 0.98f, 1e-9f, 0.0f, NULL), QKV_OK);
    assert_int_equal(qkv_adam_init(&og, n, 0.9f, 0.98f, 1e-9f, 0.0f, NULL), QKV_OK);
    int ids[B * T], targets[B * T];
    for (int s = 0; s < 3; s++) {
        for (int i = 0; i < B * T; i++)
            ids[i] = QKV_N_RESERVED + (int)(qkv_random_u32(40 + (uint64_t)s, (uint64_t)i) % 9);
        for (int i = 0; i < B * T; i++) targets[i] = i % T == T - 1 ? QKV_PAD : ids[i + 1];
        const qkv_step_options o = step_options(s);
        qkv_step_result rc, rg;
        assert_int_equal(qkv_lm_train_step(cpu, &oc, ids, targets, B, T, &o, &rc, &err), QKV_OK);
        if (qkv_lm_train_step(gpu, &og, ids, targets, B, T, &o, &rg, &err))
            fail_msg("%s", err.msg);
        if (fabs(rc.loss - rg.loss) > 1e-4 * fabs(rc.loss))
            fail_msg("step %d: loss %.9g vs %.9g", s, rg.loss, rc.loss);
    }
    /* generation: greedy (temperature 0) gives the same tokens */
    const int prompt[3] = {4, 5, 6};
    int out_c[8], out_g[8], n_c, n_g;
    const qkv_lm_generation g = {8, {0.0f, 0, 1.0f}, 1, NULL, NULL, 0};
    assert_int_equal(qkv_lm_generate(cpu, prompt, 3, out_c, &n_c, &g, &err), QKV_OK);
    if (qkv_lm_generate(gpu, prompt, 3, out_g, &n_g, &g, &err)) fail_msg("%s", err.msg);
    assert_int_equal(n_c, n_g);
    assert_memory_equal(out_c, out_g, (size_t)n_c * sizeof *out_c);
    qkv_adam_free(&oc), qkv_adam_free(&og);
    qkv_lm_free(cpu), qkv_lm_free(gpu);
}

/* Greedy and beam search and the attention maps: the same tokens, close scores and weights. */
static void test_decoding_matches_cpu(void **state)
{
    (void)state;
    qkv_transformer *cpu = seq2seq(0.0f), *gpu = seq2seq(0.0f);
    to_device(gpu);
    batch x;
    make_batch(&x, 3);
    qkv_error err = {0};
    int out_c[B * MAX_LEN], out_g[B * MAX_LEN], len_c[B], len_g[B];
    assert_int_equal(qkv_transformer_greedy(cpu, x.src, x.valid, B, T, 10, out_c, len_c, &err),
                     QKV_OK);
    if (qkv_transformer_greedy(gpu, x.src, x.valid, B, T, 10, out_g, len_g, &err))
        fail_msg("%s", err.msg);
    assert_memory_equal(len_c, len_g, sizeof len_c);
    for (int b = 0; b < B; b++)
        assert_memory_equal(out_c + b * 10, out_g + b * 10, (size_t)len_c[b] * sizeof(int));

    enum { K = 3, NB = 2, ML = 9 };
    int ids_c[B * NB * ML], ids_g[B * NB * ML], hl_c[B * NB], hl_g[B * NB];
    double sc_c[B * NB], sc_g[B * NB];
    const qkv_beam_options bo = {K, NB, ML, 0.6f, QKV_BEAM_STOP_BOUND, NULL};
    qkv_beam_results rc = {ids_c, hl_c, sc_c, NULL}, rg = {ids_g, hl_g, sc_g, NULL};
    assert_int_equal(qkv_transformer_beam(cpu, x.src, x.valid, B, T, &bo, &rc, &err), QKV_OK);
    if (qkv_transformer_beam(gpu, x.src, x.valid, B, T, &bo, &rg, &err)) fail_msg("%s", err.msg);
    assert_memory_equal(hl_c, hl_g, sizeof hl_c);
    for (int h = 0; h < B * NB; h++) {
        assert_memory_equal(ids_c + h * ML, ids_g + h * ML, (size_t)hl_c[h] * sizeof(int));
        if (fabs(sc_c[h] - sc_g[h]) > 1e-4 * (1.0 + fabs(sc_c[h])))
            fail_msg("hypothesis %d: score %.9g vs %.9g", h, sc_g[h], sc_c[h]);
    }

    /* teacher-forced logits, and every attention's weights (the materialised kernel) */
    const int Tt = 5;
    float *lc = tu_zeros((size_t)Tt * VOCAB), *lg = tu_zeros((size_t)Tt * VOCAB);
    float *ec = tu_zeros(2 * HEADS * T * T), *eg = tu_zeros(2 * HEADS * T * T);
    float *sc = tu_zeros(2 * HEADS * Tt * Tt), *sg = tu_zeros(2 * HEADS * Tt * Tt);
    float *cc = tu_zeros(2 * HEADS * Tt * T), *cg = tu_zeros(2 * HEADS * Tt * T);
    assert_int_equal(decoder_attention_weights(cpu, x.src, T, x.tgt_in, Tt, lc, ec, sc, cc, &err),
                     QKV_OK);
    if (decoder_attention_weights(gpu, x.src, T, x.tgt_in, Tt, lg, eg, sg, cg, &err))
        fail_msg("%s", err.msg);
    tu_check_close("logits", lg, lc, (size_t)Tt * VOCAB, CLOSE, CLOSE);
    tu_check_close("encoder weights", eg, ec, 2 * HEADS * T * T, CLOSE, CLOSE);
    tu_check_close("decoder weights", sg, sc, 2 * HEADS * Tt * Tt, CLOSE, CLOSE);
    tu_check_close("cross weights", cg, cc, 2 * HEADS * Tt * T, CLOSE, CLOSE);
    free(lc), free(lg), free(ec), free(eg), free(sc), free(sg), free(cc), free(cg);
    qkv_transformer_free(cpu), qkv_transformer_free(gpu);
}

/* bf16 on the device needs no AVX512-BF16: products of bf16 operands (the stand-in rounds
 * as cuBLAS reads them), close to float32's. */
static void test_bf16(void **state)
{
    (void)state;
    qkv_transformer *cpu = seq2seq(0.0f), *gpu = seq2seq(0.0f);
    to_device(gpu);
    qkv_error err = {0};
    if (qkv_transformer_set_precision(gpu, QKV_PRECISION_BF16, &err)) fail_msg("%s", err.msg);
    batch x;
    make_batch(&x, 4);
    const size_t n = (size_t)B * T * VOCAB;
    float *lc = tu_zeros(n), *lg = tu_zeros(n);
    assert_int_equal(qkv_transformer_logits(cpu, &x.b, lc, &err), QKV_OK);
    if (qkv_transformer_logits(gpu, &x.b, lg, &err)) fail_msg("%s", err.msg);
    tu_check_close("bf16 logits", lg, lc, n, 5e-2f, 5e-2f);
    /* a training step at bf16, then decoding reads the bf16 copy made from the new weights */
    train_both(cpu, gpu, 1, 1e-2);
    int out[B * 10], len[B];
    if (qkv_transformer_greedy(gpu, x.src, x.valid, B, T, 10, out, len, &err))
        fail_msg("%s", err.msg);
    free(lc), free(lg);
    qkv_transformer_free(cpu), qkv_transformer_free(gpu);
}

/* ---- the memory plan ------------------------------------------------------------------- */

static size_t rounded(size_t bytes) { return (bytes + 4095) / 4096 * 4096; }

/* The decoding state's one buffer, written out here from its parts (decode_state.c): the
 * self-attention caches (L, rows, T, C) for keys and values, the cross-attention ones
 * (L, sources, Ts, C), a step's vectors (rows, C) x 7, mean and rstd, the FFN's (rows, F) x 2,
 * the weights (rows, H, max(T, Ts)), the logits (rows, V), and the step's ints: tokens, rows,
 * sources, two lengths, and the ancestry (rows, T). */
static size_t decode_state_plan(int L, int R, int Tp, int S, int Ts)
{
    const size_t kv = 2 * (size_t)L * R * Tp * C, cross = 2 * (size_t)L * S * Ts * C;
    const size_t step = 7 * (size_t)R * C + 2 * (size_t)R + 2 * (size_t)R * FFN +
                        (size_t)R * HEADS * (Tp > Ts ? Tp : Ts) + (size_t)R * VOCAB;
    return (kv + cross + step + 5 * (size_t)R + (size_t)R * Tp) * sizeof(float);
}

static void test_memory_plan(void **state)
{
    (void)state;
    qkv_transformer *m = seq2seq(0.1f);
    const size_t n = qkv_transformer_num_params(m);
    to_device(m);
    /* on the device: the parameters and the sinusoidal table, nothing else yet */
    assert_int_equal(shim.live, live_before + 2);
    assert_int_equal(shim_size_of(m->core.params), rounded(n * sizeof(float)));
    assert_int_equal(shim_size_of(m->core.pos_table), rounded((size_t)MAX_LEN * C * 4));
    /* a step adds the gradients, the activations and Adam's two moments */
    qkv_adam opt;
    assert_int_equal(qkv_adam_init(&opt, n, 0.9f, 0.98f, 1e-9f, 0.0f, NULL), QKV_OK);
    batch x;
    make_batch(&x, 5);
    const qkv_step_options o = step_options(0);
    qkv_step_result r;
    qkv_error err = {0};
    if (qkv_transformer_train_step(m, &opt, &x.b, &o, &r, &err)) fail_msg("%s", err.msg);
    assert_int_equal(shim.live, live_before + 6);
    assert_int_equal(shim_size_of(m->core.grads), rounded(n * sizeof(float)));
    assert_int_equal(shim_size_of(m->core.arena), rounded(m->core.arena_cap * sizeof(float)));
    assert_int_equal(shim_size_of(m->core.dev->adam_m), rounded(n * sizeof(float)));
    assert_int_equal(shim_size_of(m->core.dev->adam_v), rounded(n * sizeof(float)));
    /* later steps of the same shape allocate nothing */
    const int mallocs = shim.mallocs;
    for (int s = 1; s < 3; s++)
        if (qkv_transformer_train_step(m, &opt, &x.b, &o, &r, &err)) fail_msg("%s", err.msg);
    assert_int_equal(shim.mallocs, mallocs);
    /* a decoder: its state in one buffer of the plan above; its steps allocate nothing */
    decoder *d;
    const size_t before = shim.live_bytes, plan = decode_state_plan(2, 4, 10, 2, T);
    assert_int_equal(decoder_create_transformer(&d, m, 4, 10, 2, T, &err), QKV_OK);
    assert_int_equal(shim.live, live_before + 7);
    assert_int_equal(shim.live_bytes - before, rounded(plan));
    assert_int_equal(decode_state_floats(&m->dec_dims, 4, 10, 2, T, VOCAB, KV_FP32) * 4, plan);
    assert_int_equal(shim.mallocs, mallocs + 1);
    assert_int_equal(decoder_encode(d, x.src, x.valid, 2, T, NULL, &err), QKV_OK);
    const int enc_mallocs = shim.mallocs; /* the encoder's activations may need a larger arena */
    const int rows[2] = {0, 1}, pos[2] = {0, 0}, src[2] = {0, 1}, tok[2] = {QKV_BOS, QKV_BOS};
    const decoder_rows dr = {2, rows, pos, src, NULL, 0};
    float *logits;
    for (int s = 0; s < 3; s++)
        if (decoder_step(d, &dr, tok, &logits, &err)) fail_msg("%s", err.msg);
    assert_int_equal(shim.mallocs, enc_mallocs);
    decoder_free(d);
    /* bf16: the weights' bf16 copy, n values of 2 bytes */
    assert_int_equal(qkv_transformer_set_precision(m, QKV_PRECISION_BF16, &err), QKV_OK);
    assert_int_equal(shim_size_of(m->core.dev->bf16), rounded(n * 2));
    qkv_adam_free(&opt);
    qkv_transformer_free(m); /* teardown: nothing left */
}

/* ---- the transfer schedule ---------------------------------------------------------------- */

static void test_transfers(void **state)
{
    (void)state;
    qkv_transformer *m = seq2seq(0.1f);
    const size_t n = qkv_transformer_num_params(m), P = n * sizeof(float);
    to_device(m);
    qkv_adam opt;
    assert_int_equal(qkv_adam_init(&opt, n, 0.9f, 0.98f, 1e-9f, 0.0f, NULL), QKV_OK);
    batch x;
    make_batch(&x, 6);
    const size_t ids = (3 * (size_t)B * T + B) * sizeof(int); /* src, valid, tgt_in, tgt_out */
    const qkv_step_options o = step_options(0);
    qkv_step_result r;
    qkv_error err = {0};
    /* the first step: the batch, and Adam's moments from the host's optimizer */
    shim_reset();
    if (qkv_transformer_train_step(m, &opt, &x.b, &o, &r, &err)) fail_msg("%s", err.msg);
    assert_int_equal(shim.uploads, 6);
    assert_int_equal(shim.upload_bytes, ids + 2 * P);
    assert_int_equal(shim.downloads, 0); /* the loss comes back from its own entry */
    /* later steps: the batch alone */
    shim_reset();
    if (qkv_transformer_train_step(m, &opt, &x.b, &o, &r, &err)) fail_msg("%s", err.msg);
    assert_int_equal(shim.uploads, 4);
    assert_int_equal(shim.upload_bytes, ids);
    assert_int_equal(shim.downloads, 0);
    /* the host asks for the parameters: down once, and up again before the next pass */
    shim_reset();
    qkv_transformer_params(m);
    qkv_transformer_params(m);
    assert_int_equal(shim.downloads, 1);
    assert_int_equal(shim.download_bytes, P);
    if (qkv_transformer_train_step(m, &opt, &x.b, &o, &r, &err)) fail_msg("%s", err.msg);
    assert_int_equal(shim.uploads, 4 + 1);
    assert_int_equal(shim.upload_bytes, ids + P);
    /* a checkpoint reads Adam's moments: down once, only after a step changed them */
    shim_reset();
    assert_int_equal(core_adam_to_host(&m->core, &opt, &err), QKV_OK);
    assert_int_equal(core_adam_to_host(&m->core, &opt, &err), QKV_OK);
    assert_int_equal(shim.downloads, 2);
    assert_int_equal(shim.download_bytes, 2 * P);

    /* decoding: a step sends its tokens, rows, sources and lengths up, its logits down */
    decoder *d;
    assert_int_equal(decoder_create_transformer(&d, m, 4, 10, 2, T, &err), QKV_OK);
    shim_reset();
    assert_int_equal(decoder_encode(d, x.src, x.valid, 2, T, NULL, &err), QKV_OK);
    assert_int_equal(shim.uploads, 2); /* the sources and their lengths */
    assert_int_equal(shim.upload_bytes, (2 * (size_t)T + 2) * sizeof(int));
    assert_int_equal(shim.downloads, 0);
    const int rows[2] = {2, 3}, pos[2] = {0, 0}, src[2] = {1, 0}, tok[2] = {QKV_BOS, QKV_BOS};
    const decoder_rows dr = {2, rows, pos, src, NULL, 0};
    float *logits;
    shim_reset();
    if (decoder_step(d, &dr, tok, &logits, &err)) fail_msg("%s", err.msg);
    assert_int_equal(shim.uploads, 5);
    assert_int_equal(shim.upload_bytes, 5 * 2 * sizeof(int));
    assert_int_equal(shim.downloads, 1);
    assert_int_equal(shim.download_bytes, 2 * VOCAB * sizeof(float));
    /* beam search's ancestry goes up packed to the longest row */
    const int pos1[2] = {1, 1}, tok1[2] = {5, 6}, ancestry[2 * 10] = {2, 2, [10] = 2, 3};
    const decoder_rows br = {2, rows, pos1, src, ancestry, 10};
    shim_reset();
    if (decoder_step(d, &br, tok1, &logits, &err)) fail_msg("%s", err.msg);
    assert_int_equal(shim.uploads, 6);
    assert_int_equal(shim.upload_bytes, 5 * 2 * sizeof(int) + 2 * 2 * sizeof(int));
    decoder_free(d);
    qkv_adam_free(&opt);
    qkv_transformer_free(m);
}

/* ---- failures ------------------------------------------------------------------------------ */

/* A model to the device at precision p, two training steps, a greedy decoding: the first
 * failure's status (QKV_OK when none), everything freed. */
static qkv_status scenario(qkv_precision p, qkv_error *err)
{
    qkv_transformer *m = seq2seq(0.1f);
    const size_t n = qkv_transformer_num_params(m);
    qkv_adam opt;
    assert_int_equal(qkv_adam_init(&opt, n, 0.9f, 0.98f, 1e-9f, 0.0f, NULL), QKV_OK);
    batch x;
    make_batch(&x, 8);
    qkv_status st = qkv_transformer_set_device(m, QKV_DEVICE_CUDA, err);
    if (!st) st = qkv_transformer_set_precision(m, p, err);
    for (int s = 0; !st && s < 2; s++) {
        const qkv_step_options o = step_options(s);
        qkv_step_result r;
        st = qkv_transformer_train_step(m, &opt, &x.b, &o, &r, err);
    }
    int out[B * 4], len[B];
    if (!st) st = qkv_transformer_greedy(m, x.src, x.valid, B, T, 4, out, len, err);
    qkv_adam_free(&opt);
    qkv_transformer_free(m);
    return st;
}

typedef enum { MALLOC, LAUNCH, BLAS, COPY } fault;

static int *fault_at(fault f)
{
    return f == MALLOC ? &shim.fail_malloc_at : f == LAUNCH ? &shim.fail_launch_at
           : f == BLAS ? &shim.fail_blas_at : &shim.fail_copy_at;
}

static int fault_count(fault f)
{
    return f == MALLOC ? shim.mallocs : f == LAUNCH ? shim.launches
           : f == BLAS ? shim.blas_calls : shim.copies;
}

/* The scenario at precision p with the k-th call of kind f failing, for every k (up to
 * `samples` of them, spread over the scenario): each run reports a failure of status want
 * (or also, when want2 is not QKV_OK, want2) whose message holds part, and frees everything. */
static void check_faults(fault f, qkv_precision p, qkv_status want, qkv_status want2,
                         const char *part, int samples)
{
    qkv_error err = {0};
    shim_reset();
    assert_int_equal(scenario(p, &err), QKV_OK);
    const int total = fault_count(f);
    assert_true(total > 0);
    const int stride = total > samples ? total / samples : 1;
    for (int k = 1; k <= total; k += stride) {
        shim_reset();
        *fault_at(f) = k;
        memset(&err, 0, sizeof err);
        const qkv_status st = scenario(p, &err);
        if ((st != want && (st != want2 || !want2)) || !strstr(err.msg, part))
            fail_msg("failing call %d of %d: status %d, \"%s\"", k, total, st, err.msg);
        assert_int_equal(shim.live, live_before);
        assert_int_equal(shim.misuse, 0);
    }
    shim_reset();
}

/* every allocation; at bf16 the products' work space too (reported by finish) */
static void test_malloc_failures(void **state)
{
    (void)state;
    check_faults(MALLOC, QKV_PRECISION_FP32, QKV_ERR_NOMEM, QKV_OK, "memory", 1000);
    check_faults(MALLOC, QKV_PRECISION_BF16, QKV_ERR_NOMEM, QKV_ERR_DEVICE, "memory", 1000);
}

static void test_launch_failures(void **state)
{
    (void)state;
    check_faults(LAUNCH, QKV_PRECISION_FP32, QKV_ERR_DEVICE, QKV_OK, "fail", 30);
}

static void test_blas_failures(void **state)
{
    (void)state;
    check_faults(BLAS, QKV_PRECISION_FP32, QKV_ERR_DEVICE, QKV_OK, "cublasSgemm failed", 20);
    check_faults(BLAS, QKV_PRECISION_BF16, QKV_ERR_DEVICE, QKV_OK, "cublasGemmEx (bf16) failed",
                 10);
}

static void test_copy_failures(void **state)
{
    (void)state;
    check_faults(COPY, QKV_PRECISION_FP32, QKV_ERR_DEVICE, QKV_OK, "failed", 20);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_device_names, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_gpu, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refusals, setup, teardown),
        cmocka_unit_test_setup_teardown(test_training_matches_cpu, setup, teardown),
        cmocka_unit_test_setup_teardown(test_language_model_matches_cpu, setup, teardown),
        cmocka_unit_test_setup_teardown(test_decoding_matches_cpu, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bf16, setup, teardown),
        cmocka_unit_test_setup_teardown(test_memory_plan, setup, teardown),
        cmocka_unit_test_setup_teardown(test_transfers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_malloc_failures, setup, teardown),
        cmocka_unit_test_setup_teardown(test_launch_failures, setup, teardown),
        cmocka_unit_test_setup_teardown(test_blas_failures, setup, teardown),
        cmocka_unit_test_setup_teardown(test_copy_failures, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
