/* The residual connection and LayerNorm around every sublayer (paper, section 3.1), shared by
 * the encoder-decoder (encoder_decoder.c) and the language model (language_model.c):
 *   post-norm: out = LayerNorm(x + dropout(Sublayer(x)))
 *   pre-norm:  out = x + dropout(Sublayer(LayerNorm(x))) */
#ifndef QKV_SUBLAYER_H
#define QKV_SUBLAYER_H

#include "models/transformer_internal.h"

/* The model-wide part: where the norm sits, the width C and LayerNorm's epsilon. */
typedef struct {
    int pre_norm, C;
    float ln_eps;
} sublayer_shape;

typedef struct {
    const sublayer_shape *sh;
    size_t N;      /* rows: B * T */
    float p;       /* dropout rate (0 in evaluation) */
    uint64_t seed; /* this sublayer's residual-dropout stream */
    float *scratch;
} sublayer_ctx;

/* Every dropout site of a step draws from its own stream, named by (stack, layer, site). */
uint64_t dropout_site_seed(uint64_t step_seed, int stack, int layer, int site);

/* The sublayer's input: x itself (post-norm) or LayerNorm(x) (pre-norm). */
const float *sublayer_in(const sublayer_ctx *k, sublayer_acts *a, const float *x,
                         const norm_w *n);

/* out = LayerNorm(x + dropout(s)) (post-norm) or x + dropout(s) (pre-norm). */
void sublayer_out(const sublayer_ctx *k, sublayer_acts *a, const float *x, const norm_w *n);

/* From d(out): dx += the residual path, ds = the gradient of the sublayer's output. */
void sublayer_out_backward(const sublayer_ctx *k, const sublayer_acts *a, float *dx, float *ds,
                           const float *dout, const norm_w *n, norm_w *dn);

/* From d(sublayer input): dx += it directly (post-norm) or through the LayerNorm (pre-norm). */
void sublayer_in_backward(const sublayer_ctx *k, const sublayer_acts *a, float *dx,
                          const float *din, const float *x, const norm_w *n, norm_w *dn);

#endif
