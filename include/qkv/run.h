/* SPDX-License-Identifier: MIT */
/* qkv/run.h: a training run as `qkv train` and `qkv train-lm` make one, for any front end: the
 * options by name (one table per kind of run: what a command line parses, what a binding
 * checks, what the run records in train.json), the run directory that belongs to it, and the
 * whole setup between them and the training loop: the corpus read, the tokenizer built or
 * loaded, the model made, the data encoded, config.json and train.json written, the run
 * resumed. The qkv command and the Python package are two front ends over it:
 *
 *     qkv_run *r;
 *     qkv_run_create(&r, QKV_RUN_TRANSLATION, &err);
 *     qkv_run_set_text(r, qkv_run_option_find(QKV_RUN_TRANSLATION, "data", NULL), "fra.txt", &err);
 *     qkv_run_set_int(r, qkv_run_option_find(QKV_RUN_TRANSLATION, "epochs", NULL), 10, &err);
 *     if (qkv_run_claim(r, "model", QKV_RUN_NEW, "my program", &err) ||
 *         qkv_run_check(r, &err) || qkv_run_prepare(r, NULL, &err) || qkv_run_train(r, &err))
 *         fprintf(stderr, "%s\n", err.msg);
 *     qkv_run_free(r);
 *
 * Part of qkv.h, which includes every part; its opening comment is the tour. */
#ifndef QKV_API_RUN_H
#define QKV_API_RUN_H

#include "qkv/training.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------
 * Run directories
 *
 * An output directory belongs to one run (a training run, or a model written whole by an
 * import or an average): the run claims it before writing anything, and nothing saved in it is
 * lost by accident. Claiming a directory
 *   - creates it if needed and takes an exclusive lock on it (flock on DIR/.qkv.lock, which
 *     names the holder: its pid and what the caller says it is) for as long as the claim
 *     lasts: a second claim of the same directory is refused, naming the first;
 *   - removes the temporaries (NAME.tmp.PID.K, the one name qkv gives them) that a killed run
 *     left, when PID is gone (each removal is a notice);
 *   - refuses what must not be written over: a directory holding anything but a run of the same
 *     kind (a file of another name, another kind's config.json, a symbolic link where a run
 *     writes a file) unless the caller overwrites, and a trained model or a run's checkpoint
 *     unless the caller resumes or overwrites;
 *   - resuming needs the same kind and a checkpoint; overwriting (or a new run over an
 *     unfinished one that has no checkpoint) removes the previous run's files first (every name
 *     a run of any kind writes, its best/, epoch-NNN/ and step-NNNNNNN/ models, links themselves
 *     and never what they point at);
 *   - a run that ends without writing anything leaves nothing: releasing a directory that holds
 *     only the lock removes the lock, and the directory if the claim made it.
 * ------------------------------------------------------------------------------------- */

typedef enum {
    QKV_RUN_DIR_TRANSLATION = 0, /* qkv train: an encoder-decoder run */
    QKV_RUN_DIR_LM = 1,          /* qkv train-lm: a language model's run */
    QKV_RUN_DIR_MODEL = 2,       /* a model directory written whole (qkv average, an import) */
} qkv_run_dir_kind;

typedef enum {
    QKV_RUN_NEW = 0,       /* refuse a trained model, a checkpoint or anything foreign */
    QKV_RUN_RESUME = 1,    /* needs a run of this kind with its checkpoint */
    QKV_RUN_OVERWRITE = 2, /* replace whatever run (or foreign file of a run's names) is there */
} qkv_run_mode;

/* How messages name an option and its value: as the command line spells them ("--d-model 64",
 * "--resume"), or as keyword arguments ("d_model=64", "resume=True"). */
typedef enum { QKV_NAMING_COMMAND = 0, QKV_NAMING_KEYWORDS = 1 } qkv_naming;

typedef struct qkv_run_dir qkv_run_dir;

/* Claims dir for a run of kind k in mode; holder says who holds it (a command line) in the
 * lock file and in a second run's message. notice (may be NULL) receives what the claim did
 * besides (a stale temporary removed). Errors: QKV_ERR_IO for what refuses the claim, naming
 * the directory, the file and what to do about it (in naming's words). */
QKV_API
qkv_status qkv_run_dir_claim(qkv_run_dir **rd, const char *dir, qkv_run_dir_kind k,
                             qkv_run_mode mode, const char *holder, qkv_naming naming,
                             void (*notice)(const char *text, void *ctx), void *ctx,
                             qkv_error *err);
/* Releases the claim (NULL: nothing), removing the lock and the directory it made when
 * nothing else was written there. */
QKV_API
void qkv_run_dir_release(qkv_run_dir *rd);

/* ---------------------------------------------------------------------------------------
 * The options of a run
 * ------------------------------------------------------------------------------------- */

typedef enum {
    QKV_RUN_TRANSLATION = 0, /* qkv train: an encoder-decoder on sentence pairs */
    QKV_RUN_LM = 1,          /* qkv train-lm: a decoder-only language model on a text */
} qkv_run_kind;

typedef enum {
    QKV_OPTION_INT,    /* an int within range */
    QKV_OPTION_FLOAT,  /* a float within range */
    QKV_OPTION_U64,    /* a 64-bit unsigned integer within range (a seed) */
    QKV_OPTION_FLAG,   /* on or off (off by default) */
    QKV_OPTION_FILE,   /* a path, or none */
    QKV_OPTION_TEXT,   /* a name, or none */
    QKV_OPTION_CHOICE, /* one of a set of names (the value is its index) */
} qkv_option_type;

/* One option of a kind of run. */
typedef struct {
    const char *name;  /* the command line's, without "--": "d-model" (keywords: d_model) */
    qkv_option_type type;
    const char *help;  /* one line */
    /* QKV_OPTION_INT, _FLOAT, _U64: the values accepted, an interval "[0, 1)", "(0, 1]" or a
     * bound "> 0", ">= 1"; NULL for the others. */
    const char *range;
    /* What the run records of it: NULL (nothing), or "WHERE [KEY]" with WHERE
     *   model  config.json: defines the model; a resumed run must not change it
     *   data   train.json: defines the data or its order; must not change either
     *   train  train.json: how the run learns from here on; a resumed run may change it
     * and KEY its key there when that is not the name with '_' for '-' ("!KEY": a flag recorded
     * as its opposite, no-bleu as "valid_bleu"). */
    const char *record;
    /* QKV_OPTION_CHOICE: the names, from one of the library's enums (choices_local NULL), or
     * from choices_local (NULL-terminated). */
    qkv_enum choices;
    const char *const *choices_local;
} qkv_option;

/* The options of a kind of run, in the order a command lists them, ended by a row whose name is
 * NULL; *count (may be NULL) receives how many. */
QKV_API
const qkv_option *qkv_run_options(qkv_run_kind kind, int *count);
/* The index of the option that key names: its name (with '-' or '_'), or the key the run
 * records it under (*inverted, when not NULL, is then 1 for a flag recorded as its opposite:
 * "valid_bleu" names no-bleu). -1 when none. */
QKV_API
int qkv_run_option_find(qkv_run_kind kind, const char *key, int *inverted);
/* The name of choice v of an option (NULL past the last). */
QKV_API
const char *qkv_option_choice(const qkv_option *o, int v);
/* A range text (qkv_option.range) as numbers: lo < x < hi, either end closed; -+infinity
 * where it has none. */
typedef struct {
    double lo, hi;
    int lo_closed, hi_closed;
} qkv_range;
/* Reads a range text: 0 and *r, or -1 when text is not one (NULL, a bad bound, an empty
 * interval). */
QKV_API
int qkv_range_parse(const char *text, qkv_range *r);
/* Whether x lies in r. */
QKV_API
int qkv_range_holds(const qkv_range *r, double x);
/* What a run records of an option, read from its record text (qkv_option.record). */
typedef struct {
    int in_train; /* train.json; else config.json */
    int fixed;    /* a resumed run must not change it */
    int inverted; /* a flag recorded as its opposite */
    char key[64]; /* its key there */
} qkv_record;
/* Reads the record text of the option named name (flag: whether it is a flag): 1 and *r when
 * it records, 0 when record is NULL, -1 when it is not a valid record text. */
QKV_API
int qkv_record_parse(const char *record, const char *name, int flag, qkv_record *r);
/* The presets of --preset (qkv_run_apply_preset), NULL-terminated, and one line on each. */
QKV_API
const char *const *qkv_run_preset_names(qkv_run_kind kind);
QKV_API
const char *qkv_run_preset_help(qkv_run_kind kind, const char *name);

/* ---------------------------------------------------------------------------------------
 * A run
 * ------------------------------------------------------------------------------------- */

typedef struct qkv_run qkv_run;

/* What a front end hears from a run, every member optional. */
typedef struct {
    void (*progress)(const qkv_train_progress *p, void *ctx);       /* QKV_RUN_TRANSLATION */
    void (*lm_progress)(const qkv_lm_train_progress *p, void *ctx); /* QKV_RUN_LM */
    /* Asked after every step: nonzero stops there, checkpointed and resumable. */
    int (*should_stop)(void *ctx);
    /* What the caller should show its user: a warning ("... sentence pairs are longer than
     * --max-tokens 10 ..."), an option a resumed run changes, a preset's values. One line,
     * without a newline, in the run's naming. */
    void (*notice)(const char *text, void *ctx);
    void *ctx;
} qkv_run_hooks;

/* What a prepared run holds (qkv_run_prepare). */
typedef struct {
    int resuming;
    size_t parameters;
    qkv_precision precision;
    /* QKV_RUN_TRANSLATION */
    int pairs, valid_pairs;  /* training pairs; held-out pairs (0: no validation) */
    int src_vocab, tgt_vocab;
    qkv_tokenizer_kind tokenizer;
    /* QKV_RUN_LM */
    size_t tokens, train_tokens, val_tokens, unknown; /* the text's; unknown: read as <unk> */
    int vocab;
    qkv_attention_kind attention;
} qkv_run_info;

/* A run of kind with every option at its default. */
QKV_API
qkv_status qkv_run_create(qkv_run **r, qkv_run_kind kind, qkv_error *err);
/* Frees the run and releases its directory. */
QKV_API
void qkv_run_free(qkv_run *r);
QKV_API
qkv_run_kind qkv_run_get_kind(const qkv_run *r);
QKV_API
void qkv_run_set_naming(qkv_run *r, qkv_naming naming);
QKV_API
void qkv_run_set_hooks(qkv_run *r, const qkv_run_hooks *h);
/* Data-parallel over reducer->size ranks (qkv_train_options.reducer): every rank makes the
 * same run; rank 0 alone claims the directory and writes in it. */
QKV_API
void qkv_run_set_reducer(qkv_run *r, const qkv_reducer *reducer);

/* The value of option opt (an index of qkv_run_options). Setting checks it as the command line
 * does (the option's range, its choices), QKV_ERR_ARG in the run's naming otherwise; setting
 * an option whose type is not the call's is QKV_ERR_ARG too. _int sets INT, FLAG (0 or 1) and
 * CHOICE (by index); _text sets FILE and TEXT (NULL: none) and CHOICE (by name). A file's name is
 * copied. */
QKV_API
qkv_status qkv_run_set_int(qkv_run *r, int opt, long long v, qkv_error *err);
QKV_API
qkv_status qkv_run_set_u64(qkv_run *r, int opt, uint64_t v, qkv_error *err);
QKV_API
qkv_status qkv_run_set_float(qkv_run *r, int opt, double v, qkv_error *err);
QKV_API
qkv_status qkv_run_set_text(qkv_run *r, int opt, const char *v, qkv_error *err);
QKV_API
long long qkv_run_get_int(const qkv_run *r, int opt);
QKV_API
uint64_t qkv_run_get_u64(const qkv_run *r, int opt);
QKV_API
float qkv_run_get_float(const qkv_run *r, int opt);
/* A file's or a text's (NULL: none), or a choice's name; valid until the option is set again. */
QKV_API
const char *qkv_run_get_text(const qkv_run *r, int opt);

/* Sets the options that preset `name` gives (qkv_run_preset_names: the paper's
 * transformer-base and transformer-big, d2l's Transformer), each a notice; the run records the
 * preset's name. A front end applies it before the options its user gives, which win. */
QKV_API
qkv_status qkv_run_apply_preset(qkv_run *r, const char *name, qkv_error *err);

/* Claims the run directory out for the run (qkv_run_dir_claim; holder as there). Resuming,
 * also reads what the run recorded (its checkpoint's step, config.json, train.json) and sets
 * every recorded option from it, checked as when set (an error names the file); the front end
 * then sets the options its user gives, and qkv_run_check compares. */
QKV_API
qkv_status qkv_run_claim(qkv_run *r, const char *out, qkv_run_mode mode, const char *holder,
                         qkv_error *err);

/* Checks the options together: what a run cannot mean (no data, validation files that do
 * not pair, a sentence length over the model's, ...), QKV_ERR_ARG saying why. Resuming, then
 * compares them with what the run recorded: an option that defines the model or the data
 * must not change (QKV_ERR_ARG naming each that differs, with both values and the file); the
 * others may, each change a notice and an entry of train.json's "history". */
QKV_API
qkv_status qkv_run_check(qkv_run *r, qkv_error *err);

/* Everything up to training: reads the corpus (and the held-out one), builds the tokenizer
 * and model of a new run (writing its vocabularies or subword models, config.json) or loads
 * those of the run being resumed, encodes the data, sets the precision, writes train.json.
 * info (may be NULL) receives what the run holds. */
QKV_API
qkv_status qkv_run_prepare(qkv_run *r, qkv_run_info *info, qkv_error *err);

/* Trains (qkv_train or qkv_lm_train) with the hooks, until the run ends or is stopped. */
QKV_API
qkv_status qkv_run_train(qkv_run *r, qkv_error *err);

/* QKV_RUN_LM, once trained: the loss per token over the whole held-out end of the text (as
 * qkv_lm_evaluate), *count the tokens predicted; QKV_ERR_ARG when fewer than 2 are held out. */
QKV_API
qkv_status qkv_run_held_out_loss(qkv_run *r, double *loss, int64_t *count, qkv_error *err);

#ifdef __cplusplus
}
#endif

#endif /* QKV_API_RUN_H */
