/* qkv bench: time the model as a user runs it, and print one JSON line of medians.
 *   train      a full training step (forward, backward, clipping, Adam) on random data
 *   decode     greedy decoding with the KV cache, new tokens per second
 *   attention  scaled dot-product attention forward + backward at length N
 *   sgemm      the BLAS roof on one matrix product, for comparison in the same run
 * bench/bench.py runs these beside the same computations in PyTorch. */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/common.h"

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return 1e3 * (double)t.tv_sec + 1e-6 * (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *x, int n)
{
    qsort(x, (size_t)n, sizeof *x, cmp_double);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

static double peak_rss_mb(void)
{
    struct rusage r;
    getrusage(RUSAGE_SELF, &r);
    return (double)r.ru_maxrss / 1024.0;
}

typedef struct {
    qkv_transformer_config cfg;
    int batch, src_len, tgt_len, steps, warmup, new_tokens, n, m, k, threads;
    int flash, causal; /* attention: the flash kernel; a causal mask */
    uint64_t seed;
} bench_args;

/* Matrix-multiply FLOPs of one forward pass (2 per multiply-add; embeddings are lookups). */
static double forward_flops(const qkv_transformer_config *c, int B, int Ts, int Tt)
{
    const double C = c->d_model, F = c->ffn, Ns = (double)B * Ts, Nt = (double)B * Tt;
    double enc = 8 * Ns * C * C + 4 * B * (double)Ts * Ts * C + 4 * Ns * C * F;
    double dec = 8 * Nt * C * C + 4 * B * (double)Tt * Tt * C            /* self */
                 + 4 * Nt * C * C + 4 * Ns * C * C + 4 * B * (double)Tt * Ts * C /* cross */
                 + 4 * Nt * C * F;
    return c->enc_layers * enc + c->dec_layers * dec + 2 * Nt * C * c->tgt_vocab;
}

static void random_ids(int *ids, size_t n, int vocab, uint64_t seed)
{
    for (size_t i = 0; i < n; i++) ids[i] = 4 + (int)(qkv_random_u32(seed, i) % (uint32_t)(vocab - 4));
}

static int bench_train(const bench_args *a)
{
    const int B = a->batch, Ts = a->src_len, Tt = a->tgt_len;
    qkv_transformer *m = NULL;
    qkv_error err = {0};
    if (qkv_transformer_create(&m, &a->cfg, a->seed, &err)) return fprintf(stderr, "qkv: %s\n", err.msg), 1;
    int *src = malloc((size_t)B * Ts * sizeof *src), *valid = malloc((size_t)B * sizeof *valid);
    int *tin = malloc((size_t)B * Tt * sizeof *tin), *tout = malloc((size_t)B * Tt * sizeof *tout);
    double *ms = malloc((size_t)a->steps * sizeof *ms);
    qkv_adam opt = {0};
    int rc = 1;
    if (!src || !valid || !tin || !tout || !ms ||
        qkv_adam_init(&opt, qkv_transformer_num_params(m), 0.9f, 0.98f, 1e-9f, 0.0f, &err))
        goto done;
    random_ids(src, (size_t)B * Ts, a->cfg.src_vocab, a->seed + 1);
    random_ids(tout, (size_t)B * Tt, a->cfg.tgt_vocab, a->seed + 2);
    for (int b = 0; b < B; b++) {
        valid[b] = Ts;
        tin[(size_t)b * Tt] = QKV_BOS;
        memcpy(tin + (size_t)b * Tt + 1, tout + (size_t)b * Tt, (Tt - 1) * sizeof *tin);
    }
    qkv_batch batch = {B, Ts, Tt, src, valid, tin, tout};
    float *params = qkv_transformer_params(m), *grads = qkv_transformer_grads(m);
    size_t n = qkv_transformer_num_params(m);
    for (int s = -a->warmup; s < a->steps; s++) {
        double t0 = now_ms();
        memset(grads, 0, n * sizeof *grads);
        if (qkv_transformer_loss(m, &batch, 1, 0.0f, 0.0f, 1, (uint64_t)(s + 1000), NULL, NULL,
                                 &err))
            goto done;
        qkv_clip_grad_norm(grads, n, 1.0);
        qkv_adam_update(&opt, params, grads, 1e-4f);
        if (s >= 0) ms[s] = now_ms() - t0;
    }
    double med = median(ms, a->steps), flops = 3 * forward_flops(&a->cfg, B, Ts, Tt);
    printf("{\"bench\": \"train\", \"ms_per_step\": %.3f, \"tokens_per_s\": %.1f, "
           "\"gflops\": %.2f, \"peak_rss_mb\": %.1f, \"params\": %zu, \"threads\": %d, "
           "\"d_model\": %d, \"heads\": %d, \"layers\": %d, \"ffn\": %d, \"vocab\": %d, "
           "\"batch\": %d, \"src_len\": %d, \"tgt_len\": %d, \"steps\": %d}\n",
           med, B * Tt / (med * 1e-3), flops / (med * 1e6), peak_rss_mb(), n, qkv_get_threads(),
           a->cfg.d_model, a->cfg.heads, a->cfg.enc_layers, a->cfg.ffn, a->cfg.tgt_vocab, B, Ts,
           Tt, a->steps);
    rc = 0;
done:
    if (rc && err.msg[0]) fprintf(stderr, "qkv: %s\n", err.msg);
    free(src), free(valid), free(tin), free(tout), free(ms);
    qkv_adam_free(&opt);
    qkv_transformer_free(m);
    return rc;
}

static int bench_decode(const bench_args *a)
{
    const int B = a->batch, Ts = a->src_len, T = a->new_tokens;
    qkv_transformer *m = NULL;
    qkv_error err = {0};
    qkv_transformer_config cfg = a->cfg;
    if (T + 1 > cfg.max_len) cfg.max_len = T + 1;
    if (qkv_transformer_create(&m, &cfg, a->seed, &err)) return fprintf(stderr, "qkv: %s\n", err.msg), 1;
    /* A random model may say <eos> at any step; forbid it so every run decodes T tokens. */
    for (int i = 0; i < qkv_transformer_num_tensors(m); i++) {
        qkv_param_info t = qkv_transformer_tensor(m, i);
        if (!strcmp(t.name, "output.b")) qkv_transformer_params(m)[t.offset + QKV_EOS] = -1e9f;
    }
    int *src = malloc((size_t)B * Ts * sizeof *src), *valid = malloc((size_t)B * sizeof *valid);
    int *out = malloc((size_t)B * T * sizeof *out), *len = malloc((size_t)B * sizeof *len);
    double *ms = malloc((size_t)a->steps * sizeof *ms);
    int rc = 1;
    if (!src || !valid || !out || !len || !ms) goto done;
    random_ids(src, (size_t)B * Ts, cfg.src_vocab, a->seed + 1);
    for (int b = 0; b < B; b++) valid[b] = Ts;
    for (int s = -a->warmup; s < a->steps; s++) {
        double t0 = now_ms();
        if (qkv_transformer_greedy(m, src, valid, B, Ts, T, out, len, &err)) goto done;
        if (s >= 0) ms[s] = now_ms() - t0;
    }
    double med = median(ms, a->steps);
    printf("{\"bench\": \"decode\", \"ms_per_run\": %.3f, \"ms_per_token\": %.4f, "
           "\"tokens_per_s\": %.1f, \"peak_rss_mb\": %.1f, \"threads\": %d, \"d_model\": %d, "
           "\"layers\": %d, \"vocab\": %d, \"batch\": %d, \"src_len\": %d, \"new_tokens\": %d}\n",
           med, med / T, B * T / (med * 1e-3), peak_rss_mb(), qkv_get_threads(), cfg.d_model,
           cfg.dec_layers, cfg.tgt_vocab, B, Ts, T);
    rc = 0;
done:
    if (rc && err.msg[0]) fprintf(stderr, "qkv: %s\n", err.msg);
    free(src), free(valid), free(out), free(len), free(ms);
    qkv_transformer_free(m);
    return rc;
}

static int bench_attention(const bench_args *a)
{
    const int H = a->cfg.heads, d = a->cfg.d_model / a->cfg.heads, N = a->n, B = a->batch;
    /* flash keeps the row log-sum-exp L (B, H, N) where the materialised kernel keeps P */
    const size_t x = (size_t)B * N * H * d, pn = (size_t)B * H * N * (a->flash ? 1 : N);
    const size_t ns = a->flash ? qkv_flash_attention_scratch_floats(B, H, N)
                               : qkv_attention_scratch_floats(B, H, N, N);
    float *Q = malloc(x * 4), *K = malloc(x * 4), *V = malloc(x * 4), *O = malloc(x * 4);
    float *dQ = calloc(x, 4), *dK = calloc(x, 4), *dV = calloc(x, 4), *dO = malloc(x * 4);
    float *P = malloc(pn * 4), *scratch = malloc(ns * 4);
    double *fwd = malloc((size_t)a->steps * sizeof *fwd), *bwd = malloc((size_t)a->steps * sizeof *bwd);
    int rc = 1;
    if (!Q || !K || !V || !O || !dQ || !dK || !dV || !dO || !P || !scratch || !fwd || !bwd) {
        fprintf(stderr, "qkv: out of memory for attention at N = %d (%.1f GiB for the weights)\n",
                N, pn * 4.0 / (1 << 30));
        goto done;
    }
    qkv_fill_normal(Q, x, 0, 1, 1), qkv_fill_normal(K, x, 0, 1, 2);
    qkv_fill_normal(V, x, 0, 1, 3), qkv_fill_normal(dO, x, 0, 1, 4);
    qkv_mask causal = {NULL, 0, a->causal};
    for (int s = -a->warmup; s < a->steps; s++) {
        double t0 = now_ms();
        if (a->flash)
            qkv_flash_attention_forward(O, P, Q, K, V, B, H, N, N, d, d, &causal, 0.0f, 0);
        else
            qkv_attention_forward(O, P, Q, K, V, B, H, N, N, d, d, &causal, 0.0f, 0, scratch);
        double t1 = now_ms();
        if (a->flash)
            qkv_flash_attention_backward(dQ, dK, dV, dO, O, P, Q, K, V, B, H, N, N, d, d,
                                         &causal, 0.0f, 0, scratch);
        else
            qkv_attention_backward(dQ, dK, dV, dO, P, Q, K, V, B, H, N, N, d, d, 0.0f, 0, scratch);
        if (s >= 0) fwd[s] = t1 - t0, bwd[s] = now_ms() - t1;
    }
    double f = median(fwd, a->steps), b = median(bwd, a->steps);
    printf("{\"bench\": \"attention\", \"kernel\": \"%s\", \"causal\": %d, \"n\": %d, "
           "\"heads\": %d, \"head_dim\": %d, \"ms_forward\": %.3f, \"ms_backward\": %.3f, "
           "\"gflops\": %.2f, \"peak_rss_mb\": %.1f, \"threads\": %d}\n",
           a->flash ? "flash" : "materialised", a->causal, N, H, d, f, b,
           4.0 * 3 * B * H * (double)N * N * d / ((f + b) * 1e6), peak_rss_mb(), qkv_get_threads());
    rc = 0;
done:
    free(Q), free(K), free(V), free(O), free(dQ), free(dK), free(dV), free(dO), free(P);
    free(scratch), free(fwd), free(bwd);
    return rc;
}

static int bench_sgemm(const bench_args *a)
{
    const int M = a->m, N = a->n, K = a->k;
    float *A = malloc((size_t)M * K * 4), *Bm = malloc((size_t)K * N * 4), *C = malloc((size_t)M * N * 4);
    double *ms = malloc((size_t)a->steps * sizeof *ms);
    if (!A || !Bm || !C || !ms) return free(A), free(Bm), free(C), free(ms), 1;
    qkv_fill_uniform(A, (size_t)M * K, -1, 1, 1), qkv_fill_uniform(Bm, (size_t)K * N, -1, 1, 2);
    for (int s = -a->warmup; s < a->steps; s++) {
        double t0 = now_ms();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0f, A, K, Bm, N, 0.0f, C, N);
        if (s >= 0) ms[s] = now_ms() - t0;
    }
    double med = median(ms, a->steps);
    printf("{\"bench\": \"sgemm\", \"m\": %d, \"n\": %d, \"k\": %d, \"ms\": %.3f, "
           "\"gflops\": %.2f, \"threads\": %d}\n", M, N, K, med, 2.0 * M * N * K / (med * 1e6),
           qkv_get_threads());
    free(A), free(Bm), free(C), free(ms);
    return 0;
}

int cmd_bench(int argc, char **argv)
{
    if (argc < 3 || argv[2][0] == '-') {
        fprintf(stderr, "usage: qkv bench train|decode|attention|sgemm [options] (--help)\n");
        return 2;
    }
    const char *what = argv[2];
    bench_args a = {0};
    a.cfg = qkv_transformer_default_config();
    a.cfg.d_model = 512, a.cfg.heads = 8, a.cfg.ffn = 2048, a.cfg.dropout = 0.1f, a.cfg.bias = 1;
    a.cfg.src_vocab = a.cfg.tgt_vocab = 10000, a.cfg.max_len = 1024;
    int layers = 6, vocab = 10000;
    a.batch = 32, a.src_len = 32, a.tgt_len = 32, a.steps = 10, a.warmup = 2, a.new_tokens = 32;
    a.n = 1024, a.m = 1024, a.k = 1024;
    const opt_spec opts[] = {
        {"d-model", OPT_INT, &a.cfg.d_model, "model width"},
        {"heads", OPT_INT, &a.cfg.heads, "attention heads"},
        {"layers", OPT_INT, &layers, "encoder and decoder blocks"},
        {"ffn", OPT_INT, &a.cfg.ffn, "FFN hidden size"},
        {"vocab", OPT_INT, &vocab, "vocabulary size of both sides"},
        {"dropout", OPT_FLOAT, &a.cfg.dropout, "dropout rate"},
        {"batch", OPT_INT, &a.batch, "sentences per batch (attention: B)"},
        {"src-len", OPT_INT, &a.src_len, "source tokens"},
        {"tgt-len", OPT_INT, &a.tgt_len, "target tokens"},
        {"new-tokens", OPT_INT, &a.new_tokens, "tokens to decode"},
        {"n", OPT_INT, &a.n, "attention: sequence length; sgemm: N"},
        {"flash", OPT_FLAG, &a.flash, "attention: the flash kernel (no N x N buffer)"},
        {"causal", OPT_FLAG, &a.causal, "attention: a causal mask"},
        {"m", OPT_INT, &a.m, "sgemm: M"},
        {"k", OPT_INT, &a.k, "sgemm: K"},
        {"steps", OPT_INT, &a.steps, "timed repetitions (the median is reported)"},
        {"warmup", OPT_INT, &a.warmup, "untimed repetitions first"},
        {"threads", OPT_INT, &a.threads, "threads (0: all cores)"},
        {"seed", OPT_U64, &a.seed, "random model and data"},
        {NULL, 0, NULL, NULL},
    };
    int rc = args_parse(argc, argv, 3, opts, "usage: qkv bench train|decode|attention|sgemm [options]");
    if (rc) return rc > 0 ? 0 : 2;
    a.cfg.enc_layers = a.cfg.dec_layers = layers;
    a.cfg.src_vocab = a.cfg.tgt_vocab = vocab;
    if (a.steps < 1 || a.warmup < 0 || a.batch < 1 || a.src_len < 1 || a.tgt_len < 1 ||
        a.new_tokens < 1 || a.n < 1 || a.m < 1 || a.k < 1) {
        fprintf(stderr, "qkv bench: sizes and --steps must be positive\n");
        return 2;
    }
    if (a.src_len > a.cfg.max_len || a.tgt_len > a.cfg.max_len)
        a.cfg.max_len = a.src_len > a.tgt_len ? a.src_len : a.tgt_len;
    cli_threads(a.threads);
    if (!strcmp(what, "train")) return bench_train(&a);
    if (!strcmp(what, "decode")) return bench_decode(&a);
    if (!strcmp(what, "attention")) return bench_attention(&a);
    if (!strcmp(what, "sgemm")) return bench_sgemm(&a);
    fprintf(stderr, "qkv bench: unknown benchmark '%s'\n", what);
    return 2;
}
