/* SPDX-License-Identifier: MIT */
/* Whole-model parity of the GPU with the CPU (tests/device/check.sh runs it on a machine with
 * an NVIDIA GPU; elsewhere it says there is none and exits 2). Each check runs the same model
 * and data on both devices:
 *   train        an encoder-decoder, 20 Adam steps with dropout, label smoothing and
 *                clipping: every step's loss, token count and gradient norm;
 *   long         sequences past 256 positions (the CPU's flash kernel too), 3 steps;
 *   lm           a language model, 20 steps, then greedy generation;
 *   greedy/beam  decoding with the same weights: the same tokens, close scores;
 *   bf16         products on the tensor cores against float32's logits; a bf16 key-value
 *                cache's greedy decoding;
 *   maps         every attention's weights (the materialised kernel).
 * Prints "ok NAME" or "FAIL NAME: why" per check and "N passed, M failed"; exits 1 on a
 * failure. --quick: a small model and few steps (for compute-sanitizer). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/decoder.h"
#include "qkv.h"

static int passed, failed, quick;

static void report(int good, const char *name, const char *why)
{
    if (good) {
        passed++;
        printf("ok   %s\n", name);
    } else {
        failed++;
        printf("FAIL %s: %s\n", name, why);
    }
    fflush(stdout);
}

/* max |a - b| / (max |b| + tiny) over n values, NaN anywhere giving infinity */
static double rel_diff(const float *a, const float *b, size_t n)
{
    double d = 0.0, m = 1e-30;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i]) || !isfinite(b[i])) return INFINITY;
        const double e = fabs((double)a[i] - b[i]);
        d = e > d ? e : d;
        m = fabs(b[i]) > m ? fabs(b[i]) : m;
    }
    return d / m;
}

static qkv_transformer_config seq2seq_config(int max_len)
{
    qkv_transformer_config c = qkv_transformer_default_config();
    c.src_vocab = c.tgt_vocab = 97, c.d_model = quick ? 32 : 128, c.heads = 4;
    c.ffn = quick ? 64 : 256, c.enc_layers = c.dec_layers = 2, c.max_len = max_len;
    c.dropout = 0.1f, c.bias = 1;
    return c;
}

/* Both models from one seed; the second moved to the GPU. 0, or -1 after reporting. */
static int make_pair(qkv_transformer **cpu, qkv_transformer **gpu, int max_len, const char *name)
{
    const qkv_transformer_config c = seq2seq_config(max_len);
    qkv_error err = {0};
    *cpu = *gpu = NULL;
    if (qkv_transformer_create(cpu, &c, 11, &err) || qkv_transformer_create(gpu, &c, 11, &err) ||
        qkv_transformer_set_device(*gpu, QKV_DEVICE_CUDA, &err)) {
        report(0, name, err.msg);
        qkv_transformer_free(*cpu), qkv_transformer_free(*gpu);
        return -1;
    }
    return 0;
}

typedef struct {
    int B, Ts, Tt;
    int *src, *valid, *tin, *tout;
    qkv_batch b;
} batch;

static void batch_make(batch *x, int B, int Ts, int Tt, int V, uint64_t seed)
{
    x->B = B, x->Ts = Ts, x->Tt = Tt;
    x->src = malloc((size_t)B * Ts * sizeof(int)), x->valid = malloc((size_t)B * sizeof(int));
    x->tin = malloc((size_t)B * Tt * sizeof(int)), x->tout = malloc((size_t)B * Tt * sizeof(int));
    if (!x->src || !x->valid || !x->tin || !x->tout) abort();
    for (int i = 0; i < B * Ts; i++)
        x->src[i] = QKV_N_RESERVED + (int)(qkv_random_u32(seed, (uint64_t)i) % (V - 4));
    for (int b = 0; b < B; b++) {
        x->valid[b] = Ts - b % (Ts / 2 + 1);
        const int len = Tt - 1 - b % (Tt / 2);
        for (int t = 0; t < Tt; t++) {
            const int tok = QKV_N_RESERVED + (int)(qkv_random_u32(seed + 1, (uint64_t)(b * Tt + t)) %
                                                   (V - 4));
            x->tout[b * Tt + t] = t < len ? tok : t == len ? QKV_EOS : QKV_PAD;
            x->tin[b * Tt + t] = t == 0 ? QKV_BOS : x->tout[b * Tt + t - 1];
        }
    }
    x->b = (qkv_batch){B, Ts, Tt, x->src, x->valid, x->tin, x->tout};
}

static void batch_free(batch *x) { free(x->src), free(x->valid), free(x->tin), free(x->tout); }

/* `steps` Adam steps on both: each step's loss within tol (relative), the tokens counted
 * equal, and the gradient norms within 1% for the first 3 steps. Two runs of training drift
 * apart from the first rounding difference on, about tenfold every few steps and faster in
 * the gradients than in the loss (run over the CUDA stand-in, where only the order of the
 * sums differs, the norms are 10% apart by step 15 while the losses stay within 1e-4): the
 * later norms are only required within 25%. A wrong kernel is off by far more, and at once. */
static void train_both(qkv_transformer *cpu, qkv_transformer *gpu, const batch *data, int n_data,
                       int steps, double tol, const char *name)
{
    const size_t n = qkv_transformer_num_params(cpu);
    qkv_adam oc, og;
    qkv_error err = {0};
    char why[600] = "";
    double worst = 0.0, worst_norm = 0.0;
    int bad = 0;
    /* eps 1e-6, not 1e-9: Adam divides by the root of v, and with a tiny eps a gradient that is
     * 0 up to rounding (a key bias: softmax ignores a shift of all scores) becomes a step of
     * the full rate either way, which makes the two runs drift apart by chance */
    if (qkv_adam_init(&oc, n, 0.9f, 0.98f, 1e-6f, 0.01f, &err) ||
        qkv_adam_init(&og, n, 0.9f, 0.98f, 1e-6f, 0.01f, &err)) {
        report(0, name, err.msg);
        return;
    }
    for (int s = 0; s < steps && !bad; s++) {
        const qkv_step_options o = {3e-4f, 1.0f, 0.0f, 0.1f, 300u + (uint64_t)s, 0, NULL, 0};
        qkv_step_result rc, rg;
        const qkv_batch *b = &data[s % n_data].b;
        if (qkv_transformer_train_step(cpu, &oc, b, &o, &rc, &err) ||
            qkv_transformer_train_step(gpu, &og, b, &o, &rg, &err)) {
            snprintf(why, sizeof why, "step %d: %s", s, err.msg);
            bad = 1;
            break;
        }
        const double d = fabs(rg.loss - rc.loss) / fabs(rc.loss);
        const double dn = fabs(rg.grad_norm - rc.grad_norm) / rc.grad_norm;
        worst = d > worst ? d : worst, worst_norm = dn > worst_norm ? dn : worst_norm;
        if (!(d <= tol) || rc.tokens != rg.tokens || !(dn <= (s < 3 ? 0.01 : 0.25))) {
            snprintf(why, sizeof why, "step %d: loss %.7g on the GPU, %.7g on the CPU; tokens %d "
                     "and %d; gradient norm %.6g and %.6g", s, rg.loss, rc.loss, rg.tokens,
                     rc.tokens, rg.grad_norm, rc.grad_norm);
            bad = 1;
        }
    }
    report(!bad, name, why);
    if (!bad)
        printf("     (largest relative differences: losses %.2g, gradient norms %.2g)\n", worst,
               worst_norm);
    qkv_adam_free(&oc), qkv_adam_free(&og);
}

static void check_training(void)
{
    qkv_transformer *cpu, *gpu;
    if (make_pair(&cpu, &gpu, 64, "train: 20 steps")) return;
    batch data[4];
    for (int i = 0; i < 4; i++) batch_make(&data[i], quick ? 4 : 16, 20, 18, 97, 70 + (uint64_t)i);
    train_both(cpu, gpu, data, 4, quick ? 2 : 20, 1e-3, "train: 20 steps, losses and norms");
    for (int i = 0; i < 4; i++) batch_free(&data[i]);
    qkv_transformer_free(cpu), qkv_transformer_free(gpu);
}

static void check_long(void)
{
    qkv_transformer *cpu, *gpu;
    if (quick || make_pair(&cpu, &gpu, 512, "long: 300 positions")) return;
    batch data;
    batch_make(&data, 2, 300, 290, 97, 90);
    train_both(cpu, gpu, &data, 1, 3, 1e-4, "long: 300 positions, 3 steps (flash on both)");
    batch_free(&data);
    qkv_transformer_free(cpu), qkv_transformer_free(gpu);
}

/* The GPU model gets the CPU model's parameters: decoding then reads the same weights. */
static void same_weights(qkv_transformer *cpu, qkv_transformer *gpu)
{
    memcpy(qkv_transformer_params(gpu), qkv_transformer_params(cpu),
           qkv_transformer_num_params(cpu) * sizeof(float));
}

static void check_decoding(void)
{
    qkv_transformer *cpu, *gpu;
    if (make_pair(&cpu, &gpu, 64, "decoding")) return;
    batch data[2], test;
    for (int i = 0; i < 2; i++) batch_make(&data[i], 16, 20, 18, 97, 80 + (uint64_t)i);
    train_both(cpu, gpu, data, 2, quick ? 1 : 10, 1e-3, "decoding: 10 steps first");
    same_weights(cpu, gpu);
    const int B = quick ? 4 : 32, L = 24;
    batch_make(&test, B, 20, 2, 97, 5);
    int *oc = calloc((size_t)B * L, sizeof(int)), *og = calloc((size_t)B * L, sizeof(int));
    int lc[64], lg[64], same = 0;
    qkv_error err = {0};
    char why[600];
    if (qkv_transformer_greedy(cpu, test.src, test.valid, B, 20, L, oc, lc, &err) ||
        qkv_transformer_greedy(gpu, test.src, test.valid, B, 20, L, og, lg, &err)) {
        report(0, "greedy", err.msg);
    } else {
        for (int b = 0; b < B; b++)
            same += lc[b] == lg[b] && !memcmp(oc + b * L, og + b * L, (size_t)lc[b] * sizeof(int));
        snprintf(why, sizeof why, "%d of %d translations identical", same, B);
        report(same == B, "greedy: the same tokens", why);
    }
    enum { K = 4, NB = 2 };
    int *ic = calloc((size_t)B * NB * L, sizeof(int)), *ig = calloc((size_t)B * NB * L, sizeof(int));
    int hc[128], hg[128];
    double sc[128], sg[128];
    const qkv_beam_options bo = {K, NB, L, 0.6f, QKV_BEAM_STOP_BOUND, NULL};
    qkv_beam_results rc = {ic, hc, sc, NULL}, rg = {ig, hg, sg, NULL};
    if (qkv_transformer_beam(cpu, test.src, test.valid, B, 20, &bo, &rc, &err) ||
        qkv_transformer_beam(gpu, test.src, test.valid, B, 20, &bo, &rg, &err)) {
        report(0, "beam", err.msg);
    } else {
        double worst = 0.0;
        same = 0;
        for (int h = 0; h < B * NB; h++) {
            const int eq = hc[h] == hg[h] && !memcmp(ic + h * L, ig + h * L,
                                                     (size_t)(hc[h] > 0 ? hc[h] : 0) * sizeof(int));
            same += eq;
            if (eq && hc[h] >= 0) {
                const double d = fabs(sc[h] - sg[h]) / (1.0 + fabs(sc[h]));
                worst = d > worst ? d : worst;
            }
        }
        snprintf(why, sizeof why, "%d of %d hypotheses identical, scores within %.2g", same,
                 B * NB, worst);
        report(same == B * NB && worst <= 1e-3, "beam 4: the same hypotheses", why);
    }
    /* a bf16 key-value cache on both: the same tokens */
    qkv_transformer_set_kv_cache(cpu, QKV_KV_CACHE_BF16, NULL);
    qkv_transformer_set_kv_cache(gpu, QKV_KV_CACHE_BF16, NULL);
    if (qkv_transformer_greedy(cpu, test.src, test.valid, B, 20, L, oc, lc, &err) ||
        qkv_transformer_greedy(gpu, test.src, test.valid, B, 20, L, og, lg, &err)) {
        report(0, "greedy, bf16 cache", err.msg);
    } else {
        same = 0;
        for (int b = 0; b < B; b++)
            same += lc[b] == lg[b] && !memcmp(oc + b * L, og + b * L, (size_t)lc[b] * sizeof(int));
        snprintf(why, sizeof why, "%d of %d translations identical", same, B);
        report(same == B, "greedy, bf16 key-value cache: the same tokens", why);
    }
    qkv_transformer_set_kv_cache(gpu, QKV_KV_CACHE_AUTO, NULL);
    /* every attention's weights, and the logits beside them */
    const int Ts = 20, Tt = 12, H = 4;
    float *lgc = calloc((size_t)Tt * 97, 4), *lgg = calloc((size_t)Tt * 97, 4);
    float *w[6];
    const size_t wn[3] = {2 * (size_t)H * Ts * Ts, 2 * (size_t)H * Tt * Tt, 2 * (size_t)H * Tt * Ts};
    for (int i = 0; i < 6; i++) w[i] = calloc(wn[i % 3], 4);
    if (decoder_attention_weights(cpu, test.src, Ts, data[0].tin, Tt, lgc, w[0], w[1], w[2], &err) ||
        decoder_attention_weights(gpu, test.src, Ts, data[0].tin, Tt, lgg, w[3], w[4], w[5], &err)) {
        report(0, "attention maps", err.msg);
    } else {
        const double d = fmax(rel_diff(lgg, lgc, (size_t)Tt * 97),
                              fmax(rel_diff(w[3], w[0], wn[0]),
                                   fmax(rel_diff(w[4], w[1], wn[1]), rel_diff(w[5], w[2], wn[2]))));
        snprintf(why, sizeof why, "largest relative difference %.2g", d);
        report(d <= 1e-4, "attention maps and logits (materialised kernel)", why);
    }
    /* bf16 products against float32 */
    batch tf;
    batch_make(&tf, 8, 20, 18, 97, 6);
    float *fc = calloc((size_t)8 * 18 * 97, 4), *fg = calloc((size_t)8 * 18 * 97, 4);
    if (qkv_transformer_set_precision(gpu, QKV_PRECISION_BF16, &err) ||
        qkv_transformer_logits(cpu, &tf.b, fc, &err) || qkv_transformer_logits(gpu, &tf.b, fg, &err)) {
        report(0, "bf16", err.msg);
    } else {
        const double d = rel_diff(fg, fc, (size_t)8 * 18 * 97);
        snprintf(why, sizeof why, "logits within %.2g of float32's (relative to the largest)", d);
        /* both operands of every product rounded (2^-8 each), through four blocks */
        report(d <= 0.1, "bf16 tensor-core products", why);
    }
    free(fc), free(fg), free(lgc), free(lgg), free(oc), free(og), free(ic), free(ig);
    for (int i = 0; i < 6; i++) free(w[i]);
    batch_free(&tf), batch_free(&test), batch_free(&data[0]), batch_free(&data[1]);
    qkv_transformer_free(cpu), qkv_transformer_free(gpu);
}

static void check_language_model(void)
{
    qkv_lm_config c = qkv_lm_default_config();
    c.vocab = 61, c.d_model = quick ? 32 : 128, c.heads = 4, c.ffn = quick ? 64 : 256;
    c.layers = 2, c.max_len = 64, c.dropout = 0.1f;
    qkv_lm *cpu = NULL, *gpu = NULL;
    qkv_error err = {0};
    if (qkv_lm_create(&cpu, &c, 5, &err) || qkv_lm_create(&gpu, &c, 5, &err) ||
        qkv_lm_set_device(gpu, QKV_DEVICE_CUDA, &err)) {
        report(0, "lm", err.msg);
        qkv_lm_free(cpu), qkv_lm_free(gpu);
        return;
    }
    enum { B = 8, T = 48 };
    int ids[B * T], targets[B * T];
    qkv_adam oc, og;
    const size_t n = qkv_lm_num_params(cpu);
    qkv_adam_init(&oc, n, 0.9f, 0.98f, 1e-9f, 0.0f, NULL);
    qkv_adam_init(&og, n, 0.9f, 0.98f, 1e-9f, 0.0f, NULL);
    char why[600] = "";
    const int steps = quick ? 2 : 20;
    for (int s = 0; s < steps && !why[0]; s++) {
        for (int i = 0; i < B * T; i++)
            ids[i] = QKV_N_RESERVED + (int)(qkv_random_u32(500 + (uint64_t)s, (uint64_t)i) % 57);
        for (int i = 0; i < B * T; i++) targets[i] = i % T == T - 1 ? QKV_PAD : ids[i + 1];
        const qkv_step_options o = {1e-3f, 1.0f, 0.0f, 0.0f, 900u + (uint64_t)s, 0, NULL, 0};
        qkv_step_result rc, rg;
        if (qkv_lm_train_step(cpu, &oc, ids, targets, B, T, &o, &rc, &err) ||
            qkv_lm_train_step(gpu, &og, ids, targets, B, T, &o, &rg, &err))
            snprintf(why, sizeof why, "step %d: %s", s, err.msg);
        else if (!(fabs(rg.loss - rc.loss) <= 2e-3 * fabs(rc.loss)))
            snprintf(why, sizeof why, "step %d: loss %.7g on the GPU, %.7g on the CPU", s, rg.loss,
                     rc.loss);
    }
    report(!why[0], "lm: 20 steps, losses", why[0] ? why : "");
    memcpy(qkv_lm_params(gpu), qkv_lm_params(cpu), n * sizeof(float));
    const int prompt[4] = {5, 6, 7, 8};
    int out_c[32], out_g[32], n_c = 0, n_g = 0;
    const qkv_lm_generation g = {32, {0.0f, 0, 1.0f}, 1, NULL, NULL, 0};
    if (qkv_lm_generate(cpu, prompt, 4, out_c, &n_c, &g, &err) ||
        qkv_lm_generate(gpu, prompt, 4, out_g, &n_g, &g, &err))
        report(0, "lm: greedy generation", err.msg);
    else
        report(n_c == n_g && !memcmp(out_c, out_g, (size_t)n_c * sizeof(int)),
               "lm: greedy generation, the same tokens", "the tokens differ");
    qkv_adam_free(&oc), qkv_adam_free(&og);
    qkv_lm_free(cpu), qkv_lm_free(gpu);
}

int main(int argc, char **argv)
{
    quick = argc > 1 && !strcmp(argv[1], "--quick");
    qkv_error err = {0};
    if (qkv_device_check(QKV_DEVICE_CUDA, &err)) {
        printf("no GPU to check: %s\n0 passed, 0 failed\n", err.msg);
        return 2;
    }
    check_training();
    check_long();
    check_decoding();
    check_language_model();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
