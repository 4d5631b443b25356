/* SPDX-License-Identifier: MIT */
/* qkv quantize DIR --out DIR8 [--precision int8] [--overwrite]: a model directory with its
 * weight matrices stored as int8, a quarter of the float32 file, that loads at int8 without
 * quantising anything (qkv_model_quantize, src/io/quantize.c); this refuses to write over
 * another model. */
#include <stdio.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "qkv.h"

int cmd_quantize(int argc, char **argv)
{
    const char *out = NULL, *words[1] = {NULL};
    int overwrite = 0, n = 0;
    opt_choice precision = {QKV_ENUM_PRECISION, NULL, QKV_PRECISION_INT8};
    const opt_spec opts[] = {
        CLI_OUT_ROWS(&out, "the model directory to write"),
        {"precision", OPT_CHOICE, &precision, "how the weight matrices are stored: int8 (int8 "
                                              "values with a float32 scale per row; the only "
                                              "one)", NULL, NULL},
        CLI_OVERWRITE_ROW(&overwrite, "replace the files of a DIR8 that is not empty"),
        {0},
    };
    const int rc = args_parse_words(
        argc, argv, 2, opts,
        "usage: qkv quantize DIR --out DIR8 [--precision int8] [--overwrite]\n"
        "Writes the model in DIR (trained or imported; translation or language model) with its\n"
        "weight matrices stored as int8 with a float32 scale per row: a quarter of the size.\n"
        "DIR8 loads without quantising anything and runs at --precision int8 by default,\n"
        "translating exactly as DIR does at --precision int8. Its fp32 and bf16 run on the\n"
        "weights dequantised. The vocabularies and tokenizer files are copied.",
        words, 1, &n);
    if (rc) return rc > 0 ? 0 : 2;
    if (!words[0] || !out) {
        fprintf(stderr, "qkv quantize: needs DIR and --out DIR8\n");
        return 2;
    }
    const int refused = cli_output_dir("quantize", out, words[0], overwrite);
    if (refused) return refused;
    qkv_error err = {0};
    const qkv_precision p = (qkv_precision)precision.value;
    if (qkv_model_quantize(words[0], out, p, &err)) return fprintf(stderr, "qkv: %s\n", err.msg), 1;
    fprintf(stderr, "qkv quantize: %s written at %s into %s\n", words[0], qkv_precision_name(p),
            out);
    return 0;
}
