/* SPDX-License-Identifier: MIT */
/* The encoder-decoder Transformer (paper, figure 1; d2l 11.7) with teacher forcing:
 *   encoder:  X = dropout(E_src[src] sqrt(C) + P);  N x [self-attention, FFN]
 *   decoder:  Y = dropout(E_tgt[tgt_in] sqrt(C) + P);  N x [causal self-attention,
 *             encoder-decoder attention, FFN];  logits = Y W_out^T + b_out
 *   loss:     cross-entropy over the real (non-padding) target tokens
 * Both stacks are block.c's; this file holds the configuration, the parameter table and the
 * passes that join the two stacks and the output layer. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/model_calls.h"
#include "models/transformer_internal.h"

qkv_transformer_config qkv_transformer_default_config(void)
{
    qkv_transformer_config c = {0};
    c.d_model = 32, c.heads = 4, c.ffn = 64, c.enc_layers = 2, c.dec_layers = 2;
    c.max_len = 1000, c.dropout = 0.1f, c.bias = 0, c.pre_norm = 0, c.final_norm = 0;
    c.act = QKV_ACT_RELU, c.tie = QKV_TIE_NONE, c.learned_pos = 0, c.ln_eps = 1e-5f;
    c.pos_layout = QKV_POS_INTERLEAVED, c.scale_embedding = 1, c.decoder_start = QKV_BOS;
    c.suppress_pad = 0, c.forced_eos = 0;
    return c;
}

qkv_status qkv_transformer_config_check(const qkv_transformer_config *c, qkv_error *err)
{
    if (c->src_vocab < 4 || c->tgt_vocab < 4)
        return qkv_fail(err, QKV_ERR_ARG, "vocabulary sizes must be at least 4 (the reserved "
                        "tokens), got %d and %d", c->src_vocab, c->tgt_vocab);
    if (c->d_model <= 0 || c->heads <= 0 || c->d_model % c->heads)
        return qkv_fail(err, QKV_ERR_ARG, "d_model (%d) must be a positive multiple of heads "
                        "(%d)", c->d_model, c->heads);
    if (c->ffn <= 0 || c->enc_layers < 0 || c->dec_layers < 1 || c->max_len < 2)
        return qkv_fail(err, QKV_ERR_ARG, "need ffn > 0, enc_layers >= 0, dec_layers >= 1 and "
                        "max_len >= 2");
    if (!(c->dropout >= 0.0f && c->dropout < 1.0f))
        return qkv_fail(err, QKV_ERR_ARG, "dropout must be in [0, 1), got %g", (double)c->dropout);
    if (c->tie == QKV_TIE_ALL && c->src_vocab != c->tgt_vocab)
        return qkv_fail(err, QKV_ERR_ARG, "tying all embeddings needs one shared vocabulary "
                        "(source %d, target %d)", c->src_vocab, c->tgt_vocab);
    if (!(c->ln_eps > 0.0f && c->ln_eps < 1.0f))
        return qkv_fail(err, QKV_ERR_ARG, "ln_eps must be in (0, 1), got %g", (double)c->ln_eps);
    if (c->act != QKV_ACT_RELU && c->act != QKV_ACT_GELU && c->act != QKV_ACT_SILU)
        return qkv_fail(err, QKV_ERR_ARG, "unknown activation %d", (int)c->act);
    if (c->pos_layout != QKV_POS_INTERLEAVED && c->pos_layout != QKV_POS_HALVES &&
        c->pos_layout != QKV_POS_FAIRSEQ)
        return qkv_fail(err, QKV_ERR_ARG, "unknown positional layout %d", (int)c->pos_layout);
    if (c->decoder_start != QKV_BOS && c->decoder_start != QKV_PAD && c->decoder_start != QKV_EOS)
        return qkv_fail(err, QKV_ERR_ARG, "decoding starts from <bos> (%d), <pad> (%d) or <eos> "
                        "(%d), not id %d", QKV_BOS, QKV_PAD, QKV_EOS, c->decoder_start);
    qkv_status st;
    if ((st = limit_check("src_vocab", c->src_vocab, QKV_MAX_VOCAB, "QKV_MAX_VOCAB", err)) ||
        (st = limit_check("tgt_vocab", c->tgt_vocab, QKV_MAX_VOCAB, "QKV_MAX_VOCAB", err)) ||
        (st = limit_check("d_model", c->d_model, QKV_MAX_D_MODEL, "QKV_MAX_D_MODEL", err)) ||
        (st = limit_check("ffn", c->ffn, QKV_MAX_FFN, "QKV_MAX_FFN", err)) ||
        (st = limit_check("enc_layers", c->enc_layers, QKV_MAX_LAYERS, "QKV_MAX_LAYERS", err)) ||
        (st = limit_check("dec_layers", c->dec_layers, QKV_MAX_LAYERS, "QKV_MAX_LAYERS", err)) ||
        (st = limit_check("max_len", c->max_len, QKV_MAX_LEN, "QKV_MAX_LEN", err)))
        return st;
    return params_check(transformer_config_params(c), c->max_len, c->d_model, err);
}

double transformer_config_params(const qkv_transformer_config *c)
{
    const double C = c->d_model, F = c->ffn;
    double n = c->enc_layers * block_params(C, F, c->bias, 0) +
               c->dec_layers * block_params(C, F, c->bias, 1);
    if (c->final_norm) n += 2 * C * ((c->enc_layers > 0) + 1);
    n += (double)c->src_vocab * C;                                  /* source embedding */
    if (c->tie != QKV_TIE_ALL) n += (double)c->tgt_vocab * C;       /* target embedding */
    if (c->tie == QKV_TIE_NONE) n += (double)c->tgt_vocab * C;      /* output projection */
    n += c->tgt_vocab;                                              /* output bias */
    if (c->learned_pos) n += 2.0 * c->max_len * C;
    return n;
}

static stack_dims dims_of(const qkv_transformer_config *c, int decoder)
{
    stack_dims d = {decoder ? c->tgt_vocab : c->src_vocab, c->d_model, c->ffn, c->heads,
                    decoder ? c->dec_layers : c->enc_layers, c->pre_norm, c->bias, decoder, 0,
                    decoder, c->act, c->ln_eps,
                    c->scale_embedding ? sqrtf((float)c->d_model) : 1.0f};
    return d;
}

/* ---- the parameter table: its fixed order and names are those of saved models ------------ */

static void walk_stack(param_walker *w, const qkv_transformer_config *c, stack_w *s, int decoder)
{
    const int C = c->d_model, F = c->ffn;
    const char *name = decoder ? "decoder" : "encoder";
    char prefix[48];
    for (int l = 0; l < (decoder ? c->dec_layers : c->enc_layers); l++) {
        block_w *b = &s->blocks[l];
        /* an encoder block's sublayers are attention, norm1, ffn, norm2; a decoder block's
         * self_attention, norm1, cross_attention, norm2, ffn, norm3 */
        snprintf(prefix, sizeof prefix, "%s.%d.%s", name, l, decoder ? "self_attention" : "attention");
        b->self = param_take_mha(w, prefix, C, c->bias);
        snprintf(prefix, sizeof prefix, "%s.%d.norm1", name, l);
        b->self_norm = param_take_norm(w, prefix, C);
        if (decoder) {
            snprintf(prefix, sizeof prefix, "decoder.%d.cross_attention", l);
            b->cross = param_take_mha(w, prefix, C, c->bias);
            snprintf(prefix, sizeof prefix, "decoder.%d.norm2", l);
            b->cross_norm = param_take_norm(w, prefix, C);
        }
        snprintf(prefix, sizeof prefix, "%s.%d.ffn", name, l);
        b->ffn = param_take_ffn(w, prefix, C, F);
        snprintf(prefix, sizeof prefix, "%s.%d.norm%d", name, l, decoder ? 3 : 2);
        b->ffn_norm = param_take_norm(w, prefix, C);
    }
    snprintf(prefix, sizeof prefix, "%s.norm", name);
    const qkv_layernorm_weights none = {0};
    s->norm = c->final_norm && (decoder || c->enc_layers) ? param_take_norm(w, prefix, C) : none;
}

static void walk(param_walker *w, const void *cfg, void *view)
{
    const qkv_transformer_config *c = cfg;
    model_w *mw = view;
    const int C = c->d_model;
    mw->encoder.embedding = param_take(w, c->tie == QKV_TIE_ALL ? "embedding" : "src_embedding",
                                       c->src_vocab, C);
    mw->decoder.embedding = c->tie == QKV_TIE_ALL
                                ? mw->encoder.embedding
                                : param_take(w, "tgt_embedding", c->tgt_vocab, C);
    mw->encoder.positions = c->learned_pos ? param_take(w, "src_positions", c->max_len, C) : NULL;
    mw->decoder.positions = c->learned_pos ? param_take(w, "tgt_positions", c->max_len, C) : NULL;
    walk_stack(w, c, &mw->encoder, 0);
    walk_stack(w, c, &mw->decoder, 1);
    mw->out_W = c->tie != QKV_TIE_NONE ? mw->decoder.embedding
                                       : param_take(w, "output.W", c->tgt_vocab, C);
    mw->out_b = param_take(w, "output.b", c->tgt_vocab, 0);
    mw->out = weight_f32(mw->out_W);
    mw->encoder.lookup = weight_f32(mw->encoder.embedding);
    mw->decoder.lookup = weight_f32(mw->decoder.embedding);
}

/* ---- life cycle ------------------------------------------------------------------------ */

qkv_status transformer_create(qkv_transformer **out, const qkv_transformer_config *cfg,
                              uint64_t seed, int init, qkv_error *err)
{
    *out = NULL;
    qkv_status st = qkv_transformer_config_check(cfg, err);
    if (st) return st;
    qkv_transformer *m = calloc(1, sizeof *m);
    if (!m) return qkv_fail(err, QKV_ERR_NOMEM, "out of memory creating the model");
    m->cfg = *cfg;
    m->enc_dims = dims_of(cfg, 0), m->dec_dims = dims_of(cfg, 1);
    /* one block array per stack and purpose (+1: an encoder may have no layers) */
    block_w **arrays[] = {&m->w.encoder.blocks, &m->g.encoder.blocks, &m->w.decoder.blocks,
                          &m->g.decoder.blocks};
    for (int i = 0; i < 4; i++)
        *arrays[i] = calloc((size_t)(i < 2 ? cfg->enc_layers : cfg->dec_layers) + 1,
                            sizeof(block_w));
    m->acts.enc.blocks = calloc((size_t)cfg->enc_layers + 1, sizeof(block_acts));
    m->acts.dec.blocks = calloc((size_t)cfg->dec_layers, sizeof(block_acts));
    if (!m->w.encoder.blocks || !m->g.encoder.blocks || !m->w.decoder.blocks ||
        !m->g.decoder.blocks || !m->acts.enc.blocks || !m->acts.dec.blocks) {
        qkv_transformer_free(m);
        return qkv_fail(err, QKV_ERR_NOMEM, "out of memory creating the model");
    }
    if ((st = core_build(&m->core, walk, cfg, &m->w, cfg->max_len, cfg->d_model, err))) {
        qkv_transformer_free(m);
        return st;
    }
    if (cfg->pos_layout == QKV_POS_HALVES)
        qkv_sinusoidal_table_halves(m->core.pos_table, cfg->max_len, cfg->d_model);
    else if (cfg->pos_layout == QKV_POS_FAIRSEQ)
        qkv_sinusoidal_table_fairseq(m->core.pos_table, cfg->max_len, cfg->d_model);
    if (init) core_init_params(&m->core, seed, cfg->d_model, cfg->ffn, cfg->tie != QKV_TIE_NONE);
    else memset(m->core.params, 0, m->core.n_params * sizeof *m->core.params);
    *out = m;
    return QKV_OK;
}

qkv_status qkv_transformer_create(qkv_transformer **out, const qkv_transformer_config *cfg,
                                  uint64_t seed, qkv_error *err)
{
    return transformer_create(out, cfg, seed, 1, err);
}

void qkv_transformer_free(qkv_transformer *m)
{
    if (!m) return;
    free(m->w.encoder.blocks), free(m->g.encoder.blocks);
    free(m->w.decoder.blocks), free(m->g.decoder.blocks);
    free(m->acts.enc.blocks), free(m->acts.dec.blocks);
    core_free(&m->core);
    free(m);
}

/* Every linear layer's weight typed for the precision and device now set. */
static void retype(void *model)
{
    qkv_transformer *m = model;
    stack_retype(&m->w.encoder, &m->enc_dims, &m->core);
    stack_retype(&m->w.decoder, &m->dec_dims, &m->core);
    m->w.out = core_weight(&m->core, m->w.out_W);
}

MODEL_CORE_CALLS(qkv_transformer, transformer, walk, retype, 0)

/* ---- the activations --------------------------------------------------------------------- */

typedef struct {
    qkv_transformer *m;
    int B, Ts, Tt;
    attention_options attention;
} layout_request;

static void layout(void *request, arena *a)
{
    const layout_request *r = request;
    qkv_transformer *m = r->m;
    const backend be = core_backend(&m->core);
    const int C = m->cfg.d_model, F = m->cfg.ffn, V = m->cfg.tgt_vocab;
    const size_t Ns = (size_t)r->B * r->Ts, Nt = (size_t)r->B * r->Tt, Nmax = Ns > Nt ? Ns : Nt;
    model_acts *x = &m->acts;
    x->B = r->B, x->Ts = r->Ts, x->Tt = r->Tt;
    size_t enc = stack_layout(a, &be, &x->enc, &m->enc_dims, r->B, r->Ts, 0, &r->attention);
    size_t dec = stack_layout(a, &be, &x->dec, &m->dec_dims, r->B, r->Tt, r->Ts, &r->attention);
    x->d_enc_out = arena_take(a, Ns * C);
    x->src = arena_take_ints(a, Ns), x->src_valid = arena_take_ints(a, (size_t)r->B);
    x->tgt_in = arena_take_ints(a, Nt), x->tgt_out = arena_take_ints(a, Nt);
    head_layout(a, &be, &x->logits, &x->lse, &x->loss, &x->work, &x->scratch, Nt, Nmax, C, F, V,
                enc > dec ? enc : dec);
}

qkv_status transformer_layout(qkv_transformer *m, int B, int Ts, int Tt, int need_weights,
                              qkv_error *err)
{
    const qkv_transformer_config *c = &m->cfg;
    if (B <= 0 || Ts <= 0 || Tt <= 0)
        return qkv_fail(err, QKV_ERR_ARG, "empty batch (B %d, source length %d, target length "
                        "%d)", B, Ts, Tt);
    if (Ts > c->max_len || Tt > c->max_len)
        return qkv_fail(err, QKV_ERR_ARG, "sequence length %d exceeds the model's maximum "
                        "length %d", Ts > Tt ? Ts : Tt, c->max_len);
    layout_request r = {m, B, Ts, Tt, {need_weights, m->core.flash_min_keys, 0}};
    char what[64];
    snprintf(what, sizeof what, "batch %d x (%d, %d)", B, Ts, Tt);
    return core_layout(&m->core, layout, &r, what, err);
}

/* ---- forward and backward ------------------------------------------------------------------ */

static stack_pass encoder_pass(qkv_transformer *m, const qkv_mask *src_mask, int B, int Ts,
                               float p, uint64_t seed)
{
    stack_pass k = {&m->enc_dims, B, Ts, 0, src_mask, NULL, NULL, p, seed, m->acts.scratch,
                    m->pass.first_example, m->pass.grads_done, m->pass.grads_ctx};
    return k;
}

static stack_pass decoder_pass(qkv_transformer *m, const qkv_mask *causal,
                               const qkv_mask *src_mask, int B, int Ts, int Tt, float p,
                               uint64_t seed)
{
    stack_pass k = {&m->dec_dims, B, Tt, Ts, causal, src_mask, m->acts.enc.out, p, seed,
                    m->acts.scratch, m->pass.first_example, m->pass.grads_done,
                    m->pass.grads_ctx};
    return k;
}

qkv_status transformer_encode(qkv_transformer *m, const int *src, const int *src_valid, int B,
                              int Ts, float p, uint64_t seed, qkv_error *err)
{
    const backend be = core_backend(&m->core);
    model_acts *x = &m->acts;
    qkv_status st = stage_ids(&be, x->src, src, (size_t)B * Ts, m->cfg.src_vocab, 0, err);
    if (st) return st;
    if (be.ops->upload(x->src_valid, src_valid, (size_t)B * sizeof *src_valid))
        return transfer_failed(&be, err);
    const qkv_mask src_mask = {x->src_valid, 0, 0};
    const stack_pass k = encoder_pass(m, &src_mask, B, Ts, p, seed);
    return stack_forward(&be, &k, &x->enc, &m->w.encoder, m->core.pos_table, x->src, err);
}

static qkv_status forward(qkv_transformer *m, const qkv_batch *b, float p, uint64_t seed,
                          qkv_error *err)
{
    const backend be = core_backend(&m->core);
    const qkv_mask src_mask = {m->acts.src_valid, 0, 0}, causal = {NULL, 0, 1};
    const int C = m->cfg.d_model, Nt = b->B * b->tgt_len;
    qkv_status st = transformer_encode(m, b->src, b->src_valid, b->B, b->src_len, p, seed, err);
    if (!st) st = stage_ids(&be, m->acts.tgt_in, b->tgt_in, (size_t)Nt, m->cfg.tgt_vocab, 0, err);
    if (st) return st;
    const stack_pass k = decoder_pass(m, &causal, &src_mask, b->B, b->src_len, b->tgt_len, p,
                                      seed);
    st = stack_forward(&be, &k, &m->acts.dec, &m->w.decoder, m->core.pos_table, m->acts.tgt_in,
                       err);
    if (st) return st;
    head_forward(&be, m->acts.logits, m->acts.dec.out, &m->w.out, m->w.out_b, Nt, C,
                 m->cfg.tgt_vocab);
    return QKV_OK;
}

/* acts.logits holds dL/dlogits, and the output bias its gradient; acts has the forward's
 * shape (core_loss_end) */
static void backward(void *model, float p, uint64_t seed)
{
    qkv_transformer *m = model;
    const backend be = core_backend(&m->core);
    const qkv_mask src_mask = {m->acts.src_valid, 0, 0}, causal = {NULL, 0, 1};
    model_acts *x = &m->acts;
    const int B = x->B, Ts = x->Ts, Tt = x->Tt, C = m->cfg.d_model;
    float *dout = x->work.din; /* d(decoder output) */
    be.ops->zero(dout, (size_t)B * Tt * C);
    op_linear_backward(&be, dout, m->g.out_W, NULL, x->logits, x->dec.out, m->w.out_W, B * Tt, C,
                       m->cfg.tgt_vocab);
    /* the output layer's (untied) gradients are final */
    if (m->pass.grads_done) m->pass.grads_done(m->pass.grads_ctx);
    be.ops->zero(x->d_enc_out, (size_t)B * Ts * C);
    const stack_pass dec = decoder_pass(m, &causal, &src_mask, B, Ts, Tt, p, seed);
    stack_backward(&be, &dec, &x->dec, &m->w.decoder, &m->g.decoder, x->tgt_in, dout,
                   x->d_enc_out, &x->work);
    const stack_pass enc = encoder_pass(m, &src_mask, B, Ts, p, seed);
    stack_backward(&be, &enc, &x->enc, &m->w.encoder, &m->g.encoder, x->src, x->d_enc_out, NULL,
                   &x->work);
}

/* Events in backward's order: the output layer (0), the decoder's blocks from the top (its
 * final norm with its top block), its embedding, the encoder's alike. */
int qkv_transformer_grad_events(const qkv_transformer *m, int *event)
{
    const int Ld = m->cfg.dec_layers, Le = m->cfg.enc_layers;
    const int dec_embed = 1 + Ld, enc_embed = 2 + Ld + Le;
    for (int i = 0; i < m->core.n_tensors; i++) {
        const char *name = m->core.names[i];
        int l;
        if (!strncmp(name, "output.", 7)) event[i] = 0;
        else if (sscanf(name, "decoder.%d.", &l) == 1) event[i] = 1 + (Ld - 1 - l);
        else if (!strncmp(name, "decoder.norm", 12)) event[i] = 1;
        else if (!strcmp(name, "tgt_embedding") || !strcmp(name, "tgt_positions"))
            event[i] = dec_embed;
        else if (sscanf(name, "encoder.%d.", &l) == 1) event[i] = dec_embed + 1 + (Le - 1 - l);
        else if (!strncmp(name, "encoder.norm", 12)) event[i] = dec_embed + 1;
        else event[i] = enc_embed; /* src_embedding, src_positions, embedding (tied: all) */
    }
    return enc_embed + 1;
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

qkv_status qkv_transformer_loss(qkv_transformer *m, const qkv_batch *b,
                                const qkv_loss_options *o, double *loss_sum, int *tokens,
                                qkv_error *err)
{
    const qkv_loss_options evaluation = {0};
    if (!o) o = &evaluation;
    qkv_status st = transformer_layout(m, b->B, b->src_len, b->tgt_len, 0, err);
    if (!st) st = check_batch(b, err);
    if (!st) st = core_loss_begin(&m->core, &m->pass, o, walk, &m->cfg, &m->g, err);
    if (st) return st;
    const float p = o->train ? m->cfg.dropout : 0.0f;
    st = forward(m, b, p, o->dropout_seed, err);
    m->pass.first_example = 0; /* backward sets it again: nothing else is a shard */
    const backend be = core_backend(&m->core);
    model_acts *x = &m->acts;
    const int Nt = b->B * b->tgt_len;
    if (!st) st = stage_ids(&be, x->tgt_out, b->tgt_out, (size_t)Nt, m->cfg.tgt_vocab, 1, err);
    if (st) return st;
    const head_loss_args h = {x->loss, x->lse, x->logits, m->g.out_b, x->tgt_out, Nt,
                              m->cfg.tgt_vocab, o->label_smoothing, o->backward, o->grad_scale,
                              x->scratch};
    return core_loss_end(&m->core, &m->pass, o, &h, backward, m, p, loss_sum, tokens, err);
}

/* Every attention keeps its weights P here, whatever the length: the attention maps
 * (transformer_attention_maps) read them from the activations after this pass. */
qkv_status qkv_transformer_logits(qkv_transformer *m, const qkv_batch *b, float *logits,
                                  qkv_error *err)
{
    qkv_status st = transformer_layout(m, b->B, b->src_len, b->tgt_len, 1, err);
    if (!st) st = check_batch(b, err);
    if (!st) st = forward(m, b, 0.0f, 0, err);
    if (st) return st;
    const backend be = core_backend(&m->core);
    if (be.ops->download(logits, m->acts.logits,
                         (size_t)b->B * b->tgt_len * m->cfg.tgt_vocab * sizeof *logits))
        return transfer_failed(&be, err);
    return core_finish(&m->core, err);
}
