/* SPDX-License-Identifier: MIT */
/* Model files and training checkpoints. The input is written once to a file in tmpfs, which
 * is then read three ways:
 *   - qkv_tensor_file_load, compared with qkv_tensor_file_parse of the same bytes (the file
 *     path reads with pread, the memory path with memcpy: both must agree);
 *   - qkv_transformer_load of a directory whose config.json is fuzz_small_config() and whose
 *     model.safetensors is the input (every tensor present, of the right shape, finite), and
 *     again with config.json saying "weights": "int8" (an int8 model file: the I8 weights and
 *     their scales checked as well);
 *   - qkv_checkpoint_load of the input into a model and Adam state of that configuration,
 *     which must change nothing unless the whole file is valid.
 * The seeds (tests/fuzz/corpus/checkpoint) are a model, its int8 model file and a checkpoint
 * of that model. */
#include <math.h>

#include "fuzz_common.h"

#define TAG "checkpoint"

static qkv_transformer *model;  /* the target of qkv_checkpoint_load */
static qkv_adam adam;
static float *params_before, *adam_before; /* model and adam.m/v, to see that a failed load
                                              leaves them alone */
static const char *dir, *model_path, *config_path;
static char *json_f32, *json_int8; /* config.json of a float32 and of an int8 model file */

int LLVMFuzzerInitialize(int *argc, char ***argv);

static void release(void)
{
    qkv_transformer_free(model);
    qkv_adam_free(&adam);
    free(params_before);
    free(adam_before);
    free(json_f32);
    free(json_int8);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    qkv_set_threads(1);
    qkv_transformer_config cfg = fuzz_small_config();
    qkv_error err;
    char *json = NULL;
    if (qkv_transformer_create(&model, &cfg, 1, &err) ||
        qkv_adam_init(&adam, qkv_transformer_num_params(model), 0.9f, 0.98f, 1e-9f, 0.0f,
                      &err) ||
        qkv_config_to_json(&cfg, &json, &err)) {
        fprintf(stderr, "fuzz_checkpoint: %s\n", err.msg);
        abort();
    }
    size_t n = qkv_transformer_num_params(model);
    params_before = malloc(n * sizeof *params_before);
    adam_before = malloc(2 * n * sizeof *adam_before);
    if (!params_before || !adam_before) abort();
    atexit(release);
    /* the int8 file's: the same with "weights" before the closing brace */
    json_f32 = json;
    const char *close = strrchr(json, '}');
    if (!close || !(json_int8 = malloc(strlen(json) + 32))) abort();
    snprintf(json_int8, strlen(json) + 32, "%.*s, \"weights\": \"int8\"}", (int)(close - json), json);
    config_path = fuzz_path(TAG, "config.json");
    dir = fuzz_dir(TAG);
    model_path = fuzz_path(TAG, "model.safetensors");
    return 0;
}

/* The file and memory readers return the same status and the same tensors. */
static void check_load_matches_parse(const uint8_t *data, size_t size)
{
    qkv_tensor_file a, b;
    qkv_error ea = {0}, eb = {0};
    qkv_status sa = qkv_tensor_file_load(&a, model_path, &ea);
    qkv_status sb = qkv_tensor_file_parse(&b, data, size, model_path, &eb);
    if (sa != sb || strcmp(ea.msg, eb.msg))
        fprintf(stderr, "load: %s\nparse: %s\n", ea.msg, eb.msg);
    FUZZ_CHECK(sa == sb && !strcmp(ea.msg, eb.msg));
    FUZZ_CHECK(a.count == b.count);
    for (int i = 0; i < a.count; i++) {
        const qkv_tensor *x = &a.tensors[i], *y = &b.tensors[i];
        size_t bytes = (size_t)x->numel * qkv_dtype_size(x->dtype);
        FUZZ_CHECK(!strcmp(x->name, y->name) && x->dtype == y->dtype && x->numel == y->numel);
        FUZZ_CHECK(!memcmp(x->data, y->data, bytes));
    }
    qkv_tensor_file_free(&a);
    qkv_tensor_file_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_write(model_path, data, size);
    check_load_matches_parse(data, size);

    qkv_error err = {0};
    qkv_status st;
    for (int int8 = 0; int8 < 2; int8++) {
        const char *json = int8 ? json_int8 : json_f32;
        fuzz_write(config_path, json, strlen(json));
        qkv_transformer *m = NULL;
        st = qkv_transformer_load(&m, dir, &err);
        if (st == QKV_OK) {
            FUZZ_CHECK(m && qkv_transformer_num_params(m) == qkv_transformer_num_params(model));
            const float *p = qkv_transformer_params(m);
            for (size_t i = 0; i < qkv_transformer_num_params(m); i++) FUZZ_CHECK(isfinite(p[i]));
            qkv_transformer_free(m);
        } else {
            FUZZ_CHECK(!m && strstr(err.msg, model_path) == err.msg);
        }
    }

    size_t n = qkv_transformer_num_params(model);
    memcpy(params_before, qkv_transformer_params(model), n * sizeof(float));
    memcpy(adam_before, adam.m, n * sizeof(float));
    memcpy(adam_before + n, adam.v, n * sizeof(float));
    int64_t step_before = adam.step;
    qkv_train_position pos = {0};
    st = qkv_checkpoint_load(model_path, model, &adam, &pos, &err);
    if (st != QKV_OK) {
        FUZZ_CHECK(strstr(err.msg, model_path) == err.msg);
        FUZZ_CHECK(!memcmp(params_before, qkv_transformer_params(model), n * sizeof(float)));
        FUZZ_CHECK(!memcmp(adam_before, adam.m, n * sizeof(float)));
        FUZZ_CHECK(!memcmp(adam_before + n, adam.v, n * sizeof(float)));
        FUZZ_CHECK(adam.step == step_before);
    } else {
        FUZZ_CHECK(adam.step >= 0 && pos.epoch >= 0 && pos.batch >= 0 && pos.epoch_tokens >= 0);
    }
    return 0;
}
