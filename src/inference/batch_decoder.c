/* SPDX-License-Identifier: MIT */
/* Continuous batching of greedy translation (the scheduling of Orca, Yu et al. 2022, and of
 * llama.cpp's server slots): a fixed set of slots, each a cache row of the decoder and a row of
 * the encoder output's projected keys and values. A sentence joins a free slot between two
 * steps (its encoder runs then, once), every step advances all running slots by one position
 * together, each at its own position, and a slot is free again as soon as its sentence ends.
 * The decoder's weights are read once per step for all of them, which is where batching pays.
 * Each slot's arithmetic is the one greedy decoding (greedy.c) does for that sentence alone,
 * up to float rounding in the linear layers (a step's rows may take a GEMM instead of matrix-
 * vector products): every row attends only to its own cache row and source. */
#include <stdlib.h>
#include <string.h>

#include "inference/decode.h"
#include "text/tokenizer.h"

typedef enum { SLOT_FREE, SLOT_RUNNING, SLOT_DONE } slot_state;

typedef struct {
    slot_state state;
    int pos;     /* the position the next step computes */
    int tok;     /* its input token: <bos>, then the previous choice */
    int max_len; /* tokens it may produce, <eos> not counted */
    int *out;    /* (model max_len) what it produced */
    int n_out;
} slot;

struct qkv_batch_decoder {
    qkv_translator *t;
    qkv_transformer *m;
    int cap, T;        /* slots; positions per slot (the model's max_len) */
    decode_state st;   /* cap cache rows of T target positions, cap sources of T positions */
    slot *slots;
    int *src_valid;    /* (cap) each slot's source length */
    int *row, *pos, *tok, *row_len; /* (cap) one step's rows, positions, inputs; (cap) lengths */
    int *ids;          /* (cap * T) sources being encoded */
    int *out;          /* (cap * T) the slots' outputs */
};

qkv_status qkv_batch_decoder_create(qkv_batch_decoder **out, qkv_translator *t, int slots,
                                    qkv_error *err)
{
    *out = NULL;
    if (!t || slots < 1)
        return qkv_fail(err, QKV_ERR_ARG, "a batch decoder needs a translator and slots >= 1 "
                        "(got %d)", slots);
    qkv_transformer *m = qkv_translator_model(t);
    const int T = m->cfg.max_len, cap = slots;
    qkv_batch_decoder *bd = calloc(1, sizeof *bd);
    if (!bd) return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for a batch decoder");
    bd->t = t, bd->m = m, bd->cap = cap, bd->T = T;
    bd->slots = calloc((size_t)cap, sizeof *bd->slots);
    bd->src_valid = calloc((size_t)cap, sizeof *bd->src_valid);
    bd->row = malloc((size_t)cap * sizeof *bd->row), bd->pos = malloc((size_t)cap * sizeof *bd->pos);
    bd->tok = malloc((size_t)cap * sizeof *bd->tok);
    bd->row_len = calloc((size_t)cap, sizeof *bd->row_len);
    bd->ids = malloc((size_t)cap * T * sizeof *bd->ids);
    bd->out = malloc((size_t)cap * T * sizeof *bd->out);
    if (!bd->slots || !bd->src_valid || !bd->row || !bd->pos || !bd->tok || !bd->row_len ||
        !bd->ids || !bd->out) {
        qkv_batch_decoder_free(bd);
        return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for a batch decoder of %d slots", cap);
    }
    for (int s = 0; s < cap; s++) bd->slots[s].out = bd->out + (size_t)s * T;
    qkv_status st = decode_state_init(&bd->st, &m->dec_dims, cap, T, cap, T, m->cfg.tgt_vocab,
                                      core_kv_cache(&m->core), err);
    if (st) {
        qkv_batch_decoder_free(bd);
        return st;
    }
    *out = bd;
    return QKV_OK;
}

void qkv_batch_decoder_free(qkv_batch_decoder *bd)
{
    if (!bd) return;
    decode_state_free(&bd->st);
    free(bd->slots), free(bd->src_valid), free(bd->row), free(bd->pos), free(bd->tok);
    free(bd->row_len), free(bd->ids), free(bd->out);
    free(bd);
}

int qkv_batch_decoder_slots(const qkv_batch_decoder *bd) { return bd->cap; }

int qkv_batch_decoder_free_slots(const qkv_batch_decoder *bd)
{
    int n = 0;
    for (int s = 0; s < bd->cap; s++) n += bd->slots[s].state == SLOT_FREE;
    return n;
}

int qkv_batch_decoder_running(const qkv_batch_decoder *bd)
{
    int n = 0;
    for (int s = 0; s < bd->cap; s++) n += bd->slots[s].state == SLOT_RUNNING;
    return n;
}

/* The sources as the model's tokens, one sentence each, as qkv_translate reads them. */
static qkv_status tokenize(qkv_sentences *src, const qkv_tokenizer *tok,
                           const char *const *sources, int n, qkv_error *err)
{
    qkv_sentences words;
    qkv_status st = source_words(&words, tok, sources, n, err);
    if (!st) st = qkv_tokenizer_tokens(tok, src, &words, 0, err);
    qkv_sentences_free(&words);
    return st;
}

qkv_status qkv_batch_decoder_add(qkv_batch_decoder *bd, const char *const *sources, int n,
                                 int max_len, int *slots, qkv_error *err)
{
    qkv_transformer *m = bd->m;
    const qkv_tokenizer *tk = qkv_translator_tokenizer(bd->t);
    const int limit = bd->T, bos = tk->source_bos, C = m->cfg.d_model;
    if (n < 1 || !sources || !slots)
        return qkv_fail(err, QKV_ERR_ARG, "a batch decoder takes n >= 1 sources (got %d)", n);
    if (max_len < 0) return qkv_fail(err, QKV_ERR_ARG, "max_len must be >= 0, got %d", max_len);
    if (n > qkv_batch_decoder_free_slots(bd))
        return qkv_fail(err, QKV_ERR_ARG, "%d sources but %d free slots", n,
                        qkv_batch_decoder_free_slots(bd));
    qkv_sentences src = {0};
    qkv_status st = tokenize(&src, tk, sources, n, err);
    if (st) return st;
    /* each translation's length as qkv_translate allows it (its defaults for the rest) */
    qkv_translate_options o = qkv_translate_default_options();
    const int cap = max_len && max_len < limit ? max_len : limit;
    int *L = malloc((size_t)n * sizeof *L);
    if (!L) {
        qkv_sentences_free(&src);
        return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for %d sources", n);
    }
    for (int i = 0; i < n; i++) L[i] = translate_length_limit(&o, qkv_sentence_len(&src, i), cap);
    /* padded rows (n, Ts) cut to the model's length, as the translator's encode_batch */
    int Ts = 1;
    for (int i = 0; i < n; i++) {
        const int len = qkv_sentence_len(&src, i) + 1 + bos;
        if (len > Ts) Ts = len < limit ? len : limit;
    }
    int *valid = bd->pos; /* free between steps */
    for (int i = 0; i < n; i++) {
        int *row = bd->ids + (size_t)i * Ts;
        if (bos) row[0] = QKV_BOS;
        valid[i] = bos + qkv_vocab_encode(row + bos, &tk->src, src.tokens + src.start[i],
                                          qkv_sentence_len(&src, i), Ts - bos);
    }
    qkv_sentences_free(&src);
    st = precision_prepare(&m->core.prec, m->core.params, m->core.n_params, 1, err);
    if (!st) st = transformer_layout(m, n, Ts, 1, m->core.flash_min_keys, err);
    if (!st) st = transformer_encode(m, bd->ids, valid, n, Ts, 0.0f, 0, err);
    if (st) {
        free(L);
        return st;
    }
    const backend be = core_backend(&m->core);
    for (int i = 0, s = 0; i < n; i++, s++) {
        while (bd->slots[s].state != SLOT_FREE) s++;
        for (int l = 0; l < m->cfg.dec_layers; l++) { /* K, V of this encoder output, once */
            const qkv_mha_weights *a = &m->w.decoder.blocks[l].cross;
            const size_t at = ((size_t)l * bd->cap + s) * bd->T * C;
            const float *enc = m->acts.enc.out + (size_t)i * Ts * C;
            decode_kv_project(&be, &bd->st, bd->st.cross_k, at, enc, a->W_k, a->b_k, Ts, C);
            decode_kv_project(&be, &bd->st, bd->st.cross_v, at, enc, a->W_v, a->b_v, Ts, C);
        }
        bd->src_valid[s] = valid[i];
        bd->slots[s] = (slot){SLOT_RUNNING, 0, QKV_BOS, L[i], bd->slots[s].out, 0};
        slots[i] = s;
    }
    free(L);
    return QKV_OK;
}

qkv_status qkv_batch_decoder_step(qkv_batch_decoder *bd, qkv_error *err)
{
    qkv_transformer *m = bd->m;
    const int V = m->cfg.tgt_vocab;
    int B = 0;
    for (int s = 0; s < bd->cap; s++) {
        const slot *q = &bd->slots[s];
        if (q->state != SLOT_RUNNING) continue;
        bd->row[B] = s, bd->pos[B] = q->pos, bd->tok[B] = q->tok;
        bd->row_len[s] = q->pos + 1;
        B++;
    }
    if (!B) return QKV_OK;
    qkv_status st = precision_prepare(&m->core.prec, m->core.params, m->core.n_params, 1, err);
    if (st) return st;
    decode_state *ds = &bd->st;
    ds->B = B, ds->row = bd->row, ds->pos = bd->pos, ds->row_len = bd->row_len;
    decode_step(m, ds, bd->tok, 0, bd->src_valid);
    for (int b = 0; b < B; b++) { /* greedy.c's choice and stopping rule */
        slot *q = &bd->slots[bd->row[b]];
        const float *z = ds->logits + (size_t)b * V;
        int best = 0;
        for (int k = 1; k < V; k++)
            if (z[k] > z[best]) best = k;
        q->pos++, q->tok = best;
        if (best == QKV_EOS) {
            q->state = SLOT_DONE;
            continue;
        }
        q->out[q->n_out++] = best;
        if (q->pos >= q->max_len) q->state = SLOT_DONE;
    }
    return QKV_OK;
}

int qkv_batch_decoder_finished(const qkv_batch_decoder *bd, int slot)
{
    return slot >= 0 && slot < bd->cap && bd->slots[slot].state == SLOT_DONE;
}

qkv_status qkv_batch_decoder_take(qkv_batch_decoder *bd, int s, char **text, int *tokens,
                                  qkv_error *err)
{
    *text = NULL;
    if (!qkv_batch_decoder_finished(bd, s))
        return qkv_fail(err, QKV_ERR_ARG, "slot %d holds no finished translation", s);
    slot *q = &bd->slots[s];
    const qkv_tokenizer *tk = qkv_translator_tokenizer(bd->t);
    const size_t need = qkv_tokenizer_decode(tk, NULL, 0, q->out, q->n_out);
    if (!(*text = malloc(need + 1)))
        return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for a translation's text");
    qkv_tokenizer_decode(tk, *text, need + 1, q->out, q->n_out);
    if (tokens) *tokens = q->n_out;
    q->state = SLOT_FREE;
    return QKV_OK;
}

void qkv_batch_decoder_cancel(qkv_batch_decoder *bd, int s)
{
    if (s >= 0 && s < bd->cap) bd->slots[s].state = SLOT_FREE;
}
