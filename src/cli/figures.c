/* SPDX-License-Identifier: MIT */
/* Figures of the qkv tool, drawn with the library's heatmaps and line plots:
 *   training curves from a model directory's metrics.jsonl (qkv plot, and after qkv train and
 *   qkv demo); the sinusoidal positional encoding as d2l 11.6 shows it (qkv plot
 *   --positional); and, for each translated sentence, the encoder self-attention, decoder
 *   self-attention and encoder-decoder attention of every layer and head (qkv translate
 *   --attention), as d2l 11.7.7 shows them. */
#include "cli/figures.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cJSON.h>

static const qkv_rgb WHITE = {255, 255, 255};

int fig_mkdirs(const char *path)
{
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) {
        fprintf(stderr, "qkv: %s: path too long\n", path);
        return -1;
    }
    for (char *p = buf + 1;; p++) {
        char c = *p;
        if (c != '/' && c != '\0') continue;
        *p = '\0';
        if (mkdir(buf, 0777) && errno != EEXIST) {
            fprintf(stderr, "qkv: cannot create %s: %s\n", buf, strerror(errno));
            return -1;
        }
        if (c == '\0') return 0;
        *p = '/';
    }
}

static int viz_open(qkv_viz **v)
{
    qkv_error err = {0};
    if (!qkv_viz_open(v, NULL, &err)) return 0;
    fprintf(stderr, "qkv: %s\n", err.msg);
    return -1;
}

/* ---- training curves --------------------------------------------------------------------- */

typedef struct {
    int n, cap;
    float *epoch, *loss, *val_loss, *bleu; /* NaN where a line lacks the key */
} metrics;

static void metrics_free(metrics *m)
{
    free(m->epoch), free(m->loss), free(m->val_loss), free(m->bleu);
    memset(m, 0, sizeof *m);
}

static float number_or_nan(const cJSON *o, const char *key)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(x) ? (float)x->valuedouble : NAN;
}

/* One line per epoch end. A line whose epoch is not past the last one kept starts a new run
 * (training restarted, or resumed from an earlier checkpoint): the lines it replaces go. */
static int metrics_read(metrics *m, const char *path)
{
    memset(m, 0, sizeof *m);
    size_t len;
    char *text = cli_read_regular(path, QKV_MAX_TEXT_BYTES, &len);
    if (!text) return -1;
    int line = 0, rc = 0;
    if (strlen(text) != len) {
        fprintf(stderr, "qkv: %s: contains a NUL byte (at byte %zu)\n", path, strlen(text));
        rc = -1;
    }
    for (char *s = text, *next; *s && !rc; s = next) {
        char *nl = strchr(s, '\n');
        next = nl ? nl + 1 : s + strlen(s);
        if (nl) *nl = '\0';
        line++;
        if (strspn(s, " \t\r") == strlen(s)) continue;
        char name[4200];
        snprintf(name, sizeof name, "%s:%d", path, line);
        cJSON *o = NULL;
        qkv_error err = {0};
        const int parsed = !qkv_json_parse(&o, s, strlen(s), name, &err);
        float epoch = number_or_nan(o, "epoch"), loss = number_or_nan(o, "loss");
        if (!parsed) {
            fprintf(stderr, "qkv: %s\n", err.msg);
            rc = -1;
        } else if (!cJSON_IsObject(o) || !isfinite(epoch)) {
            fprintf(stderr, "qkv: %s:%d: expected a JSON object with a number \"epoch\"\n", path,
                    line);
            rc = -1;
        } else {
            while (m->n > 0 && m->epoch[m->n - 1] >= epoch) m->n--;
            if (m->n == m->cap) {
                int cap = m->cap ? 2 * m->cap : 64;
                float **arrays[4] = {&m->epoch, &m->loss, &m->val_loss, &m->bleu};
                for (int a = 0; a < 4 && !rc; a++) {
                    float *p = realloc(*arrays[a], (size_t)cap * sizeof(float));
                    if (!p) rc = -1;
                    else *arrays[a] = p;
                }
                if (rc) fprintf(stderr, "qkv: out of memory reading %s\n", path);
                m->cap = cap;
            }
            if (!rc) {
                m->epoch[m->n] = epoch, m->loss[m->n] = loss;
                m->val_loss[m->n] = number_or_nan(o, "val_loss");
                m->bleu[m->n] = number_or_nan(o, "bleu");
                m->n++;
            }
        }
        cJSON_Delete(o);
    }
    free(text);
    if (!rc && m->n == 0) {
        fprintf(stderr, "qkv: %s has no epochs yet\n", path);
        rc = -1;
    }
    if (rc) metrics_free(m);
    return rc;
}

/* Place b to the right of a on one white canvas (a is replaced). */
static qkv_status side_by_side(qkv_canvas *a, const qkv_canvas *b, qkv_error *err)
{
    qkv_canvas c;
    int H = a->height > b->height ? a->height : b->height;
    qkv_status st = qkv_canvas_init(&c, a->width + b->width, H, WHITE, err);
    if (st) return st;
    for (int y = 0; y < a->height; y++)
        memcpy(c.pixels + (size_t)y * c.width * 3, a->pixels + (size_t)y * a->width * 3,
               (size_t)a->width * 3);
    for (int y = 0; y < b->height; y++)
        memcpy(c.pixels + ((size_t)y * c.width + a->width) * 3,
               b->pixels + (size_t)y * b->width * 3, (size_t)b->width * 3);
    qkv_canvas_free(a);
    *a = c;
    return QKV_OK;
}

int fig_training_after_run(const char *dir)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    if (access(path, F_OK) != 0) return 1;
    return fig_training(dir, NULL);
}

int fig_training(const char *dir, const char *out_png)
{
    char path[4096], png[4096];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    snprintf(png, sizeof png, "%s", out_png ? out_png : "");
    if (!out_png) snprintf(png, sizeof png, "%s/training.png", dir);
    metrics m;
    if (metrics_read(&m, path)) return -1;
    qkv_viz *v = NULL;
    if (viz_open(&v)) return metrics_free(&m), -1;

    /* Loss falls over orders of magnitude on an easy task: a log axis keeps the end visible. */
    float lo = INFINITY, hi = 0.0f;
    for (int i = 0; i < m.n; i++)
        for (int k = 0; k < 2; k++) {
            float x = k ? m.val_loss[i] : m.loss[i];
            if (isfinite(x)) lo = fminf(lo, x), hi = fmaxf(hi, x);
        }
    const int log_y = lo > 0.0f && hi / lo > 20.0f;
    /* Validation may run every few epochs: its points, joined, as a series of their own. */
    float *sparse = malloc((size_t)m.n * 4 * sizeof *sparse);
    if (!sparse) {
        fprintf(stderr, "qkv: out of memory\n");
        qkv_viz_close(v), metrics_free(&m);
        return -1;
    }
    float *vx = sparse, *vy = sparse + m.n, *bx = sparse + 2 * m.n, *by = sparse + 3 * m.n;
    int nv = 0, nb = 0;
    for (int i = 0; i < m.n; i++) {
        if (isfinite(m.val_loss[i])) vx[nv] = m.epoch[i], vy[nv++] = m.val_loss[i];
        if (isfinite(m.bleu[i])) bx[nb] = m.epoch[i], by[nb++] = m.bleu[i];
    }
    qkv_series loss[2] = {
        {.x = m.epoch, .y = m.loss, .n = m.n, .label = "training loss"},
        {.x = vx, .y = vy, .n = nv, .label = "validation loss"},
    };
    qkv_series bleu = {.x = bx, .y = by, .n = nb, .label = "BLEU",
                       .color = 0x009E73 /* Okabe-Ito green: not the loss's colour */};
    qkv_series *all[3] = {&loss[0], &loss[1], &bleu};
    for (int k = 0; k < 3; k++) /* a dot per epoch while they are few enough to tell apart */
        if (all[k]->n <= 25) all[k]->marker = QKV_MARKER_CIRCLE, all[k]->marker_radius = 3.5f;
    const char *name = strrchr(dir, '/');
    name = name && name[1] ? name + 1 : dir;
    char title[160];
    snprintf(title, sizeof title, "Training of %.100s: loss per target token", name);
    qkv_plot_spec ls = {.series = loss, .nseries = nv ? 2 : 1, .title = title,
                        .xlabel = "epoch", .ylabel = log_y ? "loss (log scale)" : "loss",
                        .log_y = log_y, .no_legend = !nv};
    qkv_plot_spec bs = {.series = &bleu, .nseries = 1, .title = "Validation BLEU",
                        .xlabel = "epoch", .ylabel = "BLEU", .no_legend = 1, .width = 560,
                        .height = 480};
    qkv_canvas c = {0}, b = {0};
    qkv_error err = {0};
    qkv_plot_geometry g;
    qkv_status st = qkv_plot_draw(&c, &g, v, &ls, &err);
    bs.xlim[0] = (float)g.xmin, bs.xlim[1] = (float)g.xmax; /* epochs line up across the two */
    if (!st && nb) st = qkv_plot_draw(&b, NULL, v, &bs, &err);
    if (!st && nb) st = side_by_side(&c, &b, &err);
    if (!st) st = qkv_canvas_write_png(&c, png, &err);
    if (st) fprintf(stderr, "qkv: training curves of %s: %s\n", path, err.msg);
    qkv_canvas_free(&c), qkv_canvas_free(&b);
    qkv_viz_close(v);
    metrics_free(&m);
    free(sparse);
    return st ? -1 : 0;
}

/* ---- positional encoding ----------------------------------------------------------------- */

int fig_positional(const char *out_dir, int positions, int d_model)
{
    if (positions < 2 || d_model < 10 || positions > 4096 || d_model > 4096) {
        fprintf(stderr, "qkv: the positional figures need 2..4096 positions and a d_model of "
                "10..4096 (they show columns 6-9)\n");
        return -1;
    }
    if (fig_mkdirs(out_dir)) return -1;
    qkv_viz *v = NULL;
    if (viz_open(&v)) return -1;
    const int T = positions, C = d_model;
    float *P = malloc((size_t)T * C * sizeof *P), *rows = malloc((size_t)T * 5 * sizeof *rows);
    char *labels = malloc((size_t)(T + C) * 12);
    const char **ticks = malloc((size_t)(T + C) * sizeof *ticks);
    qkv_error err = {0};
    qkv_status st = QKV_OK;
    if (!P || !rows || !labels || !ticks) {
        st = QKV_ERR_NOMEM;
        snprintf(err.msg, sizeof err.msg, "out of memory");
        goto done;
    }
    qkv_sinusoidal_table(P, T, C);

    /* d2l: plot(arange(num_steps), P[0, :, 6:10].T, xlabel='Row (position)') */
    float *pos = rows, *col[4];
    qkv_series s[4];
    char names[4][16], title[128], path[4096];
    for (int t = 0; t < T; t++) pos[t] = (float)t;
    for (int k = 0; k < 4; k++) {
        col[k] = rows + (size_t)(k + 1) * T;
        for (int t = 0; t < T; t++) col[k][t] = P[(size_t)t * C + 6 + k];
        snprintf(names[k], sizeof names[k], "Col %d", 6 + k);
        s[k] = (qkv_series){.x = pos, .y = col[k], .n = T, .label = names[k]};
    }
    snprintf(title, sizeof title, "Sinusoidal positional encoding: columns 6-9 (d_model %d)", C);
    qkv_plot_spec ps = {.series = s, .nseries = 4, .title = title, .xlabel = "Row (position)",
                        .ylim = {-1.1f, 1.1f}, .width = 760, .height = 360};
    snprintf(path, sizeof path, "%s/positional-encoding.png", out_dir);
    if ((st = qkv_plot_save(path, NULL, v, &ps, &err))) goto done;

    /* d2l: show_heatmaps(P, xlabel='Column (encoding dimension)', ylabel='Row (position)') */
    for (int i = 0; i < T + C; i++) {
        snprintf(labels + (size_t)i * 12, 12, "%d", i < C ? i : i - C);
        ticks[i] = labels + (size_t)i * 12;
    }
    snprintf(title, sizeof title, "Positional encoding P: %d positions, d_model %d", T, C);
    const int cell = T * 8 <= 480 ? 8 : 480 / T > 4 ? 480 / T : 4; /* about d2l's 3.5 x 4 in */
    qkv_heatmap_spec hs = {.data = P, .rows = 1, .cols = 1, .n = T, .m = C, .x_ticks = ticks,
                           .y_ticks = ticks + C, .xlabel = "Column (encoding dimension)",
                           .ylabel = "Row (position)", .title = title, .vmin = -1.0f,
                           .vmax = 1.0f, .cell_px = C * cell > 1200 ? 0 : cell};
    snprintf(path, sizeof path, "%s/positional-encoding-heatmap.png", out_dir);
    st = qkv_heatmap_save(path, NULL, v, &hs, &err);
done:
    if (st) fprintf(stderr, "qkv: positional encoding figures: %s\n", err.msg);
    free(P), free(rows), free(labels), free(ticks);
    qkv_viz_close(v);
    return st ? -1 : 0;
}

/* ---- attention maps ---------------------------------------------------------------------- */

/* Words joined by spaces, cut with "..." past max bytes. */
static void join_words(char *out, size_t cap, const char *const *w, int n, size_t max)
{
    size_t at = 0;
    out[0] = '\0';
    for (int i = 0; i < n && at < cap; i++) {
        int k = snprintf(out + at, cap - at, "%s%s", i ? " " : "", w[i]);
        if (k < 0) break;
        at += (size_t)k;
        if (at > max) {
            snprintf(out + (max < cap - 4 ? max : cap - 4), 4, "...");
            return;
        }
    }
}

static cJSON *json_floats(const float *x, size_t n)
{
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; a && i < n; i++) /* six decimals: the figure's 256 colour levels and more */
        cJSON_AddItemToArray(a, cJSON_CreateNumber(round((double)x[i] * 1e6) / 1e6));
    return a;
}

static cJSON *json_geometry(const qkv_heatmap_geometry *g)
{
    cJSON *o = cJSON_CreateObject();
    const struct { const char *k; double v; } f[] = {
        {"width", g->width}, {"height", g->height}, {"grid_x", g->grid_x},
        {"grid_y", g->grid_y}, {"panel_w", g->panel_w}, {"panel_h", g->panel_h},
        {"gap_x", g->gap_x}, {"gap_y", g->gap_y}, {"cell_px", g->cell_px},
        {"vmin", g->vmin}, {"vmax", g->vmax}};
    for (size_t i = 0; o && i < sizeof f / sizeof *f; i++) cJSON_AddNumberToObject(o, f[i].k, f[i].v);
    return o;
}

typedef struct {
    const char *suffix, *key, *title, *xlabel, *ylabel;
} map_kind;

static const map_kind KINDS[3] = {
    {"encoder", "encoder", "Encoder self-attention", "Keys (source)", "Queries (source)"},
    {"decoder-self", "decoder_self", "Decoder self-attention (causal)", "Keys (decoder input)",
     "Queries (decoder input)"},
    {"cross", "cross", "Encoder-decoder attention", "Keys (source)", "Queries (decoder input)"},
};

/* The heatmap's own cell size (about 340 px panels, at most 880 px of them across), made
 * larger when a panel would be too narrow for its title ("Layer 1, head 1"): a one-word
 * source still gets a readable figure. */
static int cell_size(int n, int m, int cols)
{
    const double target = fmin(fmax(880.0 / cols, 150.0), 340.0);
    int cell = (int)lround(target / (n > m ? n : m));
    cell = cell < 1 ? 1 : cell > 36 ? 36 : cell;
    if (m * cell >= 120) return 0; /* the library's choice */
    int want = (120 + m - 1) / m;
    if (want > 60) want = 60;
    if (n * want > 900) want = 900 / n > cell ? 900 / n : cell;
    return want;
}

/* What one sentence's three figures share: the maps, the tokens as the model saw them, and
 * where the figures go. */
typedef struct {
    qkv_viz *viz;
    const char *out_dir;
    int number, heads, Ts, Tt;
    const qkv_attention_maps *a;
    const char **src_lab, **tgt_lab;
    const char *src_text, *tgt_text;
    char (*titles)[40];       /* one per panel */
    const char **title_ptr;
    cJSON *maps;              /* the JSON's "maps" */
} sentence_figures;

/* Map kind k (encoder, decoder self-attention, cross) of one sentence: its figure, and its
 * weights and figure geometry under f->maps. 0, or -1 after printing why. */
static int draw_kind(const sentence_figures *f, int k)
{
    const map_kind *mk = &KINDS[k];
    const qkv_attention_maps *a = f->a;
    const int L = k == 0 ? a->enc_layers : a->dec_layers, H = f->heads;
    const int n = k == 0 ? f->Ts : f->Tt, m = k == 1 ? f->Tt : f->Ts;
    const float *data = k == 0 ? a->encoder : k == 1 ? a->decoder_self : a->cross;
    const size_t count = (size_t)L * H * n * m;
    float vmax = 0.0f;
    for (size_t i = 0; i < count; i++) vmax = data[i] > vmax ? data[i] : vmax;
    const int cell = cell_size(n, m, H), narrow = cell && m * cell < 110;
    for (int p = 0; p < L * H; p++) {
        snprintf(f->titles[p], sizeof f->titles[p], narrow ? "L%d H%d" : "Layer %d, head %d",
                 p / H + 1, p % H + 1);
        f->title_ptr[p] = f->titles[p];
    }
    char title[512];
    if (k == 0)
        snprintf(title, sizeof title, "%s: \"%s\"", mk->title, f->src_text);
    else if (k == 1)
        snprintf(title, sizeof title, "%s: \"%s\"", mk->title, f->tgt_text);
    else
        snprintf(title, sizeof title, "%s: \"%s\" -> \"%s\"", mk->title, f->src_text,
                 f->tgt_text);
    qkv_heatmap_spec hs = {.data = data, .rows = L, .cols = H, .n = n, .m = m,
                           .panel_titles = f->title_ptr,
                           .x_ticks = k == 1 ? f->tgt_lab : f->src_lab,
                           .y_ticks = k == 0 ? f->src_lab : f->tgt_lab,
                           .xlabel = narrow ? "Keys" : mk->xlabel,
                           .ylabel = mk->ylabel, .title = title, .vmin = 0.0f,
                           .vmax = vmax > 0.0f ? vmax : 1.0f, .cell_px = cell};
    qkv_heatmap_geometry g;
    qkv_error err = {0};
    char file[64], path[4096];
    snprintf(file, sizeof file, "sentence-%d-%s.png", f->number, mk->suffix);
    snprintf(path, sizeof path, "%s/%s", f->out_dir, file);
    if (qkv_heatmap_save(path, &g, f->viz, &hs, &err)) {
        fprintf(stderr, "qkv: %s\n", err.msg);
        return -1;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(f->maps, mk->key, o);
    cJSON_AddStringToObject(o, "file", file);
    cJSON *shape = cJSON_CreateArray();
    const int dims[4] = {L, H, n, m};
    for (int i = 0; i < 4; i++) cJSON_AddItemToArray(shape, cJSON_CreateNumber(dims[i]));
    cJSON_AddItemToObject(o, "shape", shape);
    cJSON_AddItemToObject(o, "weights", json_floats(data, count));
    cJSON_AddItemToObject(o, "figure", json_geometry(&g));
    return 0;
}

/* OUT_DIR/sentence-N.json: doc. 0, or -1 after printing why. */
static int write_sentence_json(const cJSON *doc, const char *out_dir, int number)
{
    char *text = cJSON_PrintUnformatted(doc), path[4096];
    snprintf(path, sizeof path, "%s/sentence-%d.json", out_dir, number);
    FILE *fp = text ? fopen(path, "w") : NULL;
    int bad = !fp || fputs(text, fp) == EOF || fputc('\n', fp) == EOF;
    if ((fp && fclose(fp)) || bad) {
        fprintf(stderr, "qkv: cannot write %s: %s\n", path, text ? strerror(errno) : "out of memory");
        bad = 1;
    }
    free(text);
    return bad ? -1 : 0;
}

int fig_attention(qkv_viz *viz, qkv_translator *tr, const char *out_dir, int number,
                  const char *const *src_tok, int n_src, const int *tgt, int n_tgt)
{
    qkv_transformer *model = qkv_translator_model(tr);
    const qkv_tokenizer *tok = qkv_translator_tokenizer(tr);
    const qkv_transformer_config *c = qkv_transformer_get_config(model);
    const int limit = c->max_len, H = c->heads;
    if (n_tgt > limit - 1) n_tgt = limit - 1; /* the decoder input adds <bos> */
    int T = n_src + 1 < limit ? n_src + 1 : limit;
    int *src = malloc((size_t)T * sizeof *src);
    const char **src_lab = malloc((size_t)T * sizeof *src_lab),
               **tgt_lab = malloc((size_t)(n_tgt + 1) * sizeof *tgt_lab);
    const size_t panels = (size_t)(c->enc_layers > c->dec_layers ? c->enc_layers : c->dec_layers) * H;
    char (*titles)[40] = malloc(panels * sizeof *titles);
    const char **title_ptr = malloc(panels * sizeof *title_ptr);
    qkv_attention_maps a = {0};
    qkv_error err = {0};
    cJSON *doc = NULL;
    int rc = -1;
    if (!src || !src_lab || !tgt_lab || !titles || !title_ptr) {
        fprintf(stderr, "qkv: out of memory\n");
        goto done;
    }
    const int Ts = qkv_vocab_encode(src, &tok->src, src_tok, n_src, T);
    if (qkv_attention_maps_compute(&a, model, src, Ts, tgt, n_tgt, &err)) {
        fprintf(stderr, "qkv: sentence %d: %s\n", number, err.msg);
        goto done;
    }
    /* the tokens as the model saw them: <unk> for unknown words, <eos>, <bos> */
    for (int j = 0; j < Ts; j++) src_lab[j] = qkv_vocab_token(&tok->src, src[j]);
    tgt_lab[0] = qkv_enum_name(QKV_ENUM_RESERVED, QKV_BOS);
    for (int t = 0; t < n_tgt; t++) {
        const char *w = qkv_vocab_token(&tok->tgt, tgt[t]);
        tgt_lab[t + 1] = w ? w : qkv_enum_name(QKV_ENUM_RESERVED, QKV_UNK);
    }
    char src_text[200], tgt_text[200];
    join_words(src_text, sizeof src_text, src_tok, n_src, 60);
    join_words(tgt_text, sizeof tgt_text, tgt_lab + 1, n_tgt, 60);
    doc = cJSON_CreateObject();
    cJSON *maps = cJSON_CreateObject();
    cJSON_AddNumberToObject(doc, "sentence", number);
    cJSON_AddItemToObject(doc, "source_tokens", cJSON_CreateStringArray(src_lab, Ts));
    cJSON_AddItemToObject(doc, "target_tokens", cJSON_CreateStringArray(tgt_lab, a.tgt_len));
    cJSON_AddNumberToObject(doc, "heads", H);
    cJSON_AddItemToObject(doc, "maps", maps);
    const sentence_figures f = {viz, out_dir, number, H, Ts, a.tgt_len, &a, src_lab, tgt_lab,
                                src_text, tgt_text, titles, title_ptr, maps};
    for (int k = 0; k < 3; k++)
        if (draw_kind(&f, k)) goto done;
    rc = write_sentence_json(doc, out_dir, number);
done:
    cJSON_Delete(doc);
    qkv_attention_maps_free(&a);
    free(src), free(src_lab), free(tgt_lab), free(titles), free(title_ptr);
    return rc;
}
