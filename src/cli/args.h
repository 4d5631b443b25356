/* SPDX-License-Identifier: MIT */
/* A small command-line option parser: each subcommand lists its options in a table. */
#ifndef QKV_CLI_ARGS_H
#define QKV_CLI_ARGS_H

#include <stdint.h>

typedef enum { OPT_INT, OPT_FLOAT, OPT_STRING, OPT_FLAG, OPT_U64 } opt_type;

typedef struct {
    const char *name;  /* without the leading "--" */
    opt_type type;
    void *value;       /* int*, float*, const char**, int* (flag), uint64_t* */
    const char *help;
    /* Numeric options: the values accepted, as an interval "[0, 1)", "(0, 1]", "[1, 65536]" or
     * a bound "> 0", ">= 1", "<= 10". Checked by args_parse (and by --config and --resume) and
     * shown by --help. NULL for strings and flags; a numeric row without a valid range makes
     * every parse of its table fail (tests/e2e/test_options.sh runs every --help). */
    const char *range;
} opt_spec;

/* The common ranges. A count where 0 means "off" or "all" is ARG_GE0. */
#define ARG_GE0 ">= 0"
#define ARG_GE1 ">= 1"
#define ARG_GT0 "> 0"
#define ARG_RATE "[0, 1)"        /* dropout, label smoothing, Adam's betas */
#define ARG_THREADS "[0, 4096]"  /* 0: all cores */
#define ARG_SEED "[0, 18446744073709551615]" /* OPT_U64: any 64-bit seed */
/* The library's limits (qkv/models.h, qkv/training.h) as ranges: a value the library would
 * refuse is refused by the parser, and --help shows the real limit (tests/unit/test_args.c
 * checks each against its constant). */
#define ARG_D_MODEL "[1, 16384]"     /* QKV_MAX_D_MODEL; also the most heads */
#define ARG_FFN "[1, 65536]"         /* QKV_MAX_FFN */
#define ARG_LAYERS "[1, 256]"        /* QKV_MAX_LAYERS */
#define ARG_LAYERS_GE0 "[0, 256]"    /* QKV_MAX_LAYERS, where 0 means none or unset */
#define ARG_MAX_LEN "[2, 65536]"     /* QKV_MAX_LEN */
#define ARG_LR "(0, 10]"             /* QKV_MAX_LR */
#define ARG_LR_FACTOR "(0, 100]"     /* QKV_MAX_LR_FACTOR */
#define ARG_WEIGHT_DECAY "[0, 1]"    /* QKV_MAX_WEIGHT_DECAY */
#define ARG_ADAM_EPS "(0, 1]"        /* QKV_MAX_ADAM_EPS */

/* A range in numbers: lo < x < hi, with either end closed; +-inf where there is none. */
typedef struct {
    double lo, hi;
    int lo_closed, hi_closed;
} opt_range;

/* Reads a range text (see opt_spec.range); 0 on success, -1 if it is not one. */
int args_range_parse(const char *text, opt_range *r);

/* 0 if o's current value lies in its range; otherwise prints "WHO: --NAME must be RANGE (got
 * V)" followed by " in WHERE" when WHERE is given, and returns -1. */
int args_check(const opt_spec *o, const char *who, const char *where);

/* Every numeric row of opts has a valid range and every string or flag row none; otherwise
 * prints which row is wrong and returns -1. */
int args_table_check(const opt_spec *opts, const char *who);

/* Parses argv[first..argc) against opts (terminated by a {NULL} entry). Accepts --name value
 * and --name=value; --help prints usage on stdout and returns 1. Every value is checked against
 * its option's range. Returns 0 on success, 1 after --help, -1 on error (a message on stderr
 * that starts with "qkv COMMAND:", COMMAND being argv[1]). */
int args_parse(int argc, char **argv, int first, const opt_spec *opts, const char *usage);
void args_usage(const opt_spec *opts, const char *usage);

/* Whether argv[first..argc) sets --name (as "--name" or "--name=..."), on the command line or
 * in a --config file: for refusing options that a combination would silently ignore.
 * args_typed: on the command line itself (a run's train.json records every option, those its
 * run ignored included, and stays a valid --config). */
int args_given(int argc, char **argv, int first, const char *name);
int args_typed(int argc, char **argv, int first, const char *name);

#endif
