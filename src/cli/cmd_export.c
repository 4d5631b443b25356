/* SPDX-License-Identifier: MIT */
/* qkv export ct2 DIR --out CT2_DIR [--quantization int8] [--overwrite]: a qkv encoder-decoder
 * (trained or imported) as a CTranslate2 model directory. The work is qkv_export_ct2's
 * (src/io/ct2.c); this refuses to write over another model. */
#include <dirent.h>
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "qkv.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: qkv export ct2 DIR --out CT2_DIR [--quantization float32|int8] "
               "[--overwrite]\n\n"
               "Writes the qkv encoder-decoder in DIR (trained or imported) as a CTranslate2\n"
               "model directory: model.bin, config.json, the vocabularies as JSON, and the\n"
               "model's SentencePiece models where it has them. CTranslate2 (and\n"
               "LibreTranslate and Argos Translate over it) then translate as qkv does.\n"
               "--quantization int8 stores the matrices as CTranslate2's converters quantise\n"
               "them (default float32). A CT2_DIR that is not empty is refused unless\n"
               "--overwrite.\n");
}

/* Whether dir exists and holds anything. */
static int not_empty(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return 0;
    int any = 0;
    for (struct dirent *e; !any && (e = readdir(d));)
        any = strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return any;
}

int cmd_export(int argc, char **argv)
{
    const char *kind = NULL, *src = NULL, *out = NULL, *quant = "float32";
    int overwrite = 0;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return usage(stdout), 0;
        if (!strcmp(argv[i], "--out") && i + 1 < argc) out = argv[++i];
        else if (!strncmp(argv[i], "--out=", 6)) out = argv[i] + 6;
        else if (!strcmp(argv[i], "--quantization") && i + 1 < argc) quant = argv[++i];
        else if (!strncmp(argv[i], "--quantization=", 15)) quant = argv[i] + 15;
        else if (!strcmp(argv[i], "--overwrite")) overwrite = 1;
        else if (!strncmp(argv[i], "--", 2)) {
            fprintf(stderr, "qkv export: unknown option '%s' (see --help)\n", argv[i]);
            return 2;
        } else if (!kind) kind = argv[i];
        else if (!src) src = argv[i];
        else {
            fprintf(stderr, "qkv export: unexpected argument '%s'\n", argv[i]);
            return 2;
        }
    }
    if (!kind || strcmp(kind, "ct2")) {
        fprintf(stderr, "qkv export: %s%s%s; qkv exports ct2 (CTranslate2)\n",
                kind ? "unknown format '" : "which format?", kind ? kind : "", kind ? "'" : "");
        return 2;
    }
    if (!src || !out) {
        fprintf(stderr, "qkv export ct2: needs DIR and --out CT2_DIR\n");
        return 2;
    }
    if (strcmp(quant, "float32") && strcmp(quant, "int8")) {
        fprintf(stderr, "qkv export ct2: --quantization '%s': float32 or int8\n", quant);
        return 2;
    }
    if (!overwrite && not_empty(out)) {
        fprintf(stderr, "qkv export ct2: %s is not empty (--overwrite replaces its files)\n", out);
        return 1;
    }
    qkv_error err = {0};
    const qkv_status st = qkv_export_ct2(src, out, strcmp(quant, "int8") ? QKV_CT2_FLOAT32
                                                                         : QKV_CT2_INT8, &err);
    if (st) return fprintf(stderr, "qkv: %s\n", err.msg), 1;
    fprintf(stderr, "qkv export: %s written as CTranslate2 (%s) into %s\n", src, quant, out);
    return 0;
}
