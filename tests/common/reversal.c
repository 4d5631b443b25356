/* SPDX-License-Identifier: MIT */
#include "reversal.h"

#include <stdlib.h>
#include <string.h>

#include "test_util.h" /* cmocka */

void reversal_batch(int *src, int *valid, int *tin, int *tout, int B, uint64_t seed)
{
    for (int b = 0; b < B; b++) {
        const int len = 3 + (int)(qkv_random_u32(seed, 100 * (uint64_t)b) % 6);
        int *s = src + b * TS, *ti = tin + b * TT, *to = tout + b * TT;
        for (int t = 0; t < TS; t++)
            s[t] = t < len ? 4 + (int)(qkv_random_u32(seed, 100 * (uint64_t)b + 1 + t) % (V - 4))
                           : QKV_PAD;
        valid[b] = len;
        ti[0] = QKV_BOS;
        for (int t = 0; t < TT; t++) {
            to[t] = t < len ? s[len - 1 - t] : t == len ? QKV_EOS : QKV_PAD;
            if (t + 1 < TT) ti[t + 1] = t < len ? s[len - 1 - t] : QKV_PAD;
        }
    }
}

qkv_transformer *reversal_model(qkv_precision p)
{
    qkv_transformer_config cfg = qkv_transformer_default_config();
    cfg.src_vocab = cfg.tgt_vocab = V, cfg.d_model = 64, cfg.heads = 4, cfg.ffn = 128;
    cfg.enc_layers = cfg.dec_layers = 2, cfg.dropout = 0.0f, cfg.max_len = 16;
    qkv_transformer *m;
    qkv_error err = {0};
    assert_int_equal(qkv_transformer_create(&m, &cfg, 3, &err), QKV_OK);
    assert_int_equal(qkv_transformer_set_precision(m, p, &err), QKV_OK);
    assert_int_equal(qkv_transformer_get_precision(m), p);
    return m;
}

double train_reversal(qkv_transformer *m, int steps, int batch, int last)
{
    qkv_adam opt;
    qkv_error err = {0};
    const size_t n = qkv_transformer_num_params(m);
    assert_int_equal(qkv_adam_init(&opt, n, 0.9f, 0.98f, 1e-9f, 0.0f, &err), QKV_OK);
    int *src = malloc((size_t)batch * TS * sizeof *src);
    int *valid = malloc((size_t)batch * sizeof *valid);
    int *tin = malloc((size_t)batch * TT * sizeof *tin);
    int *tout = malloc((size_t)batch * TT * sizeof *tout);
    assert_true(src && valid && tin && tout);
    double mean = 0.0;
    for (int step = 0; step < steps; step++) {
        reversal_batch(src, valid, tin, tout, batch, 1000 + (uint64_t)step);
        qkv_batch b = {batch, TS, TT, src, valid, tin, tout};
        float *grads = qkv_transformer_grads(m);
        memset(grads, 0, n * sizeof *grads);
        double sum;
        int tokens;
        const qkv_loss_options pass = {.backward = 1, .train = 1, .dropout_seed = (uint64_t)step};
        assert_int_equal(qkv_transformer_loss(m, &b, &pass, &sum, &tokens, &err), QKV_OK);
        if (step >= steps - last) mean += sum / tokens / last;
        qkv_clip_grad_norm(grads, n, 1.0);
        qkv_adam_update(&opt, qkv_transformer_params(m), grads, 3e-3f);
    }
    free(src), free(valid), free(tin), free(tout);
    qkv_adam_free(&opt);
    return mean;
}

int translate_reversal(qkv_transformer *m, int *out, int *len, int n, int chunk)
{
    int *src = malloc((size_t)n * TS * sizeof *src), *valid = malloc((size_t)n * sizeof *valid);
    int *tin = malloc((size_t)n * TT * sizeof *tin), *tout = malloc((size_t)n * TT * sizeof *tout);
    assert_true(src && valid && tin && tout);
    reversal_batch(src, valid, tin, tout, n, 99);
    for (int b = 0; b < n; b += chunk) {
        const int c = n - b < chunk ? n - b : chunk;
        assert_int_equal(qkv_transformer_greedy(m, src + b * TS, valid + b, c, TS, TT,
                                                out + b * TT, len + b, NULL), QKV_OK);
    }
    int exact = 0;
    for (int b = 0; b < n; b++)
        exact += len[b] == valid[b] && !memcmp(out + b * TT, tout + b * TT, len[b] * sizeof(int));
    free(src), free(valid), free(tin), free(tout);
    return exact;
}

int same_translations(const int *out1, const int *len1, const int *out2, const int *len2, int n)
{
    int same = 0;
    for (int b = 0; b < n; b++)
        same += len1[b] == len2[b] && !memcmp(out1 + b * TT, out2 + b * TT, len1[b] * sizeof(int));
    return same;
}

float *reversal_logits(qkv_transformer *m, int n)
{
    int *src = malloc((size_t)n * TS * sizeof *src), *valid = malloc((size_t)n * sizeof *valid);
    int *tin = malloc((size_t)n * TT * sizeof *tin), *tout = malloc((size_t)n * TT * sizeof *tout);
    float *logits = malloc((size_t)n * TT * V * sizeof *logits);
    assert_true(src && valid && tin && tout && logits);
    reversal_batch(src, valid, tin, tout, n, 99);
    qkv_batch b = {n, TS, TT, src, valid, tin, tout};
    qkv_error err = {0};
    assert_int_equal(qkv_transformer_logits(m, &b, logits, &err), QKV_OK);
    free(src), free(valid), free(tin), free(tout);
    return logits;
}

void check_copy_follows_parameters(qkv_precision p)
{
    qkv_transformer *m = reversal_model(p), *fresh = reversal_model(QKV_PRECISION_FP32);
    enum { N = 16 };
    int out[N * TT], len[N], out2[N * TT], len2[N];
    translate_reversal(m, out, len, N, N); /* makes and reads the copy */
    const size_t n = qkv_transformer_num_params(m);
    qkv_fill_uniform(qkv_transformer_params(m), n, -0.3f, 0.3f, 77);
    memcpy(qkv_transformer_params(fresh), qkv_transformer_params(m), n * sizeof(float));
    qkv_error err = {0};
    assert_int_equal(qkv_transformer_set_precision(fresh, p, &err), QKV_OK);
    translate_reversal(m, out, len, N, 4);
    translate_reversal(fresh, out2, len2, N, 4);
    assert_memory_equal(len, len2, sizeof len);
    for (int b = 0; b < N; b++)
        assert_memory_equal(out + b * TT, out2 + b * TT, (size_t)len[b] * sizeof(int));
    qkv_transformer_free(m), qkv_transformer_free(fresh);
}
