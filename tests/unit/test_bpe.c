/* SPDX-License-Identifier: MIT */
/* Byte-pair encoding: the merges of Sennrich et al.'s worked example in their order; the merge
 * sequences of real text against a plain Python reference (tests/unit/bpe_reference.py,
 * which recounts every pair before each merge); encode/decode giving back every line of
 * fra.txt and Multi30k exactly; vocabulary sizes; unknown characters; the file format.
 * Real-data tests read $QKV_DATA_DIR (default ../shared/data) and are skipped without it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_util.h"

#define SP QKV_BPE_SPACE

static void data_path(char *out, size_t cap, const char *rel)
{
    const char *dir = getenv("QKV_DATA_DIR");
    snprintf(out, cap, "%s/%s", dir ? dir : "../shared/data", rel);
}

static int readable(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f) fclose(f);
    return f != NULL;
}

static void sentences_of(qkv_sentences *s, const char *text)
{
    qkv_error err = {0};
    assert_int_equal(qkv_sentences_from_text(s, text, strlen(text), "test", &err), QKV_OK);
}

static void learn(qkv_bpe *b, const qkv_sentences *s, int n, int vocab_size)
{
    const qkv_sentences *texts[2] = {s, s + 1};
    qkv_error err = {0};
    assert_int_equal(qkv_bpe_learn(b, texts, n, vocab_size, &err), QKV_OK);
}

/* "left right" of merge r. */
static void merge_text(char *out, size_t cap, const qkv_bpe *b, int r)
{
    snprintf(out, cap, "%s %s", b->symbols[b->merges[3 * r]], b->symbols[b->merges[3 * r + 1]]);
}

/* FNV-1a 64 of the merges as qkv_bpe_save writes them, "left right\n" each. */
static uint64_t merges_digest(const qkv_bpe *b)
{
    uint64_t h = 14695981039346656037ull;
    for (int r = 0; r < b->n_merges; r++) {
        char line[512];
        merge_text(line, sizeof line - 1, b, r);
        strcat(line, "\n");
        for (const char *c = line; *c; c++) h = (h ^ (unsigned char)*c) * 1099511628211ull;
    }
    return h;
}

/* Encodes text and checks the pieces decode back to want. */
static void check_round_trip(const qkv_bpe *b, const char *text, size_t len, const char *want)
{
    int *ids = malloc((len + 1) * sizeof *ids);
    assert_non_null(ids);
    int n = qkv_bpe_encode(ids, b, text, len);
    assert_true(n >= 1 && (size_t)n <= len + 1);
    size_t need = qkv_bpe_decode(NULL, 0, b, ids, n);
    char *back = malloc(need + 1);
    assert_non_null(back);
    assert_int_equal(qkv_bpe_decode(back, need + 1, b, ids, n), need);
    if (strcmp(back, want)) fail_msg("round trip of \"%s\" gave \"%s\"", want, back);
    free(back);
    free(ids);
}

/* Sennrich et al.'s example (section 3.2, figure 1's words with their counts): the merges
 * come out as Python's reference makes them, most frequent pair first. */
static void test_worked_example(void **state)
{
    (void)state;
    qkv_sentences s;
    sentences_of(&s, "low low low low low lower lower newest newest newest newest newest "
                     "newest widest widest widest");
    qkv_bpe b;
    learn(&b, &s, 1, 4 + 10 + 10);
    /* alphabet: e (17) w ▁ (16) s t (9) l o (7) n (6) d i (3) r (2), ties by bytes ('w' is
     * 0x77, '▁' 0xE2 0x96 0x81) */
    assert_int_equal(b.n_chars, 11);
    const char *chars[] = {"e", "w", SP, "s", "t", "l", "o", "n", "d", "i", "r"};
    for (int i = 0; i < 11; i++) assert_string_equal(b.symbols[i], chars[i]);
    /* e+s and s+t tie at 9 with w+e and others below: 'e' < 's' bytewise */
    const char *want[] = {"e s", "es t", "l o", "lo w", SP " low", "e w", "ew est", "n ewest",
                          SP " newest"};
    assert_int_equal(b.n_merges, 9);
    for (int r = 0; r < 9; r++) {
        char m[64];
        merge_text(m, sizeof m, &b, r);
        assert_string_equal(m, want[r]);
    }
    assert_int_equal(b.n_symbols, 20); /* the vocabulary is full: 4 + 20 = 24 */
    assert_int_equal(merges_digest(&b), 0x471b085379fdf97aull);
    /* encoding replays them: a known word is one piece, an unseen one splits */
    int ids[32];
    int n = qkv_bpe_encode(ids, &b, "lowest newer", 12);
    const char *pieces[] = {SP "low", "est", SP, "n", "ew", "e", "r"}; /* no merge ▁ + n */
    assert_int_equal(n, 7);
    for (int i = 0; i < n; i++)
        assert_string_equal(b.symbols[ids[i] - QKV_N_RESERVED], pieces[i]);
    qkv_bpe_free(&b);
    qkv_bpe_free(&b); /* freeing twice is harmless */
    qkv_sentences_free(&s);
}

/* Lines of a file, one by one. */
typedef struct {
    FILE *f;
    char *line;
    size_t cap;
} lines;

static int next_line(lines *l, size_t *len)
{
    ssize_t n = getline(&l->line, &l->cap, l->f);
    if (n < 0) return 0;
    if (n > 0 && l->line[n - 1] == '\n') n--;
    if (n > 0 && l->line[n - 1] == '\r') n--;
    l->line[n] = '\0';
    *len = (size_t)n;
    return 1;
}

/* Words of the first n lines of each file (aligned files: two texts). */
static void read_words(qkv_corpus *c, const char *a, const char *b, int n)
{
    char pa[4096], pb[4096];
    data_path(pa, sizeof pa, a);
    qkv_error err = {0};
    if (b) {
        data_path(pb, sizeof pb, b);
        assert_int_equal(qkv_corpus_read_aligned(c, pa, pb, n, &err), QKV_OK);
    } else {
        assert_int_equal(qkv_corpus_read_tsv(c, pa, n, &err), QKV_OK);
    }
}

/* Merge sequences on real text, as the Python reference prints them. */
static void test_matches_reference(void **state)
{
    (void)state;
    char p[4096];
    data_path(p, sizeof p, "multi30k/val.de");
    if (!readable(p)) skip();
    struct {
        const char *a, *b;
        int lines, both, vocab, chars, merges;
        uint64_t digest;
    } cases[] = {
        {"fra-eng/fra.txt", NULL, 2000, 1, 600, 56, 540, 0x84175b872407bcdbull},
        {"multi30k/val.de", "multi30k/val.en", 1014, 0, 500, 42, 454, 0xe6747175ad6f91b3ull},
        {"multi30k/val.de", "multi30k/val.en", 1014, 1, 1000, 45, 951, 0x228ad31ab65c68f1ull},
        {"multi30k/val.de", "multi30k/val.en", 1014, 0, 40, 36, 0, 0xcbf29ce484222325ull},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        qkv_corpus c;
        read_words(&c, cases[k].a, cases[k].b, cases[k].lines);
        qkv_bpe b;
        learn(&b, &c.source, cases[k].both ? 2 : 1, cases[k].vocab);
        assert_int_equal(b.n_chars, cases[k].chars);
        assert_int_equal(b.n_merges, cases[k].merges);
        assert_int_equal(QKV_N_RESERVED + b.n_symbols, cases[k].vocab);
        if (merges_digest(&b) != cases[k].digest)
            fail_msg("case %zu: merges differ from the Python reference's", k);
        qkv_bpe_free(&b);
        qkv_corpus_free(&c);
    }
}

/* Every line of a file, preprocessed as d2l (a tab-separated file: each column), encodes and
 * decodes back to exactly itself: spaces doubled or at the ends included. */
static void round_trip_file(const qkv_bpe *b, const char *rel, int *count)
{
    char path[4096];
    data_path(path, sizeof path, rel);
    lines l = {fopen(path, "rb"), NULL, 0};
    assert_non_null(l.f);
    size_t len;
    char *pre = NULL;
    while (next_line(&l, &len)) {
        pre = realloc(pre, QKV_PREPROCESS_BOUND(len));
        size_t plen;
        assert_int_equal(qkv_preprocess(pre, &plen, l.line, len, NULL), QKV_OK);
        for (char *col = pre, *end; col; col = end ? end + 1 : NULL) {
            end = strchr(col, '\t');
            if (end) *end = '\0';
            check_round_trip(b, col, strlen(col), col);
            (*count)++;
        }
    }
    free(pre);
    free(l.line);
    fclose(l.f);
}

static void test_round_trip_every_line(void **state)
{
    (void)state;
    char p[4096];
    data_path(p, sizeof p, "fra-eng/fra.txt");
    if (!readable(p)) skip();
    struct {
        const char *a, *b;
        int vocab;
    } corpora[] = {{"fra-eng/fra.txt", NULL, 8000}, {"multi30k/train.de", "multi30k/train.en", 10000}};
    int total = 0;
    for (int k = 0; k < 2; k++) {
        qkv_corpus c;
        read_words(&c, corpora[k].a, corpora[k].b, 0);
        qkv_bpe b;
        learn(&b, &c.source, 2, corpora[k].vocab); /* joint: every character is known */
        assert_int_equal(QKV_N_RESERVED + b.n_symbols, corpora[k].vocab);
        if (k == 0) {
            round_trip_file(&b, "fra-eng/fra.txt", &total);
        } else {
            /* Multi30k: train (40 lines end in a space) and validation */
            const char *files[] = {"multi30k/train.de", "multi30k/train.en", "multi30k/val.de",
                                   "multi30k/val.en"};
            for (int f = 0; f < 4; f++) round_trip_file(&b, files[f], &total);
        }
        qkv_bpe_free(&b);
        qkv_corpus_free(&c);
    }
    assert_true(total >= 2 * 167130 + 2 * 29000 + 2 * 1014); /* (a few lines have 3 columns) */
}

/* Spaces exactly, and pieces the word-sentence path makes equal those of the text path. */
static void test_spaces_and_sentences(void **state)
{
    (void)state;
    qkv_sentences s;
    sentences_of(&s, "the cat sat on the mat .\nthe cat ate the rat .\n");
    qkv_bpe b;
    learn(&b, &s, 1, 40);
    const char *texts[] = {"", " ", "  ", "the", " the", "the ", "the  cat", "  the cat  .  "};
    for (size_t k = 0; k < sizeof texts / sizeof *texts; k++)
        check_round_trip(&b, texts[k], strlen(texts[k]), texts[k]);
    /* the empty text is one piece, the marker */
    int ids[8];
    assert_int_equal(qkv_bpe_encode(ids, &b, "", 0), 1);
    assert_string_equal(b.symbols[ids[0] - QKV_N_RESERVED], SP);
    /* word sentences -> piece sentences: the pieces of "the cat sat" as text */
    qkv_sentences pieces;
    qkv_error err = {0};
    assert_int_equal(qkv_bpe_encode_sentences(&pieces, &b, &s, &err), QKV_OK);
    assert_int_equal(pieces.count, 2);
    const char *line0 = "the cat sat on the mat .";
    int want[64], n = qkv_bpe_encode(want, &b, line0, strlen(line0));
    assert_int_equal(qkv_sentence_len(&pieces, 0), n);
    for (int i = 0; i < n; i++)
        assert_string_equal(pieces.tokens[i], b.symbols[want[i] - QKV_N_RESERVED]);
    /* and the vocabulary maps them to the same ids */
    qkv_vocab v;
    assert_int_equal(qkv_bpe_vocab(&v, &b, &err), QKV_OK);
    assert_int_equal(v.size, QKV_N_RESERVED + b.n_symbols);
    for (int i = 0; i < n; i++) assert_int_equal(qkv_vocab_id(&v, pieces.tokens[i]), want[i]);
    /* decoding stops at <eos> and skips <pad> and <bos> */
    int with_eos[] = {QKV_BOS, want[0], QKV_PAD, want[1], QKV_EOS, want[2]};
    char out[64];
    qkv_bpe_decode(out, sizeof out, &b, with_eos, 6);
    assert_string_equal(out, "the cat");
    /* snprintf's contract: the full length whatever the capacity */
    assert_int_equal(qkv_bpe_decode(out, 4, &b, want, n), strlen(line0));
    assert_string_equal(out, "the");
    qkv_vocab_free(&v);
    qkv_sentences_free(&pieces);
    qkv_bpe_free(&b);
    qkv_sentences_free(&s);
}

/* The vocabulary never exceeds the size asked for; it stops short only when no pair is seen
 * twice. Too small for the alphabet: the rarest characters are unknown. */
static void test_vocab_size(void **state)
{
    (void)state;
    qkv_sentences s;
    sentences_of(&s, "a man in a blue shirt is standing on a ladder cleaning windows .\n"
                     "a man in a blue shirt is standing on a ladder .\n"
                     "two dogs play in the snow near a blue fence !\n");
    qkv_error err = {0};
    qkv_bpe b;
    const qkv_sentences *t[1] = {&s};
    assert_int_equal(qkv_bpe_learn(&b, t, 1, QKV_N_RESERVED, &err), QKV_ERR_ARG);
    int sizes[] = {5, 10, 20, 40, 60, 1000};
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        learn(&b, &s, 1, sizes[k]);
        int V = QKV_N_RESERVED + b.n_symbols;
        assert_true(V <= sizes[k]);
        if (sizes[k] <= 60) assert_int_equal(V, sizes[k]);
        qkv_vocab v;
        assert_int_equal(qkv_bpe_vocab(&v, &b, &err), QKV_OK);
        assert_int_equal(v.size, V);
        qkv_vocab_free(&v);
        /* every id the encoder writes is inside the vocabulary */
        const char *text = "a man in a blue shirt ! zebra";
        int ids[64], n = qkv_bpe_encode(ids, &b, text, strlen(text));
        for (int i = 0; i < n; i++) assert_true(ids[i] >= 0 && ids[i] < V);
        qkv_bpe_free(&b);
    }
    /* 1000: merging runs out of pairs seen twice before the room runs out */
    learn(&b, &s, 1, 1000);
    assert_true(QKV_N_RESERVED + b.n_symbols < 1000);
    qkv_bpe_free(&b);
    qkv_sentences_free(&s);
}

/* Characters outside the alphabet become one <unk> each (and read back as "<unk>"); a literal
 * U+2581 is never taken for a space; bytes that are not UTF-8 are unknown, not a crash. */
static void test_unknown_characters(void **state)
{
    (void)state;
    qkv_sentences s;
    sentences_of(&s, "abc abc ab\n");
    qkv_bpe b;
    learn(&b, &s, 1, 100);
    check_round_trip(&b, "ab cab", 6, "ab cab");
    check_round_trip(&b, "a\xe2\x98\x83" "b", 5, "a<unk>b");   /* a snowman */
    check_round_trip(&b, "x" SP "a", 5, "<unk><unk>a");           /* a literal ▁ */
    check_round_trip(&b, "\xe2\x98\x83 a", 5, "<unk> a");
    check_round_trip(&b, "a\xff\xfe", 3, "a<unk><unk>");           /* not UTF-8 */
    int ids[8], n = qkv_bpe_encode(ids, &b, "a\xe2\x98\x83", 4); /* ▁ a ☃: "▁a" is no merge */
    assert_int_equal(n, 3);
    assert_int_equal(ids[2], QKV_UNK);
    /* the sentence path spells it "<unk>", which the vocabulary maps to QKV_UNK */
    qkv_sentences w, pieces;
    sentences_of(&w, "c\xe2\x98\x83");
    qkv_error err = {0};
    assert_int_equal(qkv_bpe_encode_sentences(&pieces, &b, &w, &err), QKV_OK);
    assert_int_equal(pieces.n_tokens, 3); /* ▁ c <unk> */
    assert_string_equal(pieces.tokens[2], "<unk>");
    /* an id outside the vocabulary decodes as <unk> too */
    int bad[] = {b.n_symbols + QKV_N_RESERVED, -3};
    char out[32];
    qkv_bpe_decode(out, sizeof out, &b, bad, 2);
    assert_string_equal(out, "<unk><unk>");
    qkv_sentences_free(&pieces);
    qkv_sentences_free(&w);
    qkv_bpe_free(&b);
    qkv_sentences_free(&s);
}

/* A pair that would spell a reserved token is never merged. */
static void test_reserved_never_spelled(void **state)
{
    (void)state;
    qkv_sentences s;
    sentences_of(&s, "x<unk> x<unk> x<unk> x<unk>\n");
    qkv_bpe b;
    learn(&b, &s, 1, 100);
    for (int i = 0; i < b.n_symbols; i++) assert_string_not_equal(b.symbols[i], "<unk>");
    qkv_vocab v;
    assert_int_equal(qkv_bpe_vocab(&v, &b, NULL), QKV_OK);
    assert_int_equal(v.size, QKV_N_RESERVED + b.n_symbols);
    check_round_trip(&b, "x<unk>", 6, "x<unk>");
    qkv_vocab_free(&v);
    qkv_bpe_free(&b);
    qkv_sentences_free(&s);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* Save -> load gives the same encoding; malformed files are refused naming file and line. */
static void test_file(void **state)
{
    (void)state;
    qkv_sentences s;
    sentences_of(&s, "the cat sat on the mat .\nthe cat ate the rat .\n");
    qkv_bpe b, back;
    learn(&b, &s, 1, 40);
    char dir[] = "/tmp/qkv_bpe_XXXXXX", path[256];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/bpe.txt", dir);
    qkv_error err = {0};
    assert_int_equal(qkv_bpe_save(&b, path, &err), QKV_OK);
    assert_int_equal(qkv_bpe_load(&back, path, &err), QKV_OK);
    assert_int_equal(back.n_chars, b.n_chars);
    assert_int_equal(back.n_symbols, b.n_symbols);
    assert_int_equal(back.n_merges, b.n_merges);
    for (int i = 0; i < b.n_symbols; i++) assert_string_equal(back.symbols[i], b.symbols[i]);
    const char *text = "the rat sat on the cat";
    int x[64], y[64], n = qkv_bpe_encode(x, &b, text, strlen(text));
    assert_int_equal(qkv_bpe_encode(y, &back, text, strlen(text)), n);
    assert_memory_equal(x, y, (size_t)n * sizeof *x);
    qkv_bpe_free(&back);
    struct {
        const char *text, *why;
    } bad[] = {
        {"", ":1: expected \"#qkv-bpe 1\""},
        {"#qkv-bpe 1\nchars 2\na\n" SP "\nmerges 1\na b\n", ":6: expected \"left right\""},
        {"#qkv-bpe 1\nchars 2\na\na\n", ":4: character 'a' appears twice"},
        {"#qkv-bpe 1\nchars 2\nab\n" SP "\n", ":3: expected one UTF-8 character"},
        {"#qkv-bpe 1\nchars 1\na\nmerges 0\n", "lacks the word-start marker"},
        {"#qkv-bpe 1\nchars 2\na\n" SP "\nmerges 2\na a\n", ":7: expected \"left right\""},
        {"#qkv-bpe 1\nchars 2\na\n" SP "\nmerges 1\na a\nextra\n", ":7: unexpected text"},
        {"#qkv-bpe 1\nchars 2\na\n" SP "\nmerges 2\na a\na a\n", ":7: merge \"a a\" repeated"},
        {"#qkv-bpe 1\nchars x\n", ":2: expected \"chars N\""},
        /* the counts on their boundaries (exactly right is every good file above): one
         * character more than listed, one fewer, one merge more, one fewer */
        {"#qkv-bpe 1\nchars 3\na\n" SP "\nmerges 0\n", ":5: expected one UTF-8 character"},
        {"#qkv-bpe 1\nchars 1\n" SP "\na\nmerges 0\n", ":4: expected \"merges M\""},
        {"#qkv-bpe 1\nchars 2\na\n" SP "\nmerges 1\n", ":6: expected \"left right\""},
        {"#qkv-bpe 1\nchars 2\na\n" SP "\nmerges 0\na a\n", ":6: unexpected text"},
        {"#qkv-bpe 1\nchars 2\na\n" SP "\nmerges -1\n", ":5: expected \"merges M\""},
        {"#qkv-bpe 1\nchars 6\n" SP "\n<\nu\nn\nk\n>\nmerges 4\n< u\n<u n\n<un k\n<unk >\n",
         ":13: merge spells the reserved token <unk>"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        write_file(path, bad[k].text);
        assert_int_equal(qkv_bpe_load(&back, path, &err), QKV_ERR_FORMAT);
        if (!strstr(err.msg, path) || !strstr(err.msg, bad[k].why))
            fail_msg("case %zu: \"%s\" lacks \"%s\"", k, err.msg, bad[k].why);
        assert_null(back.symbols);
    }
    /* found by fuzz_bpe: a carriage return in the alphabet (qkv_bpe_save would write a file
     * that reads back as an empty line) and a NUL byte (which cut its line short unseen) */
    char want[512];
    write_file(path, "#qkv-bpe 1\nchars 2\n" SP "\n\r\r\nmerges 0\n");
    assert_int_equal(qkv_bpe_load(&back, path, &err), QKV_ERR_FORMAT);
    snprintf(want, sizeof want, "%s:4: a carriage return cannot be a character of the alphabet",
             path);
    assert_string_equal(err.msg, want);
    assert_null(back.symbols);
    static const char with_nul[] = "#qkv-bpe 1\nchars 2\n" SP "\na\0junk\nmerges 0\n";
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(with_nul, 1, sizeof with_nul - 1, f), sizeof with_nul - 1);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(qkv_bpe_load(&back, path, &err), QKV_ERR_FORMAT);
    snprintf(want, sizeof want, "%s:4: NUL byte", path);
    assert_string_equal(err.msg, want);
    assert_null(back.symbols);
    snprintf(path, sizeof path, "%s/missing.txt", dir);
    assert_int_equal(qkv_bpe_load(&back, path, &err), QKV_ERR_IO);
    snprintf(path, sizeof path, "%s/bpe.txt", dir);
    remove(path);
    rmdir(dir);
    qkv_bpe_free(&b);
    qkv_sentences_free(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_worked_example),
        cmocka_unit_test(test_matches_reference),
        cmocka_unit_test(test_round_trip_every_line),
        cmocka_unit_test(test_spaces_and_sentences),
        cmocka_unit_test(test_vocab_size),
        cmocka_unit_test(test_unknown_characters),
        cmocka_unit_test(test_reserved_never_spelled),
        cmocka_unit_test(test_file),
    };
    return cmocka_run_group_tests_name("bpe", tests, NULL, NULL);
}
