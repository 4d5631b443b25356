/* Multi-head attention as both models run it (paper, section 3.2.2):
 *   MultiHead(Q, K, V) = Concat(head_1..head_H) W_o,  head_i = Attention(Q W_q^i, K W_k^i, V W_v^i)
 * with one of two kernels for Attention, chosen per attention when the activations are laid
 * out:
 *   materialised  qkv_attention_* keeps the weights P (B, H, n, m): what the attention maps
 *                 show, and the faster kernel for short key sequences;
 *   flash         qkv_flash_attention_* keeps only the row log-sum-exp L (B, H, n) and
 *                 recomputes the weights in backward (Dao et al. 2022): memory linear in the
 *                 length, and faster from about 256 keys on (qkv bench attention).
 * Both give the same result up to float rounding, dropout mask included (the same stream,
 * counter = flat index into (B, H, n, m)). The cache says which: P set means materialised,
 * P NULL means flash, with L beside it. */
#ifndef QKV_MODEL_ATTENTION_H
#define QKV_MODEL_ATTENTION_H

#include "layers/linear_mode.h"
#include "models/transformer_internal.h"

/* The number of keys from which attention runs the flash kernel, unless a model is told
 * otherwise (qkv_transformer.flash_min_keys, qkv_lm.flash_min_keys). The crossover of
 * qkv bench attention (forward + backward, d = 64) on AVX2 is about 256. */
enum { FLASH_MIN_KEYS = 256 };

/* Floats of one attention's saved activations over B x (n queries, m keys): q, ctx (B n H p),
 * k, v (B m H p), and P (B H n m) or, with flash, L (B H n). */
size_t model_mha_cache_floats(const qkv_mha_config *mc, int B, int n, int m, int flash);
/* Their views in base (model_mha_cache_floats long); *L is NULL unless flash, c.P NULL if. */
qkv_mha_cache model_mha_cache_view(float *base, float **L, const qkv_mha_config *mc, int B,
                                   int n, int m, int flash);
/* Floats of scratch forward and backward need. */
size_t model_mha_scratch_floats(const qkv_mha_config *mc, int B, int n, int m, int flash);

/* xq (B, n, d_q) attends to xkv (B, m, d_kv) under mask -> y (B, n, d_q); the kernel is the
 * cache's (c->P NULL: flash, saving L). Dropout rate p on the weights, stream seed. The four
 * projections multiply at the model's precision lm. */
void model_mha_forward(const linear_mode *lm, float *y, qkv_mha_cache *c, float *L, const float *xq,
                       const float *xkv, const qkv_mha_weights *w, const qkv_mha_config *mc,
                       int B, int n, int m, const qkv_mask *mask, float p, uint64_t seed,
                       float *scratch);
/* dxq, dxkv (may be one buffer: self-attention) and dw += the gradients given dy; the same
 * mask, p and seed as forward. */
void model_mha_backward(const linear_mode *lm, float *dxq, float *dxkv, qkv_mha_weights *dw,
                        const float *dy, const qkv_mha_cache *c, const float *L, const float *xq,
                        const float *xkv, const qkv_mha_weights *w, const qkv_mha_config *mc,
                        int B, int n, int m, const qkv_mask *mask, float p, uint64_t seed,
                        float *scratch);

#endif
