/* SPDX-License-Identifier: MIT */
/* Data-parallel training's share of the loops (train.c, lm_train.c): the shards of a batch,
 * and rank 0's state on every rank. The communication itself is the caller's (qkv_reducer). */
#include <string.h>

#include "training/parallel.h"

void qkv_shard_of(int B, int rank, int size, int *first, int *count)
{
    if (size < 1) size = 1;
    const int base = B / size, extra = B % size;
    *count = base + (rank < extra);
    *first = rank * base + (rank < extra ? rank : extra);
}

qkv_status rd_share(const qkv_reducer *r, void *buf, size_t bytes, qkv_error *err)
{
    if (!rd_parallel(r) || bytes == 0) return QKV_OK;
    if (r->broadcast(r->ctx, buf, bytes))
        return qkv_fail(err, QKV_ERR_IO, "broadcasting %zu bytes from rank 0 to %d ranks failed",
                        bytes, r->size);
    return QKV_OK;
}

qkv_status rd_share_state(const qkv_reducer *r, float *params, qkv_adam *opt, void *pos,
                          size_t pos_bytes, qkv_error *err)
{
    const size_t n = opt->n * sizeof(float);
    qkv_status st = rd_share(r, pos, pos_bytes, err);
    if (!st) st = rd_share(r, &opt->step, sizeof opt->step, err);
    if (!st) st = rd_share(r, params, n, err);
    if (!st) st = rd_share(r, opt->m, n, err);
    if (!st) st = rd_share(r, opt->v, n, err);
    return st;
}

uint64_t rd_hash_ids(uint64_t h, const int *ids, size_t n)
{
    h ^= 14695981039346656037ull; /* FNV-1a over the ids' 32-bit values */
    for (size_t i = 0; i < n; i++) h = (h ^ (uint32_t)ids[i]) * 1099511628211ull;
    return h;
}

qkv_status rd_check_same(const qkv_reducer *r, uint64_t hash, const char *what, qkv_error *err)
{
    if (!rd_parallel(r)) return QKV_OK;
    uint64_t rank0 = hash;
    qkv_status st = rd_share(r, &rank0, sizeof rank0, err);
    if (st) return st;
    double differing = rank0 != hash;
    if (r->sum_doubles(r->ctx, &differing, 1))
        return qkv_fail(err, QKV_ERR_IO, "comparing the %s of %d ranks failed", what, r->size);
    if (differing > 0.0)
        return qkv_fail(err, QKV_ERR_ARG, "the %s differ between ranks: %g of %d hold other data "
                        "than rank 0 (every rank must read the same files)%s", what, differing,
                        r->size, rank0 != hash ? ", this one among them" : "");
    return QKV_OK;
}

int64_t rd_target_tokens(const int *targets, size_t n)
{
    int64_t count = 0;
    for (size_t i = 0; i < n; i++) count += targets[i] != QKV_PAD;
    return count;
}

qkv_status rd_ask_stop(int (*should_stop)(void *), void *ctx, const qkv_reducer *r, int *stop,
                       qkv_error *err)
{
    if (!should_stop) return QKV_OK;
    int asked = should_stop(ctx) != 0;
    const qkv_status st = rd_share(r, &asked, sizeof asked, err);
    if (!st && asked) *stop = 1;
    return st;
}
