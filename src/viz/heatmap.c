/* SPDX-License-Identifier: MIT */
/* A grid of heatmaps, as d2l's show_heatmaps draws attention weights: rows x cols panels
 * (layers x heads), each an n x m matrix (queries x keys) of square cells, one colour range
 * and one colour bar for all, token labels along the outer edges.
 *
 * Layout, left to right: y label | y tick labels | panels (gap_x apart) | colour bar + its
 * labels; top to bottom: title | panel titles above each panel row | panels (gap_y apart) |
 * x tick labels | x label. Every margin is measured from the text it holds, so nothing
 * overlaps: x labels turn a quarter turn when they do not fit across a cell, and when cells
 * are smaller than a line of text only every k-th label is drawn. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "qkv.h"
#include "viz/viz_internal.h"

#define FS_TITLE 17.0f /* font sizes in pixels */
#define FS_LABEL 14.0f /* axis labels, panel titles */
#define FS_TICK 12.0f
#define PAD 12         /* outer margin */
#define TICK_LEN 4
#define MAX_TICK_W 110 /* longer tick labels are cut with an ellipsis */
#define LABEL_CAP 128  /* bytes per fitted label */
#define CBAR_W 16
#define CBAR_GAP 18

static const uint32_t INK = 0x222222, FRAME = 0x333333;

/* Fit the count labels (NULL entries are empty) into out[i] at FS_TICK, at most max_w wide;
 * the widest fitted width goes to *w_max. */
static qkv_status fit_labels(qkv_viz *v, const char *const *labels, int count, int max_w,
                             char (*out)[LABEL_CAP], int *w_max, qkv_error *err)
{
    *w_max = 0;
    for (int i = 0; i < count; i++) {
        int w;
        qkv_status st =
            qkv_text_fit(out[i], LABEL_CAP, &w, v, labels[i] ? labels[i] : "", FS_TICK, max_w, err);
        if (st)
            return st;
        *w_max = imax(*w_max, w);
    }
    return QKV_OK;
}

static qkv_status check_spec(const qkv_heatmap_spec *s, qkv_error *err)
{
    if (!s)
        return qkv_fail(err, QKV_ERR_ARG, "heatmap: spec is NULL");
    if (s->rows < 1 || s->cols < 1 || s->rows > 64 || s->cols > 64)
        return qkv_fail(err, QKV_ERR_ARG, "heatmap: grid %d x %d is outside [1, 64] x [1, 64]",
                        s->rows, s->cols);
    if (s->n < 1 || s->m < 1 || s->n > 4096 || s->m > 4096)
        return qkv_fail(err, QKV_ERR_ARG, "heatmap: matrix %d x %d (n x m) is outside [1, 4096]",
                        s->n, s->m);
    if (!s->data)
        return qkv_fail(err, QKV_ERR_ARG, "heatmap: data is NULL");
    if (s->cell_px < 0 || s->cell_px > 256)
        return qkv_fail(err, QKV_ERR_ARG, "heatmap: cell_px %d is outside [0, 256]", s->cell_px);
    if (!isfinite(s->vmin) || !isfinite(s->vmax) || s->vmin > s->vmax)
        return qkv_fail(err, QKV_ERR_ARG,
                        "heatmap: colour range [vmin %g, vmax %g] must be finite and ordered",
                        s->vmin, s->vmax);
    return QKV_OK;
}

/* Where everything goes, measured from the spec and its text before anything is drawn. */
typedef struct {
    float vmin, vmax;                /* the colour range */
    int lh_title, lh_label, lh_tick; /* line heights */
    int cell, pw, ph;                /* cell side; panel width and height */
    int has_titles, gap_x, gap_y;    /* panel titles sit in the gap above each panel row */
    int grid_w, grid_h;              /* the panels with the gaps between them */
    char (*xl)[LABEL_CAP], (*yl)[LABEL_CAP], (*pt)[LABEL_CAP]; /* fitted labels, or NULL */
    int x_stride, x_rot, x_region;   /* every x_stride-th x label, turned or not; its height */
    int y_stride, y_region;          /* every y_stride-th y label; its width */
    int cb_h, cb_lw, n_cb;           /* colour bar: height, widest label, ticks */
    double cb_ticks[16];
    char cb_lab[16][32];
    int left, top, W, H;             /* the grid's top-left corner; the figure's size */
    char title[256];                 /* fitted, or "" */
} layout;

static void layout_free(layout *L)
{
    free(L->xl);
    free(L->yl);
    free(L->pt);
}

/* Colour range: given, or the finite data's extent (a constant matrix sits mid-ramp). */
static void colour_range(layout *L, const qkv_heatmap_spec *s)
{
    const size_t total = (size_t)s->rows * s->cols * s->n * s->m;
    float vmin = s->vmin, vmax = s->vmax;
    if (vmin == vmax) {
        vmin = INFINITY, vmax = -INFINITY;
        for (size_t i = 0; i < total; i++)
            if (isfinite(s->data[i])) {
                vmin = fminf(vmin, s->data[i]);
                vmax = fmaxf(vmax, s->data[i]);
            }
        if (!(vmin <= vmax))
            vmin = 0.0f, vmax = 1.0f; /* nothing finite: any range will do */
        if (vmin == vmax)
            vmin -= 0.5f, vmax += 0.5f;
    }
    L->vmin = vmin, L->vmax = vmax;
}

/* Line heights, the cell and panel sizes, and the gaps between panels. */
static qkv_status size_panels(layout *L, qkv_viz *v, const qkv_heatmap_spec *s, qkv_error *err)
{
    const int rows = s->rows, cols = s->cols, n = s->n, m = s->m;
    int tw;
    qkv_status st;
    if ((st = qkv_text_size(&tw, &L->lh_title, v, "", FS_TITLE, err)) ||
        (st = qkv_text_size(&tw, &L->lh_label, v, "", FS_LABEL, err)) ||
        (st = qkv_text_size(&tw, &L->lh_tick, v, "", FS_TICK, err)))
        return st;

    /* Cells: panels of a few hundred pixels whatever n and m, grown to a text line when that
     * lets every tick label show without the panel getting much bigger. */
    int big = imax(n, m), cell = s->cell_px;
    if (cell == 0) {
        double target = fmin(fmax(880.0 / cols, 150.0), 340.0);
        cell = iclamp((int)lround(target / big), 1, 36);
        if ((s->x_ticks || s->y_ticks) && cell < L->lh_tick && big * L->lh_tick <= 1.6 * target)
            cell = L->lh_tick;
    }
    L->cell = cell, L->pw = m * cell, L->ph = n * cell;

    for (int i = 0; s->panel_titles && i < rows * cols; i++)
        L->has_titles |= s->panel_titles[i] && s->panel_titles[i][0];
    L->gap_x = 16, L->gap_y = 14 + (L->has_titles ? L->lh_label + 4 : 0);
    L->grid_w = cols * L->pw + (cols - 1) * L->gap_x;
    L->grid_h = rows * L->ph + (rows - 1) * L->gap_y;
    return QKV_OK;
}

/* The tick labels and panel titles, fitted; how often and which way the tick labels go. */
static qkv_status fit_panel_labels(layout *L, qkv_viz *v, const qkv_heatmap_spec *s, qkv_error *err)
{
    const int rows = s->rows, cols = s->cols, n = s->n, m = s->m;
    L->xl = s->x_ticks ? calloc((size_t)m, LABEL_CAP) : NULL;
    L->yl = s->y_ticks ? calloc((size_t)n, LABEL_CAP) : NULL;
    L->pt = L->has_titles ? calloc((size_t)rows * cols, LABEL_CAP) : NULL;
    if ((s->x_ticks && !L->xl) || (s->y_ticks && !L->yl) || (L->has_titles && !L->pt))
        return qkv_fail(err, QKV_ERR_NOMEM, "heatmap: out of memory for labels");
    int xw = 0, yw = 0;
    qkv_status st;
    if ((L->xl && (st = fit_labels(v, s->x_ticks, m, MAX_TICK_W, L->xl, &xw, err))) ||
        (L->yl && (st = fit_labels(v, s->y_ticks, n, MAX_TICK_W, L->yl, &yw, err))))
        return st;
    for (int i = 0; L->pt && i < rows * cols; i++) {
        const char *t = s->panel_titles[i] ? s->panel_titles[i] : "";
        int w;
        if ((st = qkv_text_fit(L->pt[i], LABEL_CAP, &w, v, t, FS_LABEL,
                               imax(L->pw + L->gap_x - 6, 24), err)))
            return st;
    }

    /* x labels fit across their cells, or turn; dense labels are thinned to one per line. */
    if (L->xl) {
        L->x_rot = xw + 4 > L->cell;
        L->x_stride = L->x_rot ? (int)ceil((L->lh_tick + 1.0) / L->cell) : 1;
        L->x_region = TICK_LEN + 2 + (L->x_rot ? xw : L->lh_tick);
    }
    if (L->yl) {
        L->y_stride = (int)ceil((L->lh_tick + 1.0) / L->cell);
        L->y_region = TICK_LEN + 3 + yw;
    }
    return QKV_OK;
}

/* Colour bar ticks: about one per two text lines of bar. */
static qkv_status colorbar_ticks(layout *L, qkv_viz *v, const qkv_heatmap_spec *s, qkv_error *err)
{
    L->cb_h = imax(L->grid_h, 4 * L->lh_tick);
    if (s->no_colorbar)
        return QKV_OK;
    double cb_step = 0.0;
    L->n_cb = qkv_nice_ticks(L->cb_ticks, 16, &cb_step, L->vmin, L->vmax,
                             iclamp(L->cb_h / (2 * L->lh_tick), 2, 7));
    for (int i = 0; i < L->n_cb; i++) {
        int w, h;
        qkv_status st;
        qkv_tick_label(L->cb_lab[i], sizeof L->cb_lab[i], L->cb_ticks[i], cb_step);
        if ((st = qkv_text_size(&w, &h, v, L->cb_lab[i], FS_TICK, err)))
            return st;
        L->cb_lw = imax(L->cb_lw, w);
    }
    return QKV_OK;
}

/* Margins, each measured from what it holds, and so the figure's size. */
static qkv_status place_grid(layout *L, qkv_viz *v, const qkv_heatmap_spec *s, qkv_error *err)
{
    L->left = PAD + (s->ylabel && *s->ylabel ? L->lh_label + 6 : 0) + L->y_region;
    L->top = PAD + (s->title && *s->title ? L->lh_title + 8 : 0) +
             (L->has_titles ? L->lh_label + 4 : 0);
    int bottom = L->x_region + (s->xlabel && *s->xlabel ? L->lh_label + 6 : 0) + PAD;
    int right = s->no_colorbar ? PAD : CBAR_GAP + CBAR_W + TICK_LEN + 3 + L->cb_lw + PAD;
    L->W = L->left + L->grid_w + right;
    L->H = L->top + imax(L->grid_h + bottom, s->no_colorbar ? 0 : L->cb_h + PAD);

    if (s->title && *s->title) {
        int title_w;
        qkv_status st =
            qkv_text_fit(L->title, sizeof L->title, &title_w, v, s->title, FS_TITLE, 1600, err);
        if (st)
            return st;
        if (title_w + 2 * PAD > L->W) { /* widen the figure and centre the grid under the title */
            L->left += (title_w + 2 * PAD - L->W) / 2;
            L->W = title_w + 2 * PAD;
        }
    }
    if (L->W > QKV_CANVAS_MAX_SIDE || L->H > QKV_CANVAS_MAX_SIDE)
        return qkv_fail(err, QKV_ERR_ARG,
                        "heatmap: the figure would be %d x %d pixels (max %d); set a smaller "
                        "cell_px",
                        L->W, L->H, QKV_CANVAS_MAX_SIDE);
    return QKV_OK;
}

/* The whole layout, in the order its parts depend on each other; free it with layout_free
 * whatever this returns. */
static qkv_status lay_out(layout *L, qkv_viz *v, const qkv_heatmap_spec *s, qkv_error *err)
{
    qkv_status st;
    colour_range(L, s);
    if ((st = size_panels(L, v, s, err)) || (st = fit_panel_labels(L, v, s, err)) ||
        (st = colorbar_ticks(L, v, s, err)))
        return st;
    return place_grid(L, v, s, err);
}

/* Panel P (n x m) as cells with its top-left pixel at (px, py), framed. */
static void draw_cells(qkv_canvas *out, const layout *L, const qkv_rgb lut[256], const float *P,
                       int n, int m, int px, int py)
{
    const qkv_rgb nonfinite = qkv_rgb_hex(QKV_COLOR_NONFINITE);
    const float scale = 255.0f / (L->vmax - L->vmin);
    const int cell = L->cell;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < m; j++) {
            float x = P[(size_t)i * m + j];
            qkv_rgb col = nonfinite;
            if (isfinite(x)) {
                float t = (x - L->vmin) * scale;
                col = lut[t <= 0.0f ? 0 : t >= 255.0f ? 255 : (int)lroundf(t)];
            }
            qkv_canvas_fill_rect(out, px + j * cell, py + i * cell, cell, cell, col);
        }
    qkv_canvas_stroke_rect(out, px - 1, py - 1, L->pw + 2, L->ph + 2, qkv_rgb_hex(FRAME));
}

/* The text around panel (r, c) at (px, py): its title; the y ticks and label left of the
 * first column, the x ticks and label under the last row. */
static qkv_status draw_panel_labels(qkv_canvas *out, qkv_viz *v, const qkv_heatmap_spec *s,
                                    const layout *L, int r, int c, int px, int py, qkv_error *err)
{
    const qkv_rgb ink = qkv_rgb_hex(INK), frame = qkv_rgb_hex(FRAME);
    const int cell = L->cell, pw = L->pw, ph = L->ph;
    qkv_status st;
    if (L->pt && *L->pt[r * s->cols + c] &&
        (st = qkv_canvas_text(out, v, L->pt[r * s->cols + c], px + pw / 2, py - 4,
                              &(qkv_text_style){FS_LABEL, QKV_ALIGN_CENTER, QKV_VALIGN_BOTTOM, 0,
                                                ink},
                              NULL, err)))
        return st;
    if (c == 0 && L->yl)
        for (int i = 0; i < s->n; i += L->y_stride) {
            int cy = py + i * cell + cell / 2;
            qkv_canvas_fill_rect(out, px - 1 - TICK_LEN, cy, TICK_LEN, 1, frame);
            if ((st = qkv_canvas_text(out, v, L->yl[i], px - TICK_LEN - 4, cy,
                                      &(qkv_text_style){FS_TICK, QKV_ALIGN_RIGHT,
                                                        QKV_VALIGN_MIDDLE, 0, ink},
                                      NULL, err)))
                return st;
        }
    if (c == 0 && s->ylabel && *s->ylabel &&
        (st = qkv_canvas_text(out, v, s->ylabel, px - 1 - L->y_region - 6, py + ph / 2,
                              &(qkv_text_style){FS_LABEL, QKV_ALIGN_RIGHT, QKV_VALIGN_MIDDLE, 1,
                                                ink},
                              NULL, err)))
        return st;
    if (r == s->rows - 1 && L->xl)
        for (int j = 0; j < s->m; j += L->x_stride) {
            int cx = px + j * cell + cell / 2;
            qkv_canvas_fill_rect(out, cx, py + ph + 1, 1, TICK_LEN, frame);
            if ((st = qkv_canvas_text(out, v, L->xl[j], cx, py + ph + 1 + TICK_LEN + 2,
                                      &(qkv_text_style){FS_TICK, QKV_ALIGN_CENTER, QKV_VALIGN_TOP,
                                                        L->x_rot, ink},
                                      NULL, err)))
                return st;
        }
    if (r == s->rows - 1 && s->xlabel && *s->xlabel &&
        (st = qkv_canvas_text(out, v, s->xlabel, px + pw / 2, py + ph + 1 + L->x_region + 6,
                              &(qkv_text_style){FS_LABEL, QKV_ALIGN_CENTER, QKV_VALIGN_TOP, 0,
                                                ink},
                              NULL, err)))
        return st;
    return QKV_OK;
}

/* The colour bar right of the grid, top is vmax as on a y axis; its x, y, w, h go to box. */
static qkv_status draw_colorbar(qkv_canvas *out, qkv_viz *v, const layout *L,
                                const qkv_rgb lut[256], int box[4], qkv_error *err)
{
    const qkv_rgb ink = qkv_rgb_hex(INK), frame = qkv_rgb_hex(FRAME);
    const int bx = L->left + L->grid_w + CBAR_GAP, by = L->top, cb_h = L->cb_h;
    for (int y = 0; y < cb_h; y++)
        qkv_canvas_fill_rect(out, bx, by + y, CBAR_W, 1,
                             lut[(int)lroundf(255.0f * (1.0f - (y + 0.5f) / cb_h))]);
    qkv_canvas_stroke_rect(out, bx - 1, by - 1, CBAR_W + 2, cb_h + 2, frame);
    for (int i = 0; i < L->n_cb; i++) {
        int ty = by + (int)lround((1.0 - (L->cb_ticks[i] - L->vmin) / (L->vmax - L->vmin)) *
                                  (cb_h - 1));
        qkv_canvas_fill_rect(out, bx + CBAR_W + 1, ty, TICK_LEN, 1, frame);
        qkv_status st = qkv_canvas_text(
            out, v, L->cb_lab[i], bx + CBAR_W + 1 + TICK_LEN + 3, ty,
            &(qkv_text_style){FS_TICK, QKV_ALIGN_LEFT, QKV_VALIGN_MIDDLE, 0, ink}, NULL, err);
        if (st)
            return st;
    }
    box[0] = bx, box[1] = by, box[2] = CBAR_W, box[3] = cb_h;
    return QKV_OK;
}

qkv_status qkv_heatmap_draw(qkv_canvas *out, qkv_heatmap_geometry *geom, qkv_viz *v,
                            const qkv_heatmap_spec *s, qkv_error *err)
{
    draw_start(out, geom, sizeof *geom);
    layout L = {0};
    qkv_status st;
    if ((st = check_spec(s, err)) || (st = lay_out(&L, v, s, err)) ||
        (st = qkv_canvas_init(out, L.W, L.H, qkv_rgb_hex(0xFFFFFF), err)))
        goto done;

    qkv_rgb lut[256];
    for (int i = 0; i < 256; i++)
        lut[i] = qkv_colormap(i / 255.0f);
    int title_box[4] = {0}, cb_box[4] = {0};
    if (*L.title &&
        (st = qkv_canvas_text(out, v, L.title, L.W / 2, PAD,
                              &(qkv_text_style){FS_TITLE, QKV_ALIGN_CENTER, QKV_VALIGN_TOP, 0,
                                                qkv_rgb_hex(INK)},
                              title_box, err)))
        goto done;
    for (int r = 0; r < s->rows; r++)
        for (int c = 0; c < s->cols; c++) {
            const int px = L.left + c * (L.pw + L.gap_x), py = L.top + r * (L.ph + L.gap_y);
            const float *P = s->data + ((size_t)r * s->cols + c) * s->n * s->m; /* (n, m) */
            draw_cells(out, &L, lut, P, s->n, s->m, px, py);
            if ((st = draw_panel_labels(out, v, s, &L, r, c, px, py, err)))
                goto done;
        }
    if (!s->no_colorbar && (st = draw_colorbar(out, v, &L, lut, cb_box, err)))
        goto done;

    if (geom) {
        qkv_heatmap_geometry g = {
            .width = L.W, .height = L.H, .grid_x = L.left, .grid_y = L.top, .panel_w = L.pw,
            .panel_h = L.ph, .gap_x = L.gap_x, .gap_y = L.gap_y, .cell_px = L.cell,
            .vmin = L.vmin, .vmax = L.vmax, .x_tick_stride = L.x_stride,
            .y_tick_stride = L.y_stride, .x_ticks_rotated = L.x_rot,
        };
        memcpy(g.title_box, title_box, sizeof title_box);
        memcpy(g.colorbar_box, cb_box, sizeof cb_box);
        *geom = g;
    }

done:
    if (st)
        qkv_canvas_free(out);
    layout_free(&L);
    return st;
}

qkv_status qkv_heatmap_save(const char *path, qkv_heatmap_geometry *geom, qkv_viz *v,
                            const qkv_heatmap_spec *s, qkv_error *err)
{
    qkv_canvas c;
    return canvas_save_png(&c, qkv_heatmap_draw(&c, geom, v, s, err), path, err);
}
