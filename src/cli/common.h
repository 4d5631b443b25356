/* What the subcommands share: loading a model directory, translating a list of sentences. */
#ifndef QKV_CLI_COMMON_H
#define QKV_CLI_COMMON_H

#include "qkv.h"

typedef struct {
    qkv_transformer *model;
    qkv_vocab src, tgt;
    int num_steps;   /* the length training used (train.json), 0 if unknown */
    int whitespace;  /* text.json "tokenizer": "whitespace" (no d2l preprocessing) */
    int source_bos;  /* text.json "source_bos": sources start with <bos> (PyTorch's tutorial) */
} cli_model;

/* The sentences of text, tokenised as the model expects. */
qkv_status cli_tokenize(const cli_model *cm, qkv_sentences *out, const char *text, size_t len,
                        const char *name, qkv_error *err);

/* Loads DIR (config.json, model.safetensors, src_vocab.txt, tgt_vocab.txt); prints the error
 * and returns -1 on failure. */
int cli_model_load(cli_model *cm, const char *dir);
void cli_model_free(cli_model *cm);

/* Greedy translations of every sentence of src: ids (count, max_len) and lengths (count).
 * Sources longer than the model allows are truncated with a warning on stderr (once).
 * Returns -1 (message printed) on failure. */
int cli_translate(cli_model *cm, const qkv_sentences *src, int max_len, int batch, int *ids,
                  int *lens);

/* Reads all of a file ("-" or NULL: stdin) into memory, NUL-terminated. */
char *cli_read_all(const char *path, size_t *len);

/* Sets the thread count from --threads (0: keep the runtime's default). */
void cli_threads(int n);

#endif
