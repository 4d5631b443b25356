/* SPDX-License-Identifier: MIT */
/* qkv train: read a parallel corpus, build vocabularies, train, save the model directory: the
 * options parsed, the library's run (qkv/run.h) doing the rest, its progress printed. */
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

typedef struct {
    int tty, quiet, every;
    double t0;
    qkv_train_progress last; /* how the run ended */
} progress_ctx;

static void show_progress(const qkv_train_progress *p, void *ctx)
{
    progress_ctx *pc = ctx;
    pc->last = *p;
    if (pc->quiet) return;
    double done = (double)(p->epoch - 1) + (double)p->batch / p->batches;
    double elapsed = qkv_now_s() - pc->t0, eta = done > 0 ? elapsed * (p->epochs - done) / done : 0;
    if (pc->tty) {
        char bar[21];
        int fill = (int)(20.0 * p->batch / p->batches);
        for (int i = 0; i < 20; i++) bar[i] = i < fill ? '#' : '.';
        bar[20] = '\0';
        fprintf(stderr, "\repoch %d/%d [%s] loss %.4f (d2l %.4f) %.0f tok/s ETA %dm%02ds  ",
                p->epoch, p->epochs, bar, p->loss, p->d2l_loss, p->tokens_per_s,
                (int)eta / 60, (int)eta % 60);
        if (p->end_of_epoch && p->epoch == p->epochs) fputc('\n', stderr);
    } else if (p->end_of_epoch && (p->epoch % pc->every == 0 || p->epoch == p->epochs)) {
        fprintf(stderr, "epoch %d/%d  loss %.4f  (d2l %.4f)  %.0f tok/s  step %lld  %.1fs\n",
                p->epoch, p->epochs, p->loss, p->d2l_loss, p->tokens_per_s, (long long)p->step,
                elapsed);
    }
    if (p->validated) {
        if (pc->tty) fputc('\n', stderr);
        if (p->end_of_epoch) fprintf(stderr, "epoch %d: validation loss %.4f", p->epoch, p->val_loss);
        else fprintf(stderr, "step %lld: validation loss %.4f", (long long)p->step, p->val_loss);
        if (p->bleu == p->bleu) fprintf(stderr, ", BLEU %.2f", p->bleu);
        fprintf(stderr, "%s%s\n", p->best ? " (best so far)" : "",
                p->stopping ? "; no better for --patience validations: stopping" : "");
    }
}

/* A notice of the run (a warning, a change of a resumed run), printed as it comes. */
static void print_notice(const char *text, void *ctx)
{
    (void)ctx;
    fprintf(stderr, "qkv train: %s\n", text);
}

/* Every option of qkv train, as parsed (on --resume: as recorded, then parsed over that): the
 * run's (qkv/run.h), those of every training command, and the command's own. */
typedef struct {
    cli_train t; /* first */
    int every;
} train_cli;

/* Prepares and trains the run claimed in --out: the summary line, the progress, how it ended,
 * the curves. The exit status. */
static int run(cli_train *t, int writer, int ranks)
{
    qkv_run *r = t->run.run;
    qkv_error err = {0};
    qkv_run_info info;
    progress_ctx pc = {isatty(2), t->quiet, ((train_cli *)t)->every, 0.0, {0}};
    if (qkv_run_prepare(r, &info, &err)) goto fail;
    if (!t->quiet)
        fprintf(stderr, "qkv train: %d pairs%s, vocabularies %d/%d%s, %zu parameters, %d "
                "threads%s, %s%s\n", info.pairs, info.valid_pairs ? " (+ validation)" : "",
                info.src_vocab, info.tgt_vocab,
                info.tokenizer == QKV_TOKENIZER_BPE   ? " (subwords)"
                : info.tokenizer == QKV_TOKENIZER_SPM ? " (SentencePiece)" : "",
                info.parameters, qkv_get_threads(), ranks > 1 ? " per rank" : "",
                qkv_precision_name(info.precision), info.resuming ? ", resuming" : "");
    if (!t->quiet && ranks > 1)
        fprintf(stderr, "qkv train: data-parallel over %d ranks (MPI); each batch is split "
                "among them\n", ranks);
    pc.t0 = qkv_now_s();
    qkv_run_set_hooks(r, &(qkv_run_hooks){.progress = show_progress, .notice = print_notice,
                                          .ctx = &pc});
    if (qkv_run_train(r, &err)) goto fail;
    const qkv_train_progress *end = &pc.last;
    const int stop_after = (int)qkv_run_get_int(
        r, qkv_run_option_find(QKV_RUN_TRANSLATION, "stop-after-steps", NULL));
    if (!t->quiet && stop_after > 0 && end->step >= stop_after && !end->stopping &&
        !(end->end_of_epoch && end->epoch == end->epochs))
        fprintf(stderr, "qkv train: stopped after step %d; continue with --resume\n", stop_after);
    else if (!t->quiet)
        fprintf(stderr, "qkv train: wrote %s in %.1fs%s\n", t->out, qkv_now_s() - pc.t0,
                info.valid_pairs ? " (the best model by validation in DIR/best)" : "");
    /* a failed figure is no failed run */
    if (writer && !fig_training_after_run(t->out) && !t->quiet)
        fprintf(stderr, "qkv train: training curves in %s/training.png\n", t->out);
    return 0;
fail:
    cli_print_error("qkv", &err);
    return 1;
}

static const char USAGE[] =
    "usage: qkv train (--data FILE | --src FILE --tgt FILE) --out DIR [options]\n"
    "Trains an encoder-decoder Transformer on sentence pairs and writes the model directory.";

enum { MAX_TRAIN_OPTIONS = 80 };

/* The option table over t (every option once, in the order --help lists them: the run's rows
 * from the library, the command's own here); opts has room for MAX_TRAIN_OPTIONS. */
static void train_table(cli_train *t, opt_spec *opts)
{
    train_cli *c = (train_cli *)t;
    c->every = 10;
    const opt_spec table[] = {
        RUN_ROW("data"),
        {"d", OPT_ALIAS, "data", NULL, NULL, NULL},
        RUN_ROW("src"),
        RUN_ROW("tgt"),
        {"out", OPT_DIR, &t->out, "model directory to write", NULL, NULL},
        {"o", OPT_ALIAS, "out", NULL, NULL, NULL},
        RUN_ROW("preset"), RUN_ROW("tokenizer"), RUN_ROW("vocab-size"), RUN_ROW("joint-bpe"), RUN_ROW("spm-type"),
        RUN_ROW("d-model"), RUN_ROW("heads"), RUN_ROW("ffn"), RUN_ROW("layers"),
        RUN_ROW("enc-layers"), RUN_ROW("dec-layers"), RUN_ROW("dropout"), RUN_ROW("max-len"),
        RUN_ROW("bias"), RUN_ROW("pre-norm"), RUN_ROW("final-norm"), RUN_ROW("act"),
        RUN_ROW("tie"), RUN_ROW("learned-pos"), RUN_ROW("batch"), RUN_ROW("batch-tokens"),
        RUN_ROW("accum"), RUN_ROW("max-tokens"),
        {"num-steps", OPT_ALIAS, "max-tokens", "d2l's name", NULL, NULL},
        RUN_ROW("schedule"), RUN_ROW("lr"), RUN_ROW("warmup"), RUN_ROW("lr-factor"),
        RUN_ROW("beta1"), RUN_ROW("beta2"), RUN_ROW("adam-eps"), RUN_ROW("weight-decay"),
        RUN_ROW("clip"), RUN_ROW("label-smoothing"), RUN_ROW("loss"), RUN_ROW("epochs"),
        RUN_ROW("minutes"), RUN_ROW("num-examples"), RUN_ROW("min-freq"), RUN_ROW("valid"),
        RUN_ROW("valid-src"), RUN_ROW("valid-tgt"), RUN_ROW("no-bleu"), RUN_ROW("valid-every"),
        RUN_ROW("patience"), RUN_ROW("keep-epochs"), RUN_ROW("save-every"), RUN_ROW("keep-last"),
        RUN_ROW("seed"),
        {"threads", OPT_INT, &t->threads, CLI_TRAIN_THREADS_HELP, ARG_THREADS, NULL},
        {"t", OPT_ALIAS, "threads", NULL, NULL, NULL},
        {"allreduce", OPT_CHOICE, &t->allreduce, CLI_TRAIN_ALLREDUCE_HELP, NULL, NULL},
        {"bucket-kb", OPT_INT, &t->bucket_kb, CLI_TRAIN_BUCKET_KB_HELP, "[4, 1048576]", NULL},
        RUN_ROW("precision"), RUN_ROW("device"), RUN_ROW("checkpoint-every"),
        RUN_ROW("skip-nonfinite"),
        {"resume", OPT_FLAG, &t->resume, CLI_TRAIN_RESUME_HELP, NULL, NULL},
        {"overwrite", OPT_FLAG, &t->overwrite, CLI_TRAIN_OVERWRITE_HELP, NULL, NULL},
        RUN_ROW("stop-after-steps"),
        {"log-every", OPT_INT, &c->every, "print a line every N epochs (without a terminal)",
         ARG_GE1, NULL},
        {"quiet", OPT_FLAG, &t->quiet, "no progress output", NULL, NULL},
        {"q", OPT_ALIAS, "quiet", NULL, NULL, NULL},
        {0},
    };
    _Static_assert(sizeof table <= MAX_TRAIN_OPTIONS * sizeof *table, "MAX_TRAIN_OPTIONS");
    memcpy(opts, table, sizeof table);
}

/* The combinations that cannot be meant and only the command line tells (an option given that
 * the run would ignore); the library checks the others (qkv_run_check). 0, or -1 after saying
 * why. */
static int train_check(const cli_train *t, const opt_spec *opts, int argc, char **argv)
{
    const char *why = NULL;
    qkv_run *r = t->run.run;
#define VALUE(name) qkv_run_get_int(r, qkv_run_option_find(QKV_RUN_TRANSLATION, name, NULL))
    const int subwords = strcmp(qkv_run_get_text(r, qkv_run_option_find(QKV_RUN_TRANSLATION,
                                                                         "tokenizer", NULL)),
                                "word");
    const int spm = !strcmp(qkv_run_get_text(r, qkv_run_option_find(QKV_RUN_TRANSLATION,
                                                                      "tokenizer", NULL)),
                            "spm");
    const int noam = VALUE("schedule") == QKV_LR_NOAM;
    const int validation = qkv_run_get_text(r, qkv_run_option_find(QKV_RUN_TRANSLATION, "valid",
                                                                   NULL)) ||
                           qkv_run_get_text(r, qkv_run_option_find(QKV_RUN_TRANSLATION,
                                                                   "valid-src", NULL));
    if (!t->out) why = "needs --out and either --data or --src with --tgt";
    else if (!validation && args_given(argc, argv, 2, opts, "patience"))
        why = "--patience and --no-bleu need validation (--valid, or --valid-src with "
              "--valid-tgt)";
    else if (args_typed(argc, argv, 2, opts, noam ? "lr" : "warmup") ||
             (!noam && args_typed(argc, argv, 2, opts, "lr-factor")))
        why = noam ? "--lr sets the constant schedule's rate; --warmup and --lr-factor shape "
                     "the noam schedule's (this run's is noam)"
                   : "--lr sets the constant schedule's rate; --warmup and --lr-factor shape "
                     "the noam schedule's (this run's is constant)";
    else if (!subwords && (args_given(argc, argv, 2, opts, "vocab-size") ||
                           args_given(argc, argv, 2, opts, "joint-bpe")))
        why = "--joint-bpe and --vocab-size are for --tokenizer bpe or spm";
    else if (!spm && args_given(argc, argv, 2, opts, "spm-type"))
        why = "--spm-type is for --tokenizer spm";
    if (why) return fprintf(stderr, "qkv train: %s\n", why), -1;
    return cli_positions_fit("qkv train", "max-len", (int)VALUE("max-len"),
                             (int)VALUE("d-model"));
#undef VALUE
}

/* The options as parsed (a resumed run's over its record; a preset's, the command line over
 * it) checked and handed to the run: the exit status, or -1 to go on. */
static int train_options(cli_train *t, opt_spec *opts, int argc, char **argv)
{
    qkv_run *r = t->run.run;
    qkv_error err = {0};
    const char *preset = t->run.v[qkv_run_option_find(QKV_RUN_TRANSLATION, "preset", NULL)].s;
    if (!t->resume && preset) { /* the preset first, then the command line over it */
        if (qkv_run_apply_preset(r, preset, &err)) return cli_print_error("qkv train", &err), 2;
        cli_run_pull(&t->run);
        if (args_parse(argc, argv, 2, opts, "")) return 2;
    }
    if (cli_run_push(&t->run, "qkv train") || train_check(t, opts, argc, argv)) return 2;
    const int prec = (int)qkv_run_get_int(r, qkv_run_option_find(QKV_RUN_TRANSLATION,
                                                                  "precision", NULL));
    if (cli_train_precision((qkv_precision)prec)) return 2;
    if (qkv_run_check(r, &err)) return cli_print_error("qkv train", &err), 2;
    const int device = (int)qkv_run_get_int(r, qkv_run_option_find(QKV_RUN_TRANSLATION,
                                                                    "device", NULL));
    if (cli_device((qkv_device)device, "train")) return 1;
    return -1;
}

static const cli_train_command TRAIN = {"qkv train", QKV_RUN_TRANSLATION, USAGE, train_table,
                                        train_options, run, print_notice};

static int train_main(int argc, char **argv, cli_ranks *job)
{
    train_cli c = {0};
    opt_spec opts[MAX_TRAIN_OPTIONS];
    return cli_train_main(&TRAIN, &c.t, opts, argc, argv, job);
}

/* Under mpirun every rank runs this; rank 0 writes the run directory (mpi_reducer.h). */
int cmd_train(int argc, char **argv)
{
    return cli_ranks_run(argc, argv, train_main);
}
