/* SPDX-License-Identifier: MIT */
#include "cli/common.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    size_t len;
    *lines = NULL;
    if (!(*text = cli_read_all(path, QKV_MAX_TEXT_BYTES, &len))) return -1;
    const char *nul = memchr(*text, '\0', len);
    if (nul) { /* every reader of a line would stop there, unseen */
        size_t line = 1;
        for (const char *c = *text; c < nul; c++) line += *c == '\n';
        fprintf(stderr, "qkv: %s:%zu: a NUL byte in the line: text holds none\n", path, line);
        goto fail;
    }
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

void cli_threads(int n)
{
    if (n > 0) qkv_set_threads(n);
}

int cli_precision(const char *name, qkv_precision *p)
{
    qkv_error err = {0};
    if (!qkv_precision_parse(p, name, &err)) return 0;
    fprintf(stderr, "qkv: --precision: %s\n", err.msg);
    return -1;
}

int cli_kv_cache(const char *name, qkv_kv_cache *c)
{
    qkv_error err = {0};
    if (!qkv_kv_cache_parse(c, name, &err)) return 0;
    fprintf(stderr, "qkv: --kv-cache: %s\n", err.msg);
    return -1;
}

int cli_train_precision(const char *name, qkv_precision *p)
{
    if (cli_precision(name, p)) return -1;
    if (*p != QKV_PRECISION_INT8) return 0;
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
