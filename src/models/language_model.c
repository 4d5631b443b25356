/* SPDX-License-Identifier: MIT */
/* The decoder-only language model (GPT):
 *   X = dropout(E[ids] sqrt(C) + P)
 *   N x [causal self-attention, FFN]  (block.c's stack without cross-attention)
 *   Y = LayerNorm(X) when final_norm;  logits = Y W_out^T + b_out
 *   loss = cross-entropy of every position against the next token
 * The self-attention is softmax attention or causal linear attention between the same four
 * projections, as the backend chooses for the model's setting (backend/backend.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/language_model_internal.h"
#include "models/model_calls.h"

qkv_lm_config qkv_lm_default_config(void)
{
    qkv_lm_config c = {0};
    c.d_model = 128, c.heads = 4, c.ffn = 512, c.layers = 4, c.max_len = 128;
    c.dropout = 0.1f, c.bias = 1, c.pre_norm = 0, c.final_norm = 0, c.act = QKV_ACT_RELU;
    c.tie = 0, c.learned_pos = 0, c.attention = QKV_ATTENTION_SOFTMAX, c.ln_eps = 1e-5f;
    return c;
}

qkv_status qkv_lm_config_check(const qkv_lm_config *c, qkv_error *err)
{
    if (c->vocab < 4)
        return qkv_fail(err, QKV_ERR_ARG, "the vocabulary must hold at least the 4 reserved "
                        "tokens, got %d", c->vocab);
    if (c->d_model <= 0 || c->heads <= 0 || c->d_model % c->heads)
        return qkv_fail(err, QKV_ERR_ARG, "d_model (%d) must be a positive multiple of heads "
                        "(%d)", c->d_model, c->heads);
    if (c->ffn <= 0 || c->layers < 1 || c->max_len < 2)
        return qkv_fail(err, QKV_ERR_ARG, "need ffn > 0, layers >= 1 and max_len >= 2 (got %d, "
                        "%d, %d)", c->ffn, c->layers, c->max_len);
    if (!(c->dropout >= 0.0f && c->dropout < 1.0f))
        return qkv_fail(err, QKV_ERR_ARG, "dropout must be in [0, 1), got %g", (double)c->dropout);
    if (c->act != QKV_ACT_RELU && c->act != QKV_ACT_GELU && c->act != QKV_ACT_SILU)
        return qkv_fail(err, QKV_ERR_ARG, "unknown activation %d", (int)c->act);
    if (c->attention != QKV_ATTENTION_SOFTMAX && c->attention != QKV_ATTENTION_LINEAR)
        return qkv_fail(err, QKV_ERR_ARG, "unknown attention %d (softmax 0, linear 1)",
                        (int)c->attention);
    if (!(c->ln_eps > 0.0f))
        return qkv_fail(err, QKV_ERR_ARG, "ln_eps must be > 0, got %g", (double)c->ln_eps);
    qkv_status st;
    if ((st = limit_check("vocab", c->vocab, QKV_MAX_VOCAB, "QKV_MAX_VOCAB", err)) ||
        (st = limit_check("d_model", c->d_model, QKV_MAX_D_MODEL, "QKV_MAX_D_MODEL", err)) ||
        (st = limit_check("ffn", c->ffn, QKV_MAX_FFN, "QKV_MAX_FFN", err)) ||
        (st = limit_check("layers", c->layers, QKV_MAX_LAYERS, "QKV_MAX_LAYERS", err)) ||
        (st = limit_check("max_len", c->max_len, QKV_MAX_LEN, "QKV_MAX_LEN", err)))
        return st;
    /* a (max_len, max_len) score matrix per head and sequence */
    if ((double)c->max_len * c->max_len > 1e9)
        return qkv_fail(err, QKV_ERR_ARG, "max_len = %d: its attention scores (max_len^2) would "
                        "pass 10^9 per head", c->max_len);
    return params_check(lm_config_params(c), c->max_len, c->d_model, err);
}

double lm_config_params(const qkv_lm_config *c)
{
    const double C = c->d_model, V = c->vocab;
    double n = c->layers * block_params(C, c->ffn, c->bias, 0) + (c->final_norm ? 2 * C : 0);
    n += V * C * (c->tie ? 1 : 2) + V; /* embedding, output projection unless tied, bias */
    if (c->learned_pos) n += (double)c->max_len * C;
    return n;
}

/* ---- the parameter table --------------------------------------------------------------- */

/* An LM block is named like a decoder block of the encoder-decoder but holds an encoder
 * block's tensors (no cross-attention). The order is that of saved models. */
static void walk(param_walker *w, const void *cfg, void *view)
{
    const qkv_lm_config *c = cfg;
    lm_w *mw = view;
    const int C = c->d_model, F = c->ffn;
    char prefix[48];
    stack_w *s = &mw->stack;
    s->embedding = param_take(w, "embedding", c->vocab, C);
    s->lookup = weight_f32(s->embedding);
    s->positions = c->learned_pos ? param_take(w, "positions", c->max_len, C) : NULL;
    for (int l = 0; l < c->layers; l++) {
        block_w *b = &s->blocks[l];
        snprintf(prefix, sizeof prefix, "decoder.%d.attention", l);
        b->self = param_take_mha(w, prefix, C, c->bias);
        snprintf(prefix, sizeof prefix, "decoder.%d.norm1", l);
        b->self_norm = param_take_norm(w, prefix, C);
        snprintf(prefix, sizeof prefix, "decoder.%d.ffn", l);
        b->ffn = param_take_ffn(w, prefix, C, F);
        snprintf(prefix, sizeof prefix, "decoder.%d.norm2", l);
        b->ffn_norm = param_take_norm(w, prefix, C);
    }
    const qkv_layernorm_weights none = {0};
    s->norm = c->final_norm ? param_take_norm(w, "decoder.norm", C) : none;
    mw->out_W = c->tie ? s->embedding : param_take(w, "output.W", c->vocab, C);
    mw->out_b = param_take(w, "output.b", c->vocab, 0);
    mw->out = weight_f32(mw->out_W);
}

qkv_status lm_create(qkv_lm **out, const qkv_lm_config *cfg, uint64_t seed, int init,
                     qkv_error *err)
{
    *out = NULL;
    qkv_status st = qkv_lm_config_check(cfg, err);
    if (st) return st;
    qkv_lm *m = calloc(1, sizeof *m);
    if (!m) return qkv_fail(err, QKV_ERR_NOMEM, "out of memory creating the model");
    m->cfg = *cfg;
    m->dims = (stack_dims){cfg->vocab, cfg->d_model, cfg->ffn, cfg->heads, cfg->layers,
                           cfg->pre_norm, cfg->bias, 0,
                           cfg->attention == QKV_ATTENTION_LINEAR, 0, cfg->act, cfg->ln_eps,
                           sqrtf((float)cfg->d_model)};
    m->w.stack.blocks = calloc((size_t)cfg->layers, sizeof(block_w));
    m->g.stack.blocks = calloc((size_t)cfg->layers, sizeof(block_w));
    m->acts.s.blocks = calloc((size_t)cfg->layers, sizeof(block_acts));
    if (!m->w.stack.blocks || !m->g.stack.blocks || !m->acts.s.blocks) {
        qkv_lm_free(m);
        return qkv_fail(err, QKV_ERR_NOMEM, "out of memory creating the model");
    }
    if ((st = core_build(&m->core, walk, cfg, &m->w, cfg->max_len, cfg->d_model, err))) {
        qkv_lm_free(m);
        return st;
    }
    if (init) core_init_params(&m->core, seed, cfg->d_model, cfg->ffn, cfg->tie);
    else memset(m->core.params, 0, m->core.n_params * sizeof *m->core.params);
    *out = m;
    return QKV_OK;
}

qkv_status qkv_lm_create(qkv_lm **out, const qkv_lm_config *cfg, uint64_t seed, qkv_error *err)
{
    return lm_create(out, cfg, seed, 1, err);
}

void qkv_lm_free(qkv_lm *m)
{
    if (!m) return;
    free(m->w.stack.blocks), free(m->g.stack.blocks), free(m->acts.s.blocks);
    core_free(&m->core);
    free(m);
}

/* Every linear layer's weight typed for the precision and device now set. */
static void retype(void *model)
{
    qkv_lm *m = model;
    stack_retype(&m->w.stack, &m->dims, &m->core);
    m->w.out = core_weight(&m->core, m->w.out_W);
}

MODEL_CORE_CALLS(qkv_lm, lm, walk, retype, m->dims.linear_attention)

/* ---- the activations --------------------------------------------------------------------- */

typedef struct {
    qkv_lm *m;
    int B, T;
} layout_request;

static void layout(void *request, arena *a)
{
    const layout_request *r = request;
    qkv_lm *m = r->m;
    const backend be = core_backend(&m->core);
    const int C = m->cfg.d_model, F = m->cfg.ffn, V = m->cfg.vocab;
    const size_t N = (size_t)r->B * r->T;
    lm_acts *x = &m->acts;
    x->B = r->B, x->T = r->T;
    const attention_options o = {0, m->core.flash_min_keys, 0};
    const size_t need = stack_layout(a, &be, &x->s, &m->dims, r->B, r->T, 0, &o);
    x->ids = arena_take_ints(a, N), x->targets = arena_take_ints(a, N);
    head_layout(a, &be, &x->logits, &x->lse, &x->loss, &x->work, &x->scratch, N, N, C, F, V,
                need);
}

static qkv_status layout_acts(qkv_lm *m, int B, int T, qkv_error *err)
{
    if (B <= 0 || T <= 0)
        return qkv_fail(err, QKV_ERR_ARG, "empty batch (B %d, T %d)", B, T);
    if (T > m->cfg.max_len)
        return qkv_fail(err, QKV_ERR_ARG, "sequence length %d exceeds the model's context "
                        "(max_len %d)", T, m->cfg.max_len);
    layout_request r = {m, B, T};
    char what[64];
    snprintf(what, sizeof what, "a batch of %d x %d", B, T);
    return core_layout(&m->core, layout, &r, what, err);
}

/* ---- forward and backward ------------------------------------------------------------------ */

static stack_pass pass_of(qkv_lm *m, const qkv_mask *causal, int B, int T, float p,
                          uint64_t seed)
{
    stack_pass k = {&m->dims, B, T, 0, causal, NULL, NULL, p, seed, m->acts.scratch,
                    m->pass.first_example, m->pass.grads_done, m->pass.grads_ctx};
    return k;
}

qkv_status lm_forward(qkv_lm *m, const int *ids, int B, int T, float p, uint64_t seed,
                      qkv_error *err)
{
    qkv_status st = layout_acts(m, B, T, err);
    if (st) return st;
    const backend be = core_backend(&m->core);
    const qkv_mask causal = {NULL, 0, 1};
    const stack_pass k = pass_of(m, &causal, B, T, p, seed);
    if ((st = stage_ids(&be, m->acts.ids, ids, (size_t)B * T, m->cfg.vocab, 0, err)) ||
        (st = stack_forward(&be, &k, &m->acts.s, &m->w.stack, m->core.pos_table, m->acts.ids,
                            err)))
        return st;
    head_forward(&be, m->acts.logits, m->acts.s.out, &m->w.out, m->w.out_b, B * T,
                 m->cfg.d_model, m->cfg.vocab);
    return QKV_OK;
}

/* acts.logits holds dL/dlogits, and the output bias its gradient; acts has the forward's
 * shape (core_loss_end) */
static void backward(void *model, float p, uint64_t seed)
{
    qkv_lm *m = model;
    const backend be = core_backend(&m->core);
    const qkv_mask causal = {NULL, 0, 1};
    lm_acts *x = &m->acts;
    const int B = x->B, T = x->T, N = B * T, C = m->cfg.d_model;
    float *dout = x->work.din; /* d(the stack's output) */
    be.ops->zero(dout, (size_t)N * C);
    op_linear_backward(&be, dout, m->g.out_W, NULL, x->logits, x->s.out, m->w.out_W, N, C,
                       m->cfg.vocab);
    /* the output layer's (untied) gradients are final */
    if (m->pass.grads_done) m->pass.grads_done(m->pass.grads_ctx);
    const stack_pass k = pass_of(m, &causal, B, T, p, seed);
    stack_backward(&be, &k, &x->s, &m->w.stack, &m->g.stack, x->ids, dout, NULL, &x->work);
}

/* Events in backward's order: the output layer (0), the blocks from the top (the final norm
 * with the top block), the embedding (tied: with it the output layer). */
int qkv_lm_grad_events(const qkv_lm *m, int *event)
{
    const int L = m->cfg.layers;
    for (int i = 0; i < m->core.n_tensors; i++) {
        const char *name = m->core.names[i];
        int l;
        if (!strncmp(name, "output.", 7)) event[i] = 0;
        else if (sscanf(name, "decoder.%d.", &l) == 1) event[i] = 1 + (L - 1 - l);
        else if (!strncmp(name, "decoder.norm", 12)) event[i] = 1;
        else event[i] = 1 + L; /* embedding, positions */
    }
    return 2 + L;
}

/* ---- entry points ---------------------------------------------------------------------- */

qkv_status qkv_lm_loss(qkv_lm *m, const int *ids, const int *targets, int B, int T,
                       const qkv_loss_options *o, double *loss_sum, int *tokens, qkv_error *err)
{
    const qkv_loss_options evaluation = {0};
    if (!o) o = &evaluation;
    qkv_status st = core_loss_begin(&m->core, &m->pass, o, walk, &m->cfg, &m->g, err);
    if (st) return st;
    const float p = o->train ? m->cfg.dropout : 0.0f;
    st = lm_forward(m, ids, B, T, p, o->dropout_seed, err);
    m->pass.first_example = 0; /* backward sets it again: nothing else is a shard */
    const backend be = core_backend(&m->core);
    lm_acts *x = &m->acts;
    if (!st) st = stage_ids(&be, x->targets, targets, (size_t)B * T, m->cfg.vocab, 1, err);
    if (st) return st;
    const head_loss_args h = {x->loss, x->lse, x->logits, m->g.out_b, x->targets, B * T,
                              m->cfg.vocab, o->label_smoothing, o->backward, o->grad_scale,
                              x->scratch};
    return core_loss_end(&m->core, &m->pass, o, &h, backward, m, p, loss_sum, tokens, err);
}

qkv_status qkv_lm_logits(qkv_lm *m, const int *ids, int B, int T, float *logits,
                         qkv_error *err)
{
    qkv_status st = lm_forward(m, ids, B, T, 0.0f, 0, err);
    if (st) return st;
    const backend be = core_backend(&m->core);
    if (be.ops->download(logits, m->acts.logits, (size_t)B * T * m->cfg.vocab * sizeof *logits))
        return transfer_failed(&be, err);
    return core_finish(&m->core, err);
}
