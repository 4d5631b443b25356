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
int lm_dir_load(lm_dir *d, const char *dir, const qkv_precision *prec)
{
    memset(d, 0, sizeof *d);
    qkv_error err = {0};
    if (qkv_generator_open(&d->gen, dir, &err)) goto fail;
    const qkv_lm_run_info *info = qkv_generator_run_info(d->gen);
    d->model = qkv_generator_model(d->gen), d->vocab = *qkv_generator_vocab(d->gen);
    d->byte_level = info->byte_level, d->context = info->context, d->batch = info->batch;
    d->val_fraction = info->val_fraction;
    if (prec && qkv_lm_set_precision(d->model, *prec, &err)) goto fail;
    return 0;
fail:
    fprintf(stderr, "qkv: %s\n", err.msg);
    lm_dir_free(d);
    return -1;
}

/* The model directory of generate and eval-lm, with their --precision and --threads: 0, or
 * the exit code (1: the directory does not load, 2: an unknown precision). */
static int lm_dir_open(lm_dir *d, const char *dir, const char *precision, int threads)
{
    qkv_precision prec;
    if (cli_precision(precision, &prec)) return 2;
    cli_threads(threads);
    return lm_dir_load(d, dir, &prec) ? 1 : 0;
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
    const char *precision;
    const cJSON *history; /* resumed runs: what changed when (NULL for a new run) */
    int writer;           /* this process writes the run directory (rank 0 under mpirun) */
} lm_run;

/* A float option as its shortest decimal (0.005, not 0.004999999888). */
static double decimal(float x)
{
    char text[32];
    snprintf(text, sizeof text, "%.7g", (double)x);
    return strtod(text, NULL);
}

/* train.json: the data and its split, and every training option (a resumed run compares
 * them, resume.h), with the history of a resumed run. */
static int write_train_json(const char *dir, const qkv_lm_train_options *o, const lm_run *r,
                            size_t n_train, size_t n_val)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/train.json", dir);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "data", r->data);
    cJSON_AddStringToObject(j, "vocab", r->byte_level ? "byte" : "char");
    cJSON_AddNumberToObject(j, "context", o->context);
    cJSON_AddNumberToObject(j, "batch", o->batch);
    cJSON_AddNumberToObject(j, "val_fraction", round(r->val_fraction * 1e6) / 1e6);
    cJSON_AddNumberToObject(j, "train_tokens", (double)n_train);
    cJSON_AddNumberToObject(j, "val_tokens", (double)n_val);
    cJSON_AddNumberToObject(j, "seed", (double)o->seed);
    cJSON_AddNumberToObject(j, "steps", (double)o->steps);
    cJSON_AddNumberToObject(j, "minutes", decimal((float)o->minutes));
    cJSON_AddNumberToObject(j, "lr", decimal(o->lr));
    cJSON_AddNumberToObject(j, "warmup", o->warmup);
    cJSON_AddBoolToObject(j, "cosine", o->cosine);
    cJSON_AddNumberToObject(j, "beta2", decimal(o->beta2));
    cJSON_AddNumberToObject(j, "weight_decay", decimal(o->weight_decay));
    cJSON_AddNumberToObject(j, "clip", decimal(o->clip));
    cJSON_AddNumberToObject(j, "eval_every", o->eval_every);
    cJSON_AddNumberToObject(j, "eval_tokens", o->eval_tokens);
    cJSON_AddNumberToObject(j, "log_every", o->log_every);
    cJSON_AddStringToObject(j, "precision", r->precision);
    if (r->history) cJSON_AddItemToObject(j, "history", cJSON_Duplicate(r->history, 1));
    char *text = cJSON_Print(j);
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
    if (r->writer && write_train_json(out, o, r, n_train, n_val)) goto done;
    if (qkv_lm_set_precision(d.model, r->prec, &err)) goto fail;
    const qkv_lm_config *mc = qkv_lm_get_config(d.model);
    if (!r->quiet)
        fprintf(stderr, "qkv train-lm: %zu tokens (%zu training, %zu held out), vocabulary %d, "
                "%zu parameters, %s attention, %d threads%s\n", n, n_train, n_val, mc->vocab,
                qkv_lm_num_params(d.model),
                mc->attention == QKV_ATTENTION_LINEAR ? "linear" : "softmax", qkv_get_threads(),
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

/* What a resumed train-lm compares with its directory (resume.h). */
static const resume_option lm_model_options[] = {
    {"d-model", "d_model", 1, 0}, {"heads", "heads", 1, 0}, {"ffn", "ffn", 1, 0},
    {"layers", "layers", 1, 0}, {"dropout", "dropout", 1, 0}, {"pre-norm", "pre_norm", 1, 0},
    {"tie", "tie", 1, 0}, {"act", "act", 1, 0}, {"learned-pos", "learned_pos", 1, 0},
    {"no-bias", "bias", 1, 1}, {"attention", "attention", 1, 0},
};
static const resume_option lm_train_options[] = {
    /* the text, its split and vocabulary, and the windows drawn from it */
    {"data", "data", 1, 0}, {"vocab", "vocab", 1, 0}, {"val-fraction", "val_fraction", 1, 0},
    {"context", "context", 1, 0}, {"batch", "batch", 1, 0}, {"seed", "seed", 1, 0},
    /* how it learns from here on, and how it reports */
    {"steps", "steps", 0, 0}, {"minutes", "minutes", 0, 0}, {"lr", "lr", 0, 0},
    {"warmup", "warmup", 0, 0}, {"cosine", "cosine", 0, 0}, {"beta2", "beta2", 0, 0},
    {"weight-decay", "weight_decay", 0, 0}, {"clip", "clip", 0, 0},
    {"eval-every", "eval_every", 0, 0}, {"eval-tokens", "eval_tokens", 0, 0},
    {"log-every", "log_every", 0, 0}, {"precision", "precision", 0, 0},
};

static int train_lm_main(int argc, char **argv, cli_ranks *job)
{
    const qkv_reducer *ranks = &job->reducer;
    qkv_lm_config cfg = qkv_lm_default_config();
    qkv_lm_train_options o = qkv_lm_train_default_options();
    const char *data = NULL, *out = NULL, *vocab_kind = "char", *attention = "softmax",
               *act = "relu", *precision = "fp32";
    int steps = 0, threads = 0, quiet = 0, no_bias = 0, stop_after = 0, overwrite = 0;
    float minutes = 0.0f, val_fraction = 0.1f;
    o.seed = 0;
    resume_record rec = {0};
    run_dir rd = {-1};
    const opt_spec opts[] = {
        {"data", OPT_STRING, &data, "a text file; its last --val-fraction is held out", NULL},
        {"out", OPT_STRING, &out, "model directory to write", NULL},
        {"vocab", OPT_STRING, &vocab_kind, "char (UTF-8 characters) or byte (the 256 bytes)", NULL},
        {"attention", OPT_STRING, &attention, "softmax or linear", NULL},
        {"d-model", OPT_INT, &cfg.d_model, "model width", "[1, 65536]"},
        {"heads", OPT_INT, &cfg.heads, "attention heads", "[1, 65536]"},
        {"ffn", OPT_INT, &cfg.ffn, "hidden size of the position-wise FFN", "[1, 1048576]"},
        {"layers", OPT_INT, &cfg.layers, "blocks", "[1, 1024]"},
        {"dropout", OPT_FLOAT, &cfg.dropout, "dropout rate", ARG_RATE},
        {"context", OPT_INT, &o.context,
         "tokens per training window: the model's context", "[2, 16384]"},
        {"pre-norm", OPT_FLAG, &cfg.pre_norm,
         "x + Sublayer(LayerNorm(x)), and a final LayerNorm", NULL},
        {"tie", OPT_FLAG, &cfg.tie, "output projection = token embedding", NULL},
        {"act", OPT_STRING, &act, "FFN activation: relu, gelu or silu (swish)", NULL},
        {"learned-pos", OPT_FLAG, &cfg.learned_pos,
         "learned instead of sinusoidal positions", NULL},
        {"no-bias", OPT_FLAG, &no_bias, "no biases in the attention projections", NULL},
        {"batch", OPT_INT, &o.batch, "windows per step", "[1, 65536]"},
        {"lr", OPT_FLOAT, &o.lr, "Adam learning rate", ARG_GT0},
        {"warmup", OPT_INT, &o.warmup, "steps of linear learning-rate warm-up", ARG_GE0},
        {"cosine", OPT_FLAG, &o.cosine, "decay the learning rate to lr/10 (cosine) at --steps, "
                                        "or at the end of --minutes", NULL},
        {"beta2", OPT_FLOAT, &o.beta2, "Adam's second-moment decay", ARG_RATE},
        {"weight-decay", OPT_FLOAT, &o.weight_decay, "decoupled weight decay (AdamW)", ARG_GE0},
        {"clip", OPT_FLOAT, &o.clip, "clip the global gradient norm to this (0: off)", ARG_GE0},
        {"steps", OPT_INT, &steps, "optimizer steps (0: until --minutes)", ARG_GE0},
        {"minutes", OPT_FLOAT, &minutes,
         "time budget: stop after this many minutes (0: none)", ARG_GE0},
        {"val-fraction", OPT_FLOAT, &val_fraction, "the end of the file held out", ARG_RATE},
        {"eval-every", OPT_INT, &o.eval_every,
         "held-out loss every N steps (0: at the end)", ARG_GE0},
        {"eval-tokens", OPT_INT, &o.eval_tokens,
         "held-out tokens each evaluation reads (0: all)", ARG_GE0},
        {"log-every", OPT_INT, &o.log_every, "metrics line and checkpoint every N steps", ARG_GE1},
        {"seed", OPT_U64, &o.seed, "initialisation, windows and dropout", ARG_SEED},
        {"threads", OPT_INT, &threads, "threads per rank (0: all cores; under mpirun, shared among the ranks of a machine)", ARG_THREADS},
        {"precision", OPT_STRING, &precision, CLI_TRAIN_PRECISION_HELP, NULL},
        {"resume", OPT_FLAG, &o.resume, "continue from DIR/checkpoint.safetensors, with the "
                                        "options it recorded (those defining the model or data "
                                        "cannot change)", NULL},
        {"overwrite", OPT_FLAG, &overwrite, "replace what DIR holds (a trained model, another "
                                            "run, files of a run's names)", NULL},
        {"stop-after-steps", OPT_INT, &stop_after,
         "checkpoint and stop at this step (0: never)", ARG_GE0},
        {"quiet", OPT_FLAG, &quiet, "no progress output", NULL},
        {NULL, 0, NULL, NULL, NULL},
    };
    int rc = args_parse(argc, argv, 2, opts,
                        "usage: qkv train-lm --data FILE --out DIR (--steps N | --minutes M) "
                        "[options]");
    if (rc) return rc > 0 ? 0 : 2;
    const int writer = cli_ranks_writer(job, &quiet);
    o.reducer = ranks;
    if (o.resume && overwrite) {
        fprintf(stderr, "qkv train-lm: --resume continues the run in --out, --overwrite "
                "replaces it: give one\n");
        goto usage;
    }
    if (out && o.resume) {
        const resume_table tables[] = {
            {0, lm_model_options, (int)(sizeof lm_model_options / sizeof *lm_model_options)},
            {1, lm_train_options, (int)(sizeof lm_train_options / sizeof *lm_train_options)},
        };
        /* a resumed run claims its directory first: it reads it */
        rc = run_dir_claim_writer(&rd, out, &RUN_LM, RUN_RESUME, writer, argc, argv) ||
                     resume_start(&rec, out)
                 ? 1 : resume_finish(&rec, tables, 2, opts, argc, argv, "qkv train-lm");
        if (rc) goto end;
    }
    if (!data || !out) {
        fprintf(stderr, "qkv train-lm: needs --data FILE and --out DIR\n");
        goto usage;
    }
    const int byte_level = !strcmp(vocab_kind, "byte");
    if ((!byte_level && strcmp(vocab_kind, "char")) ||
        (strcmp(attention, "softmax") && strcmp(attention, "linear")) ||
        (strcmp(act, "relu") && strcmp(act, "gelu") && strcmp(act, "silu"))) {
        fprintf(stderr, "qkv train-lm: --vocab is char|byte, --attention softmax|linear, --act "
                "relu|gelu|silu\n");
        goto usage;
    }
    if (steps < 0 || minutes < 0 || (steps == 0 && minutes == 0) || o.context < 2 ||
        !(val_fraction >= 0.0f && val_fraction < 1.0f) || stop_after < 0) {
        fprintf(stderr, "qkv train-lm: give --steps N or --minutes M (or both), a --context of at "
                "least 2 and a --val-fraction in [0, 1)\n");
        goto usage;
    }
    if (cli_positions_fit("qkv train-lm", "context", o.context, cfg.d_model)) goto usage;
    qkv_precision prec;
    if (cli_train_precision(precision, &prec)) goto usage;
    cfg.attention = !strcmp(attention, "linear") ? QKV_ATTENTION_LINEAR : QKV_ATTENTION_SOFTMAX;
    cfg.act = !strcmp(act, "gelu") ? QKV_ACT_GELU : !strcmp(act, "silu") ? QKV_ACT_SILU : QKV_ACT_RELU;
    cfg.final_norm = cfg.pre_norm, cfg.bias = !no_bias, cfg.max_len = o.context;
    o.steps = steps, o.minutes = minutes, o.stop_after_steps = stop_after, o.out_dir = out;
    cli_threads(cli_ranks_threads(job, threads));

    const lm_run r = {data, byte_level, val_fraction, steps, stop_after, quiet, prec, precision,
                      rec.history, writer};
    rc = 1;
    if (o.resume || !run_dir_claim_writer(&rd, out, &RUN_LM, overwrite ? RUN_OVERWRITE : RUN_NEW,
                                          writer, argc, argv))
        rc = run(&cfg, &o, &r);
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
    const char *model = NULL, *prompt = "\n", *precision = "fp32", *kv_cache = "auto";
    int tokens = 200, top_k = 0, threads = 0;
    float temperature = 1.0f, top_p = 1.0f;
    uint64_t seed = 0;
    const opt_spec opts[] = {
        {"model", OPT_STRING, &model, "model directory (qkv train-lm)", NULL},
        {"prompt", OPT_STRING, &prompt, "text to continue (default: a newline)", NULL},
        {"tokens", OPT_INT, &tokens, "tokens to generate", "[0, 1000000]"},
        {"temperature", OPT_FLOAT, &temperature, "softmax temperature (0: greedy)", ARG_GE0},
        {"top-k", OPT_INT, &top_k, "sample from the k most probable tokens (0: all)", ARG_GE0},
        {"top-p", OPT_FLOAT, &top_p,
         "sample from the smallest set with this much probability", "(0, 1]"},
        {"seed", OPT_U64, &seed, "the same seed gives the same text", ARG_SEED},
        {"threads", OPT_INT, &threads, "threads (0: all cores)", ARG_THREADS},
        {"precision", OPT_STRING, &precision, CLI_PRECISION_HELP, NULL},
        {"kv-cache", OPT_STRING, &kv_cache, CLI_KV_CACHE_HELP, NULL},
        {NULL, 0, NULL, NULL, NULL},
    };
    int rc = args_parse(argc, argv, 2, opts,
                        "usage: qkv generate --model DIR [--prompt TEXT] [--tokens N] "
                        "[--temperature T] [--top-k K] [--top-p P] [--seed S]\n"
                        "prints the prompt, then each new token as it is drawn");
    if (rc) return rc > 0 ? 0 : 2;
    if (!model || tokens < 0 || temperature < 0 || top_k < 0 || !(top_p > 0.0f)) {
        fprintf(stderr, "qkv generate: needs --model DIR, --tokens >= 0, --temperature >= 0, "
                "--top-k >= 0 and --top-p in (0, 1]\n");
        return 2;
    }
    if (temperature == 0.0f && (args_given(argc, argv, 2, "top-k") ||
                                args_given(argc, argv, 2, "top-p"))) {
        fprintf(stderr, "qkv generate: --temperature 0 is greedy decoding: --top-k and --top-p "
                "sample, give them with a temperature > 0\n");
        return 2;
    }
    qkv_kv_cache kv;
    if (cli_kv_cache(kv_cache, &kv)) return 2;
    lm_dir d;
    if ((rc = lm_dir_open(&d, model, precision, threads))) return rc;
    qkv_error err = {0};
    qkv_lm_set_kv_cache(d.model, kv, &err); /* kv is one of the enum's: it cannot fail */
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
    const char *model = NULL, *data = NULL, *precision = "fp32";
    int all = 0, batch = 16, context = 0, threads = 0;
    const opt_spec opts[] = {
        {"model", OPT_STRING, &model, "model directory (qkv train-lm)", NULL},
        {"data", OPT_STRING, &data, "a text file", NULL},
        {"all", OPT_FLAG, &all, "the whole file (default: its held-out end, as in training)", NULL},
        {"context", OPT_INT, &context, "tokens per window (0: the model's context)", "[0, 16384]"},
        {"batch", OPT_INT, &batch, "windows per forward pass", "[1, 65536]"},
        {"threads", OPT_INT, &threads, "threads (0: all cores)", ARG_THREADS},
        {"precision", OPT_STRING, &precision, CLI_PRECISION_HELP, NULL},
        {NULL, 0, NULL, NULL, NULL},
    };
    int rc = args_parse(argc, argv, 2, opts,
                        "usage: qkv eval-lm --model DIR --data FILE [--all]\n"
                        "per-token loss (nats) and perplexity, each token predicted once from "
                        "the ones before it in its window");
    if (rc) return rc > 0 ? 0 : 2;
    if (!model || !data || batch < 1 || context < 0) {
        fprintf(stderr, "qkv eval-lm: needs --model DIR and --data FILE (and --batch >= 1)\n");
        return 2;
    }
    lm_dir d;
    if ((rc = lm_dir_open(&d, model, precision, threads))) return rc;
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
