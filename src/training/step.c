/* SPDX-License-Identifier: MIT */
/* One optimizer step, llm.c's shape: zero the gradients, forward and loss, backward, clip,
 * update. The training loops (train.c, lm_train.c) are drivers over it: everything they add
 * (batches, schedules, validation, checkpoints, logs) is policy around this step.
 * Data-parallel (o->reducer): the loss pass runs on this rank's shard, and between backward
 * and clipping the ranks sum their gradients; with grad_scale = 1 / the whole batch's tokens
 * that sum is the whole batch's mean gradient, so the update is the one-process update.
 * Gradient accumulation (training.h: the step in phases) sums several micro-batches' passes
 * before that one sum and update. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "models/language_model_internal.h"
#include "models/transformer_internal.h"
#include "training/training.h"

/* After the loss pass (status st, returned as it is unless it is a non-finite loss to skip):
 * clip, then Adam at o->lr. A non-finite loss or gradient never reaches the parameters: the
 * step fails (QKV_ERR_NUMERIC, the parameters untouched) or, with o->skip_nonfinite, is
 * skipped; a skipped step still counts (opt->step), so that later steps keep their dropout
 * streams and schedule. The model's gradients, parameters and (on a device, its copies of)
 * Adam's moments are where its kernels run (models/model.h). */
static qkv_status update(model_core *c, qkv_adam *opt, qkv_status st, const qkv_step_options *o,
                         qkv_step_result *r, qkv_error *err)
{
    r->grad_norm = NAN, r->skipped = 0;
    if (st == QKV_ERR_NUMERIC && o->skip_nonfinite) st = QKV_OK, r->skipped = 1;
    if (st) return st;
    if (!r->skipped) {
        r->grad_norm = core_clip_grads(c, o->clip);
        /* a device that failed gives no norm: its failure, not a numeric one */
        if (!isfinite(r->grad_norm) && (st = core_finish(c, err))) return st;
        if (!isfinite(r->grad_norm)) {
            if (!o->skip_nonfinite)
                return qkv_fail(err, QKV_ERR_NUMERIC, "the gradient norm is not finite");
            r->skipped = 1;
        }
    }
    if (r->skipped) {
        opt->step++;
        return QKV_OK;
    }
    const adam_hyper h = adam_step_hyper(opt, o->lr);
    if ((st = core_adam(c, opt, &h, err))) return st;
    return core_finish(c, err);
}

/* The tallies of a data-parallel step: the sums over the ranks of the loss, the tokens and how
 * each rank's loss pass went (st); the step's outcome, the same on every rank. */
static qkv_status tallies(const qkv_reducer *rd, qkv_status st, qkv_step_result *r,
                          qkv_error *err)
{
    double tally[4] = {st ? 0.0 : r->loss, st ? 0.0 : (double)r->tokens,
                       st == QKV_ERR_NUMERIC, st && st != QKV_ERR_NUMERIC};
    if (rd->sum_doubles(rd->ctx, tally, 4))
        return qkv_fail(err, QKV_ERR_IO, "summing the loss over %d ranks failed", rd->size);
    if (st && st != QKV_ERR_NUMERIC) return st;
    if (tally[3] > 0.0)
        return qkv_fail(err, QKV_ERR_ARG, "the loss pass failed on %g other rank(s)", tally[3]);
    if (tally[2] > 0.0)
        return st ? st : qkv_fail(err, QKV_ERR_NUMERIC, "the loss is not finite on %g other "
                                  "rank(s)", tally[2]);
    r->loss = tally[0], r->tokens = (int)tally[1];
    return QKV_OK;
}

/* Data-parallel: the tallies and, when every pass succeeded, the sum of the gradients (on the
 * host: from a device down and back up). Every rank comes here whatever its own pass
 * returned, since the others wait for it in the sums; all of them then see the same outcome. */
static qkv_status reduce(const qkv_reducer *rd, model_core *c, qkv_status st, qkv_step_result *r,
                         qkv_error *err)
{
    if ((st = tallies(rd, st, r, err))) return st;
    float *grads = core_grads_host(c);
    if (!grads) return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for the gradients' sum");
    if (rd->sum_floats(rd->ctx, grads, c->n_params))
        return qkv_fail(err, QKV_ERR_IO, "summing the gradients over %d ranks failed", rd->size);
    return core_grads_put(c, err);
}

/* ---- buckets (training.h) ---------------------------------------------------------------- */

typedef struct {
    size_t offset, count;
    int event;
} ranged;

static int by_event(const void *a, const void *b)
{
    const ranged *x = a, *y = b;
    if (x->event != y->event) return (x->event > y->event) - (x->event < y->event);
    return (x->offset > y->offset) - (x->offset < y->offset);
}

/* Adds [offset, offset + count) to the open bucket if it borders it, else closes that one
 * (appending it to p) and opens a bucket of this range. */
static void bucket_add(grad_buckets *p, grad_bucket *open, const ranged *t)
{
    if (open->count && t->offset + t->count == open->offset) {
        open->offset = t->offset, open->count += t->count; /* the blocks come top down */
    } else if (open->count && open->offset + open->count == t->offset) {
        open->count += t->count;
    } else {
        if (open->count) p->b[p->n++] = *open;
        *open = (grad_bucket){t->offset, t->count, t->event};
    }
    if (t->event > open->after) open->after = t->event;
}

qkv_status buckets_init(grad_buckets *p, const qkv_reducer *rd, const model_core *c,
                        float *grads, const qkv_param_info *tensors, const int *event,
                        int n_tensors, qkv_error *err)
{
    memset(p, 0, sizeof *p);
    /* on a device the gradients reach the host only after the pass: the flat sum */
    if (!rd || rd->size <= 1 || !rd->start_sum || !rd->finish_sums || c->dev) return QKV_OK;
    ranged *t = malloc((size_t)n_tensors * sizeof *t);
    p->b = malloc((size_t)n_tensors * sizeof *p->b);
    if (!t || !p->b) {
        free(t), buckets_free(p);
        return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for gradient buckets");
    }
    for (int i = 0; i < n_tensors; i++)
        t[i] = (ranged){tensors[i].offset, tensors[i].numel, event[i]};
    qsort(t, (size_t)n_tensors, sizeof *t, by_event);
    const size_t floats = (rd->bucket_bytes ? rd->bucket_bytes : (size_t)1 << 20) / sizeof(float);
    grad_bucket open = {0, 0, 0};
    for (int i = 0; i < n_tensors; i++) {
        bucket_add(p, &open, &t[i]);
        /* a bucket closes at the end of an event once it is large enough */
        if (open.count >= floats && (i + 1 == n_tensors || t[i + 1].event != t[i].event))
            p->b[p->n++] = open, open.count = 0;
    }
    if (open.count) p->b[p->n++] = open;
    free(t);
    p->grads = grads, p->rd = rd;
    return QKV_OK;
}

void buckets_free(grad_buckets *p)
{
    free(p->b);
    memset(p, 0, sizeof *p);
}

/* Starts the buckets up to (not including) `until`, in order. */
static void start_buckets(grad_buckets *p, int until)
{
    for (; p->next < until; p->next++)
        if (!p->failed && p->rd->start_sum(p->rd->ctx, p->grads + p->b[p->next].offset,
                                           p->b[p->next].count))
            p->failed = 1; /* told at step_end: the others are waited for first */
}

void bucket_hook(void *ctx)
{
    grad_buckets *p = ctx;
    const int done = p->events++; /* the event that just ended */
    int until = p->next;
    while (until < p->n && p->b[until].after <= done) until++;
    start_buckets(p, until);
}

/* Data-parallel with buckets: what backward did not start starts now, in the plan's order;
 * then the sums are waited for, then the tallies say whether the step stands. */
static qkv_status reduce_buckets(grad_buckets *p, qkv_status st, qkv_step_result *r,
                                 qkv_error *err)
{
    start_buckets(p, p->n);
    const int waited = p->rd->finish_sums(p->rd->ctx);
    const int failed = p->failed || waited;
    p->next = 0, p->events = 0, p->failed = 0;
    if (failed) return qkv_fail(err, QKV_ERR_IO, "summing the gradients over %d ranks failed",
                                p->rd->size);
    return tallies(p->rd, st, r, err);
}

static int parallel(const qkv_step_options *o) { return o->reducer && o->reducer->size > 1; }

qkv_status step_begin(model_core *c, float *grads, const qkv_step_options *o,
                      int micro_batches, qkv_step_result *r, qkv_error *err)
{
    if (!grads)
        return qkv_fail(err, QKV_ERR_NOMEM, "out of %smemory for gradients",
                        c->dev ? "device " : "");
    /* each rank's (or micro-batch's) own per-token mean would weigh their tokens unequally */
    if ((parallel(o) || micro_batches > 1) && !(o->grad_scale > 0.0f))
        return qkv_fail(err, QKV_ERR_ARG, "a step split over ranks or micro-batches needs "
                        "grad_scale > 0 (1 / the whole batch's tokens for the per-token mean)");
    core_grads_zero(c);
    memset(r, 0, sizeof *r);
    return QKV_OK;
}

/* The loss pass's options: training, with backward, the batch's sequences numbered from
 * first_example for their dropout masks, and the buckets' hook when given. */
static qkv_loss_options pass_options(const qkv_step_options *o, uint64_t first_example,
                                     grad_buckets *hook)
{
    return (qkv_loss_options){1, o->grad_scale, o->label_smoothing, 1, o->dropout_seed,
                              first_example, hook ? bucket_hook : NULL, hook};
}

qkv_status step_pass_transformer(qkv_transformer *m, const qkv_batch *b,
                                 const qkv_step_options *o, uint64_t first_example,
                                 grad_buckets *hook, qkv_status st, qkv_step_result *r,
                                 qkv_error *err)
{
    if (st || b->B <= 0) return st; /* after a failed pass the step only ends (step_end) */
    const qkv_loss_options pass = pass_options(o, first_example, hook && hook->b ? hook : NULL);
    double loss = 0.0;
    int tokens = 0;
    st = qkv_transformer_loss(m, b, &pass, &loss, &tokens, err);
    if (!st) r->loss += loss, r->tokens += tokens;
    return st;
}

qkv_status step_pass_lm(qkv_lm *m, const int *ids, const int *targets, int B, int T,
                        const qkv_step_options *o, uint64_t first_example, grad_buckets *hook,
                        qkv_status st, qkv_step_result *r, qkv_error *err)
{
    if (st || B <= 0) return st;
    const qkv_loss_options pass = pass_options(o, first_example, hook && hook->b ? hook : NULL);
    double loss = 0.0;
    int tokens = 0;
    st = qkv_lm_loss(m, ids, targets, B, T, &pass, &loss, &tokens, err);
    if (!st) r->loss += loss, r->tokens += tokens;
    return st;
}

qkv_status step_end(model_core *c, qkv_adam *opt, qkv_status st, const qkv_step_options *o,
                    grad_buckets *buckets, qkv_step_result *r, qkv_error *err)
{
    if (parallel(o))
        st = buckets && buckets->b ? reduce_buckets(buckets, st, r, err)
                                   : reduce(o->reducer, c, st, r, err);
    return update(c, opt, st, o, r, err);
}

qkv_status qkv_transformer_train_step(qkv_transformer *m, qkv_adam *opt, const qkv_batch *b,
                                      const qkv_step_options *o, qkv_step_result *r,
                                      qkv_error *err)
{
    qkv_status st = step_begin(&m->core, transformer_grads(m), o, 1, r, err);
    if (st) return st;
    st = step_pass_transformer(m, b, o, parallel(o) ? o->first_example : 0, NULL, st, r, err);
    return step_end(&m->core, opt, st, o, NULL, r, err);
}

qkv_status qkv_lm_train_step(qkv_lm *m, qkv_adam *opt, const int *ids, const int *targets, int B,
                             int T, const qkv_step_options *o, qkv_step_result *r,
                             qkv_error *err)
{
    qkv_status st = step_begin(&m->core, lm_grads(m), o, 1, r, err);
    if (st) return st;
    st = step_pass_lm(m, ids, targets, B, T, o, parallel(o) ? o->first_example : 0, NULL, st, r,
                      err);
    return step_end(&m->core, opt, st, o, NULL, r, err);
}
