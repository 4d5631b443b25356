#include "cli/common.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *cli_read_all(const char *path, size_t *len)
{
    FILE *fp = (!path || !strcmp(path, "-")) ? stdin : fopen(path, "rb");
    if (!fp) {
        fprintf(stderr, "qkv: %s: %s\n", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (n + 1 >= cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf), buf = NULL;
                break;
            }
            buf = nb, cap *= 2;
        }
        size_t r = fread(buf + n, 1, cap - n - 1, fp);
        n += r;
        if (r == 0) break;
    }
    if (fp != stdin) fclose(fp);
    if (!buf) {
        fprintf(stderr, "qkv: out of memory reading %s\n", path ? path : "stdin");
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
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
