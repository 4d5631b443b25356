/* SPDX-License-Identifier: MIT */
/* What both models own and do alike: the parameter table and its initialisation, the
 * gradients, the backend, and the activation arena. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/model.h"

/* ---- the parameter table --------------------------------------------------------------- */

float *param_take(param_walker *w, const char *name, int rows, int cols)
{
    size_t n = (size_t)rows * (cols ? cols : 1);
    if (w->tensors) {
        qkv_param_info *t = &w->tensors[w->count];
        snprintf(w->names[w->count], sizeof w->names[0], "%s", name);
        t->name = w->names[w->count];
        t->ndim = cols ? 2 : 1;
        t->shape[0] = rows, t->shape[1] = cols;
        t->offset = w->offset, t->numel = n;
    }
    float *p = w->base ? w->base + w->offset : NULL;
    w->offset += n, w->count++;
    return p;
}

qkv_layernorm_weights param_take_norm(param_walker *w, const char *prefix, int C)
{
    char name[64];
    qkv_layernorm_weights n;
    snprintf(name, sizeof name, "%s.gamma", prefix), n.gamma = param_take(w, name, C, 0);
    snprintf(name, sizeof name, "%s.beta", prefix), n.beta = param_take(w, name, C, 0);
    return n;
}

ffn_w param_take_ffn(param_walker *w, const char *prefix, int C, int F)
{
    char name[64];
    qkv_ffn_weights f;
    snprintf(name, sizeof name, "%s.W1", prefix), f.W1 = param_take(w, name, F, C);
    snprintf(name, sizeof name, "%s.b1", prefix), f.b1 = param_take(w, name, F, 0);
    snprintf(name, sizeof name, "%s.W2", prefix), f.W2 = param_take(w, name, C, F);
    snprintf(name, sizeof name, "%s.b2", prefix), f.b2 = param_take(w, name, C, 0);
    return ffn_w_of(f);
}

mha_w param_take_mha(param_walker *w, const char *prefix, int C, int bias)
{
    char name[64];
    qkv_mha_weights a = {0};
    float **W[4] = {&a.W_q, &a.W_k, &a.W_v, &a.W_o}, **b[4] = {&a.b_q, &a.b_k, &a.b_v, &a.b_o};
    for (int i = 0; i < 4; i++) {
        snprintf(name, sizeof name, "%s.W_%c", prefix, "qkvo"[i]);
        *W[i] = param_take(w, name, C, C);
        if (!bias) continue;
        snprintf(name, sizeof name, "%s.b_%c", prefix, "qkvo"[i]);
        *b[i] = param_take(w, name, C, 0);
    }
    return mha_w_of(a);
}

/* ---- limits, checked before anything is allocated ------------------------------------- */

double block_params(double C, double F, int bias, int cross)
{
    const double mha = 4 * C * C + (bias ? 4 * C : 0), norm = 2 * C, ffn = 2 * C * F + F + C;
    return (cross ? 2 : 1) * (mha + norm) + ffn + norm;
}

qkv_status limit_check(const char *key, int v, int limit, const char *name, qkv_error *err)
{
    if (v <= limit) return QKV_OK;
    return qkv_fail(err, QKV_ERR_ARG, "%s = %d is over the limit %s = %d", key, v, name, limit);
}

qkv_status params_check(double n_params, int max_len, int C, qkv_error *err)
{
    const double n = n_params + (double)max_len * C;
    if (n <= (double)QKV_MAX_PARAMS) return QKV_OK;
    return qkv_fail(err, QKV_ERR_ARG, "the model would hold %.0f parameters (%.1f GiB of float32), "
                    "over the limit QKV_MAX_PARAMS = %lld", n, n * 4 / (1 << 30), QKV_MAX_PARAMS);
}

/* ---- life cycle ------------------------------------------------------------------------ */

qkv_status core_build(model_core *c, param_walk walk, const void *cfg, void *view, int max_len,
                      int C, qkv_error *err)
{
    memset(c, 0, sizeof *c);
    param_walker counter = {NULL, 0, NULL, NULL, 0};
    walk(&counter, cfg, view);
    c->n_params = counter.offset, c->n_tensors = counter.count;
    c->tensors = calloc((size_t)c->n_tensors + 1, sizeof *c->tensors);
    c->names = calloc((size_t)c->n_tensors + 1, sizeof *c->names);
    c->params = malloc(c->n_params * sizeof *c->params);
    c->pos_floats = (size_t)max_len * C;
    c->pos_table = malloc(c->pos_floats * sizeof *c->pos_table);
    c->mem = &backend_cpu_fp32;
    if (!c->tensors || !c->names || !c->params || !c->pos_table)
        return qkv_fail(err, QKV_ERR_NOMEM, "out of memory allocating %zu parameters",
                        c->n_params);
    param_walker recorder = {c->params, 0, c->tensors, c->names, 0};
    walk(&recorder, cfg, view);
    qkv_sinusoidal_table(c->pos_table, max_len, C);
    c->flash_min_keys = FLASH_MIN_KEYS;
    c->kv_cache = QKV_KV_CACHE_AUTO;
    return QKV_OK;
}

void core_free(model_core *c)
{
    if (c->grads) c->mem->release(c->grads);
    if (c->arena) c->mem->release(c->arena);
    if (c->dev) core_device_free(c);
    free(c->tensors), free(c->names), free(c->params), free(c->pos_table);
    precision_free(&c->prec);
    memset(c, 0, sizeof *c);
}

/* d2l's initialisation: Xavier-uniform for every projection matrix (its xavier_init_weights),
 * PyTorch's defaults for the rest: biases U(-1/sqrt(fan_in), 1/sqrt(fan_in)), embeddings
 * N(0, 1), LayerNorm gain 1 and bias 0. With tied weights the embeddings get N(0, 1/C)
 * instead, so that logits start O(1) (an embedding is scaled by sqrt(C) on input). */
void core_init_params(model_core *c, uint64_t seed, int C, int F, int tied)
{
    for (int i = 0; i < c->n_tensors; i++) {
        const qkv_param_info *t = &c->tensors[i];
        float *p = c->params + t->offset;
        uint64_t s = stream_of(seed, STREAM_INIT, (uint64_t)i);
        const char *leaf = strrchr(t->name, '.');
        leaf = leaf ? leaf + 1 : t->name;
        if (strstr(t->name, "embedding") || strstr(t->name, "positions")) {
            float std = tied && !strstr(t->name, "positions") ? 1.0f / sqrtf((float)C) : 1.0f;
            qkv_fill_normal(p, t->numel, 0.0f, std, s);
        } else if (!strcmp(leaf, "gamma")) {
            for (size_t k = 0; k < t->numel; k++) p[k] = 1.0f;
        } else if (!strcmp(leaf, "beta")) {
            memset(p, 0, t->numel * sizeof *p);
        } else if (t->ndim == 2) {
            qkv_init_xavier_uniform(p, t->shape[0], t->shape[1], s);
        } else { /* a linear layer's bias: its fan-in is the FFN width for W2, else d_model */
            float bound = 1.0f / sqrtf((float)(!strcmp(leaf, "b2") ? F : C));
            qkv_fill_uniform(p, t->numel, -bound, bound, s);
        }
    }
}

/* ---- the parameters, their typed copies and where they live ---------------------------- */

backend core_backend(model_core *c)
{
    if (!c->dev) return precision_backend(&c->prec);
    const int bf16 = c->prec.precision == QKV_PRECISION_BF16;
    backend be = {.ops = bf16 ? c->dev->dev->bf16 : c->dev->dev->fp32,
                  .typed_current = bf16 && c->prec.bf16_current, .device = c->dev->ctx};
    return be;
}

float *core_params(model_core *c)
{
    precision_touch(&c->prec);
    if (!c->dev) return c->params;
    float *host = (float *)core_host_params(c);
    c->dev->params = HOST_NEWER;
    return host;
}

qkv_status core_set_precision(model_core *c, qkv_precision p, void (*retype)(void *model),
                              void *model, qkv_error *err)
{
    device_side *d = c->dev;
    qkv_status st = QKV_OK;
    if (!d || (p != QKV_PRECISION_BF16 && p != QKV_PRECISION_INT8 && p != QKV_PRECISION_FP32))
        st = precision_set(&c->prec, p, c->params, c->n_params, c->tensors, c->n_tensors, err);
    else if (p == QKV_PRECISION_INT8)
        st = qkv_fail(err, QKV_ERR_ARG, "int8 precision runs on the CPU only: on %s use fp32 "
                      "or bf16", d->dev->name);
    else if (p == QKV_PRECISION_BF16 && !d->dev->bf16)
        st = qkv_fail(err, QKV_ERR_ARG, "%s has no bf16 kernels: use fp32", d->dev->name);
    else if (p == QKV_PRECISION_BF16 && !d->bf16 &&
             !(d->bf16 = c->mem->alloc(c->n_params * sizeof *d->bf16)))
        st = qkv_fail(err, QKV_ERR_NOMEM, "out of device memory on %s for the bf16 copy of "
                      "%zu parameters", d->dev->name, c->n_params);
    else {
        if (p == QKV_PRECISION_FP32 && d->bf16) c->mem->release(d->bf16), d->bf16 = NULL;
        c->prec.precision = p;
        c->prec.bf16_current = 0; /* rounded by the next decoding pass (core_prepare) */
    }
    if (!st) retype(model);
    return st;
}

weight core_weight(const model_core *c, const float *W)
{
    if (!c->dev) return precision_weight(&c->prec, c->params, W);
    weight w = weight_f32(W);
    if (c->prec.precision == QKV_PRECISION_BF16)
        w.type = WEIGHT_BF16, w.bf16 = c->dev->bf16 + (W - c->params);
    return w;
}

static void retype_mha(mha_w *a, const model_core *c)
{
    a->W_q = core_weight(c, a->f.W_q);
    a->W_k = core_weight(c, a->f.W_k);
    a->W_v = core_weight(c, a->f.W_v);
    a->W_o = core_weight(c, a->f.W_o);
}

void stack_retype(stack_w *s, const stack_dims *d, const model_core *c)
{
    s->lookup = core_weight(c, s->embedding);
    for (int l = 0; l < d->layers; l++) {
        block_w *b = &s->blocks[l];
        retype_mha(&b->self, c);
        if (d->cross) retype_mha(&b->cross, c);
        b->ffn.W1 = core_weight(c, b->ffn.f.W1);
        b->ffn.W2 = core_weight(c, b->ffn.f.W2);
    }
}

qkv_status core_set_kv_cache(model_core *c, qkv_kv_cache kv, qkv_error *err)
{
    if (kv != QKV_KV_CACHE_AUTO && kv != QKV_KV_CACHE_FP32 && kv != QKV_KV_CACHE_BF16)
        return qkv_fail(err, QKV_ERR_ARG, "unknown key-value cache type %d (auto 0, fp32 1, "
                        "bf16 2)", (int)kv);
    c->kv_cache = kv;
    return QKV_OK;
}

kv_dtype core_kv_cache(const model_core *c)
{
    /* int8 has a bf16 cache only where the CPU has AVX512-BF16: VNNI alone (Cascade Lake,
     * Ice Lake) runs int8 but not bf16 */
    if (c->kv_cache == QKV_KV_CACHE_AUTO)
        return c->prec.precision == QKV_PRECISION_BF16 ||
                       (c->prec.precision == QKV_PRECISION_INT8 && qkv_bf16_supported())
                   ? KV_BF16
                   : KV_FP32;
    return c->kv_cache == QKV_KV_CACHE_BF16 ? KV_BF16 : KV_FP32;
}

qkv_kv_cache core_kv_cache_type(const model_core *c)
{
    return core_kv_cache(c) == KV_BF16 ? QKV_KV_CACHE_BF16 : QKV_KV_CACHE_FP32;
}

/* ---- the activation arena -------------------------------------------------------------- */

float *arena_take(arena *a, size_t n)
{
    float *p = a->base ? a->base + a->used : NULL;
    a->used += (n + 15) & ~(size_t)15; /* 64-byte aligned slices */
    return p;
}

static void layout_sublayer(arena *a, sublayer_acts *s, size_t N, int C, int pre_norm)
{
    memset(s, 0, sizeof *s);
    if (pre_norm) s->u = arena_take(a, N * C), s->u_mean = arena_take(a, N), s->u_rstd = arena_take(a, N);
    s->s = arena_take(a, N * C);
    if (!pre_norm)
        s->post.z = arena_take(a, N * C), s->post.mean = arena_take(a, N),
        s->post.rstd = arena_take(a, N);
    s->out = arena_take(a, N * C);
}

/* One attention of B x (n queries, m keys) on the kernel the backend chooses; returns its
 * scratch. */
static size_t layout_attention(arena *a, const backend *be, mha_acts *att, const stack_dims *d,
                               qkv_attention_kind kind, int B, int n, int m,
                               const attention_options *o)
{
    const qkv_mha_config mc = stack_mha_config(d);
    const attention_kernel k = be->ops->choose_attention(kind, m, o);
    float *base = arena_take(a, mha_saved_floats(be, k, &mc, B, n, m));
    *att = base ? mha_acts_view(be, k, base, &mc, B, n, m) : (mha_acts){k, {0}, NULL};
    return mha_scratch_floats(be, k, &mc, B, n, m);
}

size_t stack_layout(arena *a, const backend *be, stack_acts *s, const stack_dims *d, int B,
                    int T, int Tm, const attention_options *o)
{
    const int C = d->C, F = d->F;
    const size_t N = (size_t)B * T;
    size_t scratch = 0, need;
    attention_options heads = *o;
    heads.head_dim = C / d->heads;
    o = &heads;
    s->x = arena_take(a, N * C);
    for (int l = 0; l < d->layers; l++) {
        block_acts *b = &s->blocks[l];
        layout_sublayer(a, &b->self, N, C, d->pre_norm);
        need = layout_attention(a, be, &b->self_att, d,
                                d->linear_attention ? QKV_ATTENTION_LINEAR : QKV_ATTENTION_SOFTMAX,
                                B, T, T, o);
        if (need > scratch) scratch = need;
        if (d->cross) {
            layout_sublayer(a, &b->cross, N, C, d->pre_norm);
            need = layout_attention(a, be, &b->cross_att, d, QKV_ATTENTION_SOFTMAX, B, T, Tm, o);
            if (need > scratch) scratch = need;
        }
        layout_sublayer(a, &b->ff, N, C, d->pre_norm);
        b->ffn.h_pre = arena_take(a, N * F), b->ffn.h = arena_take(a, N * F);
    }
    s->mean = arena_take(a, N), s->rstd = arena_take(a, N), s->out = arena_take(a, N * C);
    return scratch;
}

void head_layout(arena *a, const backend *be, float **logits, float **lse, float **loss,
                 stack_grad_work *work, float **scratch, size_t N, size_t Nw, int C, int F,
                 int V, size_t need)
{
    *logits = arena_take(a, N * V), *lse = arena_take(a, N), *loss = arena_take(a, N);
    work->dh = arena_take(a, Nw * C), work->ds = arena_take(a, Nw * C);
    work->din = arena_take(a, Nw * C);
    /* the FFN's dh (Nw, F), a sublayer's (Nw, C), the loss's partial bias gradients */
    size_t s = Nw * (size_t)(F > C ? F : C);
    if (s > need) need = s;
    if ((s = be->ops->cross_entropy_scratch_floats((int)N, V)) > need) need = s;
    *scratch = arena_take(a, need);
}

qkv_status core_layout(model_core *c, void (*layout)(void *model, arena *a), void *model,
                       const char *what, qkv_error *err)
{
    arena counter = {NULL, 0};
    layout(model, &counter);
    if (counter.used > c->arena_cap) {
        if (c->arena) c->mem->release(c->arena);
        c->arena = NULL, c->arena_cap = 0;
        if (!(c->arena = c->mem->alloc(counter.used * sizeof(float))))
            return qkv_fail(err, QKV_ERR_NOMEM, "out of %smemory: activations for %s need %zu "
                            "MiB%s%s", c->dev ? "device " : "", what, counter.used * 4 >> 20,
                            c->dev ? " on " : "", c->dev ? c->dev->dev->name : "");
        c->arena_cap = counter.used;
    }
    arena real = {c->arena, 0};
    layout(model, &real);
    return core_prepare(c, 0, err);
}

/* ---- the loss entry points ------------------------------------------------------------ */

qkv_status core_loss_begin(model_core *c, model_pass *pass, const qkv_loss_options *o,
                           param_walk walk, const void *cfg, void *grads, qkv_error *err)
{
    if (o->backward && precision_check_training(&c->prec, err)) return QKV_ERR_ARG;
    if (o->backward && !core_grads(c, walk, cfg, grads))
        return qkv_fail(err, QKV_ERR_NOMEM, "out of %smemory for gradients",
                        c->dev ? "device " : "");
    pass->first_example = o->first_example;
    return QKV_OK;
}

qkv_status core_loss_end(model_core *c, model_pass *pass, const qkv_loss_options *o,
                         const head_loss_args *h, void (*backward)(void *model, float p,
                                                                   uint64_t seed),
                         void *model, float p, double *loss_sum, int *tokens, qkv_error *err)
{
    const backend be = core_backend(c);
    double sum;
    int count;
    qkv_status st = head_loss(&be, h, &sum, &count, err);
    if (st) return st;
    if (loss_sum) *loss_sum = sum;
    if (tokens) *tokens = count;
    if (o->backward) {
        precision_touch(&c->prec); /* an optimizer step will follow */
        *pass = (model_pass){o->first_example, o->grads_done, o->grads_ctx};
        backward(model, p, o->dropout_seed);
        *pass = (model_pass){0, NULL, NULL};
    }
    return core_finish(c, err);
}
