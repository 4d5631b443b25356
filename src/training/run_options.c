/* SPDX-License-Identifier: MIT */
/* The options of a training run (qkv/run.h): one table per kind of run, in the order the
 * commands list them, and their values. A front end parses its user's words into these; what
 * a run records of each (train.json, config.json) and how a resumed run compares follow from
 * the same rows (run_record.c). */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "training/run_internal.h"

#define GE0 ">= 0"
#define GE1 ">= 1"
#define RATE "[0, 1)"
#define SEED "[0, 18446744073709551615]"
/* the library's limits (qkv/models.h, qkv/training.h) as ranges */
#define D_MODEL "[1, 16384]"   /* QKV_MAX_D_MODEL; also the most heads */
#define FFN "[1, 65536]"       /* QKV_MAX_FFN */
#define LAYERS "[1, 256]"      /* QKV_MAX_LAYERS */
#define LAYERS_GE0 "[0, 256]"  /* QKV_MAX_LAYERS, where 0 means none */
#define MAX_LEN "[2, 65536]"   /* QKV_MAX_LEN */
#define LR "(0, 10]"           /* QKV_MAX_LR */
#define LR_FACTOR "(0, 100]"   /* QKV_MAX_LR_FACTOR */
#define WEIGHT_DECAY "[0, 1]"  /* QKV_MAX_WEIGHT_DECAY */
#define ADAM_EPS "(0, 1]"      /* QKV_MAX_ADAM_EPS */
#define PRECISION_HELP                                                            \
    "how the linear layers multiply: in float32, or in bfloat16 (AVX512-BF16); " \
    "int8 is for inference only"

static const char *const TOKENIZERS[] = {"word", "bpe", "spm", NULL};
static const char *const LOSSES[] = {"token", "d2l", NULL};
static const char *const VOCABS[] = {"char", "byte", NULL};

#define INT(name, help, range, record) {name, QKV_OPTION_INT, help, range, record, 0, NULL}
#define FLOAT(name, help, range, record) {name, QKV_OPTION_FLOAT, help, range, record, 0, NULL}
#define FLAG(name, help, record) {name, QKV_OPTION_FLAG, help, NULL, record, 0, NULL}
#define FILE_(name, help, record) {name, QKV_OPTION_FILE, help, NULL, record, 0, NULL}
#define ENUM(name, help, e, record) {name, QKV_OPTION_CHOICE, help, NULL, record, e, NULL}
#define LOCAL(name, help, names, record) \
    {name, QKV_OPTION_CHOICE, help, NULL, record, 0, names}

/* qkv train. Long: one row per option. */
static const qkv_option TRANSLATION[T_COUNT + 1] = {
    [T_DATA] = FILE_("data", "sentence pairs, source<TAB>target per line (d2l's fra.txt)",
                     "data"),
    [T_SRC] = FILE_("src", "source sentences, one per line (with --tgt)", "data"),
    [T_TGT] = FILE_("tgt", "target sentences, line-aligned with --src", "data"),
    [T_PRESET] = {"preset", QKV_OPTION_TEXT, "the hyper-parameters of transformer-base or "
                                             "transformer-big (the paper's) or d2l (d2l's "
                                             "Transformer); options given win",
                  NULL, "data", 0, NULL},
    [T_TOKENIZER] = LOCAL("tokenizer", "word: d2l's words; bpe: subwords of them; spm: "
                                       "SentencePiece on raw, cased text", TOKENIZERS, "data"),
    [T_VOCAB_SIZE] = INT("vocab-size", "bpe, spm: tokens per vocabulary, reserved ones included",
                         "[5, 1048576]", "data"),
    [T_JOINT_BPE] = FLAG("joint-bpe", "bpe, spm: one encoding and vocabulary for both languages",
                         "data"),
    [T_SPM_TYPE] = ENUM("spm-type", "spm: SentencePiece's model type", QKV_ENUM_SPM_TYPE,
                        "data"),
    [T_D_MODEL] = INT("d-model", "model width", D_MODEL, "model"),
    [T_HEADS] = INT("heads", "attention heads", D_MODEL, "model"),
    [T_FFN] = INT("ffn", "hidden size of the position-wise FFN", FFN, "model"),
    [T_LAYERS] = INT("layers", "encoder and decoder blocks", LAYERS, "model enc_layers"),
    [T_ENC_LAYERS] = INT("enc-layers", "encoder blocks (overrides --layers)", LAYERS_GE0,
                         "model"),
    [T_DEC_LAYERS] = INT("dec-layers", "decoder blocks (overrides --layers)", LAYERS, "model"),
    [T_DROPOUT] = FLOAT("dropout", "dropout rate", RATE, "model"),
    [T_MAX_LEN] = INT("max-len", "longest sequence the model accepts", MAX_LEN, "model"),
    [T_BIAS] = FLAG("bias", "biases in the attention projections", "model"),
    [T_PRE_NORM] = FLAG("pre-norm", "x + Sublayer(LayerNorm(x)) instead of post-norm", "model"),
    [T_FINAL_NORM] = FLAG("final-norm", "a LayerNorm after each stack", "model"),
    [T_ACT] = ENUM("act", "FFN activation (silu: swish)", QKV_ENUM_ACTIVATION, "model"),
    [T_TIE] = ENUM("tie", "weight sharing: output (target embedding = output projection) or "
                          "all (and the source embedding)", QKV_ENUM_TIE, "model"),
    [T_LEARNED_POS] = FLAG("learned-pos", "learned instead of sinusoidal positions", "model"),
    [T_BATCH] = INT("batch", "sentence pairs per batch", "[1, 65536]", "data"),
    [T_BATCH_TOKENS] = INT("batch-tokens", "batches of similar length, pairs x longest <= N (0: "
                                           "--batch)", "[0, 16777216]", "data"),
    [T_ACCUM] = INT("accum", "gradient accumulation: batches per optimizer step (as one batch N "
                             "times larger)", "[1, 1024]", "data"),
    [T_MAX_TOKENS] = INT("max-tokens", "tokens per sentence, <eos> included: longer ones are cut "
                                       "(and counted in a warning), shorter ones padded",
                         "[2, 65536]", "data num_steps"),
    [T_SCHEDULE] = ENUM("schedule", "learning rate: constant (--lr) or noam (the paper's warmup)",
                        QKV_ENUM_LR_SCHEDULE, "train"),
    [T_LR] = FLOAT("lr", "Adam learning rate (constant schedule)", LR, "train"),
    [T_WARMUP] = INT("warmup", "noam: warmup steps", GE1, "train"),
    [T_LR_FACTOR] = FLOAT("lr-factor", "noam: lr = F d_model^-0.5 min(step^-0.5, step "
                                       "warmup^-1.5)", LR_FACTOR, "train"),
    [T_BETA1] = FLOAT("beta1", "Adam's first-moment decay", RATE, "train"),
    [T_BETA2] = FLOAT("beta2", "Adam's second-moment decay", RATE, "train"),
    [T_ADAM_EPS] = FLOAT("adam-eps", "Adam's epsilon", ADAM_EPS, "train"),
    [T_WEIGHT_DECAY] = FLOAT("weight-decay", "decoupled weight decay (AdamW)", WEIGHT_DECAY,
                             "train"),
    [T_CLIP] = FLOAT("clip", "clip the global gradient norm to this (0: off)", GE0, "train"),
    [T_LABEL_SMOOTHING] = FLOAT("label-smoothing", "label smoothing epsilon", RATE, "train"),
    [T_LOSS] = LOCAL("loss", "gradient of: token (per-token mean) or d2l (d2l's scaling)",
                     LOSSES, "train"),
    [T_EPOCHS] = INT("epochs", "passes over the data", GE1, "train"),
    [T_MINUTES] = FLOAT("minutes", "time budget: no epoch starts that would end after it (0: "
                                   "none)", GE0, "train"),
    [T_NUM_EXAMPLES] = INT("num-examples", "use the first N pairs (0: all)", GE0, "data"),
    [T_MIN_FREQ] = INT("min-freq", "word: rarer tokens become <unk>", GE0, "data"),
    [T_VALID] = FILE_("valid", "held-out pairs (TSV): loss and BLEU every epoch, best model",
                      "data"),
    [T_VALID_SRC] = FILE_("valid-src", "held-out source sentences (with --valid-tgt)", "data"),
    [T_VALID_TGT] = FILE_("valid-tgt", "held-out references, line-aligned with --valid-src",
                          "data"),
    [T_NO_BLEU] = FLAG("no-bleu", "validation loss only (no decoding for BLEU)",
                       "data !valid_bleu"),
    [T_VALID_EVERY] = INT("valid-every", "validate every N steps instead of every epoch (0: "
                                         "every epoch)", GE0, "train"),
    [T_PATIENCE] = INT("patience", "stop after N validations without a new best (0: never)", GE0,
                       "train"),
    [T_KEEP_EPOCHS] = INT("keep-epochs", "keep the last N epochs' models in DIR/epoch-NNN", GE0,
                          "train"),
    [T_SAVE_EVERY] = INT("save-every", "every N steps, checkpoint and keep the model in "
                                       "DIR/step-NNNNNNN (0: never)", GE0, "train"),
    [T_KEEP_LAST] = INT("keep-last", "of the --save-every models, keep the last N (0: all)",
                        GE0, "train"),
    [T_SEED] = {"seed", QKV_OPTION_U64, "initialisation, data order and dropout", SEED, "data",
                0, NULL},
    [T_PRECISION] = ENUM("precision", PRECISION_HELP, QKV_ENUM_PRECISION, "train"),
    [T_DEVICE] = ENUM("device", "where the model computes: cpu, or cuda (the first NVIDIA GPU; "
                                "a qkv built with make CUDA=1, docs/gpu.md)", QKV_ENUM_DEVICE,
                      NULL),
    [T_CHECKPOINT_EVERY] = INT("checkpoint-every", "also checkpoint every N steps", GE0, "train"),
    [T_SKIP_NONFINITE] = FLAG("skip-nonfinite", "skip steps with NaN/Inf instead of stopping",
                              "train"),
    [T_STOP_AFTER_STEPS] = INT("stop-after-steps", "checkpoint and stop at this step (0: never)",
                               GE0, NULL),
    [T_COUNT] = {0},
};

/* qkv train-lm. Long: one row per option. */
static const qkv_option LANGUAGE_MODEL[L_COUNT + 1] = {
    [L_DATA] = FILE_("data", "a text file; its last --val-fraction is held out", "data"),
    [L_VOCAB] = LOCAL("vocab", "char: the text's UTF-8 characters; byte: the 256 bytes", VOCABS,
                      "data"),
    [L_ATTENTION] = ENUM("attention", "softmax, or linear (a recurrent state)",
                         QKV_ENUM_ATTENTION, "model"),
    [L_D_MODEL] = INT("d-model", "model width", D_MODEL, "model"),
    [L_HEADS] = INT("heads", "attention heads", D_MODEL, "model"),
    [L_FFN] = INT("ffn", "hidden size of the position-wise FFN", FFN, "model"),
    [L_LAYERS] = INT("layers", "blocks", LAYERS, "model"),
    [L_DROPOUT] = FLOAT("dropout", "dropout rate", RATE, "model"),
    [L_CONTEXT] = INT("context", "tokens per training window: the model's context",
                      "[2, 16384]", "data"),
    [L_PRE_NORM] = FLAG("pre-norm", "x + Sublayer(LayerNorm(x)), and a final LayerNorm", "model"),
    [L_TIE] = FLAG("tie", "output projection = token embedding", "model"),
    [L_ACT] = ENUM("act", "FFN activation (silu: swish)", QKV_ENUM_ACTIVATION, "model"),
    [L_LEARNED_POS] = FLAG("learned-pos", "learned instead of sinusoidal positions", "model"),
    [L_NO_BIAS] = FLAG("no-bias", "no biases in the attention projections", "model !bias"),
    [L_BATCH] = INT("batch", "windows per step", "[1, 65536]", "data"),
    [L_ACCUM] = INT("accum", "gradient accumulation: micro-batches of --batch windows per "
                             "optimizer step", "[1, 1024]", "data"),
    [L_STEPS] = INT("steps", "optimizer steps (0: until --minutes)", GE0, "train"),
    [L_MINUTES] = FLOAT("minutes", "time budget: stop after this many minutes (0: none)", GE0,
                        "train"),
    [L_LR] = FLOAT("lr", "Adam learning rate", LR, "train"),
    [L_WARMUP] = INT("warmup", "steps of linear learning-rate warm-up", GE0, "train"),
    [L_COSINE] = FLAG("cosine", "decay the learning rate to lr/10 (cosine) at --steps, or at the "
                                "end of --minutes", "train"),
    [L_BETA2] = FLOAT("beta2", "Adam's second-moment decay", RATE, "train"),
    [L_WEIGHT_DECAY] = FLOAT("weight-decay", "decoupled weight decay (AdamW)", WEIGHT_DECAY,
                             "train"),
    [L_CLIP] = FLOAT("clip", "clip the global gradient norm to this (0: off)", GE0, "train"),
    [L_VAL_FRACTION] = FLOAT("val-fraction", "the end of the file held out", RATE, "data"),
    [L_EVAL_EVERY] = INT("eval-every", "held-out loss every N steps (0: at the end)", GE0,
                         "train"),
    [L_EVAL_TOKENS] = INT("eval-tokens", "held-out tokens each evaluation reads (0: all)", GE0,
                          "train"),
    [L_LOG_EVERY] = INT("log-every", "metrics line and checkpoint every N steps", GE1, "train"),
    [L_SEED] = {"seed", QKV_OPTION_U64, "initialisation, windows and dropout", SEED, "data", 0,
                NULL},
    [L_PRECISION] = ENUM("precision", PRECISION_HELP, QKV_ENUM_PRECISION, "train"),
    [L_STOP_AFTER_STEPS] = INT("stop-after-steps", "checkpoint and stop at this step (0: never)",
                               GE0, NULL),
    [L_COUNT] = {0},
};

const qkv_option *qkv_run_options(qkv_run_kind kind, int *count)
{
    if (count) *count = kind == QKV_RUN_LM ? L_COUNT : T_COUNT;
    return kind == QKV_RUN_LM ? LANGUAGE_MODEL : TRANSLATION;
}

const char *qkv_option_choice(const qkv_option *o, int v)
{
    if (o->type != QKV_OPTION_CHOICE || v < 0) return NULL;
    if (!o->choices_local) return qkv_enum_name(o->choices, v);
    for (int i = 0; o->choices_local[i]; i++)
        if (i == v) return o->choices_local[i];
    return NULL;
}

int run_record_parse(const qkv_option *o, qkv_record *rec)
{
    return qkv_record_parse(o->record, o->name, o->type == QKV_OPTION_FLAG, rec) > 0;
}

/* Whether key is name with '_' or '-' between its words. */
static int same_name(const char *key, const char *name)
{
    for (; *key && *name; key++, name++)
        if (*key != *name && !(*key == '_' && *name == '-')) return 0;
    return !*key && !*name;
}

int qkv_run_option_find(qkv_run_kind kind, const char *key, int *inverted)
{
    int n;
    const qkv_option *t = qkv_run_options(kind, &n);
    if (inverted) *inverted = 0;
    if (!key) return -1;
    for (int i = 0; i < n; i++)
        if (same_name(key, t[i].name)) return i;
    for (int i = 0; i < n; i++) {
        qkv_record rec;
        if (run_record_parse(&t[i], &rec) && !strcmp(rec.key, key)) {
            if (inverted) *inverted = rec.inverted;
            return i;
        }
    }
    return -1;
}

/* ---- the run's values -------------------------------------------------------------------- */

/* The defaults of qkv train: the library's model and trainer defaults, d2l's Transformer. */
static void translation_defaults(run_value *v)
{
    const qkv_transformer_config c = qkv_transformer_default_config();
    const qkv_train_options o = qkv_train_default_options();
    v[T_TOKENIZER].i = TOKENIZER_WORD, v[T_VOCAB_SIZE].i = 8000;
    v[T_SPM_TYPE].i = QKV_SPM_UNIGRAM;
    v[T_D_MODEL].i = c.d_model, v[T_HEADS].i = c.heads, v[T_FFN].i = c.ffn;
    v[T_LAYERS].i = 2, v[T_ENC_LAYERS].i = -1, v[T_DEC_LAYERS].i = -1; /* -1: --layers's */
    v[T_DROPOUT].f = c.dropout, v[T_MAX_LEN].i = c.max_len, v[T_BIAS].i = c.bias;
    v[T_PRE_NORM].i = c.pre_norm, v[T_FINAL_NORM].i = c.final_norm, v[T_ACT].i = (int)c.act;
    v[T_TIE].i = (int)c.tie, v[T_LEARNED_POS].i = c.learned_pos;
    v[T_BATCH].i = o.batch, v[T_BATCH_TOKENS].i = o.batch_tokens, v[T_MAX_TOKENS].i = 10;
    v[T_ACCUM].i = 1, v[T_VALID_EVERY].i = o.valid_every, v[T_SAVE_EVERY].i = o.save_every;
    v[T_KEEP_LAST].i = o.keep_last;
    v[T_SCHEDULE].i = (int)o.schedule, v[T_LR].f = o.lr, v[T_WARMUP].i = o.warmup;
    v[T_LR_FACTOR].f = o.lr_factor, v[T_BETA1].f = o.beta1, v[T_BETA2].f = o.beta2;
    v[T_ADAM_EPS].f = o.adam_eps, v[T_WEIGHT_DECAY].f = o.weight_decay, v[T_CLIP].f = o.clip;
    v[T_LABEL_SMOOTHING].f = o.label_smoothing, v[T_LOSS].i = LOSS_TOKEN;
    v[T_EPOCHS].i = o.epochs, v[T_MINUTES].f = (float)o.minutes, v[T_MIN_FREQ].i = 2;
    v[T_PATIENCE].i = o.patience, v[T_KEEP_EPOCHS].i = o.keep_epochs, v[T_SEED].u = 0;
    v[T_PRECISION].i = QKV_PRECISION_FP32, v[T_CHECKPOINT_EVERY].i = o.checkpoint_every;
    v[T_DEVICE].i = QKV_DEVICE_CPU;
}

/* The defaults of qkv train-lm. */
static void lm_defaults(run_value *v)
{
    const qkv_lm_config c = qkv_lm_default_config();
    const qkv_lm_train_options o = qkv_lm_train_default_options();
    v[L_VOCAB].i = VOCAB_CHAR, v[L_ATTENTION].i = (int)c.attention;
    v[L_D_MODEL].i = c.d_model, v[L_HEADS].i = c.heads, v[L_FFN].i = c.ffn;
    v[L_LAYERS].i = c.layers, v[L_DROPOUT].f = c.dropout, v[L_CONTEXT].i = o.context;
    v[L_PRE_NORM].i = c.pre_norm, v[L_TIE].i = c.tie, v[L_ACT].i = (int)c.act;
    v[L_LEARNED_POS].i = c.learned_pos, v[L_NO_BIAS].i = !c.bias, v[L_BATCH].i = o.batch;
    v[L_ACCUM].i = 1;
    v[L_STEPS].i = 0, v[L_MINUTES].f = 0.0f, v[L_LR].f = o.lr, v[L_WARMUP].i = o.warmup;
    v[L_COSINE].i = o.cosine, v[L_BETA2].f = o.beta2, v[L_WEIGHT_DECAY].f = o.weight_decay;
    v[L_CLIP].f = o.clip, v[L_VAL_FRACTION].f = 0.1f, v[L_EVAL_EVERY].i = o.eval_every;
    v[L_EVAL_TOKENS].i = o.eval_tokens, v[L_LOG_EVERY].i = o.log_every, v[L_SEED].u = 0;
    v[L_PRECISION].i = QKV_PRECISION_FP32;
}

qkv_status qkv_run_create(qkv_run **out, qkv_run_kind kind, qkv_error *err)
{
    *out = NULL;
    if (kind != QKV_RUN_TRANSLATION && kind != QKV_RUN_LM)
        return qkv_fail(err, QKV_ERR_ARG, "qkv_run_create: no run of kind %d", (int)kind);
    qkv_run *r = calloc(1, sizeof *r);
    if (!r) return qkv_fail(err, QKV_ERR_NOMEM, "out of memory");
    r->kind = kind, r->writer = 1;
    r->opts = qkv_run_options(kind, &r->n_opts);
    if (kind == QKV_RUN_LM) lm_defaults(r->v);
    else translation_defaults(r->v);
    memcpy(r->defaults, r->v, sizeof r->v);
    *out = r;
    return QKV_OK;
}

qkv_run_kind qkv_run_get_kind(const qkv_run *r) { return r->kind; }
void qkv_run_set_naming(qkv_run *r, qkv_naming naming) { r->naming = naming; }
void qkv_run_set_hooks(qkv_run *r, const qkv_run_hooks *h)
{
    r->hooks = h ? *h : (qkv_run_hooks){0};
}
void qkv_run_set_reducer(qkv_run *r, const qkv_reducer *reducer)
{
    r->reducer = reducer;
    r->writer = !reducer || reducer->size <= 1 || reducer->rank == 0;
}

void run_notice(const qkv_run *r, const char *fmt, ...)
{
    if (!r->hooks.notice) return;
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    r->hooks.notice(text, r->hooks.ctx);
}

const char *run_spelled(const qkv_run *r, int opt, char *out, size_t cap)
{
    const char *name = r->opts[opt].name;
    if (r->naming == QKV_NAMING_COMMAND) {
        snprintf(out, cap, "--%s", name);
        return out;
    }
    snprintf(out, cap, "%s", name);
    for (char *c = out; *c; c++)
        if (*c == '-') *c = '_';
    return out;
}

void run_value_text(const qkv_run *r, int opt, char *out, size_t cap)
{
    const qkv_option *o = &r->opts[opt];
    const run_value *v = &r->v[opt];
    switch (o->type) {
    case QKV_OPTION_INT: snprintf(out, cap, "%d", v->i); break;
    case QKV_OPTION_U64: snprintf(out, cap, "%llu", (unsigned long long)v->u); break;
    case QKV_OPTION_FLOAT: snprintf(out, cap, "%.7g", (double)v->f); break;
    case QKV_OPTION_FILE:
    case QKV_OPTION_TEXT: snprintf(out, cap, "%s", v->s ? v->s : "(none)"); break;
    case QKV_OPTION_CHOICE: snprintf(out, cap, "%s", qkv_option_choice(o, v->i)); break;
    case QKV_OPTION_FLAG: snprintf(out, cap, "%s", v->i ? "on" : "off"); break;
    }
}

/* ---- checking values --------------------------------------------------------------------- */

static const char *skip_space(const char *s)
{
    while (isspace((unsigned char)*s)) s++;
    return s;
}

/* A finite number, or -1. */
static int read_bound(const char **s, double *x)
{
    char *end = NULL;
    *s = skip_space(*s);
    errno = 0;
    *x = strtod(*s, &end);
    if (end == *s || errno || !isfinite(*x)) return -1;
    *s = skip_space(end);
    return 0;
}

int qkv_range_parse(const char *text, qkv_range *r)
{
    if (!text) return -1;
    const char *s = skip_space(text);
    r->lo = -INFINITY, r->hi = INFINITY, r->lo_closed = r->hi_closed = 0;
    if (*s == '[' || *s == '(') { /* an interval */
        r->lo_closed = *s++ == '[';
        if (read_bound(&s, &r->lo) || *s++ != ',' || read_bound(&s, &r->hi)) return -1;
        if (*s != ']' && *s != ')') return -1;
        r->hi_closed = *s++ == ']';
        if (r->lo > r->hi || (r->lo == r->hi && !(r->lo_closed && r->hi_closed))) return -1;
    } else if (*s == '>' || *s == '<') { /* a bound */
        const int above = *s++ == '>', closed = *s == '=';
        if (closed) s++;
        double x;
        if (read_bound(&s, &x)) return -1;
        if (above) r->lo = x, r->lo_closed = closed;
        else r->hi = x, r->hi_closed = closed;
    } else
        return -1;
    return *skip_space(s) ? -1 : 0;
}

int qkv_range_holds(const qkv_range *r, double x)
{
    return (r->lo_closed ? x >= r->lo : x > r->lo) && (r->hi_closed ? x <= r->hi : x < r->hi);
}

int qkv_record_parse(const char *record, const char *name, int flag, qkv_record *r)
{
    memset(r, 0, sizeof *r);
    if (!record) return 0;
    static const char *const where[] = {"model", "data", "train"};
    size_t n = strcspn(record, " ");
    int k = 0;
    while (k < 3 && (strlen(where[k]) != n || strncmp(record, where[k], n))) k++;
    if (k == 3) return -1;
    r->in_train = k > 0, r->fixed = k < 2;
    const char *key = record + n;
    if (*key) {
        key++;
        r->inverted = *key == '!';
        key += r->inverted;
        if (!*key || strlen(key) >= sizeof r->key || strchr(key, ' ')) return -1;
        snprintf(r->key, sizeof r->key, "%s", key);
    } else {
        snprintf(r->key, sizeof r->key, "%s", name);
        for (char *c = r->key; *c; c++)
            if (*c == '-') *c = '_';
    }
    return r->inverted && !flag ? -1 : 1;
}

qkv_status run_check_range(const qkv_run *r, int opt, double v, const char *got,
                           const char *where, qkv_error *err)
{
    const char *range = r->opts[opt].range;
    qkv_range in;
    if (!range || (!qkv_range_parse(range, &in) && qkv_range_holds(&in, v))) return QKV_OK;
    char name[80];
    const char *s = skip_space(range);
    return qkv_fail(err, QKV_ERR_ARG, "%s must be %s%s (got %s)%s%s", run_spelled(r, opt, name,
                    sizeof name), *s == '[' || *s == '(' ? "in " : "", s, got,
                    where ? " in " : "", where ? where : "");
}

qkv_status run_choice_of(const qkv_run *r, int opt, const char *name, int *v, const char *where,
                         qkv_error *err)
{
    const qkv_option *o = &r->opts[opt];
    for (int k = 0; qkv_option_choice(o, k); k++)
        if (!strcmp(qkv_option_choice(o, k), name)) return *v = k, QKV_OK;
    char spelled[80], expected[256] = "";
    size_t n = 0;
    for (int k = 0; qkv_option_choice(o, k) && n < sizeof expected; k++)
        n += (size_t)snprintf(expected + n, sizeof expected - n, "%s%s",
                              k == 0 ? "" : qkv_option_choice(o, k + 1) ? ", " : " or ",
                              qkv_option_choice(o, k));
    return qkv_fail(err, QKV_ERR_ARG, "%s '%s': expected %s%s%s",
                    run_spelled(r, opt, spelled, sizeof spelled), name, expected,
                    where ? " in " : "", where ? where : "");
}

static qkv_status wrong_type(const qkv_run *r, int opt, const char *call, qkv_error *err)
{
    if (opt < 0 || opt >= r->n_opts)
        return qkv_fail(err, QKV_ERR_ARG, "%s: no option %d", call, opt);
    char name[80];
    return qkv_fail(err, QKV_ERR_ARG, "%s: %s is not an option of that type", call,
                    run_spelled(r, opt, name, sizeof name));
}

static int valid(const qkv_run *r, int opt) { return opt >= 0 && opt < r->n_opts; }

qkv_status qkv_run_set_int(qkv_run *r, int opt, long long v, qkv_error *err)
{
    if (!valid(r, opt)) return wrong_type(r, opt, "qkv_run_set_int", err);
    const qkv_option *o = &r->opts[opt];
    char got[32];
    snprintf(got, sizeof got, "%lld", v);
    if (o->type == QKV_OPTION_FLAG) {
        if (v != 0 && v != 1) return wrong_type(r, opt, "qkv_run_set_int", err);
    } else if (o->type == QKV_OPTION_CHOICE) {
        if (!qkv_option_choice(o, v < 0 || v > 1000 ? -1 : (int)v))
            return run_choice_of(r, opt, got, &r->v[opt].i, NULL, err);
    } else if (o->type == QKV_OPTION_INT) {
        /* a default outside the range means "unset" (--enc-layers: --layers's) */
        qkv_status st = v == r->defaults[opt].i ? QKV_OK
                                                : run_check_range(r, opt, (double)v, got, NULL, err);
        if (st) return st;
    } else {
        return wrong_type(r, opt, "qkv_run_set_int", err);
    }
    r->v[opt].i = (int)v;
    return QKV_OK;
}

qkv_status qkv_run_set_u64(qkv_run *r, int opt, uint64_t v, qkv_error *err)
{
    if (!valid(r, opt) || r->opts[opt].type != QKV_OPTION_U64)
        return wrong_type(r, opt, "qkv_run_set_u64", err);
    r->v[opt].u = v; /* the whole of uint64 is the seeds' range */
    return QKV_OK;
}

qkv_status qkv_run_set_float(qkv_run *r, int opt, double v, qkv_error *err)
{
    if (!valid(r, opt) || r->opts[opt].type != QKV_OPTION_FLOAT)
        return wrong_type(r, opt, "qkv_run_set_float", err);
    const float f = (float)v;
    char got[32];
    snprintf(got, sizeof got, "%g", (double)f);
    qkv_status st = isfinite(f) ? run_check_range(r, opt, f, got, NULL, err)
                                : run_check_range(r, opt, NAN, got, NULL, err);
    if (st) return st;
    r->v[opt].f = f;
    return QKV_OK;
}

qkv_status qkv_run_set_text(qkv_run *r, int opt, const char *v, qkv_error *err)
{
    if (!valid(r, opt)) return wrong_type(r, opt, "qkv_run_set_text", err);
    const qkv_option *o = &r->opts[opt];
    if (o->type == QKV_OPTION_CHOICE) {
        int k;
        qkv_status st = run_choice_of(r, opt, v ? v : "", &k, NULL, err);
        if (!st) r->v[opt].i = k;
        return st;
    }
    if (o->type != QKV_OPTION_FILE && o->type != QKV_OPTION_TEXT)
        return wrong_type(r, opt, "qkv_run_set_text", err);
    char *copy = v ? strdup(v) : NULL;
    if (v && !copy) return qkv_fail(err, QKV_ERR_NOMEM, "out of memory");
    free(r->v[opt].s);
    r->v[opt].s = copy;
    return QKV_OK;
}

long long qkv_run_get_int(const qkv_run *r, int opt)
{
    return valid(r, opt) && r->opts[opt].type != QKV_OPTION_FLOAT &&
                   r->opts[opt].type != QKV_OPTION_U64 && r->opts[opt].type != QKV_OPTION_FILE &&
                   r->opts[opt].type != QKV_OPTION_TEXT
               ? r->v[opt].i : 0;
}

uint64_t qkv_run_get_u64(const qkv_run *r, int opt)
{
    return valid(r, opt) && r->opts[opt].type == QKV_OPTION_U64 ? r->v[opt].u : 0;
}

float qkv_run_get_float(const qkv_run *r, int opt)
{
    return valid(r, opt) && r->opts[opt].type == QKV_OPTION_FLOAT ? r->v[opt].f : 0.0f;
}

const char *qkv_run_get_text(const qkv_run *r, int opt)
{
    if (!valid(r, opt)) return NULL;
    const qkv_option *o = &r->opts[opt];
    if (o->type == QKV_OPTION_CHOICE) return qkv_option_choice(o, r->v[opt].i);
    return o->type == QKV_OPTION_FILE || o->type == QKV_OPTION_TEXT ? r->v[opt].s : NULL;
}

/* ---- presets ------------------------------------------------------------------------------
 * The standard shapes and recipes by name. The paper's (Vaswani et al. 2017, section 5 and
 * table 3): base is d_model 512, 8 heads, FFN 2048, 6 + 6 layers, dropout 0.1, label smoothing
 * 0.1, Adam (0.9, 0.98, 1e-9) on the warmup schedule of eq. 3 with 4000 steps, batches of about
 * 25000 tokens, one BPE vocabulary of 37000 shared by both languages and the three weight
 * matrices of section 3.4; big is d_model 1024, 16 heads, FFN 4096, dropout 0.3. A sentence
 * length the paper does not give is needed here: 256 tokens. d2l's is the Transformer of
 * "Dive into Deep Learning" (section 11.7), qkv's own defaults but for 30 epochs and d2l's
 * loss scaling. */

typedef struct {
    const char *name;
    double number;    /* INT, FLOAT, FLAG */
    const char *text; /* CHOICE (NULL: the number) */
} preset_value;

typedef struct {
    const char *name, *help;
    preset_value values[24];
} preset;

#define PAPER_RECIPE                                                                           \
    {"heads", 8, NULL}, {"layers", 6, NULL}, {"dropout", 0.1, NULL},                           \
        {"label-smoothing", 0.1, NULL}, {"schedule", 0, "noam"}, {"warmup", 4000, NULL},       \
        {"lr-factor", 1, NULL}, {"beta1", 0.9, NULL}, {"beta2", 0.98, NULL},                   \
        {"adam-eps", 1e-9, NULL}, {"batch-tokens", 25000, NULL}, {"tokenizer", 0, "spm"},      \
        {"vocab-size", 37000, NULL}, {"joint-bpe", 1, NULL}, {"tie", 0, "all"},                \
        {"max-tokens", 256, NULL}

static const preset PRESETS[] = {
    {"transformer-base", "the paper's base model: d_model 512, 8 heads, FFN 2048, 6 + 6 layers",
     {{"d-model", 512, NULL}, {"ffn", 2048, NULL}, PAPER_RECIPE, {NULL, 0, NULL}}},
    {"transformer-big", "the paper's big model: d_model 1024, 16 heads, FFN 4096, dropout 0.3",
     {PAPER_RECIPE, {"d-model", 1024, NULL}, {"ffn", 4096, NULL}, {"heads", 16, NULL},
      {"dropout", 0.3, NULL}, {NULL, 0, NULL}}},
    {"d2l", "d2l's Transformer: d_model 32, 4 heads, FFN 64, 2 + 2 layers, 30 epochs",
     {{"d-model", 32, NULL}, {"heads", 4, NULL}, {"ffn", 64, NULL}, {"layers", 2, NULL},
      {"dropout", 0.1, NULL}, {"lr", 0.005, NULL}, {"batch", 64, NULL},
      {"max-tokens", 10, NULL}, {"epochs", 30, NULL}, {"loss", 0, "d2l"},
      {"tokenizer", 0, "word"}, {"min-freq", 2, NULL}, {"schedule", 0, "constant"},
      {"clip", 1, NULL}, {NULL, 0, NULL}}},
};
enum { N_PRESETS = sizeof PRESETS / sizeof *PRESETS };

static const char *const PRESET_NAMES[] = {"transformer-base", "transformer-big", "d2l", NULL};
static const char *const NO_PRESETS[] = {NULL};

const char *const *qkv_run_preset_names(qkv_run_kind kind)
{
    return kind == QKV_RUN_TRANSLATION ? PRESET_NAMES : NO_PRESETS;
}

static const preset *preset_of(qkv_run_kind kind, const char *name)
{
    for (int i = 0; kind == QKV_RUN_TRANSLATION && name && i < N_PRESETS; i++)
        if (!strcmp(PRESETS[i].name, name)) return &PRESETS[i];
    return NULL;
}

const char *qkv_run_preset_help(qkv_run_kind kind, const char *name)
{
    const preset *p = preset_of(kind, name);
    return p ? p->help : NULL;
}

/* Sets one of a preset's values (the tables' are all valid). */
static qkv_status preset_set(qkv_run *r, const preset_value *v, qkv_error *err)
{
    const int i = qkv_run_option_find(r->kind, v->name, NULL);
    if (i < 0) return qkv_fail(err, QKV_ERR_ARG, "preset: no option %s", v->name);
    if (v->text) return qkv_run_set_text(r, i, v->text, err);
    if (r->opts[i].type == QKV_OPTION_FLOAT) return qkv_run_set_float(r, i, v->number, err);
    return qkv_run_set_int(r, i, (long long)v->number, err);
}

qkv_status qkv_run_apply_preset(qkv_run *r, const char *name, qkv_error *err)
{
    const preset *p = preset_of(r->kind, name);
    if (!p) {
        char list[128] = "";
        for (int i = 0; r->kind == QKV_RUN_TRANSLATION && i < N_PRESETS; i++)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "",
                     PRESETS[i].name);
        return qkv_fail(err, QKV_ERR_ARG, "no preset '%s'%s%s", name ? name : "",
                        *list ? "; the presets are " : " for this kind of run", list);
    }
    char line[1024];
    size_t n = (size_t)snprintf(line, sizeof line, "preset %s:", p->name);
    qkv_status st = QKV_OK;
    for (const preset_value *v = p->values; v->name && !st; v++) {
        if ((st = preset_set(r, v, err))) break;
        int later = 0; /* a value the preset sets again (big over the recipe) is said once */
        for (const preset_value *w = v + 1; w->name; w++) later |= !strcmp(w->name, v->name);
        if (later) continue;
        const int i = qkv_run_option_find(r->kind, v->name, NULL);
        char name_[80], value[64];
        run_spelled(r, i, name_, sizeof name_);
        run_value_text(r, i, value, sizeof value);
        const int flag = r->opts[i].type == QKV_OPTION_FLAG, cmd = r->naming == QKV_NAMING_COMMAND;
        if (n < sizeof line)
            n += (size_t)snprintf(line + n, sizeof line - n, " %s%s%s", name_,
                                  flag ? (cmd ? "" : "=True") : cmd ? " " : "=",
                                  flag ? "" : value);
    }
    if (!st) st = qkv_run_set_text(r, T_PRESET, p->name, err);
    if (!st) run_notice(r, "%s", line);
    return st;
}
