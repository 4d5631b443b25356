/* SPDX-License-Identifier: MIT */
/* What both models are made of. Private to the library.
 *
 * A Transformer block is [self-attention, encoder-decoder attention (decoder blocks only),
 * position-wise FFN], each wrapped in a residual sublayer connection with its LayerNorm
 * (paper, section 3.1). A stack is the embedding (scaled by sqrt(d_model), plus positions,
 * dropout), its blocks and an optional final LayerNorm. Then
 *   the encoder-decoder (encoder_decoder.c)  an encoder stack, whose output every decoder
 *                                             block attends to, and a causal decoder stack
 *   the language model (language_model.c)     one causal stack without cross-attention
 * each with an output projection to the vocabulary. A stack runs three ways, one function
 * each in block.c, side by side per sublayer: forward (training and evaluation, every
 * position at once), backward, and step (decoding: one new position per sequence over a
 * key-value cache). Every kernel comes from the backend (backend/backend.h). */
#ifndef QKV_MODEL_H
#define QKV_MODEL_H

#include "core/internal.h"
#include "layers/layers.h"
#include "models/decoder.h"
#include "models/precision.h"

/* The number of keys from which softmax attention runs the flash kernel, unless a model is
 * told otherwise (model_core.flash_min_keys): the crossover of qkv bench attention (forward +
 * backward, d = 64) on AVX2 is about 256. */
enum { FLASH_MIN_KEYS = 256 };

/* ---- weights: named views into one flat parameter buffer (or its gradients) -------------- */

typedef struct {
    mha_w self; /* self-attention */
    qkv_layernorm_weights self_norm;
    mha_w cross; /* encoder-decoder attention: decoder blocks only, else NULLs */
    qkv_layernorm_weights cross_norm;
    ffn_w ffn;
    qkv_layernorm_weights ffn_norm;
} block_w;

typedef struct {
    float *embedding; /* (V, C) */
    float *positions; /* (max_len, C) learned, or NULL: the sinusoidal table */
    block_w *blocks;
    qkv_layernorm_weights norm; /* after the last block (final_norm), else NULLs */
} stack_w;

/* ---- the shape of a stack ------------------------------------------------------------------ */

typedef struct {
    int vocab; /* the embedding's rows */
    int C, F, heads, layers;
    int pre_norm, bias;
    int cross;            /* its blocks attend to an encoder's output */
    int linear_attention; /* self-attention by linear attention (phi = elu + 1) */
    int id;               /* 0 encoder or language model, 1 decoder: names its dropout streams */
    qkv_activation act;
    float ln_eps;
    float embed_scale; /* sqrt(C) (paper, section 3.4), or 1 */
} stack_dims;

static inline qkv_mha_config stack_mha_config(const stack_dims *d)
{
    qkv_mha_config mc = {d->C, d->C, d->heads, d->C / d->heads, d->bias};
    return mc;
}

static inline qkv_ffn_config stack_ffn_config(const stack_dims *d)
{
    qkv_ffn_config fc = {d->C, d->F, d->act};
    return fc;
}

/* ---- activations of a forward pass, kept for its backward ---------------------------------
 * One residual sublayer connection. Post-norm:
 *   out = LayerNorm(z), z = x + dropout(s), s = Sublayer(x)
 * Pre-norm:
 *   out = x + dropout(s), s = Sublayer(u), u = LayerNorm(x) */
typedef struct {
    float *u, *u_mean, *u_rstd; /* pre-norm only */
    float *s;
    qkv_addnorm_cache post; /* post-norm only: z, mean, rstd */
    float *out;
} sublayer_acts;

typedef struct {
    sublayer_acts self;
    mha_acts self_att;
    sublayer_acts cross; /* decoder blocks only */
    mha_acts cross_att;
    sublayer_acts ff;
    qkv_ffn_cache ffn; /* (N, F) the FFN's hidden layer before and after its activation */
} block_acts;

typedef struct {
    float *x; /* (B*T, C) embedded + positions + dropout: the first block's input */
    block_acts *blocks;
    float *mean, *rstd, *out; /* (B*T, C) after the final norm (a copy without one) */
} stack_acts;

/* ---- one pass of a stack --------------------------------------------------------------------- */

typedef struct {
    const stack_dims *d;
    int B, T;                  /* sequences and positions */
    int Tm;                    /* positions of the memory (cross-attention) */
    const qkv_mask *self_mask; /* encoder: the source lengths; decoder, LM: causal */
    const qkv_mask *mem_mask;  /* cross-attention: the source lengths */
    const float *mem;          /* (B*Tm, C) the encoder's output, or NULL */
    float p;                   /* dropout rate (0 in evaluation) */
    uint64_t seed;             /* the step's dropout seed: each site draws its own stream */
    float *scratch;
    uint64_t first;            /* the batch's first sequence in the whole batch of a step run
                                * on several ranks (0 on one): dropout counters start there */
    void (*grads_done)(void *ctx); /* backward: after each block and the embedding (or NULL) */
    void *grads_ctx;
} stack_pass;

/* Work space of a backward pass, (B*T, C) each. */
typedef struct {
    float *dh, *ds, *din; /* d(the stream), d(a sublayer's output), d(its input) */
} stack_grad_work;

/* Embedding, blocks, final norm: a->out. pos_table: the sinusoidal table, when the stack has
 * no learned positions. Fails only on a token id outside the vocabulary. */
qkv_status stack_forward(const backend *be, const stack_pass *k, stack_acts *a, const stack_w *w,
                         const float *pos_table, const int *ids, qkv_error *err);
/* g += the gradients of the stack's parameters given dout = d(a->out) (B*T, C); d_mem (B*Tm,
 * C) += the memory's. */
void stack_backward(const backend *be, const stack_pass *k, const stack_acts *a, const stack_w *w,
                    stack_w *g, const int *ids, const float *dout, float *d_mem,
                    const stack_grad_work *work);

/* ---- decoding: one new position per row, over a key-value cache ----------------------------
 * The state a decoder (models/decoder.h) keeps: cap cache rows of T positions, each holding
 * every layer's keys and values of one sequence so far (or its linear-attention state), the
 * encoder outputs of n_src sources of Ts positions projected to every decoder layer's
 * cross-attention keys and values, and one step's vectors. */
typedef struct {
    int T, Ts;      /* cache positions, source positions */
    int cap, n_src; /* rows and sources the buffers hold */
    /* The caches hold values of type kv (float or bf16: ops/cpu/cached_attention.h), fixed
     * when the state is made; offsets into them count values. */
    kv_dtype kv;
    void *self_k, *self_v;            /* per layer (cap, T, C): keys and values so far */
    void *cross_k, *cross_v;          /* per layer (n_src, Ts, C): the encoder output projected */
    float *kv_stage;                  /* bf16: (n_src Ts, C) a projection before it is rounded */
    qkv_linear_attention_state *sums; /* linear attention: per layer and row, the state */
    int n_sums;
    float *x, *u, *q, *k, *v, *ctx, *s, *mean, *rstd, *P, *logits;
    qkv_ffn_cache ffn;
    int *self_len, *cross_len; /* (cap) the keys each row of a step sees */
    float *buffer;
} decode_state;

/* Room for cap rows of T positions of a stack, n_src sources of Ts positions (0 without
 * cross-attention) and logits over V tokens (0: none), the caches of type kv. */
qkv_status decode_state_init(decode_state *st, const stack_dims *d, int cap, int T, int n_src,
                             int Ts, int V, kv_dtype kv, qkv_error *err);
/* Value i of one of st's caches. */
static inline void *kv_at(const decode_state *st, void *cache, size_t i)
{
    return (char *)cache + i * (st->kv == KV_BF16 ? sizeof(uint16_t) : sizeof(float));
}
/* Cache values at..at + N C - 1 = x (N, C) W^T + b, W (C, C): the cross-attention keys or
 * values of encoder outputs (through st->kv_stage and rounded, in a bf16 cache). */
void decode_kv_project(const backend *be, const decode_state *st, void *cache, size_t at,
                       const float *x, const weight *W, const float *b, int N, int C);
/* Cache row `row` from positions 0 .. n - 1 of a forward pass: layer l's self-attention keys
 * k[l] and values v[l] (n, C), or with linear attention the state they build (q[l] needed). */
void decode_state_fill(const backend *be, const stack_dims *d, decode_state *st, int row, int n,
                       const stack_acts *a);
void decode_state_free(decode_state *st);

/* The rows' input tokens tok (r->n; models/decoder.h's decoder_rows) through the stack, each
 * at its own position, appending
 * its keys and values to its cache row (or advancing its linear-attention state); st->x
 * holds the last block's output (r->n, C). src_valid (n_src): the sources' lengths. */
void stack_step(const backend *be, const stack_dims *d, const stack_w *w, const float *pos_table,
                decode_state *st, const decoder_rows *r, const int *tok, const int *src_valid);

/* ---- the output layer ---------------------------------------------------------------------- */

/* logits (N, V) = y W_out^T + b_out. */
void head_forward(const backend *be, float *logits, const float *y, const weight *W,
                  const float *b, int N, int C, int V);
/* After stack_step of n rows: the final norm (when the stack has one), then logits (n, V). */
void head_step(const backend *be, const stack_dims *d, const stack_w *w, const weight *W,
               const float *b, decode_state *st, int n, float *logits, int V);
/* The loss over N rows of logits (V) against targets (QKV_PAD not counted). With backward
 * the logits become their gradient, scaled by grad_scale (<= 0: 1 / count), and db += its
 * column sums (the output bias's gradient). */
typedef struct {
    float *loss, *lse, *logits; /* (N), (N), (N, V) */
    float *db;                  /* (V) */
    const int *targets;         /* (N) */
    int N, V;
    float label_smoothing;
    int backward;
    float grad_scale;
    float *scratch;
} head_loss_args;
/* *sum of the token losses and *count of the tokens counted; fails on a target outside the
 * vocabulary or a loss that is not finite. */
qkv_status head_loss(const backend *be, const head_loss_args *h, double *sum, int *count,
                     qkv_error *err);

/* ---- what both models own --------------------------------------------------------------- */

typedef struct {
    size_t n_params;
    float *params, *grads;   /* grads: NULL until training asks for them */
    qkv_param_info *tensors; /* the parameter table: name, shape, offset of each tensor */
    char (*names)[64];
    int n_tensors;
    float *pos_table; /* (max_len, C) sinusoidal */
    float *arena;     /* activations */
    size_t arena_cap;
    int flash_min_keys;   /* softmax attention over this many keys or more runs flash */
    model_precision prec; /* the backend's state: how the linear layers multiply */
    qkv_kv_cache kv_cache; /* the decoding caches' type (AUTO: as the precision) */
    char source[512];      /* the directory it was loaded from, for messages ("": made here) */
} model_core;

/* The parameter walk: a model's table in a fixed order hands out consecutive slices of one
 * flat buffer, so that parameters, gradients and Adam's moments share one layout and a
 * checkpoint is one write. With a NULL base it only counts (the offsets are still right);
 * with tensors and names it records each tensor's name, shape and offset. */
typedef struct {
    float *base;
    size_t offset;
    qkv_param_info *tensors;
    char (*names)[64];
    int count;
} param_walker;

float *param_take(param_walker *w, const char *name, int rows, int cols); /* cols 0: vector */
/* .gamma, .beta */
qkv_layernorm_weights param_take_norm(param_walker *w, const char *prefix, int C);
ffn_w param_take_ffn(param_walker *w, const char *prefix, int C, int F); /* .W1 .b1 .W2 .b2 */
/* .W_q, .b_q, ..., .W_o, .b_o (biases only with bias), contiguous as qkv_mha_weights_view. */
mha_w param_take_mha(param_walker *w, const char *prefix, int C, int bias);

/* A model's walk over its parameter table: hands out the slices of w's buffer into view. */
typedef void (*param_walk)(param_walker *w, const void *cfg, void *view);

/* Counts the table, allocates it, the parameters and the sinusoidal table (max_len, C), and
 * points view into the parameters. */
/* Floats in one block (L of them make a stack): self-attention, cross-attention when cross,
 * the FFN, and their LayerNorms; in double, for configurations too large to build. */
double block_params(double C, double F, int bias, int cross);
/* QKV_ERR_ARG "key = v is over the limit NAME = limit" when v > limit. */
qkv_status limit_check(const char *key, int v, int limit, const char *name, qkv_error *err);
/* QKV_ERR_ARG when a configuration's n_params floats (with its max_len x C sinusoidal table)
 * pass QKV_MAX_PARAMS. */
qkv_status params_check(double n_params, int max_len, int C, qkv_error *err);

qkv_status core_build(model_core *c, param_walk walk, const void *cfg, void *view, int max_len,
                      int C, qkv_error *err);
void core_free(model_core *c);
/* d2l's initialisation; tied: the embeddings are also output projections. */
void core_init_params(model_core *c, uint64_t seed, int C, int F, int tied);
/* The gradient buffer, allocated (zeroed) on first use and viewed into view. */
float *core_grads(model_core *c, param_walk walk, const void *cfg, void *view);
/* The backend the model computes on now. */
backend core_backend(model_core *c);
/* The parameters for a caller that may write to them: decoding stops trusting the bf16
 * copy. */
float *core_params(model_core *c);
/* Sets the precision, then has the model type its weights for it (retype(model): its stacks'
 * stack_retype and its output layer's precision_weight). */
qkv_status core_set_precision(model_core *c, qkv_precision p, void (*retype)(void *model),
                              void *model, qkv_error *err);
/* Every linear layer's weight of a stack typed for the precision now set (models/precision.h,
 * precision_weight): done once when the precision is set. */
void stack_retype(stack_w *s, const stack_dims *d, const model_core *c);
qkv_status core_set_kv_cache(model_core *c, qkv_kv_cache kv, qkv_error *err);
/* The type of the key-value caches that decoding states made now get: kv_cache, or with
 * QKV_KV_CACHE_AUTO bf16 at any precision but float32 (so float32 results stay those of a
 * float32 cache). */
kv_dtype core_kv_cache(const model_core *c);
/* The same as the public enum (qkv_transformer_kv_cache_type, qkv_lm_kv_cache_type). */
qkv_kv_cache core_kv_cache_type(const model_core *c);

/* Activations laid out in the arena: an arena with a NULL base only counts. */
typedef struct {
    float *base;
    size_t used;
} arena;

float *arena_take(arena *a, size_t n);
/* A stack's activations over B x T positions (Tm memory positions), each attention on the
 * kernel the backend chooses for its key count and o; returns the scratch its attentions
 * need. */
size_t stack_layout(arena *a, const backend *be, stack_acts *s, const stack_dims *d, int B,
                    int T, int Tm, const attention_options *o);
/* The output layer's activations over N rows (logits (N, V), their log-sum-exp and losses
 * (N)), the backward's work space over Nw rows (stack_grad_work, (Nw, C) each), then the
 * scratch, which *scratch receives: the largest of need (the stacks' attentions) and what
 * the FFN, a sublayer and the loss need. */
void head_layout(arena *a, const backend *be, float **logits, float **lse, float **loss,
                 stack_grad_work *work, float **scratch, size_t N, size_t Nw, int C, int F,
                 int V, size_t need);
/* Counts with layout(NULL base), grows the arena, lays out for real, and prepares the
 * backend's buffers for the pass. */
qkv_status core_layout(model_core *c, void (*layout)(void *model, arena *a), void *model,
                       const char *what, qkv_error *err);

#endif
