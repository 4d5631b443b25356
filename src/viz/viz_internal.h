/* SPDX-License-Identifier: MIT */
/* Private helpers shared by the viz files. */
#ifndef QKV_VIZ_INTERNAL_H
#define QKV_VIZ_INTERNAL_H

#include <string.h>

#include "qkv.h"

static inline int imax(int a, int b) { return a > b ? a : b; }
static inline int iclamp(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Where every *_draw starts: an empty canvas and geometry (geom may be NULL), so that a
 * caller may free the canvas whatever fails next. */
static inline void draw_start(qkv_canvas *out, void *geom, size_t geom_bytes)
{
    memset(out, 0, sizeof *out);
    if (geom)
        memset(geom, 0, geom_bytes);
}

/* What every *_save does after drawing into c: if the drawing succeeded (drawn == QKV_OK),
 * c written to path as PNG and freed; otherwise drawn, c untouched (a failed draw frees its
 * own canvas). */
qkv_status canvas_save_png(qkv_canvas *c, qkv_status drawn, const char *path, qkv_error *err);

#endif
