/* SPDX-License-Identifier: MIT */
/* The batches of an epoch: d2l's fixed-size batches of shuffled examples, or the paper's
 * batches of similar length up to a token budget (section 5.1), each a pure function of
 * (seed, epoch) so that a resumed run sees the same ones. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "training/training.h"

/* A Fisher-Yates shuffle of 0..n-1 drawn from stream. */
static void shuffle(int *order, int n, uint64_t stream)
{
    for (int i = 0; i < n; i++) order[i] = i;
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(qkv_random_u32(stream, (uint64_t)i) % (uint32_t)(i + 1));
        int t = order[i];
        order[i] = order[j], order[j] = t;
    }
}

/* The order of the examples in an epoch, drawn from (seed, epoch). */
static void epoch_order(int *order, int n, uint64_t seed, int epoch)
{
    shuffle(order, n, stream_of(seed, STREAM_ORDER, (uint64_t)epoch));
}



void plan_free(epoch_plan *p)
{
    free(p->items), free(p->first), free(p->len), free(p->order), free(p->bounds);
    free(p->perm), free(p->keys);
}

/* The length a pair occupies in a padded batch: the longer side, <eos> included. */
static int pair_len(const qkv_dataset *d, int e)
{
    int n = d->src_valid[e] > d->tgt_valid[e] ? d->src_valid[e] : d->tgt_valid[e];
    return n > 1 ? n : 1;
}

qkv_status plan_init(epoch_plan *p, const qkv_dataset *d, int by_tokens, qkv_error *err)
{
    memset(p, 0, sizeof *p);
    const size_t n = (size_t)d->n;
    p->items = malloc(n * sizeof *p->items), p->first = malloc((n + 1) * sizeof *p->first);
    int ok = p->items && p->first;
    if (by_tokens) {
        p->len = malloc(n * sizeof *p->len), p->order = malloc(n * sizeof *p->order);
        p->bounds = malloc((n + 1) * sizeof *p->bounds), p->perm = malloc(n * sizeof *p->perm);
        p->keys = malloc(n * sizeof *p->keys);
        ok = ok && p->len && p->order && p->bounds && p->perm && p->keys;
    }
    if (!ok) {
        plan_free(p);
        return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for batches");
    }
    if (by_tokens) {
        double total = 0.0;
        for (int e = 0; e < d->n; e++) total += p->len[e] = pair_len(d, e);
        p->mean_len = total / d->n;
    }
    return QKV_OK;
}

/* d2l's batches: the shuffled examples, `batch` at a time. */
void plan_fixed(epoch_plan *p, const qkv_dataset *d, int batch, uint64_t seed, int epoch)
{
    epoch_order(p->items, d->n, seed, epoch);
    p->n_batches = (d->n + batch - 1) / batch;
    for (int b = 0; b < p->n_batches; b++) p->first[b] = b * batch;
    p->first[p->n_batches] = d->n;
}

static int by_length(const void *a, const void *b)
{
    const keyed *x = a, *y = b;
    if (x->len != y->len) return (x->len > y->len) - (x->len < y->len);
    return (x->at > y->at) - (x->at < y->at);
}

/* Batches of similar length: the shuffled examples in buckets of about 64 batches, each
 * sorted by length (ties keep the shuffled order) and packed while count x longest <=
 * budget; then the batches are shuffled, so an epoch does not run from short to long. */
void plan_tokens(epoch_plan *p, const qkv_dataset *d, int budget, uint64_t seed,
                        int epoch)
{
    const int n = d->n;
    epoch_order(p->order, n, seed, epoch);
    const int bucket = (int)fmin((double)n, fmax(1.0, 64.0 * budget / p->mean_len));
    for (int i = 0; i < n; i++) p->keys[i] = (keyed){p->len[p->order[i]], i};
    for (int b0 = 0; b0 < n; b0 += bucket)
        qsort(p->keys + b0, (size_t)(n - b0 < bucket ? n - b0 : bucket), sizeof *p->keys,
              by_length);
    /* pack: batch k is keys[bounds[k] .. bounds[k + 1]) */
    int nb = 0, count = 0, longest = 0;
    for (int i = 0; i < n; i++) {
        int wider = p->keys[i].len > longest ? p->keys[i].len : longest;
        if (count > 0 && (int64_t)(count + 1) * wider > budget) {
            p->bounds[nb++] = i - count;
            count = 0, wider = p->keys[i].len;
        }
        count++, longest = wider;
    }
    p->bounds[nb++] = n - count;
    p->bounds[nb] = n;
    /* the batches in an order from a second stream of (seed, epoch) */
    shuffle(p->perm, nb, stream_of(seed, STREAM_BATCHES, (uint64_t)epoch));
    int at = 0;
    for (int k = 0; k < nb; k++) {
        p->first[k] = at;
        for (int i = p->bounds[p->perm[k]]; i < p->bounds[p->perm[k] + 1]; i++)
            p->items[at++] = p->order[p->keys[i].at];
    }
    p->first[nb] = n;
    p->n_batches = nb;
}

int qkv_train_batches(int *items, int *first, const qkv_dataset *d, int batch_tokens,
                      uint64_t seed, int epoch)
{
    epoch_plan p;
    if (batch_tokens < 1 || d->n < 1 || plan_init(&p, d, 1, NULL)) return -1;
    plan_tokens(&p, d, batch_tokens, seed, epoch);
    memcpy(items, p.items, (size_t)d->n * sizeof *items);
    memcpy(first, p.first, ((size_t)p.n_batches + 1) * sizeof *first);
    int n = p.n_batches;
    plan_free(&p);
    return n;
}


/* Gather examples items[0 .. B) into a batch of (B, Ts) sources and (B, Tt) targets;
 * decoder input is start + Y[:-1]. */
qkv_batch gather(const qkv_dataset *d, const int *items, int B, int Ts, int Tt, int start,
                 batch_buffers *bb)
{
    const int T = d->num_steps;
    for (int i = 0; i < B; i++) {
        int e = items[i];
        memcpy(bb->src + (size_t)i * Ts, d->src + (size_t)e * T, Ts * sizeof(int));
        memcpy(bb->tgt_out + (size_t)i * Tt, d->tgt + (size_t)e * T, Tt * sizeof(int));
        bb->src_valid[i] = d->src_valid[e];
        bb->tgt_in[(size_t)i * Tt] = start;
        memcpy(bb->tgt_in + (size_t)i * Tt + 1, d->tgt + (size_t)e * T, (Tt - 1) * sizeof(int));
    }
    return (qkv_batch){B, Ts, Tt, bb->src, bb->src_valid, bb->tgt_in, bb->tgt_out};
}

/* The batch's padded lengths: the dataset's num_steps, or cut to its longest pair. */
void batch_lengths(const qkv_dataset *d, const int *items, int B, int cut, int *Ts,
                          int *Tt)
{
    *Ts = *Tt = d->num_steps;
    if (!cut) return;
    *Ts = *Tt = 1;
    for (int i = 0; i < B; i++) {
        if (d->src_valid[items[i]] > *Ts) *Ts = d->src_valid[items[i]];
        if (d->tgt_valid[items[i]] > *Tt) *Tt = d->tgt_valid[items[i]];
    }
}

qkv_status batch_buffers_init(batch_buffers *bb, int B, int T, qkv_error *err)
{
    const size_t cells = (size_t)B * T;
    bb->src = malloc(cells * sizeof(int)), bb->src_valid = malloc((size_t)B * sizeof(int));
    bb->tgt_in = malloc(cells * sizeof(int)), bb->tgt_out = malloc(cells * sizeof(int));
    if (bb->src && bb->src_valid && bb->tgt_in && bb->tgt_out) return QKV_OK;
    batch_buffers_free(bb);
    return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for batches");
}

void batch_buffers_free(batch_buffers *bb)
{
    free(bb->src), free(bb->src_valid), free(bb->tgt_in), free(bb->tgt_out);
    memset(bb, 0, sizeof *bb);
}
