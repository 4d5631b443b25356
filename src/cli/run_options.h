/* SPDX-License-Identifier: MIT */
/* The training commands' options over the library's (qkv/run.h): qkv train and qkv train-lm
 * list their options in one table each, as every command does, but the rows of a run's
 * options (name, type, help, range, what the run records) come from the library's table, where
 * the Python package finds them too. A command's table names each such row with RUN_ROW(name),
 * in the place --help shows it; cli_run_table fills it in, pointing at a value here. Parsing
 * sets these values; cli_run_pull copies the run's into them (its defaults, a preset, a resumed
 * run's record) and cli_run_push hands them back. */
#ifndef QKV_CLI_RUN_OPTIONS_H
#define QKV_CLI_RUN_OPTIONS_H

#include "cli/args.h"

/* A row of the run's option name, filled in by cli_run_table. */
#define RUN_ROW(name) {name, OPT_ALIAS, NULL, NULL, NULL, NULL}

typedef union {
    int i;          /* OPT_INT, OPT_FLAG */
    float f;        /* OPT_FLOAT */
    uint64_t u;     /* OPT_U64 */
    const char *s;  /* OPT_FILE, OPT_STRING */
    opt_choice c;   /* OPT_CHOICE */
} cli_run_value;

typedef struct {
    qkv_run *run;
    cli_run_value v[64]; /* by the library's option index */
} cli_run_options;

/* Fills every RUN_ROW of opts from the library's table of run's kind; -1 (message printed) if a
 * row names no option of the run, or an option of the run has no row. */
int cli_run_table(cli_run_options *c, opt_spec *opts, const char *cmd);
/* The run's values into the rows' values. */
void cli_run_pull(cli_run_options *c);
/* The rows' values into the run: 0, or -1 after printing why (prefixed by cmd). */
int cli_run_push(cli_run_options *c, const char *cmd);

/* Prints a library error as "WHO: line" for each of its lines. */
void cli_print_error(const char *who, const qkv_error *err);

#endif
