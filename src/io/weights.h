/* SPDX-License-Identifier: MIT */
/* What the readers of stored weights share (safetensors.c, pytorch.c, npz.c): the bytes of a
 * file or an in-memory image, the zip archives PyTorch and numpy write, half-precision
 * floats widened to float32, and a qkv_tensor_file built tensor by tensor. Not part of the
 * API. */
#ifndef QKV_IO_WEIGHTS_H
#define QKV_IO_WEIGHTS_H

#include <stdint.h>

#include <cJSON.h>

#include "core/internal.h"

/* ---- bytes -------------------------------------------------------------------------- */

/* A file being read: an image in memory (mem), or a descriptor read with pread. */
typedef struct {
    const char *name;
    const unsigned char *mem; /* the image, or NULL to read fd */
    int fd;
    uint64_t size;
} byte_source;

/* path opened for reading as a regular file (never a FIFO or device), *size its bytes. */
qkv_status open_weights(const char *path, int *fd, uint64_t *size, qkv_error *err);

/* n bytes at offset off into dst; QKV_ERR_FORMAT naming the file when they pass its end. */
qkv_status byte_source_read(const byte_source *src, void *dst, uint64_t off, size_t n,
                            qkv_error *err);

/* A reader of a whole tensor file from its bytes (npz.c, pytorch.c). */
typedef qkv_status (*tensor_file_reader)(qkv_tensor_file *out, const byte_source *src,
                                         qkv_error *err);
/* The public calls around a reader: over bytes in memory (name: the file's name in messages,
 * NULL "<memory>"), or over the file at path, opened as open_weights opens it; who names the
 * public call when an argument is NULL. */
qkv_status tensor_file_read_memory(tensor_file_reader read, const char *who, qkv_tensor_file *out,
                                   const void *bytes, size_t len, const char *name,
                                   qkv_error *err);
qkv_status tensor_file_read_path(tensor_file_reader read, const char *who, qkv_tensor_file *out,
                                 const char *path, qkv_error *err);
/* Defines a format's two public calls, qkv_tensor_file_parse_<format> and
 * qkv_tensor_file_load_<format> (include/qkv/io.h), over its reader: one definition for every
 * format, since they differ only in the reader and the names. */
#define TENSOR_FILE_CALLS(format, read)                                                         \
    qkv_status qkv_tensor_file_parse_##format(qkv_tensor_file *out, const void *bytes,         \
                                              size_t len, const char *name, qkv_error *err)    \
    {                                                                                          \
        return tensor_file_read_memory(read, "qkv_tensor_file_parse_" #format, out, bytes, len, \
                                       name, err);                                             \
    }                                                                                          \
    qkv_status qkv_tensor_file_load_##format(qkv_tensor_file *out, const char *path,           \
                                             qkv_error *err)                                   \
    {                                                                                          \
        return tensor_file_read_path(read, "qkv_tensor_file_load_" #format, out, path, err);   \
    }

/* ---- zip archives (torch.save, numpy.savez, OPUS-MT's releases) ----------------------- */

typedef struct {
    char *name;
    uint64_t offset;       /* of the data in the source, past the local header */
    uint64_t csize, usize; /* stored and extracted bytes */
    uint32_t crc;          /* CRC-32 of the extracted bytes */
    int method;            /* 0 stored, 8 deflated */
} zip_entry;

typedef struct {
    byte_source src;
    zip_entry *entries;
    int count;
} zip_archive;

/* The central directory of src (zip64 too), every entry checked against the file: stored or
 * deflated, unencrypted, its data inside the file, names without NUL, no name twice. The
 * archive keeps a copy of src (its memory or descriptor must outlive it). */
qkv_status zip_open(zip_archive *z, const byte_source *src, qkv_error *err);
void zip_close(zip_archive *z);
/* The entry called name, or NULL. */
const zip_entry *zip_find(const zip_archive *z, const char *name);
/* The entry's bytes into dst (e->usize bytes), inflated if need be and checked against its
 * CRC-32. */
qkv_status zip_extract(const zip_archive *z, const zip_entry *e, void *dst, qkv_error *err);
/* The same into malloc'd memory with a NUL after it, refusing an entry over max bytes. */
qkv_status zip_extract_alloc(const zip_archive *z, const zip_entry *e, size_t max, char **data,
                             qkv_error *err);
/* Whether the bytes start as a zip archive does ("PK\3\4", or an empty archive's "PK\5\6"). */
int zip_magic(const unsigned char *bytes, size_t n);

/* ---- element types as stored ---------------------------------------------------------- */

/* What a reader meets in a file; each is read as the qkv_dtype of stored_as(). */
typedef enum {
    STORED_F32,
    STORED_F16,
    STORED_BF16,
    STORED_F64,
    STORED_I64,
    STORED_I32,
    STORED_I16,
    STORED_I8,
    STORED_U8,
    STORED_BOOL
} stored_type;

size_t stored_size(stored_type t);
/* F16 and BF16 widen to F32, the small integers to I32. */
qkv_dtype stored_as(stored_type t);
const char *stored_name(stored_type t);

/* n elements of type t at src (little-endian, any alignment) as stored_as(t) into dst:
 * half floats exactly as numpy's astype(float32) widens them (NaN payloads kept), bfloat16
 * as its upper 16 bits. */
void stored_convert(void *dst, const void *src, stored_type t, size_t n);

/* The elements of a strided view (shape, strides in elements, offset) of src as a dense
 * row-major array of stored_as(t) in dst. */
void stored_gather(void *dst, const unsigned char *src, stored_type t, int ndim,
                   const int64_t *shape, const int64_t *strides, int64_t offset);

/* numel of shape, false on int64 overflow or a negative dimension. */
int shape_numel(const int64_t *shape, int ndim, int64_t *numel);

/* ---- a qkv_tensor_file built tensor by tensor ----------------------------------------- */

/* f->tensors for count tensors, each named, typed and shaped by the caller, then one buffer
 * for all their data (aligned as qkv_tensor_file_load aligns it): tensor_file_alloc_data sets
 * every data pointer from the shapes and dtypes. */
qkv_status tensor_file_alloc(qkv_tensor_file *f, int count, const char *file, qkv_error *err);
qkv_status tensor_file_alloc_data(qkv_tensor_file *f, const char *file, qkv_error *err);
/* The metadata object m (string values) as qkv_tensor_file_meta reads it. */
qkv_status tensor_file_set_metadata(qkv_tensor_file *f, const cJSON *m, const char *file,
                                    qkv_error *err);
/* A name fit to print in a message: control bytes as '?', at most 120 bytes. */
typedef struct {
    char s[121];
} printable_name;
printable_name printable(const char *name);

#endif
