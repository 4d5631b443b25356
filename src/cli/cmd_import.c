/* SPDX-License-Identifier: MIT */
/* qkv import marian|nllb|m2m100 HF_DIR --out DIR: a pretrained Hugging Face MarianMT, NLLB-200
 * or M2M100 model, or a Marian release (the OPUS-MT translation models), as a qkv model
 * directory, which qkv translate, eval and info then read like one qkv trained. The work is
 * the library's (qkv_import_marian, _nllb, _m2m100); this claims DIR. */
#include <stdio.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "qkv.h"

int cmd_import(int argc, char **argv)
{
    const char *out = NULL, *words[2] = {NULL, NULL};
    int overwrite = 0, n = 0;
    const opt_spec opts[] = {
        CLI_OUT_ROWS(&out, "the qkv model directory to write"),
        CLI_OVERWRITE_ROW(&overwrite, "replace what DIR holds (a model, or other files)"),
        {0},
    };
    const int rc = args_parse_words(
        argc, argv, 2, opts,
        "usage: qkv import marian HF_DIR|RELEASE --out DIR [--overwrite]\n"
        "       qkv import nllb|m2m100 HF_DIR --out DIR [--overwrite]\n"
        "marian: a Hugging Face MarianMT directory (an OPUS-MT model, e.g.\n"
        "Helsinki-NLP/opus-mt-de-en): config.json, model.safetensors or pytorch_model.bin (or\n"
        "their shards; float32, float16 or bfloat16), vocab.json (and target_vocab.json),\n"
        "source.spm, target.spm; or a Marian release, an OPUS-MT or Tatoeba-Challenge zip or\n"
        "the directory it unpacks to (decoder.yml, the .npz model, vocabulary .yml, source.spm,\n"
        "target.spm). nllb, m2m100: a Hugging Face NLLB-200 or M2M100 directory (e.g.\n"
        "facebook/nllb-200-distilled-600M, facebook/m2m100_418M): config.json, the weights,\n"
        "sentencepiece.bpe.model, tokenizer_config.json (and M2M100's vocab.json); translate\n"
        "with --source-lang and --target-lang (NLLB's codes, deu_Latn; M2M100's, de). DIR\n"
        "receives a qkv model directory: config.json, model.safetensors, the vocabularies and\n"
        "SentencePiece models, text.json (and generation.json: the decoding defaults). A model\n"
        "qkv cannot represent is refused with the reason; see docs/pretrained.md.",
        words, 2, &n);
    if (rc) return rc > 0 ? 0 : 2;
    const char *kind = words[0], *src = words[1];
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
    /* the output is claimed (and with --overwrite emptied of a run's files) before anything
     * is read: it must not be the input, nor hold it, nor lie inside it */
    static const char *const relation[] = {"", "is", "is inside", "holds"};
    const int rel = qkv_path_relation(out, src);
    if (rel > 0) {
        fprintf(stderr, "qkv import: --out %s %s the input %s: import into another directory\n",
                out, relation[rel], src);
        return 2;
    }
    qkv_run_dir *rd = NULL;
    if (!(rd = cli_claim_model_dir(out, overwrite, argc, argv)))
        return 1;
    qkv_error err = {0};
    qkv_status st = !strcmp(kind, "nllb")     ? qkv_import_nllb(src, out, &err)
                    : !strcmp(kind, "m2m100") ? qkv_import_m2m100(src, out, &err)
                                              : qkv_import_marian(src, out, &err);
    qkv_run_dir_release(rd);
    if (st) return fprintf(stderr, "qkv: %s\n", err.msg), 1;
    fprintf(stderr, "qkv import: %s imported into %s\n", src, out);
    return 0;
}
