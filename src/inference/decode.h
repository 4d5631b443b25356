/* The decoder's key-value cache and one decoding step, shared by greedy decoding and beam
 * search. Not part of the API. */
#ifndef QKV_DECODE_H
#define QKV_DECODE_H

#include "models/transformer_internal.h"

/* Rows are the sequences being decoded (a sentence in greedy decoding, a hypothesis in beam
 * search); each reads the encoder output of one source. Caches are sized for `cap` rows and
 * `n_src` sources; a step may run on any B <= cap of the rows. */
typedef struct {
    int B, T, Ts;       /* rows in this step, cache positions, source positions */
    int cap, n_src;     /* rows and sources the buffers hold */
    const int *row_src; /* (B) the source row b reads; NULL: source b */
    /* (B, T) the cache row that holds position j of row b: slot[b * T + j]; NULL: row b. A
     * step writes row b's new key and value into cache row b, so slot[b * T + t] must be b. */
    const int *slot;
    float *self_k, *self_v;   /* per layer (cap, T, C): keys and values of every position */
    float *cross_k, *cross_v; /* per layer (n_src, Ts, C): the encoder output projected */
    float *x, *u, *q, *k, *v, *ctx, *s, *mean, *rstd, *h_pre, *h, *P, *logits;
    float *buffer;
} decode_state;

/* Runs the encoder on src (n_src, Ts) and caches every decoder layer's cross-attention keys
 * and values of its output; allocates the state for cap rows of up to T positions. */
qkv_status decode_begin(decode_state *st, qkv_transformer *m, const int *src,
                        const int *src_valid, int n_src, int Ts, int cap, int T,
                        qkv_error *err);
void decode_end(decode_state *st);

/* Logits (B, tgt_vocab) of position t for the rows' input tokens tok (B): the decoder stack
 * on one new row each, appending its keys and values to the rows' caches. */
void decode_step(qkv_transformer *m, decode_state *st, const int *tok, int t,
                 const int *src_valid);

#endif
