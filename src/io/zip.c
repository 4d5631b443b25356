/* SPDX-License-Identifier: MIT */
/* Zip archives as PyTorch (torch.save), numpy (savez) and OPUS-MT's release zips write them
 * (PKWARE's APPNOTE.TXT): the end-of-central-directory record (and zip64's), the central
 * directory, each entry's local header for where its data starts; stored and deflated
 * entries (zlib), CRC-32 checked. An archive is untrusted: every offset and size is checked
 * against the file before anything is read or allocated from it. */
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "io/weights.h"

#define EOCD_SIG 0x06054b50u
#define EOCD64_SIG 0x06064b50u
#define LOCATOR64_SIG 0x07064b50u
#define CENTRAL_SIG 0x02014b50u
#define LOCAL_SIG 0x04034b50u
#define EOCD_BYTES 22
#define MAX_COMMENT 65535
#define MAX_ENTRIES 1000000 /* a checkpoint of a million tensors is beyond any model */

static uint32_t u16(const unsigned char *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }
static uint32_t u32(const unsigned char *p) { return u16(p) | u16(p + 2) << 16; }
static uint64_t u64(const unsigned char *p) { return u32(p) | (uint64_t)u32(p + 4) << 32; }

int zip_magic(const unsigned char *b, size_t n)
{
    return n >= 4 && b[0] == 'P' && b[1] == 'K' &&
           ((b[2] == 3 && b[3] == 4) || (b[2] == 5 && b[3] == 6));
}

/* Where the central directory is and how many entries it has: the end record, found by
 * searching back over a comment of up to 64 KiB, then zip64's records when the end record's
 * fields say they overflowed. */
static qkv_status find_directory(const byte_source *src, uint64_t *cd_off, uint64_t *cd_size,
                                 uint64_t *count, qkv_error *err)
{
    if (src->size < EOCD_BYTES)
        return qkv_fail(err, QKV_ERR_FORMAT, "%s: %llu bytes: too short for a zip archive",
                        src->name, (unsigned long long)src->size);
    const size_t tail =
        (size_t)(src->size < EOCD_BYTES + MAX_COMMENT ? src->size : EOCD_BYTES + MAX_COMMENT);
    unsigned char *buf = malloc(tail);
    if (!buf) return qkv_fail(err, QKV_ERR_NOMEM, "%s: out of memory", src->name);
    const uint64_t base = src->size - tail;
    qkv_status st = byte_source_read(src, buf, base, tail, err);
    size_t at = tail - EOCD_BYTES + 1;
    int found = 0;
    while (!st && at-- > 0)
        if (u32(buf + at) == EOCD_SIG && at + EOCD_BYTES + u16(buf + at + 20) == tail) {
            found = 1;
            break;
        }
    if (!st && !found)
        st = qkv_fail(err, QKV_ERR_FORMAT,
                      "%s: no zip end-of-central-directory record: not a "
                      "zip archive, or a truncated one",
                      src->name);
    if (st) return free(buf), st;
    const unsigned char *e = buf + at;
    if (u16(e + 4) || u16(e + 6)) {
        free(buf);
        return qkv_fail(err, QKV_ERR_FORMAT, "%s: a zip archive split over several disks",
                        src->name);
    }
    *count = u16(e + 10), *cd_size = u32(e + 12), *cd_off = u32(e + 16);
    const uint64_t eocd = base + at;
    free(buf);
    if (*count != 0xffff && *cd_size != 0xffffffffu && *cd_off != 0xffffffffu) return QKV_OK;
    /* zip64: the locator sits just before the end record and points at zip64's end record */
    unsigned char loc[20], rec[56];
    if (eocd < sizeof loc)
        return qkv_fail(err, QKV_ERR_FORMAT, "%s: zip64 sizes without a zip64 locator", src->name);
    if ((st = byte_source_read(src, loc, eocd - sizeof loc, sizeof loc, err))) return st;
    if (u32(loc) != LOCATOR64_SIG)
        return qkv_fail(err, QKV_ERR_FORMAT, "%s: zip64 sizes without a zip64 locator", src->name);
    const uint64_t rec_off = u64(loc + 8);
    if (rec_off > eocd || eocd - rec_off < sizeof rec)
        return qkv_fail(err, QKV_ERR_FORMAT,
                        "%s: the zip64 end record (offset %llu) is "
                        "outside the archive",
                        src->name, (unsigned long long)rec_off);
    if ((st = byte_source_read(src, rec, rec_off, sizeof rec, err))) return st;
    if (u32(rec) != EOCD64_SIG)
        return qkv_fail(err, QKV_ERR_FORMAT, "%s: no zip64 end record at offset %llu", src->name,
                        (unsigned long long)rec_off);
    *count = u64(rec + 32), *cd_size = u64(rec + 40), *cd_off = u64(rec + 48);
    return QKV_OK;
}

/* Zip64's extended information (extra field 0x0001): the 64-bit values of those fields that
 * the header set to all ones, in the order usize, csize, offset. */
static int read_zip64_extra(const unsigned char *extra, size_t n, uint64_t *usize, uint64_t *csize,
                            uint64_t *offset)
{
    for (size_t at = 0; at + 4 <= n;) {
        const uint32_t id = u16(extra + at), len = u16(extra + at + 2);
        if (at + 4 + len > n) return 0;
        if (id == 1) {
            const unsigned char *p = extra + at + 4, *end = p + len;
            uint64_t *fields[3] = {usize, csize, offset};
            for (int i = 0; i < 3; i++) {
                if (*fields[i] != 0xffffffffu) continue;
                if (end - p < 8) return 0;
                *fields[i] = u64(p), p += 8;
            }
            return 1;
        }
        at += 4 + len;
    }
    return *usize != 0xffffffffu && *csize != 0xffffffffu && *offset != 0xffffffffu;
}

static int compare_names(const void *a, const void *b)
{
    return strcmp(((const zip_entry *)a)->name, ((const zip_entry *)b)->name);
}

/* One central directory header at cd[at..): the entry, its data's place from the local
 * header, all within the file. *next: the following header. */
static qkv_status read_entry(const byte_source *src, const unsigned char *cd, size_t cd_size,
                             size_t at, size_t *next, zip_entry *e, qkv_error *err)
{
    if (cd_size - at < 46 || u32(cd + at) != CENTRAL_SIG)
        return qkv_fail(err, QKV_ERR_FORMAT,
                        "%s: the zip central directory is damaged "
                        "(byte %zu)",
                        src->name, at);
    const unsigned char *h = cd + at;
    const size_t name_len = u16(h + 28), extra_len = u16(h + 30), comment_len = u16(h + 32);
    if (cd_size - at - 46 < name_len + extra_len + comment_len)
        return qkv_fail(err, QKV_ERR_FORMAT,
                        "%s: the zip central directory is damaged "
                        "(byte %zu)",
                        src->name, at);
    *next = at + 46 + name_len + extra_len + comment_len;
    if (memchr(h + 46, '\0', name_len))
        return qkv_fail(err, QKV_ERR_FORMAT, "%s: a zip entry's name holds a NUL byte", src->name);
    if (!(e->name = malloc(name_len + 1)))
        return qkv_fail(err, QKV_ERR_NOMEM, "%s: out of memory", src->name);
    memcpy(e->name, h + 46, name_len);
    e->name[name_len] = '\0';
    const uint32_t flags = u16(h + 8);
    e->method = (int)u16(h + 10), e->crc = u32(h + 16);
    e->csize = u32(h + 20), e->usize = u32(h + 24);
    uint64_t local = u32(h + 42);
    if (!read_zip64_extra(h + 46 + name_len, extra_len, &e->usize, &e->csize, &local))
        return qkv_fail(err, QKV_ERR_FORMAT, "%s: zip entry '%s': damaged zip64 sizes", src->name,
                        printable(e->name).s);
    if (flags & 1)
        return qkv_fail(err, QKV_ERR_FORMAT, "%s: zip entry '%s' is encrypted", src->name,
                        printable(e->name).s);
    if (e->method != 0 && e->method != 8)
        return qkv_fail(err, QKV_ERR_FORMAT,
                        "%s: zip entry '%s' is compressed with method %d "
                        "(qkv reads stored and deflated entries)",
                        src->name, printable(e->name).s, e->method);
    if (e->method == 0 && e->csize != e->usize)
        return qkv_fail(err, QKV_ERR_FORMAT,
                        "%s: zip entry '%s' is stored, but its sizes "
                        "differ (%llu and %llu bytes)",
                        src->name, printable(e->name).s, (unsigned long long)e->csize,
                        (unsigned long long)e->usize);
    if (e->method == 8 && e->usize / 1032 > e->csize + 1) /* deflate's limit is 1032:1 */
        return qkv_fail(err, QKV_ERR_FORMAT,
                        "%s: zip entry '%s' claims %llu bytes from %llu "
                        "deflated ones, more than deflate can give",
                        src->name, printable(e->name).s, (unsigned long long)e->usize,
                        (unsigned long long)e->csize);
    unsigned char lh[30];
    qkv_status st = local > src->size || src->size - local < sizeof lh
                        ? qkv_fail(err, QKV_ERR_FORMAT,
                                   "%s: zip entry '%s': its header "
                                   "(offset %llu) is outside the file",
                                   src->name, printable(e->name).s, (unsigned long long)local)
                        : byte_source_read(src, lh, local, sizeof lh, err);
    if (st) return st;
    if (u32(lh) != LOCAL_SIG)
        return qkv_fail(err, QKV_ERR_FORMAT,
                        "%s: zip entry '%s': no local header at offset "
                        "%llu",
                        src->name, printable(e->name).s, (unsigned long long)local);
    e->offset = local + sizeof lh + u16(lh + 26) + u16(lh + 28);
    if (e->offset > src->size || e->csize > src->size - e->offset)
        return qkv_fail(err, QKV_ERR_FORMAT,
                        "%s: zip entry '%s': %llu bytes at offset %llu "
                        "pass the end of the file (%llu bytes)",
                        src->name, printable(e->name).s, (unsigned long long)e->csize,
                        (unsigned long long)e->offset, (unsigned long long)src->size);
    return QKV_OK;
}

qkv_status zip_open(zip_archive *z, const byte_source *src, qkv_error *err)
{
    memset(z, 0, sizeof *z);
    z->src = *src;
    uint64_t cd_off = 0, cd_size = 0, count = 0;
    qkv_status st = find_directory(src, &cd_off, &cd_size, &count, err);
    if (st) return st;
    if (cd_off > src->size || cd_size > src->size - cd_off)
        return qkv_fail(err, QKV_ERR_FORMAT,
                        "%s: the zip central directory (%llu bytes at "
                        "offset %llu) passes the end of the file",
                        src->name, (unsigned long long)cd_size, (unsigned long long)cd_off);
    if (count > MAX_ENTRIES || count > cd_size / 46)
        return qkv_fail(err, QKV_ERR_FORMAT,
                        "%s: %llu zip entries in a central directory of "
                        "%llu bytes",
                        src->name, (unsigned long long)count, (unsigned long long)cd_size);
    unsigned char *cd = malloc(cd_size ? (size_t)cd_size : 1);
    z->entries = calloc(count ? (size_t)count : 1, sizeof *z->entries);
    if (!cd || !z->entries) st = qkv_fail(err, QKV_ERR_NOMEM, "%s: out of memory", src->name);
    if (!st) st = byte_source_read(src, cd, cd_off, (size_t)cd_size, err);
    size_t at = 0;
    for (uint64_t i = 0; !st && i < count; i++) {
        z->count = (int)i + 1;
        st = read_entry(src, cd, (size_t)cd_size, at, &at, &z->entries[i], err);
    }
    free(cd);
    if (!st && z->count > 1) {
        qsort(z->entries, (size_t)z->count, sizeof *z->entries, compare_names);
        for (int i = 1; !st && i < z->count; i++)
            if (!strcmp(z->entries[i].name, z->entries[i - 1].name))
                st = qkv_fail(err, QKV_ERR_FORMAT, "%s: zip entry '%s' appears twice", src->name,
                              printable(z->entries[i].name).s);
    }
    if (st) zip_close(z);
    return st;
}

void zip_close(zip_archive *z)
{
    for (int i = 0; z->entries && i < z->count; i++) free(z->entries[i].name);
    free(z->entries);
    memset(z, 0, sizeof *z);
}

const zip_entry *zip_find(const zip_archive *z, const char *name)
{
    if (!z->count) return NULL;
    const zip_entry key = {.name = (char *)name};
    return bsearch(&key, z->entries, (size_t)z->count, sizeof key, compare_names);
}

/* The deflated bytes of e inflated into dst (exactly e->usize of them), read in chunks. */
static qkv_status inflate_entry(const zip_archive *z, const zip_entry *e, unsigned char *dst,
                                qkv_error *err)
{
    z_stream s;
    memset(&s, 0, sizeof s);
    if (inflateInit2(&s, -MAX_WBITS) != Z_OK) /* raw deflate: zip has no zlib header */
        return qkv_fail(err, QKV_ERR_NOMEM, "%s: cannot start inflating", z->src.name);
    enum { CHUNK = 1 << 16 };
    unsigned char *in = z->src.mem ? NULL : malloc(CHUNK);
    qkv_status st =
        z->src.mem || in ? QKV_OK : qkv_fail(err, QKV_ERR_NOMEM, "%s: out of memory", z->src.name);
    uint64_t read = 0, written = 0;
    int rc = Z_OK;
    while (!st && rc != Z_STREAM_END) {
        if (!s.avail_in) {
            if (read == e->csize) break; /* the input ran out first */
            const size_t n = e->csize - read < CHUNK ? (size_t)(e->csize - read) : CHUNK;
            if (z->src.mem) s.next_in = (unsigned char *)z->src.mem + e->offset + read;
            else if ((st = byte_source_read(&z->src, in, e->offset + read, n, err))) break;
            else s.next_in = in;
            s.avail_in = (uInt)n, read += n;
        }
        const uint64_t room = e->usize - written;
        unsigned char spare;
        /* no room left: inflate into one spare byte, which only data past usize would fill */
        s.next_out = room ? dst + written : &spare;
        s.avail_out = room ? (uInt)(room < (1u << 30) ? room : (1u << 30)) : 1;
        const uInt before = s.avail_out;
        rc = inflate(&s, Z_NO_FLUSH);
        if (!room && s.avail_out != before) rc = Z_DATA_ERROR;
        else written += before - s.avail_out;
        if (rc != Z_OK && rc != Z_STREAM_END && rc != Z_BUF_ERROR)
            st = qkv_fail(err, QKV_ERR_FORMAT, "%s: zip entry '%s': damaged deflate data%s",
                          z->src.name, printable(e->name).s,
                          !room ? " (more bytes than its size)" : "");
    }
    if (!st && (rc != Z_STREAM_END || written != e->usize))
        st = qkv_fail(err, QKV_ERR_FORMAT,
                      "%s: zip entry '%s': the deflate data ends after "
                      "%llu of %llu bytes",
                      z->src.name, printable(e->name).s, (unsigned long long)written,
                      (unsigned long long)e->usize);
    inflateEnd(&s);
    free(in);
    return st;
}

qkv_status zip_extract(const zip_archive *z, const zip_entry *e, void *dst, qkv_error *err)
{
    qkv_status st = e->method == 8
                        ? inflate_entry(z, e, dst, err)
                        : byte_source_read(&z->src, dst, e->offset, (size_t)e->usize, err);
    if (st) return st;
    /* crc32 takes a uInt length: the data in slices */
    uLong crc = crc32(0L, Z_NULL, 0);
    const unsigned char *p = dst;
    for (uint64_t left = e->usize; left;) {
        const uInt n = left < (1u << 30) ? (uInt)left : (1u << 30);
        crc = crc32(crc, p, n), p += n, left -= n;
    }
    if ((uint32_t)crc != e->crc)
        return qkv_fail(err, QKV_ERR_FORMAT,
                        "%s: zip entry '%s': CRC-32 %08x, the archive "
                        "says %08x (damaged data)",
                        z->src.name, printable(e->name).s, (unsigned)crc, (unsigned)e->crc);
    return QKV_OK;
}

qkv_status zip_extract_alloc(const zip_archive *z, const zip_entry *e, size_t max, char **data,
                             qkv_error *err)
{
    *data = NULL;
    if (e->usize > max)
        return qkv_fail(err, QKV_ERR_FORMAT,
                        "%s: zip entry '%s' is %llu bytes, over the "
                        "%zu-byte limit for it",
                        z->src.name, printable(e->name).s, (unsigned long long)e->usize, max);
    char *buf = malloc((size_t)e->usize + 1);
    if (!buf)
        return qkv_fail(err, QKV_ERR_NOMEM, "%s: out of memory for zip entry '%s'", z->src.name,
                        printable(e->name).s);
    qkv_status st = zip_extract(z, e, buf, err);
    if (st) return free(buf), st;
    buf[e->usize] = '\0';
    *data = buf;
    return QKV_OK;
}
