/* SPDX-License-Identifier: MIT */
/* A language model's vocab.txt: qkv_vocab_load of the input written to a file in tmpfs, then
 * the language model's use of whatever it accepted, as qkv generate / eval-lm do with a
 * model directory's vocabulary. A hostile file may hold any tokens: a character vocabulary
 * with stray multi-character tokens, a byte vocabulary with bytes missing, both kinds mixed.
 * Whatever it holds:
 *   - qkv_lm_encode of a probe text (the input itself, then every byte value, then a fixed
 *     text of escapes and multi-byte characters) fails only on invalid UTF-8 with a character
 *     vocabulary; it gives ids in range, one per character (or byte), and *unknown counts
 *     exactly the <unk> ids;
 *   - with no unknown, the ids' qkv_lm_token_text, concatenated, is the probe text;
 *   - qkv_lm_token_text of any id, in range or not, writes at most cap bytes and returns at
 *     most 7 (a token that is not one character reads as nothing or as itself). */
#include "fuzz_common.h"

#define TAG "lm_vocab"

/* Characters of text[0..len) (valid UTF-8): the bytes that start one. */
static size_t count_chars(const char *text, size_t len)
{
    size_t n = 0;
    for (size_t i = 0; i < len; i++) n += ((unsigned char)text[i] & 0xC0) != 0x80;
    return n;
}

static void check_encode(const qkv_vocab *v, const char *text, size_t len, int byte_vocab)
{
    int *ids = malloc((len ? len : 1) * sizeof *ids);
    char *back = malloc(len + 8);
    FUZZ_CHECK(ids && back);
    size_t n = 99, unknown = 99;
    qkv_error err = {0};
    qkv_status st = qkv_lm_encode(ids, &n, &unknown, v, text, len, &err);
    int utf8 = qkv_utf8_check(text, len) == len;
    FUZZ_CHECK((st == QKV_OK) == (byte_vocab || utf8));
    if (st != QKV_OK) {
        FUZZ_CHECK(st == QKV_ERR_FORMAT && strstr(err.msg, "invalid UTF-8"));
        free(ids), free(back);
        return;
    }
    FUZZ_CHECK(n == (byte_vocab ? len : count_chars(text, len)));
    size_t unk = 0, at = 0;
    for (size_t i = 0; i < n; i++) {
        FUZZ_CHECK(ids[i] >= 0 && ids[i] < v->size);
        FUZZ_CHECK(ids[i] == QKV_UNK || ids[i] >= QKV_N_RESERVED);
        unk += ids[i] == QKV_UNK;
        char piece[8];
        size_t k = qkv_lm_token_text(piece, sizeof piece, v, ids[i]);
        FUZZ_CHECK(k <= (byte_vocab ? 1u : 4u) && (ids[i] == QKV_UNK) == (k == 0));
        if (at + k <= len) memcpy(back + at, piece, k);
        at += k;
    }
    if (unk != unknown) fprintf(stderr, "%zu <unk> ids, *unknown = %zu\n", unk, unknown);
    FUZZ_CHECK(unk == unknown);
    if (unk == 0) FUZZ_CHECK(at == len && !memcmp(back, text, len));
    free(ids), free(back);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_path(TAG, "vocab.txt");
    fuzz_write(path, data, size);
    qkv_vocab v;
    qkv_error err = {0};
    if (qkv_vocab_load(&v, path, &err) != QKV_OK) return 0; /* fuzz_vocab's business */
    int byte_vocab = qkv_vocab_id(&v, "<0x00>") != QKV_UNK;

    char piece[8];
    for (int id = -1; id <= v.size; id++) {
        memset(piece, 'x', sizeof piece);
        size_t k = qkv_lm_token_text(piece, 3, &v, id);
        FUZZ_CHECK(k <= 7 && piece[k < 2 ? k : 2] == '\0' && piece[3] == 'x');
        FUZZ_CHECK(qkv_lm_token_text(NULL, 0, &v, id) == k);
        if (id < QKV_N_RESERVED || id >= v.size) FUZZ_CHECK(k == 0);
    }

    check_encode(&v, (const char *)data, size, byte_vocab);
    char bytes[256];
    for (int b = 0; b < 256; b++) bytes[b] = (char)b;
    check_encode(&v, bytes, sizeof bytes, byte_vocab);
    static const char probe[] = "To be,\tor not\\ to be:\r\n\x01\x7f caf\xc3\xa9 \xe6\x97\xa5"
                                "\xf0\x9f\x98\x80 <0x41> \\x41 \\s";
    check_encode(&v, probe, sizeof probe - 1, byte_vocab);
    qkv_vocab_free(&v);
    return 0;
}
