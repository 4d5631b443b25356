/* SPDX-License-Identifier: MIT */
/* int8 model files (qkv_model_quantize):
 *   round trip   the file is a quarter of the float32 one; loaded, its float32 parameters are
 *                the weights dequantised (s * round(w / s), computed here from the float32
 *                model) and the rest as they were; it loads at int8 and decodes bit for bit as
 *                the float32 model does at int8 (logits, greedy, beam with its scores), for
 *                both model kinds and every way of tying the embeddings; fp32 on it computes
 *                with the dequantised weights; fp32 and back to int8 keeps the file's matrices;
 *   refusals     another precision, a directory already int8, writing into the model's own
 *                directory;
 *   bad files    every rule of the reader, each error naming the tensor (or config.json's key).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_util.h"

static void temp_dir(char *dir, size_t cap)
{
    snprintf(dir, cap, "/tmp/qkv_quantize_XXXXXX");
    assert_non_null(mkdtemp(dir));
}

static void remove_tree(const char *dir)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

static long file_size(const char *dir, const char *name)
{
    char path[512];
    struct stat sb;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    assert_int_equal(stat(path, &sb), 0);
    return (long)sb.st_size;
}

/* Whether int8 quantises this tensor (the test's own statement of the rule). */
static int quantised(const qkv_param_info *t)
{
    const char *n = t->name;
    const size_t len = strlen(n);
    static const char *const tails[] = {".W_q", ".W_k", ".W_v", ".W_o", ".W1", ".W2", "embedding"};
    if (t->ndim != 2) return 0;
    if (!strcmp(n, "output.W")) return 1;
    for (size_t i = 0; i < sizeof tails / sizeof *tails; i++)
        if (len >= strlen(tails[i]) && !strcmp(n + len - strlen(tails[i]), tails[i])) return 1;
    return 0;
}

/* w dequantised as int8 stores it: s = max |w| / 127, q = round(w 127 / max |w|) in
 * [-127, 127], s q. */
static void dequantised_row(float *out, const float *w, int in)
{
    float amax = 0.0f;
    for (int k = 0; k < in; k++) amax = fmaxf(amax, fabsf(w[k]));
    const float s = amax / 127.0f, inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    for (int k = 0; k < in; k++) {
        long q = lrintf(w[k] * inv);
        q = q > 127 ? 127 : q < -127 ? -127 : q;
        out[k] = (float)q * s;
    }
}

static qkv_transformer *random_transformer(qkv_tie tie, int pre_norm, uint64_t seed)
{
    qkv_transformer_config c = qkv_transformer_default_config();
    c.src_vocab = c.tgt_vocab = 200, c.d_model = 64, c.heads = 4, c.ffn = 128;
    c.enc_layers = 2, c.dec_layers = 2, c.max_len = 24, c.tie = tie;
    c.pre_norm = c.final_norm = c.bias = pre_norm;
    if (pre_norm) c.act = QKV_ACT_GELU;
    qkv_transformer *m;
    assert_int_equal(qkv_transformer_create(&m, &c, seed, NULL), QKV_OK);
    /* non-zero biases and norms, so that a lost one would show */
    float *p = qkv_transformer_params(m);
    for (int i = 0; i < qkv_transformer_num_tensors(m); i++) {
        const qkv_param_info t = qkv_transformer_tensor(m, i);
        if (t.ndim == 1)
            for (size_t k = 0; k < t.numel; k++)
                p[t.offset + k] += 0.05f * sinf((float)(k + 7 * i));
    }
    return m;
}

enum { B = 4, TS = 9, TT = 7 };

static void sources(int *src, int *valid, int V)
{
    for (int b = 0; b < B; b++) {
        valid[b] = TS - b;
        for (int t = 0; t < TS; t++)
            src[b * TS + t] = t < valid[b] ? QKV_N_RESERVED + (b * 31 + t * 17) % (V - 4) : QKV_PAD;
    }
}

/* Logits of a teacher-forced batch, greedy and beam-3 outputs (with scores) of m, in out. */
typedef struct {
    float logits[B * TT * 200];
    int greedy[B * TT], greedy_len[B];
    int beam[B * 2 * TT], beam_len[B * 2];
    double score[B * 2];
} decoded;

static void decode_all(qkv_transformer *m, decoded *d)
{
    const int V = qkv_transformer_get_config(m)->tgt_vocab;
    int src[B * TS], valid[B], tgt[B * TT];
    sources(src, valid, V);
    for (int i = 0; i < B * TT; i++) tgt[i] = QKV_N_RESERVED + (i * 13) % (V - 4);
    const qkv_batch batch = {B, TS, TT, src, valid, tgt, tgt};
    memset(d, 0, sizeof *d);
    assert_int_equal(qkv_transformer_logits(m, &batch, d->logits, NULL), QKV_OK);
    assert_int_equal(qkv_transformer_greedy(m, src, valid, B, TS, TT, d->greedy, d->greedy_len,
                                            NULL), QKV_OK);
    const qkv_beam_options o = {3, 2, TT, 0.6f, QKV_BEAM_STOP_BOUND, NULL};
    qkv_beam_results r = {d->beam, d->beam_len, d->score, NULL};
    assert_int_equal(qkv_transformer_beam(m, src, valid, B, TS, &o, &r, NULL), QKV_OK);
}

static void assert_same(const decoded *a, const decoded *b)
{
    assert_memory_equal(a->logits, b->logits, sizeof a->logits);
    assert_memory_equal(a->greedy, b->greedy, sizeof a->greedy);
    assert_memory_equal(a->greedy_len, b->greedy_len, sizeof a->greedy_len);
    assert_memory_equal(a->beam, b->beam, sizeof a->beam);
    assert_memory_equal(a->beam_len, b->beam_len, sizeof a->beam_len);
    assert_memory_equal(a->score, b->score, sizeof a->score);
}

static void check_transformer(qkv_tie tie, int pre_norm)
{
    char dir[64], dir8[64];
    temp_dir(dir, sizeof dir), temp_dir(dir8, sizeof dir8);
    qkv_transformer *m = random_transformer(tie, pre_norm, 11 + tie), *m8 = NULL, *deq = NULL;
    assert_int_equal(qkv_transformer_save(m, dir, NULL), QKV_OK);
    qkv_error err = {0};
    assert_int_equal(qkv_model_quantize(dir, dir8, QKV_PRECISION_INT8, &err), QKV_OK);
    /* a quarter, and a little: the scales, biases, norms */
    const long f32 = file_size(dir, "model.safetensors"), i8 = file_size(dir8, "model.safetensors");
    print_message("  tie %d: %ld bytes float32, %ld int8 (%.3f)\n", (int)tie, f32, i8,
                  (double)i8 / (double)f32);
    assert_true(i8 < f32 * 0.3);
    assert_int_equal(qkv_transformer_load(&m8, dir8, &err), QKV_OK);
    assert_int_equal(qkv_transformer_get_precision(m8),
                     qkv_int8_supported() ? QKV_PRECISION_INT8 : QKV_PRECISION_FP32);

    /* the float32 view: dequantised matrices, everything else as it was */
    assert_int_equal(qkv_transformer_load(&deq, dir, NULL), QKV_OK);
    float *want = qkv_transformer_params(deq);
    const float *orig = qkv_transformer_params(m);
    int n_quantised = 0;
    for (int i = 0; i < qkv_transformer_num_tensors(m); i++) {
        const qkv_param_info t = qkv_transformer_tensor(m, i);
        if (!quantised(&t)) continue;
        n_quantised++;
        for (int o = 0; o < t.shape[0]; o++)
            dequantised_row(want + t.offset + (size_t)o * t.shape[1],
                            orig + t.offset + (size_t)o * t.shape[1], t.shape[1]);
    }
    assert_true(n_quantised >= 2 * 4 + 2 * 8 + 2 + (tie == QKV_TIE_ALL ? 1 : 2));
    /* (a second copy: handing out the parameters marks the int8 matrices as stale, and
     * decoding would then quantise the float32 view again instead of reading the file's) */
    qkv_transformer *view;
    assert_int_equal(qkv_transformer_load(&view, dir8, NULL), QKV_OK);
    const size_t n = qkv_transformer_num_params(m);
    assert_memory_equal(qkv_transformer_params(view), want, n * sizeof *want);
    qkv_transformer_free(view);

    decoded *a = malloc(sizeof *a), *b = malloc(sizeof *b);
    assert_non_null(a), assert_non_null(b);
    if (qkv_int8_supported()) {
        /* the int8 file decodes as the float32 model at int8, bit for bit */
        assert_int_equal(qkv_transformer_set_precision(m, QKV_PRECISION_INT8, NULL), QKV_OK);
        decode_all(m, a);
        decode_all(m8, b);
        assert_same(a, b);
        /* fp32 and back keeps the file's matrices */
        assert_int_equal(qkv_transformer_set_precision(m8, QKV_PRECISION_FP32, NULL), QKV_OK);
        assert_int_equal(qkv_transformer_set_precision(m8, QKV_PRECISION_INT8, NULL), QKV_OK);
        decode_all(m8, b);
        assert_same(a, b);
    }
    /* fp32 on the int8 file: the dequantised weights */
    assert_int_equal(qkv_transformer_set_precision(m8, QKV_PRECISION_FP32, NULL), QKV_OK);
    decode_all(deq, a);
    decode_all(m8, b);
    assert_same(a, b);
    free(a), free(b);
    qkv_transformer_free(m), qkv_transformer_free(m8), qkv_transformer_free(deq);
    remove_tree(dir), remove_tree(dir8);
}

static void test_transformer_round_trip(void **state)
{
    (void)state;
    check_transformer(QKV_TIE_NONE, 0);
    check_transformer(QKV_TIE_OUTPUT, 1);
    check_transformer(QKV_TIE_ALL, 0);
}

static void check_lm(int tie)
{
    char dir[64], dir8[64];
    temp_dir(dir, sizeof dir), temp_dir(dir8, sizeof dir8);
    qkv_lm_config c = qkv_lm_default_config();
    c.vocab = 150, c.d_model = 64, c.heads = 4, c.ffn = 128, c.layers = 2, c.max_len = 16;
    c.tie = tie;
    qkv_lm *m, *m8;
    assert_int_equal(qkv_lm_create(&m, &c, 3, NULL), QKV_OK);
    assert_int_equal(qkv_lm_save(m, dir, NULL), QKV_OK);
    qkv_error err = {0};
    assert_int_equal(qkv_model_quantize(dir, dir8, QKV_PRECISION_INT8, &err), QKV_OK);
    assert_true(file_size(dir8, "model.safetensors") < file_size(dir, "model.safetensors") * 0.3);
    assert_int_equal(qkv_lm_load(&m8, dir8, &err), QKV_OK);
    if (qkv_int8_supported()) {
        assert_int_equal(qkv_lm_get_precision(m8), QKV_PRECISION_INT8);
        assert_int_equal(qkv_lm_set_precision(m, QKV_PRECISION_INT8, NULL), QKV_OK);
        enum { T = 12 };
        int ids[2 * T];
        for (int i = 0; i < 2 * T; i++) ids[i] = 4 + (i * 7) % 140;
        float *x = tu_zeros((size_t)2 * T * c.vocab), *y = tu_zeros((size_t)2 * T * c.vocab);
        assert_int_equal(qkv_lm_logits(m, ids, 2, T, x, NULL), QKV_OK);
        assert_int_equal(qkv_lm_logits(m8, ids, 2, T, y, NULL), QKV_OK);
        assert_memory_equal(x, y, (size_t)2 * T * c.vocab * sizeof *x);
        free(x), free(y);
    }
    qkv_lm_free(m), qkv_lm_free(m8);
    remove_tree(dir), remove_tree(dir8);
}

static void test_lm_round_trip(void **state)
{
    (void)state;
    check_lm(0);
    check_lm(1);
}

static void test_refusals(void **state)
{
    (void)state;
    char dir[64], dir8[64], again[64];
    temp_dir(dir, sizeof dir), temp_dir(dir8, sizeof dir8), temp_dir(again, sizeof again);
    qkv_transformer *m = random_transformer(QKV_TIE_ALL, 0, 5);
    assert_int_equal(qkv_transformer_save(m, dir, NULL), QKV_OK);
    qkv_error err = {0};
    assert_int_equal(qkv_model_quantize(dir, dir8, QKV_PRECISION_BF16, &err), QKV_ERR_ARG);
    assert_non_null(strstr(err.msg, "int8"));
    assert_int_equal(qkv_model_quantize(dir, dir, QKV_PRECISION_INT8, &err), QKV_ERR_ARG);
    assert_non_null(strstr(err.msg, "directory of its own"));
    assert_int_equal(qkv_model_quantize(dir, dir8, QKV_PRECISION_INT8, &err), QKV_OK);
    assert_int_equal(qkv_model_quantize(dir8, again, QKV_PRECISION_INT8, &err), QKV_ERR_ARG);
    assert_non_null(strstr(err.msg, "int8 model file already"));
    qkv_transformer_free(m);
    remove_tree(dir), remove_tree(dir8), remove_tree(again);
}

/* ---- bad files: one change to a good int8 file each --------------------------------------- */

typedef struct {
    const char *tensor; /* the tensor changed */
    int what;           /* how */
    const char *expect; /* in the message */
} bad_case;

enum { SCALE_NAN, SCALE_INF, SCALE_NEG, SCALE_HUGE, SCALE_ZERO, WEIGHT_128, DROP, SCALE_SHAPE,
       AS_F32, EXTRA };

/* dir8's model.safetensors rewritten with the change. */
static void rewrite(const char *dir8, const bad_case *c)
{
    char path[512];
    snprintf(path, sizeof path, "%s/model.safetensors", dir8);
    qkv_tensor_file f;
    assert_int_equal(qkv_tensor_file_load(&f, path, NULL), QKV_OK);
    qkv_tensor_ref *refs = calloc((size_t)f.count + 1, sizeof *refs);
    float *as_f32 = NULL, extra = 1.0f;
    int n = 0;
    for (int i = 0; i < f.count; i++) {
        qkv_tensor *t = &f.tensors[i];
        qkv_tensor_ref r = {t->name, t->dtype, t->ndim, {0}, t->data};
        memcpy(r.shape, t->shape, sizeof r.shape);
        if (!strcmp(t->name, c->tensor)) {
            float *s = t->data;
            int8_t *w = t->data;
            switch (c->what) {
            case SCALE_NAN: s[3] = NAN; break;
            case SCALE_INF: s[3] = INFINITY; break;
            case SCALE_NEG: s[3] = -1.0f; break;
            case SCALE_HUGE: s[3] = 1e37f; break;
            case SCALE_ZERO: s[3] = 0.0f; break;
            case WEIGHT_128: w[70] = -128; break;
            case DROP: continue;
            case SCALE_SHAPE: r.shape[0]--; break;
            case AS_F32:
                as_f32 = tu_zeros((size_t)t->numel);
                for (int64_t k = 0; k < t->numel; k++) as_f32[k] = w[k];
                r.dtype = QKV_F32, r.data = as_f32;
                break;
            }
        }
        refs[n++] = r;
    }
    if (c->what == EXTRA) refs[n++] = (qkv_tensor_ref){c->tensor, QKV_F32, 1, {1}, &extra};
    const char *meta[2] = {"format", "qkv-transformer"};
    assert_int_equal(qkv_tensor_file_save(path, refs, n, meta, 1, NULL), QKV_OK);
    free(refs), free(as_f32);
    qkv_tensor_file_free(&f);
}

static void write_config(const char *dir, const char *from, const char *weights)
{
    char path[512], cmd[1200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    snprintf(cmd, sizeof cmd, "sed 's/\"weights\":.*/\"weights\": %s/' '%s/config.json' > '%s'",
             weights, from, path);
    assert_int_equal(system(cmd), 0);
}

static void test_bad_files(void **state)
{
    (void)state;
    char dir[64], dir8[64], bad[64];
    temp_dir(dir, sizeof dir), temp_dir(dir8, sizeof dir8), temp_dir(bad, sizeof bad);
    qkv_transformer *m = random_transformer(QKV_TIE_ALL, 0, 9), *x = NULL;
    assert_int_equal(qkv_transformer_save(m, dir, NULL), QKV_OK);
    assert_int_equal(qkv_model_quantize(dir, dir8, QKV_PRECISION_INT8, NULL), QKV_OK);
    const bad_case cases[] = {
        {"decoder.0.ffn.W1.scale", SCALE_NAN, "\"decoder.0.ffn.W1.scale\" element 3 is nan"},
        {"decoder.0.ffn.W1.scale", SCALE_INF, "\"decoder.0.ffn.W1.scale\" element 3 is inf"},
        {"embedding.scale", SCALE_NEG, "\"embedding.scale\" element 3 is -1"},
        {"encoder.1.attention.W_v.scale", SCALE_HUGE, "\"encoder.1.attention.W_v.scale\" element 3"},
        {"decoder.1.cross_attention.W_k.scale", SCALE_ZERO,
         "only a row of zeros has scale 0"},
        {"encoder.0.attention.W_q", WEIGHT_128, "\"encoder.0.attention.W_q\" element 70 is -128"},
        {"decoder.0.ffn.W2.scale", DROP, "\"decoder.0.ffn.W2.scale\" is missing"},
        {"decoder.0.ffn.W2", DROP, "\"decoder.0.ffn.W2\" is missing"},
        {"embedding.scale", SCALE_SHAPE, "\"embedding.scale\" has shape [199], the configuration "
                                         "needs [200]"},
        {"decoder.0.self_attention.W_o", AS_F32, "\"decoder.0.self_attention.W_o\" must be I8"},
        {"decoder.0.norm1.gamma.scale", EXTRA, "unexpected tensor \"decoder.0.norm1.gamma.scale\""},
    };
    char cmd[256];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        snprintf(cmd, sizeof cmd, "cp %s/* %s/", dir8, bad);
        assert_int_equal(system(cmd), 0);
        rewrite(bad, &cases[i]);
        qkv_error err = {0};
        const qkv_status st = qkv_transformer_load(&x, bad, &err);
        print_message("  %s: %s\n", cases[i].tensor, err.msg);
        assert_true(st == QKV_ERR_FORMAT || st == QKV_ERR_NUMERIC);
        assert_null(x);
        assert_non_null(strstr(err.msg, cases[i].expect));
        assert_non_null(strstr(err.msg, "model.safetensors"));
    }
    /* config.json: a weights type qkv does not write, or none where the file is int8 */
    snprintf(cmd, sizeof cmd, "cp %s/* %s/", dir8, bad);
    assert_int_equal(system(cmd), 0);
    const char *configs[][2] = {
        {"\"bf16\"", "\"weights\" is \"bf16\""},
        {"\"int4\"", "weights"},
        {"\"fp32\"", "bytes of float32"},
    };
    for (size_t i = 0; i < sizeof configs / sizeof *configs; i++) {
        write_config(bad, dir8, configs[i][0]);
        qkv_error err = {0};
        assert_int_not_equal(qkv_transformer_load(&x, bad, &err), QKV_OK);
        print_message("  weights %s: %s\n", configs[i][0], err.msg);
        assert_non_null(strstr(err.msg, configs[i][1]));
    }
    qkv_transformer_free(m);
    remove_tree(dir), remove_tree(dir8), remove_tree(bad);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_transformer_round_trip),
        cmocka_unit_test(test_lm_round_trip),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_bad_files),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
