/* SPDX-License-Identifier: MIT */
/* The decoder-only language model's private structure (model.h says what it is made of). */
#ifndef QKV_LANGUAGE_MODEL_INTERNAL_H
#define QKV_LANGUAGE_MODEL_INTERNAL_H

#include "models/model.h"

typedef struct {
    stack_w stack;        /* causal blocks without cross-attention */
    float *out_W, *out_b; /* (V, C) (the embedding when tied), (V) */
    weight out;           /* out_W as the output layer's products read it */
} lm_w;

typedef struct {
    int B, T;
    stack_acts s;
    float *logits, *lse, *loss; /* (B*T, V), (B*T), (B*T) */
    stack_grad_work work;       /* (B*T, C) each */
    float *scratch;
    int *ids, *targets;         /* (B*T) each, as the kernels read them */
} lm_acts;

/* The floats a configuration's parameter table holds, computed without building it. */
double lm_config_params(const qkv_lm_config *c);
/* qkv_lm_create, initialised (init) or with the parameters zeroed (to be read from a file). */
qkv_status lm_create(qkv_lm **out, const qkv_lm_config *cfg, uint64_t seed, int init,
                     qkv_error *err);

struct qkv_lm {
    qkv_lm_config cfg;
    stack_dims dims;
    model_core core;
    lm_w w, g; /* views of the parameters and of their gradients */
    lm_acts acts;
    model_pass pass; /* the loss pass running */
};

/* The causal forward pass over ids (B, T) with dropout rate p (0: evaluation), filling
 * m->acts (the keys and values of every layer stay in acts.s.blocks[l].self_att). */
qkv_status lm_forward(qkv_lm *m, const int *ids, int B, int T, float p, uint64_t seed,
                      qkv_error *err);

/* The gradients the kernels write (on a device, there), made on first use; NULL: no memory. */
float *lm_grads(qkv_lm *m);
/* Moves the model to dev (NULL: the host): core_set_device, then its weights retyped. */
qkv_status lm_set_device(qkv_lm *m, const device *dev, qkv_error *err);

/* Where language-model training stands: enough to resume bit for bit. */
typedef struct {
    uint64_t seed;        /* windows and dropout derive from (seed, step) */
    double elapsed_s;     /* training time so far (a time budget spans resumed runs) */
    double loss_sum;      /* token losses since the last report */
    int64_t loss_tokens;
    int64_t train_tokens; /* the training text's length: resuming on other data is refused */
} lm_train_position;

/* Parameters, Adam's moments and step, and the position, in one safetensors file written
 * atomically; load validates everything before changing m or opt. */
qkv_status lm_checkpoint_save(const char *path, const qkv_lm *m, const qkv_adam *opt,
                              const lm_train_position *pos, qkv_error *err);
qkv_status lm_checkpoint_load(const char *path, qkv_lm *m, qkv_adam *opt,
                              lm_train_position *pos, qkv_error *err);

#endif
