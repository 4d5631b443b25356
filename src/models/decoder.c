/* SPDX-License-Identifier: MIT */
/* The decoder interface (decoder.h) over both models: the encoder-decoder's decoder stack with
 * cross-attention to its sources, and the language model's stack. Both step through
 * stack_step over the one decode_state; they differ in how known tokens enter a row (the
 * language model's prompt is one batched forward pass) and in the encoder. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/decoder.h"
#include "models/language_model_internal.h"
#include "models/transformer_internal.h"

struct decoder {
    qkv_transformer *tm; /* one of the two */
    qkv_lm *lm;
    model_core *core;
    const stack_dims *dims;
    const stack_w *w;
    const weight *out;
    const float *out_b;
    decoder_info info;
    decode_state st;
    int *src_valid; /* (sources) each source slot's length */
    unsigned generation; /* the model's when the state was made (model_core.generation) */
};

/* The state lives where the model's buffers lived when it was made. */
static qkv_status check_generation(const decoder *d, qkv_error *err)
{
    if (d->generation == d->core->generation) return QKV_OK;
    return qkv_fail(err, QKV_ERR_ARG, "the model moved to %s after this decoder was made: make "
                    "the decoder again", core_device_name(d->core));
}

static qkv_status state_init(decoder *d, int T, int Ts, int V, qkv_error *err)
{
    const backend be = core_backend(d->core);
    d->generation = d->core->generation;
    return decode_state_init(&d->st, &be, d->dims, d->info.rows, T, d->info.sources, Ts, V,
                             core_kv_cache(d->core), err);
}

static qkv_status decoder_alloc(decoder **out, int rows, int positions, int sources,
                                int src_positions, int max_len, qkv_error *err)
{
    *out = NULL;
    if (rows < 1 || positions < 0 || positions > max_len || sources < 0 || src_positions < 0 ||
        src_positions > max_len)
        return qkv_fail(err, QKV_ERR_ARG, "a decoder needs rows >= 1, positions in [0, %d] and "
                        "source positions in [0, %d] (got %d, %d, %d)", max_len, max_len, rows,
                        positions, src_positions);
    decoder *d = calloc(1, sizeof *d);
    if (!d || !(d->src_valid = calloc((size_t)sources + 1, sizeof *d->src_valid))) {
        free(d);
        return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for a decoder");
    }
    *out = d;
    return QKV_OK;
}

decoder_info decoder_transformer_info(const qkv_transformer *m)
{
    const qkv_transformer_config *c = &m->cfg;
    return (decoder_info){c->tgt_vocab, c->max_len, c->max_len, 0, 0, 1, c->decoder_start,
                          c->suppress_pad, c->forced_eos};
}

qkv_status decoder_create_transformer(decoder **out, qkv_transformer *m, int rows, int positions,
                                      int sources, int src_positions, qkv_error *err)
{
    const qkv_transformer_config *c = &m->cfg;
    qkv_status st = decoder_alloc(out, rows, positions, sources, src_positions, c->max_len, err);
    if (st) return st;
    decoder *d = *out;
    const int T = positions ? positions : c->max_len, Ts = src_positions ? src_positions : c->max_len;
    d->tm = m, d->core = &m->core, d->dims = &m->dec_dims, d->w = &m->w.decoder;
    d->out = &m->w.out, d->out_b = m->w.out_b;
    d->info = decoder_transformer_info(m);
    d->info.positions = T, d->info.rows = rows, d->info.sources = sources;
    st = state_init(d, T, Ts, c->tgt_vocab, err);
    if (st) decoder_free(d), *out = NULL;
    return st;
}

qkv_status decoder_create_lm(decoder **out, qkv_lm *m, int rows, int positions, qkv_error *err)
{
    const qkv_lm_config *c = &m->cfg;
    qkv_status st = decoder_alloc(out, rows, positions, 0, 0, c->max_len, err);
    if (st) return st;
    decoder *d = *out;
    const int T = positions ? positions : c->max_len;
    d->lm = m, d->core = &m->core, d->dims = &m->dims, d->w = &m->w.stack;
    d->out = &m->w.out, d->out_b = m->w.out_b;
    d->info = (decoder_info){c->vocab, T, c->max_len, rows, 0, 0, QKV_BOS, 0, 0};
    st = state_init(d, T, 0, c->vocab, err);
    if (st) decoder_free(d), *out = NULL;
    return st;
}

void decoder_free(decoder *d)
{
    if (!d) return;
    decode_state_free(&d->st);
    free(d->src_valid);
    free(d);
}

decoder_info decoder_get_info(const decoder *d) { return d->info; }

qkv_status decoder_encode(decoder *d, const int *src, const int *src_valid, int n, int Ts,
                          const int *slot, qkv_error *err)
{
    qkv_transformer *m = d->tm;
    if (!m) return qkv_fail(err, QKV_ERR_ARG, "a language model has no sources to encode");
    if (n < 1 || Ts < 1 || Ts > d->st.Ts)
        return qkv_fail(err, QKV_ERR_ARG, "%d sources of %d positions: the decoder holds "
                        "sources of 1 to %d positions", n, Ts, d->st.Ts);
    for (int i = 0; i < n; i++) {
        if (src_valid[i] < 0 || src_valid[i] > Ts)
            return qkv_fail(err, QKV_ERR_ARG, "source %d: valid length %d outside [0, %d]", i,
                            src_valid[i], Ts);
        if (slot && (slot[i] < 0 || slot[i] >= d->st.n_src))
            return qkv_fail(err, QKV_ERR_ARG, "source slot %d outside [0, %d)", slot[i],
                            d->st.n_src);
    }
    if (!slot && n > d->st.n_src)
        return qkv_fail(err, QKV_ERR_ARG, "%d sources: the decoder holds %d", n, d->st.n_src);
    /* at bf16 or int8, the weights' copy made current before anything reads it */
    qkv_status st = check_generation(d, err);
    if (!st) st = core_prepare(&m->core, 1, err);
    if (!st) st = transformer_layout(m, n, Ts, 1, 0, err);
    if (!st) st = transformer_encode(m, src, src_valid, n, Ts, 0.0f, 0, err);
    if (st) return st;
    const backend be = core_backend(&m->core);
    const int C = m->cfg.d_model;
    /* K, V of the encoder outputs, once: in one product over all of them when they fill
     * consecutive slots from 0 (a batch decoded together), else source by source */
    const int together = !slot && Ts == d->st.Ts, runs = together ? 1 : n;
    for (int i = 0; i < runs; i++) {
        const int s = slot ? slot[i] : i, rows = together ? n * Ts : Ts;
        const float *enc = m->acts.enc.out + (size_t)i * Ts * C;
        for (int l = 0; l < m->cfg.dec_layers; l++) {
            const mha_w *a = &m->w.decoder.blocks[l].cross;
            const size_t at = ((size_t)l * d->st.n_src + s) * d->st.Ts * C;
            decode_kv_project(&be, &d->st, d->st.cross_k, at, enc, &a->W_k, a->f.b_k, rows, C);
            decode_kv_project(&be, &d->st, d->st.cross_v, at, enc, &a->W_v, a->f.b_v, rows, C);
        }
    }
    for (int i = 0; i < n; i++) d->src_valid[slot ? slot[i] : i] = src_valid[i];
    return core_finish(&m->core, err);
}

/* Whether r names rows, positions and sources the state holds and tok ids of the vocabulary. */
static qkv_status check_rows(const decoder *d, const decoder_rows *r, const int *tok,
                             qkv_error *err)
{
    if (r->n < 1 || r->n > d->st.cap)
        return qkv_fail(err, QKV_ERR_ARG, "a step of %d rows: the decoder holds 1 to %d", r->n,
                        d->st.cap);
    for (int b = 0; b < r->n; b++) {
        if (r->row[b] < 0 || r->row[b] >= d->st.cap || r->pos[b] < 0 || r->pos[b] >= d->st.T)
            return qkv_fail(err, QKV_ERR_ARG, "step row %d: cache row %d, position %d outside "
                            "[0, %d) x [0, %d)", b, r->row[b], r->pos[b], d->st.cap, d->st.T);
        if (d->tm && (!r->src || r->src[b] < 0 || r->src[b] >= d->st.n_src))
            return qkv_fail(err, QKV_ERR_ARG, "step row %d: source slot %d outside [0, %d)", b,
                            r->src ? r->src[b] : -1, d->st.n_src);
        if (tok[b] < 0 || tok[b] >= d->info.vocab)
            return qkv_fail(err, QKV_ERR_ARG, "step row %d: token id %d outside the vocabulary "
                            "[0, %d)", b, tok[b], d->info.vocab);
        if (r->ancestry && r->ancestry[(size_t)b * r->ld + r->pos[b]] != r->row[b])
            return qkv_fail(err, QKV_ERR_ARG, "step row %d: its ancestry does not end in its "
                            "own cache row", b);
    }
    return QKV_OK;
}

/* Logits that are not finite come of weights past float's range (a model trained with a rate
 * of 1e30, or edited): no search can choose from them, and a score of NaN is no answer. */
static qkv_status finite_logits(const model_core *c, const float *z, int rows, int V,
                                qkv_error *err)
{
    for (int b = 0; b < rows; b++)
        for (int v = 0; v < V; v++)
            if (!isfinite(z[(size_t)b * V + v]))
                return qkv_fail(err, QKV_ERR_NUMERIC, "%s: the model's logits are not finite "
                                "(%g for token %d): its weights overflow float's range",
                                c->source[0] ? c->source : "the model",
                                (double)z[(size_t)b * V + v], v);
    return QKV_OK;
}

qkv_status decoder_step(decoder *d, const decoder_rows *r, const int *tok, float **logits,
                        qkv_error *err)
{
    model_core *c = d->core;
    qkv_status st = check_generation(d, err);
    if (!st) st = check_rows(d, r, tok, err);
    if (!st) st = core_prepare(c, 1, err);
    if (st) return st;
    /* position 0 begins a sequence: a linear-attention row's state starts empty (a cache
     * row's keys past the position are never read, a running sum would be) */
    for (int b = 0; d->dims->linear_attention && b < r->n; b++)
        for (int l = 0; r->pos[b] == 0 && l < d->dims->layers; l++)
            qkv_linear_attention_state_reset(&d->st.sums[l * d->st.cap + r->row[b]]);
    const backend be = core_backend(c);
    if (stack_step(&be, d->dims, d->w, c->pos_table, &d->st, r, tok, d->src_valid))
        return transfer_failed(&be, err);
    head_step(&be, d->dims, d->w, d->out, d->out_b, &d->st, r->n, d->st.logits, d->info.vocab);
    *logits = d->st.logits;
    if (d->st.logits_host) { /* the searches read and filter them on the host */
        if (be.ops->download(d->st.logits_host, d->st.logits,
                             (size_t)r->n * d->info.vocab * sizeof(float)))
            return transfer_failed(&be, err);
        *logits = d->st.logits_host;
    }
    if ((st = core_finish(c, err))) return st;
    return finite_logits(c, *logits, r->n, d->info.vocab, err);
}

qkv_status decoder_step_best(decoder *d, const decoder_rows *r, const int *tok,
                             const best_request *rq, qkv_error *err)
{
    model_core *c = d->core;
    qkv_status st = check_generation(d, err);
    if (!st) st = check_rows(d, r, tok, err);
    if (!st) st = core_prepare(c, 1, err);
    if (st) return st;
    const backend be = core_backend(c);
    if (stack_step(&be, d->dims, d->w, c->pos_table, &d->st, r, tok, d->src_valid))
        return transfer_failed(&be, err);
    /* finite_logits' rule; which logit it was, a fused choice does not keep */
    int nonfinite = 0;
    best_request q = *rq;
    q.nonfinite = &nonfinite;
    head_step_best(&be, d->dims, d->w, d->out, d->out_b, &d->st, r->n, &q, d->info.vocab);
    if ((st = core_finish(c, err))) return st;
    if (nonfinite)
        return qkv_fail(err, QKV_ERR_NUMERIC, "%s: the model's logits are not finite: its "
                        "weights overflow float's range", c->source[0] ? c->source : "the model");
    return QKV_OK;
}

/* The language model's prompt in one batched forward pass, its keys and values (or
 * linear-attention state) into the row. */
static qkv_status lm_prefill(decoder *d, int row, const int *ids, int n, float *logits,
                             qkv_error *err)
{
    qkv_lm *m = d->lm;
    qkv_status st = check_generation(d, err);
    if (!st) st = core_prepare(&m->core, 1, err);
    if (!st) st = lm_forward(m, ids, 1, n, 0.0f, 0, err);
    if (st) return st;
    const backend be = core_backend(&m->core);
    decode_state_fill(&be, &m->dims, &d->st, row, n, &m->acts.s);
    /* the last logits where the host reads them: the caller's, or the state's host copy */
    const float *last = m->acts.logits + (size_t)(n - 1) * d->info.vocab;
    float *host = logits ? logits : d->st.logits_host;
    if (host) {
        if (be.ops->download(host, last, (size_t)d->info.vocab * sizeof *host))
            return transfer_failed(&be, err);
        last = host;
    }
    if ((st = core_finish(&m->core, err))) return st;
    return finite_logits(&m->core, last, 1, d->info.vocab, err);
}

qkv_status decoder_prefill(decoder *d, int row, int src, const int *ids, int n, float *logits,
                           qkv_error *err)
{
    if (row < 0 || row >= d->st.cap || n < 1 || n > d->st.T)
        return qkv_fail(err, QKV_ERR_ARG, "a prefill of %d tokens into row %d: the decoder "
                        "holds rows 0 to %d of 1 to %d tokens", n, row, d->st.cap - 1, d->st.T);
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= d->info.vocab)
            return qkv_fail(err, QKV_ERR_ARG, "prompt token %d: id %d outside the vocabulary "
                            "[0, %d)", i, ids[i], d->info.vocab);
    if (d->lm) return lm_prefill(d, row, ids, n, logits, err);
    /* the encoder-decoder: one step per token (the start, then a target prefix) */
    float *z = NULL;
    for (int i = 0; i < n; i++) {
        const decoder_rows r = {1, &row, &i, &src, NULL, 0};
        qkv_status st = decoder_step(d, &r, ids + i, &z, err);
        if (st) return st;
    }
    if (logits) memcpy(logits, z, (size_t)d->info.vocab * sizeof *logits);
    return QKV_OK;
}

qkv_status decoder_attention_weights(qkv_transformer *m, const int *src, int Ts,
                                     const int *tgt_in, int Tt, float *logits, float *encoder,
                                     float *self, float *cross, qkv_error *err)
{
    const qkv_transformer_config *c = &m->cfg;
    const int H = c->heads;
    const qkv_batch batch = {1, Ts, Tt, src, &Ts, tgt_in, tgt_in}; /* labels are not read */
    qkv_status st = qkv_transformer_logits(m, &batch, logits, err);
    if (st) return st;
    const backend be = core_backend(&m->core);
    const size_t enc = (size_t)H * Ts * Ts, sa = (size_t)H * Tt * Tt, ca = (size_t)H * Tt * Ts;
    const size_t f = sizeof(float);
    for (int l = 0; l < c->enc_layers; l++)
        if (be.ops->download(encoder + l * enc, m->acts.enc.blocks[l].self_att.c.P, enc * f))
            return transfer_failed(&be, err);
    for (int l = 0; l < c->dec_layers; l++)
        if (be.ops->download(self + l * sa, m->acts.dec.blocks[l].self_att.c.P, sa * f) ||
            be.ops->download(cross + l * ca, m->acts.dec.blocks[l].cross_att.c.P, ca * f))
            return transfer_failed(&be, err);
    return core_finish(&m->core, err);
}
