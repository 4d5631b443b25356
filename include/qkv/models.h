/* SPDX-License-Identifier: MIT */
/* qkv/models.h: the models: the encoder-decoder Transformer and the decoder-only language model,
 * their precision, decoding (greedy, beam, generation with sampling) and their text. Part of
 * qkv.h, which includes every part; its opening comment is the tour. */
#ifndef QKV_API_MODELS_H
#define QKV_API_MODELS_H

#include "qkv/layers.h"
#include "qkv/text.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------
 * Precision of the models' matrix products
 * QKV_PRECISION_BF16 runs every product of a model's linear layers (attention projections,
 * FFN, output logits; forward, dX and dW) with both operands rounded to bfloat16 (to
 * nearest even: a relative error of at most 2^-8 each) and float32 sums, on AVX512-BF16
 * (VDPBF16PS: twice float32's multiply-adds per instruction). Parameters, gradients, Adam's
 * moments, attention itself, norms, softmax and the loss stay float32. Decoding reads a
 * bf16 copy of the weights, half the bytes, which the model owns. The standalone blocks
 * (qkv_linear_*, qkv_ffn_*, qkv_mha_*) are always float32.
 * QKV_PRECISION_INT8 (inference only) runs the same products with int8 weights, quantised
 * once per output channel (scale max|W[o,:]| / 127, a copy of one byte per weight the model
 * owns), and int8 activations, quantised per row at each product (scale max|x[n,:]| / 127),
 * multiplied with exact int32 sums on AVX512-VNNI (VPDPBUSD) and scaled back to float32:
 * a quarter of float32's bytes per weight read. Everything else stays float32. Training at
 * int8 is refused (QKV_ERR_ARG).
 * ------------------------------------------------------------------------------------- */

typedef enum {
    QKV_PRECISION_FP32 = 0, /* float32 throughout: the default */
    QKV_PRECISION_BF16 = 1, /* the linear layers' products in bf16 with float32 sums */
    QKV_PRECISION_INT8 = 2  /* inference: int8 weights and activations, int32 sums */
} qkv_precision;

/* The type of the key-value cache that decoding keeps (the keys and values of every position
 * so far, and the cross-attention keys and values of the encoder output), which a decoding
 * step reads in full. QKV_KV_CACHE_BF16 stores them in bf16 (rounded to nearest even: a
 * relative error of at most 2^-8 per value) and widens them back to float32 exactly, so that
 * the scores, the softmax and the weighted sum stay float32 and a step at a long position
 * reads half the bytes. AUTO (the default) follows the precision: float32 at
 * QKV_PRECISION_FP32 (its results are exactly those of a float32 cache), bf16 at
 * QKV_PRECISION_BF16, and at QKV_PRECISION_INT8 bf16 where the CPU has AVX512-BF16, float32
 * elsewhere (qkv_transformer_kv_cache_type says which). Any CPU runs a bf16 cache (AVX-512 F
 * and BW make it fast). */
typedef enum {
    QKV_KV_CACHE_AUTO = 0, /* as the precision: fp32 at QKV_PRECISION_FP32, else bf16 */
    QKV_KV_CACHE_FP32 = 1,
    QKV_KV_CACHE_BF16 = 2
} qkv_kv_cache;

/* "auto", "fp32" or "bf16". */
QKV_API
const char *qkv_kv_cache_name(qkv_kv_cache c);
/* *c from "auto", "fp32" or "bf16"; QKV_ERR_ARG naming the choices otherwise. */
QKV_API
qkv_status qkv_kv_cache_parse(qkv_kv_cache *c, const char *name, qkv_error *err);

/* Whether this CPU runs QKV_PRECISION_BF16 (AVX512F, BW, VL, DQ and BF16). */
QKV_API
int qkv_bf16_supported(void);
/* Whether this CPU runs QKV_PRECISION_INT8 (AVX512F, BW, VL, DQ and VNNI). */
QKV_API
int qkv_int8_supported(void);
/* "fp32", "bf16" or "int8". */
QKV_API
const char *qkv_precision_name(qkv_precision p);
/* *p from "fp32", "bf16" or "int8"; QKV_ERR_ARG naming the choices otherwise. */
QKV_API
qkv_status qkv_precision_parse(qkv_precision *p, const char *name, qkv_error *err);

/* ---------------------------------------------------------------------------------------
 * The device a model computes on
 * QKV_DEVICE_CPU (the default) keeps everything in the host's memory. QKV_DEVICE_CUDA, in a
 * libqkv built with CUDA (make CUDA=1; docs/gpu.md), moves a model's parameters, gradients,
 * Adam's moments, activations and decoding caches to the first NVIDIA GPU and runs every
 * kernel there: products on cuBLAS (fp32, or bf16 on the tensor cores at
 * QKV_PRECISION_BF16), the rest on the library's own kernels. The host keeps a copy of the
 * parameters, which qkv_transformer_params hands out and saving reads (made current on
 * demand); logits, losses and attention weights come back as on the CPU. Int8 precision and
 * linear attention run on the CPU only.
 * ------------------------------------------------------------------------------------- */

typedef enum { QKV_DEVICE_CPU = 0, QKV_DEVICE_CUDA = 1 } qkv_device;

/* "cpu" or "cuda". */
QKV_API
const char *qkv_device_name(qkv_device d);
/* *d from "cpu" or "cuda"; QKV_ERR_ARG naming the choices otherwise. */
QKV_API
qkv_status qkv_device_parse(qkv_device *d, const char *name, qkv_error *err);
/* QKV_OK when models can move to d now; else QKV_ERR_ARG saying why not (a build without
 * CUDA, no driver, no GPU), which the message names. */
QKV_API
qkv_status qkv_device_check(qkv_device d, qkv_error *err);

/* ---------------------------------------------------------------------------------------
 * Limits on a model's dimensions. qkv_transformer_config_check and qkv_lm_config_check
 * refuse a value past them, and a configuration whose parameters (with the sinusoidal
 * table) would pass QKV_MAX_PARAMS floats, before anything is allocated: a hostile or
 * mistyped config.json ("src_vocab": 10000000, "max_len": 2000000000) fails at once with the
 * key and the limit instead of asking for gigabytes. Loading a model directory also refuses
 * a config.json that describes more parameters than its model.safetensors can hold.
 * ------------------------------------------------------------------------------------- */

#define QKV_MAX_VOCAB (1 << 21)          /* tokens in a vocabulary */
#define QKV_MAX_D_MODEL (1 << 14)        /* d_model */
#define QKV_MAX_FFN (1 << 16)            /* the FFN's hidden size */
#define QKV_MAX_LAYERS 256               /* blocks in a stack */
#define QKV_MAX_LEN (1 << 16)            /* max_len, positions in the table */
#define QKV_MAX_PARAMS (1LL << 31)       /* floats: 8 GiB of weights, 24 GiB when training */

/* ---------------------------------------------------------------------------------------
 * The encoder-decoder Transformer (paper, figure 1; d2l 11.7)
 * ------------------------------------------------------------------------------------- */

typedef enum {
    QKV_TIE_NONE = 0,   /* three separate matrices */
    QKV_TIE_OUTPUT = 1, /* target embedding = output projection (paper, section 3.4) */
    QKV_TIE_ALL = 2     /* source and target embeddings and output projection (one vocabulary) */
} qkv_tie;

typedef enum {
    QKV_POS_INTERLEAVED = 0, /* P[i, 2j] = sin, P[i, 2j+1] = cos (paper, d2l) */
    QKV_POS_HALVES = 1,      /* P[i, j] = sin, P[i, C/2 + j] = cos (Marian, Hugging Face) */
    QKV_POS_FAIRSEQ = 2      /* fairseq's table as M2M100 and NLLB use it: [sin | cos] at
                              * frequencies exp(-j ln(10000) / (C/2 - 1)), position i at row
                              * i + 2 (counted from the padding index 1 + 1) */
} qkv_pos_layout;

/* The names config.json and the command line use ("unknown" outside the enum), and back
 * (QKV_ERR_ARG naming the choices otherwise): "none", "output", "all"; "interleaved",
 * "sin_cos", "fairseq". */
QKV_API
const char *qkv_tie_name(qkv_tie t);
QKV_API
qkv_status qkv_tie_parse(qkv_tie *t, const char *name, qkv_error *err);
QKV_API
const char *qkv_pos_layout_name(qkv_pos_layout p);
QKV_API
qkv_status qkv_pos_layout_parse(qkv_pos_layout *p, const char *name, qkv_error *err);

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
    /* What pretrained models (Marian / OPUS-MT, qkv import marian) need; the defaults are
     * d2l's behaviour, and a config.json without these keys reads as the defaults. */
    qkv_pos_layout pos_layout; /* the sinusoidal table's layout */
    int scale_embedding;       /* 1: embeddings scaled by sqrt(d_model) (paper, 3.4); 0: not */
    int decoder_start;         /* the reserved id decoding starts from: QKV_BOS, QKV_PAD
                                  (Marian's decoder_start_token_id) or QKV_EOS (M2M100's,
                                  NLLB's); also training's first decoder input */
    int suppress_pad;          /* 1: decoding never produces <pad> (its log-probability is
                                  set to -inf after normalisation, as Hugging Face's
                                  bad_words_ids does) */
    int forced_eos;            /* 1: a beam hypothesis cut at the length limit ends with an
                                  <eos> of probability 1, counted in its length penalty
                                  (Marian's forced_eos_token_id; greedy output unchanged) */
} qkv_transformer_config;

/* The configuration of d2l's example: 2+2 layers, d_model 32, 4 heads, FFN 64, dropout 0.1,
 * post-norm, no attention bias, sinusoidal positions, max_len 1000. Vocab sizes left 0. */
QKV_API
qkv_transformer_config qkv_transformer_default_config(void);
/* QKV_ERR_ARG with the reason if the configuration cannot build a model, or passes a limit
 * above (naming the field and the limit). */
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
/* When the backward pass finishes each tensor's gradient: event[i] (qkv_transformer_tensor i)
 * is the call of qkv_loss_options.grads_done (0, 1, ...) after which it is final: the output
 * layer's first, then the decoder's blocks from the top, its embedding, the encoder's blocks
 * from the top, its embedding (a tied embedding with the last of its uses). Returns the
 * number of calls a backward pass makes. */
QKV_API
int qkv_transformer_grad_events(const qkv_transformer *m, int *event);

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
    uint64_t first_example; /* the batch is a shard of a larger one starting at this sequence
                               (data-parallel training; 0: whole): the dropout masks are the
                               larger batch's, whatever the split */
    /* Called during the backward pass each time a group of gradients is final, in the order
     * qkv_transformer_grad_events (qkv_lm_grad_events) numbers them: for summing them over the
     * ranks of a data-parallel step while the pass goes on. NULL: not called. */
    void (*grads_done)(void *ctx);
    void *grads_ctx;
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
 * penalty lp(Y) = ((5 + |Y|) / 6)^alpha (|Y|^alpha under the QKV_BEAM_STOP_HF* rules), |Y|
 * counting its <eos>. When a sentence ends is the stopping rule (qkv_beam_stop); every
 * sentence ends after max_len tokens, where live hypotheses finish without <eos> (as greedy
 * decoding's do). beam = 1 with alpha = 0 is qkv_transformer_greedy exactly; a sentence's
 * result does not depend on the others. */
typedef enum {
    /* when no live hypothesis can still enter the n best: exact, given the beam (a live
     * log P only falls, and lp(|Y|) <= lp(max_len)); the default */
    QKV_BEAM_STOP_BOUND = 0,
    /* as bound, or as soon as K hypotheses have finished (the common rule, which can stop
     * while a live hypothesis already scores higher than every finished one) */
    QKV_BEAM_STOP_COUNT,
    /* Hugging Face transformers 4.38's BeamSearchScorer with early_stopping=False and
     * length_penalty=alpha: lp = |Y|^alpha, done once K have finished and the K-th best is
     * at least the step's best candidate divided by the current length's lp */
    QKV_BEAM_STOP_HF,
    /* the same scorer with early_stopping=True: done as soon as K have finished */
    QKV_BEAM_STOP_HF_EARLY,
    /* the same scorer with early_stopping="never": done once K have finished and the K-th
     * best is at least the step's best candidate divided by lp(the longest length a
     * hypothesis may reach) */
    QKV_BEAM_STOP_HF_NEVER,
} qkv_beam_stop;

/* "bound", "count", "hf", "hf-early" or "hf-never" ("unknown" outside the enum), and back
 * (QKV_ERR_ARG naming the choices otherwise). */
QKV_API
const char *qkv_beam_stop_name(qkv_beam_stop s);
QKV_API
qkv_status qkv_beam_stop_parse(qkv_beam_stop *s, const char *name, qkv_error *err);

typedef struct {
    int beam;    /* K >= 1 */
    int n_best;  /* hypotheses returned per sentence, 1 .. K */
    int max_len; /* tokens per hypothesis, <eos> not counted, 1 .. the model's max_len */
    float alpha; /* length penalty exponent >= 0 (0: none; GNMT uses 0.6 to 0.7; transformers'
                  * length_penalty, 1.0 by default there, under the QKV_BEAM_STOP_HF* rules) */
    qkv_beam_stop stop;   /* when a sentence is done (0: QKV_BEAM_STOP_BOUND) */
    const int *max_lens;  /* (B) each sentence's own limit, 1 .. max_len; NULL: max_len */
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
 * through a pointer taken earlier calls this again before decoding. At int8 it quantises the
 * linear layers' weights (1 byte per weight, plus a scale per output channel), again
 * whenever the parameters may have changed, and a backward pass (qkv_transformer_loss with
 * backward) fails with QKV_ERR_ARG. QKV_ERR_ARG on a CPU without AVX512-BF16
 * (qkv_bf16_supported) for bf16, without AVX512-VNNI (qkv_int8_supported) for int8, the
 * model unchanged. */
QKV_API
qkv_status qkv_transformer_set_precision(qkv_transformer *m, qkv_precision p, qkv_error *err);
QKV_API
qkv_precision qkv_transformer_get_precision(const qkv_transformer *m);
/* Moves the model to device d (a run-time setting, not saved; a new or loaded model is on
 * QKV_DEVICE_CPU), its precision kept: set the device first, then the precision (bf16 on a
 * GPU needs no AVX512-BF16). Decoders and batch decoders made before are refused afterwards
 * (QKV_ERR_ARG): make them again. QKV_ERR_ARG when d is not there (qkv_device_check), at
 * int8 or with linear attention on a GPU; QKV_ERR_NOMEM without room there; the model
 * unchanged either way. */
QKV_API
qkv_status qkv_transformer_set_device(qkv_transformer *m, qkv_device d, qkv_error *err);
QKV_API
qkv_device qkv_transformer_get_device(const qkv_transformer *m);
/* The key-value cache type of decoding from now on (a run-time setting, not saved; a new or
 * loaded model is QKV_KV_CACHE_AUTO); a decoding that has begun keeps the type it began
 * with. QKV_ERR_ARG on a value outside the enum. */
QKV_API
qkv_status qkv_transformer_set_kv_cache(qkv_transformer *m, qkv_kv_cache kv, qkv_error *err);
QKV_API
qkv_kv_cache qkv_transformer_get_kv_cache(const qkv_transformer *m);
/* The type the caches of decodings begun now get: the setting, or for QKV_KV_CACHE_AUTO the
 * library's rule (QKV_KV_CACHE_FP32 or QKV_KV_CACHE_BF16, never AUTO). */
QKV_API
qkv_kv_cache qkv_transformer_kv_cache_type(const qkv_transformer *m);

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

/* "softmax" or "linear" ("unknown" outside the enum), and back (QKV_ERR_ARG naming the
 * choices otherwise). */
QKV_API
const char *qkv_attention_kind_name(qkv_attention_kind k);
QKV_API
qkv_status qkv_attention_kind_parse(qkv_attention_kind *k, const char *name, qkv_error *err);

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
/* As qkv_transformer_grad_events: the output layer, the blocks from the top, the embedding. */
QKV_API
int qkv_lm_grad_events(const qkv_lm *m, int *event);

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
 * reads the weights' bf16 copy at bf16, their int8 copy at int8; it is made again after a
 * backward pass, qkv_lm_params or a load; no backward pass at int8). */
QKV_API
qkv_status qkv_lm_set_precision(qkv_lm *m, qkv_precision p, qkv_error *err);
QKV_API
qkv_precision qkv_lm_get_precision(const qkv_lm *m);
/* The device, as qkv_transformer_set_device. */
QKV_API
qkv_status qkv_lm_set_device(qkv_lm *m, qkv_device d, qkv_error *err);
QKV_API
qkv_device qkv_lm_get_device(const qkv_lm *m);
/* The key-value cache type of generation states made from now on (qkv_lm_state_create,
 * qkv_lm_batch_create), as qkv_transformer_set_kv_cache. */
QKV_API
qkv_status qkv_lm_set_kv_cache(qkv_lm *m, qkv_kv_cache kv, qkv_error *err);
QKV_API
qkv_kv_cache qkv_lm_get_kv_cache(const qkv_lm *m);
/* The type the caches of states made now get, as qkv_transformer_kv_cache_type. */
QKV_API
qkv_kv_cache qkv_lm_kv_cache_type(const qkv_lm *m);

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

/* ---- continuous batching: several texts generated together -----------------------------
 * A server's concurrent requests: a fixed number of slots, each a text being generated with
 * its own prompt, length, sampling and seed. A text joins a free slot with a prefill of its
 * prompt (qkv_lm_batch_add); each qkv_lm_batch_step draws the next token of every running text
 * (drawn[slot], -1 for slots that drew none) and runs the model once on all of them, each at
 * its own position; a text that has drawn its g->tokens is finished and frees its slot on
 * qkv_lm_batch_release (which also ends a text early: a stop string, a client gone). Each text
 * gets the tokens qkv_lm_generate draws for it alone (the same arithmetic up to float rounding
 * of the linear layers); g->on_token is not called. One thread at a time, with the model. */
typedef struct qkv_lm_batch qkv_lm_batch;

QKV_API
qkv_status qkv_lm_batch_create(qkv_lm_batch **out, qkv_lm *m, int slots, qkv_error *err);
QKV_API
void qkv_lm_batch_free(qkv_lm_batch *b);
QKV_API
int qkv_lm_batch_slots(const qkv_lm_batch *b);
QKV_API
int qkv_lm_batch_free_slots(const qkv_lm_batch *b);
QKV_API
int qkv_lm_batch_running(const qkv_lm_batch *b);
/* prompt (n_prompt >= 1 ids) into a free slot (*slot; none free: QKV_ERR_ARG); g->tokens >= 1. */
QKV_API
qkv_status qkv_lm_batch_add(qkv_lm_batch *b, const int *prompt, int n_prompt,
                            const qkv_lm_generation *g, int *slot, qkv_error *err);
/* Chunked prefill: a prompt of more than `tokens` tokens that joins while other texts run is
 * fed as rows of the next steps, `tokens` a step (beside the running texts' rows, as many as
 * the slots leave room for), so that it does not stall them for a whole prefill; its first
 * token is drawn the step its last chunk is in. The chunks compute the prompt's keys and values
 * with the decoding step's kernels rather than one batched forward pass: the same up to float
 * rounding, so a sampled text can differ from qkv_lm_generate's where two tokens' probabilities
 * lie within that rounding (tests/unit/test_lm_batch.c: identical tokens on its texts, logits
 * within 1e-4). A prompt alone, or of at most `tokens`, is one pass as before. 0 (the
 * default): one pass always. */
QKV_API
void qkv_lm_batch_set_prefill_chunk(qkv_lm_batch *b, int tokens);
/* drawn (slots): the token each running text drew this step, -1 elsewhere. */
QKV_API
qkv_status qkv_lm_batch_step(qkv_lm_batch *b, int *drawn, qkv_error *err);
QKV_API
int qkv_lm_batch_finished(const qkv_lm_batch *b, int slot);
QKV_API
void qkv_lm_batch_release(qkv_lm_batch *b, int slot);

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

#ifdef __cplusplus
}
#endif

#endif /* QKV_API_MODELS_H */
