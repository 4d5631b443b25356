/* SPDX-License-Identifier: MIT */
/* qkv: train, run and inspect Transformers from the command line. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/config_args.h"
#include "qkv.h"

static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
} COMMANDS[] = {
    {"demo", cmd_demo, "train on a built-in reversal task and translate (no downloads)"},
    {"train", cmd_train, "train an encoder-decoder Transformer on a parallel corpus"},
    {"translate", cmd_translate, "translate sentences with a trained model"},
    {"eval", cmd_eval, "translate a corpus and report BLEU"},
    {"import", cmd_import, "import a pretrained model: qkv import marian HF_DIR --out DIR"},
    {"export", cmd_export, "write a model for another engine: qkv export ct2 DIR --out CT2_DIR"},
    {"quantize", cmd_quantize, "store a model's weights as int8: qkv quantize DIR --out DIR8"},
    {"tokenize", cmd_tokenize, "SentencePiece pieces or ids of text, and back (a filter)"},
    {"average", cmd_average, "average the parameters of several models (checkpoint averaging)"},
    {"info", cmd_info, "parameter counts of a model or a configuration"},
    {"plot", cmd_plot, "training curves of a model directory, positional encoding figures"},
    {"train-lm", cmd_train_lm, "train a decoder-only language model on a text file"},
    {"generate", cmd_generate, "continue a prompt with a trained language model"},
    {"eval-lm", cmd_eval_lm, "per-token loss and perplexity of a language model on a text"},
    {"serve", cmd_serve, "serve a model over HTTP (translation, completions, metrics)"},
    {"bench", cmd_bench, "time training, decoding, attention and the BLAS roof (JSON)"},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: qkv COMMAND [options]   (qkv COMMAND --help for its options)\n\n");
    for (size_t i = 0; i < sizeof COMMANDS / sizeof *COMMANDS; i++)
        fprintf(f, "  %-10s %s\n", COMMANDS[i].name, COMMANDS[i].help);
    fprintf(f, "\n  --version  print the version\n");
}

/* How OpenMP's idle threads wait. A greedy decoding step at batch 1 opens some 50 parallel
 * regions (one per product), and with sleeping (passive) waits each one wakes the second
 * thread through the kernel: measured on a quiet 2-core machine, 4.5 ms a step against 3.1
 * with spinning waits. But threads that spin collapse when the cores are shared: with other
 * work running, training ran 18x slower (349 vs 6,412 target tokens/s) with libgomp's
 * default spin (300,000 iterations, some 7 ms) than with sleeping waits. So, unless the user
 * has chosen (OMP_WAIT_POLICY or GOMP_SPINCOUNT):
 *   - the decoding commands, started while the cores are free (the 1-minute load average
 *     below half the cores), spin SPIN_WAIT iterations (PAUSE, ~25 ns each on this AMD EPYC: some
 *     25 us, longer than the gaps between a step's products) and then sleep; a competitor
 *     that arrives later costs each wait at most those 25 us, not libgomp's 7 ms
 *     (bench/handoff_bench.sh);
 *   - everything else, training above all, and decoding on a busy machine, sleeps at once.
 * libgomp reads both variables once, when it loads (before main), so we set them and start
 * again. */
#define SPIN_WAIT "1000"

/* Commands that spend their time in decoding steps: bounded spins pay there. */
static int decodes(int argc, char **argv)
{
    if (argc < 2) return 0;
    const char *c = argv[1];
    if (!strcmp(c, "bench"))
        return argc > 2 && (!strcmp(argv[2], "decode") || !strcmp(argv[2], "generate"));
    return !strcmp(c, "translate") || !strcmp(c, "eval") || !strcmp(c, "generate");
}

/* Whether the cores look free: the 1-minute load average below half of them. */
static int cores_free(void)
{
    FILE *f = fopen("/proc/loadavg", "r");
    double load = 0.0;
    const int ok = f && fscanf(f, "%lf", &load) == 1;
    if (f) fclose(f);
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    return ok && cores > 0 && load < 0.5 * (double)cores;
}

static void choose_waits(int argc, char **argv)
{
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT") || getenv("QKV_NO_REEXEC"))
        return;
    if (decodes(argc, argv) && cores_free())
        setenv("GOMP_SPINCOUNT", SPIN_WAIT, 1); /* the policy unset: spin, then sleep */
    else
        setenv("OMP_WAIT_POLICY", "passive", 1);
    setenv("QKV_NO_REEXEC", "1", 1);
    execv("/proc/self/exe", argv); /* returns only on failure: carry on as we are */
}

/* Output errors are errors, for every command: stdout is buffered, so a full disk or a
 * device that takes nothing (> /dev/full) shows only when the buffer is written, often at
 * exit, after the command has returned 0 with its output lost. Flushing and closing it
 * here, and checking both streams, turns that into a message and a nonzero status (a
 * command that failed has said why already). stderr is unbuffered: a failed message has
 * already set its error flag, and there is nowhere left to say so, so only the status
 * tells. */
static int finish_output(int rc)
{
    errno = 0;
    int bad = fflush(stdout) != 0, e = errno;
    if (!bad && ferror(stdout)) bad = 1, e = 0; /* failed earlier; the reason is gone */
    if (fclose(stdout) != 0 && !bad) bad = 1, e = errno;
    if (bad && rc == 0)
        fprintf(stderr, "qkv: cannot write the output (standard output): %s\n",
                e ? strerror(e) : "a write failed");
    if (fflush(stderr) != 0 || ferror(stderr)) bad = 1;
    return bad && rc == 0 ? 1 : rc;
}

int main(int argc, char **argv)
{
    choose_waits(argc, argv);
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--version")) return printf("qkv %s\n", QKV_VERSION), finish_output(0);
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))
        return usage(stdout), finish_output(0);
    /* The BLAS qkv was built for, or no run at all (see qkv_blas_check). */
    qkv_error err;
    if (qkv_blas_check(&err)) return fprintf(stderr, "qkv: %s\n", err.msg), 1;
    for (size_t i = 0; i < sizeof COMMANDS / sizeof *COMMANDS; i++)
        if (!strcmp(argv[1], COMMANDS[i].name)) {
            char **owned; /* --config FILE: its options, before the command line's */
            if (config_args_expand(&argc, &argv, &owned)) return 2;
            const int rc = COMMANDS[i].run(argc, argv);
            config_args_free(owned);
            return finish_output(rc);
        }
    fprintf(stderr, "qkv: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
