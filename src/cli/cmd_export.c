/* SPDX-License-Identifier: MIT */
/* qkv export ct2 DIR --out CT2_DIR [--quantization int8] [--overwrite]: a qkv encoder-decoder
 * (trained or imported) as a CTranslate2 model directory. The work is qkv_export_ct2's
 * (src/io/ct2.c); this refuses to write over another model. */
#include <stdio.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "qkv.h"

int cmd_export(int argc, char **argv)
{
    const char *out = NULL, *words[2] = {NULL, NULL};
    int overwrite = 0, n = 0;
    opt_choice quant = {QKV_ENUM_CT2_QUANTIZATION, NULL, QKV_CT2_FLOAT32};
    const opt_spec opts[] = {
        CLI_OUT_ROWS(&out, "the CTranslate2 model directory to write"),
        {"quantization", OPT_CHOICE, &quant, "int8: the matrices as CTranslate2's converters "
                                             "quantise them", NULL, NULL},
        CLI_OVERWRITE_ROW(&overwrite, "replace the files of a CT2_DIR that is not empty"),
        {0},
    };
    const int rc = args_parse_words(
        argc, argv, 2, opts,
        "usage: qkv export ct2 DIR --out CT2_DIR [--quantization float32|int8] [--overwrite]\n"
        "Writes the qkv encoder-decoder in DIR (trained or imported) as a CTranslate2 model\n"
        "directory: model.bin, config.json, the vocabularies as JSON, and the model's\n"
        "SentencePiece models where it has them. CTranslate2 (and LibreTranslate and Argos\n"
        "Translate over it) then translate as qkv does.",
        words, 2, &n);
    if (rc) return rc > 0 ? 0 : 2;
    const char *kind = words[0], *src = words[1];
    const qkv_ct2_quantization q = (qkv_ct2_quantization)quant.value;
    if (!kind || strcmp(kind, "ct2")) {
        fprintf(stderr, "qkv export: %s%s%s; qkv exports ct2 (CTranslate2)\n",
                kind ? "unknown format '" : "which format?", kind ? kind : "", kind ? "'" : "");
        return 2;
    }
    if (!src || !out) {
        fprintf(stderr, "qkv export ct2: needs DIR and --out CT2_DIR\n");
        return 2;
    }
    const int refused = cli_output_dir("export ct2", out, src, overwrite);
    if (refused) return refused;
    qkv_error err = {0};
    const qkv_status st = qkv_export_ct2(src, out, q, &err);
    if (st) return fprintf(stderr, "qkv: %s\n", err.msg), 1;
    fprintf(stderr, "qkv export: %s written as CTranslate2 (%s) into %s\n", src,
            qkv_ct2_quantization_name(q), out);
    return 0;
}
