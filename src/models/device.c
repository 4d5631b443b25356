/* SPDX-License-Identifier: MIT */
/* A model on a device (model.h, "what both models own"): moving its buffers there and back,
 * the host's copy of the parameters and when it goes up or comes down, the optimizer's state
 * there, and the passes' inputs and results on their way. On the host (c->dev NULL) every
 * call here is what it always was: the same buffers, a copy for an upload. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "models/model.h"

/* ---- the host's copy of the parameters, and a pass's start and end ---------------------- */

qkv_status core_host_current(const model_core *c, qkv_error *err)
{
    device_side *d = c->dev;
    if (!d || d->params != DEVICE_NEWER) return QKV_OK;
    if (c->mem->download(d->host_params, c->params, c->n_params * sizeof *c->params)) {
        const backend be = {.ops = c->mem, .device = d->ctx};
        return transfer_failed(&be, err);
    }
    d->params = COPIES_SAME;
    return QKV_OK;
}

const float *core_host_params(const model_core *c)
{
    core_host_current(c, NULL);
    return c->dev ? c->dev->host_params : c->params;
}

qkv_status core_prepare(model_core *c, int decoding, qkv_error *err)
{
    device_side *d = c->dev;
    if (!d) return precision_prepare(&c->prec, c->params, c->n_params, decoding, err);
    if (d->params == HOST_NEWER) {
        if (c->mem->upload(c->params, d->host_params, c->n_params * sizeof *c->params)) {
            const backend be = core_backend(c);
            return transfer_failed(&be, err);
        }
        d->params = COPIES_SAME;
        precision_touch(&c->prec);
    }
    if (decoding && c->prec.precision == QKV_PRECISION_BF16 && !c->prec.bf16_current) {
        const backend be = core_backend(c);
        be.ops->round_bf16(d->bf16, c->params, c->n_params);
        c->prec.bf16_current = 1;
    }
    return QKV_OK;
}

qkv_status core_finish(const model_core *c, qkv_error *err)
{
    const backend be = {.ops = c->mem, .device = c->dev ? c->dev->ctx : NULL};
    return c->mem->finish(&be, err);
}

qkv_status transfer_failed(const backend *be, qkv_error *err)
{
    qkv_status st = be->ops->finish(be, err);
    return st ? st : qkv_fail(err, QKV_ERR_DEVICE, "a transfer to or from %s failed",
                              be->ops->name);
}

/* ---- devices ---------------------------------------------------------------------------- */

const char *core_device_name(const model_core *c) { return c->dev ? c->dev->dev->name : "cpu"; }

qkv_status core_device_of(const device **out, qkv_device d, qkv_error *err)
{
    *out = NULL;
    if (d == QKV_DEVICE_CPU) return QKV_OK;
    if (d != QKV_DEVICE_CUDA)
        return qkv_fail(err, QKV_ERR_ARG, "unknown device %d (cpu 0, cuda 1)", (int)d);
    if (!(*out = device_cuda()))
        return qkv_fail(err, QKV_ERR_ARG, "this libqkv was built without CUDA: build it with "
                        "`make CUDA=1` (docs/gpu.md) to run on a GPU");
    return QKV_OK;
}

qkv_status qkv_device_check(qkv_device d, qkv_error *err)
{
    const device *dev;
    void *ctx;
    qkv_status st = core_device_of(&dev, d, err);
    if (st || !dev) return st;
    if ((st = dev->open(&ctx, err))) return st;
    dev->close(ctx);
    return QKV_OK;
}

/* What lives in the memory of c->mem besides the parameters: made again on first use. */
static void release_work(model_core *c)
{
    if (c->grads) c->mem->release(c->grads);
    if (c->arena) c->mem->release(c->arena);
    c->grads = c->arena = NULL, c->arena_cap = 0;
}

void core_device_free(model_core *c)
{
    device_side *d = c->dev;
    if (d->bf16) c->mem->release(d->bf16);
    if (d->adam_m) c->mem->release(d->adam_m);
    if (d->adam_v) c->mem->release(d->adam_v);
    c->mem->release(c->params), c->mem->release(c->pos_table);
    c->params = d->host_params, c->pos_table = d->host_pos_table;
    free(d->host_grads);
    d->dev->close(d->ctx);
    free(d);
    c->dev = NULL;
    c->mem = &backend_cpu_fp32;
}

/* Whether the model can run on dev (NULL: the host) at precision p; QKV_ERR_ARG if not. */
static qkv_status device_check(const device *dev, qkv_precision p, int linear_attention,
                               qkv_error *err)
{
    if (!dev)
        return p == QKV_PRECISION_BF16 && !qkv_bf16_supported()
                   ? qkv_fail(err, QKV_ERR_ARG, "bf16 precision needs a CPU with AVX512-BF16 "
                              "(VDPBF16PS), and this one has none: set fp32 before moving the "
                              "model to the CPU")
                   : QKV_OK;
    if (linear_attention)
        return qkv_fail(err, QKV_ERR_ARG, "linear attention runs on the CPU only: %s has no "
                        "kernel for it", dev->name);
    if (p == QKV_PRECISION_INT8)
        return qkv_fail(err, QKV_ERR_ARG, "int8 precision runs on the CPU only: set fp32 or "
                        "bf16 before moving the model to %s", dev->name);
    if (p == QKV_PRECISION_BF16 && !dev->bf16)
        return qkv_fail(err, QKV_ERR_ARG, "%s has no bf16 kernels: set fp32 before moving the "
                        "model there", dev->name);
    return QKV_OK;
}

/* A device side for dev with the host's parameters and sinusoidal table (host_params,
 * host_pos) copied up to its own buffers. */
static qkv_status device_side_open(device_side **out, const model_core *c, const device *dev,
                                   const float *host_params, const float *host_pos,
                                   float **params, float **pos, qkv_error *err)
{
    *out = NULL, *params = *pos = NULL;
    void *ctx = NULL;
    qkv_status st = dev->open(&ctx, err);
    if (st) return st;
    device_side *d = calloc(1, sizeof *d);
    *params = dev->fp32->alloc(c->n_params * sizeof **params);
    *pos = dev->fp32->alloc(c->pos_floats * sizeof **pos);
    if (!d || !*params || !*pos)
        st = qkv_fail(err, QKV_ERR_NOMEM, "out of %smemory moving %zu parameters to %s",
                      d ? "device " : "", c->n_params, dev->name);
    if (!st && (dev->fp32->upload(*params, host_params, c->n_params * sizeof **params) ||
                dev->fp32->upload(*pos, host_pos, c->pos_floats * sizeof **pos))) {
        const backend be = {.ops = dev->fp32, .device = ctx};
        st = transfer_failed(&be, err);
    }
    if (st) {
        if (*params) dev->fp32->release(*params);
        if (*pos) dev->fp32->release(*pos);
        free(d), dev->close(ctx);
        *params = *pos = NULL;
        return st;
    }
    d->dev = dev, d->ctx = ctx;
    *out = d;
    return QKV_OK;
}

qkv_status core_set_device(model_core *c, const device *dev, int linear_attention,
                           param_walk walk, const void *cfg, void *view,
                           void (*retype)(void *model), void *model, qkv_error *err)
{
    if (dev == (c->dev ? c->dev->dev : NULL)) return QKV_OK;
    const qkv_precision p = c->prec.precision;
    /* the parameters as they are now on the host, then up to the new device's buffers */
    qkv_status st = device_check(dev, p, linear_attention, err);
    if (!st) st = core_host_current(c, err);
    const float *host = core_host_params(c);
    const float *host_pos = c->dev ? c->dev->host_pos_table : c->pos_table;
    device_side *d = NULL;
    float *params = NULL, *pos = NULL;
    if (!st && dev) st = device_side_open(&d, c, dev, host, host_pos, &params, &pos, err);
    if (st) return st;
    /* what depends on where the parameters live freed; the host keeps its buffers as its
     * copies */
    release_work(c);
    precision_free(&c->prec);
    if (c->dev) core_device_free(c);
    if (d) {
        d->host_params = c->params, d->host_pos_table = c->pos_table;
        c->params = params, c->pos_table = pos;
        c->dev = d, c->mem = dev->fp32;
    }
    c->generation++;
    param_walker w = {c->params, 0, NULL, NULL, 0};
    walk(&w, cfg, view);
    /* checked above: fails only for want of memory */
    return core_set_precision(c, p, retype, model, err);
}

/* ---- training -------------------------------------------------------------------------- */

float *core_grads(model_core *c, param_walk walk, const void *cfg, void *view)
{
    if (!c->grads) {
        if (!(c->grads = c->mem->alloc(c->n_params * sizeof *c->grads))) return NULL;
        c->mem->zero(c->grads, c->n_params);
        param_walker w = {c->grads, 0, NULL, NULL, 0};
        walk(&w, cfg, view);
    }
    return c->grads;
}

float *core_grads_host(model_core *c)
{
    device_side *d = c->dev;
    if (!d || !c->grads) return c->grads;
    if (!d->host_grads && !(d->host_grads = malloc(c->n_params * sizeof *d->host_grads)))
        return NULL;
    if (c->mem->download(d->host_grads, c->grads, c->n_params * sizeof *c->grads)) return NULL;
    return d->host_grads;
}

qkv_status core_grads_put(model_core *c, qkv_error *err)
{
    if (!c->dev || !c->grads || !c->dev->host_grads ||
        !c->mem->upload(c->grads, c->dev->host_grads, c->n_params * sizeof *c->grads))
        return QKV_OK;
    const backend be = core_backend(c);
    return transfer_failed(&be, err);
}

void core_grads_zero(model_core *c) { c->mem->zero(c->grads, c->n_params); }

double core_clip_grads(model_core *c, double max_norm)
{
    const double norm = sqrt(c->mem->sum_squares(c->grads, c->n_params));
    if (!isfinite(norm) || max_norm <= 0.0 || norm <= max_norm) return norm;
    c->mem->scale(c->grads, c->n_params, (float)(max_norm / norm));
    return norm;
}

qkv_status core_adam(model_core *c, qkv_adam *opt, const adam_hyper *h, qkv_error *err)
{
    const size_t n = c->n_params, bytes = n * sizeof(float);
    device_side *d = c->dev;
    precision_touch(&c->prec);
    if (!d) {
        c->mem->adam_update(c->params, c->grads, opt->m, opt->v, n, h);
        return QKV_OK;
    }
    if (!d->adam_m && !(d->adam_m = c->mem->alloc(bytes)))
        return qkv_fail(err, QKV_ERR_NOMEM, "out of device memory on %s for Adam's moments",
                        d->dev->name);
    if (!d->adam_v && !(d->adam_v = c->mem->alloc(bytes)))
        return qkv_fail(err, QKV_ERR_NOMEM, "out of device memory on %s for Adam's moments",
                        d->dev->name);
    /* the host's moments, unless the device's are this optimizer's as of its last step */
    if ((d->adam_of != opt || d->adam_step != opt->step - 1) &&
        (c->mem->upload(d->adam_m, opt->m, bytes) || c->mem->upload(d->adam_v, opt->v, bytes))) {
        d->adam_of = NULL;
        const backend be = core_backend(c);
        return transfer_failed(&be, err);
    }
    c->mem->adam_update(c->params, c->grads, d->adam_m, d->adam_v, n, h);
    d->adam_of = opt, d->adam_step = opt->step, d->adam_host_current = 0;
    d->params = DEVICE_NEWER;
    return QKV_OK;
}

qkv_status core_adam_to_host(const model_core *c, const qkv_adam *opt, qkv_error *err)
{
    device_side *d = c->dev;
    if (!d || d->adam_of != opt || d->adam_step != opt->step || d->adam_host_current)
        return QKV_OK;
    if (c->mem->download(opt->m, d->adam_m, c->n_params * sizeof *opt->m) ||
        c->mem->download(opt->v, d->adam_v, c->n_params * sizeof *opt->v)) {
        const backend be = {.ops = c->mem, .device = d->ctx};
        return transfer_failed(&be, err);
    }
    d->adam_host_current = 1;
    return QKV_OK;
}

void core_adam_forget(model_core *c)
{
    if (c->dev) c->dev->adam_of = NULL;
}

qkv_status stage_ids(const backend *be, int *dst, const int *ids, size_t n, int V, int targets,
                     qkv_error *err)
{
    /* the host's kernels check as they read; a device's cannot say which id was wrong */
    for (size_t i = 0; !be->ops->host_memory && i < n; i++) {
        if (targets && ids[i] == QKV_PAD) continue;
        if (ids[i] < 0 || ids[i] >= V)
            return targets ? qkv_fail(err, QKV_ERR_ARG, "cross-entropy: target id %d at row %zu "
                                      "is outside the vocabulary [0, %d)", ids[i], i, V)
                           : qkv_fail(err, QKV_ERR_ARG, "embedding: token id %d at position %zu "
                                      "is outside the vocabulary [0, %d)", ids[i], i, V);
    }
    return be->ops->upload(dst, ids, n * sizeof *dst) ? transfer_failed(be, err) : QKV_OK;
}
