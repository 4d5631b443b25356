/* SPDX-License-Identifier: MIT */
/* Figures: canvas primitives, text, PNG output, the colour map, ticks, heatmaps and line plots.
 * Every figure is written to a PNG, read back with libpng and inspected pixel by pixel: the
 * size, that the data shows (bright cells where the matrix is large, a line that rises with
 * its series), that the text is there, and that bad input gives the documented error.
 * Set QKV_VIZ_SAMPLES=<dir> to keep four sample figures there for a person to look at. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <png.h>

#include "test_util.h"
#include "qkv.h"

typedef struct {
    qkv_viz *v;
    char dir[64]; /* a fresh temporary directory for this run's files */
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    if (!f)
        return -1;
    snprintf(f->dir, sizeof f->dir, "/tmp/qkv-test-viz-XXXXXX");
    qkv_error err = {0};
    if (!mkdtemp(f->dir) || qkv_viz_open(&f->v, NULL, &err) != QKV_OK) {
        fprintf(stderr, "setup: %s\n", err.msg);
        free(f);
        return -1;
    }
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    DIR *d = opendir(f->dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        char p[512];
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            snprintf(p, sizeof p, "%s/%s", f->dir, e->d_name);
            unlink(p);
        }
    }
    if (d)
        closedir(d);
    rmdir(f->dir);
    qkv_viz_close(f->v);
    free(f);
    return 0;
}

static void path_in(const fixture *f, const char *name, char *out, size_t cap)
{
    snprintf(out, cap, "%s/%s", f->dir, name);
}

/* ---- reading figures back -------------------------------------------------------------- */

typedef struct {
    int w, h;
    uint8_t *rgb; /* (h, w, 3) */
} image;

/* Read a PNG with libpng; fails the test unless it is an 8-bit RGB PNG. */
static image read_png(const char *path)
{
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        print_error("cannot open %s\n", path);
        fail();
    }
    uint8_t head[26];
    size_t got = fread(head, 1, sizeof head, fp);
    fclose(fp);
    assert_int_equal(got, sizeof head);
    assert_int_equal(png_sig_cmp(head, 0, 8), 0);
    assert_memory_equal(head + 12, "IHDR", 4);
    assert_int_equal(head[24], 8); /* bit depth */
    assert_int_equal(head[25], 2); /* colour type: RGB */

    png_image img;
    memset(&img, 0, sizeof img);
    img.version = PNG_IMAGE_VERSION;
    assert_true(png_image_begin_read_from_file(&img, path));
    img.format = PNG_FORMAT_RGB;
    image out = {(int)img.width, (int)img.height, malloc(PNG_IMAGE_SIZE(img))};
    assert_non_null(out.rgb);
    assert_true(png_image_finish_read(&img, NULL, out.rgb, 0, NULL));
    return out;
}

static qkv_rgb px(const image *im, int x, int y)
{
    assert_true(x >= 0 && x < im->w && y >= 0 && y < im->h);
    const uint8_t *p = im->rgb + 3 * ((size_t)y * im->w + x);
    qkv_rgb c = {p[0], p[1], p[2]};
    return c;
}

static int same(qkv_rgb a, qkv_rgb b) { return a.r == b.r && a.g == b.g && a.b == b.b; }
static int is_white(qkv_rgb a) { return a.r == 255 && a.g == 255 && a.b == 255; }

/* Relative luminance (linear light), the quantity CIELAB's L* orders. */
static double luminance(qkv_rgb c)
{
    double ch[3] = {c.r / 255.0, c.g / 255.0, c.b / 255.0};
    for (int i = 0; i < 3; i++)
        ch[i] = ch[i] <= 0.04045 ? ch[i] / 12.92 : pow((ch[i] + 0.055) / 1.055, 2.4);
    return 0.2126 * ch[0] + 0.7152 * ch[1] + 0.0722 * ch[2];
}

/* Non-white pixels inside the box {x, y, w, h}. */
static int ink_in(const image *im, const int box[4])
{
    int n = 0;
    for (int y = box[1]; y < box[1] + box[3]; y++)
        for (int x = box[0]; x < box[0] + box[2]; x++)
            n += !is_white(px(im, x, y));
    return n;
}

static int canvas_ink(const qkv_canvas *c, int x0, int y0, int x1, int y1)
{
    int n = 0;
    for (int y = y0; y < y1; y++)
        for (int x = x0; x < x1; x++)
            n += !is_white(qkv_canvas_get(c, x, y));
    return n;
}

static void expect_error(qkv_status got, qkv_status want, const qkv_error *err,
                         const char *needle)
{
    if (got != want || (needle && !strstr(err->msg, needle))) {
        print_error("got status %d (%s) '%s', want %d with '%s'\n", got, qkv_status_name(got),
                    err->msg, want, needle ? needle : "");
        fail();
    }
}

/* ---- canvas, PNG, fonts, text ------------------------------------------------------------ */

static void test_canvas_rect_and_clip(void **state)
{
    (void)state;
    qkv_error err = {0};
    qkv_canvas c;
    const qkv_rgb white = qkv_rgb_hex(0xFFFFFF), red = qkv_rgb_hex(0xFF0000);
    assert_int_equal(qkv_canvas_init(&c, 20, 10, white, &err), QKV_OK);
    qkv_canvas_fill_rect(&c, -5, -5, 10, 10, red); /* partly off the canvas */
    assert_true(same(qkv_canvas_get(&c, 0, 0), red));
    assert_true(same(qkv_canvas_get(&c, 4, 4), red));
    assert_true(is_white(qkv_canvas_get(&c, 5, 4)));
    assert_true(is_white(qkv_canvas_get(&c, 4, 5)));
    qkv_canvas_set_clip(&c, 10, 2, 5, 3);
    qkv_canvas_fill_rect(&c, 0, 0, 20, 10, red);
    assert_int_equal(canvas_ink(&c, 0, 0, 20, 10), 25 + 15);
    assert_true(same(qkv_canvas_get(&c, 14, 4), red));
    assert_true(is_white(qkv_canvas_get(&c, 15, 4)));
    qkv_canvas_free(&c);
    assert_null(c.pixels);

    expect_error(qkv_canvas_init(&c, 0, 5, white, &err), QKV_ERR_ARG, &err, "0 x 5");
    expect_error(qkv_canvas_init(&c, 5, QKV_CANVAS_MAX_SIDE + 1, white, &err), QKV_ERR_ARG,
                 &err, "canvas");
}

static void test_png_roundtrip_atomic(void **state)
{
    fixture *f = *state;
    qkv_error err = {0};
    qkv_canvas c;
    assert_int_equal(qkv_canvas_init(&c, 37, 23, qkv_rgb_hex(0), &err), QKV_OK);
    for (int y = 0; y < 23; y++)
        for (int x = 0; x < 37; x++) {
            qkv_rgb col = {(uint8_t)(x * 7), (uint8_t)(y * 11), (uint8_t)(x * y)};
            qkv_canvas_fill_rect(&c, x, y, 1, 1, col);
        }
    char path[128];
    path_in(f, "round.png", path, sizeof path);
    assert_int_equal(qkv_canvas_write_png(&c, path, &err), QKV_OK);
    assert_int_equal(qkv_canvas_write_png(&c, path, &err), QKV_OK); /* replaces it */
    image im = read_png(path);
    assert_int_equal(im.w, 37);
    assert_int_equal(im.h, 23);
    assert_memory_equal(im.rgb, c.pixels, 37 * 23 * 3);
    free(im.rgb);

    /* A directory in the way: the rename fails, and the temporary file must not stay behind. */
    expect_error(qkv_canvas_write_png(&c, f->dir, &err), QKV_ERR_IO, &err, f->dir);
    DIR *d = opendir(f->dir);
    assert_non_null(d);
    int files = 0;
    for (struct dirent *e; (e = readdir(d));) {
        assert_null(strstr(e->d_name, ".tmp"));
        files += e->d_name[0] != '.';
    }
    closedir(d);
    assert_int_equal(files, 1);

    expect_error(qkv_canvas_write_png(&c, "/nonexistent-qkv-dir/x.png", &err), QKV_ERR_IO,
                 &err, "/nonexistent-qkv-dir/x.png");
    qkv_canvas empty = {0};
    expect_error(qkv_canvas_write_png(&empty, path, &err), QKV_ERR_ARG, &err, "empty");
    qkv_canvas_free(&c);
}

static void test_font_errors(void **state)
{
    fixture *f = *state;
    qkv_error err = {0};
    qkv_viz *v = (qkv_viz *)&err; /* must be reset to NULL on failure */
    expect_error(qkv_viz_open(&v, "/nonexistent/NoSuchFont.ttf", &err), QKV_ERR_IO, &err,
                 "/nonexistent/NoSuchFont.ttf");
    assert_null(v);

    char path[128];
    path_in(f, "notafont.ttf", path, sizeof path);
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs("this is not a font\n", fp);
    fclose(fp);
    v = (qkv_viz *)&err;
    expect_error(qkv_viz_open(&v, path, &err), QKV_ERR_FORMAT, &err, "not a scalable font");
    assert_null(v);
    unlink(path);
}

static void test_text_measure_and_draw(void **state)
{
    fixture *f = *state;
    qkv_error err = {0};
    int w1, h1, w2, h2;
    assert_int_equal(qkv_text_size(&w1, &h1, f->v, "Keys", 12.0f, &err), QKV_OK);
    assert_int_equal(qkv_text_size(&w2, &h2, f->v, "KeysKeys", 12.0f, &err), QKV_OK);
    assert_true(w1 > 15 && w1 < 40);
    assert_true(h1 >= 12 && h1 <= 18); /* DejaVu's line is ~1.17 em */
    assert_int_equal(h1, h2);
    assert_true(abs(w2 - 2 * w1) <= 2);
    expect_error(qkv_text_size(&w1, &h1, f->v, "Keys", 0.0f, &err), QKV_ERR_ARG, &err, "size");

    /* Upright: ink only inside the reported box, and "K" (heavy) left of "." (light). */
    qkv_canvas c;
    assert_int_equal(qkv_canvas_init(&c, 120, 120, qkv_rgb_hex(0xFFFFFF), &err), QKV_OK);
    int box[4];
    assert_int_equal(qkv_canvas_text(&c, f->v, "K.", 10, 10,
                                     &(qkv_text_style){24.0f, QKV_ALIGN_LEFT, QKV_VALIGN_TOP, 0,
                                                       qkv_rgb_hex(0)},
                                     box, &err),
                     QKV_OK);
    assert_int_equal(box[0], 10);
    assert_int_equal(box[1], 10);
    int all = canvas_ink(&c, 0, 0, 120, 120);
    int inside = canvas_ink(&c, box[0], box[1], box[0] + box[2], box[1] + box[3]);
    assert_true(all > 40);
    assert_int_equal(inside, all);
    int left = canvas_ink(&c, box[0], box[1], box[0] + box[2] / 2, box[1] + box[3]);
    assert_true(left > 2 * (all - left));
    qkv_canvas_free(&c);

    /* A quarter turn counter-clockwise: the box is transposed, and the text reads upwards,
     * so "K" is in the bottom half. Centred anchoring puts the box's middle at (60, 60). */
    assert_int_equal(qkv_canvas_init(&c, 120, 120, qkv_rgb_hex(0xFFFFFF), &err), QKV_OK);
    int rbox[4];
    assert_int_equal(qkv_canvas_text(&c, f->v, "K.", 60, 60,
                                     &(qkv_text_style){24.0f, QKV_ALIGN_CENTER, QKV_VALIGN_MIDDLE,
                                                       1, qkv_rgb_hex(0)},
                                     rbox, &err),
                     QKV_OK);
    assert_int_equal(rbox[2], box[3]);
    assert_int_equal(rbox[3], box[2]);
    assert_int_equal(rbox[0], 60 - rbox[2] / 2);
    assert_int_equal(rbox[1], 60 - rbox[3] / 2);
    all = canvas_ink(&c, 0, 0, 120, 120);
    assert_int_equal(canvas_ink(&c, rbox[0], rbox[1], rbox[0] + rbox[2], rbox[1] + rbox[3]), all);
    int bottom = canvas_ink(&c, rbox[0], rbox[1] + rbox[3] / 2, rbox[0] + rbox[2],
                            rbox[1] + rbox[3]);
    assert_true(bottom > 2 * (all - bottom));

    /* Nothing to draw, and malformed UTF-8 (drawn as U+FFFD, not a crash). */
    const qkv_text_style plain12 = {12.0f, 0, 0, 0, qkv_rgb_hex(0)};
    assert_int_equal(qkv_canvas_text(&c, f->v, "", 0, 0, &plain12, NULL, &err), QKV_OK);
    assert_int_equal(qkv_canvas_text(&c, f->v, NULL, 0, 0, &plain12, NULL, &err), QKV_OK);
    assert_int_equal(canvas_ink(&c, 0, 0, 120, 120), all);
    assert_int_equal(qkv_canvas_text(&c, f->v, "\xff\xc3", 2, 2,
                                     &(qkv_text_style){14.0f, 0, 0, 0, qkv_rgb_hex(0)}, box, &err),
                     QKV_OK);
    assert_true(canvas_ink(&c, box[0], box[1], box[0] + box[2], box[1] + box[3]) > 10);
    qkv_canvas_free(&c);
}

static void test_text_fit(void **state)
{
    fixture *f = *state;
    qkv_error err = {0};
    char out[64];
    int w, h, full;
    assert_int_equal(qkv_text_fit(out, sizeof out, &w, f->v, "short", 12.0f, 200, &err), QKV_OK);
    assert_string_equal(out, "short");
    assert_int_equal(qkv_text_size(&full, &h, f->v, "short", 12.0f, &err), QKV_OK);
    assert_int_equal(w, full);

    const char *longer = "internationalisation";
    assert_int_equal(qkv_text_fit(out, sizeof out, &w, f->v, longer, 12.0f, 50, &err), QKV_OK);
    assert_true(w <= 50 && w > 25);
    size_t len = strlen(out);
    assert_true(len > 3);
    assert_string_equal(out + len - 3, "\xE2\x80\xA6"); /* ends with an ellipsis */
    assert_memory_equal(out, longer, len - 3);
    assert_int_equal(qkv_text_size(&full, &h, f->v, out, 12.0f, &err), QKV_OK);
    assert_int_equal(w, full);
    /* Nothing fits in 2 px, not even the ellipsis: empty. */
    assert_int_equal(qkv_text_fit(out, sizeof out, &w, f->v, longer, 12.0f, 2, &err), QKV_OK);
    assert_string_equal(out, "");
    assert_int_equal(w, 0);
}

/* ---- lines and discs ------------------------------------------------------------------- */

static void test_lines_and_discs(void **state)
{
    (void)state;
    qkv_error err = {0};
    qkv_canvas c;
    const qkv_rgb black = qkv_rgb_hex(0);
    assert_int_equal(qkv_canvas_init(&c, 100, 100, qkv_rgb_hex(0xFFFFFF), &err), QKV_OK);
    assert_int_equal(qkv_canvas_line(&c, 10.5f, 10.5f, 89.5f, 89.5f, 2.0f, black, &err), QKV_OK);
    assert_true(qkv_canvas_get(&c, 50, 50).r == 0); /* on the line */
    assert_true(is_white(qkv_canvas_get(&c, 50, 55)));
    assert_true(is_white(qkv_canvas_get(&c, 5, 5))); /* before its start */
    int partial = 0; /* antialiased: edge pixels are part-covered */
    for (int x = 0; x < 100; x++) {
        uint8_t r = qkv_canvas_get(&c, x, 50).r;
        partial += r > 0 && r < 255;
    }
    assert_true(partial >= 2);
    qkv_canvas_free(&c);

    /* Dashed: a horizontal run alternates ink and gaps several times. */
    assert_int_equal(qkv_canvas_init(&c, 200, 20, qkv_rgb_hex(0xFFFFFF), &err), QKV_OK);
    float xs[2] = {10, 190}, ys[2] = {10.5f, 10.5f};
    assert_int_equal(qkv_canvas_polyline(&c, xs, ys, 2, 2.0f, QKV_LINE_DASHED, black, &err),
                     QKV_OK);
    int runs = 0, prev = 0;
    for (int x = 0; x < 200; x++) {
        int on = qkv_canvas_get(&c, x, 10).r < 128;
        runs += on && !prev;
        prev = on;
    }
    assert_true(runs >= 10 && runs <= 20); /* period 6 widths = 12 px over 180 px */
    qkv_canvas_free(&c);

    /* A NaN point breaks the line. */
    assert_int_equal(qkv_canvas_init(&c, 100, 20, qkv_rgb_hex(0xFFFFFF), &err), QKV_OK);
    float bx[5] = {10, 30, NAN, 70, 90}, by[5] = {10.5f, 10.5f, 10.5f, 10.5f, 10.5f};
    assert_int_equal(qkv_canvas_polyline(&c, bx, by, 5, 2.0f, QKV_LINE_SOLID, black, &err), QKV_OK);
    assert_true(qkv_canvas_get(&c, 20, 10).r == 0);
    assert_true(qkv_canvas_get(&c, 80, 10).r == 0);
    assert_true(is_white(qkv_canvas_get(&c, 50, 10)));
    qkv_canvas_free(&c);

    /* Discs: opaque centre, nothing beyond the radius, half opacity halfway to the colour. */
    assert_int_equal(qkv_canvas_init(&c, 40, 40, qkv_rgb_hex(0xFFFFFF), &err), QKV_OK);
    qkv_canvas_disc(&c, 10.5f, 10.5f, 5.0f, black, 1.0f);
    qkv_canvas_disc(&c, 30.5f, 30.5f, 5.0f, black, 0.5f);
    assert_true(same(qkv_canvas_get(&c, 10, 10), black));
    assert_true(same(qkv_canvas_get(&c, 13, 13), black));
    assert_true(is_white(qkv_canvas_get(&c, 10, 17)));
    assert_true(is_white(qkv_canvas_get(&c, 15, 15)));
    assert_int_equal(qkv_canvas_get(&c, 30, 30).r, 128);
    qkv_canvas_free(&c);
}

/* ---- colours and ticks ------------------------------------------------------------------ */

static void test_colormap_is_ordered(void **state)
{
    (void)state;
    double prev = -1.0;
    const qkv_rgb grey = qkv_rgb_hex(QKV_COLOR_NONFINITE);
    for (int i = 0; i <= 64; i++) {
        qkv_rgb c = qkv_colormap(i / 64.0f);
        double y = luminance(c);
        if (!(y > prev)) {
            print_error("luminance not increasing at t = %d/64: %g after %g\n", i, y, prev);
            fail();
        }
        prev = y;
        /* The non-finite grey is far from every ramp colour. */
        int d = abs(c.r - grey.r) + abs(c.g - grey.g) + abs(c.b - grey.b);
        assert_true(d > 60);
    }
    assert_true(luminance(qkv_colormap(0.0f)) < 0.03);
    assert_true(luminance(qkv_colormap(1.0f)) > 0.7);
    assert_true(same(qkv_colormap(-3.0f), qkv_colormap(0.0f)));
    assert_true(same(qkv_colormap(7.0f), qkv_colormap(1.0f)));
    assert_true(same(qkv_palette(0), qkv_palette(7)));
    assert_false(same(qkv_palette(0), qkv_palette(1)));
}

static void test_nice_ticks(void **state)
{
    (void)state;
    double t[32], step;
    int n = qkv_nice_ticks(t, 32, &step, 0.0, 1.0, 6);
    assert_int_equal(n, 6);
    assert_true(fabs(step - 0.2) < 1e-12);
    for (int i = 0; i < n; i++)
        assert_true(fabs(t[i] - 0.2 * i) < 1e-12);
    n = qkv_nice_ticks(t, 32, &step, 0.0, 1.0, 5); /* five ticks fit exactly at 0.25 */
    assert_int_equal(n, 5);
    assert_true(fabs(step - 0.25) < 1e-12 && t[4] == 1.0);

    n = qkv_nice_ticks(t, 32, &step, 0.013, 0.087, 5);
    assert_true(n >= 3 && n <= 8);
    for (int i = 0; i < n; i++) {
        assert_true(t[i] >= 0.013 && t[i] <= 0.087);
        assert_true(fabs(t[i] / step - round(t[i] / step)) < 1e-9);
    }

    n = qkv_nice_ticks(t, 32, &step, -2.4, 5.7, 6);
    assert_true(fabs(step - 2.0) < 1e-12 || fabs(step - 1.0) < 1e-12);
    assert_true(t[0] >= -2.4 && t[n - 1] <= 5.7);

    assert_int_equal(qkv_nice_ticks(t, 32, NULL, 3.0, 3.0, 5), 0);
    assert_int_equal(qkv_nice_ticks(t, 32, NULL, NAN, 3.0, 5), 0);
    assert_int_equal(qkv_nice_ticks(t, 32, NULL, 0.0, INFINITY, 5), 0);
    (void)qkv_nice_ticks(t, 32, NULL, 1e17, 1e17 + 64, 5); /* must return, whatever it finds */

    char s[32];
    qkv_tick_label(s, sizeof s, 0.5, 0.25);
    assert_string_equal(s, "0.50");
    qkv_tick_label(s, sizeof s, 1e-17, 0.2);
    assert_string_equal(s, "0.0");
    qkv_tick_label(s, sizeof s, -1e-12, 1.0);
    assert_string_equal(s, "0");
    qkv_tick_label(s, sizeof s, 2.5, 2.5);
    assert_string_equal(s, "2.5");
    qkv_tick_label(s, sizeof s, 100.0, 50.0);
    assert_string_equal(s, "100");
    qkv_tick_label(s, sizeof s, 1.5e7, 5e6);
    assert_string_equal(s, "1.5e+07");
}

/* ---- heatmaps ------------------------------------------------------------------------- */

/* Canvas position of the centre of cell (i, j) of panel (r, c). */
static void cell_centre(const qkv_heatmap_geometry *g, int r, int c, int i, int j, int *x, int *y)
{
    *x = g->grid_x + c * (g->panel_w + g->gap_x) + j * g->cell_px + g->cell_px / 2;
    *y = g->grid_y + r * (g->panel_h + g->gap_y) + i * g->cell_px + g->cell_px / 2;
}

static void test_heatmap_antidiagonal(void **state)
{
    fixture *f = *state;
    enum { N = 8 };
    float a[N * N];
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++)
            a[i * N + j] = i + j == N - 1 ? 1.0f : 0.05f * ((i * 3 + j) % 4); /* off: <= 0.15 */
    qkv_heatmap_spec s = {.data = a, .rows = 1, .cols = 1, .n = N, .m = N,
                          .title = "Anti-diagonal", .xlabel = "Keys", .ylabel = "Queries"};
    qkv_heatmap_geometry g;
    qkv_error err = {0};
    char path[128];
    path_in(f, "anti.png", path, sizeof path);
    assert_int_equal(qkv_heatmap_save(path, &g, f->v, &s, &err), QKV_OK);
    image im = read_png(path);
    assert_int_equal(im.w, g.width);
    assert_int_equal(im.h, g.height);
    assert_true(g.vmin == 0.0f && g.vmax == 1.0f);
    assert_true(g.cell_px >= 16); /* an 8 x 8 matrix gets cells big enough to see */

    double on_min = 1e9, off_max = -1e9;
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++) {
            int x, y;
            cell_centre(&g, 0, 0, i, j, &x, &y);
            double l = luminance(px(&im, x, y));
            if (i + j == N - 1)
                on_min = fmin(on_min, l);
            else
                off_max = fmax(off_max, l);
        }
    if (!(on_min > off_max + 0.3)) {
        print_error("anti-diagonal luminance %g not above the rest %g\n", on_min, off_max);
        fail();
    }
    int x, y;
    cell_centre(&g, 0, 0, 0, N - 1, &x, &y);
    assert_true(same(px(&im, x, y), qkv_colormap(1.0f)));
    cell_centre(&g, 0, 0, 0, 0, &x, &y);
    assert_true(same(px(&im, x, y), qkv_colormap(0.0f)));

    /* The title and the colour bar are drawn where the geometry says. */
    assert_true(g.title_box[2] > 50 && ink_in(&im, g.title_box) > 40);
    assert_true(g.colorbar_box[3] >= g.panel_h);
    int top[4] = {g.colorbar_box[0] + 8, g.colorbar_box[1] + 1, 1, 1};
    int bot[4] = {g.colorbar_box[0] + 8, g.colorbar_box[1] + g.colorbar_box[3] - 2, 1, 1};
    assert_true(luminance(px(&im, top[0], top[1])) > 0.7);  /* vmax at the top */
    assert_true(luminance(px(&im, bot[0], bot[1])) < 0.03); /* vmin at the bottom */
    free(im.rgb);

    /* A 3 x 5 matrix, a[i][j] = 5i + j over [0, 17]: every cell where (i, j) says, not
     * transposed; the panel is m cells wide and n tall. */
    float r[3 * 5];
    for (int k = 0; k < 15; k++)
        r[k] = (float)k;
    qkv_heatmap_spec rs = {.data = r, .rows = 1, .cols = 1, .n = 3, .m = 5, .vmin = 0,
                           .vmax = 17};
    qkv_canvas c;
    assert_int_equal(qkv_heatmap_draw(&c, &g, f->v, &rs, &err), QKV_OK);
    assert_int_equal(g.panel_w, 5 * g.cell_px);
    assert_int_equal(g.panel_h, 3 * g.cell_px);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 5; j++) {
            cell_centre(&g, 0, 0, i, j, &x, &y);
            qkv_rgb want = qkv_colormap(lroundf((5 * i + j) * 15.0f) / 255.0f); /* 255/17 = 15 */
            assert_true(same(qkv_canvas_get(&c, x, y), want));
        }
    qkv_canvas_free(&c);
}

static void test_heatmap_grid_panels(void **state)
{
    fixture *f = *state;
    enum { R = 2, C = 3, N = 4, M = 5 };
    float a[R * C * N * M];
    for (int p = 0; p < R * C; p++)
        for (int k = 0; k < N * M; k++)
            a[p * N * M + k] = (float)p; /* panel p is constant p */
    const char *titles[R * C] = {"h1", "h2", "h3", "h4", NULL, "h6"};
    const char *xt[M] = {"a", "b", "c", "d", "e"}, *yt[N] = {"w", "x", "y", "z"};
    qkv_heatmap_spec s = {.data = a, .rows = R, .cols = C, .n = N, .m = M,
                          .panel_titles = titles, .x_ticks = xt, .y_ticks = yt,
                          .vmin = 0.0f, .vmax = 5.0f};
    qkv_heatmap_geometry g;
    qkv_error err = {0};
    qkv_canvas c;
    assert_int_equal(qkv_heatmap_draw(&c, &g, f->v, &s, &err), QKV_OK);
    assert_int_equal(c.width, g.width);
    assert_int_equal(c.height, g.height);
    assert_int_equal(g.x_tick_stride, 1);
    assert_int_equal(g.y_tick_stride, 1);
    assert_int_equal(g.x_ticks_rotated, 0); /* one letter fits across a cell */
    for (int r = 0; r < R; r++)
        for (int col = 0; col < C; col++) {
            int x, y;
            cell_centre(&g, r, col, N / 2, M / 2, &x, &y);
            assert_true(same(qkv_canvas_get(&c, x, y), qkv_colormap((r * C + col) / 5.0f)));
        }
    /* Panel titles sit in the gap above each panel; the untitled panel's gap stays blank. */
    int x0 = g.grid_x + 1 * (g.panel_w + g.gap_x), y0 = g.grid_y + g.panel_h + 4;
    assert_true(canvas_ink(&c, x0, y0, x0 + g.panel_w, g.grid_y + g.panel_h + g.gap_y - 2) == 0);
    int x2 = g.grid_x + 2 * (g.panel_w + g.gap_x);
    assert_true(canvas_ink(&c, x2, y0, x2 + g.panel_w, g.grid_y + g.panel_h + g.gap_y - 2) > 10);
    /* x tick labels under the bottom row only, y tick labels left of the first column. */
    int below = g.grid_y + 2 * g.panel_h + g.gap_y + 2;
    assert_true(canvas_ink(&c, g.grid_x, below, g.grid_x + g.panel_w, below + 20) > 20);
    assert_true(canvas_ink(&c, 0, g.grid_y, g.grid_x - 2, g.grid_y + g.panel_h) > 20);
    int gx = g.grid_x + g.panel_w + 2; /* the gap between panel columns holds no labels */
    assert_int_equal(canvas_ink(&c, gx, g.grid_y, gx + g.gap_x - 4, g.grid_y + g.panel_h), 0);
    qkv_canvas_free(&c);
}

static void test_heatmap_nonfinite(void **state)
{
    fixture *f = *state;
    float a[3 * 3] = {0.2f, 0.4f, NAN, 0.6f, INFINITY, 0.8f, -INFINITY, 0.3f, 0.5f};
    qkv_heatmap_spec s = {.data = a, .rows = 1, .cols = 1, .n = 3, .m = 3};
    qkv_heatmap_geometry g;
    qkv_error err = {0};
    qkv_canvas c;
    assert_int_equal(qkv_heatmap_draw(&c, &g, f->v, &s, &err), QKV_OK);
    assert_true(fabsf(g.vmin - 0.2f) < 1e-7f && fabsf(g.vmax - 0.8f) < 1e-7f);
    const qkv_rgb grey = qkv_rgb_hex(QKV_COLOR_NONFINITE);
    int x, y;
    const int bad[3][2] = {{0, 2}, {1, 1}, {2, 0}};
    for (int k = 0; k < 3; k++) {
        cell_centre(&g, 0, 0, bad[k][0], bad[k][1], &x, &y);
        assert_true(same(qkv_canvas_get(&c, x, y), grey));
    }
    cell_centre(&g, 0, 0, 1, 2, &x, &y); /* 0.8, the top of the range */
    assert_true(same(qkv_canvas_get(&c, x, y), qkv_colormap(1.0f)));
    qkv_canvas_free(&c);

    /* A constant matrix gets a range around its value, drawn mid-ramp. */
    float k4[4] = {0.25f, 0.25f, 0.25f, 0.25f};
    qkv_heatmap_spec sk = {.data = k4, .rows = 1, .cols = 1, .n = 2, .m = 2};
    assert_int_equal(qkv_heatmap_draw(&c, &g, f->v, &sk, &err), QKV_OK);
    assert_true(g.vmin < 0.25f && g.vmax > 0.25f);
    cell_centre(&g, 0, 0, 1, 1, &x, &y);
    assert_true(same(qkv_canvas_get(&c, x, y), qkv_colormap(128 / 255.0f))); /* 8-bit steps */
    qkv_canvas_free(&c);
}

static void test_heatmap_label_density(void **state)
{
    fixture *f = *state;
    qkv_error err = {0};
    int tw, lh;
    assert_int_equal(qkv_text_size(&tw, &lh, f->v, "", 12.0f, &err), QKV_OK);
    enum { N = 60 };
    static float a[N * N];
    static char names[N][24];
    const char *tok[N];
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "token%02d", i);
        tok[i] = names[i];
        for (int j = 0; j < N; j++)
            a[i * N + j] = (float)(i == j);
    }
    qkv_heatmap_spec s = {.data = a, .rows = 1, .cols = 1, .n = N, .m = N, .x_ticks = tok,
                          .y_ticks = tok, .xlabel = "Keys", .ylabel = "Queries"};
    qkv_heatmap_geometry g;
    char path[128];
    path_in(f, "dense.png", path, sizeof path);
    assert_int_equal(qkv_heatmap_save(path, &g, f->v, &s, &err), QKV_OK);
    /* Cells smaller than a text line: labels thinned to at most one per line, x turned. */
    assert_true(g.x_ticks_rotated);
    assert_true(g.x_tick_stride > 1 && g.x_tick_stride * g.cell_px >= lh);
    assert_true(g.y_tick_stride > 1 && g.y_tick_stride * g.cell_px >= lh);
    assert_true(g.width <= 800 && g.height <= 800); /* not a poster either */
    image im = read_png(path);
    int x, y;
    cell_centre(&g, 0, 0, 30, 30, &x, &y);
    assert_true(same(px(&im, x, y), qkv_colormap(1.0f)));
    cell_centre(&g, 0, 0, 30, 31, &x, &y);
    assert_true(same(px(&im, x, y), qkv_colormap(0.0f)));
    free(im.rgb);

    /* Ten tokens: every label shown. */
    s.n = s.m = 10;
    qkv_canvas c;
    assert_int_equal(qkv_heatmap_draw(&c, &g, f->v, &s, &err), QKV_OK);
    assert_int_equal(g.x_tick_stride, 1);
    assert_int_equal(g.y_tick_stride, 1);
    assert_true(g.cell_px >= lh);
    qkv_canvas_free(&c);
}

static void test_heatmap_bad_args(void **state)
{
    fixture *f = *state;
    float a[4] = {0};
    qkv_error err = {0};
    qkv_canvas c;
    qkv_heatmap_spec ok = {.data = a, .rows = 1, .cols = 1, .n = 2, .m = 2};
    qkv_heatmap_spec s = ok;
    s.n = 0;
    expect_error(qkv_heatmap_draw(&c, NULL, f->v, &s, &err), QKV_ERR_ARG, &err, "n x m");
    assert_null(c.pixels);
    s = ok, s.rows = 0;
    expect_error(qkv_heatmap_draw(&c, NULL, f->v, &s, &err), QKV_ERR_ARG, &err, "grid");
    s = ok, s.data = NULL;
    expect_error(qkv_heatmap_draw(&c, NULL, f->v, &s, &err), QKV_ERR_ARG, &err, "data");
    s = ok, s.vmin = 1.0f, s.vmax = 0.0f;
    expect_error(qkv_heatmap_draw(&c, NULL, f->v, &s, &err), QKV_ERR_ARG, &err, "vmin");
    s = ok, s.vmin = NAN;
    expect_error(qkv_heatmap_draw(&c, NULL, f->v, &s, &err), QKV_ERR_ARG, &err, "vmin");
    s = ok, s.cell_px = -1;
    expect_error(qkv_heatmap_draw(&c, NULL, f->v, &s, &err), QKV_ERR_ARG, &err, "cell_px");
    expect_error(qkv_heatmap_draw(&c, NULL, f->v, NULL, &err), QKV_ERR_ARG, &err, "NULL");
    expect_error(qkv_heatmap_save("/nonexistent-qkv-dir/h.png", NULL, f->v, &ok, &err), QKV_ERR_IO,
                 &err, "/nonexistent-qkv-dir/h.png");
}

/* ---- line plots ----------------------------------------------------------------------- */

static void map_xy(const qkv_plot_geometry *g, double x, double y, double *cx, double *cy)
{
    if (g->log_y)
        y = log10(y);
    *cx = g->area_x + (x - g->xmin) / (g->xmax - g->xmin) * g->area_w;
    *cy = g->area_y + g->area_h - (y - g->ymin) / (g->ymax - g->ymin) * g->area_h;
}

static int is_red(qkv_rgb c) { return c.r > 150 && c.g < 110 && c.b < 110; }

/* Mean row of the red pixels in column x outside the legend, or -1 if none. */
static double red_row(const image *im, const qkv_plot_geometry *g, int x)
{
    double sum = 0;
    int n = 0;
    const int *b = g->legend_box;
    for (int y = 0; y < im->h; y++)
        if (is_red(px(im, x, y)) && !(x >= b[0] && x < b[0] + b[2] && y >= b[1] && y < b[1] + b[3]))
            sum += y, n++;
    return n ? sum / n : -1.0;
}

static void test_plot_rising_line(void **state)
{
    fixture *f = *state;
    float x[11], y[11];
    for (int i = 0; i < 11; i++)
        x[i] = (float)i, y[i] = 0.5f * i - 1.0f;
    qkv_series s = {.x = x, .y = y, .n = 11, .label = "rising", .color = 0xD00000,
                    .style = QKV_LINE_SOLID};
    qkv_plot_spec p = {.series = &s, .nseries = 1, .title = "A rising line", .xlabel = "x",
                       .ylabel = "y", .width = 400, .height = 300};
    qkv_plot_geometry g;
    qkv_error err = {0};
    char path[128];
    path_in(f, "rising.png", path, sizeof path);
    assert_int_equal(qkv_plot_save(path, &g, f->v, &p, &err), QKV_OK);
    image im = read_png(path);
    assert_int_equal(im.w, 400);
    assert_int_equal(im.h, 300);
    assert_true(g.xmin < 0.0 && g.xmax > 10.0 && g.ymin < -1.0 && g.ymax > 4.0); /* margins */

    double prev = 1e9;
    for (int i = 1; i < 10; i++) {
        double cx, cy;
        map_xy(&g, x[i] + 0.3, y[i] + 0.15, &cx, &cy);
        double row = red_row(&im, &g, (int)cx);
        if (row < 0 || fabs(row + 0.5 - cy) > 1.5 || !(row < prev)) {
            print_error("column %d: line at row %g, want %g (previous %g)\n", (int)cx, row, cy,
                        prev);
            fail();
        }
        prev = row;
    }
    /* Nothing red outside the plot area, and text in the title's box. */
    for (int yy = 0; yy < im.h; yy++)
        for (int xx = 0; xx < im.w; xx++)
            if (xx < g.area_x - 1 || xx > g.area_x + g.area_w + 1 || yy < g.area_y - 1 ||
                yy > g.area_y + g.area_h + 1)
                assert_false(is_red(px(&im, xx, yy)));
    assert_true(g.title_box[2] > 60 && ink_in(&im, g.title_box) > 40);
    /* The legend avoids the rising line: upper left or lower right of the area. */
    assert_true(g.legend_box[2] > 0);
    int lx = g.legend_box[0] + g.legend_box[2] / 2 - g.area_x,
        ly = g.legend_box[1] + g.legend_box[3] / 2 - g.area_y;
    int upper = ly < g.area_h / 2, leftside = lx < g.area_w / 2;
    assert_true(upper == leftside);
    free(im.rgb);
}

static void test_plot_log_y(void **state)
{
    fixture *f = *state;
    float x[6] = {0, 1, 2, 3, 4, 5}, y[6] = {1, 10, 100, 1000, 10000, 0}; /* y = 0: skipped */
    qkv_series s = {.x = x, .y = y, .n = 6, .color = 0xD00000, .style = QKV_LINE_SOLID};
    qkv_plot_spec p = {.series = &s, .nseries = 1, .log_y = 1};
    qkv_plot_geometry g;
    qkv_error err = {0};
    qkv_canvas c;
    assert_int_equal(qkv_plot_draw(&c, &g, f->v, &p, &err), QKV_OK);
    assert_int_equal(c.width, 720);
    assert_int_equal(c.height, 480);
    assert_true(g.log_y && g.ymin < 0.0 && g.ymax > 4.0 && g.ymax < 4.5);
    assert_true(g.xmax < 4.5); /* the skipped point does not widen the x range */
    assert_int_equal(g.legend_box[2], 0); /* no labels: no legend */
    /* A straight line in log space: 10^1.5 sits halfway between 10 and 100. */
    double cx, cy, cx1, cy1, cx2, cy2;
    map_xy(&g, 1.5, pow(10.0, 1.5), &cx, &cy);
    map_xy(&g, 1.0, 10.0, &cx1, &cy1);
    map_xy(&g, 2.0, 100.0, &cx2, &cy2);
    assert_true(fabs(cy - (cy1 + cy2) / 2) < 1e-9);
    assert_true(is_red(qkv_canvas_get(&c, (int)cx, (int)cy)));
    qkv_canvas_free(&c);
}

static void test_plot_scatter_and_lines(void **state)
{
    fixture *f = *state;
    float xm[3] = {0.37f, 2.61f, 4.43f}, ym[3] = {1.13f, 3.71f, 0.53f};
    float xl[2] = {0.0f, 5.0f}, yl[2] = {4.6f, 4.6f};
    qkv_series s[2] = {
        {.x = xm, .y = ym, .n = 3, .label = "points", .color = 0xD00000,
         .style = QKV_LINE_NONE, .marker = QKV_MARKER_CIRCLE, .marker_radius = 5.0f},
        {.x = xl, .y = yl, .n = 2, .label = "level", .color = 0x0000D0, .style = QKV_LINE_SOLID},
    };
    qkv_plot_spec p = {.series = s, .nseries = 2, .xlim = {0, 5}, .ylim = {0, 5}, .no_legend = 1};
    qkv_plot_geometry g;
    qkv_error err = {0};
    qkv_canvas c;
    assert_int_equal(qkv_plot_draw(&c, &g, f->v, &p, &err), QKV_OK);
    assert_true(g.xmin == 0.0 && g.xmax == 5.0 && g.ymin == 0.0 && g.ymax == 5.0);
    assert_int_equal(g.legend_box[2], 0);
    for (int i = 0; i < 3; i++) {
        double cx, cy;
        map_xy(&g, xm[i], ym[i], &cx, &cy);
        assert_true(same(qkv_canvas_get(&c, (int)cx, (int)cy), qkv_rgb_hex(0xD00000)));
    }
    double cx, cy; /* markers only: nothing between two points */
    map_xy(&g, (xm[0] + xm[1]) / 2, (ym[0] + ym[1]) / 2, &cx, &cy);
    assert_false(is_red(qkv_canvas_get(&c, (int)cx, (int)cy)));
    map_xy(&g, 1.7, 4.6, &cx, &cy); /* the second series is a line */
    assert_true(same(qkv_canvas_get(&c, (int)cx, (int)cy), qkv_rgb_hex(0x0000D0)));
    qkv_canvas_free(&c);

    /* Half-opaque markers blend with the white below. */
    s[0].marker_alpha = 0.5f;
    assert_int_equal(qkv_plot_draw(&c, &g, f->v, &p, &err), QKV_OK);
    map_xy(&g, xm[0], ym[0], &cx, &cy);
    qkv_rgb m = qkv_canvas_get(&c, (int)cx, (int)cy);
    assert_true(abs(m.r - (255 + 0xD0 + 1) / 2) <= 2 && abs(m.g - 128) <= 2);
    qkv_canvas_free(&c);
}

static void test_plot_bad_args(void **state)
{
    fixture *f = *state;
    float y[3] = {1, 2, 3}, bad[3] = {NAN, INFINITY, NAN}, neg[3] = {-1, 0, -2};
    qkv_series s = {.y = y, .n = 3, .label = "loss"};
    qkv_plot_spec ok = {.series = &s, .nseries = 1};
    qkv_plot_spec p = ok;
    qkv_error err = {0};
    qkv_canvas c;
    p.nseries = 0;
    expect_error(qkv_plot_draw(&c, NULL, f->v, &p, &err), QKV_ERR_ARG, &err, "0 series");
    assert_null(c.pixels);
    s.n = 0;
    expect_error(qkv_plot_draw(&c, NULL, f->v, &ok, &err), QKV_ERR_ARG, &err,
                 "series 0 'loss' has n = 0");
    s.n = 3, s.y = NULL;
    expect_error(qkv_plot_draw(&c, NULL, f->v, &ok, &err), QKV_ERR_ARG, &err, "no y values");
    s.y = bad;
    expect_error(qkv_plot_draw(&c, NULL, f->v, &ok, &err), QKV_ERR_NUMERIC, &err, "NaN");
    s.y = neg;
    p = ok, p.log_y = 1;
    expect_error(qkv_plot_draw(&c, NULL, f->v, &p, &err), QKV_ERR_NUMERIC, &err, "log");
    s.y = y;
    p = ok, p.xlim[0] = 2, p.xlim[1] = 1;
    expect_error(qkv_plot_draw(&c, NULL, f->v, &p, &err), QKV_ERR_ARG, &err, "xlim");
    p = ok, p.log_y = 1, p.ylim[0] = -1, p.ylim[1] = 10;
    expect_error(qkv_plot_draw(&c, NULL, f->v, &p, &err), QKV_ERR_ARG, &err, "positive");
    p = ok, p.width = 50, p.height = 40;
    expect_error(qkv_plot_draw(&c, NULL, f->v, &p, &err), QKV_ERR_ARG, &err, "size");
    s.style = (qkv_line_style)99;
    expect_error(qkv_plot_draw(&c, NULL, f->v, &ok, &err), QKV_ERR_ARG, &err, "line style");
    s.style = QKV_LINE_AUTO;
    expect_error(qkv_plot_save("/nonexistent-qkv-dir/p.png", NULL, f->v, &ok, &err), QKV_ERR_IO,
                 &err, "/nonexistent-qkv-dir/p.png");
    /* A single point is drawable: a dot in a range padded around it. */
    s.n = 1;
    assert_int_equal(qkv_plot_draw(&c, NULL, f->v, &ok, &err), QKV_OK);
    qkv_canvas_free(&c);
}

/* ---- sample figures ------------------------------------------------------------------ */

/* The figures of the issue, kept in $QKV_VIZ_SAMPLES for a person to look at (else in
 * the test's temporary directory); each must read back as a PNG of the reported size. */
static void test_sample_figures(void **state)
{
    fixture *f = *state;
    const char *dir = getenv("QKV_VIZ_SAMPLES");
    if (!dir || !*dir)
        dir = f->dir;
    qkv_error err = {0};
    char path[512];
    int w[4], h[4];

    /* 1. Encoder-decoder attention, 2 layers x 4 heads, 6 target x 7 source tokens. */
    enum { NQ = 6, NK = 7 };
    const char *src[NK] = {"i", "'m", "home", ".", "<eos>", "<pad>", "<pad>"};
    const char *tgt[NQ] = {"je", "suis", "chez", "moi", ".", "<eos>"};
    float att[2 * 4 * NQ * NK];
    char names[8][32];
    const char *titles[8];
    for (int p = 0; p < 8; p++) {
        snprintf(names[p], sizeof names[p], "Layer %d, head %d", p / 4 + 1, p % 4 + 1);
        titles[p] = names[p];
        for (int i = 0; i < NQ; i++) { /* softmax over the 5 valid keys: sharper in layer 2 */
            float z[NK], sum = 0.0f;
            for (int j = 0; j < NK; j++) {
                float centre = i * 4.0f / 5.0f + (p % 4) * 0.3f;
                z[j] = j < 5 ? expf(-0.6f * (1 + p) * fabsf(j - centre)) : 0.0f;
                sum += z[j];
            }
            for (int j = 0; j < NK; j++)
                att[(p * NQ + i) * NK + j] = z[j] / sum;
        }
    }
    qkv_heatmap_spec hs = {.data = att, .rows = 2, .cols = 4, .n = NQ, .m = NK,
                           .panel_titles = titles, .x_ticks = src, .y_ticks = tgt,
                           .xlabel = "Keys", .ylabel = "Queries",
                           .title = "Encoder-decoder attention weights"};
    qkv_heatmap_geometry hg;
    snprintf(path, sizeof path, "%s/heatmap_grid.png", dir);
    assert_int_equal(qkv_heatmap_save(path, &hg, f->v, &hs, &err), QKV_OK);
    w[0] = hg.width, h[0] = hg.height;

    /* 2. Training curves: loss, validation loss, BLEU over 30 epochs. */
    enum { E = 30 };
    float ep[E], tl[E], vl[E], bleu[E];
    for (int i = 0; i < E; i++) {
        ep[i] = i + 1.0f;
        tl[i] = 0.3f + 4.5f * expf(-i / 5.0f) + 0.05f * sinf(i * 1.7f);
        vl[i] = 0.55f + 4.2f * expf(-i / 6.0f) + (i > 15 ? 0.01f * (i - 15) : 0.0f);
        bleu[i] = 0.6f * (1.0f - expf(-i / 7.0f));
    }
    qkv_series ts[3] = {{.x = ep, .y = tl, .n = E, .label = "train loss"},
                        {.x = ep, .y = vl, .n = E, .label = "val loss"},
                        {.x = ep, .y = bleu, .n = E, .label = "BLEU"}};
    qkv_plot_spec tp = {.series = ts, .nseries = 3, .title = "Transformer, English-French",
                        .xlabel = "epoch", .ylabel = "loss / BLEU"};
    qkv_plot_geometry pg;
    snprintf(path, sizeof path, "%s/training_curves.png", dir);
    assert_int_equal(qkv_plot_save(path, &pg, f->v, &tp, &err), QKV_OK);
    w[1] = pg.width, h[1] = pg.height;

    /* 3. Nadaraya-Watson: truth, prediction (Gaussian kernel) and the noisy samples. */
    enum { NT = 50, NX = 51 };
    float xtr[NT], ytr[NT], xq[NX], truth[NX], pred[NX];
    for (int i = 0; i < NT; i++) {
        xtr[i] = 5.0f * qkv_random_uniform(7, (uint64_t)i);
        ytr[i] =
            2.0f * sinf(xtr[i]) + powf(xtr[i], 0.8f) + 0.5f * qkv_random_normal(8, (uint64_t)i);
    }
    for (int i = 0; i < NX; i++) {
        xq[i] = 0.1f * i;
        truth[i] = 2.0f * sinf(xq[i]) + powf(xq[i], 0.8f);
        float num = 0.0f, den = 0.0f;
        for (int j = 0; j < NT; j++) {
            float k = expf(-0.5f * (xq[i] - xtr[j]) * (xq[i] - xtr[j]) / 0.25f);
            num += k * ytr[j], den += k;
        }
        pred[i] = num / den;
    }
    qkv_series ns[3] = {{.x = xq, .y = truth, .n = NX, .label = "Truth"},
                        {.x = xq, .y = pred, .n = NX, .label = "Pred"},
                        {.x = xtr, .y = ytr, .n = NT, .label = "Samples",
                         .style = QKV_LINE_NONE, .marker = QKV_MARKER_CIRCLE,
                         .marker_alpha = 0.5f}};
    qkv_plot_spec np = {.series = ns, .nseries = 3, .title = "Nadaraya-Watson kernel regression",
                        .xlabel = "x", .ylabel = "y", .xlim = {0, 5}, .ylim = {-1, 5}};
    snprintf(path, sizeof path, "%s/nadaraya_watson.png", dir);
    assert_int_equal(qkv_plot_save(path, &pg, f->v, &np, &err), QKV_OK);
    w[2] = pg.width, h[2] = pg.height;

    /* 4. Positional encoding columns 6-9 over 60 positions (d = 32), as d2l shows them:
     * P[t, 2i] = sin(t / 10000^(2i/d)), P[t, 2i+1] = cos(...). */
    enum { T = 60, D = 32 };
    float pos[T], pcol[4][T];
    qkv_series pe[4];
    char pnames[4][16];
    for (int c = 0; c < 4; c++) {
        int j = 6 + c;
        for (int t = 0; t < T; t++) {
            float w = powf(10000.0f, -(float)(j & ~1) / D);
            pos[t] = (float)t;
            pcol[c][t] = j & 1 ? cosf(t * w) : sinf(t * w);
        }
        snprintf(pnames[c], sizeof pnames[c], "Col %d", j);
        pe[c] = (qkv_series){.x = pos, .y = pcol[c], .n = T, .label = pnames[c]};
    }
    qkv_plot_spec pp = {.series = pe, .nseries = 4, .title = "Positional encoding, columns 6-9",
                        .xlabel = "Row (position)", .width = 640, .height = 320};
    snprintf(path, sizeof path, "%s/positional_encoding.png", dir);
    assert_int_equal(qkv_plot_save(path, &pg, f->v, &pp, &err), QKV_OK);
    w[3] = pg.width, h[3] = pg.height;

    const char *files[4] = {"heatmap_grid.png", "training_curves.png", "nadaraya_watson.png",
                            "positional_encoding.png"};
    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        image im = read_png(path);
        assert_int_equal(im.w, w[i]);
        assert_int_equal(im.h, h[i]);
        free(im.rgb);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_canvas_rect_and_clip),
        cmocka_unit_test(test_png_roundtrip_atomic),
        cmocka_unit_test(test_font_errors),
        cmocka_unit_test(test_text_measure_and_draw),
        cmocka_unit_test(test_text_fit),
        cmocka_unit_test(test_lines_and_discs),
        cmocka_unit_test(test_colormap_is_ordered),
        cmocka_unit_test(test_nice_ticks),
        cmocka_unit_test(test_heatmap_antidiagonal),
        cmocka_unit_test(test_heatmap_grid_panels),
        cmocka_unit_test(test_heatmap_nonfinite),
        cmocka_unit_test(test_heatmap_label_density),
        cmocka_unit_test(test_heatmap_bad_args),
        cmocka_unit_test(test_plot_rising_line),
        cmocka_unit_test(test_plot_log_y),
        cmocka_unit_test(test_plot_scatter_and_lines),
        cmocka_unit_test(test_plot_bad_args),
        cmocka_unit_test(test_sample_figures),
    };
    return cmocka_run_group_tests_name("viz", tests, setup, teardown);
}
