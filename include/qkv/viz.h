/* SPDX-License-Identifier: MIT */
/* qkv/viz.h: looking inside and figures: attention maps of a translation, Nadaraya-Watson kernel
 * regression (both in libqkv), and PNG heatmaps and line plots (d2l's show_heatmaps and plot; in
 * libqkv-viz, `pkg-config --libs qkv-viz`, so that a program that only translates never links
 * libpng and FreeType). Part of qkv.h, which includes every part; its opening comment is the
 * tour. */
#ifndef QKV_API_VIZ_H
#define QKV_API_VIZ_H

#include "qkv/models.h"

#ifdef __cplusplus
extern "C" {
#endif

/* =======================================================================================
 * Looking inside: the attention weights behind one translation, and Nadaraya-Watson
 * kernel regression (d2l 11.2), attention pooling at its simplest.
 * ===================================================================================== */

/* Every layer's and head's attention weights for one sentence pair, from a teacher-forced
 * forward pass in evaluation mode whose decoder input is <bos> + tgt. With tgt the output of
 * qkv_transformer_greedy these are the weights that decoding used: predicted[] then repeats
 * tgt (and ends in <eos> if decoding stopped there). Owned until qkv_attention_maps_free. */
typedef struct {
    int enc_layers, dec_layers, heads;
    int src_len;         /* Ts: source ids as the encoder saw them, <eos> included */
    int tgt_len;         /* Tt: decoder inputs, <bos> + the translation */
    float *encoder;      /* (enc_layers, H, Ts, Ts) encoder self-attention */
    float *decoder_self; /* (dec_layers, H, Tt, Tt) causal decoder self-attention */
    float *cross;        /* (dec_layers, H, Tt, Ts) encoder-decoder attention */
    int *predicted;      /* (Tt) each position's argmax token */
} qkv_attention_maps;

/* src (src_len >= 1) as qkv_vocab_encode writes it, unpadded; tgt (tgt_len >= 0) the
 * translation without <bos> or <eos>. Both lengths (tgt_len + 1) must fit the model. */
QKV_API
qkv_status qkv_attention_maps_compute(qkv_attention_maps *out, qkv_transformer *m,
                                      const int *src, int src_len, const int *tgt, int tgt_len,
                                      qkv_error *err);
QKV_API
void qkv_attention_maps_free(qkv_attention_maps *a);

/* Nadaraya-Watson attention pooling with a Gaussian kernel:
 *   y_i = sum_j P_ij v_j,  P_i = masked_softmax(S_i),  S_ij = -((q_i - k_j) w)^2 / 2.
 * w = 1 is the non-parametric estimator; a learned w sets the kernel's width to 1/w.
 * x = {q (B, n), k (B, m), v (B, m)} -> y (B, n); P (B, n, m) is saved for backward. The mask
 * is qkv_masked_softmax_forward's (H = 1). Each batch row has its own keys, so d2l's training,
 * where every input attends to all the others, is B = n_train, n = 1, m = n_train - 1. */
QKV_API
void qkv_kernel_regression_forward(float *y, float *P, const qkv_attention_inputs *x, float w,
                                   int B, int n, int m, const qkv_mask *mask);
/* dx->dQ, dK, dV (dq, dk, dv) += their gradients given dy; *dw += dL/dw. Any gradient may be
 * NULL, and so may dx (only dw wanted). */
QKV_API
void qkv_kernel_regression_backward(qkv_attention_grads *dx, float *dw, const float *dy,
                                    const float *P, const qkv_attention_inputs *x, float w, int B,
                                    int n, int m);

/* =======================================================================================
 * Figures (libqkv-viz): attention heatmaps, training curves, positional encodings, kernel
 * regression fits. A small RGB raster, antialiased text through FreeType, PNG through libpng.
 *
 * A short tour.
 *   qkv_viz_open() loads a font (DejaVu Sans by default) into a context the caller owns; every
 *   function that draws text takes it. A figure is a qkv_canvas: width x height RGB8 pixels,
 *   row-major, (0, 0) the top-left corner, pixel (x, y) covering [x, x+1) x [y, y+1), so its
 *   centre is (x + 0.5, y + 0.5) in the float coordinates of lines and circles.
 *   qkv_heatmap_draw() and qkv_plot_draw() lay out a whole figure and size the canvas
 *   themselves; the *_save() variants also write the PNG. Both can report where they put
 *   things (a geometry struct) so a caller can annotate the figure, and a test can look at it.
 *   Nothing here keeps global state; a qkv_viz (its FreeType face) must not be used by two
 *   threads at once.
 * ===================================================================================== */

/* ---------------------------------------------------------------------------------------
 * Context and canvas
 * ------------------------------------------------------------------------------------- */

#define QKV_VIZ_DEFAULT_FONT "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"

/* The FreeType library and one loaded face. Opaque; one per thread. */
typedef struct qkv_viz qkv_viz;

/* Load the font at font_path (NULL: QKV_VIZ_DEFAULT_FONT) into a new context *out.
 * A missing or unreadable file is QKV_ERR_IO, a file that is not a font QKV_ERR_FORMAT. */
QKV_API
qkv_status qkv_viz_open(qkv_viz **out, const char *font_path, qkv_error *err);
QKV_API
void qkv_viz_close(qkv_viz *v);

typedef struct {
    uint8_t r, g, b;
} qkv_rgb;

/* 0xRRGGBB as a colour. */
static inline qkv_rgb qkv_rgb_hex(uint32_t hex)
{
    qkv_rgb c = {(uint8_t)(hex >> 16), (uint8_t)(hex >> 8), (uint8_t)hex};
    return c;
}

/* An RGB8 image. pixels (height, width, 3), row-major. Every drawing call is clipped to the
 * rectangle [clip_x0, clip_x1) x [clip_y0, clip_y1), initially the whole canvas. */
typedef struct {
    int width, height;
    uint8_t *pixels;
    int clip_x0, clip_y0, clip_x1, clip_y1;
} qkv_canvas;

/* Largest canvas side accepted, in pixels. */
#define QKV_CANVAS_MAX_SIDE 16384

/* Allocate a width x height canvas filled with background (1 <= sides <= QKV_CANVAS_MAX_SIDE). */
QKV_API
qkv_status qkv_canvas_init(qkv_canvas *c, int width, int height, qkv_rgb background,
                           qkv_error *err);
/* Free the pixels; c is left zeroed. Safe on a zeroed canvas. */
QKV_API
void qkv_canvas_free(qkv_canvas *c);
/* Restrict drawing to the rectangle at (x, y) of size w x h (intersected with the canvas). */
QKV_API
void qkv_canvas_set_clip(qkv_canvas *c, int x, int y, int w, int h);
QKV_API
void qkv_canvas_reset_clip(qkv_canvas *c);
/* The colour of pixel (x, y); (x, y) must lie inside the canvas. */
QKV_API
qkv_rgb qkv_canvas_get(const qkv_canvas *c, int x, int y);

/* Fill the w x h rectangle whose top-left pixel is (x, y). */
QKV_API
void qkv_canvas_fill_rect(qkv_canvas *c, int x, int y, int w, int h, qkv_rgb color);
/* A 1-pixel outline just inside the w x h rectangle at (x, y). */
QKV_API
void qkv_canvas_stroke_rect(qkv_canvas *c, int x, int y, int w, int h, qkv_rgb color);

typedef enum {
    QKV_LINE_AUTO = 0, /* plots: solid, dashed, dash-dot, dotted by series index (as d2l) */
    QKV_LINE_SOLID,
    QKV_LINE_DASHED,
    QKV_LINE_DASHDOT,
    QKV_LINE_DOTTED,
    QKV_LINE_NONE /* plots: markers only */
} qkv_line_style;

/* An antialiased polyline through the n points (x[i], y[i]) in canvas coordinates, width
 * pixels wide with round joins and caps. A non-finite point breaks the line in two. Every
 * pixel is blended once, at the largest coverage any segment gives it, so joins do not
 * darken. QKV_LINE_AUTO and QKV_LINE_NONE draw solid. Fails only on allocation. */
QKV_API
qkv_status qkv_canvas_polyline(qkv_canvas *c, const float *x, const float *y, int n,
                               float width, qkv_line_style style, qkv_rgb color,
                               qkv_error *err);
/* One antialiased segment (a two-point solid polyline). */
QKV_API
qkv_status qkv_canvas_line(qkv_canvas *c, float x0, float y0, float x1, float y1, float width,
                           qkv_rgb color, qkv_error *err);
/* A filled antialiased disc of the given radius centred at (cx, cy), blended with opacity
 * alpha in [0, 1]. */
QKV_API
void qkv_canvas_disc(qkv_canvas *c, float cx, float cy, float radius, qkv_rgb color,
                     float alpha);

/* Where the anchor point (x, y) of a text sits on its box. The box is the text's advance
 * width by the font's line height (ascent + descent), after any rotation. */
typedef enum {
    QKV_ALIGN_LEFT = 0,
    QKV_ALIGN_CENTER = 1,
    QKV_ALIGN_RIGHT = 2
} qkv_halign;
typedef enum {
    QKV_VALIGN_TOP = 0,
    QKV_VALIGN_MIDDLE = 1,
    QKV_VALIGN_BOTTOM = 2
} qkv_valign;

/* The box of UTF-8 text at size_px (the font's pixel size, as FreeType's), unrotated:
 * *w its width, *h the line height. Invalid UTF-8 bytes count as U+FFFD. */
QKV_API
qkv_status qkv_text_size(int *w, int *h, qkv_viz *v, const char *text, float size_px,
                         qkv_error *err);
/* How a text is drawn. */
typedef struct {
    float size_px;     /* the font's pixel size, as FreeType's */
    qkv_halign halign; /* which point of the box sits at the anchor */
    qkv_valign valign;
    int rotate90;      /* 1: a quarter turn counter-clockwise (reading bottom to top, as a
                          y-axis label) */
    qkv_rgb color;
} qkv_text_style;

/* Draw text with antialiasing. The box (rotated: h wide, w tall) is placed so that its
 * (halign, valign) point is at (x, y). If box is not NULL it receives {x, y, w, h} of the box
 * on the canvas. NULL or empty text draws nothing. */
QKV_API
qkv_status qkv_canvas_text(qkv_canvas *c, qkv_viz *v, const char *text, int x, int y,
                           const qkv_text_style *style, int box[4], qkv_error *err);
/* Write into out (size cap bytes) the longest prefix of text that, followed by an ellipsis
 * when cut, is at most max_w pixels wide at size_px. *w receives the result's width. */
QKV_API
qkv_status qkv_text_fit(char *out, size_t cap, int *w, qkv_viz *v, const char *text, float size_px,
                        int max_w, qkv_error *err);

/* Write the canvas as an 8-bit RGB PNG. The file appears atomically: the image goes to a
 * temporary file in the same directory, which is renamed over path only when complete. */
QKV_API
qkv_status qkv_canvas_write_png(const qkv_canvas *c, const char *path, qkv_error *err);

/* ---------------------------------------------------------------------------------------
 * Colours and ticks
 * ------------------------------------------------------------------------------------- */

/* The sequential colour map of heatmaps: t in [0, 1] (clamped) from dark violet through blue,
 * teal and green to yellow, with CIELAB lightness L* rising linearly from 16 to 92, so equal
 * steps in value look like equal steps in brightness, and it stays ordered in grey. */
QKV_API
qkv_rgb qkv_colormap(float t);
/* Colour of a non-finite heatmap cell (NaN, +-Inf): a neutral grey no ramp colour is near. */
#define QKV_COLOR_NONFINITE 0xC0C0C0u

/* The i-th colour of the default series palette (Okabe-Ito, legible by colour-blind readers). */
QKV_API
qkv_rgb qkv_palette(int i);

/* "Nice" tick values in [lo, hi]: multiples of 1, 2, 2.5 or 5 x 10^k, about `target` of them
 * (target >= 2). Writes at most cap values to ticks, returns the count, and the step in *step
 * (if not NULL). lo < hi, both finite; otherwise returns 0. */
QKV_API
int qkv_nice_ticks(double *ticks, int cap, double *step, double lo, double hi, int target);
/* A tick label for value v on an axis with tick spacing step: as many decimals as the step
 * needs, no "-0", exponent form for very large or small magnitudes. */
QKV_API
void qkv_tick_label(char *out, size_t cap, double v, double step);

/* ---------------------------------------------------------------------------------------
 * Heatmaps (d2l's show_heatmaps)
 * ------------------------------------------------------------------------------------- */

/* A rows x cols grid of panels (e.g. layers x heads), each an n x m matrix (e.g. queries x
 * keys). Non-finite values are drawn in QKV_COLOR_NONFINITE and left out of the automatic
 * range. Tick labels are shared by every panel: x under the bottom row (turned 90 degrees when
 * they do not fit across a cell), y left of the first column; when they are denser than a line
 * of text, only every k-th is shown. Labels wider than ~110 px are cut with an ellipsis.
 * Cells are square; the automatic size keeps a panel a few hundred pixels across whether the
 * matrix is 10 x 10 or 60 x 60. Colours are qkv_colormap at 256 levels over [vmin, vmax]. */
typedef struct {
    const float *data;             /* (rows, cols, n, m); panel (r, c) at (r*cols + c)*n*m */
    int rows, cols;                /* panels */
    int n, m;                      /* each panel: n matrix rows (y) x m columns (x) */
    const char *const *panel_titles; /* NULL, or rows*cols strings (a NULL entry: no title) */
    const char *const *x_ticks;    /* NULL, or m labels (e.g. source tokens) */
    const char *const *y_ticks;    /* NULL, or n labels (e.g. target tokens) */
    const char *xlabel, *ylabel;   /* axis labels of every bottom / left panel, or NULL */
    const char *title;             /* figure title, or NULL */
    float vmin, vmax;              /* colour range; vmin == vmax: the finite data's min, max */
    int cell_px;                   /* side of a cell in pixels, 0: automatic */
    int no_colorbar;               /* 0: a shared colour bar right of the grid; 1: none */
} qkv_heatmap_spec;

/* Where qkv_heatmap_draw put things. Panel (r, c) has its top-left pixel at
 * (grid_x + c*(panel_w + gap_x), grid_y + r*(panel_h + gap_y)); cell (i, j) of a panel is the
 * cell_px x cell_px square at (j*cell_px, i*cell_px) inside it. */
typedef struct {
    int width, height;             /* canvas */
    int grid_x, grid_y, panel_w, panel_h, gap_x, gap_y, cell_px;
    int title_box[4];              /* x, y, w, h of the figure title (zeros without one) */
    int colorbar_box[4];           /* x, y, w, h of the colour bar (zeros without one) */
    float vmin, vmax;              /* the colour range used */
    int x_tick_stride, y_tick_stride; /* every k-th label shown (0: no labels) */
    int x_ticks_rotated;           /* 1: x labels read bottom to top */
} qkv_heatmap_geometry;

/* Lay out and draw the figure into *out, which this call initialises (free it with
 * qkv_canvas_free). geom may be NULL. Fails with QKV_ERR_ARG (naming the field) on empty or
 * inconsistent dimensions, a NULL data pointer or a reversed colour range. */
QKV_API
qkv_status qkv_heatmap_draw(qkv_canvas *out, qkv_heatmap_geometry *geom, qkv_viz *v,
                            const qkv_heatmap_spec *s, qkv_error *err);
/* qkv_heatmap_draw, then write the PNG to path. */
QKV_API
qkv_status qkv_heatmap_save(const char *path, qkv_heatmap_geometry *geom, qkv_viz *v,
                            const qkv_heatmap_spec *s, qkv_error *err);

/* ---------------------------------------------------------------------------------------
 * Line plots (d2l's plot)
 * ------------------------------------------------------------------------------------- */

typedef enum { QKV_MARKER_NONE = 0, QKV_MARKER_CIRCLE } qkv_marker;

/* One series. A point whose x or y is not finite (or, on a log axis, whose y <= 0) is not
 * drawn and breaks the line there, as matplotlib does. */
typedef struct {
    const float *x;        /* n values, or NULL for 0, 1, ..., n-1 */
    const float *y;        /* n values */
    int n;
    const char *label;     /* legend entry, or NULL */
    uint32_t color;        /* 0xRRGGBB; 0: qkv_palette(series index) */
    qkv_line_style style;  /* QKV_LINE_AUTO: by series index; QKV_LINE_NONE: markers only */
    float line_width;      /* pixels, 0: 2 */
    qkv_marker marker;     /* QKV_MARKER_CIRCLE: a disc at every point */
    float marker_radius;   /* pixels, 0: 4 */
    float marker_alpha;    /* opacity in (0, 1], 0: 1 */
} qkv_series;

typedef struct {
    const qkv_series *series;
    int nseries;
    const char *title, *xlabel, *ylabel; /* each may be NULL */
    int log_y;             /* 1: logarithmic y axis */
    float xlim[2], ylim[2]; /* axis ranges; equal values: from the data, with a 4% margin */
    int width, height;     /* canvas, 0: 720 x 480 */
    int no_legend;         /* 0: a legend (if any series has a label) in the corner of the plot
                              area that covers the fewest data; 1: none */
} qkv_plot_spec;

/* Where qkv_plot_draw put things: the plot area and the data ranges it maps. Data (x, y) is
 * at canvas x = area_x + (x - xmin)/(xmax - xmin) * area_w, y = area_y + area_h - (Y - ymin)/
 * (ymax - ymin) * area_h, with Y = log10(y) and ymin, ymax in log10 units when log_y. */
typedef struct {
    int width, height;
    int area_x, area_y, area_w, area_h;
    double xmin, xmax, ymin, ymax;
    int log_y;
    int title_box[4];      /* zeros without a title */
    int legend_box[4];     /* zeros without a legend */
} qkv_plot_geometry;

/* Lay out and draw the plot into *out, which this call initialises. geom may be NULL.
 * QKV_ERR_ARG names the series and field at fault (no series, n < 1, NULL y, size out of
 * range, reversed limits); QKV_ERR_NUMERIC if no series has a single drawable point. */
QKV_API
qkv_status qkv_plot_draw(qkv_canvas *out, qkv_plot_geometry *geom, qkv_viz *v,
                         const qkv_plot_spec *s, qkv_error *err);
/* qkv_plot_draw, then write the PNG to path. */
QKV_API
qkv_status qkv_plot_save(const char *path, qkv_plot_geometry *geom, qkv_viz *v,
                         const qkv_plot_spec *s, qkv_error *err);

#ifdef __cplusplus
}
#endif

#endif /* QKV_API_VIZ_H */
