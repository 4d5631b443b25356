/* SPDX-License-Identifier: MIT */
/* The library's one whole-file reader; see qkv_read_file in qkv.h. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/internal.h"

static qkv_status too_large(const char *name, size_t max_bytes, int regular, qkv_error *err)
{
    return qkv_fail(err, QKV_ERR_FORMAT, "%s: more than %zu bytes%s", name, max_bytes,
                    regular ? "" : " (not a regular file: it may never end)");
}

/* How large a buffer to start with, after refusing what stat already tells: a directory
 * (fread would only fail with EISDIR) and a regular file over the limit, unread. */
static qkv_status first_capacity(FILE *f, const char *name, size_t max_bytes, size_t *cap,
                                 int *regular, qkv_error *err)
{
    struct stat sb;
    *cap = (size_t)1 << 16, *regular = 0;
    if (fstat(fileno(f), &sb) != 0) return QKV_OK; /* then reading will tell */
    if (S_ISDIR(sb.st_mode))
        return qkv_fail(err, QKV_ERR_IO, "%s: is a directory, not a file", name);
    if (!S_ISREG(sb.st_mode)) return QKV_OK;
    *regular = 1;
    if ((uintmax_t)sb.st_size > max_bytes) return too_large(name, max_bytes, 1, err);
    /* its size, and a byte to see the end without growing (a /proc file says 0 and grows) */
    if ((uintmax_t)sb.st_size < SIZE_MAX - 2) *cap = (size_t)sb.st_size + 2;
    return QKV_OK;
}

qkv_status qkv_read_file(const char *path, size_t max_bytes, char **text, size_t *len,
                         qkv_error *err)
{
    if (!text) return qkv_fail(err, QKV_ERR_ARG, "qkv_read_file: NULL text");
    *text = NULL;
    const char *name = path ? path : "stdin";
    FILE *f = path ? fopen(path, "rb") : stdin;
    if (!f) return qkv_fail(err, QKV_ERR_IO, "%s: cannot open: %s", name, strerror(errno));
    size_t cap, n = 0;
    int regular;
    qkv_status st = first_capacity(f, name, max_bytes, &cap, &regular, err);
    /* max_bytes + 1 bytes and the NUL are all a buffer ever needs: one byte past the limit
     * proves the file too large */
    const size_t most = max_bytes < SIZE_MAX - 2 ? max_bytes + 2 : SIZE_MAX;
    if (cap > most) cap = most;
    char *buf = st ? NULL : malloc(cap);
    if (!st && !buf) st = qkv_fail(err, QKV_ERR_NOMEM, "%s: out of memory reading it", name);
    while (!st) {
        n += fread(buf + n, 1, cap - 1 - n, f);
        if (n > max_bytes) st = too_large(name, max_bytes, regular, err);
        else if (n < cap - 1) break; /* the end of the file, or an error (below) */
        else {
            size_t bigger = cap <= most / 2 ? cap * 2 : most;
            char *b = bigger > cap ? realloc(buf, bigger) : NULL; /* SIZE_MAX bytes: no memory */
            if (!b) st = qkv_fail(err, QKV_ERR_NOMEM, "%s: out of memory reading it", name);
            else buf = b, cap = bigger;
        }
    }
    if (!st && ferror(f)) st = qkv_fail(err, QKV_ERR_IO, "%s: read error", name);
    if (f != stdin) fclose(f);
    if (st) return free(buf), st;
    buf[n] = '\0';
    *text = buf;
    if (len) *len = n;
    return QKV_OK;
}
