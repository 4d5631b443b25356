/* SPDX-License-Identifier: MIT */
/* The decoder: what decoding sees of a model, of either kind (CTranslate2's decoder with its
 * state; llama.cpp's context). Searches (inference/: greedy, beam, sampling, the slots of
 * continuous batching) run over these calls and never touch a model's weights, activations
 * or precision:
 *
 *   decoder_encode   the encoder-decoder's sources through the encoder, once, and every
 *                    decoder layer's cross-attention keys and values of them, into source
 *                    slots of the decoder's state
 *   decoder_prefill  known tokens into a cache row (a language model's prompt, in one batched
 *                    forward pass; the encoder-decoder's start and a target prefix, one step
 *                    each), giving the logits that follow them
 *   decoder_step     one new token for each of a set of rows, each at its own position,
 *                    giving their logits (decoder_step_best: only each row's best tokens and
 *                    its log normaliser, the logits never written out where the backend
 *                    fuses the output layer with the choice)
 *
 * The decoder owns the state (models/model.h, decode_state): the key-value cache of `rows`
 * cache rows of up to `positions` positions each and the encoder outputs of `sources`
 * sources; which row holds which sequence is the search's business. Private to the library. */
#ifndef QKV_DECODER_H
#define QKV_DECODER_H

#include "ops/cpu/best.h"
#include "qkv.h"

typedef struct decoder decoder;

/* What a search needs to know of the model behind a decoder. */
typedef struct {
    int vocab;        /* V: logits per row */
    int positions;    /* positions a cache row holds: the model's max_len, or fewer if asked */
    int max_len;      /* the model's max_len: the longest source too */
    int rows, sources; /* the state's capacity */
    int encoder;      /* 1: an encoder-decoder (decoder_encode before stepping) */
    int start;        /* encoder-decoder: the token decoding starts from (<bos>, or <pad> for
                       * Marian's models) */
    int suppress_pad; /* the model never produces <pad> */
    int forced_eos;   /* a translation cut at its limit counts an <eos> of probability 1 */
} decoder_info;

/* One step's rows (stack_step's, models/model.h): row b writes its new key and value at
 * position pos[b] of cache row row[b] and attends to positions 0 .. pos[b]; it reads source
 * src[b] (NULL for a language model). With ancestry, position j of row b lies in cache row
 * ancestry[b * ld + j] (beam search); ancestry[b * ld + pos[b]] must be row[b]. */
typedef struct {
    int n;
    const int *row, *pos, *src;
    const int *ancestry;
    int ld;
} decoder_rows;

/* A decoder over an encoder-decoder model, with room for `rows` cache rows of `positions`
 * positions (0: the model's max_len) and `sources` encoder outputs of up to src_positions
 * positions (0: max_len). The model must outlive it; one thread at a time uses both. */
qkv_status decoder_create_transformer(decoder **out, qkv_transformer *m, int rows, int positions,
                                      int sources, int src_positions, qkv_error *err);
/* The same over a language model (no sources). */
qkv_status decoder_create_lm(decoder **out, qkv_lm *m, int rows, int positions, qkv_error *err);
void decoder_free(decoder *d);
decoder_info decoder_get_info(const decoder *d);
/* What a decoder over m would say of the model (rows and sources 0), without making one. */
decoder_info decoder_transformer_info(const qkv_transformer *m);

/* Sources src (n, Ts) with their lengths src_valid (n) through the encoder together, their
 * outputs' cross-attention keys and values into source slots slot[i] (NULL: i). Fails on an
 * id outside the source vocabulary or a length outside [0, Ts], Ts past the room. */
qkv_status decoder_encode(decoder *d, const int *src, const int *src_valid, int n, int Ts,
                          const int *slot, qkv_error *err);
/* ids (n >= 1, at most `positions`) into cache row `row` from position 0, its earlier
 * content dropped; src: the source slot it reads (encoder-decoder; ignored otherwise).
 * logits (V) receive the logits after the last of them (NULL: not wanted). */
qkv_status decoder_prefill(decoder *d, int row, int src, const int *ids, int n, float *logits,
                           qkv_error *err);
/* tok (r->n) through the model at the rows' positions: *logits points at r->n rows of V
 * logits, the caller's to read and change (a search filters them in place) until the next
 * call on d. Fails on a row, position or source outside the
 * state, or a token outside the vocabulary. */
qkv_status decoder_step(decoder *d, const decoder_rows *r, const int *tok, float **logits,
                        qkv_error *err);

/* decoder_step, but instead of the logits, what rq asks of each row (ops/cpu/best.h): its
 * rq->k best tokens (ids and logits, best first, ties to the lower id, banned ids never) and,
 * when rq->lse is set, its log normaliser. The same as choosing from decoder_step's logits,
 * except that a backend that fuses this choice with the output layer (int8) computes the
 * normaliser its own way, within the bound ops/cpu/best.h derives. Logits that are not finite
 * fail as decoder_step's do (QKV_ERR_NUMERIC naming the model). */
qkv_status decoder_step_best(decoder *d, const decoder_rows *r, const int *tok,
                             const best_request *rq, qkv_error *err);

/* The encoder-decoder's teacher-forced pass over one sentence pair in evaluation mode,
 * keeping every attention's weights: logits (Tt, V) for the decoder inputs tgt_in (Tt) and
 * the weights of each layer (qkv_attention_maps' layout: encoder (L_enc, H, Ts, Ts), decoder
 * self (L_dec, H, Tt, Tt), cross (L_dec, H, Tt, Ts)). */
qkv_status decoder_attention_weights(qkv_transformer *m, const int *src, int Ts,
                                     const int *tgt_in, int Tt, float *logits, float *encoder,
                                     float *self, float *cross, qkv_error *err);

#endif
