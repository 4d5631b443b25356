/* SPDX-License-Identifier: MIT */
/*
 * Sentence pairs for translation, read and cleaned as d2l.ai's "Machine Translation and the
 * Dataset" does (read_data_nmt, preprocess_nmt, tokenize_nmt), from a tab-separated file
 * (fra.txt) or two line-aligned files (Multi30k).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <utf8proc.h>

#include "core/internal.h"
#include "qkv.h"

/* ---------------------------------------------------------------------------------------
 * UTF-8 and lower case
 * ------------------------------------------------------------------------------------- */

/* Decodes the character at s[0..len) into *c; returns its length in bytes, or 0 if the
 * bytes are not well-formed UTF-8 (overlong forms, surrogates and values past U+10FFFF
 * included, so that what we write back is always valid). */
static int utf8_decode(const unsigned char *s, size_t len, uint32_t *c)
{
    if (s[0] < 0x80) return *c = s[0], 1;
    int n = s[0] >= 0xF0 ? 4 : s[0] >= 0xE0 ? 3 : s[0] >= 0xC2 ? 2 : 0;
    if (n == 0 || s[0] > 0xF4 || (size_t)n > len) return 0;
    uint32_t v = s[0] & (0x7F >> n);
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        v = v << 6 | (s[i] & 0x3F);
    }
    static const uint32_t shortest[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (v < shortest[n] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
    return *c = v, n;
}

size_t qkv_utf8_check(const char *text, size_t len)
{
    const unsigned char *s = (const unsigned char *)text;
    uint32_t c;
    size_t i = 0;
    for (int n; i < len && (n = utf8_decode(s + i, len - i, &c)) > 0 && c != 0;) i += (size_t)n;
    return i;
}

/* Writes c as UTF-8 to out; returns the number of bytes. */
static int utf8_encode(uint32_t c, char *out)
{
    unsigned char *o = (unsigned char *)out;
    if (c < 0x80) return o[0] = (unsigned char)c, 1;
    if (c < 0x800) {
        o[0] = (unsigned char)(0xC0 | c >> 6);
        o[1] = (unsigned char)(0x80 | (c & 0x3F));
        return 2;
    }
    if (c < 0x10000) {
        o[0] = (unsigned char)(0xE0 | c >> 12);
        o[1] = (unsigned char)(0x80 | (c >> 6 & 0x3F));
        o[2] = (unsigned char)(0x80 | (c & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | c >> 18);
    o[1] = (unsigned char)(0x80 | (c >> 12 & 0x3F));
    o[2] = (unsigned char)(0x80 | (c >> 6 & 0x3F));
    o[3] = (unsigned char)(0x80 | (c & 0x3F));
    return 4;
}

/* Cased and case-ignorable characters as Unicode defines them (section 3.13), close enough
 * for Σ's context: letters with a case; marks, format characters, modifiers and the
 * apostrophes and dots that may sit inside a word. */
static int is_cased(uint32_t c)
{
    const utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
    return k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LL || k == UTF8PROC_CATEGORY_LT;
}

static int is_case_ignorable(uint32_t c)
{
    const utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
    return k == UTF8PROC_CATEGORY_MN || k == UTF8PROC_CATEGORY_ME || k == UTF8PROC_CATEGORY_CF ||
           k == UTF8PROC_CATEGORY_LM || k == UTF8PROC_CATEGORY_SK || c == '\'' || c == '.' ||
           c == ':' || c == 0xB7 || c == 0x2018 || c == 0x2019 || c == 0x2024 || c == 0x2027;
}

/* Python's str.lower() of one character (Unicode's lower-case mapping, through utf8proc):
 * writes 1 code point to lo, or 2 for U+0130 'İ', which becomes "i" + U+0307 COMBINING DOT
 * ABOVE (Unicode's one unconditional lower case of two characters). final: Σ ends a word
 * (qkv_preprocess decides), so it becomes ς, as Python's Final_Sigma rule does. */
static int lower_char(uint32_t c, int final, uint32_t lo[2])
{
    if (c == 0x130) return lo[0] = 'i', lo[1] = 0x307, 2;
    if (c == 0x3A3) return lo[0] = final ? 0x3C2 : 0x3C3, 1;
    lo[0] = (uint32_t)utf8proc_tolower((utf8proc_int32_t)c);
    return 1;
}

/* Whether the Σ at text[i] (n bytes) ends a word: a cased letter before it (prev_cased,
 * skipping case-ignorable characters) and none after it. */
static int sigma_is_final(const unsigned char *s, size_t len, size_t i, int prev_cased)
{
    if (!prev_cased) return 0;
    for (;;) {
        uint32_t c;
        const int n = i < len ? utf8_decode(s + i, len - i, &c) : 0;
        if (n == 0) return 1;
        if (!is_case_ignorable(c)) return !is_cased(c);
        i += (size_t)n;
    }
}

/* ---------------------------------------------------------------------------------------
 * Preprocessing
 * ------------------------------------------------------------------------------------- */

static int is_nmt_punct(uint32_t c) { return c == ',' || c == '.' || c == '!' || c == '?'; }

qkv_status qkv_preprocess(char *out, size_t *out_len, const char *text, size_t len,
                          qkv_error *err)
{
    const unsigned char *s = (const unsigned char *)text;
    size_t o = 0;
    int prev_cased = 0; /* the last character that is not case-ignorable is cased */
    for (size_t i = 0; i < len;) {
        uint32_t c, lo[2];
        int n = utf8_decode(s + i, len - i, &c);
        if (n == 0) {
            out[o] = '\0';
            return qkv_fail(err, QKV_ERR_FORMAT, "invalid UTF-8 at byte %zu", i);
        }
        if (c == 0) {
            out[o] = '\0';
            return qkv_fail(err, QKV_ERR_FORMAT, "NUL byte at byte %zu", i);
        }
        i += (size_t)n;
        if (c == 0x202F || c == 0xA0) c = ' '; /* the French side spaces "Va !" this way */
        int m = lower_char(c, c == 0x3A3 && sigma_is_final(s, len, i, prev_cased), lo);
        if (!is_case_ignorable(c)) prev_cased = is_cased(c);
        for (int j = 0; j < m; j++) {
            /* d2l looks at the previous character, never at an inserted space; both are
             * ' ' exactly when the last byte written is, since punctuation is ASCII. */
            if (is_nmt_punct(lo[j]) && o > 0 && out[o - 1] != ' ') out[o++] = ' ';
            o += (size_t)utf8_encode(lo[j], out + o);
        }
    }
    out[o] = '\0';
    if (out_len) *out_len = o;
    return QKV_OK;
}

/* ---------------------------------------------------------------------------------------
 * Collecting sentences
 * ------------------------------------------------------------------------------------- */

/* Sentences as they are read: token bytes and offsets grow; pointers are made at the end,
 * once the bytes stop moving. */
typedef struct {
    char *bytes;
    size_t n_bytes, cap_bytes;
    size_t *token_at; /* offset of each token in bytes */
    size_t n_tokens, cap_tokens;
    size_t *start; /* (count + 1) */
    int count;
    size_t cap_start;
} sentence_builder;

/* p (capacity *cap elements of size elem) with room for need >= 1 elements, doubling;
 * NULL if memory runs out, p then still being valid. */
static void *grow(void *p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap) return p;
    size_t c = *cap ? *cap : 64;
    while (c < need) {
        if (c > SIZE_MAX / 2 / elem) return NULL;
        c *= 2;
    }
    void *q = realloc(p, c * elem);
    if (q) *cap = c;
    return q;
}

static void builder_free(sentence_builder *b)
{
    free(b->bytes);
    free(b->token_at);
    free(b->start);
    memset(b, 0, sizeof *b);
}

static qkv_status builder_init(sentence_builder *b, qkv_error *err)
{
    memset(b, 0, sizeof *b);
    b->start = grow(NULL, &b->cap_start, 1, sizeof *b->start);
    if (!b->start) return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for sentences");
    b->start[0] = 0;
    return QKV_OK;
}

/* Appends one preprocessed sentence: words split on ' ' as d2l's line.split(' '), minus the
 * empty strings that split yields around a double space (a token is never ""). */
static qkv_status builder_add(sentence_builder *b, const char *text, size_t len,
                              qkv_error *err)
{
    if (b->count == INT32_MAX)
        return qkv_fail(err, QKV_ERR_FORMAT, "more than %d sentences", INT32_MAX);
    size_t *start = grow(b->start, &b->cap_start, (size_t)b->count + 2, sizeof *start);
    if (start) b->start = start;
    char *bytes = grow(b->bytes, &b->cap_bytes, b->n_bytes + len + 1, 1);
    if (bytes) b->bytes = bytes;
    if (!start || !bytes)
        return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for sentence %d", b->count + 1);
    for (size_t i = 0; i < len;) {
        size_t j = i;
        while (j < len && text[j] != ' ') j++;
        if (j > i) {
            size_t *at = grow(b->token_at, &b->cap_tokens, b->n_tokens + 1, sizeof *at);
            if (!at) return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for tokens");
            b->token_at = at;
            b->token_at[b->n_tokens++] = b->n_bytes;
            memcpy(b->bytes + b->n_bytes, text + i, j - i);
            b->n_bytes += j - i;
            b->bytes[b->n_bytes++] = '\0';
        }
        i = j + 1;
    }
    b->start[++b->count] = b->n_tokens;
    return QKV_OK;
}

/* Moves the builder's memory into out, turning offsets into pointers. */
static qkv_status builder_finish(sentence_builder *b, qkv_sentences *out, qkv_error *err)
{
    const char **tokens = malloc((b->n_tokens ? b->n_tokens : 1) * sizeof *tokens);
    if (!tokens) return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for tokens");
    for (size_t t = 0; t < b->n_tokens; t++) tokens[t] = b->bytes + b->token_at[t];
    out->count = b->count;
    out->n_tokens = b->n_tokens;
    out->tokens = tokens;
    out->start = b->start;
    out->storage = b->bytes;
    free(b->token_at);
    memset(b, 0, sizeof *b);
    return QKV_OK;
}

void qkv_sentences_free(qkv_sentences *s)
{
    if (!s) return;
    free(s->tokens);
    free(s->start);
    free(s->storage);
    memset(s, 0, sizeof *s);
}

void qkv_corpus_free(qkv_corpus *c)
{
    if (!c) return;
    qkv_sentences_free(&c->source);
    qkv_sentences_free(&c->target);
}

/* ---------------------------------------------------------------------------------------
 * Unicode normalisation
 * ------------------------------------------------------------------------------------- */

/* NFC per token equals NFC of the whole line: tokens are split at spaces, which are starters
 * that no canonical mapping makes, removes or combines with a following mark. */
qkv_status qkv_sentences_nfc(qkv_sentences *s, qkv_error *err)
{
    /* nfc[i]: token i recomposed by utf8proc when that changed it, else NULL (kept) */
    char **nfc = calloc(s->n_tokens ? s->n_tokens : 1, sizeof *nfc);
    if (!nfc) return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for %zu tokens", s->n_tokens);
    qkv_status st = QKV_OK;
    size_t bytes = 0, changed = 0;
    for (size_t i = 0; !st && i < s->n_tokens; i++) {
        const unsigned char *w = (const unsigned char *)s->tokens[i];
        size_t n = 0;
        int ascii = 1; /* ASCII is its own NFC: utf8proc only sees the rest */
        for (; w[n]; n++) ascii &= w[n] < 0x80;
        if (!ascii) {
            utf8proc_uint8_t *m = NULL;
            const utf8proc_ssize_t r = utf8proc_map(
                w, (utf8proc_ssize_t)n, &m, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
            if (r < 0) {
                st = qkv_fail(err, r == UTF8PROC_ERROR_NOMEM ? QKV_ERR_NOMEM : QKV_ERR_FORMAT,
                              "token %zu: %s", i + 1, utf8proc_errmsg(r));
                break;
            }
            if ((size_t)r == n && !memcmp(m, w, n))
                free(m); /* already NFC, as nearly all text is */
            else
                nfc[i] = (char *)m, n = (size_t)r, changed++;
        }
        bytes += n + 1;
    }
    char *storage = !st && changed ? malloc(bytes) : NULL;
    if (!st && changed && !storage)
        st = qkv_fail(err, QKV_ERR_NOMEM, "out of memory for %zu bytes of tokens", bytes);
    if (storage) {
        char *at = storage;
        for (size_t i = 0; i < s->n_tokens; i++) {
            const char *w = nfc[i] ? nfc[i] : s->tokens[i];
            const size_t n = strlen(w) + 1;
            s->tokens[i] = memcpy(at, w, n);
            at += n;
        }
        free(s->storage);
        s->storage = storage;
    }
    for (size_t i = 0; i < s->n_tokens; i++) free(nfc[i]);
    free(nfc);
    return st;
}

qkv_status qkv_corpus_nfc(qkv_corpus *c, qkv_error *err)
{
    qkv_status st = qkv_sentences_nfc(&c->source, err);
    return st ? st : qkv_sentences_nfc(&c->target, err);
}

/* ---------------------------------------------------------------------------------------
 * Reading lines
 * ------------------------------------------------------------------------------------- */

/* Preprocesses lines into a scratch buffer that grows to the longest line. */
typedef struct {
    char *buf;
    size_t cap;
    size_t len;
} preprocessed;

/* Preprocesses text into p; a failure is reported as "<name>:<line>: <reason>". */
static qkv_status preprocess_line(preprocessed *p, const char *text, size_t len,
                                  const char *name, long line, qkv_error *err)
{
    char *buf = len < SIZE_MAX / 2 ? grow(p->buf, &p->cap, QKV_PREPROCESS_BOUND(len), 1)
                                   : NULL;
    if (!buf)
        return qkv_fail(err, QKV_ERR_NOMEM, "%s:%ld: out of memory for a line of %zu bytes",
                        name, line, len);
    p->buf = buf;
    qkv_error why = {0};
    if (qkv_preprocess(p->buf, &p->len, text, len, &why) != QKV_OK)
        return qkv_fail(err, why.code, "%s:%ld: %s", name, line, why.msg);
    return QKV_OK;
}

/* One file read line by line in bounded memory: a line of at most QKV_MAX_LINE_BYTES, a
 * file of at most QKV_MAX_TEXT_BYTES (both counted without line breaks' "\n"), so that
 * /dev/zero, a pipe that never ends or a file without line breaks is refused with a
 * message instead of growing until the system runs out of memory. */
typedef struct {
    FILE *f;
    const char *path;
    char *line;
    size_t cap;
    long number;  /* of the line last read, 1-based */
    size_t total; /* bytes read so far */
    int regular;  /* a regular file, which ends; else a pipe or device, which may not */
} line_reader;

static qkv_status reader_open(line_reader *r, const char *path, qkv_error *err)
{
    memset(r, 0, sizeof *r);
    r->path = path;
    qkv_error e = {0};
    if (!(r->f = qkv_open_file(path, 0, &e))) return qkv_fail(err, e.code, "%s", e.msg);
    struct stat sb;
    r->regular = fstat(fileno(r->f), &sb) == 0 && S_ISREG(sb.st_mode);
    return QKV_OK;
}

static void reader_close(line_reader *r)
{
    if (r->f) fclose(r->f);
    free(r->line);
    memset(r, 0, sizeof *r);
}

static const char *never_ends(const line_reader *r)
{
    return r->regular ? "" : " (not a regular file: it may never end)";
}

/* Reads the next line into r->line without its "\n" or "\r\n". *len = its length, or -1 at
 * the end of the file. */
static qkv_status reader_next(line_reader *r, ptrdiff_t *len, qkv_error *err)
{
    size_t n = 0;
    int c;
    /* up to QKV_MAX_LINE_BYTES + 1 bytes are kept: the last may be the "\r" of "\r\n" */
    while ((c = getc_unlocked(r->f)) != EOF && c != '\n') {
        if (n > QKV_MAX_LINE_BYTES) break; /* a byte after those: too long whatever it is */
        if (n + 1 >= r->cap) { /* room for c and the NUL */
            size_t cap = r->cap ? 2 * r->cap : 256;
            if (cap > QKV_MAX_LINE_BYTES + 2) cap = QKV_MAX_LINE_BYTES + 2;
            char *line = realloc(r->line, cap);
            if (!line)
                return qkv_fail(err, QKV_ERR_NOMEM, "%s:%ld: out of memory for a line of %zu "
                                "bytes", r->path, r->number + 1, n);
            r->line = line, r->cap = cap;
        }
        r->line[n++] = (char)c;
    }
    if (c == EOF && ferror(r->f))
        return qkv_fail(err, QKV_ERR_IO, "%s:%ld: cannot read: %s", r->path, r->number + 1,
                        strerror(errno ? errno : EIO));
    if (c == EOF && n == 0) {
        *len = -1;
        return QKV_OK;
    }
    const int cut = c != EOF && c != '\n';
    if (!cut && n > 0 && r->line[n - 1] == '\r') n--;
    if (cut || n > QKV_MAX_LINE_BYTES)
        return qkv_fail(err, QKV_ERR_FORMAT, "%s:%ld: a line of more than %zu bytes (the "
                        "limit QKV_MAX_LINE_BYTES)%s", r->path, r->number + 1,
                        QKV_MAX_LINE_BYTES, never_ends(r));
    r->number++;
    r->total += n;
    if (r->total > QKV_MAX_TEXT_BYTES)
        return qkv_fail(err, QKV_ERR_FORMAT, "%s:%ld: more than %zu bytes (the limit "
                        "QKV_MAX_TEXT_BYTES)%s", r->path, r->number, QKV_MAX_TEXT_BYTES,
                        never_ends(r));
    if (!r->line) { /* an empty first line: a buffer to point at all the same */
        if (!(r->line = malloc(1))) return qkv_fail(err, QKV_ERR_NOMEM, "out of memory");
        r->cap = 1;
    }
    r->line[n] = '\0';
    *len = (ptrdiff_t)n;
    return QKV_OK;
}

/* ---------------------------------------------------------------------------------------
 * Corpora
 * ------------------------------------------------------------------------------------- */

/* The line as it is, tabs read as spaces, after checking it is UTF-8 without NUL bytes. */
static qkv_status copy_line(preprocessed *p, const char *text, size_t len, const char *name,
                            long line, qkv_error *err)
{
    size_t bad = qkv_utf8_check(text, len);
    if (bad < len)
        return qkv_fail(err, QKV_ERR_FORMAT, "%s:%ld: invalid UTF-8 or NUL at byte %zu", name,
                        line, bad + 1);
    char *buf = grow(p->buf, &p->cap, len + 1, 1);
    if (!buf) return qkv_fail(err, QKV_ERR_NOMEM, "%s:%ld: out of memory", name, line);
    p->buf = buf;
    for (size_t i = 0; i < len; i++) buf[i] = text[i] == '\t' ? ' ' : text[i];
    buf[len] = '\0';
    p->len = len;
    return QKV_OK;
}

/* The line as it is (tabs kept), after checking it is UTF-8 without NUL bytes. */
static qkv_status raw_line(preprocessed *p, const char *text, size_t len, const char *name,
                           long line, qkv_error *err)
{
    qkv_status st = copy_line(p, text, len, name, line, err);
    if (!st) memcpy(p->buf, text, len); /* copy_line read tabs as spaces */
    return st;
}

static qkv_status sentences_from_lines(qkv_sentences *out, const char *text, size_t len,
                                       const char *name_for_errors, int d2l, qkv_error *err)
{
    memset(out, 0, sizeof *out);
    const char *name = name_for_errors ? name_for_errors : "text";
    sentence_builder b;
    preprocessed p = {0};
    qkv_status st = builder_init(&b, err);
    long line = 0;
    for (size_t i = 0; st == QKV_OK && i < len;) {
        const char *nl = memchr(text + i, '\n', len - i);
        size_t end = nl ? (size_t)(nl - text) : len, n = end - i;
        if (n > 0 && text[i + n - 1] == '\r') n--;
        st = d2l ? preprocess_line(&p, text + i, n, name, ++line, err)
                 : copy_line(&p, text + i, n, name, ++line, err);
        if (st == QKV_OK) st = builder_add(&b, p.buf, p.len, err);
        i = end + 1;
    }
    if (st == QKV_OK) st = builder_finish(&b, out, err);
    builder_free(&b);
    free(p.buf);
    return st;
}

qkv_status qkv_sentences_from_text(qkv_sentences *out, const char *text, size_t len,
                                   const char *name_for_errors, qkv_error *err)
{
    return sentences_from_lines(out, text, len, name_for_errors, 1, err);
}

qkv_status qkv_sentences_split(qkv_sentences *out, const char *text, size_t len,
                               const char *name_for_errors, qkv_error *err)
{
    return sentences_from_lines(out, text, len, name_for_errors, 0, err);
}

/* Whether the first num_examples lines (all when <= 0) have been taken. */
static int enough(int count, int num_examples)
{
    return num_examples > 0 && count >= num_examples;
}

/* The end of both readers: if all went well (st), the corpus from the two builders; then
 * what reading used is freed, and on any failure the corpus too. */
static qkv_status corpus_finish(qkv_corpus *out, sentence_builder *src, sentence_builder *tgt,
                                preprocessed *p, qkv_status st, qkv_error *err)
{
    if (st == QKV_OK) st = builder_finish(src, &out->source, err);
    if (st == QKV_OK) st = builder_finish(tgt, &out->target, err);
    if (st != QKV_OK) qkv_corpus_free(out);
    builder_free(src);
    builder_free(tgt);
    free(p->buf);
    return st;
}

/* raw: lines as they are (raw_line) rather than d2l's preprocessing. */
static qkv_status read_tsv(qkv_corpus *out, const char *path, int num_examples, int raw,
                           qkv_error *err)
{
    memset(out, 0, sizeof *out);
    line_reader r;
    qkv_status st = reader_open(&r, path, err);
    if (st != QKV_OK) return st;
    sentence_builder src, tgt;
    preprocessed p = {0};
    st = builder_init(&src, err);
    if (st == QKV_OK) st = builder_init(&tgt, err);
    while (st == QKV_OK && !enough(src.count, num_examples)) {
        ptrdiff_t n;
        st = reader_next(&r, &n, err);
        if (st != QKV_OK || n < 0) break;
        /* The whole line is preprocessed, as d2l does the whole file: the tab is kept. */
        st = raw ? raw_line(&p, r.line, (size_t)n, path, r.number, err)
                 : preprocess_line(&p, r.line, (size_t)n, path, r.number, err);
        if (st != QKV_OK) break;
        char *tab = memchr(p.buf, '\t', p.len);
        if (!tab) {
            st = qkv_fail(err, QKV_ERR_FORMAT, "%s:%ld: no tab between source and target",
                          path, r.number);
            break;
        }
        char *target = tab + 1, *end = p.buf + p.len;
        char *next_tab = memchr(target, '\t', (size_t)(end - target));
        if (next_tab) end = next_tab; /* columns after the second are not ours */
        st = builder_add(&src, p.buf, (size_t)(tab - p.buf), err);
        if (st == QKV_OK) st = builder_add(&tgt, target, (size_t)(end - target), err);
    }
    if (st == QKV_OK && src.count == 0)
        st = qkv_fail(err, QKV_ERR_FORMAT, "%s: empty corpus (no lines)", path);
    st = corpus_finish(out, &src, &tgt, &p, st, err);
    reader_close(&r);
    return st;
}

qkv_status qkv_corpus_read_tsv(qkv_corpus *out, const char *path, int num_examples,
                               qkv_error *err)
{
    return read_tsv(out, path, num_examples, 0, err);
}

qkv_status qkv_corpus_read_tsv_raw(qkv_corpus *out, const char *path, int num_examples,
                                   qkv_error *err)
{
    return read_tsv(out, path, num_examples, 1, err);
}

/* Reads the next line of r into b: *more = 0 at the end of the file. raw: as it is, tabs
 * read as spaces (copy_line). */
static qkv_status read_sentence(line_reader *r, sentence_builder *b, preprocessed *p,
                                int raw, int *more, qkv_error *err)
{
    ptrdiff_t n;
    qkv_status st = reader_next(r, &n, err);
    *more = st == QKV_OK && n >= 0;
    if (!*more) return st;
    st = raw ? copy_line(p, r->line, (size_t)n, r->path, r->number, err)
             : preprocess_line(p, r->line, (size_t)n, r->path, r->number, err);
    return st == QKV_OK ? builder_add(b, p->buf, p->len, err) : st;
}

static qkv_status read_aligned(qkv_corpus *out, const char *source_path,
                               const char *target_path, int num_examples, int raw,
                               qkv_error *err)
{
    memset(out, 0, sizeof *out);
    line_reader rs, rt;
    qkv_status st = reader_open(&rs, source_path, err);
    if (st != QKV_OK) return st;
    st = reader_open(&rt, target_path, err);
    if (st != QKV_OK) {
        reader_close(&rs);
        return st;
    }
    sentence_builder src, tgt;
    preprocessed p = {0};
    st = builder_init(&src, err);
    if (st == QKV_OK) st = builder_init(&tgt, err);
    while (st == QKV_OK && !enough(src.count, num_examples)) {
        int more_src, more_tgt = 0;
        st = read_sentence(&rs, &src, &p, raw, &more_src, err);
        if (st == QKV_OK) st = read_sentence(&rt, &tgt, &p, raw, &more_tgt, err);
        if (st != QKV_OK || (!more_src && !more_tgt)) break;
        if (more_src != more_tgt) {
            const line_reader *shorter = more_src ? &rt : &rs, *longer = more_src ? &rs : &rt;
            st = qkv_fail(err, QKV_ERR_FORMAT,
                          "%s ends after line %ld but %s goes on: the files are not "
                          "line-aligned", shorter->path, shorter->number, longer->path);
        }
    }
    if (st == QKV_OK && src.count == 0)
        st = qkv_fail(err, QKV_ERR_FORMAT, "%s, %s: empty corpus (no lines)", source_path,
                      target_path);
    st = corpus_finish(out, &src, &tgt, &p, st, err);
    reader_close(&rs);
    reader_close(&rt);
    return st;
}

qkv_status qkv_corpus_read_aligned(qkv_corpus *out, const char *source_path,
                                   const char *target_path, int num_examples, qkv_error *err)
{
    return read_aligned(out, source_path, target_path, num_examples, 0, err);
}

qkv_status qkv_corpus_read_aligned_raw(qkv_corpus *out, const char *source_path,
                                       const char *target_path, int num_examples,
                                       qkv_error *err)
{
    return read_aligned(out, source_path, target_path, num_examples, 1, err);
}
