/* SPDX-License-Identifier: MIT */
/* numpy's .npz archives (numpy.savez, and Marian's model.npz): a zip of NAME.npy files, each
 *
 *   "\x93NUMPY" major minor    magic and version (1.0, 2.0 or 3.0)
 *   header length               2 bytes (1.0) or 4 (2.0, 3.0), little-endian
 *   header                      a Python dict literal: {'descr': '<f4', 'fortran_order': False,
 *                               'shape': (512, 512), } padded with spaces and a newline
 *   data                        numel elements, row-major (or column-major: fortran_order)
 *
 * read into a qkv_tensor_file: tensor NAME per array, float16 widened to float32, small
 * integers to int32, column-major arrays made row-major. Marian keeps its configuration as a
 * byte array "special:model.yml"; arrays of bytes named "special:*" become metadata strings. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/weights.h"

#define MAX_HEADER 65536 /* numpy writes a few hundred bytes; it reads up to 10000 */

typedef struct {
    stored_type type;
    int fortran, ndim;
    int64_t shape[QKV_MAX_DIMS], numel;
    size_t data_at; /* where the elements start in the entry */
} npy_header;

static const struct {
    const char *descr;
    stored_type type;
} DESCRS[] = {
    {"<f4", STORED_F32}, {"<f2", STORED_F16}, {"<f8", STORED_F64},  {"<i8", STORED_I64},
    {"<i4", STORED_I32}, {"<i2", STORED_I16}, {"|i1", STORED_I8},   {"<i1", STORED_I8},
    {"|u1", STORED_U8},  {"<u1", STORED_U8},  {"|b1", STORED_BOOL},
};

typedef struct {
    const char *p, *end;
} cursor;

static void skip_spaces(cursor *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

static int eat(cursor *c, char ch)
{
    skip_spaces(c);
    if (c->p < c->end && *c->p == ch) return c->p++, 1;
    return 0;
}

/* A quoted Python string (no escapes: numpy's keys and descrs have none) into out. */
static int quoted(cursor *c, char *out, size_t cap)
{
    skip_spaces(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"')) return 0;
    const char q = *c->p++;
    const char *close = memchr(c->p, q, (size_t)(c->end - c->p));
    if (!close || (size_t)(close - c->p) >= cap || memchr(c->p, '\\', (size_t)(close - c->p)))
        return 0;
    memcpy(out, c->p, (size_t)(close - c->p)), out[close - c->p] = '\0';
    c->p = close + 1;
    return 1;
}

static int word(cursor *c, const char *w)
{
    skip_spaces(c);
    const size_t n = strlen(w);
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, w, n)) return 0;
    c->p += n;
    return 1;
}

/* (d0, d1, ...) with an optional trailing comma, each a decimal integer. */
static int shape_tuple(cursor *c, npy_header *h)
{
    if (!eat(c, '(')) return 0;
    h->ndim = 0;
    for (;;) {
        if (eat(c, ')')) return 1;
        if (h->ndim == QKV_MAX_DIMS) return 0;
        skip_spaces(c);
        int64_t v = 0;
        int digits = 0;
        while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
            if (v > (INT64_MAX - 9) / 10) return 0;
            v = v * 10 + (*c->p++ - '0'), digits++;
        }
        if (!digits) return 0;
        h->shape[h->ndim++] = v;
        if (!eat(c, ',')) return eat(c, ')');
    }
}

/* The header at bytes[0..n) (n: what of the entry is at hand, all of it or its first
 * MAX_HEADER + 10 bytes). */
static qkv_status parse_header(npy_header *h, const unsigned char *b, size_t n, const char *file,
                               const char *name, qkv_error *err)
{
    memset(h, 0, sizeof *h);
    if (n < 10 || memcmp(b, "\x93NUMPY", 6) || b[6] < 1 || b[6] > 3)
        return qkv_fail(err, QKV_ERR_FORMAT,
                        "%s: '%s' is not a .npy array (no \\x93NUMPY magic "
                        "of version 1, 2 or 3)",
                        file, printable(name).s);
    const size_t start = b[6] == 1 ? 10 : 12;
    const size_t len =
        b[6] == 1 ? (size_t)b[8] | (size_t)b[9] << 8
        : n < 12  ? MAX_HEADER + 1
                  : (size_t)b[8] | (size_t)b[9] << 8 | (size_t)b[10] << 16 | (size_t)b[11] << 24;
    if (len > MAX_HEADER || start + len > n)
        return qkv_fail(err, QKV_ERR_FORMAT,
                        "%s: '%s': a .npy header of %zu bytes (the entry "
                        "holds %zu)",
                        file, printable(name).s, len, n);
    cursor c = {(const char *)b + start, (const char *)b + start + len};
    int seen = 0, ok = eat(&c, '{');
    char key[32], descr[16] = "";
    while (ok && !eat(&c, '}')) {
        ok = quoted(&c, key, sizeof key) && eat(&c, ':');
        if (ok && !strcmp(key, "descr")) ok = quoted(&c, descr, sizeof descr), seen |= 1;
        else if (ok && !strcmp(key, "fortran_order"))
            ok = (h->fortran = word(&c, "True")) || word(&c, "False"), seen |= 2;
        else if (ok && !strcmp(key, "shape")) ok = shape_tuple(&c, h), seen |= 4;
        else ok = 0;
        if (ok && !eat(&c, ',')) ok = eat(&c, '}') ? (c.p--, 1) : 0;
    }
    skip_spaces(&c);
    if (!ok || seen != 7 || c.p != c.end)
        return qkv_fail(err, QKV_ERR_FORMAT,
                        "%s: '%s': a .npy header that is not {'descr': ..., "
                        "'fortran_order': ..., 'shape': (...)}",
                        file, printable(name).s);
    size_t k = 0;
    while (k < sizeof DESCRS / sizeof *DESCRS && strcmp(descr, DESCRS[k].descr)) k++;
    if (k == sizeof DESCRS / sizeof *DESCRS)
        return qkv_fail(err, QKV_ERR_FORMAT,
                        "%s: '%s': dtype '%s' (qkv reads little-endian "
                        "float16/32/64, int8/16/32/64, uint8 and bool)",
                        file, printable(name).s, printable(descr).s);
    h->type = DESCRS[k].type;
    if (!shape_numel(h->shape, h->ndim, &h->numel) || (uint64_t)h->numel > UINT64_MAX / 8)
        return qkv_fail(err, QKV_ERR_FORMAT, "%s: '%s': its shape overflows", file,
                        printable(name).s);
    h->data_at = start + len;
    return QKV_OK;
}

static int is_npy(const char *name)
{
    const size_t n = strlen(name);
    return n > 4 && !strcmp(name + n - 4, ".npy");
}

static int is_special(const char *name) { return !strncmp(name, "special:", 8); }

/* An entry's header: from its first bytes when stored, from all of it when deflated. */
static qkv_status entry_header(const zip_archive *z, const zip_entry *e, npy_header *h,
                               qkv_error *err)
{
    char *bytes = NULL;
    size_t n = e->usize < MAX_HEADER + 12 ? (size_t)e->usize : MAX_HEADER + 12;
    qkv_status st;
    if (e->method == 0) {
        if (!(bytes = malloc(n ? n : 1)))
            return qkv_fail(err, QKV_ERR_NOMEM, "%s: out of memory", z->src.name);
        st = byte_source_read(&z->src, bytes, e->offset, n, err);
    } else {
        st = zip_extract_alloc(z, e, SIZE_MAX - 1, &bytes, err);
        n = (size_t)e->usize;
    }
    if (!st) st = parse_header(h, (unsigned char *)bytes, n, z->src.name, e->name, err);
    free(bytes);
    if (!st && (uint64_t)h->numel * stored_size(h->type) != e->usize - h->data_at)
        st = qkv_fail(err, QKV_ERR_FORMAT,
                      "%s: '%s': %lld %s elements need %llu bytes, the "
                      "entry has %llu after its header",
                      z->src.name, printable(e->name).s, (long long)h->numel, stored_name(h->type),
                      (unsigned long long)h->numel * stored_size(h->type),
                      (unsigned long long)(e->usize - h->data_at));
    return st;
}

/* A "special:" byte array as a metadata value: its bytes up to the NULs at its end. */
static qkv_status add_special(cJSON *meta, const zip_archive *z, const zip_entry *e,
                              const npy_header *h, qkv_error *err)
{
    if (h->ndim != 1 || stored_size(h->type) != 1 || h->type == STORED_BOOL)
        return qkv_fail(err, QKV_ERR_FORMAT, "%s: '%s' is not an array of bytes", z->src.name,
                        printable(e->name).s);
    char *bytes = NULL;
    qkv_status st = zip_extract_alloc(z, e, (size_t)1 << 26, &bytes, err);
    if (st) return st;
    char *text = bytes + h->data_at;
    size_t len = (size_t)h->numel;
    while (len && !text[len - 1]) len--;
    text[len] = '\0';
    char key[300];
    snprintf(key, sizeof key, "%.*s", (int)strlen(e->name) - 4, e->name);
    if (memchr(text, '\0', len))
        st = qkv_fail(err, QKV_ERR_FORMAT, "%s: '%s' holds a NUL byte inside its text", z->src.name,
                      printable(e->name).s);
    else if (!cJSON_AddStringToObject(meta, key, text))
        st = qkv_fail(err, QKV_ERR_NOMEM, "%s: out of memory", z->src.name);
    free(bytes);
    return st;
}

static qkv_status load_archive(qkv_tensor_file *out, const byte_source *src, qkv_error *err)
{
    memset(out, 0, sizeof *out);
    zip_archive z;
    qkv_status st = zip_open(&z, src, err);
    if (st) return st;
    int count = 0;
    for (int i = 0; i < z.count; i++)
        count += is_npy(z.entries[i].name) && !is_special(z.entries[i].name);
    cJSON *meta = cJSON_CreateObject();
    npy_header *h = calloc((size_t)z.count + 1, sizeof *h);
    if (!meta || !h) st = qkv_fail(err, QKV_ERR_NOMEM, "%s: out of memory", src->name);
    if (!st && !count)
        st = qkv_fail(err, QKV_ERR_FORMAT,
                      "%s: a zip archive without .npy arrays: not an "
                      ".npz file",
                      src->name);
    if (!st) st = tensor_file_alloc(out, count, src->name, err);
    int k = 0;
    for (int i = 0; !st && i < z.count; i++) {
        const zip_entry *e = &z.entries[i];
        if (!is_npy(e->name)) continue;
        if ((st = entry_header(&z, e, &h[i], err))) break;
        if (is_special(e->name)) {
            st = add_special(meta, &z, e, &h[i], err);
            continue;
        }
        qkv_tensor *t = &out->tensors[k++];
        t->dtype = stored_as(h[i].type), t->ndim = h[i].ndim, t->numel = h[i].numel;
        memcpy(t->shape, h[i].shape, sizeof t->shape);
        if (!(t->name = strndup(e->name, strlen(e->name) - 4)))
            st = qkv_fail(err, QKV_ERR_NOMEM, "%s: out of memory", src->name);
    }
    if (!st) st = tensor_file_alloc_data(out, src->name, err);
    k = 0;
    for (int i = 0; !st && i < z.count; i++) {
        const zip_entry *e = &z.entries[i];
        if (!is_npy(e->name) || is_special(e->name)) continue;
        char *bytes = NULL;
        qkv_tensor *t = &out->tensors[k++];
        if ((st = zip_extract_alloc(&z, e, SIZE_MAX - 1, &bytes, err))) break;
        int64_t strides[QKV_MAX_DIMS], step = 1;
        if (h[i].fortran)
            for (int d = 0; d < h[i].ndim; d++) strides[d] = step, step *= h[i].shape[d];
        else
            for (int d = h[i].ndim - 1; d >= 0; d--) strides[d] = step, step *= h[i].shape[d];
        stored_gather(t->data, (unsigned char *)bytes + h[i].data_at, h[i].type, h[i].ndim,
                      h[i].shape, strides, 0);
        free(bytes);
    }
    if (!st && meta->child) st = tensor_file_set_metadata(out, meta, src->name, err);
    cJSON_Delete(meta);
    free(h);
    zip_close(&z);
    if (st) qkv_tensor_file_free(out);
    return st;
}

TENSOR_FILE_CALLS(npz, load_archive)
