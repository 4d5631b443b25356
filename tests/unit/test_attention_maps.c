/* SPDX-License-Identifier: MIT */
/* qkv_attention_maps_compute (src/inference/attention_maps.c): the weights it returns are the
 * ones greedy decoding with the KV cache used, so the teacher-forced pass must predict the
 * decoded tokens again; each map is a distribution over the keys its mask allows; a prefix of
 * the translation gives the same first rows (what decoding saw at that step); bad input fails
 * with a message. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

enum { V = 13, MAXLEN = 9 };

static qkv_transformer *make_model(uint64_t seed)
{
    qkv_transformer_config c = qkv_transformer_default_config();
    c.src_vocab = V, c.tgt_vocab = V + 2, c.d_model = 16, c.heads = 2, c.ffn = 24;
    c.enc_layers = 2, c.dec_layers = 3, c.max_len = 12, c.dropout = 0.2f;
    qkv_transformer *m = NULL;
    qkv_error err = {0};
    if (qkv_transformer_create(&m, &c, seed, &err)) fail_msg("%s", err.msg);
    return m;
}

/* Each row of the (rows, m) panels sums to 1 over keys j < visible(i) and is 0 beyond. */
static void check_rows(const char *name, const float *P, int panels, int n, int m, int causal)
{
    for (int p = 0; p < panels; p++)
        for (int i = 0; i < n; i++) {
            const float *row = P + ((size_t)p * n + i) * m;
            const int vis = causal ? i + 1 : m;
            double s = 0.0;
            for (int j = 0; j < m; j++) {
                if (!(row[j] >= 0.0f && row[j] <= 1.0f))
                    fail_msg("%s[%d,%d,%d] = %g", name, p, i, j, row[j]);
                if (j >= vis && row[j] != 0.0f)
                    fail_msg("%s[%d,%d,%d] = %g past the mask", name, p, i, j, row[j]);
                s += row[j];
            }
            if (fabs(s - 1.0) > 1e-5) fail_msg("%s panel %d row %d sums to %.7f", name, p, i, s);
        }
}

/* Three sources of different lengths decoded together (padded), then each pair looked at
 * alone: the argmax of every position repeats what decoding chose. */
static void test_reproduces_greedy(void **state)
{
    (void)state;
    enum { B = 3, TS = 6 };
    const int src[B * TS] = {4, 5, 6, 7, 8, QKV_EOS,
                             9, 10, QKV_EOS, QKV_PAD, QKV_PAD, QKV_PAD,
                             12, 11, 4, 4, QKV_EOS, QKV_PAD};
    const int valid[B] = {6, 3, 5};
    int out[B * MAXLEN], out_len[B];
    qkv_error err = {0};
    /* the first seed whose untrained model ends the first sentence with <eos> before MAXLEN,
     * so that both ways a translation ends are checked */
    qkv_transformer *m = NULL;
    for (uint64_t seed = 0; seed < 1000; seed++) {
        m = make_model(seed);
        assert_int_equal(qkv_transformer_greedy(m, src, valid, B, TS, MAXLEN, out, out_len, &err),
                         QKV_OK);
        if (out_len[0] > 0 && out_len[0] < MAXLEN) break;
        qkv_transformer_free(m);
        m = NULL;
    }
    assert_non_null(m);
    for (int b = 0; b < B; b++) {
        qkv_attention_maps a;
        assert_int_equal(qkv_attention_maps_compute(&a, m, src + b * TS, valid[b], out + b * MAXLEN,
                                                    out_len[b], &err), QKV_OK);
        assert_int_equal(a.src_len, valid[b]);
        assert_int_equal(a.tgt_len, out_len[b] + 1);
        assert_int_equal(a.enc_layers, 2);
        assert_int_equal(a.dec_layers, 3);
        assert_int_equal(a.heads, 2);
        for (int t = 0; t < out_len[b]; t++) assert_int_equal(a.predicted[t], out[b * MAXLEN + t]);
        if (out_len[b] < MAXLEN) assert_int_equal(a.predicted[out_len[b]], QKV_EOS);
        const int Ts = a.src_len, Tt = a.tgt_len;
        check_rows("encoder", a.encoder, 2 * 2, Ts, Ts, 0);
        check_rows("decoder_self", a.decoder_self, 3 * 2, Tt, Tt, 1);
        check_rows("cross", a.cross, 3 * 2, Tt, Ts, 0);
        qkv_attention_maps_free(&a);
        qkv_attention_maps_free(&a); /* twice is harmless */
    }
    qkv_transformer_free(m);
}

/* The maps of a prefix of the translation are the first rows of the whole one's: row t is
 * what the decoder saw when it chose token t, whatever came later. The encoder's do not
 * depend on the target at all. */
static void test_prefix_rows(void **state)
{
    (void)state;
    qkv_transformer *m = make_model(11);
    const int src[5] = {5, 6, 9, 4, QKV_EOS}, tgt[6] = {7, 8, 4, 12, 5, 6};
    qkv_attention_maps full, pre;
    qkv_error err = {0};
    assert_int_equal(qkv_attention_maps_compute(&full, m, src, 5, tgt, 6, &err), QKV_OK);
    assert_int_equal(qkv_attention_maps_compute(&pre, m, src, 5, tgt, 3, &err), QKV_OK);
    const int Ts = 5, Tf = 7, Tp = 4;
    tu_check_close("encoder", pre.encoder, full.encoder, (size_t)2 * 2 * Ts * Ts, 1e-6f, 1e-5f);
    for (int panel = 0; panel < 3 * 2; panel++)
        for (int i = 0; i < Tp; i++) {
            tu_check_close("cross prefix row", pre.cross + ((size_t)panel * Tp + i) * Ts,
                           full.cross + ((size_t)panel * Tf + i) * Ts, Ts, 1e-6f, 1e-5f);
            tu_check_close("self prefix row", pre.decoder_self + ((size_t)panel * Tp + i) * Tp,
                           full.decoder_self + ((size_t)panel * Tf + i) * Tf, Tp, 1e-6f, 1e-5f);
        }
    /* an empty translation still has the <bos> row */
    qkv_attention_maps_free(&pre);
    assert_int_equal(qkv_attention_maps_compute(&pre, m, src, 5, tgt, 0, &err), QKV_OK);
    assert_int_equal(pre.tgt_len, 1);
    tu_check_close("bos row", pre.cross, full.cross, Ts, 1e-6f, 1e-5f);
    assert_true(pre.decoder_self[0] == 1.0f);
    qkv_attention_maps_free(&pre), qkv_attention_maps_free(&full);
    qkv_transformer_free(m);
}

/* The first layer's self-attention recomputed from the public API (embedding * sqrt(C) +
 * sinusoidal positions, then multi-head attention with the model's own weights) is what the
 * maps report for layer 0; deeper layers differ from it. */
static const float *param(qkv_transformer *m, const char *name)
{
    for (int i = 0; i < qkv_transformer_num_tensors(m); i++) {
        qkv_param_info t = qkv_transformer_tensor(m, i);
        if (!strcmp(t.name, name)) return qkv_transformer_params(m) + t.offset;
    }
    fail_msg("no tensor %s", name);
    return NULL;
}

static void first_layer_self_attention(float *P, qkv_transformer *m, const char *block,
                                       const char *embedding, const int *ids, int T, int causal)
{
    const qkv_transformer_config *c = qkv_transformer_get_config(m);
    const int C = c->d_model;
    char name[4][64];
    const char *mat[4] = {"W_q", "W_k", "W_v", "W_o"};
    for (int k = 0; k < 4; k++) snprintf(name[k], sizeof name[k], "%s.%s", block, mat[k]);
    const qkv_mha_weights w = {(float *)param(m, name[0]), NULL, (float *)param(m, name[1]), NULL,
                               (float *)param(m, name[2]), NULL, (float *)param(m, name[3]), NULL};
    const qkv_mha_config mc = {C, C, c->heads, C / c->heads, 0};
    const int V = !strcmp(embedding, "src_embedding") ? c->src_vocab : c->tgt_vocab;
    float *x = tu_zeros((size_t)T * C), *pos = tu_zeros((size_t)T * C), *y = tu_zeros((size_t)T * C);
    float *buf = tu_zeros(qkv_mha_cache_floats(&mc, 1, T, T));
    qkv_mha_cache cache = qkv_mha_cache_view(buf, &mc, 1, T, T);
    assert_int_equal(qkv_embedding_forward(x, ids, param(m, embedding), T, V, C, NULL), QKV_OK);
    qkv_sinusoidal_table(pos, T, C);
    qkv_positional_forward(x, x, pos, 1, T, C, 0, sqrtf((float)C));
    const qkv_mask mask = {causal ? NULL : &T, 0, causal};
    const qkv_attention_shape shape = qkv_mha_shape(&mc, 1, T, T);
    qkv_mha_forward(y, &cache, &(qkv_attention_inputs){x, x, x}, &w, &mc, &shape, &mask,
                    (qkv_dropout){0.0f, 0, 0}, NULL);
    memcpy(P, cache.P, (size_t)c->heads * T * T * sizeof *P);
    free(x), free(pos), free(y), free(buf);
}

static void test_first_layer_from_public_api(void **state)
{
    (void)state;
    qkv_transformer *m = make_model(5);
    const int src[6] = {4, 9, 7, 7, 12, QKV_EOS}, tgt[4] = {8, 5, 14, 6};
    const int tgt_in[5] = {QKV_BOS, 8, 5, 14, 6};
    qkv_attention_maps a;
    qkv_error err = {0};
    assert_int_equal(qkv_attention_maps_compute(&a, m, src, 6, tgt, 4, &err), QKV_OK);
    float P[2 * 6 * 6];
    first_layer_self_attention(P, m, "encoder.0.attention", "src_embedding", src, 6, 0);
    tu_check_close("encoder layer 0", a.encoder, P, 2 * 6 * 6, 1e-6f, 1e-5f);
    first_layer_self_attention(P, m, "decoder.0.self_attention", "tgt_embedding", tgt_in, 5, 1);
    tu_check_close("decoder self layer 0", a.decoder_self, P, 2 * 5 * 5, 1e-6f, 1e-5f);
    float diff = 0.0f; /* layer 1 is a different map (a copy of layer 0 would pass the above) */
    for (int i = 0; i < 2 * 6 * 6; i++)
        diff = fmaxf(diff, fabsf(a.encoder[2 * 6 * 6 + i] - a.encoder[i]));
    assert_true(diff > 1e-3f);
    qkv_attention_maps_free(&a);
    qkv_transformer_free(m);
}

static void test_bad_input(void **state)
{
    (void)state;
    qkv_transformer *m = make_model(3);
    const int src[3] = {4, 5, QKV_EOS}, bad_src[3] = {4, V, QKV_EOS}, tgt[12] = {4, 5, 6};
    qkv_attention_maps a;
    qkv_error err = {0};
    assert_int_equal(qkv_attention_maps_compute(&a, m, src, 0, tgt, 2, &err), QKV_ERR_ARG);
    assert_non_null(strstr(err.msg, "source length 0"));
    assert_null(a.encoder);
    assert_int_equal(qkv_attention_maps_compute(&a, m, src, 3, tgt, 12, &err), QKV_ERR_ARG);
    assert_non_null(strstr(err.msg, "translation length 12"));
    assert_int_equal(qkv_attention_maps_compute(&a, m, bad_src, 3, tgt, 2, &err), QKV_ERR_ARG);
    assert_null(a.encoder), assert_null(a.predicted);
    qkv_attention_maps_free(&a);
    qkv_transformer_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reproduces_greedy),
        cmocka_unit_test(test_prefix_rows),
        cmocka_unit_test(test_first_layer_from_public_api),
        cmocka_unit_test(test_bad_input),
    };
    return cmocka_run_group_tests_name("attention_maps", tests, NULL, NULL);
}
