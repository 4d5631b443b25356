/* SPDX-License-Identifier: MIT */
#include "cli/common.h"

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

int cli_read_lines(const char *path, int tsv, int *count, char ***lines, char **text)
{
    size_t len;
    *lines = NULL;
    if (!(*text = cli_read_all(path, QKV_MAX_TEXT_BYTES, &len))) return -1;
    size_t n = 0;
    for (size_t i = 0; i < len; i++) n += (*text)[i] == '\n';
    n += len > 0 && (*text)[len - 1] != '\n'; /* a last line without its newline */
    if (*count >= 0 && n < (size_t)*count) {
        fprintf(stderr, "qkv: %s has %zu lines, %d needed\n", path, n, *count);
        goto fail;
    }
    if (*count < 0) *count = (int)n;
    if (!(*lines = malloc(((size_t)*count + 1) * sizeof **lines))) {
        fprintf(stderr, "qkv: out of memory for the lines of %s\n", path);
        goto fail;
    }
    char *at = *text;
    for (int i = 0; i < *count; i++) {
        char *end = strchr(at, '\n'), *next = end ? end + 1 : at + strlen(at);
        if (end) *end = '\0';
        if (end > at && end[-1] == '\r') end[-1] = '\0';
        if (tsv) {
            char *tab = strchr(at, '\t');
            if (!tab) {
                fprintf(stderr, "qkv: %s:%d: no tab (source<TAB>target)\n", path, i + 1);
                goto fail;
            }
            at = tab + 1;
            if ((tab = strchr(at, '\t'))) *tab = '\0';
        }
        (*lines)[i] = at;
        at = next;
    }
    return 0;
fail:
    free(*lines), free(*text);
    *lines = NULL, *text = NULL;
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

/* Appends part's translations to all (which takes its texts; part is freed). */
static qkv_status translations_append(qkv_translations *all, qkv_translations *part,
                                      qkv_error *err)
{
    const int N = part->n_best, n = all->count + part->count;
    const int L = all->max_len > part->max_len ? all->max_len : part->max_len;
    const size_t H = (size_t)n * N, old = (size_t)all->count * N;
    qkv_translations m = {n, N, L, calloc(H, sizeof(char *)), calloc(H * L, sizeof(int)),
                          malloc(H * sizeof(int)), malloc(H * sizeof(double)),
                          all->truncated + part->truncated, all->first_truncated,
                          all->first_truncated_len, malloc((size_t)n * sizeof(int)),
                          malloc((size_t)n * sizeof(int))};
    if (!m.text || !m.ids || !m.len || !m.score || !m.src_len || !m.unknown) {
        qkv_translations_free(&m), qkv_translations_free(part);
        return out_of_memory(err, n);
    }
    if (!all->truncated && part->truncated)
        m.first_truncated = all->count + part->first_truncated,
        m.first_truncated_len = part->first_truncated_len;
    const qkv_translations *from[2] = {all, part};
    for (int k = 0; k < 2; k++) {
        const qkv_translations *r = from[k];
        const size_t at = k ? old : 0, h_n = (size_t)r->count * N;
        for (size_t h = 0; h < h_n; h++) {
            m.text[at + h] = r->text[h], r->text[h] = NULL;
            m.len[at + h] = r->len[h], m.score[at + h] = r->score[h];
            if (r->len[h] > 0)
                memcpy(m.ids + (at + h) * L, r->ids + h * r->max_len,
                       (size_t)r->len[h] * sizeof *m.ids);
        }
        for (int i = 0; i < r->count; i++)
            m.src_len[at / N + i] = r->src_len[i], m.unknown[at / N + i] = r->unknown[i];
    }
    qkv_translations_free(all), qkv_translations_free(part);
    *all = m;
    return QKV_OK;
}

qkv_status cli_translate_words(qkv_translations *out, qkv_translator *t,
                               const qkv_sentences *words, const qkv_translate_options *o,
                               const char *who, qkv_error *err)
{
    const int n = words->count, step = o->batch, tty = isatty(2);
    size_t *start = malloc(((size_t)step + 1) * sizeof *start);
    qkv_status st = start ? QKV_OK : out_of_memory(err, n);
    memset(out, 0, sizeof *out);
    if (!st && n == 0) st = qkv_translate_words(out, t, words, o, err);
    for (int first = 0; !st && first < n; first += step) {
        const int k = n - first < step ? n - first : step;
        const qkv_sentences part_words = sentences_view(words, first, k, start);
        qkv_translations part = {0};
        st = qkv_translate_words(&part, t, &part_words, o, err);
        if (!st) st = first ? translations_append(out, &part, err) : (*out = part, QKV_OK);
        if (!st && tty)
            fprintf(stderr, "\r%s: %d/%d sentences%s", who, first + k, n, first + k == n ? "\n"
                                                                                     : "");
    }
    if (st && tty && n) fputc('\n', stderr);
    if (st) qkv_translations_free(out);
    free(start);
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

int cli_positions_fit(const char *cmd, const char *len_option, int max_len, int d_model)
{
    const double bytes = (double)max_len * d_model * sizeof(float), gib = (double)(1u << 30);
    if (bytes <= gib) return 0;
    fprintf(stderr, "%s: --%s %d x --d-model %d needs a %.1f GiB positional table (over 1 GiB): "
            "lower --%s\n", cmd, len_option, max_len, d_model, bytes / gib, len_option);
    return -1;
}
