/* SPDX-License-Identifier: MIT */
/*
 * Byte-pair encoding (Sennrich, Haddow & Birch 2016, "Neural Machine Translation of Rare
 * Words with Subword Units", algorithm 1), with SentencePiece's word-start marker ▁ so that
 * pieces join back into the text exactly.
 *
 * Learning keeps, for every adjacent pair of symbols, its count over the corpus (each distinct
 * word weighted by its frequency) and the words that hold it. A merge then rewrites only those
 * words, moving their pairs' counts, and a max-heap with lazy deletion finds the next best
 * pair: a pair's count only falls except when it involves the symbol just made, and those
 * pairs are pushed afresh, so an entry whose count is stale is re-pushed or dropped when it
 * reaches the top.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"

#define SPACE QKV_BPE_SPACE
#define SPACE_LEN 3
#define UNK_TEXT qkv_enum_name(QKV_ENUM_RESERVED, QKV_UNK) /* "<unk>" */

static int is_reserved(const char *s)
{
    for (int r = 0; r < QKV_N_RESERVED; r++)
        if (!strcmp(s, qkv_enum_name(QKV_ENUM_RESERVED, r))) return 1;
    return 0;
}

/* FNV-1a over n bytes. */
static uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 14695981039346656037ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static uint64_t hash_pair(int a, int b)
{
    uint64_t h = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) * 0x9e3779b97f4a7c15ull;
    return h ^ (h >> 29);
}

/* Bytes of the UTF-8 character at s (n bytes left), or 0 if s does not start a well-formed
 * character (a NUL counts as malformed, as qkv_utf8_check). */
static int char_len(const char *s, size_t n)
{
    unsigned char c = (unsigned char)s[0];
    int k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (k == 0 || (size_t)k > n || qkv_utf8_check(s, (size_t)k) != (size_t)k) return 0;
    return k;
}

/* A table of at least 2 (n + 1) empty slots, a power of two; NULL when out of memory. */
static int *new_slots(size_t n, size_t *n_slots)
{
    size_t c = 16;
    while (c < 2 * (n + 1)) c *= 2;
    int *s = malloc(c * sizeof *s);
    if (!s) return NULL;
    for (size_t i = 0; i < c; i++) s[i] = -1;
    *n_slots = c;
    return s;
}

/* ---------------------------------------------------------------------------------------
 * The encoding's tables: symbols by string, merges by pair
 * ------------------------------------------------------------------------------------- */

void qkv_bpe_free(qkv_bpe *b)
{
    if (!b) return;
    for (int i = 0; i < b->n_symbols; i++) free(b->symbols[i]);
    free(b->symbols), free(b->merges), free(b->symbol_slots), free(b->merge_slots);
    memset(b, 0, sizeof *b);
}

/* The slot of the symbol spelled s[0..n), or the empty slot where it would go. */
static size_t symbol_slot(const int *slots, size_t n_slots, char *const *symbols,
                          const char *s, size_t n)
{
    size_t mask = n_slots - 1, i = (size_t)hash_bytes(s, n) & mask;
    for (; slots[i] >= 0; i = (i + 1) & mask) {
        const char *t = symbols[slots[i]];
        if (!strncmp(t, s, n) && t[n] == '\0') break;
    }
    return i;
}

/* The symbol spelled s[0..n), -1 if there is none. */
static int symbol_find(const qkv_bpe *b, const char *s, size_t n)
{
    if (!b->symbol_slots) return -1;
    return b->symbol_slots[symbol_slot(b->symbol_slots, b->n_symbol_slots, b->symbols, s, n)];
}

/* The rank of the merge (left, right), -1 if there is none. */
static int merge_rank(const qkv_bpe *b, int left, int right)
{
    size_t mask = b->n_merge_slots - 1, i = (size_t)hash_pair(left, right) & mask;
    for (; b->merge_slots[i] >= 0; i = (i + 1) & mask) {
        const int *m = b->merges + 3 * (size_t)b->merge_slots[i];
        if (m[0] == left && m[1] == right) return b->merge_slots[i];
    }
    return -1;
}

/* The symbol spelled s[0..n), added if new (*added = 1). -1 when out of memory. The
 * capacities of the arrays grow by doubling; symbols and merges share one bound. */
static int symbol_add(qkv_bpe *b, const char *s, size_t n, int *added)
{
    *added = 0;
    int found = symbol_find(b, s, n);
    if (found >= 0) return found;
    if (2 * ((size_t)b->n_symbols + 1) >= b->n_symbol_slots) { /* keep the table half empty */
        size_t n_slots;
        int *slots = new_slots(2 * (size_t)b->n_symbols + 16, &n_slots);
        char **symbols = slots ? realloc(b->symbols, n_slots / 2 * sizeof *symbols) : NULL;
        if (!symbols) return free(slots), -1;
        b->symbols = symbols;
        for (int k = 0; k < b->n_symbols; k++)
            slots[symbol_slot(slots, n_slots, symbols, symbols[k], strlen(symbols[k]))] = k;
        free(b->symbol_slots);
        b->symbol_slots = slots, b->n_symbol_slots = n_slots;
    }
    char *copy = malloc(n + 1);
    if (!copy) return -1;
    memcpy(copy, s, n), copy[n] = '\0';
    b->symbols[b->n_symbols] = copy;
    b->symbol_slots[symbol_slot(b->symbol_slots, b->n_symbol_slots, b->symbols, s, n)] =
        b->n_symbols;
    *added = 1;
    return b->n_symbols++;
}

/* Records merge (left, right) -> the symbol of their concatenation as the next rank. Returns
 * the resulting symbol, -1 when out of memory. */
static int merge_add(qkv_bpe *b, int left, int right)
{
    size_t la = strlen(b->symbols[left]), lb = strlen(b->symbols[right]);
    char *s = malloc(la + lb + 1);
    if (!s) return -1;
    memcpy(s, b->symbols[left], la), memcpy(s + la, b->symbols[right], lb + 1);
    int added, c = symbol_add(b, s, la + lb, &added);
    free(s);
    if (c < 0) return -1;
    if (2 * ((size_t)b->n_merges + 1) >= b->n_merge_slots) {
        size_t n_slots;
        int *slots = new_slots(2 * (size_t)b->n_merges + 16, &n_slots);
        int *merges = slots ? realloc(b->merges, n_slots / 2 * 3 * sizeof *merges) : NULL;
        if (!merges) return free(slots), -1;
        b->merges = merges;
        free(b->merge_slots);
        b->merge_slots = slots, b->n_merge_slots = n_slots;
        for (int r = 0; r < b->n_merges; r++) { /* re-insert: same probe as merge_rank */
            size_t mask = n_slots - 1, i = (size_t)hash_pair(merges[3 * r], merges[3 * r + 1]) & mask;
            while (slots[i] >= 0) i = (i + 1) & mask;
            slots[i] = r;
        }
    }
    int *m = b->merges + 3 * (size_t)b->n_merges;
    m[0] = left, m[1] = right, m[2] = c;
    size_t mask = b->n_merge_slots - 1, i = (size_t)hash_pair(left, right) & mask;
    while (b->merge_slots[i] >= 0) i = (i + 1) & mask;
    b->merge_slots[i] = b->n_merges++;
    return c;
}

/* An empty encoding with working (empty) tables, so lookups need no NULL checks. */
static qkv_status bpe_init(qkv_bpe *b, qkv_error *err)
{
    memset(b, 0, sizeof *b);
    b->symbol_slots = new_slots(8, &b->n_symbol_slots);
    b->merge_slots = new_slots(8, &b->n_merge_slots);
    b->symbols = malloc(b->n_symbol_slots / 2 * sizeof *b->symbols);
    b->merges = malloc(b->n_merge_slots / 2 * 3 * sizeof *b->merges);
    if (!b->symbol_slots || !b->merge_slots || !b->symbols || !b->merges) {
        qkv_bpe_free(b);
        return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for a byte-pair encoding");
    }
    return QKV_OK;
}

/* ---------------------------------------------------------------------------------------
 * Encoding
 * ------------------------------------------------------------------------------------- */

/* Applies the merges to the symbols s[0..n) of one word in place, lowest rank first (every
 * occurrence of that pair, left to right), until no adjacent pair has a merge. -1 is an
 * unknown character, which no merge joins. Returns the new length. */
static int apply_merges(const qkv_bpe *b, int *s, int n)
{
    for (;;) {
        int best = -1;
        for (int i = 0; i + 1 < n; i++) {
            if (s[i] < 0 || s[i + 1] < 0) continue;
            int r = merge_rank(b, s[i], s[i + 1]);
            if (r >= 0 && (best < 0 || r < best)) best = r;
        }
        if (best < 0) return n;
        const int *m = b->merges + 3 * (size_t)best;
        int j = 0;
        for (int i = 0; i < n; i++) {
            if (i + 1 < n && s[i] == m[0] && s[i + 1] == m[1]) s[j++] = m[2], i++;
            else s[j++] = s[i];
        }
        n = j;
    }
}

/* The symbol of the character at s (its k bytes), -1 if unknown: outside the alphabet, not
 * UTF-8 (k = 0), or a literal ▁ (which would read back as a space). */
static int char_symbol(const qkv_bpe *b, const char *s, int k)
{
    if (k == 0 || (k == SPACE_LEN && !memcmp(s, SPACE, SPACE_LEN))) return -1;
    int id = symbol_find(b, s, (size_t)k);
    return id >= 0 && id < b->n_chars ? id : -1;
}

/* Symbols of one word, ▁ + w[0..n), in s (room for n + 1), merged; returns their count. */
static int encode_word(int *s, const qkv_bpe *b, const char *w, size_t n)
{
    int len = 0;
    s[len++] = symbol_find(b, SPACE, SPACE_LEN);
    for (size_t i = 0; i < n;) {
        int k = char_len(w + i, n - i);
        s[len++] = char_symbol(b, w + i, k);
        i += k ? (size_t)k : 1;
    }
    return apply_merges(b, s, len);
}

int qkv_bpe_encode(int *ids, const qkv_bpe *b, const char *text, size_t len)
{
    /* The text is read as " " + text: every space starts a word, the first one virtual. */
    int n = 0;
    for (size_t i = 0; i <= len;) {
        size_t j = i;
        while (j < len && text[j] != ' ') j++;
        int k = encode_word(ids + n, b, text + i, j - i);
        for (int t = n; t < n + k; t++) ids[t] = ids[t] < 0 ? QKV_UNK : QKV_N_RESERVED + ids[t];
        n += k;
        i = j + 1;
    }
    return n;
}

/* Appends s[0..n) as snprintf would: *len counts every byte, out (cap bytes) keeps what fits. */
static void append(char *out, size_t cap, size_t *len, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++, (*len)++)
        if (*len + 1 < cap) out[*len] = s[i];
}

size_t qkv_bpe_decode(char *out, size_t cap, const qkv_bpe *b, const int *ids, int n)
{
    size_t len = 0;
    int first = 1; /* the first ▁ of the text is the virtual space: it is dropped */
    for (int i = 0; i < n && ids[i] != QKV_EOS; i++) {
        if (ids[i] == QKV_PAD || ids[i] == QKV_BOS) continue;
        int s = ids[i] - QKV_N_RESERVED;
        const char *p = s >= 0 && s < b->n_symbols ? b->symbols[s] : UNK_TEXT;
        while (*p) {
            if (!strncmp(p, SPACE, SPACE_LEN)) {
                if (!first) append(out, cap, &len, " ", 1);
                p += SPACE_LEN;
            } else {
                append(out, cap, &len, p++, 1);
            }
            first = 0;
        }
    }
    if (cap > 0) out[len < cap ? len : cap - 1] = '\0';
    return len;
}

qkv_status qkv_bpe_vocab(qkv_vocab *v, const qkv_bpe *b, qkv_error *err)
{
    /* every symbol once, in order: the frequency sort keeps first-occurrence order */
    return qkv_vocab_build(v, (const char *const *)b->symbols, (size_t)b->n_symbols, 1, err);
}

/* ---------------------------------------------------------------------------------------
 * Distinct strings with counts (words when learning; the encoding cache)
 * ------------------------------------------------------------------------------------- */

typedef struct {
    const char **keys; /* not owned */
    int64_t *value;    /* count, or a cache's offset */
    int count;
    size_t cap;
    int *slots;
    size_t n_slots;
} string_table;

static void table_free(string_table *t)
{
    free(t->keys), free(t->value), free(t->slots);
    memset(t, 0, sizeof *t);
}

/* The index of key, added with value 0 if new (*added = 1); -1 when out of memory. */
static int table_get(string_table *t, const char *key, int *added)
{
    *added = 0;
    if ((size_t)t->count == t->cap) { /* slots stay at least half empty */
        size_t cap = t->cap ? 2 * t->cap : 1024, n_slots;
        const char **keys = realloc(t->keys, cap * sizeof *keys);
        if (keys) t->keys = keys;
        int64_t *value = realloc(t->value, cap * sizeof *value);
        if (value) t->value = value;
        int *slots = keys && value ? new_slots(cap, &n_slots) : NULL;
        if (!slots || cap > INT32_MAX) return free(slots), -1;
        for (int k = 0; k < t->count; k++) {
            size_t i = (size_t)hash_bytes(keys[k], strlen(keys[k])) & (n_slots - 1);
            while (slots[i] >= 0) i = (i + 1) & (n_slots - 1);
            slots[i] = k;
        }
        free(t->slots);
        t->slots = slots, t->n_slots = n_slots, t->cap = cap;
    }
    size_t mask = t->n_slots - 1, i = (size_t)hash_bytes(key, strlen(key)) & mask;
    while (t->slots[i] >= 0 && strcmp(t->keys[t->slots[i]], key)) i = (i + 1) & mask;
    if (t->slots[i] < 0) {
        t->slots[i] = t->count;
        t->keys[t->count] = key;
        t->value[t->count++] = 0;
        *added = 1;
    }
    return t->slots[i];
}

/* ---------------------------------------------------------------------------------------
 * Learning
 * ------------------------------------------------------------------------------------- */

typedef struct {
    int64_t count;   /* occurrences over the corpus, each word weighted by its frequency */
    int left, right;
    int blocked;     /* would spell a reserved token: never merged */
    int *words;      /* words that held the pair when it appeared in them (may repeat, may be
                        stale: checked when used) */
    int n_words, cap_words;
} pair_stat;

typedef struct {
    int64_t count;
    int pair;
} heap_entry;

typedef struct {
    qkv_bpe *b;
    int n_words;
    const char **word;  /* distinct words (not owned) */
    int64_t *freq;
    int *seq, *seq_len; /* word w's symbols: seq[start[w] .. start[w] + seq_len[w]) */
    size_t *start;
    pair_stat *pairs;
    int n_pairs, cap_pairs;
    int *pair_slots;
    size_t n_pair_slots;
    heap_entry *heap;
    size_t heap_n, heap_cap;
    int *word_stamp, *pair_stamp; /* the merge that last visited a word / pushed a pair */
    int *touched;                 /* pairs to push after a merge */
    int n_touched, cap_touched;
} learner;

static void learner_free(learner *L)
{
    for (int p = 0; p < L->n_pairs; p++) free(L->pairs[p].words);
    free(L->word), free(L->freq), free(L->seq), free(L->seq_len), free(L->start);
    free(L->pairs), free(L->pair_slots), free(L->heap), free(L->word_stamp);
    free(L->pair_stamp), free(L->touched);
}

/* The pair (a, b), created with count 0 if new; -1 when out of memory. */
static int pair_get(learner *L, int a, int b)
{
    size_t mask = L->n_pair_slots - 1, i = (size_t)hash_pair(a, b) & mask;
    for (; L->pair_slots[i] >= 0; i = (i + 1) & mask) {
        const pair_stat *p = &L->pairs[L->pair_slots[i]];
        if (p->left == a && p->right == b) return L->pair_slots[i];
    }
    if (L->n_pairs == L->cap_pairs) {
        int cap = L->cap_pairs ? 2 * L->cap_pairs : 4096;
        pair_stat *pairs = realloc(L->pairs, (size_t)cap * sizeof *pairs);
        int *stamp = pairs ? realloc(L->pair_stamp, (size_t)cap * sizeof *stamp) : NULL;
        if (pairs) L->pairs = pairs;
        if (!stamp) return -1;
        L->pair_stamp = stamp, L->cap_pairs = cap;
    }
    if (2 * ((size_t)L->n_pairs + 1) >= L->n_pair_slots) {
        size_t n_slots;
        int *slots = new_slots(2 * (size_t)L->n_pairs, &n_slots);
        if (!slots) return -1;
        for (int k = 0; k < L->n_pairs; k++) {
            size_t j = (size_t)hash_pair(L->pairs[k].left, L->pairs[k].right) & (n_slots - 1);
            while (slots[j] >= 0) j = (j + 1) & (n_slots - 1);
            slots[j] = k;
        }
        free(L->pair_slots);
        L->pair_slots = slots, L->n_pair_slots = n_slots;
        mask = n_slots - 1;
        for (i = (size_t)hash_pair(a, b) & mask; slots[i] >= 0;) i = (i + 1) & mask;
    }
    L->pairs[L->n_pairs] = (pair_stat){0, a, b, 0, NULL, 0, 0};
    L->pair_stamp[L->n_pairs] = -1;
    L->pair_slots[i] = L->n_pairs;
    return L->n_pairs++;
}

static int pair_note_word(pair_stat *p, int w)
{
    if (p->n_words > 0 && p->words[p->n_words - 1] == w) return 0; /* cheap de-duplication */
    if (p->n_words == p->cap_words) {
        int cap = p->cap_words ? 2 * p->cap_words : 4;
        int *words = realloc(p->words, (size_t)cap * sizeof *words);
        if (!words) return -1;
        p->words = words, p->cap_words = cap;
    }
    p->words[p->n_words++] = w;
    return 0;
}

/* Whether heap entry x should be merged before y: more occurrences, then the smaller left
 * symbol string, then the smaller right one. */
static int better(const learner *L, heap_entry x, heap_entry y)
{
    if (x.count != y.count) return x.count > y.count;
    const pair_stat *p = &L->pairs[x.pair], *q = &L->pairs[y.pair];
    int c = strcmp(L->b->symbols[p->left], L->b->symbols[q->left]);
    if (c) return c < 0;
    return strcmp(L->b->symbols[p->right], L->b->symbols[q->right]) < 0;
}

static int heap_push(learner *L, heap_entry e)
{
    if (L->heap_n == L->heap_cap) {
        size_t cap = L->heap_cap ? 2 * L->heap_cap : 4096;
        heap_entry *h = realloc(L->heap, cap * sizeof *h);
        if (!h) return -1;
        L->heap = h, L->heap_cap = cap;
    }
    size_t i = L->heap_n++;
    while (i > 0 && better(L, e, L->heap[(i - 1) / 2])) {
        L->heap[i] = L->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    L->heap[i] = e;
    return 0;
}

static heap_entry heap_pop(learner *L)
{
    heap_entry top = L->heap[0], last = L->heap[--L->heap_n];
    size_t i = 0, n = L->heap_n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && better(L, L->heap[c + 1], L->heap[c])) c++;
        if (!better(L, L->heap[c], last)) break;
        L->heap[i] = L->heap[c];
        i = c;
    }
    if (n > 0) L->heap[i] = last;
    return top;
}

/* The pair to merge next, -1 if no pair is counted twice. */
static int best_pair(learner *L, int *oom)
{
    while (L->heap_n > 0) {
        heap_entry e = heap_pop(L);
        pair_stat *p = &L->pairs[e.pair];
        if (p->blocked) continue;
        if (e.count != p->count) {
            /* stale: its count fell since (it never rises unnoticed: rises are pushed) */
            if (e.count > p->count && p->count >= 2 &&
                heap_push(L, (heap_entry){p->count, e.pair}))
                return *oom = 1, -1;
            continue;
        }
        if (p->count < 2) return -1;
        return e.pair;
    }
    return -1;
}

/* Adds delta * (word w's frequency) to every adjacent known pair of w. When delta > 0, a
 * pair involving symbol c notes w and is queued to be pushed on the heap. */
static int count_pairs(learner *L, int w, int delta, int c, int stamp)
{
    const int *s = L->seq + L->start[w];
    for (int i = 0; i + 1 < L->seq_len[w]; i++) {
        if (s[i] < 0 || s[i + 1] < 0) continue;
        int p = pair_get(L, s[i], s[i + 1]);
        if (p < 0) return -1;
        L->pairs[p].count += delta * L->freq[w];
        if (delta > 0 && (s[i] == c || s[i + 1] == c)) {
            if (pair_note_word(&L->pairs[p], w)) return -1;
            if (L->pair_stamp[p] != stamp) {
                L->pair_stamp[p] = stamp;
                if (L->n_touched == L->cap_touched) {
                    int cap = L->cap_touched ? 2 * L->cap_touched : 1024;
                    int *t = realloc(L->touched, (size_t)cap * sizeof *t);
                    if (!t) return -1;
                    L->touched = t, L->cap_touched = cap;
                }
                L->touched[L->n_touched++] = p;
            }
        }
    }
    return 0;
}

/* Merges pair p into symbol c in every word that holds it. */
static int apply_merge(learner *L, int p, int c, int stamp)
{
    const int a = L->pairs[p].left, b = L->pairs[p].right;
    int *words = L->pairs[p].words, n_words = L->pairs[p].n_words;
    L->pairs[p].words = NULL, L->pairs[p].n_words = L->pairs[p].cap_words = 0;
    L->n_touched = 0;
    int rc = 0;
    for (int k = 0; k < n_words && !rc; k++) {
        int w = words[k];
        if (L->word_stamp[w] == stamp) continue;
        L->word_stamp[w] = stamp;
        int *s = L->seq + L->start[w], n = L->seq_len[w], holds = 0;
        for (int i = 0; i + 1 < n && !holds; i++) holds = s[i] == a && s[i + 1] == b;
        if (!holds) continue;
        if ((rc = count_pairs(L, w, -1, c, stamp))) break;
        int j = 0;
        for (int i = 0; i < n; i++) {
            if (i + 1 < n && s[i] == a && s[i + 1] == b) s[j++] = c, i++;
            else s[j++] = s[i];
        }
        L->seq_len[w] = j;
        rc = count_pairs(L, w, +1, c, stamp);
    }
    free(words);
    for (int k = 0; k < L->n_touched && !rc; k++) {
        const pair_stat *q = &L->pairs[L->touched[k]];
        if (q->count >= 2) rc = heap_push(L, (heap_entry){q->count, L->touched[k]});
    }
    return rc;
}

/* The alphabet: a character and its count. */
typedef struct {
    char bytes[5];
    int64_t count;
} char_count;

static int by_count_then_bytes(const void *pa, const void *pb)
{
    const char_count *a = pa, *b = pb;
    if (a->count != b->count) return a->count > b->count ? -1 : 1;
    return strcmp(a->bytes, b->bytes);
}

/* Counts the distinct words of texts ("▁" + word) and their characters, and makes the
 * alphabet: the most frequent characters that fit in max_symbols. */
static qkv_status learn_alphabet(learner *L, string_table *words,
                                 const qkv_sentences *const *texts, int n_texts,
                                 int max_symbols, qkv_error *err)
{
    for (int t = 0; t < n_texts; t++)
        for (size_t k = 0; k < texts[t]->n_tokens; k++) {
            int added, w = table_get(words, texts[t]->tokens[k], &added);
            if (w < 0) return qkv_fail(err, QKV_ERR_NOMEM, "out of memory counting words");
            words->value[w]++;
        }
    /* characters, in a table keyed by their bytes (each a NUL-terminated string) */
    string_table chars = {0};
    size_t total_chars = 1; /* distinct characters are at most the bytes, plus ▁ */
    for (int w = 0; w < words->count; w++) total_chars += strlen(words->keys[w]);
    char_count *cc = malloc((total_chars + 1) * sizeof *cc);
    if (!cc) return qkv_fail(err, QKV_ERR_NOMEM, "out of memory counting characters");
    int n_cc = 0, added;
    qkv_status st = QKV_OK;
    /* ▁ first: it starts every word */
    memcpy(cc[0].bytes, SPACE, SPACE_LEN + 1);
    cc[0].count = 0;
    if (table_get(&chars, cc[0].bytes, &added) != 0) st = QKV_ERR_NOMEM;
    n_cc = 1;
    for (int w = 0; w < words->count && !st; w++) {
        const char *s = words->keys[w];
        size_t n = strlen(s);
        cc[0].count += words->value[w];
        for (size_t i = 0; i < n && !st;) {
            int k = char_len(s + i, n - i);
            if (k == 0 || s[i] == '\r' || s[i] == '\n' ||
                (k == SPACE_LEN && !memcmp(s + i, SPACE, SPACE_LEN))) {
                i += k ? (size_t)k : 1; /* never in the alphabet */
                continue;
            }
            memcpy(cc[n_cc].bytes, s + i, (size_t)k);
            cc[n_cc].bytes[k] = '\0';
            /* the table's key must outlive the loop: it points into cc */
            int c = table_get(&chars, cc[n_cc].bytes, &added);
            if (c < 0) st = QKV_ERR_NOMEM;
            else if (added) cc[n_cc++].count = words->value[w];
            else cc[c].count += words->value[w];
            i += (size_t)k;
        }
    }
    table_free(&chars);
    if (st) {
        free(cc);
        return qkv_fail(err, QKV_ERR_NOMEM, "out of memory counting characters");
    }
    qsort(cc, (size_t)n_cc, sizeof *cc, by_count_then_bytes);
    if (n_cc > max_symbols) n_cc = max_symbols;
    for (int i = 0; i < n_cc && !st; i++)
        if (symbol_add(L->b, cc[i].bytes, strlen(cc[i].bytes), &added) < 0) st = QKV_ERR_NOMEM;
    L->b->n_chars = L->b->n_symbols;
    free(cc);
    return st ? qkv_fail(err, st, "out of memory for the alphabet") : QKV_OK;
}

/* Each distinct word of `words` as symbols (the word-start marker, then its characters), and
 * the counts of the pairs of neighbouring symbols, with a heap of those seen twice or more. */
static qkv_status learn_words(learner *L, const string_table *words, qkv_error *err)
{
    const qkv_bpe *b = L->b;
    L->n_words = words->count;
    size_t total = 0;
    for (int w = 0; w < words->count; w++) total += strlen(words->keys[w]) + 1;
    L->seq = malloc((total + 1) * sizeof *L->seq);
    L->seq_len = malloc(((size_t)L->n_words + 1) * sizeof *L->seq_len);
    L->start = malloc(((size_t)L->n_words + 1) * sizeof *L->start);
    L->freq = malloc(((size_t)L->n_words + 1) * sizeof *L->freq);
    L->word_stamp = malloc(((size_t)L->n_words + 1) * sizeof *L->word_stamp);
    L->pair_slots = new_slots(4096, &L->n_pair_slots);
    if (!L->seq || !L->seq_len || !L->start || !L->freq || !L->word_stamp || !L->pair_slots)
        return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for %d words", L->n_words);
    size_t at = 0;
    const int space = symbol_find(b, SPACE, SPACE_LEN);
    for (int w = 0; w < L->n_words; w++) {
        const char *s = words->keys[w];
        size_t n = strlen(s);
        L->start[w] = at, L->freq[w] = words->value[w], L->word_stamp[w] = -1;
        L->seq[at++] = space;
        for (size_t i = 0; i < n;) {
            int k = char_len(s + i, n - i);
            L->seq[at++] = char_symbol(b, s + i, k);
            i += k ? (size_t)k : 1;
        }
        L->seq_len[w] = (int)(at - L->start[w]);
        const int *q = L->seq + L->start[w];
        for (int i = 0; i + 1 < L->seq_len[w]; i++) {
            if (q[i] < 0 || q[i + 1] < 0) continue;
            int p = pair_get(L, q[i], q[i + 1]);
            if (p < 0 || pair_note_word(&L->pairs[p], w))
                return qkv_fail(err, QKV_ERR_NOMEM, "out of memory counting pairs");
            L->pairs[p].count += L->freq[w];
        }
    }
    for (int p = 0; p < L->n_pairs; p++)
        if (L->pairs[p].count >= 2 && heap_push(L, (heap_entry){L->pairs[p].count, p}))
            return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for the pair heap");
    return QKV_OK;
}

/* Sennrich et al.'s loop: merge the most frequent pair until the vocabulary holds
 * max_symbols (or no pair is left); a merge that would spell a reserved token is blocked. */
static qkv_status learn_merges(learner *L, int max_symbols, qkv_error *err)
{
    qkv_bpe *b = L->b;
    while (b->n_symbols < max_symbols) {
        int oom = 0, p = best_pair(L, &oom);
        if (p < 0)
            return oom ? qkv_fail(err, QKV_ERR_NOMEM, "out of memory for the pair heap") : QKV_OK;
        const char *l = b->symbols[L->pairs[p].left], *r = b->symbols[L->pairs[p].right];
        char spelled[16];
        size_t nl = strlen(l), nr = strlen(r);
        if (nl + nr < sizeof spelled) {
            memcpy(spelled, l, nl), memcpy(spelled + nl, r, nr + 1);
            if (is_reserved(spelled)) {
                L->pairs[p].blocked = 1;
                continue;
            }
        }
        int c = merge_add(b, L->pairs[p].left, L->pairs[p].right);
        if (c < 0 || apply_merge(L, p, c, b->n_merges))
            return qkv_fail(err, QKV_ERR_NOMEM, "out of memory after %d merges", b->n_merges);
    }
    return QKV_OK;
}

qkv_status qkv_bpe_learn(qkv_bpe *b, const qkv_sentences *const *texts, int n_texts,
                         int vocab_size, qkv_error *err)
{
    memset(b, 0, sizeof *b);
    if (vocab_size <= QKV_N_RESERVED || n_texts < 1)
        return qkv_fail(err, QKV_ERR_ARG, "a byte-pair vocabulary needs more than the %d "
                        "reserved tokens (got %d) and at least one text", QKV_N_RESERVED,
                        vocab_size);
    qkv_status st = bpe_init(b, err);
    if (st) return st;
    const int max_symbols = vocab_size - QKV_N_RESERVED;
    learner L = {0};
    L.b = b;
    string_table words = {0};
    st = learn_alphabet(&L, &words, texts, n_texts, max_symbols, err);
    if (!st) st = learn_words(&L, &words, err);
    if (!st) st = learn_merges(&L, max_symbols, err);
    learner_free(&L);
    table_free(&words);
    if (st) qkv_bpe_free(b);
    return st;
}

/* ---------------------------------------------------------------------------------------
 * Encoding a corpus of word sentences
 * ------------------------------------------------------------------------------------- */

qkv_status qkv_bpe_encode_sentences(qkv_sentences *out, const qkv_bpe *b,
                                    const qkv_sentences *in, qkv_error *err)
{
    memset(out, 0, sizeof *out);
    string_table cache = {0}; /* word -> offset of its pieces in pool: (count, ids...) */
    int *pool = NULL, *scratch = NULL;
    size_t pool_n = 0, pool_cap = 0, longest = 0;
    size_t *start = malloc(((size_t)in->count + 1) * sizeof *start);
    size_t *word_at = malloc((in->n_tokens + 1) * sizeof *word_at); /* pool offset per word */
    qkv_status st = QKV_OK;
    if (!start || !word_at) goto oom;
    for (size_t k = 0; k < in->n_tokens; k++) {
        size_t n = strlen(in->tokens[k]);
        if (n > longest) longest = n;
    }
    scratch = malloc((longest + 2) * sizeof *scratch);
    if (!scratch) goto oom;
    /* pieces of every distinct word, once */
    size_t n_pieces = 0;
    for (size_t k = 0; k < in->n_tokens; k++) {
        int added, w = table_get(&cache, in->tokens[k], &added);
        if (w < 0) goto oom;
        if (added) {
            size_t n = strlen(in->tokens[k]);
            int m = encode_word(scratch, b, in->tokens[k], n);
            if (pool_n + (size_t)m + 1 > pool_cap) {
                size_t cap = pool_cap ? 2 * pool_cap : 4096;
                while (cap < pool_n + (size_t)m + 1) cap *= 2;
                int *p = realloc(pool, cap * sizeof *p);
                if (!p) goto oom;
                pool = p, pool_cap = cap;
            }
            cache.value[w] = (int64_t)pool_n;
            pool[pool_n++] = m;
            memcpy(pool + pool_n, scratch, (size_t)m * sizeof *pool);
            pool_n += (size_t)m;
        }
        word_at[k] = (size_t)cache.value[w];
        n_pieces += (size_t)pool[word_at[k]];
    }
    /* the pieces' bytes, then pointers to them */
    size_t bytes = 0;
    for (size_t k = 0; k < in->n_tokens; k++) {
        const int *p = pool + word_at[k];
        for (int j = 1; j <= p[0]; j++)
            bytes += strlen(p[j] < 0 ? UNK_TEXT : b->symbols[p[j]]) + 1;
    }
    out->tokens = malloc((n_pieces + 1) * sizeof *out->tokens);
    out->storage = malloc(bytes + 1);
    if (!out->tokens || !out->storage) goto oom;
    char *at = out->storage;
    size_t t = 0;
    for (int i = 0; i < in->count; i++) {
        start[i] = t;
        for (size_t k = in->start[i]; k < in->start[i + 1]; k++) {
            const int *p = pool + word_at[k];
            for (int j = 1; j <= p[0]; j++) {
                const char *piece = p[j] < 0 ? UNK_TEXT : b->symbols[p[j]];
                size_t n = strlen(piece) + 1;
                memcpy(at, piece, n);
                out->tokens[t++] = at;
                at += n;
            }
        }
    }
    start[in->count] = t;
    out->count = in->count, out->n_tokens = n_pieces, out->start = start;
    start = NULL;
    goto done;
oom:
    st = qkv_fail(err, QKV_ERR_NOMEM, "out of memory encoding %d sentences into subwords",
                  in->count);
    qkv_sentences_free(out);
done:
    free(start), free(word_at), free(scratch), free(pool);
    table_free(&cache);
    return st;
}

/* ---------------------------------------------------------------------------------------
 * The file
 * ------------------------------------------------------------------------------------- */

qkv_status qkv_bpe_save(const qkv_bpe *b, const char *path, qkv_error *err)
{
    size_t bytes = 64;
    for (int i = 0; i < b->n_chars; i++) bytes += strlen(b->symbols[i]) + 1;
    for (int r = 0; r < b->n_merges; r++)
        bytes += strlen(b->symbols[b->merges[3 * r]]) + strlen(b->symbols[b->merges[3 * r + 1]]) + 2;
    char *text = malloc(bytes), *p = text;
    if (!text) return qkv_fail(err, QKV_ERR_NOMEM, "%s: out of memory", path);
    p += sprintf(p, "#qkv-bpe 1\nchars %d\n", b->n_chars);
    for (int i = 0; i < b->n_chars; i++) p += sprintf(p, "%s\n", b->symbols[i]);
    p += sprintf(p, "merges %d\n", b->n_merges);
    for (int r = 0; r < b->n_merges; r++)
        p += sprintf(p, "%s %s\n", b->symbols[b->merges[3 * r]], b->symbols[b->merges[3 * r + 1]]);
    size_t len = (size_t)(p - text);
    const void *chunks[1] = {text};
    qkv_status st = qkv_atomic_write(path, chunks, &len, 1, err);
    free(text);
    return st;
}

/* Next line of text at *at (without "\n" or "\r\n"), NUL-terminated in place; NULL at the
 * end. */
static char *next_line(char *text, size_t len, size_t *at, int *line)
{
    if (*at >= len) return NULL;
    char *s = text + *at, *nl = memchr(s, '\n', len - *at);
    size_t n = nl ? (size_t)(nl - s) : len - *at;
    *at += n + 1;
    if (n > 0 && s[n - 1] == '\r') n--;
    s[n] = '\0';
    (*line)++;
    return s;
}

static int parse_count(const char *s, const char *word)
{
    size_t n = strlen(word);
    if (strncmp(s, word, n) || s[n] != ' ') return -1;
    char *end;
    errno = 0;
    long v = strtol(s + n + 1, &end, 10);
    if (*end || errno || v < 0 || v > INT32_MAX / 4 || end == s + n + 1) return -1;
    return (int)v;
}

/* A file being read line by line, for its messages. */
typedef struct {
    const char *path;
    char *text;
    size_t len, at;
    int line;
} bpe_file;

/* The alphabet: "chars N", then N lines of one UTF-8 character each, U+2581 among them. */
static qkv_status read_alphabet(qkv_bpe *b, bpe_file *f, qkv_error *err)
{
    int n_chars;
    char *s = next_line(f->text, f->len, &f->at, &f->line);
    if (!s || (n_chars = parse_count(s, "chars")) < 1)
        return qkv_fail(err, QKV_ERR_FORMAT, "%s:%d: expected \"chars N\" with N >= 1", f->path,
                        s ? f->line : f->line + 1);
    for (int i = 0; i < n_chars; i++) {
        s = next_line(f->text, f->len, &f->at, &f->line);
        size_t n = s ? strlen(s) : 0;
        int added;
        if (!s || n == 0 || char_len(s, n) != (int)n || *s == ' ')
            return qkv_fail(err, QKV_ERR_FORMAT, "%s:%d: expected one UTF-8 character (%d of "
                            "the %d of the alphabet)", f->path, s ? f->line : f->line + 1, i + 1,
                            n_chars);
        if (*s == '\r') /* qkv_bpe_save would write "\r\n", which reads back as "" */
            return qkv_fail(err, QKV_ERR_FORMAT, "%s:%d: a carriage return cannot be a "
                            "character of the alphabet", f->path, f->line);
        if (symbol_add(b, s, n, &added) < 0)
            return qkv_fail(err, QKV_ERR_NOMEM, "%s: out of memory", f->path);
        if (!added)
            return qkv_fail(err, QKV_ERR_FORMAT, "%s:%d: character '%s' appears twice", f->path,
                            f->line, s);
    }
    b->n_chars = b->n_symbols;
    if (symbol_find(b, SPACE, SPACE_LEN) < 0)
        return qkv_fail(err, QKV_ERR_FORMAT, "%s: the alphabet lacks the word-start marker "
                        "U+2581", f->path);
    return QKV_OK;
}

/* The merges: "merges M", then M lines "left right" of symbols known by then, each once,
 * none spelling a reserved token; nothing but empty lines after them. */
static qkv_status read_merges(qkv_bpe *b, bpe_file *f, qkv_error *err)
{
    int n_merges;
    char *s = next_line(f->text, f->len, &f->at, &f->line);
    if (!s || (n_merges = parse_count(s, "merges")) < 0)
        return qkv_fail(err, QKV_ERR_FORMAT, "%s:%d: expected \"merges M\"", f->path,
                        s ? f->line : f->line + 1);
    for (int r = 0; r < n_merges; r++) {
        s = next_line(f->text, f->len, &f->at, &f->line);
        char *sp = s ? strchr(s, ' ') : NULL;
        int left = -1, right = -1;
        if (sp) {
            left = symbol_find(b, s, (size_t)(sp - s));
            right = symbol_find(b, sp + 1, strlen(sp + 1));
        }
        if (left < 0 || right < 0)
            return qkv_fail(err, QKV_ERR_FORMAT, "%s:%d: expected \"left right\", two symbols "
                            "known by then (merge %d of %d)", f->path, s ? f->line : f->line + 1,
                            r + 1, n_merges);
        if (merge_rank(b, left, right) >= 0)
            return qkv_fail(err, QKV_ERR_FORMAT, "%s:%d: merge \"%s\" repeated", f->path,
                            f->line, s);
        int c = merge_add(b, left, right);
        if (c < 0) return qkv_fail(err, QKV_ERR_NOMEM, "%s: out of memory", f->path);
        if (is_reserved(b->symbols[c]))
            return qkv_fail(err, QKV_ERR_FORMAT, "%s:%d: merge spells the reserved token %s",
                            f->path, f->line, b->symbols[c]);
    }
    while ((s = next_line(f->text, f->len, &f->at, &f->line)) && !*s) {}
    if (s)
        return qkv_fail(err, QKV_ERR_FORMAT, "%s:%d: unexpected text after the %d merges",
                        f->path, f->line, n_merges);
    return QKV_OK;
}

qkv_status qkv_bpe_load(qkv_bpe *b, const char *path, qkv_error *err)
{
    bpe_file f = {path, NULL, 0, 0, 0};
    qkv_status st = qkv_read_regular_file(path, QKV_MAX_VOCAB_FILE_BYTES, &f.text, &f.len, err);
    if (st) return st;
    if ((st = bpe_init(b, err))) return free(f.text), st;
    const char *nul = memchr(f.text, '\0', f.len); /* it would cut its line short, unseen */
    char *s;
    if (nul) {
        int line = 0;
        for (const char *c = f.text; c < nul; c++) line += *c == '\n';
        st = qkv_fail(err, QKV_ERR_FORMAT, "%s:%d: NUL byte", path, line + 1);
    } else if (!(s = next_line(f.text, f.len, &f.at, &f.line)) || strcmp(s, "#qkv-bpe 1")) {
        st = qkv_fail(err, QKV_ERR_FORMAT, "%s:1: expected \"#qkv-bpe 1\" (not a byte-pair "
                      "encoding written by qkv)", path);
    }
    if (!st) st = read_alphabet(b, &f, err);
    if (!st) st = read_merges(b, &f, err);
    free(f.text);
    if (st) qkv_bpe_free(b);
    return st;
}
