/* SPDX-License-Identifier: MIT */
/*
 * qkv.h — the Transformer of "Attention Is All You Need", in C.
 *
 * A short tour.
 *   Every building block is a pair of plain functions, X_forward and X_backward, over flat
 *   row-major float arrays. Arguments come in a fixed order: outputs, saved activations,
 *   inputs, weights, then dimensions. What travels together comes as one small struct, so no
 *   function takes more than ten arguments: an attention's shape (qkv_attention_shape), its
 *   Q, K, V and their gradients (qkv_attention_inputs, qkv_attention_grads), a dropout
 *   {p, seed} (qkv_dropout), a layer's weights (also the type of their gradients) and what
 *   its forward saves for backward (a *_cache). Shapes are given in the comment above each
 *   function, with the letters
 *       B batch   n queries   m keys/values   T sequence length   H heads
 *       d key/query dim   v value dim   C channels (d_model)   F hidden dim   V vocabulary
 *   A forward saves what its backward needs in buffers the caller owns; a backward
 *   ACCUMULATES (+=) into gradient buffers, which the caller zeroes once per step, so a
 *   tensor used twice (self-attention: queries = keys = values) simply gets both
 *   contributions. A NULL gradient pointer means "not needed".
 *   Nothing here allocates on the hot path, keeps global state or calls exit(); functions
 *   that can fail return a qkv_status and fill a qkv_error with a readable message.
 *
 * Threads: kernels parallelise with OpenMP; GEMMs go to OpenBLAS built with OpenMP, which
 * runs single-threaded inside our parallel regions, so the two never oversubscribe the
 * cores. qkv_set_threads() sets both.
 */
#ifndef QKV_H
#define QKV_H

/* The parts, by audience: the base (errors, threads, random numbers), the building blocks,
 * text, the models and decoding, training, files, the translator, training runs as the
 * commands make them, and figures. Including one
 * part brings in what it needs. */
#include "qkv/core.h"
#include "qkv/layers.h"
#include "qkv/text.h"
#include "qkv/models.h"
#include "qkv/training.h"
#include "qkv/io.h"
#include "qkv/translator.h"
#include "qkv/run.h"
#include "qkv/viz.h"

#endif /* QKV_H */
