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
    weight lookup;    /* the embedding as its lookups read it: int8 at int8 (precision.c) */
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

/* The loss pass running, as its qkv_loss_options gave it: the first example of this rank's
 * shard (dropout counters start there) and the hook told when gradients are final. */
typedef struct {
    uint64_t first_example;
    void (*grads_done)(void *ctx);
    void *grads_ctx;
} model_pass;

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
    int *self_len, *cross_len; /* (cap) the keys each row of a step sees, on the host */
    /* a step's int arrays where the kernels read them: tokens, cache rows, sources, the
     * lengths above (cap each) and the ancestry (cap, T) */
    int *tok_k, *row_k, *src_k, *self_len_k, *cross_len_k, *ancestry_k;
    int ancestry_ld; /* the ancestry's stride there: the step's longest row */
    int *ancestry_host; /* (cap, T) the ancestry packed before it goes up, or NULL */
    float *logits_host; /* (cap, V) a step's logits on the host, where the kernels' memory is
                         * not the host's (else NULL: logits is read directly) */
    const backend_ops *mem; /* the table whose memory holds buffer */
    float *buffer;
} decode_state;

/* Room for cap rows of T positions of a stack, n_src sources of Ts positions (0 without
 * cross-attention) and logits over V tokens (0: none), the caches of type kv, in the memory
 * of be's table. */
qkv_status decode_state_init(decode_state *st, const backend *be, const stack_dims *d, int cap,
                             int T, int n_src, int Ts, int V, kv_dtype kv, qkv_error *err);
/* The floats of the state's one buffer (decode_state_init's plan; the unit tests check it). */
size_t decode_state_floats(const stack_dims *d, int cap, int T, int n_src, int Ts, int V,
                           kv_dtype kv);
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
 * holds the last block's output (r->n, C). src_valid (n_src): the sources' lengths. -1 when
 * the step's ints did not reach the device (nothing ran), else 0. */
int stack_step(const backend *be, const stack_dims *d, const stack_w *w, const float *pos_table,
               decode_state *st, const decoder_rows *r, const int *tok, const int *src_valid);

/* ---- the output layer ---------------------------------------------------------------------- */

/* logits (N, V) = y W_out^T + b_out. */
void head_forward(const backend *be, float *logits, const float *y, const weight *W,
                  const float *b, int N, int C, int V);
/* After stack_step of n rows: the final norm (when the stack has one), then logits (n, V). */
void head_step(const backend *be, const stack_dims *d, const stack_w *w, const weight *W,
               const float *b, decode_state *st, int n, float *logits, int V);
/* The same, but instead of the logits each row's best tokens and log normaliser as rq asks
 * (ops/cpu/best.h; st->logits is the table's scratch). */
void head_step_best(const backend *be, const stack_dims *d, const stack_w *w, const weight *W,
                    const float *b, decode_state *st, int n, const best_request *rq, int V);
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

/* ---- what both models own ---------------------------------------------------------------
 * On a device (core_set_device) a model's buffers live in the device's memory: the
 * parameters, the gradients, Adam's moments, the sinusoidal table, the activation arena and
 * every decoding state, where the device's kernels read them. The host keeps its own copy of
 * the parameters, the one the API hands out, saves and loads, and the two move:
 *   up    the parameters before the next pass when the host's copy may have changed (a
 *         load, a pointer handed out); a batch's ids, targets and lengths with each pass; a
 *         decoding step's tokens, cache rows, lengths and ancestry with each step; Adam's
 *         moments when the optimizer is not the one the device last updated;
 *   down  what the API returns: logits, attention weights, a step's logits (the loss sums
 *         come back from the loss entry itself); the parameters when the host asks for them
 *         after training changed them; the gradients for a data-parallel sum or the API;
 *         Adam's moments for a checkpoint.
 * On the host (dev NULL) the same code runs with host_memory tables: an upload is a copy,
 * and results are read where the kernels wrote them. */
typedef enum { COPIES_SAME, HOST_NEWER, DEVICE_NEWER } copies;

typedef struct {
    const device *dev;
    void *ctx;                  /* dev->open's */
    float *host_params;         /* the host's copy of the parameters */
    float *host_pos_table;      /* and of the sinusoidal table */
    float *host_grads;          /* the gradients downloaded for the API, or NULL */
    copies params;              /* which copy of the parameters is newer */
    uint16_t *bf16;             /* bf16: the weights' copy the products read (n_params) */
    float *adam_m, *adam_v;     /* Adam's moments of the optimizer adam_of after its step */
    const qkv_adam *adam_of;    /* adam_step, or NULL: the host's moments come first */
    int64_t adam_step;
    int adam_host_current;      /* whether adam_of's own moments equal these */
} device_side;

typedef struct {
    size_t n_params;
    float *params, *grads;   /* grads: NULL until training asks for them */
    qkv_param_info *tensors; /* the parameter table: name, shape, offset of each tensor */
    char (*names)[64];
    int n_tensors;
    float *pos_table; /* (max_len, C) sinusoidal */
    size_t pos_floats;
    float *arena;     /* activations */
    size_t arena_cap;
    int flash_min_keys;   /* softmax attention over this many keys or more runs flash */
    model_precision prec; /* the backend's state: how the linear layers multiply */
    qkv_kv_cache kv_cache; /* the decoding caches' type (AUTO: as the precision) */
    char source[512];      /* the directory it was loaded from, for messages ("": made here) */
    /* Where params, grads, pos_table, the arena and decoding states live: the table whose
     * memory entries allocate them (the host's: backend_cpu_fp32), and the device side
     * (NULL on the host). generation counts moves, so that a decoding state made before
     * one is refused rather than read. */
    const backend_ops *mem;
    device_side *dev;
    unsigned generation;
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
/* The backend the model computes on now. */
backend core_backend(model_core *c);
/* The host's parameters for a caller that may write to them: decoding stops trusting the
 * bf16 copy, and on a device they go up before the next pass. */
float *core_params(model_core *c);
/* The host's parameters as they are now, to read (downloaded first when training on a
 * device changed them); core_host_current reports a failed download (core_host_params then
 * returns the host's copy as it was). */
const float *core_host_params(const model_core *c);
qkv_status core_host_current(const model_core *c, qkv_error *err);
/* Sets the precision, then has the model type its weights for it (retype(model): its stacks'
 * stack_retype and its output layer's core_weight). */
qkv_status core_set_precision(model_core *c, qkv_precision p, void (*retype)(void *model),
                              void *model, qkv_error *err);
/* W, one of the parameters' weight matrices, typed for the precision now set
 * (models/precision.h, precision_weight; on a device its bf16 copy there). */
weight core_weight(const model_core *c, const float *W);
/* Every linear layer's weight of a stack typed for the precision now set (core_weight): done
 * once when the precision or the device is set. */
void stack_retype(stack_w *s, const stack_dims *d, const model_core *c);
/* Before a pass (decoding: a pass that reads the weights' typed copies): the parameters up
 * when the host's are newer, the typed copies made current (precision_prepare). */
qkv_status core_prepare(model_core *c, int decoding, qkv_error *err);
/* After a pass: the device's first failure since the last call (backend_ops.finish). */
qkv_status core_finish(const model_core *c, qkv_error *err);
/* After an upload or download that returned -1: the device's report (QKV_ERR_DEVICE). */
qkv_status transfer_failed(const backend *be, qkv_error *err);

/* ---- devices -------------------------------------------------------------------------- */

/* Moves the model's buffers to dev (NULL: the host), walking view (the parameter views) over
 * the new buffers, and has the model retype its weights (core_set_precision). Fails,
 * changing nothing, when dev is missing (no driver, no GPU), when the model needs what dev
 * lacks (linear attention, int8, bf16 without a bf16 table) or on no memory there. The
 * activations and the gradients are made again on first use; decoding states made before
 * are refused (generation). */
qkv_status core_set_device(model_core *c, const device *dev, int linear_attention,
                           param_walk walk, const void *cfg, void *view,
                           void (*retype)(void *model), void *model, qkv_error *err);
/* Frees the device side and its buffers: the model is on the host's buffers again. */
void core_device_free(model_core *c);
/* The device's name, or "cpu". */
const char *core_device_name(const model_core *c);
/* The device behind d: NULL for the CPU; QKV_ERR_ARG for one this build lacks. */
qkv_status core_device_of(const device **out, qkv_device d, qkv_error *err);

/* ---- training on either side (training/step.c) -------------------------------------- */

/* The gradients the kernels write, allocated and zeroed on first use, views walked (NULL:
 * no memory). */
float *core_grads(model_core *c, param_walk walk, const void *cfg, void *view);
/* The gradients on the host (the API's, a data-parallel sum), and back up after a host
 * change (a no-op on the host). */
float *core_grads_host(model_core *c);
qkv_status core_grads_put(model_core *c, qkv_error *err);
void core_grads_zero(model_core *c);
/* The gradients' global norm, and when it passes max_norm > 0 the gradients scaled to it
 * (qkv_clip_grad_norm). */
double core_clip_grads(model_core *c, double max_norm);
/* One Adam step (h: its constants; opt->step already counts it) over the parameters and
 * gradients, with opt's moments (on a device, its copies there). */
qkv_status core_adam(model_core *c, qkv_adam *opt, const adam_hyper *h, qkv_error *err);
/* opt's moments on the host as the device's are (before a checkpoint is written), and the
 * device's forgotten after the host's changed (a checkpoint read, a broadcast). */
qkv_status core_adam_to_host(const model_core *c, const qkv_adam *opt, qkv_error *err);
void core_adam_forget(model_core *c);

/* What the two models' loss entry points (qkv_transformer_loss, qkv_lm_loss) share around
 * their own forward and backward passes. core_loss_begin, before the forward: refuses a
 * backward pass at a precision that does not train, makes the gradients (core_grads over
 * walk, cfg, grads) and sets the forward's first example (pass). core_loss_end, after it with
 * the logits in place: the head's loss (h) into *loss_sum and *tokens (either may be NULL),
 * then for a backward pass backward(model, p, o->dropout_seed) under the options' hooks
 * (pass, for its duration), and core_finish. */
qkv_status core_loss_begin(model_core *c, model_pass *pass, const qkv_loss_options *o,
                           param_walk walk, const void *cfg, void *grads, qkv_error *err);
qkv_status core_loss_end(model_core *c, model_pass *pass, const qkv_loss_options *o,
                         const head_loss_args *h, void (*backward)(void *model, float p,
                                                                   uint64_t seed),
                         void *model, float p, double *loss_sum, int *tokens, qkv_error *err);

/* n ids into the kernels' memory at dst (an arena slice): on a device, first checked against
 * [0, V) as the host's kernels check them as they read, with their messages (targets: the
 * loss's, which skips QKV_PAD; else the embedding's). */
qkv_status stage_ids(const backend *be, int *dst, const int *ids, size_t n, int V, int targets,
                     qkv_error *err);
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
/* n ints: a batch's ids, targets or lengths as the kernels read them. */
static inline int *arena_take_ints(arena *a, size_t n) { return (int *)arena_take(a, n); }
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
