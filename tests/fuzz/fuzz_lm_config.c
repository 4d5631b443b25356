/* SPDX-License-Identifier: MIT */
/* The language model's config.json, read two ways:
 *   - qkv_lm_config_from_json on a NUL-terminated copy of the input. A configuration it
 *     accepts passes qkv_lm_config_check and survives qkv_lm_config_to_json -> from_json
 *     unchanged; one it refuses (QKV_ERR_FORMAT or QKV_ERR_ARG) is named once, then the reason.
 *   - qkv_lm_load of a directory holding the input as config.json and no model.safetensors:
 *     the file reader refuses a NUL byte, and otherwise says what from_json says; a
 *     configuration small enough to build gets as far as the missing model file (QKV_ERR_IO
 *     naming it). Larger ones are not built: a valid configuration may ask for gigabytes. */
#include "fuzz_common.h"

#define TAG "lm_config"
#define MAX_BUILD_FLOATS 1e6 /* parameters + position table of a model the harness builds */

static int same_config(const qkv_lm_config *a, const qkv_lm_config *b)
{
    return a->vocab == b->vocab && a->d_model == b->d_model && a->heads == b->heads &&
           a->ffn == b->ffn && a->layers == b->layers && a->max_len == b->max_len &&
           a->dropout == b->dropout && a->bias == b->bias && a->pre_norm == b->pre_norm &&
           a->final_norm == b->final_norm && a->act == b->act && a->tie == b->tie &&
           a->learned_pos == b->learned_pos && a->attention == b->attention &&
           a->ln_eps == b->ln_eps;
}

/* An upper bound on the floats qkv_lm_create allocates for c. */
static double model_floats(const qkv_lm_config *c)
{
    double C = c->d_model, F = c->ffn;
    return 2.0 * c->vocab * (C + 1) + 2.0 * c->max_len * C +
           c->layers * (4.0 * C * (C + 1) + 2.0 * C * F + F + 5.0 * C) + 2.0 * C;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_path(TAG, "config.json");
    const char *model = fuzz_path(TAG, "model.safetensors"); /* never written */
    char *json = malloc(size + 1);
    if (!json) return 0;
    memcpy(json, data, size);
    json[size] = '\0';
    int has_nul = strlen(json) != size;

    qkv_lm_config c, again;
    qkv_error err = {0};
    qkv_status st = qkv_lm_config_from_json(&c, json, path, &err);
    free(json);
    qkv_error mem_err = err;
    if (st != QKV_OK) {
        FUZZ_CHECK(st == QKV_ERR_FORMAT || st == QKV_ERR_ARG);
        FUZZ_CHECK(err.code == st && fuzz_named_once(err.msg, path));
    } else {
        FUZZ_CHECK(qkv_lm_config_check(&c, &err) == QKV_OK);
        char *text = NULL;
        FUZZ_CHECK(qkv_lm_config_to_json(&c, &text, &err) == QKV_OK);
        qkv_status st2 = qkv_lm_config_from_json(&again, text, "written", &err);
        if (st2 != QKV_OK || !same_config(&c, &again))
            fprintf(stderr, "re-reading what to_json wrote: %s\n%s\n", err.msg, text);
        free(text);
        FUZZ_CHECK(st2 == QKV_OK && same_config(&c, &again));
        if (!has_nul && model_floats(&c) > MAX_BUILD_FLOATS) return 0;
    }

    fuzz_write(path, data, size);
    qkv_lm *m = NULL;
    qkv_status ls = qkv_lm_load(&m, fuzz_dir(TAG), &err);
    FUZZ_CHECK(!m && ls != QKV_OK && err.code == ls);
    if (has_nul) {
        FUZZ_CHECK(ls == QKV_ERR_FORMAT && strstr(err.msg, path) == err.msg &&
                   strstr(err.msg, "NUL"));
    } else if (st != QKV_OK) {
        FUZZ_CHECK(ls == st && !strcmp(err.msg, mem_err.msg));
    } else {
        if (ls != QKV_ERR_IO || strstr(err.msg, model) != err.msg)
            fprintf(stderr, "load: %s\n", err.msg);
        FUZZ_CHECK(ls == QKV_ERR_IO && strstr(err.msg, model) == err.msg);
    }
    return 0;
}
