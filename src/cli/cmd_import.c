/* SPDX-License-Identifier: MIT */
/* qkv import marian HF_DIR|RELEASE --out DIR: a pretrained Hugging Face MarianMT model, or a
 * Marian release (the OPUS-MT translation models) as a qkv model directory, which qkv translate, eval and info then read
 * like one qkv trained. The work is qkv_import_marian's (src/io/marian.c); this claims DIR. */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/config_args.h"
#include "cli/run_dir.h"
#include "qkv.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: qkv import marian HF_DIR|RELEASE --out DIR [--overwrite]\n\n"
               "Imports a Hugging Face MarianMT directory (an OPUS-MT model, e.g.\n"
               "Helsinki-NLP/opus-mt-de-en): config.json, model.safetensors or\n"
               "pytorch_model.bin (or their shards; float32, float16 or bfloat16),\n"
               "vocab.json (and target_vocab.json), source.spm, target.spm; or a Marian\n"
               "release, an OPUS-MT or Tatoeba-Challenge zip or the directory it unpacks to\n"
               "(decoder.yml, the .npz model, vocabulary .yml, source.spm, target.spm). DIR\n"
               "receives a qkv model directory: config.json, model.safetensors,\n"
               "src_vocab.txt, tgt_vocab.txt, source.spm, target.spm, text.json (and\n"
               "generation.json: the decoding defaults). A DIR that holds a model (or other\n"
               "files) is refused unless --overwrite. A model qkv cannot represent is\n"
               "refused with the reason; see docs/pretrained.md.\n\n"
               "       qkv import nllb|m2m100 HF_DIR --out DIR [--overwrite]\n\n"
               "Imports a Hugging Face NLLB-200 or M2M100 directory (e.g.\n"
               "facebook/nllb-200-distilled-600M, facebook/m2m100_418M): config.json, the\n"
               "weights, sentencepiece.bpe.model, tokenizer_config.json (and M2M100's\n"
               "vocab.json). Translate with --source-lang and --target-lang (NLLB's codes,\n"
               "deu_Latn; M2M100's, de).\n"
               "--config FILE.json: --out and --overwrite from a JSON object (the command\n"
               "line wins).\n");
}

int cmd_import(int argc, char **argv)
{
    const char *kind = NULL, *src = NULL, *out = NULL;
    int overwrite = 0;
    const char *config = NULL; /* inside a --config block (config_args.h): its file */
    for (int i = 2; i < argc; i++) {
        if (config_args_block(argc, argv, &i, &config)) continue;
        if (!config && (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")))
            return usage(stdout), 0;
        if (!strcmp(argv[i], "--out") && i + 1 < argc) out = argv[++i];
        else if (!strncmp(argv[i], "--out=", 6)) out = argv[i] + 6;
        else if (!strcmp(argv[i], "--overwrite")) overwrite = 1;
        else if (config && !strcmp(argv[i], "--overwrite=" CONFIG_FALSE)) overwrite = 0;
        else if (!strncmp(argv[i], "--", 2) || config) {
            fprintf(stderr, "qkv import: %s%sunknown option '%s' (see --help)\n",
                    config ? config : "", config ? ": " : "", argv[i]);
            return 2;
        } else if (!kind) kind = argv[i];
        else if (!src) src = argv[i];
        else {
            fprintf(stderr, "qkv import: unexpected argument '%s'\n", argv[i]);
            return 2;
        }
    }
    if (!kind || (strcmp(kind, "marian") && strcmp(kind, "nllb") && strcmp(kind, "m2m100"))) {
        fprintf(stderr, "qkv import: %s%s%s; qkv imports marian (MarianMT, OPUS-MT), nllb "
                        "(NLLB-200) and m2m100\n",
                kind ? "unknown kind '" : "which kind of model?", kind ? kind : "",
                kind ? "'" : "");
        return 2;
    }
    if (!src || !out) {
        fprintf(stderr, "qkv import %s: needs HF_DIR and --out DIR\n", kind);
        return 2;
    }
    run_dir rd = {-1};
    if (run_dir_claim(&rd, out, &RUN_MODEL, overwrite ? RUN_OVERWRITE : RUN_NEW, argc, argv))
        return 1;
    qkv_error err = {0};
    qkv_status st = !strcmp(kind, "nllb")     ? qkv_import_nllb(src, out, &err)
                    : !strcmp(kind, "m2m100") ? qkv_import_m2m100(src, out, &err)
                                              : qkv_import_marian(src, out, &err);
    run_dir_release(&rd);
    if (st) return fprintf(stderr, "qkv: %s\n", err.msg), 1;
    fprintf(stderr, "qkv import: %s imported into %s\n", src, out);
    return 0;
}
