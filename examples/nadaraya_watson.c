/* SPDX-License-Identifier: MIT */
/* Nadaraya-Watson kernel regression, d2l 11.2 ("Attention Pooling by Similarity") on qkv.
 *
 *   nadaraya_watson OUTDIR [SEED]
 *
 * 50 noisy samples of f(x) = 2 sin(x) + x^0.8 are the keys (x_i) and values (y_i); a query x
 * is answered with the attention-weighted average of the values,
 *   f^(x) = sum_i softmax_i(-((x - x_i) w)^2 / 2) y_i.
 * First with w = 1 (non-parametric: nothing learned), then with w trained as d2l trains it:
 * each training input attends to the other 49, squared loss summed, 5 full-batch SGD steps
 * with learning rate 0.5. Writes four figures to OUTDIR:
 *   nw-nonparametric.png, nw-parametric.png                      truth, prediction, samples
 *   nw-nonparametric-attention.png, nw-parametric-attention.png  test x training weights */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "qkv.h"

enum { N_TRAIN = 50, N_TEST = 50, EPOCHS = 5 };
static const float LR = 0.5f;

static float f(float x) { return 2.0f * sinf(x) + powf(x, 0.8f); }

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Mean over queries of the largest attention weight: 1/m for uniform rows, 1 for one-hot. */
static double mean_row_max(const float *P, int n, int m)
{
    double s = 0.0;
    for (int i = 0; i < n; i++) {
        float mx = 0.0f;
        for (int j = 0; j < m; j++) mx = fmaxf(mx, P[i * m + j]);
        s += mx;
    }
    return s / n;
}

typedef struct {
    const char *dir;
    qkv_viz *viz;
    const float *x_train, *y_train, *x_test, *truth;
    const char **train_ticks, **test_ticks;
} figures;

/* d2l's plot_kernel_reg and show_heatmaps for one fit. */
static qkv_status draw(const figures *fg, const char *name, const char *what, const float *pred,
                       const float *P, qkv_error *err)
{
    char path[4096], title[128];
    qkv_series s[3] = {
        {.x = fg->x_test, .y = fg->truth, .n = N_TEST, .label = "Truth"},
        {.x = fg->x_test, .y = pred, .n = N_TEST, .label = "Pred"},
        {.x = fg->x_train, .y = fg->y_train, .n = N_TRAIN, .label = "Samples",
         .style = QKV_LINE_NONE, .marker = QKV_MARKER_CIRCLE, .marker_alpha = 0.5f},
    };
    snprintf(title, sizeof title, "Nadaraya-Watson kernel regression, %s", what);
    qkv_plot_spec ps = {.series = s, .nseries = 3, .title = title, .xlabel = "x", .ylabel = "y",
                        .xlim = {0, 5}, .ylim = {-1, 5}};
    snprintf(path, sizeof path, "%s/%s.png", fg->dir, name);
    qkv_status st = qkv_plot_save(path, NULL, fg->viz, &ps, err);
    if (st) return st;
    snprintf(title, sizeof title, "Attention weights, %s", what);
    float vmax = 0.0f; /* the colour scale starts at 0, as a weight does */
    for (int i = 0; i < N_TEST * N_TRAIN; i++) vmax = fmaxf(vmax, P[i]);
    qkv_heatmap_spec hs = {.data = P, .rows = 1, .cols = 1, .n = N_TEST, .m = N_TRAIN,
                           .x_ticks = fg->train_ticks, .y_ticks = fg->test_ticks,
                           .xlabel = "Sorted training inputs", .ylabel = "Sorted testing inputs",
                           .title = title, .vmin = 0.0f, .vmax = vmax};
    snprintf(path, sizeof path, "%s/%s-attention.png", fg->dir, name);
    return qkv_heatmap_save(path, NULL, fg->viz, &hs, err);
}

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 3 || argv[1][0] == '-') {
        fprintf(stderr, "usage: %s OUTDIR [SEED]\n", argv[0]);
        return 2;
    }
    const char *dir = argv[1];
    const uint64_t seed = argc > 2 ? strtoull(argv[2], NULL, 10) : 0;
    if (mkdir(dir, 0777) && errno != EEXIST) {
        fprintf(stderr, "%s: %s\n", dir, strerror(errno));
        return 1;
    }

    /* d2l: x_train = sort(rand(50) * 5); y_train = f(x_train) + normal(0, 0.5);
     *      x_test = arange(0, 5, 0.1) */
    float x_train[N_TRAIN], y_train[N_TRAIN], x_test[N_TEST], truth[N_TEST];
    for (int i = 0; i < N_TRAIN; i++) x_train[i] = 5.0f * qkv_random_uniform(3 * seed, i);
    qsort(x_train, N_TRAIN, sizeof *x_train, cmp_float);
    for (int i = 0; i < N_TRAIN; i++)
        y_train[i] = f(x_train[i]) + 0.5f * qkv_random_normal(3 * seed + 1, i);
    for (int i = 0; i < N_TEST; i++) x_test[i] = 0.1f * i, truth[i] = f(x_test[i]);

    static float P[N_TEST * N_TRAIN];
    float pred[N_TEST];

    /* Non-parametric: w = 1, every test input attends to every training input. */
    const qkv_attention_inputs test_on_train = {x_test, x_train, y_train};
    qkv_kernel_regression_forward(pred, P, &test_on_train, 1.0f, 1, N_TEST, N_TRAIN, NULL);
    const double sharp_fixed = mean_row_max(P, N_TEST, N_TRAIN);

    char train_lab[N_TRAIN][16], test_lab[N_TEST][16];
    const char *train_ticks[N_TRAIN], *test_ticks[N_TEST];
    for (int i = 0; i < N_TRAIN; i++)
        snprintf(train_lab[i], sizeof train_lab[i], "%.2f", x_train[i]), train_ticks[i] = train_lab[i];
    for (int i = 0; i < N_TEST; i++)
        snprintf(test_lab[i], sizeof test_lab[i], "%.1f", x_test[i]), test_ticks[i] = test_lab[i];
    qkv_error err = {0};
    figures fg = {dir, NULL, x_train, y_train, x_test, truth, train_ticks, test_ticks};
    if (qkv_viz_open(&fg.viz, NULL, &err) ||
        draw(&fg, "nw-nonparametric", "w = 1 (non-parametric)", pred, P, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        qkv_viz_close(fg.viz);
        return 1;
    }

    /* Parametric: input i attends to the other N_TRAIN - 1 (d2l drops the diagonal of the
     * tiled inputs); batch row i holds its own keys and values. */
    enum { M = N_TRAIN - 1 };
    static float keys[N_TRAIN * M], values[N_TRAIN * M], Pt[N_TRAIN * M];
    for (int i = 0, at = 0; i < N_TRAIN; i++)
        for (int j = 0; j < N_TRAIN; j++)
            if (j != i) keys[at] = x_train[j], values[at] = y_train[j], at++;
    float w = qkv_random_uniform(3 * seed + 2, 0); /* d2l: torch.rand((1,)) */
    float y_hat[N_TRAIN], dy[N_TRAIN];
    printf("parametric attention pooling: w starts at %.4f\n", (double)w);
    for (int epoch = 1; epoch <= EPOCHS; epoch++) {
        const qkv_attention_inputs leave_one_out = {x_train, keys, values};
        qkv_kernel_regression_forward(y_hat, Pt, &leave_one_out, w, N_TRAIN, 1, M, NULL);
        double loss = 0.0; /* MSELoss(reduction='none'), summed: dL/dy_hat = 2 (y_hat - y) */
        for (int i = 0; i < N_TRAIN; i++) {
            float e = y_hat[i] - y_train[i];
            loss += (double)e * e, dy[i] = 2.0f * e;
        }
        float dw = 0.0f;
        qkv_kernel_regression_backward(NULL, &dw, dy, Pt, &leave_one_out, w, N_TRAIN, 1, M);
        w -= LR * dw; /* SGD */
        printf("epoch %d, loss %.6f\n", epoch, loss);
    }
    qkv_kernel_regression_forward(pred, P, &test_on_train, w, 1, N_TEST, N_TRAIN, NULL);
    const double sharp_learned = mean_row_max(P, N_TEST, N_TRAIN);
    char what[64];
    snprintf(what, sizeof what, "learned w = %.2f", (double)w);
    if (draw(&fg, "nw-parametric", what, pred, P, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        qkv_viz_close(fg.viz);
        return 1;
    }
    qkv_viz_close(fg.viz);
    printf("learned w %.4f\n", (double)w);
    printf("mean largest weight per test input: %.4f with w = 1, %.4f with the learned w\n",
           sharp_fixed, sharp_learned);
    printf("wrote %s/nw-{nonparametric,parametric}{,-attention}.png\n", dir);
    return 0;
}
