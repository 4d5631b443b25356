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
#include "cli/mpi_reducer.h"

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

/* ---- a training command (qkv train, qkv train-lm) ---------------------------------------- */

/* What a training command takes beside the run's options. A command with more of its own
 * begins its struct with one. */
typedef struct {
    cli_run_options run;
    const char *out;
    int threads, quiet, overwrite, resume, bucket_kb;
    opt_choice allreduce;
} cli_train;

/* The help of the rows every training command has. */
#define CLI_TRAIN_THREADS_HELP \
    "threads per rank (0: all cores; under mpirun, shared among the ranks of a machine)"
#define CLI_TRAIN_ALLREDUCE_HELP                                                           \
    "under mpirun, how the ranks sum the gradients: flat (one sum after the backward pass) " \
    "or bucketed (each bucket as soon as the backward pass has it, overlapping the pass)"
#define CLI_TRAIN_BUCKET_KB_HELP "bucketed: KiB of gradients per sum"
#define CLI_TRAIN_RESUME_HELP                                                             \
    "continue from DIR/checkpoint.safetensors, with the options it recorded (those defining " \
    "the model or data cannot change)"
#define CLI_TRAIN_OVERWRITE_HELP \
    "replace what DIR holds (a trained model, another run, files of a run's names)"

/* What one training command does in cli_train_main's steps; t is the first member of the
 * command's own struct. */
typedef struct {
    const char *name; /* "qkv train": its messages' prefix */
    qkv_run_kind kind;
    const char *usage;
    /* The option table over t into opts, {0}-terminated (the run's rows as RUN_ROW). */
    void (*table)(cli_train *t, opt_spec *opts);
    /* The options as parsed (a resumed run's record read and the command line parsed over
     * it) checked and handed to the run: the exit status, or -1 to go on. */
    int (*check)(cli_train *t, opt_spec *opts, int argc, char **argv);
    /* Prepares and trains the claimed run, printing its progress: the exit status. */
    int (*run)(cli_train *t, int writer, int ranks);
    void (*notice)(const char *text, void *ctx); /* the run's notices */
} cli_train_command;

/* A training command on this rank of job (cli_ranks_run): makes the run, fills and parses
 * the table (opts: room for it), claims --out (resuming: first, then reads the run's record
 * and parses the command line again over it), checks, trains. The exit status. */
int cli_train_main(const cli_train_command *cmd, cli_train *t, opt_spec *opts, int argc,
                   char **argv, cli_ranks *job);

/* Prints a library error as "WHO: line" for each of its lines. */
void cli_print_error(const char *who, const qkv_error *err);

#endif
