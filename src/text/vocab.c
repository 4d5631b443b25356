/* SPDX-License-Identifier: MIT */
/*
 * The vocabulary of d2l.ai's Vocab: ids by descending frequency after the reserved tokens,
 * a hash table for token -> id, a one-token-per-line text file, and d2l's truncate_pad.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "qkv.h"

/* ---------------------------------------------------------------------------------------
 * A hash table of token strings: slots hold indices into a key array, -1 when empty
 * (open addressing, linear probing, at most half full).
 * ------------------------------------------------------------------------------------- */

/* FNV-1a, 64 bits: short words spread well and it is four lines. */
static uint64_t hash_token(const char *s)
{
    uint64_t h = 14695981039346656037ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* The slot holding token, or the empty slot where it would go. */
static size_t find_slot(const int *slots, size_t n_slots, const char *const *keys,
                        const char *token)
{
    size_t mask = n_slots - 1, i = (size_t)hash_token(token) & mask;
    while (slots[i] >= 0 && strcmp(keys[slots[i]], token) != 0) i = (i + 1) & mask;
    return i;
}

/* A table of n_slots >= 2 * (n + 1) empty slots, a power of two; NULL if out of memory. */
static int *new_slots(size_t n, size_t *n_slots)
{
    size_t c = 16;
    while (c < 2 * (n + 1)) c *= 2;
    int *slots = malloc(c * sizeof *slots);
    if (!slots) return NULL;
    for (size_t i = 0; i < c; i++) slots[i] = -1;
    *n_slots = c;
    return slots;
}

/* ---------------------------------------------------------------------------------------
 * Counting (d2l's count_corpus: a Counter, whose keys keep the order of first occurrence)
 * ------------------------------------------------------------------------------------- */

typedef struct {
    const char **keys; /* distinct tokens, in order of first occurrence (not owned) */
    int64_t *freq;
    int count;
    size_t cap;
    int *slots;
    size_t n_slots;
} token_counter;

static void counter_free(token_counter *c)
{
    free(c->keys);
    free(c->freq);
    free(c->slots);
}

/* Doubles the key arrays and the table, re-inserting every key. */
static int counter_grow(token_counter *c)
{
    size_t cap = c->cap ? 2 * c->cap : 1024;
    if (cap > (size_t)INT32_MAX) return 0;
    const char **keys = realloc(c->keys, cap * sizeof *keys);
    if (keys) c->keys = keys;
    int64_t *freq = realloc(c->freq, cap * sizeof *freq);
    if (freq) c->freq = freq;
    size_t n_slots;
    int *slots = keys && freq ? new_slots(cap, &n_slots) : NULL;
    if (!slots) return 0;
    for (int k = 0; k < c->count; k++)
        slots[find_slot(slots, n_slots, c->keys, c->keys[k])] = k;
    free(c->slots);
    c->slots = slots;
    c->n_slots = n_slots;
    c->cap = cap;
    return 1;
}

static int counter_add(token_counter *c, const char *token)
{
    if ((size_t)c->count == c->cap && !counter_grow(c)) return 0;
    size_t i = find_slot(c->slots, c->n_slots, c->keys, token);
    if (c->slots[i] < 0) {
        c->slots[i] = c->count;
        c->keys[c->count] = token;
        c->freq[c->count++] = 0;
    }
    c->freq[c->slots[i]]++;
    return 1;
}

/* A distinct token's place in d2l's sorted(counter.items(), key=freq, reverse=True):
 * Python's sort is stable (reverse=True included), so equal frequencies keep the
 * order of first occurrence. */
typedef struct {
    int64_t freq;
    int first;
} ranked_token;

static int by_freq_then_first(const void *pa, const void *pb)
{
    const ranked_token *a = pa, *b = pb;
    if (a->freq != b->freq) return a->freq > b->freq ? -1 : 1;
    return (a->first > b->first) - (a->first < b->first);
}

/* ---------------------------------------------------------------------------------------
 * The vocabulary
 * ------------------------------------------------------------------------------------- */

void qkv_vocab_free(qkv_vocab *v)
{
    if (!v) return;
    free(v->idx_to_token);
    free(v->storage);
    free(v->slots);
    memset(v, 0, sizeof *v);
}

/* Makes v hold a copy of tokens[0..n) with ids 0..n-1. A repeated token fails with
 * QKV_ERR_FORMAT as "<name>:<line>" where line = id + 1, the layout of a vocabulary file. */
static qkv_status vocab_assemble(qkv_vocab *v, const char *const *tokens, int n,
                                 const char *name, qkv_error *err)
{
    memset(v, 0, sizeof *v);
    size_t bytes = 0;
    for (int i = 0; i < n; i++) bytes += strlen(tokens[i]) + 1;
    v->idx_to_token = malloc((size_t)n * sizeof *v->idx_to_token);
    v->storage = malloc(bytes);
    v->slots = new_slots((size_t)n, &v->n_slots);
    if (!v->idx_to_token || !v->storage || !v->slots) {
        qkv_vocab_free(v);
        return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for a vocabulary of %d tokens", n);
    }
    char *p = v->storage;
    for (int i = 0; i < n; i++) {
        size_t len = strlen(tokens[i]) + 1;
        memcpy(p, tokens[i], len);
        v->idx_to_token[i] = p;
        p += len;
        size_t s = find_slot(v->slots, v->n_slots, v->idx_to_token, p - len);
        if (v->slots[s] >= 0) {
            int first = v->slots[s];
            qkv_vocab_free(v);
            return qkv_fail(err, QKV_ERR_FORMAT, "%s:%d: duplicate token '%s' (first on line %d)",
                            name, i + 1, tokens[i], first + 1);
        }
        v->slots[s] = i;
        v->size = i + 1;
    }
    return QKV_OK;
}

static int is_reserved(const char *token)
{
    for (int r = 0; r < QKV_N_RESERVED; r++)
        if (strcmp(token, qkv_enum_name(QKV_ENUM_RESERVED, r)) == 0) return 1;
    return 0;
}

qkv_status qkv_vocab_build(qkv_vocab *v, const char *const *tokens, size_t n_tokens,
                           int min_freq, qkv_error *err)
{
    memset(v, 0, sizeof *v);
    token_counter c = {0};
    for (size_t t = 0; t < n_tokens; t++)
        if (!counter_add(&c, tokens[t])) {
            counter_free(&c);
            return qkv_fail(err, QKV_ERR_NOMEM, "out of memory counting token %zu", t);
        }
    ranked_token *ranked = malloc(((size_t)c.count + 1) * sizeof *ranked);
    const char **kept = malloc(((size_t)c.count + QKV_N_RESERVED) * sizeof *kept);
    qkv_status st = QKV_OK;
    if (!ranked || !kept) {
        st = qkv_fail(err, QKV_ERR_NOMEM, "out of memory for %d distinct tokens", c.count);
    } else {
        for (int k = 0; k < c.count; k++) ranked[k] = (ranked_token){c.freq[k], k};
        qsort(ranked, (size_t)c.count, sizeof *ranked, by_freq_then_first);
        int n = 0;
        for (int r = 0; r < QKV_N_RESERVED; r++) kept[n++] = qkv_enum_name(QKV_ENUM_RESERVED, r);
        for (int k = 0; k < c.count && ranked[k].freq >= min_freq; k++)
            if (!is_reserved(c.keys[ranked[k].first])) kept[n++] = c.keys[ranked[k].first];
        st = vocab_assemble(v, kept, n, "tokens", err);
    }
    free(ranked);
    free(kept);
    counter_free(&c);
    return st;
}

int qkv_vocab_id(const qkv_vocab *v, const char *token)
{
    int id = v->slots[find_slot(v->slots, v->n_slots, v->idx_to_token, token)];
    return id >= 0 ? id : QKV_UNK;
}

const char *qkv_vocab_token(const qkv_vocab *v, int id)
{
    return id >= 0 && id < v->size ? v->idx_to_token[id] : NULL;
}

/* ---------------------------------------------------------------------------------------
 * The vocabulary file: line i + 1 holds token i
 * ------------------------------------------------------------------------------------- */

qkv_status qkv_vocab_save(const qkv_vocab *v, const char *path, qkv_error *err)
{
    size_t bytes = 0;
    for (int i = 0; i < v->size; i++) {
        const char *t = v->idx_to_token[i];
        if (!*t || strpbrk(t, "\r\n"))
            return qkv_fail(err, QKV_ERR_ARG, "%s: token %d is empty or holds a line break, "
                            "so it cannot be a line of the file", path, i);
        bytes += strlen(t) + 1;
    }
    char *text = malloc(bytes + 1), *p = text;
    if (!text) return qkv_fail(err, QKV_ERR_NOMEM, "%s: out of memory", path);
    for (int i = 0; i < v->size; i++) p += sprintf(p, "%s\n", v->idx_to_token[i]);
    const void *chunks[1] = {text};
    qkv_status st = qkv_atomic_write(path, chunks, &bytes, 1, err);
    free(text);
    return st;
}

/* Splits buf in place into lines (ending "\n" or "\r\n"; the last may lack it), checking
 * each is a non-empty UTF-8 token. lines (cap >= number of '\n' + 1) gets pointers. */
static qkv_status split_lines(const char **lines, int *n_lines, char *buf, size_t len,
                              const char *path, qkv_error *err)
{
    int n = 0;
    for (size_t i = 0; i < len;) {
        char *nl = memchr(buf + i, '\n', len - i);
        size_t end = nl ? (size_t)(nl - buf) : len, tlen = end - i;
        if (tlen > 0 && buf[i + tlen - 1] == '\r') tlen--;
        if (n == INT32_MAX)
            return qkv_fail(err, QKV_ERR_FORMAT, "%s: more than %d lines", path, INT32_MAX);
        if (tlen == 0)
            return qkv_fail(err, QKV_ERR_FORMAT, "%s:%d: empty line (a token is never empty)",
                            path, n + 1);
        size_t ok = qkv_utf8_check(buf + i, tlen);
        if (ok < tlen)
            return qkv_fail(err, QKV_ERR_FORMAT, "%s:%d: invalid UTF-8 at byte %zu", path,
                            n + 1, ok);
        if (memchr(buf + i, '\r', tlen))
            return qkv_fail(err, QKV_ERR_FORMAT, "%s:%d: carriage return inside a token",
                            path, n + 1);
        buf[i + tlen] = '\0';
        lines[n++] = buf + i;
        i = end + 1;
    }
    *n_lines = n;
    return QKV_OK;
}

qkv_status qkv_vocab_load(qkv_vocab *v, const char *path, qkv_error *err)
{
    memset(v, 0, sizeof *v);
    char *buf;
    size_t len = 0;
    qkv_status st = qkv_read_regular_file(path, QKV_MAX_VOCAB_FILE_BYTES, &buf, &len, err);
    if (st != QKV_OK) return st;
    size_t n_newlines = 0;
    for (size_t i = 0; i < len; i++) n_newlines += buf[i] == '\n';
    const char **lines = malloc((n_newlines + 1) * sizeof *lines);
    int n = 0;
    if (!lines) st = qkv_fail(err, QKV_ERR_NOMEM, "%s: out of memory", path);
    if (st == QKV_OK) st = split_lines(lines, &n, buf, len, path, err);
    for (int r = 0; st == QKV_OK && r < QKV_N_RESERVED; r++)
        if (r >= n || strcmp(lines[r], qkv_enum_name(QKV_ENUM_RESERVED, r)) != 0)
            st = qkv_fail(err, QKV_ERR_FORMAT,
                          "%s:%d: expected '%s' (a vocabulary starts <unk> <pad> <bos> <eos>), "
                          "found '%s'", path, r + 1, qkv_enum_name(QKV_ENUM_RESERVED, r),
                          r < n ? lines[r] : "end of file");
    if (st == QKV_OK) st = vocab_assemble(v, lines, n, path, err);
    free(lines);
    free(buf);
    return st;
}

/* ---------------------------------------------------------------------------------------
 * Batching (d2l's truncate_pad, build_array_nmt) and back to text
 * ------------------------------------------------------------------------------------- */

int qkv_vocab_encode(int *ids, const qkv_vocab *v, const char *const *tokens, int n,
                     int num_steps)
{
    int t = 0;
    for (; t < n && t < num_steps; t++) ids[t] = qkv_vocab_id(v, tokens[t]);
    if (t < num_steps) ids[t++] = QKV_EOS;
    for (; t < num_steps; t++) ids[t] = QKV_PAD;
    /* d2l: valid_len = (array != vocab['<pad>']).sum(1), a count, not a position. */
    int valid_len = 0;
    for (t = 0; t < num_steps; t++) valid_len += ids[t] != QKV_PAD;
    return valid_len;
}

qkv_status qkv_sentences_encode(int *ids, int *valid_len, const qkv_sentences *s,
                                const qkv_vocab *v, int num_steps, qkv_error *err)
{
    if (num_steps < 1)
        return qkv_fail(err, QKV_ERR_ARG, "num_steps must be at least 1, got %d", num_steps);
    for (int i = 0; i < s->count; i++)
        valid_len[i] = qkv_vocab_encode(ids + (size_t)i * (size_t)num_steps, v,
                                        s->tokens + s->start[i], qkv_sentence_len(s, i),
                                        num_steps);
    return QKV_OK;
}

/* Appends s as snprintf would: *len counts every byte, out (cap bytes) keeps what fits. */
static void append(char *out, size_t cap, size_t *len, const char *s)
{
    for (; *s; s++, (*len)++)
        if (*len + 1 < cap) out[*len] = *s;
}

size_t qkv_vocab_decode(char *out, size_t cap, const qkv_vocab *v, const int *ids, int n)
{
    size_t len = 0;
    for (int i = 0; i < n && ids[i] != QKV_EOS; i++) {
        const char *t = qkv_vocab_token(v, ids[i]);
        if (i > 0) append(out, cap, &len, " ");
        append(out, cap, &len, t ? t : qkv_enum_name(QKV_ENUM_RESERVED, QKV_UNK));
    }
    if (cap > 0) out[len < cap ? len : cap - 1] = '\0';
    return len;
}
