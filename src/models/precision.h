/* SPDX-License-Identifier: MIT */
/* A model's precision setting (qkv_transformer_set_precision, qkv_lm_set_precision) and what
 * it owns for it: the bf16 GEMM's packing buffers and a bf16 copy of the parameters that
 * decoding reads; at int8, the linear layers' weights quantised and the int8 GEMM's
 * activation buffer. Shared by both models. */
#ifndef QKV_PRECISION_H
#define QKV_PRECISION_H

#include "backend/backend.h"

/* One weight matrix of a model quantised to int8: the offset of its float32 original among
 * the model's parameters, and the packed matrix (at a fixed address while the precision is
 * int8: typed weights point at it). */
typedef struct {
    size_t offset;
    int8_matrix q;
} int8_weight;

typedef struct {
    qkv_precision precision;
    uint16_t *bf16;   /* (n_params) the parameters in bf16, at QKV_PRECISION_BF16 */
    int bf16_current; /* whether bf16 holds the parameters as they are now */
    gemm_bf16_workspace ws;
    /* int8: the model's parameter table (which tensors to quantise: precision.c), the
     * quantised weights (n_int8, by increasing offset) and whether they are current */
    const qkv_param_info *tensors;
    int n_tensors;
    int8_weight *int8;
    int n_int8, int8_current;
    /* the table holds an int8 model file's matrices (precision_adopt_int8), kept whatever
     * the precision until the parameters change */
    int int8_file;
    gemm_int8_workspace ws8;
} model_precision;

/* Whether the tensor is one of the weight matrices that int8 quantises (and an int8 model
 * file stores as int8): precision.c says which, and why. */
int precision_int8_tensor(const qkv_param_info *t);

/* An int8 model file's weight matrices as the int8 table: file (one per tensor that
 * precision_int8_tensor picks among tensors (n_tensors, which outlive mp), in their order),
 * moved into mp (file's entries are zeroed). From then on int8 reads these, as they are,
 * until the parameters change (precision_touch); the precision itself is not set. */
qkv_status precision_adopt_int8(model_precision *mp, const qkv_param_info *tensors,
                                int n_tensors, int8_matrix *file, qkv_error *err);

/* Sets p: at bf16, checks the CPU, allocates and fills the copy and the buffers; at int8,
 * checks the CPU and quantises the weight matrices named in tensors (n_tensors entries,
 * which outlive mp), or takes an int8 model file's (precision_adopt_int8). */
qkv_status precision_set(model_precision *mp, qkv_precision p, const float *params, size_t n,
                         const qkv_param_info *tensors, int n_tensors, qkv_error *err);

/* Before a pass: room in the packing buffers for the threads there are now; for decoding,
 * the copy made current (a pass that reads a copy older than the parameters would be
 * wrong, and one conversion per decoding call after training costs little). At int8 the
 * quantised weights are made current before any pass (int8 has no float fallback worth
 * taking), and a pass with a backward is refused: backward says so. */
qkv_status precision_prepare(model_precision *mp, const float *params, size_t n, int decoding,
                             qkv_error *err);

/* The backend of this precision: its table, and whether the typed copies are current. */
backend precision_backend(model_precision *mp);

/* W, a weight matrix among params, typed as the products of this precision read it: its bf16
 * copy at bf16, its quantised matrix at int8 when it is one of the weights quantised
 * (precision.c says which), float32 otherwise. Valid until the precision is set again. */
weight precision_weight(const model_precision *mp, const float *params, const float *W);

/* The parameters may be about to change (a backward pass, a load, a mutable pointer handed
 * out): the copy is no longer trusted until the next decoding refreshes it. */
static inline void precision_touch(model_precision *mp) { mp->bf16_current = mp->int8_current = 0; }

/* QKV_ERR_ARG at int8 (inference only), before a pass with a backward starts. */
qkv_status precision_check_training(const model_precision *mp, qkv_error *err);

void precision_free(model_precision *mp);

#endif
