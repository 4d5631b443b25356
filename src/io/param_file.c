/* SPDX-License-Identifier: MIT */
/* Parameter tables as safetensors files; see param_file.h. */
#include <errno.h>
#include <float.h>
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

/* f's tensor called name, present, of type dtype and of shape [rows] (cols 0) or [rows, cols]. */
static qkv_status find_tensor(const qkv_tensor **out, const qkv_tensor_file *f, const char *name,
                              qkv_dtype dtype, int rows, int cols, const char *path,
                              qkv_error *err)
{
    const qkv_tensor *x = qkv_tensor_file_get(f, name);
    const int ndim = cols ? 2 : 1;
    if (!x) return qkv_fail(err, QKV_ERR_FORMAT, "%s: tensor \"%s\" is missing", path, name);
    if (x->dtype != dtype)
        return qkv_fail(err, QKV_ERR_FORMAT, "%s: tensor \"%s\" must be %s", path, name,
                        dtype == QKV_I8 ? "I8" : "F32");
    if (x->ndim != ndim || x->shape[0] != rows || (ndim == 2 && x->shape[1] != cols)) {
        char got[48] = "", need[48] = "";
        if (x->ndim > 1) snprintf(got, sizeof got, ", %lld", (long long)x->shape[1]);
        if (ndim > 1) snprintf(need, sizeof need, ", %d", cols);
        return qkv_fail(err, QKV_ERR_FORMAT, "%s: tensor \"%s\" has shape [%lld%s], the "
                        "configuration needs [%d%s]", path, name, (long long)x->shape[0], got,
                        rows, need);
    }
    *out = x;
    return QKV_OK;
}

/* Every tensor of f is one of the table's, or named like an int8 weight's scales (int8), or
 * starts with allowed_prefix. */
static qkv_status check_known(const qkv_param_info *tensors, int n, const qkv_tensor_file *f,
                              const char *path, const char *allowed_prefix, int int8,
                              qkv_error *err)
{
    for (int j = 0; j < f->count; j++) {
        const char *name = f->tensors[j].name;
        int known = allowed_prefix && !strncmp(name, allowed_prefix, strlen(allowed_prefix));
        for (int i = 0; i < n && !known; i++) {
            const size_t len = strlen(tensors[i].name);
            known = !strcmp(name, tensors[i].name) ||
                    (int8 && precision_int8_tensor(&tensors[i]) &&
                     !strncmp(name, tensors[i].name, len) && !strcmp(name + len, INT8_SCALE));
        }
        if (!known)
            return qkv_fail(err, QKV_ERR_FORMAT, "%s: unexpected tensor \"%s\" (not part of "
                            "this configuration)", path, name);
    }
    return QKV_OK;
}

/* The table's float32 tensor t from f into base: finite. */
static qkv_status copy_f32(const qkv_param_info *t, float *base, const qkv_tensor_file *f,
                           const char *path, qkv_error *err)
{
    const qkv_tensor *x;
    qkv_status st = find_tensor(&x, f, t->name, QKV_F32, t->shape[0], t->ndim == 2 ? t->shape[1] : 0,
                                path, err);
    if (st) return st;
    const float *src = x->data;
    for (size_t k = 0; k < t->numel; k++)
        if (!isfinite(src[k]))
            return qkv_fail(err, QKV_ERR_NUMERIC, "%s: tensor \"%s\" holds a NaN or Inf at "
                            "element %zu", path, t->name, k);
    memcpy(base + t->offset, src, t->numel * sizeof(float));
    return QKV_OK;
}

qkv_status param_copy(const qkv_param_info *tensors, int n, float *base,
                      const qkv_tensor_file *f, const char *path, const char *allowed_prefix,
                      qkv_error *err)
{
    for (int i = 0; i < n; i++) {
        qkv_status st = copy_f32(&tensors[i], base, f, path, err);
        if (st) return st;
    }
    return check_known(tensors, n, f, path, allowed_prefix, 0, err);
}

/* The int8 weight t (its I8 values and F32 scales, checked as int8_quantise_row writes them)
 * packed into q, and its float32 view, s wq, into base. */
static qkv_status copy_int8(const qkv_param_info *t, float *base, int8_matrix *q,
                            const qkv_tensor_file *f, const char *path, qkv_error *err)
{
    const int out = t->shape[0], in = t->shape[1];
    char scale_name[80];
    snprintf(scale_name, sizeof scale_name, "%s%s", t->name, INT8_SCALE);
    const qkv_tensor *w, *s;
    qkv_status st = find_tensor(&w, f, t->name, QKV_I8, out, in, path, err);
    if (!st) st = find_tensor(&s, f, scale_name, QKV_F32, out, 0, path, err);
    if (st) return st;
    const int8_t *wq = w->data;
    const float *scale = s->data;
    for (int o = 0; o < out; o++) {
        /* finite and >= 0, and small enough that 127 s is finite */
        if (!(scale[o] >= 0.0f && scale[o] <= FLT_MAX / 127.0f))
            return qkv_fail(err, QKV_ERR_NUMERIC, "%s: tensor \"%s\" element %d is %g: an "
                            "int8 weight's scale must be finite, >= 0 and at most %g", path,
                            scale_name, o, (double)scale[o], (double)(FLT_MAX / 127.0f));
        int nonzero = 0;
        for (int k = 0; k < in; k++) {
            const int v = wq[(size_t)o * in + k];
            if (v == -128)
                return qkv_fail(err, QKV_ERR_FORMAT, "%s: tensor \"%s\" element %zu is -128: "
                                "int8 weights are in [-127, 127]", path, t->name,
                                (size_t)o * in + k);
            nonzero |= v;
        }
        if (nonzero && scale[o] == 0.0f)
            return qkv_fail(err, QKV_ERR_FORMAT, "%s: tensor \"%s\" element %d is 0, but row "
                            "%d of \"%s\" is not: only a row of zeros has scale 0", path,
                            scale_name, o, o, t->name);
    }
    float *dst = base + t->offset;
    for (size_t k = 0; k < t->numel; k++) dst[k] = int8_dequantise(wq[k], scale[k / in]);
    return int8_matrix_pack(q, wq, scale, out, in, err);
}

qkv_status param_copy_int8(const qkv_param_info *tensors, int n, float *base, int8_matrix *q,
                           const qkv_tensor_file *f, const char *path, qkv_error *err)
{
    qkv_status st = check_known(tensors, n, f, path, NULL, 1, err);
    for (int i = 0, k = 0; !st && i < n; i++)
        st = precision_int8_tensor(&tensors[i]) ? copy_int8(&tensors[i], base, &q[k++], f, path, err)
                                                : copy_f32(&tensors[i], base, f, path, err);
    return st;
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

/* The tensors of an int8 model file: the int8 weights as NAME (I8) and NAME.scale (F32), the
 * others as they are. NULL when out of memory; *buffer (freed by the caller) holds the
 * quantised values. */
static qkv_tensor_ref *int8_refs(const qkv_param_info *tensors, int n, const float *params,
                                 int *count, void **buffer)
{
    size_t n_scales = 0, n_weights = 0;
    int refs_n = n;
    for (int i = 0; i < n; i++)
        if (precision_int8_tensor(&tensors[i]))
            n_scales += (size_t)tensors[i].shape[0], n_weights += tensors[i].numel, refs_n++;
    qkv_tensor_ref *refs = param_refs(tensors, n, params, refs_n - n);
    /* the scales first, so that every float is aligned */
    float *scales = *buffer = malloc(n_scales * sizeof *scales + n_weights + 1);
    if (!refs || !scales) return free(refs), free(*buffer), *buffer = NULL, NULL;
    int8_t *wq = (int8_t *)(scales + n_scales);
    for (int i = 0, j = n; i < n; i++) {
        const qkv_param_info *t = &tensors[i];
        if (!precision_int8_tensor(t)) continue;
        const int out = t->shape[0], in = t->shape[1];
        for (int o = 0; o < out; o++)
            int8_quantise_row(wq + (size_t)o * in, scales + o, params + t->offset + (size_t)o * in, in);
        refs[i].dtype = QKV_I8, refs[i].data = wq;
        refs[j++] = (qkv_tensor_ref){t->name, QKV_F32, 1, {out}, scales};
        wq += t->numel, scales += out;
    }
    *count = refs_n;
    return refs;
}

qkv_status param_dir_save_int8(const char *dir, const char *json, const qkv_param_info *tensors,
                               int n, const float *params, const char *format, qkv_error *err)
{
    char path[4096];
    if (mkdir(dir, 0777) && errno != EEXIST)
        return qkv_fail(err, QKV_ERR_IO, "%s: cannot create the directory: %s", dir,
                        strerror(errno));
    int count = 0;
    void *buffer = NULL;
    qkv_tensor_ref *refs = int8_refs(tensors, n, params, &count, &buffer);
    if (!refs) return qkv_fail(err, QKV_ERR_NOMEM, "out of memory quantising the weights");
    /* the scales' names, NAME.scale, beside the table's names */
    char (*names)[80] = calloc((size_t)(count - n) + 1, sizeof *names);
    if (!names) {
        free(refs), free(buffer);
        return qkv_fail(err, QKV_ERR_NOMEM, "out of memory");
    }
    for (int j = n; j < count; j++) {
        snprintf(names[j - n], sizeof names[0], "%s%s", refs[j].name, INT8_SCALE);
        refs[j].name = names[j - n];
    }
    /* the weights first, config.json last: a directory whose config.json says int8 always
     * has the file that goes with it */
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    const char *meta[2] = {"format", format};
    qkv_status st = qkv_tensor_file_save(path, refs, count, meta, 1, err);
    free(refs), free(buffer), free(names);
    if (st) return st;
    snprintf(path, sizeof path, "%s/config.json", dir);
    const void *chunks[2] = {json, "\n"};
    size_t lens[2] = {strlen(json), 1};
    return qkv_atomic_write(path, chunks, lens, 2, err);
}

qkv_status param_dir_load_int8(const char *dir, const qkv_param_info *tensors, int n,
                               float *params, int8_matrix *q, qkv_error *err)
{
    char path[4096];
    qkv_tensor_file f = {0};
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    qkv_status st = qkv_tensor_file_load(&f, path, err);
    if (!st) st = param_copy_int8(tensors, n, params, q, &f, path, err);
    qkv_tensor_file_free(&f);
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
