/* SPDX-License-Identifier: MIT */
/* A Transformer stack (model.h): the embedding, the blocks and the final norm, forward,
 * backward and one decoding step. A block's sublayers, in order:
 *   self-attention   causal in a decoder or language model, over the source lengths in an
 *                    encoder (paper, section 3.2.3)
 *   cross-attention  decoder blocks: queries from the decoder, keys and values from the
 *                    encoder's output
 *   FFN              position-wise (eq. 2)
 * each wrapped in the residual connection of sublayer.c. Dropout sites of block l: the
 * residual of sublayer i draws stream (stack, l, 1 + i), the weights of attention j stream
 * (stack, l, 1 + n_sublayers + j); the embedding's is (stack, 0, 0). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "models/sublayer.h"

static int sublayers(const stack_dims *d) { return d->cross ? 3 : 2; }

static uint64_t residual_seed(const stack_pass *k, int l, int i)
{
    return dropout_site_seed(k->seed, k->d->id, l, 1 + i);
}

/* The dropout counters of a shard continue the whole batch's: a tensor of `per_sequence`
 * values per sequence starts at sequence k->first. */
static uint64_t first_counter(const stack_pass *k, size_t per_sequence)
{
    return k->first * per_sequence;
}

/* Attention j's weights (B, H, T, m): m = T for self-attention, the memory's Tm for cross. */
static qkv_dropout weights_dropout(const stack_pass *k, int l, int j)
{
    const int m = j == 0 ? k->T : k->Tm;
    qkv_dropout drop = {k->p, dropout_site_seed(k->seed, k->d->id, l, 1 + sublayers(k->d) + j),
                        first_counter(k, (size_t)k->d->heads * k->T * m)};
    return drop;
}

static sublayer_ctx sublayer_of(const stack_pass *k, int l, int i)
{
    sublayer_ctx s = {k->d, (size_t)k->B * k->T,
                      {k->p, residual_seed(k, l, i), first_counter(k, (size_t)k->T * k->d->C)},
                      k->scratch};
    return s;
}

/* ---- the embedding: X = dropout(E[ids] s + P), s = sqrt(C) (paper, sections 3.4 and 3.5)
 * or 1 (models trained without the scale) -------------------------------------------------- */

static const float *positions_of(const stack_w *w, const float *pos_table)
{
    return w->positions ? w->positions : pos_table;
}

static qkv_status embed_forward(const backend *be, const stack_pass *k, float *x, const stack_w *w,
                                const float *pos_table, const int *ids, qkv_error *err)
{
    const int C = k->d->C, B = k->B, T = k->T;
    qkv_status st = be->ops->embedding_forward(be, x, ids, &w->lookup, B * T, k->d->vocab, C, err);
    if (st) return st;
    be->ops->positional_forward(x, x, positions_of(w, pos_table), B, T, C, 0, k->d->embed_scale);
    be->ops->dropout_forward(x, x, (size_t)B * T * C, k->p,
                             dropout_site_seed(k->seed, k->d->id, 0, 0),
                             first_counter(k, (size_t)T * C));
    return QKV_OK;
}

/* dx is the gradient of dropout(E sqrt(C) + P): undo the dropout, then the scale. */
static void embed_backward(const backend *be, const stack_pass *k, stack_w *g, const float *dx,
                           const int *ids)
{
    const int C = k->d->C, B = k->B, T = k->T;
    const size_t n = (size_t)B * T * C;
    float *e = k->scratch;
    be->ops->zero(e, n);
    be->ops->dropout_backward(e, dx, n, k->p, dropout_site_seed(k->seed, k->d->id, 0, 0),
                              first_counter(k, (size_t)T * C));
    if (g->positions) be->ops->positional_backward(NULL, g->positions, e, B, T, C, 0, 1.0f);
    be->ops->scale(e, n, k->d->embed_scale);
    be->ops->embedding_backward(g->embedding, e, ids, B * T, C);
}

/* ---- one block ----------------------------------------------------------------------------- */

/* x (B*T, C) -> a->ff.out */
static void block_forward(const backend *be, const stack_pass *k, block_acts *a,
                          const block_w *w, int l, const float *x)
{
    const stack_dims *d = k->d;
    const qkv_mha_config mc = stack_mha_config(d);
    const int B = k->B, T = k->T, N = B * T;
    const qkv_attention_shape self_shape = qkv_mha_shape(&mc, B, T, T);
    sublayer_ctx s = sublayer_of(k, l, 0);
    const float *in = sublayer_in(be, &s, &a->self, x, &w->self_norm);
    const qkv_attention_inputs self_in = {in, in, in};
    mha_forward(be, a->self.s, &a->self_att, &self_in, &w->self, &mc, &self_shape, k->self_mask,
                weights_dropout(k, l, 0), k->scratch);
    sublayer_out(be, &s, &a->self, x, &w->self_norm);
    x = a->self.out;
    if (d->cross) { /* queries from the decoder, keys and values from the memory */
        const qkv_attention_shape cross_shape = qkv_mha_shape(&mc, B, T, k->Tm);
        s = sublayer_of(k, l, 1);
        in = sublayer_in(be, &s, &a->cross, x, &w->cross_norm);
        const qkv_attention_inputs cross_in = {in, k->mem, k->mem};
        mha_forward(be, a->cross.s, &a->cross_att, &cross_in, &w->cross, &mc, &cross_shape,
                    k->mem_mask, weights_dropout(k, l, 1), k->scratch);
        sublayer_out(be, &s, &a->cross, x, &w->cross_norm);
        x = a->cross.out;
    }
    s = sublayer_of(k, l, sublayers(d) - 1);
    in = sublayer_in(be, &s, &a->ff, x, &w->ffn_norm);
    const qkv_ffn_config fc = stack_ffn_config(d);
    ffn_forward(be, a->ff.s, &a->ffn, in, &w->ffn, &fc, N);
    sublayer_out(be, &s, &a->ff, x, &w->ffn_norm);
}

/* The sublayers in reverse. work->dh holds d(block output) on entry and d(x) on return;
 * d_mem += the memory's gradient (cross-attention's keys and values). */
static void block_backward(const backend *be, const stack_pass *k, const block_acts *a,
                           const block_w *w, block_w *dw, int l, const float *x, float *d_mem,
                           const stack_grad_work *work)
{
    const stack_dims *d = k->d;
    const qkv_mha_config mc = stack_mha_config(d);
    const int B = k->B, T = k->T, N = B * T;
    float *dh = work->dh, *ds = work->ds, *din = work->din;
    const float *x_ff = d->cross ? a->cross.out : a->self.out; /* the FFN sublayer's input */

    sublayer_ctx s = sublayer_of(k, l, sublayers(d) - 1);
    sublayer_out_backward(be, &s, &a->ff, dh, ds, din, &w->ffn_norm, &dw->ffn_norm);
    const qkv_ffn_config fc = stack_ffn_config(d);
    ffn_backward(be, din, &dw->ffn.f, ds, &a->ffn, d->pre_norm ? a->ff.u : x_ff, &w->ffn.f, &fc,
                 N, k->scratch);
    sublayer_in_backward(be, &s, &a->ff, dh, din, x_ff, &w->ffn_norm, &dw->ffn_norm);

    if (d->cross) {
        s = sublayer_of(k, l, 1);
        sublayer_out_backward(be, &s, &a->cross, dh, ds, din, &w->cross_norm, &dw->cross_norm);
        const float *q_in = d->pre_norm ? a->cross.u : a->self.out;
        const qkv_attention_inputs cross_in = {q_in, k->mem, k->mem};
        const qkv_attention_shape cross_shape = qkv_mha_shape(&mc, B, T, k->Tm);
        qkv_attention_grads d_cross = {din, d_mem, d_mem};
        mha_backward(be, &d_cross, &dw->cross.f, ds, &a->cross_att, &cross_in, &w->cross.f, &mc,
                     &cross_shape, k->mem_mask, weights_dropout(k, l, 1), k->scratch);
        sublayer_in_backward(be, &s, &a->cross, dh, din, a->self.out, &w->cross_norm,
                             &dw->cross_norm);
    }

    s = sublayer_of(k, l, 0);
    sublayer_out_backward(be, &s, &a->self, dh, ds, din, &w->self_norm, &dw->self_norm);
    const float *in = d->pre_norm ? a->self.u : x;
    const qkv_attention_inputs self_in = {in, in, in};
    const qkv_attention_shape self_shape = qkv_mha_shape(&mc, B, T, T);
    qkv_attention_grads d_self = {din, din, din};
    mha_backward(be, &d_self, &dw->self.f, ds, &a->self_att, &self_in, &w->self.f, &mc,
                 &self_shape, k->self_mask, weights_dropout(k, l, 0), k->scratch);
    sublayer_in_backward(be, &s, &a->self, dh, din, x, &w->self_norm, &dw->self_norm);
}

/* ---- the stack ------------------------------------------------------------------------------ */

qkv_status stack_forward(const backend *be, const stack_pass *k, stack_acts *a, const stack_w *w,
                         const float *pos_table, const int *ids, qkv_error *err)
{
    const stack_dims *d = k->d;
    const int N = k->B * k->T;
    qkv_status st = embed_forward(be, k, a->x, w, pos_table, ids, err);
    if (st) return st;
    const float *h = a->x;
    for (int l = 0; l < d->layers; l++) {
        block_forward(be, k, &a->blocks[l], &w->blocks[l], l, h);
        h = a->blocks[l].ff.out;
    }
    if (w->norm.gamma)
        be->ops->layernorm_forward(a->out, a->mean, a->rstd, h, &w->norm, N, d->C, d->ln_eps);
    else if (a->out != h)
        be->ops->copy(a->out, h, (size_t)N * d->C);
    return QKV_OK;
}

void stack_backward(const backend *be, const stack_pass *k, const stack_acts *a, const stack_w *w,
                    stack_w *g, const int *ids, const float *dout, float *d_mem,
                    const stack_grad_work *work)
{
    const stack_dims *d = k->d;
    const int N = k->B * k->T, L = d->layers;
    const float *last = L ? a->blocks[L - 1].ff.out : a->x;
    be->ops->zero(work->dh, (size_t)N * d->C);
    if (w->norm.gamma)
        be->ops->layernorm_backward(work->dh, &g->norm, dout, last, a->mean, a->rstd, &w->norm, N,
                                    d->C);
    else
        be->ops->copy(work->dh, dout, (size_t)N * d->C);
    for (int l = L - 1; l >= 0; l--) {
        block_backward(be, k, &a->blocks[l], &w->blocks[l], &g->blocks[l], l,
                       l ? a->blocks[l - 1].ff.out : a->x, d_mem, work);
        if (k->grads_done) k->grads_done(k->grads_ctx); /* block l's gradients are final */
    }
    embed_backward(be, k, g, work->dh, ids);
    if (k->grads_done) k->grads_done(k->grads_ctx);
}

/* ---- one decoding step ----------------------------------------------------------------------
 * A step costs O(t) attention work at position t instead of re-running the prefix (d2l
 * 10.7.6, llama2.c's forward): each block appends the new position's key and value to its
 * cache and attends over the cache (or, with linear attention, advances the recurrent state
 * S = sum phi(k) v^T, z = sum phi(k): Katharopoulos et al. 2020, eq. 18-20, O(1) in t). With
 * one row per sequence a step is bound by reading the weights once; the linear layers take
 * few rows as matrix-vector products (the backend's linear_rows), and the attention over the
 * cache has no GEMM. */

static void self_attention_step(const backend *be, const stack_dims *d, decode_state *st,
                                const decoder_rows *r, const mha_w *a, const float *in, int l)
{
    const int B = r->n, C = d->C, H = d->heads;
    op_linear_forward(be, st->q, in, &a->W_q, a->f.b_q, B, C, C);
    op_linear_forward(be, st->k, in, &a->W_k, a->f.b_k, B, C, C);
    op_linear_forward(be, st->v, in, &a->W_v, a->f.b_v, B, C, C);
    if (d->linear_attention) {
        for (int b = 0; b < B; b++) {
            const size_t x = (size_t)b * C;
            be->ops->linear_attention_step(st->ctx + x, &st->sums[l * st->cap + r->row[b]],
                                           st->q + x, st->k + x, st->v + x);
        }
    } else { /* append this position's key and value, then attend to positions 0 .. pos */
        const size_t layer = (size_t)l * st->cap * st->T * C;
        kv_view kv = {kv_at(st, st->self_k, layer), kv_at(st, st->self_v, layer), st->kv,
                      (size_t)st->T * C, r->ancestry ? KV_ANCESTRY : KV_ROWS, st->row_k,
                      st->ancestry_k, st->ancestry_ld, st->self_len_k};
        int m = 1;
        for (int b = 0; b < B; b++) {
            const size_t at = layer + ((size_t)r->row[b] * st->T + r->pos[b]) * C;
            be->ops->kv_store(st->self_k, st->kv, at, st->k + (size_t)b * C, C);
            be->ops->kv_store(st->self_v, st->kv, at, st->v + (size_t)b * C, C);
            if (st->self_len[b] > m) m = st->self_len[b];
        }
        be->ops->cached_attention(st->ctx, st->P, st->q, &kv, B, H, C / H, m);
    }
    op_linear_forward(be, st->s, st->ctx, &a->W_o, a->f.b_o, B, C, C);
}

/* over the encoder output's keys and values, projected once (decode_state.cross_k): row b
 * sees the src_valid[src[b]] keys of its own source */
static void cross_attention_step(const backend *be, const stack_dims *d, decode_state *st,
                                 const decoder_rows *r, const mha_w *a, const float *in, int l)
{
    const int B = r->n, C = d->C, H = d->heads;
    const size_t layer = (size_t)l * st->n_src * st->Ts * C;
    int m = 1;
    for (int b = 0; b < B; b++) m = st->cross_len[b] > m ? st->cross_len[b] : m;
    const kv_view kv = {kv_at(st, st->cross_k, layer), kv_at(st, st->cross_v, layer), st->kv,
                        (size_t)st->Ts * C, KV_ROWS, st->src_k, NULL, 0, st->cross_len_k};
    op_linear_forward(be, st->q, in, &a->W_q, a->f.b_q, B, C, C);
    be->ops->cached_attention(st->ctx, st->P, st->q, &kv, B, H, C / H, m);
    op_linear_forward(be, st->s, st->ctx, &a->W_o, a->f.b_o, B, C, C);
}

static void block_step(const backend *be, const stack_dims *d, const block_w *w,
                       decode_state *st, const decoder_rows *r, int l)
{
    const float *in = sublayer_step_in(be, d, st, r->n, &w->self_norm);
    self_attention_step(be, d, st, r, &w->self, in, l);
    sublayer_step_out(be, d, st, r->n, &w->self_norm);
    if (d->cross) {
        in = sublayer_step_in(be, d, st, r->n, &w->cross_norm);
        cross_attention_step(be, d, st, r, &w->cross, in, l);
        sublayer_step_out(be, d, st, r->n, &w->cross_norm);
    }
    in = sublayer_step_in(be, d, st, r->n, &w->ffn_norm);
    const qkv_ffn_config fc = stack_ffn_config(d);
    ffn_forward(be, st->s, &st->ffn, in, &w->ffn, &fc, r->n);
    sublayer_step_out(be, d, st, r->n, &w->ffn_norm);
}

/* The step's int arrays up where the kernels read them: the tokens, cache rows, sources, the
 * keys each row sees, and the ancestry packed at stride T (row b's positions 0 .. pos[b]). */
static int stage_step(const backend *be, const stack_dims *d, decode_state *st,
                      const decoder_rows *r, const int *tok, const int *src_valid)
{
    const int B = r->n;
    const size_t ints = (size_t)B * sizeof(int);
    for (int b = 0; b < B; b++) {
        st->self_len[b] = r->pos[b] + 1;
        if (d->cross) st->cross_len[b] = src_valid[r->src[b]];
    }
    if (be->ops->upload(st->tok_k, tok, ints) || be->ops->upload(st->row_k, r->row, ints) ||
        be->ops->upload(st->self_len_k, st->self_len, ints) ||
        (d->cross && (be->ops->upload(st->src_k, r->src, ints) ||
                      be->ops->upload(st->cross_len_k, st->cross_len, ints))))
        return -1;
    if (!r->ancestry || d->linear_attention) return 0;
    int ld = 1; /* the longest row's positions */
    for (int b = 0; b < B; b++) ld = r->pos[b] + 1 > ld ? r->pos[b] + 1 : ld;
    /* packed where the host can write, then up in one transfer */
    int *packed = st->ancestry_host ? st->ancestry_host : st->ancestry_k;
    for (int b = 0; b < B; b++)
        memcpy(packed + (size_t)b * ld, r->ancestry + (size_t)b * r->ld,
               (size_t)(r->pos[b] + 1) * sizeof(int));
    st->ancestry_ld = ld;
    if (packed == st->ancestry_k) return 0;
    return be->ops->upload(st->ancestry_k, packed, (size_t)B * ld * sizeof(int));
}

int stack_step(const backend *be, const stack_dims *d, const stack_w *w, const float *pos_table,
               decode_state *st, const decoder_rows *r, const int *tok, const int *src_valid)
{
    const int C = d->C, B = r->n;
    if (stage_step(be, d, st, r, tok, src_valid)) return -1;
    /* the tokens are the model's own choices, or checked by the caller */
    be->ops->embedding_forward(be, st->x, st->tok_k, &w->lookup, B, d->vocab, C, NULL);
    for (int b = 0, b1; b < B; b = b1) { /* runs of rows at one position share a call */
        for (b1 = b + 1; b1 < B && r->pos[b1] == r->pos[b]; b1++) continue;
        be->ops->positional_forward(st->x + (size_t)b * C, st->x + (size_t)b * C,
                                    positions_of(w, pos_table), b1 - b, 1, C, r->pos[b],
                                    d->embed_scale);
    }
    for (int l = 0; l < d->layers; l++) block_step(be, d, &w->blocks[l], st, r, l);
    return 0;
}

/* ---- the output layer ----------------------------------------------------------------------- */

void head_forward(const backend *be, float *logits, const float *y, const weight *W,
                  const float *b, int N, int C, int V)
{
    op_linear_forward(be, logits, y, W, b, N, C, V);
}

/* The last block's output after the final norm, when the stack has one. */
static const float *head_in(const backend *be, const stack_dims *d, const stack_w *w,
                            decode_state *st, int n)
{
    if (!w->norm.gamma) return st->x;
    be->ops->layernorm_forward(st->u, st->mean, st->rstd, st->x, &w->norm, n, d->C, d->ln_eps);
    return st->u;
}

void head_step(const backend *be, const stack_dims *d, const stack_w *w, const weight *W,
               const float *b, decode_state *st, int n, float *logits, int V)
{
    head_forward(be, logits, head_in(be, d, w, st, n), W, b, n, d->C, V);
}

void head_step_best(const backend *be, const stack_dims *d, const stack_w *w, const weight *W,
                    const float *b, decode_state *st, int n, const best_request *rq, int V)
{
    be->ops->linear_best(be, rq, head_in(be, d, w, st, n), W, b, n, d->C, V, st->logits);
}

qkv_status head_loss(const backend *be, const head_loss_args *h, double *sum, int *count,
                     qkv_error *err)
{
    float *loss = h->loss, *lse = h->lse, *logits = h->logits, *db = h->db, *scratch = h->scratch;
    const int *targets = h->targets;
    const int N = h->N, V = h->V, backward = h->backward;
    const float label_smoothing = h->label_smoothing, grad_scale = h->grad_scale;
    /* with backward, the loss pass also turns the logits into their gradient, and sums it
     * into the output bias's */
    *sum = 0.0;
    *count = backward ? be->ops->cross_entropy_fused(loss, lse, sum, logits, db, targets, N, V,
                                                     QKV_PAD, label_smoothing, grad_scale,
                                                     scratch, err)
                      : be->ops->cross_entropy_forward(loss, lse, sum, logits, targets, N, V,
                                                       QKV_PAD, label_smoothing, err);
    if (*count < 0) return err ? err->code : QKV_ERR_ARG;
    if (!isfinite(*sum)) { /* a device that failed gives no loss: its failure, first */
        qkv_status st = be->ops->finish(be, err);
        return st ? st : qkv_fail(err, QKV_ERR_NUMERIC, "the loss is not finite (%g)", *sum);
    }
    return QKV_OK;
}
