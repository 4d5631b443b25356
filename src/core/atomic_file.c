/* SPDX-License-Identifier: MIT */
/* Atomic file replacement: write a temporary file next to the target, flush it to the disk,
 * then rename it over the target. A crash, a full disk or a kill at any moment leaves either
 * the old file or the new one, never a mix. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/internal.h"

static int write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n > 0) {
        ssize_t w = write(fd, c, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        c += w, n -= (size_t)w;
    }
    return 0;
}

/* The rename is durable only once the directory entry is flushed; best effort. */
static void sync_dir_of(const char *path)
{
    char *dir = strdup(path);
    if (!dir) return;
    char *slash = strrchr(dir, '/');
    const char *d = slash ? (slash == dir ? "/" : (*slash = '\0', dir)) : ".";
    int fd = open(d, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) fsync(fd), close(fd);
    free(dir);
}

qkv_status replaceable_target(const char *path, qkv_error *err)
{
    struct stat sb;
    if (lstat(path, &sb) != 0 || S_ISREG(sb.st_mode) || S_ISLNK(sb.st_mode) ||
        S_ISDIR(sb.st_mode))
        return QKV_OK;
    return qkv_fail(err, QKV_ERR_IO, "%s: is a device, FIFO or socket, not a regular file: qkv "
                    "writes its files by replacing them, and will not replace that", path);
}

int create_temporary(const char *path, unsigned mode, char **tmp_out)
{
    *tmp_out = NULL;
    const size_t cap = strlen(path) + 48;
    char *tmp = malloc(cap);
    if (!tmp) return errno = ENOMEM, -1;
    int fd = -1;
    for (int k = 0; k < 1000 && fd < 0; k++) {
        snprintf(tmp, cap, "%s.tmp.%ld.%d", path, (long)getpid(), k);
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, (mode_t)mode);
        if (fd < 0 && errno != EEXIST) break;
    }
    if (fd < 0) {
        const int e = errno;
        free(tmp);
        return errno = e, -1;
    }
    *tmp_out = tmp;
    return fd;
}

qkv_status qkv_atomic_write(const char *path, const void *const *chunks, const size_t *lens,
                            int n_chunks, qkv_error *err)
{
    qkv_status special = replaceable_target(path, err);
    if (special) return special;
    char *tmp;
    const int fd = create_temporary(path, 0644, &tmp);
    if (fd < 0) {
        int e = errno;
        return qkv_fail(err, QKV_ERR_IO, "%s: cannot create a temporary file next to it: %s",
                        path, strerror(e));
    }
    const char *step = "write";
    int ok = 1, e = 0;
    for (int i = 0; i < n_chunks && ok; i++)
        if (write_all(fd, chunks[i], lens[i])) ok = 0, e = errno;
    if (ok && fsync(fd)) ok = 0, e = errno, step = "flush";
    if (close(fd) && ok) ok = 0, e = errno, step = "close";
    if (ok && rename(tmp, path)) ok = 0, e = errno, step = "rename the temporary file over";
    if (!ok) {
        unlink(tmp);
        free(tmp);
        return qkv_fail(err, QKV_ERR_IO, "%s: cannot %s it: %s (the previous file, if any, is "
                        "unchanged)", path, step, strerror(e));
    }
    free(tmp);
    sync_dir_of(path);
    return QKV_OK;
}
