/* SPDX-License-Identifier: MIT */
/* Scores as sacreBLEU computes them (Post 2018, "A Call for Clarity in Reporting BLEU
 * Scores"), so that a number qkv prints can be quoted next to anyone else's: BLEU over the
 * 13a tokenisation of detokenised text (mteval-v13a.pl's, as WMT uses it), cased, with
 * mteval's "exp" smoothing, and chrF2 (Popović 2015) over characters. Checked against pip's
 * sacrebleu 2.6.0 (tests/unit/test_sacrebleu.c, tests/e2e/test_sacrebleu.sh).
 *
 * Text is UTF-8; where sacreBLEU works on Python code points, so does this: whitespace is
 * what Python's str.split() splits on, and chrF's character n-grams are n code points. The
 * 13a rules only ever look at ASCII bytes, and a multi-byte character is never one of them,
 * so they run on bytes with the same result. Invalid UTF-8 bytes count as one character
 * each. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "qkv.h"

/* ---- UTF-8 and Python's idea of whitespace ---- */

/* The code point at s (bytes left n >= 1) and its length in *len; an invalid byte is itself. */
static uint32_t utf8_next(const unsigned char *s, size_t n, int *len)
{
    const unsigned c = s[0];
    const int need = c < 0x80 ? 0 : c >= 0xC2 && c < 0xE0 ? 1 : c >= 0xE0 && c < 0xF0 ? 2
                   : c >= 0xF0 && c < 0xF5 ? 3 : -1;
    *len = 1;
    if (need == 0) return c;
    if (need < 0 || (size_t)need >= n) return 0xDC00 + c; /* as Python's surrogateescape */
    uint32_t cp = c & (0x3Fu >> need);
    for (int k = 1; k <= need; k++) {
        if ((s[k] & 0xC0) != 0x80) return 0xDC00 + c;
        cp = cp << 6 | (s[k] & 0x3Fu);
    }
    *len = need + 1;
    return cp;
}

/* Whether Python's str.isspace() holds for cp (what str.split() and rstrip() remove). */
static int py_space(uint32_t cp)
{
    return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 ||
           cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
           cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

/* ---- a growing byte string ---- */

typedef struct {
    char *s;
    size_t n, cap;
    int failed;
} buf;

static void put(buf *b, const char *s, size_t n)
{
    if (b->failed) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->s, cap);
        if (!p) {
            b->failed = 1;
            return;
        }
        b->s = p, b->cap = cap;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = '\0';
}

static void putc1(buf *b, char c) { put(b, &c, 1); }

/* Every non-overlapping `from` in s (left to right, as Python's str.replace) becomes `to`. */
static void replace_all(buf *out, const char *s, size_t n, const char *from, const char *to)
{
    const size_t fn = strlen(from), tn = strlen(to);
    out->n = 0;
    put(out, "", 0);
    for (size_t i = 0; i < n;) {
        if (i + fn <= n && !memcmp(s + i, from, fn)) {
            put(out, to, tn);
            i += fn;
        } else putc1(out, s[i++]);
    }
}

static int is_digit(char c) { return c >= '0' && c <= '9'; }

/* The bytes that 13a's first rule sets apart: { | } ~ [ \ ] ^ _ ` space ! " # $ % & ( ) * + :
 * ; < = > ? @ / (not the apostrophe, comma, hyphen, full stop or a digit). */
static int is_13a_symbol(unsigned char c)
{
    return (c >= 0x7B && c <= 0x7E) || (c >= 0x5B && c <= 0x60) || (c >= 0x20 && c <= 0x26) ||
           (c >= 0x28 && c <= 0x2B) || (c >= 0x3A && c <= 0x40) || c == '/';
}

/* sacreBLEU's 13a tokenisation of line (without the final whitespace collapse) into out. */
static void tokenize_13a_raw(buf *out, const char *line)
{
    buf a = {0}, b = {0};
    size_t n = strlen(line);
    /* rstrip(), as BLEU's preprocessing does before tokenising */
    while (n > 0) {
        size_t start = n - 1;
        while (start > 0 && ((unsigned char)line[start] & 0xC0) == 0x80 && n - start < 4) start--;
        int len;
        uint32_t cp = utf8_next((const unsigned char *)line + start, n - start, &len);
        if ((size_t)len != n - start || !py_space(cp)) break;
        n = start;
    }
    static const char *const rules[][2] = {{"<skipped>", ""}, {"-\n", ""}, {"\n", " "},
                                           {"&quot;", "\""}, {"&amp;", "&"}, {"&lt;", "<"},
                                           {"&gt;", ">"}};
    put(&a, line, n);
    for (size_t r = 0; r < sizeof rules / sizeof *rules && !a.failed; r++) {
        replace_all(&b, a.s, a.n, rules[r][0], rules[r][1]);
        buf t = a;
        a = b, b = t;
    }
    /* ' ' + line + ' ', every symbol spaced apart */
    b.n = 0;
    putc1(&b, ' ');
    for (size_t i = 0; i < a.n; i++) {
        if (is_13a_symbol((unsigned char)a.s[i])) {
            const char sp[3] = {' ', a.s[i], ' '};
            put(&b, sp, 3);
        } else putc1(&b, a.s[i]);
    }
    putc1(&b, ' ');
    /* a full stop or comma after a non-digit: "x ." + " " */
    a.n = 0;
    put(&a, "", 0);
    for (size_t i = 0; i < b.n;) {
        if (i + 1 < b.n && !is_digit(b.s[i]) && (b.s[i + 1] == '.' || b.s[i + 1] == ',')) {
            const char m[4] = {b.s[i], ' ', b.s[i + 1], ' '};
            put(&a, m, 4), i += 2;
        } else putc1(&a, b.s[i++]);
    }
    /* a full stop or comma before a non-digit: " . x" */
    b.n = 0;
    put(&b, "", 0);
    for (size_t i = 0; i < a.n;) {
        if (i + 1 < a.n && (a.s[i] == '.' || a.s[i] == ',') && !is_digit(a.s[i + 1])) {
            const char m[4] = {' ', a.s[i], ' ', a.s[i + 1]};
            put(&b, m, 4), i += 2;
        } else putc1(&b, a.s[i++]);
    }
    /* a hyphen after a digit: "3 - " */
    out->n = 0;
    put(out, "", 0);
    for (size_t i = 0; i < b.n;) {
        if (i + 1 < b.n && is_digit(b.s[i]) && b.s[i + 1] == '-') {
            const char m[4] = {b.s[i], ' ', '-', ' '};
            put(out, m, 4), i += 2;
        } else putc1(out, b.s[i++]);
    }
    if (a.failed || b.failed) out->failed = 1;
    free(a.s), free(b.s);
}

/* The words of s split as Python's str.split(): (start, length) pairs into spans (2 * n),
 * returns n, or -1 out of memory. */
static int split_words(const char *s, size_t n, size_t **spans)
{
    size_t cap = 16, count = 0, i = 0;
    *spans = malloc(2 * cap * sizeof **spans);
    if (!*spans) return -1;
    while (i < n) {
        int len;
        if (py_space(utf8_next((const unsigned char *)s + i, n - i, &len))) {
            i += len;
            continue;
        }
        size_t start = i;
        while (i < n && !py_space(utf8_next((const unsigned char *)s + i, n - i, &len))) i += len;
        if (count == cap) {
            size_t *p = realloc(*spans, 4 * cap * sizeof *p);
            if (!p) return -1;
            *spans = p, cap *= 2;
        }
        (*spans)[2 * count] = start, (*spans)[2 * count + 1] = i - start;
        count++;
    }
    return (int)count;
}

size_t qkv_tokenize_13a(char *out, size_t cap, const char *line)
{
    buf raw = {0};
    tokenize_13a_raw(&raw, line);
    size_t *spans = NULL, need = 0;
    int n = raw.failed ? -1 : split_words(raw.s, raw.n, &spans);
    for (int k = 0; k < n; k++) {
        const size_t len = spans[2 * k + 1];
        if (cap && need + (k > 0) + len < cap) {
            if (k) out[need] = ' ';
            memcpy(out + need + (k > 0), raw.s + spans[2 * k], len);
        }
        need += (k > 0) + len;
    }
    if (cap) out[need < cap ? need : cap - 1] = '\0';
    if (cap && need >= cap) out[0] = '\0'; /* too small: nothing half-written */
    free(spans), free(raw.s);
    return n < 0 ? (size_t)-1 : need;
}

/* ---- n-gram matching: both sides' n-grams as keys, sorted, then merged ---- */

enum { KEY = 6 }; /* the longest n-gram either score uses */

typedef struct {
    uint32_t id[KEY]; /* unused places 0 */
} gram;

static int gram_cmp(const void *a, const void *b)
{
    const gram *x = a, *y = b;
    for (int k = 0; k < KEY; k++)
        if (x->id[k] != y->id[k]) return x->id[k] < y->id[k] ? -1 : 1;
    return 0;
}

/* The n-grams of seq (len) into g, sorted; returns how many. */
static size_t grams_of(gram *g, const uint32_t *seq, size_t len, int n)
{
    if (len < (size_t)n) return 0;
    const size_t count = len - n + 1;
    for (size_t i = 0; i < count; i++) {
        memset(&g[i], 0, sizeof g[i]);
        memcpy(g[i].id, seq + i, (size_t)n * sizeof *seq);
    }
    qsort(g, count, sizeof *g, gram_cmp);
    return count;
}

/* Sum over distinct n-grams of min(count in h, count in r), both sorted. */
static int64_t clipped_matches(const gram *h, size_t nh, const gram *r, size_t nr)
{
    int64_t m = 0;
    size_t i = 0, j = 0;
    while (i < nh && j < nr) {
        const int c = gram_cmp(&h[i], &r[j]);
        if (c < 0) i++;
        else if (c > 0) j++;
        else m++, i++, j++; /* each pair of equal n-grams is one clipped match */
    }
    return m;
}

/* Ids of the words of two token lists: equal strings, equal ids (1-based). */
typedef struct {
    const char *s;
    size_t len;
    int who; /* index into the joint id array */
} word_ref;

static int word_cmp(const void *a, const void *b)
{
    const word_ref *x = a, *y = b;
    const size_t n = x->len < y->len ? x->len : y->len;
    const int c = memcmp(x->s, y->s, n);
    return c ? c : (x->len > y->len) - (x->len < y->len);
}

static qkv_status oom(qkv_error *err)
{
    return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for a sentence's n-grams");
}

qkv_status qkv_sacrebleu_add(qkv_sacrebleu_stats *st, const char *hyp, const char *ref,
                             qkv_error *err)
{
    if (!st || !hyp || !ref) return qkv_fail(err, QKV_ERR_ARG, "sacreBLEU needs stats, a "
                                             "hypothesis and a reference");
    buf th = {0}, tr = {0};
    tokenize_13a_raw(&th, hyp), tokenize_13a_raw(&tr, ref);
    size_t *sh = NULL, *sr = NULL;
    const int nh = th.failed ? -1 : split_words(th.s, th.n, &sh);
    const int nr = tr.failed || nh < 0 ? -1 : split_words(tr.s, tr.n, &sr);
    word_ref *w = nh >= 0 && nr >= 0 ? malloc(((size_t)nh + nr + 1) * sizeof *w) : NULL;
    uint32_t *ids = w ? malloc(((size_t)nh + nr + 1) * sizeof *ids) : NULL;
    gram *gh = ids ? malloc(((size_t)nh + 1) * sizeof *gh) : NULL;
    gram *gr = gh ? malloc(((size_t)nr + 1) * sizeof *gr) : NULL;
    qkv_status status = QKV_OK;
    if (!gr) {
        status = oom(err);
        goto done;
    }
    for (int k = 0; k < nh + nr; k++) {
        const size_t *span = k < nh ? sh + 2 * k : sr + 2 * (k - nh);
        w[k] = (word_ref){(k < nh ? th.s : tr.s) + span[0], span[1], k};
    }
    qsort(w, (size_t)nh + nr, sizeof *w, word_cmp);
    for (int k = 0, id = 0; k < nh + nr; k++) {
        if (k == 0 || word_cmp(&w[k - 1], &w[k])) id++;
        ids[w[k].who] = (uint32_t)id;
    }
    st->hyp_len += nh, st->ref_len += nr;
    for (int n = 1; n <= QKV_SACREBLEU_ORDER; n++) {
        const size_t ch = grams_of(gh, ids, (size_t)nh, n);
        const size_t cr = grams_of(gr, ids + nh, (size_t)nr, n);
        st->total[n - 1] += (int64_t)ch;
        st->correct[n - 1] += clipped_matches(gh, ch, gr, cr);
    }
done:
    free(th.s), free(tr.s), free(sh), free(sr), free(w), free(ids), free(gh), free(gr);
    return status;
}

double qkv_sacrebleu_score(const qkv_sacrebleu_stats *st, int effective_order,
                           double *precisions, double *brevity)
{
    const double c = (double)st->hyp_len, r = (double)st->ref_len;
    const double bp = c < r ? (c > 0 ? exp(1.0 - r / c) : 0.0) : 1.0;
    double p[QKV_SACREBLEU_ORDER] = {0}, smooth = 1.0, score = 0.0;
    int any = 0, order = QKV_SACREBLEU_ORDER;
    for (int n = 0; n < QKV_SACREBLEU_ORDER; n++) any |= st->correct[n] > 0;
    for (int n = 0; any && n < QKV_SACREBLEU_ORDER; n++) {
        if (st->total[n] == 0) break;
        if (effective_order) order = n + 1;
        if (st->correct[n] == 0) { /* mteval's exp smoothing: 1 / (2^k total) */
            smooth *= 2.0;
            p[n] = 100.0 / (smooth * (double)st->total[n]);
        } else p[n] = 100.0 * (double)st->correct[n] / (double)st->total[n];
    }
    if (any) { /* no match at all: 0, as sacreBLEU (no smoothing makes something of nothing) */
        double sum = 0.0;
        for (int n = 0; n < order; n++) sum += p[n] > 0.0 ? log(p[n]) : -9999999999.0;
        score = bp * exp(sum / order);
    }
    if (precisions) memcpy(precisions, p, sizeof p);
    if (brevity) *brevity = bp;
    return score;
}

size_t qkv_sacrebleu_format(char *out, size_t cap, const qkv_sacrebleu_stats *st)
{
    double p[QKV_SACREBLEU_ORDER], bp;
    const double score = qkv_sacrebleu_score(st, 0, p, &bp);
    const double ratio = st->ref_len ? (double)st->hyp_len / (double)st->ref_len : 0.0;
    const int n = snprintf(out, cap, "BLEU|%s = %.2f %.1f/%.1f/%.1f/%.1f (BP = %.3f ratio = %.3f "
                           "hyp_len = %lld ref_len = %lld)", qkv_sacrebleu_signature(), score,
                           p[0], p[1], p[2], p[3], bp, ratio, (long long)st->hyp_len,
                           (long long)st->ref_len);
    return n < 0 ? 0 : (size_t)n;
}

const char *qkv_sacrebleu_signature(void)
{
    return "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0";
}

/* ---- chrF ---- */

/* The code points of s without its whitespace (chrF's default: spaces are not characters),
 * into *cps; returns how many, -1 out of memory. */
static long code_points(const char *s, uint32_t **cps)
{
    const size_t n = strlen(s);
    *cps = malloc((n + 1) * sizeof **cps);
    if (!*cps) return -1;
    long count = 0;
    for (size_t i = 0; i < n;) {
        int len;
        const uint32_t cp = utf8_next((const unsigned char *)s + i, n - i, &len);
        i += len;
        if (!py_space(cp)) (*cps)[count++] = cp;
    }
    return count;
}

qkv_status qkv_chrf_add(qkv_chrf_stats *st, const char *hyp, const char *ref, qkv_error *err)
{
    if (!st || !hyp || !ref) return qkv_fail(err, QKV_ERR_ARG, "chrF needs stats, a "
                                             "hypothesis and a reference");
    uint32_t *h = NULL, *r = NULL;
    const long nh = code_points(hyp, &h), nr = nh < 0 ? -1 : code_points(ref, &r);
    gram *gh = nr >= 0 ? malloc(((size_t)nh + 1) * sizeof *gh) : NULL;
    gram *gr = gh ? malloc(((size_t)nr + 1) * sizeof *gr) : NULL;
    qkv_status status = QKV_OK;
    if (!gr) status = oom(err);
    for (int n = 1; !status && n <= QKV_CHRF_ORDER; n++) {
        const size_t ch = grams_of(gh, h, (size_t)nh, n), cr = grams_of(gr, r, (size_t)nr, n);
        st->hyp[n - 1] += cr ? (int64_t)ch : 0; /* as sacreBLEU: no reference n-grams, no count */
        st->ref[n - 1] += (int64_t)cr;
        st->match[n - 1] += clipped_matches(gh, ch, gr, cr);
    }
    free(h), free(r), free(gh), free(gr);
    return status;
}

double qkv_chrf_score(const qkv_chrf_stats *st)
{
    const double beta2 = 4.0; /* beta = 2: recall counts twice as much as precision */
    double prec = 0.0, rec = 0.0;
    int order = 0;
    for (int n = 0; n < QKV_CHRF_ORDER; n++) {
        if (st->hyp[n] <= 0 || st->ref[n] <= 0) continue; /* the effective order */
        prec += (double)st->match[n] / (double)st->hyp[n];
        rec += (double)st->match[n] / (double)st->ref[n];
        order++;
    }
    if (!order) return 0.0;
    prec /= order, rec /= order;
    if (prec + rec == 0.0) return 0.0;
    return 100.0 * (1.0 + beta2) * prec * rec / (beta2 * prec + rec);
}

const char *qkv_chrf_signature(void)
{
    return "nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:2.6.0";
}
