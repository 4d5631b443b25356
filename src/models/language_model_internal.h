/* The decoder-only language model's private structures: weights as named views into one flat
 * buffer and the activations of a training step, laid out as the encoder-decoder's (whose
 * block types it reuses: an LM block is an encoder block under a causal mask). */
#ifndef QKV_LANGUAGE_MODEL_INTERNAL_H
#define QKV_LANGUAGE_MODEL_INTERNAL_H

#include "models/transformer_internal.h"

typedef struct {
    float *embedding;     /* (V, C) */
    float *positions;     /* (max_len, C) learned, else NULL */
    encoder_block_w *blocks; /* layers: attention, norm1, ffn, norm2 */
    norm_w norm;          /* final_norm, else NULLs */
    float *out_W, *out_b; /* (V, C) (the embedding when tied), (V) */
} lm_w;

typedef struct {
    int B, T;
    float *x;                   /* (B*T, C) embedded + positions + dropout */
    encoder_block_acts *blocks; /* cache.P is NULL for linear and flash attention */
    float *mean, *rstd, *out;   /* after the optional final norm */
    float *logits, *lse, *loss; /* (B*T, V), (B*T), (B*T) */
    float *d_a, *d_b, *d_c, *scratch; /* backward work space */
} lm_acts;

struct qkv_lm {
    qkv_lm_config cfg;
    size_t n_params;
    float *params, *grads;
    lm_w w, g; /* views of params and grads */
    qkv_param_info *tensors;
    char (*names)[64];
    int n_tensors;
    float *pos_table; /* (max_len, C) sinusoidal */
    float *arena;     /* activations */
    size_t arena_cap;
    lm_acts acts;
    int flash_min_keys; /* softmax attention over this many keys or more runs the flash kernel */
    model_precision prec; /* how the linear layers multiply (qkv_lm_set_precision) */
};

/* The positions added to token t's embedding: the learned table or the sinusoidal one. */
static inline const float *lm_positions(const qkv_lm *m)
{
    return m->w.positions ? m->w.positions : m->pos_table;
}

/* The causal forward pass over ids (B, T) with dropout rate p (0: evaluation), filling
 * m->acts (the keys and values of every layer stay in acts.blocks[l].cache). */
qkv_status lm_forward(qkv_lm *m, const int *ids, int B, int T, float p, uint64_t seed,
                      qkv_error *err);

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
