/* SPDX-License-Identifier: MIT */
/* One call opens a model directory of either kind (qkv_model_open), and the generator is a
 * language model's directory as one object: model, vocabulary and train.json's settings. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_util.h"

static const char *const TEXT = "to be or not to be, that is the question.\n";

static void temp_dir(char *dir, size_t cap)
{
    snprintf(dir, cap, "/tmp/qkv_model_open_XXXXXX");
    assert_non_null(mkdtemp(dir));
}

static void remove_tree(const char *dir)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

static void write_file(const char *dir, const char *name, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_true(fputs(text, f) >= 0);
    assert_int_equal(fclose(f), 0);
}

/* A character language model of TEXT saved in dir with its vocabulary and train.json. */
static void lm_dir(const char *dir, const char *train_json)
{
    qkv_vocab v = {0};
    assert_int_equal(qkv_lm_vocab_build(&v, TEXT, strlen(TEXT), 0, NULL), QKV_OK);
    qkv_lm_config cfg = qkv_lm_default_config();
    cfg.vocab = v.size, cfg.d_model = 16, cfg.heads = 2, cfg.ffn = 32, cfg.layers = 1;
    cfg.max_len = 24;
    qkv_lm *m;
    assert_int_equal(qkv_lm_create(&m, &cfg, 5, NULL), QKV_OK);
    assert_int_equal(qkv_lm_save(m, dir, NULL), QKV_OK);
    char path[512];
    snprintf(path, sizeof path, "%s/vocab.txt", dir);
    assert_int_equal(qkv_vocab_save(&v, path, NULL), QKV_OK);
    if (train_json) write_file(dir, "train.json", train_json);
    qkv_lm_free(m);
    qkv_vocab_free(&v);
}

static void test_generator(void **state)
{
    (void)state;
    char dir[64];
    temp_dir(dir, sizeof dir);
    lm_dir(dir, "{\"context\": 16, \"batch\": 8, \"val_fraction\": 0.25, \"vocab\": \"char\"}\n");
    qkv_model h;
    qkv_error err = {0};
    if (qkv_model_open(&h, dir, &err)) fail_msg("%s", err.msg);
    assert_int_equal(h.kind, QKV_MODEL_GENERATOR);
    assert_null(h.translator);
    qkv_generator *g = h.generator;
    const qkv_lm_run_info *info = qkv_generator_run_info(g);
    assert_int_equal(info->context, 16);
    assert_int_equal(info->batch, 8);
    assert_float_equal(info->val_fraction, 0.25f, 1e-7f);
    assert_int_equal(info->byte_level, 0);
    assert_int_equal(qkv_generator_vocab(g)->size, qkv_lm_get_config(qkv_generator_model(g))->vocab);
    /* text -> ids -> text */
    int *ids;
    size_t n, unknown;
    assert_int_equal(qkv_generator_encode(g, "not to be?", 10, &ids, &n, &unknown, NULL), QKV_OK);
    assert_int_equal(n, 10);
    assert_int_equal(unknown, 1); /* '?' is not in TEXT */
    char text[32];
    assert_int_equal(qkv_generator_decode(g, NULL, 0, ids, 9), 9);
    assert_int_equal(qkv_generator_decode(g, text, sizeof text, ids, 9), 9);
    assert_string_equal(text, "not to be");
    assert_int_equal(qkv_generator_decode(g, text, 4, ids, 9), 9); /* cut, NUL written */
    assert_string_equal(text, "not");
    free(ids);
    /* and generation runs on its model */
    int out[5];
    const qkv_lm_generation gen = {5, {0.0f, 0, 1.0f}, 1, NULL, NULL, 1};
    assert_int_equal(qkv_generator_encode(g, "to be", 5, &ids, &n, NULL, NULL), QKV_OK);
    assert_int_equal(qkv_lm_generate(qkv_generator_model(g), ids, (int)n, out, NULL, &gen, NULL),
                     QKV_OK);
    free(ids);
    qkv_model_close(&h);
    assert_null(h.generator);
    remove_tree(dir);
}

static void test_generator_defaults_and_errors(void **state)
{
    (void)state;
    char dir[64], path[600];
    temp_dir(dir, sizeof dir);
    lm_dir(dir, NULL); /* no train.json: the defaults */
    qkv_generator *g = NULL;
    qkv_error err = {0};
    if (qkv_generator_open(&g, dir, &err)) fail_msg("%s", err.msg);
    assert_int_equal(qkv_generator_run_info(g)->context, 0);
    assert_float_equal(qkv_generator_run_info(g)->val_fraction, 0.1f, 1e-7f);
    qkv_generator_free(g);
    /* a vocabulary of another size than the model's, named */
    write_file(dir, "vocab.txt", "<unk>\n<pad>\n<bos>\n<eos>\na\n");
    assert_int_equal(qkv_generator_open(&g, dir, &err), QKV_ERR_FORMAT);
    assert_null(g);
    snprintf(path, sizeof path, "%s/vocab.txt", dir);
    assert_non_null(strstr(err.msg, path));
    /* no config.json: the error names it */
    snprintf(path, sizeof path, "%s/config.json", dir);
    assert_int_equal(unlink(path), 0);
    qkv_model h;
    assert_int_not_equal(qkv_model_open(&h, dir, &err), QKV_OK);
    assert_non_null(strstr(err.msg, "config.json"));
    assert_null(h.generator);
    assert_null(h.translator);
    remove_tree(dir);
}

static void test_translator_dir(void **state)
{
    (void)state;
    char dir[64], path[512];
    temp_dir(dir, sizeof dir);
    qkv_sentences s = {0};
    qkv_vocab v = {0};
    assert_int_equal(qkv_sentences_from_text(&s, TEXT, strlen(TEXT), "text", NULL), QKV_OK);
    assert_int_equal(qkv_vocab_build(&v, s.tokens, s.n_tokens, 1, NULL), QKV_OK);
    qkv_transformer_config cfg = qkv_transformer_default_config();
    cfg.src_vocab = cfg.tgt_vocab = v.size, cfg.max_len = 16, cfg.dropout = 0.0f;
    qkv_transformer *m;
    assert_int_equal(qkv_transformer_create(&m, &cfg, 3, NULL), QKV_OK);
    assert_int_equal(qkv_transformer_save(m, dir, NULL), QKV_OK);
    snprintf(path, sizeof path, "%s/src_vocab.txt", dir);
    assert_int_equal(qkv_vocab_save(&v, path, NULL), QKV_OK);
    snprintf(path, sizeof path, "%s/tgt_vocab.txt", dir);
    assert_int_equal(qkv_vocab_save(&v, path, NULL), QKV_OK);
    qkv_model h;
    qkv_error err = {0};
    if (qkv_model_open(&h, dir, &err)) fail_msg("%s", err.msg);
    assert_int_equal(h.kind, QKV_MODEL_TRANSLATOR);
    assert_null(h.generator);
    assert_non_null(h.translator);
    const char *src[] = {"to be or not"};
    qkv_translations r;
    const qkv_translate_options o = qkv_translate_default_options();
    assert_int_equal(qkv_translate(&r, h.translator, src, 1, &o, NULL), QKV_OK);
    assert_int_equal(r.count, 1);
    qkv_translations_free(&r);
    qkv_model_close(&h);
    qkv_transformer_free(m);
    qkv_sentences_free(&s);
    qkv_vocab_free(&v);
    remove_tree(dir);
}

/* The one rule of the key-value cache's type, as the library resolves AUTO. */
static void test_kv_cache_rule(void **state)
{
    (void)state;
    qkv_lm_config cfg = qkv_lm_default_config();
    cfg.vocab = 8, cfg.d_model = 16, cfg.heads = 2, cfg.ffn = 16, cfg.layers = 1, cfg.max_len = 8;
    qkv_lm *m;
    assert_int_equal(qkv_lm_create(&m, &cfg, 1, NULL), QKV_OK);
    assert_int_equal(qkv_lm_kv_cache_type(m), QKV_KV_CACHE_FP32);
    assert_int_equal(qkv_lm_set_kv_cache(m, QKV_KV_CACHE_BF16, NULL), QKV_OK);
    assert_int_equal(qkv_lm_kv_cache_type(m), QKV_KV_CACHE_BF16);
    assert_int_equal(qkv_lm_set_kv_cache(m, QKV_KV_CACHE_AUTO, NULL), QKV_OK);
    if (qkv_bf16_supported()) {
        assert_int_equal(qkv_lm_set_precision(m, QKV_PRECISION_BF16, NULL), QKV_OK);
        assert_int_equal(qkv_lm_kv_cache_type(m), QKV_KV_CACHE_BF16);
    }
    if (qkv_int8_supported()) { /* bf16 only where the CPU has AVX512-BF16 */
        assert_int_equal(qkv_lm_set_precision(m, QKV_PRECISION_INT8, NULL), QKV_OK);
        assert_int_equal(qkv_lm_kv_cache_type(m),
                         qkv_bf16_supported() ? QKV_KV_CACHE_BF16 : QKV_KV_CACHE_FP32);
    }
    qkv_lm_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_generator),
        cmocka_unit_test(test_generator_defaults_and_errors),
        cmocka_unit_test(test_translator_dir),
        cmocka_unit_test(test_kv_cache_rule),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
