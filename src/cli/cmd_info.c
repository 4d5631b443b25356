/* SPDX-License-Identifier: MIT */
/* qkv info: parameter counts per component, beside the formula L * 12 F^2 + E * F: an encoder
 * block holds 4 F^2 of attention projections and 2 F * 4F of FFN (when the FFN is 4F wide),
 * and E * F is the embedding table. Counting needs no allocation, so BERT-large sized
 * configurations are described instantly. */
#include <stdio.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/common.h"

static void report(const qkv_transformer_config *c, const qkv_transformer *m)
{
    const double C = c->d_model, F = c->ffn, Vs = c->src_vocab, Vt = c->tgt_vocab;
    const double attention = 4 * C * C + (c->bias ? 4 * C : 0), ffn = 2 * C * F + F + C,
                 norm = 2 * C;
    const double enc_block = attention + ffn + 2 * norm;
    const double dec_block = 2 * attention + ffn + 3 * norm;
    const double emb = c->tie == QKV_TIE_ALL ? Vs * C : (Vs + Vt) * C;
    const double pos = c->learned_pos ? 2.0 * c->max_len * C : 0;
    const double enc = c->enc_layers * enc_block + (c->final_norm && c->enc_layers ? norm : 0);
    const double dec = c->dec_layers * dec_block + (c->final_norm ? norm : 0);
    const double out = (c->tie == QKV_TIE_NONE ? Vt * C : 0) + Vt;
    const double total = emb + pos + enc + dec + out;
    printf("configuration: d_model %d, heads %d, ffn %d, layers %d+%d, vocabularies %d/%d\n",
           c->d_model, c->heads, c->ffn, c->enc_layers, c->dec_layers, c->src_vocab, c->tgt_vocab);
    printf("  %-22s %14.0f\n", "embeddings", emb);
    if (pos) printf("  %-22s %14.0f\n", "learned positions", pos);
    printf("  %-22s %14.0f  (%d x %.0f per block)\n", "encoder", enc, c->enc_layers, enc_block);
    printf("  %-22s %14.0f  (%d x %.0f per block)\n", "decoder", dec, c->dec_layers, dec_block);
    printf("  %-22s %14.0f\n", "output projection", out);
    printf("  %-22s %14.0f  (%.1fM)\n", "total", total, total / 1e6);
    if (m) printf("  %-22s %14zu\n", "total in the model", qkv_transformer_num_params(m));
    const double L = c->enc_layers, formula = L * 12 * C * C + Vs * C;
    printf("encoder + source embedding: %.0f (%.1fM); formula L*12F^2 + E*F with L=%d, F=%d, "
           "E=%d: %.0f (%.1fM)\n", enc + Vs * C, (enc + Vs * C) / 1e6, c->enc_layers, c->d_model,
           c->src_vocab, formula, formula / 1e6);
}

int cmd_info(int argc, char **argv)
{
    qkv_transformer_config cfg = qkv_transformer_default_config();
    const char *model = NULL;
    int layers = 2, enc_layers = -1, dec_layers = -1, vocab = 0;
    cfg.src_vocab = cfg.tgt_vocab = 10000;
    const opt_spec opts[] = {
        {"model", OPT_DIR, &model, "model directory (else describe the options below)", NULL,
         NULL},
        {"m", OPT_ALIAS, "model", NULL, NULL, NULL},
        {"d-model", OPT_INT, &cfg.d_model, "model width F", ARG_D_MODEL, NULL},
        {"heads", OPT_INT, &cfg.heads, "attention heads", ARG_D_MODEL, NULL},
        {"ffn", OPT_INT, &cfg.ffn, "FFN hidden size", ARG_FFN, NULL},
        {"layers", OPT_INT, &layers, "encoder and decoder blocks", ARG_LAYERS_GE0, NULL},
        {"enc-layers", OPT_INT, &enc_layers, "encoder blocks", ARG_LAYERS_GE0, NULL},
        {"dec-layers", OPT_INT, &dec_layers,
         "decoder blocks (0: an encoder alone, as BERT)", ARG_LAYERS_GE0, NULL},
        {"vocab", OPT_INT, &vocab, "vocabulary size E of both sides", "[0, 16777216]", NULL},
        {"src-vocab", OPT_INT, &cfg.src_vocab, "source vocabulary", "[4, 16777216]", NULL},
        {"tgt-vocab", OPT_INT, &cfg.tgt_vocab, "target vocabulary", "[4, 16777216]", NULL},
        {"bias", OPT_FLAG, &cfg.bias, "attention biases (BERT has them)", NULL, NULL},
        {0},
    };
    int rc = args_parse(argc, argv, 2, opts,
                        "usage: qkv info (--model DIR | configuration options)\n"
                        "Parameter counts of a model, or of a configuration.");
    if (rc) return rc > 0 ? 0 : 2;
    for (const opt_spec *o = opts + 2; model && o->name; o++)
        if (args_given(argc, argv, 2, opts, o->name)) {
            fprintf(stderr, "qkv info: --model describes a saved model, --%s a configuration "
                    "without one: give one or the other\n", o->name);
            return 2;
        }
    if (model) {
        qkv_translator *t;
        qkv_error err = {0};
        if (qkv_translator_open(&t, model, &err)) {
            fprintf(stderr, "qkv: %s\n", err.msg);
            return 1;
        }
        report(qkv_transformer_get_config(qkv_translator_model(t)), qkv_translator_model(t));
        qkv_translator_free(t);
        return 0;
    }
    if (vocab > 0) cfg.src_vocab = cfg.tgt_vocab = vocab;
    cfg.enc_layers = enc_layers >= 0 ? enc_layers : layers;
    cfg.dec_layers = dec_layers >= 0 ? dec_layers : layers;
    if (cfg.d_model <= 0 || cfg.ffn <= 0 || cfg.enc_layers < 0 || cfg.dec_layers < 0 ||
        cfg.src_vocab <= 0 || cfg.tgt_vocab <= 0) {
        fprintf(stderr, "qkv info: sizes must be positive\n");
        return 2;
    }
    report(&cfg, NULL);
    return 0;
}
