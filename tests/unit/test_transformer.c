/* SPDX-License-Identifier: MIT */
/* The whole encoder-decoder model: finite-difference gradient checks of the full backward in
 * every architectural variant, and its structural promises (parameter table, masks). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/transformer_internal.h" /* transformer_config_params */
#include "test_util.h"

enum { B = 2, TS = 5, TT = 4, VS = 11, VT = 9 };

typedef struct {
    qkv_transformer *m;
    qkv_batch b;
    float p;
} model_ctx;

static const int src[B * TS] = {4, 5, 6, 3, 1, 7, 8, 3, 1, 1};
static const int src_valid[B] = {4, 3};
static const int tgt_in[B * TT] = {2, 4, 5, 6, 2, 7, 1, 1};
static const int tgt_out[B * TT] = {4, 5, 6, 3, 7, 3, 1, 1};

static double model_loss(void *p)
{
    model_ctx *c = p;
    double sum = 0.0;
    int tokens = 0;
    qkv_error err = {0};
    const qkv_loss_options pass = {.grad_scale = 1.0f, .label_smoothing = 0.1f, .train = c->p > 0,
                                   .dropout_seed = 1234};
    assert_int_equal(qkv_transformer_loss(c->m, &c->b, &pass, &sum, &tokens, &err), QKV_OK);
    return sum / tokens;
}

static void check_variant(int pre_norm, int final_norm, int bias, int tie, int learned,
                          qkv_activation act, float dropout)
{
    qkv_transformer_config cfg = qkv_transformer_default_config();
    cfg.src_vocab = tie == QKV_TIE_ALL ? VT : VS, cfg.tgt_vocab = VT;
    cfg.d_model = 8, cfg.heads = 2, cfg.ffn = 12, cfg.enc_layers = 2, cfg.dec_layers = 2;
    cfg.max_len = 16, cfg.dropout = dropout, cfg.pre_norm = pre_norm, cfg.final_norm = final_norm;
    cfg.bias = bias, cfg.tie = tie, cfg.learned_pos = learned, cfg.act = act;
    model_ctx c = {NULL, {B, TS, TT, src, src_valid, tgt_in, tgt_out}, dropout};
    int src_ids[B * TS];
    if (tie == QKV_TIE_ALL) { /* the shared vocabulary is the smaller one */
        for (int i = 0; i < B * TS; i++) src_ids[i] = src[i] % VT;
        c.b.src = src_ids;
    }
    qkv_error err = {0};
    assert_int_equal(qkv_transformer_create(&c.m, &cfg, 7, &err), QKV_OK);
    float *params = qkv_transformer_params(c.m), *grads = qkv_transformer_grads(c.m);
    size_t n = qkv_transformer_num_params(c.m);
    double sum;
    int tokens;
    const qkv_loss_options pass = {.backward = 1, .grad_scale = 1.0f, .label_smoothing = 0.1f,
                                   .train = dropout > 0, .dropout_seed = 1234};
    assert_int_equal(qkv_transformer_loss(c.m, &c.b, &pass, &sum, &tokens, &err), QKV_OK);
    assert_int_equal(tokens, 6);
    for (size_t i = 0; i < n; i++) grads[i] /= (float)tokens; /* gradient of the mean */
    /* A deep stack is more curved than one layer: a smaller step keeps the O(h^2) truncation
     * error of central differences below the tolerance (the loss is a mean, so rounding is
     * still far smaller). */
    for (int t = 0; t < qkv_transformer_num_tensors(c.m); t++) {
        qkv_param_info info = qkv_transformer_tensor(c.m, t);
        tu_gradcheck(info.name, params + info.offset, info.numel, grads + info.offset,
                     model_loss, &c, 3e-3f, TU_FD_TOL, 12);
    }
    qkv_transformer_free(c.m);
}

static void test_gradcheck_post_norm(void **state)
{
    (void)state;
    check_variant(0, 0, 0, QKV_TIE_NONE, 0, QKV_ACT_RELU, 0.0f);
}

static void test_gradcheck_post_norm_dropout_bias(void **state)
{
    (void)state;
    check_variant(0, 1, 1, QKV_TIE_OUTPUT, 0, QKV_ACT_GELU, 0.2f);
}

static void test_gradcheck_pre_norm_tied_learned(void **state)
{
    (void)state;
    check_variant(1, 1, 1, QKV_TIE_ALL, 1, QKV_ACT_GELU, 0.1f);
}

/* Parameter count: per layer 4C^2 (+4C bias) attention, 2CF + F + C FFN, 2C per LayerNorm. */
static void test_parameter_table(void **state)
{
    (void)state;
    qkv_transformer_config cfg = qkv_transformer_default_config();
    cfg.src_vocab = 100, cfg.tgt_vocab = 120;
    qkv_transformer *m;
    assert_int_equal(qkv_transformer_create(&m, &cfg, 1, NULL), QKV_OK);
    const size_t C = 32, F = 64;
    size_t enc = 4 * C * C + (2 * C * F + F + C) + 2 * 2 * C;
    size_t dec = 8 * C * C + (2 * C * F + F + C) + 3 * 2 * C;
    size_t want = 100 * C + 120 * C + 2 * enc + 2 * dec + 120 * C + 120;
    assert_int_equal(qkv_transformer_num_params(m), want);
    size_t covered = 0;
    for (int t = 0; t < qkv_transformer_num_tensors(m); t++) {
        qkv_param_info info = qkv_transformer_tensor(m, t);
        assert_int_equal(info.offset, covered); /* contiguous, in order */
        covered += info.numel;
    }
    assert_int_equal(covered, want);
    assert_string_equal(qkv_transformer_tensor(m, 2).name, "encoder.0.attention.W_q");
    qkv_transformer_free(m);
}

/* Padding beyond a source's valid length must not change anything: the encoder masks it. */
static void test_source_padding_is_invisible(void **state)
{
    (void)state;
    qkv_transformer_config cfg = qkv_transformer_default_config();
    cfg.src_vocab = VS, cfg.tgt_vocab = VT, cfg.dropout = 0.0f;
    qkv_transformer *m;
    assert_int_equal(qkv_transformer_create(&m, &cfg, 3, NULL), QKV_OK);
    int s1[TS] = {4, 5, 6, 3, 1}, s2[TS] = {4, 5, 6, 3, 9}, valid = 4;
    int ti[TT] = {2, 4, 5, 6}, to[TT] = {4, 5, 6, 3};
    float l1[TT * VT], l2[TT * VT];
    qkv_batch b1 = {1, TS, TT, s1, &valid, ti, to}, b2 = {1, TS, TT, s2, &valid, ti, to};
    assert_int_equal(qkv_transformer_logits(m, &b1, l1, NULL), QKV_OK);
    assert_int_equal(qkv_transformer_logits(m, &b2, l2, NULL), QKV_OK);
    assert_memory_equal(l1, l2, sizeof l1);
    /* and the decoder is causal: changing the last input token leaves earlier logits alone */
    ti[3] = 8;
    assert_int_equal(qkv_transformer_logits(m, &b1, l2, NULL), QKV_OK);
    assert_memory_equal(l1, l2, 3 * VT * sizeof *l1);
    assert_true(memcmp(l1 + 3 * VT, l2 + 3 * VT, VT * sizeof *l1) != 0);
    qkv_transformer_free(m);
}

static void test_rejects_bad_input(void **state)
{
    (void)state;
    qkv_transformer_config cfg = qkv_transformer_default_config();
    cfg.src_vocab = VS, cfg.tgt_vocab = VT, cfg.max_len = 4;
    qkv_transformer *m;
    qkv_error err = {0};
    cfg.heads = 5;
    assert_int_equal(qkv_transformer_create(&m, &cfg, 1, &err), QKV_ERR_ARG);
    assert_non_null(strstr(err.msg, "heads"));
    cfg.heads = 4;
    assert_int_equal(qkv_transformer_create(&m, &cfg, 1, &err), QKV_OK);
    qkv_batch b = {B, TS, TT, src, src_valid, tgt_in, tgt_out};
    double sum;
    int tokens;
    const qkv_loss_options pass = {.backward = 1, .grad_scale = 1.0f, .train = 1,
                                   .dropout_seed = 1};
    assert_int_equal(qkv_transformer_loss(m, &b, &pass, &sum, &tokens, &err),
                     QKV_ERR_ARG); /* TS = 5 > max_len 4 */
    assert_non_null(strstr(err.msg, "maximum length"));
    int bad[B * 4] = {4, 5, 6, 3, 7, 8, 3, 11}; /* 11 is outside the source vocabulary */
    b.src = bad, b.src_len = 4;
    int bad_valid[B] = {4, 3};
    b.src_valid = bad_valid;
    assert_int_equal(qkv_transformer_loss(m, &b, &pass, &sum, &tokens, &err), QKV_ERR_ARG);
    assert_non_null(strstr(err.msg, "token id 11 at position 7"));
    qkv_transformer_free(m);
}

static int argmax(const float *z, int n)
{
    int best = 0;
    for (int k = 1; k < n; k++)
        if (z[k] > z[best]) best = k;
    return best;
}

/* Greedy decoding with the KV cache must pick exactly what a full teacher-forced forward pass
 * over its own output predicts at every position, and a sentence's translation must not
 * depend on the batch around it. */
static void test_greedy_cache_and_batch_independence(void **state)
{
    (void)state;
    for (int pre_norm = 0; pre_norm < 2; pre_norm++) {
        qkv_transformer_config cfg = qkv_transformer_default_config();
        cfg.src_vocab = 30, cfg.tgt_vocab = 25, cfg.dropout = 0.0f, cfg.bias = 1;
        cfg.pre_norm = pre_norm, cfg.final_norm = pre_norm, cfg.max_len = 32;
        qkv_transformer *m;
        assert_int_equal(qkv_transformer_create(&m, &cfg, 11, NULL), QKV_OK);
        enum { NB = 3, SL = 6, ML = 10 };
        int src_b[NB * SL] = {5, 6, 7, 8, 3, 1, 9, 10, 3, 1, 1, 1, 11, 12, 13, 14, 15, 3};
        int valid[NB] = {5, 3, 6}, out[NB * ML], len[NB];
        assert_int_equal(qkv_transformer_greedy(m, src_b, valid, NB, SL, ML, out, len, NULL),
                         QKV_OK);
        for (int b = 0; b < NB; b++) {
            int alone[ML], alone_len;
            assert_int_equal(qkv_transformer_greedy(m, src_b + b * SL, &valid[b], 1, valid[b],
                                                    ML, alone, &alone_len, NULL), QKV_OK);
            assert_int_equal(alone_len, len[b]);
            assert_memory_equal(alone, out + b * ML, (size_t)len[b] * sizeof(int));
            /* teacher-forced check of every step */
            int T = len[b] < ML ? len[b] + 1 : ML, tin[ML], tout[ML];
            tin[0] = QKV_BOS;
            for (int t = 1; t < T; t++) tin[t] = out[b * ML + t - 1];
            for (int t = 0; t < T; t++) tout[t] = t < len[b] ? out[b * ML + t] : QKV_EOS;
            float *logits = tu_zeros((size_t)T * cfg.tgt_vocab);
            qkv_batch one = {1, valid[b], T, src_b + b * SL, &valid[b], tin, tout};
            assert_int_equal(qkv_transformer_logits(m, &one, logits, NULL), QKV_OK);
            for (int t = 0; t < T; t++)
                assert_int_equal(argmax(logits + (size_t)t * cfg.tgt_vocab, cfg.tgt_vocab),
                                 tout[t]);
            free(logits);
        }
        qkv_transformer_free(m);
    }
}

/* A trained model saved and loaded back translates identically, with bit-identical
 * parameters; a checkpoint restores Adam's state too. */
static void test_save_load_translate(void **state)
{
    (void)state;
    qkv_transformer_config cfg = qkv_transformer_default_config();
    cfg.src_vocab = VS, cfg.tgt_vocab = VT, cfg.max_len = 16, cfg.bias = 1, cfg.tie = QKV_TIE_OUTPUT;
    qkv_transformer *m, *back;
    qkv_error err = {0};
    assert_int_equal(qkv_transformer_create(&m, &cfg, 5, &err), QKV_OK);
    qkv_adam opt;
    assert_int_equal(qkv_adam_init(&opt, qkv_transformer_num_params(m), 0.9f, 0.98f, 1e-9f, 0.0f,
                                   &err), QKV_OK);
    qkv_batch b = {B, TS, TT, src, src_valid, tgt_in, tgt_out};
    for (int step = 0; step < 5; step++) {
        memset(qkv_transformer_grads(m), 0, qkv_transformer_num_params(m) * sizeof(float));
        const qkv_loss_options pass = {.backward = 1, .train = 1, .dropout_seed = (uint64_t)step};
        assert_int_equal(qkv_transformer_loss(m, &b, &pass, NULL, NULL, &err), QKV_OK);
        qkv_adam_update(&opt, qkv_transformer_params(m), qkv_transformer_grads(m), 0.01f);
    }
    int out1[B * 8], len1[B], out2[B * 8], len2[B];
    assert_int_equal(qkv_transformer_greedy(m, src, src_valid, B, TS, 8, out1, len1, &err), QKV_OK);
    char dir[] = "/tmp/qkv-test-XXXXXX", ckpt[64];
    assert_non_null(mkdtemp(dir));
    assert_int_equal(qkv_transformer_save(m, dir, &err), QKV_OK);
    assert_int_equal(qkv_transformer_load(&back, dir, &err), QKV_OK);
    assert_memory_equal(qkv_transformer_params(m), qkv_transformer_params(back),
                        qkv_transformer_num_params(m) * sizeof(float));
    assert_int_equal(qkv_transformer_greedy(back, src, src_valid, B, TS, 8, out2, len2, &err),
                     QKV_OK);
    assert_memory_equal(len1, len2, sizeof len1);
    for (int i = 0; i < B; i++) assert_memory_equal(out1 + i * 8, out2 + i * 8, len1[i] * sizeof(int));
    /* checkpoint round trip: parameters, moments, step, position */
    snprintf(ckpt, sizeof ckpt, "%s/checkpoint.safetensors", dir);
    qkv_train_position pos = {3, 7, 42, 1.5, 99}, pos2 = {0};
    assert_int_equal(qkv_checkpoint_save(ckpt, m, &opt, &pos, &err), QKV_OK);
    qkv_adam opt2;
    assert_int_equal(qkv_adam_init(&opt2, opt.n, 0.9f, 0.98f, 1e-9f, 0.0f, &err), QKV_OK);
    memset(qkv_transformer_params(back), 0, qkv_transformer_num_params(back) * sizeof(float));
    assert_int_equal(qkv_checkpoint_load(ckpt, back, &opt2, &pos2, &err), QKV_OK);
    assert_memory_equal(qkv_transformer_params(m), qkv_transformer_params(back),
                        qkv_transformer_num_params(m) * sizeof(float));
    assert_memory_equal(opt.m, opt2.m, opt.n * sizeof(float));
    assert_memory_equal(opt.v, opt2.v, opt.n * sizeof(float));
    assert_int_equal(opt2.step, 5);
    assert_int_equal(pos2.epoch, 3), assert_int_equal(pos2.batch, 7);
    assert_true(pos2.seed == 42 && pos2.epoch_loss == 1.5 && pos2.epoch_tokens == 99);
    /* a model file with a tensor of the wrong shape is refused, naming the tensor */
    qkv_transformer_config other = cfg;
    other.ffn = 32;
    qkv_transformer *wrong;
    assert_int_equal(qkv_transformer_create(&wrong, &other, 1, &err), QKV_OK);
    assert_int_equal(qkv_checkpoint_load(ckpt, wrong, &opt2, &pos2, &err), QKV_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "ffn.W1"));
    qkv_transformer_free(wrong);
    /* moments that would put NaN into the parameters at the next step are refused */
    opt.v[3] = -1.0f;
    assert_int_equal(qkv_checkpoint_save(ckpt, m, &opt, &pos, &err), QKV_OK);
    assert_int_equal(qkv_checkpoint_load(ckpt, back, &opt2, &pos2, &err), QKV_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "\"adam.v\" element 3 is -1"));
    opt.v[3] = 0.0f, opt.m[5] = NAN;
    assert_int_equal(qkv_checkpoint_save(ckpt, m, &opt, &pos, &err), QKV_OK);
    assert_int_equal(qkv_checkpoint_load(ckpt, back, &opt2, &pos2, &err), QKV_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "\"adam.m\" element 5 is nan"));
    qkv_adam_free(&opt), qkv_adam_free(&opt2);
    qkv_transformer_free(m), qkv_transformer_free(back);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

static void write_text(const char *path, const char *text)
{
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs(text, fp);
    fclose(fp);
}

/* A model directory whose files disagree with each other or are malformed is refused with a
 * message naming the file and the tensor or key. */
static void test_load_rejects_bad_model_files(void **state)
{
    (void)state;
    qkv_transformer_config cfg = qkv_transformer_default_config();
    cfg.src_vocab = VS, cfg.tgt_vocab = VT, cfg.max_len = 16;
    qkv_transformer *m, *back = NULL;
    qkv_error err = {0};
    assert_int_equal(qkv_transformer_create(&m, &cfg, 5, &err), QKV_OK);
    char dir[] = "/tmp/qkv-bad-XXXXXX", path[96], cmd[128];
    assert_non_null(mkdtemp(dir));
    assert_int_equal(qkv_transformer_save(m, dir, &err), QKV_OK);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    const int n = qkv_transformer_num_tensors(m);
    qkv_tensor_ref *refs = calloc((size_t)n + 1, sizeof *refs);
    int32_t ints[VT];
    for (int i = 0; i < n; i++) {
        qkv_param_info t = qkv_transformer_tensor(m, i);
        refs[i] = (qkv_tensor_ref){t.name, QKV_F32, t.ndim, {t.shape[0], t.shape[1]},
                                   qkv_transformer_params(m) + t.offset};
    }
    /* a tensor missing */
    assert_int_equal(qkv_tensor_file_save(path, refs, n - 1, NULL, 0, &err), QKV_OK);
    assert_int_equal(qkv_transformer_load(&back, dir, &err), QKV_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "\"output.b\" is missing"));
    /* a tensor too many */
    refs[n] = (qkv_tensor_ref){"decoder.9.ffn.W1", QKV_F32, 1, {VT}, qkv_transformer_params(m)};
    assert_int_equal(qkv_tensor_file_save(path, refs, n + 1, NULL, 0, &err), QKV_OK);
    assert_int_equal(qkv_transformer_load(&back, dir, &err), QKV_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "unexpected tensor \"decoder.9.ffn.W1\""));
    /* the wrong dtype */
    for (int i = 0; i < VT; i++) ints[i] = i;
    refs[n - 1] = (qkv_tensor_ref){"output.b", QKV_I32, 1, {VT}, ints};
    assert_int_equal(qkv_tensor_file_save(path, refs, n, NULL, 0, &err), QKV_OK);
    assert_int_equal(qkv_transformer_load(&back, dir, &err), QKV_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "\"output.b\" must be F32"));
    assert_int_equal(qkv_transformer_save(m, dir, &err), QKV_OK); /* good again */
    assert_int_equal(qkv_transformer_load(&back, dir, &err), QKV_OK);
    qkv_transformer_free(back);
    /* a model with a NaN is not written (no reader would load it): the saved one stays */
    const qkv_param_info w1 = qkv_transformer_tensor(m, 3);
    float *p = qkv_transformer_params(m) + w1.offset + 1;
    const float kept = *p;
    *p = NAN;
    assert_int_equal(qkv_transformer_save(m, dir, &err), QKV_ERR_NUMERIC);
    char want[160];
    snprintf(want, sizeof want, "model.safetensors: not written: tensor \"%s\" holds a NaN or "
             "Inf at element 1", w1.name);
    assert_non_null(strstr(err.msg, want));
    *p = kept;
    assert_int_equal(qkv_transformer_load(&back, dir, &err), QKV_OK);
    qkv_transformer_free(back);
    /* config.json: invalid JSON, a missing key, a value of the wrong kind */
    snprintf(path, sizeof path, "%s/config.json", dir);
    write_text(path, "{\"format\": \"qkv-transformer\", \"version\": 1,");
    assert_int_equal(qkv_transformer_load(&back, dir, &err), QKV_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "config.json: not valid JSON (at byte"));
    char *json = NULL;
    assert_int_equal(qkv_config_to_json(&cfg, &json, &err), QKV_OK);
    char *key = strstr(json, "\"heads\"");
    assert_non_null(key);
    memcpy(key, "\"hxads\"", 7);
    write_text(path, json);
    assert_int_equal(qkv_transformer_load(&back, dir, &err), QKV_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "\"heads\" must be an integer"));
    free(json);

    /* dimensions past their limits fail at once, naming key and limit, before any
     * allocation (10^7 tokens used to allocate 2.5 GB and then meet a wrong shape) */
    static const struct {
        const char *from, *to, *want;
    } huge[] = {
        {"\"src_vocab\":\t11", "\"src_vocab\": 10000000",
         "src_vocab = 10000000 is over the limit QKV_MAX_VOCAB"},
        {"\"max_len\":\t16", "\"max_len\": 2000000000",
         "max_len = 2000000000 is over the limit QKV_MAX_LEN"},
        {"\"max_len\":\t16", "\"max_len\": 3000000000",
         "\"max_len\" = 3000000000 is out of range"},
        {"\"ffn\":\t64", "\"ffn\": 65537", "ffn = 65537 is over the limit QKV_MAX_FFN"},
        {"\"dec_layers\":\t2", "\"dec_layers\": 257",
         "dec_layers = 257 is over the limit QKV_MAX_LAYERS"},
        /* within every limit, but more parameters than the model file holds */
        {"\"src_vocab\":\t11", "\"src_vocab\": 1000000", "describes a model of"},
        {"\"max_len\":\t16", "\"max_len\": 17", NULL}, /* sinusoidal: no parameter */
    };
    for (size_t i = 0; i < sizeof huge / sizeof huge[0]; i++) {
        assert_int_equal(qkv_config_to_json(&cfg, &json, &err), QKV_OK);
        char *at = strstr(json, huge[i].from);
        if (!at) fail_msg("config.json has no %s: %s", huge[i].from, json);
        char edited[4096];
        snprintf(edited, sizeof edited, "%.*s%s%s", (int)(at - json), json, huge[i].to,
                 at + strlen(huge[i].from));
        free(json);
        write_text(path, edited);
        qkv_status st = qkv_transformer_load(&back, dir, &err);
        if (!huge[i].want) {
            assert_int_equal(st, QKV_OK);
            qkv_transformer_free(back);
            continue;
        }
        if (st == QKV_OK || !strstr(err.msg, huge[i].want))
            fail_msg("%s: got \"%s\", want \"%s\"", huge[i].to, err.msg, huge[i].want);
        assert_null(back);
    }
    free(refs);
    qkv_transformer_free(m);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

/* The parameter count the limits and the model-file check use, computed from the
 * configuration alone, is the model's own in every variant; each limit on its boundary. */
static void test_config_limits(void **state)
{
    (void)state;
    qkv_error err = {0};
    for (int v = 0; v < 12; v++) {
        qkv_transformer_config c = qkv_transformer_default_config();
        c.src_vocab = VS, c.tgt_vocab = v % 3 == 2 ? VS : VT, c.max_len = 9;
        c.tie = (qkv_tie)(v % 3), c.learned_pos = v & 1, c.final_norm = (v >> 1) & 1;
        c.bias = (v >> 2) & 1, c.enc_layers = v % 4 == 3 ? 0 : 1 + v % 2, c.ffn = 24 + v;
        qkv_transformer *m;
        assert_int_equal(qkv_transformer_create(&m, &c, 1, &err), QKV_OK);
        if (transformer_config_params(&c) != (double)qkv_transformer_num_params(m))
            fail_msg("variant %d: counted %.0f parameters, the model has %zu", v,
                     transformer_config_params(&c), qkv_transformer_num_params(m));
        qkv_transformer_free(m);
    }
    qkv_transformer_config c = qkv_transformer_default_config();
    c.src_vocab = c.tgt_vocab = QKV_MAX_VOCAB, c.max_len = QKV_MAX_LEN, c.ffn = QKV_MAX_FFN;
    c.enc_layers = c.dec_layers = QKV_MAX_LAYERS, c.d_model = 8, c.heads = 1;
    assert_int_equal(qkv_transformer_config_check(&c, &err), QKV_OK);
    const struct {
        int *field;
        const char *want;
    } one_past[] = {
        {&c.src_vocab, "src_vocab = 2097153 is over the limit QKV_MAX_VOCAB = 2097152"},
        {&c.tgt_vocab, "tgt_vocab = 2097153"},
        {&c.max_len, "max_len = 65537 is over the limit QKV_MAX_LEN = 65536"},
        {&c.ffn, "ffn = 65537 is over the limit QKV_MAX_FFN"},
        {&c.enc_layers, "enc_layers = 257 is over the limit QKV_MAX_LAYERS"},
        {&c.dec_layers, "dec_layers = 257"},
    };
    for (size_t i = 0; i < sizeof one_past / sizeof one_past[0]; i++) {
        ++*one_past[i].field;
        assert_int_equal(qkv_transformer_config_check(&c, &err), QKV_ERR_ARG);
        if (!strstr(err.msg, one_past[i].want))
            fail_msg("\"%s\": want %s", err.msg, one_past[i].want);
        --*one_past[i].field;
    }
    c = qkv_transformer_default_config();
    c.src_vocab = c.tgt_vocab = 100, c.d_model = QKV_MAX_D_MODEL, c.heads = 1;
    c.enc_layers = 0, c.dec_layers = 1, c.ffn = 1, c.max_len = 2;
    /* at its limit d_model passes its own check; the 2 x 4 C^2 weights of a decoder block
     * are then 2^31, over the parameter limit with anything else */
    assert_int_equal(qkv_transformer_config_check(&c, &err), QKV_ERR_ARG);
    assert_non_null(strstr(err.msg, "over the limit QKV_MAX_PARAMS"));
    c.d_model++;
    assert_int_equal(qkv_transformer_config_check(&c, &err), QKV_ERR_ARG);
    assert_non_null(strstr(err.msg, "d_model = 16385 is over the limit QKV_MAX_D_MODEL"));
    /* the parameter limit itself: a configuration of exactly 2^31 floats, table included,
     * passes, 1024 more (one more position) do not */
    c = qkv_transformer_default_config();
    c.d_model = 1024, c.heads = 1, c.ffn = 1, c.enc_layers = 0, c.dec_layers = 1;
    c.tie = QKV_TIE_ALL, c.max_len = 0;
    double rest = 0;
    for (c.src_vocab = QKV_MAX_VOCAB; c.src_vocab > 4; c.src_vocab--) {
        c.tgt_vocab = c.src_vocab;
        rest = (double)QKV_MAX_PARAMS - transformer_config_params(&c);
        if (rest >= 2 * 1024 && rest <= 1024.0 * QKV_MAX_LEN && fmod(rest, 1024) == 0) break;
    }
    c.max_len = (int)(rest / 1024);
    assert_true(transformer_config_params(&c) + 1024.0 * c.max_len == (double)QKV_MAX_PARAMS);
    assert_int_equal(qkv_transformer_config_check(&c, &err), QKV_OK);
    c.max_len++;
    assert_int_equal(qkv_transformer_config_check(&c, &err), QKV_ERR_ARG);
    assert_non_null(strstr(err.msg, "2147484672 parameters"));
    assert_non_null(strstr(err.msg, "over the limit QKV_MAX_PARAMS = 2147483648"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gradcheck_post_norm),
        cmocka_unit_test(test_gradcheck_post_norm_dropout_bias),
        cmocka_unit_test(test_gradcheck_pre_norm_tied_learned),
        cmocka_unit_test(test_parameter_table),
        cmocka_unit_test(test_source_padding_is_invisible),
        cmocka_unit_test(test_rejects_bad_input),
        cmocka_unit_test(test_greedy_cache_and_batch_independence),
        cmocka_unit_test(test_save_load_translate),
        cmocka_unit_test(test_load_rejects_bad_model_files),
        cmocka_unit_test(test_config_limits),
    };
    return cmocka_run_group_tests_name("transformer", tests, NULL, NULL);
}
