/* SPDX-License-Identifier: MIT */
#include "cli/common.h"

#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

char *cli_read_all(const char *path, size_t max_bytes, size_t *len)
{
    qkv_error err = {0};
    char *text = NULL;
    if (qkv_read_file(!path || !strcmp(path, "-") ? NULL : path, max_bytes, &text, len, &err)) {
        fprintf(stderr, "qkv: %s\n", err.msg);
        return NULL;
    }
    return text;
}

char *cli_read_regular(const char *path, size_t max_bytes, size_t *len)
{
    qkv_error err = {0};
    char *text = NULL;
    if (qkv_read_regular_file(path, max_bytes, &text, len, &err)) {
        fprintf(stderr, "qkv: %s\n", err.msg);
        return NULL;
    }
    return text;
}

int cli_read_lines(const char *path, int tsv, int *count, char ***lines, char **text)
{
    qkv_error err = {0};
    if (!qkv_read_lines(path, tsv, count, lines, text, &err)) return 0;
    fprintf(stderr, "qkv: %s\n", err.msg);
    return -1;
}

int cli_read_line(FILE *in, const char *name, long number, char **line, size_t *cap,
                  size_t *len)
{
    size_t n = 0;
    int c;
    while ((c = getc(in)) != EOF && c != '\n') {
        if (n >= QKV_MAX_LINE_BYTES + 1) { /* + 1: the "\r" of "\r\n" */
            fprintf(stderr, "qkv: %s:%ld: a line of more than %zu bytes (the limit "
                    "QKV_MAX_LINE_BYTES) (not a regular file: it may never end)\n", name,
                    number, QKV_MAX_LINE_BYTES);
            return -1;
        }
        if (n + 2 > *cap) {
            const size_t more = *cap ? 2 * *cap : 256;
            char *grown = realloc(*line, more);
            if (!grown) {
                fprintf(stderr, "qkv: %s:%ld: out of memory for the line\n", name, number);
                return -1;
            }
            *line = grown, *cap = more;
        }
        if (!c) {
            fprintf(stderr, "qkv: %s:%ld: a NUL byte in the line: text holds none\n", name,
                    number);
            return -1;
        }
        (*line)[n++] = (char)c;
    }
    if (ferror(in)) {
        fprintf(stderr, "qkv: %s:%ld: cannot read: %s\n", name, number, strerror(errno));
        return -1;
    }
    if (c == EOF && n == 0) return 0;
    if (n > 0 && (*line)[n - 1] == '\r') n--;
    if (n > QKV_MAX_LINE_BYTES) {
        fprintf(stderr, "qkv: %s:%ld: a line of more than %zu bytes (the limit "
                "QKV_MAX_LINE_BYTES)\n", name, number, QKV_MAX_LINE_BYTES);
        return -1;
    }
    if (!*line && !(*line = malloc(*cap = 1))) return -1;
    (*line)[n] = '\0';
    *len = n;
    return 1;
}

static qkv_status out_of_memory(qkv_error *err, int n)
{
    err->code = QKV_ERR_NOMEM;
    snprintf(err->msg, sizeof err->msg, "out of memory for %d translations", n);
    return QKV_ERR_NOMEM;
}

/* Sentences [first, first + n) of s as sentences of their own; start (n + 1) is the caller's. */
static qkv_sentences sentences_view(const qkv_sentences *s, int first, int n, size_t *start)
{
    for (int i = 0; i <= n; i++) start[i] = s->start[first + i] - s->start[first];
    return (qkv_sentences){n, start[n], s->tokens + s->start[first], start, NULL};
}

/* The n parts' translations as one result, in order (the texts move; the parts are freed). */
static qkv_status translations_join(qkv_translations *all, qkv_translations *parts, int n_parts,
                                    qkv_error *err)
{
    int n = 0, L = 1, truncated = 0, first_truncated = -1, first_len = 0;
    for (int p = 0; p < n_parts; p++) {
        if (parts[p].truncated && first_truncated < 0)
            first_truncated = n + parts[p].first_truncated, first_len = parts[p].first_truncated_len;
        n += parts[p].count, truncated += parts[p].truncated;
        if (parts[p].max_len > L) L = parts[p].max_len;
    }
    const int N = parts[0].n_best;
    const size_t H = (size_t)n * N;
    qkv_translations m = {n, N, L, calloc(H, sizeof(char *)), calloc(H * L, sizeof(int)),
                          malloc(H * sizeof(int)), malloc(H * sizeof(double)), truncated,
                          first_truncated, first_len, malloc((size_t)n * sizeof(int)),
                          malloc((size_t)n * sizeof(int))};
    if (!m.text || !m.ids || !m.len || !m.score || !m.src_len || !m.unknown) {
        qkv_translations_free(&m);
        return out_of_memory(err, n);
    }
    for (int p = 0, at = 0; p < n_parts; at += parts[p].count, p++) {
        qkv_translations *r = &parts[p];
        for (size_t h = 0; h < (size_t)r->count * N; h++) {
            const size_t to = (size_t)at * N + h;
            m.text[to] = r->text[h], r->text[h] = NULL;
            m.len[to] = r->len[h], m.score[to] = r->score[h];
            if (r->len[h] > 0)
                memcpy(m.ids + to * L, r->ids + h * r->max_len, (size_t)r->len[h] * sizeof *m.ids);
        }
        for (int i = 0; i < r->count; i++)
            m.src_len[at + i] = r->src_len[i], m.unknown[at + i] = r->unknown[i];
    }
    *all = m;
    return QKV_OK;
}

qkv_status cli_translate_words(qkv_translations *out, qkv_translator *t,
                               const qkv_sentences *words, const qkv_translate_options *o,
                               const char *who, qkv_error *err)
{
    const int n = words->count, step = o->batch, tty = isatty(2);
    const int n_parts = n ? (n + step - 1) / step : 1;
    size_t *start = malloc(((size_t)step + 1) * sizeof *start);
    qkv_translations *parts = calloc((size_t)n_parts, sizeof *parts);
    qkv_status st = start && parts ? QKV_OK : out_of_memory(err, n);
    memset(out, 0, sizeof *out);
    if (!st && n == 0) st = qkv_translate_words(&parts[0], t, words, o, err);
    for (int p = 0; !st && p * step < n; p++) {
        const int first = p * step, k = n - first < step ? n - first : step;
        const qkv_sentences part_words = sentences_view(words, first, k, start);
        st = qkv_translate_words(&parts[p], t, &part_words, o, err);
        if (!st && tty)
            fprintf(stderr, "\r%s: %d/%d sentences%s", who, first + k, n, first + k == n ? "\n"
                                                                                     : "");
    }
    if (st && tty && n) fputc('\n', stderr);
    if (!st && n == 0) *out = parts[0], memset(&parts[0], 0, sizeof parts[0]);
    else if (!st) st = translations_join(out, parts, n_parts, err);
    for (int p = 0; parts && p < n_parts; p++) qkv_translations_free(&parts[p]);
    free(parts), free(start);
    return st;
}

void cli_threads(int n)
{
    if (n > 0) qkv_set_threads(n);
}

int cli_train_precision(qkv_precision p)
{
    if (p != QKV_PRECISION_INT8) return 0;
    fprintf(stderr, "qkv: --precision int8 is for inference only (translate, eval, serve, "
            "generate): train at fp32 or bf16\n");
    return -1;
}

int cli_device(qkv_device d, const char *cmd)
{
    qkv_error err = {0};
    if (!qkv_device_check(d, &err)) return 0;
    fprintf(stderr, "qkv %s: --device %s: %s\n", cmd, qkv_device_name(d), err.msg);
    return 1;
}

int cli_positions_fit(const char *cmd, const char *len_option, int max_len, int d_model)
{
    const double bytes = (double)max_len * d_model * sizeof(float), gib = (double)(1u << 30);
    if (bytes <= gib) return 0;
    fprintf(stderr, "%s: --%s %d x --d-model %d needs a %.1f GiB positional table (over 1 GiB): "
            "lower --%s\n", cmd, len_option, max_len, d_model, bytes / gib, len_option);
    return -1;
}

void cli_command_line(char *out, size_t cap, int argc, char **argv)
{
    size_t n = 0;
    out[0] = '\0';
    for (int i = 0; i < argc && n + 1 < cap; i++)
        n += (size_t)snprintf(out + n, cap - n, "%s%s", i ? " " : "", argv[i]);
}

static void print_notice(const char *text, void *ctx)
{
    (void)ctx;
    fprintf(stderr, "qkv: %s\n", text);
}

qkv_run_dir *cli_claim_model_dir(const char *dir, int overwrite, int argc, char **argv)
{
    char holder[1024];
    cli_command_line(holder, sizeof holder, argc, argv);
    qkv_run_dir *rd = NULL;
    qkv_error err = {0};
    if (qkv_run_dir_claim(&rd, dir, QKV_RUN_DIR_MODEL, overwrite ? QKV_RUN_OVERWRITE : QKV_RUN_NEW,
                          holder, QKV_NAMING_COMMAND, print_notice, NULL, &err)) {
        fprintf(stderr, "qkv: %s\n", err.msg);
        return NULL;
    }
    return rd;
}

int cli_output_dir(const char *cmd, const char *out, const char *src, int overwrite)
{
    static const char *const relation[] = {"", "is", "is inside", "holds"};
    const int rel = qkv_path_relation(out, src);
    if (rel > 0) {
        fprintf(stderr, "qkv %s: --out %s %s the model %s: write into another directory\n", cmd,
                out, relation[rel], src);
        return 2;
    }
    DIR *d = overwrite ? NULL : opendir(out);
    int any = 0;
    for (struct dirent *e; d && !any && (e = readdir(d));)
        any = strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    if (d) closedir(d);
    if (any) fprintf(stderr, "qkv %s: %s is not empty (--overwrite replaces its files)\n", cmd, out);
    return any;
}
