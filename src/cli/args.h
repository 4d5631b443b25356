/* A small command-line option parser: each subcommand lists its options in a table. */
#ifndef QKV_CLI_ARGS_H
#define QKV_CLI_ARGS_H

#include <stdint.h>

typedef enum { OPT_INT, OPT_FLOAT, OPT_STRING, OPT_FLAG, OPT_U64 } opt_type;

typedef struct {
    const char *name; /* without the leading "--" */
    opt_type type;
    void *value;      /* int*, float*, const char**, int* (flag), uint64_t* */
    const char *help;
} opt_spec;

/* Parses argv[first..argc) against opts (terminated by a {NULL} entry). Accepts --name value
 * and --name=value; --help prints usage and returns 1. Returns 0 on success, 1 after --help,
 * -1 on error (a message on stderr). */
int args_parse(int argc, char **argv, int first, const opt_spec *opts, const char *usage);
void args_usage(const opt_spec *opts, const char *usage);

#endif
