/* The encoder-decoder Transformer: configuration, the parameter table, initialisation and the
 * activation arena. The forward and backward passes are in encoder_decoder.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/fused.h"
#include "models/model_attention.h"
#include "models/param_table.h"
#include "models/transformer_internal.h"

qkv_transformer_config qkv_transformer_default_config(void)
{
    qkv_transformer_config c = {0};
    c.d_model = 32, c.heads = 4, c.ffn = 64, c.enc_layers = 2, c.dec_layers = 2;
    c.max_len = 1000, c.dropout = 0.1f, c.bias = 0, c.pre_norm = 0, c.final_norm = 0;
    c.act = QKV_ACT_RELU, c.tie = QKV_TIE_NONE, c.learned_pos = 0, c.ln_eps = 1e-5f;
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
    if (c->act != QKV_ACT_RELU && c->act != QKV_ACT_GELU)
        return qkv_fail(err, QKV_ERR_ARG, "unknown activation %d", (int)c->act);
    if ((double)c->d_model * c->d_model * (c->enc_layers + c->dec_layers) > 4e10)
        return qkv_fail(err, QKV_ERR_ARG, "model too large");
    return QKV_OK;
}

/* ---- the parameter table --------------------------------------------------------------- */

/* The table's fixed order (param_table.h); saved models and checkpoints depend on it. */
static void walk(param_walker *w, const qkv_transformer_config *c, model_w *mw)
{
    const int C = c->d_model, F = c->ffn;
    char prefix[48];
    mw->src_embedding = param_take(w, c->tie == QKV_TIE_ALL ? "embedding" : "src_embedding",
                                   c->src_vocab, C);
    mw->tgt_embedding = c->tie == QKV_TIE_ALL ? mw->src_embedding
                                              : param_take(w, "tgt_embedding", c->tgt_vocab,
                                                           C);
    mw->src_positions = c->learned_pos ? param_take(w, "src_positions", c->max_len, C) : NULL;
    mw->tgt_positions = c->learned_pos ? param_take(w, "tgt_positions", c->max_len, C) : NULL;
    for (int l = 0; l < c->enc_layers; l++) {
        encoder_block_w *e = &mw->encoder[l];
        snprintf(prefix, sizeof prefix, "encoder.%d.attention", l);
        e->attention = param_take_mha(w, prefix, C, c->bias);
        snprintf(prefix, sizeof prefix, "encoder.%d.norm1", l);
        e->norm1 = param_take_norm(w, prefix, C);
        snprintf(prefix, sizeof prefix, "encoder.%d.ffn", l);
        e->ffn = param_take_ffn(w, prefix, C, F);
        snprintf(prefix, sizeof prefix, "encoder.%d.norm2", l);
        e->norm2 = param_take_norm(w, prefix, C);
    }
    mw->encoder_norm = c->final_norm && c->enc_layers ? param_take_norm(w, "encoder.norm", C)
                                                      : (norm_w){0};
    for (int l = 0; l < c->dec_layers; l++) {
        decoder_block_w *d = &mw->decoder[l];
        snprintf(prefix, sizeof prefix, "decoder.%d.self_attention", l);
        d->self_attention = param_take_mha(w, prefix, C, c->bias);
        snprintf(prefix, sizeof prefix, "decoder.%d.norm1", l);
        d->norm1 = param_take_norm(w, prefix, C);
        snprintf(prefix, sizeof prefix, "decoder.%d.cross_attention", l);
        d->cross_attention = param_take_mha(w, prefix, C, c->bias);
        snprintf(prefix, sizeof prefix, "decoder.%d.norm2", l);
        d->norm2 = param_take_norm(w, prefix, C);
        snprintf(prefix, sizeof prefix, "decoder.%d.ffn", l);
        d->ffn = param_take_ffn(w, prefix, C, F);
        snprintf(prefix, sizeof prefix, "decoder.%d.norm3", l);
        d->norm3 = param_take_norm(w, prefix, C);
    }
    mw->decoder_norm = c->final_norm ? param_take_norm(w, "decoder.norm", C) : (norm_w){0};
    mw->out_W = c->tie != QKV_TIE_NONE ? mw->tgt_embedding
                                       : param_take(w, "output.W", c->tgt_vocab, C);
    mw->out_b = param_take(w, "output.b", c->tgt_vocab, 0);
}

static void view(qkv_transformer *m, float *base, model_w *mw)
{
    param_walker w = {base, 0, NULL, NULL, 0};
    walk(&w, &m->cfg, mw);
}

/* ---- initialisation -------------------------------------------------------------------- */

/* d2l's initialisation: Xavier-uniform for every projection matrix (its xavier_init_weights),
 * PyTorch's defaults for the rest: biases U(-1/sqrt(fan_in), 1/sqrt(fan_in)), embeddings
 * N(0, 1), LayerNorm gain 1 and bias 0. A table shared with the output projection gets
 * N(0, 1/C) instead, so that logits start O(1) (it is scaled by sqrt(C) on input). */
static void init_params(qkv_transformer *m, uint64_t seed)
{
    const qkv_transformer_config *c = &m->cfg;
    for (int i = 0; i < m->n_tensors; i++) {
        const qkv_param_info *t = &m->tensors[i];
        float *p = m->params + t->offset;
        uint64_t s = stream_of(seed, STREAM_INIT, (uint64_t)i);
        const char *leaf = strrchr(t->name, '.');
        leaf = leaf ? leaf + 1 : t->name;
        if (strstr(t->name, "embedding") || strstr(t->name, "positions")) {
            float std = c->tie != QKV_TIE_NONE && !strstr(t->name, "positions")
                            ? 1.0f / sqrtf((float)c->d_model) : 1.0f;
            qkv_fill_normal(p, t->numel, 0.0f, std, s);
        } else if (!strcmp(leaf, "gamma")) {
            for (size_t k = 0; k < t->numel; k++) p[k] = 1.0f;
        } else if (!strcmp(leaf, "beta")) {
            memset(p, 0, t->numel * sizeof *p);
        } else if (t->ndim == 2) {
            qkv_init_xavier_uniform(p, t->shape[0], t->shape[1], s);
        } else { /* a linear layer's bias: its fan-in is the FFN width for W2, else d_model */
            float bound = 1.0f / sqrtf((float)(!strcmp(leaf, "b2") ? c->ffn : c->d_model));
            qkv_fill_uniform(p, t->numel, -bound, bound, s);
        }
    }
}

/* ---- life cycle ------------------------------------------------------------------------ */

qkv_status qkv_transformer_create(qkv_transformer **out, const qkv_transformer_config *cfg,
                                  uint64_t seed, qkv_error *err)
{
    *out = NULL;
    qkv_status st = qkv_transformer_config_check(cfg, err);
    if (st) return st;
    qkv_transformer *m = calloc(1, sizeof *m);
    if (!m) return qkv_fail(err, QKV_ERR_NOMEM, "out of memory creating the model");
    m->cfg = *cfg;
    m->w.encoder = calloc((size_t)cfg->enc_layers + 1, sizeof *m->w.encoder);
    m->g.encoder = calloc((size_t)cfg->enc_layers + 1, sizeof *m->g.encoder);
    m->w.decoder = calloc((size_t)cfg->dec_layers, sizeof *m->w.decoder);
    m->g.decoder = calloc((size_t)cfg->dec_layers, sizeof *m->g.decoder);
    param_walker counter = {NULL, 0, NULL, NULL, 0};
    model_w scratch_view = {.encoder = m->w.encoder, .decoder = m->w.decoder};
    if (m->w.encoder && m->w.decoder) walk(&counter, cfg, &scratch_view);
    m->n_params = counter.offset;
    m->n_tensors = counter.count;
    m->tensors = calloc((size_t)counter.count + 1, sizeof *m->tensors);
    m->names = calloc((size_t)counter.count + 1, sizeof *m->names);
    m->params = malloc(m->n_params * sizeof *m->params);
    m->pos_table = malloc((size_t)cfg->max_len * cfg->d_model * sizeof *m->pos_table);
    if (!m->g.encoder || !m->g.decoder || !m->tensors || !m->names || !m->params ||
        !m->pos_table) {
        qkv_transformer_free(m);
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

void qkv_transformer_free(qkv_transformer *m)
{
    if (!m) return;
    free(m->w.encoder), free(m->g.encoder), free(m->w.decoder), free(m->g.decoder);
    free(m->tensors), free(m->names), free(m->params), free(m->grads), free(m->pos_table);
    free(m->acts.encoder), free(m->acts.decoder), free(m->arena);
    precision_free(&m->prec);
    free(m);
}

const qkv_transformer_config *qkv_transformer_get_config(const qkv_transformer *m)
{
    return &m->cfg;
}

int qkv_transformer_num_tensors(const qkv_transformer *m) { return m->n_tensors; }

qkv_param_info qkv_transformer_tensor(const qkv_transformer *m, int i) { return m->tensors[i]; }

size_t qkv_transformer_num_params(const qkv_transformer *m) { return m->n_params; }

/* The caller may write through this pointer: decoding will not trust the bf16 copy. */
float *qkv_transformer_params(qkv_transformer *m)
{
    precision_touch(&m->prec);
    return m->params;
}

qkv_status qkv_transformer_set_precision(qkv_transformer *m, qkv_precision p, qkv_error *err)
{
    return precision_set(&m->prec, p, m->params, m->n_params, err);
}

qkv_precision qkv_transformer_get_precision(const qkv_transformer *m) { return m->prec.precision; }

float *qkv_transformer_grads(qkv_transformer *m)
{
    if (!m->grads) {
        m->grads = calloc(m->n_params, sizeof *m->grads);
        if (!m->grads) return NULL;
        view(m, m->grads, &m->g);
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

/* One attention over B x (n queries, m keys): flash from flash_min_keys keys on. */
static qkv_mha_cache layout_mha(arena *a, float **L, const qkv_mha_config *mc, int B, int n,
                                int m, int flash_min_keys)
{
    const int flash = m >= flash_min_keys;
    float *base = grab(a, model_mha_cache_floats(mc, B, n, m, flash));
    *L = NULL;
    return base ? model_mha_cache_view(base, L, mc, B, n, m, flash) : (qkv_mha_cache){0};
}

static void layout(qkv_transformer *m, arena *a, int B, int Ts, int Tt, int flash_min_keys)
{
    const qkv_transformer_config *c = &m->cfg;
    const int C = c->d_model, F = c->ffn, V = c->tgt_vocab;
    const size_t Ns = (size_t)B * Ts, Nt = (size_t)B * Tt, Nmax = Ns > Nt ? Ns : Nt;
    const qkv_mha_config mc = {C, C, c->heads, C / c->heads, c->bias};
    model_acts *x = &m->acts;
    x->B = B, x->Ts = Ts, x->Tt = Tt;
    x->src_x = grab(a, Ns * C);
    for (int l = 0; l < c->enc_layers; l++) {
        encoder_block_acts *e = &x->encoder[l];
        layout_sublayer(a, &e->att, Ns, C, c->pre_norm);
        e->cache = layout_mha(a, &e->L, &mc, B, Ts, Ts, flash_min_keys);
        layout_sublayer(a, &e->ff, Ns, C, c->pre_norm);
        e->h_pre = grab(a, Ns * F), e->h = grab(a, Ns * F);
    }
    x->enc_mean = grab(a, Ns), x->enc_rstd = grab(a, Ns), x->enc_out = grab(a, Ns * C);
    x->tgt_x = grab(a, Nt * C);
    for (int l = 0; l < c->dec_layers; l++) {
        decoder_block_acts *d = &x->decoder[l];
        layout_sublayer(a, &d->self, Nt, C, c->pre_norm);
        d->self_cache = layout_mha(a, &d->self_L, &mc, B, Tt, Tt, flash_min_keys);
        layout_sublayer(a, &d->cross, Nt, C, c->pre_norm);
        d->cross_cache = layout_mha(a, &d->cross_L, &mc, B, Tt, Ts, flash_min_keys);
        layout_sublayer(a, &d->ff, Nt, C, c->pre_norm);
        d->h_pre = grab(a, Nt * F), d->h = grab(a, Nt * F);
    }
    x->dec_mean = grab(a, Nt), x->dec_rstd = grab(a, Nt), x->dec_out = grab(a, Nt * C);
    x->logits = grab(a, Nt * V), x->lse = grab(a, Nt), x->loss = grab(a, Nt);
    x->d_a = grab(a, Nmax * C), x->d_b = grab(a, Nmax * C), x->d_c = grab(a, Nmax * C);
    x->d_enc_out = grab(a, Ns * C);
    /* scratch: the largest of the attentions' (each kernel its own), the FFN's dh (N, F), a
     * sublayer's (N, C) and the loss's partial bias gradients */
    size_t scratch = Nmax * (F > C ? F : C), s;
    if ((s = cross_entropy_fused_scratch_floats((int)Nt, V)) > scratch) scratch = s;
    if (c->enc_layers &&
        (s = model_mha_scratch_floats(&mc, B, Ts, Ts, Ts >= flash_min_keys)) > scratch)
        scratch = s;
    if ((s = model_mha_scratch_floats(&mc, B, Tt, Tt, Tt >= flash_min_keys)) > scratch)
        scratch = s;
    if ((s = model_mha_scratch_floats(&mc, B, Tt, Ts, Ts >= flash_min_keys)) > scratch)
        scratch = s;
    x->scratch = grab(a, scratch);
}

qkv_status transformer_layout_acts(qkv_transformer *m, int B, int Ts, int Tt, qkv_error *err)
{
    return transformer_layout(m, B, Ts, Tt, m->flash_min_keys, err);
}

qkv_status transformer_layout(qkv_transformer *m, int B, int Ts, int Tt, int flash_min_keys,
                              qkv_error *err)
{
    const qkv_transformer_config *c = &m->cfg;
    if (B <= 0 || Ts <= 0 || Tt <= 0)
        return qkv_fail(err, QKV_ERR_ARG, "empty batch (B %d, source length %d, target length "
                        "%d)", B, Ts, Tt);
    if (Ts > c->max_len || Tt > c->max_len)
        return qkv_fail(err, QKV_ERR_ARG, "sequence length %d exceeds the model's maximum "
                        "length %d", Ts > Tt ? Ts : Tt, c->max_len);
    if (!m->acts.encoder) {
        m->acts.encoder = calloc((size_t)c->enc_layers + 1, sizeof *m->acts.encoder);
        m->acts.decoder = calloc((size_t)c->dec_layers, sizeof *m->acts.decoder);
        if (!m->acts.encoder || !m->acts.decoder)
            return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for activations");
    }
    arena counter = {NULL, 0};
    layout(m, &counter, B, Ts, Tt, flash_min_keys);
    if (counter.used > m->arena_cap) {
        free(m->arena);
        m->arena = NULL, m->arena_cap = 0;
        if (posix_memalign((void **)&m->arena, 64, counter.used * sizeof(float)))
            return qkv_fail(err, QKV_ERR_NOMEM, "out of memory: activations for batch %d x "
                            "(%d, %d) need %zu MiB", B, Ts, Tt, counter.used * 4 >> 20);
        m->arena_cap = counter.used;
    }
    arena real = {m->arena, 0};
    layout(m, &real, B, Ts, Tt, flash_min_keys);
    return precision_prepare(&m->prec, m->params, m->n_params, 0, err);
}
