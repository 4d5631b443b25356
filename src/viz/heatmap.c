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

qkv_status qkv_heatmap_draw(qkv_canvas *out, qkv_heatmap_geometry *geom, qkv_viz *v,
                            const qkv_heatmap_spec *s, qkv_error *err)
{
    draw_start(out, geom, sizeof *geom);
    qkv_status st = check_spec(s, err);
    if (st)
        return st;
    const int rows = s->rows, cols = s->cols, n = s->n, m = s->m;
    const size_t total = (size_t)rows * cols * n * m;

    /* Colour range: given, or the finite data's extent (a constant matrix sits mid-ramp). */
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

    char (*xl)[LABEL_CAP] = NULL, (*yl)[LABEL_CAP] = NULL, (*pt)[LABEL_CAP] = NULL;
    int tw, lh_title, lh_label, lh_tick;
    if ((st = qkv_text_size(&tw, &lh_title, v, "", FS_TITLE, err)) ||
        (st = qkv_text_size(&tw, &lh_label, v, "", FS_LABEL, err)) ||
        (st = qkv_text_size(&tw, &lh_tick, v, "", FS_TICK, err)))
        return st;

    /* Cells: panels of a few hundred pixels whatever n and m, grown to a text line when that
     * lets every tick label show without the panel getting much bigger. */
    int big = imax(n, m), cell = s->cell_px;
    if (cell == 0) {
        double target = fmin(fmax(880.0 / cols, 150.0), 340.0);
        cell = iclamp((int)lround(target / big), 1, 36);
        if ((s->x_ticks || s->y_ticks) && cell < lh_tick && big * lh_tick <= 1.6 * target)
            cell = lh_tick;
    }
    const int pw = m * cell, ph = n * cell;

    int has_titles = 0;
    for (int i = 0; s->panel_titles && i < rows * cols; i++)
        has_titles |= s->panel_titles[i] && s->panel_titles[i][0];
    const int gap_x = 16, gap_y = 14 + (has_titles ? lh_label + 4 : 0);

    xl = s->x_ticks ? calloc((size_t)m, LABEL_CAP) : NULL;
    yl = s->y_ticks ? calloc((size_t)n, LABEL_CAP) : NULL;
    pt = has_titles ? calloc((size_t)rows * cols, LABEL_CAP) : NULL;
    if ((s->x_ticks && !xl) || (s->y_ticks && !yl) || (has_titles && !pt)) {
        st = qkv_fail(err, QKV_ERR_NOMEM, "heatmap: out of memory for labels");
        goto done;
    }
    int xw = 0, yw = 0;
    if ((xl && (st = fit_labels(v, s->x_ticks, m, MAX_TICK_W, xl, &xw, err))) ||
        (yl && (st = fit_labels(v, s->y_ticks, n, MAX_TICK_W, yl, &yw, err))))
        goto done;
    for (int i = 0; pt && i < rows * cols; i++) {
        const char *t = s->panel_titles[i] ? s->panel_titles[i] : "";
        int w;
        if ((st =
                 qkv_text_fit(pt[i], LABEL_CAP, &w, v, t, FS_LABEL, imax(pw + gap_x - 6, 24), err)))
            goto done;
    }

    /* x labels fit across their cells, or turn; dense labels are thinned to one per line. */
    int x_stride = 0, x_rot = 0, x_region = 0, y_stride = 0, y_region = 0;
    if (xl) {
        x_rot = xw + 4 > cell;
        x_stride = x_rot ? (int)ceil((lh_tick + 1.0) / cell) : 1;
        x_region = TICK_LEN + 2 + (x_rot ? xw : lh_tick);
    }
    if (yl) {
        y_stride = (int)ceil((lh_tick + 1.0) / cell);
        y_region = TICK_LEN + 3 + yw;
    }

    /* Colour bar ticks: about one per two text lines of bar. */
    const int grid_w = cols * pw + (cols - 1) * gap_x, grid_h = rows * ph + (rows - 1) * gap_y;
    int cb_h = imax(grid_h, 4 * lh_tick), cb_lw = 0, n_cb = 0;
    double cb_ticks[16], cb_step = 0.0;
    char cb_lab[16][32];
    if (!s->no_colorbar) {
        n_cb =
            qkv_nice_ticks(cb_ticks, 16, &cb_step, vmin, vmax, iclamp(cb_h / (2 * lh_tick), 2, 7));
        for (int i = 0; i < n_cb; i++) {
            int w, h;
            qkv_tick_label(cb_lab[i], sizeof cb_lab[i], cb_ticks[i], cb_step);
            if ((st = qkv_text_size(&w, &h, v, cb_lab[i], FS_TICK, err)))
                goto done;
            cb_lw = imax(cb_lw, w);
        }
    }

    /* Margins, each measured from what it holds. */
    int left = PAD + (s->ylabel && *s->ylabel ? lh_label + 6 : 0) + y_region;
    int top = PAD + (s->title && *s->title ? lh_title + 8 : 0) + (has_titles ? lh_label + 4 : 0);
    int bottom = x_region + (s->xlabel && *s->xlabel ? lh_label + 6 : 0) + PAD;
    int right = s->no_colorbar ? PAD : CBAR_GAP + CBAR_W + TICK_LEN + 3 + cb_lw + PAD;
    int W = left + grid_w + right;
    int H = top + imax(grid_h + bottom, s->no_colorbar ? 0 : cb_h + PAD);

    char title[256] = "";
    int title_w = 0;
    if (s->title && *s->title) {
        if ((st = qkv_text_fit(title, sizeof title, &title_w, v, s->title, FS_TITLE, 1600, err)))
            goto done;
        if (title_w + 2 * PAD > W) { /* widen the figure and centre the grid under the title */
            left += (title_w + 2 * PAD - W) / 2;
            W = title_w + 2 * PAD;
        }
    }
    if (W > QKV_CANVAS_MAX_SIDE || H > QKV_CANVAS_MAX_SIDE) {
        st = qkv_fail(err, QKV_ERR_ARG,
                      "heatmap: the figure would be %d x %d pixels (max %d); set a smaller "
                      "cell_px",
                      W, H, QKV_CANVAS_MAX_SIDE);
        goto done;
    }
    if ((st = qkv_canvas_init(out, W, H, qkv_rgb_hex(0xFFFFFF), err)))
        goto done;

    qkv_rgb lut[256];
    for (int i = 0; i < 256; i++)
        lut[i] = qkv_colormap(i / 255.0f);
    const qkv_rgb ink = qkv_rgb_hex(INK), frame = qkv_rgb_hex(FRAME);
    const qkv_rgb nonfinite = qkv_rgb_hex(QKV_COLOR_NONFINITE);
    const float scale = 255.0f / (vmax - vmin);
    int title_box[4] = {0};

    if (*title &&
        (st = qkv_canvas_text(out, v, title, W / 2, PAD,
                              &(qkv_text_style){FS_TITLE, QKV_ALIGN_CENTER, QKV_VALIGN_TOP, 0, ink},
                              title_box, err)))
        goto done;

    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) {
            const int px = left + c * (pw + gap_x), py = top + r * (ph + gap_y);
            const float *P = s->data + ((size_t)r * cols + c) * n * m; /* (n, m) */
            for (int i = 0; i < n; i++)
                for (int j = 0; j < m; j++) {
                    float x = P[(size_t)i * m + j];
                    qkv_rgb col = nonfinite;
                    if (isfinite(x)) {
                        float t = (x - vmin) * scale;
                        col = lut[t <= 0.0f ? 0 : t >= 255.0f ? 255 : (int)lroundf(t)];
                    }
                    qkv_canvas_fill_rect(out, px + j * cell, py + i * cell, cell, cell, col);
                }
            qkv_canvas_stroke_rect(out, px - 1, py - 1, pw + 2, ph + 2, frame);

            if (pt && *pt[r * cols + c] &&
                (st = qkv_canvas_text(out, v, pt[r * cols + c], px + pw / 2, py - 4,
                                      &(qkv_text_style){FS_LABEL, QKV_ALIGN_CENTER,
                                                        QKV_VALIGN_BOTTOM, 0, ink},
                                      NULL, err)))
                goto done;
            if (c == 0 && yl)
                for (int i = 0; i < n; i += y_stride) {
                    int cy = py + i * cell + cell / 2;
                    qkv_canvas_fill_rect(out, px - 1 - TICK_LEN, cy, TICK_LEN, 1, frame);
                    if ((st = qkv_canvas_text(out, v, yl[i], px - TICK_LEN - 4, cy,
                                              &(qkv_text_style){FS_TICK, QKV_ALIGN_RIGHT,
                                                                QKV_VALIGN_MIDDLE, 0, ink},
                                              NULL, err)))
                        goto done;
                }
            if (c == 0 && s->ylabel && *s->ylabel &&
                (st = qkv_canvas_text(out, v, s->ylabel, px - 1 - y_region - 6, py + ph / 2,
                                      &(qkv_text_style){FS_LABEL, QKV_ALIGN_RIGHT,
                                                        QKV_VALIGN_MIDDLE, 1, ink},
                                      NULL, err)))
                goto done;
            if (r == rows - 1 && xl)
                for (int j = 0; j < m; j += x_stride) {
                    int cx = px + j * cell + cell / 2;
                    qkv_canvas_fill_rect(out, cx, py + ph + 1, 1, TICK_LEN, frame);
                    if ((st = qkv_canvas_text(out, v, xl[j], cx, py + ph + 1 + TICK_LEN + 2,
                                              &(qkv_text_style){FS_TICK, QKV_ALIGN_CENTER,
                                                                QKV_VALIGN_TOP, x_rot, ink},
                                              NULL, err)))
                        goto done;
                }
            if (r == rows - 1 && s->xlabel && *s->xlabel &&
                (st = qkv_canvas_text(out, v, s->xlabel, px + pw / 2, py + ph + 1 + x_region + 6,
                                      &(qkv_text_style){FS_LABEL, QKV_ALIGN_CENTER,
                                                        QKV_VALIGN_TOP, 0, ink},
                                      NULL, err)))
                goto done;
        }

    /* The colour bar: top is vmax, as on a y axis. */
    int cb_box[4] = {0};
    if (!s->no_colorbar) {
        const int bx = left + grid_w + CBAR_GAP, by = top;
        for (int y = 0; y < cb_h; y++)
            qkv_canvas_fill_rect(out, bx, by + y, CBAR_W, 1,
                                 lut[(int)lroundf(255.0f * (1.0f - (y + 0.5f) / cb_h))]);
        qkv_canvas_stroke_rect(out, bx - 1, by - 1, CBAR_W + 2, cb_h + 2, frame);
        for (int i = 0; i < n_cb; i++) {
            int ty = by + (int)lround((1.0 - (cb_ticks[i] - vmin) / (vmax - vmin)) * (cb_h - 1));
            qkv_canvas_fill_rect(out, bx + CBAR_W + 1, ty, TICK_LEN, 1, frame);
            if ((st = qkv_canvas_text(out, v, cb_lab[i], bx + CBAR_W + 1 + TICK_LEN + 3, ty,
                                      &(qkv_text_style){FS_TICK, QKV_ALIGN_LEFT,
                                                        QKV_VALIGN_MIDDLE, 0, ink},
                                      NULL, err)))
                goto done;
        }
        cb_box[0] = bx, cb_box[1] = by, cb_box[2] = CBAR_W, cb_box[3] = cb_h;
    }

    if (geom) {
        qkv_heatmap_geometry g = {
            .width = W, .height = H, .grid_x = left, .grid_y = top, .panel_w = pw,
            .panel_h = ph, .gap_x = gap_x, .gap_y = gap_y, .cell_px = cell,
            .vmin = vmin, .vmax = vmax, .x_tick_stride = x_stride, .y_tick_stride = y_stride,
            .x_ticks_rotated = x_rot,
        };
        memcpy(g.title_box, title_box, sizeof title_box);
        memcpy(g.colorbar_box, cb_box, sizeof cb_box);
        *geom = g;
    }
    st = QKV_OK;

done:
    if (st)
        qkv_canvas_free(out);
    free(xl);
    free(yl);
    free(pt);
    return st;
}

qkv_status qkv_heatmap_save(const char *path, qkv_heatmap_geometry *geom, qkv_viz *v,
                            const qkv_heatmap_spec *s, qkv_error *err)
{
    qkv_canvas c;
    return canvas_save_png(&c, qkv_heatmap_draw(&c, geom, v, s, err), path, err);
}
