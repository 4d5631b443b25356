/* SPDX-License-Identifier: MIT */
/* What the training loops share for data-parallel runs (parallel.c): who writes, and rank
 * 0's state handed to every rank. Private to the library. */
#ifndef QKV_TRAINING_PARALLEL_H
#define QKV_TRAINING_PARALLEL_H

#include "core/internal.h"

/* 1 when steps are split over several ranks. */
static inline int rd_parallel(const qkv_reducer *r) { return r && r->size > 1; }
/* 1 on the rank that writes the run directory (rank 0, or the only process). */
static inline int rd_writer(const qkv_reducer *r) { return !r || r->rank == 0; }

/* Rank 0's `bytes` at buf on every rank (nothing on one process). */
qkv_status rd_share(const qkv_reducer *r, void *buf, size_t bytes, qkv_error *err);
/* Rank 0's parameters (n), Adam's moments and step, and the loop's position (pos_bytes of
 * plain data) on every rank: a resumed run is loaded by rank 0 alone, so the other ranks need
 * no copy of the run directory, and a fresh run starts from one initialization. */
qkv_status rd_share_state(const qkv_reducer *r, float *params, qkv_adam *opt, void *pos,
                          size_t pos_bytes, qkv_error *err);
/* The caller's should_stop after a step (NULL: not asked), rank 0's answer on every rank:
 * sets *stop when it asks to stop. */
qkv_status rd_ask_stop(int (*should_stop)(void *), void *ctx, const qkv_reducer *r, int *stop,
                       qkv_error *err);
/* A hash of n ids, continuing h (start from 0). */
uint64_t rd_hash_ids(uint64_t h, const int *ids, size_t n);
/* Every rank's hash of its data against rank 0's: ranks that read different files would each
 * train on their own data while summing gradients as if it were one batch. All ranks fail
 * alike (QKV_ERR_ARG naming `what`) when any differs. */
qkv_status rd_check_same(const qkv_reducer *r, uint64_t hash, const char *what, qkv_error *err);
/* The target tokens of a batch that count in the loss (not QKV_PAD): the whole batch's
 * count normalises every shard's gradients. */
int64_t rd_target_tokens(const int *targets, size_t n);

#endif
