/* SPDX-License-Identifier: MIT */
/* The pieces the weight readers share (see weights.h): reading bytes, element types as
 * stored, strided views gathered, and qkv_tensor_file assembled. */
#include "io/weights.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define BUFFER_ALIGN 64 /* as safetensors.c's: a cache line, and any SIMD load */

qkv_status open_weights(const char *path, int *fd, uint64_t *size, qkv_error *err)
{
    return open_regular(path, fd, size, err); /* the library's one opening (read_file.c) */
}

qkv_status byte_source_read(const byte_source *src, void *dst, uint64_t off, size_t n,
                            qkv_error *err)
{
    if (off > src->size || n > src->size - off)
        return qkv_fail(err, QKV_ERR_FORMAT,
                        "%s: %zu bytes at offset %llu pass the end of "
                        "the file (%llu bytes)",
                        src->name, n, (unsigned long long)off, (unsigned long long)src->size);
    if (src->mem) {
        if (n) memcpy(dst, src->mem + off, n);
        return QKV_OK;
    }
    unsigned char *p = dst;
    while (n > 0) {
        const size_t chunk = n < ((size_t)1 << 30) ? n : ((size_t)1 << 30);
        const ssize_t got = pread(src->fd, p, chunk, (off_t)off);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0)
            return qkv_fail(err, QKV_ERR_IO, "%s: read failed: %s", src->name, strerror(errno));
        if (got == 0)
            return qkv_fail(err, QKV_ERR_IO, "%s: file shrank while being read", src->name);
        p += got, off += (uint64_t)got, n -= (size_t)got;
    }
    return QKV_OK;
}

qkv_status tensor_file_read_memory(tensor_file_reader read, const char *who, qkv_tensor_file *out,
                                   const void *bytes, size_t len, const char *name,
                                   qkv_error *err)
{
    static const unsigned char none[1];
    const byte_source src = {name ? name : "<memory>", bytes ? bytes : none, -1, len};
    if (!out) return qkv_fail(err, QKV_ERR_ARG, "%s: NULL output", who);
    return read(out, &src, err);
}

qkv_status tensor_file_read_path(tensor_file_reader read, const char *who, qkv_tensor_file *out,
                                 const char *path, qkv_error *err)
{
    if (!out || !path) return qkv_fail(err, QKV_ERR_ARG, "%s: NULL argument", who);
    memset(out, 0, sizeof *out);
    byte_source src = {path, NULL, -1, 0};
    qkv_status st = open_weights(path, &src.fd, &src.size, err);
    if (st) return st;
    st = read(out, &src, err);
    close(src.fd);
    return st;
}

/* ---- element types ------------------------------------------------------------------ */

static const struct {
    const char *name;
    size_t size;
    qkv_dtype as;
} STORED[] = {
    [STORED_F32] = {"float32", 4, QKV_F32},   [STORED_F16] = {"float16", 2, QKV_F32},
    [STORED_BF16] = {"bfloat16", 2, QKV_F32}, [STORED_F64] = {"float64", 8, QKV_F64},
    [STORED_I64] = {"int64", 8, QKV_I64},     [STORED_I32] = {"int32", 4, QKV_I32},
    [STORED_I16] = {"int16", 2, QKV_I32},     [STORED_I8] = {"int8", 1, QKV_I32},
    [STORED_U8] = {"uint8", 1, QKV_I32},      [STORED_BOOL] = {"bool", 1, QKV_I32},
};

size_t stored_size(stored_type t) { return STORED[t].size; }
qkv_dtype stored_as(stored_type t) { return STORED[t].as; }
const char *stored_name(stored_type t) { return STORED[t].name; }

/* IEEE binary16 bits as binary32 bits, numpy's npy_halfbits_to_floatbits: every half is a
 * float exactly; a subnormal half is normalised, an infinity or NaN keeps its significand. */
static uint32_t half_bits_to_float_bits(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = h & 0x7c00u, sig = h & 0x03ffu;
    if (exp == 0x7c00u) return sign | 0x7f800000u | (sig << 13);
    if (exp) return sign | (((uint32_t)(h & 0x7fffu) + 0x1c000u) << 13);
    if (!sig) return sign;
    /* subnormal: shift the significand up to its leading one, lowering the exponent */
    sig <<= 1;
    while (!(sig & 0x0400u)) sig <<= 1, exp++;
    return sign | ((127u - 15u - exp) << 23) | ((sig & 0x03ffu) << 13);
}

static uint64_t load_le(const unsigned char *p, size_t n)
{
    uint64_t v = 0;
    for (size_t i = n; i-- > 0;) v = v << 8 | p[i];
    return v;
}

void stored_convert(void *dst, const void *src, stored_type t, size_t n)
{
    const unsigned char *s = src;
    const size_t k = STORED[t].size;
    if (t == STORED_F32 || t == STORED_F64 || t == STORED_I64 || t == STORED_I32) {
        memcpy(dst, src, n * k); /* qkv is little-endian, as the files are */
        return;
    }
    uint32_t *d = dst; /* every other type widens to 4 bytes */
    for (size_t i = 0; i < n; i++, s += k) {
        const uint64_t v = load_le(s, k);
        switch (t) {
        case STORED_F16:
            d[i] = half_bits_to_float_bits((uint16_t)v);
            break;
        case STORED_BF16:
            d[i] = (uint32_t)v << 16;
            break;
        case STORED_I16:
            d[i] = (uint32_t)(int32_t)(int16_t)v;
            break;
        case STORED_I8:
            d[i] = (uint32_t)(int32_t)(int8_t)v;
            break;
        default:
            d[i] = (uint32_t)v;
            break; /* uint8, bool */
        }
    }
}

void stored_gather(void *dst, const unsigned char *src, stored_type t, int ndim,
                   const int64_t *shape, const int64_t *strides, int64_t offset)
{
    const size_t k = STORED[t].size, out = qkv_dtype_size(STORED[t].as);
    int64_t numel = 1;
    for (int d = 0; d < ndim; d++) numel *= shape[d];
    if (numel <= 0) return;
    /* the innermost dimension is one conversion when contiguous */
    const int64_t inner = ndim ? shape[ndim - 1] : 1;
    const int contiguous = !ndim || strides[ndim - 1] == 1 || inner == 1;
    int64_t idx[QKV_MAX_DIMS] = {0};
    unsigned char *d = dst;
    for (int64_t done = 0; done < numel; done += inner) {
        int64_t at = offset;
        for (int i = 0; i + 1 < ndim; i++) at += idx[i] * strides[i];
        if (contiguous) {
            stored_convert(d, src + (size_t)at * k, t, (size_t)inner);
            d += (size_t)inner * out;
        } else {
            for (int64_t j = 0; j < inner; j++, d += out)
                stored_convert(d, src + (size_t)(at + j * strides[ndim - 1]) * k, t, 1);
        }
        for (int i = ndim - 2; i >= 0; i--) { /* the next index, odometer-wise */
            if (++idx[i] < shape[i]) break;
            idx[i] = 0;
        }
    }
}

int shape_numel(const int64_t *shape, int ndim, int64_t *numel)
{
    int64_t n = 1;
    int zero = 0;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0) return 0;
        if (!shape[d]) zero = 1;
        else if (n > INT64_MAX / shape[d]) return 0;
        else n *= shape[d];
    }
    *numel = zero ? 0 : n;
    return 1;
}

/* ---- the tensor file ---------------------------------------------------------------- */

qkv_status tensor_file_alloc(qkv_tensor_file *f, int count, const char *file, qkv_error *err)
{
    memset(f, 0, sizeof *f);
    if (!(f->tensors = calloc((size_t)count + 1, sizeof *f->tensors)))
        return qkv_fail(err, QKV_ERR_NOMEM, "%s: no memory for %d tensors", file, count);
    f->count = count;
    return QKV_OK;
}

qkv_status tensor_file_alloc_data(qkv_tensor_file *f, const char *file, qkv_error *err)
{
    size_t total = 0;
    for (int i = 0; i < f->count; i++) {
        const qkv_tensor *t = &f->tensors[i];
        const size_t k = qkv_dtype_size(t->dtype);
        if ((uint64_t)t->numel > (SIZE_MAX - total - BUFFER_ALIGN) / k)
            return qkv_fail(err, QKV_ERR_FORMAT,
                            "%s: tensor '%s': %lld elements are more "
                            "than memory can hold",
                            file, printable(t->name).s, (long long)t->numel);
        total += ((size_t)t->numel * k + BUFFER_ALIGN - 1) / BUFFER_ALIGN * BUFFER_ALIGN;
    }
    if (!(f->buffer = aligned_alloc(BUFFER_ALIGN, total ? total : BUFFER_ALIGN)))
        return qkv_fail(err, QKV_ERR_NOMEM, "%s: no memory for %zu bytes of tensor data", file,
                        total);
    size_t at = 0;
    for (int i = 0; i < f->count; i++) {
        qkv_tensor *t = &f->tensors[i];
        t->data = (unsigned char *)f->buffer + at;
        at += ((size_t)t->numel * qkv_dtype_size(t->dtype) + BUFFER_ALIGN - 1) / BUFFER_ALIGN *
              BUFFER_ALIGN;
    }
    return QKV_OK;
}

/* The public struct keeps the metadata object as JSON text in metadata_json, and has no other
 * field, so the unescaped strings that qkv_tensor_file_meta returns are packed behind that
 * text's terminating NUL, in the same allocation:
 *     json-text \0  ( '+' key \0 value \0 )*  \0 */
qkv_status tensor_file_set_metadata(qkv_tensor_file *f, const cJSON *m, const char *file,
                                    qkv_error *err)
{
    char *json = cJSON_PrintUnformatted(m);
    if (!json) return qkv_fail(err, QKV_ERR_NOMEM, "%s: no memory for the metadata", file);
    const size_t json_len = strlen(json);
    size_t total = json_len + 2;
    for (const cJSON *kv = m->child; kv; kv = kv->next)
        total += 1 + strlen(kv->string) + 1 + strlen(kv->valuestring) + 1;
    char *p = malloc(total);
    if (!p) {
        cJSON_free(json);
        return qkv_fail(err, QKV_ERR_NOMEM, "%s: no memory for the metadata", file);
    }
    f->metadata_json = p;
    memcpy(p, json, json_len + 1);
    cJSON_free(json);
    p += json_len + 1;
    for (const cJSON *kv = m->child; kv; kv = kv->next) {
        *p++ = '+';
        const size_t kn = strlen(kv->string) + 1, vn = strlen(kv->valuestring) + 1;
        memcpy(p, kv->string, kn);
        memcpy(p + kn, kv->valuestring, vn);
        p += kn + vn;
    }
    *p = '\0';
    return QKV_OK;
}

printable_name printable(const char *name)
{
    printable_name r;
    size_t i = 0;
    for (; name && name[i] && i < sizeof r.s - 1; i++) {
        const unsigned char c = (unsigned char)name[i];
        r.s[i] = c < 0x20 || c == 0x7F ? '?' : (char)c;
    }
    r.s[i] = '\0';
    return r;
}
