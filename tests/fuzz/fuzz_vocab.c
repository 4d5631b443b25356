/* SPDX-License-Identifier: MIT */
/* qkv_vocab_load of the input written to a file in tmpfs. A vocabulary it accepts starts with
 * the reserved tokens, maps every token back to its own id, and survives qkv_vocab_save ->
 * qkv_vocab_load unchanged; a file it rejects is named in the message. */
#include "fuzz_common.h"

#define TAG "vocab"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_path(TAG, "vocab.txt"), *copy = fuzz_path(TAG, "saved.txt");
    fuzz_write(path, data, size);
    qkv_vocab v, w;
    qkv_error err = {0};
    qkv_status st = qkv_vocab_load(&v, path, &err);
    if (st != QKV_OK) {
        FUZZ_CHECK(st == QKV_ERR_FORMAT && strstr(err.msg, path) == err.msg);
        FUZZ_CHECK(v.size == 0 && !v.idx_to_token && !v.storage && !v.slots);
        return 0;
    }
    FUZZ_CHECK(v.size >= QKV_N_RESERVED && !strcmp(qkv_vocab_token(&v, QKV_UNK), "<unk>"));
    for (int i = 0; i < v.size; i++) {
        const char *t = qkv_vocab_token(&v, i);
        FUZZ_CHECK(t && *t && !strpbrk(t, "\r\n") && qkv_utf8_check(t, strlen(t)) == strlen(t));
        FUZZ_CHECK(qkv_vocab_id(&v, t) == i);
    }
    FUZZ_CHECK(!qkv_vocab_token(&v, -1) && !qkv_vocab_token(&v, v.size));

    int ids[4] = {QKV_BOS, v.size - 1, v.size, QKV_EOS};
    char text[64];
    size_t need = qkv_vocab_decode(text, sizeof text, &v, ids, 4);
    FUZZ_CHECK(strlen(text) == (need < sizeof text ? need : sizeof text - 1));

    FUZZ_CHECK(qkv_vocab_save(&v, copy, &err) == QKV_OK);
    FUZZ_CHECK(qkv_vocab_load(&w, copy, &err) == QKV_OK && w.size == v.size);
    for (int i = 0; i < v.size; i++)
        FUZZ_CHECK(!strcmp(qkv_vocab_token(&v, i), qkv_vocab_token(&w, i)));
    qkv_vocab_free(&w);
    qkv_vocab_free(&v);
    return 0;
}
