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

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/figures.h"
#include "cli/mpi_reducer.h"
#include "cli/run_options.h"

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

/* The options generate and eval-lm share, and their rows: --model (first in --help), and
 * --threads and --precision (last). */
typedef struct {
    const char *model;
    int threads;
    opt_choice precision;
} lm_cli;

#define LM_MODEL_ROWS(c)                                                                       \
    {"model", OPT_DIR, &(c).model, "model directory (qkv train-lm)", NULL, NULL},              \
    {"m", OPT_ALIAS, "model", NULL, NULL, NULL}
#define LM_RUN_ROWS(c)                                                                         \
    {"threads", OPT_INT, &(c).threads, "threads (0: all cores)", ARG_THREADS, NULL},           \
    {"t", OPT_ALIAS, "threads", NULL, NULL, NULL},                                             \
    {"precision", OPT_CHOICE, &(c).precision, CLI_PRECISION_HELP, NULL, NULL}

/* c's model directory with its --threads, at its --precision where given (else the model's
 * own): 0, or the exit code 1 (the directory does not load). */
static int lm_dir_open(lm_dir *d, const lm_cli *c, int argc, char **argv, const opt_spec *opts)
{
    const qkv_precision prec = (qkv_precision)c->precision.value;
    const int given = args_given(argc, argv, 2, opts, "precision");
    cli_threads(c->threads);
    return lm_dir_load(d, c->model, given ? &prec : NULL, QKV_DEVICE_CPU) ? 1 : 0;
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

static void print_notice(const char *text, void *ctx)
{
    (void)ctx;
    fprintf(stderr, "qkv train-lm: %s\n", text);
}

/* How the training ended: stopped early at --stop-after-steps, or finished, then the loss on
 * the whole held-out text. -1 (message printed) if that fails. */
static int report_end(qkv_run *r, const char *out, int quiet, const qkv_run_info *info,
                      double t0)
{
#define VALUE(name) (int)qkv_run_get_int(r, qkv_run_option_find(QKV_RUN_LM, name, NULL))
    const int steps = VALUE("steps"), stop_after = VALUE("stop-after-steps");
#undef VALUE
    if (stop_after > 0 && (steps == 0 || stop_after < steps)) {
        if (!quiet)
            fprintf(stderr, "\nqkv train-lm: stopped after step %d; continue with --resume\n",
                    stop_after);
        return 0;
    }
    if (!quiet) fprintf(stderr, "\nqkv train-lm: wrote %s in %.1fs\n", out, qkv_now_s() - t0);
    if (info->val_tokens >= 2) { /* the whole held-out text, once */
        qkv_error err = {0};
        double loss;
        int64_t count;
        if (qkv_run_held_out_loss(r, &loss, &count, &err)) {
            fprintf(stderr, "qkv: %s\n", err.msg);
            return -1;
        }
        printf("held-out loss %.4f nats per token, perplexity %.3f (%lld tokens)\n", loss,
               exp(loss), (long long)count);
    }
    return 0;
}

/* Prepares and trains the run claimed in --out: the summary line, the progress, the held-out
 * loss, the curves. The exit status. */
static int run(cli_train *t, int writer, int ranks)
{
    qkv_run *r = t->run.run;
    qkv_error err = {0};
    qkv_run_info info;
    if (qkv_run_prepare(r, &info, &err)) goto fail;
    if (!t->quiet)
        fprintf(stderr, "qkv train-lm: %zu tokens (%zu training, %zu held out), vocabulary %d, "
                "%zu parameters, %s attention, %d threads%s\n", info.tokens, info.train_tokens,
                info.val_tokens, info.vocab, info.parameters,
                qkv_attention_kind_name(info.attention), qkv_get_threads(),
                info.resuming ? ", resuming" : "");
    if (!t->quiet && ranks > 1)
        fprintf(stderr, "qkv train-lm: data-parallel over %d ranks (MPI), %d threads each; "
                "each step's windows are split among them\n", ranks, qkv_get_threads());
    const float minutes = qkv_run_get_float(r, qkv_run_option_find(QKV_RUN_LM, "minutes", NULL));
    progress_ctx pc = {isatty(2), t->quiet, minutes};
    qkv_run_set_hooks(r, &(qkv_run_hooks){.lm_progress = show_progress, .notice = print_notice,
                                          .ctx = &pc});
    const double t0 = qkv_now_s();
    if (qkv_run_train(r, &err)) goto fail;
    if (writer && report_end(r, t->out, t->quiet, &info, t0)) return 1;
    /* a failed figure is no failed run */
    if (writer && !fig_training_after_run(t->out) && !t->quiet)
        fprintf(stderr, "qkv train-lm: training curves in %s/training.png\n", t->out);
    return 0;
fail:
    cli_print_error("qkv", &err);
    return 1;
}

enum { MAX_LM_OPTIONS = 48 };

/* The option table over t (every option once, in the order --help lists them: the run's rows
 * from the library, the command's own here); opts has room for MAX_LM_OPTIONS. On --resume
 * the values are as recorded, then parsed over that. */
static void train_lm_table(cli_train *t, opt_spec *opts)
{
    const opt_spec table[] = {
        RUN_ROW("data"),
        {"d", OPT_ALIAS, "data", NULL, NULL, NULL},
        {"out", OPT_DIR, &t->out, "model directory to write", NULL, NULL},
        {"o", OPT_ALIAS, "out", NULL, NULL, NULL},
        RUN_ROW("vocab"), RUN_ROW("attention"), RUN_ROW("d-model"), RUN_ROW("heads"),
        RUN_ROW("ffn"), RUN_ROW("layers"), RUN_ROW("dropout"), RUN_ROW("context"),
        RUN_ROW("pre-norm"), RUN_ROW("tie"), RUN_ROW("act"), RUN_ROW("learned-pos"),
        RUN_ROW("no-bias"), RUN_ROW("batch"), RUN_ROW("accum"), RUN_ROW("steps"), RUN_ROW("minutes"),
        RUN_ROW("lr"), RUN_ROW("warmup"), RUN_ROW("cosine"), RUN_ROW("beta2"),
        RUN_ROW("weight-decay"), RUN_ROW("clip"), RUN_ROW("val-fraction"),
        RUN_ROW("eval-every"), RUN_ROW("eval-tokens"), RUN_ROW("log-every"), RUN_ROW("seed"),
        {"threads", OPT_INT, &t->threads, CLI_TRAIN_THREADS_HELP, ARG_THREADS, NULL},
        {"t", OPT_ALIAS, "threads", NULL, NULL, NULL},
        {"allreduce", OPT_CHOICE, &t->allreduce, CLI_TRAIN_ALLREDUCE_HELP, NULL, NULL},
        {"bucket-kb", OPT_INT, &t->bucket_kb, CLI_TRAIN_BUCKET_KB_HELP, "[4, 1048576]", NULL},
        RUN_ROW("precision"),
        {"resume", OPT_FLAG, &t->resume, CLI_TRAIN_RESUME_HELP, NULL, NULL},
        {"overwrite", OPT_FLAG, &t->overwrite, CLI_TRAIN_OVERWRITE_HELP, NULL, NULL},
        RUN_ROW("stop-after-steps"),
        {"quiet", OPT_FLAG, &t->quiet, "no progress output", NULL, NULL},
        {"q", OPT_ALIAS, "quiet", NULL, NULL, NULL},
        {0},
    };
    _Static_assert(sizeof table <= MAX_LM_OPTIONS * sizeof *table, "MAX_LM_OPTIONS");
    memcpy(opts, table, sizeof table);
}

/* The options as parsed checked and handed to the run: the exit status, or -1 to go on. */
static int train_lm_options(cli_train *t, opt_spec *opts, int argc, char **argv)
{
    (void)opts, (void)argc, (void)argv;
    qkv_run *r = t->run.run;
    qkv_error err = {0};
#define VALUE(name) (int)qkv_run_get_int(r, qkv_run_option_find(QKV_RUN_LM, name, NULL))
    if (cli_run_push(&t->run, "qkv train-lm")) return 2;
    if (!t->out || !qkv_run_get_text(r, qkv_run_option_find(QKV_RUN_LM, "data", NULL))) {
        fprintf(stderr, "qkv train-lm: needs --data FILE and --out DIR\n");
        return 2;
    }
    if (cli_positions_fit("qkv train-lm", "context", VALUE("context"), VALUE("d-model")) ||
        cli_train_precision((qkv_precision)VALUE("precision")))
        return 2;
#undef VALUE
    if (qkv_run_check(r, &err)) return cli_print_error("qkv train-lm", &err), 2;
    return -1;
}

static const cli_train_command TRAIN_LM = {
    "qkv train-lm", QKV_RUN_LM,
    "usage: qkv train-lm --data FILE --out DIR (--steps N | --minutes FLOAT) [options]\n"
    "Trains a decoder-only language model on a text file.",
    train_lm_table, train_lm_options, run, print_notice};

static int train_lm_main(int argc, char **argv, cli_ranks *job)
{
    cli_train c = {0};
    opt_spec opts[MAX_LM_OPTIONS];
    return cli_train_main(&TRAIN_LM, &c, opts, argc, argv, job);
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
    lm_cli c = {NULL, 0, {QKV_ENUM_PRECISION, NULL, QKV_PRECISION_FP32}};
    const char *prompt = "\n";
    int tokens = 200, top_k = 0;
    float temperature = 1.0f, top_p = 1.0f;
    uint64_t seed = 0;
    opt_choice kv_cache = {QKV_ENUM_KV_CACHE, NULL, QKV_KV_CACHE_AUTO};
    const opt_spec opts[] = {
        LM_MODEL_ROWS(c),
        {"prompt", OPT_STRING, &prompt, "text to continue", NULL, NULL},
        {"p", OPT_ALIAS, "prompt", NULL, NULL, NULL},
        {"tokens", OPT_INT, &tokens, "tokens to generate", "[0, 1000000]", NULL},
        {"temperature", OPT_FLOAT, &temperature, "softmax temperature (0: greedy)", ARG_GE0, NULL},
        {"top-k", OPT_INT, &top_k, "sample from the k most probable tokens (0: all)", ARG_GE0,
         NULL},
        {"top-p", OPT_FLOAT, &top_p,
         "sample from the smallest set with this much probability", "(0, 1]", NULL},
        {"seed", OPT_U64, &seed, "the same seed gives the same text", ARG_SEED, NULL},
        LM_RUN_ROWS(c),
        {"kv-cache", OPT_CHOICE, &kv_cache, CLI_KV_CACHE_HELP, NULL, NULL},
        {0},
    };
    int rc = args_parse(argc, argv, 2, opts,
                        "usage: qkv generate --model DIR [--prompt TEXT] [--tokens N] "
                        "[--temperature FLOAT] [--top-k N] [--top-p FLOAT] [--seed N]\n"
                        "Prints the prompt, then each new token as it is drawn.");
    if (rc) return rc > 0 ? 0 : 2;
    if (!c.model) {
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
    if ((rc = lm_dir_open(&d, &c, argc, argv, opts))) return rc;
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
    lm_cli c = {NULL, 0, {QKV_ENUM_PRECISION, NULL, QKV_PRECISION_FP32}};
    const char *data = NULL;
    int all = 0, batch = 16, context = 0;
    const opt_spec opts[] = {
        LM_MODEL_ROWS(c),
        {"data", OPT_FILE, &data, "a text file", NULL, NULL},
        {"d", OPT_ALIAS, "data", NULL, NULL, NULL},
        {"all", OPT_FLAG, &all, "the whole file (default: its held-out end, as in training)", NULL,
         NULL},
        {"context", OPT_INT, &context, "tokens per window (0: the model's context)", "[0, 16384]",
         NULL},
        {"batch", OPT_INT, &batch, "windows per forward pass", "[1, 65536]", NULL},
        LM_RUN_ROWS(c),
        {0},
    };
    int rc = args_parse(argc, argv, 2, opts,
                        "usage: qkv eval-lm --model DIR --data FILE [--all]\n"
                        "Per-token loss (nats) and perplexity, each token predicted once from "
                        "the ones before it in its window.");
    if (rc) return rc > 0 ? 0 : 2;
    if (!c.model || !data) {
        fprintf(stderr, "qkv eval-lm: needs --model DIR and --data FILE\n");
        return 2;
    }
    lm_dir d;
    if ((rc = lm_dir_open(&d, &c, argc, argv, opts))) return rc;
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
