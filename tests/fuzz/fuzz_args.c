/* SPDX-License-Identifier: MIT */
/* args_parse of the CLI: the input, split at NUL bytes, is the argument list after
 * "qkv train", parsed against a table with an option of every type (aliases, a short one,
 * choices of the library's and of the command's own, recorded options whose keys a --config
 * block may name). Each argument is its own allocation, so reading past one is caught.
 * Whatever the arguments, the result is 0, 1 or -1, a string option points at one of the
 * arguments, and a choice holds one of its values. */
#include "cli/args.c"

#include <math.h>

#include "fuzz_common.h"

#define MAX_ARGS 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *argv[MAX_ARGS + 3] = {"qkv", "train"};
    int argc = 2;
    for (size_t i = 0; i <= size && argc < MAX_ARGS + 2;) {
        const uint8_t *nul = i < size ? memchr(data + i, '\0', size - i) : NULL;
        size_t end = nul ? (size_t)(nul - data) : size;
        char *a = malloc(end - i + 1);
        if (!a) break;
        memcpy(a, data + i, end - i);
        a[end - i] = '\0';
        argv[argc++] = a;
        i = end + 1;
    }
    argv[argc] = NULL;

    int steps = 10, quiet = 0, no_bleu = 0;
    float lr = 0.005f;
    uint64_t seed = 0;
    const char *out = NULL, *tie = "none", *pairs = NULL;
    static const char *const kinds[] = {"word", "bpe", "spm", NULL};
    opt_choice act = {QKV_ENUM_ACTIVATION, NULL, 0}, kind = {0, kinds, 0};
    const opt_spec opts[] = {
        {"out", OPT_DIR, &out, "model directory to write", NULL, NULL},
        {"o", OPT_ALIAS, "out", NULL, NULL, NULL},
        {"data", OPT_FILE, &pairs, "pairs", NULL, "data"},
        {"tie", OPT_STRING, &tie, "weight sharing", NULL, "model"},
        {"act", OPT_CHOICE, &act, "activation", NULL, "model"},
        {"tokenizer", OPT_CHOICE, &kind, "tokenizer", NULL, "data"},
        {"max-tokens", OPT_INT, &steps, "tokens per sentence", "[2, 65536]", "data num_steps"},
        {"num-steps", OPT_ALIAS, "max-tokens", "d2l's name", NULL, NULL},
        {"lr", OPT_FLOAT, &lr, "Adam learning rate", "> 0", "train"},
        {"seed", OPT_U64, &seed, "initialisation, data order and dropout", ARG_SEED, "data"},
        {"no-bleu", OPT_FLAG, &no_bleu, "no BLEU", NULL, "data !valid_bleu"},
        {"quiet", OPT_FLAG, &quiet, "no progress output", NULL, NULL},
        {"a-name-long-enough-to-overflow-the-column-of-the-usage-text-by-far", OPT_INT, &steps,
         "an option whose name does not fit the usage column", ">= 0", NULL},
        {0},
    };
    int rc = args_parse(argc, argv, 2, opts, "usage: qkv train [options]");
    FUZZ_CHECK(rc == 0 || rc == 1 || rc == -1);
    FUZZ_CHECK(isfinite(lr) && (quiet == 0 || quiet == 1) && (no_bleu == 0 || no_bleu == 1));
    FUZZ_CHECK(act.value >= 0 && act.value <= 2 && kind.value >= 0 && kind.value <= 2);
    FUZZ_CHECK(rc != 0 || (lr > 0.0f && steps >= 0)); /* a value out of its range is refused */

    int out_ok = !out, tie_ok = !strcmp(tie, "none"), data_ok = !pairs;
    for (int i = 2; i < argc; i++) {
        uintptr_t a = (uintptr_t)argv[i], z = a + strlen(argv[i]);
        out_ok |= (uintptr_t)out >= a && (uintptr_t)out <= z;
        tie_ok |= (uintptr_t)tie >= a && (uintptr_t)tie <= z;
        data_ok |= (uintptr_t)pairs >= a && (uintptr_t)pairs <= z;
    }
    FUZZ_CHECK(out_ok && tie_ok && data_ok);
    for (int i = 2; i < argc; i++) free(argv[i]);
    return 0;
}
