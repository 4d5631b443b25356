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

static int numeric(const opt_spec *o)
{
    return o->type == OPT_INT || o->type == OPT_FLOAT || o->type == OPT_U64;
}

static int textual(const opt_spec *o)
{
    return o->type == OPT_STRING || o->type == OPT_FILE || o->type == OPT_DIR;
}

const opt_spec *args_target(const opt_spec *opts, const opt_spec *o)
{
    if (o->type != OPT_ALIAS) return o;
    for (const opt_spec *t = opts; t->name; t++)
        if (t->type != OPT_ALIAS && !strcmp(t->name, (const char *)o->value)) return t;
    return NULL;
}

int args_record(const opt_spec *o, qkv_record *r)
{
    return qkv_record_parse(o->record, o->name, o->type == OPT_FLAG, r);
}

const char *args_choice_name(const opt_choice *c, int v)
{
    if (!c->local) return qkv_enum_name(c->names, v);
    for (int i = 0; c->local[i]; i++)
        if (i == v) return c->local[i];
    return NULL;
}

int args_choice_set(const opt_spec *o, const char *name, const char *who, const char *where)
{
    opt_choice *c = o->value;
    int v = 0;
    for (const char *x; (x = args_choice_name(c, v)); v++)
        if (!strcmp(x, name)) return c->value = v, 0;
    fprintf(stderr, "%s: --%s '%s': expected ", who, o->name, name);
    for (v = 0; args_choice_name(c, v); v++)
        fprintf(stderr, "%s%s", v == 0 ? "" : args_choice_name(c, v + 1) ? ", " : " or ",
                args_choice_name(c, v));
    fprintf(stderr, "%s%s\n", where ? " in " : "", where ? where : "");
    return -1;
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

static int inside(const opt_spec *o, const qkv_range *r)
{
    return qkv_range_holds(r, value_of(o));
}

int args_check(const opt_spec *o, const char *who, const char *where)
{
    qkv_range r;
    if (!numeric(o)) return 0;
    if (qkv_range_parse(o->range, &r)) {
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

/* One row's faults, printed: a range where none belongs or a bad one, a bad record text, an
 * alias of nothing. -1 if any. */
static int row_check(const opt_spec *opts, const opt_spec *o, const char *who)
{
    qkv_range r;
    qkv_record rec;
    const char *why = NULL;
    if (numeric(o) && qkv_range_parse(o->range, &r)) why = "is numeric but has no valid range";
    else if (!numeric(o) && o->range) why = "takes no number but has a range";
    else if (args_record(o, &rec) < 0) why = "has no valid record text";
    else if (o->type == OPT_ALIAS && (o->record || !args_target(opts, o)))
        why = "is an alias of no option (or records)";
    else if (o->type == OPT_CHOICE && !args_choice_name(o->value, 0)) why = "has no choices";
    for (const opt_spec *p = opts; !why && p < o; p++)
        if (!strcmp(p->name, o->name)) why = "is in the table twice";
    if (!why) return 0;
    fprintf(stderr, "%s: internal error: option --%s %s\n", who, o->name, why);
    return -1;
}

int args_table_check(const opt_spec *opts, const char *who)
{
    for (const opt_spec *o = opts; o->name; o++)
        if (row_check(opts, o, who)) return -1;
    return 0;
}

/* The word that stands for o's value in --help: N, FLOAT, TEXT, FILE, DIR or a|b|c. */
static void placeholder(char *out, size_t cap, const opt_spec *o)
{
    static const char *const words[] = {[OPT_INT] = "N", [OPT_FLOAT] = "FLOAT", [OPT_U64] = "N",
                                        [OPT_STRING] = "TEXT", [OPT_FILE] = "FILE",
                                        [OPT_DIR] = "DIR"};
    *out = '\0';
    if (o->type == OPT_CHOICE) {
        size_t at = 0;
        for (int v = 0; args_choice_name(o->value, v) && at < cap; v++)
            at += (size_t)snprintf(out + at, cap - at, "%s%s", v ? "|" : "",
                                   args_choice_name(o->value, v));
    } else if (o->type != OPT_FLAG && o->type != OPT_ALIAS) {
        snprintf(out, cap, "%s", words[o->type]);
    }
}

/* The short alias of o ("-m"), or NULL. */
static const char *short_name(const opt_spec *opts, const opt_spec *o)
{
    for (const opt_spec *a = opts; a->name; a++)
        if (a->type == OPT_ALIAS && strlen(a->name) == 1 && !strcmp(a->value, o->name))
            return a->name;
    return NULL;
}

/* One option's line of --help: "  -m, --model DIR    help (default ...)". */
static void usage_line(const opt_spec *opts, const opt_spec *o)
{
    const opt_spec *t = args_target(opts, o);
    const char *s = short_name(opts, o);
    char arg[256], left[320], def[64] = "unset";
    placeholder(arg, sizeof arg, t);
    snprintf(left, sizeof left, "%s%s%s--%s%s", s ? "-" : "    ", s ? s : "", s ? ", " : "",
             o->name, *arg ? " " : "");
    printf("  %s%s", left, arg);
    const int width = (int)(strlen(left) + strlen(arg));
    printf("%*s", width < 26 ? 28 - width : 2, "");
    if (o->type == OPT_ALIAS) {
        printf("the same as --%s%s%s\n", t->name, o->help ? ": " : "", o->help ? o->help : "");
        return;
    }
    printf("%s", o->help);
    if (numeric(o)) {
        /* a default outside the range is "not given" (--enc-layers: --layers's) */
        qkv_range r;
        if (!qkv_range_parse(o->range, &r) && inside(o, &r)) value_text(def, sizeof def, o);
        const char *range = skip_space(o->range);
        printf(" (%s %s%s; default %s)", arg, *range == '[' || *range == '(' ? "in " : "", range,
               def);
    }
    if (textual(o) && *(const char **)o->value) { /* a control character as C writes it */
        printf(" (default ");
        for (const char *c = *(const char **)o->value; *c; c++)
            if (*c == '\n') printf("\\n");
            else if (*c == '\t') printf("\\t");
            else if ((unsigned char)*c < 0x20) printf("\\x%02x", (unsigned char)*c);
            else putchar(*c);
        putchar(')');
    }
    if (o->type == OPT_CHOICE) {
        const opt_choice *c = o->value;
        printf(" (default %s)", args_choice_name(c, c->value));
    }
    putchar('\n');
}

void args_usage(const opt_spec *opts, const char *usage)
{
    printf("%s\n\noptions:\n", usage);
    for (const opt_spec *o = opts; o->name; o++)
        if (!(o->type == OPT_ALIAS && strlen(o->name) == 1)) usage_line(opts, o);
    printf("      %-22s  %s\n", "--config FILE",
           "options from a JSON object {\"name\": value, ...}; the command line wins");
    printf("  -h, %-22s  %s\n", "--help", "this text");
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
    case OPT_STRING:
    case OPT_FILE:
    case OPT_DIR: *(const char **)o->value = v; return 0;
    case OPT_CHOICE: return args_choice_set(o, v, who, where);
    case OPT_FLAG:
    case OPT_ALIAS: break;
    }
    fprintf(stderr, "%s: --%s: '%s' is not a valid %s%s%s\n", who, o->name, v,
            o->type == OPT_FLOAT ? "number" : "integer", where ? " in " : "", where ? where : "");
    return -1;
}

/* The option a word names: name[0..len) as an option's name or alias (after one dash, a
 * short alias; after two, any other row); in a --config file (in_file) also with '_' for '-',
 * or as a record key (*inverted then says whether the file holds the flag's opposite). NULL if
 * none. */
static const opt_spec *find(const opt_spec *opts, const char *name, size_t len, int dashes,
                            int in_file, int *inverted)
{
    char key[128];
    *inverted = 0;
    if (len >= sizeof key) return NULL;
    memcpy(key, name, len), key[len] = '\0';
    for (int pass = 0; pass < (in_file ? 2 : 1); pass++) {
        for (const opt_spec *o = opts; o->name; o++) {
            const int short_alias = o->type == OPT_ALIAS && strlen(o->name) == 1;
            if (!strcmp(o->name, key) && (dashes == 1) == short_alias) /* -m, --model */
                return args_target(opts, o);
        }
        for (char *c = key; *c; c++) /* a file's "label_smoothing" is --label-smoothing */
            if (*c == '_') *c = '-';
    }
    if (!in_file) return NULL;
    memcpy(key, name, len), key[len] = '\0';
    qkv_record r;
    for (const opt_spec *o = opts; o->name; o++)
        if (args_record(o, &r) > 0 && !strcmp(r.key, key)) return *inverted = r.inverted, o;
    return NULL;
}

/* "--name[=value]", or "-x" for a short option (a negative number is a value). */
static int is_option_word(const char *a)
{
    return a[0] == '-' && (a[1] == '-' ? a[2] != '\0' : isalpha((unsigned char)a[1]) && !a[2]);
}

/* Sets one option from argv[*i] (and argv[*i + 1] for its value); 0 or -1. */
static int parse_word(int argc, char **argv, int *i, const opt_spec *opts, const char *who,
                      const char *where, const opt_spec **found)
{
    const char *a = argv[*i];
    const int dashes = a[1] == '-' ? 2 : 1;
    const char *name = a + dashes, *eq = dashes == 2 ? strchr(name, '=') : NULL;
    size_t len = eq ? (size_t)(eq - name) : strlen(name);
    int inverted = 0;
    const opt_spec *o = find(opts, name, len, dashes, where != NULL, &inverted);
    *found = o;
    if (!o) {
        if (where)
            fprintf(stderr, "%s: %s: unknown key \"%.*s\": no option --%.*s (see --help)\n",
                    who, where, (int)len, name, (int)len, name);
        else
            fprintf(stderr, "%s: unknown option '%.*s%.*s' (see --help)\n", who, dashes, "--",
                    (int)len, name);
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
        *(int *)o->value = is_false == inverted; /* true, unless false or recorded inverted */
        return 0;
    }
    if (where && (!eq || is_false)) {
        fprintf(stderr, "%s: %s: \"%.*s\" is %s, but --%s takes a value\n", who, where,
                (int)len, name, eq ? "false" : "true", o->name);
        return -1;
    }
    const char *v = eq ? eq + 1 : (*i + 1 < argc ? argv[++*i] : NULL);
    if (!v) {
        fprintf(stderr, "%s: --%s needs a value\n", who, o->name);
        return -1;
    }
    return set_value(o, v, who, where);
}

int args_parse(int argc, char **argv, int first, const opt_spec *opts, const char *usage)
{
    return args_parse_words(argc, argv, first, opts, usage, NULL, 0, NULL);
}

int args_parse_words(int argc, char **argv, int first, const opt_spec *opts, const char *usage,
                     const char **words, int max_words, int *n_words)
{
    if (n_words) *n_words = 0;
    char who[64];
    snprintf(who, sizeof who, "qkv %s", argc > 1 && first > 1 ? argv[1] : "");
    if (args_table_check(opts, who)) return -1;
    const char *where = NULL; /* inside a --config block (config_args.h): its file */
    /* within one file, the key that set each option: a second key for it ("label_smoothing"
     * and "label-smoothing", or the key a run records it under) would leave which counts to
     * the order of the keys, so it is refused */
    int n_opts = 0;
    while (opts[n_opts].name) n_opts++;
    const char **set_by = calloc((size_t)n_opts + 1, sizeof *set_by);
    if (!set_by) return fprintf(stderr, "%s: out of memory\n", who), -1;
    int rc = 0;
    for (int i = first; i < argc && !rc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, CONFIG_BEGIN) && i + 1 < argc) {
            where = argv[++i];
            memset(set_by, 0, (size_t)n_opts * sizeof *set_by);
            continue;
        }
        if (!strncmp(a, CONFIG_BEGIN "=", sizeof CONFIG_BEGIN)) {
            where = a + sizeof CONFIG_BEGIN;
            memset(set_by, 0, (size_t)n_opts * sizeof *set_by);
            continue;
        }
        if (!strcmp(a, CONFIG_END)) {
            where = NULL;
            continue;
        }
        if (!where && (!strcmp(a, "--help") || !strcmp(a, "-h"))) {
            args_usage(opts, usage);
            rc = 1;
            break;
        }
        if (!is_option_word(a) && !where && a[0] != '-' && n_words && *n_words < max_words) {
            words[(*n_words)++] = a;
            continue;
        }
        if (!is_option_word(a)) {
            fprintf(stderr, "%s: unexpected argument '%s' (see --help)\n", who, a);
            rc = -1;
            break;
        }
        const opt_spec *o = NULL;
        const char *word = a;
        if (parse_word(argc, argv, &i, opts, who, where, &o)) rc = -1;
        else if (where && o && set_by[o - opts]) {
            const char *eq = strchr(word + 2, '='), *was = set_by[o - opts] + 2;
            const char *was_eq = strchr(was, '=');
            fprintf(stderr, "%s: %s: \"%.*s\" and \"%.*s\" both set --%s: give it once\n", who,
                    where, (int)(was_eq ? was_eq - was : (ptrdiff_t)strlen(was)), was,
                    (int)(eq ? eq - (word + 2) : (ptrdiff_t)strlen(word + 2)), word + 2, o->name);
            rc = -1;
        } else if (where && o) {
            set_by[o - opts] = word;
        }
    }
    free(set_by);
    return rc;
}

static int given(int argc, char **argv, int first, const opt_spec *opts, const char *name,
                 int files_too)
{
    const char *where = NULL;
    for (int i = first; i < argc; i++) {
        if (!strcmp(argv[i], CONFIG_BEGIN)) {
            where = i + 1 < argc ? argv[++i] : "";
            continue;
        }
        if (!strcmp(argv[i], CONFIG_END)) {
            where = NULL;
            continue;
        }
        const char *a = argv[i];
        if (!is_option_word(a) || (where && !files_too)) continue;
        const int dashes = a[1] == '-' ? 2 : 1;
        const char *n = a + dashes, *eq = dashes == 2 ? strchr(n, '=') : NULL;
        int inverted;
        const opt_spec *o = find(opts, n, eq ? (size_t)(eq - n) : strlen(n), dashes,
                                 where != NULL, &inverted);
        if (o && !strcmp(o->name, name)) return 1;
        if (o && o->type != OPT_FLAG && !eq) i++; /* its value */
    }
    return 0;
}

int args_given(int argc, char **argv, int first, const opt_spec *opts, const char *name)
{
    return given(argc, argv, first, opts, name, 1);
}

int args_typed(int argc, char **argv, int first, const opt_spec *opts, const char *name)
{
    return given(argc, argv, first, opts, name, 0);
}
