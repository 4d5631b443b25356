/* SPDX-License-Identifier: MIT */
/* qkv bench: time the model as a user runs it, and print one JSON line of medians.
 *   train      a full training step (forward, backward, clipping, Adam) on random data
 *   decode     greedy decoding with the KV cache, new tokens per second
 *   attention  attention forward + backward at length N: softmax attention materialised or
 *              flash, or linear attention; non-causal or causal
 *   generate   one token of a decoder-only LM at a given position: KV cache or linear state
 *   sgemm      the BLAS roof on one matrix product, for comparison in the same run
 * bench/bench.py and bench/attention_bench.py run these beside the same computations in
 * PyTorch. */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

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

/* Resident memory now, in MiB (Linux's /proc/self/statm; 0 where there is none). */
static double rss_mb(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long pages = 0, resident = 0;
    if (!f) return 0.0;
    if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    fclose(f);
    return (double)resident * (double)sysconf(_SC_PAGESIZE) / (1 << 20);
}

/* Starts the runtime (OpenMP's threads, OpenBLAS's buffers) with one small GEMM and returns
 * the resident memory then: the baseline of a benchmark's peak memory, so that what it
 * reports is what its own tensors cost, as PyTorch's side measures after `import torch`. */
static double warm_runtime_rss_mb(void)
{
    const int n = 256;
    float *A = calloc((size_t)3 * n * n, sizeof *A);
    if (A) cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, A, n,
                       A + (size_t)n * n, n, 0.0f, A + (size_t)2 * n * n, n);
    free(A);
    return rss_mb();
}

typedef struct {
    qkv_transformer_config cfg;
    int batch, src_len, tgt_len, steps, warmup, new_tokens, n, m, k, threads;
    int flash, causal; /* attention: the flash kernel; a causal mask */
    const char *kind;  /* attention: softmax|flash|linear; generate: softmax|linear */
    const char *dump;  /* attention: write inputs, output and gradients here */
    int position, max_len; /* generate: the first timed position; the model's context */
    int trans_a, trans_b;  /* sgemm: op(A) = A^T, op(B) = B^T */
    qkv_precision precision;
    qkv_device device;     /* train, decode, generate */
    qkv_kv_cache kv_cache; /* generate */
    int kv_compare;        /* generate: float32 and bf16 caches, steps alternating */
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
    if (qkv_transformer_create(&m, &a->cfg, a->seed, &err) ||
        qkv_transformer_set_device(m, a->device, &err) ||
        qkv_transformer_set_precision(m, a->precision, &err)) {
        fprintf(stderr, "qkv: %s\n", err.msg);
        qkv_transformer_free(m);
        return 1;
    }
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
    const size_t n = qkv_transformer_num_params(m);
    for (int s = -a->warmup; s < a->steps; s++) { /* a step: zero, loss, backward, clip, Adam */
        double t0 = now_ms();
        const qkv_step_options so = {1e-4f, 1.0f, 0.0f, 0.0f, (uint64_t)(s + 1000), 0, NULL, 0};
        qkv_step_result r;
        if (qkv_transformer_train_step(m, &opt, &batch, &so, &r, &err)) goto done;
        if (s >= 0) ms[s] = now_ms() - t0;
    }
    double med = median(ms, a->steps), flops = 3 * forward_flops(&a->cfg, B, Ts, Tt);
    printf("{\"bench\": \"train\", \"ms_per_step\": %.3f, \"tokens_per_s\": %.1f, "
           "\"gflops\": %.2f, \"peak_rss_mb\": %.1f, \"params\": %zu, \"threads\": %d, "
           "\"d_model\": %d, \"heads\": %d, \"layers\": %d, \"ffn\": %d, \"vocab\": %d, "
           "\"batch\": %d, \"src_len\": %d, \"tgt_len\": %d, \"steps\": %d, "
           "\"precision\": \"%s\"}\n",
           med, B * Tt / (med * 1e-3), flops / (med * 1e6), peak_rss_mb(), n, qkv_get_threads(),
           a->cfg.d_model, a->cfg.heads, a->cfg.enc_layers, a->cfg.ffn, a->cfg.tgt_vocab, B, Ts,
           Tt, a->steps, qkv_precision_name(a->precision));
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
    if (qkv_transformer_create(&m, &cfg, a->seed, &err) ||
        qkv_transformer_set_device(m, a->device, &err) ||
        qkv_transformer_set_precision(m, a->precision, &err)) {
        fprintf(stderr, "qkv: %s\n", err.msg);
        qkv_transformer_free(m);
        return 1;
    }
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
           "\"layers\": %d, \"vocab\": %d, \"batch\": %d, \"src_len\": %d, \"new_tokens\": %d, "
           "\"precision\": \"%s\"}\n",
           med, med / T, B * T / (med * 1e-3), peak_rss_mb(), qkv_get_threads(), cfg.d_model,
           cfg.dec_layers, cfg.tgt_vocab, B, Ts, T, qkv_precision_name(a->precision));
    rc = 0;
done:
    if (rc && err.msg[0]) fprintf(stderr, "qkv: %s\n", err.msg);
    free(src), free(valid), free(out), free(len), free(ms);
    qkv_transformer_free(m);
    return rc;
}

/* ---- attention: forward + backward of one kernel at length N ---------------------------- */

/* The kernels `qkv bench attention --kind` times: one computation (softmax attention, or the
 * linear attention that replaces it), three ways of evaluating it. */
typedef enum { KERNEL_MATERIALISED, KERNEL_FLASH, KERNEL_LINEAR } attention_kernel;

static const char *const kernel_names[] = {"materialised", "flash", "linear"};

/* --kind softmax|materialised|flash|linear, and the older --flash, as one kernel; -1 if they
 * disagree or the name is unknown. */
static int parse_kernel(const char *kind, int flash)
{
    if (!kind) return flash ? KERNEL_FLASH : KERNEL_MATERIALISED;
    int k = !strcmp(kind, "softmax") || !strcmp(kind, "materialised") ? KERNEL_MATERIALISED
            : !strcmp(kind, "flash")                                  ? KERNEL_FLASH
            : !strcmp(kind, "linear")                                 ? KERNEL_LINEAR
                                                                      : -1;
    return flash && k != KERNEL_FLASH ? -1 : k;
}

/* What each kernel keeps between forward and backward, and the scratch both need, in floats:
 *   materialised  P (B, H, N, N) saved, and an N x N scratch per head for dP  (quadratic)
 *   flash         the row log-sum-exp L (B, H, N) saved, the rows of dO . O   (linear)
 *   linear        nothing saved (backward recomputes S, z); per-head sums      (linear) */
static void kernel_buffers(size_t *saved, size_t *scratch, attention_kernel k,
                           const qkv_attention_shape *s, int causal)
{
    const size_t BH = (size_t)s->B * s->H;
    switch (k) {
    case KERNEL_MATERIALISED:
        *saved = BH * s->n * s->m, *scratch = qkv_attention_scratch_floats(s);
        break;
    case KERNEL_FLASH: *saved = BH * s->n, *scratch = qkv_flash_attention_scratch_floats(s); break;
    case KERNEL_LINEAR: *saved = 0, *scratch = qkv_linear_attention_scratch_floats(s, causal); break;
    }
}

/* Writes the inputs, the output and the gradients of the last step to a safetensors file,
 * each (B, N, H, d), for a reference implementation to check (bench/attention_bench.py). */
static int dump_attention(const char *path, float *const t[8], int B, int N, int H, int d)
{
    static const char *const names[8] = {"Q", "K", "V", "dO", "O", "dQ", "dK", "dV"};
    qkv_tensor_ref refs[8];
    for (int i = 0; i < 8; i++)
        refs[i] = (qkv_tensor_ref){names[i], QKV_F32, 4, {B, N, H, d}, t[i]};
    qkv_error err = {0};
    if (qkv_tensor_file_save(path, refs, 8, NULL, 0, &err))
        return fprintf(stderr, "qkv: %s\n", err.msg), 1;
    return 0;
}

/* One forward pass of the kernel (its backward pass when backward: gradients accumulate into
 * dQ dK dV) over Q K V (dO), the saved tensor and the scratch in p[0..10). */
static void attention_pass(int kernel, int backward, float *const p[10],
                           const qkv_attention_shape *shape, int causal)
{
    float *Q = p[0], *K = p[1], *V = p[2], *O = p[3], *dQ = p[4], *dK = p[5], *dV = p[6];
    float *dO = p[7], *saved = p[8], *scratch = p[9];
    const qkv_mask mask = {NULL, 0, causal};
    const qkv_attention_inputs in = {Q, K, V};
    qkv_attention_grads din = {dQ, dK, dV};
    const qkv_dropout none = {0.0f, 0, 0};
    switch (kernel * 2 + backward) {
    case KERNEL_MATERIALISED * 2:
        qkv_attention_forward(O, saved, &in, shape, &mask, none, scratch);
        break;
    case KERNEL_MATERIALISED * 2 + 1:
        qkv_attention_backward(&din, dO, saved, &in, shape, none, scratch);
        break;
    case KERNEL_FLASH * 2: qkv_flash_attention_forward(O, saved, &in, shape, &mask, none); break;
    case KERNEL_FLASH * 2 + 1:
        qkv_flash_attention_backward(&din, dO, O, saved, &in, shape, &mask, none, scratch);
        break;
    case KERNEL_LINEAR * 2:
        qkv_linear_attention_forward(O, &in, shape, NULL, causal, scratch);
        break;
    case KERNEL_LINEAR * 2 + 1:
        qkv_linear_attention_backward(&din, dO, &in, shape, NULL, causal, scratch);
        break;
    }
}

static int bench_attention(const bench_args *a)
{
    const int H = a->cfg.heads, d = a->cfg.d_model / a->cfg.heads, N = a->n, B = a->batch;
    const int kernel = parse_kernel(a->kind, a->flash);
    if (kernel < 0) {
        fprintf(stderr, "qkv bench: --kind is softmax, flash or linear (--flash means flash), "
                "got '%s'%s\n", a->kind, a->flash ? " with --flash" : "");
        return 2;
    }
    /* the memory baseline: the runtime started (threads, BLAS buffers), no tensor yet */
    const double rss0 = warm_runtime_rss_mb();
    const size_t x = (size_t)B * N * H * d;
    const qkv_attention_shape shape = {B, H, N, N, d, d};
    size_t ns_saved, ns_scratch;
    kernel_buffers(&ns_saved, &ns_scratch, (attention_kernel)kernel, &shape, a->causal);
    float *Q = malloc(x * 4), *K = malloc(x * 4), *V = malloc(x * 4), *O = malloc(x * 4);
    float *dQ = calloc(x, 4), *dK = calloc(x, 4), *dV = calloc(x, 4), *dO = malloc(x * 4);
    float *saved = malloc((ns_saved ? ns_saved : 1) * 4);
    float *scratch = malloc((ns_scratch ? ns_scratch : 1) * 4);
    double *fwd = malloc((size_t)a->steps * sizeof *fwd), *bwd = malloc((size_t)a->steps * sizeof *bwd);
    double *tot = malloc((size_t)a->steps * sizeof *tot);
    const double buffers_mb = (8.0 * x + (double)ns_saved + (double)ns_scratch) * 4 / (1 << 20);
    int rc = 1;
    if (!Q || !K || !V || !O || !dQ || !dK || !dV || !dO || !saved || !scratch || !fwd || !bwd ||
        !tot) {
        fprintf(stderr, "qkv: out of memory for %s attention at N = %d (%.1f GiB of buffers)\n",
                kernel_names[kernel], N, buffers_mb / 1024);
        goto done;
    }
    qkv_fill_normal(Q, x, 0, 1, 1), qkv_fill_normal(K, x, 0, 1, 2);
    qkv_fill_normal(V, x, 0, 1, 3), qkv_fill_normal(dO, x, 0, 1, 4);
    float *const buffers[10] = {Q, K, V, O, dQ, dK, dV, dO, saved, scratch};
    for (int s = -a->warmup; s < a->steps; s++) {
        /* gradients accumulate: zero them, untimed, so each step's are one step's */
        memset(dQ, 0, x * 4), memset(dK, 0, x * 4), memset(dV, 0, x * 4);
        double t0 = now_ms();
        attention_pass(kernel, 0, buffers, &shape, a->causal);
        double t1 = now_ms();
        attention_pass(kernel, 1, buffers, &shape, a->causal);
        double t2 = now_ms();
        if (s >= 0) fwd[s] = t1 - t0, bwd[s] = t2 - t1, tot[s] = t2 - t0;
    }
    double f = median(fwd, a->steps), b = median(bwd, a->steps), ms = median(tot, a->steps);
    /* Multiply-adds x 2, forward + backward (backward ~ 2 x forward), causal counted as dense:
     * softmax 4 N^2 d per head forward, linear 4 N d v (S = phi(K)^T V, then phi(Q) S). */
    double flops = kernel == KERNEL_LINEAR ? 12.0 * B * H * (double)N * d * d
                                           : 12.0 * B * H * (double)N * N * d;
    const double peak = peak_rss_mb();
    printf("{\"bench\": \"attention\", \"kernel\": \"%s\", \"causal\": %d, \"n\": %d, "
           "\"batch\": %d, \"heads\": %d, \"head_dim\": %d, \"ms\": %.3f, \"ms_forward\": %.3f, "
           "\"ms_backward\": %.3f, \"gflops\": %.2f, \"peak_rss_mb\": %.1f, "
           "\"rss_delta_mb\": %.1f, \"buffers_mb\": %.1f, \"threads\": %d, \"steps\": %d}\n",
           kernel_names[kernel], a->causal, N, B, H, d, ms, f, b, flops / (ms * 1e6), peak,
           peak - rss0, buffers_mb, qkv_get_threads(), a->steps);
    rc = 0;
    if (a->dump) {
        float *const dumped[8] = {Q, K, V, dO, O, dQ, dK, dV};
        rc = dump_attention(a->dump, dumped, B, N, H, d);
    }
done:
    free(Q), free(K), free(V), free(O), free(dQ), free(dK), free(dV), free(dO), free(saved);
    free(scratch), free(fwd), free(bwd), free(tot);
    return rc;
}

/* ---- generate: the time of one new token at a given position ---------------------------- */

/* The cache type a state of m gets: the setting, with auto resolved by the library. */
static const char *kv_name(const qkv_lm *m) { return qkv_kv_cache_name(qkv_lm_kv_cache_type(m)); }

/* A decoder-only LM with random weights generates at position `position`: the prefix (all but
 * the warmup tokens) goes in by one prefill, the warmup tokens one step each, then `steps`
 * steps at positions position .. position + steps - 1 are timed one by one. A softmax model's
 * step attends over a KV cache of t + 1 rows (O(t) at position t); a linear model's updates
 * its recurrent state (O(1)). With --kv-compare two states of the same model, one with a
 * float32 cache and one with a bf16 cache, take the same tokens, their timed steps
 * alternating, so that both see the same machine (a shared one's load drifts). */
static int bench_generate(const bench_args *a, int layers, int vocab)
{
    qkv_lm_config cfg = qkv_lm_default_config();
    cfg.vocab = vocab, cfg.d_model = a->cfg.d_model, cfg.heads = a->cfg.heads;
    cfg.ffn = a->cfg.ffn, cfg.layers = layers, cfg.dropout = 0.0f;
    const char *kind = a->kind ? a->kind : "softmax";
    qkv_error err = {0};
    if (qkv_attention_kind_parse(&cfg.attention, kind, &err)) { /* KV cache or recurrent state */
        fprintf(stderr, "qkv bench generate: --kind: %s\n", err.msg);
        return 2;
    }
    const int P = a->position, W = a->warmup, S = a->steps, n_states = a->kv_compare ? 2 : 1;
    if ((a->kv_compare && cfg.attention != QKV_ATTENTION_SOFTMAX) || P - W < 1) {
        fprintf(stderr, "qkv bench generate: %s\n", P - W < 1
                ? "--position must exceed --warmup: the prefill needs a token"
                : "--kv-compare needs --kind softmax (a linear model keeps no key-value cache)");
        return 2;
    }
    cfg.max_len = a->max_len > P + S ? a->max_len : P + S;
    qkv_lm *m = NULL;
    qkv_lm_state *st[2] = {NULL, NULL};
    const qkv_kv_cache kv[2] = {a->kv_compare ? QKV_KV_CACHE_FP32 : a->kv_cache,
                                QKV_KV_CACHE_BF16};
    const char *kv_used[2] = {"none", "none"};
    double prefill_ms[2] = {0, 0};
    int *ids = malloc((size_t)(P + S) * sizeof *ids);
    float *logits = malloc((size_t)vocab * sizeof *logits);
    double *ms = malloc((size_t)2 * S * sizeof *ms);
    int rc = 1;
    if (!ids || !logits || !ms) {
        fprintf(stderr, "qkv: out of memory\n");
        goto done;
    }
    if (qkv_lm_create(&m, &cfg, a->seed, &err) || qkv_lm_set_device(m, a->device, &err) ||
        qkv_lm_set_precision(m, a->precision, &err))
        goto done;
    random_ids(ids, (size_t)(P + S), vocab, a->seed + 1);
    for (int k = 0; k < n_states; k++) {
        if (qkv_lm_set_kv_cache(m, kv[k], &err) || qkv_lm_state_create(&st[k], m, &err))
            goto done;
        if (cfg.attention == QKV_ATTENTION_SOFTMAX) kv_used[k] = kv_name(m);
        double t0 = now_ms();
        if (qkv_lm_prefill(m, st[k], ids, P - W, logits, &err)) goto done;
        prefill_ms[k] = now_ms() - t0;
    }
    for (int i = -W; i < S; i++)
        for (int k = 0; k < n_states; k++) {
            double t = now_ms();
            if (qkv_lm_step(m, st[k], ids[P + i], logits, &err)) goto done;
            if (i >= 0) ms[(size_t)k * S + i] = now_ms() - t;
        }
    /* what the model remembers of the P + S tokens: keys and values, or S and z */
    const int hd = cfg.d_model / cfg.heads;
    const double state = cfg.attention == QKV_ATTENTION_SOFTMAX
                             ? 2.0 * layers * (double)(P + S) * cfg.d_model
                             : (double)layers * cfg.heads * ((double)hd * hd + hd);
    for (int k = 0; k < n_states; k++) {
        const double med = median(ms + (size_t)k * S, S), fastest = ms[(size_t)k * S];
        printf("{\"bench\": \"generate\", \"attention\": \"%s\", \"position\": %d, "
               "\"ms_per_token\": %.4f, \"tokens_per_s\": %.1f, \"ms_per_token_min\": %.4f, "
               "\"ms_prefill\": %.1f, "
               "\"prefill_tokens\": %d, \"state_mb\": %.3f, \"peak_rss_mb\": %.1f, "
               "\"threads\": %d, \"d_model\": %d, \"heads\": %d, \"layers\": %d, \"ffn\": %d, "
               "\"vocab\": %d, \"max_len\": %d, \"steps\": %d, \"precision\": \"%s\", "
               "\"kv_cache\": \"%s\"}\n",
               kind, P, med, 1e3 / med, fastest, prefill_ms[k], P - W,
               state * (strcmp(kv_used[k], "bf16") ? 4 : 2) / (1 << 20), peak_rss_mb(),
               qkv_get_threads(), cfg.d_model, cfg.heads, layers, cfg.ffn, vocab, cfg.max_len, S,
               qkv_precision_name(a->precision), kv_used[k]);
    }
    rc = 0;
done:
    if (rc && err.msg[0]) fprintf(stderr, "qkv: %s\n", err.msg);
    free(ids), free(logits), free(ms);
    qkv_lm_state_free(st[0]), qkv_lm_state_free(st[1]);
    qkv_lm_free(m);
    return rc;
}

/* C (M, N) = op(A) op(B), A and B uniform in [-1, 1): OpenBLAS's sgemm, or with --precision
 * bf16 the library's bf16 kernel (qkv_gemm_bf16; the one the models' linear layers use). */
static int bench_sgemm(const bench_args *a)
{
    const int M = a->m, N = a->n, K = a->k, bf16 = a->precision == QKV_PRECISION_BF16;
    const int lda = a->trans_a ? M : K, ldb = a->trans_b ? K : N;
    float *A = malloc((size_t)M * K * 4), *Bm = malloc((size_t)K * N * 4);
    float *C = malloc((size_t)M * N * 4);
    double *ms = malloc((size_t)a->steps * sizeof *ms);
    qkv_gemm_bf16 *g = NULL;
    qkv_error err = {0};
    int rc = 1;
    if (!A || !Bm || !C || !ms) goto done;
    if (bf16 && qkv_gemm_bf16_create(&g, 0, &err)) {
        fprintf(stderr, "qkv bench sgemm: %s\n", err.msg);
        goto done;
    }
    qkv_fill_uniform(A, (size_t)M * K, -1, 1, 1), qkv_fill_uniform(Bm, (size_t)K * N, -1, 1, 2);
    for (int s = -a->warmup; s < a->steps; s++) {
        double t0 = now_ms();
        if (bf16)
            qkv_gemm_bf16_run(g, a->trans_a, a->trans_b, M, N, K, A, Bm, C);
        else
            cblas_sgemm(CblasRowMajor, a->trans_a ? CblasTrans : CblasNoTrans,
                        a->trans_b ? CblasTrans : CblasNoTrans, M, N, K, 1.0f, A, lda, Bm, ldb,
                        0.0f, C, N);
        if (s >= 0) ms[s] = now_ms() - t0;
    }
    double med = median(ms, a->steps);
    printf("{\"bench\": \"sgemm\", \"m\": %d, \"n\": %d, \"k\": %d, \"trans_a\": %d, "
           "\"trans_b\": %d, \"ms\": %.3f, \"gflops\": %.2f, \"threads\": %d, "
           "\"precision\": \"%s\"}\n", M, N, K, a->trans_a, a->trans_b, med,
           2.0 * M * N * K / (med * 1e6), qkv_get_threads(), qkv_precision_name(a->precision));
    rc = 0;
done:
    free(A), free(Bm), free(C), free(ms);
    qkv_gemm_bf16_free(g);
    return rc;
}

static const char usage[] =
    "usage: qkv bench train|decode|attention|generate|sgemm [options]\n"
    "Prints one JSON line of medians over --steps timed repetitions (after --warmup).\n"
    "  attention  forward + backward of attention over B x heads x N x (d_model / heads), from\n"
    "             random Q, K, V, dO; --kind softmax (materialised: P is N x N per head), flash\n"
    "             (softmax, tiled: no N x N buffer) or linear (phi(Q) (phi(K)^T V), phi = elu + 1);\n"
    "             --causal for the causal mask / the causal scan. Fields: ms (median of forward +\n"
    "             backward), ms_forward, ms_backward (their own medians), peak_rss_mb (the\n"
    "             process's peak resident memory), rss_delta_mb (that peak minus the resident\n"
    "             memory before the first tensor: what the benchmark's tensors cost), buffers_mb\n"
    "             (what it allocates: Q K V O dO dQ dK dV, the saved tensor and the scratch).\n"
    "  generate   a decoder-only LM with random weights (--layers default 2, --vocab default\n"
    "             256) prefills --position minus --warmup tokens, steps --warmup tokens, then\n"
    "             times --steps single-token steps from --position on; --kind softmax (KV cache)\n"
    "             or linear (recurrent state); --kv-cache fp32|bf16|auto the cache's type;\n"
    "             --kv-compare: a float32 and a bf16 cache of one model, steps alternating.\n"
    "             Fields: ms_per_token (median), ms_per_token_min (the fastest step: on a shared\n"
    "             machine, the nearest to an idle one's), ms_prefill, state_mb, kv_cache.";

/* Long: the option table, one row per option, and the dispatch by benchmark. */
int cmd_bench(int argc, char **argv)
{
    const int help = argc > 2 && (!strcmp(argv[2], "--help") || !strcmp(argv[2], "-h"));
    if (argc < 3 || (argv[2][0] == '-' && !help)) {
        fprintf(stderr, "usage: qkv bench train|decode|attention|generate|sgemm [options] "
                "(--help)\n");
        return 2;
    }
    const char *what = argv[2];
    const int generate = !strcmp(what, "generate");
    bench_args a = {0};
    a.cfg = qkv_transformer_default_config();
    a.cfg.d_model = 512, a.cfg.heads = 8, a.cfg.ffn = 2048, a.cfg.dropout = 0.1f, a.cfg.bias = 1;
    a.cfg.src_vocab = a.cfg.tgt_vocab = 10000, a.cfg.max_len = 1024;
    /* generate defaults to a small LM: 2 blocks over bytes, so that attention, not the
     * output projection, decides the time of a token */
    int layers = generate ? 2 : 6, vocab = generate ? 256 : 10000;
    opt_choice precision = {QKV_ENUM_PRECISION, NULL, QKV_PRECISION_FP32},
               kv_cache = {QKV_ENUM_KV_CACHE, NULL, QKV_KV_CACHE_AUTO},
               device = {QKV_ENUM_DEVICE, NULL, QKV_DEVICE_CPU};
    a.batch = 32, a.src_len = 32, a.tgt_len = 32, a.steps = 10, a.warmup = 2, a.new_tokens = 32;
    a.n = 1024, a.m = 1024, a.k = 1024, a.position = 100, a.max_len = 0;
    const opt_spec opts[] = {
        {"d-model", OPT_INT, &a.cfg.d_model, "model width", ARG_D_MODEL, NULL},
        {"heads", OPT_INT, &a.cfg.heads, "attention heads", ARG_D_MODEL, NULL},
        {"layers", OPT_INT, &layers,
         "encoder and decoder blocks (generate: LM blocks)", ARG_LAYERS, NULL},
        {"ffn", OPT_INT, &a.cfg.ffn, "FFN hidden size", ARG_FFN, NULL},
        {"vocab", OPT_INT, &vocab, "vocabulary size of both sides", "[5, 16777216]", NULL},
        {"dropout", OPT_FLOAT, &a.cfg.dropout, "dropout rate", ARG_RATE, NULL},
        {"batch", OPT_INT, &a.batch, "sentences per batch (attention: B)", "[1, 65536]", NULL},
        {"src-len", OPT_INT, &a.src_len, "source tokens", "[1, 65536]", NULL},
        {"tgt-len", OPT_INT, &a.tgt_len, "target tokens", "[1, 65536]", NULL},
        {"new-tokens", OPT_INT, &a.new_tokens, "tokens to decode", "[1, 65536]", NULL},
        {"n", OPT_INT, &a.n, "attention: sequence length; sgemm: N", "[1, 65536]", NULL},
        {"kind", OPT_STRING, &a.kind,
         "attention: softmax|flash|linear (default softmax); generate: softmax|linear", NULL, NULL},
        {"flash", OPT_FLAG, &a.flash,
         "attention: the flash kernel (the same as --kind flash)", NULL, NULL},
        {"causal", OPT_FLAG, &a.causal, "attention: a causal mask (linear: the causal scan)", NULL,
         NULL},
        {"dump", OPT_FILE, &a.dump,
         "attention: write Q K V dO O dQ dK dV of the last step to this safetensors file", NULL,
         NULL},
        {"position", OPT_INT, &a.position,
         "generate: the position of the first timed token", "[1, 65536]", NULL},
        {"max-len", OPT_INT, &a.max_len,
         "generate: the model's context (0: --position + --steps, the least that fits)",
         "[0, 65536]", NULL},
        {"m", OPT_INT, &a.m, "sgemm: M", "[1, 65536]", NULL},
        {"k", OPT_INT, &a.k, "sgemm: K", "[1, 65536]", NULL},
        {"trans-a", OPT_FLAG, &a.trans_a, "sgemm: op(A) = A^T (A stored K x M)", NULL, NULL},
        {"trans-b", OPT_FLAG, &a.trans_b, "sgemm: op(B) = B^T (B stored N x K)", NULL, NULL},
        {"precision", OPT_CHOICE, &precision,
         "train, decode, generate: the model's (int8 for decode and generate only); sgemm: "
         "the bf16 kernel", NULL, NULL},
        {"kv-cache", OPT_CHOICE, &kv_cache, "generate: " CLI_KV_CACHE_HELP, NULL, NULL},
        {"device", OPT_CHOICE, &device, "train, decode, generate: " CLI_DEVICE_HELP, NULL, NULL},
        {"kv-compare", OPT_FLAG, &a.kv_compare,
         "generate: a float32 and a bf16 cache, steps alternating (two JSON lines)", NULL, NULL},
        {"steps", OPT_INT, &a.steps, "timed repetitions (the median is reported)", "[1, 1000000]",
         NULL},
        {"warmup", OPT_INT, &a.warmup, "untimed repetitions first", "[0, 1000000]", NULL},
        {"threads", OPT_INT, &a.threads, "threads (0: all cores)", ARG_THREADS, NULL},
        {"t", OPT_ALIAS, "threads", NULL, NULL, NULL},
        {"seed", OPT_U64, &a.seed, "random model and data", ARG_SEED, NULL},
        {0},
    };
    int rc = args_parse(argc, argv, help ? 2 : 3, opts, usage);
    if (rc) return rc > 0 ? 0 : 2;
    a.precision = (qkv_precision)precision.value, a.kv_cache = (qkv_kv_cache)kv_cache.value;
    a.device = (qkv_device)device.value;
    if (a.device != QKV_DEVICE_CPU && (!strcmp(what, "attention") || !strcmp(what, "sgemm"))) {
        fprintf(stderr, "qkv bench %s: times the CPU's kernels; --device is for train, decode "
                "and generate\n", what);
        return 2;
    }
    if (cli_device(a.device, "bench")) return 1;
    if (a.precision == QKV_PRECISION_INT8 && (!strcmp(what, "train") || !strcmp(what, "sgemm"))) {
        fprintf(stderr, "qkv bench %s: --precision int8 is for inference only (decode, "
                "generate)\n", what);
        return 2;
    }
    a.cfg.enc_layers = a.cfg.dec_layers = layers;
    a.cfg.src_vocab = a.cfg.tgt_vocab = vocab;
    if (a.cfg.d_model % a.cfg.heads) { /* the rest is each option's range */
        fprintf(stderr, "qkv bench: --d-model must be a multiple of --heads\n");
        return 2;
    }
    if (a.src_len > a.cfg.max_len || a.tgt_len > a.cfg.max_len)
        a.cfg.max_len = a.src_len > a.tgt_len ? a.src_len : a.tgt_len;
    cli_threads(a.threads);
    if (!strcmp(what, "train")) return bench_train(&a);
    if (!strcmp(what, "decode")) return bench_decode(&a);
    if (!strcmp(what, "attention")) return bench_attention(&a);
    if (generate) return bench_generate(&a, layers, vocab);
    if (!strcmp(what, "sgemm")) return bench_sgemm(&a);
    fprintf(stderr, "qkv bench: unknown benchmark '%s'\n", what);
    return 2;
}
