/* SPDX-License-Identifier: MIT */
/* The attention weights behind one translation (d2l 11.7.7's enc_attention_weights and
 * dec_attention_weights). Greedy decoding with the KV cache computes, at step t, exactly the
 * row t of a teacher-forced pass whose decoder input is the start token + the translation: the
 * causal mask hides later positions and evaluation mode has no dropout. So one forward pass
 * over the whole pair (decoder_attention_weights) yields every weight decoding used. */
#include <stdlib.h>
#include <string.h>

#include "inference/search.h"

void qkv_attention_maps_free(qkv_attention_maps *a)
{
    if (!a) return;
    free(a->encoder); /* one buffer holds all three maps */
    free(a->predicted);
    memset(a, 0, sizeof *a);
}

qkv_status qkv_attention_maps_compute(qkv_attention_maps *out, qkv_transformer *m,
                                      const int *src, int src_len, const int *tgt, int tgt_len,
                                      qkv_error *err)
{
    memset(out, 0, sizeof *out);
    const qkv_transformer_config *c = qkv_transformer_get_config(m);
    const int Ts = src_len, Tt = tgt_len + 1, H = c->heads, V = c->tgt_vocab;
    if (src_len < 1 || src_len > c->max_len)
        return qkv_fail(err, QKV_ERR_ARG, "source length %d outside [1, %d] (the model's "
                        "maximum length)", src_len, c->max_len);
    if (tgt_len < 0 || Tt > c->max_len)
        return qkv_fail(err, QKV_ERR_ARG, "translation length %d outside [0, %d] (the model's "
                        "maximum length, less one for <bos>)", tgt_len, c->max_len - 1);
    const size_t enc = (size_t)H * Ts * Ts, self = (size_t)H * Tt * Tt, cross = (size_t)H * Tt * Ts;
    float *maps = malloc((c->enc_layers * enc + c->dec_layers * (self + cross)) * sizeof *maps);
    float *logits = malloc((size_t)Tt * V * sizeof *logits);
    int *tgt_in = malloc((size_t)Tt * sizeof *tgt_in);
    int *predicted = malloc((size_t)Tt * sizeof *predicted);
    qkv_status st = QKV_OK;
    if (!maps || !logits || !tgt_in || !predicted) {
        st = qkv_fail(err, QKV_ERR_NOMEM, "out of memory for the attention maps of a %d x %d "
                      "sentence pair", Ts, Tt);
        goto done;
    }
    tgt_in[0] = decoder_transformer_info(m).start;
    memcpy(tgt_in + 1, tgt, (size_t)tgt_len * sizeof *tgt);
    out->enc_layers = c->enc_layers, out->dec_layers = c->dec_layers, out->heads = H;
    out->src_len = Ts, out->tgt_len = Tt;
    out->encoder = maps;
    out->decoder_self = maps + c->enc_layers * enc;
    out->cross = out->decoder_self + c->dec_layers * self;
    if ((st = decoder_attention_weights(m, src, Ts, tgt_in, Tt, logits, out->encoder,
                                        out->decoder_self, out->cross, err)))
        goto done;
    for (int t = 0; t < Tt; t++) /* the same first-maximum rule as greedy decoding */
        predicted[t] = argmax(logits + (size_t)t * V, V);
    out->predicted = predicted, predicted = NULL, maps = NULL;
done:
    if (st) memset(out, 0, sizeof *out);
    free(maps), free(logits), free(tgt_in), free(predicted);
    return st;
}
