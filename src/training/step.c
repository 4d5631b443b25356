/* SPDX-License-Identifier: MIT */
/* One optimizer step, llm.c's shape: zero the gradients, forward and loss, backward, clip,
 * update. The training loops (train.c, lm_train.c) are drivers over it: everything they add
 * (batches, schedules, validation, checkpoints, logs) is policy around this step.
 * Data-parallel (o->reducer): the loss pass runs on this rank's shard, and between backward
 * and clipping the ranks sum their gradients; with grad_scale = 1 / the whole batch's tokens
 * that sum is the whole batch's mean gradient, so the update is the one-process update. */
#include <math.h>
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

static int parallel(const qkv_step_options *o) { return o->reducer && o->reducer->size > 1; }

/* The step's start: the gradients zeroed, the result cleared, and the loss pass's options
 * (training, with backward). */
static qkv_status begin(model_core *c, float *grads, const qkv_step_options *o,
                        qkv_step_result *r, qkv_loss_options *pass, qkv_error *err)
{
    if (!grads)
        return qkv_fail(err, QKV_ERR_NOMEM, "out of %smemory for gradients",
                        c->dev ? "device " : "");
    /* each rank's own per-token mean would weigh the shards' tokens unequally */
    if (parallel(o) && !(o->grad_scale > 0.0f))
        return qkv_fail(err, QKV_ERR_ARG, "a step split over ranks needs grad_scale > 0 (1 / the "
                        "whole batch's tokens for the per-token mean)");
    core_grads_zero(c);
    memset(r, 0, sizeof *r);
    *pass = (qkv_loss_options){1, o->grad_scale, o->label_smoothing, 1, o->dropout_seed,
                               parallel(o) ? o->first_example : 0};
    return QKV_OK;
}

/* Data-parallel: the sums over the ranks of the loss, the tokens, how each rank's loss pass
 * went (st) and, when every pass succeeded, the gradients (on the host: from a device down
 * and back up). Every rank comes here whatever its own pass returned, since the others wait
 * for it in the sums; all of them then see the same outcome. */
static qkv_status reduce(const qkv_reducer *rd, model_core *c, qkv_status st, qkv_step_result *r,
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
    float *grads = core_grads_host(c);
    if (!grads) return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for the gradients' sum");
    if (rd->sum_floats(rd->ctx, grads, c->n_params))
        return qkv_fail(err, QKV_ERR_IO, "summing the gradients over %d ranks failed", rd->size);
    return core_grads_put(c, err);
}

qkv_status qkv_transformer_train_step(qkv_transformer *m, qkv_adam *opt, const qkv_batch *b,
                                      const qkv_step_options *o, qkv_step_result *r,
                                      qkv_error *err)
{
    qkv_loss_options pass;
    qkv_status st = begin(&m->core, transformer_grads(m), o, r, &pass, err);
    if (st) return st;
    if (b->B > 0) st = qkv_transformer_loss(m, b, &pass, &r->loss, &r->tokens, err);
    if (parallel(o)) st = reduce(o->reducer, &m->core, st, r, err);
    return update(&m->core, opt, st, o, r, err);
}

qkv_status qkv_lm_train_step(qkv_lm *m, qkv_adam *opt, const int *ids, const int *targets, int B,
                             int T, const qkv_step_options *o, qkv_step_result *r,
                             qkv_error *err)
{
    qkv_loss_options pass;
    qkv_status st = begin(&m->core, lm_grads(m), o, r, &pass, err);
    if (st) return st;
    if (B > 0) st = qkv_lm_loss(m, ids, targets, B, T, &pass, &r->loss, &r->tokens, err);
    if (parallel(o)) st = reduce(o->reducer, &m->core, st, r, err);
    return update(&m->core, opt, st, o, r, err);
}
