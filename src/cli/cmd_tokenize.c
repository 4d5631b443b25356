/* SPDX-License-Identifier: MIT */
/* qkv tokenize: a SentencePiece model applied to text, line by line from stdin to stdout
 * (pieces or ids), or the way back (--decode). Unless stdin is a regular file, each output
 * line is flushed as soon as it is made, so the command works as a filter in a pipe and
 * interactively. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "qkv.h"

static qkv_status out_of_memory(qkv_error *err)
{
    snprintf(err->msg, sizeof err->msg, "out of memory");
    return err->code = QKV_ERR_NOMEM;
}

/* One line of pieces or ids (space-separated) as text. */
static qkv_status decode_line(const qkv_spm *s, char *line, int ids, char **text,
                              qkv_error *err)
{
    size_t n = 0, cap = 16;
    char **tok = malloc(cap * sizeof *tok), *save = NULL;
    int *id = NULL;
    qkv_status st = tok ? QKV_OK : out_of_memory(err);
    for (char *w = st ? NULL : strtok_r(line, " ", &save); w; w = strtok_r(NULL, " ", &save)) {
        if (n == cap) {
            char **more = realloc(tok, 2 * cap * sizeof *tok);
            if (!more) {
                st = out_of_memory(err);
                break;
            }
            tok = more, cap *= 2;
        }
        tok[n++] = w;
    }
    if (!st && ids) {
        if (!(id = malloc((n ? n : 1) * sizeof *id)))
            st = out_of_memory(err);
        for (size_t i = 0; !st && i < n; i++) {
            char *end;
            const long v = strtol(tok[i], &end, 10);
            if (*end || end == tok[i] || v < 0 || v >= qkv_spm_size(s)) {
                snprintf(err->msg, sizeof err->msg, "\"%.40s\" is not an id in [0, %d)",
                         tok[i], qkv_spm_size(s));
                st = err->code = QKV_ERR_ARG;
            } else
                id[i] = (int)v;
        }
        if (!st) st = qkv_spm_decode(s, id, (int)n, text, err);
    } else if (!st) {
        st = qkv_spm_decode_pieces(s, (const char *const *)tok, (int)n, text, err);
    }
    free(tok), free(id);
    return st;
}

/* One line of text as pieces or ids, written to stdout. */
static qkv_status encode_line(const qkv_spm *s, const char *line, size_t len, int ids,
                              qkv_error *err)
{
    if (ids) {
        int *id, n;
        qkv_status st = qkv_spm_encode(s, line, len, &id, &n, err);
        for (int i = 0; !st && i < n; i++) printf(i ? " %d" : "%d", id[i]);
        free(id);
        return st;
    }
    qkv_sentences pieces;
    qkv_status st = qkv_spm_encode_pieces(s, line, len, &pieces, err);
    for (size_t i = 0; !st && i < pieces.n_tokens; i++)
        printf(i ? " %s" : "%s", pieces.tokens[i]);
    qkv_sentences_free(&pieces);
    return st;
}

/* d2l's preprocessing of one line, written to stdout. */
static qkv_status preprocess_line(const char *line, size_t len, qkv_error *err)
{
    char *out = malloc(QKV_PREPROCESS_BOUND(len));
    if (!out) return out_of_memory(err);
    qkv_status st = qkv_preprocess(out, NULL, line, len, err);
    if (!st) fputs(out, stdout);
    free(out);
    return st;
}

int cmd_tokenize(int argc, char **argv)
{
    const char *spm = NULL;
    int pieces = 0, ids = 0, decode = 0, d2l = 0;
    const opt_spec opts[] = {
        {"spm", OPT_FILE, &spm, "SentencePiece model file (.model / .spm)", NULL, NULL},
        {"pieces", OPT_FLAG, &pieces, "pieces, space-separated (the default)", NULL, NULL},
        {"ids", OPT_FLAG, &ids, "ids, space-separated", NULL, NULL},
        {"decode", OPT_FLAG, &decode, "read pieces (or with --ids, ids) and write the text", NULL,
         NULL},
        {"d2l", OPT_FLAG, &d2l, "instead: d2l's preprocessing of each line (lower case as "
                                "Python's str.lower, a space before , . ! ?)", NULL, NULL},
        {0},
    };
    int rc = args_parse(argc, argv, 2, opts,
                        "usage: qkv tokenize (--spm FILE [--pieces | --ids] [--decode] | --d2l) "
                        "< text > tokens\n"
                        "SentencePiece pieces or ids of text, and back: a filter.");
    if (rc) return rc > 0 ? 0 : 2;
    if ((!spm && !d2l) || (spm && d2l) || (pieces && ids)) {
        fprintf(stderr, "qkv tokenize: needs --spm FILE or --d2l, and --pieces or --ids (not "
                "both)\n");
        return 2;
    }
    qkv_spm *s = NULL;
    qkv_error err = {0};
    if (spm && qkv_spm_load(&s, spm, &err)) {
        fprintf(stderr, "qkv: %s\n", err.msg);
        return 1;
    }
    char *line = NULL;
    size_t cap = 0;
    long number = 0;
    size_t n;
    int got;
    struct stat in;
    /* a file is read to its end anyway: flushing each line would only cost system calls */
    const int flush_lines = fstat(fileno(stdin), &in) || !S_ISREG(in.st_mode);
    rc = 0;
    while (!rc && (got = cli_read_line(stdin, "stdin", number + 1, &line, &cap, &n)) != 0) {
        if (got < 0) {
            rc = 1;
            break;
        }
        number++;
        qkv_status st;
        if (d2l) {
            st = preprocess_line(line, n, &err);
        } else if (decode) {
            char *text = NULL;
            if (!(st = decode_line(s, line, ids, &text, &err))) fputs(text, stdout);
            free(text);
        } else {
            st = encode_line(s, line, n, ids, &err);
        }
        if (st) {
            fprintf(stderr, "qkv: stdin:%ld: %s\n", number, err.msg);
            rc = 1;
        } else if (putchar('\n') == EOF || (flush_lines && fflush(stdout))) {
            fprintf(stderr, "qkv tokenize: cannot write the output\n");
            rc = 1;
        }
    }
    if (!rc && fflush(stdout)) {
        fprintf(stderr, "qkv tokenize: cannot write the output\n");
        rc = 1;
    }
    free(line);
    qkv_spm_free(s);
    return rc;
}
