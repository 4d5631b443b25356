/* SPDX-License-Identifier: MIT */
/* The decoder-only language model on the command line:
 *   qkv train-lm  train on a text file (character- or byte-level), holding out its end
 *   qkv generate  continue a prompt, printing each token as it is drawn
 *   qkv eval-lm   per-token loss and perplexity of a text
 * A model directory holds config.json, model.safetensors, vocab.txt (qkv_lm_vocab_build's
 * escaped tokens) and train.json (how it was trained: the data, the split, batch, context). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cJSON.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/figures.h"
#include "cli/mpi_reducer.h"
#include "cli/resume.h"
#include "cli/run_dir.h"

/* ---- model directories ----------------------------------------------------------------- */

void lm_dir_free(lm_dir *d)
{
    if (d->gen) { /* the model and vocabulary are the generator's */
        qkv_generator_free(d->gen);
    } else {
        qkv_lm_free(d->model);
        qkv_vocab_free(&d->vocab);
    }
    memset(d, 0, sizeof *d);
}

/* (common.h) */
int lm_dir_load(lm_dir *d, const char *dir, const qkv_precision *prec, qkv_device device)
{
    memset(d, 0, sizeof *d);
    qkv_error err = {0};
    if (qkv_generator_open(&d->gen, dir, &err)) goto fail;
    const qkv_lm_run_info *info = qkv_generator_run_info(d->gen);
    d->model = qkv_generator_model(d->gen), d->vocab = *qkv_generator_vocab(d->gen);
    d->byte_level = info->byte_level, d->context = info->context, d->batch = info->batch;
    d->val_fraction = info->val_fraction;
    if (qkv_lm_set_device(d->model, device, &err) ||
        (prec && qkv_lm_set_precision(d->model, *prec, &err)))
        goto fail;
    return 0;
fail:
    fprintf(stderr, "qkv: %s\n", err.msg);
    lm_dir_free(d);
    return -1;
}

/* The model directory of generate and eval-lm, with their --precision (NULL: not given, the
 * model's own) and --threads: 0, or the exit code 1 (the directory does not load). */
static int lm_dir_open(lm_dir *d, const char *dir, const opt_choice *precision, int threads)
{
    const qkv_precision prec = precision ? (qkv_precision)precision->value : QKV_PRECISION_FP32;
    cli_threads(threads);
    return lm_dir_load(d, dir, precision ? &prec : NULL, QKV_DEVICE_CPU) ? 1 : 0;
}

/* text -> ids with the model's vocabulary (a warning when characters are unknown). */
static int *encode_text(const qkv_vocab *v, const char *text, size_t len, size_t *n,
                        const char *name)
{
    int *ids = malloc((len ? len : 1) * sizeof *ids);
    qkv_error err = {0};
    size_t unknown = 0;
    if (!ids) {
        fprintf(stderr, "qkv: out of memory for %zu tokens\n", len);
        return NULL;
    }
    if (qkv_lm_encode(ids, n, &unknown, v, text, len, &err)) {
        fprintf(stderr, "qkv: %s: %s\n", name, err.msg);
        free(ids);
        return NULL;
    }
    if (unknown)
        fprintf(stderr, "qkv: warning: %s: %zu character%s not in the model's vocabulary "
                "(read as <unk>)\n", name, unknown, unknown == 1 ? " is" : "s are");
    return ids;
}

/* ---- qkv train-lm ---------------------------------------------------------------------- */

typedef struct {
    int tty, quiet;
    double minutes;
} progress_ctx;

static void show_progress(const qkv_lm_train_progress *p, void *ctx)
{
    const progress_ctx *pc = ctx;
    if (pc->quiet) return;
    /* how far along: by steps, or by the time budget, whichever ends first */
    double done = p->steps ? (double)p->step / (double)p->steps : 0.0;
    if (pc->minutes > 0) done = fmax(done, p->elapsed_s / (pc->minutes * 60.0));
    done = fmin(done, 1.0);
    double eta = done > 0 ? p->elapsed_s * (1.0 - done) / done : 0.0;
    char val[32] = "";
    if (!isnan(p->val_loss)) snprintf(val, sizeof val, " held-out %.4f", p->val_loss);
    if (pc->tty) {
        char bar[21];
        int fill = (int)(20.0 * done);
        for (int i = 0; i < 20; i++) bar[i] = i < fill ? '#' : '.';
        bar[20] = '\0';
        fprintf(stderr, "\rstep %lld [%s] loss %.4f%s %.0f tok/s ETA %dm%02ds   ",
                (long long)p->step, bar, p->loss, val, p->tokens_per_s, (int)eta / 60,
                (int)eta % 60);
        if (p->report && !isnan(p->val_loss)) fputc('\n', stderr);
    } else if (p->report) {
        fprintf(stderr, "step %lld  epoch %.2f  loss %.4f%s  lr %.2g  %.0f tok/s  %.1fs\n",
                (long long)p->step, p->epoch, p->loss, val, p->lr, p->tokens_per_s,
                p->elapsed_s);
    }
}

/* What train-lm reads, and how it ends and reports, beside the model's configuration and the
 * trainer's options (which hold the rest: out_dir, steps, minutes, resume, ...). */
typedef struct {
    const char *data;   /* the text file */
    int byte_level;     /* a vocabulary of the 256 bytes, not of the text's characters */
    float val_fraction; /* the end of the text held out */
    int steps, stop_after, quiet;
    qkv_precision prec;
    const opt_spec *opts; /* the option table: train.json records what it says */
    const cJSON *history; /* resumed runs: what changed when (NULL for a new run) */
    int writer;           /* this process writes the run directory (rank 0 under mpirun) */
} lm_run;

/* train.json: every option the table records there (a resumed run compares them, resume.h),
 * the split's sizes, and the history of a resumed run. */
static int write_train_json(const char *dir, const lm_run *r, size_t n_train, size_t n_val)
{
    char path[4096], *text = NULL;
    snprintf(path, sizeof path, "%s/train.json", dir);
    cJSON *j = cJSON_CreateObject();
    if (j && !resume_record_options(j, r->opts)) {
        cJSON_AddNumberToObject(j, "train_tokens", (double)n_train);
        cJSON_AddNumberToObject(j, "val_tokens", (double)n_val);
        if (r->history) cJSON_AddItemToObject(j, "history", cJSON_Duplicate(r->history, 1));
        text = cJSON_Print(j);
    }
    cJSON_Delete(j);
    if (!text) return fprintf(stderr, "qkv: %s: out of memory\n", path), -1;
    const int rc = run_dir_write(path, text);
    free(text);
    return rc;
}

/* The model to train: the one in o->out_dir when resuming there (its config.json and
 * vocabulary; the parameters come from the checkpoint; the options were compared with its
 * train.json before), or a new one made from cfg with a vocabulary of text, whose
 * config.json and vocab.txt are written there (model.safetensors only once it is trained).
 * -1 (message printed) on failure. */
static int open_or_create(lm_dir *d, qkv_lm_config *cfg, const qkv_lm_train_options *o,
                          const lm_run *r, const char *text, size_t len)
{
    const char *out = o->out_dir;
    qkv_error err = {0};
    char path[4096], *json = NULL;
    memset(d, 0, sizeof *d);
    if (o->resume) {
        snprintf(path, sizeof path, "%s/config.json", out);
        if (!(json = resume_config_text(out))) return -1;
        if (qkv_lm_config_from_json(cfg, json, path, &err)) goto fail;
        snprintf(path, sizeof path, "%s/vocab.txt", out);
        if (qkv_vocab_load(&d->vocab, path, &err)) goto fail;
        if (d->vocab.size != cfg->vocab) {
            fprintf(stderr, "qkv: %s: the vocabulary has %d tokens but the model was built for "
                    "%d\n", path, d->vocab.size, cfg->vocab);
            free(json);
            return -1;
        }
        free(json);
        if (qkv_lm_create(&d->model, cfg, o->seed, &err)) goto fail;
        return 0;
    }
    if (qkv_lm_vocab_build(&d->vocab, text, len, r->byte_level, &err)) {
        fprintf(stderr, "qkv: %s: %s\n", r->data, err.msg);
        return -1;
    }
    cfg->vocab = d->vocab.size;
    snprintf(path, sizeof path, "%s/vocab.txt", out);
    if (qkv_lm_create(&d->model, cfg, o->seed, &err)) goto fail;
    if (!r->writer) return 0; /* every rank builds the same model; rank 0 records it */
    if (qkv_vocab_save(&d->vocab, path, &err) || qkv_lm_config_to_json(cfg, &json, &err))
        goto fail;
    snprintf(path, sizeof path, "%s/config.json", out);
    const int rc = run_dir_write(path, json);
    free(json);
    return rc;
fail:
    fprintf(stderr, "qkv: %s\n", err.msg);
    free(json);
    return -1;
}

/* How the training ended: stopped early at --stop-after-steps, or finished, then the loss on
 * the whole held-out text (val, n_val tokens). -1 (message printed) if that fails. */
static int report_end(const lm_dir *d, const qkv_lm_train_options *o, const lm_run *r,
                      const int *val, size_t n_val, double t0)
{
    if (r->stop_after > 0 && (r->steps == 0 || r->stop_after < r->steps)) {
        if (!r->quiet)
            fprintf(stderr, "\nqkv train-lm: stopped after step %d; continue with --resume\n",
                    r->stop_after);
        return 0;
    }
    if (!r->quiet)
        fprintf(stderr, "\nqkv train-lm: wrote %s in %.1fs\n", o->out_dir, qkv_now_s() - t0);
    if (n_val >= 2) { /* the whole held-out text, once */
        qkv_error err = {0};
        double loss;
        int64_t count;
        if (qkv_lm_evaluate(d->model, val, n_val, o->context, o->batch, &loss, &count, &err)) {
            fprintf(stderr, "qkv: %s\n", err.msg);
            return -1;
        }
        printf("held-out loss %.4f nats per token, perplexity %.3f (%lld tokens)\n", loss,
               exp(loss), (long long)count);
    }
    return 0;
}

/* Trains as cfg, o and r say (a new model in o->out_dir, or the one there with --resume):
 * reads the text, makes or opens the model, holds out the text's end, trains, reports, draws
 * the curves. The exit status. */
static int run(qkv_lm_config *cfg, qkv_lm_train_options *o, const lm_run *r)
{
    const char *data = r->data, *out = o->out_dir;
    qkv_error err = {0};
    lm_dir d = {0};
    size_t len = 0, n = 0;
    int *ids = NULL, rc = 1;
    const int resuming = o->resume;
    char *text = cli_read_all(data, QKV_MAX_TEXT_BYTES, &len);
    if (!text) goto done;
    if (len == 0) {
        fprintf(stderr, "qkv: %s is empty: there is nothing to learn from\n", data);
        goto done;
    }
    if (open_or_create(&d, cfg, o, r, text, len)) goto done;
    if (!(ids = encode_text(&d.vocab, text, len, &n, data))) goto done;
    /* the last val_fraction of the tokens is held out */
    const size_t n_val = (size_t)((double)n * r->val_fraction), n_train = n - n_val;
    if (n_train < (size_t)o->context + 1) {
        fprintf(stderr, "qkv: %s: %zu training tokens, but --context %d needs at least %d\n",
                data, n_train, o->context, o->context + 1);
        goto done;
    }
    if (r->writer && write_train_json(out, r, n_train, n_val)) goto done;
    if (qkv_lm_set_precision(d.model, r->prec, &err)) goto fail;
    const qkv_lm_config *mc = qkv_lm_get_config(d.model);
    if (!r->quiet)
        fprintf(stderr, "qkv train-lm: %zu tokens (%zu training, %zu held out), vocabulary %d, "
                "%zu parameters, %s attention, %d threads%s\n", n, n_train, n_val, mc->vocab,
                qkv_lm_num_params(d.model),
                qkv_attention_kind_name(mc->attention), qkv_get_threads(),
                resuming ? ", resuming" : "");
    if (!r->quiet && o->reducer && o->reducer->size > 1)
        fprintf(stderr, "qkv train-lm: data-parallel over %d ranks (MPI), %d threads each; "
                "each step's windows are split among them\n", o->reducer->size,
                qkv_get_threads());
    progress_ctx pc = {isatty(2), r->quiet, o->minutes};
    o->progress = show_progress, o->progress_ctx = &pc;
    const double t0 = qkv_now_s();
    if (qkv_lm_train(d.model, ids, n_train, ids + n_train, n_val, o, &err)) goto fail;
    if (r->writer && report_end(&d, o, r, ids + n_train, n_val, t0)) goto done;
    if (r->writer && !fig_training_after_run(out) && !r->quiet) /* a failed figure is no failed run */
        fprintf(stderr, "qkv train-lm: training curves in %s/training.png\n", out);
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "qkv: %s\n", err.msg);
done:
    free(text), free(ids);
    lm_dir_free(&d);
    return rc;
}

/* Every option of qkv train-lm, as parsed (on --resume: as recorded, then parsed over that). */
typedef struct {
    qkv_lm_config cfg;
    qkv_lm_train_options o;
    const char *data, *out;
    opt_choice vocab, attention, act, precision;
    int steps, threads, quiet, no_bias, stop_after, overwrite;
    float minutes, val_fraction;
} train_lm_cli;

static const char *const VOCABS[] = {"char", "byte", NULL};
enum { VOCAB_CHAR, VOCAB_BYTE };
enum { MAX_LM_OPTIONS = 48 };

/* The defaults, and the option table over c (every option once: name, value, help, range and
 * what a run records of it). Long: one row per option. */
static void train_lm_table(train_lm_cli *c, opt_spec opts[MAX_LM_OPTIONS])
{
    *c = (train_lm_cli){.cfg = qkv_lm_default_config(), .o = qkv_lm_train_default_options(),
                        .vocab = {0, VOCABS, VOCAB_CHAR},
                        .attention = {QKV_ENUM_ATTENTION, NULL, QKV_ATTENTION_SOFTMAX},
                        .act = {QKV_ENUM_ACTIVATION, NULL, QKV_ACT_RELU},
                        .precision = {QKV_ENUM_PRECISION, NULL, QKV_PRECISION_FP32},
                        .val_fraction = 0.1f};
    c->o.seed = 0;
    const opt_spec table[] = {
        {"data", OPT_FILE, &c->data, "a text file; its last --val-fraction is held out", NULL,
         "data"},
        {"d", OPT_ALIAS, "data", NULL, NULL, NULL},
        {"out", OPT_DIR, &c->out, "model directory to write", NULL, NULL},
        {"o", OPT_ALIAS, "out", NULL, NULL, NULL},
        {"vocab", OPT_CHOICE, &c->vocab, "char: the text's UTF-8 characters; byte: the 256 bytes",
         NULL, "data"},
        {"attention", OPT_CHOICE, &c->attention, "softmax, or linear (a recurrent state)", NULL,
         "model"},
        {"d-model", OPT_INT, &c->cfg.d_model, "model width", ARG_D_MODEL, "model"},
        {"heads", OPT_INT, &c->cfg.heads, "attention heads", ARG_D_MODEL, "model"},
        {"ffn", OPT_INT, &c->cfg.ffn, "hidden size of the position-wise FFN", ARG_FFN,
         "model"},
        {"layers", OPT_INT, &c->cfg.layers, "blocks", ARG_LAYERS, "model"},
        {"dropout", OPT_FLOAT, &c->cfg.dropout, "dropout rate", ARG_RATE, "model"},
        {"context", OPT_INT, &c->o.context, "tokens per training window: the model's context",
         "[2, 16384]", "data"},
        {"pre-norm", OPT_FLAG, &c->cfg.pre_norm,
         "x + Sublayer(LayerNorm(x)), and a final LayerNorm", NULL, "model"},
        {"tie", OPT_FLAG, &c->cfg.tie, "output projection = token embedding", NULL, "model"},
        {"act", OPT_CHOICE, &c->act, "FFN activation (silu: swish)", NULL, "model"},
        {"learned-pos", OPT_FLAG, &c->cfg.learned_pos, "learned instead of sinusoidal positions",
         NULL, "model"},
        {"no-bias", OPT_FLAG, &c->no_bias, "no biases in the attention projections", NULL,
         "model !bias"},
        {"batch", OPT_INT, &c->o.batch, "windows per step", "[1, 65536]", "data"},
        {"steps", OPT_INT, &c->steps, "optimizer steps (0: until --minutes)", ARG_GE0, "train"},
        {"minutes", OPT_FLOAT, &c->minutes, "time budget: stop after this many minutes (0: none)",
         ARG_GE0, "train"},
        {"lr", OPT_FLOAT, &c->o.lr, "Adam learning rate", ARG_LR, "train"},
        {"warmup", OPT_INT, &c->o.warmup, "steps of linear learning-rate warm-up", ARG_GE0,
         "train"},
        {"cosine", OPT_FLAG, &c->o.cosine, "decay the learning rate to lr/10 (cosine) at "
                                           "--steps, or at the end of --minutes", NULL, "train"},
        {"beta2", OPT_FLOAT, &c->o.beta2, "Adam's second-moment decay", ARG_RATE, "train"},
        {"weight-decay", OPT_FLOAT, &c->o.weight_decay, "decoupled weight decay (AdamW)", ARG_WEIGHT_DECAY,
         "train"},
        {"clip", OPT_FLOAT, &c->o.clip, "clip the global gradient norm to this (0: off)", ARG_GE0,
         "train"},
        {"val-fraction", OPT_FLOAT, &c->val_fraction, "the end of the file held out", ARG_RATE,
         "data"},
        {"eval-every", OPT_INT, &c->o.eval_every, "held-out loss every N steps (0: at the end)",
         ARG_GE0, "train"},
        {"eval-tokens", OPT_INT, &c->o.eval_tokens,
         "held-out tokens each evaluation reads (0: all)", ARG_GE0, "train"},
        {"log-every", OPT_INT, &c->o.log_every, "metrics line and checkpoint every N steps",
         ARG_GE1, "train"},
        {"seed", OPT_U64, &c->o.seed, "initialisation, windows and dropout", ARG_SEED, "data"},
        {"threads", OPT_INT, &c->threads, "threads per rank (0: all cores; under mpirun, shared "
                                          "among the ranks of a machine)", ARG_THREADS, NULL},
        {"t", OPT_ALIAS, "threads", NULL, NULL, NULL},
        {"precision", OPT_CHOICE, &c->precision, CLI_TRAIN_PRECISION_HELP, NULL, "train"},
        {"resume", OPT_FLAG, &c->o.resume, "continue from DIR/checkpoint.safetensors, with the "
                                           "options it recorded (those defining the model or "
                                           "data cannot change)", NULL, NULL},
        {"overwrite", OPT_FLAG, &c->overwrite, "replace what DIR holds (a trained model, another "
                                               "run, files of a run's names)", NULL, NULL},
        {"stop-after-steps", OPT_INT, &c->stop_after,
         "checkpoint and stop at this step (0: never)", ARG_GE0, NULL},
        {"quiet", OPT_FLAG, &c->quiet, "no progress output", NULL, NULL},
        {"q", OPT_ALIAS, "quiet", NULL, NULL, NULL},
        {0},
    };
    _Static_assert(sizeof table <= MAX_LM_OPTIONS * sizeof *table, "MAX_LM_OPTIONS");
    memcpy(opts, table, sizeof table);
}

static int train_lm_main(int argc, char **argv, cli_ranks *job)
{
    train_lm_cli c;
    opt_spec opts[MAX_LM_OPTIONS];
    resume_record rec = {0};
    run_dir rd = {.lock_fd = -1};
    train_lm_table(&c, opts);
    int rc = args_parse(argc, argv, 2, opts,
                        "usage: qkv train-lm --data FILE --out DIR (--steps N | --minutes FLOAT) "
                        "[options]\n"
                        "Trains a decoder-only language model on a text file.");
    if (rc) return rc > 0 ? 0 : 2;
    const int writer = cli_ranks_writer(job, &c.quiet);
    c.o.reducer = &job->reducer;
    if (c.o.resume && c.overwrite) {
        fprintf(stderr, "qkv train-lm: --resume continues the run in --out, --overwrite "
                "replaces it: give one\n");
        goto usage;
    }
    if (c.out && c.o.resume) {
        /* a resumed run claims its directory first: it reads it */
        rc = run_dir_claim_writer(&rd, c.out, &RUN_LM, RUN_RESUME, writer, argc, argv) ||
                     resume_start(&rec, c.out)
                 ? 1 : resume_finish(&rec, opts, argc, argv, "qkv train-lm");
        if (rc) goto end;
    }
    if (!c.data || !c.out) {
        fprintf(stderr, "qkv train-lm: needs --data FILE and --out DIR\n");
        goto usage;
    }
    if (c.steps == 0 && c.minutes == 0) {
        fprintf(stderr, "qkv train-lm: give --steps N or --minutes FLOAT (or both)\n");
        goto usage;
    }
    const qkv_precision prec = (qkv_precision)c.precision.value;
    if (cli_positions_fit("qkv train-lm", "context", c.o.context, c.cfg.d_model) ||
        cli_train_precision(prec))
        goto usage;
    c.cfg.attention = (qkv_attention_kind)c.attention.value;
    c.cfg.act = (qkv_activation)c.act.value;
    c.cfg.final_norm = c.cfg.pre_norm, c.cfg.bias = !c.no_bias, c.cfg.max_len = c.o.context;
    c.o.steps = c.steps, c.o.minutes = c.minutes, c.o.stop_after_steps = c.stop_after;
    c.o.out_dir = c.out;
    cli_threads(cli_ranks_threads(job, c.threads));
    const lm_run r = {c.data, c.vocab.value == VOCAB_BYTE, c.val_fraction, c.steps,
                      c.stop_after, c.quiet, prec, opts, rec.history, writer};
    rc = 1;
    if (c.o.resume || !run_dir_claim_writer(&rd, c.out, &RUN_LM,
                                            c.overwrite ? RUN_OVERWRITE : RUN_NEW, writer, argc,
                                            argv))
        rc = run(&c.cfg, &c.o, &r);
    goto end;
usage:
    rc = 2;
end:
    run_dir_release(&rd);
    resume_record_free(&rec);
    return rc;
}

/* Under mpirun every rank runs this; rank 0 writes the run directory (mpi_reducer.h). */
int cmd_train_lm(int argc, char **argv)
{
    return cli_ranks_run(argc, argv, train_lm_main);
}

/* ---- qkv generate ---------------------------------------------------------------------- */

typedef struct {
    const qkv_vocab *vocab;
    int failed;
} print_ctx;

/* Each token is written and flushed as soon as it is drawn. */
static int print_token(int id, void *ctx)
{
    print_ctx *pc = ctx;
    char piece[8];
    size_t n = qkv_lm_token_text(piece, sizeof piece, pc->vocab, id);
    if (fwrite(piece, 1, n, stdout) != n || fflush(stdout)) pc->failed = 1;
    return pc->failed;
}

int cmd_generate(int argc, char **argv)
{
    const char *model = NULL, *prompt = "\n";
    int tokens = 200, top_k = 0, threads = 0;
    float temperature = 1.0f, top_p = 1.0f;
    uint64_t seed = 0;
    opt_choice precision = {QKV_ENUM_PRECISION, NULL, QKV_PRECISION_FP32},
               kv_cache = {QKV_ENUM_KV_CACHE, NULL, QKV_KV_CACHE_AUTO};
    const opt_spec opts[] = {
        {"model", OPT_DIR, &model, "model directory (qkv train-lm)", NULL, NULL},
        {"m", OPT_ALIAS, "model", NULL, NULL, NULL},
        {"prompt", OPT_STRING, &prompt, "text to continue", NULL, NULL},
        {"p", OPT_ALIAS, "prompt", NULL, NULL, NULL},
        {"tokens", OPT_INT, &tokens, "tokens to generate", "[0, 1000000]", NULL},
        {"temperature", OPT_FLOAT, &temperature, "softmax temperature (0: greedy)", ARG_GE0, NULL},
        {"top-k", OPT_INT, &top_k, "sample from the k most probable tokens (0: all)", ARG_GE0,
         NULL},
        {"top-p", OPT_FLOAT, &top_p,
         "sample from the smallest set with this much probability", "(0, 1]", NULL},
        {"seed", OPT_U64, &seed, "the same seed gives the same text", ARG_SEED, NULL},
        {"threads", OPT_INT, &threads, "threads (0: all cores)", ARG_THREADS, NULL},
        {"t", OPT_ALIAS, "threads", NULL, NULL, NULL},
        {"precision", OPT_CHOICE, &precision, CLI_PRECISION_HELP, NULL, NULL},
        {"kv-cache", OPT_CHOICE, &kv_cache, CLI_KV_CACHE_HELP, NULL, NULL},
        {0},
    };
    int rc = args_parse(argc, argv, 2, opts,
                        "usage: qkv generate --model DIR [--prompt TEXT] [--tokens N] "
                        "[--temperature FLOAT] [--top-k N] [--top-p FLOAT] [--seed N]\n"
                        "Prints the prompt, then each new token as it is drawn.");
    if (rc) return rc > 0 ? 0 : 2;
    if (!model) {
        fprintf(stderr, "qkv generate: needs --model DIR\n");
        return 2;
    }
    if (temperature == 0.0f && (args_given(argc, argv, 2, opts, "top-k") ||
                                args_given(argc, argv, 2, opts, "top-p"))) {
        fprintf(stderr, "qkv generate: --temperature 0 is greedy decoding: --top-k and --top-p "
                "sample, give them with a temperature > 0\n");
        return 2;
    }
    lm_dir d;
    if ((rc = lm_dir_open(&d, model,
                          args_given(argc, argv, 2, opts, "precision") ? &precision : NULL,
                          threads)))
        return rc;
    qkv_error err = {0};
    /* one of the enum's values: it cannot fail */
    qkv_lm_set_kv_cache(d.model, (qkv_kv_cache)kv_cache.value, &err);
    if (!*prompt) prompt = "\n";
    size_t n = 0;
    int *ids = encode_text(&d.vocab, prompt, strlen(prompt), &n, "the prompt");
    int *out = malloc((size_t)(tokens ? tokens : 1) * sizeof *out);
    rc = 1;
    if (!ids || !out) goto done;
    print_ctx pc = {&d.vocab, 0};
    qkv_lm_generation g = {tokens, {temperature, top_k, top_p}, seed, print_token, &pc, 1};
    fputs(prompt, stdout);
    fflush(stdout);
    if (qkv_lm_generate(d.model, ids, (int)n, out, NULL, &g, &err)) {
        fprintf(stderr, "\nqkv: %s\n", err.msg);
        goto done;
    }
    if (pc.failed || putchar('\n') == EOF || fflush(stdout)) {
        fprintf(stderr, "qkv: cannot write the text (standard output): %s\n", strerror(errno));
        goto done;
    }
    rc = 0;
done:
    free(ids), free(out);
    lm_dir_free(&d);
    return rc;
}

/* ---- qkv eval-lm ----------------------------------------------------------------------- */

int cmd_eval_lm(int argc, char **argv)
{
    const char *model = NULL, *data = NULL;
    int all = 0, batch = 16, context = 0, threads = 0;
    opt_choice precision = {QKV_ENUM_PRECISION, NULL, QKV_PRECISION_FP32};
    const opt_spec opts[] = {
        {"model", OPT_DIR, &model, "model directory (qkv train-lm)", NULL, NULL},
        {"m", OPT_ALIAS, "model", NULL, NULL, NULL},
        {"data", OPT_FILE, &data, "a text file", NULL, NULL},
        {"d", OPT_ALIAS, "data", NULL, NULL, NULL},
        {"all", OPT_FLAG, &all, "the whole file (default: its held-out end, as in training)", NULL,
         NULL},
        {"context", OPT_INT, &context, "tokens per window (0: the model's context)", "[0, 16384]",
         NULL},
        {"batch", OPT_INT, &batch, "windows per forward pass", "[1, 65536]", NULL},
        {"threads", OPT_INT, &threads, "threads (0: all cores)", ARG_THREADS, NULL},
        {"t", OPT_ALIAS, "threads", NULL, NULL, NULL},
        {"precision", OPT_CHOICE, &precision, CLI_PRECISION_HELP, NULL, NULL},
        {0},
    };
    int rc = args_parse(argc, argv, 2, opts,
                        "usage: qkv eval-lm --model DIR --data FILE [--all]\n"
                        "Per-token loss (nats) and perplexity, each token predicted once from "
                        "the ones before it in its window.");
    if (rc) return rc > 0 ? 0 : 2;
    if (!model || !data) {
        fprintf(stderr, "qkv eval-lm: needs --model DIR and --data FILE\n");
        return 2;
    }
    lm_dir d;
    if ((rc = lm_dir_open(&d, model,
                          args_given(argc, argv, 2, opts, "precision") ? &precision : NULL,
                          threads)))
        return rc;
    qkv_error err = {0};
    const int max_len = qkv_lm_get_config(d.model)->max_len;
    if (context == 0) context = max_len;
    size_t len = 0, n = 0;
    int *ids = NULL;
    rc = 1;
    char *text = cli_read_all(data, QKV_MAX_TEXT_BYTES, &len);
    if (!text) goto done;
    if (context > max_len) {
        fprintf(stderr, "qkv eval-lm: --context %d exceeds the model's %d\n", context, max_len);
        goto done;
    }
    if (!(ids = encode_text(&d.vocab, text, len, &n, data))) goto done;
    /* the held-out end, as train-lm split it */
    size_t first = all ? 0 : n - (size_t)((double)n * d.val_fraction);
    if (n - first < 2) {
        fprintf(stderr, "qkv: %s: %zu tokens to evaluate; at least 2 are needed%s\n", data,
                n - first, all ? "" : " (use --all for the whole file)");
        goto done;
    }
    double loss;
    int64_t count;
    if (qkv_lm_evaluate(d.model, ids + first, n - first, context, batch, &loss, &count, &err)) {
        fprintf(stderr, "qkv: %s\n", err.msg);
        goto done;
    }
    printf("tokens: %lld (%s)\nloss: %.6f nats per token\nperplexity: %.6f\n", (long long)count,
           all ? "the whole file" : "the held-out end", loss, exp(loss));
    rc = 0;
done:
    free(text), free(ids);
    lm_dir_free(&d);
    return rc;
}
