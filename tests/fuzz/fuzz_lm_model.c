/* SPDX-License-Identifier: MIT */
/* The language model's parameter files. The input is written once to a file in tmpfs and read
 * two ways:
 *   - qkv_lm_load of a directory whose config.json is fuzz_lm_small_config() and whose
 *     model.safetensors is the input: a loaded model is finite; a refusal (QKV_ERR_FORMAT, or
 *     QKV_ERR_NUMERIC for a NaN or Inf) names the file;
 *   - lm_checkpoint_load (the training checkpoint qkv_lm_train resumes from) of the input into
 *     a model and Adam state of that configuration, which must change nothing unless the whole
 *     file is valid. An accepted checkpoint has a sane position (integers written in decimal
 *     digits, a time and a loss sum >= 0) and survives lm_checkpoint_save -> load unchanged.
 * The seeds (tests/fuzz/corpus/lm_model) are a model and a checkpoint of that model. */
#include <math.h>

#include "fuzz_common.h"
#include "models/language_model_internal.h"

#define TAG "lm_model"

static qkv_lm *model; /* the target of lm_checkpoint_load */
static qkv_adam adam;
static float *params_before, *adam_before; /* model and adam.m/v, to see that a failed load
                                              leaves them alone */
static const char *dir, *model_path, *copy_path;

int LLVMFuzzerInitialize(int *argc, char ***argv);

static void release(void)
{
    qkv_lm_free(model);
    qkv_adam_free(&adam);
    free(params_before);
    free(adam_before);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    qkv_set_threads(1);
    qkv_lm_config cfg = fuzz_lm_small_config();
    qkv_error err;
    char *json = NULL;
    if (qkv_lm_create(&model, &cfg, 1, &err) ||
        qkv_adam_init(&adam, qkv_lm_num_params(model), 0.9f, 0.99f, 1e-8f, 0.0f, &err) ||
        qkv_lm_config_to_json(&cfg, &json, &err)) {
        fprintf(stderr, "fuzz_lm_model: %s\n", err.msg);
        abort();
    }
    size_t n = qkv_lm_num_params(model);
    params_before = malloc(n * sizeof *params_before);
    adam_before = malloc(2 * n * sizeof *adam_before);
    if (!params_before || !adam_before) abort();
    atexit(release);
    fuzz_write(fuzz_path(TAG, "config.json"), json, strlen(json));
    free(json);
    dir = fuzz_dir(TAG);
    model_path = fuzz_path(TAG, "model.safetensors");
    copy_path = fuzz_path(TAG, "saved.safetensors");
    return 0;
}

/* The metadata value of key in the file at path is a plain decimal integer. */
static int decimal_meta(const char *path, const char *key)
{
    qkv_tensor_file f;
    qkv_error err;
    if (qkv_tensor_file_load(&f, path, &err)) return 0;
    const char *s = qkv_tensor_file_meta(&f, key);
    int ok = s && *s && strspn(s, "0123456789") == strlen(s);
    qkv_tensor_file_free(&f);
    return ok;
}

static void check_checkpoint(const lm_train_position *pos)
{
    static const char *const integers[] = {"step", "seed", "loss_tokens", "train_tokens"};
    for (int i = 0; i < 4; i++) {
        if (!decimal_meta(model_path, integers[i]))
            fprintf(stderr, "metadata \"%s\" accepted but not decimal digits\n", integers[i]);
        FUZZ_CHECK(decimal_meta(model_path, integers[i]));
    }
    FUZZ_CHECK(adam.step >= 0 && pos->loss_tokens >= 0 && pos->train_tokens >= 0);
    FUZZ_CHECK(isfinite(pos->elapsed_s) && pos->elapsed_s >= 0);
    FUZZ_CHECK(isfinite(pos->loss_sum) && pos->loss_sum >= 0);

    /* what was read is what a save writes back */
    size_t n = qkv_lm_num_params(model);
    lm_train_position again = {0};
    qkv_error err = {0};
    FUZZ_CHECK(lm_checkpoint_save(copy_path, model, &adam, pos, &err) == QKV_OK);
    memcpy(params_before, qkv_lm_params(model), n * sizeof(float));
    memcpy(adam_before, adam.m, n * sizeof(float));
    memcpy(adam_before + n, adam.v, n * sizeof(float));
    int64_t step = adam.step;
    FUZZ_CHECK(lm_checkpoint_load(copy_path, model, &adam, &again, &err) == QKV_OK);
    FUZZ_CHECK(!memcmp(params_before, qkv_lm_params(model), n * sizeof(float)));
    FUZZ_CHECK(!memcmp(adam_before, adam.m, n * sizeof(float)));
    FUZZ_CHECK(!memcmp(adam_before + n, adam.v, n * sizeof(float)));
    FUZZ_CHECK(adam.step == step && again.seed == pos->seed &&
               again.elapsed_s == pos->elapsed_s && again.loss_sum == pos->loss_sum &&
               again.loss_tokens == pos->loss_tokens && again.train_tokens == pos->train_tokens);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_write(model_path, data, size);

    qkv_lm *m = NULL;
    qkv_error err = {0};
    qkv_status st = qkv_lm_load(&m, dir, &err);
    if (st == QKV_OK) {
        FUZZ_CHECK(m && qkv_lm_num_params(m) == qkv_lm_num_params(model));
        const float *p = qkv_lm_params(m);
        for (size_t i = 0; i < qkv_lm_num_params(m); i++) FUZZ_CHECK(isfinite(p[i]));
        qkv_lm_free(m);
    } else {
        FUZZ_CHECK(!m && (st == QKV_ERR_FORMAT || st == QKV_ERR_NUMERIC));
        FUZZ_CHECK(strstr(err.msg, model_path) == err.msg);
    }

    size_t n = qkv_lm_num_params(model);
    memcpy(params_before, qkv_lm_params(model), n * sizeof(float));
    memcpy(adam_before, adam.m, n * sizeof(float));
    memcpy(adam_before + n, adam.v, n * sizeof(float));
    int64_t step_before = adam.step;
    lm_train_position pos = {0};
    st = lm_checkpoint_load(model_path, model, &adam, &pos, &err);
    if (st != QKV_OK) {
        FUZZ_CHECK((st == QKV_ERR_FORMAT || st == QKV_ERR_NUMERIC) &&
                   strstr(err.msg, model_path) == err.msg);
        FUZZ_CHECK(!memcmp(params_before, qkv_lm_params(model), n * sizeof(float)));
        FUZZ_CHECK(!memcmp(adam_before, adam.m, n * sizeof(float)));
        FUZZ_CHECK(!memcmp(adam_before + n, adam.v, n * sizeof(float)));
        FUZZ_CHECK(adam.step == step_before);
    } else {
        check_checkpoint(&pos);
    }
    return 0;
}
