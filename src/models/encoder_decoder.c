/* Forward and backward of the encoder-decoder Transformer with teacher forcing (d2l 11.7):
 *   encoder:  X = dropout(E_src[src] sqrt(C) + P);  N x [self-attention, FFN], each wrapped in
 *             a residual connection with LayerNorm
 *   decoder:  Y = dropout(E_tgt[tgt_in] sqrt(C) + P);  N x [causal self-attention,
 *             encoder-decoder attention, FFN];  logits = Y W_out^T + b_out
 *   loss:     cross-entropy over the real (non-padding) target tokens; in training one pass
 *             over the logits gives the loss and their gradient (kernels/fused.h)
 * Each attention runs the materialised kernel or, from FLASH_MIN_KEYS keys on, the flash
 * kernel, as its activations were laid out (model_attention.h). */
#include <limits.h>
#include <math.h>
#include <string.h>

#include "kernels/fused.h"
#include "models/model_attention.h"
#include "models/sublayer.h"
#include "models/transformer_internal.h"

/* ---- forward --------------------------------------------------------------------------- */

static qkv_status embed(qkv_transformer *m, float *x, const int *ids, const float *E,
                        const float *learned, int V, int B, int T, float p, uint64_t seed,
                        qkv_error *err)
{
    const int C = m->cfg.d_model;
    qkv_status st = qkv_embedding_forward(x, ids, E, B * T, V, C, err);
    if (st) return st;
    qkv_positional_forward(x, x, learned ? learned : m->pos_table, B, T, C, 0, sqrtf((float)C));
    qkv_dropout_forward(x, x, (size_t)B * T * C, p, seed, 0);
    return QKV_OK;
}

static void final_norm(const qkv_transformer *m, float *out, float *mean, float *rstd,
                       const float *x, const norm_w *n, size_t N)
{
    const int C = m->cfg.d_model;
    if (n->g)
        qkv_layernorm_forward(out, mean, rstd, x, n->g, n->b, (int)N, C, m->cfg.ln_eps);
    else if (out != x)
        memcpy(out, x, N * C * sizeof *out);
}

/* The encoder stack over src (B, Ts): fills acts.src_x, the blocks' activations, enc_out. */
qkv_status transformer_encode(qkv_transformer *m, const int *src, const int *src_valid, int B,
                              int Ts, float p, uint64_t seed, qkv_error *err)
{
    const qkv_transformer_config *c = &m->cfg;
    const sublayer_shape sh = {c->pre_norm, c->d_model, c->ln_eps};
    model_acts *x = &m->acts;
    const int C = c->d_model, F = c->ffn;
    const size_t Ns = (size_t)B * Ts;
    const qkv_mha_config mc = {C, C, c->heads, C / c->heads, c->bias};
    const qkv_mask src_mask = {src_valid, 0, 0};
    const linear_mode lm = precision_mode(&m->prec, m->params, m->n_params);
    qkv_status st = embed(m, x->src_x, src, m->w.src_embedding, m->w.src_positions, c->src_vocab,
                          B, Ts, p, dropout_site_seed(seed, 0, 0, 0), err);
    if (st) return st;
    const float *h = x->src_x;
    for (int l = 0; l < c->enc_layers; l++) {
        encoder_block_acts *a = &x->encoder[l];
        const encoder_block_w *w = &m->w.encoder[l];
        sublayer_ctx att = {&sh, Ns, p, dropout_site_seed(seed, 0, l, 1), x->scratch};
        sublayer_ctx ff = {&sh, Ns, p, dropout_site_seed(seed, 0, l, 2), x->scratch};
        const float *in = sublayer_in(&att, &a->att, h, &w->norm1);
        model_mha_forward(&lm, a->att.s, &a->cache, a->L, in, in, &w->attention, &mc, B, Ts, Ts,
                          &src_mask, p, dropout_site_seed(seed, 0, l, 3), x->scratch);
        sublayer_out(&att, &a->att, h, &w->norm1);
        in = sublayer_in(&ff, &a->ff, a->att.out, &w->norm2);
        ffn_forward(&lm, a->ff.s, a->h_pre, a->h, in, w->ffn.W1, w->ffn.b1, w->ffn.W2,
                    w->ffn.b2, (int)Ns, C, F, c->act);
        sublayer_out(&ff, &a->ff, a->att.out, &w->norm2);
        h = a->ff.out;
    }
    final_norm(m, x->enc_out, x->enc_mean, x->enc_rstd, h, &m->w.encoder_norm, Ns);
    return QKV_OK;
}

static qkv_status forward(qkv_transformer *m, const qkv_batch *b, float p, uint64_t seed,
                          qkv_error *err)
{
    const qkv_transformer_config *c = &m->cfg;
    const sublayer_shape sh = {c->pre_norm, c->d_model, c->ln_eps};
    model_acts *x = &m->acts;
    const int B = b->B, Ts = b->src_len, Tt = b->tgt_len, C = c->d_model, F = c->ffn;
    const size_t Nt = (size_t)B * Tt;
    const qkv_mha_config mc = {C, C, c->heads, C / c->heads, c->bias};
    const qkv_mask src_mask = {b->src_valid, 0, 0}, causal = {NULL, 0, 1};
    const linear_mode lm = precision_mode(&m->prec, m->params, m->n_params);
    qkv_status st = transformer_encode(m, b->src, b->src_valid, B, Ts, p, seed, err);
    if (!st)
        st = embed(m, x->tgt_x, b->tgt_in, m->w.tgt_embedding, m->w.tgt_positions, c->tgt_vocab,
                   B, Tt, p, dropout_site_seed(seed, 1, 0, 0), err);
    if (st) return st;

    const float *h;
    h = x->tgt_x;
    for (int l = 0; l < c->dec_layers; l++) {
        decoder_block_acts *a = &x->decoder[l];
        const decoder_block_w *w = &m->w.decoder[l];
        sublayer_ctx s1 = {&sh, Nt, p, dropout_site_seed(seed, 1, l, 1), x->scratch};
        sublayer_ctx s2 = {&sh, Nt, p, dropout_site_seed(seed, 1, l, 2), x->scratch};
        sublayer_ctx s3 = {&sh, Nt, p, dropout_site_seed(seed, 1, l, 3), x->scratch};
        const float *in = sublayer_in(&s1, &a->self, h, &w->norm1);
        model_mha_forward(&lm, a->self.s, &a->self_cache, a->self_L, in, in, &w->self_attention,
                          &mc, B, Tt, Tt, &causal, p, dropout_site_seed(seed, 1, l, 4),
                          x->scratch);
        sublayer_out(&s1, &a->self, h, &w->norm1);
        in = sublayer_in(&s2, &a->cross, a->self.out, &w->norm2);
        model_mha_forward(&lm, a->cross.s, &a->cross_cache, a->cross_L, in, x->enc_out,
                          &w->cross_attention, &mc, B, Tt, Ts, &src_mask, p,
                          dropout_site_seed(seed, 1, l, 5), x->scratch);
        sublayer_out(&s2, &a->cross, a->self.out, &w->norm2);
        in = sublayer_in(&s3, &a->ff, a->cross.out, &w->norm3);
        ffn_forward(&lm, a->ff.s, a->h_pre, a->h, in, w->ffn.W1, w->ffn.b1, w->ffn.W2,
                    w->ffn.b2, (int)Nt, C, F, c->act);
        sublayer_out(&s3, &a->ff, a->cross.out, &w->norm3);
        h = a->ff.out;
    }
    final_norm(m, x->dec_out, x->dec_mean, x->dec_rstd, h, &m->w.decoder_norm, Nt);
    linear_forward(&lm, x->logits, x->dec_out, m->w.out_W, m->w.out_b, (int)Nt, C,
                   c->tgt_vocab);
    return QKV_OK;
}

/* ---- backward -------------------------------------------------------------------------- */

static void final_norm_backward(const qkv_transformer *m, float *dx, const float *dout,
                                const float *x, const float *mean, const float *rstd,
                                const norm_w *n, norm_w *dn, size_t N)
{
    const int C = m->cfg.d_model;
    memset(dx, 0, N * C * sizeof *dx);
    if (n->g)
        qkv_layernorm_backward(dx, dn->g, dn->b, dout, x, mean, rstd, n->g, (int)N, C);
    else
        memcpy(dx, dout, N * C * sizeof *dx);
}

static void embed_backward(qkv_transformer *m, float *dE, float *dlearned, float *dx,
                           const int *ids, int B, int T, float p, uint64_t seed)
{
    const int C = m->cfg.d_model;
    const size_t n = (size_t)B * T * C;
    /* dx is the gradient of dropout(E sqrt(C) + P): undo the dropout, then the scale. */
    float *g = m->acts.scratch;
    memset(g, 0, n * sizeof *g);
    qkv_dropout_backward(g, dx, n, p, seed, 0);
    if (dlearned) qkv_positional_backward(NULL, dlearned, g, B, T, C, 0, 1.0f);
    const float s = sqrtf((float)C);
    for (size_t i = 0; i < n; i++) g[i] *= s;
    qkv_embedding_backward(dE, g, ids, B * T, C);
}

static void backward(qkv_transformer *m, const qkv_batch *b, float p, uint64_t seed)
{
    const qkv_transformer_config *c = &m->cfg;
    const sublayer_shape sh = {c->pre_norm, c->d_model, c->ln_eps};
    model_acts *x = &m->acts;
    model_w *g = &m->g;
    const int B = b->B, Ts = b->src_len, Tt = b->tgt_len, C = c->d_model, F = c->ffn;
    const size_t Ns = (size_t)B * Ts, Nt = (size_t)B * Tt;
    const qkv_mha_config mc = {C, C, c->heads, C / c->heads, c->bias};
    const qkv_mask src_mask = {b->src_valid, 0, 0}, causal = {NULL, 0, 1};
    const linear_mode lm = precision_mode(&m->prec, m->params, m->n_params);
    float *dh = x->d_a, *ds = x->d_b, *din = x->d_c; /* d(stream), d(sublayer out), d(its in) */

    /* logits -> decoder output (the logits buffer already holds dlogits, and the output
     * bias its gradient) */
    float *dout = din;
    memset(dout, 0, Nt * C * sizeof *dout);
    linear_backward(&lm, dout, g->out_W, NULL, x->logits, x->dec_out, m->w.out_W, (int)Nt, C,
                    c->tgt_vocab);
    const float *dec_last = c->dec_layers ? x->decoder[c->dec_layers - 1].ff.out : x->tgt_x;
    final_norm_backward(m, dh, dout, dec_last, x->dec_mean, x->dec_rstd, &m->w.decoder_norm,
                        &g->decoder_norm, Nt);

    memset(x->d_enc_out, 0, Ns * C * sizeof *x->d_enc_out);
    for (int l = c->dec_layers - 1; l >= 0; l--) {
        decoder_block_acts *a = &x->decoder[l];
        const decoder_block_w *w = &m->w.decoder[l];
        decoder_block_w *dw = &g->decoder[l];
        const float *h = l ? x->decoder[l - 1].ff.out : x->tgt_x;
        sublayer_ctx s1 = {&sh, Nt, p, dropout_site_seed(seed, 1, l, 1), x->scratch};
        sublayer_ctx s2 = {&sh, Nt, p, dropout_site_seed(seed, 1, l, 2), x->scratch};
        sublayer_ctx s3 = {&sh, Nt, p, dropout_site_seed(seed, 1, l, 3), x->scratch};
        /* dh holds d(block output). Each step below turns d(sublayer out) into d(sublayer x). */
        float *dstream = dh; /* reused: d(out) in, d(x) out, accumulated in place */
        /* FFN sublayer: x = cross.out */
        memcpy(din, dstream, Nt * C * sizeof *din);
        memset(dstream, 0, Nt * C * sizeof *dstream);
        sublayer_out_backward(&s3, &a->ff, dstream, ds, din, &w->norm3, &dw->norm3);
        memset(din, 0, Nt * C * sizeof *din);
        ffn_backward(&lm, din, dw->ffn.W1, dw->ffn.b1, dw->ffn.W2, dw->ffn.b2, ds, a->h_pre,
                     a->h, c->pre_norm ? a->ff.u : a->cross.out, w->ffn.W1, w->ffn.W2, (int)Nt,
                     C, F, c->act, x->scratch);
        sublayer_in_backward(&s3, &a->ff, dstream, din, a->cross.out, &w->norm3, &dw->norm3);
        /* cross-attention sublayer: x = self.out, keys/values = encoder output */
        memcpy(din, dstream, Nt * C * sizeof *din);
        memset(dstream, 0, Nt * C * sizeof *dstream);
        sublayer_out_backward(&s2, &a->cross, dstream, ds, din, &w->norm2, &dw->norm2);
        memset(din, 0, Nt * C * sizeof *din);
        model_mha_backward(&lm, din, x->d_enc_out, &dw->cross_attention, ds, &a->cross_cache,
                           a->cross_L, c->pre_norm ? a->cross.u : a->self.out, x->enc_out,
                           &w->cross_attention, &mc, B, Tt, Ts, &src_mask, p,
                           dropout_site_seed(seed, 1, l, 5), x->scratch);
        sublayer_in_backward(&s2, &a->cross, dstream, din, a->self.out, &w->norm2, &dw->norm2);
        /* causal self-attention sublayer: x = h */
        memcpy(din, dstream, Nt * C * sizeof *din);
        memset(dstream, 0, Nt * C * sizeof *dstream);
        sublayer_out_backward(&s1, &a->self, dstream, ds, din, &w->norm1, &dw->norm1);
        memset(din, 0, Nt * C * sizeof *din);
        const float *in = c->pre_norm ? a->self.u : h;
        model_mha_backward(&lm, din, din, &dw->self_attention, ds, &a->self_cache, a->self_L, in,
                           in, &w->self_attention, &mc, B, Tt, Tt, &causal, p,
                           dropout_site_seed(seed, 1, l, 4), x->scratch);
        sublayer_in_backward(&s1, &a->self, dstream, din, h, &w->norm1, &dw->norm1);
    }
    embed_backward(m, g->tgt_embedding, g->tgt_positions, dh, b->tgt_in, B, Tt, p,
                   dropout_site_seed(seed, 1, 0, 0));

    /* encoder, from d(encoder output) gathered over every cross-attention */
    const float *enc_last = c->enc_layers ? x->encoder[c->enc_layers - 1].ff.out : x->src_x;
    final_norm_backward(m, dh, x->d_enc_out, enc_last, x->enc_mean, x->enc_rstd,
                        &m->w.encoder_norm, &g->encoder_norm, Ns);
    for (int l = c->enc_layers - 1; l >= 0; l--) {
        encoder_block_acts *a = &x->encoder[l];
        const encoder_block_w *w = &m->w.encoder[l];
        encoder_block_w *dw = &g->encoder[l];
        const float *h = l ? x->encoder[l - 1].ff.out : x->src_x;
        sublayer_ctx att = {&sh, Ns, p, dropout_site_seed(seed, 0, l, 1), x->scratch};
        sublayer_ctx ff = {&sh, Ns, p, dropout_site_seed(seed, 0, l, 2), x->scratch};
        memcpy(din, dh, Ns * C * sizeof *din);
        memset(dh, 0, Ns * C * sizeof *dh);
        sublayer_out_backward(&ff, &a->ff, dh, ds, din, &w->norm2, &dw->norm2);
        memset(din, 0, Ns * C * sizeof *din);
        ffn_backward(&lm, din, dw->ffn.W1, dw->ffn.b1, dw->ffn.W2, dw->ffn.b2, ds, a->h_pre,
                     a->h, c->pre_norm ? a->ff.u : a->att.out, w->ffn.W1, w->ffn.W2, (int)Ns, C,
                     F, c->act, x->scratch);
        sublayer_in_backward(&ff, &a->ff, dh, din, a->att.out, &w->norm2, &dw->norm2);
        memcpy(din, dh, Ns * C * sizeof *din);
        memset(dh, 0, Ns * C * sizeof *dh);
        sublayer_out_backward(&att, &a->att, dh, ds, din, &w->norm1, &dw->norm1);
        memset(din, 0, Ns * C * sizeof *din);
        const float *in = c->pre_norm ? a->att.u : h;
        model_mha_backward(&lm, din, din, &dw->attention, ds, &a->cache, a->L, in, in,
                           &w->attention, &mc, B, Ts, Ts, &src_mask, p,
                           dropout_site_seed(seed, 0, l, 3), x->scratch);
        sublayer_in_backward(&att, &a->att, dh, din, h, &w->norm1, &dw->norm1);
    }
    embed_backward(m, g->src_embedding, g->src_positions, dh, b->src, B, Ts, p,
                   dropout_site_seed(seed, 0, 0, 0));
}

/* ---- entry points ---------------------------------------------------------------------- */

static qkv_status check_batch(const qkv_batch *b, qkv_error *err)
{
    for (int i = 0; i < b->B; i++)
        if (b->src_valid[i] < 0 || b->src_valid[i] > b->src_len)
            return qkv_fail(err, QKV_ERR_ARG, "source %d: valid length %d outside [0, %d]", i,
                            b->src_valid[i], b->src_len);
    return QKV_OK;
}

qkv_status qkv_transformer_loss(qkv_transformer *m, const qkv_batch *b, int backward_pass,
                                float grad_scale, float label_smoothing, int train,
                                uint64_t dropout_seed, double *loss_sum, int *tokens,
                                qkv_error *err)
{
    qkv_status st = transformer_layout_acts(m, b->B, b->src_len, b->tgt_len, err);
    if (!st) st = check_batch(b, err);
    if (st) return st;
    if (backward_pass && !qkv_transformer_grads(m))
        return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for gradients");
    const float p = train ? m->cfg.dropout : 0.0f;
    st = forward(m, b, p, dropout_seed, err);
    if (st) return st;
    model_acts *x = &m->acts;
    const int Nt = b->B * b->tgt_len, V = m->cfg.tgt_vocab;
    double sum = 0.0;
    /* with backward, the loss pass also turns the logits into their gradient, and sums it
     * into the output bias's */
    int count = backward_pass
                    ? cross_entropy_fused(x->loss, x->lse, &sum, x->logits, m->g.out_b,
                                          b->tgt_out, Nt, V, QKV_PAD, label_smoothing,
                                          grad_scale, x->scratch, err)
                    : qkv_cross_entropy_forward(x->loss, x->lse, &sum, x->logits, b->tgt_out,
                                                Nt, V, QKV_PAD, label_smoothing, err);
    if (count < 0) return err ? err->code : QKV_ERR_ARG;
    if (!isfinite(sum))
        return qkv_fail(err, QKV_ERR_NUMERIC, "the loss is not finite (%g)", sum);
    if (loss_sum) *loss_sum = sum;
    if (tokens) *tokens = count;
    if (backward_pass) {
        precision_touch(&m->prec); /* an optimizer step will follow */
        backward(m, b, p, dropout_seed);
    }
    return QKV_OK;
}

/* Every attention keeps its weights P here, whatever the length: the attention maps
 * (src/inference/attention_maps.c) read them from the caches after this pass. */
qkv_status qkv_transformer_logits(qkv_transformer *m, const qkv_batch *b, float *logits,
                                  qkv_error *err)
{
    qkv_status st = transformer_layout(m, b->B, b->src_len, b->tgt_len, INT_MAX, err);
    if (!st) st = check_batch(b, err);
    if (!st) st = forward(m, b, 0.0f, 0, err);
    if (st) return st;
    memcpy(logits, m->acts.logits,
           (size_t)b->B * b->tgt_len * m->cfg.tgt_vocab * sizeof *logits);
    return QKV_OK;
}
