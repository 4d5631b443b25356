/* SPDX-License-Identifier: MIT */
#include "cli/args.h"

#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/config_args.h"

static const char *skip_space(const char *s)
{
    while (isspace((unsigned char)*s)) s++;
    return s;
}

/* A finite number, or -1. */
static int read_bound(const char **s, double *x)
{
    char *end = NULL;
    *s = skip_space(*s);
    errno = 0;
    *x = strtod(*s, &end);
    if (end == *s || errno || !isfinite(*x)) return -1;
    *s = skip_space(end);
    return 0;
}

int args_range_parse(const char *text, opt_range *r)
{
    if (!text) return -1;
    const char *s = skip_space(text);
    r->lo = -INFINITY, r->hi = INFINITY, r->lo_closed = r->hi_closed = 0;
    if (*s == '[' || *s == '(') { /* an interval */
        r->lo_closed = *s++ == '[';
        if (read_bound(&s, &r->lo) || *s++ != ',' || read_bound(&s, &r->hi)) return -1;
        if (*s != ']' && *s != ')') return -1;
        r->hi_closed = *s++ == ']';
        if (r->lo > r->hi || (r->lo == r->hi && !(r->lo_closed && r->hi_closed))) return -1;
    } else if (*s == '>' || *s == '<') { /* a bound */
        const int above = *s++ == '>', closed = *s == '=';
        if (closed) s++;
        double x;
        if (read_bound(&s, &x)) return -1;
        if (above) r->lo = x, r->lo_closed = closed;
        else r->hi = x, r->hi_closed = closed;
    } else
        return -1;
    return *skip_space(s) ? -1 : 0;
}

static int numeric(const opt_spec *o)
{
    return o->type == OPT_INT || o->type == OPT_FLOAT || o->type == OPT_U64;
}

static double value_of(const opt_spec *o)
{
    switch (o->type) {
    case OPT_INT: return *(const int *)o->value;
    case OPT_FLOAT: return *(const float *)o->value;
    case OPT_U64: return (double)*(const uint64_t *)o->value;
    default: return 0.0;
    }
}

static void value_text(char *out, size_t cap, const opt_spec *o)
{
    switch (o->type) {
    case OPT_INT: snprintf(out, cap, "%d", *(const int *)o->value); break;
    case OPT_FLOAT: snprintf(out, cap, "%g", (double)*(const float *)o->value); break;
    case OPT_U64:
        snprintf(out, cap, "%llu", (unsigned long long)*(const uint64_t *)o->value);
        break;
    default: snprintf(out, cap, "?"); break;
    }
}

static int inside(const opt_spec *o, const opt_range *r)
{
    const double x = value_of(o);
    return (r->lo_closed ? x >= r->lo : x > r->lo) && (r->hi_closed ? x <= r->hi : x < r->hi);
}

int args_check(const opt_spec *o, const char *who, const char *where)
{
    opt_range r;
    if (!numeric(o)) return 0;
    if (args_range_parse(o->range, &r)) {
        fprintf(stderr, "%s: internal error: option --%s has no valid range ('%s')\n", who,
                o->name, o->range ? o->range : "NULL");
        return -1;
    }
    if (inside(o, &r)) return 0;
    char got[64];
    value_text(got, sizeof got, o);
    const char *s = skip_space(o->range);
    fprintf(stderr, "%s: --%s must be %s%s (got %s)%s%s\n", who, o->name,
            *s == '[' || *s == '(' ? "in " : "", s, got, where ? " in " : "", where ? where : "");
    return -1;
}

int args_table_check(const opt_spec *opts, const char *who)
{
    opt_range r;
    for (const opt_spec *o = opts; o->name; o++) {
        if (numeric(o) && args_range_parse(o->range, &r)) {
            fprintf(stderr, "%s: internal error: numeric option --%s has no valid range ('%s')\n",
                    who, o->name, o->range ? o->range : "NULL");
            return -1;
        }
        if (!numeric(o) && o->range) {
            fprintf(stderr, "%s: internal error: option --%s takes no number but has a range\n",
                    who, o->name);
            return -1;
        }
    }
    return 0;
}

void args_usage(const opt_spec *opts, const char *usage)
{
    printf("%s\n\noptions:\n", usage);
    for (const opt_spec *o = opts; o->name; o++) {
        char left[64];
        const char *arg = o->type == OPT_FLAG ? "" : o->type == OPT_STRING ? " S" :
                          o->type == OPT_FLOAT ? " X" : " N";
        snprintf(left, sizeof left, "--%s%s", o->name, arg);
        printf("  %-22s %s", left, o->help);
        if (numeric(o)) {
            /* a default outside the range is "not given" (--enc-layers: --layers's) */
            char def[64] = "unset";
            opt_range r;
            if (!args_range_parse(o->range, &r) && inside(o, &r)) value_text(def, sizeof def, o);
            const char *s = skip_space(o->range);
            printf(" (%s %s%s; default %s)", arg + 1, *s == '[' || *s == '(' ? "in " : "", s, def);
        }
        if (o->type == OPT_STRING && *(const char **)o->value)
            printf(" (default %s)", *(const char **)o->value);
        putchar('\n');
    }
    printf("  %-22s %s\n", "--config FILE.json",
           "options from a JSON object {\"name\": value, ...}; the command line wins");
    printf("  %-22s %s\n", "--help", "this text");
}

/* Whether v is a decimal number as people write one: [+-] digits [. digits] [e [+-] digits]
 * (strtof also reads hexadecimal, "0x10" as 16, and "inf" or "nan"). */
static int decimal_number(const char *v)
{
    const char *s = v + (*v == '+' || *v == '-');
    const size_t whole = strspn(s, "0123456789");
    s += whole;
    size_t frac = 0;
    if (*s == '.') frac = strspn(++s, "0123456789"), s += frac;
    if (!whole && !frac) return 0;
    if (*s == 'e' || *s == 'E') {
        s += 1 + (s[1] == '+' || s[1] == '-');
        const size_t exp = strspn(s, "0123456789");
        if (!exp) return 0;
        s += exp;
    }
    return !*s;
}

/* v: the text of o's value, from the command line, or from a --config file (where). */
static int set_value(const opt_spec *o, const char *v, const char *who, const char *where)
{
    char *end = NULL;
    errno = 0;
    switch (o->type) {
    case OPT_INT: {
        long x = strtol(v, &end, 10);
        if (!*v || *end || errno || x < -2147483647L || x > 2147483647L) break;
        *(int *)o->value = (int)x;
        return args_check(o, who, where);
    }
    case OPT_U64: {
        unsigned long long x = strtoull(v, &end, 10);
        if (!*v || *end || errno || *skip_space(v) == '-') break;
        *(uint64_t *)o->value = (uint64_t)x;
        return args_check(o, who, where);
    }
    case OPT_FLOAT: {
        if (!decimal_number(v)) break;
        float x = strtof(v, &end);
        if (*end) break;
        if (errno == ERANGE || !isfinite(x)) { /* a float holds it as 0, a denormal or inf */
            const int tiny = !isfinite(x) ? 0 : fabsf(x) < FLT_MIN;
            fprintf(stderr, "%s: --%s: '%s' is too %s for a float (%s %g)%s%s\n", who, o->name,
                    v, tiny ? "small" : "large", tiny ? "the smallest is" : "at most",
                    tiny ? (double)FLT_MIN : (double)FLT_MAX, where ? " in " : "",
                    where ? where : "");
            return -1;
        }
        *(float *)o->value = x;
        return args_check(o, who, where);
    }
    case OPT_STRING: *(const char **)o->value = v; return 0;
    case OPT_FLAG: break;
    }
    fprintf(stderr, "%s: --%s: '%s' is not a valid %s%s%s\n", who, o->name, v,
            o->type == OPT_FLOAT ? "number" : "integer", where ? " in " : "", where ? where : "");
    return -1;
}

int args_parse(int argc, char **argv, int first, const opt_spec *opts, const char *usage)
{
    char who[64];
    snprintf(who, sizeof who, "qkv %s", argc > 1 && first > 1 ? argv[1] : "");
    if (args_table_check(opts, who)) return -1;
    const char *where = NULL; /* inside a --config block (config_args.h): its file */
    for (int i = first; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, CONFIG_BEGIN) && i + 1 < argc) {
            where = argv[++i];
            continue;
        }
        if (!strncmp(a, CONFIG_BEGIN "=", sizeof CONFIG_BEGIN)) {
            where = a + sizeof CONFIG_BEGIN;
            continue;
        }
        if (!strcmp(a, CONFIG_END)) {
            where = NULL;
            continue;
        }
        if (!where && (!strcmp(a, "--help") || !strcmp(a, "-h"))) {
            args_usage(opts, usage);
            return 1;
        }
        if (strncmp(a, "--", 2)) {
            fprintf(stderr, "%s: unexpected argument '%s' (see --help)\n", who, a);
            return -1;
        }
        const char *name = a + 2, *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        const opt_spec *o = opts;
        while (o->name && (strlen(o->name) != len || strncmp(o->name, name, len))) o++;
        if (!o->name) {
            if (where)
                fprintf(stderr, "%s: %s: unknown key \"%.*s\": no option --%.*s (see --help)\n",
                        who, where, (int)len, name, (int)len, name);
            else
                fprintf(stderr, "%s: unknown option '--%.*s' (see --help)\n", who, (int)len, name);
            return -1;
        }
        /* from a file, a flag is "--name" (true) or "--name=" CONFIG_FALSE, and any other
         * option "--name=value" */
        const int is_false = eq && !strcmp(eq + 1, CONFIG_FALSE);
        if (o->type == OPT_FLAG) {
            if (eq && !(where && is_false)) {
                fprintf(stderr, "%s: --%s takes no value%s%s\n", who, o->name,
                        where ? ": true or false in " : "", where ? where : "");
                return -1;
            }
            *(int *)o->value = !is_false;
            continue;
        }
        if (where && (!eq || is_false)) {
            fprintf(stderr, "%s: %s: \"%s\" is %s, but --%s takes a value\n", who, where,
                    o->name, eq ? "false" : "true", o->name);
            return -1;
        }
        const char *v = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        if (!v) {
            fprintf(stderr, "%s: --%s needs a value\n", who, o->name);
            return -1;
        }
        if (set_value(o, v, who, where)) return -1;
    }
    return 0;
}

static int given(int argc, char **argv, int first, const char *name, int files_too)
{
    const size_t len = strlen(name);
    int in_file = 0;
    for (int i = first; i < argc; i++) {
        if (!strcmp(argv[i], CONFIG_BEGIN)) in_file = 1, i++;
        else if (!strcmp(argv[i], CONFIG_END)) in_file = 0;
        else if ((files_too || !in_file) && !strncmp(argv[i], "--", 2) &&
                 !strncmp(argv[i] + 2, name, len) &&
                 (argv[i][2 + len] == '\0' || argv[i][2 + len] == '='))
            return 1;
    }
    return 0;
}

int args_given(int argc, char **argv, int first, const char *name)
{
    return given(argc, argv, first, name, 1);
}

int args_typed(int argc, char **argv, int first, const char *name)
{
    return given(argc, argv, first, name, 0);
}
