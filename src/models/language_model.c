/* The decoder-only language model (GPT): the configuration, the parameter table, the
 * activation arena, and the forward and backward passes of the next-token loss.
 *   X = dropout(E[ids] sqrt(C) + P)
 *   N x [causal self-attention, FFN], each a residual sublayer: post-norm LayerNorm(x +
 *        dropout(f(x))) or pre-norm x + dropout(f(LayerNorm(x))), as encoder_decoder.c
 *   Y = LayerNorm(X) when final_norm;  logits = Y W_out^T + b_out
 *   loss = cross-entropy of every position against the next token
 * The self-attention is softmax attention (the materialised kernel, or from FLASH_MIN_KEYS
 * keys on the flash kernel: model_attention.h) or causal linear attention
 * (qkv_linear_attention_*) between the same four projections. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/fused.h"
#include "models/language_model_internal.h"
#include "models/model_attention.h"
#include "models/param_table.h"
#include "models/sublayer.h"

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
    if (c->act != QKV_ACT_RELU && c->act != QKV_ACT_GELU)
        return qkv_fail(err, QKV_ERR_ARG, "unknown activation %d", (int)c->act);
    if (c->attention != QKV_ATTENTION_SOFTMAX && c->attention != QKV_ATTENTION_LINEAR)
        return qkv_fail(err, QKV_ERR_ARG, "unknown attention %d (softmax 0, linear 1)",
                        (int)c->attention);
    if (!(c->ln_eps > 0.0f))
        return qkv_fail(err, QKV_ERR_ARG, "ln_eps must be > 0, got %g", (double)c->ln_eps);
    if ((double)c->d_model * (c->d_model + c->ffn) * c->layers > 4e10 ||
        (double)c->max_len * c->max_len > 1e9 || (double)c->vocab * c->d_model > 4e10)
        return qkv_fail(err, QKV_ERR_ARG, "model too large");
    return QKV_OK;
}

/* ---- the parameter table --------------------------------------------------------------- */

/* The table (param_table.h): an LM block is named like a decoder block of the
 * encoder-decoder but holds an encoder block's tensors (no cross-attention). */
static void walk(param_walker *w, const qkv_lm_config *c, lm_w *mw)
{
    const int C = c->d_model, F = c->ffn;
    char prefix[48];
    mw->embedding = param_take(w, "embedding", c->vocab, C);
    mw->positions = c->learned_pos ? param_take(w, "positions", c->max_len, C) : NULL;
    for (int l = 0; l < c->layers; l++) {
        encoder_block_w *b = &mw->blocks[l];
        snprintf(prefix, sizeof prefix, "decoder.%d.attention", l);
        b->attention = param_take_mha(w, prefix, C, c->bias);
        snprintf(prefix, sizeof prefix, "decoder.%d.norm1", l);
        b->norm1 = param_take_norm(w, prefix, C);
        snprintf(prefix, sizeof prefix, "decoder.%d.ffn", l);
        b->ffn = param_take_ffn(w, prefix, C, F);
        snprintf(prefix, sizeof prefix, "decoder.%d.norm2", l);
        b->norm2 = param_take_norm(w, prefix, C);
    }
    mw->norm = c->final_norm ? param_take_norm(w, "decoder.norm", C) : (norm_w){0};
    mw->out_W = c->tie ? mw->embedding : param_take(w, "output.W", c->vocab, C);
    mw->out_b = param_take(w, "output.b", c->vocab, 0);
}

/* The encoder-decoder's initialisation (transformer.c): Xavier-uniform matrices, N(0, 1)
 * embedding and positions (N(0, 1/C) for an embedding that is also the output projection,
 * so that logits start O(1)), biases U(-1/sqrt(fan_in), 1/sqrt(fan_in)), unit gains. */
static void init_params(qkv_lm *m, uint64_t seed)
{
    const qkv_lm_config *c = &m->cfg;
    for (int i = 0; i < m->n_tensors; i++) {
        const qkv_param_info *t = &m->tensors[i];
        float *p = m->params + t->offset;
        uint64_t s = stream_of(seed, STREAM_INIT, (uint64_t)i);
        const char *leaf = strrchr(t->name, '.');
        leaf = leaf ? leaf + 1 : t->name;
        if (!strcmp(t->name, "embedding") || !strcmp(t->name, "positions")) {
            float std = c->tie && !strcmp(t->name, "embedding") ? 1.0f / sqrtf((float)c->d_model)
                                                                 : 1.0f;
            qkv_fill_normal(p, t->numel, 0.0f, std, s);
        } else if (!strcmp(leaf, "gamma")) {
            for (size_t k = 0; k < t->numel; k++) p[k] = 1.0f;
        } else if (!strcmp(leaf, "beta")) {
            memset(p, 0, t->numel * sizeof *p);
        } else if (t->ndim == 2) {
            qkv_init_xavier_uniform(p, t->shape[0], t->shape[1], s);
        } else {
            float bound = 1.0f / sqrtf((float)(!strcmp(leaf, "b2") ? c->ffn : c->d_model));
            qkv_fill_uniform(p, t->numel, -bound, bound, s);
        }
    }
}

qkv_status qkv_lm_create(qkv_lm **out, const qkv_lm_config *cfg, uint64_t seed, qkv_error *err)
{
    *out = NULL;
    qkv_status st = qkv_lm_config_check(cfg, err);
    if (st) return st;
    qkv_lm *m = calloc(1, sizeof *m);
    if (!m) return qkv_fail(err, QKV_ERR_NOMEM, "out of memory creating the model");
    m->cfg = *cfg;
    m->w.blocks = calloc((size_t)cfg->layers, sizeof *m->w.blocks);
    m->g.blocks = calloc((size_t)cfg->layers, sizeof *m->g.blocks);
    param_walker counter = {NULL, 0, NULL, NULL, 0};
    lm_w scratch_view = {.blocks = m->w.blocks};
    if (m->w.blocks) walk(&counter, cfg, &scratch_view);
    m->n_params = counter.offset, m->n_tensors = counter.count;
    m->tensors = calloc((size_t)counter.count + 1, sizeof *m->tensors);
    m->names = calloc((size_t)counter.count + 1, sizeof *m->names);
    m->params = malloc(m->n_params * sizeof *m->params);
    m->pos_table = malloc((size_t)cfg->max_len * cfg->d_model * sizeof *m->pos_table);
    if (!m->w.blocks || !m->g.blocks || !m->tensors || !m->names || !m->params || !m->pos_table) {
        qkv_lm_free(m);
        return qkv_fail(err, QKV_ERR_NOMEM, "out of memory allocating %zu parameters",
                        counter.offset);
    }
    param_walker recorder = {m->params, 0, m->tensors, m->names, 0};
    walk(&recorder, cfg, &m->w);
    qkv_sinusoidal_table(m->pos_table, cfg->max_len, cfg->d_model);
    init_params(m, seed);
    m->flash_min_keys = FLASH_MIN_KEYS;
    *out = m;
    return QKV_OK;
}

void qkv_lm_free(qkv_lm *m)
{
    if (!m) return;
    free(m->w.blocks), free(m->g.blocks), free(m->tensors), free(m->names);
    free(m->params), free(m->grads), free(m->pos_table), free(m->acts.blocks), free(m->arena);
    precision_free(&m->prec);
    free(m);
}

const qkv_lm_config *qkv_lm_get_config(const qkv_lm *m) { return &m->cfg; }
int qkv_lm_num_tensors(const qkv_lm *m) { return m->n_tensors; }
qkv_param_info qkv_lm_tensor(const qkv_lm *m, int i) { return m->tensors[i]; }
size_t qkv_lm_num_params(const qkv_lm *m) { return m->n_params; }
/* The caller may write through this pointer: generation will not trust the bf16 copy. */
float *qkv_lm_params(qkv_lm *m)
{
    precision_touch(&m->prec);
    return m->params;
}

qkv_status qkv_lm_set_precision(qkv_lm *m, qkv_precision p, qkv_error *err)
{
    return precision_set(&m->prec, p, m->params, m->n_params, err);
}

qkv_precision qkv_lm_get_precision(const qkv_lm *m) { return m->prec.precision; }

float *qkv_lm_grads(qkv_lm *m)
{
    if (!m->grads) {
        m->grads = calloc(m->n_params, sizeof *m->grads);
        if (!m->grads) return NULL;
        param_walker w = {m->grads, 0, NULL, NULL, 0};
        walk(&w, &m->cfg, &m->g);
    }
    return m->grads;
}

/* ---- the activation arena -------------------------------------------------------------- */

typedef struct {
    float *base;
    size_t used;
} arena;

static float *grab(arena *a, size_t n)
{
    float *p = a->base ? a->base + a->used : NULL;
    a->used += (n + 15) & ~(size_t)15; /* 64-byte aligned slices */
    return p;
}

static void layout_sublayer(arena *a, sublayer_acts *s, size_t N, int C, int pre_norm)
{
    memset(s, 0, sizeof *s);
    if (pre_norm) s->u = grab(a, N * C), s->u_mean = grab(a, N), s->u_rstd = grab(a, N);
    s->s = grab(a, N * C);
    if (!pre_norm) s->z = grab(a, N * C), s->mean = grab(a, N), s->rstd = grab(a, N);
    s->out = grab(a, N * C);
}

static qkv_mha_config mha_config(const qkv_lm_config *c)
{
    return (qkv_mha_config){c->d_model, c->d_model, c->heads, c->d_model / c->heads, c->bias};
}

/* Floats of scratch the attention of one block needs, forward and backward. */
static size_t attention_scratch(const qkv_lm_config *c, int B, int T, int flash)
{
    const qkv_mha_config mc = mha_config(c);
    if (c->attention == QKV_ATTENTION_SOFTMAX)
        return model_mha_scratch_floats(&mc, B, T, T, flash);
    return 4 * (size_t)B * T * c->d_model +
           qkv_linear_attention_scratch_floats(B, c->heads, T, T, mc.head_dim, mc.head_dim, 1);
}

static void layout(qkv_lm *m, arena *a, int B, int T)
{
    const qkv_lm_config *c = &m->cfg;
    const int C = c->d_model, F = c->ffn, V = c->vocab;
    const size_t N = (size_t)B * T;
    const qkv_mha_config mc = mha_config(c);
    const int flash = T >= m->flash_min_keys; /* P (B, H, T, T) only for short contexts */
    lm_acts *x = &m->acts;
    x->B = B, x->T = T;
    x->x = grab(a, N * C);
    for (int l = 0; l < c->layers; l++) {
        encoder_block_acts *e = &x->blocks[l];
        layout_sublayer(a, &e->att, N, C, c->pre_norm);
        e->L = NULL;
        if (c->attention == QKV_ATTENTION_SOFTMAX) {
            float *base = grab(a, model_mha_cache_floats(&mc, B, T, T, flash));
            e->cache = base ? model_mha_cache_view(base, &e->L, &mc, B, T, T, flash)
                            : (qkv_mha_cache){0};
        } else { /* the backward recomputes linear attention's sums from q, k, v */
            e->cache.q = grab(a, N * C), e->cache.k = grab(a, N * C);
            e->cache.v = grab(a, N * C), e->cache.ctx = grab(a, N * C), e->cache.P = NULL;
        }
        layout_sublayer(a, &e->ff, N, C, c->pre_norm);
        e->h_pre = grab(a, N * F), e->h = grab(a, N * F);
    }
    x->mean = grab(a, N), x->rstd = grab(a, N), x->out = grab(a, N * C);
    x->logits = grab(a, N * V), x->lse = grab(a, N), x->loss = grab(a, N);
    x->d_a = grab(a, N * C), x->d_b = grab(a, N * C), x->d_c = grab(a, N * C);
    size_t scratch = attention_scratch(c, B, T, flash);
    if (N * F > scratch) scratch = N * F;
    if (N * C > scratch) scratch = N * C;
    if (cross_entropy_fused_scratch_floats((int)N, V) > scratch)
        scratch = cross_entropy_fused_scratch_floats((int)N, V);
    x->scratch = grab(a, scratch);
}

static qkv_status layout_acts(qkv_lm *m, int B, int T, qkv_error *err)
{
    if (B <= 0 || T <= 0)
        return qkv_fail(err, QKV_ERR_ARG, "empty batch (B %d, T %d)", B, T);
    if (T > m->cfg.max_len)
        return qkv_fail(err, QKV_ERR_ARG, "sequence length %d exceeds the model's context "
                        "(max_len %d)", T, m->cfg.max_len);
    if (!m->acts.blocks && !(m->acts.blocks = calloc((size_t)m->cfg.layers, sizeof *m->acts.blocks)))
        return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for activations");
    arena counter = {NULL, 0};
    layout(m, &counter, B, T);
    if (counter.used > m->arena_cap) {
        free(m->arena);
        m->arena = NULL, m->arena_cap = 0;
        if (posix_memalign((void **)&m->arena, 64, counter.used * sizeof(float)))
            return qkv_fail(err, QKV_ERR_NOMEM, "out of memory: activations for a batch of %d x "
                            "%d need %zu MiB", B, T, counter.used * 4 >> 20);
        m->arena_cap = counter.used;
    }
    arena real = {m->arena, 0};
    layout(m, &real, B, T);
    return precision_prepare(&m->prec, m->params, m->n_params, 0, err);
}

/* ---- causal self-attention: softmax or linear ------------------------------------------ */

/* u (B, T, C) attends to itself causally -> y (B, T, C); c keeps q, k, v, ctx (and P, or
 * L with the flash kernel). */
static void attention_forward(const qkv_lm_config *cfg, const linear_mode *lm, float *y,
                              qkv_mha_cache *c, float *L, const float *u,
                              const qkv_mha_weights *w, int B, int T, float p, uint64_t seed,
                              float *scratch)
{
    const qkv_mha_config mc = mha_config(cfg);
    if (cfg->attention == QKV_ATTENTION_SOFTMAX) {
        const qkv_mask causal = {NULL, 0, 1};
        model_mha_forward(lm, y, c, L, u, u, w, &mc, B, T, T, &causal, p, seed, scratch);
        return;
    }
    const int N = B * T, C = cfg->d_model, d = mc.head_dim;
    linear_forward(lm, c->q, u, w->W_q, w->b_q, N, C, C);
    linear_forward(lm, c->k, u, w->W_k, w->b_k, N, C, C);
    linear_forward(lm, c->v, u, w->W_v, w->b_v, N, C, C);
    qkv_linear_attention_forward(c->ctx, c->q, c->k, c->v, B, cfg->heads, T, T, d, d, NULL, 1,
                                 scratch);
    linear_forward(lm, y, c->ctx, w->W_o, w->b_o, N, C, C);
}

/* du += d(u) given dy; dw += the projections' gradients. */
static void attention_backward(const qkv_lm_config *cfg, const linear_mode *lm, float *du,
                               qkv_mha_weights *dw, const float *dy, const qkv_mha_cache *c,
                               const float *L, const float *u, const qkv_mha_weights *w, int B,
                               int T, float p, uint64_t seed, float *scratch)
{
    const qkv_mha_config mc = mha_config(cfg);
    if (cfg->attention == QKV_ATTENTION_SOFTMAX) {
        const qkv_mask causal = {NULL, 0, 1};
        model_mha_backward(lm, du, du, dw, dy, c, L, u, u, w, &mc, B, T, T, &causal, p, seed,
                           scratch);
        return;
    }
    const int N = B * T, C = cfg->d_model, d = mc.head_dim;
    const size_t NC = (size_t)N * C;
    float *dctx = scratch, *dq = dctx + NC, *dk = dq + NC, *dv = dk + NC, *rest = dv + NC;
    memset(dctx, 0, 4 * NC * sizeof *dctx);
    linear_backward(lm, dctx, dw->W_o, dw->b_o, dy, c->ctx, w->W_o, N, C, C);
    qkv_linear_attention_backward(dq, dk, dv, dctx, c->q, c->k, c->v, B, cfg->heads, T, T, d, d,
                                  NULL, 1, rest);
    linear_backward(lm, du, dw->W_q, dw->b_q, dq, u, w->W_q, N, C, C);
    linear_backward(lm, du, dw->W_k, dw->b_k, dk, u, w->W_k, N, C, C);
    linear_backward(lm, du, dw->W_v, dw->b_v, dv, u, w->W_v, N, C, C);
}

/* ---- forward --------------------------------------------------------------------------- */

qkv_status lm_forward(qkv_lm *m, const int *ids, int B, int T, float p, uint64_t seed,
                      qkv_error *err)
{
    qkv_status st = layout_acts(m, B, T, err);
    if (st) return st;
    const qkv_lm_config *c = &m->cfg;
    const sublayer_shape sh = {c->pre_norm, c->d_model, c->ln_eps};
    lm_acts *x = &m->acts;
    const int C = c->d_model, F = c->ffn;
    const size_t N = (size_t)B * T;
    const linear_mode lm = precision_mode(&m->prec, m->params, m->n_params);
    /* X = dropout(E[ids] sqrt(C) + P) (paper, sections 3.4 and 3.5) */
    if ((st = qkv_embedding_forward(x->x, ids, m->w.embedding, (int)N, c->vocab, C, err)))
        return st;
    qkv_positional_forward(x->x, x->x, lm_positions(m), B, T, C, 0, sqrtf((float)C));
    qkv_dropout_forward(x->x, x->x, N * C, p, dropout_site_seed(seed, 0, 0, 0), 0);
    const float *h = x->x;
    for (int l = 0; l < c->layers; l++) {
        encoder_block_acts *a = &x->blocks[l];
        const encoder_block_w *w = &m->w.blocks[l];
        sublayer_ctx att = {&sh, N, p, dropout_site_seed(seed, 0, l, 1), x->scratch};
        sublayer_ctx ff = {&sh, N, p, dropout_site_seed(seed, 0, l, 2), x->scratch};
        const float *in = sublayer_in(&att, &a->att, h, &w->norm1);
        attention_forward(c, &lm, a->att.s, &a->cache, a->L, in, &w->attention, B, T, p,
                          dropout_site_seed(seed, 0, l, 3), x->scratch);
        sublayer_out(&att, &a->att, h, &w->norm1);
        in = sublayer_in(&ff, &a->ff, a->att.out, &w->norm2);
        ffn_forward(&lm, a->ff.s, a->h_pre, a->h, in, w->ffn.W1, w->ffn.b1, w->ffn.W2, w->ffn.b2,
                    (int)N, C, F, c->act);
        sublayer_out(&ff, &a->ff, a->att.out, &w->norm2);
        h = a->ff.out;
    }
    if (m->w.norm.g)
        qkv_layernorm_forward(x->out, x->mean, x->rstd, h, m->w.norm.g, m->w.norm.b, (int)N, C,
                              c->ln_eps);
    else
        memcpy(x->out, h, N * C * sizeof *x->out);
    linear_forward(&lm, x->logits, x->out, m->w.out_W, m->w.out_b, (int)N, C, c->vocab);
    return QKV_OK;
}

/* ---- backward: acts.logits holds dL/dlogits ---------------------------------------------- */

static void backward(qkv_lm *m, const int *ids, int B, int T, float p, uint64_t seed)
{
    const qkv_lm_config *c = &m->cfg;
    const sublayer_shape sh = {c->pre_norm, c->d_model, c->ln_eps};
    lm_acts *x = &m->acts;
    lm_w *g = &m->g;
    const int C = c->d_model, F = c->ffn;
    const size_t N = (size_t)B * T, NC = N * C;
    const linear_mode lm = precision_mode(&m->prec, m->params, m->n_params);
    float *dh = x->d_a, *ds = x->d_b, *din = x->d_c; /* d(stream), d(sublayer out), d(its in) */

    /* logits -> the last block's output, through the final norm (the logits buffer already
     * holds dlogits, and the output bias its gradient) */
    memset(din, 0, NC * sizeof *din);
    linear_backward(&lm, din, g->out_W, NULL, x->logits, x->out, m->w.out_W, (int)N, C, c->vocab);
    const float *last = x->blocks[c->layers - 1].ff.out;
    memset(dh, 0, NC * sizeof *dh);
    if (m->w.norm.g)
        qkv_layernorm_backward(dh, g->norm.g, g->norm.b, din, last, x->mean, x->rstd,
                               m->w.norm.g, (int)N, C);
    else
        memcpy(dh, din, NC * sizeof *dh);

    for (int l = c->layers - 1; l >= 0; l--) {
        encoder_block_acts *a = &x->blocks[l];
        const encoder_block_w *w = &m->w.blocks[l];
        encoder_block_w *dw = &g->blocks[l];
        const float *h = l ? x->blocks[l - 1].ff.out : x->x;
        sublayer_ctx att = {&sh, N, p, dropout_site_seed(seed, 0, l, 1), x->scratch};
        sublayer_ctx ff = {&sh, N, p, dropout_site_seed(seed, 0, l, 2), x->scratch};
        /* dh holds d(block output); each sublayer turns d(out) into d(its x), in place */
        memcpy(din, dh, NC * sizeof *din);
        memset(dh, 0, NC * sizeof *dh);
        sublayer_out_backward(&ff, &a->ff, dh, ds, din, &w->norm2, &dw->norm2);
        memset(din, 0, NC * sizeof *din);
        ffn_backward(&lm, din, dw->ffn.W1, dw->ffn.b1, dw->ffn.W2, dw->ffn.b2, ds, a->h_pre, a->h,
                     c->pre_norm ? a->ff.u : a->att.out, w->ffn.W1, w->ffn.W2, (int)N, C, F,
                     c->act, x->scratch);
        sublayer_in_backward(&ff, &a->ff, dh, din, a->att.out, &w->norm2, &dw->norm2);
        memcpy(din, dh, NC * sizeof *din);
        memset(dh, 0, NC * sizeof *dh);
        sublayer_out_backward(&att, &a->att, dh, ds, din, &w->norm1, &dw->norm1);
        memset(din, 0, NC * sizeof *din);
        attention_backward(c, &lm, din, &dw->attention, ds, &a->cache, a->L,
                           c->pre_norm ? a->att.u : h, &w->attention, B, T, p,
                           dropout_site_seed(seed, 0, l, 3), x->scratch);
        sublayer_in_backward(&att, &a->att, dh, din, h, &w->norm1, &dw->norm1);
    }

    /* dh is the gradient of dropout(E sqrt(C) + P): undo the dropout, then the scale */
    float *e = x->scratch;
    memset(e, 0, NC * sizeof *e);
    qkv_dropout_backward(e, dh, NC, p, dropout_site_seed(seed, 0, 0, 0), 0);
    if (g->positions) qkv_positional_backward(NULL, g->positions, e, B, T, C, 0, 1.0f);
    const float s = sqrtf((float)C);
    for (size_t i = 0; i < NC; i++) e[i] *= s;
    qkv_embedding_backward(g->embedding, e, ids, (int)N, C);
}

/* ---- entry points ---------------------------------------------------------------------- */

qkv_status qkv_lm_loss(qkv_lm *m, const int *ids, const int *targets, int B, int T,
                       int backward_pass, float grad_scale, int train, uint64_t dropout_seed,
                       double *loss_sum, int *tokens, qkv_error *err)
{
    if (backward_pass && !qkv_lm_grads(m))
        return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for gradients");
    const float p = train ? m->cfg.dropout : 0.0f;
    qkv_status st = lm_forward(m, ids, B, T, p, dropout_seed, err);
    if (st) return st;
    lm_acts *x = &m->acts;
    const int N = B * T, V = m->cfg.vocab;
    double sum = 0.0;
    /* with backward, the loss pass also turns the logits into their gradient, and sums it
     * into the output bias's */
    int count = backward_pass ? cross_entropy_fused(x->loss, x->lse, &sum, x->logits, m->g.out_b,
                                                    targets, N, V, QKV_PAD, 0.0f, grad_scale,
                                                    x->scratch, err)
                              : qkv_cross_entropy_forward(x->loss, x->lse, &sum, x->logits,
                                                          targets, N, V, QKV_PAD, 0.0f, err);
    if (count < 0) return err ? err->code : QKV_ERR_ARG;
    if (!isfinite(sum)) return qkv_fail(err, QKV_ERR_NUMERIC, "the loss is not finite (%g)", sum);
    if (loss_sum) *loss_sum = sum;
    if (tokens) *tokens = count;
    if (backward_pass) {
        precision_touch(&m->prec); /* an optimizer step will follow */
        backward(m, ids, B, T, p, dropout_seed);
    }
    return QKV_OK;
}

qkv_status qkv_lm_logits(qkv_lm *m, const int *ids, int B, int T, float *logits,
                         qkv_error *err)
{
    qkv_status st = lm_forward(m, ids, B, T, 0.0f, 0, err);
    if (st) return st;
    memcpy(logits, m->acts.logits, (size_t)B * T * m->cfg.vocab * sizeof *logits);
    return QKV_OK;
}
