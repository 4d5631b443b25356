/* SPDX-License-Identifier: MIT */
/* What the subcommands share: reading input, threads, precision. */
#ifndef QKV_CLI_COMMON_H
#define QKV_CLI_COMMON_H

#include <stdio.h>

#include "qkv.h"

/* Reads all of a file ("-" or NULL: stdin) into memory, NUL-terminated. */
char *cli_read_all(const char *path, size_t max_bytes, size_t *len);
/* cli_read_all of a file that must be a regular file: a model's, a run's or a configuration's
 * (qkv_read_regular_file). */
char *cli_read_regular(const char *path, size_t max_bytes, size_t *len);

/* Lines 1..count of a file as sacreBLEU reads references (a final \r dropped; count < 0:
 * every line), or with tsv the text between each line's first and second tab: *lines gets
 * *count strings pointing into *text (free both). Returns 0, or -1 after printing why (a file
 * with fewer lines, a line without a tab, a NUL byte). */
int cli_read_lines(const char *path, int tsv, int *count, char ***lines, char **text);

/* The next line of in (a pipe, a terminal: read as it comes) without its "\n" or "\r\n",
 * NUL-terminated, in *line (grown as needed, *cap bytes): 1, with *len its length; 0 at the
 * end; -1 after printing why (name:number: a line over QKV_MAX_LINE_BYTES, a NUL byte, a
 * read error). */
int cli_read_line(FILE *in, const char *name, long number, char **line, size_t *cap,
                  size_t *len);

/* qkv_translate_words over words in parts of o->batch sentences (batches are o->batch
 * consecutive sentences either way, and the results do not depend on them), merged into one
 * result; when stderr is a terminal a progress line "WHO: n/N sentences" is redrawn after each
 * part and ended, and never otherwise. */
qkv_status cli_translate_words(qkv_translations *out, qkv_translator *t,
                               const qkv_sentences *words, const qkv_translate_options *o,
                               const char *who, qkv_error *err);

/* The command line as one line: the holder a run directory's lock names. */
void cli_command_line(char *out, size_t cap, int argc, char **argv);
/* Claims DIR for a model written whole (qkv average, an import; qkv_run_dir_claim), the
 * command line naming the holder, with --overwrite or not. NULL after printing why. */
qkv_run_dir *cli_claim_model_dir(const char *dir, int overwrite, int argc, char **argv);

/* Whether out may receive what cmd writes of the model in src: 0; or, printed, 2 when out is
 * src, inside it or above it (the model's own files would be replaced), 1 when out holds
 * files and overwrite is not set. */
int cli_output_dir(const char *cmd, const char *out, const char *src, int overwrite);
/* The option rows of the commands that write a model directory made from others (import,
 * export, quantize, average): --out DIR (-o) and --overwrite, each command's help with them. */
#define CLI_OUT_ROWS(out, help)                                                               \
    {"out", OPT_DIR, out, help, NULL, NULL}, {"o", OPT_ALIAS, "out", NULL, NULL, NULL}
#define CLI_OVERWRITE_ROW(overwrite, help) {"overwrite", OPT_FLAG, overwrite, help, NULL, NULL}
/* Sets the thread count from --threads (0: keep the runtime's default). */
void cli_threads(int n);

/* The help lines of --precision (an OPT_CHOICE of QKV_ENUM_PRECISION) and --kv-cache
 * (QKV_ENUM_KV_CACHE). The training commands take fp32 or bf16: cli_train_precision prints
 * why int8 (for inference only) is not, and returns -1. */
#define CLI_PRECISION_HELP                                                                 \
    "how the linear layers multiply: in float32, in bfloat16 (AVX512-BF16) or with int8 " \
    "weights and activations (AVX512-VNNI)"
#define CLI_TRAIN_PRECISION_HELP                                                  \
    "how the linear layers multiply: in float32, or in bfloat16 (AVX512-BF16); " \
    "int8 is for inference only"
int cli_train_precision(qkv_precision p);
/* --device (an OPT_CHOICE of QKV_ENUM_DEVICE). cli_device refuses a GPU that is not there (a
 * qkv built without CUDA, no driver, no GPU) before anything is read or made: 0, or 1 after
 * printing "qkv CMD: ..." with the library's reason. */
#define CLI_DEVICE_HELP                                                                       \
    "where the model computes: cpu, or cuda (the first NVIDIA GPU; a qkv built with make " \
    "CUDA=1, docs/gpu.md)"
int cli_device(qkv_device d, const char *cmd);
#define CLI_KV_CACHE_HELP                                                                    \
    "the key-value cache's type: auto (bf16 at --precision bf16, else fp32), fp32 or bf16 " \
    "(half the bytes per step)"

/* A language model's directory (qkv train-lm): the model, its vocabulary and train.json's
 * settings; loaded, they are the generator's (gen), made for training, the directory's own. */
typedef struct {
    qkv_generator *gen;
    qkv_lm *model;
    qkv_vocab vocab;
    int byte_level;       /* train.json "vocab": "byte" */
    int context, batch;   /* train.json, 0 if unknown */
    float val_fraction;   /* train.json, 0.1 if unknown */
} lm_dir;

/* Loads DIR's model, vocabulary and training settings, moves the model to device and gives
 * it the precision prec unless it is NULL; prints the error and returns -1. */
int lm_dir_load(lm_dir *d, const char *dir, const qkv_precision *prec, qkv_device device);
void lm_dir_free(lm_dir *d);
/* The positional table is max_len x d_model floats: over 1 GiB, prints why "CMD: --LEN_OPTION
 * N x --d-model C" cannot be meant and returns -1. */
int cli_positions_fit(const char *cmd, const char *len_option, int max_len, int d_model);

#endif
