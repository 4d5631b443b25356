/* qkv average: checkpoint averaging (the paper, section 6.1: "the last 5 checkpoints") — the
 * element-wise mean of the parameters of several models of one configuration, e.g. the
 * epoch-NNN directories that qkv train --keep-epochs leaves. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/common.h"

static const char *const AUX[] = {"src_vocab.txt", "tgt_vocab.txt", "src_bpe.txt",
                                  "tgt_bpe.txt", "text.json", "train.json"};

/* Copies DIR/name (or DIR/../name) to OUT/name if it exists. */
static int copy_aux(const char *dir, const char *out, const char *name)
{
    char from[4096], to[4096];
    if (!qkv_model_dir_file(from, sizeof from, dir, name)) return 0;
    size_t len;
    char *text = cli_read_all(from, &len);
    if (!text) return -1;
    snprintf(to, sizeof to, "%s/%s", out, name);
    FILE *f = fopen(to, "wb");
    int bad = !f || fwrite(text, 1, len, f) != len;
    if (f && fclose(f)) bad = 1;
    free(text);
    if (bad) fprintf(stderr, "qkv: %s: %s\n", to, strerror(errno));
    return bad ? -1 : 0;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: qkv average --out DIR MODEL_DIR...\n\n"
               "Averages the parameters of the models (one configuration), e.g.\n"
               "  qkv average --out run/avg run/epoch-*\n"
               "and writes DIR as a model directory, with the vocabularies (and subword\n"
               "files, text.json, train.json) of the first model or its parent directory.\n");
}

int cmd_average(int argc, char **argv)
{
    const char *out = NULL;
    const char **dirs = calloc((size_t)argc, sizeof *dirs);
    int n = 0, rc = 2;
    if (!dirs) return 1;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            free(dirs);
            return 0;
        }
        if (!strcmp(argv[i], "--out") && i + 1 < argc) out = argv[++i];
        else if (!strncmp(argv[i], "--out=", 6)) out = argv[i] + 6;
        else if (!strncmp(argv[i], "--", 2)) {
            fprintf(stderr, "qkv: unknown option '%s' (see --help)\n", argv[i]);
            goto done;
        } else dirs[n++] = argv[i];
    }
    if (!out || n < 1) {
        fprintf(stderr, "qkv average: needs --out DIR and at least one model directory\n");
        goto done;
    }
    rc = 1;
    qkv_error err = {0};
    qkv_transformer *avg = NULL, *m = NULL;
    double *sum = NULL;
    char *cfg0 = NULL, *cfg = NULL;
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
        }
        const float *p = qkv_transformer_params(k ? m : avg);
        for (size_t i = 0; i < P; i++) sum[i] += p[i];
        qkv_transformer_free(m), m = NULL;
    }
    float *p = qkv_transformer_params(avg);
    for (size_t i = 0; i < P; i++) p[i] = (float)(sum[i] / n);
    if (qkv_transformer_save(avg, out, &err)) goto fail;
    for (size_t i = 0; i < sizeof AUX / sizeof *AUX; i++)
        if (copy_aux(dirs[0], out, AUX[i])) goto cleanup;
    fprintf(stderr, "qkv average: %d model%s averaged into %s\n", n, n == 1 ? "" : "s", out);
    rc = 0;
    goto cleanup;
fail:
    fprintf(stderr, "qkv: %s\n", err.msg);
cleanup:
    qkv_transformer_free(avg), qkv_transformer_free(m);
    free(sum), free(cfg0), free(cfg);
done:
    free(dirs);
    return rc;
}
