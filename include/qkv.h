/*
 * qkv.h — the Transformer of "Attention Is All You Need", in C.
 *
 * A short tour.
 *   Every building block is a pair of plain functions, X_forward and X_backward, over flat
 *   row-major float arrays. Arguments come in a fixed order: outputs, saved activations,
 *   inputs, weights, then dimensions. What travels together comes as one small struct, so no
 *   function takes more than ten arguments: an attention's shape (qkv_attention_shape), its
 *   Q, K, V and their gradients (qkv_attention_inputs, qkv_attention_grads), a dropout
 *   {p, seed} (qkv_dropout), a layer's weights (also the type of their gradients) and what
 *   its forward saves for backward (a *_cache). Shapes are given in the comment above each
 *   function, with the letters
 *       B batch   n queries   m keys/values   T sequence length   H heads
 *       d key/query dim   v value dim   C channels (d_model)   F hidden dim   V vocabulary
 *   A forward saves what its backward needs in buffers the caller owns; a backward
 *   ACCUMULATES (+=) into gradient buffers, which the caller zeroes once per step, so a
 *   tensor used twice (self-attention: queries = keys = values) simply gets both
 *   contributions. A NULL gradient pointer means "not needed".
 *   Nothing here allocates on the hot path, keeps global state or calls exit(); functions
 *   that can fail return a qkv_status and fill a qkv_error with a readable message.
 *
 * Threads: kernels parallelise with OpenMP; GEMMs go to OpenBLAS built with OpenMP, which
 * runs single-threaded inside our parallel regions, so the two never oversubscribe the
 * cores. qkv_set_threads() sets both.
 */
#ifndef QKV_H
#define QKV_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define QKV_VERSION "0.1.0"

/* Marks what libqkv.so exports: every function declared in this header, and nothing else (the
 * library is compiled with -fvisibility=hidden and linked with a version script that keeps
 * only qkv_* symbols; see the Makefile). */
#if defined(__GNUC__) || defined(__clang__)
#define QKV_API __attribute__((visibility("default")))
#else
#define QKV_API
#endif

/* ---------------------------------------------------------------------------------------
 * Errors
 * ------------------------------------------------------------------------------------- */

typedef enum {
    QKV_OK = 0,
    QKV_ERR_NOMEM,   /* an allocation failed */
    QKV_ERR_ARG,     /* an argument is out of its documented range */
    QKV_ERR_IO,      /* a file could not be opened, read or written */
    QKV_ERR_FORMAT,  /* a file is malformed: truncated, hostile, wrong dtype or shape */
    QKV_ERR_NUMERIC  /* NaN or Inf where a finite number is required */
} qkv_status;

/* The reason for the last failure of a call that took this struct. */
typedef struct {
    qkv_status code;
    char msg[512];
} qkv_error;

/* A constant name for a status code ("ok", "out of memory", ...). */
QKV_API
const char *qkv_status_name(qkv_status s);

/* Threads used by kernels and by OpenBLAS (n <= 0: leave the runtime's default). */
QKV_API
void qkv_set_threads(int n);
QKV_API
int qkv_get_threads(void);
/* QKV_OK if the OpenBLAS loaded is its OpenMP build, the one qkv needs: its GEMMs share qkv's
 * OpenMP threads and run single-threaded inside qkv's parallel regions. With its pthreads build
 * two thread pools compete for the cores and results change with the thread count; with its
 * sequential build every GEMM runs on one core. For those, QKV_ERR_ARG and a message that names
 * the build and the file loaded, and how to get the OpenMP one. The qkv command checks this at
 * start-up and refuses to run without it. */
QKV_API
qkv_status qkv_blas_check(qkv_error *err);

/* Seconds on a monotonic clock, for timing: only the difference of two readings means
 * anything (it does not jump when the wall clock is set). */
QKV_API
double qkv_now_s(void);

/* ---------------------------------------------------------------------------------------
 * Files
 * ------------------------------------------------------------------------------------- */

/* The whole file at path (NULL: standard input, "stdin" in messages) in *text, with a NUL
 * after its *len bytes (len may be NULL; the text may hold NUL bytes of its own); *text is
 * the caller's to free, and NULL on failure. A file of more than max_bytes (SIZE_MAX: no
 * limit) fails with QKV_ERR_FORMAT: a regular file before anything is read, anything else (a
 * pipe, a device that may never end) once max_bytes + 1 bytes have come. A directory, or a
 * file that cannot be opened or read: QKV_ERR_IO. */
QKV_API
qkv_status qkv_read_file(const char *path, size_t max_bytes, char **text, size_t *len,
                         qkv_error *err);

/* ---------------------------------------------------------------------------------------
 * Random numbers
 * A counter-based generator: the value at (seed, i) depends on nothing else, so dropout is
 * reproducible whatever the thread count, and its mask is recomputed in backward, not stored.
 * ------------------------------------------------------------------------------------- */

/* 32 random bits for counter i of stream seed. */
QKV_API
uint32_t qkv_random_u32(uint64_t seed, uint64_t i);
/* A uniform float in [0, 1) for counter i of stream seed. */
QKV_API
float qkv_random_uniform(uint64_t seed, uint64_t i);
/* A standard normal float (Box-Muller) for counter i of stream seed. */
QKV_API
float qkv_random_normal(uint64_t seed, uint64_t i);
/* Fill x[0..n) with uniform floats in [lo, hi) from stream seed. */
QKV_API
void qkv_fill_uniform(float *x, size_t n, float lo, float hi, uint64_t seed);
/* Fill x[0..n) with normal floats N(mean, std^2) from stream seed. */
QKV_API
void qkv_fill_normal(float *x, size_t n, float mean, float std, uint64_t seed);
/* Xavier-uniform initialisation of a (fan_out, fan_in) matrix: U(-a, a), a = sqrt(6/(in+out)). */
QKV_API
void qkv_init_xavier_uniform(float *W, int fan_out, int fan_in, uint64_t seed);

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

/* A dropout as the layers take it: rate p in [0, 1) (0: none), its masks drawn from the
 * counter-based stream seed. */
typedef struct {
    float p;
    uint64_t seed;
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

typedef enum { QKV_ACT_RELU = 0, QKV_ACT_GELU = 1 } qkv_activation;

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

/* =======================================================================================
 * Text: the data side of translation as d2l.ai's "Machine Translation and the Dataset" does
 * it: preprocess raw sentence pairs, split them into word tokens, map tokens to ids with a
 * frequency-ordered vocabulary, pad every sentence to num_steps, and score with BLEU.
 * A struct filled by a *_read / *_build / *_load / *_from_text call owns its memory until
 * the matching *_free, which also zeroes it (freeing twice is harmless). On failure the
 * output struct is left zeroed and err names the file and line (1-based).
 * ===================================================================================== */

/* ---------------------------------------------------------------------------------------
 * Preprocessing (d2l's preprocess_nmt) and word tokens (d2l's tokenize_nmt)
 * ------------------------------------------------------------------------------------- */

/* Bytes qkv_preprocess may write for len input bytes, the NUL included: every input byte
 * yields at most two (a punctuation byte gains a space before it; 'İ', two bytes, becomes
 * the three bytes of "i" + U+0307). */
#define QKV_PREPROCESS_BOUND(len) (2 * (size_t)(len) + 1)

/* d2l's preprocess_nmt on one piece of UTF-8 text:
 *   1. U+202F (narrow no-break space) and U+00A0 (no-break space) become ' ';
 *   2. letters are lower-cased as Python's str.lower() does for ASCII, Latin-1, Latin
 *      Extended-A and basic Cyrillic (U+0400..U+042F), a superset of what fra.txt and
 *      Multi30k contain; other characters are copied unchanged;
 *   3. a space is inserted before each of , . ! ? whose preceding character is not a space.
 * out (capacity >= QKV_PREPROCESS_BOUND(len)) receives the NUL-terminated result and
 * *out_len its length. Fails with QKV_ERR_FORMAT, naming the byte offset, on invalid UTF-8
 * or a NUL byte. */
QKV_API
qkv_status qkv_preprocess(char *out, size_t *out_len, const char *text, size_t len,
                          qkv_error *err);

/* The length of the longest prefix of text[0..len) that is well-formed UTF-8 without a NUL
 * byte: len when all of it is, else the offset of the first offending byte. */
QKV_API
size_t qkv_utf8_check(const char *text, size_t len);

/* Sentences of word tokens, stored flat: sentence i is
 * tokens[start[i] .. start[i + 1]), each token a NUL-terminated UTF-8 word. */
typedef struct {
    int count;           /* sentences */
    size_t n_tokens;     /* tokens over all sentences */
    const char **tokens; /* (n_tokens) pointers into storage */
    size_t *start;       /* (count + 1) where each sentence begins in tokens */
    char *storage;       /* owned: the bytes of every token */
} qkv_sentences;

/* Tokens in sentence i. */
static inline int qkv_sentence_len(const qkv_sentences *s, int i)
{
    return (int)(s->start[i + 1] - s->start[i]);
}

/* Parallel sentences: source.count == target.count, pair i is (source i, target i). */
typedef struct {
    qkv_sentences source;
    qkv_sentences target;
} qkv_corpus;

/* Each line of text (lines end in "\n" or "\r\n"; the last may lack it) preprocessed and
 * split into words on ' '. Unlike d2l's line.split(' '), the empty strings that a double
 * space produces are dropped, so a token is never "" (fra.txt's French side has 17 of
 * them, the only place where the two differ). name_for_errors labels the text in
 * messages ("<name>:<line>: ..."). */
QKV_API
qkv_status qkv_sentences_from_text(qkv_sentences *out, const char *text, size_t len,
                                   const char *name_for_errors, qkv_error *err);
/* Each line split on spaces and tabs with no other change (for models whose vocabulary was
 * made by another tokenizer, e.g. one converted from PyTorch). Invalid UTF-8 fails, naming
 * the line. */
QKV_API
qkv_status qkv_sentences_split(qkv_sentences *out, const char *text, size_t len,
                               const char *name_for_errors, qkv_error *err);
QKV_API
void qkv_sentences_free(qkv_sentences *s);

/* Pairs from a file of lines "source<TAB>target[<TAB>ignored...]" (fra.txt is
 * "English<TAB>French"), each line preprocessed and tokenised as qkv_sentences_from_text.
 * num_examples > 0 keeps the first num_examples lines; <= 0 keeps all. (d2l's
 * tokenize_nmt(text, 600) keeps 601 pairs, because it stops at i > num_examples; pass 601
 * to get d2l's load_data_nmt(num_examples=600) data.) A line without a tab, invalid UTF-8,
 * a NUL byte or a file with no lines fails with QKV_ERR_FORMAT naming file and line. */
QKV_API
qkv_status qkv_corpus_read_tsv(qkv_corpus *out, const char *path, int num_examples,
                               qkv_error *err);

/* Pairs from two line-aligned files (Multi30k: line i of train.de translates line i of
 * train.en), each line preprocessed and tokenised as qkv_sentences_from_text. num_examples
 * as above. Files of different line counts (within the first num_examples lines) fail with
 * QKV_ERR_FORMAT naming both files and the line where the shorter one ends. */
QKV_API
qkv_status qkv_corpus_read_aligned(qkv_corpus *out, const char *source_path,
                                   const char *target_path, int num_examples, qkv_error *err);
QKV_API
void qkv_corpus_free(qkv_corpus *c);

/* ---------------------------------------------------------------------------------------
 * Vocabulary (d2l's Vocab with reserved_tokens = ['<pad>', '<bos>', '<eos>'])
 * ------------------------------------------------------------------------------------- */

/* Every vocabulary starts with the reserved ids of qkv.h: QKV_UNK, QKV_PAD, QKV_BOS,
 * QKV_EOS (<unk> <pad> <bos> <eos>), then its words. */
enum { QKV_UNK = 0, QKV_PAD = 1, QKV_BOS = 2, QKV_EOS = 3, QKV_N_RESERVED = 4 };

/* idx_to_token and a hash table for the way back. Read-only for users. */
typedef struct {
    int size;                  /* tokens; ids are 0 .. size - 1 */
    const char **idx_to_token; /* (size) pointers into storage */
    char *storage;             /* owned: the bytes of every token */
    int *slots;                /* owned: open-addressing table of ids, -1 = empty */
    size_t n_slots;            /* a power of two, > 2 * size */
} qkv_vocab;

/* d2l's Vocab(tokens, min_freq, reserved_tokens=['<pad>', '<bos>', '<eos>']):
 * idx_to_token = ['<unk>', '<pad>', '<bos>', '<eos>'] + the distinct tokens with
 * frequency >= min_freq, most frequent first, ties in order of first occurrence (Python's
 * stable sort over a Counter built in corpus order); a token equal to a reserved one keeps
 * its reserved id. tokens (n_tokens): a flat list, e.g. qkv_sentences.tokens. */
QKV_API
qkv_status qkv_vocab_build(qkv_vocab *v, const char *const *tokens, size_t n_tokens,
                           int min_freq, qkv_error *err);
/* The id of token, QKV_UNK if it is not in the vocabulary. */
QKV_API
int qkv_vocab_id(const qkv_vocab *v, const char *token);
/* The token of id, NULL if id is outside [0, size). */
QKV_API
const char *qkv_vocab_token(const qkv_vocab *v, int id);

/* Writes the vocabulary as text, line i + 1 holding token i, atomically (a temporary file
 * in the same directory, flushed, then renamed over path). A token that is empty or holds
 * '\n' or '\r' cannot be a line: QKV_ERR_ARG. */
QKV_API
qkv_status qkv_vocab_save(const qkv_vocab *v, const char *path, qkv_error *err);
/* Reads a file written by qkv_vocab_save ("\r\n" endings accepted). Fails with
 * QKV_ERR_FORMAT, naming file and line, on an empty line, a duplicate token, invalid UTF-8,
 * or first four lines other than <unk> <pad> <bos> <eos>. */
QKV_API
qkv_status qkv_vocab_load(qkv_vocab *v, const char *path, qkv_error *err);
QKV_API
void qkv_vocab_free(qkv_vocab *v);

/* ---------------------------------------------------------------------------------------
 * Batching to num_steps (d2l's truncate_pad and build_array_nmt)
 * ------------------------------------------------------------------------------------- */

/* ids (num_steps) = truncate_pad(vocab[tokens] + [<eos>], num_steps, <pad>).  Returns
 * valid_len, the number of ids that are not <pad> (so a truncated sentence loses its
 * <eos>, as in d2l). num_steps <= 0 writes nothing and returns 0. */
QKV_API
int qkv_vocab_encode(int *ids, const qkv_vocab *v, const char *const *tokens, int n,
                     int num_steps);
/* Every sentence of s: ids (s->count, num_steps), valid_len (s->count).
 * num_steps < 1 fails with QKV_ERR_ARG. */
QKV_API
qkv_status qkv_sentences_encode(int *ids, int *valid_len, const qkv_sentences *s,
                                const qkv_vocab *v, int num_steps, qkv_error *err);
/* The tokens of ids[0..n) joined by single spaces, up to the first <eos> (d2l's
 * ' '.join(vocab.to_tokens(output_seq))); ids outside the vocabulary read as <unk>.
 * Writes at most cap bytes, NUL included (nothing if cap is 0), and returns the length the
 * whole text needs, as snprintf does. */
QKV_API
size_t qkv_vocab_decode(char *out, size_t cap, const qkv_vocab *v, const int *ids, int n);

/* ---------------------------------------------------------------------------------------
 * BLEU on token-id sequences (any int values; equal ids are equal tokens)
 * ------------------------------------------------------------------------------------- */

/* d2l's bleu(pred_seq, label_seq, k):
 *   exp(min(0, 1 - len_label / len_pred)) * prod_{n=1..k} p_n^(1 / 2^n),
 *   p_n = clipped n-gram matches / (len_pred - n + 1),
 * where clipped means a label n-gram matches at most as often as it occurs in the label.
 * d2l divides by zero when len_pred < k; here an order the prediction is too short for
 * has p_n = 0, so the score is 0 (as it already is in d2l whenever the label is the one
 * shorter than k); an empty prediction scores 0. k >= 1, else QKV_ERR_ARG. */
QKV_API
qkv_status qkv_bleu(double *score, const int *pred, int len_pred, const int *label,
                    int len_label, int k, qkv_error *err);

#define QKV_BLEU_ORDER 4

/* Corpus BLEU-4 statistics, summed over (hypothesis, reference) pairs. */
typedef struct {
    int64_t matches[QKV_BLEU_ORDER]; /* clipped matches of (index + 1)-grams */
    int64_t totals[QKV_BLEU_ORDER];  /* (index + 1)-grams in the hypotheses */
    int64_t hyp_len, ref_len;        /* tokens: c and r */
} qkv_bleu_stats;

/* Adds one pair to st (zero-initialise st first). */
QKV_API
qkv_status qkv_bleu_stats_add(qkv_bleu_stats *st, const int *hyp, int hyp_len,
                              const int *ref, int ref_len, qkv_error *err);
/* Standard corpus BLEU in [0, 1]:  BP * exp(mean_n log(matches_n / totals_n)),
 * BP = exp(1 - r / c) when c < r, else 1; 0 if any order has no match or c is 0.
 * sacreBLEU's score (tokenize='none', smooth_method='none') divided by 100. */
QKV_API
double qkv_bleu_stats_score(const qkv_bleu_stats *st);
/* The same over count pairs: hyps[i] (hyp_lens[i]) against refs[i] (ref_lens[i]). */
QKV_API
qkv_status qkv_corpus_bleu(double *score, const int *const *hyps, const int *hyp_lens,
                           const int *const *refs, const int *ref_lens, int count,
                           qkv_error *err);

/* ---------------------------------------------------------------------------------------
 * Subwords: byte-pair encoding (Sennrich, Haddow & Birch 2016)
 * A word is the characters of a d2l word token after a word-start marker, U+2581 '▁' (as
 * SentencePiece), so "the cat" is the symbols ▁ t h e ▁ c a t before any merge. Learning
 * repeatedly merges the most frequent adjacent pair of symbols inside words into a new
 * symbol; encoding replays the merges, lowest rank first. The pieces of a text, joined,
 * with every ▁ read as a space and the first one dropped, give the text back exactly.
 * Vocabulary ids: the reserved four, then symbol i at QKV_N_RESERVED + i.
 * ------------------------------------------------------------------------------------- */

#define QKV_BPE_SPACE "\xe2\x96\x81" /* U+2581, the word-start marker */

/* A learned encoding. Read-only for users. */
typedef struct {
    int n_chars;     /* symbols 0 .. n_chars - 1 are single characters: the alphabet */
    int n_symbols;   /* the alphabet, then one symbol per merge that made a new string */
    int n_merges;    /* in the order learned: merge r has rank r */
    char **symbols;  /* owned: (n_symbols) NUL-terminated UTF-8 strings, all distinct */
    int *merges;     /* owned: (n_merges, 3) left symbol, right symbol, resulting symbol */
    int *symbol_slots; /* owned: open-addressing table string -> symbol, -1 = empty */
    size_t n_symbol_slots;
    int *merge_slots;  /* owned: open-addressing table (left, right) -> rank, -1 = empty */
    size_t n_merge_slots;
} qkv_bpe;

/* Learns from the word tokens of every sentence of texts[0..n_texts) (one text per language
 * for a per-language encoding, both for a joint one) a vocabulary of at most vocab_size ids,
 * the reserved four included:
 *   alphabet  every character of the words (and ▁), most frequent first, ties by UTF-8
 *             bytes; if they do not all fit, the rarest become unknown (<unk>). Characters
 *             that cannot be a line of a file ('\r') and a literal U+2581 are unknown.
 *   merges    while the vocabulary has room: the adjacent pair of symbols counted most often
 *             over all words (ties: the smaller left, then right, symbol string, compared
 *             bytewise) is merged everywhere, left to right; a pair seen fewer than twice is
 *             never merged, nor one that would spell a reserved token.
 * Pair counts are kept up to date incrementally (each merge touches only the words that
 * hold the pair): Multi30k (58,000 sentences, 10,000 symbols) learns in 0.1 s.
 * vocab_size > QKV_N_RESERVED. */
QKV_API
qkv_status qkv_bpe_learn(qkv_bpe *b, const qkv_sentences *const *texts, int n_texts,
                         int vocab_size, qkv_error *err);
QKV_API
void qkv_bpe_free(qkv_bpe *b);

/* The vocabulary of b: <unk> <pad> <bos> <eos>, then the symbols in order. */
QKV_API
qkv_status qkv_bpe_vocab(qkv_vocab *v, const qkv_bpe *b, qkv_error *err);

/* Ids of text[0..len): one line, words separated by single spaces (runs of spaces, and spaces
 * at either end, are kept: each extra space is a piece "▁" of its own). ids needs room for
 * len + 1 values; returns how many were written. A character outside the alphabet (or bytes
 * that are not UTF-8) becomes one QKV_UNK. */
QKV_API
int qkv_bpe_encode(int *ids, const qkv_bpe *b, const char *text, size_t len);

/* The text of ids[0..n), up to the first <eos>: pieces concatenated, ▁ read as a space, the
 * first ▁ of the text dropped; <pad> and <bos> are skipped, <unk> and ids outside the
 * vocabulary read "<unk>". qkv_bpe_decode(qkv_bpe_encode(text)) == text for every text
 * whose characters are all in the alphabet. Writes at most cap bytes, NUL included, and
 * returns the length the whole text needs, as snprintf. */
QKV_API
size_t qkv_bpe_decode(char *out, size_t cap, const qkv_bpe *b, const int *ids, int n);

/* Word sentences (qkv_sentences_from_text) as sentences of pieces, e.g. "▁the", "▁ca", "t";
 * an unknown character is the piece "<unk>". Words are looked up in a cache, so encoding a
 * corpus costs one encoding per distinct word. */
QKV_API
qkv_status qkv_bpe_encode_sentences(qkv_sentences *out, const qkv_bpe *b,
                                    const qkv_sentences *words, qkv_error *err);

/* A text file: "#qkv-bpe 1", "chars N" and the alphabet one character a line, then
 * "merges M" and the merges one "left right" a line, in rank order; written atomically. */
QKV_API
qkv_status qkv_bpe_save(const qkv_bpe *b, const char *path, qkv_error *err);
/* Reads qkv_bpe_save's file; QKV_ERR_FORMAT names file and line on anything else (unknown
 * symbol in a merge, duplicate character, a symbol spelling a reserved token...). */
QKV_API
qkv_status qkv_bpe_load(qkv_bpe *b, const char *path, qkv_error *err);

/* ---------------------------------------------------------------------------------------
 * A model's tokenizer: how its text becomes tokens and ids, and ids text again
 * Lines become words (d2l's preprocessing and words, or plain whitespace-separated tokens
 * for a model whose vocabulary another tokenizer made), words become the model's tokens (the
 * words themselves, or their subword pieces), and tokens become ids through the side's
 * vocabulary. A model directory records the choice in text.json
 * ({"tokenizer": "d2l" | "whitespace" | "bpe", "source_bos": false}; absent: d2l).
 * ------------------------------------------------------------------------------------- */

typedef enum {
    QKV_TOKENIZER_D2L = 0,        /* qkv_sentences_from_text's words */
    QKV_TOKENIZER_WHITESPACE = 1, /* qkv_sentences_split's tokens */
    QKV_TOKENIZER_BPE = 2         /* d2l's words, then the pieces of src_bpe / tgt_bpe */
} qkv_tokenizer_kind;

/* Filled by qkv_tokenizer_load, or by hand from vocabularies (and subword encodings) being
 * trained; qkv_tokenizer_free frees every member. */
typedef struct {
    qkv_tokenizer_kind kind;
    int source_bos;          /* sources start with <bos> (PyTorch's translation tutorial) */
    qkv_vocab src, tgt;
    qkv_bpe src_bpe, tgt_bpe; /* QKV_TOKENIZER_BPE (one file for both sides when joint) */
} qkv_tokenizer;

/* The path of a model directory's file: dir/name, or dir/../name when dir lacks it and its
 * parent has it (training writes dir/best and dir/epoch-NNN with the model alone). Returns
 * whether the file exists (path is dir/name when it does not). */
QKV_API
int qkv_model_dir_file(char *path, size_t cap, const char *dir, const char *name);

/* Reads src_vocab.txt, tgt_vocab.txt, text.json (optional) and, for a subword model,
 * src_bpe.txt and tgt_bpe.txt, each from dir or its parent (qkv_model_dir_file). Errors name
 * the file: a vocabulary's own, text.json that is not JSON or names an unknown tokenizer, a
 * subword encoding whose symbols are not its vocabulary's tokens. */
QKV_API
qkv_status qkv_tokenizer_load(qkv_tokenizer *t, const char *dir, qkv_error *err);
QKV_API
void qkv_tokenizer_free(qkv_tokenizer *t);

/* The lines of text as words the way the model's text was split (see qkv_tokenizer_kind);
 * name labels the text in messages, as in qkv_sentences_from_text. */
QKV_API
qkv_status qkv_tokenizer_words(const qkv_tokenizer *t, qkv_sentences *out, const char *text,
                               size_t len, const char *name, qkv_error *err);
/* Word sentences as the model's tokens on one side (target = 0: source, 1: target): their
 * subword pieces, or a copy of the words. */
QKV_API
qkv_status qkv_tokenizer_tokens(const qkv_tokenizer *t, qkv_sentences *out,
                                const qkv_sentences *words, int target, qkv_error *err);
/* The text of target ids[0..n) up to the first <eos>: tokens joined by spaces, or subword
 * pieces joined into words. snprintf's contract: at most cap bytes, NUL included; returns
 * the length of the whole text. */
QKV_API
size_t qkv_tokenizer_decode(const qkv_tokenizer *t, char *out, size_t cap, const int *ids,
                            int n);
/* The words of the text of target ids[0..n) as ids of `words` (a vocabulary of reference
 * words), for BLEU over words whatever the model's tokens: a word that vocabulary lacks gets
 * the id -1 - its position, so it matches nothing ("<unk>" itself is QKV_UNK). Writes at
 * most cap ids and returns their count, -1 when out of memory. */
QKV_API
int qkv_tokenizer_word_ids(const qkv_tokenizer *t, const qkv_vocab *words, int *out, int cap,
                           const int *ids, int n);

/* ---------------------------------------------------------------------------------------
 * Precision of the models' matrix products
 * QKV_PRECISION_BF16 runs every product of a model's linear layers (attention projections,
 * FFN, output logits; forward, dX and dW) with both operands rounded to bfloat16 (to
 * nearest even: a relative error of at most 2^-8 each) and float32 sums, on AVX512-BF16
 * (VDPBF16PS: twice float32's multiply-adds per instruction). Parameters, gradients, Adam's
 * moments, attention itself, norms, softmax and the loss stay float32. Decoding reads a
 * bf16 copy of the weights, half the bytes, which the model owns. The standalone blocks
 * (qkv_linear_*, qkv_ffn_*, qkv_mha_*) are always float32.
 * ------------------------------------------------------------------------------------- */

typedef enum {
    QKV_PRECISION_FP32 = 0, /* float32 throughout: the default */
    QKV_PRECISION_BF16 = 1  /* the linear layers' products in bf16 with float32 sums */
} qkv_precision;

/* Whether this CPU runs QKV_PRECISION_BF16 (AVX512F, BW, VL, DQ and BF16). */
QKV_API
int qkv_bf16_supported(void);
/* "fp32" or "bf16". */
QKV_API
const char *qkv_precision_name(qkv_precision p);
/* *p from "fp32" or "bf16"; QKV_ERR_ARG naming the choices otherwise. */
QKV_API
qkv_status qkv_precision_parse(qkv_precision *p, const char *name, qkv_error *err);

/* ---------------------------------------------------------------------------------------
 * The encoder-decoder Transformer (paper, figure 1; d2l 11.7)
 * ------------------------------------------------------------------------------------- */

typedef enum {
    QKV_TIE_NONE = 0,   /* three separate matrices */
    QKV_TIE_OUTPUT = 1, /* target embedding = output projection (paper, section 3.4) */
    QKV_TIE_ALL = 2     /* source and target embeddings and output projection (one vocabulary) */
} qkv_tie;

typedef struct {
    int src_vocab, tgt_vocab;
    int d_model;    /* C */
    int heads;      /* H; head size d_model / H */
    int ffn;        /* F, the FFN's hidden size */
    int enc_layers, dec_layers;
    int max_len;    /* longest sequence either stack accepts (positions in the table) */
    float dropout;  /* on embeddings + positions, attention weights, and each sublayer output */
    int bias;       /* biases in the attention projections (d2l: no, PyTorch: yes) */
    int pre_norm;   /* 0: LayerNorm(x + Sublayer(x)) as the paper; 1: x + Sublayer(LN(x)) */
    int final_norm; /* a LayerNorm after the last block of each stack */
    qkv_activation act;
    qkv_tie tie;
    int learned_pos; /* learned positions instead of the sinusoidal table */
    float ln_eps;
} qkv_transformer_config;

/* The configuration of d2l's example: 2+2 layers, d_model 32, 4 heads, FFN 64, dropout 0.1,
 * post-norm, no attention bias, sinusoidal positions, max_len 1000. Vocab sizes left 0. */
QKV_API
qkv_transformer_config qkv_transformer_default_config(void);
/* QKV_ERR_ARG with the reason if the configuration cannot build a model. */
QKV_API
qkv_status qkv_transformer_config_check(const qkv_transformer_config *cfg, qkv_error *err);

typedef struct qkv_transformer qkv_transformer;

/* A model with freshly initialised parameters as d2l's: Xavier-uniform for every projection,
 * PyTorch's defaults elsewhere (biases U(+-1/sqrt(fan_in)), N(0, 1) embeddings — N(0, 1/C)
 * when tied to the output — unit LayerNorm gains, zero LayerNorm biases). */
QKV_API
qkv_status qkv_transformer_create(qkv_transformer **out, const qkv_transformer_config *cfg,
                                  uint64_t seed, qkv_error *err);
QKV_API
void qkv_transformer_free(qkv_transformer *m);
QKV_API
const qkv_transformer_config *qkv_transformer_get_config(const qkv_transformer *m);

/* The parameters: count tensors, each with a stable name ("encoder.0.attention.W_q"), shape
 * and its place in one flat buffer of qkv_transformer_num_params floats. */
QKV_API
int qkv_transformer_num_tensors(const qkv_transformer *m);
typedef struct {
    const char *name;
    int ndim;
    int shape[2];
    size_t offset; /* in floats, into the parameter (and gradient) buffer */
    size_t numel;
} qkv_param_info;
QKV_API
qkv_param_info qkv_transformer_tensor(const qkv_transformer *m, int i);
QKV_API
size_t qkv_transformer_num_params(const qkv_transformer *m);
QKV_API
float *qkv_transformer_params(qkv_transformer *m);
/* The gradient buffer (same layout), allocated on first use; NULL if out of memory. */
QKV_API
float *qkv_transformer_grads(qkv_transformer *m);

/* One batch of padded sentence pairs, row-major (B, T). */
typedef struct {
    int B, src_len, tgt_len;
    const int *src;       /* (B, src_len) source ids, <pad> after the valid length */
    const int *src_valid; /* (B) */
    const int *tgt_in;    /* (B, tgt_len) decoder input: <bos> then the target without its end */
    const int *tgt_out;   /* (B, tgt_len) labels; <pad> positions are not counted */
} qkv_batch;

/* How a loss pass runs (qkv_transformer_loss, qkv_lm_loss). All zero (or a NULL pointer):
 * the loss alone, in evaluation mode. A training step:
 *     qkv_loss_options o = {.backward = 1, .train = 1, .dropout_seed = step_seed}; */
typedef struct {
    int backward;          /* 1: also ACCUMULATE the gradients into the model's gradient buffer */
    float grad_scale;      /* the loss differentiated is grad_scale * the sum of the token losses
                              (<= 0: 1/tokens, the per-token mean; 1/tgt_len: d2l's sum of
                              per-sequence means) */
    float label_smoothing; /* eps of qkv_cross_entropy_forward (0: none) */
    int train;             /* 1: dropout as configured; 0: none (evaluation) */
    uint64_t dropout_seed; /* makes a training pass's dropout reproducible */
} qkv_loss_options;

/* The cross-entropy over one batch with teacher forcing, and with o->backward its gradients,
 * ACCUMULATED into qkv_transformer_grads (zero them per step). *loss_sum receives the
 * unscaled sum of the token losses over real target tokens and *tokens their count (either
 * may be NULL). */
QKV_API
qkv_status qkv_transformer_loss(qkv_transformer *m, const qkv_batch *b,
                                const qkv_loss_options *o, double *loss_sum, int *tokens,
                                qkv_error *err);

/* Greedy decoding of B source sentences at once (src (B, src_len) padded, src_valid (B)),
 * caching every decoder layer's keys and values, so a step costs work proportional to the
 * current length. out (B, max_len) receives the ids without <bos> and <eos>, out_len (B)
 * their counts; a sentence stops at <eos> or after max_len tokens. Each sentence's result is
 * independent of the others in the batch. */
QKV_API
qkv_status qkv_transformer_greedy(qkv_transformer *m, const int *src, const int *src_valid,
                                  int B, int src_len, int max_len, int *out, int *out_len,
                                  qkv_error *err);

/* Beam search (Wu et al. 2016, GNMT, section 7). Per sentence, K hypotheses live in the
 * decoder's cache; a step keeps the K best one-token extensions by log P(y | x), and an
 * <eos> ranked among the first K finishes one, scored log P(Y | x) / lp(Y) with the length
 * penalty lp(Y) = ((5 + |Y|) / 6)^alpha, |Y| counting its <eos>. A sentence ends with K
 * finished hypotheses, when no live one can enter its n best any more, or after max_len
 * tokens, where live hypotheses finish without <eos> (as greedy decoding's do). beam = 1 is
 * qkv_transformer_greedy exactly; a sentence's result does not depend on the others. */
typedef struct {
    int beam;    /* K >= 1 */
    int n_best;  /* hypotheses returned per sentence, 1 .. K */
    int max_len; /* tokens per hypothesis, <eos> not counted, 1 .. the model's max_len */
    float alpha; /* length penalty exponent >= 0 (0: none; GNMT uses 0.6 to 0.7) */
} qkv_beam_options;

/* Where beam search writes the n_best hypotheses of each of B sentences, best first. */
typedef struct {
    int *ids;        /* (B, n_best, max_len) the ids without <bos> and <eos> */
    int *len;        /* (B, n_best) their counts, -1 for a hypothesis not found (a tiny
                        vocabulary can have fewer than n_best) */
    double *score;   /* (B, n_best) log P / lp, or NULL; -INFINITY when not found */
    double *logprob; /* (B, n_best) log P, or NULL; -INFINITY when not found */
} qkv_beam_results;

/* src (B, src_len) padded, src_valid (B) -> out. */
QKV_API
qkv_status qkv_transformer_beam(qkv_transformer *m, const int *src, const int *src_valid,
                                int B, int src_len, const qkv_beam_options *o,
                                qkv_beam_results *out, qkv_error *err);

/* Logits (B, tgt_len, tgt_vocab) of a teacher-forced forward pass in evaluation mode. */
QKV_API
qkv_status qkv_transformer_logits(qkv_transformer *m, const qkv_batch *b, float *logits,
                                  qkv_error *err);

/* Sets how the model's linear layers multiply from now on (a run-time setting: it is not
 * saved with the model; a new or loaded model is QKV_PRECISION_FP32). At bf16 it makes the
 * weights' bf16 copy for decoding (2 bytes per parameter) and the products' packing buffers,
 * and decoding makes the copy again whenever the parameters may have changed since: after a
 * backward pass, qkv_transformer_params or a load. A caller that writes the parameters
 * through a pointer taken earlier calls this again before decoding. QKV_ERR_ARG on a CPU
 * without AVX512-BF16 (qkv_bf16_supported), the model unchanged. */
QKV_API
qkv_status qkv_transformer_set_precision(qkv_transformer *m, qkv_precision p, qkv_error *err);
QKV_API
qkv_precision qkv_transformer_get_precision(const qkv_transformer *m);

/* ---------------------------------------------------------------------------------------
 * The decoder-only language model (GPT; Radford et al. 2018): the Transformer's decoder
 * without encoder-decoder attention, trained to predict the next token.
 *   x = dropout(E[ids] sqrt(C) + P);  N x [causal self-attention, FFN], each a residual
 *   sublayer with LayerNorm, post-norm or pre-norm as the encoder-decoder's;  an optional
 *   final LayerNorm;  logits = x W_out^T + b_out (W_out = E when tied).
 * The self-attention is softmax attention (paper, eq. 1) or causal linear attention
 * (Katharopoulos et al. 2020; qkv_linear_attention_*), chosen per model; both have the same
 * parameters. Generation feeds one token at a time: softmax models keep every layer's keys
 * and values (a step costs O(t) at position t), linear models the recurrent state
 * (qkv_linear_attention_state: O(1) in t).
 * Parameters, like the encoder-decoder's, are a named table over one flat buffer:
 *   embedding (V, C); positions (max_len, C) when learned;
 *   decoder.<l>.attention.{W_q,b_q,W_k,b_k,W_v,b_v,W_o,b_o}, decoder.<l>.norm1.{gamma,beta},
 *   decoder.<l>.ffn.{W1,b1,W2,b2}, decoder.<l>.norm2.{gamma,beta};  decoder.norm.{gamma,beta}
 *   when final_norm;  output.W (V, C) unless tied;  output.b (V).
 * ------------------------------------------------------------------------------------- */

typedef enum {
    QKV_ATTENTION_SOFTMAX = 0, /* softmax(q k^T / sqrt(d)) v, with dropout on the weights */
    QKV_ATTENTION_LINEAR = 1   /* phi(q)^T S / phi(q)^T z, phi = elu + 1: no weights to drop */
} qkv_attention_kind;

typedef struct {
    int vocab;      /* V */
    int d_model;    /* C */
    int heads;      /* H; head size d_model / H */
    int ffn;        /* F */
    int layers;     /* blocks */
    int max_len;    /* context: the longest sequence, positions in the table */
    float dropout;  /* on embeddings + positions, attention weights, each sublayer output */
    int bias;       /* biases in the attention projections */
    int pre_norm;   /* 0: LayerNorm(x + Sublayer(x)); 1: x + Sublayer(LayerNorm(x)) */
    int final_norm; /* a LayerNorm after the last block (what pre-norm wants) */
    qkv_activation act;
    int tie;        /* output projection = token embedding (paper, section 3.4) */
    int learned_pos; /* learned positions instead of the sinusoidal table */
    qkv_attention_kind attention;
    float ln_eps;
} qkv_lm_config;

/* 4 layers of d_model 128, 4 heads, FFN 512, context 128, dropout 0.1, post-norm, ReLU,
 * attention biases, sinusoidal positions, untied, softmax attention. vocab left 0. */
QKV_API
qkv_lm_config qkv_lm_default_config(void);
/* QKV_ERR_ARG with the reason if the configuration cannot build a model. */
QKV_API
qkv_status qkv_lm_config_check(const qkv_lm_config *cfg, qkv_error *err);

typedef struct qkv_lm qkv_lm;

/* A model initialised as qkv_transformer_create initialises (Xavier-uniform projections,
 * N(0, 1) embedding, N(0, 1/C) when tied, U(+-1/sqrt(fan_in)) biases, unit gains). */
QKV_API
qkv_status qkv_lm_create(qkv_lm **out, const qkv_lm_config *cfg, uint64_t seed, qkv_error *err);
QKV_API
void qkv_lm_free(qkv_lm *m);
QKV_API
const qkv_lm_config *qkv_lm_get_config(const qkv_lm *m);

/* The parameter table, as qkv_transformer_tensor & co. */
QKV_API
int qkv_lm_num_tensors(const qkv_lm *m);
QKV_API
qkv_param_info qkv_lm_tensor(const qkv_lm *m, int i);
QKV_API
size_t qkv_lm_num_params(const qkv_lm *m);
QKV_API
float *qkv_lm_params(qkv_lm *m);
/* The gradient buffer (same layout), allocated on first use; NULL if out of memory. */
QKV_API
float *qkv_lm_grads(qkv_lm *m);

/* The next-token loss over a batch of B sequences of T tokens, and with o->backward its
 * gradients (qkv_loss_options), ACCUMULATED into qkv_lm_grads: ids (B, T) the inputs,
 * targets (B, T) what each position should predict (ids shifted by one); a target equal to
 * QKV_PAD is not counted. *loss_sum, *tokens (may be NULL) receive the unscaled sum and the
 * count. T <= max_len; an id outside [0, V) fails with QKV_ERR_ARG naming it. */
QKV_API
qkv_status qkv_lm_loss(qkv_lm *m, const int *ids, const int *targets, int B, int T,
                       const qkv_loss_options *o, double *loss_sum, int *tokens, qkv_error *err);

/* Logits (B, T, V) of the causal forward pass over ids (B, T) in evaluation mode. */
QKV_API
qkv_status qkv_lm_logits(qkv_lm *m, const int *ids, int B, int T, float *logits,
                         qkv_error *err);

/* The precision of the model's linear layers, as qkv_transformer_set_precision (generation
 * reads the weights' bf16 copy at bf16; it is made again after a backward pass, qkv_lm_params
 * or a load). */
QKV_API
qkv_status qkv_lm_set_precision(qkv_lm *m, qkv_precision p, qkv_error *err);
QKV_API
qkv_precision qkv_lm_get_precision(const qkv_lm *m);

/* ---- generation: one sequence, one token per step ----------------------------------------
 * A state holds what the model remembers of the tokens so far: per layer the keys and values
 * of every position (softmax), or the sums S, z (linear). At most max_len tokens fit, the
 * positions the model has. */
typedef struct qkv_lm_state qkv_lm_state;

QKV_API
qkv_status qkv_lm_state_create(qkv_lm_state **out, const qkv_lm *m, qkv_error *err);
QKV_API
void qkv_lm_state_free(qkv_lm_state *s);
/* Tokens the state holds (the position the next token takes). */
QKV_API
int qkv_lm_state_length(const qkv_lm_state *s);

/* Starts the state over from ids (1 <= n <= max_len) in one batched forward pass and writes
 * the logits (V) that predict token n. */
QKV_API
qkv_status qkv_lm_prefill(qkv_lm *m, qkv_lm_state *s, const int *ids, int n, float *logits,
                          qkv_error *err);
/* Appends token at position qkv_lm_state_length(s) (< max_len, else QKV_ERR_ARG) and writes
 * the logits (V) that predict the next one: row t of qkv_lm_logits over the same tokens. */
QKV_API
qkv_status qkv_lm_step(qkv_lm *m, qkv_lm_state *s, int token, float *logits, qkv_error *err);

/* ---- sampling ------------------------------------------------------------------------- */

typedef struct {
    float temperature; /* logits / temperature; 0: greedy (the argmax, ties to the lower id) */
    int top_k;         /* keep the k most probable tokens; 0: all */
    float top_p;       /* then keep the smallest set of most probable tokens whose probability
                          is >= top_p (nucleus sampling; Holtzman et al. 2020); >= 1: all */
} qkv_sampling;

/* The distribution a token is drawn from: probs (V) = softmax(logits / temperature) cut to
 * top-k then top-p and renormalised; tokens cut get exactly 0. order (V) receives the ids by
 * decreasing probability (ties: lower id first). Returns how many tokens are kept: they are
 * order[0 .. kept). temperature 0 keeps just the argmax. */
QKV_API
int qkv_sampling_probs(float *probs, int *order, const float *logits, int V,
                       const qkv_sampling *s);
/* The kept token at which the cumulative probability (in order) first exceeds u in [0, 1). */
QKV_API
int qkv_sample_token(const float *probs, const int *order, int kept, float u);

typedef struct {
    int tokens;          /* new tokens to produce */
    qkv_sampling sampling;
    uint64_t seed;       /* token i is drawn with u = qkv_random_uniform(seed, i) */
    /* Called with each new token as soon as it is drawn (NULL: none); nonzero stops early. */
    int (*on_token)(int id, void *ctx);
    void *ctx;
    int text_only;       /* 1: never draw <unk> <pad> <bos> <eos> (a model of raw text never
                            saw them as targets, but gives them a little probability) */
} qkv_lm_generation;

/* Continues prompt (n_prompt >= 1 ids) with g->tokens sampled tokens, written to out; *n_out
 * (may be NULL) receives how many (fewer if on_token stopped it). The model sees the last
 * max_len tokens at most: when the state is full it restarts from the last max_len / 2 (one
 * prefill), so a token costs O(max_len) (softmax) or O(1) (linear) work amortised. The same
 * seed gives the same tokens. */
QKV_API
qkv_status qkv_lm_generate(qkv_lm *m, const int *prompt, int n_prompt, int *out, int *n_out,
                           const qkv_lm_generation *g, qkv_error *err);

/* ---- text as tokens --------------------------------------------------------------------
 * A language model's vocabulary is a qkv_vocab (<unk> <pad> <bos> <eos> first), saved with
 * qkv_vocab_save, one token per line. Two kinds:
 *   characters  every distinct UTF-8 character of a text, in code point order. Characters a
 *               line cannot hold are escaped: newline \n, carriage return \r, tab \t, space
 *               \s, backslash \\, any other control character (U+0000..U+001F, U+007F) \xHH;
 *               every other token is the character itself.
 *   bytes       all 256 bytes as <0x00> .. <0xFF> (any input, no <unk>).
 * qkv_lm_encode recognises the kind from the vocabulary itself (a byte vocabulary holds
 * <0x00>). */

/* Builds the vocabulary of text[0..len): bytes = 0 characters (invalid UTF-8 fails with
 * QKV_ERR_FORMAT naming the byte offset), 1 bytes. */
QKV_API
qkv_status qkv_lm_vocab_build(qkv_vocab *v, const char *text, size_t len, int bytes,
                              qkv_error *err);
/* ids (capacity len) <- the tokens of text[0..len); *n receives their count. A character
 * outside a character vocabulary becomes QKV_UNK (*unknown, may be NULL, counts them);
 * invalid UTF-8 fails with QKV_ERR_FORMAT naming the byte offset. */
QKV_API
qkv_status qkv_lm_encode(int *ids, size_t *n, size_t *unknown, const qkv_vocab *v,
                         const char *text, size_t len, qkv_error *err);
/* The text of token id (escapes undone; reserved tokens and ids outside the vocabulary are
 * ""). Writes at most cap bytes, NUL included, and returns the length needed (<= 4 for
 * characters, 1 for bytes), as snprintf. */
QKV_API
size_t qkv_lm_token_text(char *out, size_t cap, const qkv_vocab *v, int id);

/* ---- model directories -----------------------------------------------------------------
 *   config.json        the qkv_lm_config ("format": "qkv-lm")
 *   model.safetensors  every parameter under its table name
 *   vocab.txt          the vocabulary (written by the caller)
 * and, while qkv_lm_train runs, checkpoint.safetensors: the parameters, Adam's moments and
 * step, and where training stands. */

QKV_API
qkv_status qkv_lm_config_to_json(const qkv_lm_config *c, char **json, qkv_error *err);
/* Names file and key in its errors and checks the configuration. */
QKV_API
qkv_status qkv_lm_config_from_json(qkv_lm_config *c, const char *json, const char *file,
                                   qkv_error *err);
/* Writes dir/config.json and dir/model.safetensors (atomically; dir is created). */
QKV_API
qkv_status qkv_lm_save(const qkv_lm *m, const char *dir, qkv_error *err);
/* Every tensor present with its configured shape, none unknown, no NaN/Inf. */
QKV_API
qkv_status qkv_lm_load(qkv_lm **out, const char *dir, qkv_error *err);

/* ---- training ---------------------------------------------------------------------------
 * Step s trains on B windows of T + 1 consecutive tokens whose starts are drawn uniformly
 * from (seed, s): the inputs are the first T tokens, the targets the last T. Nothing else is
 * random, so a resumed run continues bit for bit (same machine and threads), unless its
 * learning rate follows a time budget. */

typedef struct {
    int64_t step, steps;   /* optimizer steps so far; the planned total (0: a time budget) */
    double epoch;          /* training tokens consumed / training text length */
    double loss;           /* mean training loss per token since the last report */
    double val_loss;       /* held-out loss per token, NaN unless evaluated at this step */
    double tokens_per_s;   /* training tokens per second, since this run started */
    double grad_norm;      /* of the last step, before clipping */
    double lr;             /* of the last step */
    double elapsed_s;      /* training time, resumed runs included */
    int report;            /* 1 when this step wrote a metrics line (every log_every) */
} qkv_lm_train_progress;

typedef struct {
    const char *out_dir;   /* checkpoint.safetensors, metrics.jsonl, the model at the end */
    int batch, context;    /* B windows of T tokens per step; T <= max_len */
    int64_t steps;         /* stop after this many steps (0: only the time budget) */
    double minutes;        /* stop when this much training time has passed (0: no budget) */
    float lr, beta1, beta2, adam_eps, weight_decay;
    int warmup;            /* the learning rate rises linearly over the first warmup steps */
    int cosine;            /* then decays along a cosine to lr / 10 at `steps`, or, without
                              steps, at the end of the time budget (then the schedule follows
                              the machine's speed: not reproducible bit for bit) */
    float clip;            /* global gradient norm (<= 0: none) */
    uint64_t seed;
    int resume;            /* continue from out_dir/checkpoint.safetensors if it exists */
    int log_every;         /* a metrics.jsonl line and a checkpoint every N steps */
    int eval_every;        /* held-out loss every N steps (0: at the end only) */
    int eval_tokens;       /* held-out tokens each evaluation reads (0: all) */
    int64_t stop_after_steps; /* stop (cleanly, after checkpointing) at this step; 0: never */
    void (*progress)(const qkv_lm_train_progress *p, void *ctx); /* every step, or NULL */
    void *progress_ctx;
} qkv_lm_train_options;

/* batch 32, context 128, lr 1e-3, Adam (0.9, 0.99, 1e-8), clip 1, warmup 100, log every
 * 50 steps, evaluate every 500 on 32768 tokens. Set out_dir and steps or minutes. */
QKV_API
qkv_lm_train_options qkv_lm_train_default_options(void);

/* Trains m on train (n_train tokens; at least context + 1), evaluating on val (n_val tokens,
 * may be 0). Every log_every steps and at the end: a checkpoint and a line of
 * out_dir/metrics.jsonl ({"epoch", "step", "loss", "val_loss" when evaluated, "lr",
 * "tokens_per_s", "elapsed_s"}); at the end the model (qkv_lm_save). A non-finite loss or
 * gradient stops with QKV_ERR_NUMERIC before the parameters change. */
QKV_API
qkv_status qkv_lm_train(qkv_lm *m, const int *train, size_t n_train, const int *val,
                        size_t n_val, const qkv_lm_train_options *o, qkv_error *err);

/* The mean next-token loss over tokens (n >= 2) in evaluation mode, read as consecutive
 * windows of T + 1 tokens that overlap by one, so every token after the first is predicted
 * exactly once, B windows per forward pass. *count (may be NULL) receives n - 1. */
QKV_API
qkv_status qkv_lm_evaluate(qkv_lm *m, const int *tokens, size_t n, int T, int B, double *loss,
                           int64_t *count, qkv_error *err);

/* ---------------------------------------------------------------------------------------
 * Training
 * ------------------------------------------------------------------------------------- */

/* Adam (Kingma & Ba 2015) with optional decoupled weight decay (AdamW). */
typedef struct {
    float beta1, beta2, eps, weight_decay;
    int64_t step;
    size_t n;
    float *m, *v; /* owned: first and second moments (n each) */
} qkv_adam;

QKV_API
qkv_status qkv_adam_init(qkv_adam *opt, size_t n, float beta1, float beta2, float eps,
                         float weight_decay, qkv_error *err);
QKV_API
void qkv_adam_free(qkv_adam *opt);
/* One update of params (n) from grads (n) with learning rate lr. */
QKV_API
void qkv_adam_update(qkv_adam *opt, float *params, const float *grads, float lr);
/* Scales grads so that their global L2 norm is at most max_norm; returns the norm before
 * clipping (NaN or Inf if a gradient is not finite, in which case nothing is scaled). */
QKV_API
double qkv_clip_grad_norm(float *grads, size_t n, double max_norm);

/* ---- one training step --------------------------------------------------------------------
 * llm.c's step in one call: zero the gradients, forward and loss, backward, clip the global
 * gradient norm, one Adam update. qkv_train and qkv_lm_train are drivers over it; a program
 * with its own data, schedule or checkpoints calls it directly:
 *
 *     qkv_step_options o = {.lr = 1e-3f, .clip = 1.0f, .dropout_seed = seed + step};
 *     qkv_step_result r;
 *     if (qkv_transformer_train_step(m, &opt, &batch, &o, &r, &err)) ...
 *
 * A loss or gradient that is not finite never reaches the parameters: the step fails with
 * QKV_ERR_NUMERIC and changes nothing but the gradients, or, with skip_nonfinite, is skipped
 * and still counted in opt->step (so that later steps keep their dropout streams). */
typedef struct {
    float lr;              /* this step's learning rate */
    float clip;            /* clip the global gradient norm to this (0: off) */
    float grad_scale;      /* as qkv_loss_options: 0 the per-token mean */
    float label_smoothing; /* as qkv_loss_options */
    uint64_t dropout_seed; /* this step's dropout stream */
    int skip_nonfinite;    /* 1: skip a non-finite step instead of failing */
} qkv_step_options;

typedef struct {
    double loss;      /* the sum of the token losses */
    int tokens;       /* the tokens counted */
    double grad_norm; /* before clipping; NaN if the loss was not finite */
    int skipped;      /* 1: not applied (skip_nonfinite) */
} qkv_step_result;

/* One step of the encoder-decoder on a teacher-forced batch. */
QKV_API
qkv_status qkv_transformer_train_step(qkv_transformer *m, qkv_adam *opt, const qkv_batch *b,
                                      const qkv_step_options *o, qkv_step_result *r,
                                      qkv_error *err);
/* One step of the language model on ids (B, T) against targets (B, T) (qkv_lm_loss). */
QKV_API
qkv_status qkv_lm_train_step(qkv_lm *m, qkv_adam *opt, const int *ids, const int *targets, int B,
                             int T, const qkv_step_options *o, qkv_step_result *r,
                             qkv_error *err);

/* ---------------------------------------------------------------------------------------
 * The training loop
 * ------------------------------------------------------------------------------------- */

/* Sentence pairs as ids padded to num_steps (d2l's build_array_nmt), owned by the caller. */
typedef struct {
    int n, num_steps;
    const int *src, *src_valid; /* (n, num_steps), (n) */
    const int *tgt, *tgt_valid; /* (n, num_steps), (n): target + <eos>, padded */
} qkv_dataset;

typedef struct {
    int epoch, epochs;     /* 1-based epoch being trained */
    int batch, batches;    /* batches done in this epoch */
    int64_t step;          /* optimizer steps so far */
    double loss;           /* per-token loss over this epoch so far */
    double d2l_loss;       /* what d2l prints: loss / num_steps */
    double tokens_per_s;   /* target tokens per second in this epoch */
    double grad_norm;      /* of the last step, before clipping */
    int end_of_epoch;
    double lr;             /* of the last step */
    int validated;         /* this epoch end ran validation: val_loss (and bleu) hold it */
    double val_loss;       /* per-token cross-entropy on the held-out pairs, no smoothing */
    double bleu;           /* corpus BLEU-4 (0..100) of their greedy translations; NaN if off */
    int best;              /* the best validation so far: the model went to out_dir/best */
    int stopping;          /* early stopping ends the run after this epoch */
} qkv_train_progress;

/* The learning rate over steps. */
typedef enum {
    QKV_LR_CONSTANT = 0, /* lr */
    QKV_LR_NOAM = 1      /* the paper's (section 5.3, eq. 3): lr_factor * d_model^-0.5 *
                            min(step^-0.5, step * warmup^-1.5), steps counted from 1 */
} qkv_lr_schedule;

typedef struct {
    const char *out_dir;    /* checkpoint.safetensors, metrics.jsonl, the model at the end */
    int batch, epochs;
    float lr, beta1, beta2, adam_eps, weight_decay;
    float clip;             /* global gradient norm (<= 0: none) */
    float label_smoothing;
    int d2l_loss_scale;     /* differentiate d2l's loss (sum of per-sequence means) instead of
                             * the per-token mean: same minimum, d2l's step sizes */
    uint64_t seed;          /* data order and dropout */
    int resume;             /* continue from out_dir/checkpoint.safetensors if it exists */
    int checkpoint_every;   /* also checkpoint every this many steps (0: at epoch ends only) */
    int skip_nonfinite;     /* skip a step whose loss or gradient is NaN/Inf instead of failing */
    int stop_after_steps;   /* stop (cleanly, after checkpointing) at this step; 0: never */
    void (*progress)(const qkv_train_progress *p, void *ctx); /* after every step, or NULL */
    void *progress_ctx;
    qkv_lr_schedule schedule;
    int warmup;             /* QKV_LR_NOAM: steps of linear warmup (the paper's 4000) */
    float lr_factor;        /* QKV_LR_NOAM: the factor (the paper's 1) */
    int batch_tokens;       /* > 0: batches of sentences of similar length instead of `batch`
                             * pairs: each epoch the shuffled pairs are cut into buckets of
                             * about 64 batches, each bucket sorted by length (the longer of
                             * source and target, <eos> included) and packed while
                             * sentences x longest <= batch_tokens; the batches are then
                             * shuffled. Batches are cut to their longest sentence. */
    /* Validation after every epoch (valid != NULL): the loss, and with valid_bleu the corpus
     * BLEU-4 of greedy translations (max_len = valid->num_steps), go to metrics.jsonl as
     * "val_loss" and "bleu"; the best model so far (highest BLEU, then lowest loss) is
     * written to out_dir/best/ (config.json, model.safetensors), and the history to
     * out_dir/validation.json, from which a resumed run recovers best and patience. */
    const qkv_dataset *valid;
    int valid_bleu;
    /* BLEU over words: with valid_tokenizer set, each translation's text (subword pieces
     * joined into words, qkv_tokenizer_word_ids) is compared word for word with sentence i
     * of valid_references, pair i's reference as words (the target side as
     * qkv_corpus_read_* gives it, before any subword encoding). Both NULL: model ids against
     * the target side of valid up to its <eos>. */
    const qkv_tokenizer *valid_tokenizer;
    const qkv_sentences *valid_references;
    int patience;           /* stop after this many validations in a row without a new best
                             * (0: never) */
    int keep_epochs;        /* also keep the models of the last N epochs in out_dir/epoch-NNN
                             * (for checkpoint averaging; 0: none) */
    double minutes;         /* time budget of this process (0: none): no epoch starts that
                             * would end after it, judged by the longest epoch so far
                             * (validation included) */
} qkv_train_options;

/* Defaults as d2l trains its Transformer: batch 64, lr 0.005, Adam with PyTorch's defaults
 * (0.9, 0.999, 1e-8), clip 1, 200 epochs, seed 0, constant learning rate (the noam schedule's
 * warmup 4000 and factor 1 preset), no validation. out_dir must be set. */
QKV_API
qkv_train_options qkv_train_default_options(void);

/* Trains m on data with teacher forcing. Every epoch end (and every checkpoint_every steps)
 * writes out_dir/checkpoint.safetensors atomically and appends a line to metrics.jsonl; a
 * resumed run continues bit for bit as if it had never stopped (same machine and threads),
 * batches by length, validation, best model and early stopping included.
 * A non-finite loss or gradient stops with QKV_ERR_NUMERIC before the parameters change. */
QKV_API
qkv_status qkv_train(qkv_transformer *m, const qkv_dataset *data, const qkv_train_options *o,
                     qkv_error *err);

/* The batches of similar length that qkv_train makes for epoch `epoch` (0-based) of data
 * with batch_tokens > 0 and seed: items (data->n) receives the example indices, batch b
 * being items[first[b] .. first[b + 1]) (first: data->n + 1 ints). Returns the number of
 * batches, -1 when out of memory or batch_tokens < 1. */
QKV_API
int qkv_train_batches(int *items, int *first, const qkv_dataset *data, int batch_tokens,
                      uint64_t seed, int epoch);

/* ---------------------------------------------------------------------------------------
 * Model directories and checkpoints
 * ------------------------------------------------------------------------------------- */

/* The configuration as JSON text (caller frees with free()), and back; from_json names file
 * and key in its errors and checks the configuration. */
QKV_API
qkv_status qkv_config_to_json(const qkv_transformer_config *c, char **json, qkv_error *err);
QKV_API
qkv_status qkv_config_from_json(qkv_transformer_config *c, const char *json, const char *file,
                                qkv_error *err);

/* Writes dir/config.json and dir/model.safetensors (each atomically; dir is created). */
QKV_API
qkv_status qkv_transformer_save(const qkv_transformer *m, const char *dir, qkv_error *err);
/* Reads a model written by qkv_transformer_save: every tensor must be present with the shape
 * the configuration implies, no unknown tensor, no NaN/Inf. */
QKV_API
qkv_status qkv_transformer_load(qkv_transformer **out, const char *dir, qkv_error *err);

/* Where training stands: enough to resume bit for bit. */
typedef struct {
    int epoch;           /* epochs completed */
    int batch;           /* batches of the current epoch completed */
    uint64_t seed;       /* the run's seed: data order and dropout derive from it */
    double epoch_loss;   /* loss summed over the current epoch so far */
    int64_t epoch_tokens;
} qkv_train_position;

/* A training checkpoint: parameters, Adam's moments and step, and the position, in one
 * safetensors file written atomically. Load validates everything before changing m or opt. */
QKV_API
qkv_status qkv_checkpoint_save(const char *path, const qkv_transformer *m, const qkv_adam *opt,
                               const qkv_train_position *pos, qkv_error *err);
QKV_API
qkv_status qkv_checkpoint_load(const char *path, qkv_transformer *m, qkv_adam *opt,
                               qkv_train_position *pos, qkv_error *err);

/* ---------------------------------------------------------------------------------------
 * The translator: a model directory as one object that turns sentences into translations
 * (the model, its tokenizer and the length it was trained for), with batching, truncation
 * of over-long sources, greedy or beam decoding, and the text of every hypothesis. It owns
 * the model's decoding buffers, so a translator serves one thread at a time; separate
 * translators share nothing.
 * ------------------------------------------------------------------------------------- */

typedef struct qkv_translator qkv_translator;

/* Opens a model directory: config.json and model.safetensors (qkv_transformer_load), the
 * tokenizer's files (qkv_tokenizer_load, from dir or its parent, so dir/best and
 * dir/epoch-NNN open too) and train.json's num_steps (optional, from dir or its parent).
 * Errors name the file; vocabularies of other sizes than the model's are QKV_ERR_FORMAT. */
QKV_API
qkv_status qkv_translator_open(qkv_translator **out, const char *dir, qkv_error *err);
/* A translator around a model and tokenizer made in memory (e.g. while training one);
 * num_steps as train.json's (0: unknown). On success it owns m and what *tok held (*tok is
 * zeroed); on failure (vocabulary sizes other than the model's: QKV_ERR_ARG) the caller
 * still owns both. */
QKV_API
qkv_status qkv_translator_create(qkv_translator **out, qkv_transformer *m, qkv_tokenizer *tok,
                                 int num_steps, qkv_error *err);
QKV_API
void qkv_translator_free(qkv_translator *t);

QKV_API
qkv_transformer *qkv_translator_model(qkv_translator *t);
QKV_API
const qkv_tokenizer *qkv_translator_tokenizer(const qkv_translator *t);
/* The sentence length the model was trained with (train.json's num_steps), 0 if unknown. */
QKV_API
int qkv_translator_num_steps(const qkv_translator *t);

typedef struct {
    int beam;      /* K >= 1; K = 1 with n_best = 1 is greedy decoding */
    int n_best;    /* hypotheses per sentence, 1 .. beam */
    float alpha;   /* length penalty exponent of beam search >= 0 (qkv_beam_options) */
    int max_len;   /* longest translation in tokens, <eos> not counted; 0: the training
                    * length (else 100); at most the model's max_len (longer is cut to it) */
    int batch;     /* sentences decoded together, >= 1 (results do not depend on it) */
    qkv_precision precision; /* set on the model for this and later translations */
} qkv_translate_options;

/* Greedy decoding, max_len 0, batches of 32, float32. */
QKV_API
qkv_translate_options qkv_translate_default_options(void);

/* The translations of count sentences, hypothesis k of sentence i at h = i * n_best + k,
 * best first. Owned until qkv_translations_free. */
typedef struct {
    int count, n_best;
    int max_len;    /* the length decoding allowed: the row length of ids */
    char **text;    /* (count * n_best) the translations as text; NULL where beam search found
                     * fewer hypotheses than n_best (a tiny vocabulary) */
    int *ids;       /* (count * n_best, max_len) target ids without <bos> and <eos> */
    int *len;       /* (count * n_best) their counts; -1 where text is NULL */
    double *score;  /* (count * n_best) beam search's log P / lp; NaN from greedy decoding */
    int truncated;  /* sources longer than the model accepts, cut to its max_len (losing
                     * their <eos>, as d2l's truncate_pad) */
    int first_truncated, first_truncated_len; /* the first of them (0-based; -1 if none) and
                                               * its tokens, <eos> (and <bos>) included */
} qkv_translations;

/* Translates sources[0..n), one sentence of raw UTF-8 text each (no line break inside), as
 * the model's tokenizer reads them; messages name a source "source:<i + 1>". On failure *out
 * is left empty. n = 0 gives zero translations. */
QKV_API
qkv_status qkv_translate(qkv_translations *out, qkv_translator *t, const char *const *sources,
                         int n, const qkv_translate_options *o, qkv_error *err);
/* The same from sentences already split into words (qkv_tokenizer_words, or a corpus read
 * by qkv_corpus_read_*), which a subword model turns into pieces. */
QKV_API
qkv_status qkv_translate_words(qkv_translations *out, qkv_translator *t,
                               const qkv_sentences *words, const qkv_translate_options *o,
                               qkv_error *err);
QKV_API
void qkv_translations_free(qkv_translations *r);

/* ---------------------------------------------------------------------------------------
 * Tensor files (safetensors): a JSON header naming each tensor's dtype, shape and byte range,
 * then the raw little-endian data. Every offset and shape is checked against the file.
 * ------------------------------------------------------------------------------------- */

typedef enum { QKV_F32 = 0, QKV_I32 = 1, QKV_I64 = 2, QKV_F64 = 3 } qkv_dtype;

#define QKV_MAX_DIMS 8

typedef struct {
    char *name;
    qkv_dtype dtype;
    int ndim;
    int64_t shape[QKV_MAX_DIMS];
    int64_t numel;
    void *data; /* points into the file's buffer, aligned for the dtype */
} qkv_tensor;

typedef struct {
    qkv_tensor *tensors;
    int count;
    char *metadata_json; /* the "__metadata__" object as JSON text, or NULL */
    void *buffer;        /* owned: the file's data section */
} qkv_tensor_file;

/* Read and validate a safetensors file. On failure *out is empty and err names the file and
 * the offending tensor. */
QKV_API
qkv_status qkv_tensor_file_load(qkv_tensor_file *out, const char *path, qkv_error *err);
/* Parse an in-memory safetensors image (len bytes). */
QKV_API
qkv_status qkv_tensor_file_parse(qkv_tensor_file *out, const void *bytes, size_t len,
                                 const char *name_for_errors, qkv_error *err);
QKV_API
void qkv_tensor_file_free(qkv_tensor_file *f);
/* The tensor called name, or NULL. */
QKV_API
const qkv_tensor *qkv_tensor_file_get(const qkv_tensor_file *f, const char *name);
/* A metadata string value (owned by f until freed; NULL if absent). */
QKV_API
const char *qkv_tensor_file_meta(const qkv_tensor_file *f, const char *key);

/* A tensor to be written: name, dtype, shape and data (numel * dtype size bytes). */
typedef struct {
    const char *name;
    qkv_dtype dtype;
    int ndim;
    int64_t shape[QKV_MAX_DIMS];
    const void *data;
} qkv_tensor_ref;

/* Write tensors (and optional metadata key/value string pairs, n_meta of them) to path
 * atomically: a temporary file in the same directory, flushed, then renamed over path, so
 * the previous file stays intact on any failure. */
QKV_API
qkv_status qkv_tensor_file_save(const char *path, const qkv_tensor_ref *tensors, int count,
                                const char *const *meta_kv, int n_meta, qkv_error *err);

/* =======================================================================================
 * Looking inside: the attention weights behind one translation, and Nadaraya-Watson
 * kernel regression (d2l 11.2), attention pooling at its simplest.
 * ===================================================================================== */

/* Every layer's and head's attention weights for one sentence pair, from a teacher-forced
 * forward pass in evaluation mode whose decoder input is <bos> + tgt. With tgt the output of
 * qkv_transformer_greedy these are the weights that decoding used: predicted[] then repeats
 * tgt (and ends in <eos> if decoding stopped there). Owned until qkv_attention_maps_free. */
typedef struct {
    int enc_layers, dec_layers, heads;
    int src_len;         /* Ts: source ids as the encoder saw them, <eos> included */
    int tgt_len;         /* Tt: decoder inputs, <bos> + the translation */
    float *encoder;      /* (enc_layers, H, Ts, Ts) encoder self-attention */
    float *decoder_self; /* (dec_layers, H, Tt, Tt) causal decoder self-attention */
    float *cross;        /* (dec_layers, H, Tt, Ts) encoder-decoder attention */
    int *predicted;      /* (Tt) each position's argmax token */
} qkv_attention_maps;

/* src (src_len >= 1) as qkv_vocab_encode writes it, unpadded; tgt (tgt_len >= 0) the
 * translation without <bos> or <eos>. Both lengths (tgt_len + 1) must fit the model. */
QKV_API
qkv_status qkv_attention_maps_compute(qkv_attention_maps *out, qkv_transformer *m,
                                      const int *src, int src_len, const int *tgt, int tgt_len,
                                      qkv_error *err);
QKV_API
void qkv_attention_maps_free(qkv_attention_maps *a);

/* Nadaraya-Watson attention pooling with a Gaussian kernel:
 *   y_i = sum_j P_ij v_j,  P_i = masked_softmax(S_i),  S_ij = -((q_i - k_j) w)^2 / 2.
 * w = 1 is the non-parametric estimator; a learned w sets the kernel's width to 1/w.
 * x = {q (B, n), k (B, m), v (B, m)} -> y (B, n); P (B, n, m) is saved for backward. The mask
 * is qkv_masked_softmax_forward's (H = 1). Each batch row has its own keys, so d2l's training,
 * where every input attends to all the others, is B = n_train, n = 1, m = n_train - 1. */
QKV_API
void qkv_kernel_regression_forward(float *y, float *P, const qkv_attention_inputs *x, float w,
                                   int B, int n, int m, const qkv_mask *mask);
/* dx->dQ, dK, dV (dq, dk, dv) += their gradients given dy; *dw += dL/dw. Any gradient may be
 * NULL, and so may dx (only dw wanted). */
QKV_API
void qkv_kernel_regression_backward(qkv_attention_grads *dx, float *dw, const float *dy,
                                    const float *P, const qkv_attention_inputs *x, float w, int B,
                                    int n, int m);

/* =======================================================================================
 * Figures: attention heatmaps, training curves, positional encodings, kernel
 * regression fits. A small RGB raster, antialiased text through FreeType, PNG through libpng.
 *
 * A short tour.
 *   qkv_viz_open() loads a font (DejaVu Sans by default) into a context the caller owns; every
 *   function that draws text takes it. A figure is a qkv_canvas: width x height RGB8 pixels,
 *   row-major, (0, 0) the top-left corner, pixel (x, y) covering [x, x+1) x [y, y+1), so its
 *   centre is (x + 0.5, y + 0.5) in the float coordinates of lines and circles.
 *   qkv_heatmap_draw() and qkv_plot_draw() lay out a whole figure and size the canvas
 *   themselves; the *_save() variants also write the PNG. Both can report where they put
 *   things (a geometry struct) so a caller can annotate the figure, and a test can look at it.
 *   Nothing here keeps global state; a qkv_viz (its FreeType face) must not be used by two
 *   threads at once.
 * ===================================================================================== */

/* ---------------------------------------------------------------------------------------
 * Context and canvas
 * ------------------------------------------------------------------------------------- */

#define QKV_VIZ_DEFAULT_FONT "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"

/* The FreeType library and one loaded face. Opaque; one per thread. */
typedef struct qkv_viz qkv_viz;

/* Load the font at font_path (NULL: QKV_VIZ_DEFAULT_FONT) into a new context *out.
 * A missing or unreadable file is QKV_ERR_IO, a file that is not a font QKV_ERR_FORMAT. */
QKV_API
qkv_status qkv_viz_open(qkv_viz **out, const char *font_path, qkv_error *err);
QKV_API
void qkv_viz_close(qkv_viz *v);

typedef struct {
    uint8_t r, g, b;
} qkv_rgb;

/* 0xRRGGBB as a colour. */
static inline qkv_rgb qkv_rgb_hex(uint32_t hex)
{
    qkv_rgb c = {(uint8_t)(hex >> 16), (uint8_t)(hex >> 8), (uint8_t)hex};
    return c;
}

/* An RGB8 image. pixels (height, width, 3), row-major. Every drawing call is clipped to the
 * rectangle [clip_x0, clip_x1) x [clip_y0, clip_y1), initially the whole canvas. */
typedef struct {
    int width, height;
    uint8_t *pixels;
    int clip_x0, clip_y0, clip_x1, clip_y1;
} qkv_canvas;

/* Largest canvas side accepted, in pixels. */
#define QKV_CANVAS_MAX_SIDE 16384

/* Allocate a width x height canvas filled with background (1 <= sides <= QKV_CANVAS_MAX_SIDE). */
QKV_API
qkv_status qkv_canvas_init(qkv_canvas *c, int width, int height, qkv_rgb background,
                           qkv_error *err);
/* Free the pixels; c is left zeroed. Safe on a zeroed canvas. */
QKV_API
void qkv_canvas_free(qkv_canvas *c);
/* Restrict drawing to the rectangle at (x, y) of size w x h (intersected with the canvas). */
QKV_API
void qkv_canvas_set_clip(qkv_canvas *c, int x, int y, int w, int h);
QKV_API
void qkv_canvas_reset_clip(qkv_canvas *c);
/* The colour of pixel (x, y); (x, y) must lie inside the canvas. */
QKV_API
qkv_rgb qkv_canvas_get(const qkv_canvas *c, int x, int y);

/* Fill the w x h rectangle whose top-left pixel is (x, y). */
QKV_API
void qkv_canvas_fill_rect(qkv_canvas *c, int x, int y, int w, int h, qkv_rgb color);
/* A 1-pixel outline just inside the w x h rectangle at (x, y). */
QKV_API
void qkv_canvas_stroke_rect(qkv_canvas *c, int x, int y, int w, int h, qkv_rgb color);

typedef enum {
    QKV_LINE_AUTO = 0, /* plots: solid, dashed, dash-dot, dotted by series index (as d2l) */
    QKV_LINE_SOLID,
    QKV_LINE_DASHED,
    QKV_LINE_DASHDOT,
    QKV_LINE_DOTTED,
    QKV_LINE_NONE /* plots: markers only */
} qkv_line_style;

/* An antialiased polyline through the n points (x[i], y[i]) in canvas coordinates, width
 * pixels wide with round joins and caps. A non-finite point breaks the line in two. Every
 * pixel is blended once, at the largest coverage any segment gives it, so joins do not
 * darken. QKV_LINE_AUTO and QKV_LINE_NONE draw solid. Fails only on allocation. */
QKV_API
qkv_status qkv_canvas_polyline(qkv_canvas *c, const float *x, const float *y, int n,
                               float width, qkv_line_style style, qkv_rgb color,
                               qkv_error *err);
/* One antialiased segment (a two-point solid polyline). */
QKV_API
qkv_status qkv_canvas_line(qkv_canvas *c, float x0, float y0, float x1, float y1, float width,
                           qkv_rgb color, qkv_error *err);
/* A filled antialiased disc of the given radius centred at (cx, cy), blended with opacity
 * alpha in [0, 1]. */
QKV_API
void qkv_canvas_disc(qkv_canvas *c, float cx, float cy, float radius, qkv_rgb color,
                     float alpha);

/* Where the anchor point (x, y) of a text sits on its box. The box is the text's advance
 * width by the font's line height (ascent + descent), after any rotation. */
typedef enum {
    QKV_ALIGN_LEFT = 0,
    QKV_ALIGN_CENTER = 1,
    QKV_ALIGN_RIGHT = 2
} qkv_halign;
typedef enum {
    QKV_VALIGN_TOP = 0,
    QKV_VALIGN_MIDDLE = 1,
    QKV_VALIGN_BOTTOM = 2
} qkv_valign;

/* The box of UTF-8 text at size_px (the font's pixel size, as FreeType's), unrotated:
 * *w its width, *h the line height. Invalid UTF-8 bytes count as U+FFFD. */
QKV_API
qkv_status qkv_text_size(int *w, int *h, qkv_viz *v, const char *text, float size_px,
                         qkv_error *err);
/* How a text is drawn. */
typedef struct {
    float size_px;     /* the font's pixel size, as FreeType's */
    qkv_halign halign; /* which point of the box sits at the anchor */
    qkv_valign valign;
    int rotate90;      /* 1: a quarter turn counter-clockwise (reading bottom to top, as a
                          y-axis label) */
    qkv_rgb color;
} qkv_text_style;

/* Draw text with antialiasing. The box (rotated: h wide, w tall) is placed so that its
 * (halign, valign) point is at (x, y). If box is not NULL it receives {x, y, w, h} of the box
 * on the canvas. NULL or empty text draws nothing. */
QKV_API
qkv_status qkv_canvas_text(qkv_canvas *c, qkv_viz *v, const char *text, int x, int y,
                           const qkv_text_style *style, int box[4], qkv_error *err);
/* Write into out (size cap bytes) the longest prefix of text that, followed by an ellipsis
 * when cut, is at most max_w pixels wide at size_px. *w receives the result's width. */
QKV_API
qkv_status qkv_text_fit(char *out, size_t cap, int *w, qkv_viz *v, const char *text, float size_px,
                        int max_w, qkv_error *err);

/* Write the canvas as an 8-bit RGB PNG. The file appears atomically: the image goes to a
 * temporary file in the same directory, which is renamed over path only when complete. */
QKV_API
qkv_status qkv_canvas_write_png(const qkv_canvas *c, const char *path, qkv_error *err);

/* ---------------------------------------------------------------------------------------
 * Colours and ticks
 * ------------------------------------------------------------------------------------- */

/* The sequential colour map of heatmaps: t in [0, 1] (clamped) from dark violet through blue,
 * teal and green to yellow, with CIELAB lightness L* rising linearly from 16 to 92, so equal
 * steps in value look like equal steps in brightness, and it stays ordered in grey. */
QKV_API
qkv_rgb qkv_colormap(float t);
/* Colour of a non-finite heatmap cell (NaN, +-Inf): a neutral grey no ramp colour is near. */
#define QKV_COLOR_NONFINITE 0xC0C0C0u

/* The i-th colour of the default series palette (Okabe-Ito, legible by colour-blind readers). */
QKV_API
qkv_rgb qkv_palette(int i);

/* "Nice" tick values in [lo, hi]: multiples of 1, 2, 2.5 or 5 x 10^k, about `target` of them
 * (target >= 2). Writes at most cap values to ticks, returns the count, and the step in *step
 * (if not NULL). lo < hi, both finite; otherwise returns 0. */
QKV_API
int qkv_nice_ticks(double *ticks, int cap, double *step, double lo, double hi, int target);
/* A tick label for value v on an axis with tick spacing step: as many decimals as the step
 * needs, no "-0", exponent form for very large or small magnitudes. */
QKV_API
void qkv_tick_label(char *out, size_t cap, double v, double step);

/* ---------------------------------------------------------------------------------------
 * Heatmaps (d2l's show_heatmaps)
 * ------------------------------------------------------------------------------------- */

/* A rows x cols grid of panels (e.g. layers x heads), each an n x m matrix (e.g. queries x
 * keys). Non-finite values are drawn in QKV_COLOR_NONFINITE and left out of the automatic
 * range. Tick labels are shared by every panel: x under the bottom row (turned 90 degrees when
 * they do not fit across a cell), y left of the first column; when they are denser than a line
 * of text, only every k-th is shown. Labels wider than ~110 px are cut with an ellipsis.
 * Cells are square; the automatic size keeps a panel a few hundred pixels across whether the
 * matrix is 10 x 10 or 60 x 60. Colours are qkv_colormap at 256 levels over [vmin, vmax]. */
typedef struct {
    const float *data;             /* (rows, cols, n, m); panel (r, c) at (r*cols + c)*n*m */
    int rows, cols;                /* panels */
    int n, m;                      /* each panel: n matrix rows (y) x m columns (x) */
    const char *const *panel_titles; /* NULL, or rows*cols strings (a NULL entry: no title) */
    const char *const *x_ticks;    /* NULL, or m labels (e.g. source tokens) */
    const char *const *y_ticks;    /* NULL, or n labels (e.g. target tokens) */
    const char *xlabel, *ylabel;   /* axis labels of every bottom / left panel, or NULL */
    const char *title;             /* figure title, or NULL */
    float vmin, vmax;              /* colour range; vmin == vmax: the finite data's min, max */
    int cell_px;                   /* side of a cell in pixels, 0: automatic */
    int no_colorbar;               /* 0: a shared colour bar right of the grid; 1: none */
} qkv_heatmap_spec;

/* Where qkv_heatmap_draw put things. Panel (r, c) has its top-left pixel at
 * (grid_x + c*(panel_w + gap_x), grid_y + r*(panel_h + gap_y)); cell (i, j) of a panel is the
 * cell_px x cell_px square at (j*cell_px, i*cell_px) inside it. */
typedef struct {
    int width, height;             /* canvas */
    int grid_x, grid_y, panel_w, panel_h, gap_x, gap_y, cell_px;
    int title_box[4];              /* x, y, w, h of the figure title (zeros without one) */
    int colorbar_box[4];           /* x, y, w, h of the colour bar (zeros without one) */
    float vmin, vmax;              /* the colour range used */
    int x_tick_stride, y_tick_stride; /* every k-th label shown (0: no labels) */
    int x_ticks_rotated;           /* 1: x labels read bottom to top */
} qkv_heatmap_geometry;

/* Lay out and draw the figure into *out, which this call initialises (free it with
 * qkv_canvas_free). geom may be NULL. Fails with QKV_ERR_ARG (naming the field) on empty or
 * inconsistent dimensions, a NULL data pointer or a reversed colour range. */
QKV_API
qkv_status qkv_heatmap_draw(qkv_canvas *out, qkv_heatmap_geometry *geom, qkv_viz *v,
                            const qkv_heatmap_spec *s, qkv_error *err);
/* qkv_heatmap_draw, then write the PNG to path. */
QKV_API
qkv_status qkv_heatmap_save(const char *path, qkv_heatmap_geometry *geom, qkv_viz *v,
                            const qkv_heatmap_spec *s, qkv_error *err);

/* ---------------------------------------------------------------------------------------
 * Line plots (d2l's plot)
 * ------------------------------------------------------------------------------------- */

typedef enum { QKV_MARKER_NONE = 0, QKV_MARKER_CIRCLE } qkv_marker;

/* One series. A point whose x or y is not finite (or, on a log axis, whose y <= 0) is not
 * drawn and breaks the line there, as matplotlib does. */
typedef struct {
    const float *x;        /* n values, or NULL for 0, 1, ..., n-1 */
    const float *y;        /* n values */
    int n;
    const char *label;     /* legend entry, or NULL */
    uint32_t color;        /* 0xRRGGBB; 0: qkv_palette(series index) */
    qkv_line_style style;  /* QKV_LINE_AUTO: by series index; QKV_LINE_NONE: markers only */
    float line_width;      /* pixels, 0: 2 */
    qkv_marker marker;     /* QKV_MARKER_CIRCLE: a disc at every point */
    float marker_radius;   /* pixels, 0: 4 */
    float marker_alpha;    /* opacity in (0, 1], 0: 1 */
} qkv_series;

typedef struct {
    const qkv_series *series;
    int nseries;
    const char *title, *xlabel, *ylabel; /* each may be NULL */
    int log_y;             /* 1: logarithmic y axis */
    float xlim[2], ylim[2]; /* axis ranges; equal values: from the data, with a 4% margin */
    int width, height;     /* canvas, 0: 720 x 480 */
    int no_legend;         /* 0: a legend (if any series has a label) in the corner of the plot
                              area that covers the fewest data; 1: none */
} qkv_plot_spec;

/* Where qkv_plot_draw put things: the plot area and the data ranges it maps. Data (x, y) is
 * at canvas x = area_x + (x - xmin)/(xmax - xmin) * area_w, y = area_y + area_h - (Y - ymin)/
 * (ymax - ymin) * area_h, with Y = log10(y) and ymin, ymax in log10 units when log_y. */
typedef struct {
    int width, height;
    int area_x, area_y, area_w, area_h;
    double xmin, xmax, ymin, ymax;
    int log_y;
    int title_box[4];      /* zeros without a title */
    int legend_box[4];     /* zeros without a legend */
} qkv_plot_geometry;

/* Lay out and draw the plot into *out, which this call initialises. geom may be NULL.
 * QKV_ERR_ARG names the series and field at fault (no series, n < 1, NULL y, size out of
 * range, reversed limits); QKV_ERR_NUMERIC if no series has a single drawable point. */
QKV_API
qkv_status qkv_plot_draw(qkv_canvas *out, qkv_plot_geometry *geom, qkv_viz *v,
                         const qkv_plot_spec *s, qkv_error *err);
/* qkv_plot_draw, then write the PNG to path. */
QKV_API
qkv_status qkv_plot_save(const char *path, qkv_plot_geometry *geom, qkv_viz *v,
                         const qkv_plot_spec *s, qkv_error *err);

#ifdef __cplusplus
}
#endif

#endif /* QKV_H */
