/* SPDX-License-Identifier: MIT */
/* Line plots, as d2l's plot: series on shared axes with round-valued ticks, a light grid,
 * axis labels, a title and a legend; lines (solid, dashed, dash-dot, dotted) and/or disc
 * markers. Training curves, positional-encoding columns, kernel-regression fits.
 *
 * Layout: the plot area is the canvas minus margins measured from the text around it (title
 * above; y tick labels and the turned y label left; x tick labels and the x label below).
 * Data maps linearly (y: linearly in log10 y when log_y) onto the area. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "qkv.h"
#include "viz/viz_internal.h"

#define FS_TITLE 17.0f
#define FS_LABEL 14.0f
#define FS_TICK 12.0f
#define FS_LEGEND 13.0f
#define PAD 12
#define TICK_LEN 4
#define MAX_TICKS 32
#define SAMPLE_W 32 /* legend: length of the line sample */

static const uint32_t INK = 0x222222, FRAME = 0x444444, GRID = 0xE4E4E4;

typedef struct {
    int ax, ay, aw, ah;   /* plot area */
    double x0, x1, y0, y1; /* data range; y in log10 units when log */
    int log;
} frame_map;

/* Point k of series s in canvas coordinates, or NaN when it is not drawable. */
static void map_point(const frame_map *f, const qkv_series *s, int k, float *px, float *py)
{
    double x = s->x ? s->x[k] : k, y = s->y[k];
    if (f->log)
        y = y > 0.0 ? log10(y) : NAN;
    if (!isfinite(x) || !isfinite(y)) {
        *px = *py = NAN;
        return;
    }
    *px = (float)(f->ax + (x - f->x0) / (f->x1 - f->x0) * f->aw);
    *py = (float)(f->ay + f->ah - (y - f->y0) / (f->y1 - f->y0) * f->ah);
}

static qkv_line_style series_style(const qkv_series *s, int i)
{
    static const qkv_line_style cycle[4] = {QKV_LINE_SOLID, QKV_LINE_DASHED, QKV_LINE_DASHDOT,
                                            QKV_LINE_DOTTED};
    return s->style == QKV_LINE_AUTO ? cycle[i % 4] : s->style;
}

static qkv_rgb series_color(const qkv_series *s, int i)
{
    return s->color ? qkv_rgb_hex(s->color) : qkv_palette(i);
}

/* Ticks of a log10 axis over [lo, hi] (log10 units), returned in log10 units: whole decades
 * when three or more are in range, else 1-2-5 multiples (if not too many), else the decades,
 * else 1..9 multiples, else linear nice ticks. */
static int log_ticks(double lo, double hi, int target, double *t, int cap)
{
    int d0 = (int)ceil(lo - 1e-9), d1 = (int)floor(hi + 1e-9), nd = d1 - d0 + 1, n = 0;
    if (nd >= 3) {
        int stride = imax(1, (int)ceil((double)nd / target));
        for (int d = d0; d <= d1 && n < cap; d += stride)
            t[n++] = d;
        return n;
    }
    static const double sets[2][9] = {{1, 2, 5}, {1, 2, 3, 4, 5, 6, 7, 8, 9}};
    static const int sizes[2] = {3, 9};
    for (int set = 0; set < 2; set++) {
        n = 0;
        for (int d = (int)floor(lo); d <= (int)ceil(hi); d++)
            for (int k = 0; k < sizes[set] && n < cap; k++) {
                double v = d + log10(sets[set][k]);
                if (v >= lo - 1e-9 && v <= hi + 1e-9)
                    t[n++] = v;
            }
        if (n >= 2 && n <= target + 3)
            return n;
        if (set == 0 && nd == 2) { /* 1-2-5 is too dense: the two decades */
            t[0] = d0, t[1] = d1;
            return 2;
        }
    }
    double lin[MAX_TICKS];
    int m = qkv_nice_ticks(lin, MAX_TICKS, NULL, pow(10.0, lo), pow(10.0, hi), target);
    n = 0;
    for (int i = 0; i < m && n < cap; i++)
        if (lin[i] > 0.0)
            t[n++] = log10(lin[i]);
    return n;
}

static void log_label(char *out, size_t cap, double e)
{
    double r = round(e);
    if (fabs(e - r) < 1e-9) { /* a whole decade */
        if (r >= -4 && r <= 5)
            snprintf(out, cap, "%g", pow(10.0, r));
        else
            snprintf(out, cap, "1e%d", (int)r);
    } else {
        snprintf(out, cap, "%.3g", pow(10.0, e));
    }
}

static qkv_status check_spec(const qkv_plot_spec *s, qkv_error *err)
{
    if (!s)
        return qkv_fail(err, QKV_ERR_ARG, "plot: spec is NULL");
    if (s->nseries < 1 || s->nseries > 64 || !s->series)
        return qkv_fail(err, QKV_ERR_ARG, "plot: %d series (need 1 to 64, and a series array)",
                        s->nseries);
    for (int i = 0; i < s->nseries; i++) {
        const qkv_series *q = &s->series[i];
        const char *name = q->label ? q->label : "";
        if (q->n < 1 || q->n > 10000000)
            return qkv_fail(err, QKV_ERR_ARG, "plot: series %d '%s' has n = %d points (need 1 "
                            "to 10^7)", i, name, q->n);
        if (!q->y)
            return qkv_fail(err, QKV_ERR_ARG, "plot: series %d '%s' has no y values", i, name);
        if ((int)q->style < QKV_LINE_AUTO || q->style > QKV_LINE_NONE)
            return qkv_fail(err, QKV_ERR_ARG, "plot: series %d '%s' has line style %d", i, name,
                            (int)q->style);
        if (q->line_width < 0 || q->line_width > 50 || q->marker_radius < 0 ||
            q->marker_radius > 50 || !(q->marker_alpha >= 0 && q->marker_alpha <= 1))
            return qkv_fail(err, QKV_ERR_ARG,
                            "plot: series %d '%s': line_width, marker_radius must be in [0, 50] "
                            "and marker_alpha in [0, 1]", i, name);
    }
    if ((s->width || s->height) && (s->width < 160 || s->height < 120 ||
                                    s->width > QKV_CANVAS_MAX_SIDE ||
                                    s->height > QKV_CANVAS_MAX_SIDE))
        return qkv_fail(err, QKV_ERR_ARG, "plot: size %d x %d is outside [160, %d] x [120, %d]",
                        s->width, s->height, QKV_CANVAS_MAX_SIDE, QKV_CANVAS_MAX_SIDE);
    if (s->xlim[0] != s->xlim[1] &&
        !(isfinite(s->xlim[0]) && isfinite(s->xlim[1]) && s->xlim[0] < s->xlim[1]))
        return qkv_fail(err, QKV_ERR_ARG, "plot: xlim [%g, %g] must be finite and increasing",
                        s->xlim[0], s->xlim[1]);
    if (s->ylim[0] != s->ylim[1] &&
        !(isfinite(s->ylim[0]) && isfinite(s->ylim[1]) && s->ylim[0] < s->ylim[1] &&
          (!s->log_y || s->ylim[0] > 0)))
        return qkv_fail(err, QKV_ERR_ARG, "plot: ylim [%g, %g] must be finite, increasing%s",
                        s->ylim[0], s->ylim[1], s->log_y ? " and positive (log y)" : "");
    return QKV_OK;
}

/* An automatic axis range: the data's extent plus 4% each side (a single value gets +-0.5,
 * or half a decade on a log axis). */
static void pad_range(double *lo, double *hi)
{
    if (*lo == *hi) {
        *lo -= 0.5, *hi += 0.5;
        return;
    }
    double m = 0.04 * (*hi - *lo);
    *lo -= m, *hi += m;
}

/* How many sampled points of the drawn series fall inside the box: the legend goes where this
 * is least. Lines are sampled every few pixels, not only at their points. */
static int legend_overlap(const qkv_plot_spec *s, const frame_map *f, const int box[4])
{
    int hits = 0;
    for (int i = 0; i < s->nseries; i++) {
        const qkv_series *q = &s->series[i];
        int line = series_style(q, i) != QKV_LINE_NONE;
        float px0 = NAN, py0 = NAN;
        for (int k = 0; k < q->n; k++) {
            float px, py;
            map_point(f, q, k, &px, &py);
            if (!isfinite(px))
                continue;
            int steps = 1;
            if (line && isfinite(px0) && k > 0)
                steps = imax(1, (int)(hypotf(px - px0, py - py0) / 3.0f));
            for (int j = 1; j <= steps; j++) {
                float u = (float)j / steps;
                float x = steps > 1 ? px0 + u * (px - px0) : px,
                      y = steps > 1 ? py0 + u * (py - py0) : py;
                hits += x >= box[0] - 3 && x < box[0] + box[2] + 3 && y >= box[1] - 3 &&
                        y < box[1] + box[3] + 3;
            }
            px0 = px, py0 = py;
        }
    }
    return hits;
}

/* Where everything goes, measured from the data and the text before anything is drawn. */
typedef struct {
    int W, H;                         /* the figure */
    frame_map f;                      /* the plot area and the data range it shows */
    size_t max_n;                     /* points in the longest series */
    int lh_label, lh_tick, lh_legend; /* line heights */
    int has_title, has_xl, has_yl;
    int ny, nx;                       /* ticks, in data units (y: log10 units when log) */
    double yt[MAX_TICKS], xt[MAX_TICKS];
    char ylab[MAX_TICKS][32], xlab[MAX_TICKS][32];
    int xlw[MAX_TICKS];               /* x label widths */
} layout;

/* The data range over drawable points, unless xlim or ylim give it; the longest series. */
static qkv_status data_range(layout *L, const qkv_plot_spec *s, qkv_error *err)
{
    frame_map *f = &L->f;
    double xlo = INFINITY, xhi = -INFINITY, ylo = INFINITY, yhi = -INFINITY;
    for (int i = 0; i < s->nseries; i++) {
        const qkv_series *q = &s->series[i];
        L->max_n = (size_t)q->n > L->max_n ? (size_t)q->n : L->max_n;
        for (int k = 0; k < q->n; k++) {
            double x = q->x ? q->x[k] : k, y = q->y[k];
            if (f->log)
                y = y > 0.0 ? log10(y) : NAN;
            if (isfinite(x) && isfinite(y)) {
                xlo = fmin(xlo, x), xhi = fmax(xhi, x);
                ylo = fmin(ylo, y), yhi = fmax(yhi, y);
            }
        }
    }
    if (!(xlo <= xhi))
        return qkv_fail(err, QKV_ERR_NUMERIC, "plot: no series has a drawable point (all x or y "
                        "are NaN/Inf%s)", f->log ? ", or y <= 0 on the log axis" : "");
    if (s->xlim[0] != s->xlim[1])
        xlo = s->xlim[0], xhi = s->xlim[1];
    else
        pad_range(&xlo, &xhi);
    if (s->ylim[0] != s->ylim[1]) {
        ylo = f->log ? log10(s->ylim[0]) : s->ylim[0];
        yhi = f->log ? log10(s->ylim[1]) : s->ylim[1];
    } else {
        pad_range(&ylo, &yhi);
    }
    f->x0 = xlo, f->x1 = xhi, f->y0 = ylo, f->y1 = yhi;
    return QKV_OK;
}

/* The plot area: the figure less the title above, the x ticks and label below, and the y
 * label and y ticks left, whose labels' width sets that margin. */
static qkv_status place_area(layout *L, qkv_viz *v, const qkv_plot_spec *s, qkv_error *err)
{
    frame_map *f = &L->f;
    int tw, lh_title;
    qkv_status st;
    if ((st = qkv_text_size(&tw, &lh_title, v, "", FS_TITLE, err)) ||
        (st = qkv_text_size(&tw, &L->lh_label, v, "", FS_LABEL, err)) ||
        (st = qkv_text_size(&tw, &L->lh_tick, v, "", FS_TICK, err)) ||
        (st = qkv_text_size(&tw, &L->lh_legend, v, "", FS_LEGEND, err)))
        return st;
    L->has_title = s->title && *s->title;
    L->has_xl = s->xlabel && *s->xlabel;
    L->has_yl = s->ylabel && *s->ylabel;
    const int top = PAD + (L->has_title ? lh_title + 10 : 4);
    const int bottom = PAD + TICK_LEN + 3 + L->lh_tick + (L->has_xl ? L->lh_label + 6 : 0);
    f->ay = top;
    f->ah = L->H - top - bottom;

    /* y ticks first: their labels' width sets the left margin. */
    double ystep = 0.0;
    int target = iclamp(f->ah / 55, 3, 9);
    L->ny = f->log ? log_ticks(f->y0, f->y1, target, L->yt, MAX_TICKS)
                   : qkv_nice_ticks(L->yt, MAX_TICKS, &ystep, f->y0, f->y1, target);
    int yw = 0;
    for (int i = 0; i < L->ny; i++) {
        int w, h;
        if (f->log)
            log_label(L->ylab[i], sizeof L->ylab[i], L->yt[i]);
        else
            qkv_tick_label(L->ylab[i], sizeof L->ylab[i], L->yt[i], ystep);
        if ((st = qkv_text_size(&w, &h, v, L->ylab[i], FS_TICK, err)))
            return st;
        yw = imax(yw, w);
    }
    f->ax = PAD + (L->has_yl ? L->lh_label + 8 : 0) + yw + TICK_LEN + 4;
    f->aw = L->W - f->ax - PAD - 12;
    if (f->aw < 40 || f->ah < 40)
        return qkv_fail(err, QKV_ERR_ARG, "plot: %d x %d leaves a %d x %d plot area; make the "
                        "figure larger", L->W, L->H, f->aw, f->ah);
    return QKV_OK;
}

/* x ticks: fewer until neighbouring labels are at least 12 px apart. */
static qkv_status choose_x_ticks(layout *L, qkv_viz *v, qkv_error *err)
{
    const frame_map *f = &L->f;
    double xstep = 0.0;
    L->nx = 0;
    for (int target = iclamp(f->aw / 80, 3, 10); target >= 2; target--) {
        L->nx = qkv_nice_ticks(L->xt, MAX_TICKS, &xstep, f->x0, f->x1, target);
        int xw = 0;
        for (int i = 0; i < L->nx; i++) {
            int w, h;
            qkv_tick_label(L->xlab[i], sizeof L->xlab[i], L->xt[i], xstep);
            qkv_status st = qkv_text_size(&w, &h, v, L->xlab[i], FS_TICK, err);
            if (st)
                return st;
            xw = imax(xw, w);
            L->xlw[i] = w;
        }
        if (xw + 12 <= xstep / (f->x1 - f->x0) * f->aw)
            break;
    }
    return QKV_OK;
}

/* Grid lines across the area, and the ticks with their labels on the left and bottom. */
static qkv_status draw_grid_and_ticks(qkv_canvas *out, qkv_viz *v, const layout *L, qkv_error *err)
{
    const frame_map *f = &L->f;
    const qkv_rgb ink = qkv_rgb_hex(INK), frame = qkv_rgb_hex(FRAME), grid = qkv_rgb_hex(GRID);
    qkv_status st;
    for (int i = 0; i < L->ny; i++) {
        int y = f->ay + f->ah - (int)lround((L->yt[i] - f->y0) / (f->y1 - f->y0) * f->ah);
        if (y < f->ay || y > f->ay + f->ah)
            continue;
        qkv_canvas_fill_rect(out, f->ax, y, f->aw, 1, grid);
        qkv_canvas_fill_rect(out, f->ax - 1 - TICK_LEN, y, TICK_LEN, 1, frame);
        if ((st = qkv_canvas_text(out, v, L->ylab[i], f->ax - TICK_LEN - 4, y,
                                  &(qkv_text_style){FS_TICK, QKV_ALIGN_RIGHT, QKV_VALIGN_MIDDLE,
                                                    0, ink},
                                  NULL, err)))
            return st;
    }
    for (int i = 0; i < L->nx; i++) {
        int x = f->ax + (int)lround((L->xt[i] - f->x0) / (f->x1 - f->x0) * f->aw);
        if (x < f->ax || x > f->ax + f->aw)
            continue;
        qkv_canvas_fill_rect(out, x, f->ay, 1, f->ah, grid);
        qkv_canvas_fill_rect(out, x, f->ay + f->ah + 1, 1, TICK_LEN, frame);
        int cx = iclamp(x, L->xlw[i] / 2 + 1, L->W - 1 - L->xlw[i] / 2); /* the last may overhang */
        if ((st = qkv_canvas_text(out, v, L->xlab[i], cx, f->ay + f->ah + 1 + TICK_LEN + 2,
                                  &(qkv_text_style){FS_TICK, QKV_ALIGN_CENTER, QKV_VALIGN_TOP, 0,
                                                    ink},
                                  NULL, err)))
            return st;
    }
    return QKV_OK;
}

/* Series, clipped to the area: lines first, then markers on top. */
static qkv_status draw_series(qkv_canvas *out, const qkv_plot_spec *s, const layout *L,
                              qkv_error *err)
{
    float *px = malloc(L->max_n * sizeof *px), *py = malloc(L->max_n * sizeof *py);
    qkv_status st = QKV_OK;
    if (!px || !py) {
        st = qkv_fail(err, QKV_ERR_NOMEM, "plot: out of memory for %zu points", L->max_n);
        goto done;
    }
    const frame_map *f = &L->f;
    qkv_canvas_set_clip(out, f->ax, f->ay, f->aw + 1, f->ah + 1);
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < s->nseries; i++) {
            const qkv_series *q = &s->series[i];
            qkv_line_style style = series_style(q, i);
            if ((pass == 0 && style == QKV_LINE_NONE) || (pass == 1 && !q->marker))
                continue;
            for (int k = 0; k < q->n; k++)
                map_point(f, q, k, &px[k], &py[k]);
            qkv_rgb col = series_color(q, i);
            if (pass == 0 &&
                (st = qkv_canvas_polyline(
                     out, px, py, q->n, q->line_width > 0 ? q->line_width : 2.0f, style, col, err)))
                goto done;
            for (int k = 0; pass == 1 && k < q->n; k++)
                qkv_canvas_disc(out, px[k], py[k], q->marker_radius > 0 ? q->marker_radius : 4.0f,
                                col, q->marker_alpha > 0 ? q->marker_alpha : 1.0f);
        }
    qkv_canvas_reset_clip(out);
done:
    free(px);
    free(py);
    return st;
}

/* The legend's top-left corner, bw x bh: in the corner of the area that hides the fewest
 * data (matplotlib's "best"), the top right when they tie. */
static void legend_corner(const qkv_plot_spec *s, const frame_map *f, int bw, int bh, int *lx,
                          int *ly)
{
    const int in = 10; /* inset from the area's edge */
    int cand[4][2] = {{f->ax + f->aw - in - bw, f->ay + in},
                      {f->ax + in, f->ay + in},
                      {f->ax + in, f->ay + f->ah - in - bh},
                      {f->ax + f->aw - in - bw, f->ay + f->ah - in - bh}};
    int best = 0, best_hits = -1;
    for (int c = 0; c < 4; c++) {
        int box[4] = {cand[c][0], cand[c][1], bw, bh};
        int hits = legend_overlap(s, f, box);
        if (best_hits < 0 || hits < best_hits)
            best = c, best_hits = hits;
    }
    *lx = cand[best][0], *ly = cand[best][1];
}

/* The legend of the labelled series (none without labels, or with no_legend); its x, y, w, h
 * go to box. */
static qkv_status draw_legend(qkv_canvas *out, qkv_viz *v, const qkv_plot_spec *s,
                              const layout *L, int box[4], qkv_error *err)
{
    int nleg = 0, legw = 0;
    qkv_status st;
    for (int i = 0; i < s->nseries; i++)
        if (s->series[i].label && *s->series[i].label) {
            int w, h;
            if ((st = qkv_text_size(&w, &h, v, s->series[i].label, FS_LEGEND, err)))
                return st;
            legw = imax(legw, w);
            nleg++;
        }
    if (!nleg || s->no_legend)
        return QKV_OK;
    const frame_map *f = &L->f;
    const int entry_h = L->lh_legend + 4;
    const int bw = 10 + SAMPLE_W + 8 + legw + 10, bh = 6 + nleg * entry_h + 6;
    int lx, ly;
    legend_corner(s, f, bw, bh, &lx, &ly);
    qkv_canvas_set_clip(out, f->ax, f->ay, f->aw, f->ah);
    qkv_canvas_fill_rect(out, lx, ly, bw, bh, qkv_rgb_hex(0xFFFFFF));
    qkv_canvas_stroke_rect(out, lx, ly, bw, bh, qkv_rgb_hex(0xBBBBBB));
    int e = 0;
    for (int i = 0; i < s->nseries; i++) {
        const qkv_series *q = &s->series[i];
        if (!q->label || !*q->label)
            continue;
        float cy = (float)(ly + 6 + e * entry_h + entry_h / 2) + 0.5f;
        float x0 = (float)(lx + 10), x1 = x0 + SAMPLE_W;
        qkv_rgb col = series_color(q, i);
        qkv_line_style style = series_style(q, i);
        if (style != QKV_LINE_NONE) {
            float xs[2] = {x0 + 1, x1 - 1}, ys[2] = {cy, cy};
            if ((st = qkv_canvas_polyline(out, xs, ys, 2, q->line_width > 0 ? q->line_width : 2.0f,
                                          style, col, err)))
                return st;
        }
        if (q->marker)
            qkv_canvas_disc(out, (x0 + x1) / 2, cy, q->marker_radius > 0 ? q->marker_radius : 4.0f,
                            col, q->marker_alpha > 0 ? q->marker_alpha : 1.0f);
        if ((st = qkv_canvas_text(out, v, q->label, (int)x1 + 8, (int)cy,
                                  &(qkv_text_style){FS_LEGEND, QKV_ALIGN_LEFT, QKV_VALIGN_MIDDLE,
                                                    0, qkv_rgb_hex(INK)},
                                  NULL, err)))
            return st;
        e++;
    }
    qkv_canvas_reset_clip(out);
    box[0] = lx, box[1] = ly, box[2] = bw, box[3] = bh;
    return QKV_OK;
}

/* The title over the area (kept inside the figure; its box goes to title_box) and the axis
 * labels. */
static qkv_status draw_titles(qkv_canvas *out, qkv_viz *v, const qkv_plot_spec *s,
                              const layout *L, int title_box[4], qkv_error *err)
{
    const frame_map *f = &L->f;
    const qkv_rgb ink = qkv_rgb_hex(INK);
    qkv_status st;
    if (L->has_title) {
        char title[256];
        int w;
        if ((st = qkv_text_fit(title, sizeof title, &w, v, s->title, FS_TITLE, L->W - 2 * PAD,
                               err)))
            return st;
        int cx = iclamp(f->ax + f->aw / 2, PAD + w / 2, L->W - PAD - w / 2);
        if ((st = qkv_canvas_text(out, v, title, cx, PAD,
                                  &(qkv_text_style){FS_TITLE, QKV_ALIGN_CENTER, QKV_VALIGN_TOP,
                                                    0, ink},
                                  title_box, err)))
            return st;
    }
    if (L->has_xl &&
        (st = qkv_canvas_text(out, v, s->xlabel, f->ax + f->aw / 2,
                              f->ay + f->ah + 1 + TICK_LEN + 2 + L->lh_tick + 4,
                              &(qkv_text_style){FS_LABEL, QKV_ALIGN_CENTER, QKV_VALIGN_TOP, 0, ink},
                              NULL, err)))
        return st;
    if (L->has_yl &&
        (st = qkv_canvas_text(out, v, s->ylabel, PAD, f->ay + f->ah / 2,
                              &(qkv_text_style){FS_LABEL, QKV_ALIGN_LEFT, QKV_VALIGN_MIDDLE, 1,
                                                ink},
                              NULL, err)))
        return st;
    return QKV_OK;
}

qkv_status qkv_plot_draw(qkv_canvas *out, qkv_plot_geometry *geom, qkv_viz *v,
                         const qkv_plot_spec *s, qkv_error *err)
{
    draw_start(out, geom, sizeof *geom);
    qkv_status st = check_spec(s, err);
    if (st)
        return st;
    layout L = {.W = s->width ? s->width : 720, .H = s->height ? s->height : 480,
                .f = {.log = s->log_y != 0}};
    if ((st = data_range(&L, s, err)) || (st = place_area(&L, v, s, err)) ||
        (st = choose_x_ticks(&L, v, err)) ||
        (st = qkv_canvas_init(out, L.W, L.H, qkv_rgb_hex(0xFFFFFF), err)))
        return st;

    const frame_map *f = &L.f;
    int title_box[4] = {0}, legend_box[4] = {0};
    if ((st = draw_grid_and_ticks(out, v, &L, err)) || (st = draw_series(out, s, &L, err)))
        goto fail;
    qkv_canvas_stroke_rect(out, f->ax - 1, f->ay - 1, f->aw + 2, f->ah + 2, qkv_rgb_hex(FRAME));
    if ((st = draw_legend(out, v, s, &L, legend_box, err)) ||
        (st = draw_titles(out, v, s, &L, title_box, err)))
        goto fail;

    if (geom) {
        qkv_plot_geometry g = {.width = L.W, .height = L.H, .area_x = f->ax, .area_y = f->ay,
                               .area_w = f->aw, .area_h = f->ah, .xmin = f->x0, .xmax = f->x1,
                               .ymin = f->y0, .ymax = f->y1, .log_y = f->log};
        memcpy(g.title_box, title_box, sizeof title_box);
        memcpy(g.legend_box, legend_box, sizeof legend_box);
        *geom = g;
    }
    return QKV_OK;

fail:
    qkv_canvas_free(out);
    return st;
}

qkv_status qkv_plot_save(const char *path, qkv_plot_geometry *geom, qkv_viz *v,
                         const qkv_plot_spec *s, qkv_error *err)
{
    qkv_canvas c;
    return canvas_save_png(&c, qkv_plot_draw(&c, geom, v, s, err), path, err);
}
