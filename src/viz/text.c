/* SPDX-License-Identifier: MIT */
/* Text through FreeType: a string is rendered once into an 8-bit coverage image of its box
 * (advance width x line height, baseline at the ascent), which is then blended onto the
 * canvas upright or turned a quarter turn. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ft2build.h>
#include FT_FREETYPE_H

#include "core/internal.h"
#include "qkv.h"

struct qkv_viz {
    FT_Library lib;
    FT_Face face;
    float size_px; /* the size face is set to, 0 before the first call */
};

qkv_status qkv_viz_open(qkv_viz **out, const char *font_path, qkv_error *err)
{
    *out = NULL;
    const char *path = font_path ? font_path : QKV_VIZ_DEFAULT_FONT;
    /* FreeType reports a missing file as a generic "cannot open resource"; ask the OS first so
     * the message says why. */
    qkv_error why = {0};
    FILE *probe = qkv_open_file(path, 1, &why); /* FreeType would wait on a FIFO */
    if (!probe)
        return qkv_fail(err, QKV_ERR_IO, "font %s%s", why.msg,
                        font_path ? "" : " (install fonts-dejavu-core or pass a font path)");
    fclose(probe);

    qkv_viz *v = calloc(1, sizeof *v);
    if (!v)
        return qkv_fail(err, QKV_ERR_NOMEM, "font %s: out of memory", path);
    FT_Error e = FT_Init_FreeType(&v->lib);
    if (e) {
        free(v);
        return qkv_fail(err, QKV_ERR_NOMEM, "font %s: FreeType failed to start (error %d)",
                        path, e);
    }
    e = FT_New_Face(v->lib, path, 0, &v->face);
    if (e || !FT_IS_SCALABLE(v->face)) {
        if (!e)
            FT_Done_Face(v->face);
        FT_Done_FreeType(v->lib);
        free(v);
        return qkv_fail(err, QKV_ERR_FORMAT,
                        "font %s: not a scalable font FreeType can read (error %d)", path, e);
    }
    *out = v;
    return QKV_OK;
}

void qkv_viz_close(qkv_viz *v)
{
    if (!v)
        return;
    FT_Done_Face(v->face);
    FT_Done_FreeType(v->lib);
    free(v);
}

/* Next code point of UTF-8 text at *s, advancing *s; a malformed sequence gives U+FFFD and
 * consumes one byte. */
static uint32_t utf8_next(const unsigned char **s)
{
    const unsigned char *p = *s;
    uint32_t c = p[0];
    int len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (len == 1) {
        *s = p + 1;
        return c;
    }
    uint32_t cp = len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
    for (int i = 1; i < len; i++) {
        if ((p[i] & 0xC0) != 0x80) {
            len = 0;
            break;
        }
        cp = (cp << 6) | (p[i] & 0x3F);
    }
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (len == 0 || cp < min_cp[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
        *s = p + 1;
        return 0xFFFD;
    }
    *s = p + len;
    return cp;
}

static qkv_status set_size(qkv_viz *v, float size_px, qkv_error *err)
{
    if (!(size_px >= 1.0f && size_px <= 1000.0f))
        return qkv_fail(err, QKV_ERR_ARG, "text: size %g px is outside [1, 1000]", size_px);
    if (v->size_px == size_px)
        return QKV_OK;
    /* Character size in 26.6 points at 72 dpi is the size in pixels, fractions allowed. */
    FT_Error e = FT_Set_Char_Size(v->face, 0, (FT_F26Dot6)lroundf(size_px * 64.0f), 72, 72);
    if (e)
        return qkv_fail(err, QKV_ERR_FORMAT, "text: the font cannot be set to %g px (error %d)",
                        size_px, e);
    v->size_px = size_px;
    return QKV_OK;
}

/* The face's ascent and descent (both >= 0) at the current size, rounded outwards. */
static void line_metrics(const qkv_viz *v, int *asc, int *desc)
{
    *asc = (int)((v->face->size->metrics.ascender + 63) >> 6);
    *desc = (int)((-v->face->size->metrics.descender + 63) >> 6);
}

/* Lay text out on a baseline starting at pen x = 0. Measures [x_min, x_max) of the ink and
 * advance together; with alpha != NULL also renders into the (aw x ah) coverage image with
 * the pen starting at (ox, baseline). */
static qkv_status layout(qkv_viz *v, const char *text, int *x_min, int *x_max, uint8_t *alpha,
                         int aw, int ah, int ox, int baseline, qkv_error *err)
{
    FT_Face face = v->face;
    long pen = 0; /* 26.6 */
    FT_UInt prev = 0;
    int lo = 0, hi = 0;
    const unsigned char *s = (const unsigned char *)text;
    while (*s) {
        uint32_t cp = utf8_next(&s);
        FT_UInt gi = FT_Get_Char_Index(face, cp);
        if (prev && gi && FT_HAS_KERNING(face)) {
            FT_Vector k;
            if (!FT_Get_Kerning(face, prev, gi, FT_KERNING_DEFAULT, &k))
                pen += k.x;
        }
        FT_Error e = FT_Load_Glyph(face, gi, FT_LOAD_RENDER);
        if (e)
            return qkv_fail(err, QKV_ERR_FORMAT, "text: glyph U+%04X cannot be rendered (error %d)",
                            (unsigned)cp, e);
        FT_GlyphSlot g = face->glyph;
        int gx = (int)((pen + 32) >> 6) + g->bitmap_left;
        int bw = (int)g->bitmap.width, bh = (int)g->bitmap.rows;
        if (bw > 0) {
            lo = gx < lo ? gx : lo;
            hi = gx + bw > hi ? gx + bw : hi;
        }
        if (alpha && g->bitmap.pixel_mode == FT_PIXEL_MODE_GRAY) {
            for (int r = 0; r < bh; r++) {
                int yy = baseline - g->bitmap_top + r;
                if (yy < 0 || yy >= ah)
                    continue;
                const unsigned char *src = g->bitmap.buffer + (long)r * g->bitmap.pitch;
                for (int col = 0; col < bw; col++) {
                    int xx = ox + gx + col;
                    if (xx < 0 || xx >= aw)
                        continue;
                    unsigned a = alpha[(size_t)yy * aw + xx] + src[col]; /* overlaps add */
                    alpha[(size_t)yy * aw + xx] = (uint8_t)(a > 255 ? 255 : a);
                }
            }
        }
        pen += g->advance.x;
        prev = gi;
    }
    int adv = (int)((pen + 32) >> 6);
    *x_min = lo;
    *x_max = adv > hi ? adv : hi;
    return QKV_OK;
}

qkv_status qkv_text_size(int *w, int *h, qkv_viz *v, const char *text, float size_px,
                         qkv_error *err)
{
    *w = 0, *h = 0;
    qkv_status st = set_size(v, size_px, err);
    if (st)
        return st;
    int asc, desc, lo = 0, hi = 0;
    line_metrics(v, &asc, &desc);
    *h = asc + desc;
    if (!text || !*text)
        return QKV_OK;
    st = layout(v, text, &lo, &hi, NULL, 0, 0, 0, 0, err);
    *w = hi - lo;
    return st;
}

qkv_status qkv_canvas_text(qkv_canvas *c, qkv_viz *v, const char *text, int x, int y,
                           const qkv_text_style *style, int box[4], qkv_error *err)
{
    const float size_px = style->size_px;
    const qkv_halign halign = style->halign;
    const qkv_valign valign = style->valign;
    const int rotate90 = style->rotate90;
    const qkv_rgb color = style->color;
    if (box)
        box[0] = box[1] = box[2] = box[3] = 0;
    if (!text || !*text)
        return QKV_OK;
    qkv_status st = set_size(v, size_px, err);
    if (st)
        return st;
    int asc, desc, lo, hi;
    line_metrics(v, &asc, &desc);
    if ((st = layout(v, text, &lo, &hi, NULL, 0, 0, 0, 0, err)))
        return st;
    int tw = hi - lo, th = asc + desc; /* the unrotated box */
    if (tw <= 0)
        return QKV_OK;
    uint8_t *alpha = calloc((size_t)tw * (size_t)th, 1);
    if (!alpha)
        return qkv_fail(err, QKV_ERR_NOMEM, "text: cannot allocate a %d x %d image", tw, th);
    if ((st = layout(v, text, &lo, &hi, alpha, tw, th, -lo, asc, err))) {
        free(alpha);
        return st;
    }

    int bw = rotate90 ? th : tw, bh = rotate90 ? tw : th; /* the box on the canvas */
    int bx = x - (halign == QKV_ALIGN_CENTER ? bw / 2 : halign == QKV_ALIGN_RIGHT ? bw : 0);
    int by = y - (valign == QKV_VALIGN_MIDDLE ? bh / 2 : valign == QKV_VALIGN_BOTTOM ? bh : 0);
    /* Upright, image (u, v) lands on (bx + u, by + v). A quarter turn counter-clockwise sends
     * the text direction +u to canvas -y and the text's downward +v to canvas +x. */
    for (int vv = 0; vv < th; vv++)
        for (int u = 0; u < tw; u++) {
            uint8_t a = alpha[(size_t)vv * tw + u];
            if (!a)
                continue;
            int cx = rotate90 ? bx + vv : bx + u;
            int cy = rotate90 ? by + (tw - 1 - u) : by + vv;
            if (cx < c->clip_x0 || cx >= c->clip_x1 || cy < c->clip_y0 || cy >= c->clip_y1)
                continue;
            uint8_t *p = c->pixels + 3 * ((size_t)cy * (size_t)c->width + (size_t)cx);
            float t = a / 255.0f;
            p[0] = (uint8_t)(p[0] + (color.r - p[0]) * t + 0.5f);
            p[1] = (uint8_t)(p[1] + (color.g - p[1]) * t + 0.5f);
            p[2] = (uint8_t)(p[2] + (color.b - p[2]) * t + 0.5f);
        }
    free(alpha);
    if (box)
        box[0] = bx, box[1] = by, box[2] = bw, box[3] = bh;
    return QKV_OK;
}

qkv_status qkv_text_fit(char *out, size_t cap, int *w, qkv_viz *v, const char *text, float size_px,
                        int max_w, qkv_error *err)
{
    static const char ellipsis[] = "\xE2\x80\xA6"; /* U+2026 */
    *w = 0;
    if (cap == 0)
        return qkv_fail(err, QKV_ERR_ARG, "text_fit: empty output buffer");
    out[0] = '\0';
    if (!text || !*text)
        return QKV_OK;
    int h;
    size_t len = strlen(text);
    if (len < cap) {
        memcpy(out, text, len + 1);
        qkv_status st = qkv_text_size(w, &h, v, out, size_px, err);
        if (st || *w <= max_w)
            return st;
    }
    /* Cut whole code points from the end until prefix + "..." fits. */
    size_t keep = len < cap ? len : cap - 1;
    while (keep > 0) {
        do
            keep--;
        while (keep > 0 && ((unsigned char)text[keep] & 0xC0) == 0x80);
        if (keep + sizeof ellipsis > cap)
            continue;
        memcpy(out, text, keep);
        memcpy(out + keep, ellipsis, sizeof ellipsis);
        qkv_status st = qkv_text_size(w, &h, v, out, size_px, err);
        if (st || *w <= max_w)
            return st;
    }
    out[0] = '\0';
    *w = 0;
    return QKV_OK;
}
