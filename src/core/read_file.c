/* SPDX-License-Identifier: MIT */
/* How the library opens and reads the files it is given; see qkv_open_file and qkv_read_file
 * in qkv/core.h. One place decides what may be read, so that no reader waits forever on a
 * FIFO or reads a device until memory runs out. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/internal.h"

static const char *kind_of(mode_t m)
{
    return S_ISFIFO(m) ? "a FIFO or pipe" : S_ISCHR(m) ? "a character device"
           : S_ISBLK(m) ? "a block device" : S_ISSOCK(m) ? "a socket" : "not a plain file";
}

/* A FIFO opened without blocking has a writer when a read would wait (EAGAIN) or has bytes;
 * none when it reads as the end. *byte: the byte read, or -1. */
static qkv_status fifo_has_writer(int fd, const char *path, int *byte, qkv_error *err)
{
    unsigned char c;
    ssize_t n;
    *byte = -1;
    while ((n = read(fd, &c, 1)) < 0 && errno == EINTR) {}
    if (n == 1) return *byte = c, QKV_OK;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return QKV_OK;
    if (n < 0) return qkv_fail(err, QKV_ERR_IO, "%s: cannot read: %s", path, strerror(errno));
    return qkv_fail(err, QKV_ERR_IO, "%s: a FIFO or pipe that no process writes to: there is "
                    "nothing to read (qkv does not wait for a writer)", path);
}

static qkv_status open_for_reading(const char *path, int regular_only, int *fd_out, struct stat *sb,
                            int *first_byte, qkv_error *err)
{
    *fd_out = -1, *first_byte = -1;
    if (!path) return qkv_fail(err, QKV_ERR_ARG, "open_for_reading: NULL path");
    /* O_NONBLOCK: opening a FIFO otherwise waits until some process opens it for writing */
    const int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) return qkv_fail(err, QKV_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    qkv_status st = QKV_OK;
    if (fstat(fd, sb) != 0)
        st = qkv_fail(err, QKV_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
    else if (S_ISDIR(sb->st_mode))
        st = qkv_fail(err, QKV_ERR_IO, "%s: is a directory, not a file", path);
    else if (regular_only && !S_ISREG(sb->st_mode))
        st = qkv_fail(err, QKV_ERR_IO, "%s: is %s, not a regular file", path,
                      kind_of(sb->st_mode));
    else if (S_ISFIFO(sb->st_mode))
        st = fifo_has_writer(fd, path, first_byte, err);
    /* from here on reads wait for data as on any pipe: there is a writer to send it */
    const int flags = st ? 0 : fcntl(fd, F_GETFL);
    if (!st && (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) < 0))
        st = qkv_fail(err, QKV_ERR_IO, "%s: cannot set blocking reads: %s", path,
                      strerror(errno));
    if (st) return close(fd), st;
    *fd_out = fd;
    return QKV_OK;
}

static qkv_status open_stream(const char *path, int regular_only, FILE **out, qkv_error *err)
{
    int fd, byte;
    struct stat sb;
    *out = NULL;
    qkv_status st = open_for_reading(path, regular_only, &fd, &sb, &byte, err);
    if (st) return st;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        st = qkv_fail(err, QKV_ERR_NOMEM, "%s: cannot open a stream: %s", path, strerror(errno));
        close(fd);
        return st;
    }
    if (byte >= 0 && ungetc(byte, f) == EOF) { /* one byte of push-back is always there */
        fclose(f);
        return qkv_fail(err, QKV_ERR_IO, "%s: cannot read", path);
    }
    *out = f;
    return QKV_OK;
}

FILE *qkv_open_file(const char *path, int regular_only, qkv_error *err)
{
    FILE *f;
    return open_stream(path, regular_only, &f, err) ? NULL : f;
}

qkv_status open_regular(const char *path, int *fd, uint64_t *size, qkv_error *err)
{
    struct stat sb;
    int byte;
    qkv_status st = open_for_reading(path, 1, fd, &sb, &byte, err);
    if (!st) *size = (uint64_t)sb.st_size;
    return st;
}

static qkv_status too_large(const char *name, size_t max_bytes, int regular, qkv_error *err)
{
    return qkv_fail(err, QKV_ERR_FORMAT, "%s: more than %zu bytes%s", name, max_bytes,
                    regular ? "" : " (not a regular file: it may never end)");
}

/* The whole stream f in *text: a regular file over the limit is refused unread, anything
 * else once max_bytes + 1 bytes have come. */
static qkv_status read_stream(FILE *f, const char *name, size_t max_bytes, char **text,
                              size_t *len, qkv_error *err)
{
    struct stat sb;
    size_t cap = (size_t)1 << 16, n = 0;
    int regular = 0;
    const int known = fstat(fileno(f), &sb) == 0;
    if (known && S_ISDIR(sb.st_mode))
        return qkv_fail(err, QKV_ERR_IO, "%s: is a directory, not a file", name);
    if (known && S_ISREG(sb.st_mode)) {
        regular = 1;
        if ((uintmax_t)sb.st_size > max_bytes) return too_large(name, max_bytes, 1, err);
        /* its size, and a byte to see the end without growing (a /proc file says 0 and
         * grows) */
        if ((uintmax_t)sb.st_size < SIZE_MAX - 2) cap = (size_t)sb.st_size + 2;
    }
    /* max_bytes + 1 bytes and the NUL are all a buffer ever needs: one byte past the limit
     * proves the file too large */
    const size_t most = max_bytes < SIZE_MAX - 2 ? max_bytes + 2 : SIZE_MAX;
    if (cap > most) cap = most;
    qkv_status st = QKV_OK;
    char *buf = malloc(cap);
    if (!buf) st = qkv_fail(err, QKV_ERR_NOMEM, "%s: out of memory reading it", name);
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
    if (st) return free(buf), st;
    buf[n] = '\0';
    *text = buf;
    if (len) *len = n;
    return QKV_OK;
}

static qkv_status read_whole(const char *path, int regular_only, size_t max_bytes, char **text,
                             size_t *len, qkv_error *err)
{
    if (!text) return qkv_fail(err, QKV_ERR_ARG, "qkv_read_file: NULL text");
    *text = NULL;
    if (!path) return read_stream(stdin, "stdin", max_bytes, text, len, err);
    FILE *f;
    qkv_status st = open_stream(path, regular_only, &f, err);
    if (st) return st;
    st = read_stream(f, path, max_bytes, text, len, err);
    fclose(f);
    return st;
}

qkv_status qkv_read_file(const char *path, size_t max_bytes, char **text, size_t *len,
                         qkv_error *err)
{
    return read_whole(path, 0, max_bytes, text, len, err);
}

qkv_status qkv_read_regular_file(const char *path, size_t max_bytes, char **text, size_t *len,
                                 qkv_error *err)
{
    if (!path) return qkv_fail(err, QKV_ERR_ARG, "qkv_read_regular_file: NULL path");
    return read_whole(path, 1, max_bytes, text, len, err);
}

qkv_status qkv_read_lines(const char *path, int tsv, int *count, char ***lines, char **text,
                          qkv_error *err)
{
    size_t len;
    *lines = NULL;
    const char *name = path && strcmp(path, "-") ? path : "stdin";
    qkv_status st = qkv_read_file(path && strcmp(path, "-") ? path : NULL, QKV_MAX_TEXT_BYTES,
                                  text, &len, err);
    if (st) return st;
    const char *nul = memchr(*text, '\0', len);
    size_t n = 0;
    for (size_t i = 0; i < len; i++) n += (*text)[i] == '\n';
    n += len > 0 && (*text)[len - 1] != '\n'; /* a last line without its newline */
    if (nul) { /* every reader of a line would stop there, unseen */
        size_t line = 1;
        for (const char *c = *text; c < nul; c++) line += *c == '\n';
        st = qkv_fail(err, QKV_ERR_FORMAT, "%s:%zu: a NUL byte in the line: text holds none",
                      name, line);
    } else if (*count >= 0 && n < (size_t)*count) {
        st = qkv_fail(err, QKV_ERR_FORMAT, "%s has %zu lines, %d needed", name, n, *count);
    } else {
        if (*count < 0) *count = (int)n;
        if (!(*lines = malloc(((size_t)*count + 1) * sizeof **lines)))
            st = qkv_fail(err, QKV_ERR_NOMEM, "out of memory for the lines of %s", name);
    }
    char *at = *text;
    for (int i = 0; !st && i < *count; i++) {
        char *end = strchr(at, '\n'), *next = end ? end + 1 : at + strlen(at);
        if (end) *end = '\0';
        if (end > at && end[-1] == '\r') end[-1] = '\0';
        if (tsv) {
            char *tab = strchr(at, '\t');
            if (!tab) {
                st = qkv_fail(err, QKV_ERR_FORMAT, "%s:%d: no tab (source<TAB>target)", name,
                              i + 1);
                break;
            }
            at = tab + 1;
            if ((tab = strchr(at, '\t'))) *tab = '\0';
        }
        (*lines)[i] = at;
        at = next;
    }
    if (!st) return QKV_OK;
    free(*lines), free(*text);
    *lines = NULL, *text = NULL;
    return st;
}
