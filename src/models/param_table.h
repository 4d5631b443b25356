/* The parameter table of both models (transformer.c, language_model.c): a walk over the
 * parameters in a fixed order hands out consecutive slices of one flat buffer, so that
 * parameters, gradients and Adam's moments share one layout and a checkpoint is one write. */
#ifndef QKV_PARAM_TABLE_H
#define QKV_PARAM_TABLE_H

#include "models/transformer_internal.h"

/* With a NULL base it only counts (the offsets are still right); with tensors and names it
 * records each tensor's name, shape and offset. */
typedef struct {
    float *base;
    size_t offset;
    qkv_param_info *tensors; /* record here when not NULL */
    char (*names)[64];
    int count;
} param_walker;

/* The next rows x cols slice (cols = 0: a vector of rows). */
float *param_take(param_walker *w, const char *name, int rows, int cols);
/* prefix.gamma, prefix.beta (C) */
norm_w param_take_norm(param_walker *w, const char *prefix, int C);
/* prefix.W1 (F, C), .b1 (F), .W2 (C, F), .b2 (C) */
ffn_w param_take_ffn(param_walker *w, const char *prefix, int C, int F);
/* prefix.W_q, .b_q, ..., .W_o, .b_o (biases only with bias), in the order of
 * qkv_mha_weights_view, so one attention's weights are contiguous. */
qkv_mha_weights param_take_mha(param_walker *w, const char *prefix, int C, int bias);

#endif
