/* Greedy autoregressive decoding with a key-value cache (d2l 10.7.6, llama2.c's forward):
 * the encoder runs once; each decoder layer keeps the keys and values of every target
 * position so far, and the cross-attention's keys and values of the encoder output are
 * projected once. A step then costs O(t) attention work at position t instead of re-running
 * the whole prefix. The cache and the step (decode.h) serve beam search too: there a row is a
 * hypothesis, and row_src says which source's encoder output it reads.
 * With one row per sequence, a step is memory-bound: every weight of the decoder and of the
 * output projection is read once per token (108 MB at d_model 512, 6 layers, 10k words),
 * and the rest is small. linear_forward takes few rows as matrix-vector products that
 * stream each weight once (a GEMM would first copy it), and the attention over the cache is
 * cached_attention.c's, without GEMM calls. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "inference/cached_attention.h"
#include "inference/decode.h"

static qkv_status state_alloc(decode_state *st, const qkv_transformer_config *c, int B, int T,
                              int Ts, int n_src, qkv_error *err)
{
    const size_t C = c->d_model, L = c->dec_layers, Bz = B, S = n_src;
    size_t sizes[] = {L * Bz * T * C, L * Bz * T * C, L * S * Ts * C, L * S * Ts * C,
                      Bz * C, Bz * C, Bz * C, Bz * C, Bz * C, Bz * C, Bz * C, Bz, Bz,
                      Bz * c->ffn, Bz * c->ffn, Bz * c->heads * (size_t)(T > Ts ? T : Ts),
                      Bz * c->tgt_vocab};
    float **ptrs[] = {&st->self_k, &st->self_v, &st->cross_k, &st->cross_v, &st->x, &st->u,
                      &st->q, &st->k, &st->v, &st->ctx, &st->s, &st->mean, &st->rstd,
                      &st->h_pre, &st->h, &st->P, &st->logits};
    size_t total = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) total += sizes[i];
    st->buffer = malloc(total * sizeof(float));
    if (!st->buffer)
        return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for the decoding cache (%zu MiB)",
                        total * 4 >> 20);
    float *at = st->buffer;
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) *ptrs[i] = at, at += sizes[i];
    st->B = B, st->T = T, st->Ts = Ts, st->cap = B, st->n_src = n_src, st->row_src = NULL;
    st->slot = NULL;
    return QKV_OK;
}

/* x (B, C) <- x + Sublayer(...) with the residual/norm arrangement of the model. The
 * sublayer reads st->u (its input) and leaves its output in st->s. */
static const float *begin(const qkv_transformer_config *c, decode_state *st, const norm_w *n)
{
    if (!c->pre_norm) return st->x;
    qkv_layernorm_forward(st->u, st->mean, st->rstd, st->x, n->g, n->b, st->B, c->d_model,
                          c->ln_eps);
    return st->u;
}

static void end(const qkv_transformer_config *c, decode_state *st, const norm_w *n)
{
    const size_t NC = (size_t)st->B * c->d_model;
    for (size_t i = 0; i < NC; i++) st->x[i] += st->s[i];
    if (!c->pre_norm)
        qkv_layernorm_forward(st->x, st->mean, st->rstd, st->x, n->g, n->b, st->B, c->d_model,
                              c->ln_eps);
}

/* One query per row attends to m keys: of cache row src[b] (NULL: row b) when slot is NULL,
 * else position j of row b from cache row slot[b * stride + j]. K, V (rows, stride, C),
 * valid (rows) or NULL. */
static void attend(const qkv_transformer_config *c, decode_state *st, const float *K,
                   const float *V, int stride, int m, const int *valid, const int *src,
                   const int *slot)
{
    const int C = c->d_model, H = c->heads;
    cached_attention(st->ctx, st->P, st->q, K, V, (size_t)stride * C, st->B, H, C / H, m, src,
                     valid, slot, stride);
}

void decode_step(qkv_transformer *m, decode_state *st, const int *tok, int t,
                 const int *src_valid)
{
    const qkv_transformer_config *c = &m->cfg;
    const int B = st->B, C = c->d_model;
    const float *pos = m->w.tgt_positions ? m->w.tgt_positions : m->pos_table;
    const linear_mode lm = precision_mode(&m->prec, m->params, m->n_params);
    for (int b = 0; b < B; b++) {
        const float *e = m->w.tgt_embedding + (size_t)tok[b] * C;
        for (int i = 0; i < C; i++)
            st->x[(size_t)b * C + i] = e[i] * sqrtf((float)C) + pos[(size_t)t * C + i];
    }
    for (int l = 0; l < c->dec_layers; l++) {
        const decoder_block_w *w = &m->w.decoder[l];
        float *Ks = st->self_k + (size_t)l * st->cap * st->T * C;
        float *Vs = st->self_v + (size_t)l * st->cap * st->T * C;
        /* causal self-attention: append this position's key and value, attend to 0..t */
        const float *in = begin(c, st, &w->norm1);
        const qkv_mha_weights *a = &w->self_attention;
        linear_forward(&lm, st->q, in, a->W_q, a->b_q, B, C, C);
        linear_forward(&lm, st->k, in, a->W_k, a->b_k, B, C, C);
        linear_forward(&lm, st->v, in, a->W_v, a->b_v, B, C, C);
        for (int b = 0; b < B; b++) {
            memcpy(Ks + ((size_t)b * st->T + t) * C, st->k + (size_t)b * C, C * sizeof(float));
            memcpy(Vs + ((size_t)b * st->T + t) * C, st->v + (size_t)b * C, C * sizeof(float));
        }
        attend(c, st, Ks, Vs, st->T, t + 1, NULL, NULL, st->slot);
        linear_forward(&lm, st->s, st->ctx, a->W_o, a->b_o, B, C, C);
        end(c, st, &w->norm1);
        /* encoder-decoder attention over the cached projections of the encoder output */
        in = begin(c, st, &w->norm2);
        a = &w->cross_attention;
        linear_forward(&lm, st->q, in, a->W_q, a->b_q, B, C, C);
        attend(c, st, st->cross_k + (size_t)l * st->n_src * st->Ts * C,
               st->cross_v + (size_t)l * st->n_src * st->Ts * C, st->Ts, st->Ts, src_valid,
               st->row_src, NULL);
        linear_forward(&lm, st->s, st->ctx, a->W_o, a->b_o, B, C, C);
        end(c, st, &w->norm2);
        /* position-wise FFN */
        in = begin(c, st, &w->norm3);
        ffn_forward(&lm, st->s, st->h_pre, st->h, in, w->ffn.W1, w->ffn.b1, w->ffn.W2, w->ffn.b2,
                    B, C, c->ffn, c->act);
        end(c, st, &w->norm3);
    }
    const float *y = st->x;
    if (m->w.decoder_norm.g) {
        qkv_layernorm_forward(st->u, st->mean, st->rstd, st->x, m->w.decoder_norm.g,
                              m->w.decoder_norm.b, B, C, c->ln_eps);
        y = st->u;
    }
    linear_forward(&lm, st->logits, y, m->w.out_W, m->w.out_b, B, C, c->tgt_vocab);
}

qkv_status decode_begin(decode_state *st, qkv_transformer *m, const int *src,
                        const int *src_valid, int n_src, int Ts, int cap, int T, qkv_error *err)
{
    const qkv_transformer_config *c = &m->cfg;
    const int C = c->d_model;
    memset(st, 0, sizeof *st);
    /* at bf16, the weights' copy made current before anything reads it */
    qkv_status stt = precision_prepare(&m->prec, m->params, m->n_params, 1, err);
    if (!stt) stt = transformer_layout_acts(m, n_src, Ts, 1, err);
    if (!stt) stt = transformer_encode(m, src, src_valid, n_src, Ts, 0.0f, 0, err);
    if (!stt) stt = state_alloc(st, c, cap, T, Ts, n_src, err);
    if (stt) return stt;
    const linear_mode lm = precision_mode(&m->prec, m->params, m->n_params);
    for (int l = 0; l < c->dec_layers; l++) { /* K, V of the encoder output, once */
        const qkv_mha_weights *a = &m->w.decoder[l].cross_attention;
        linear_forward(&lm, st->cross_k + (size_t)l * n_src * Ts * C, m->acts.enc_out, a->W_k,
                       a->b_k, n_src * Ts, C, C);
        linear_forward(&lm, st->cross_v + (size_t)l * n_src * Ts * C, m->acts.enc_out, a->W_v,
                       a->b_v, n_src * Ts, C, C);
    }
    return QKV_OK;
}

void decode_end(decode_state *st)
{
    free(st->buffer);
    memset(st, 0, sizeof *st);
}

qkv_status qkv_transformer_greedy(qkv_transformer *m, const int *src, const int *src_valid,
                                  int B, int src_len, int max_len, int *out, int *out_len,
                                  qkv_error *err)
{
    const qkv_transformer_config *c = &m->cfg;
    const int V = c->tgt_vocab;
    if (max_len <= 0 || max_len > c->max_len)
        return qkv_fail(err, QKV_ERR_ARG, "max_len %d outside [1, %d] (the model's maximum "
                        "length)", max_len, c->max_len);
    for (int b = 0; b < B; b++)
        if (src_valid[b] < 0 || src_valid[b] > src_len)
            return qkv_fail(err, QKV_ERR_ARG, "source %d: valid length %d outside [0, %d]", b,
                            src_valid[b], src_len);
    decode_state st;
    qkv_status stt = decode_begin(&st, m, src, src_valid, B, src_len, B, max_len, err);
    if (stt) return stt;
    int *tok = malloc((size_t)B * sizeof *tok), *done = calloc((size_t)B, sizeof *done);
    if (!tok || !done) {
        free(tok), free(done), decode_end(&st);
        return qkv_fail(err, QKV_ERR_NOMEM, "out of memory");
    }
    int remaining = B;
    for (int b = 0; b < B; b++) tok[b] = QKV_BOS, out_len[b] = 0;
    for (int t = 0; t < max_len && remaining > 0; t++) {
        decode_step(m, &st, tok, t, src_valid);
        for (int b = 0; b < B; b++) {
            const float *z = st.logits + (size_t)b * V;
            int best = 0;
            for (int k = 1; k < V; k++)
                if (z[k] > z[best]) best = k;
            tok[b] = best;
            if (done[b]) continue;
            if (best == QKV_EOS) {
                done[b] = 1, remaining--;
                continue;
            }
            out[(size_t)b * max_len + out_len[b]++] = best;
        }
    }
    free(tok), free(done), decode_end(&st);
    return QKV_OK;
}
