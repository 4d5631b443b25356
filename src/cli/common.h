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
    int bpe;         /* text.json "tokenizer": "bpe": d2l words, then subwords */
    qkv_bpe src_bpe, tgt_bpe; /* src_bpe.txt, tgt_bpe.txt (the same file for a joint one) */
} cli_model;

/* The sentences of text, tokenised as the model expects (for a subword model: its pieces). */
qkv_status cli_tokenize(const cli_model *cm, qkv_sentences *out, const char *text, size_t len,
                        const char *name, qkv_error *err);

/* Replaces the word sentences *s of one side (target = 0: source, 1: target) by the model's
 * subword pieces; nothing to do for a word model. Returns -1 (message printed) on failure. */
int cli_subwords(const cli_model *cm, qkv_sentences *s, int target);

/* The text of a translation (ids without <eos>): words joined by spaces, subword pieces
 * joined back into words. Caller frees; NULL (message printed) when out of memory. */
char *cli_detokenize(const cli_model *cm, const int *ids, int n);

/* Words of a translation as ids of words, for BLEU against references interned in `words`
 * (a vocabulary of the reference words): a word it lacks gets an id of its own below zero, so
 * it matches nothing. Writes at most cap ids; returns their count. */
int cli_translation_words(const cli_model *cm, const qkv_vocab *words, int *out, int cap,
                          const int *ids, int n);

/* Loads DIR (config.json, model.safetensors, src_vocab.txt, tgt_vocab.txt, and train.json,
 * text.json and the subword files when present). A file other than config.json and
 * model.safetensors that DIR lacks is taken from DIR/.. (so DIR/best and DIR/epoch-NNN,
 * which training writes with the model alone, load as models). Prints the error and returns
 * -1 on failure. */
int cli_model_load(cli_model *cm, const char *dir);
void cli_model_free(cli_model *cm);

/* Greedy translations of every sentence of src: ids (count, max_len) and lengths (count).
 * Sources longer than the model allows are truncated with a warning on stderr (once).
 * Returns -1 (message printed) on failure. */
int cli_translate(cli_model *cm, const qkv_sentences *src, int max_len, int batch, int *ids,
                  int *lens);

/* The same with beam search (beam NULL or beam->beam == 1 with n_best 1: greedy):
 * ids (count, n_best, max_len), lens (count, n_best), scores (count, n_best) or NULL. */
int cli_translate_beam(cli_model *cm, const qkv_sentences *src, int max_len, int batch,
                       const qkv_beam_options *beam, int *ids, int *lens, double *scores);

/* Reads all of a file ("-" or NULL: stdin) into memory, NUL-terminated. */
char *cli_read_all(const char *path, size_t *len);

/* Sets the thread count from --threads (0: keep the runtime's default). */
void cli_threads(int n);

/* The help line of --precision, and its value: fp32 or bf16; prints why and returns -1 for
 * anything else. */
#define CLI_PRECISION_HELP "fp32, or bf16: the linear layers' products in bfloat16 (AVX512-BF16)"
int cli_precision(const char *name, qkv_precision *p);

#endif
