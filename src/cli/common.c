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

int cli_positions_fit(const char *cmd, const char *len_option, int max_len, int d_model)
{
    const double bytes = (double)max_len * d_model * sizeof(float), gib = (double)(1u << 30);
    if (bytes <= gib) return 0;
    fprintf(stderr, "%s: --%s %d x --d-model %d needs a %.1f GiB positional table (over 1 GiB): "
            "lower --%s\n", cmd, len_option, max_len, d_model, bytes / gib, len_option);
    return -1;
}
