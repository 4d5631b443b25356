#include "cli/args.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void args_usage(const opt_spec *opts, const char *usage)
{
    fprintf(stderr, "%s\n\noptions:\n", usage);
    for (const opt_spec *o = opts; o->name; o++) {
        char left[64];
        const char *arg = o->type == OPT_FLAG ? "" : o->type == OPT_STRING ? " S" :
                          o->type == OPT_FLOAT ? " X" : " N";
        snprintf(left, sizeof left, "--%s%s", o->name, arg);
        fprintf(stderr, "  %-22s %s", left, o->help);
        if (o->type == OPT_INT) fprintf(stderr, " (default %d)", *(int *)o->value);
        if (o->type == OPT_U64) fprintf(stderr, " (default %llu)", (unsigned long long)*(uint64_t *)o->value);
        if (o->type == OPT_FLOAT && *(float *)o->value == *(float *)o->value) /* NaN: none */
            fprintf(stderr, " (default %g)", (double)*(float *)o->value);
        if (o->type == OPT_STRING && *(const char **)o->value)
            fprintf(stderr, " (default %s)", *(const char **)o->value);
        fputc('\n', stderr);
    }
    fprintf(stderr, "  %-22s %s\n", "--help", "this text");
}

static int set_value(const opt_spec *o, const char *v)
{
    char *end = NULL;
    errno = 0;
    switch (o->type) {
    case OPT_INT: {
        long x = strtol(v, &end, 10);
        if (!*v || *end || errno || x < -2147483647L || x > 2147483647L) break;
        *(int *)o->value = (int)x;
        return 0;
    }
    case OPT_U64: {
        unsigned long long x = strtoull(v, &end, 10);
        if (!*v || *end || errno || *v == '-') break;
        *(uint64_t *)o->value = (uint64_t)x;
        return 0;
    }
    case OPT_FLOAT: {
        float x = strtof(v, &end);
        if (!*v || *end || errno || !isfinite(x)) break;
        *(float *)o->value = x;
        return 0;
    }
    case OPT_STRING: *(const char **)o->value = v; return 0;
    case OPT_FLAG: break;
    }
    fprintf(stderr, "qkv: --%s: '%s' is not a valid %s\n", o->name, v,
            o->type == OPT_FLOAT ? "number" : "integer");
    return -1;
}

int args_parse(int argc, char **argv, int first, const opt_spec *opts, const char *usage)
{
    for (int i = first; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            args_usage(opts, usage);
            return 1;
        }
        if (strncmp(a, "--", 2)) {
            fprintf(stderr, "qkv: unexpected argument '%s' (see --help)\n", a);
            return -1;
        }
        const char *name = a + 2, *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        const opt_spec *o = opts;
        while (o->name && (strlen(o->name) != len || strncmp(o->name, name, len))) o++;
        if (!o->name) {
            fprintf(stderr, "qkv: unknown option '--%.*s' (see --help)\n", (int)len, name);
            return -1;
        }
        if (o->type == OPT_FLAG) {
            if (eq) {
                fprintf(stderr, "qkv: --%s takes no value\n", o->name);
                return -1;
            }
            *(int *)o->value = 1;
            continue;
        }
        const char *v = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        if (!v) {
            fprintf(stderr, "qkv: --%s needs a value\n", o->name);
            return -1;
        }
        if (set_value(o, v)) return -1;
    }
    return 0;
}
