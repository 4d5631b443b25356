/* SPDX-License-Identifier: MIT */
/* The key-value cache and work space of decoding (model.h's decode_state): one buffer for
 * every layer's keys and values, the encoder output's projections and one step's vectors. */
#include <stdlib.h>
#include <string.h>

#include "models/model.h"

/* The state's one buffer, in order: the caches, the staging of cross-attention keys, one
 * step's vectors, and its int arrays (as floats: one int each). */
enum { N_PARTS = 24 };

static void plan(size_t sizes[N_PARTS], const stack_dims *d, int cap, int T, int n_src, int Ts,
                 int V, kv_dtype kv_type)
{
    const size_t C = d->C, L = d->layers, R = cap, S = n_src;
    /* the caches in floats: a bf16 cache packs two values into each */
    const size_t per = kv_type == KV_BF16 ? 2 : 1;
    const size_t kv = d->linear_attention ? 0 : (L * R * T * C + per - 1) / per;
    const size_t cross = d->cross ? (L * S * Ts * C + per - 1) / per : 0;
    /* bf16: one layer's cross-attention keys (or values) in float32 before they are rounded */
    const size_t stage = d->cross && kv_type == KV_BF16 ? S * Ts * C : 0;
    const size_t parts[N_PARTS] = {kv, kv, cross, cross, stage, R * C, R * C, R * C, R * C,
                                   R * C, R * C, R * C, R, R, R * d->F, R * d->F,
                                   R * d->heads * (size_t)(T > Ts ? T : Ts), R * V,
                                   R, R, R, R, R, R * T};
    for (int i = 0; i < N_PARTS; i++) sizes[i] = parts[i];
}

size_t decode_state_floats(const stack_dims *d, int cap, int T, int n_src, int Ts, int V,
                           kv_dtype kv)
{
    size_t sizes[N_PARTS], total = 0;
    plan(sizes, d, cap, T, n_src, Ts, V, kv);
    for (int i = 0; i < N_PARTS; i++) total += sizes[i];
    return total;
}

qkv_status decode_state_init(decode_state *st, const backend *be, const stack_dims *d, int cap,
                             int T, int n_src, int Ts, int V, kv_dtype kv_type, qkv_error *err)
{
    memset(st, 0, sizeof *st);
    const size_t L = d->layers, R = cap;
    size_t sizes[N_PARTS], total = 0;
    plan(sizes, d, cap, T, n_src, Ts, V, kv_type);
    for (int i = 0; i < N_PARTS; i++) total += sizes[i];
    float *cache[5], *ints[6];
    float **ptrs[N_PARTS] = {&cache[0], &cache[1], &cache[2], &cache[3], &cache[4], &st->x,
                             &st->u, &st->q, &st->k, &st->v, &st->ctx, &st->s, &st->mean,
                             &st->rstd, &st->ffn.h_pre, &st->ffn.h, &st->P, &st->logits,
                             &ints[0], &ints[1], &ints[2], &ints[3], &ints[4], &ints[5]};
    st->mem = be->ops;
    st->buffer = st->mem->alloc(total * sizeof(float));
    st->self_len = malloc(R * sizeof *st->self_len);
    st->cross_len = malloc(R * sizeof *st->cross_len);
    if (!st->mem->host_memory) {
        st->logits_host = malloc((R * V > 0 ? R * V : 1) * sizeof *st->logits_host);
        st->ancestry_host = malloc(R * T * sizeof *st->ancestry_host);
    }
    if (!st->buffer || !st->self_len || !st->cross_len ||
        (!st->mem->host_memory && (!st->logits_host || !st->ancestry_host))) {
        const int device = !st->buffer && !st->mem->host_memory;
        decode_state_free(st);
        return qkv_fail(err, QKV_ERR_NOMEM, "out of %smemory for the decoding cache (%zu MiB)%s%s",
                        device ? "device " : "", total * 4 >> 20, device ? " on " : "",
                        device ? be->ops->name : "");
    }
    float *at = st->buffer;
    for (int i = 0; i < N_PARTS; i++) *ptrs[i] = at, at += sizes[i];
    st->self_k = cache[0], st->self_v = cache[1], st->cross_k = cache[2], st->cross_v = cache[3];
    st->kv_stage = sizes[4] ? cache[4] : NULL;
    st->tok_k = (int *)ints[0], st->row_k = (int *)ints[1], st->src_k = (int *)ints[2];
    st->self_len_k = (int *)ints[3], st->cross_len_k = (int *)ints[4];
    st->ancestry_k = (int *)ints[5];
    st->kv = kv_type;
    st->T = T, st->Ts = Ts, st->cap = cap, st->n_src = n_src;
    if (d->linear_attention) {
        const int hd = d->C / d->heads;
        st->sums = calloc(L * R, sizeof *st->sums);
        if (!st->sums) {
            decode_state_free(st);
            return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for a generation state");
        }
        st->n_sums = (int)(L * R);
        for (int i = 0; i < st->n_sums; i++) {
            qkv_status s = qkv_linear_attention_state_init(&st->sums[i], d->heads, hd, hd, err);
            if (s) return decode_state_free(st), s;
        }
    }
    return QKV_OK;
}

void decode_kv_project(const backend *be, const decode_state *st, void *cache, size_t at,
                       const float *x, const weight *W, const float *b, int N, int C)
{
    if (st->kv == KV_FP32) { /* straight into the cache, as before there was a choice */
        op_linear_forward(be, (float *)cache + at, x, W, b, N, C, C);
        return;
    }
    op_linear_forward(be, st->kv_stage, x, W, b, N, C, C);
    be->ops->kv_store(cache, st->kv, at, st->kv_stage, (size_t)N * C);
}

void decode_state_fill(const backend *be, const stack_dims *d, decode_state *st, int row, int n,
                       const stack_acts *a)
{
    const int C = d->C;
    for (int l = 0; l < d->layers; l++) {
        const qkv_mha_cache *c = &a->blocks[l].self_att.c;
        if (!d->linear_attention) {
            const size_t at = ((size_t)l * st->cap + row) * st->T * C;
            be->ops->kv_store(st->self_k, st->kv, at, c->k, (size_t)n * C);
            be->ops->kv_store(st->self_v, st->kv, at, c->v, (size_t)n * C);
        } else { /* absorb the keys and values into S, z (the outputs are the forward's) */
            qkv_linear_attention_state *S = &st->sums[l * st->cap + row];
            qkv_linear_attention_state_reset(S);
            for (int j = 0; j < n; j++)
                be->ops->linear_attention_step(st->ctx, S, c->q + (size_t)j * C,
                                               c->k + (size_t)j * C, c->v + (size_t)j * C);
        }
    }
}

void decode_state_free(decode_state *st)
{
    for (int i = 0; st->sums && i < st->n_sums; i++)
        qkv_linear_attention_state_free(&st->sums[i]);
    if (st->buffer) st->mem->release(st->buffer);
    free(st->sums), free(st->self_len), free(st->cross_len);
    free(st->logits_host), free(st->ancestry_host);
    memset(st, 0, sizeof *st);
}
