/* SPDX-License-Identifier: MIT */
/* Tensor files in the safetensors format:
 *
 *   8 bytes    N, a little-endian u64
 *   N bytes    a UTF-8 JSON object, padded with spaces:
 *                {"__metadata__": {"key": "value", ...},
 *                 "name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...}
 *   the rest   the data section; a tensor's bytes are [begin, end) of it, little-endian and
 *              row-major.
 *
 * A file is untrusted input: every number in the header is checked against the file before a
 * byte of data is copied, and every error names the file and the tensor.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cJSON.h>

#include "core/internal.h"
#include "io/weights.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors data is little-endian and qkv copies it without swapping bytes"
#endif

#define MAX_HEADER_BYTES 100000000ull /* the reference implementation's limit */
#define MAX_EXACT_INT 9007199254740992.0 /* 2^53: cJSON stores every number as a double */
#define BUFFER_ALIGN 64 /* a cache line, and enough for any SIMD load of a tensor */
#define META_KEY "__metadata__"

/* ---------------------------------------------------------------------------------------
 * Dtypes
 * ------------------------------------------------------------------------------------- */

static const struct {
    const char *name;
    qkv_dtype dtype;
    size_t size;
} DTYPES[] = {
    {"F32", QKV_F32, 4},
    {"I32", QKV_I32, 4},
    {"I64", QKV_I64, 8},
    {"F64", QKV_F64, 8},
    {"I8", QKV_I8, 1},
};
#define N_DTYPES (int)(sizeof DTYPES / sizeof DTYPES[0])

static bool dtype_valid(qkv_dtype dt) { return (unsigned)dt < (unsigned)N_DTYPES; }
static size_t dtype_size(qkv_dtype dt) { return DTYPES[dt].size; }
size_t qkv_dtype_size(qkv_dtype dt) { return dtype_valid(dt) ? dtype_size(dt) : 0; }
static const char *dtype_name(qkv_dtype dt) { return DTYPES[dt].name; }

static bool dtype_from_name(const char *name, qkv_dtype *dt)
{
    for (int i = 0; i < N_DTYPES; i++) {
        if (strcmp(name, DTYPES[i].name) == 0) {
            *dt = DTYPES[i].dtype;
            return true;
        }
    }
    return false;
}

/* numel = prod(shape) and nbytes = numel * size, or false if either overflows int64.
 * A zero dimension makes the tensor empty whatever the others are. */
static bool tensor_extent(const int64_t *shape, int ndim, size_t size, int64_t *numel,
                          uint64_t *nbytes)
{
    int64_t n = 1;
    bool overflow = false;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] == 0) {
            n = 0;
            overflow = false;
            break;
        }
        if (n > INT64_MAX / shape[i]) overflow = true;
        else n *= shape[i];
    }
    if (overflow || n > INT64_MAX / (int64_t)size) return false;
    *numel = n;
    *nbytes = (uint64_t)n * size;
    return true;
}

/* ---------------------------------------------------------------------------------------
 * Small helpers
 * ------------------------------------------------------------------------------------- */

static void errno_text(int e, char *buf, size_t len)
{
    if (strerror_r(e, buf, len) != 0) snprintf(buf, len, "error %d", e);
}

/* A malformed-file error naming the file and the tensor. */
__attribute__((format(printf, 4, 5))) static qkv_status
tensor_fail(qkv_error *err, const char *file, const char *tensor, const char *fmt, ...)
{
    char why[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    return qkv_fail(err, QKV_ERR_FORMAT, "%.200s: tensor '%s': %s", file, printable(tensor).s, why);
}

/* Whether s[0..n) is well-formed UTF-8 (no overlong forms, surrogates or code points past
 * U+10FFFF); *bad receives the offset of the first bad byte. */
static bool utf8_valid(const unsigned char *s, size_t n, size_t *bad)
{
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t len;
        uint32_t cp, min;
        if (c < 0x80) { i++; continue; }
        else if ((c & 0xE0) == 0xC0) { len = 2; cp = c & 0x1F; min = 0x80; }
        else if ((c & 0xF0) == 0xE0) { len = 3; cp = c & 0x0F; min = 0x800; }
        else if ((c & 0xF8) == 0xF0) { len = 4; cp = c & 0x07; min = 0x10000; }
        else break;
        if (n - i < len) break;
        size_t k = 1;
        for (; k < len && (s[i + k] & 0xC0) == 0x80; k++) cp = (cp << 6) | (s[i + k] & 0x3F);
        if (k < len || cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) break;
        i += len;
    }
    *bad = i;
    return i == n;
}

static int compare_strings(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The first name that occurs twice among names[0..n), or NULL (O(n log n): a hostile header
 * may hold millions of names). Sets *nomem on allocation failure. */
static const char *find_duplicate(const char *const *names, size_t n, bool *nomem)
{
    *nomem = false;
    if (n < 2) return NULL;
    const char **sorted = malloc(n * sizeof *sorted);
    if (!sorted) {
        *nomem = true;
        return NULL;
    }
    memcpy(sorted, names, n * sizeof *sorted);
    qsort(sorted, n, sizeof *sorted, compare_strings);
    const char *dup = NULL;
    for (size_t i = 1; i < n && !dup; i++)
        if (strcmp(sorted[i - 1], sorted[i]) == 0) dup = sorted[i];
    free(sorted);
    return dup;
}

/* ---------------------------------------------------------------------------------------
 * Reading: the header
 * ------------------------------------------------------------------------------------- */

/* Reads the length prefix and the header text (NUL-terminated, owned by the caller) and
 * checks that the text is UTF-8 without NUL bytes. */
static qkv_status read_header_text(const byte_source *src, char **text, uint64_t *len,
                                   qkv_error *err)
{
    unsigned char prefix[8];
    if (src->size < 8)
        return qkv_fail(err, QKV_ERR_FORMAT,
                        "%s: file is %llu bytes, too short for the 8-byte header length",
                        src->name, (unsigned long long)src->size);
    qkv_status st = byte_source_read(src, prefix, 0, 8, err);
    if (st != QKV_OK) return st;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | prefix[i];
    if (n > MAX_HEADER_BYTES)
        return qkv_fail(err, QKV_ERR_FORMAT, "%s: header length %llu is over the %llu-byte limit",
                        src->name, (unsigned long long)n, MAX_HEADER_BYTES);
    if (n > src->size - 8)
        return qkv_fail(err, QKV_ERR_FORMAT,
                        "%s: header length %llu runs past the end of the file (%llu bytes)",
                        src->name, (unsigned long long)n, (unsigned long long)src->size);
    char *t = malloc((size_t)n + 1);
    if (!t) return qkv_fail(err, QKV_ERR_NOMEM, "%s: no memory for the header", src->name);
    st = byte_source_read(src, t, 8, (size_t)n, err);
    if (st != QKV_OK) {
        free(t);
        return st;
    }
    t[n] = '\0';
    size_t bad;
    if (memchr(t, '\0', (size_t)n)) {
        st = qkv_fail(err, QKV_ERR_FORMAT, "%s: header contains a NUL byte", src->name);
    } else if (!utf8_valid((const unsigned char *)t, (size_t)n, &bad)) {
        st = qkv_fail(err, QKV_ERR_FORMAT, "%s: header is not valid UTF-8 (byte %zu)",
                      src->name, bad);
    }
    if (st != QKV_OK) {
        free(t);
        return st;
    }
    *text = t;
    *len = n;
    return QKV_OK;
}

/* The header as a JSON object; trailing whitespace (the padding) is allowed, nothing else. */
static qkv_status parse_header_json(const byte_source *src, const char *text, uint64_t len,
                                    cJSON **root, qkv_error *err)
{
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(text, (size_t)len, &end, 0);
    if (!j) {
        long at = end ? (long)(end - text) : 0;
        return qkv_fail(err, QKV_ERR_FORMAT, "%s: header is not valid JSON (near byte %ld)",
                        src->name, at);
    }
    while (end < text + len && strchr(" \t\r\n", *end)) end++;
    qkv_status st = QKV_OK;
    if (end != text + len)
        st = qkv_fail(err, QKV_ERR_FORMAT, "%s: unexpected text after the JSON header (byte %ld)",
                      src->name, (long)(end - text));
    else if (!cJSON_IsObject(j))
        st = qkv_fail(err, QKV_ERR_FORMAT, "%s: header is not a JSON object", src->name);
    if (st != QKV_OK) {
        cJSON_Delete(j);
        return st;
    }
    *root = j;
    return QKV_OK;
}

/* An integer in [0, 2^53] (the range a double holds exactly). */
static bool json_uint(const cJSON *item, uint64_t *v)
{
    if (!cJSON_IsNumber(item)) return false;
    double d = item->valuedouble;
    if (!(d >= 0.0 && d <= MAX_EXACT_INT) || d != floor(d)) return false;
    *v = (uint64_t)d;
    return true;
}

/* ---------------------------------------------------------------------------------------
 * Reading: one tensor entry
 * ------------------------------------------------------------------------------------- */

/* Where a tensor's bytes are in the data section. */
typedef struct {
    uint64_t begin, end;
    int index; /* into the file's tensors */
    int half;  /* 0, or the stored_type of an F16 / BF16 tensor, read as F32 */
} span;

static qkv_status parse_dtype(const cJSON *e, const char *file, const char *name,
                              qkv_dtype *dt, int *half, qkv_error *err)
{
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    if (!cJSON_IsString(j)) return tensor_fail(err, file, name, "missing or non-string \"dtype\"");
    *half = !strcmp(j->valuestring, "F16") ? STORED_F16
            : !strcmp(j->valuestring, "BF16") ? STORED_BF16 : 0;
    if (*half) return *dt = QKV_F32, QKV_OK;
    if (!dtype_from_name(j->valuestring, dt))
        return tensor_fail(err, file, name,
                           "unsupported dtype \"%.32s\" (qkv reads F32, F16, BF16, I32, I64, "
                           "F64, I8)", printable(j->valuestring).s);
    return QKV_OK;
}

static qkv_status parse_shape(const cJSON *e, const char *file, const char *name, qkv_tensor *t,
                              qkv_error *err)
{
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(e, "shape");
    if (!cJSON_IsArray(j)) return tensor_fail(err, file, name, "missing or non-array \"shape\"");
    int ndim = cJSON_GetArraySize(j);
    if (ndim > QKV_MAX_DIMS)
        return tensor_fail(err, file, name, "%d dimensions, more than QKV_MAX_DIMS = %d", ndim,
                           QKV_MAX_DIMS);
    int d = 0;
    for (const cJSON *dim = j->child; dim; dim = dim->next, d++) {
        uint64_t v;
        if (!json_uint(dim, &v))
            return tensor_fail(err, file, name, "shape[%d] is not a non-negative integer", d);
        t->shape[d] = (int64_t)v;
    }
    t->ndim = ndim;
    return QKV_OK;
}

static qkv_status parse_offsets(const cJSON *e, const char *file, const char *name, span *s,
                                qkv_error *err)
{
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsArray(j) || cJSON_GetArraySize(j) != 2)
        return tensor_fail(err, file, name, "\"data_offsets\" is not a [begin, end] array");
    if (!json_uint(j->child, &s->begin) || !json_uint(j->child->next, &s->end))
        return tensor_fail(err, file, name, "\"data_offsets\" are not non-negative integers");
    return QKV_OK;
}

/* Fills t (but its name and data) and s from one header entry and checks them against the
 * data section of data_len bytes. */
static qkv_status parse_entry(const cJSON *e, const char *file, uint64_t data_len, qkv_tensor *t,
                              span *s, qkv_error *err)
{
    const char *name = e->string;
    if (!cJSON_IsObject(e)) return tensor_fail(err, file, name, "entry is not a JSON object");
    qkv_status st;
    if ((st = parse_dtype(e, file, name, &t->dtype, &s->half, err)) != QKV_OK) return st;
    if ((st = parse_shape(e, file, name, t, err)) != QKV_OK) return st;
    if ((st = parse_offsets(e, file, name, s, err)) != QKV_OK) return st;

    uint64_t nbytes;
    /* the sizes as stored: a half-precision tensor's data is half its float32 copy */
    const size_t size = s->half ? stored_size((stored_type)s->half) : dtype_size(t->dtype);
    if (!tensor_extent(t->shape, t->ndim, size, &t->numel, &nbytes))
        return tensor_fail(err, file, name, "shape has too many elements (int64 overflow)");
    if (s->end < s->begin)
        return tensor_fail(err, file, name, "data_offsets [%llu, %llu] end before they begin",
                           (unsigned long long)s->begin, (unsigned long long)s->end);
    if (s->end > data_len)
        return tensor_fail(err, file, name,
                           "data_offsets end %llu is past the data section (%llu bytes)",
                           (unsigned long long)s->end, (unsigned long long)data_len);
    if (s->end - s->begin != nbytes)
        return tensor_fail(err, file, name,
                           "data_offsets hold %llu bytes, but %lld %s elements need %llu",
                           (unsigned long long)(s->end - s->begin), (long long)t->numel,
                           s->half ? stored_name((stored_type)s->half) : dtype_name(t->dtype),
                           (unsigned long long)nbytes);
    return QKV_OK;
}

/* ---------------------------------------------------------------------------------------
 * Reading: checks across tensors
 * ------------------------------------------------------------------------------------- */

static int compare_spans(const void *a, const void *b)
{
    const span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

/* Two tensors may not share bytes. Gaps are allowed: some writers pad between tensors. */
static qkv_status check_overlaps(const qkv_tensor_file *f, span *spans, const char *file,
                                 qkv_error *err)
{
    qsort(spans, (size_t)f->count, sizeof *spans, compare_spans);
    const span *last = NULL; /* the non-empty span reaching furthest so far */
    for (int i = 0; i < f->count; i++) {
        const span *s = &spans[i];
        if (s->begin == s->end) continue; /* an empty tensor owns no bytes */
        if (last && s->begin < last->end)
            return tensor_fail(err, file, f->tensors[s->index].name,
                               "bytes [%llu, %llu) overlap tensor '%s' [%llu, %llu)",
                               (unsigned long long)s->begin, (unsigned long long)s->end,
                               printable(f->tensors[last->index].name).s,
                               (unsigned long long)last->begin, (unsigned long long)last->end);
        if (!last || s->end > last->end) last = s;
    }
    return QKV_OK;
}

static qkv_status check_unique_names(const qkv_tensor_file *f, const char *file, qkv_error *err)
{
    const char **names = malloc(((size_t)f->count + 1) * sizeof *names);
    if (!names) return qkv_fail(err, QKV_ERR_NOMEM, "%s: no memory for the tensor index", file);
    for (int i = 0; i < f->count; i++) names[i] = f->tensors[i].name;
    bool nomem;
    const char *dup = find_duplicate(names, (size_t)f->count, &nomem);
    free(names);
    if (nomem) return qkv_fail(err, QKV_ERR_NOMEM, "%s: no memory for the tensor index", file);
    if (dup) return tensor_fail(err, file, dup, "name appears twice in the header");
    return QKV_OK;
}

/* ---------------------------------------------------------------------------------------
 * Reading: metadata
 *
 * The public struct keeps the "__metadata__" object as JSON text in metadata_json, and has no
 * other field, so the unescaped strings that qkv_tensor_file_meta returns are packed behind
 * that text's terminating NUL, in the same allocation:
 *     json-text \0  ( '+' key \0 value \0 )*  \0
 * ------------------------------------------------------------------------------------- */

static qkv_status check_metadata(const cJSON *m, const char *file, qkv_error *err)
{
    if (!cJSON_IsObject(m))
        return qkv_fail(err, QKV_ERR_FORMAT, "%s: \"" META_KEY "\" is not a JSON object", file);
    size_t n = 0;
    for (const cJSON *kv = m->child; kv; kv = kv->next, n++)
        if (!cJSON_IsString(kv))
            return qkv_fail(err, QKV_ERR_FORMAT,
                            "%s: metadata value of '%s' is not a string", file,
                            printable(kv->string).s);
    const char **keys = malloc((n + 1) * sizeof *keys);
    if (!keys) return qkv_fail(err, QKV_ERR_NOMEM, "%s: no memory for the metadata", file);
    n = 0;
    for (const cJSON *kv = m->child; kv; kv = kv->next) keys[n++] = kv->string;
    bool nomem;
    const char *dup = find_duplicate(keys, n, &nomem);
    qkv_status st = QKV_OK;
    if (nomem) st = qkv_fail(err, QKV_ERR_NOMEM, "%s: no memory for the metadata", file);
    else if (dup)
        st = qkv_fail(err, QKV_ERR_FORMAT, "%s: metadata key '%s' appears twice", file,
                      printable(dup).s);
    free(keys);
    return st;
}

/* ---------------------------------------------------------------------------------------
 * Reading: the whole file
 * ------------------------------------------------------------------------------------- */

/* Fills f->tensors (names, dtypes, shapes) and spans from the header entries. */
static qkv_status parse_entries(qkv_tensor_file *f, span **spans_out, const cJSON *root,
                                const char *file, uint64_t data_len, qkv_error *err)
{
    int count = 0;
    const cJSON *meta = NULL;
    for (const cJSON *e = root->child; e; e = e->next) {
        if (strcmp(e->string, META_KEY) != 0) count++;
        else if (meta)
            return qkv_fail(err, QKV_ERR_FORMAT, "%s: \"" META_KEY "\" appears twice", file);
        else meta = e;
    }
    if (meta) {
        qkv_status st = check_metadata(meta, file, err);
        if (st == QKV_OK) st = tensor_file_set_metadata(f, meta, file, err);
        if (st != QKV_OK) return st;
    }

    f->tensors = calloc((size_t)count + 1, sizeof *f->tensors);
    span *spans = calloc((size_t)count + 1, sizeof *spans);
    *spans_out = spans;
    if (!f->tensors || !spans)
        return qkv_fail(err, QKV_ERR_NOMEM, "%s: no memory for %d tensors", file, count);
    f->count = count;

    int i = 0;
    for (const cJSON *e = root->child; e; e = e->next) {
        if (e == meta) continue;
        qkv_tensor *t = &f->tensors[i];
        spans[i].index = i;
        qkv_status st = parse_entry(e, file, data_len, t, &spans[i], err);
        if (st != QKV_OK) return st;
        if (!(t->name = strdup(e->string)))
            return qkv_fail(err, QKV_ERR_NOMEM, "%s: no memory for tensor names", file);
        i++;
    }
    return QKV_OK;
}

static size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

/* Copies every tensor into one owned buffer, each at a BUFFER_ALIGN-aligned offset.
 * Why copy tensor by tensor instead of the data section as a whole: the format does not
 * require a tensor's offset to be a multiple of its dtype size (an F64 may follow an odd
 * number of F32s), so qkv accepts such files and realigns them here rather than rejecting
 * them; gaps between tensors are not copied. */
static qkv_status copy_data(qkv_tensor_file *f, const span *spans, const byte_source *src,
                            uint64_t data_start, qkv_error *err)
{
    size_t total = 0; /* a half-precision tensor takes twice its bytes as float32 */
    for (int i = 0; i < f->count; i++)
        total += round_up((size_t)(spans[i].end - spans[i].begin) * (spans[i].half ? 2 : 1),
                          BUFFER_ALIGN);
    /* An empty tensor still gets a valid, aligned (if unused) data pointer. */
    f->buffer = aligned_alloc(BUFFER_ALIGN, total ? total : BUFFER_ALIGN);
    if (!f->buffer)
        return qkv_fail(err, QKV_ERR_NOMEM, "%s: no memory for %zu bytes of tensor data",
                        src->name, total);
    size_t at = 0;
    for (int i = 0; i < f->count; i++) {
        const span *s = &spans[i];
        size_t n = (size_t)(s->end - s->begin);
        qkv_tensor *t = &f->tensors[s->index];
        t->data = (unsigned char *)f->buffer + at;
        /* halves: read into the upper half of the tensor's place, widened from the front
         * (float i, bytes [4i, 4i + 4), ends before half i + 1 at 2n + 2i + 2 begins) */
        unsigned char *to = (unsigned char *)t->data + (s->half ? n : 0);
        qkv_status st = byte_source_read(src, to, data_start + s->begin, n, err);
        if (st != QKV_OK) return st;
        if (s->half) stored_convert(t->data, to, (stored_type)s->half, n / 2);
        at += round_up(n * (s->half ? 2 : 1), BUFFER_ALIGN);
    }
    return QKV_OK;
}

/* Builds out from src; on failure out is left zeroed. */
static qkv_status parse_source(qkv_tensor_file *out, const byte_source *src, qkv_error *err)
{
    qkv_tensor_file f = {0};
    char *text = NULL;
    cJSON *root = NULL;
    span *spans = NULL;
    uint64_t header_len = 0;

    qkv_status st = read_header_text(src, &text, &header_len, err);
    if (st == QKV_OK) st = parse_header_json(src, text, header_len, &root, err);
    uint64_t data_start = 8 + header_len;
    if (st == QKV_OK)
        st = parse_entries(&f, &spans, root, src->name, src->size - data_start, err);
    if (st == QKV_OK) st = check_unique_names(&f, src->name, err);
    if (st == QKV_OK) st = check_overlaps(&f, spans, src->name, err);
    if (st == QKV_OK) st = copy_data(&f, spans, src, data_start, err);

    free(spans);
    cJSON_Delete(root);
    free(text);
    if (st != QKV_OK) qkv_tensor_file_free(&f);
    *out = f;
    return st;
}

qkv_status qkv_tensor_file_parse(qkv_tensor_file *out, const void *bytes, size_t len,
                                 const char *name_for_errors, qkv_error *err)
{
    const char *name = name_for_errors ? name_for_errors : "<memory>";
    if (!out) return qkv_fail(err, QKV_ERR_ARG, "%s: NULL output", name);
    memset(out, 0, sizeof *out);
    if (!bytes && len > 0) return qkv_fail(err, QKV_ERR_ARG, "%s: NULL bytes", name);
    static const unsigned char none[1];
    byte_source src = {.name = name, .mem = bytes ? bytes : none, .fd = -1, .size = len};
    return parse_source(out, &src, err);
}

qkv_status qkv_tensor_file_load(qkv_tensor_file *out, const char *path, qkv_error *err)
{
    if (!out || !path) return qkv_fail(err, QKV_ERR_ARG, "qkv_tensor_file_load: NULL argument");
    memset(out, 0, sizeof *out);
    int fd;
    uint64_t size;
    qkv_status opened = open_regular(path, &fd, &size, err);
    if (opened) return opened;
    byte_source src = {.name = path, .mem = NULL, .fd = fd, .size = size};
    qkv_status st = parse_source(out, &src, err);
    close(fd);
    return st;
}

void qkv_tensor_file_free(qkv_tensor_file *f)
{
    if (!f) return;
    for (int i = 0; f->tensors && i < f->count; i++) free(f->tensors[i].name);
    free(f->tensors);
    free(f->metadata_json);
    free(f->buffer);
    memset(f, 0, sizeof *f);
}

const qkv_tensor *qkv_tensor_file_get(const qkv_tensor_file *f, const char *name)
{
    if (!f || !name) return NULL;
    for (int i = 0; i < f->count; i++)
        if (strcmp(f->tensors[i].name, name) == 0) return &f->tensors[i];
    return NULL;
}

const char *qkv_tensor_file_meta(const qkv_tensor_file *f, const char *key)
{
    if (!f || !f->metadata_json || !key) return NULL;
    const char *p = f->metadata_json + strlen(f->metadata_json) + 1;
    while (*p == '+') {
        const char *k = p + 1;
        const char *v = k + strlen(k) + 1;
        if (strcmp(k, key) == 0) return v;
        p = v + strlen(v) + 1;
    }
    return NULL;
}

/* ---------------------------------------------------------------------------------------
 * Writing
 * ------------------------------------------------------------------------------------- */

static qkv_status check_save_args(const char *path, const qkv_tensor_ref *tensors, int count,
                                  const char *const *meta_kv, int n_meta, qkv_error *err)
{
    if (!path) return qkv_fail(err, QKV_ERR_ARG, "qkv_tensor_file_save: NULL path");
    if (count < 0 || (count > 0 && !tensors))
        return qkv_fail(err, QKV_ERR_ARG, "%s: bad tensor list (count %d)", path, count);
    if (n_meta < 0 || (n_meta > 0 && !meta_kv))
        return qkv_fail(err, QKV_ERR_ARG, "%s: bad metadata list (n_meta %d)", path, n_meta);
    size_t bad;
    for (int i = 0; i < count; i++) {
        const qkv_tensor_ref *t = &tensors[i];
        const char *name = t->name ? t->name : "(null)";
        if (!t->name || !utf8_valid((const unsigned char *)name, strlen(name), &bad))
            return qkv_fail(err, QKV_ERR_ARG, "%s: tensor %d: name is NULL or not UTF-8", path, i);
        if (strcmp(name, META_KEY) == 0)
            return qkv_fail(err, QKV_ERR_ARG, "%s: tensor %d: '" META_KEY "' is reserved", path, i);
        if (!dtype_valid(t->dtype))
            return qkv_fail(err, QKV_ERR_ARG, "%s: tensor '%s': unknown dtype %d", path, name,
                            (int)t->dtype);
        if (t->ndim < 0 || t->ndim > QKV_MAX_DIMS)
            return qkv_fail(err, QKV_ERR_ARG, "%s: tensor '%s': ndim %d outside [0, %d]", path,
                            name, t->ndim, QKV_MAX_DIMS);
        for (int d = 0; d < t->ndim; d++)
            if (t->shape[d] < 0)
                return qkv_fail(err, QKV_ERR_ARG, "%s: tensor '%s': shape[%d] = %lld is negative",
                                path, name, d, (long long)t->shape[d]);
        int64_t numel;
        uint64_t nbytes;
        if (!tensor_extent(t->shape, t->ndim, dtype_size(t->dtype), &numel, &nbytes))
            return qkv_fail(err, QKV_ERR_ARG, "%s: tensor '%s': too many elements", path, name);
        if (numel > 0 && !t->data)
            return qkv_fail(err, QKV_ERR_ARG, "%s: tensor '%s': NULL data for %lld elements",
                            path, name, (long long)numel);
    }
    for (int i = 0; i < 2 * n_meta; i++) {
        const char *s = meta_kv[i];
        if (!s || !utf8_valid((const unsigned char *)s, strlen(s), &bad))
            return qkv_fail(err, QKV_ERR_ARG, "%s: metadata %s %d is NULL or not UTF-8", path,
                            i % 2 ? "value" : "key", i / 2);
    }
    return QKV_OK;
}

static qkv_status check_save_duplicates(const char *path, const qkv_tensor_ref *tensors,
                                        int count, const char *const *meta_kv, int n_meta,
                                        qkv_error *err)
{
    size_t n = (size_t)(count > n_meta ? count : n_meta);
    const char **names = malloc((n + 1) * sizeof *names);
    if (!names) return qkv_fail(err, QKV_ERR_NOMEM, "%s: no memory", path);
    for (int i = 0; i < count; i++) names[i] = tensors[i].name;
    bool nomem_t, nomem_m;
    const char *dup_t = find_duplicate(names, (size_t)count, &nomem_t);
    for (int i = 0; i < n_meta; i++) names[i] = meta_kv[2 * i];
    const char *dup_m = find_duplicate(names, (size_t)n_meta, &nomem_m);
    free(names);
    if (nomem_t || nomem_m) return qkv_fail(err, QKV_ERR_NOMEM, "%s: no memory", path);
    if (dup_t) return qkv_fail(err, QKV_ERR_ARG, "%s: tensor name '%s' given twice", path, dup_t);
    if (dup_m) return qkv_fail(err, QKV_ERR_ARG, "%s: metadata key '%s' given twice", path, dup_m);
    return QKV_OK;
}

/* Where each tensor goes in the data section: the 8-byte dtypes first, then the 4-byte ones,
 * then the 1-byte ones, each group in the caller's order. The reference reader rejects gaps between tensors, so
 * this is how every tensor gets an offset aligned for its dtype with no padding. order[k] is
 * the tensor written k-th. */
static void plan_layout(const qkv_tensor_ref *tensors, int count, uint64_t *begin,
                        uint64_t *nbytes, int *order)
{
    uint64_t at = 0;
    int k = 0;
    for (size_t size = 8; size >= 1; size /= 2) {
        for (int i = 0; i < count; i++) {
            if (dtype_size(tensors[i].dtype) != size) continue;
            int64_t numel;
            (void)tensor_extent(tensors[i].shape, tensors[i].ndim, size, &numel, &nbytes[i]);
            begin[i] = at;
            at += nbytes[i];
            order[k++] = i;
        }
    }
}

/* A JSON integer written exactly: cJSON would print a double, in exponent form past 1e15. */
static bool add_int_array(cJSON *obj, const char *key, const int64_t *v, int n)
{
    cJSON *a = cJSON_AddArrayToObject(obj, key);
    if (!a) return false;
    for (int i = 0; i < n; i++) {
        char num[24];
        snprintf(num, sizeof num, "%lld", (long long)v[i]);
        cJSON *item = cJSON_CreateRaw(num);
        if (!item || !cJSON_AddItemToArray(a, item)) {
            cJSON_Delete(item);
            return false;
        }
    }
    return true;
}

static cJSON *header_object(const qkv_tensor_ref *tensors, int count, const char *const *meta_kv,
                            int n_meta, const uint64_t *begin, const uint64_t *nbytes)
{
    cJSON *root = cJSON_CreateObject();
    bool ok = root != NULL;
    if (ok && n_meta > 0) {
        cJSON *m = cJSON_AddObjectToObject(root, META_KEY);
        ok = m != NULL;
        for (int i = 0; ok && i < n_meta; i++)
            ok = cJSON_AddStringToObject(m, meta_kv[2 * i], meta_kv[2 * i + 1]) != NULL;
    }
    for (int i = 0; ok && i < count; i++) {
        cJSON *e = cJSON_AddObjectToObject(root, tensors[i].name);
        int64_t offsets[2] = {(int64_t)begin[i], (int64_t)(begin[i] + nbytes[i])};
        ok = e && cJSON_AddStringToObject(e, "dtype", dtype_name(tensors[i].dtype)) &&
             add_int_array(e, "shape", tensors[i].shape, tensors[i].ndim) &&
             add_int_array(e, "data_offsets", offsets, 2);
    }
    if (!ok) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

/* The header text padded with spaces to a multiple of 8 bytes, so that the data section
 * (at 8 + its length) starts 8-byte aligned in the file. */
static char *header_text(cJSON *root, size_t *len)
{
    char *json = cJSON_PrintUnformatted(root);
    if (!json) return NULL;
    size_t n = strlen(json), padded = round_up(n, 8);
    char *text = malloc(padded);
    if (text) {
        memcpy(text, json, n);
        memset(text + n, ' ', padded - n);
        *len = padded;
    }
    cJSON_free(json);
    return text;
}

static bool write_all(FILE *fp, const void *p, size_t n)
{
    return n == 0 || fwrite(p, 1, n, fp) == n;
}

/* The file's bytes, written to fp and flushed to the disk. */
static bool write_contents(FILE *fp, const char *header, size_t header_len,
                           const qkv_tensor_ref *tensors, int count, const int *order,
                           const uint64_t *nbytes)
{
    unsigned char prefix[8];
    for (int i = 0; i < 8; i++) prefix[i] = (unsigned char)((uint64_t)header_len >> (8 * i));
    if (!write_all(fp, prefix, 8) || !write_all(fp, header, header_len)) return false;
    for (int k = 0; k < count; k++) {
        int i = order[k];
        if (!write_all(fp, tensors[i].data, (size_t)nbytes[i])) return false;
    }
    return fflush(fp) == 0 && fsync(fileno(fp)) == 0;
}

/* Makes the rename durable: the new directory entry is only safe once the directory is
 * flushed. Best effort, since the file itself is already complete and in place. */
static void sync_parent_dir(const char *path)
{
    char *dir = strdup(path);
    if (!dir) return;
    char *slash = strrchr(dir, '/');
    const char *d = slash ? (slash == dir ? "/" : (*slash = '\0', dir)) : ".";
    int fd = open(d, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
    free(dir);
}

static qkv_status write_atomically(const char *path, const char *header, size_t header_len,
                                   const qkv_tensor_ref *tensors, int count, const int *order,
                                   const uint64_t *nbytes, qkv_error *err)
{
    char why[128];
    char *tmp = NULL;
    qkv_status special = replaceable_target(path, err);
    if (special) return special;
    int fd = create_temporary(path, 0666, &tmp);
    if (fd < 0) {
        errno_text(errno, why, sizeof why);
        return qkv_fail(err, QKV_ERR_IO, "%s: cannot create a temporary file next to it: %s",
                        path, why);
    }
    FILE *fp = fdopen(fd, "wb");
    const char *step = "write";
    bool ok = fp && write_contents(fp, header, header_len, tensors, count, order, nbytes);
    int e = errno;
    if (fp) {
        if (fclose(fp) != 0 && ok) {
            ok = false;
            e = errno;
        }
    } else {
        close(fd);
    }
    if (ok && rename(tmp, path) != 0) {
        ok = false;
        e = errno;
        step = "rename the temporary file over";
    }
    if (!ok) {
        unlink(tmp);
        free(tmp);
        errno_text(e, why, sizeof why);
        return qkv_fail(err, QKV_ERR_IO, "%s: cannot %s it: %s", path, step, why);
    }
    free(tmp);
    sync_parent_dir(path);
    return QKV_OK;
}

qkv_status qkv_tensor_file_save(const char *path, const qkv_tensor_ref *tensors, int count,
                                const char *const *meta_kv, int n_meta, qkv_error *err)
{
    qkv_status st = check_save_args(path, tensors, count, meta_kv, n_meta, err);
    if (st == QKV_OK) st = check_save_duplicates(path, tensors, count, meta_kv, n_meta, err);
    if (st != QKV_OK) return st;

    size_t n = (size_t)count + 1;
    uint64_t *begin = malloc(n * sizeof *begin), *nbytes = malloc(n * sizeof *nbytes);
    int *order = malloc(n * sizeof *order);
    cJSON *root = NULL;
    char *header = NULL;
    size_t header_len = 0;
    if (begin && nbytes && order) {
        plan_layout(tensors, count, begin, nbytes, order);
        root = header_object(tensors, count, meta_kv, n_meta, begin, nbytes);
        if (root) header = header_text(root, &header_len);
    }
    if (!header) st = qkv_fail(err, QKV_ERR_NOMEM, "%s: no memory for the header", path);
    else st = write_atomically(path, header, header_len, tensors, count, order, nbytes, err);
    free(header);
    cJSON_Delete(root);
    free(order);
    free(nbytes);
    free(begin);
    return st;
}
