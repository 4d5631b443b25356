/* SPDX-License-Identifier: MIT */
/* qkv_config_from_json on a NUL-terminated copy of the input. A configuration it accepts must
 * pass qkv_transformer_config_check and survive qkv_config_to_json -> from_json unchanged (a
 * model saved with it can be loaded again); one it rejects must be named in the message. */
#include "fuzz_common.h"

#define NAME "fuzz/config.json"

static int same_config(const qkv_transformer_config *a, const qkv_transformer_config *b)
{
    return a->src_vocab == b->src_vocab && a->tgt_vocab == b->tgt_vocab &&
           a->d_model == b->d_model && a->heads == b->heads && a->ffn == b->ffn &&
           a->enc_layers == b->enc_layers && a->dec_layers == b->dec_layers &&
           a->max_len == b->max_len && a->dropout == b->dropout && a->bias == b->bias &&
           a->pre_norm == b->pre_norm && a->final_norm == b->final_norm && a->act == b->act &&
           a->tie == b->tie && a->learned_pos == b->learned_pos && a->ln_eps == b->ln_eps;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *json = malloc(size + 1);
    if (!json) return 0;
    memcpy(json, data, size);
    json[size] = '\0';
    qkv_transformer_config c, again;
    qkv_error err = {0};
    qkv_status st = qkv_config_from_json(&c, json, NAME, &err);
    free(json);
    if (st != QKV_OK) {
        FUZZ_CHECK(st == QKV_ERR_FORMAT || st == QKV_ERR_ARG);
        FUZZ_CHECK(err.code == st && fuzz_named_once(err.msg, NAME));
        return 0;
    }
    FUZZ_CHECK(qkv_transformer_config_check(&c, &err) == QKV_OK);
    char *text = NULL;
    FUZZ_CHECK(qkv_config_to_json(&c, &text, &err) == QKV_OK);
    st = qkv_config_from_json(&again, text, "written", &err);
    if (st != QKV_OK) fprintf(stderr, "re-reading what to_json wrote: %s\n%s\n", err.msg, text);
    free(text);
    FUZZ_CHECK(st == QKV_OK && same_config(&c, &again));
    return 0;
}
