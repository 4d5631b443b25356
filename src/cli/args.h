/* SPDX-License-Identifier: MIT */
/* A small command-line option parser: each subcommand lists its options in a table, once.
 * The table is what the command parses, what --help prints (and so the man page and the
 * shell completion, both made from --help), and, for the commands that record their runs
 * (qkv train, train-lm), what a run records and how a resumed run compares (qkv/run.h; the training commands' rows
 * come from the library's table, run_options.h). */
#ifndef QKV_CLI_ARGS_H
#define QKV_CLI_ARGS_H

#include <stdint.h>

#include "qkv.h"

typedef enum {
    OPT_INT,    /* int *, with a range; N in --help */
    OPT_FLOAT,  /* float *, with a range; FLOAT */
    OPT_U64,    /* uint64_t *, with a range; N */
    OPT_FLAG,   /* int *: --name sets it, with no value */
    OPT_STRING, /* const char **: any text; TEXT */
    OPT_FILE,   /* const char **: a file; FILE (and completed as one) */
    OPT_DIR,    /* const char **: a directory; DIR */
    OPT_CHOICE, /* opt_choice *: one of a set of names, shown as a|b|c */
    OPT_ALIAS,  /* const char *: the name of the option this is another name of; a one-letter
                 * name is a short option (-m for --model) */
} opt_type;

/* The value of an OPT_CHOICE: one of the library's enums (qkv/core.h, "Names of the
 * library's enums"), or, when local is set, one of the command's own names. */
typedef struct {
    qkv_enum names;
    const char *const *local; /* NULL-terminated */
    int value;
} opt_choice;

typedef struct {
    const char *name;  /* without the leading "--" */
    opt_type type;
    void *value;       /* as opt_type says */
    const char *help;
    /* Numeric options: the values accepted, as an interval "[0, 1)", "(0, 1]", "[1, 65536]" or
     * a bound "> 0", ">= 1", "<= 10". Checked by args_parse (and by --config and --resume) and
     * shown by --help. NULL for the others; a numeric row without a valid range makes every
     * parse of its table fail (tests/e2e/test_options.sh runs every --help). */
    const char *range;
    /* What a run records of the option (qkv/run.h): NULL, or "WHERE [KEY]" with WHERE
     *   model  config.json: defines the model; a resumed run must not change it
     *   data   train.json: defines the data or its order; must not change either
     *   train  train.json: how the run learns from here on; a resumed run may change it
     * and KEY its key there when that is not the name with '_' for '-' ("!KEY": a flag
     * recorded as its opposite, --no-bleu as "valid_bleu"). A --config file may name the
     * option by KEY too, so that what a run records is a valid --config. Checked as ranges
     * are. */
    const char *record;
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

/* A range text (opt_spec.range) is read by qkv_range_parse, as the library reads its own. */

/* What a run records of o (qkv_record_parse of its record text): 1 and *r when o is recorded,
 * 0 when not, -1 when its record text is not one. */
int args_record(const opt_spec *o, qkv_record *r);

/* The option a table row stands for: the row itself, or the row an alias names. */
const opt_spec *args_target(const opt_spec *opts, const opt_spec *o);

/* The name of an OPT_CHOICE's value v (NULL: none). */
const char *args_choice_name(const opt_choice *c, int v);
/* An OPT_CHOICE's value from a name: 0, or -1 after printing "WHO: --NAME 'x': expected a, b
 * or c" followed by " in WHERE" when WHERE is given. */
int args_choice_set(const opt_spec *o, const char *name, const char *who, const char *where);

/* 0 if o's current value lies in its range; otherwise prints "WHO: --NAME must be RANGE (got
 * V)" followed by " in WHERE" when WHERE is given, and returns -1. */
int args_check(const opt_spec *o, const char *who, const char *where);

/* Every numeric row of opts has a valid range and every other row none, every record text
 * and alias is valid, and no name is given twice; otherwise prints which row is wrong and
 * returns -1. */
int args_table_check(const opt_spec *opts, const char *who);

/* Parses argv[first..argc) against opts (terminated by a {0} entry). Accepts --name value,
 * --name=value and -x value for a short alias; --help (-h) prints usage on stdout and returns
 * 1. Every value is checked against its option's range. Returns 0 on success, 1 after --help,
 * -1 on error (a message on stderr that starts with "qkv COMMAND:", COMMAND being argv[1]). */
int args_parse(int argc, char **argv, int first, const opt_spec *opts, const char *usage);
/* The same for a command that also takes words that are not options (qkv average's model
 * directories): up to max_words of them, in order, into words (*n_words of them). */
int args_parse_words(int argc, char **argv, int first, const opt_spec *opts, const char *usage,
                     const char **words, int max_words, int *n_words);
void args_usage(const opt_spec *opts, const char *usage);

/* Whether argv[first..argc) sets the option named name (by any of its names), on the command
 * line or in a --config file: for refusing options that a combination would silently ignore.
 * args_typed: on the command line itself (a run's train.json records every option, those its
 * run ignored included, and stays a valid --config). */
int args_given(int argc, char **argv, int first, const opt_spec *opts, const char *name);
int args_typed(int argc, char **argv, int first, const opt_spec *opts, const char *name);

#endif
