/* SPDX-License-Identifier: MIT */
/* A training run (qkv/run.h) inside the library: its options' values and what a prepared run
 * holds. run_options.c has the tables and the values, run_record.c what a run records and how
 * a resumed one compares, run.c the setup and the training. Private to the library. */
#ifndef QKV_TRAINING_RUN_INTERNAL_H
#define QKV_TRAINING_RUN_INTERNAL_H

#include <cJSON.h>

#include "core/internal.h"

/* The options of qkv train, by index into the table (run_options.c). */
enum {
    T_DATA, T_SRC, T_TGT, T_PRESET, T_TOKENIZER, T_VOCAB_SIZE, T_JOINT_BPE, T_SPM_TYPE,
    T_D_MODEL, T_HEADS, T_FFN, T_LAYERS, T_ENC_LAYERS, T_DEC_LAYERS, T_DROPOUT, T_MAX_LEN,
    T_BIAS, T_PRE_NORM, T_FINAL_NORM, T_ACT, T_TIE, T_LEARNED_POS, T_BATCH, T_BATCH_TOKENS,
    T_ACCUM, T_MAX_TOKENS, T_SCHEDULE, T_LR, T_WARMUP, T_LR_FACTOR, T_BETA1, T_BETA2,
    T_ADAM_EPS, T_WEIGHT_DECAY, T_CLIP, T_LABEL_SMOOTHING, T_LOSS, T_EPOCHS, T_MINUTES,
    T_NUM_EXAMPLES, T_MIN_FREQ, T_VALID, T_VALID_SRC, T_VALID_TGT, T_NO_BLEU, T_VALID_EVERY,
    T_PATIENCE, T_KEEP_EPOCHS, T_SAVE_EVERY, T_KEEP_LAST, T_SEED, T_PRECISION, T_DEVICE,
    T_CHECKPOINT_EVERY, T_SKIP_NONFINITE, T_STOP_AFTER_STEPS, T_COUNT
};
/* The command's own choices of qkv train (the library's enums name the others). */
enum { TOKENIZER_WORD, TOKENIZER_BPE, TOKENIZER_SPM };
enum { LOSS_TOKEN, LOSS_D2L };

/* The options of qkv train-lm. */
enum {
    L_DATA, L_VOCAB, L_ATTENTION, L_D_MODEL, L_HEADS, L_FFN, L_LAYERS, L_DROPOUT, L_CONTEXT,
    L_PRE_NORM, L_TIE, L_ACT, L_LEARNED_POS, L_NO_BIAS, L_BATCH, L_ACCUM, L_STEPS, L_MINUTES,
    L_LR, L_WARMUP, L_COSINE, L_BETA2, L_WEIGHT_DECAY, L_CLIP, L_VAL_FRACTION, L_EVAL_EVERY,
    L_EVAL_TOKENS, L_LOG_EVERY, L_SEED, L_PRECISION, L_STOP_AFTER_STEPS, L_COUNT
};
enum { VOCAB_CHAR, VOCAB_BYTE };

enum { RUN_MAX_OPTIONS = 64 };

/* An option's value: INT, FLAG and CHOICE in i, FLOAT in f, U64 in u, FILE and TEXT in s
 * (owned; NULL: none). */
typedef union {
    int i;
    float f;
    uint64_t u;
    char *s;
} run_value;

struct qkv_run {
    qkv_run_kind kind;
    const qkv_option *opts;
    int n_opts;
    run_value v[RUN_MAX_OPTIONS];
    run_value defaults[RUN_MAX_OPTIONS]; /* a default outside its range means "unset" */
    qkv_naming naming;
    qkv_run_hooks hooks;
    const qkv_reducer *reducer;
    int writer;             /* this rank writes the run directory */
    char *out;              /* the run directory, once claimed */
    qkv_run_dir *dir;
    int resuming;
    /* a resumed run's record */
    int64_t resumed_step;
    cJSON *config, *train, *history;
    char config_path[4200], train_path[4200];
    /* a prepared qkv train run */
    qkv_transformer *model;
    qkv_tokenizer tok;
    qkv_corpus corpus, held;
    qkv_sentences held_tgt;   /* the held-out targets as the model's tokens */
    char *ref_text, **refs;   /* and as written, for sacreBLEU */
    int *bufs[8];
    qkv_dataset ds, vs;
    qkv_train_options o;
    /* a prepared qkv train-lm run */
    qkv_lm *lm;
    qkv_vocab vocab;
    int *ids;
    size_t n_train, n_val;
    qkv_lm_train_options lo;
    int prepared;
};

/* ---- run_options.c ---- */
/* The option's name as the run's naming spells it ("--d-model", "d_model") into out. */
const char *run_spelled(const qkv_run *r, int opt, char *out, size_t cap);
/* The option's value as text ("%.7g" for a float: as train.json writes it). */
void run_value_text(const qkv_run *r, int opt, char *out, size_t cap);
/* A numeric value checked against the option's range: QKV_OK, or QKV_ERR_ARG "NAME must be
 * RANGE (got V)" followed by " in WHERE" when where is given. */
qkv_status run_check_range(const qkv_run *r, int opt, double v, const char *got,
                           const char *where, qkv_error *err);
/* The choice named name into *v: QKV_OK, or QKV_ERR_ARG naming the choices (and where). */
qkv_status run_choice_of(const qkv_run *r, int opt, const char *name, int *v, const char *where,
                         qkv_error *err);
/* 1 and *rec when opt is recorded, 0 when not. */
int run_record_parse(const qkv_option *o, qkv_record *rec);
/* A notice to the front end (printf-style). */
void run_notice(const qkv_run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- run_record.c ---- */
/* Reads the resumed run's checkpoint step, config.json and train.json, and sets every
 * recorded option from them. */
qkv_status run_record_read(qkv_run *r, qkv_error *err);
/* Compares the options with the record (qkv_run_check's second half); makes r->history. */
qkv_status run_record_compare(qkv_run *r, qkv_error *err);
/* Writes out/train.json: every option recorded there that applies, the history, and for a
 * language model the split's sizes. */
qkv_status run_record_write(const qkv_run *r, qkv_error *err);

#endif
