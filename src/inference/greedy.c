/* SPDX-License-Identifier: MIT */
/* Greedy autoregressive decoding with a key-value cache (d2l 10.7.6, llama2.c's forward): the
 * encoder runs once; each decoder layer keeps the keys and values of every target position so
 * far, and the cross-attention's keys and values of the encoder output are projected once
 * (models/decoder.h). A step then costs O(t) attention work at position t instead of
 * re-running the whole prefix. With one row per sentence a step is memory-bound: every weight
 * of the decoder and of the output projection is read once per token (108 MB at d_model 512,
 * 6 layers, 10k words). The sentences of a batch step in lockstep, each in its own cache row,
 * reading its own source; one that has ended keeps its row until all have. */
#include <stdlib.h>
#include <string.h>

#include "inference/decode.h"

/* The steps of B sentences encoded into d's source slots 0 .. B - 1; work (6 B) zeroed. Each
 * step asks the decoder for each row's best token only (decoder_step_best: the banned ones
 * never, ties to the lower id, as argmax of the filtered logits), unless the rules force it. */
static qkv_status greedy_steps(decoder *d, const decoding_rules *r, int B, int max_len,
                               const int *max_lens, int *out, int *out_len, int *work,
                               qkv_error *err)
{
    const int V = decoder_get_info(d).vocab;
    /* per sentence: its cache row (and source), position, input token, whether it has ended,
     * its best token and that token's logit */
    int *row = work, *pos = work + B, *tok = work + 2 * B, *done = work + 3 * B, remaining = B;
    int *best_id = work + 4 * B;
    float *best_val = (float *)(work + 5 * B);
    const best_request rq = {1, rules_banned_mask(r, V), best_id, best_val, NULL, NULL};
    for (int b = 0; b < B; b++) row[b] = b, tok[b] = r->start, out_len[b] = 0;
    for (int t = 0; t < max_len && remaining > 0; t++) {
        for (int b = 0; b < B; b++) pos[b] = t;
        const decoder_rows rows = {B, row, pos, row, NULL, 0};
        qkv_status st = decoder_step_best(d, &rows, tok, &rq, err);
        if (st) return st;
        for (int b = 0; b < B; b++) {
            const int forced = rules_forced(r, out_len[b]);
            /* no token above -inf at all: argmax's first */
            const int best = forced >= 0 ? forced : best_id[b] >= 0 ? best_id[b] : 0;
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
    return QKV_OK;
}

qkv_status greedy_decode(qkv_transformer *m, const int *src, const int *src_valid, int B,
                         int src_len, int max_len, const int *max_lens,
                         const decoding_rules *rules, int *out, int *out_len, qkv_error *err)
{
    const qkv_transformer_config *c = qkv_transformer_get_config(m);
    if (max_len <= 0 || max_len > c->max_len)
        return qkv_fail(err, QKV_ERR_ARG, "max_len %d outside [1, %d] (the model's maximum "
                        "length)", max_len, c->max_len);
    for (int b = 0; b < B; b++)
        if (max_lens && (max_lens[b] < 1 || max_lens[b] > max_len))
            return qkv_fail(err, QKV_ERR_ARG, "sentence %d: max_len %d outside [1, %d]", b,
                            max_lens[b], max_len);
    decoder *d = NULL;
    int *work = NULL;
    qkv_status st = decoder_create_transformer(&d, m, B, max_len, B, src_len, err);
    if (!st) st = decoder_encode(d, src, src_valid, B, src_len, NULL, err);
    if (!st && !(work = calloc((size_t)B * 6, sizeof *work)))
        st = qkv_fail(err, QKV_ERR_NOMEM, "out of memory decoding %d sentences", B);
    if (!st) {
        const decoder_info info = decoder_get_info(d);
        const decoding_rules own = decoding_rules_of(&info);
        st = greedy_steps(d, rules ? rules : &own, B, max_len, max_lens, out, out_len, work, err);
    }
    free(work);
    decoder_free(d);
    return st;
}

qkv_status qkv_transformer_greedy(qkv_transformer *m, const int *src, const int *src_valid,
                                  int B, int src_len, int max_len, int *out, int *out_len,
                                  qkv_error *err)
{
    return greedy_decode(m, src, src_valid, B, src_len, max_len, NULL, NULL, out, out_len, err);
}
