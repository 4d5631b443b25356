/* SPDX-License-Identifier: MIT */
/* Corpora: d2l's preprocessing and tokenisation, character by character and on the whole of
 * fra.txt and Multi30k (digests from a Python port of d2l's code), the readers' handling of
 * malformed files, and the line-aligned reader.
 *
 * Real-data tests read $QKV_DATA_DIR (default ../shared/data, relative to the repository root where make runs the tests) and are skipped if the
 * files are not there. Their expectations come from this port of d2l-zh v2 (PyTorch):
 *
 *   text = preprocess_nmt(read_data_nmt())          # d2l, verbatim
 *   src, tgt = tokenize_nmt(text)                     # d2l, verbatim
 *   src = [[t for t in l if t] for l in src]          # qkv drops '' (double spaces)
 *   blob = ''.join(' '.join(a) + '\t' + ' '.join(b) + '\n' for a, b in zip(src, tgt))
 *   fnv1a_64(blob.encode()), len(blob.encode())
 */
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

/* Preprocesses s and checks the result is want. */
static void check_preprocess(const char *s, const char *want)
{
    size_t len = strlen(s), out_len = 0;
    char *out = malloc(QKV_PREPROCESS_BOUND(len));
    assert_non_null(out);
    qkv_error err = {0};
    if (qkv_preprocess(out, &out_len, s, len, &err) != QKV_OK) {
        print_error("preprocess(\"%s\") failed: %s\n", s, err.msg);
        fail();
    }
    if (strcmp(out, want) != 0 || out_len != strlen(want)) {
        print_error("preprocess(\"%s\") = \"%s\", want \"%s\"\n", s, out, want);
        fail();
    }
    free(out);
}

/* Checks sentence i of s is exactly the words of want (space-separated). */
static void check_sentence(const qkv_sentences *s, int i, const char *want)
{
    char got[4096] = "";
    size_t used = 0;
    assert_true(i >= 0 && i < s->count);
    for (size_t t = s->start[i]; t < s->start[i + 1]; t++) {
        assert_true(strlen(s->tokens[t]) > 0); /* a token is never empty */
        used += (size_t)snprintf(got + used, sizeof got - used, "%s%s",
                                 t > s->start[i] ? " " : "", s->tokens[t]);
        assert_true(used < sizeof got);
    }
    if (strcmp(got, want) != 0) {
        print_error("sentence %d is \"%s\", want \"%s\"\n", i, got, want);
        fail();
    }
}

/* Fails unless msg contains every fragment. */
static void check_message(const char *msg, const char *a, const char *b)
{
    if (!strstr(msg, a) || (b && !strstr(msg, b))) {
        print_error("message \"%s\" lacks \"%s\"%s%s\n", msg, a, b ? " or " : "", b ? b : "");
        fail();
    }
}

typedef struct {
    char dir[64];
    char a[128], b[128]; /* two file names in dir */
} fixture;

static int setup(void **state)
{
    fixture *fx = calloc(1, sizeof *fx);
    if (!fx) return -1;
    strcpy(fx->dir, "/tmp/qkv-corpus-XXXXXX");
    if (!mkdtemp(fx->dir)) {
        free(fx);
        return -1;
    }
    snprintf(fx->a, sizeof fx->a, "%s/a.txt", fx->dir);
    snprintf(fx->b, sizeof fx->b, "%s/b.txt", fx->dir);
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    fixture *fx = *state;
    unlink(fx->a);
    unlink(fx->b);
    rmdir(fx->dir);
    free(fx);
    return 0;
}

static void write_file(const char *path, const char *bytes, size_t len)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(bytes, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

static void write_text(const char *path, const char *text)
{
    write_file(path, text, strlen(text));
}

/* $QKV_DATA_DIR/rel, or skips the test if it cannot be read. */
static void data_path(char *out, size_t cap, const char *rel)
{
    const char *dir = getenv("QKV_DATA_DIR");
    snprintf(out, cap, "%s/%s", dir ? dir : "../shared/data", rel);
    if (access(out, R_OK) != 0) {
        print_message("%s not found: skipped\n", out);
        skip();
    }
}

/* FNV-1a 64 over every pair as "src words<TAB>tgt words\n", as the Python port above. */
static uint64_t fnv_bytes(uint64_t h, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static uint64_t corpus_digest(const qkv_corpus *c, size_t *bytes)
{
    uint64_t h = 14695981039346656037ull;
    *bytes = 0;
    for (int i = 0; i < c->source.count; i++) {
        const qkv_sentences *side[2] = {&c->source, &c->target};
        for (int k = 0; k < 2; k++) {
            for (size_t t = side[k]->start[i]; t < side[k]->start[i + 1]; t++) {
                if (t > side[k]->start[i]) h = fnv_bytes(h, " ", 1), ++*bytes;
                size_t n = strlen(side[k]->tokens[t]);
                h = fnv_bytes(h, side[k]->tokens[t], n);
                *bytes += n;
            }
            h = fnv_bytes(h, k == 0 ? "\t" : "\n", 1), ++*bytes;
        }
    }
    return h;
}

/* ---------------------------------------------------------------------------------------
 * Preprocessing
 * ------------------------------------------------------------------------------------- */

/* The first lines of fra.txt (U+202F before '!', here one U+00A0 too) become what d2l's
 * chapter prints for preprocess_nmt(raw_text)[:80]. */
static void test_preprocess_d2l_first_lines(void **state)
{
    (void)state;
    check_preprocess("Go.\tVa\xe2\x80\xaf!\nHi.\tSalut\xe2\x80\xaf!\n"
                     "Run!\tCours\xe2\x80\xaf!\nRun!\tCourez\xe2\x80\xaf!\n"
                     "Who?\tQui\xc2\xa0?\nWow!\t\xc3\x87" "a alors\xe2\x80\xaf!",
                     "go .\tva !\nhi .\tsalut !\nrun !\tcours !\nrun !\tcourez !\nwho ?\tqui ?\n"
                     "wow !\t\xc3\xa7" "a alors !");
}

/* Expectations from Python's str.lower(), byte for byte. */
static void test_preprocess_lower_case(void **state)
{
    (void)state;
    check_preprocess("ABCXYZ abc 0-9", "abcxyz abc 0-9");
    /* Latin-1: À..Þ lower by 0x20, except × (U+00D7); ß has no capital here. */
    check_preprocess("ÀÁÂÃÄÅÆÇÈÉÊËÌÍÎÏÐÑÒÓÔÕÖ×ØÙÚÛÜÝÞß", "àáâãäåæçèéêëìíîïðñòóôõö×øùúûüýþß");
    /* Latin Extended-A, where the capital's parity changes; İ becomes "i" + U+0307;
     * ı ĸ ŉ ſ have no lower case of their own; Ÿ lowers into Latin-1. */
    check_preprocess("ĀĲĹŁŊŒŸŹŽİıĸŉſ", "āĳĺłŋœÿźži\xcc\x87ıĸŉſ");
    /* Cyrillic capitals (fra.txt has one С); Greek capitals, Σ by its context as Python's
     * Final_Sigma (ς ending a word, σ elsewhere, also across an apostrophe); letters
     * outside the old tables (ẞ, Ω, the Kelvin sign) */
    check_preprocess("СЁЯ Σ", "сёя σ");
    check_preprocess("ΟΔΟΣ ΚΑΙ ΣΟΦΙΑ", "οδος και σοφια");
    check_preprocess("ΑΣ'Σ Σ:Σ ΑΣΑ", "ασ'ς σ:ς ασα");
    check_preprocess("\xe1\xba\x9e \xe2\x84\xa6 \xe2\x84\xaa", "ß ω k");
    check_preprocess("ÇA VA\xc2\xa0?", "ça va ?");
}

static void test_preprocess_punctuation(void **state)
{
    (void)state;
    check_preprocess("a,b.c!d?e", "a ,b .c !d ?e");
    check_preprocess("wait...", "wait . . .");  /* each '.' follows a non-space */
    check_preprocess("x .", "x .");              /* already spaced */
    check_preprocess(".x", ".x");                /* d2l: i > 0 */
    check_preprocess("x\t.", "x\t .");           /* a tab is not a space */
    check_preprocess("x\xe2\x80\xaf!", "x !");   /* U+202F is replaced first */
    check_preprocess("x\xe2\x80\x89!", "x\xe2\x80\x89 !"); /* U+2009 is not replaced */
    check_preprocess("", "");
}

static void test_preprocess_rejects_bad_utf8(void **state)
{
    (void)state;
    static const struct {
        const char *bytes;
        size_t len, at;
    } bad[] = {
        {"ok\xff", 3, 2},             /* never valid */
        {"ok\xc3", 3, 2},             /* truncated */
        {"\xc0\xaf", 2, 0},           /* overlong '/' */
        {"a\xe0\x80\xaf", 4, 1},      /* overlong, 3 bytes */
        {"ab\xed\xa0\x80", 5, 2},     /* a surrogate */
        {"\xf4\x90\x80\x80", 4, 0},   /* past U+10FFFF */
        {"a\xc3(", 3, 1},             /* bad continuation */
        {"nul\0x", 5, 3},             /* NUL byte */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char out[32], where[32];
        size_t n;
        qkv_error err = {0};
        assert_int_equal(qkv_preprocess(out, &n, bad[i].bytes, bad[i].len, &err),
                         QKV_ERR_FORMAT);
        snprintf(where, sizeof where, "at byte %zu", bad[i].at);
        check_message(err.msg, where, NULL);
        assert_int_equal(qkv_utf8_check(bad[i].bytes, bad[i].len), bad[i].at);
    }
    assert_int_equal(qkv_utf8_check("\xf0\x9f\x98\x80 é", 7), 7); /* 4-byte and 2-byte */
}

/* ---------------------------------------------------------------------------------------
 * Tokens
 * ------------------------------------------------------------------------------------- */

/* Words split on ' ' as d2l's line.split(' '), minus its empty strings. */
static void test_tokens_from_text(void **state)
{
    (void)state;
    const char text[] = "Go.  Now!\r\n\n  spaced   out \nlast";
    qkv_sentences s;
    qkv_error err = {0};
    assert_int_equal(qkv_sentences_from_text(&s, text, strlen(text), "input", &err), QKV_OK);
    assert_int_equal(s.count, 4);
    check_sentence(&s, 0, "go . now !");
    check_sentence(&s, 1, "");
    check_sentence(&s, 2, "spaced out");
    check_sentence(&s, 3, "last");
    assert_int_equal(s.n_tokens, 7);
    assert_int_equal(qkv_sentence_len(&s, 0), 4);
    qkv_sentences_free(&s);
    assert_null(s.tokens);
    qkv_sentences_free(&s); /* harmless twice */

    assert_int_equal(qkv_sentences_from_text(&s, "", 0, "input", &err), QKV_OK);
    assert_int_equal(s.count, 0);
    assert_int_equal(s.start[0], 0);
    qkv_sentences_free(&s);

    assert_int_equal(qkv_sentences_from_text(&s, "fine\nbad \xff\n", 11, "input", &err),
                     QKV_ERR_FORMAT);
    check_message(err.msg, "input:2:", "invalid UTF-8 at byte 4");
    assert_null(s.tokens);
}

/* ---------------------------------------------------------------------------------------
 * Unicode normalisation (NFC) for cased byte-pair models
 * ------------------------------------------------------------------------------------- */

/* Composition (e + U+0301 is é), reordering of marks by combining class, singletons
 * (U+212B ANGSTROM SIGN is Å), Hangul jamo, an exclusion that grows (U+0344 is U+0308
 * U+0301: two characters, one byte more), and text already NFC left as it is. */
static void test_sentences_nfc(void **state)
{
    (void)state;
    static const struct {
        const char *in, *want;
    } cases[] = {
        {"Caf" "e\xcc\x81" " cre\xcc\x80me", "Caf\xc3\xa9 cr\xc3\xa8me"},
        {"a\xcc\x81\xcc\xa3", "\xe1\xba\xa1\xcc\x81"},       /* a U+0301 U+0323: ạ U+0301 */
        {"\xe2\x84\xab" "ngstr" "o\xcc\x88" "m", "\xc3\x85ngstr\xc3\xb6m"},
        {"\xe1\x84\x92\xe1\x85\xa1\xe1\x86\xab", "\xed\x95\x9c"}, /* jamo: 한 */
        {"\xcd\x84", "\xcc\x88\xcc\x81"},
        {"d\xc3\xa9j\xc3\xa0 vu \xe2\x80\x94 Stra\xc3\x9f" "e", "d\xc3\xa9j\xc3\xa0 vu \xe2\x80\x94 Stra\xc3\x9f" "e"},
        {"plain ASCII words", "plain ASCII words"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        qkv_sentences s;
        qkv_error err = {0};
        assert_int_equal(qkv_sentences_split(&s, cases[i].in, strlen(cases[i].in), "t", &err),
                         QKV_OK);
        assert_int_equal(qkv_sentences_nfc(&s, &err), QKV_OK);
        check_sentence(&s, 0, cases[i].want);
        qkv_sentences_free(&s);
    }
    qkv_sentences empty = {0};
    qkv_error err = {0};
    assert_int_equal(qkv_sentences_nfc(&empty, &err), QKV_OK);
    qkv_sentences_free(&empty);
}

/* ids of the first sentence of text, as tok reads it (words, then the source's pieces) */
static int source_ids(const qkv_tokenizer *tok, const char *text, int *ids, int cap)
{
    qkv_sentences words, pieces;
    qkv_error err = {0};
    assert_int_equal(qkv_tokenizer_words(tok, &words, text, strlen(text), "t", &err), QKV_OK);
    assert_int_equal(qkv_tokenizer_tokens(tok, &pieces, &words, 0, &err), QKV_OK);
    const int n = qkv_sentence_len(&pieces, 0);
    assert_true(n <= cap);
    for (int i = 0; i < n; i++) ids[i] = qkv_vocab_id(&tok->src, pieces.tokens[i]);
    qkv_sentences_free(&words), qkv_sentences_free(&pieces);
    return n;
}

/* A cased byte-pair model learned from NFC text reads "é" typed as e + U+0301 (NFD, as
 * macOS writes it) as the precomposed é: the same ids, none <unk>; d2l's words and the
 * whitespace tokenizer keep the bytes as typed (d2l's Python does not normalise). */
static void test_cased_bpe_reads_nfd_as_nfc(void **state)
{
    (void)state;
    const char corpus[] = "Le caf\xc3\xa9 est d\xc3\xa9j\xc3\xa0 l\xc3\xa0\n"
                          "Une cr\xc3\xa8me br\xc3\xbbl\xc3\xa9" "e au caf\xc3\xa9\n"
                          "Caf\xc3\xa9 cr\xc3\xa8me\n";
    const char nfc[] = "caf\xc3\xa9 cr\xc3\xa8me br\xc3\xbbl\xc3\xa9" "e",
               nfd[] = "cafe\xcc\x81 cre\xcc\x80me bru\xcc\x82le\xcc\x81" "e";
    qkv_tokenizer tok = {0};
    qkv_sentences text;
    qkv_error err = {0};
    assert_int_equal(qkv_sentences_split(&text, corpus, strlen(corpus), "t", &err), QKV_OK);
    const qkv_sentences *texts[1] = {&text};
    assert_int_equal(qkv_bpe_learn(&tok.src_bpe, texts, 1, 40, &err), QKV_OK);
    assert_int_equal(qkv_bpe_vocab(&tok.src, &tok.src_bpe, &err), QKV_OK);
    qkv_sentences_free(&text);
    tok.kind = QKV_TOKENIZER_BPE, tok.keep_case = 1;
    int a[64], b[64];
    const int n = source_ids(&tok, nfc, a, 64);
    assert_int_equal(source_ids(&tok, nfd, b, 64), n);
    for (int i = 0; i < n; i++) {
        assert_int_not_equal(a[i], QKV_UNK);
        assert_int_equal(b[i], a[i]);
    }
    for (int k = 0; k < 2; k++) { /* d2l's words, whitespace: as typed */
        qkv_sentences w;
        tok.kind = k ? QKV_TOKENIZER_WHITESPACE : QKV_TOKENIZER_D2L, tok.keep_case = 0;
        assert_int_equal(qkv_tokenizer_words(&tok, &w, nfd, strlen(nfd), "t", &err), QKV_OK);
        check_sentence(&w, 0, nfd);
        qkv_sentences_free(&w);
    }
    tok.kind = QKV_TOKENIZER_BPE, tok.keep_case = 1; /* invalid UTF-8: the reader's error */
    assert_int_equal(qkv_tokenizer_words(&tok, &text, "ok\nbad \xff", 8, "input", &err),
                     QKV_ERR_FORMAT);
    check_message(err.msg, "input:2:", "invalid UTF-8");
    qkv_tokenizer_free(&tok);
}

/* ---------------------------------------------------------------------------------------
 * The tab-separated reader
 * ------------------------------------------------------------------------------------- */

static void test_tsv_reader(void **state)
{
    fixture *fx = *state;
    /* CRLF, a third column, an empty target, no newline at the end. */
    write_text(fx->a, "Go.\tVa !\r\nHi.\tSalut !\tCC-BY 2.0 #123\n\t\nI won!\tJ'ai gagné !");
    qkv_corpus c;
    qkv_error err = {0};
    assert_int_equal(qkv_corpus_read_tsv(&c, fx->a, 0, &err), QKV_OK);
    assert_int_equal(c.source.count, 4);
    assert_int_equal(c.target.count, 4);
    check_sentence(&c.source, 0, "go .");
    check_sentence(&c.target, 0, "va !");
    check_sentence(&c.target, 1, "salut !");
    check_sentence(&c.source, 2, "");
    check_sentence(&c.target, 2, "");
    check_sentence(&c.source, 3, "i won !");
    check_sentence(&c.target, 3, "j'ai gagné !");
    qkv_corpus_free(&c);

    /* num_examples keeps the first lines; more than there are keeps all. */
    assert_int_equal(qkv_corpus_read_tsv(&c, fx->a, 2, &err), QKV_OK);
    assert_int_equal(c.source.count, 2);
    check_sentence(&c.target, 1, "salut !");
    qkv_corpus_free(&c);
    assert_int_equal(qkv_corpus_read_tsv(&c, fx->a, 100, &err), QKV_OK);
    assert_int_equal(c.source.count, 4);
    qkv_corpus_free(&c);
}

static void test_tsv_reader_errors(void **state)
{
    fixture *fx = *state;
    qkv_corpus c;
    qkv_error err = {0};

    write_text(fx->a, "Go.\tVa !\nno tab here\n");
    assert_int_equal(qkv_corpus_read_tsv(&c, fx->a, 0, &err), QKV_ERR_FORMAT);
    check_message(err.msg, fx->a, ":2: no tab");
    assert_int_equal(c.source.count, 0);
    assert_null(c.source.tokens);
    /* ... unless the bad line is past num_examples. */
    assert_int_equal(qkv_corpus_read_tsv(&c, fx->a, 1, &err), QKV_OK);
    qkv_corpus_free(&c);

    write_text(fx->a, "a\tb\nc\td\ne\t\xc3\xa9\xc3\n");
    assert_int_equal(qkv_corpus_read_tsv(&c, fx->a, 0, &err), QKV_ERR_FORMAT);
    check_message(err.msg, ":3: invalid UTF-8", "at byte 4");

    write_file(fx->a, "a\tb\nc\0\td\n", 9);
    assert_int_equal(qkv_corpus_read_tsv(&c, fx->a, 0, &err), QKV_ERR_FORMAT);
    check_message(err.msg, ":2: NUL byte", NULL);

    write_text(fx->a, "");
    assert_int_equal(qkv_corpus_read_tsv(&c, fx->a, 0, &err), QKV_ERR_FORMAT);
    check_message(err.msg, fx->a, "empty corpus");

    write_text(fx->a, "\n");
    assert_int_equal(qkv_corpus_read_tsv(&c, fx->a, 0, &err), QKV_ERR_FORMAT);
    check_message(err.msg, ":1: no tab", NULL);

    assert_int_equal(qkv_corpus_read_tsv(&c, "/nonexistent/fra.txt", 0, &err), QKV_ERR_IO);
    check_message(err.msg, "/nonexistent/fra.txt", "cannot open");
}

/* A 1 MiB word, and a line of 2^19 short words: no fixed line buffer anywhere. */
static void test_very_long_lines(void **state)
{
    fixture *fx = *state;
    size_t word = (size_t)1 << 20, words = (size_t)1 << 19;
    size_t len = word + 1 + 2 * words + 5; /* A..A \t b b .. b ! \n x \t y */
    char *text = malloc(len);
    assert_non_null(text);
    memset(text, 'A', word);
    text[word] = '\t';
    for (size_t i = 0; i < words; i++) memcpy(text + word + 1 + 2 * i, "b ", 2);
    memcpy(text + word + 1 + 2 * words, "!\nx\ty", 5);
    write_file(fx->a, text, len);
    free(text);

    qkv_corpus c;
    qkv_error err = {0};
    assert_int_equal(qkv_corpus_read_tsv(&c, fx->a, 0, &err), QKV_OK);
    assert_int_equal(c.source.count, 2);
    assert_int_equal(qkv_sentence_len(&c.source, 0), 1);
    assert_int_equal(strlen(c.source.tokens[0]), word);
    assert_int_equal(c.source.tokens[0][0], 'a');
    assert_int_equal(c.source.tokens[0][word - 1], 'a');
    assert_int_equal(qkv_sentence_len(&c.target, 0), (int)words + 1);
    assert_string_equal(c.target.tokens[words - 1], "b");
    assert_string_equal(c.target.tokens[words], "!");
    check_sentence(&c.source, 1, "x");
    check_sentence(&c.target, 1, "y");
    qkv_corpus_free(&c);
}

/* A line of exactly QKV_MAX_LINE_BYTES is read, one byte more is refused naming file, line
 * and limit; so are a directory and a device that never ends. */
static void test_line_limit(void **state)
{
    fixture *fx = *state;
    const size_t max = QKV_MAX_LINE_BYTES;
    char *text = malloc(max + 8);
    assert_non_null(text);
    memcpy(text, "x\ty\n", 4);
    memset(text + 4, 'a', max); /* line 2: "aaa...a\tb" of exactly max bytes */
    text[4 + max - 2] = '\t', text[4 + max - 1] = 'b';
    memcpy(text + 4 + max, "\r\n", 2); /* "\r" is not counted, as "\n" is not */
    write_file(fx->a, text, 4 + max + 2);
    qkv_corpus c;
    qkv_error err = {0};
    assert_int_equal(qkv_corpus_read_tsv(&c, fx->a, 0, &err), QKV_OK);
    assert_int_equal(c.source.count, 2);
    assert_int_equal(strlen(c.source.tokens[c.source.start[1]]), max - 2);
    qkv_corpus_free(&c);
    text[4 + max] = 'c'; /* one byte more */
    write_file(fx->a, text, 4 + max + 2);
    assert_int_equal(qkv_corpus_read_tsv(&c, fx->a, 0, &err), QKV_ERR_FORMAT);
    char want[256];
    snprintf(want, sizeof want, "%s:2: a line of more than %zu bytes (the limit "
             "QKV_MAX_LINE_BYTES)", fx->a, max);
    assert_string_equal(err.msg, want);
    /* within num_examples only: the long line is not read */
    assert_int_equal(qkv_corpus_read_tsv(&c, fx->a, 1, &err), QKV_OK);
    qkv_corpus_free(&c);
    free(text);

    assert_int_equal(qkv_corpus_read_tsv(&c, fx->dir, 0, &err), QKV_ERR_IO);
    snprintf(want, sizeof want, "%s: is a directory", fx->dir);
    assert_ptr_equal(strstr(err.msg, want), err.msg);
    assert_int_equal(qkv_corpus_read_aligned(&c, fx->a, fx->dir, 0, &err), QKV_ERR_IO);
    assert_ptr_equal(strstr(err.msg, want), err.msg);
    assert_int_equal(qkv_corpus_read_tsv(&c, "/dev/zero", 0, &err), QKV_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "/dev/zero:1: a line of more than"));
    assert_non_null(strstr(err.msg, "not a regular file: it may never end"));
}


/* ---------------------------------------------------------------------------------------
 * The line-aligned reader
 * ------------------------------------------------------------------------------------- */

static void test_aligned_reader(void **state)
{
    fixture *fx = *state;
    write_text(fx->a, "Zwei junge weiße Männer.\r\nEin Hund rennt!\nDrei\n");
    write_text(fx->b, "Two young, White males.\nA dog runs!\r\nThree");
    qkv_corpus c;
    qkv_error err = {0};
    assert_int_equal(qkv_corpus_read_aligned(&c, fx->a, fx->b, 0, &err), QKV_OK);
    assert_int_equal(c.source.count, 3);
    assert_int_equal(c.target.count, 3);
    check_sentence(&c.source, 0, "zwei junge weiße männer .");
    check_sentence(&c.target, 0, "two young , white males .");
    check_sentence(&c.source, 1, "ein hund rennt !");
    check_sentence(&c.target, 2, "three");
    qkv_corpus_free(&c);

    assert_int_equal(qkv_corpus_read_aligned(&c, fx->a, fx->b, 2, &err), QKV_OK);
    assert_int_equal(c.target.count, 2);
    qkv_corpus_free(&c);

    /* One file a line short: both named, and where the short one ends. */
    write_text(fx->b, "One\nTwo\n");
    assert_int_equal(qkv_corpus_read_aligned(&c, fx->a, fx->b, 0, &err), QKV_ERR_FORMAT);
    check_message(err.msg, fx->b, "ends after line 2");
    check_message(err.msg, fx->a, "not line-aligned");
    assert_null(c.source.tokens);
    assert_int_equal(qkv_corpus_read_aligned(&c, fx->b, fx->a, 0, &err), QKV_ERR_FORMAT);
    check_message(err.msg, "ends after line 2", NULL);
    assert_int_equal(qkv_corpus_read_aligned(&c, fx->a, fx->b, 2, &err), QKV_OK);
    qkv_corpus_free(&c);

    /* Errors name the file they are in. */
    write_text(fx->b, "One\nT\xffwo\nThree\n");
    assert_int_equal(qkv_corpus_read_aligned(&c, fx->a, fx->b, 0, &err), QKV_ERR_FORMAT);
    check_message(err.msg, fx->b, ":2: invalid UTF-8 at byte 1");

    write_text(fx->a, "");
    write_text(fx->b, "");
    assert_int_equal(qkv_corpus_read_aligned(&c, fx->a, fx->b, 0, &err), QKV_ERR_FORMAT);
    check_message(err.msg, "empty corpus", NULL);
    assert_int_equal(qkv_corpus_read_aligned(&c, fx->a, "/nonexistent/x.en", 0, &err),
                     QKV_ERR_IO);
    check_message(err.msg, "/nonexistent/x.en", NULL);
}

/* ---------------------------------------------------------------------------------------
 * The real corpora
 * ------------------------------------------------------------------------------------- */

static void test_fra_eng_first_pairs(void **state)
{
    (void)state;
    char path[512];
    data_path(path, sizeof path, "fra-eng/fra.txt");
    qkv_corpus c;
    qkv_error err = {0};
    /* d2l's load_data_nmt(num_examples=600) keeps 601 lines (tokenize_nmt stops at
     * i > num_examples). */
    assert_int_equal(qkv_corpus_read_tsv(&c, path, 601, &err), QKV_OK);
    assert_int_equal(c.source.count, 601);
    /* d2l prints source[:6], target[:6]. */
    static const char *const src[6] = {"go .", "hi .", "run !", "run !", "who ?", "wow !"};
    static const char *const tgt[6] = {"va !", "salut !", "cours !", "courez !", "qui ?",
                                       "ça alors !"};
    for (int i = 0; i < 6; i++) {
        check_sentence(&c.source, i, src[i]);
        check_sentence(&c.target, i, tgt[i]);
    }
    check_sentence(&c.source, 600, "i exhaled .");
    check_sentence(&c.target, 600, "j’ai expiré .");
    qkv_corpus_free(&c);
}

static void test_fra_eng_whole_file(void **state)
{
    (void)state;
    char path[512];
    data_path(path, sizeof path, "fra-eng/fra.txt");
    qkv_corpus c;
    qkv_error err = {0};
    assert_int_equal(qkv_corpus_read_tsv(&c, path, 0, &err), QKV_OK);
    assert_int_equal(c.source.count, 167130);
    assert_int_equal(c.source.n_tokens, 1206295);
    assert_int_equal(c.target.n_tokens, 1267588);
    size_t bytes;
    uint64_t digest = corpus_digest(&c, &bytes);
    assert_int_equal(bytes, 11979786);
    assert_int_equal(digest, 0x3145b951eb1fe4a8ull);
    /* Line 12742, "Qui est cette fille\u202f ?": d2l's tokens have a '' before '?'. */
    check_sentence(&c.source, 12741, "who's that girl ?");
    check_sentence(&c.target, 12741, "qui est cette fille ?");
    qkv_corpus_free(&c);
}

static void test_multi30k_train(void **state)
{
    (void)state;
    char de[512], en[512];
    data_path(de, sizeof de, "multi30k/train.de");
    data_path(en, sizeof en, "multi30k/train.en");
    qkv_corpus c;
    qkv_error err = {0};
    assert_int_equal(qkv_corpus_read_aligned(&c, de, en, 0, &err), QKV_OK);
    assert_int_equal(c.source.count, 29000);
    assert_int_equal(c.source.n_tokens, 360182);
    assert_int_equal(c.target.n_tokens, 376669);
    size_t bytes;
    assert_int_equal(corpus_digest(&c, &bytes), 0x836635126445147bull);
    assert_int_equal(bytes, 3980951);
    check_sentence(&c.source, 0, "zwei junge weiße männer sind im freien in der nähe vieler "
                                 "büsche .");
    check_sentence(&c.target, 0, "two young , white males are outside near many bushes .");
    qkv_corpus_free(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_preprocess_d2l_first_lines),
        cmocka_unit_test(test_preprocess_lower_case),
        cmocka_unit_test(test_preprocess_punctuation),
        cmocka_unit_test(test_preprocess_rejects_bad_utf8),
        cmocka_unit_test(test_tokens_from_text),
        cmocka_unit_test(test_sentences_nfc),
        cmocka_unit_test(test_cased_bpe_reads_nfd_as_nfc),
        cmocka_unit_test_setup_teardown(test_tsv_reader, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tsv_reader_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_very_long_lines, setup, teardown),
        cmocka_unit_test_setup_teardown(test_line_limit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_aligned_reader, setup, teardown),
        cmocka_unit_test(test_fra_eng_first_pairs),
        cmocka_unit_test(test_fra_eng_whole_file),
        cmocka_unit_test(test_multi30k_train),
    };
    return cmocka_run_group_tests_name("corpus", tests, NULL, NULL);
}
