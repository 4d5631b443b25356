/* SPDX-License-Identifier: MIT */
/* Every JSON text qkv reads, read one way; see qkv_json_parse in qkv/core.h.
 *
 * cJSON parses the value; then one walk over the text, in step with cJSON's tree (it keeps
 * members and elements in the order of the text), checks each object's keys and keeps each
 * number's text in its item's valuestring (cJSON_Delete frees it), from which a 64-bit
 * integer is read exactly: cJSON holds numbers as doubles, which round above 2^53. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>

#include "core/internal.h"

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* Past white space as cJSON skips it: every byte up to 32 (NUL is refused before). */
static const char *skip_space(const char *p, const char *end)
{
    while (p < end && (unsigned char)*p <= 32) p++;
    return p;
}

/* p at the opening quote of a string cJSON accepted: just past its closing quote. */
static const char *skip_string(const char *p, const char *end)
{
    for (p++; p < end && *p != '"'; p++)
        if (*p == '\\') p++;
    return p < end ? p + 1 : end;
}

/* p at the opening quote of a string: where in it a \u0000 escape stands (cJSON ends the
 * string there, silently dropping the rest), or NULL. */
static const char *escaped_nul(const char *p, const char *end)
{
    for (p++; p < end && *p != '"'; p++)
        if (*p == '\\') {
            if (end - p >= 6 && !memcmp(p + 1, "u0000", 5)) return p;
            p++;
        }
    return NULL;
}

static int compare_keys(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The first key that o holds twice, or NULL (*nomem on a failed allocation). */
static const char *duplicate_key(const cJSON *o, int *nomem)
{
    size_t n = 0;
    for (const cJSON *c = o->child; c; c = c->next) n++;
    if (n < 2) return NULL;
    const char **keys = malloc(n * sizeof *keys);
    if (!keys) return *nomem = 1, NULL;
    n = 0;
    for (const cJSON *c = o->child; c; c = c->next) keys[n++] = c->string;
    qsort(keys, n, sizeof *keys, compare_keys);
    const char *dup = NULL;
    for (size_t i = 1; i < n && !dup; i++)
        if (!strcmp(keys[i - 1], keys[i])) dup = keys[i];
    free(keys);
    return dup;
}

typedef struct {
    const char *text, *end, *name;
    qkv_error *err;
} walk_state;

static qkv_status no_escaped_nul(const walk_state *w, const char *at)
{
    const char *nul = escaped_nul(at, w->end);
    return nul ? qkv_fail(w->err, QKV_ERR_FORMAT, "%s: a NUL character (\\u0000) in a string "
                          "(at byte %td): a text holds none", w->name, nul - w->text)
               : QKV_OK;
}

/* Walks the value at *p (cJSON's item for it: x), moving *p past it. */
static qkv_status walk(walk_state *w, cJSON *x, const char **p, int depth)
{
    const char *at = skip_space(*p, w->end);
    if (!x || at >= w->end || depth > 2 * CJSON_NESTING_LIMIT)
        return qkv_fail(w->err, QKV_ERR_FORMAT, "%s: the JSON reader lost its place at byte %td",
                        w->name, at - w->text);
    qkv_status st = QKV_OK;
    if (*at == '{' || *at == '[') {
        const char close = *at == '{' ? '}' : ']';
        if (close == '}') {
            int nomem = 0;
            const char *dup = duplicate_key(x, &nomem);
            if (nomem) return qkv_fail(w->err, QKV_ERR_NOMEM, "%s: out of memory", w->name);
            if (dup)
                return qkv_fail(w->err, QKV_ERR_FORMAT, "%s: the key \"%.100s\" appears twice in "
                                "one object (which one would count?)", w->name, dup);
        }
        at = skip_space(at + 1, w->end);
        for (cJSON *c = x->child; !st && c; c = c->next) {
            if (close == '}') { /* "key" : */
                at = skip_space(at, w->end);
                if ((st = no_escaped_nul(w, at))) break;
                at = skip_space(skip_string(at, w->end), w->end);
                at++;
            }
            st = walk(w, c, &at, depth + 1);
            at = skip_space(at, w->end);
            if (at < w->end && *at == ',') at++;
        }
        at = skip_space(at, w->end);
        *p = at < w->end ? at + 1 : at; /* past the closing bracket */
        return st;
    }
    if (*at == '"') {
        *p = skip_string(at, w->end);
        return no_escaped_nul(w, at);
    }
    const char *start = at;
    while (at < w->end && (strchr("+-.eE", *at) || (*at >= '0' && *at <= '9') ||
                           (*at >= 'a' && *at <= 'z')))
        at++;
    *p = at;
    if (cJSON_IsNumber(x)) {
        if (!(x->valuestring = malloc((size_t)(at - start) + 1)))
            return qkv_fail(w->err, QKV_ERR_NOMEM, "%s: out of memory", w->name);
        memcpy(x->valuestring, start, (size_t)(at - start));
        x->valuestring[at - start] = '\0';
    }
    return QKV_OK;
}

qkv_status qkv_json_parse(cJSON **out, const char *text, size_t len, const char *name,
                          qkv_error *err)
{
    if (!out) return qkv_fail(err, QKV_ERR_ARG, "qkv_json_parse: NULL output");
    *out = NULL;
    if (!name) name = "JSON";
    if (!text) return qkv_fail(err, QKV_ERR_ARG, "%s: NULL text", name);
    const char *nul = memchr(text, '\0', len);
    if (nul)
        return qkv_fail(err, QKV_ERR_FORMAT, "%s: contains a NUL byte (at byte %td)", name,
                        nul - text);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!root) {
        const ptrdiff_t at = end && end >= text && end <= text + len ? end - text : 0;
        return qkv_fail(err, QKV_ERR_FORMAT, "%s: not valid JSON (at byte %td)", name, at);
    }
    const char *rest = end;
    while (rest < text + len && is_space(*rest)) rest++;
    if (rest < text + len) {
        cJSON_Delete(root);
        return qkv_fail(err, QKV_ERR_FORMAT, "%s: more after the JSON value (at byte %td): one "
                        "value, and only white space after it", name, rest - text);
    }
    /* JSON's white space is space, tab and line breaks; cJSON also skips other control
     * characters between tokens, which a text that means what it says never holds */
    for (const char *c = text, *stop = text + len; c < stop; c++) {
        if (*c == '"') {
            for (c++; c < stop && *c != '"'; c++)
                if (*c == '\\') c++;
        } else if ((unsigned char)*c < 32 && !is_space(*c)) {
            cJSON_Delete(root);
            return qkv_fail(err, QKV_ERR_FORMAT, "%s: a control character (0x%02x) at byte %td, "
                            "outside any string", name, (unsigned char)*c, c - text);
        }
    }
    walk_state w = {text, text + len, name, err};
    const char *p = len >= 3 && !memcmp(text, "\xEF\xBB\xBF", 3) ? text + 3 : text; /* cJSON skips a BOM */
    qkv_status st = walk(&w, root, &p, 0);
    if (st) return cJSON_Delete(root), st;
    *out = root;
    return QKV_OK;
}

qkv_status qkv_json_load(cJSON **out, const char *path, size_t max_bytes, qkv_error *err)
{
    char *text = NULL;
    size_t len = 0;
    if (out) *out = NULL;
    qkv_status st = qkv_read_regular_file(path, max_bytes, &text, &len, err);
    if (!st) st = qkv_json_parse(out, text, len, path, err);
    free(text);
    return st;
}

int qkv_json_uint64(const cJSON *x, uint64_t *v)
{
    if (!cJSON_IsNumber(x)) return 0;
    const char *s = x->valuestring;
    if (s && *s >= '0' && *s <= '9' && strspn(s, "0123456789") == strlen(s)) {
        errno = 0;
        char *end;
        const unsigned long long u = strtoull(s, &end, 10);
        if (errno || *end) return 0; /* past 2^64 - 1 */
        *v = (uint64_t)u;
        return 1;
    }
    /* another spelling (1e3, 7.0): exact only while a double holds every integer */
    const double d = x->valuedouble;
    if (!(d >= 0.0 && d <= 9007199254740992.0) || d != floor(d)) return 0;
    *v = (uint64_t)d;
    return 1;
}
