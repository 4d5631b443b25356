/* SPDX-License-Identifier: MIT */
/* The attention weights behind one translation (d2l 11.7.7's enc_attention_weights and
 * dec_attention_weights). Greedy decoding with the KV cache computes, at step t, exactly the
 * row t of a teacher-forced pass whose decoder input is <bos> + the translation: the causal
 * mask hides later positions and evaluation mode has no dropout. So one forward pass over
 * the whole pair yields every weight decoding used, and each multi-head attention layer has
 * left its P (B = 1, H, n, m) in the activation caches. */
#include <stdlib.h>
#include <string.h>

#include "models/transformer_internal.h"

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
    const qkv_transformer_config *c = &m->cfg;
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
    tgt_in[0] = c->decoder_start;
    memcpy(tgt_in + 1, tgt, (size_t)tgt_len * sizeof *tgt);
    /* labels are not read by a logits pass; the decoder inputs stand in for them */
    const qkv_batch batch = {1, Ts, Tt, src, &src_len, tgt_in, tgt_in};
    if ((st = qkv_transformer_logits(m, &batch, logits, err))) goto done;

    out->enc_layers = c->enc_layers, out->dec_layers = c->dec_layers, out->heads = H;
    out->src_len = Ts, out->tgt_len = Tt;
    out->encoder = maps;
    out->decoder_self = maps + c->enc_layers * enc;
    out->cross = out->decoder_self + c->dec_layers * self;
    const backend be = core_backend(&m->core);
    for (int l = 0; l < c->enc_layers; l++)
        be.ops->copy(out->encoder + l * enc, m->acts.enc.blocks[l].self_att.c.P, enc);
    for (int l = 0; l < c->dec_layers; l++) {
        be.ops->copy(out->decoder_self + l * self, m->acts.dec.blocks[l].self_att.c.P, self);
        be.ops->copy(out->cross + l * cross, m->acts.dec.blocks[l].cross_att.c.P, cross);
    }
    for (int t = 0; t < Tt; t++) { /* the same first-maximum rule as greedy decoding */
        const float *z = logits + (size_t)t * V;
        int best = 0;
        for (int k = 1; k < V; k++)
            if (z[k] > z[best]) best = k;
        predicted[t] = best;
    }
    out->predicted = predicted, predicted = NULL, maps = NULL;
done:
    free(maps), free(logits), free(tgt_in), free(predicted);
    return st;
}
