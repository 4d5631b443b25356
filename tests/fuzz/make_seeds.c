/* SPDX-License-Identifier: MIT */
/* Writes the binary seeds of the fuzz corpus (make fuzz-seeds): valid files of every kind the
 * structured harnesses read, so that mutations start deep inside the readers.
 *   <dir>/safetensors/  every dtype (F16 and BF16 too), a scalar, an empty tensor, metadata,
 *                       a tensor at an unaligned offset after a gap, an empty header, the
 *                       small model
 *   <dir>/config/       configurations exercising every key and choice
 *   <dir>/checkpoint/   the model and a training checkpoint of fuzz_small_config()
 *   <dir>/lm_config/    language-model configurations exercising every key and choice
 *   <dir>/lm_model/     the model and a training checkpoint of fuzz_lm_small_config() */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz_common.h"
#include "models/language_model_internal.h"

static void ok(qkv_status st, const qkv_error *err)
{
    if (st != QKV_OK) {
        fprintf(stderr, "make_seeds: %s\n", err->msg);
        exit(1);
    }
}

static void write_file(const char *dir, const char *sub, const char *name, const void *bytes,
                       size_t n)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, sub);
    mkdir(path, 0777);
    snprintf(path, sizeof path, "%s/%s/%s", dir, sub, name);
    fuzz_write(path, bytes, n);
}

/* A safetensors image from a header text and a data section, as a writer other than qkv's
 * might lay it out. */
static void write_raw(const char *dir, const char *name, const char *header, const void *data,
                      size_t data_len)
{
    size_t h = strlen(header), n = 8 + h + data_len;
    unsigned char *buf = malloc(n);
    if (!buf) exit(1);
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)h >> (8 * i));
    memcpy(buf + 8, header, h);
    memcpy(buf + 8 + h, data, data_len);
    write_file(dir, "safetensors", name, buf, n);
    free(buf);
}

static void safetensors_seeds(const char *dir)
{
    char path[512];
    qkv_error err;
    float f32[6] = {1.5f, -2.0f, 0.0f, 3.25f, -0.5f, 1e-3f}, scalar = 7.0f;
    int32_t i32[4] = {0, -1, 2147483647, 3};
    int64_t i64[2] = {-9007199254740993LL, 42};
    double f64[1] = {0.1};
    qkv_tensor_ref t[] = {
        {"weight", QKV_F32, 2, {2, 3}, f32},
        {"ids", QKV_I32, 1, {4}, i32},
        {"big", QKV_I64, 1, {2}, i64},
        {"x.y.z", QKV_F64, 2, {1, 1}, f64},
        {"scalar", QKV_F32, 0, {0}, &scalar},
        {"empty", QKV_F32, 2, {0, 3}, NULL},
    };
    const char *meta[] = {"format", "pt", "note", "caf\xc3\xa9 \"quoted\" \\ tab\t"};
    snprintf(path, sizeof path, "%s/safetensors/all_dtypes.safetensors", dir);
    write_file(dir, "safetensors", "all_dtypes.safetensors", "", 0);
    ok(qkv_tensor_file_save(path, t, 6, meta, 2, &err), &err);

    write_raw(dir, "empty_header.safetensors", "{}      ", "", 0);
    /* An F64 at byte 4 (unaligned) after 4 bytes that no tensor owns. */
    unsigned char data[12] = {0};
    memcpy(data + 4, f64, 8);
    write_raw(dir, "gap_unaligned.safetensors",
              "{\"a\":{\"dtype\":\"F64\",\"shape\":[],\"data_offsets\":[4,12]},"
              "\"__metadata__\":{}}",
              data, sizeof data);
    /* F16 (1.0, -2.0, a subnormal, NaN) and BF16 (1.0, -inf) at odd offsets: read as F32 */
    const unsigned char halves[13] = {0, 0x00, 0x3c, 0x00, 0xc0, 0x01, 0x00, 0x00, 0x7e,
                                      0x80, 0x3f, 0x80, 0xff};
    write_raw(dir, "halves.safetensors",
              "{\"h\":{\"dtype\":\"F16\",\"shape\":[2,2],\"data_offsets\":[1,9]},"
              "\"b\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[9,13]}}",
              halves, sizeof halves);
}

static void config_seeds(const char *dir)
{
    qkv_error err;
    char *json = NULL;
    qkv_transformer_config c = fuzz_small_config();
    ok(qkv_config_to_json(&c, &json, &err), &err);
    write_file(dir, "config", "small.json", json, strlen(json));
    free(json);
    c = qkv_transformer_default_config();
    c.src_vocab = c.tgt_vocab = 184, c.act = QKV_ACT_GELU, c.tie = QKV_TIE_ALL;
    c.pre_norm = 1, c.learned_pos = 1, c.dropout = 0.0f, c.ln_eps = 1e-6f;
    ok(qkv_config_to_json(&c, &json, &err), &err);
    write_file(dir, "config", "tied_gelu.json", json, strlen(json));
    free(json);
    c.tie = QKV_TIE_OUTPUT, c.enc_layers = 0, c.src_vocab = 4;
    ok(qkv_config_to_json(&c, &json, &err), &err);
    write_file(dir, "config", "decoder_only.json", json, strlen(json));
    free(json);
}

static void checkpoint_seeds(const char *dir)
{
    char path[512];
    qkv_error err;
    qkv_transformer_config cfg = fuzz_small_config();
    qkv_transformer *m = NULL;
    ok(qkv_transformer_create(&m, &cfg, 7, &err), &err);
    snprintf(path, sizeof path, "%s/checkpoint", dir);
    ok(qkv_transformer_save(m, path, &err), &err);
    snprintf(path, sizeof path, "%s/checkpoint/config.json", dir);
    remove(path); /* the harness supplies the configuration */

    qkv_adam opt;
    ok(qkv_adam_init(&opt, qkv_transformer_num_params(m), 0.9f, 0.98f, 1e-9f, 0.0f, &err),
       &err);
    for (size_t i = 0; i < opt.n; i++) opt.m[i] = 1e-3f * (float)i, opt.v[i] = 1e-6f;
    opt.step = 12;
    qkv_train_position pos = {.epoch = 2, .batch = 3, .seed = 5, .epoch_loss = 1.25,
                              .epoch_tokens = 40};
    snprintf(path, sizeof path, "%s/checkpoint/checkpoint.safetensors", dir);
    ok(qkv_checkpoint_save(path, m, &opt, &pos, &err), &err);
    snprintf(path, sizeof path, "%s/checkpoint/model.safetensors", dir);
    char copy[512];
    snprintf(copy, sizeof copy, "%s/safetensors/model.safetensors", dir);
    qkv_tensor_file f;
    ok(qkv_tensor_file_load(&f, path, &err), &err);
    qkv_tensor_file_free(&f);
    FILE *in = fopen(path, "rb");
    FILE *out = fopen(copy, "wb");
    if (!in || !out) exit(1);
    int ch;
    while ((ch = fgetc(in)) != EOF) fputc(ch, out);
    fclose(in);
    if (fclose(out)) exit(1);
    /* the int8 model file of the same model (qkv_model_quantize): its I8 tensors and scales */
    char f32_dir[512], int8_dir[512], int8_copy[512];
    snprintf(f32_dir, sizeof f32_dir, "%s/checkpoint/f32.tmp", dir);
    snprintf(int8_dir, sizeof int8_dir, "%s/checkpoint/int8.tmp", dir);
    ok(qkv_transformer_save(m, f32_dir, &err), &err);
    ok(qkv_model_quantize(f32_dir, int8_dir, QKV_PRECISION_INT8, &err), &err);
    snprintf(path, sizeof path, "%s/model.safetensors", int8_dir);
    snprintf(int8_copy, sizeof int8_copy, "%s/checkpoint/model-int8.safetensors", dir);
    if (rename(path, int8_copy)) exit(1);
    const char *tmp[][2] = {{f32_dir, "model.safetensors"}, {f32_dir, "config.json"},
                            {int8_dir, "config.json"}};
    for (size_t i = 0; i < sizeof tmp / sizeof *tmp; i++) {
        snprintf(path, sizeof path, "%s/%s", tmp[i][0], tmp[i][1]);
        remove(path);
    }
    if (rmdir(f32_dir) || rmdir(int8_dir)) exit(1);
    qkv_adam_free(&opt);
    qkv_transformer_free(m);
}

static void lm_config_seeds(const char *dir)
{
    qkv_error err;
    char *json = NULL;
    qkv_lm_config c = fuzz_lm_small_config();
    ok(qkv_lm_config_to_json(&c, &json, &err), &err);
    write_file(dir, "lm_config", "small.json", json, strlen(json));
    free(json);
    c = qkv_lm_default_config();
    c.vocab = 260, c.act = QKV_ACT_GELU, c.attention = QKV_ATTENTION_LINEAR, c.tie = 1;
    c.pre_norm = 1, c.final_norm = 1, c.bias = 0, c.dropout = 0.0f, c.ln_eps = 1e-6f;
    ok(qkv_lm_config_to_json(&c, &json, &err), &err);
    write_file(dir, "lm_config", "bytes_linear_tied.json", json, strlen(json));
    free(json);
}

static void lm_model_seeds(const char *dir)
{
    char path[512];
    qkv_error err;
    qkv_lm_config cfg = fuzz_lm_small_config();
    qkv_lm *m = NULL;
    ok(qkv_lm_create(&m, &cfg, 7, &err), &err);
    snprintf(path, sizeof path, "%s/lm_model", dir);
    ok(qkv_lm_save(m, path, &err), &err);
    snprintf(path, sizeof path, "%s/lm_model/config.json", dir);
    remove(path); /* the harness supplies the configuration */

    qkv_adam opt;
    ok(qkv_adam_init(&opt, qkv_lm_num_params(m), 0.9f, 0.99f, 1e-8f, 0.0f, &err), &err);
    for (size_t i = 0; i < opt.n; i++) opt.m[i] = 1e-3f * (float)i, opt.v[i] = 1e-6f;
    opt.step = 12;
    lm_train_position pos = {.seed = 5, .elapsed_s = 1.5, .loss_sum = 20.25, .loss_tokens = 9,
                             .train_tokens = 1000};
    snprintf(path, sizeof path, "%s/lm_model/checkpoint.safetensors", dir);
    ok(lm_checkpoint_save(path, m, &opt, &pos, &err), &err);
    qkv_adam_free(&opt);
    qkv_lm_free(m);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: make_seeds CORPUS_DIR\n");
        return 2;
    }
    mkdir(argv[1], 0777);
    safetensors_seeds(argv[1]);
    config_seeds(argv[1]);
    checkpoint_seeds(argv[1]);
    lm_config_seeds(argv[1]);
    lm_model_seeds(argv[1]);
    return 0;
}
