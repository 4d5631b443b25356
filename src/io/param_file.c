/* SPDX-License-Identifier: MIT */
/* Parameter tables as safetensors files; see param_file.h. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/param_file.h"

qkv_tensor_ref *param_refs(const qkv_param_info *tensors, int n, const float *base, int extra)
{
    qkv_tensor_ref *refs = calloc((size_t)n + extra, sizeof *refs);
    if (!refs) return NULL;
    for (int i = 0; i < n; i++) {
        const qkv_param_info *t = &tensors[i];
        refs[i] = (qkv_tensor_ref){t->name, QKV_F32, t->ndim, {t->shape[0], t->shape[1]},
                                   base + t->offset};
    }
    return refs;
}

qkv_status param_copy(const qkv_param_info *tensors, int n, float *base,
                      const qkv_tensor_file *f, const char *path, const char *allowed_prefix,
                      qkv_error *err)
{
    for (int i = 0; i < n; i++) {
        const qkv_param_info *t = &tensors[i];
        const qkv_tensor *x = qkv_tensor_file_get(f, t->name);
        if (!x) return qkv_fail(err, QKV_ERR_FORMAT, "%s: tensor \"%s\" is missing", path, t->name);
        if (x->dtype != QKV_F32)
            return qkv_fail(err, QKV_ERR_FORMAT, "%s: tensor \"%s\" must be F32", path, t->name);
        if (x->ndim != t->ndim || x->shape[0] != t->shape[0] ||
            (t->ndim == 2 && x->shape[1] != t->shape[1]))
            return qkv_fail(err, QKV_ERR_FORMAT, "%s: tensor \"%s\" has shape [%lld%s%lld], the "
                            "configuration needs [%d%s%d]", path, t->name,
                            (long long)x->shape[0], x->ndim > 1 ? ", " : "",
                            x->ndim > 1 ? (long long)x->shape[1] : 0LL, t->shape[0],
                            t->ndim > 1 ? ", " : "", t->ndim > 1 ? t->shape[1] : 0);
        const float *src = x->data;
        for (size_t k = 0; k < t->numel; k++)
            if (!isfinite(src[k]))
                return qkv_fail(err, QKV_ERR_NUMERIC, "%s: tensor \"%s\" holds a NaN or Inf at "
                                "element %zu", path, t->name, k);
        memcpy(base + t->offset, src, t->numel * sizeof(float));
    }
    for (int j = 0; j < f->count; j++) {
        const char *name = f->tensors[j].name;
        int known = allowed_prefix && !strncmp(name, allowed_prefix, strlen(allowed_prefix));
        for (int i = 0; i < n && !known; i++) known = !strcmp(name, tensors[i].name);
        if (!known)
            return qkv_fail(err, QKV_ERR_FORMAT, "%s: unexpected tensor \"%s\" (not part of "
                            "this configuration)", path, name);
    }
    return QKV_OK;
}

qkv_status param_dir_save(const char *dir, const char *json, const qkv_param_info *tensors,
                          int n, const float *params, const char *format, qkv_error *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    /* a model no reader would load (param_copy) is not written */
    for (int i = 0; i < n; i++)
        for (size_t k = 0; k < tensors[i].numel; k++)
            if (!isfinite(params[tensors[i].offset + k]))
                return qkv_fail(err, QKV_ERR_NUMERIC, "%s: not written: tensor \"%s\" holds a NaN "
                                "or Inf at element %zu", path, tensors[i].name, k);
    if (mkdir(dir, 0777) && errno != EEXIST)
        return qkv_fail(err, QKV_ERR_IO, "%s: cannot create the directory: %s", dir,
                        strerror(errno));
    snprintf(path, sizeof path, "%s/config.json", dir);
    const void *chunks[2] = {json, "\n"};
    size_t lens[2] = {strlen(json), 1};
    qkv_status st = qkv_atomic_write(path, chunks, lens, 2, err);
    if (st) return st;
    qkv_tensor_ref *refs = param_refs(tensors, n, params, 0);
    if (!refs) return qkv_fail(err, QKV_ERR_NOMEM, "out of memory");
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    const char *meta[2] = {"format", format};
    st = qkv_tensor_file_save(path, refs, n, meta, 1, err);
    free(refs);
    return st;
}

qkv_status param_dir_load(const char *dir, const qkv_param_info *tensors, int n, float *params,
                          qkv_error *err)
{
    char path[4096];
    qkv_tensor_file f = {0};
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    qkv_status st = qkv_tensor_file_load(&f, path, err);
    if (!st) st = param_copy(tensors, n, params, &f, path, NULL, err);
    qkv_tensor_file_free(&f);
    return st;
}

void adam_refs(qkv_tensor_ref refs[2], const qkv_adam *opt)
{
    refs[0] = (qkv_tensor_ref){"adam.m", QKV_F32, 1, {(int64_t)opt->n}, opt->m};
    refs[1] = (qkv_tensor_ref){"adam.v", QKV_F32, 1, {(int64_t)opt->n}, opt->v};
}

qkv_status adam_find(const qkv_tensor_file *f, const qkv_adam *opt, const char *path,
                     const qkv_tensor **m, const qkv_tensor **v, qkv_error *err)
{
    const qkv_tensor *mt = qkv_tensor_file_get(f, "adam.m"), *vt = qkv_tensor_file_get(f, "adam.v");
    if (!mt || !vt || mt->dtype != QKV_F32 || vt->dtype != QKV_F32 ||
        mt->numel != (int64_t)opt->n || vt->numel != (int64_t)opt->n)
        return qkv_fail(err, QKV_ERR_FORMAT, "%s: Adam moments \"adam.m\"/\"adam.v\" missing or "
                        "not %zu floats", path, opt->n);
    /* a NaN moment, or a negative second moment (sqrt(v) in the update), would reach the
     * parameters at the next step */
    const float *mf = mt->data, *vf = vt->data;
    for (size_t i = 0; i < opt->n; i++)
        if (!isfinite(mf[i]) || !isfinite(vf[i]) || vf[i] < 0.0f)
            return qkv_fail(err, QKV_ERR_FORMAT, "%s: tensor \"%s\" element %zu is %g: Adam "
                            "moments must be finite (and the second one >= 0)", path,
                            !isfinite(mf[i]) ? "adam.m" : "adam.v", i,
                            (double)(!isfinite(mf[i]) ? mf[i] : vf[i]));
    *m = mt, *v = vt;
    return QKV_OK;
}
