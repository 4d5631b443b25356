/* SPDX-License-Identifier: MIT */
/* Greedy autoregressive decoding with a key-value cache (d2l 10.7.6, llama2.c's forward):
 * the encoder runs once; each decoder layer keeps the keys and values of every target
 * position so far, and the cross-attention's keys and values of the encoder output are
 * projected once. A step then costs O(t) attention work at position t instead of re-running
 * the whole prefix. The cache and the step (decode.h) serve beam search too: there a row is a
 * hypothesis, and row_src says which source's encoder output it reads.
 * With one row per sequence, a step is memory-bound: every weight of the decoder and of the
 * output projection is read once per token (108 MB at d_model 512, 6 layers, 10k words). */
#include <stdlib.h>
#include <string.h>

#include "inference/decode.h"

void decode_step(qkv_transformer *m, decode_state *st, const int *tok, int t,
                 const int *src_valid)
{
    const backend be = core_backend(&m->core);
    stack_step(&be, &m->dec_dims, &m->w.decoder, m->core.pos_table, st, tok, t, src_valid);
    head_step(&be, &m->dec_dims, &m->w.decoder, m->w.out_W, m->w.out_b, st, st->logits,
              m->cfg.tgt_vocab);
}

qkv_status decode_begin(decode_state *st, qkv_transformer *m, const int *src,
                        const int *src_valid, int n_src, int Ts, int cap, int T, qkv_error *err)
{
    const qkv_transformer_config *c = &m->cfg;
    const int C = c->d_model;
    memset(st, 0, sizeof *st);
    /* at bf16, the weights' copy made current before anything reads it */
    qkv_status stt = precision_prepare(&m->core.prec, m->core.params, m->core.n_params, 1, err);
    if (!stt) stt = transformer_layout(m, n_src, Ts, 1, m->core.flash_min_keys, err);
    if (!stt) stt = transformer_encode(m, src, src_valid, n_src, Ts, 0.0f, 0, err);
    if (!stt) stt = decode_state_init(st, &m->dec_dims, cap, T, n_src, Ts, c->tgt_vocab,
                                         core_kv_cache(&m->core), err);
    if (stt) return stt;
    const backend be = core_backend(&m->core);
    for (int l = 0; l < c->dec_layers; l++) { /* K, V of the encoder output, once */
        const qkv_mha_weights *a = &m->w.decoder.blocks[l].cross;
        const size_t at = (size_t)l * n_src * Ts * C;
        decode_kv_project(&be, st, st->cross_k, at, m->acts.enc.out, a->W_k, a->b_k, n_src * Ts,
                          C);
        decode_kv_project(&be, st, st->cross_v, at, m->acts.enc.out, a->W_v, a->b_v, n_src * Ts,
                          C);
    }
    return QKV_OK;
}

void decode_end(decode_state *st) { decode_state_free(st); }

qkv_status greedy_decode(qkv_transformer *m, const int *src, const int *src_valid, int B,
                         int src_len, int max_len, const int *max_lens, int *out, int *out_len,
                         qkv_error *err)
{
    const qkv_transformer_config *c = &m->cfg;
    const int V = c->tgt_vocab;
    if (max_len <= 0 || max_len > c->max_len)
        return qkv_fail(err, QKV_ERR_ARG, "max_len %d outside [1, %d] (the model's maximum "
                        "length)", max_len, c->max_len);
    for (int b = 0; b < B; b++) {
        if (src_valid[b] < 0 || src_valid[b] > src_len)
            return qkv_fail(err, QKV_ERR_ARG, "source %d: valid length %d outside [0, %d]", b,
                            src_valid[b], src_len);
        if (max_lens && (max_lens[b] < 1 || max_lens[b] > max_len))
            return qkv_fail(err, QKV_ERR_ARG, "sentence %d: max_len %d outside [1, %d]", b,
                            max_lens[b], max_len);
    }
    decode_state st;
    qkv_status stt = decode_begin(&st, m, src, src_valid, B, src_len, B, max_len, err);
    if (stt) return stt;
    int *tok = malloc((size_t)B * sizeof *tok), *done = calloc((size_t)B, sizeof *done);
    if (!tok || !done) {
        free(tok), free(done), decode_end(&st);
        return qkv_fail(err, QKV_ERR_NOMEM, "out of memory");
    }
    int remaining = B;
    for (int b = 0; b < B; b++) tok[b] = c->decoder_start, out_len[b] = 0;
    for (int t = 0; t < max_len && remaining > 0; t++) {
        decode_step(m, &st, tok, t, src_valid);
        for (int b = 0; b < B; b++) {
            const float *z = st.logits + (size_t)b * V;
            int best = QKV_UNK; /* never QKV_PAD */
            for (int k = 1; k < V; k++)
                if (z[k] > z[best] && !(c->suppress_pad && k == QKV_PAD)) best = k;
            tok[b] = best;
            if (done[b]) continue;
            if (best == QKV_EOS) {
                done[b] = 1, remaining--;
                continue;
            }
            out[(size_t)b * max_len + out_len[b]++] = best;
            if (max_lens && out_len[b] == max_lens[b]) done[b] = 1, remaining--;
        }
    }
    free(tok), free(done), decode_end(&st);
    return QKV_OK;
}

qkv_status qkv_transformer_greedy(qkv_transformer *m, const int *src, const int *src_valid,
                                  int B, int src_len, int max_len, int *out, int *out_len,
                                  qkv_error *err)
{
    return greedy_decode(m, src, src_valid, B, src_len, max_len, NULL, out, out_len, err);
}
