/* SPDX-License-Identifier: MIT */
/* Vocabularies: d2l's ordering (frequency, then first occurrence), min_freq and the reserved
 * tokens, sizes and ids on fra.txt from a Python port of d2l's Vocab, truncate_pad and
 * valid lengths, and the vocabulary file (round trip, atomic save, every malformed file).
 *
 * The fra.txt expectations come from d2l-zh v2's own code (see test_corpus.c) run with
 * /usr/bin/python3:
 *   src, tgt = tokenize_nmt(preprocess_nmt(read_data_nmt()), 600)   # 601 pairs
 *   Vocab(src, min_freq=2, reserved_tokens=['<pad>', '<bos>', '<eos>'])  -> 184 tokens
 *   Vocab(tgt, ...)                                                      -> 201 tokens
 * and on the whole file 10012 (the size d2l's chapter prints for its source vocabulary)
 * and 17851 for the target, which holds '' at id 3887: qkv drops empty tokens, so it has
 * 17850 and every later id one lower.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "qkv.h"
#include "test_util.h"

/* ---------------------------------------------------------------------------------------
 * Helpers
 * ------------------------------------------------------------------------------------- */

static void build(qkv_vocab *v, const char *const *tokens, size_t n, int min_freq)
{
    qkv_error err = {0};
    if (qkv_vocab_build(v, tokens, n, min_freq, &err) != QKV_OK) {
        print_error("qkv_vocab_build: %s\n", err.msg);
        fail();
    }
}

/* Fails unless v's tokens are exactly want[0..n). */
static void check_tokens(const qkv_vocab *v, const char *const *want, int n)
{
    assert_int_equal(v->size, n);
    for (int i = 0; i < n; i++) {
        assert_string_equal(qkv_vocab_token(v, i), want[i]);
        assert_int_equal(qkv_vocab_id(v, want[i]), i);
    }
}

static void check_message(const char *msg, const char *a, const char *b)
{
    if (!strstr(msg, a) || (b && !strstr(msg, b))) {
        print_error("message \"%s\" lacks \"%s\"%s%s\n", msg, a, b ? " or " : "", b ? b : "");
        fail();
    }
}

typedef struct {
    char dir[64];
    char path[128]; /* dir/vocab.txt */
} fixture;

static int setup(void **state)
{
    fixture *fx = calloc(1, sizeof *fx);
    if (!fx) return -1;
    strcpy(fx->dir, "/tmp/qkv-vocab-XXXXXX");
    if (!mkdtemp(fx->dir)) {
        free(fx);
        return -1;
    }
    snprintf(fx->path, sizeof fx->path, "%s/vocab.txt", fx->dir);
    *state = fx;
    return 0;
}

/* Number of entries in dir besides . and .. */
static int dir_entries(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    if (d) closedir(d);
    return n;
}

static int teardown(void **state)
{
    fixture *fx = *state;
    DIR *d = opendir(fx->dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        char p[512];
        snprintf(p, sizeof p, "%s/%s", fx->dir, e->d_name);
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) unlink(p);
    }
    if (d) closedir(d);
    rmdir(fx->dir);
    free(fx);
    return 0;
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, strlen(text), f), strlen(text));
    assert_int_equal(fclose(f), 0);
}

static void data_path(char *out, size_t cap, const char *rel)
{
    const char *dir = getenv("QKV_DATA_DIR");
    snprintf(out, cap, "%s/%s", dir ? dir : "../shared/data", rel);
    if (access(out, R_OK) != 0) {
        print_message("%s not found: skipped\n", out);
        skip();
    }
}

/* ---------------------------------------------------------------------------------------
 * Building
 * ------------------------------------------------------------------------------------- */

/* Counts a3 b2 c1 d1 e1, first seen in the order b a c d e: sorted by frequency, ties kept
 * in order of first occurrence (c, d, e), as Python's stable sort over a Counter. */
static void test_order_and_min_freq(void **state)
{
    (void)state;
    const char *tokens[] = {"b", "a", "c", "a", "b", "d", "a", "e"};
    qkv_vocab v;
    build(&v, tokens, 8, 0);
    check_tokens(&v, (const char *const[]){"<unk>", "<pad>", "<bos>", "<eos>", "a", "b", "c",
                                           "d", "e"}, 9);
    qkv_vocab_free(&v);
    build(&v, tokens, 8, 2);
    check_tokens(&v, (const char *const[]){"<unk>", "<pad>", "<bos>", "<eos>", "a", "b"}, 6);
    assert_int_equal(qkv_vocab_id(&v, "c"), QKV_UNK);
    assert_int_equal(qkv_vocab_id(&v, ""), QKV_UNK);
    assert_int_equal(qkv_vocab_id(&v, "zebra"), QKV_UNK);
    assert_null(qkv_vocab_token(&v, 6));
    assert_null(qkv_vocab_token(&v, -1));
    qkv_vocab_free(&v);
    assert_null(v.idx_to_token);
    qkv_vocab_free(&v); /* harmless twice */

    /* Equal counts, first occurrence decides: y before x here. */
    const char *ties[] = {"y", "x", "x", "y", "z"};
    build(&v, ties, 5, 1);
    check_tokens(&v, (const char *const[]){"<unk>", "<pad>", "<bos>", "<eos>", "y", "x", "z"}, 7);
    qkv_vocab_free(&v);

    /* Nothing at all: just the reserved tokens. */
    build(&v, NULL, 0, 2);
    check_tokens(&v, (const char *const[]){"<unk>", "<pad>", "<bos>", "<eos>"}, 4);
    qkv_vocab_free(&v);
}

/* A reserved token in the text keeps its reserved id and is not added again (d2l: "if token
 * not in self.token_to_idx"). */
static void test_reserved_tokens_in_text(void **state)
{
    (void)state;
    const char *tokens[] = {"<eos>", "hi", "<eos>", "<unk>", "<eos>"};
    qkv_vocab v;
    build(&v, tokens, 5, 0);
    check_tokens(&v, (const char *const[]){"<unk>", "<pad>", "<bos>", "<eos>", "hi"}, 5);
    qkv_vocab_free(&v);
}

/* Many distinct tokens: the hash table grows and still finds every one. */
static void test_many_tokens(void **state)
{
    (void)state;
    int n = 50000;
    char *storage = malloc((size_t)n * 16);
    const char **tokens = malloc((size_t)n * sizeof *tokens);
    assert_true(storage && tokens);
    for (int i = 0; i < n; i++) {
        snprintf(storage + 16 * i, 16, "w%d", i);
        tokens[i] = storage + 16 * i;
    }
    qkv_vocab v;
    build(&v, tokens, (size_t)n, 0);
    assert_int_equal(v.size, n + QKV_N_RESERVED);
    for (int i = 0; i < n; i++) assert_int_equal(qkv_vocab_id(&v, tokens[i]), i + 4);
    qkv_vocab_free(&v);
    free(tokens);
    free(storage);
}

/* ---------------------------------------------------------------------------------------
 * fra.txt, as d2l
 * ------------------------------------------------------------------------------------- */

static void read_fra(qkv_corpus *c, int num_examples)
{
    char path[512];
    data_path(path, sizeof path, "fra-eng/fra.txt");
    qkv_error err = {0};
    if (qkv_corpus_read_tsv(c, path, num_examples, &err) != QKV_OK) {
        print_error("%s\n", err.msg);
        fail();
    }
}

static void test_fra_eng_600(void **state)
{
    (void)state;
    qkv_corpus c;
    read_fra(&c, 601);
    qkv_vocab src, tgt;
    build(&src, c.source.tokens, c.source.n_tokens, 2);
    build(&tgt, c.target.tokens, c.target.n_tokens, 2);
    assert_int_equal(src.size, 184);
    assert_int_equal(tgt.size, 201);
    static const struct {
        const char *token;
        int id;
    } src_ids[] = {{".", 4}, {"!", 5}, {"i", 6}, {"go", 9}, {"tom", 10}, {"run", 54},
                   {"hi", 113}, {"how's", 183}, {"wow", QKV_UNK}},
      tgt_ids[] = {{".", 4}, {"!", 5}, {"je", 6}, {"suis", 7}, {"va", 16}, {"salut", 65},
                   {"cours", 66}, {"recul", 200}, {"alors", QKV_UNK}};
    for (size_t i = 0; i < sizeof src_ids / sizeof src_ids[0]; i++)
        assert_int_equal(qkv_vocab_id(&src, src_ids[i].token), src_ids[i].id);
    for (size_t i = 0; i < sizeof tgt_ids / sizeof tgt_ids[0]; i++)
        assert_int_equal(qkv_vocab_id(&tgt, tgt_ids[i].token), tgt_ids[i].id);

    /* build_array_nmt(..., num_steps=8) rows, from d2l's code. */
    int ids[601 * 8], valid[601];
    qkv_error err = {0};
    assert_int_equal(qkv_sentences_encode(ids, valid, &c.source, &src, 8, &err), QKV_OK);
    assert_memory_equal(ids + 0 * 8, ((int[]){9, 4, 3, 1, 1, 1, 1, 1}), 8 * sizeof(int));
    assert_memory_equal(ids + 5 * 8, ((int[]){0, 5, 3, 1, 1, 1, 1, 1}), 8 * sizeof(int));
    assert_memory_equal(ids + 600 * 8, ((int[]){6, 0, 4, 3, 1, 1, 1, 1}), 8 * sizeof(int));
    assert_int_equal(valid[0], 3);
    assert_int_equal(valid[600], 4);
    assert_int_equal(qkv_sentences_encode(ids, valid, &c.target, &tgt, 8, &err), QKV_OK);
    assert_memory_equal(ids + 5 * 8, ((int[]){12, 0, 5, 3, 1, 1, 1, 1}), 8 * sizeof(int));
    assert_int_equal(valid[5], 4);
    assert_memory_equal(ids + 600 * 8, ((int[]){21, 0, 4, 3, 1, 1, 1, 1}), 8 * sizeof(int));
    /* Truncated ("ça alors !" at num_steps 3): the <eos> is cut off, valid_len = 3. */
    assert_int_equal(qkv_sentences_encode(ids, valid, &c.target, &tgt, 3, &err), QKV_OK);
    assert_memory_equal(ids + 5 * 3, ((int[]){12, 0, 5}), 3 * sizeof(int));
    assert_int_equal(valid[5], 3);
    assert_int_equal(qkv_sentences_encode(ids, valid, &c.target, &tgt, 0, &err), QKV_ERR_ARG);

    qkv_vocab_free(&src);
    qkv_vocab_free(&tgt);
    qkv_corpus_free(&c);
}

static void test_fra_eng_whole_file(void **state)
{
    (void)state;
    qkv_corpus c;
    read_fra(&c, 0);
    qkv_vocab src, tgt;
    build(&src, c.source.tokens, c.source.n_tokens, 2);
    build(&tgt, c.target.tokens, c.target.n_tokens, 2);
    assert_int_equal(src.size, 10012); /* d2l: len(src_vocab) = 10012 */
    assert_int_equal(qkv_vocab_id(&src, "i'm"), 30);
    assert_int_equal(qkv_vocab_id(&src, "hello"), 1807);
    assert_int_equal(tgt.size, 17850); /* d2l: 17851, one of them '' */
    assert_int_equal(qkv_vocab_id(&tgt, "été"), 67);
    assert_int_equal(qkv_vocab_id(&tgt, "chat"), 463);
    assert_int_equal(qkv_vocab_id(&tgt, "participé"), 3886); /* d2l 3886, then '' */
    assert_int_equal(qkv_vocab_id(&tgt, "talentueux"), 3887); /* d2l 3888 */
    assert_string_equal(qkv_vocab_token(&tgt, 17849), "thaï"); /* d2l 17850 */
    qkv_vocab_free(&src);
    qkv_vocab_free(&tgt);
    qkv_corpus_free(&c);
}

/* ---------------------------------------------------------------------------------------
 * truncate_pad, valid lengths, decoding
 * ------------------------------------------------------------------------------------- */

static void test_encode_and_decode(void **state)
{
    (void)state;
    const char *corpus[] = {"go", ".", "go", "now", "."};
    qkv_vocab v;
    build(&v, corpus, 5, 0); /* go 4, . 5, now 6 */
    int ids[6];
    const char *sentence[] = {"go", "away", "."};
    assert_int_equal(qkv_vocab_encode(ids, &v, sentence, 3, 6), 4);
    assert_memory_equal(ids, ((int[]){4, 0, 5, 3, 1, 1}), 6 * sizeof(int));
    assert_int_equal(qkv_vocab_encode(ids, &v, sentence, 3, 4), 4); /* just fits */
    assert_memory_equal(ids, ((int[]){4, 0, 5, 3}), 4 * sizeof(int));
    assert_int_equal(qkv_vocab_encode(ids, &v, sentence, 3, 2), 2); /* truncated */
    assert_memory_equal(ids, ((int[]){4, 0}), 2 * sizeof(int));
    assert_int_equal(qkv_vocab_encode(ids, &v, NULL, 0, 3), 1); /* empty: just <eos> */
    assert_memory_equal(ids, ((int[]){3, 1, 1}), 3 * sizeof(int));
    /* d2l counts non-<pad> ids, so a literal "<pad>" in the text does not count. */
    const char *padded[] = {"go", "<pad>", "now"};
    assert_int_equal(qkv_vocab_encode(ids, &v, padded, 3, 5), 3);
    assert_memory_equal(ids, ((int[]){4, 1, 6, 3, 1}), 5 * sizeof(int));
    ids[0] = 99;
    assert_int_equal(qkv_vocab_encode(ids, &v, sentence, 3, 0), 0);
    assert_int_equal(ids[0], 99);

    char out[64];
    int seq[] = {4, 6, 5, 3, 4, 4};
    assert_int_equal(qkv_vocab_decode(out, sizeof out, &v, seq, 6), strlen("go now ."));
    assert_string_equal(out, "go now .");
    assert_int_equal(qkv_vocab_decode(out, 5, &v, seq, 6), 8); /* snprintf-like */
    assert_string_equal(out, "go n");
    int odd[] = {4, 999, -1, 2};
    assert_int_equal(qkv_vocab_decode(out, sizeof out, &v, odd, 4), 20);
    assert_string_equal(out, "go <unk> <unk> <bos>");
    out[0] = 'x';
    assert_int_equal(qkv_vocab_decode(out, 0, &v, seq, 6), 8);
    assert_int_equal(out[0], 'x');
    assert_int_equal(qkv_vocab_decode(out, sizeof out, &v, seq + 3, 3), 0);
    assert_string_equal(out, "");
    qkv_vocab_free(&v);
}

/* ---------------------------------------------------------------------------------------
 * The vocabulary file
 * ------------------------------------------------------------------------------------- */

static void test_save_load_round_trip(void **state)
{
    fixture *fx = *state;
    const char *tokens[] = {"ça", "alors", "!", "ça", "j’ai", "!", "!"};
    qkv_vocab v, w;
    qkv_error err = {0};
    build(&v, tokens, 7, 0);
    write_text(fx->path, "old contents\n");
    assert_int_equal(qkv_vocab_save(&v, fx->path, &err), QKV_OK);
    assert_int_equal(dir_entries(fx->dir), 1); /* the temporary file is gone */
    FILE *f = fopen(fx->path, "rb");
    char text[128] = "";
    assert_non_null(f);
    assert_true(fread(text, 1, sizeof text - 1, f) > 0);
    fclose(f);
    assert_string_equal(text, "<unk>\n<pad>\n<bos>\n<eos>\n!\nça\nalors\nj’ai\n");

    assert_int_equal(qkv_vocab_load(&w, fx->path, &err), QKV_OK);
    assert_int_equal(w.size, v.size);
    for (int i = 0; i < v.size; i++) {
        assert_string_equal(qkv_vocab_token(&w, i), qkv_vocab_token(&v, i));
        assert_int_equal(qkv_vocab_id(&w, qkv_vocab_token(&v, i)), i);
    }
    qkv_vocab_free(&w);

    /* CRLF endings and a missing final newline load the same. */
    write_text(fx->path, "<unk>\r\n<pad>\r\n<bos>\r\n<eos>\r\n!\r\nça\r\nalors\r\nj’ai");
    assert_int_equal(qkv_vocab_load(&w, fx->path, &err), QKV_OK);
    assert_int_equal(w.size, 8);
    assert_int_equal(qkv_vocab_id(&w, "j’ai"), 7);
    assert_int_equal(qkv_vocab_id(&w, "ça"), 5);
    qkv_vocab_free(&w);

    /* A directory that does not exist: QKV_ERR_IO, nothing written. */
    char bad[200];
    snprintf(bad, sizeof bad, "%s/missing/vocab.txt", fx->dir);
    assert_int_equal(qkv_vocab_save(&v, bad, &err), QKV_ERR_IO);
    check_message(err.msg, bad, NULL);
    assert_int_equal(dir_entries(fx->dir), 1);
    qkv_vocab_free(&v);

    /* A token that cannot be a line is refused before anything is written. */
    const char *odd[] = {"fine", "two\nlines"};
    build(&v, odd, 2, 0);
    assert_int_equal(qkv_vocab_save(&v, fx->path, &err), QKV_ERR_ARG);
    check_message(err.msg, "token 5", NULL);
    qkv_vocab_free(&v);
    const char *empty[] = {""};
    build(&v, empty, 1, 0);
    assert_int_equal(qkv_vocab_save(&v, fx->path, &err), QKV_ERR_ARG);
    qkv_vocab_free(&v);
    assert_int_equal(dir_entries(fx->dir), 1);
}

static void expect_load_error(const fixture *fx, const char *text, qkv_status code,
                              const char *where, const char *what)
{
    qkv_vocab v;
    qkv_error err = {0};
    write_text(fx->path, text);
    assert_int_equal(qkv_vocab_load(&v, fx->path, &err), code);
    assert_null(v.idx_to_token);
    char at[200];
    snprintf(at, sizeof at, "%s%s", fx->path, where);
    check_message(err.msg, at, what);
}

static void test_load_rejects_malformed_files(void **state)
{
    fixture *fx = *state;
    expect_load_error(fx, "<unk>\n<pad>\n<bos>\n<eos>\na\nb\na\n", QKV_ERR_FORMAT, ":7:",
                      "duplicate token 'a' (first on line 5)");
    expect_load_error(fx, "<unk>\n<pad>\n<bos>\n<eos>\n<pad>\n", QKV_ERR_FORMAT, ":5:",
                      "first on line 2");
    expect_load_error(fx, "<unk>\n<pad>\n<bos>\n<eos>\na\n\nb\n", QKV_ERR_FORMAT, ":6:",
                      "empty line");
    expect_load_error(fx, "<unk>\n<pad>\n<bos>\n<eos>\na\n\n", QKV_ERR_FORMAT, ":6:",
                      "empty line");
    expect_load_error(fx, "<unk>\n<bos>\n<pad>\n<eos>\na\n", QKV_ERR_FORMAT, ":2:",
                      "expected '<pad>'");
    expect_load_error(fx, "a\nb\nc\nd\n", QKV_ERR_FORMAT, ":1:", "expected '<unk>'");
    expect_load_error(fx, "<unk>\n<pad>\n", QKV_ERR_FORMAT, ":3:", "end of file");
    expect_load_error(fx, "", QKV_ERR_FORMAT, ":1:", "end of file");
    expect_load_error(fx, "<unk>\n<pad>\n<bos>\n<eos>\nok\nbad\xc3(\n", QKV_ERR_FORMAT, ":6:",
                      "invalid UTF-8 at byte 3");
    qkv_vocab v;
    qkv_error err = {0};
    assert_int_equal(qkv_vocab_load(&v, "/nonexistent/vocab.txt", &err), QKV_ERR_IO);
    check_message(err.msg, "/nonexistent/vocab.txt", NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_order_and_min_freq),
        cmocka_unit_test(test_reserved_tokens_in_text),
        cmocka_unit_test(test_many_tokens),
        cmocka_unit_test(test_fra_eng_600),
        cmocka_unit_test(test_fra_eng_whole_file),
        cmocka_unit_test(test_encode_and_decode),
        cmocka_unit_test_setup_teardown(test_save_load_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_load_rejects_malformed_files, setup, teardown),
    };
    return cmocka_run_group_tests_name("vocab", tests, NULL, NULL);
}
