/* SPDX-License-Identifier: MIT */
/* qkv/layers.h: the building blocks, each a forward and a backward over flat arrays: linear,
 * embedding, activations, dropout, norms, masked softmax, dot-product, flash, additive, multi-head
 * and linear attention, positions, the FFN, residual connections and the loss. Part of qkv.h,
 * which includes every part; its opening comment is the tour. */
#ifndef QKV_API_LAYERS_H
#define QKV_API_LAYERS_H

#include "qkv/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------
 * Linear, embedding, activations, dropout
 * ------------------------------------------------------------------------------------- */

/* y = x W^T + b.  x (N, in), W (out, in), b (out) or NULL, y (N, out). */
QKV_API
void qkv_linear_forward(float *y, const float *x, const float *W, const float *b,
                        int N, int in, int out);
/* dx += dy W;  dW += dy^T x;  db += sum_rows dy.  Any gradient may be NULL. */
QKV_API
void qkv_linear_backward(float *dx, float *dW, float *db, const float *dy, const float *x,
                         const float *W, int N, int in, int out);

/* The bf16 matrix product that the linear layers use at QKV_PRECISION_BF16, on its own (for
 * benchmarks and tests): row-major C (M, N) = op(A) op(B), as cblas_sgemm with alpha 1 and
 * beta 0, op(A) (M, K) and op(B) (K, N) rounded to bf16 (to nearest, ties to even) and every
 * sum kept in float32; op(X) = X^T when trans_x, the matrices dense (A stored (M, K), or
 * (K, M) transposed; B (K, N), or (N, K)). Its packing buffers live in a qkv_gemm_bf16, for
 * up to `threads` threads (0: qkv_get_threads()); create fails with QKV_ERR_ARG on a CPU
 * without AVX512-BF16 (qkv_bf16_supported). Run it from outside parallel regions. */
typedef struct qkv_gemm_bf16 qkv_gemm_bf16;
QKV_API
qkv_status qkv_gemm_bf16_create(qkv_gemm_bf16 **out, int threads, qkv_error *err);
QKV_API
void qkv_gemm_bf16_run(qkv_gemm_bf16 *g, int trans_a, int trans_b, int M, int N, int K,
                       const float *A, const float *B, float *C);
QKV_API
void qkv_gemm_bf16_free(qkv_gemm_bf16 *g);

/* y[i] = E[ids[i]].  ids (N), E (V, C), y (N, C).
 * Fails with QKV_ERR_ARG (naming the position) if an id is outside [0, V). */
QKV_API
qkv_status qkv_embedding_forward(float *y, const int *ids, const float *E, int N, int V, int C,
                                 qkv_error *err);
/* dE[ids[i]] += dy[i] (scatter-add: a repeated id receives every row). */
QKV_API
void qkv_embedding_backward(float *dE, const float *dy, const int *ids, int N, int C);

/* y = max(x, 0), elementwise over n values (y may alias x). */
QKV_API
void qkv_relu_forward(float *y, const float *x, size_t n);
/* dx += dy * [x > 0]. */
QKV_API
void qkv_relu_backward(float *dx, const float *dy, const float *x, size_t n);

/* y = x * Phi(x), the exact GELU (erf form, as torch.nn.GELU()); y may alias x. */
QKV_API
void qkv_gelu_forward(float *y, const float *x, size_t n);
/* dx += dy * (Phi(x) + x * phi(x)). */
QKV_API
void qkv_gelu_backward(float *dx, const float *dy, const float *x, size_t n);

/* y = x * sigmoid(x), SiLU or swish (Hendrycks & Gimpel 2016; Ramachandran et al. 2017): the
 * FFN activation of Marian / OPUS-MT models (torch.nn.SiLU()); y may alias x. */
QKV_API
void qkv_silu_forward(float *y, const float *x, size_t n);
/* dx += dy * sigmoid(x) (1 + x (1 - sigmoid(x))). */
QKV_API
void qkv_silu_backward(float *dx, const float *dy, const float *x, size_t n);

/* A dropout as the layers take it: rate p in [0, 1) (0: none), its masks drawn from the
 * counter-based stream seed. Element i of a tensor draws counter offset + i: a layer run on
 * a shard of a larger batch (data-parallel training) sets offset to the shard's first
 * element in the whole batch's tensor, so that its masks are the whole batch's. */
typedef struct {
    float p;
    uint64_t seed;
    uint64_t offset; /* 0 for a whole batch */
} qkv_dropout;

/* Inverted dropout: y[i] = x[i] * keep(i) / (1 - p), keep(i) = [u(seed, offset + i) >= p].
 * p in [0, 1); p == 0 copies. y may alias x. */
QKV_API
void qkv_dropout_forward(float *y, const float *x, size_t n, float p, uint64_t seed,
                         uint64_t offset);
/* dx += dy * keep(i) / (1 - p), the same mask recomputed from (seed, offset). */
QKV_API
void qkv_dropout_backward(float *dx, const float *dy, size_t n, float p, uint64_t seed,
                          uint64_t offset);

/* ---------------------------------------------------------------------------------------
 * Normalisation
 * ------------------------------------------------------------------------------------- */

/* LayerNorm's learned gain and bias, (C) each; also the type of their gradients. */
typedef struct {
    float *gamma, *beta;
} qkv_layernorm_weights;

/* LayerNorm over the last axis: y = (x - mean) * rstd * gamma + beta, rstd = 1/sqrt(var + eps)
 * (biased variance, as the paper's reference and PyTorch).  x, y (N, C); mean, rstd (N) are
 * saved for backward. */
QKV_API
void qkv_layernorm_forward(float *y, float *mean, float *rstd, const float *x,
                           const qkv_layernorm_weights *w, int N, int C, float eps);
/* dx and dw (dw, and either of its gradients, may be NULL) += the gradients given dy. */
QKV_API
void qkv_layernorm_backward(float *dx, qkv_layernorm_weights *dw, const float *dy,
                            const float *x, const float *mean, const float *rstd,
                            const qkv_layernorm_weights *w, int N, int C);

/* RMSNorm: y = x * rstd * g, rstd = 1/sqrt(mean(x^2) + eps).  x, y (N, C); rstd (N); g (C). */
QKV_API
void qkv_rmsnorm_forward(float *y, float *rstd, const float *x, const float *g, int N, int C,
                         float eps);
QKV_API
void qkv_rmsnorm_backward(float *dx, float *dg, const float *dy, const float *x,
                          const float *rstd, const float *g, int N, int C);

/* ---------------------------------------------------------------------------------------
 * Masked softmax
 * ------------------------------------------------------------------------------------- */

/* Which keys a query may see. All fields zero/NULL: every key.
 *   valid_lens  NULL, or per sequence (B values: query rows of sequence b see keys j < len[b]),
 *               or per query (B*n values, per_query = 1: row (b, i) sees keys j < len[b*n+i]);
 *   causal      query i sees keys j <= i + (m - n) (the last query sees every key, which is
 *               also how a chunk of new queries sees a cached prefix). */
typedef struct {
    const int *valid_lens;
    int per_query;
    int causal;
} qkv_mask;

/* P = softmax(S) over the last axis with masked positions given weight exactly 0; a row with
 * no visible key is all zeros (never NaN).  S, P (B, H, n, m); the mask is indexed by b and
 * applies to every head. P may alias S. */
QKV_API
void qkv_masked_softmax_forward(float *P, const float *S, int B, int H, int n, int m,
                                const qkv_mask *mask);
/* dS += P * (dP - rowsum(P * dP)).  Masked positions have P = 0, so they get no gradient. */
QKV_API
void qkv_masked_softmax_backward(float *dS, const float *dP, const float *P, int rows, int m);

/* ---------------------------------------------------------------------------------------
 * Scaled dot-product attention:  O = dropout(softmax(Q K^T / sqrt(d))) V
 * Tensors keep heads interleaved, (B, T, H, d), so the projections of multi-head attention
 * feed it without transposes; H = 1 gives the plain (B, n, d) layout.
 * ------------------------------------------------------------------------------------- */

/* The shape of an attention: B sequences, H heads, n queries over m keys, queries and keys
 * of width d, values of width v. */
typedef struct {
    int B, H, n, m, d, v;
} qkv_attention_shape;

/* What an attention attends with: queries Q (B, n, H, d), keys K (B, m, H, d) and values
 * V (B, m, H, v). */
typedef struct {
    const float *Q, *K, *V;
} qkv_attention_inputs;

/* The gradients of those inputs, accumulated (+=); each may be NULL (not needed). */
typedef struct {
    float *dQ, *dK, *dV;
} qkv_attention_grads;

/* x -> O (B, n, H, v).
 * P (B, H, n, m) receives the attention weights (after mask, before dropout) for backward
 * and for inspection.  Dropout on the weights when drop.p > 0, counter = flat index into P;
 * scratch (qkv_attention_scratch_floats) is needed only when drop.p > 0. */
QKV_API
void qkv_attention_forward(float *O, float *P, const qkv_attention_inputs *x,
                           const qkv_attention_shape *s, const qkv_mask *mask, qkv_dropout drop,
                           float *scratch);
/* Floats of scratch that qkv_attention_forward (with dropout) and _backward need. */
QKV_API
size_t qkv_attention_scratch_floats(const qkv_attention_shape *s);
/* dx += the gradients of O given dO; P and drop as in forward. */
QKV_API
void qkv_attention_backward(qkv_attention_grads *dx, const float *dO, const float *P,
                            const qkv_attention_inputs *x, const qkv_attention_shape *s,
                            qkv_dropout drop, float *scratch);

/* ---------------------------------------------------------------------------------------
 * Flash attention: the same O = dropout(softmax(Q K^T / sqrt(d))) V, exact, with no n x m
 * buffer (Dao et al. 2022, FlashAttention; FlashAttention-2's loop order). Keys are visited
 * in tiles with an online softmax (a running row max and sum); forward saves only the row
 * log-sum-exp L, and backward recomputes each tile of weights from Q, K and L, so memory is
 * linear in n and m. Layout, mask, dropout stream (counter = flat index into the (B, H, n, m)
 * weights) and "backward accumulates" are those of qkv_attention_*, whose results these
 * match up to float rounding. Faster than qkv_attention_* from about 256 keys on, and more so
 * with a causal mask (tiles no query sees are skipped). Results do not depend on the thread
 * count.
 * ------------------------------------------------------------------------------------- */

/* x -> O (B, n, H, v), L (B, H, n): L[b, h, i] = log sum_j exp(Q_i . K_j / sqrt(d)) over the
 * keys row i sees, -INFINITY (and O row 0) when it sees none. Dropout on the weights. */
QKV_API
void qkv_flash_attention_forward(float *O, float *L, const qkv_attention_inputs *x,
                                 const qkv_attention_shape *s, const qkv_mask *mask,
                                 qkv_dropout drop);
/* Floats of scratch backward needs: B H n (the row sums of dO * O). */
QKV_API
size_t qkv_flash_attention_scratch_floats(const qkv_attention_shape *s);
/* dx += the gradients of O given dO; O and L from forward, the other arguments as given to
 * it. */
QKV_API
void qkv_flash_attention_backward(qkv_attention_grads *dx, const float *dO, const float *O,
                                  const float *L, const qkv_attention_inputs *x,
                                  const qkv_attention_shape *s, const qkv_mask *mask,
                                  qkv_dropout drop, float *scratch);

/* ---------------------------------------------------------------------------------------
 * Additive attention (Bahdanau):  a(q, k) = w_v^T tanh(W_q q + W_k k)
 * ------------------------------------------------------------------------------------- */

typedef struct {
    float *W_q; /* (h, dq) */
    float *W_k; /* (h, dk) */
    float *w_v; /* (h)     */
} qkv_additive_weights;

/* B sequences, n queries of width dq over m keys of width dk, values of width v, a tanh
 * layer of width h. */
typedef struct {
    int B, n, m, dq, dk, v, h;
} qkv_additive_shape;

/* What forward saves for backward. */
typedef struct {
    float *q;  /* (B, n, h)    W_q q          */
    float *k;  /* (B, m, h)    W_k k          */
    float *F;  /* (B, n, m, h) tanh(q_i + k_j) */
    float *P;  /* (B, n, m)    attention weights, before dropout */
} qkv_additive_cache;

/* x = {Q (B, n, dq), K (B, m, dk), V (B, m, v)} -> O (B, n, v).  Dropout on the weights,
 * counter = flat index into P; scratch (qkv_additive_attention_scratch_floats) is needed only
 * when drop.p > 0. */
QKV_API
void qkv_additive_attention_forward(float *O, qkv_additive_cache *c,
                                    const qkv_attention_inputs *x, const qkv_additive_weights *w,
                                    const qkv_additive_shape *s, const qkv_mask *mask,
                                    qkv_dropout drop, float *scratch);
QKV_API
size_t qkv_additive_attention_scratch_floats(const qkv_additive_shape *s);
/* dx and dw (may be NULL) += the gradients given dO; the other arguments as in forward. */
QKV_API
void qkv_additive_attention_backward(qkv_attention_grads *dx, qkv_additive_weights *dw,
                                     const float *dO, const qkv_additive_cache *c,
                                     const qkv_attention_inputs *x,
                                     const qkv_additive_weights *w, const qkv_additive_shape *s,
                                     qkv_dropout drop, float *scratch);

/* ---------------------------------------------------------------------------------------
 * Multi-head attention:  MultiHead(Q, K, V) = Concat(head_1..head_H) W_o,
 *                        head_i = Attention(Q W_q^i, K W_k^i, V W_v^i)
 * ------------------------------------------------------------------------------------- */

typedef struct {
    int d_q;      /* query input (and output) features, d_model */
    int d_kv;     /* key/value input features (d_model for self-attention) */
    int heads;    /* H */
    int head_dim; /* p: each head sees p = d_model / H features in the paper */
    int bias;     /* 1: the four projections have biases */
} qkv_mha_config;

typedef struct {
    float *W_q, *b_q; /* (H*p, d_q),  (H*p) */
    float *W_k, *b_k; /* (H*p, d_kv), (H*p) */
    float *W_v, *b_v; /* (H*p, d_kv), (H*p) */
    float *W_o, *b_o; /* (d_q, H*p),  (d_q) */
} qkv_mha_weights;

/* Number of floats of the weights, and a view of them laid out in the order above in one
 * flat buffer (biases are NULL when cfg->bias is 0). */
QKV_API
size_t qkv_mha_weights_floats(const qkv_mha_config *cfg);
QKV_API
qkv_mha_weights qkv_mha_weights_view(float *base, const qkv_mha_config *cfg);

/* What forward saves for backward: projections, weights and the concatenated heads. */
typedef struct {
    float *q;   /* (B, n, H*p) */
    float *k;   /* (B, m, H*p) */
    float *v;   /* (B, m, H*p) */
    float *P;   /* (B, H, n, m) attention weights: for backward and to look at */
    float *ctx; /* (B, n, H*p) */
} qkv_mha_cache;

QKV_API
size_t qkv_mha_cache_floats(const qkv_mha_config *cfg, int B, int n, int m);
QKV_API
qkv_mha_cache qkv_mha_cache_view(float *base, const qkv_mha_config *cfg, int B, int n, int m);

/* The shape of the heads' attention over B sequences of n queries and m keys:
 * {B, cfg->heads, n, m, cfg->head_dim, cfg->head_dim}, what qkv_mha_forward/_backward take. */
QKV_API
qkv_attention_shape qkv_mha_shape(const qkv_mha_config *cfg, int B, int n, int m);

/* The queries x->Q (B, n, d_q) attend to the keys x->K and values x->V (B, m, d_kv) ->
 * y (B, n, d_q): self-attention passes one buffer three times, encoder-decoder attention the
 * encoder's output as K and V. s = qkv_mha_shape(cfg, B, n, m). Dropout on the attention
 * weights as in qkv_attention_forward; scratch (qkv_mha_scratch_floats, shared with
 * backward) is needed only when drop.p > 0. */
QKV_API
void qkv_mha_forward(float *y, qkv_mha_cache *c, const qkv_attention_inputs *x,
                     const qkv_mha_weights *w, const qkv_mha_config *cfg,
                     const qkv_attention_shape *s, const qkv_mask *mask, qkv_dropout drop,
                     float *scratch);
QKV_API
size_t qkv_mha_scratch_floats(const qkv_mha_config *cfg, int B, int n, int m);
/* dx and dw (may be NULL) += the gradients given dy. dx's buffers may be one and the same
 * (self-attention: the three gradients add up). */
QKV_API
void qkv_mha_backward(qkv_attention_grads *dx, qkv_mha_weights *dw, const float *dy,
                      const qkv_mha_cache *c, const qkv_attention_inputs *x,
                      const qkv_mha_weights *w, const qkv_mha_config *cfg,
                      const qkv_attention_shape *s, qkv_dropout drop, float *scratch);

/* ---------------------------------------------------------------------------------------
 * Linear attention (Katharopoulos et al. 2020, "Transformers are RNNs"):
 *     O_i = phi(Q_i)^T S / (phi(Q_i)^T z + eps),  S = sum_j phi(K_j) V_j^T,  z = sum_j phi(K_j)
 * with phi(x) = elu(x) + 1 (> 0) in place of the softmax kernel, so the sums over keys are
 * taken once for all queries: O(N) time and memory, S (d, v) and z (d) per (batch, head).
 * Causal (query i sees keys j <= i + (m - n), as qkv_mask), S and z are prefix sums: a scan
 * forward, and a backward that never forms an n x m matrix (the paper's algorithm 1: a
 * forward sweep for dQ, a reverse sweep for dK, dV). The same recurrence, one token at a
 * time from a state, is the generation step. Layout, argument order and "backward
 * accumulates" as qkv_attention_*; there is no dropout (there are no weights to drop).
 * eps = QKV_LINEAR_ATTENTION_EPS keeps a query that sees no key (valid length 0) finite:
 * its output is 0, as for a fully masked row of softmax attention.
 * ------------------------------------------------------------------------------------- */

#define QKV_LINEAR_ATTENTION_EPS 1e-6f

/* x -> O (B, n, H, v).
 * valid_lens: NULL, or B values: keys j >= valid_lens[b] are left out of sequence b's sums
 * (clamped to [0, m]). causal: 1 for the causal form. Nothing is saved for backward, which
 * recomputes the sums from Q, K, V. scratch: qkv_linear_attention_scratch_floats floats. */
QKV_API
void qkv_linear_attention_forward(float *O, const qkv_attention_inputs *x,
                                  const qkv_attention_shape *s, const int *valid_lens,
                                  int causal, float *scratch);
/* Floats of scratch forward and backward need, linear in n and m:
 * B H (n (v + 1) + d v + 2 d) causal, B H (2 (n + m) d + n (v + 2) + 2 d v + 2 d) not. */
QKV_API
size_t qkv_linear_attention_scratch_floats(const qkv_attention_shape *s, int causal);
/* dx += the gradients of O given dO; arguments as in forward. Keys j >= valid_lens[b] get no
 * gradient. */
QKV_API
void qkv_linear_attention_backward(qkv_attention_grads *dx, const float *dO,
                                   const qkv_attention_inputs *x, const qkv_attention_shape *s,
                                   const int *valid_lens, int causal, float *scratch);

/* The recurrent form (paper, eq. 18-20) for generation, one sequence: per head the sums of
 * every token so far. */
typedef struct {
    int H, d, v;
    int64_t t; /* tokens absorbed since init or reset */
    float *S;  /* owned: (H, d, v) sum_j phi(k_j) v_j^T */
    float *z;  /* owned: (H, d)    sum_j phi(k_j)       */
    float *phi; /* owned workspace: phi(k), phi(q) of one head (2 d) */
} qkv_linear_attention_state;

/* An empty state (t = 0); fails with QKV_ERR_ARG unless H, d, v > 0. */
QKV_API
qkv_status qkv_linear_attention_state_init(qkv_linear_attention_state *s, int H, int d, int v,
                                           qkv_error *err);
/* Back to empty, for a new sequence. */
QKV_API
void qkv_linear_attention_state_reset(qkv_linear_attention_state *s);
/* Frees and zeroes (freeing twice is harmless). */
QKV_API
void qkv_linear_attention_state_free(qkv_linear_attention_state *s);
/* One token, q, k (H, d), v (H, v) -> o (H, v), in O(H d v) whatever the position:
 * S += phi(k) v^T, z += phi(k), then o = S^T phi(q) / (phi(q)^T z + eps). After t steps o is
 * row t of the causal forward over those tokens. o must not alias the inputs. */
QKV_API
void qkv_linear_attention_step(float *o, qkv_linear_attention_state *s, const float *q,
                               const float *k, const float *v);

/* ---------------------------------------------------------------------------------------
 * Positional encoding
 * ------------------------------------------------------------------------------------- */

/* The sinusoidal table, P (T, C): P[i, 2j] = sin(i / 10000^(2j/C)), P[i, 2j+1] = cos(same). */
QKV_API
void qkv_sinusoidal_table(float *P, int T, int C);
/* The same frequencies laid out [sin | cos] as Marian and Hugging Face's MarianMT do: with
 * S = ceil(C/2), P[i, j] = sin(i / 10000^(2j/C)) for j < S, P[i, S + j] = cos(same). */
QKV_API
void qkv_sinusoidal_table_halves(float *P, int T, int C);
/* fairseq's table (M2M100, NLLB: modeling_m2m_100.py's get_embedding): with h = C/2 and
 * w_j = exp(-j ln(10000) / (h - 1)), row i holds position i + 2 (fairseq counts positions from
 * its padding index 1, plus 1): P[i, j] = sin((i + 2) w_j), P[i, h + j] = cos((i + 2) w_j)
 * for j < h; an odd C's last column is 0. Computed in float32 as torch computes it. */
QKV_API
void qkv_sinusoidal_table_fairseq(float *P, int T, int C);
/* y[b, t] = x[b, t] * scale + P[pos0 + t].  x, y (B, T, C); P (>= pos0 + T, C).  scale is
 * sqrt(d_model) when x are token embeddings (paper, section 3.4), else 1.  y may alias x. */
QKV_API
void qkv_positional_forward(float *y, const float *x, const float *P, int B, int T, int C,
                            int pos0, float scale);
/* dx += dy * scale;  dP[pos0 + t] += sum_b dy[b, t] (learned positions; NULL for sinusoidal). */
QKV_API
void qkv_positional_backward(float *dx, float *dP, const float *dy, int B, int T, int C,
                             int pos0, float scale);

/* ---------------------------------------------------------------------------------------
 * Position-wise feed-forward network:  FFN(x) = act(x W_1^T + b_1) W_2^T + b_2
 * ------------------------------------------------------------------------------------- */

typedef enum { QKV_ACT_RELU = 0, QKV_ACT_GELU = 1, QKV_ACT_SILU = 2 } qkv_activation;

/* "relu", "gelu" or "silu" ("unknown" outside the enum); and back, QKV_ERR_ARG naming the
 * choices otherwise (core.h, "Names of the library's enums"). */
QKV_API
const char *qkv_activation_name(qkv_activation a);
QKV_API
qkv_status qkv_activation_parse(qkv_activation *a, const char *name, qkv_error *err);

typedef struct {
    int C;              /* input and output features, d_model */
    int F;              /* hidden features */
    qkv_activation act; /* act in the equation above */
} qkv_ffn_config;

typedef struct {
    float *W1, *b1; /* (F, C), (F) */
    float *W2, *b2; /* (C, F), (C); either bias may be NULL */
} qkv_ffn_weights;

/* What forward saves for backward: the hidden layer before and after the activation. */
typedef struct {
    float *h_pre, *h; /* (N, F) each */
} qkv_ffn_cache;

/* x (N, C) -> y (N, C). */
QKV_API
void qkv_ffn_forward(float *y, qkv_ffn_cache *c, const float *x, const qkv_ffn_weights *w,
                     const qkv_ffn_config *cfg, int N);
/* dx and dw += the gradients given dy (dw, and any of its gradients, may be NULL); scratch:
 * N*F floats. */
QKV_API
void qkv_ffn_backward(float *dx, qkv_ffn_weights *dw, const float *dy, const qkv_ffn_cache *c,
                      const float *x, const qkv_ffn_weights *w, const qkv_ffn_config *cfg, int N,
                      float *scratch);

/* ---------------------------------------------------------------------------------------
 * Residual connections
 * ------------------------------------------------------------------------------------- */

/* y = x + dropout(s)  (the pre-norm form: x + Sublayer(LN(x)) with s = Sublayer(LN(x))). */
QKV_API
void qkv_residual_forward(float *y, const float *x, const float *s, size_t n, qkv_dropout drop);
/* dx += dy;  ds += dropout'(dy). */
QKV_API
void qkv_residual_backward(float *dx, float *ds, const float *dy, size_t n, qkv_dropout drop);

/* What AddNorm's forward saves for backward. */
typedef struct {
    float *z;           /* (N, C) x + dropout(s), LayerNorm's input */
    float *mean, *rstd; /* (N) */
} qkv_addnorm_cache;

/* AddNorm (post-norm, as in the paper): y = LayerNorm(dropout(s) + x).  x, s, y (N, C). */
QKV_API
void qkv_addnorm_forward(float *y, qkv_addnorm_cache *c, const float *x, const float *s,
                         const qkv_layernorm_weights *w, int N, int C, float eps,
                         qkv_dropout drop);
/* dx, ds and dw (may be NULL) += the gradients given dy; scratch: N*C floats. */
QKV_API
void qkv_addnorm_backward(float *dx, float *ds, qkv_layernorm_weights *dw, const float *dy,
                          const qkv_addnorm_cache *c, const qkv_layernorm_weights *w, int N,
                          int C, qkv_dropout drop, float *scratch);

/* ---------------------------------------------------------------------------------------
 * Softmax cross-entropy
 * ------------------------------------------------------------------------------------- */

/* Per-row loss of logits (N, V) against targets (N); rows whose target is ignore_index
 * (the padding id) get loss 0 and no gradient.  With label smoothing eps the target
 * distribution is (1 - eps) one-hot + eps / V (as torch.nn.CrossEntropyLoss).
 * loss (N) and lse (N, logsumexp, saved for backward) are written; returns the number of
 * counted rows and stores their summed loss in *sum (may be NULL).
 * Fails (returns -1, err filled) if a counted target is outside [0, V). */
QKV_API
int qkv_cross_entropy_forward(float *loss, float *lse, double *sum, const float *logits,
                              const int *targets, int N, int V, int ignore_index,
                              float label_smoothing, qkv_error *err);
/* dlogits = scale * (softmax(logits) - target distribution) for counted rows, 0 for ignored
 * ones (written, not accumulated; dlogits may alias logits).  scale is dL/d(loss per row),
 * 1/count for the mean. */
QKV_API
void qkv_cross_entropy_backward(float *dlogits, const float *logits, const float *lse,
                                const int *targets, int N, int V, int ignore_index,
                                float label_smoothing, float scale);

#ifdef __cplusplus
}
#endif

#endif /* QKV_API_LAYERS_H */
