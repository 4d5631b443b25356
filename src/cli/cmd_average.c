/* SPDX-License-Identifier: MIT */
/* qkv average: checkpoint averaging (the paper, section 6.1: "the last 5 checkpoints") — the
 * element-wise mean of the parameters of several models of one configuration, e.g. the
 * epoch-NNN directories that qkv train --keep-epochs leaves. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/common.h"

static const char *const AUX[] = {"src_vocab.txt", "tgt_vocab.txt", "src_bpe.txt",
                                  "tgt_bpe.txt", "source.spm", "target.spm", "text.json",
                                  "train.json"};

/* Copies DIR/name (or DIR/../name) to OUT/name (atomically) if it exists. */
static int copy_aux(const char *dir, const char *out, const char *name)
{
    char from[4096], to[4096];
    if (!qkv_model_dir_file(from, sizeof from, dir, name)) return 0;
    size_t len;
    char *text = cli_read_regular(from, QKV_MAX_VOCAB_FILE_BYTES, &len);
    if (!text) return -1;
    snprintf(to, sizeof to, "%s/%s", out, name);
    qkv_error err = {0};
    const void *chunks[1] = {text};
    qkv_status st = qkv_atomic_write(to, chunks, &len, 1, &err);
    free(text);
    if (st) fprintf(stderr, "qkv: %s\n", err.msg);
    return st ? -1 : 0;
}

/* Whether paths a and b name the same file (a link, another spelling). */
static int same_file(const char *a, const char *b)
{
    struct stat x, y;
    return !stat(a, &x) && !stat(b, &y) && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}

/* The average must not be written where an input is read from: into a model being averaged,
 * or into the directory above one (its vocabularies, and a run's model, live there). */
static int out_is_input(const char *out, const char *const *dirs, int n)
{
    for (int k = 0; k < n; k++) {
        char parent[4200];
        snprintf(parent, sizeof parent, "%s/..", dirs[k]);
        if (same_file(out, dirs[k]) || same_file(out, parent)) {
            fprintf(stderr, "qkv average: --out %s is %s %s: write the average to another "
                    "directory\n", out, same_file(out, dirs[k]) ? "the input" : "the directory "
                    "above the input", dirs[k]);
            return 1;
        }
    }
    return 0;
}

/* A model's vocabulary files (and subword encodings, text.json) must be the first model's:
 * row i of an embedding is another token in another vocabulary. */
static int same_vocabularies(const char *first, const char *dir)
{
    for (size_t i = 0; i < sizeof AUX / sizeof *AUX; i++) {
        if (!strcmp(AUX[i], "train.json")) continue;
        char a[4096], b[4096];
        const int has_a = qkv_model_dir_file(a, sizeof a, first, AUX[i]);
        const int has_b = qkv_model_dir_file(b, sizeof b, dir, AUX[i]);
        size_t la = 0, lb = 0;
        char *ta = has_a ? cli_read_regular(a, QKV_MAX_VOCAB_FILE_BYTES, &la) : NULL;
        char *tb = has_b ? cli_read_regular(b, QKV_MAX_VOCAB_FILE_BYTES, &lb) : NULL;
        const int unread = (has_a && !ta) || (has_b && !tb); /* cli_read_regular said why */
        const int same = has_a == has_b && (!has_a || (ta && tb && la == lb && !memcmp(ta, tb, la)));
        free(ta), free(tb);
        if (unread) return 0;
        if (!same) {
            fprintf(stderr, "qkv average: %s: %s is not %s's (%s): only models with the same "
                    "vocabularies average (row i of an embedding must be the same token in "
                    "each)\n", dir, AUX[i], first, has_b ? b : "missing");
            return 0;
        }
    }
    return 1;
}

/* The first model with the mean of the n models' parameters, summed in double; the models
 * must share one configuration and vocabularies. NULL after printing why. */
static qkv_transformer *average(const char *const *dirs, int n)
{
    qkv_error err = {0};
    qkv_transformer *avg = NULL, *m = NULL;
    double *sum = NULL;
    char *cfg0 = NULL, *cfg = NULL;
    int ok = 0;
    if (qkv_transformer_load(&avg, dirs[0], &err) ||
        qkv_config_to_json(qkv_transformer_get_config(avg), &cfg0, &err))
        goto fail;
    const size_t P = qkv_transformer_num_params(avg);
    sum = calloc(P, sizeof *sum);
    if (!sum) {
        snprintf(err.msg, sizeof err.msg, "out of memory for %zu parameters", P);
        goto fail;
    }
    for (int k = 0; k < n; k++) {
        if (k > 0) {
            free(cfg), cfg = NULL;
            if (qkv_transformer_load(&m, dirs[k], &err) ||
                qkv_config_to_json(qkv_transformer_get_config(m), &cfg, &err))
                goto fail;
            if (strcmp(cfg, cfg0)) {
                snprintf(err.msg, sizeof err.msg, "%.200s: another configuration than %.200s "
                         "(only models of one configuration average)", dirs[k], dirs[0]);
                goto fail;
            }
            if (!same_vocabularies(dirs[0], dirs[k])) goto done;
        }
        const float *p = qkv_transformer_params(k ? m : avg);
        for (size_t i = 0; i < P; i++) sum[i] += p[i];
        qkv_transformer_free(m), m = NULL;
    }
    float *p = qkv_transformer_params(avg);
    for (size_t i = 0; i < P; i++) p[i] = (float)(sum[i] / n);
    ok = 1;
    goto done;
fail:
    fprintf(stderr, "qkv: %s\n", err.msg);
done:
    qkv_transformer_free(m);
    free(sum), free(cfg0), free(cfg);
    if (!ok) qkv_transformer_free(avg), avg = NULL;
    return avg;
}

int cmd_average(int argc, char **argv)
{
    const char *out = NULL;
    const char **dirs = calloc((size_t)argc, sizeof *dirs);
    int n = 0, rc = 2, overwrite = 0;
    if (!dirs) return 1;
    const opt_spec opts[] = {
        CLI_OUT_ROWS(&out, "the model directory to write"),
        CLI_OVERWRITE_ROW(&overwrite, "replace what DIR holds (a model, or other files)"),
        {0},
    };
    const int parsed = args_parse_words(
        argc, argv, 2, opts,
        "usage: qkv average --out DIR [--overwrite] MODEL_DIR...\n"
        "Averages the parameters of the models (one configuration, the same vocabularies),\n"
        "e.g. qkv average --out run/avg run/epoch-*, and writes DIR as a model directory, with\n"
        "the vocabularies (and subword files, text.json, train.json) of the first model or its\n"
        "parent directory. DIR must not be an input or the directory above one.",
        dirs, argc, &n);
    if (parsed) {
        free(dirs);
        return parsed > 0 ? 0 : 2;
    }
    if (!out || n < 1) {
        fprintf(stderr, "qkv average: needs --out DIR and at least one model directory\n");
        goto done;
    }
    if (out_is_input(out, dirs, n)) goto done;
    rc = 1;
    qkv_run_dir *rd = NULL;
    qkv_transformer *avg = average(dirs, n);
    if (!avg) goto done;
    if (!(rd = cli_claim_model_dir(out, overwrite, argc, argv)))
        goto cleanup;
    /* the model last: a directory with model.safetensors is complete */
    for (size_t i = 0; i < sizeof AUX / sizeof *AUX; i++)
        if (copy_aux(dirs[0], out, AUX[i])) goto cleanup;
    qkv_error err = {0};
    if (qkv_transformer_save(avg, out, &err)) {
        fprintf(stderr, "qkv: %s\n", err.msg);
        goto cleanup;
    }
    fprintf(stderr, "qkv average: %d model%s averaged into %s\n", n, n == 1 ? "" : "s", out);
    rc = 0;
cleanup:
    qkv_run_dir_release(rd);
    qkv_transformer_free(avg);
done:
    free(dirs);
    return rc;
}
