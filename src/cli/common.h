/* What the subcommands share: reading input, threads, precision. */
#ifndef QKV_CLI_COMMON_H
#define QKV_CLI_COMMON_H

#include "qkv.h"

/* Reads all of a file ("-" or NULL: stdin) into memory, NUL-terminated. */
char *cli_read_all(const char *path, size_t *len);

/* Lines 1..count of a file as sacreBLEU reads references (a final \r dropped; count < 0:
 * every line), or with tsv the text between each line's first and second tab: *lines gets
 * *count strings pointing into *text (free both). Returns 0, or -1 after printing why (a file
 * with fewer lines, a line without a tab). */
int cli_read_lines(const char *path, int tsv, int *count, char ***lines, char **text);

/* Sets the thread count from --threads (0: keep the runtime's default). */
void cli_threads(int n);

/* The help line of --precision, and its value: fp32 or bf16; prints why and returns -1 for
 * anything else. */
#define CLI_PRECISION_HELP "fp32, or bf16: the linear layers' products in bfloat16 (AVX512-BF16)"
int cli_precision(const char *name, qkv_precision *p);

#endif
