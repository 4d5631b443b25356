/* The encoder-decoder Transformer's private structures: weights as named views into one
 * flat buffer, and the activations one training step keeps for its backward pass. */
#ifndef QKV_TRANSFORMER_INTERNAL_H
#define QKV_TRANSFORMER_INTERNAL_H

#include "core/internal.h"
#include "models/precision.h"

typedef struct {
    float *g, *b; /* LayerNorm gain and bias (C) */
} norm_w;

typedef struct {
    float *W1, *b1, *W2, *b2; /* (F, C), (F), (C, F), (C) */
} ffn_w;

typedef struct {
    qkv_mha_weights attention;
    norm_w norm1;
    ffn_w ffn;
    norm_w norm2;
} encoder_block_w;

typedef struct {
    qkv_mha_weights self_attention;
    norm_w norm1;
    qkv_mha_weights cross_attention;
    norm_w norm2;
    ffn_w ffn;
    norm_w norm3;
} decoder_block_w;

/* Every parameter, as pointers into one buffer (the parameters, or their gradients). */
typedef struct {
    float *src_embedding, *tgt_embedding; /* (V_src, C), (V_tgt, C); may alias (tie) */
    float *src_positions, *tgt_positions; /* (max_len, C) learned, else NULL */
    encoder_block_w *encoder;             /* enc_layers */
    norm_w encoder_norm;                  /* final_norm, else NULLs */
    decoder_block_w *decoder;             /* dec_layers */
    norm_w decoder_norm;
    float *out_W, *out_b; /* (V_tgt, C) (may alias tgt_embedding), (V_tgt) */
} model_w;

/* The saved activations of one residual sublayer connection. Post-norm:
 *   out = LayerNorm(z), z = x + dropout(s), s = Sublayer(x)
 * Pre-norm:
 *   out = x + dropout(s), s = Sublayer(u), u = LayerNorm(x) */
typedef struct {
    float *u, *u_mean, *u_rstd; /* pre-norm only */
    float *s;
    float *z, *mean, *rstd; /* post-norm only */
    float *out;
} sublayer_acts;

/* An attention's cache holds the weights P when it runs the materialised kernel, or P = NULL
 * and its L (B, H, n), the row log-sum-exp, when it runs the flash kernel (model_attention.h). */
typedef struct {
    sublayer_acts att;
    qkv_mha_cache cache;
    float *L;
    sublayer_acts ff;
    float *h_pre, *h;
} encoder_block_acts;

typedef struct {
    sublayer_acts self;
    qkv_mha_cache self_cache;
    float *self_L;
    sublayer_acts cross;
    qkv_mha_cache cross_cache;
    float *cross_L;
    sublayer_acts ff;
    float *h_pre, *h;
} decoder_block_acts;

typedef struct {
    int B, Ts, Tt;
    float *src_x, *tgt_x; /* embedded + positions + dropout: the stacks' inputs */
    encoder_block_acts *encoder;
    float *enc_mean, *enc_rstd, *enc_out; /* after the optional final norm */
    decoder_block_acts *decoder;
    float *dec_mean, *dec_rstd, *dec_out;
    float *logits, *lse, *loss; /* (B*Tt, V), (B*Tt), (B*Tt) */
    /* backward work space */
    float *d_a, *d_b, *d_c, *d_enc_out, *scratch;
} model_acts;

struct qkv_transformer {
    qkv_transformer_config cfg;
    size_t n_params;
    float *params;
    float *grads;
    model_w w, g; /* views of params and grads */
    qkv_param_info *tensors;
    char (*names)[64];
    int n_tensors;
    float *pos_table; /* (max_len, C) sinusoidal */
    float *arena;     /* activations */
    size_t arena_cap;
    model_acts acts;
    int flash_min_keys; /* attention over this many keys or more runs the flash kernel */
    model_precision prec; /* how the linear layers multiply (qkv_transformer_set_precision) */
};

/* Lay the activations for a batch of B x (Ts, Tt) out in the arena (growing it if needed),
 * attention over m->flash_min_keys keys or more with the flash kernel's L instead of the
 * weights P. */
qkv_status transformer_layout_acts(qkv_transformer *m, int B, int Ts, int Tt, qkv_error *err);
/* The same with the flash kernel from flash_min_keys keys on (INT_MAX: every attention keeps
 * its weights P, for whoever wants to look at them). */
qkv_status transformer_layout(qkv_transformer *m, int B, int Ts, int Tt, int flash_min_keys,
                              qkv_error *err);

/* The encoder stack alone (dropout rate p, stream seed): fills acts.enc_out (B*Ts, C).
 * The activations must be laid out for at least (B, Ts). */
qkv_status transformer_encode(qkv_transformer *m, const int *src, const int *src_valid, int B,
                              int Ts, float p, uint64_t seed, qkv_error *err);

#endif
