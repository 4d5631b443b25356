/* SPDX-License-Identifier: MIT */
/* qkv_bpe_load of the input written to a file in tmpfs. A failure is QKV_ERR_FORMAT naming the
 * file and leaves the struct empty. A file it accepts holds no NUL byte, and its encoding is
 * one qkv_bpe_learn could have made:
 *   - the alphabet: distinct single UTF-8 characters, none a space or a line break, ▁ among
 *     them; every merge result is the concatenation of its two symbols, not a reserved token,
 *     and the vocabulary (qkv_bpe_vocab) holds the reserved four and every symbol once;
 *   - it survives qkv_bpe_save -> qkv_bpe_load unchanged;
 *   - text made of its alphabet encodes to ids in range, none <unk>, that decode back to the
 *     text exactly; any bytes (the head of the input) encode to ids in range. */
#include "fuzz_common.h"

#define TAG "bpe"
#define RAW_TEXT_MAX 512 /* encoding is quadratic in a word's length: keep executions fast */

static void check_empty(const qkv_bpe *b)
{
    FUZZ_CHECK(!b->symbols && !b->merges && !b->symbol_slots && !b->merge_slots);
    FUZZ_CHECK(b->n_chars == 0 && b->n_symbols == 0 && b->n_merges == 0);
}

static void check_tables(const qkv_bpe *b)
{
    FUZZ_CHECK(b->n_chars >= 1 && b->n_symbols >= b->n_chars && b->n_merges >= 0);
    int has_space = 0;
    for (int i = 0; i < b->n_chars; i++) {
        const char *c = b->symbols[i];
        size_t n = strlen(c);
        FUZZ_CHECK(n >= 1 && n <= 4 && qkv_utf8_check(c, n) == n && !strpbrk(c, " \r\n"));
        int starts = 0; /* bytes that begin a character */
        for (size_t k = 0; k < n; k++) starts += ((unsigned char)c[k] & 0xC0) != 0x80;
        FUZZ_CHECK(starts == 1);
        has_space |= !strcmp(c, QKV_BPE_SPACE);
    }
    FUZZ_CHECK(has_space);
    for (int r = 0; r < b->n_merges; r++) {
        const int *m = b->merges + 3 * r;
        FUZZ_CHECK(m[0] >= 0 && m[0] < b->n_symbols && m[1] >= 0 && m[1] < b->n_symbols);
        FUZZ_CHECK(m[2] >= b->n_chars && m[2] < b->n_symbols);
        const char *l = b->symbols[m[0]], *rt = b->symbols[m[1]], *c = b->symbols[m[2]];
        size_t nl = strlen(l);
        FUZZ_CHECK(!strncmp(c, l, nl) && !strcmp(c + nl, rt));
    }
    qkv_vocab v;
    qkv_error err = {0};
    FUZZ_CHECK(qkv_bpe_vocab(&v, b, &err) == QKV_OK);
    FUZZ_CHECK(v.size == QKV_N_RESERVED + b->n_symbols); /* distinct, none reserved */
    for (int i = 0; i < b->n_symbols; i++)
        FUZZ_CHECK(!strcmp(qkv_vocab_token(&v, QKV_N_RESERVED + i), b->symbols[i]));
    qkv_vocab_free(&v);
}

static void check_same(const qkv_bpe *a, const qkv_bpe *b)
{
    FUZZ_CHECK(a->n_chars == b->n_chars && a->n_symbols == b->n_symbols &&
               a->n_merges == b->n_merges);
    for (int i = 0; i < a->n_symbols; i++) FUZZ_CHECK(!strcmp(a->symbols[i], b->symbols[i]));
    FUZZ_CHECK(!memcmp(a->merges, b->merges, 3 * (size_t)a->n_merges * sizeof *a->merges));
}

/* Encodes text[0..len); the ids are in range. Returns how many (ids has room for len + 1). */
static int encode_in_range(int *ids, const qkv_bpe *b, const char *text, size_t len)
{
    int n = qkv_bpe_encode(ids, b, text, len);
    FUZZ_CHECK(n >= 1 && (size_t)n <= len + 1);
    for (int i = 0; i < n; i++)
        FUZZ_CHECK(ids[i] == QKV_UNK || (ids[i] >= QKV_N_RESERVED &&
                                         ids[i] < QKV_N_RESERVED + b->n_symbols));
    char out[64];
    size_t need = qkv_bpe_decode(out, sizeof out, b, ids, n);
    FUZZ_CHECK(strlen(out) == (need < sizeof out ? need : sizeof out - 1));
    return n;
}

/* The alphabet (without ▁) as words of up to three characters; decode(encode) gives it back. */
static void check_round_trip(const qkv_bpe *b)
{
    size_t cap = 1;
    for (int i = 0; i < b->n_chars; i++) cap += strlen(b->symbols[i]) + 1;
    char *text = malloc(cap), *back = malloc(cap);
    int *ids = malloc((cap + 1) * sizeof *ids);
    FUZZ_CHECK(text && back && ids);
    size_t len = 0;
    for (int i = 0, k = 0; i < b->n_chars; i++) {
        if (!strcmp(b->symbols[i], QKV_BPE_SPACE)) continue;
        if (k++ % 3 == 2) text[len++] = ' ';
        size_t n = strlen(b->symbols[i]);
        memcpy(text + len, b->symbols[i], n);
        len += n;
    }
    text[len] = '\0';
    int n = encode_in_range(ids, b, text, len);
    for (int i = 0; i < n; i++) FUZZ_CHECK(ids[i] != QKV_UNK);
    FUZZ_CHECK(qkv_bpe_decode(back, cap, b, ids, n) == len && !strcmp(back, text));
    free(text), free(back), free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_path(TAG, "bpe.txt"), *copy = fuzz_path(TAG, "saved.txt");
    fuzz_write(path, data, size);
    qkv_bpe b, again;
    qkv_error err = {0};
    qkv_status st = qkv_bpe_load(&b, path, &err);
    if (st != QKV_OK) {
        if (st != QKV_ERR_FORMAT || strstr(err.msg, path) != err.msg)
            fprintf(stderr, "refused with %s: %s\n", qkv_status_name(st), err.msg);
        FUZZ_CHECK(st == QKV_ERR_FORMAT && err.code == st && strstr(err.msg, path) == err.msg);
        check_empty(&b);
        return 0;
    }
    FUZZ_CHECK(!memchr(data, '\0', size)); /* a NUL would have hidden the rest of its line */
    check_tables(&b);

    st = qkv_bpe_save(&b, copy, &err);
    if (st == QKV_OK) st = qkv_bpe_load(&again, copy, &err);
    if (st != QKV_OK) fprintf(stderr, "save -> load: %s\n", err.msg);
    FUZZ_CHECK(st == QKV_OK);
    check_same(&b, &again);
    qkv_bpe_free(&again);

    check_round_trip(&b);
    size_t raw = size < RAW_TEXT_MAX ? size : RAW_TEXT_MAX;
    int ids[RAW_TEXT_MAX + 1];
    encode_in_range(ids, &b, (const char *)data, raw);
    qkv_bpe_free(&b);
    check_empty(&b);
    return 0;
}
