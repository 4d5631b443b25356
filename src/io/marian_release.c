/* SPDX-License-Identifier: MIT */
/* Marian's own release format (OPUS-MT and Tatoeba-Challenge zips, or the directory they
 * unpack to):
 *
 *   decoder.yml          models: [NAME.npz], vocabs: [SRC.vocab.yml, TRG.vocab.yml],
 *                        beam-size, normalize
 *   NAME.npz             the weights under Marian's names (encoder_l1_self_Wq, Wemb, ...), and
 *                        the model's configuration as the byte array special:model.yml
 *   *.vocab.yml          piece: id
 *   source.spm, target.spm
 *
 * read into the parts of a Hugging Face MarianMT directory as transformers'
 * convert_marian_to_pytorch.py makes them (OpusState): <pad> added as the last id with a zero
 * embedding and a zero logits bias, every matrix transposed to (out, in) but the embeddings,
 * (1, n) biases as (n), decoding started from <pad> and <pad> never generated, and then
 * imported as that directory would be (marian.c). decoder.yml's beam size and normalisation
 * become the model's decoding defaults (generation.json). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/marian.h"
#include "io/weights.h"

#define MAX_YML_BYTES ((size_t)64 << 20)
#define MAX_NPZ_BYTES ((size_t)16 << 30)

/* ---- YAML, as much as Marian's files use ----------------------------------------------
 * A block mapping of one level, each value a scalar, a flow list [a, b] or a block list of
 * "- item" lines under it; scalars plain, 'single-' or "double-quoted" (with escapes);
 * comments and a "---" start. Nested mappings are skipped. */

typedef struct {
    char *key, *value; /* value NULL for a list */
    char **items;
    int n_items;
} yml_entry;

typedef struct {
    yml_entry *e;
    int n, cap;
    char *file;
} yml_doc;

static void yml_free(yml_doc *d)
{
    for (int i = 0; i < d->n; i++) {
        free(d->e[i].key), free(d->e[i].value);
        for (int k = 0; k < d->e[i].n_items; k++) free(d->e[i].items[k]);
        free(d->e[i].items);
    }
    free(d->e), free(d->file);
    memset(d, 0, sizeof *d);
}

/* UTF-8 of code point c at out; its length (0 for a code point past Unicode). */
static int utf8_put(char *out, unsigned long c)
{
    if (c < 0x80) return out[0] = (char)c, 1;
    if (c < 0x800) return out[0] = (char)(0xc0 | c >> 6), out[1] = (char)(0x80 | (c & 0x3f)), 2;
    if (c < 0x10000) {
        out[0] = (char)(0xe0 | c >> 12), out[1] = (char)(0x80 | ((c >> 6) & 0x3f));
        return out[2] = (char)(0x80 | (c & 0x3f)), 3;
    }
    if (c > 0x10ffff) return 0;
    out[0] = (char)(0xf0 | c >> 18), out[1] = (char)(0x80 | ((c >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((c >> 6) & 0x3f));
    return out[3] = (char)(0x80 | (c & 0x3f)), 4;
}

/* A scalar at *p (up to end; stop: the characters that end a plain scalar there), as a new
 * string; *p after it. NULL when malformed (or out of memory). */
static char *yml_scalar(const char **p, const char *end, const char *stop)
{
    const char *s = *p;
    char *out = malloc((size_t)(end - s) + 1), *o = out;
    if (!out) return NULL;
    if (s < end && (*s == '\'' || *s == '"')) {
        const char q = *s++;
        for (;; s++) {
            if (s >= end) return free(out), NULL;
            if (*s == q && q == '\'' && s + 1 < end && s[1] == '\'') *o++ = '\'', s++;
            else if (*s == q) break;
            else if (*s == '\\' && q == '"') {
                if (++s >= end) return free(out), NULL;
                static const char from[] = "0abtnvfre \"/\\N_LP";
                static const char *const to[] = {
                    "\0",       "\a",           "\b",          "\t", "\n", "\v", "\f",
                    "\r",       "\x1b",         " ",           "\"", "/",  "\\", "\xc2\x85",
                    "\xc2\xa0", "\xe2\x80\xa8", "\xe2\x80\xa9"};
                const char *k = *s ? strchr(from, *s) : NULL;
                int hex = *s == 'x' ? 2 : *s == 'u' ? 4 : *s == 'U' ? 8 : 0;
                if (k && *s != '0') {
                    const char *t = to[k - from];
                    const size_t n = strlen(t);
                    memcpy(o, t, n), o += n;
                } else if (hex && end - s > hex) {
                    unsigned long c = 0;
                    for (int i = 1; i <= hex; i++) {
                        const char h = s[i];
                        const int v = h >= '0' && h <= '9'   ? h - '0'
                                      : h >= 'a' && h <= 'f' ? h - 'a' + 10
                                      : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                                             : -1;
                        if (v < 0) return free(out), NULL;
                        c = c * 16 + (unsigned long)v;
                    }
                    const int n = c ? utf8_put(o, c) : 0;
                    if (!n) return free(out), NULL; /* NUL or past Unicode: not a token */
                    o += n, s += hex;
                } else {
                    return free(out), NULL;
                }
            } else {
                *o++ = *s;
            }
        }
        *p = s + 1;
    } else {
        while (s < end && !strchr(stop, *s) && !(*s == ' ' && s + 1 < end && s[1] == '#'))
            if (*s == ':' && (s + 1 == end || s[1] == ' ') && strchr(stop, ':')) break;
            else *o++ = *s++;
        while (o > out && o[-1] == ' ') o--; /* a plain scalar's trailing spaces */
        *p = s;
    }
    *o = '\0';
    return out;
}

static qkv_status yml_add(yml_doc *d, char *key, qkv_error *err)
{
    if (d->n == d->cap) {
        const int cap = d->cap ? 2 * d->cap : 256;
        yml_entry *e = realloc(d->e, (size_t)cap * sizeof *e);
        if (!e) return free(key), qkv_fail(err, QKV_ERR_NOMEM, "%s: out of memory", d->file);
        d->e = e, d->cap = cap;
    }
    d->e[d->n++] = (yml_entry){key, NULL, NULL, 0};
    return QKV_OK;
}

static qkv_status yml_item(yml_doc *d, yml_entry *e, char *item, qkv_error *err)
{
    char **items = item ? realloc(e->items, (size_t)(e->n_items + 1) * sizeof *items) : NULL;
    if (!items) return free(item), qkv_fail(err, QKV_ERR_NOMEM, "%s: out of memory", d->file);
    e->items = items, e->items[e->n_items++] = item;
    return QKV_OK;
}

static qkv_status yml_bad(const yml_doc *d, int line, qkv_error *err)
{
    return qkv_fail(err, QKV_ERR_FORMAT,
                    "%s:%d: YAML qkv does not read (Marian's files are "
                    "one mapping of scalars and lists)",
                    d->file, line);
}

static qkv_status yml_parse(yml_doc *d, const char *text, size_t len, const char *file,
                            qkv_error *err)
{
    memset(d, 0, sizeof *d);
    if (!(d->file = strdup(file))) return qkv_fail(err, QKV_ERR_NOMEM, "out of memory");
    if (memchr(text, '\0', len)) {
        yml_free(d);
        return qkv_fail(err, QKV_ERR_FORMAT, "%s: holds a NUL byte", file);
    }
    qkv_status st = QKV_OK;
    int line = 0, nested = 0;
    for (const char *p = text, *end = text + len; !st && p < end; line++) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (!eol) eol = end;
        const char *start = p, *q = p, *stop = eol > p && eol[-1] == '\r' ? eol - 1 : eol;
        p = eol + 1;
        while (q < stop && *q == ' ') q++;
        if (q == stop || *q == '#' || (stop - q >= 3 && !memcmp(q, "---", 3))) continue;
        if (*q == '-' && (q + 1 == stop || q[1] == ' ')) { /* a block list's item */
            if (nested) continue;
            if (!d->n || d->e[d->n - 1].value) {
                st = yml_bad(d, line + 1, err);
                break;
            }
            q += 1;
            while (q < stop && *q == ' ') q++;
            char *item = yml_scalar(&q, stop, "");
            st = item ? yml_item(d, &d->e[d->n - 1], item, err) : yml_bad(d, line + 1, err);
            continue;
        }
        if (q > start) { /* an indented mapping under a key: not Marian's, skipped */
            nested = 1;
            continue;
        }
        nested = 0;
        char *key = yml_scalar(&q, stop, ":");
        if (!key || q >= stop || *q != ':') {
            free(key);
            st = yml_bad(d, line + 1, err);
            break;
        }
        if ((st = yml_add(d, key, err))) break;
        yml_entry *e = &d->e[d->n - 1];
        q++;
        while (q < stop && *q == ' ') q++;
        if (q == stop || *q == '#') continue; /* a block list follows (or nothing) */
        if (*q == '[') {                      /* a flow list */
            q++;
            while (!st) {
                while (q < stop && *q == ' ') q++;
                if (q < stop && *q == ']') break;
                char *item = yml_scalar(&q, stop, ",]");
                if (!item) st = yml_bad(d, line + 1, err);
                else st = yml_item(d, e, item, err);
                while (!st && q < stop && *q == ' ') q++;
                if (!st && q < stop && *q == ',') q++;
                else if (!st && (q >= stop || *q != ']')) st = yml_bad(d, line + 1, err);
            }
            continue;
        }
        if (!(e->value = yml_scalar(&q, stop, ""))) st = yml_bad(d, line + 1, err);
    }
    if (st) yml_free(d);
    return st;
}

static const yml_entry *yml_get(const yml_doc *d, const char *key)
{
    for (int i = 0; i < d->n; i++)
        if (!strcmp(d->e[i].key, key)) return &d->e[i];
    return NULL;
}

/* ---- the release: a directory or a zip -------------------------------------------------- */

typedef struct {
    const char *path;
    int zipped;
    byte_source src;
    zip_archive z;
    char base[1024]; /* in a zip: the folder of decoder.yml ("" or "name/") */
} release;

int marian_is_release(const char *source)
{
    struct stat sb;
    char path[4096];
    if (stat(source, &sb)) return 0;
    if (S_ISREG(sb.st_mode)) {
        const size_t n = strlen(source);
        return n > 4 && !strcmp(source + n - 4, ".zip");
    }
    snprintf(path, sizeof path, "%s/config.json", source);
    if (!stat(path, &sb)) return 0;
    snprintf(path, sizeof path, "%s/decoder.yml", source);
    return !stat(path, &sb);
}

static qkv_status release_open(release *r, const char *path, qkv_error *err)
{
    memset(r, 0, sizeof *r);
    r->path = path, r->src.fd = -1;
    struct stat sb;
    if (stat(path, &sb) || !S_ISREG(sb.st_mode)) return QKV_OK; /* a directory */
    r->zipped = 1;
    r->src.name = path;
    qkv_status st = open_weights(path, &r->src.fd, &r->src.size, err);
    if (!st) st = zip_open(&r->z, &r->src, err);
    /* decoder.yml, at the top or in one folder: the shortest path of that name */
    const zip_entry *found = NULL;
    for (int i = 0; !st && i < r->z.count; i++) {
        const char *n = r->z.entries[i].name, *slash = strrchr(n, '/');
        if (strcmp(slash ? slash + 1 : n, "decoder.yml")) continue;
        if (!found || strlen(n) < strlen(found->name)) found = &r->z.entries[i];
    }
    if (!st && !found)
        st = qkv_fail(err, QKV_ERR_FORMAT,
                      "%s: no decoder.yml in the zip: not a Marian "
                      "(OPUS-MT) release",
                      path);
    if (!st) {
        const size_t n = strlen(found->name) - strlen("decoder.yml");
        if (n >= sizeof r->base) st = qkv_fail(err, QKV_ERR_FORMAT, "%s: a long folder", path);
        else memcpy(r->base, found->name, n), r->base[n] = '\0';
    }
    return st;
}

static void release_close(release *r)
{
    if (r->zipped) zip_close(&r->z);
    if (r->src.fd >= 0) close(r->src.fd);
}

/* A file of the release (name relative to decoder.yml, a plain name) as malloc'd bytes. */
static qkv_status release_read(release *r, const char *name, size_t max, char **data, size_t *len,
                               qkv_error *err)
{
    *data = NULL;
    if (!*name || strchr(name, '/') || !strcmp(name, ".."))
        return qkv_fail(err, QKV_ERR_FORMAT,
                        "%s: decoder.yml names '%.100s', not a file "
                        "beside it",
                        r->path, name);
    char path[4096];
    if (!r->zipped) {
        snprintf(path, sizeof path, "%s/%s", r->path, name);
        return qkv_read_regular_file(path, max, data, len, err);
    }
    snprintf(path, sizeof path, "%s%s", r->base, name);
    const zip_entry *e = zip_find(&r->z, path);
    if (!e)
        return qkv_fail(err, QKV_ERR_IO, "%s: '%s' is not in the zip", r->path, printable(path).s);
    qkv_status st = zip_extract_alloc(&r->z, e, max, data, err);
    if (!st) *len = (size_t)e->usize;
    return st;
}

/* ---- from Marian's parts to Hugging Face's -------------------------------------------- */

/* transformers' BART_CONVERTER: Marian's name within a layer -> Hugging Face's. */
static const char *const LAYER_NAMES[][2] = {
    {"self_Wq", "self_attn.q_proj.weight"},
    {"self_Wk", "self_attn.k_proj.weight"},
    {"self_Wv", "self_attn.v_proj.weight"},
    {"self_Wo", "self_attn.out_proj.weight"},
    {"self_bq", "self_attn.q_proj.bias"},
    {"self_bk", "self_attn.k_proj.bias"},
    {"self_bv", "self_attn.v_proj.bias"},
    {"self_bo", "self_attn.out_proj.bias"},
    {"self_Wo_ln_scale", "self_attn_layer_norm.weight"},
    {"self_Wo_ln_bias", "self_attn_layer_norm.bias"},
    {"ffn_W1", "fc1.weight"},
    {"ffn_b1", "fc1.bias"},
    {"ffn_W2", "fc2.weight"},
    {"ffn_b2", "fc2.bias"},
    {"ffn_ffn_ln_scale", "final_layer_norm.weight"},
    {"ffn_ffn_ln_bias", "final_layer_norm.bias"},
    {"context_Wk", "encoder_attn.k_proj.weight"},
    {"context_Wo", "encoder_attn.out_proj.weight"},
    {"context_Wq", "encoder_attn.q_proj.weight"},
    {"context_Wv", "encoder_attn.v_proj.weight"},
    {"context_bk", "encoder_attn.k_proj.bias"},
    {"context_bo", "encoder_attn.out_proj.bias"},
    {"context_bq", "encoder_attn.q_proj.bias"},
    {"context_bv", "encoder_attn.v_proj.bias"},
    {"context_Wo_ln_scale", "encoder_attn_layer_norm.weight"},
    {"context_Wo_ln_bias", "encoder_attn_layer_norm.bias"},
};

/* Hugging Face's name of a Marian tensor, and how its data moves: 'T' transposed, 'R' a row
 * of zeros added (the <pad> embedding), 'C' a zero column added (its logits bias), 'L' the
 * output matrix (d, V) transposed and given a zero row, 'S' a (1, n) vector squeezed, '=' as
 * it is (a name qkv will refuse). */
static char hf_name_of(const char *marian, const qkv_tensor *t, char *out, size_t cap)
{
    static const char *const embeddings[][2] = {
        {"Wemb", "model.shared.weight"},
        {"encoder_Wemb", "model.encoder.embed_tokens.weight"},
        {"decoder_Wemb", "model.decoder.embed_tokens.weight"}};
    for (int i = 0; i < 3; i++)
        if (!strcmp(marian, embeddings[i][0]))
            return snprintf(out, cap, "%s", embeddings[i][1]), 'R';
    if (!strcmp(marian, "decoder_ff_logit_out_b"))
        return snprintf(out, cap, "final_logits_bias"), 'C';
    if (!strcmp(marian, "decoder_ff_logit_out_W")) return snprintf(out, cap, "lm_head.weight"), 'L';
    int layer = 0, at = 0;
    char stack[8];
    if (sscanf(marian, "%7[a-z]_l%d_%n", stack, &layer, &at) == 2 && at > 0 && layer >= 1 &&
        (!strcmp(stack, "encoder") || !strcmp(stack, "decoder")))
        for (size_t i = 0; i < sizeof LAYER_NAMES / sizeof *LAYER_NAMES; i++)
            if (!strcmp(marian + at, LAYER_NAMES[i][0])) {
                snprintf(out, cap, "model.%s.layers.%d.%s", stack, layer - 1, LAYER_NAMES[i][1]);
                return t->ndim == 2 && t->shape[0] == 1 ? 'S' : 'T';
            }
    snprintf(out, cap, "%s", marian);
    return '=';
}

/* The .npz's tensors under Hugging Face's names, their data moved as transformers' converter
 * moves it. */
static qkv_status hf_tensors(qkv_tensor_file *out, const qkv_tensor_file *npz, const char *file,
                             qkv_error *err)
{
    qkv_status st = tensor_file_alloc(out, npz->count, file, err);
    char *how = calloc((size_t)npz->count + 1, 1);
    if (!st && !how) st = qkv_fail(err, QKV_ERR_NOMEM, "%s: out of memory", file);
    for (int i = 0; !st && i < npz->count; i++) {
        const qkv_tensor *m = &npz->tensors[i];
        qkv_tensor *t = &out->tensors[i];
        char name[256];
        how[i] = hf_name_of(m->name, m, name, sizeof name);
        const int two = m->ndim == 2;
        if (how[i] != '=' && (m->dtype != QKV_F32 || !two))
            st = qkv_fail(err, QKV_ERR_FORMAT, "%s: tensor '%s' is not a float32 matrix", file,
                          printable(m->name).s);
        if (!st && !(t->name = strdup(name)))
            st = qkv_fail(err, QKV_ERR_NOMEM, "%s: out of memory", file);
        if (st) break;
        t->dtype = m->dtype, t->ndim = m->ndim;
        memcpy(t->shape, m->shape, sizeof t->shape);
        switch (how[i]) {
        case 'T':
            t->shape[0] = m->shape[1], t->shape[1] = m->shape[0];
            break;
        case 'R':
            t->shape[0] = m->shape[0] + 1;
            break;
        case 'C':
            t->shape[1] = m->shape[1] + 1;
            break;
        case 'L':
            t->shape[0] = m->shape[1] + 1, t->shape[1] = m->shape[0];
            break;
        case 'S':
            t->ndim = 1, t->shape[0] = m->shape[1];
            break;
        default:
            break;
        }
        shape_numel(t->shape, t->ndim, &t->numel);
    }
    if (!st) st = tensor_file_alloc_data(out, file, err);
    for (int i = 0; !st && i < npz->count; i++) {
        const qkv_tensor *m = &npz->tensors[i];
        qkv_tensor *t = &out->tensors[i];
        const float *src = m->data;
        float *dst = t->data;
        const int64_t r = m->ndim == 2 ? m->shape[0] : 0, c = m->ndim == 2 ? m->shape[1] : 0;
        switch (how[i]) {
        case 'T':
        case 'L':
            for (int64_t a = 0; a < r; a++)
                for (int64_t b = 0; b < c; b++) dst[b * r + a] = src[a * c + b];
            if (how[i] == 'L') memset(dst + c * r, 0, (size_t)r * sizeof *dst);
            break;
        case 'R':
            memcpy(dst, src, (size_t)(r * c) * sizeof *dst);
            memset(dst + r * c, 0, (size_t)c * sizeof *dst);
            break;
        case 'C':
            for (int64_t a = 0; a < r; a++) {
                memcpy(dst + a * (c + 1), src + a * c, (size_t)c * sizeof *dst);
                dst[a * (c + 1) + c] = 0.0f;
            }
            break;
        default:
            memcpy(t->data, m->data,
                   (size_t)m->numel * qkv_dtype_size(m->dtype));
        }
    }
    free(how);
    if (st) qkv_tensor_file_free(out);
    return st;
}

/* ---- the configuration -------------------------------------------------------------- */

static const char *yml_str(const yml_doc *d, const char *key)
{
    const yml_entry *e = yml_get(d, key);
    return e && e->value ? e->value : NULL;
}

/* An integer option (absent: def), QKV_ERR_FORMAT naming file and key otherwise. */
static qkv_status yml_int(const yml_doc *d, const char *key, int def, int *v, qkv_error *err)
{
    const char *s = yml_str(d, key);
    if (!s) return *v = def, QKV_OK;
    char *end;
    const long x = strtol(s, &end, 10);
    if (end == s || *end || x < 0 || x > 1000000000)
        return qkv_fail(err, QKV_ERR_FORMAT, "%s: \"%s: %.40s\" is not a count", d->file, key, s);
    *v = (int)x;
    return QKV_OK;
}

static int yml_true(const yml_doc *d, const char *key)
{
    const char *s = yml_str(d, key);
    return s && (!strcmp(s, "true") || !strcmp(s, "True") || !strcmp(s, "1"));
}

/* Marian's options that would make another model than the one imported: each must have
 * transformers' assumed value where the configuration gives it (check_marian_cfg_assumptions;
 * and an average-attention decoder, tied layers and trained positions are not Marian's
 * Transformer as transformers imports it either). */
static qkv_status check_assumptions(const yml_doc *d, qkv_error *err)
{
    static const char *const assumed[][2] = {
        {"type", "transformer"},
        {"layer-normalization", "false"},
        {"right-left", "false"},
        {"transformer-ffn-depth", "2"},
        {"transformer-decoder-ffn-depth", "0"},
        {"transformer-no-projection", "false"},
        {"transformer-postprocess-emb", "d"},
        {"transformer-postprocess", "dan"},
        {"transformer-preprocess", ""},
        {"transformer-decoder-autoreg", "self-attention"},
        {"transformer-train-position-embeddings", "false"},
        {"ulr-dim-emb", "0"},
    };
    const char *type = yml_str(d, "type");
    if (!type)
        return qkv_fail(err, QKV_ERR_FORMAT,
                        "%s: no \"type\": not a Marian model's "
                        "configuration",
                        d->file);
    for (size_t i = 0; i < sizeof assumed / sizeof *assumed; i++) {
        const char *v = yml_str(d, assumed[i][0]);
        if (v && strcmp(v, assumed[i][1]) &&
            !(!strcmp(assumed[i][0], "transformer-decoder-ffn-depth") && !strcmp(v, "2")))
            return qkv_fail(err, QKV_ERR_FORMAT,
                            "%s: \"%s: %.40s\" (qkv imports Marian's "
                            "Transformer with \"%s\": the post-norm model transformers' "
                            "converter reads)",
                            d->file, assumed[i][0], v, assumed[i][1]);
    }
    const yml_entry *tied = yml_get(d, "transformer-tied-layers");
    if (tied && tied->n_items && tied->items[0])
        return qkv_fail(err, QKV_ERR_FORMAT,
                        "%s: \"transformer-tied-layers\": layers that share "
                        "weights are not imported",
                        d->file);
    return QKV_OK;
}

static qkv_status add(cJSON *o, const char *key, cJSON *v, qkv_error *err)
{
    if (!v || !cJSON_AddItemToObject(o, key, v))
        return cJSON_Delete(v), qkv_fail(err, QKV_ERR_NOMEM, "out of memory");
    return QKV_OK;
}

/* MarianConfig's keys as OpusState sets them from model.yml; V the vocabulary with <pad>. */
static qkv_status hf_config(cJSON **out, const yml_doc *m, int V, int eos, qkv_error *err)
{
    int dim = 0, enc = 0, dec = 0, heads = 0, ffn = 0, dec_ffn = 0;
    qkv_status st = check_assumptions(m, err);
    if (!st) st = yml_int(m, "dim-emb", 512, &dim, err);
    if (!st) st = yml_int(m, "enc-depth", 6, &enc, err);
    if (!st) st = yml_int(m, "dec-depth", 6, &dec, err);
    if (!st) st = yml_int(m, "transformer-heads", 8, &heads, err);
    if (!st) st = yml_int(m, "transformer-dim-ffn", 2048, &ffn, err);
    if (!st) st = yml_int(m, "transformer-decoder-dim-ffn", 0, &dec_ffn, err);
    if (st) return st;
    const int all = yml_true(m, "tied-embeddings-all");
    const int share = all || yml_true(m, "tied-embeddings-src");
    const int tie = all || yml_true(m, "tied-embeddings");
    const char *act = yml_str(m, "transformer-ffn-activation");
    cJSON *o = cJSON_CreateObject(), *bad = cJSON_CreateArray(), *pad = cJSON_CreateArray();
    if (!o || !bad || !pad) st = qkv_fail(err, QKV_ERR_NOMEM, "out of memory");
    if (!st) st = add(pad, "", cJSON_CreateNumber(V - 1), err);
    if (!st) st = add(bad, "", pad, err), pad = NULL;
    const struct {
        const char *key;
        double v;
    } nums[] = {{"vocab_size", V},
                {"decoder_vocab_size", V},
                {"d_model", dim},
                {"encoder_layers", enc},
                {"decoder_layers", dec},
                {"encoder_attention_heads", heads},
                {"decoder_attention_heads", heads},
                {"encoder_ffn_dim", ffn},
                {"decoder_ffn_dim", dec_ffn ? dec_ffn : ffn},
                /* sinusoidal: any length; MarianConfig's default */
                {"max_position_embeddings", dim > 1024 ? dim : 1024},
                {"pad_token_id", V - 1},
                {"decoder_start_token_id", V - 1},
                {"eos_token_id", eos},
                {"forced_eos_token_id", eos}};
    for (size_t i = 0; !st && i < sizeof nums / sizeof *nums; i++)
        st = add(o, nums[i].key, cJSON_CreateNumber(nums[i].v), err);
    if (!st) st = add(o, "model_type", cJSON_CreateString("marian"), err);
    if (!st) st = add(o, "activation_function", cJSON_CreateString(act ? act : "swish"), err);
    if (!st) st = add(o, "scale_embedding", cJSON_CreateBool(1), err);
    if (!st) st = add(o, "share_encoder_decoder_embeddings", cJSON_CreateBool(share), err);
    if (!st) st = add(o, "tie_word_embeddings", cJSON_CreateBool(tie), err);
    if (!st) st = add(o, "bad_words_ids", bad, err), bad = NULL;
    cJSON_Delete(bad), cJSON_Delete(pad);
    if (st) return cJSON_Delete(o), st;
    *out = o;
    return QKV_OK;
}

/* A vocabulary .yml (piece: id) as vocab.json's object, with <pad> added as the next id where
 * it lacks one (add_special_tokens_to_vocab). */
static qkv_status vocab_json(cJSON **out, const yml_doc *d, int *size, qkv_error *err)
{
    cJSON *o = cJSON_CreateObject();
    qkv_status st = o ? QKV_OK : qkv_fail(err, QKV_ERR_NOMEM, "out of memory");
    int has_pad = 0;
    for (int i = 0; !st && i < d->n; i++) {
        const yml_entry *e = &d->e[i];
        char *end = NULL;
        const long id = e->value ? strtol(e->value, &end, 10) : -1;
        if (!e->value || end == e->value || *end || id < 0 || id >= d->n)
            st = qkv_fail(err, QKV_ERR_FORMAT, "%s: \"%.60s\" has no id in [0, %d)", d->file,
                          e->key, d->n);
        else if (cJSON_GetObjectItemCaseSensitive(o, e->key))
            st = qkv_fail(err, QKV_ERR_FORMAT, "%s: \"%.60s\" appears twice", d->file, e->key);
        else st = add(o, e->key, cJSON_CreateNumber((double)id), err);
        has_pad |= !st && !strcmp(e->key, "<pad>");
    }
    if (!st && !has_pad) st = add(o, "<pad>", cJSON_CreateNumber(d->n), err);
    if (st) return cJSON_Delete(o), st;
    *out = o, *size = d->n + !has_pad;
    return QKV_OK;
}

/* decoder.yml's defaults as generation.json: beam-size and normalize (Marian divides a
 * hypothesis' log-probability by its length to that power: qkv's length penalty under
 * transformers' rule, lp = |Y|^alpha, which transformers' conversion of the model runs). */
static char *generation_json(const yml_doc *d)
{
    int beam = 0;
    qkv_error ignored;
    if (yml_int(d, "beam-size", 0, &beam, &ignored) || beam < 1) beam = 0;
    const char *norm = yml_str(d, "normalize");
    char *end = NULL;
    const double alpha = norm ? strtod(norm, &end) : 0.0;
    const int has_alpha = norm && end != norm && !*end && alpha >= 0.0 && alpha <= 10.0;
    if (!beam && !has_alpha) return NULL;
    char *text = malloc(256);
    if (!text) return NULL;
    int n = snprintf(text, 256, "{\n  \"from\": \"decoder.yml\",\n  \"beam_stop\": \"hf\"");
    if (beam) n += snprintf(text + n, (size_t)(256 - n), ",\n  \"beam\": %d", beam);
    if (has_alpha)
        n += snprintf(text + n, (size_t)(256 - n), ",\n  \"length_penalty\": %.6g", alpha);
    snprintf(text + n, (size_t)(256 - n), "\n}\n");
    return text;
}

qkv_status marian_yml_read(const char *text, size_t len, const char *file, int *vocab_size,
                           qkv_error *err)
{
    yml_doc d;
    qkv_status st = yml_parse(&d, text, len, file, err);
    if (st) return st;
    free(generation_json(&d));
    cJSON *vocab = NULL;
    st = vocab_json(&vocab, &d, vocab_size, err);
    cJSON_Delete(vocab);
    yml_free(&d);
    return st;
}

static qkv_status read_yml(yml_doc *d, release *r, const char *name, qkv_error *err)
{
    char *text = NULL, file[4200];
    size_t len = 0;
    snprintf(file, sizeof file, "%s/%s", r->path, name);
    qkv_status st = release_read(r, name, MAX_YML_BYTES, &text, &len, err);
    if (!st) st = yml_parse(d, text, len, file, err);
    free(text);
    return st;
}

/* The release at source (a directory or a zip) imported into out_dir. Long: the release's
 * files read in the order decoder.yml leads to them, each checked where it is read. */
qkv_status marian_import_release(const char *source, const char *out_dir, qkv_error *err)
{
    release r;
    yml_doc dec = {0}, model = {0}, vocab[2] = {{0}};
    qkv_tensor_file npz = {0}, hf = {0};
    cJSON *config = NULL, *vj[2] = {NULL, NULL};
    char *spm[2] = {NULL, NULL}, *bytes = NULL, *generation = NULL;
    size_t spm_len[2] = {0, 0}, len = 0;
    int sizes[2] = {0, 0};
    qkv_status st = release_open(&r, source, err);
    if (!st) st = read_yml(&dec, &r, "decoder.yml", err);
    const yml_entry *models = st ? NULL : yml_get(&dec, "models");
    const yml_entry *vocabs = st ? NULL : yml_get(&dec, "vocabs");
    if (!st && (!models || !models->n_items || !models->items[0]))
        st = qkv_fail(err, QKV_ERR_FORMAT, "%s: no \"models\" list", dec.file);
    if (!st && models->n_items > 1)
        st = qkv_fail(err, QKV_ERR_FORMAT, "%s: an ensemble of %d models (qkv imports one)",
                      dec.file, models->n_items);
    if (!st && (!vocabs || vocabs->n_items != 2 || !vocabs->items[0] || !vocabs->items[1]))
        st = qkv_fail(err, QKV_ERR_FORMAT,
                      "%s: \"vocabs\" is not a list of two vocabularies "
                      "(source and target)",
                      dec.file);
    const int separate = !st && strcmp(vocabs->items[0], vocabs->items[1]);
    for (int i = 0; !st && i <= separate; i++) st = read_yml(&vocab[i], &r, vocabs->items[i], err);
    for (int i = 0; !st && i <= separate; i++) st = vocab_json(&vj[i], &vocab[i], &sizes[i], err);
    if (!st && separate && sizes[0] != sizes[1])
        st = qkv_fail(err, QKV_ERR_FORMAT,
                      "%s: vocabularies of %d and %d pieces: the <pad> "
                      "that is added to each must have one id",
                      dec.file, sizes[0] - 1, sizes[1] - 1);
    static const char *const names[] = {"source.spm", "target.spm"};
    for (int i = 0; !st && i < 2; i++)
        st = release_read(&r, names[i], QKV_MAX_VOCAB_FILE_BYTES, &spm[i], &spm_len[i], err);
    char npz_name[4200];
    if (!st) snprintf(npz_name, sizeof npz_name, "%s/%s", source, models->items[0]);
    if (!st) st = release_read(&r, models->items[0], MAX_NPZ_BYTES, &bytes, &len, err);
    if (!st) st = qkv_tensor_file_parse_npz(&npz, bytes, len, npz_name, err);
    free(bytes), bytes = NULL;
    const char *yml = st ? NULL : qkv_tensor_file_meta(&npz, "special:model.yml");
    if (!st && !yml)
        st = qkv_fail(err, QKV_ERR_FORMAT,
                      "%s: no special:model.yml (Marian's configuration "
                      "inside the model)",
                      npz_name);
    char yml_name[4300];
    snprintf(yml_name, sizeof yml_name, "%s:special:model.yml", npz_name);
    if (!st) st = yml_parse(&model, yml, strlen(yml), yml_name, err);
    const cJSON *eos = st ? NULL : cJSON_GetObjectItemCaseSensitive(vj[separate], "</s>");
    if (!st && !cJSON_IsNumber(eos))
        st = qkv_fail(err, QKV_ERR_FORMAT, "%s: no </s>", vocab[separate].file);
    const qkv_tensor *emb = st ? NULL : qkv_tensor_file_get(&npz, separate ? "encoder_Wemb" : "Wemb");
    if (!st && emb && emb->ndim == 2 && emb->shape[0] != sizes[0] - 1)
        st = qkv_fail(err, QKV_ERR_FORMAT, "%s: %d pieces (and <pad>), but the model has %lld "
                      "embedding rows", vocab[0].file, sizes[0] - 1, (long long)emb->shape[0]);
    if (!st) st = hf_config(&config, &model, sizes[0], eos->valueint, err);
    if (!st) st = hf_tensors(&hf, &npz, npz_name, err);
    qkv_tensor_file_free(&npz);
    if (!st) {
        hf_weights w = {.shards = &hf, .n = 1};
        char *used = calloc((size_t)hf.count + 1, 1);
        w.used = &used;
        snprintf(w.file, sizeof w.file, "%.4000s", npz_name);
        generation = generation_json(&dec);
        const marian_parts p = {.config = config,
                                .config_name = yml_name,
                                .src_vocab = vj[0],
                                .tgt_vocab = vj[separate],
                                .src_vocab_name = vocab[0].file,
                                .tgt_vocab_name = vocab[separate].file,
                                .weights = &w,
                                .spm = {spm[0], spm[1]},
                                .spm_len = {spm_len[0], spm_len[1]},
                                .clean_up = 1,
                                .generation = generation};
        st = used ? marian_import_parts(&p, out_dir, err)
                  : qkv_fail(err, QKV_ERR_NOMEM, "out of memory");
        free(used);
    }
    free(generation);
    qkv_tensor_file_free(&hf);
    cJSON_Delete(config), cJSON_Delete(vj[0]), cJSON_Delete(vj[1]);
    free(spm[0]), free(spm[1]);
    yml_free(&dec), yml_free(&model), yml_free(&vocab[0]), yml_free(&vocab[1]);
    release_close(&r);
    return st;
}
