/* SPDX-License-Identifier: MIT */
/* Finite-difference checks of every backward: for a loss L = sum(out * r) with random r,
 * the analytic gradient of each input and parameter must match central differences
 * (step TU_FD_STEP, tolerance TU_FD_TOL relative to the tensor's largest gradient). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#define CHECK(name, x, n, g, ctx, fn) \
    tu_gradcheck(name, x, n, g, fn, ctx, TU_FD_STEP, TU_FD_TOL, 48)

/* ---- linear ---------------------------------------------------------------------------- */
typedef struct { int N, in, out; float *x, *W, *b, *y, *r; } linear_ctx;
static double linear_loss(void *p)
{
    linear_ctx *c = p;
    qkv_linear_forward(c->y, c->x, c->W, c->b, c->N, c->in, c->out);
    return tu_dot(c->y, c->r, (size_t)c->N * c->out);
}
static void test_linear(void **state)
{
    (void)state;
    linear_ctx c = {.N = 5, .in = 7, .out = 3};
    c.x = tu_rand(35, 1), c.W = tu_rand(21, 2), c.b = tu_rand(3, 3), c.y = tu_zeros(15),
    c.r = tu_rand(15, 4);
    float *dx = tu_zeros(35), *dW = tu_zeros(21), *db = tu_zeros(3);
    linear_loss(&c);
    qkv_linear_backward(dx, dW, db, c.r, c.x, c.W, c.N, c.in, c.out);
    CHECK("linear dx", c.x, 35, dx, &c, linear_loss);
    CHECK("linear dW", c.W, 21, dW, &c, linear_loss);
    CHECK("linear db", c.b, 3, db, &c, linear_loss);
    free(c.x), free(c.W), free(c.b), free(c.y), free(c.r), free(dx), free(dW), free(db);
}

/* ---- embedding ------------------------------------------------------------------------- */
typedef struct { int ids[6]; float *E, *y, *r; } embedding_ctx;
static double embedding_loss(void *p)
{
    embedding_ctx *c = p;
    assert_int_equal(qkv_embedding_forward(c->y, c->ids, c->E, 6, 5, 4, NULL), QKV_OK);
    return tu_dot(c->y, c->r, 24);
}
static void test_embedding(void **state)
{
    (void)state;
    embedding_ctx c = {{3, 0, 3, 4, 1, 3}, tu_rand(20, 5), tu_zeros(24), tu_rand(24, 6)};
    float *dE = tu_zeros(20);
    embedding_loss(&c);
    qkv_embedding_backward(dE, c.r, c.ids, 6, 4);
    CHECK("embedding dE", c.E, 20, dE, &c, embedding_loss);
    for (int k = 0; k < 4; k++) assert_true(dE[2 * 4 + k] == 0.0f); /* id 2 never used */
    free(c.E), free(c.y), free(c.r), free(dE);
}

/* ---- activations and dropout ----------------------------------------------------------- */
typedef struct { int kind; size_t n; float *x, *y, *r; } unary_ctx;
static double unary_loss(void *p)
{
    unary_ctx *c = p;
    if (c->kind == 0) qkv_relu_forward(c->y, c->x, c->n);
    if (c->kind == 1) qkv_gelu_forward(c->y, c->x, c->n);
    if (c->kind == 2) qkv_dropout_forward(c->y, c->x, c->n, 0.3f, 99, 7);
    return tu_dot(c->y, c->r, c->n);
}
static void test_unary(void **state)
{
    (void)state;
    const char *names[] = {"relu dx", "gelu dx", "dropout dx"};
    for (int kind = 0; kind < 3; kind++) {
        unary_ctx c = {kind, 64, tu_rand(64, 7), tu_zeros(64), tu_rand(64, 8)};
        for (size_t i = 0; i < c.n; i++) /* keep ReLU's kink out of reach of the step */
            if (fabsf(c.x[i]) < 0.05f) c.x[i] += 0.1f;
        float *dx = tu_zeros(64);
        unary_loss(&c);
        if (kind == 0) qkv_relu_backward(dx, c.r, c.x, c.n);
        if (kind == 1) qkv_gelu_backward(dx, c.r, c.x, c.n);
        if (kind == 2) qkv_dropout_backward(dx, c.r, c.n, 0.3f, 99, 7);
        CHECK(names[kind], c.x, c.n, dx, &c, unary_loss);
        free(c.x), free(c.y), free(c.r), free(dx);
    }
}

/* ---- LayerNorm and RMSNorm ------------------------------------------------------------- */
typedef struct { int rms; int N, C; float *x, *g, *b, *y, *mean, *rstd, *r; } norm_ctx;
static double norm_loss(void *p)
{
    norm_ctx *c = p;
    if (c->rms)
        qkv_rmsnorm_forward(c->y, c->rstd, c->x, c->g, c->N, c->C, 1e-5f);
    else
        qkv_layernorm_forward(c->y, c->mean, c->rstd, c->x, &(qkv_layernorm_weights){c->g, c->b},
                              c->N, c->C, 1e-5f);
    return tu_dot(c->y, c->r, (size_t)c->N * c->C);
}
static void test_norms(void **state)
{
    (void)state;
    for (int rms = 0; rms < 2; rms++) {
        norm_ctx c = {rms, 4, 9, tu_rand(36, 9), tu_rand(9, 10), tu_rand(9, 11), tu_zeros(36),
                      tu_zeros(4), tu_zeros(4), tu_rand(36, 12)};
        float *dx = tu_zeros(36), *dg = tu_zeros(9), *db = tu_zeros(9);
        norm_loss(&c);
        if (rms)
            qkv_rmsnorm_backward(dx, dg, c.r, c.x, c.rstd, c.g, c.N, c.C);
        else
            qkv_layernorm_backward(dx, &(qkv_layernorm_weights){dg, db}, c.r, c.x, c.mean, c.rstd,
                                   &(qkv_layernorm_weights){c.g, c.b}, c.N, c.C);
        CHECK(rms ? "rmsnorm dx" : "layernorm dx", c.x, 36, dx, &c, norm_loss);
        CHECK(rms ? "rmsnorm dg" : "layernorm dgamma", c.g, 9, dg, &c, norm_loss);
        if (!rms) CHECK("layernorm dbeta", c.b, 9, db, &c, norm_loss);
        free(c.x), free(c.g), free(c.b), free(c.y), free(c.mean), free(c.rstd), free(c.r);
        free(dx), free(dg), free(db);
    }
}

/* ---- masked softmax -------------------------------------------------------------------- */
typedef struct { float *S, *P, *r; qkv_mask mask; } softmax_ctx;
static double softmax_loss(void *p)
{
    softmax_ctx *c = p;
    qkv_masked_softmax_forward(c->P, c->S, 2, 2, 3, 5, &c->mask);
    return tu_dot(c->P, c->r, 60);
}
static void test_masked_softmax(void **state)
{
    (void)state;
    int lens[6] = {2, 5, 0, 4, 1, 3}; /* per query, one row fully masked */
    softmax_ctx c = {tu_rand(60, 13), tu_zeros(60), tu_rand(60, 14), {lens, 1, 1}};
    float *dS = tu_zeros(60);
    softmax_loss(&c);
    qkv_masked_softmax_backward(dS, c.r, c.P, 12, 5);
    CHECK("masked softmax dS", c.S, 60, dS, &c, softmax_loss);
    free(c.S), free(c.P), free(c.r), free(dS);
}

/* ---- cross-entropy --------------------------------------------------------------------- */
typedef struct { float *z, *loss, *lse; int t[5]; float eps; } ce_ctx;
static double ce_loss(void *p)
{
    ce_ctx *c = p;
    double sum = 0.0;
    int count = qkv_cross_entropy_forward(c->loss, c->lse, &sum, c->z, c->t, 5, 7, 1, c->eps,
                                          NULL);
    assert_int_equal(count, 3);
    return sum / count;
}
static void test_cross_entropy(void **state)
{
    (void)state;
    for (int smooth = 0; smooth < 2; smooth++) {
        ce_ctx c = {tu_rand(35, 15), tu_zeros(5), tu_zeros(5), {4, 1, 0, 6, 1}, smooth * 0.1f};
        for (int i = 0; i < 35; i++) c.z[i] *= 3.0f;
        float *dz = tu_zeros(35);
        ce_loss(&c);
        qkv_cross_entropy_backward(dz, c.z, c.lse, c.t, 5, 7, 1, c.eps, 1.0f / 3.0f);
        CHECK(smooth ? "cross-entropy (smoothed) dlogits" : "cross-entropy dlogits", c.z, 35, dz,
              &c, ce_loss);
        for (int k = 0; k < 7; k++) assert_true(dz[1 * 7 + k] == 0.0f && dz[4 * 7 + k] == 0.0f);
        free(c.z), free(c.loss), free(c.lse), free(dz);
    }
}

/* ---- scaled dot-product attention ------------------------------------------------------ */
enum { AB = 2, AH = 2, AN = 3, AM = 4, AD = 5, AV = 3 };
typedef struct { float *Q, *K, *V, *O, *P, *r, *scratch; qkv_mask mask; float p; } att_ctx;
static const qkv_attention_shape att_shape = {AB, AH, AN, AM, AD, AV};
static double att_loss(void *p)
{
    att_ctx *c = p;
    qkv_attention_forward(c->O, c->P, &(qkv_attention_inputs){c->Q, c->K, c->V}, &att_shape,
                          &c->mask, (qkv_dropout){c->p, 42, 0}, c->scratch);
    return tu_dot(c->O, c->r, AB * AN * AH * AV);
}
static void test_attention(void **state)
{
    (void)state;
    int lens[AB] = {3, 4};
    for (int drop = 0; drop < 2; drop++) {
        att_ctx c = {tu_rand(AB * AN * AH * AD, 16), tu_rand(AB * AM * AH * AD, 17),
                     tu_rand(AB * AM * AH * AV, 18), tu_zeros(AB * AN * AH * AV),
                     tu_zeros(AB * AH * AN * AM), tu_rand(AB * AN * AH * AV, 19),
                     tu_zeros(qkv_attention_scratch_floats(&att_shape)), {lens, 0, 1},
                     drop * 0.25f};
        float *dQ = tu_zeros(AB * AN * AH * AD), *dK = tu_zeros(AB * AM * AH * AD),
              *dV = tu_zeros(AB * AM * AH * AV);
        att_loss(&c);
        qkv_attention_backward(&(qkv_attention_grads){dQ, dK, dV}, c.r, c.P,
                               &(qkv_attention_inputs){c.Q, c.K, c.V}, &att_shape,
                               (qkv_dropout){c.p, 42, 0}, c.scratch);
        CHECK("attention dQ", c.Q, AB * AN * AH * AD, dQ, &c, att_loss);
        CHECK("attention dK", c.K, AB * AM * AH * AD, dK, &c, att_loss);
        CHECK("attention dV", c.V, AB * AM * AH * AV, dV, &c, att_loss);
        free(c.Q), free(c.K), free(c.V), free(c.O), free(c.P), free(c.r), free(c.scratch);
        free(dQ), free(dK), free(dV);
    }
}

/* ---- additive attention ---------------------------------------------------------------- */
enum { DB = 2, DN = 3, DM = 4, DQ = 5, DK = 2, DVV = 3, DHID = 6 };
typedef struct {
    float *Q, *K, *V, *O, *r, *scratch;
    qkv_additive_weights w;
    qkv_additive_cache cache;
    qkv_mask mask;
} add_ctx;
static const qkv_additive_shape add_shape = {DB, DN, DM, DQ, DK, DVV, DHID};
static double add_loss(void *p)
{
    add_ctx *c = p;
    qkv_additive_attention_forward(c->O, &c->cache, &(qkv_attention_inputs){c->Q, c->K, c->V},
                                   &c->w, &add_shape, &c->mask, (qkv_dropout){0.2f, 5, 0},
                                   c->scratch);
    return tu_dot(c->O, c->r, DB * DN * DVV);
}
static void test_additive_attention(void **state)
{
    (void)state;
    int lens[DB] = {2, 4};
    add_ctx c = {tu_rand(DB * DN * DQ, 20), tu_rand(DB * DM * DK, 21), tu_rand(DB * DM * DVV, 22),
                 tu_zeros(DB * DN * DVV), tu_rand(DB * DN * DVV, 23),
                 tu_zeros(qkv_additive_attention_scratch_floats(&add_shape)),
                 {tu_rand(DHID * DQ, 24), tu_rand(DHID * DK, 25), tu_rand(DHID, 26)},
                 {tu_zeros(DB * DN * DHID), tu_zeros(DB * DM * DHID),
                  tu_zeros(DB * DN * DM * DHID), tu_zeros(DB * DN * DM)},
                 {lens, 0, 0}};
    qkv_additive_weights dw = {tu_zeros(DHID * DQ), tu_zeros(DHID * DK), tu_zeros(DHID)};
    float *dQ = tu_zeros(DB * DN * DQ), *dK = tu_zeros(DB * DM * DK), *dV = tu_zeros(DB * DM * DVV);
    add_loss(&c);
    qkv_additive_attention_backward(&(qkv_attention_grads){dQ, dK, dV}, &dw, c.r, &c.cache,
                                    &(qkv_attention_inputs){c.Q, c.K, c.V}, &c.w, &add_shape,
                                    (qkv_dropout){0.2f, 5, 0}, c.scratch);
    CHECK("additive dQ", c.Q, DB * DN * DQ, dQ, &c, add_loss);
    CHECK("additive dK", c.K, DB * DM * DK, dK, &c, add_loss);
    CHECK("additive dV", c.V, DB * DM * DVV, dV, &c, add_loss);
    CHECK("additive dW_q", c.w.W_q, DHID * DQ, dw.W_q, &c, add_loss);
    CHECK("additive dW_k", c.w.W_k, DHID * DK, dw.W_k, &c, add_loss);
    CHECK("additive dw_v", c.w.w_v, DHID, dw.w_v, &c, add_loss);
    free(c.Q), free(c.K), free(c.V), free(c.O), free(c.r), free(c.scratch);
    free(c.w.W_q), free(c.w.W_k), free(c.w.w_v), free(dw.W_q), free(dw.W_k), free(dw.w_v);
    free(c.cache.q), free(c.cache.k), free(c.cache.F), free(c.cache.P), free(dQ), free(dK), free(dV);
}

/* ---- multi-head attention -------------------------------------------------------------- */
typedef struct {
    qkv_mha_config cfg;
    int B, n, m;
    float *xq, *xkv, *y, *r, *wbuf, *cbuf, *scratch;
    qkv_mha_weights w;
    qkv_mha_cache cache;
    qkv_mask mask;
} mha_ctx;
static double mha_loss(void *p)
{
    mha_ctx *c = p;
    const qkv_attention_shape s = qkv_mha_shape(&c->cfg, c->B, c->n, c->m);
    qkv_mha_forward(c->y, &c->cache, &(qkv_attention_inputs){c->xq, c->xkv, c->xkv}, &c->w,
                    &c->cfg, &s, &c->mask, (qkv_dropout){0.1f, 77, 0}, c->scratch);
    return tu_dot(c->y, c->r, (size_t)c->B * c->n * c->cfg.d_q);
}
static void test_mha(void **state)
{
    (void)state;
    int lens[2] = {4, 2};
    for (int cross = 0; cross < 2; cross++) {
        mha_ctx c = {.cfg = {6, cross ? 4 : 6, 2, 3, 1}, .B = 2, .n = 3, .m = cross ? 5 : 3};
        size_t nw = qkv_mha_weights_floats(&c.cfg), nq = (size_t)c.B * c.n * c.cfg.d_q,
               nkv = (size_t)c.B * c.m * c.cfg.d_kv;
        c.xq = tu_rand(nq, 30), c.xkv = cross ? tu_rand(nkv, 31) : c.xq;
        c.y = tu_zeros(nq), c.r = tu_rand(nq, 32), c.wbuf = tu_rand(nw, 33);
        c.cbuf = tu_zeros(qkv_mha_cache_floats(&c.cfg, c.B, c.n, c.m));
        c.scratch = tu_zeros(qkv_mha_scratch_floats(&c.cfg, c.B, c.n, c.m));
        c.w = qkv_mha_weights_view(c.wbuf, &c.cfg);
        c.cache = qkv_mha_cache_view(c.cbuf, &c.cfg, c.B, c.n, c.m);
        c.mask = (qkv_mask){cross ? lens : NULL, 0, cross ? 0 : 1};
        float *dwbuf = tu_zeros(nw), *dxq = tu_zeros(nq), *dxkv = cross ? tu_zeros(nkv) : dxq;
        qkv_mha_weights dw = qkv_mha_weights_view(dwbuf, &c.cfg);
        mha_loss(&c);
        const qkv_attention_shape s = qkv_mha_shape(&c.cfg, c.B, c.n, c.m);
        qkv_mha_backward(&(qkv_attention_grads){dxq, dxkv, dxkv}, &dw, c.r, &c.cache,
                         &(qkv_attention_inputs){c.xq, c.xkv, c.xkv}, &c.w, &c.cfg, &s,
                         (qkv_dropout){0.1f, 77, 0}, c.scratch);
        CHECK("mha dxq", c.xq, nq, dxq, &c, mha_loss);
        if (cross) CHECK("mha dxkv", c.xkv, nkv, dxkv, &c, mha_loss);
        CHECK("mha dweights", c.wbuf, nw, dwbuf, &c, mha_loss);
        if (cross) free(c.xkv), free(dxkv);
        free(c.xq), free(c.y), free(c.r), free(c.wbuf), free(c.cbuf), free(c.scratch);
        free(dwbuf), free(dxq);
    }
}

/* ---- positional encoding, FFN, residual, AddNorm ---------------------------------------- */
typedef struct { float *x, *P, *y, *r; } pos_ctx;
static double pos_loss(void *p)
{
    pos_ctx *c = p;
    qkv_positional_forward(c->y, c->x, c->P, 2, 3, 4, 2, 2.0f);
    return tu_dot(c->y, c->r, 24);
}
static void test_positional(void **state)
{
    (void)state;
    pos_ctx c = {tu_rand(24, 40), tu_rand(6 * 4, 41), tu_zeros(24), tu_rand(24, 42)};
    float *dx = tu_zeros(24), *dP = tu_zeros(24);
    pos_loss(&c);
    qkv_positional_backward(dx, dP, c.r, 2, 3, 4, 2, 2.0f);
    CHECK("positional dx", c.x, 24, dx, &c, pos_loss);
    CHECK("positional dP", c.P, 24, dP, &c, pos_loss);
    for (int k = 0; k < 8; k++) assert_true(dP[k] == 0.0f); /* positions 0, 1 unused */
    free(c.x), free(c.P), free(c.y), free(c.r), free(dx), free(dP);
}

typedef struct { qkv_activation act; float *x, *W1, *b1, *W2, *b2, *hp, *h, *y, *r; } ffn_ctx;
static double ffn_loss(void *p)
{
    ffn_ctx *c = p;
    const qkv_ffn_config cfg = {4, 6, c->act};
    qkv_ffn_forward(c->y, &(qkv_ffn_cache){c->hp, c->h}, c->x,
                    &(qkv_ffn_weights){c->W1, c->b1, c->W2, c->b2}, &cfg, 3);
    return tu_dot(c->y, c->r, 12);
}
static void test_ffn(void **state)
{
    (void)state;
    for (int act = 0; act < 2; act++) {
        ffn_ctx c = {(qkv_activation)act, tu_rand(12, 50), tu_rand(24, 51), tu_rand(6, 52),
                     tu_rand(24, 53), tu_rand(4, 54), tu_zeros(18), tu_zeros(18), tu_zeros(12),
                     tu_rand(12, 55)};
        float *dx = tu_zeros(12), *dW1 = tu_zeros(24), *db1 = tu_zeros(6), *dW2 = tu_zeros(24),
              *db2 = tu_zeros(4), *scratch = tu_zeros(18);
        /* Keep every pre-activation clear of ReLU's kink by more than a step can move it. */
        for (uint64_t seed = 100;; seed++) {
            ffn_loss(&c);
            float nearest = INFINITY;
            for (int e = 0; e < 18; e++) nearest = fminf(nearest, fabsf(c.hp[e]));
            if (act || nearest > 4 * TU_FD_STEP) break;
            qkv_fill_uniform(c.b1, 6, -1.0f, 1.0f, seed);
        }
        const qkv_ffn_config cfg = {4, 6, c.act};
        qkv_ffn_backward(dx, &(qkv_ffn_weights){dW1, db1, dW2, db2}, c.r,
                         &(qkv_ffn_cache){c.hp, c.h}, c.x,
                         &(qkv_ffn_weights){c.W1, c.b1, c.W2, c.b2}, &cfg, 3, scratch);
        CHECK("ffn dx", c.x, 12, dx, &c, ffn_loss);
        CHECK("ffn dW1", c.W1, 24, dW1, &c, ffn_loss);
        CHECK("ffn db1", c.b1, 6, db1, &c, ffn_loss);
        CHECK("ffn dW2", c.W2, 24, dW2, &c, ffn_loss);
        CHECK("ffn db2", c.b2, 4, db2, &c, ffn_loss);
        free(c.x), free(c.W1), free(c.b1), free(c.W2), free(c.b2), free(c.hp), free(c.h);
        free(c.y), free(c.r), free(dx), free(dW1), free(db1), free(dW2), free(db2), free(scratch);
    }
}

typedef struct { float *x, *s, *g, *b, *y, *z, *mean, *rstd, *r; } addnorm_ctx;
static double addnorm_loss(void *p)
{
    addnorm_ctx *c = p;
    qkv_addnorm_forward(c->y, &(qkv_addnorm_cache){c->z, c->mean, c->rstd}, c->x, c->s,
                        &(qkv_layernorm_weights){c->g, c->b}, 3, 5, 1e-5f, (qkv_dropout){0.3f, 8, 0});
    return tu_dot(c->y, c->r, 15);
}
static double residual_loss(void *p)
{
    addnorm_ctx *c = p;
    qkv_residual_forward(c->y, c->x, c->s, 15, (qkv_dropout){0.3f, 8, 0});
    return tu_dot(c->y, c->r, 15);
}
static void test_addnorm_and_residual(void **state)
{
    (void)state;
    addnorm_ctx c = {tu_rand(15, 60), tu_rand(15, 61), tu_rand(5, 62), tu_rand(5, 63),
                     tu_zeros(15), tu_zeros(15), tu_zeros(3), tu_zeros(3), tu_rand(15, 64)};
    float *dx = tu_zeros(15), *ds = tu_zeros(15), *dg = tu_zeros(5), *db = tu_zeros(5),
          *scratch = tu_zeros(15);
    addnorm_loss(&c);
    qkv_addnorm_backward(dx, ds, &(qkv_layernorm_weights){dg, db}, c.r,
                         &(qkv_addnorm_cache){c.z, c.mean, c.rstd},
                         &(qkv_layernorm_weights){c.g, c.b}, 3, 5, (qkv_dropout){0.3f, 8, 0},
                         scratch);
    CHECK("addnorm dx", c.x, 15, dx, &c, addnorm_loss);
    CHECK("addnorm ds", c.s, 15, ds, &c, addnorm_loss);
    CHECK("addnorm dgamma", c.g, 5, dg, &c, addnorm_loss);
    CHECK("addnorm dbeta", c.b, 5, db, &c, addnorm_loss);
    memset(dx, 0, 15 * sizeof *dx), memset(ds, 0, 15 * sizeof *ds);
    residual_loss(&c);
    qkv_residual_backward(dx, ds, c.r, 15, (qkv_dropout){0.3f, 8, 0});
    CHECK("residual dx", c.x, 15, dx, &c, residual_loss);
    CHECK("residual ds", c.s, 15, ds, &c, residual_loss);
    free(c.x), free(c.s), free(c.g), free(c.b), free(c.y), free(c.z), free(c.mean), free(c.rstd);
    free(c.r), free(dx), free(ds), free(dg), free(db), free(scratch);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_linear),          cmocka_unit_test(test_embedding),
        cmocka_unit_test(test_unary),           cmocka_unit_test(test_norms),
        cmocka_unit_test(test_masked_softmax),  cmocka_unit_test(test_cross_entropy),
        cmocka_unit_test(test_attention),       cmocka_unit_test(test_additive_attention),
        cmocka_unit_test(test_mha),             cmocka_unit_test(test_positional),
        cmocka_unit_test(test_ffn),             cmocka_unit_test(test_addnorm_and_residual),
    };
    return cmocka_run_group_tests_name("gradcheck", tests, NULL, NULL);
}
