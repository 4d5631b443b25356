/* SPDX-License-Identifier: MIT */
/* The language model's text reader on the input as a training text: qkv_lm_vocab_build of a
 * character vocabulary (which must fail exactly when the text is not UTF-8, or holds a NUL,
 * naming the byte offset qkv_utf8_check gives) and of a byte vocabulary (any input). For each
 * vocabulary built:
 *   - it starts with the reserved four; a character vocabulary lists each distinct character
 *     of the text once, as one token, in code point order (by the bytes of the characters'
 *     UTF-8, which sort the same way); a byte vocabulary is <0x00> .. <0xFF>;
 *   - it survives qkv_vocab_save -> qkv_vocab_load (each token fits on a line);
 *   - with the reloaded vocabulary, qkv_lm_encode of the text finds no unknown character,
 *     and the ids' qkv_lm_token_text, concatenated, give the text back byte for byte. */
#include "fuzz_common.h"

#define TAG "lm_text"

/* The text of token id, in out (8 bytes); its length. */
static size_t token_text(char out[8], const qkv_vocab *v, int id)
{
    size_t k = qkv_lm_token_text(out, 8, v, id);
    FUZZ_CHECK(k >= 1 && k <= 4);
    return k;
}

static void check_vocab(const qkv_vocab *v, const char *text, size_t len, int bytes)
{
    const char *path = fuzz_path(TAG, "vocab.txt");
    FUZZ_CHECK(v->size >= QKV_N_RESERVED && !strcmp(qkv_vocab_token(v, QKV_UNK), "<unk>") &&
               !strcmp(qkv_vocab_token(v, QKV_EOS), "<eos>"));
    if (bytes) {
        FUZZ_CHECK(v->size == QKV_N_RESERVED + 256);
        for (int b = 0; b < 256; b++) {
            char want[8], piece[8];
            snprintf(want, sizeof want, "<0x%02X>", b);
            FUZZ_CHECK(!strcmp(qkv_vocab_token(v, QKV_N_RESERVED + b), want));
            FUZZ_CHECK(token_text(piece, v, QKV_N_RESERVED + b) == 1 &&
                       (unsigned char)piece[0] == b);
        }
    } else {
        /* the characters of the tokens, in order, are the text's distinct characters sorted */
        char prev[8] = "", piece[8];
        size_t prev_len = 0;
        for (int id = QKV_N_RESERVED; id < v->size; id++) {
            size_t k = token_text(piece, v, id);
            FUZZ_CHECK(qkv_utf8_check(piece, k) == k);
            FUZZ_CHECK(((unsigned char)piece[0] & 0xC0) != 0x80 &&
                       (k == 1 || (unsigned char)piece[0] >= 0xC0));
            int cmp = memcmp(prev, piece, prev_len < k ? prev_len : k);
            FUZZ_CHECK(id == QKV_N_RESERVED || cmp < 0 || (cmp == 0 && prev_len < k));
            int found = 0;
            for (size_t i = 0; i + k <= len && !found; i++) found = !memcmp(text + i, piece, k);
            FUZZ_CHECK(found);
            memcpy(prev, piece, k), prev_len = k;
        }
    }

    qkv_vocab back;
    qkv_error err = {0};
    FUZZ_CHECK(qkv_vocab_save(v, path, &err) == QKV_OK);
    FUZZ_CHECK(qkv_vocab_load(&back, path, &err) == QKV_OK && back.size == v->size);
    for (int i = 0; i < v->size; i++)
        FUZZ_CHECK(!strcmp(qkv_vocab_token(v, i), qkv_vocab_token(&back, i)));

    int *ids = malloc((len ? len : 1) * sizeof *ids);
    char *again = malloc(len + 8);
    FUZZ_CHECK(ids && again);
    size_t n = 0, unknown = 99, at = 0;
    FUZZ_CHECK(qkv_lm_encode(ids, &n, &unknown, &back, text, len, &err) == QKV_OK);
    FUZZ_CHECK(unknown == 0 && n <= len);
    for (size_t i = 0; i < n; i++) {
        FUZZ_CHECK(ids[i] >= QKV_N_RESERVED && ids[i] < v->size);
        char piece[8];
        size_t k = token_text(piece, &back, ids[i]);
        FUZZ_CHECK(at + k <= len);
        memcpy(again + at, piece, k);
        at += k;
    }
    FUZZ_CHECK(at == len && !memcmp(again, text, len));
    free(ids), free(again);
    qkv_vocab_free(&back);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;
    qkv_vocab v;
    qkv_error err = {0};
    size_t ok = qkv_utf8_check(text, size);
    qkv_status st = qkv_lm_vocab_build(&v, text, size, 0, &err);
    if (st != QKV_OK) {
        char want[32];
        snprintf(want, sizeof want, "at byte %zu:", ok);
        FUZZ_CHECK(ok < size && st == QKV_ERR_FORMAT && strstr(err.msg, want));
        FUZZ_CHECK(v.size == 0 && !v.idx_to_token);
    } else {
        FUZZ_CHECK(ok == size);
        check_vocab(&v, text, size, 0);
        qkv_vocab_free(&v);
    }
    FUZZ_CHECK(qkv_lm_vocab_build(&v, text, size, 1, &err) == QKV_OK);
    check_vocab(&v, text, size, 1);
    qkv_vocab_free(&v);
    return 0;
}
