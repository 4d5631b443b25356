/* SPDX-License-Identifier: MIT */
/* PNG output through libpng. The image is written to a temporary file next to the target and
 * renamed over it, so a reader (or a crash half-way) never sees a truncated figure. */
#include <errno.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <png.h>

#include "core/internal.h"
#include "qkv.h"
#include "viz/viz_internal.h"

/* libpng reports errors by calling a function that must not return; ours keeps the message
 * and jumps back to encode(). */
typedef struct {
    char msg[256];
} png_failure;

static void on_png_error(png_structp png, png_const_charp msg)
{
    png_failure *f = png_get_error_ptr(png);
    snprintf(f->msg, sizeof f->msg, "%s", msg);
    png_longjmp(png, 1);
}

static void on_png_warning(png_structp png, png_const_charp msg)
{
    (void)png, (void)msg; /* warnings (e.g. about ancillary chunks) do not affect the image */
}

/* Encode c into the open stream f; returns 0, or -1 with the reason in fail->msg. */
static int encode(const qkv_canvas *c, FILE *f, png_failure *fail)
{
    png_structp png =
        png_create_write_struct(PNG_LIBPNG_VER_STRING, fail, on_png_error, on_png_warning);
    if (!png) {
        snprintf(fail->msg, sizeof fail->msg, "libpng could not start");
        return -1;
    }
    png_infop info = png_create_info_struct(png);
    if (!info) {
        png_destroy_write_struct(&png, NULL);
        snprintf(fail->msg, sizeof fail->msg, "libpng could not start");
        return -1;
    }
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_write_struct(&png, &info);
        return -1;
    }
    png_init_io(png, f);
    png_set_IHDR(png, info, (png_uint_32)c->width, (png_uint_32)c->height, 8, PNG_COLOR_TYPE_RGB,
                 PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    for (int y = 0; y < c->height; y++)
        png_write_row(png, c->pixels + (size_t)y * (size_t)c->width * 3);
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    return 0;
}

qkv_status qkv_canvas_write_png(const qkv_canvas *c, const char *path, qkv_error *err)
{
    if (!c || !c->pixels || c->width < 1 || c->height < 1)
        return qkv_fail(err, QKV_ERR_ARG, "png %s: the canvas is empty", path ? path : "(null)");
    if (!path || !*path)
        return qkv_fail(err, QKV_ERR_ARG, "png: no output path");
    qkv_status special = replaceable_target(path, err);
    if (special) return special;
    char *tmp;
    int fd = create_temporary(path, 0644, &tmp);
    if (fd < 0)
        return qkv_fail(err, QKV_ERR_IO, "png %s: cannot create a file there: %s", path,
                        strerror(errno));
    FILE *f = fdopen(fd, "wb");
    if (!f) {
        qkv_status st = qkv_fail(err, QKV_ERR_IO, "png %s: %s", path, strerror(errno));
        close(fd);
        unlink(tmp);
        free(tmp);
        return st;
    }
    png_failure fail = {{0}};
    int bad = encode(c, f, &fail);
    int stream_bad = ferror(f);
    errno = 0;
    int close_bad = fclose(f) != 0; /* a full disk may only show here */
    if (!bad && !stream_bad && !close_bad && rename(tmp, path) == 0) {
        free(tmp);
        return QKV_OK;
    }
    qkv_status st;
    if (bad)
        st = qkv_fail(err, QKV_ERR_IO, "png %s: %s", path, fail.msg);
    else
        st = qkv_fail(err, QKV_ERR_IO, "png %s: %s", path,
                      errno ? strerror(errno) : "write error");
    unlink(tmp);
    free(tmp);
    return st;
}

qkv_status canvas_save_png(qkv_canvas *c, qkv_status drawn, const char *path, qkv_error *err)
{
    if (drawn)
        return drawn;
    qkv_status st = qkv_canvas_write_png(c, path, err);
    qkv_canvas_free(c);
    return st;
}
