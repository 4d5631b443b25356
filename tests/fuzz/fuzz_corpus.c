/* SPDX-License-Identifier: MIT */
/* The corpus readers on the input: qkv_preprocess, qkv_sentences_from_text and
 * qkv_sentences_split on the bytes in memory; a vocabulary built from the sentences, then
 * encoded and decoded; qkv_corpus_read_tsv of the input as a file, and
 * qkv_corpus_read_aligned of the input cut in two files (first byte: where). */
#include "fuzz_common.h"

#define TAG "corpus"

/* Lines as the readers count them: each "\n" ends one, and a last line may lack it. */
static int count_lines(const uint8_t *data, size_t size)
{
    int n = 0;
    for (size_t i = 0; i < size; i++) n += data[i] == '\n';
    return n + (size > 0 && data[size - 1] != '\n');
}

/* Every token is non-empty and holds none of the separators; starts climb to n_tokens. */
static void check_sentences(const qkv_sentences *s, int lines, const char *separators)
{
    FUZZ_CHECK(s->count == lines && s->start[0] == 0 && s->start[s->count] == s->n_tokens);
    for (int i = 0; i < s->count; i++) FUZZ_CHECK(s->start[i] <= s->start[i + 1]);
    for (size_t t = 0; t < s->n_tokens; t++) {
        const char *w = s->tokens[t];
        FUZZ_CHECK(*w && !strpbrk(w, separators) && qkv_utf8_check(w, strlen(w)) == strlen(w));
    }
}

static void check_preprocess(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;
    char *out = malloc(QKV_PREPROCESS_BOUND(size));
    if (!out) return;
    size_t n = 0;
    qkv_error err = {0};
    qkv_status st = qkv_preprocess(out, &n, text, size, &err);
    FUZZ_CHECK((st == QKV_OK) == (qkv_utf8_check(text, size) == size));
    if (st == QKV_OK) {
        FUZZ_CHECK(strlen(out) == n && n < QKV_PREPROCESS_BOUND(size));
        FUZZ_CHECK(qkv_utf8_check(out, n) == n);
        char *twice = malloc(QKV_PREPROCESS_BOUND(n));
        size_t m = 0;
        FUZZ_CHECK(twice && qkv_preprocess(twice, &m, out, n, &err) == QKV_OK);
        FUZZ_CHECK(m == n && !memcmp(out, twice, n)); /* lower-case and spacing are final */
        free(twice);
    } else {
        FUZZ_CHECK(st == QKV_ERR_FORMAT);
    }
    free(out);
}

/* Vocabulary from the tokens; encoding to 6 steps gives ids in range, decoding text. */
static void check_vocab(const qkv_sentences *s)
{
    qkv_vocab v;
    qkv_error err = {0};
    FUZZ_CHECK(qkv_vocab_build(&v, s->tokens, s->n_tokens, 1, &err) == QKV_OK);
    int count = s->count < 64 ? s->count : 64, ids[64 * 6], valid[64];
    qkv_sentences first = *s;
    first.count = count;
    FUZZ_CHECK(qkv_sentences_encode(ids, valid, &first, &v, 6, &err) == QKV_OK);
    char text[128];
    for (int i = 0; i < count; i++) {
        FUZZ_CHECK(valid[i] >= 0 && valid[i] <= 6); /* 0: a sentence of "<pad>" tokens */
        for (int t = 0; t < 6; t++) FUZZ_CHECK(ids[i * 6 + t] >= 0 && ids[i * 6 + t] < v.size);
        size_t need = qkv_vocab_decode(text, sizeof text, &v, ids + i * 6, 6);
        FUZZ_CHECK(strlen(text) == (need < sizeof text ? need : sizeof text - 1));
    }
    qkv_vocab_free(&v);
}

static void check_files(const uint8_t *data, size_t size)
{
    const char *tsv = fuzz_path(TAG, "pairs.tsv"), *src = fuzz_path(TAG, "src.txt"),
               *tgt = fuzz_path(TAG, "tgt.txt");
    qkv_corpus c;
    qkv_error err = {0};
    fuzz_write(tsv, data, size);
    qkv_status st = qkv_corpus_read_tsv(&c, tsv, 0, &err);
    if (st == QKV_OK) {
        FUZZ_CHECK(c.source.count == c.target.count && c.source.count >= 1);
        qkv_corpus_free(&c);
    } else {
        FUZZ_CHECK(st == QKV_ERR_FORMAT && strstr(err.msg, tsv) == err.msg);
    }

    size_t cut = size ? data[0] % (size + 1) : 0;
    fuzz_write(src, data, cut);
    fuzz_write(tgt, data + cut, size - cut);
    st = qkv_corpus_read_aligned(&c, src, tgt, 0, &err);
    if (st == QKV_OK) {
        FUZZ_CHECK(c.source.count == count_lines(data, cut));
        FUZZ_CHECK(c.target.count == count_lines(data + cut, size - cut));
        FUZZ_CHECK(c.source.count == c.target.count && c.source.count >= 1);
        qkv_corpus_free(&c);
    } else {
        FUZZ_CHECK(st == QKV_ERR_FORMAT && (strstr(err.msg, src) || strstr(err.msg, tgt)));
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;
    check_preprocess(data, size);

    qkv_sentences s;
    qkv_error err = {0};
    qkv_status st = qkv_sentences_from_text(&s, text, size, "fuzz.txt", &err);
    if (st == QKV_OK) {
        check_sentences(&s, count_lines(data, size), " \n");
        check_vocab(&s);
        qkv_sentences_free(&s);
    } else {
        FUZZ_CHECK(st == QKV_ERR_FORMAT && strstr(err.msg, "fuzz.txt:") == err.msg);
    }
    st = qkv_sentences_split(&s, text, size, "fuzz.txt", &err);
    if (st == QKV_OK) {
        check_sentences(&s, count_lines(data, size), " \t\n");
        qkv_sentences_free(&s);
    } else {
        FUZZ_CHECK(st == QKV_ERR_FORMAT && strstr(err.msg, "fuzz.txt:") == err.msg);
    }

    check_files(data, size);
    return 0;
}
