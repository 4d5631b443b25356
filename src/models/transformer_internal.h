/* SPDX-License-Identifier: MIT */
/* The encoder-decoder Transformer's private structure (model.h says what it is made of). */
#ifndef QKV_TRANSFORMER_INTERNAL_H
#define QKV_TRANSFORMER_INTERNAL_H

#include "models/model.h"

typedef struct {
    stack_w encoder, decoder; /* the embeddings may alias (tie all) */
    float *out_W, *out_b;     /* (V_tgt, C) (may alias the target embedding), (V_tgt) */
    weight out;               /* out_W as the output layer's products read it */
} model_w;

typedef struct {
    int B, Ts, Tt;
    stack_acts enc, dec;
    float *logits, *lse, *loss; /* (B*Tt, V), (B*Tt), (B*Tt) */
    float *d_enc_out;           /* (B*Ts, C): d(encoder output), gathered over cross-attention */
    stack_grad_work work;       /* (B*max(Ts, Tt), C) each */
    float *scratch;
    /* the batch as the kernels read it: src (B*Ts), src_valid (B), tgt_in, tgt_out (B*Tt) */
    int *src, *src_valid, *tgt_in, *tgt_out;
} model_acts;

struct qkv_transformer {
    qkv_transformer_config cfg;
    stack_dims enc_dims, dec_dims;
    model_core core;
    model_w w, g; /* views of the parameters and of their gradients */
    model_acts acts;
    model_pass pass; /* the loss pass running */
};

/* The gradients the kernels write (on a device, there), made on first use; NULL: no memory. */
float *transformer_grads(qkv_transformer *m);
/* Moves the model to dev (NULL: the host): core_set_device, then its weights retyped. */
qkv_status transformer_set_device(qkv_transformer *m, const device *dev, qkv_error *err);

/* The floats a configuration's parameter table holds (qkv_transformer_num_params of the
 * model it builds), computed without building it. */
double transformer_config_params(const qkv_transformer_config *c);
/* qkv_transformer_create, with d2l's initialisation (init) or the parameters zeroed (a model
 * about to read every one of them from a file). */
qkv_status transformer_create(qkv_transformer **out, const qkv_transformer_config *cfg,
                              uint64_t seed, int init, qkv_error *err);

/* Lays the activations for a batch of B x (Ts, Tt) out in the arena (growing it if needed),
 * softmax attention over core.flash_min_keys keys or more on the flash kernel, unless
 * need_weights: then every attention keeps its weights P, for whoever wants to look at them. */
qkv_status transformer_layout(qkv_transformer *m, int B, int Ts, int Tt, int need_weights,
                              qkv_error *err);

/* The encoder stack alone (dropout rate p, stream seed): fills acts.enc.out (B*Ts, C). The
 * activations must be laid out for at least (B, Ts). */
qkv_status transformer_encode(qkv_transformer *m, const int *src, const int *src_valid, int B,
                              int Ts, float p, uint64_t seed, qkv_error *err);

#endif
