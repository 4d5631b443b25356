/* SPDX-License-Identifier: MIT */
/* LibreTranslate's API (serve.h), as its clients call it (libretranslatepy, the npm client,
 * the web front end):
 *   POST /translate          {"q": text | [texts], "source", "target", "format": "text" |
 *                            "html", "alternatives", "api_key"} as JSON or as a form
 *                            (application/x-www-form-urlencoded) -> {"translatedText"}; qkv's
 *                            own "beam" and "max_len" besides
 *   GET|POST /languages      [{"code", "name", "targets"}]: each model's source and targets
 *   POST /detect             refused: qkv serve has no language detector
 *   GET /frontend/settings   the limits a front end shows
 * "source" and "target" choose the model (a model named by its pair, --model en-de=DIR, or a
 * multilingual model's languages); a text's lines are translated one by one (empty lines
 * kept), an HTML text's text nodes one by one with its markup kept. */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli/serve.h"

/* ---- form bodies ------------------------------------------------------------------------ */

static int hex(int c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* s[0..n) percent-decoded ('+' a space) into out (n + 1 bytes); its length, or -1 on a bad
 * escape or a NUL byte. */
static long url_decode(char *out, const char *s, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        int c = (unsigned char)s[i];
        if (c == '+') {
            c = ' ';
        } else if (c == '%') {
            const int hi = i + 1 < n ? hex(s[i + 1]) : -1, lo = i + 2 < n ? hex(s[i + 2]) : -1;
            if (hi < 0 || lo < 0) return -1;
            c = hi * 16 + lo, i += 2;
        }
        if (!c) return -1;
        out[k++] = (char)c;
    }
    out[k] = '\0';
    return (long)k;
}

/* The members a form gives as numbers (a form has only strings). */
static int numeric_field(const char *key)
{
    return !strcmp(key, "alternatives") || !strcmp(key, "beam") || !strcmp(key, "max_len");
}

cJSON *serve_form_parse(const char *body, size_t len, char *msg, size_t cap)
{
    cJSON *o = cJSON_CreateObject();
    char *key = malloc(len + 1), *val = malloc(len + 1);
    int ok = o && key && val;
    for (size_t at = 0; ok && at < len;) {
        const char *field = body + at, *amp = memchr(field, '&', len - at);
        const size_t n = amp ? (size_t)(amp - field) : len - at;
        at += n + 1;
        if (!n) continue;
        const char *eq = memchr(field, '=', n);
        const size_t kn = eq ? (size_t)(eq - field) : n;
        const long kl = url_decode(key, field, kn);
        const long vl = eq ? url_decode(val, eq + 1, n - kn - 1) : (val[0] = '\0', 0);
        if (kl > 0 && vl >= 0 && (!serve_utf8_valid((unsigned char *)key, (size_t)kl) ||
                                  !serve_utf8_valid((unsigned char *)val, (size_t)vl))) {
            serve_refuse(msg, cap, 400, "the form's field at byte %zu is not valid UTF-8 once "
                   "decoded", (size_t)(field - body));
            ok = 0;
        } else if (kl <= 0 || vl < 0) {
            serve_refuse(msg, cap, 400, "the form's field at byte %zu is not percent-encoded text "
                   "(a bad %%-escape, an empty name or a NUL byte)", (size_t)(field - body));
            ok = 0;
        } else if (cJSON_GetObjectItemCaseSensitive(o, key)) {
            serve_refuse(msg, cap, 400, "the form gives \"%.100s\" twice", key);
            ok = 0;
        } else {
            char *end;
            const long v = strtol(val, &end, 10);
            cJSON *x = numeric_field(key) && *val && !*end && labs(v) < 1000000
                           ? cJSON_CreateNumber((double)v) : cJSON_CreateString(val);
            ok = x && cJSON_AddItemToObject(o, key, x);
        }
    }
    free(key), free(val);
    if (ok) return o;
    if (!*msg) serve_refuse(msg, cap, 400, "out of memory for the form");
    cJSON_Delete(o);
    return NULL;
}

/* ---- API keys --------------------------------------------------------------------------- */

struct api_keys {
    int n;
    struct {
        char *key;
        int limit;        /* requests a minute, 0: any */
        double window;    /* serve_now() when the minute began */
        int used;         /* requests in it */
    } *k;
};

void serve_keys_free(struct api_keys *k)
{
    if (!k) return;
    for (int i = 0; i < k->n; i++) free(k->k[i].key);
    free(k->k);
    free(k);
}

/* One line of a keys file: "KEY" or "KEY LIMIT" (# starts a comment line). 0 (with *key NULL
 * for a line without one), or -1 when it is neither. */
static int key_line(char *line, char **key, long *limit)
{
    char *save, *end = NULL;
    *key = strtok_r(line, " \t\r", &save), *limit = 0;
    if (!*key || (*key)[0] == '#') return *key = NULL, 0;
    const char *lim = strtok_r(NULL, " \t\r", &save), *more = strtok_r(NULL, " \t\r", &save);
    if (lim) *limit = strtol(lim, &end, 10);
    return more || strlen(*key) > 256 || (lim && (*end || *limit < 0 || *limit > 1000000)) ? -1
                                                                                            : 0;
}

struct api_keys *serve_keys_load(const char *path)
{
    char *text;
    size_t len;
    qkv_error err = {0};
    if (qkv_read_file(path, 1 << 24, &text, &len, &err)) {
        fprintf(stderr, "qkv serve: --api-keys: %s\n", err.msg);
        return NULL;
    }
    struct api_keys *k = calloc(1, sizeof *k);
    int ok = k && !memchr(text, '\0', len), lineno = 0;
    for (char *line = text, *next; ok && line && *line; line = next) {
        lineno++;
        if ((next = strchr(line, '\n'))) *next++ = '\0';
        char *key;
        long limit;
        if (key_line(line, &key, &limit)) {
            fprintf(stderr, "qkv serve: --api-keys %s:%d: a line is KEY or KEY LIMIT (requests a "
                    "minute, 0 to 1000000)\n", path, lineno);
            ok = 0;
            break;
        }
        if (!key) continue;
        void *grown = realloc(k->k, ((size_t)k->n + 1) * sizeof *k->k);
        if (!grown) {
            ok = 0;
            break;
        }
        k->k = grown;
        k->k[k->n].key = strdup(key), k->k[k->n].limit = (int)limit;
        k->k[k->n].window = 0, k->k[k->n].used = 0;
        ok = !!k->k[k->n++].key;
    }
    free(text);
    if (ok && !k->n) {
        fprintf(stderr, "qkv serve: --api-keys %s: no key in it\n", path);
        ok = 0;
    }
    if (!ok) serve_keys_free(k), k = NULL;
    return k;
}

int serve_key_check(server *s, const cJSON *req, char *msg, size_t cap)
{
    if (!s->keys) return 0;
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(req, "api_key");
    if (!cJSON_IsString(x) || !*x->valuestring)
        return serve_refuse(msg, cap, 403, "an API key is needed: \"api_key\"");
    int code = 403;
    serve_refuse(msg, cap, 403, "invalid API key");
    pthread_mutex_lock(&s->lock);
    for (int i = 0; i < s->keys->n; i++) {
        if (strcmp(s->keys->k[i].key, x->valuestring)) continue;
        const double now = serve_now();
        if (now - s->keys->k[i].window >= 60.0) s->keys->k[i].window = now, s->keys->k[i].used = 0;
        if (s->keys->k[i].limit && s->keys->k[i].used >= s->keys->k[i].limit) {
            code = serve_refuse(msg, cap, 429, "too many requests for this API key: %d a minute",
                          s->keys->k[i].limit);
        } else {
            s->keys->k[i].used++;
            code = 0;
        }
        break;
    }
    pthread_mutex_unlock(&s->lock);
    return code;
}

/* ---- languages -------------------------------------------------------------------------- */

/* English names of common codes (ISO 639-1, and NLLB's for a few); others are named by code. */
static const char *language_name(const char *code)
{
    static const char *const names[][2] = {
        {"ar", "Arabic"},     {"bg", "Bulgarian"}, {"cs", "Czech"},      {"da", "Danish"},
        {"de", "German"},     {"el", "Greek"},     {"en", "English"},    {"es", "Spanish"},
        {"et", "Estonian"},   {"fi", "Finnish"},   {"fr", "French"},     {"he", "Hebrew"},
        {"hi", "Hindi"},      {"hu", "Hungarian"}, {"id", "Indonesian"}, {"it", "Italian"},
        {"ja", "Japanese"},   {"ko", "Korean"},    {"lt", "Lithuanian"}, {"lv", "Latvian"},
        {"nl", "Dutch"},      {"no", "Norwegian"}, {"pl", "Polish"},     {"pt", "Portuguese"},
        {"ro", "Romanian"},   {"ru", "Russian"},   {"sk", "Slovak"},     {"sl", "Slovenian"},
        {"sv", "Swedish"},    {"tr", "Turkish"},   {"uk", "Ukrainian"},  {"zh", "Chinese"},
        {"eng_Latn", "English"}, {"deu_Latn", "German"}, {"fra_Latn", "French"},
        {"spa_Latn", "Spanish"},
    };
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (!strcmp(names[i][0], code)) return names[i][1];
    return code;
}

/* Whether a multilingual model m has the language code. */
static int has_language(const served_model *m, const char *code)
{
    for (const char *p = m->languages; p && *p;) {
        const char *token = p + strlen(p) + 1;
        if (!strcmp(p, code)) return 1;
        p = token + strlen(token) + 1;
    }
    return 0;
}

/* Whether a multilingual model reads its source's language (a language token before the
 * source): then its sources are its languages, else only its pair's source. */
static int prefixed_source(const served_model *m)
{
    return qkv_translator_tokenizer(m->tr)->prefixed_source;
}

/* Whether m translates source into target. */
static int translates(const served_model *m, const char *source, const char *target)
{
    if (!m->tr) return 0;
    if (!m->languages) return m->source[0] && !strcmp(m->source, source) &&
                              !strcmp(m->target, target);
    const int src_ok = prefixed_source(m) ? has_language(m, source)
                                          : m->source[0] && !strcmp(m->source, source);
    return src_ok && has_language(m, target) && strcmp(source, target);
}

/* Adds target to the entry of source in list (made when missing). */
static void add_pair(cJSON *list, const char *source, const char *target)
{
    cJSON *e = NULL;
    cJSON_ArrayForEach(e, list)
        if (!strcmp(cJSON_GetObjectItemCaseSensitive(e, "code")->valuestring, source)) break;
    if (!e) {
        e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "code", source);
        cJSON_AddStringToObject(e, "name", language_name(source));
        cJSON_AddArrayToObject(e, "targets");
        cJSON_AddItemToArray(list, e);
    }
    cJSON *targets = cJSON_GetObjectItemCaseSensitive(e, "targets"), *t;
    cJSON_ArrayForEach(t, targets)
        if (!strcmp(t->valuestring, target)) return;
    cJSON_AddItemToArray(targets, cJSON_CreateString(target));
}

/* Every pair the server translates, as /languages lists them. */
static cJSON *language_list(const server *s)
{
    cJSON *list = cJSON_CreateArray();
    for (int i = 0; i < s->n_models; i++) {
        const served_model *m = &s->models[i];
        if (!m->tr) continue;
        if (!m->languages) {
            if (m->source[0]) add_pair(list, m->source, m->target);
            continue;
        }
        for (const char *p = m->languages; *p;) { /* sources */
            const char *pt = p + strlen(p) + 1, *next = pt + strlen(pt) + 1;
            if (prefixed_source(m) ? 1 : m->source[0] && !strcmp(m->source, p)) {
                for (const char *q = m->languages; *q;) {
                    const char *qt = q + strlen(q) + 1;
                    if (strcmp(p, q)) add_pair(list, p, q);
                    q = qt + strlen(qt) + 1;
                }
            }
            p = next;
        }
        if (!prefixed_source(m) && m->source[0] && !has_language(m, m->source))
            for (const char *q = m->languages; *q;) {
                const char *qt = q + strlen(q) + 1;
                add_pair(list, m->source, q);
                q = qt + strlen(qt) + 1;
            }
    }
    return list;
}

enum MHD_Result serve_languages(server *s, struct MHD_Connection *c, conn *cn)
{
    return serve_send_json(c, cn, 200, language_list(s));
}

/* The pairs available, "en->de, de->en", for messages (at most cap bytes). */
static void pairs_text(const server *s, char *out, size_t cap)
{
    cJSON *list = language_list(s), *e;
    size_t n = 0;
    int count = 0;
    out[0] = '\0';
    cJSON_ArrayForEach(e, list) {
        const char *src = cJSON_GetObjectItemCaseSensitive(e, "code")->valuestring;
        cJSON *t;
        cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(e, "targets")) {
            if (n + 40 < cap)
                n += (size_t)snprintf(out + n, cap - n, "%s%s->%s", count ? ", " : "", src,
                                      t->valuestring);
            else if (n + 5 < cap && !strstr(out, "..."))
                n += (size_t)snprintf(out + n, cap - n, ", ...");
            count++;
        }
    }
    if (!count) snprintf(out, cap, "none named: --model SRC-TGT=DIR names a model's pair");
    cJSON_Delete(list);
}

enum MHD_Result serve_detect(server *s, struct MHD_Connection *c, conn *cn, const cJSON *req)
{
    char msg[600];
    const int code = serve_key_check(s, req, msg, sizeof msg);
    if (code) return serve_send_error(c, cn, code, "%s", msg);
    return serve_send_error(c, cn, 400, "language detection is not available: qkv serve has no "
                            "language detector; name the source language");
}

enum MHD_Result serve_frontend_settings(server *s, struct MHD_Connection *c, conn *cn)
{
    cJSON *o = cJSON_CreateObject(), *lang = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "charLimit", MAX_SOURCE_BYTES);
    cJSON_AddNumberToObject(o, "frontendTimeout", 500);
    cJSON_AddBoolToObject(o, "apiKeys", s->keys != NULL);
    cJSON_AddBoolToObject(o, "keyRequired", s->keys != NULL);
    cJSON_AddBoolToObject(o, "suggestions", 0);
    cJSON_AddBoolToObject(o, "filesTranslation", 0);
    cJSON_AddArrayToObject(o, "supportedFilesFormat");
    cJSON *list = language_list(s), *first = cJSON_GetArrayItem(list, 0);
    if (first) {
        cJSON *src = cJSON_CreateObject(), *tgt = cJSON_CreateObject();
        const char *code = cJSON_GetObjectItemCaseSensitive(first, "code")->valuestring;
        const char *to = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(first, "targets"),
                                            0)->valuestring;
        cJSON_AddStringToObject(src, "code", code);
        cJSON_AddStringToObject(src, "name", language_name(code));
        cJSON_AddStringToObject(tgt, "code", to);
        cJSON_AddStringToObject(tgt, "name", language_name(to));
        cJSON_AddItemToObject(lang, "source", src), cJSON_AddItemToObject(lang, "target", tgt);
    }
    cJSON_Delete(list);
    cJSON_AddItemToObject(o, "language", lang);
    return serve_send_json(c, cn, 200, o);
}

/* The translation model for source and target (either may be NULL), and the languages to
 * set on a multilingual one (*src_lang, *tgt_lang; NULL: none); NULL with the status and msg
 * when no model fits. */
static served_model *choose_model(server *s, const char *source, const char *target,
                                  const char **src_lang, const char **tgt_lang, int *code,
                                  char *msg, size_t cap)
{
    char pairs[300];
    *src_lang = *tgt_lang = NULL;
    int n = 0;
    served_model *only = NULL;
    for (int i = 0; i < s->n_models; i++)
        if (s->models[i].tr) only = &s->models[i], n++;
    if (!n) {
        *code = serve_refuse(msg, cap, 400, "this server holds a language model: use /v1/completions");
        return NULL;
    }
    /* one model that names no languages translates whatever the request calls them */
    if (n == 1 && !only->source[0] && !only->languages) return only;
    for (int pass = 0; source && target && pass < 2; pass++) /* models named by a pair first */
        for (int i = 0; i < s->n_models; i++) {
            served_model *m = &s->models[i];
            if (!!m->languages != pass || !translates(m, source, target)) continue;
            if (m->languages) *src_lang = prefixed_source(m) ? source : NULL, *tgt_lang = target;
            return m;
        }
    pairs_text(s, pairs, sizeof pairs); /* none fits: why not */
    if (source && !strcmp(source, "auto")) {
        *code = serve_refuse(msg, cap, 400, "source \"auto\": qkv serve has no language detector; "
                       "name the source language (pairs: %s)", pairs);
        return NULL;
    }
    if (!source || !target || !*source || !*target) {
        *code = serve_refuse(msg, cap, 400, "name \"source\" and \"target\" (pairs: %s)", pairs);
        return NULL;
    }
    *code = serve_refuse(msg, cap, 400, "no model translates \"%.40s\" into \"%.40s\" (pairs: %s)",
                   source, target, pairs);
    return NULL;
}

/* ---- a request's texts: lines, or HTML's text nodes ------------------------------------- */

/* One part of a text as answered: verbatim bytes, or segment seg (its translation) between
 * the whitespace it had. */
typedef struct {
    const char *at;   /* into the request's text */
    size_t len;       /* verbatim: bytes; a segment: its text's, whitespace included */
    int seg;          /* -1: verbatim */
    int html;         /* a segment of HTML: its translation escaped */
} part;

/* A request's texts as parts, and the segments to translate (each one line of text). */
typedef struct {
    int n_items, is_list;
    int *first;        /* (n_items + 1) each item's first part */
    part *parts;
    int n_parts, cap_parts;
    char **seg;        /* (n_seg) malloc'd */
    int n_seg, cap_seg;
} plan;

static void plan_free(plan *p)
{
    for (int i = 0; i < p->n_seg; i++) free(p->seg[i]);
    free(p->seg), free(p->parts), free(p->first);
}

static int add_part(plan *p, part x)
{
    if (p->n_parts == p->cap_parts) {
        const int cap = p->cap_parts ? 2 * p->cap_parts : 16;
        part *grown = realloc(p->parts, (size_t)cap * sizeof *grown);
        if (!grown) return -1;
        p->parts = grown, p->cap_parts = cap;
    }
    p->parts[p->n_parts++] = x;
    return 0;
}

/* Adds the segment text (taken over) and its part; -1 when out of memory or (413) over
 * MAX_LINES. */
static int add_segment(plan *p, char *text, const char *at, size_t len, int html)
{
    if (!text) return -1;
    if (p->n_seg == MAX_LINES) return free(text), 413;
    if (p->n_seg == p->cap_seg) {
        const int cap = p->cap_seg ? 2 * p->cap_seg : 16;
        char **grown = realloc(p->seg, (size_t)cap * sizeof *grown);
        if (!grown) return free(text), -1;
        p->seg = grown, p->cap_seg = cap;
    }
    p->seg[p->n_seg] = text;
    return add_part(p, (part){at, len, p->n_seg++, html});
}

static int blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isspace((unsigned char)s[i])) return 0;
    return 1;
}

/* A plain text: each line a segment (its \r kept out), empty and blank lines verbatim. */
static int plan_text(plan *p, const char *t)
{
    for (const char *line = t;;) {
        const char *nl = strchr(line, '\n');
        size_t n = nl ? (size_t)(nl - line) : strlen(line);
        const size_t cr = n && line[n - 1] == '\r';
        int rc = blank(line, n - cr) ? add_part(p, (part){line, n - cr, -1, 0})
                                     : add_segment(p, strndup(line, n - cr), line, n - cr, 0);
        if (!rc && (cr || nl)) rc = add_part(p, (part){line + n - cr, cr + !!nl, -1, 0});
        if (rc) return rc;
        if (!nl) return 0;
        line = nl + 1;
    }
}

/* HTML's text t[0..n) as the text it shows: entities decoded (the common named ones and
 * numeric ones; others kept as written), whitespace runs one space, the ends trimmed. */
static char *html_text(const char *t, size_t n)
{
    static const char *const named[][2] = {{"amp", "&"}, {"lt", "<"}, {"gt", ">"},
                                           {"quot", "\""}, {"apos", "'"}, {"nbsp", " "}};
    char *out = malloc(4 * n + 1);
    size_t k = 0;
    int space = 0;
    if (!out) return NULL;
    for (size_t i = 0; i < n; i++) {
        if (isspace((unsigned char)t[i])) {
            space = k > 0;
            continue;
        }
        if (space) out[k++] = ' ', space = 0;
        const char *semi = t[i] == '&' ? memchr(t + i, ';', n - i < 12 ? n - i : 12) : NULL;
        if (semi) {
            const size_t len = (size_t)(semi - t - i - 1);
            const char *name = t + i + 1, *rep = NULL;
            char num[8];
            for (size_t e = 0; e < sizeof named / sizeof *named && !rep; e++)
                if (strlen(named[e][0]) == len && !strncmp(name, named[e][0], len))
                    rep = named[e][1];
            if (!rep && len > 1 && name[0] == '#') {
                char *end;
                const long cp = name[1] == 'x' || name[1] == 'X' ? strtol(name + 2, &end, 16)
                                                                  : strtol(name + 1, &end, 10);
                if (end == semi && cp > 0 && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF)) {
                    int m = 0; /* UTF-8 of cp */
                    if (cp < 0x80) num[m++] = (char)cp;
                    else if (cp < 0x800) num[m++] = (char)(0xC0 | cp >> 6),
                                         num[m++] = (char)(0x80 | (cp & 0x3F));
                    else if (cp < 0x10000) num[m++] = (char)(0xE0 | cp >> 12),
                                           num[m++] = (char)(0x80 | (cp >> 6 & 0x3F)),
                                           num[m++] = (char)(0x80 | (cp & 0x3F));
                    else num[m++] = (char)(0xF0 | cp >> 18),
                         num[m++] = (char)(0x80 | (cp >> 12 & 0x3F)),
                         num[m++] = (char)(0x80 | (cp >> 6 & 0x3F)),
                         num[m++] = (char)(0x80 | (cp & 0x3F));
                    num[m] = '\0', rep = num;
                }
            }
            if (rep) {
                k += (size_t)sprintf(out + k, "%s", rep);
                i = (size_t)(semi - t);
                continue;
            }
        }
        out[k++] = t[i];
    }
    out[k] = '\0';
    return out;
}

/* Whether t (at a '<') opens the element name (case-insensitive), as <name> or <name ...>. */
static int opens(const char *t, const char *name)
{
    const size_t n = strlen(name);
    return !strncasecmp(t + 1, name, n) && (t[n + 1] == '>' || isspace((unsigned char)t[n + 1]));
}

/* An HTML text: tags, comments, declarations and the content of script and style kept
 * verbatim; each text node with letters in it a segment. 0, -1 (out of memory), 413, or 400
 * with *bad the byte where a tag (or comment, or script) begins that does not end. */
static int plan_html(plan *p, const char *t, size_t *bad)
{
    const size_t n = strlen(t);
    for (size_t i = 0; i < n;) {
        if (t[i] == '<') {
            const char *end;
            if (!strncmp(t + i, "<!--", 4)) {
                end = strstr(t + i + 4, "-->");
                if (end) end += 2;
            } else if (opens(t + i, "script") || opens(t + i, "style")) {
                const char *close = strncasecmp(t + i + 1, "script", 6) ? "</style" : "</script";
                const char *c = t + i;
                while ((c = strchr(c + 1, '<')) && strncasecmp(c, close, strlen(close))) {}
                end = c ? strchr(c, '>') : NULL;
            } else {
                end = strchr(t + i, '>');
            }
            if (!end) return *bad = i, 400;
            const size_t len = (size_t)(end - t - i) + 1;
            if (add_part(p, (part){t + i, len, -1, 0})) return -1;
            i += len;
            continue;
        }
        const char *lt = strchr(t + i, '<');
        const size_t len = lt ? (size_t)(lt - t - i) : n - i;
        size_t lead = 0, trail = 0;
        while (lead < len && isspace((unsigned char)t[i + lead])) lead++;
        while (trail < len - lead && isspace((unsigned char)t[i + len - 1 - trail])) trail++;
        int rc = 0;
        if (lead == len) {
            rc = add_part(p, (part){t + i, len, -1, 0});
        } else {
            char *text = html_text(t + i + lead, len - lead - trail);
            if (lead) rc = add_part(p, (part){t + i, lead, -1, 0});
            if (!rc && text && blank(text, strlen(text)))
                rc = add_part(p, (part){t + i + lead, len - lead - trail, -1, 0}), free(text);
            else if (!rc) rc = add_segment(p, text, t + i + lead, len - lead - trail, 1);
            if (!rc && trail) rc = add_part(p, (part){t + i + len - trail, trail, -1, 0});
        }
        if (rc) return rc;
        i += len;
    }
    return 0;
}

/* The plan of q (a string, or an array of them): 0, or the status with msg. */
static int make_plan(plan *p, const cJSON *q, int html, char *msg, size_t cap)
{
    memset(p, 0, sizeof *p);
    p->is_list = cJSON_IsArray(q), p->n_items = p->is_list ? cJSON_GetArraySize(q) : 1;
    if (!(p->first = malloc(((size_t)p->n_items + 1) * sizeof *p->first)))
        return serve_refuse(msg, cap, 500, "out of memory");
    for (int i = 0; i < p->n_items; i++) {
        const char *t = (p->is_list ? cJSON_GetArrayItem(q, i) : q)->valuestring;
        size_t bad = 0;
        p->first[i] = p->n_parts;
        const int rc = html ? plan_html(p, t, &bad) : plan_text(p, t);
        if (rc == 413)
            return serve_refuse(msg, cap, 413, "more than %d lines%s in \"q\": send fewer per request",
                          MAX_LINES, html ? " (text nodes)" : "");
        if (rc == 400)
            return serve_refuse(msg, cap, 400, "\"q\"[%d] is not HTML qkv can read: the tag, comment "
                          "or script at byte %zu does not end", i, bad);
        if (rc) return serve_refuse(msg, cap, 500, "out of memory");
    }
    p->first[p->n_items] = p->n_parts;
    return 0;
}

/* ---- POST /translate -------------------------------------------------------------------- */

/* "q" and the other members of a translation request checked: 0, or the status with msg. */
static int check_translate(const cJSON *req, char *msg, size_t cap)
{
    const cJSON *q = cJSON_GetObjectItemCaseSensitive(req, "q");
    const int is_list = cJSON_IsArray(q);
    if (!cJSON_IsString(q) && !is_list)
        return serve_refuse(msg, cap, 400, "\"q\" must be a string or an array of strings");
    const int n = is_list ? cJSON_GetArraySize(q) : 1;
    if (n > MAX_SOURCES)
        return serve_refuse(msg, cap, 413, "%d texts in \"q\": at most %d per request", n, MAX_SOURCES);
    for (int i = 0; i < n; i++) {
        const cJSON *x = is_list ? cJSON_GetArrayItem(q, i) : q;
        if (!cJSON_IsString(x)) return serve_refuse(msg, cap, 400, "\"q\"[%d] must be a string", i);
        if (strlen(x->valuestring) > MAX_SOURCE_BYTES)
            return serve_refuse(msg, cap, 413, "\"q\"[%d] has %zu bytes: at most %d", i,
                          strlen(x->valuestring), MAX_SOURCE_BYTES);
    }
    static const char *const strings[] = {"source", "target", "format", "api_key"};
    for (size_t k = 0; k < sizeof strings / sizeof *strings; k++) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(req, strings[k]);
        if (x && !cJSON_IsString(x) && !cJSON_IsNull(x))
            return serve_refuse(msg, cap, 400, "\"%s\" must be a string", strings[k]);
    }
    const cJSON *format = cJSON_GetObjectItemCaseSensitive(req, "format");
    if (cJSON_IsString(format) && strcmp(format->valuestring, "text") &&
        strcmp(format->valuestring, "html"))
        return serve_refuse(msg, cap, 400, "\"format\" must be \"text\" or \"html\"");
    return 0;
}

/* The job of the plan's segments (taken over); NULL when out of memory. */
static job *translate_job(served_model *m, plan *p, int beam, int alternatives, int max_len,
                          const char *src_lang, const char *tgt_lang)
{
    job *j = job_new();
    if (!j) return NULL;
    const int n = p->n_seg;
    j->kind = JOB_TRANSLATE, j->m = m, j->n = n, j->max_len = max_len;
    j->n_best = alternatives + 1;
    j->beam = beam > j->n_best ? beam : j->n_best;
    j->src = p->seg, p->seg = NULL, p->n_seg = p->cap_seg = 0;
    j->text = calloc((size_t)n * j->n_best + 1, sizeof *j->text);
    j->score = calloc((size_t)n * j->n_best + 1, sizeof *j->score);
    j->slot = malloc(((size_t)n + 1) * sizeof *j->slot);
    j->cut = calloc((size_t)n + 1, sizeof *j->cut);
    int ok = j->text && j->score && j->slot && j->cut;
    if (src_lang) ok = ok && (j->src_lang = strdup(src_lang));
    if (tgt_lang) ok = ok && (j->tgt_lang = strdup(tgt_lang));
    for (int i = 0; ok && i < n; i++) j->slot[i] = -1;
    if (!ok) job_free(j), j = NULL;
    return j;
}

/* Appends s[0..n) to *out (growing), HTML-escaped when html; -1 when out of memory. */
static int append(char **out, size_t *len, size_t *cap, const char *s, size_t n, int html)
{
    const size_t need = *len + (html ? 5 * n : n) + 1;
    if (need > *cap) {
        const size_t c = 2 * need;
        char *grown = realloc(*out, c);
        if (!grown) return -1;
        *out = grown, *cap = c;
    }
    for (size_t i = 0; i < n; i++) {
        const char *rep = !html ? NULL : s[i] == '&' ? "&amp;" : s[i] == '<' ? "&lt;"
                                       : s[i] == '>' ? "&gt;" : NULL;
        if (rep) *len += (size_t)sprintf(*out + *len, "%s", rep);
        else (*out)[(*len)++] = s[i];
    }
    (*out)[*len] = '\0';
    return 0;
}

/* Item i's text with hypothesis k of each segment (the best where a segment has fewer). */
static cJSON *item_text(const plan *p, const job *j, int i, int k)
{
    char *out = NULL;
    size_t len = 0, cap = 0;
    int ok = !append(&out, &len, &cap, "", 0, 0);
    for (int x = p->first[i]; ok && x < p->first[i + 1]; x++) {
        const part *pt = &p->parts[x];
        if (pt->seg < 0) {
            ok = !append(&out, &len, &cap, pt->at, pt->len, 0);
            continue;
        }
        const char *h = j->text[(size_t)pt->seg * j->n_best + k];
        if (!h) h = j->text[(size_t)pt->seg * j->n_best];
        if (!h) h = "";
        ok = !append(&out, &len, &cap, h, strlen(h), pt->html);
    }
    cJSON *o = ok ? cJSON_CreateString(out) : NULL;
    free(out);
    return o;
}

/* {"translatedText", "alternatives" (n-best), "scores" (beam search: each text's, the sum
 * over its lines), "truncated" (a line longer than the model's max_len, cut to it)}: each a
 * list when "q" was one, else the one text's. arg: the plan. */
static cJSON *translation_json(const server *s, const job *j, const void *arg)
{
    (void)s;
    const plan *p = arg;
    cJSON *o = cJSON_CreateObject();
    cJSON *texts = cJSON_CreateArray(), *alts = cJSON_CreateArray(), *scores = cJSON_CreateArray();
    cJSON *cut = cJSON_CreateArray();
    int any_cut = 0;
    for (int i = 0; i < p->n_items; i++) {
        cJSON_AddItemToArray(texts, item_text(p, j, i, 0));
        cJSON *a = cJSON_CreateArray(), *sc = cJSON_CreateArray();
        int item_cut = 0;
        for (int k = 0; k < j->n_best; k++) {
            double sum = 0.0;
            int found = 1;
            for (int x = p->first[i]; x < p->first[i + 1]; x++) {
                const int g = p->parts[x].seg;
                if (g < 0) continue;
                const size_t h = (size_t)g * j->n_best + k;
                found &= j->text[h] != NULL, sum += j->score[h];
                item_cut |= j->cut[g];
            }
            if (k > 0 && found) cJSON_AddItemToArray(a, item_text(p, j, i, k));
            if (j->beam > 1 && found && isfinite(sum))
                cJSON_AddItemToArray(sc, cJSON_CreateNumber(sum));
        }
        any_cut |= item_cut;
        cJSON_AddItemToArray(cut, cJSON_CreateBool(item_cut));
        cJSON_AddItemToArray(alts, a), cJSON_AddItemToArray(scores, sc);
    }
    if (!p->is_list) { /* the one text's */
        cJSON *t0 = cJSON_DetachItemFromArray(texts, 0), *a0 = cJSON_DetachItemFromArray(alts, 0);
        cJSON *s0 = cJSON_DetachItemFromArray(scores, 0), *c0 = cJSON_DetachItemFromArray(cut, 0);
        cJSON_Delete(texts), cJSON_Delete(alts), cJSON_Delete(scores), cJSON_Delete(cut);
        texts = t0, alts = a0, scores = s0, cut = c0;
    }
    cJSON_AddItemToObject(o, "translatedText", texts);
    if (j->n_best > 1) cJSON_AddItemToObject(o, "alternatives", alts);
    else cJSON_Delete(alts);
    if (j->beam > 1) cJSON_AddItemToObject(o, "scores", scores);
    else cJSON_Delete(scores);
    if (any_cut) cJSON_AddItemToObject(o, "truncated", cut);
    else cJSON_Delete(cut);
    return o;
}

/* The request's options: beam, alternatives, max_len (qkv's and LibreTranslate's); 0, or 400
 * with msg. */
static int translate_options(const server *s, const served_model *m, const cJSON *req,
                             int *beam, int *alternatives, int *max_len, char *msg, size_t cap)
{
    const int limit = qkv_transformer_get_config(qkv_translator_model(m->tr))->max_len;
    *beam = 1, *alternatives = 0, *max_len = 0;
    if (serve_get_int(req, "beam", 1, MAX_BEAM, beam, msg, cap) ||
        serve_get_int(req, "alternatives", 0, MAX_BEAM - 1, alternatives, msg, cap) ||
        serve_get_int(req, "max_len", 1, limit, max_len, msg, cap))
        return 400;
    const int rows = *beam > *alternatives + 1 ? *beam : *alternatives + 1;
    if (rows > 1 && rows > s->slots)
        return serve_refuse(msg, cap, 400, "a beam of %d takes %d rows of the batch: this server has "
                      "%d (--max-batch-tokens)", rows, rows, s->slots);
    return 0;
}

enum MHD_Result serve_post_translate(server *s, struct MHD_Connection *c, conn *cn,
                                     const cJSON *req)
{
    char msg[600];
    int code = serve_key_check(s, req, msg, sizeof msg);
    if (!code) code = check_translate(req, msg, sizeof msg);
    if (code) return serve_send_error(c, cn, code, "%s", msg);
    const cJSON *src = cJSON_GetObjectItemCaseSensitive(req, "source");
    const cJSON *tgt = cJSON_GetObjectItemCaseSensitive(req, "target");
    const char *src_lang, *tgt_lang;
    served_model *m = choose_model(s, cJSON_IsString(src) ? src->valuestring : NULL,
                                   cJSON_IsString(tgt) ? tgt->valuestring : NULL, &src_lang,
                                   &tgt_lang, &code, msg, sizeof msg);
    if (!m) return serve_send_error(c, cn, code, "%s", msg);
    int beam, alternatives, max_len;
    if (translate_options(s, m, req, &beam, &alternatives, &max_len, msg, sizeof msg))
        return serve_send_error(c, cn, 400, "%s", msg);
    const cJSON *format = cJSON_GetObjectItemCaseSensitive(req, "format");
    const int html = cJSON_IsString(format) && !strcmp(format->valuestring, "html");
    plan p;
    if ((code = make_plan(&p, cJSON_GetObjectItemCaseSensitive(req, "q"), html, msg, sizeof msg)))
        return plan_free(&p), serve_send_error(c, cn, code, "%s", msg);
    job *j = translate_job(m, &p, beam, alternatives, max_len, src_lang, tgt_lang);
    if (!j) return plan_free(&p), serve_send_error(c, cn, 500, "out of memory");
    enum MHD_Result r;
    if (j->n == 0) j->done = 1, j->refs = 1;
    else if (serve_enqueue(s, j)) {
        job_free(j), plan_free(&p);
        return serve_send_error(c, cn, 503, "the queue is full (%d requests): retry later",
                                s->max_queue);
    }
    r = serve_wait_and_answer(s, c, cn, j, "translation", translation_json, &p);
    plan_free(&p);
    return r;
}
