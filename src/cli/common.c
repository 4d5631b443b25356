#include "cli/common.h"

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
