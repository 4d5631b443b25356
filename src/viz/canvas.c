/* SPDX-License-Identifier: MIT */
/* An RGB8 raster with clipped rectangles, antialiased polylines (solid or dashed) and discs.
 * Antialiasing is by coverage: a pixel whose centre lies at distance d from the ideal shape's
 * centre line gets opacity clamp(w/2 + 1/2 - d, 0, 1), a one-pixel ramp across each edge. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "qkv.h"
#include "viz/viz_internal.h"

qkv_status qkv_canvas_init(qkv_canvas *c, int width, int height, qkv_rgb background,
                           qkv_error *err)
{
    memset(c, 0, sizeof *c);
    if (width < 1 || height < 1 || width > QKV_CANVAS_MAX_SIDE || height > QKV_CANVAS_MAX_SIDE)
        return qkv_fail(err, QKV_ERR_ARG, "canvas: size %d x %d is outside [1, %d]", width,
                        height, QKV_CANVAS_MAX_SIDE);
    size_t n = (size_t)width * (size_t)height;
    c->pixels = malloc(n * 3);
    if (!c->pixels)
        return qkv_fail(err, QKV_ERR_NOMEM, "canvas: cannot allocate %d x %d pixels", width,
                        height);
    for (size_t i = 0; i < n; i++) {
        c->pixels[3 * i + 0] = background.r;
        c->pixels[3 * i + 1] = background.g;
        c->pixels[3 * i + 2] = background.b;
    }
    c->width = width;
    c->height = height;
    qkv_canvas_reset_clip(c);
    return QKV_OK;
}

void qkv_canvas_free(qkv_canvas *c)
{
    free(c->pixels);
    memset(c, 0, sizeof *c);
}

void qkv_canvas_reset_clip(qkv_canvas *c)
{
    c->clip_x0 = 0;
    c->clip_y0 = 0;
    c->clip_x1 = c->width;
    c->clip_y1 = c->height;
}

void qkv_canvas_set_clip(qkv_canvas *c, int x, int y, int w, int h)
{
    c->clip_x0 = iclamp(x, 0, c->width);
    c->clip_y0 = iclamp(y, 0, c->height);
    c->clip_x1 = iclamp(x + (w > 0 ? w : 0), c->clip_x0, c->width);
    c->clip_y1 = iclamp(y + (h > 0 ? h : 0), c->clip_y0, c->height);
}

qkv_rgb qkv_canvas_get(const qkv_canvas *c, int x, int y)
{
    const uint8_t *p = c->pixels + 3 * ((size_t)y * (size_t)c->width + (size_t)x);
    qkv_rgb rgb = {p[0], p[1], p[2]};
    return rgb;
}

/* p = p + (color - p) * alpha, rounded: "color over p" at opacity alpha. */
static inline void blend(uint8_t *p, qkv_rgb color, float alpha)
{
    if (alpha >= 1.0f) {
        p[0] = color.r, p[1] = color.g, p[2] = color.b;
        return;
    }
    p[0] = (uint8_t)(p[0] + (color.r - p[0]) * alpha + 0.5f);
    p[1] = (uint8_t)(p[1] + (color.g - p[1]) * alpha + 0.5f);
    p[2] = (uint8_t)(p[2] + (color.b - p[2]) * alpha + 0.5f);
}

/* blend() for (x, y) if it lies inside the clip rectangle. */
static inline void blend_at(qkv_canvas *c, int x, int y, qkv_rgb color, float alpha)
{
    if (x < c->clip_x0 || x >= c->clip_x1 || y < c->clip_y0 || y >= c->clip_y1 || alpha <= 0.0f)
        return;
    blend(c->pixels + 3 * ((size_t)y * (size_t)c->width + (size_t)x), color, alpha);
}

void qkv_canvas_fill_rect(qkv_canvas *c, int x, int y, int w, int h, qkv_rgb color)
{
    int x0 = iclamp(x, c->clip_x0, c->clip_x1), x1 = iclamp(x + w, c->clip_x0, c->clip_x1);
    int y0 = iclamp(y, c->clip_y0, c->clip_y1), y1 = iclamp(y + h, c->clip_y0, c->clip_y1);
    for (int yy = y0; yy < y1; yy++) {
        uint8_t *p = c->pixels + 3 * ((size_t)yy * (size_t)c->width + (size_t)x0);
        for (int xx = x0; xx < x1; xx++, p += 3)
            p[0] = color.r, p[1] = color.g, p[2] = color.b;
    }
}

void qkv_canvas_stroke_rect(qkv_canvas *c, int x, int y, int w, int h, qkv_rgb color)
{
    if (w < 1 || h < 1)
        return;
    qkv_canvas_fill_rect(c, x, y, w, 1, color);
    qkv_canvas_fill_rect(c, x, y + h - 1, w, 1, color);
    qkv_canvas_fill_rect(c, x, y, 1, h, color);
    qkv_canvas_fill_rect(c, x + w - 1, y, 1, h, color);
}

void qkv_canvas_disc(qkv_canvas *c, float cx, float cy, float radius, qkv_rgb color,
                     float alpha)
{
    if (!isfinite(cx) || !isfinite(cy) || !(radius > 0.0f) || !(alpha > 0.0f))
        return;
    if (alpha > 1.0f)
        alpha = 1.0f;
    int x0 = (int)floorf(cx - radius - 1.0f), x1 = (int)ceilf(cx + radius + 1.0f);
    int y0 = (int)floorf(cy - radius - 1.0f), y1 = (int)ceilf(cy + radius + 1.0f);
    x0 = iclamp(x0, c->clip_x0, c->clip_x1), x1 = iclamp(x1, c->clip_x0, c->clip_x1);
    y0 = iclamp(y0, c->clip_y0, c->clip_y1), y1 = iclamp(y1, c->clip_y0, c->clip_y1);
    for (int y = y0; y < y1; y++)
        for (int x = x0; x < x1; x++) {
            float d = hypotf(x + 0.5f - cx, y + 0.5f - cy);
            float cov = radius + 0.5f - d;
            if (cov > 0.0f)
                blend_at(c, x, y, color, (cov < 1.0f ? cov : 1.0f) * alpha);
        }
}

/* ---- polylines ------------------------------------------------------------------------ */

/* Coverage of the pixels in a rectangle of the canvas; a pixel keeps the maximum any stroke
 * piece gives it, and the mask is blended onto the canvas once at the end. */
typedef struct {
    float *cov;
    int x0, y0, w, h;
    float half; /* half the line width */
} stroke_mask;

/* Stamp the capsule of points within `half` of segment (ax, ay)-(bx, by). */
static void stamp_capsule(stroke_mask *m, float ax, float ay, float bx, float by)
{
    float r = m->half + 0.5f;
    int x0 = (int)floorf(fminf(ax, bx) - r) - m->x0, x1 = (int)ceilf(fmaxf(ax, bx) + r) - m->x0;
    int y0 = (int)floorf(fminf(ay, by) - r) - m->y0, y1 = (int)ceilf(fmaxf(ay, by) + r) - m->y0;
    x0 = iclamp(x0, 0, m->w), x1 = iclamp(x1, 0, m->w);
    y0 = iclamp(y0, 0, m->h), y1 = iclamp(y1, 0, m->h);
    float dx = bx - ax, dy = by - ay, len2 = dx * dx + dy * dy;
    for (int y = y0; y < y1; y++)
        for (int x = x0; x < x1; x++) {
            float px = (float)(m->x0 + x) + 0.5f - ax, py = (float)(m->y0 + y) + 0.5f - ay;
            float t = len2 > 0.0f ? (px * dx + py * dy) / len2 : 0.0f; /* nearest point */
            t = t < 0.0f ? 0.0f : t > 1.0f ? 1.0f : t;
            float d = hypotf(px - t * dx, py - t * dy);
            float cov = m->half + 0.5f - d;
            if (cov > 0.0f) {
                float *cv = &m->cov[(size_t)y * (size_t)m->w + (size_t)x];
                cov = cov < 1.0f ? cov : 1.0f;
                if (cov > *cv)
                    *cv = cov;
            }
        }
}

/* Dash patterns as alternating on/off lengths in line widths. A capsule adds a round cap of
 * half a width at each end, so an "on" of 0 is a dot and the visible gap is off - 1. */
static int dash_pattern(qkv_line_style style, float *pat)
{
    switch (style) {
    case QKV_LINE_DASHED: pat[0] = 3.0f, pat[1] = 3.0f; return 2;
    case QKV_LINE_DASHDOT: pat[0] = 4.5f, pat[1] = 2.8f, pat[2] = 0.0f, pat[3] = 2.8f; return 4;
    case QKV_LINE_DOTTED: pat[0] = 0.0f, pat[1] = 2.2f; return 2;
    default: return 0;
    }
}

/* The path's stroke into m: each segment between finite points a capsule (or the dashes of
 * style along it, their phase carried from segment to segment), an isolated point a dot. */
static void stroke_path(stroke_mask *m, const float *x, const float *y, int n, float width,
                        qkv_line_style style)
{
    float pat[4];
    int np = dash_pattern(style, pat);
    /* Start at the end of the last (off) phase, so the first step enters phase 0. */
    int idx = np - 1;
    float rem = 0.0f; /* length left in the current dash phase */
    for (int i = 0; i < n; i++) {
        if (!isfinite(x[i]) || !isfinite(y[i]))
            continue;
        if (i + 1 < n && (!isfinite(x[i + 1]) || !isfinite(y[i + 1]))) {
            if (i == 0 || !isfinite(x[i - 1]) || !isfinite(y[i - 1]))
                stamp_capsule(m, x[i], y[i], x[i], y[i]); /* an isolated point: a dot */
            continue;
        }
        if (i + 1 == n) {
            if (n == 1 || !isfinite(x[i - 1]) || !isfinite(y[i - 1]))
                stamp_capsule(m, x[i], y[i], x[i], y[i]);
            break;
        }
        float ax = x[i], ay = y[i], dx = x[i + 1] - ax, dy = y[i + 1] - ay;
        float len = hypotf(dx, dy);
        if (!np) {
            stamp_capsule(m, ax, ay, ax + dx, ay + dy);
            continue;
        }
        /* Walk the segment through the dash phases; phases carry over to the next segment. */
        float t = 0.0f;
        while (t < len) {
            float d = fminf(rem, len - t);
            if (!(idx & 1) && d > 0.0f) {
                float u0 = t / len, u1 = (t + d) / len;
                stamp_capsule(m, ax + u0 * dx, ay + u0 * dy, ax + u1 * dx, ay + u1 * dy);
            }
            t += d;
            rem -= d;
            while (rem <= 1e-4f) {
                idx = (idx + 1) % np;
                rem = pat[idx] * width;
                if (!(idx & 1) && rem <= 0.0f) { /* a dot */
                    float u = t / len;
                    stamp_capsule(m, ax + u * dx, ay + u * dy, ax + u * dx, ay + u * dy);
                }
            }
        }
    }
}

qkv_status qkv_canvas_polyline(qkv_canvas *c, const float *x, const float *y, int n,
                               float width, qkv_line_style style, qkv_rgb color,
                               qkv_error *err)
{
    if (n < 1 || !(width > 0.0f))
        return QKV_OK;
    /* The mask covers the finite points' bounding box plus the stroke, inside the clip. */
    float bx0 = INFINITY, by0 = INFINITY, bx1 = -INFINITY, by1 = -INFINITY;
    for (int i = 0; i < n; i++)
        if (isfinite(x[i]) && isfinite(y[i])) {
            bx0 = fminf(bx0, x[i]), bx1 = fmaxf(bx1, x[i]);
            by0 = fminf(by0, y[i]), by1 = fmaxf(by1, y[i]);
        }
    if (!(bx0 <= bx1))
        return QKV_OK;
    float r = width * 0.5f + 1.0f;
    /* Clamp in float before converting: points far off the canvas must not overflow int. */
    float lim = 4.0f * QKV_CANVAS_MAX_SIDE;
    int x0 = iclamp((int)fmaxf(floorf(bx0 - r), -lim), c->clip_x0, c->clip_x1);
    int x1 = iclamp((int)fminf(ceilf(bx1 + r), lim), c->clip_x0, c->clip_x1);
    int y0 = iclamp((int)fmaxf(floorf(by0 - r), -lim), c->clip_y0, c->clip_y1);
    int y1 = iclamp((int)fminf(ceilf(by1 + r), lim), c->clip_y0, c->clip_y1);
    if (x0 >= x1 || y0 >= y1)
        return QKV_OK;
    stroke_mask m = {NULL, x0, y0, x1 - x0, y1 - y0, width * 0.5f};
    m.cov = calloc((size_t)m.w * (size_t)m.h, sizeof *m.cov);
    if (!m.cov)
        return qkv_fail(err, QKV_ERR_NOMEM, "polyline: cannot allocate a %d x %d mask", m.w,
                        m.h);

    stroke_path(&m, x, y, n, width, style);
    for (int yy = 0; yy < m.h; yy++)
        for (int xx = 0; xx < m.w; xx++) {
            float cv = m.cov[(size_t)yy * (size_t)m.w + (size_t)xx];
            if (cv > 0.0f)
                blend_at(c, m.x0 + xx, m.y0 + yy, color, cv);
        }
    free(m.cov);
    return QKV_OK;
}

qkv_status qkv_canvas_line(qkv_canvas *c, float x0, float y0, float x1, float y1, float width,
                           qkv_rgb color, qkv_error *err)
{
    float xs[2] = {x0, x1}, ys[2] = {y0, y1};
    return qkv_canvas_polyline(c, xs, ys, 2, width, QKV_LINE_SOLID, color, err);
}
