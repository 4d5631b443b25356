/* SPDX-License-Identifier: MIT */
/* Model directories and training checkpoints for every kind of model; see model_dir.h. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cJSON.h>

#include "core/json_fields.h"
#include "io/model_dir.h"
#include "io/param_file.h"

#define FORMAT_VERSION 1

/* A CHOICE member is read and written through an int: the enums it holds have the size of
 * an int and only non-negative values, so their type is int's unsigned counterpart. */
static int *field_int(void *cfg, const config_field *f) { return (int *)((char *)cfg + f->offset); }

static void field_write(cJSON *o, const config_field *f, const void *cfg)
{
    const void *at = (const char *)cfg + f->offset;
    int v = f->type == FIELD_FLOAT ? 0 : *(const int *)at;
    switch (f->type) {
    case FIELD_INT: cJSON_AddNumberToObject(o, f->key, v); break;
    case FIELD_FLOAT: cJSON_AddNumberToObject(o, f->key, *(const float *)at); break;
    case FIELD_FLAG: cJSON_AddBoolToObject(o, f->key, v); break;
    case FIELD_CHOICE:
        /* a value outside the enum was written as its first name before tables, and still is */
        cJSON_AddStringToObject(o, f->key, qkv_enum_name(f->names, v) ? qkv_enum_name(f->names, v)
                                           : qkv_enum_name(f->names, 0));
        break;
    }
}

static qkv_status field_read(const cJSON *o, const config_field *f, void *cfg, const char *file,
                             qkv_error *err)
{
    if (f->optional && !cJSON_GetObjectItemCaseSensitive(o, f->key)) return QKV_OK;
    switch (f->type) {
    case FIELD_INT: return json_get_int(o, f->key, field_int(cfg, f), file, err);
    case FIELD_FLOAT:
        return json_get_float(o, f->key, (float *)((char *)cfg + f->offset), file, err);
    case FIELD_FLAG: return json_get_flag(o, f->key, field_int(cfg, f), file, err);
    case FIELD_CHOICE:
        return json_get_choice(o, f->key, f->names, field_int(cfg, f), file, err);
    }
    return QKV_OK;
}

/* The configuration's JSON; an int8 model file's says so ("weights": "int8", after the
 * configuration: a qkv that does not know the key reads the configuration and then refuses
 * the I8 tensors, naming the first). */
static qkv_status config_json(const model_kind *k, const void *cfg, int int8, char **json,
                              qkv_error *err)
{
    cJSON *o = cJSON_CreateObject();
    if (!o) return qkv_fail(err, QKV_ERR_NOMEM, "out of memory");
    cJSON_AddStringToObject(o, "format", k->format);
    cJSON_AddNumberToObject(o, "version", FORMAT_VERSION);
    for (int i = 0; i < k->n_fields; i++) field_write(o, &k->fields[i], cfg);
    if (int8) cJSON_AddStringToObject(o, "weights", qkv_precision_name(QKV_PRECISION_INT8));
    *json = cJSON_Print(o);
    cJSON_Delete(o);
    return *json ? QKV_OK : qkv_fail(err, QKV_ERR_NOMEM, "out of memory");
}

qkv_status model_config_to_json(const model_kind *k, const void *cfg, char **json,
                                qkv_error *err)
{
    return config_json(k, cfg, 0, json, err);
}

/* config.json's "weights": absent or "fp32" (float32), or "int8" (an int8 model file). */
static qkv_status config_weights(const char *json, const char *file, qkv_precision *weights,
                                 qkv_error *err)
{
    *weights = QKV_PRECISION_FP32;
    cJSON *o = cJSON_Parse(json);
    int v = QKV_PRECISION_FP32;
    qkv_status st = QKV_OK;
    if (o && cJSON_GetObjectItemCaseSensitive(o, "weights"))
        st = json_get_choice(o, "weights", QKV_ENUM_PRECISION, &v, file, err);
    cJSON_Delete(o);
    if (!st && v == QKV_PRECISION_BF16)
        st = qkv_fail(err, QKV_ERR_FORMAT, "%s: \"weights\" is \"bf16\": a model file holds "
                      "fp32 or int8 weights", file);
    if (!st) *weights = (qkv_precision)v;
    return st;
}

qkv_status model_config_from_json(const model_kind *k, void *cfg, const char *json,
                                  const char *file, qkv_error *err)
{
    k->defaults(cfg);
    cJSON *o = NULL;
    qkv_status parsed = qkv_json_parse(&o, json, strlen(json), file, err);
    if (parsed) return parsed;
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        return qkv_fail(err, QKV_ERR_FORMAT, "%s: not a JSON object", file);
    }
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(o, "format");
    qkv_status st = QKV_OK;
    int version = 0;
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, k->format))
        st = qkv_fail(err, QKV_ERR_FORMAT, "%s: \"format\" must be \"%s\"%s", file, k->format,
                      k->format_note);
    if (!st) st = json_get_int(o, "version", &version, file, err);
    if (!st && version != FORMAT_VERSION)
        st = qkv_fail(err, QKV_ERR_FORMAT, "%s: version %d is not supported (this qkv reads "
                      "version %d)", file, version, FORMAT_VERSION);
    for (int i = 0; !st && i < k->n_fields; i++) st = field_read(o, &k->fields[i], cfg, file, err);
    cJSON_Delete(o);
    if (!st && (st = k->check(cfg, err)) && err) {
        char why[sizeof err->msg]; /* err->msg cannot be both source and target of vsnprintf */
        memcpy(why, err->msg, sizeof why);
        qkv_fail(err, st, "%s: %s", file, why);
    }
    return st;
}

qkv_status model_dir_save(const model_kind *k, const void *cfg, param_set p, const char *dir,
                          qkv_error *err)
{
    char *json = NULL;
    qkv_status st = model_config_to_json(k, cfg, &json, err);
    if (st) return st;
    st = param_dir_save(dir, json, p.tensors, p.n_tensors, p.params, k->format, err);
    free(json);
    return st;
}

qkv_status model_dir_config(const model_kind *k, void *cfg, const char *dir,
                            qkv_precision *weights, qkv_error *err)
{
    char path[4096];
    char *json = NULL;
    size_t len = 0;
    snprintf(path, sizeof path, "%s/config.json", dir);
    qkv_status st = qkv_read_regular_file(path, QKV_MAX_CONFIG_BYTES, &json, &len, err);
    if (!st && strlen(json) != len)
        st = qkv_fail(err, QKV_ERR_FORMAT, "%s: contains a NUL byte", path);
    if (!st) st = model_config_from_json(k, cfg, json, path, err);
    if (!st) st = config_weights(json, path, weights, err);
    free(json);
    return st;
}

qkv_status model_dir_fits(const char *dir, double n_params, qkv_precision weights,
                          qkv_error *err)
{
    char model[4096];
    snprintf(model, sizeof model, "%s/model.safetensors", dir);
    struct stat sb;
    const double size = weights == QKV_PRECISION_INT8 ? 1 : 4; /* at least a byte each */
    if (stat(model, &sb) || !S_ISREG(sb.st_mode) || (double)sb.st_size >= size * n_params)
        return QKV_OK;
    /* named after the model file first, as every other refusal of it is */
    return qkv_fail(err, QKV_ERR_FORMAT, "%s holds %lld bytes, but %s/config.json describes a "
                    "model of %.0f parameters (%.0f bytes of %s)", model,
                    (long long)sb.st_size, dir, n_params, size * n_params,
                    size == 1 ? "int8 at least" : "float32");
}

qkv_status model_dir_params(param_set p, const char *dir, qkv_error *err)
{
    /* training writes model.safetensors only once it has trained one: a directory with a
     * checkpoint and no model is a run that has not finished */
    char model[4096], ckpt[4096];
    snprintf(model, sizeof model, "%s/model.safetensors", dir);
    snprintf(ckpt, sizeof ckpt, "%s/checkpoint.safetensors", dir);
    if (access(model, F_OK) && errno == ENOENT && !access(ckpt, F_OK))
        return qkv_fail(err, QKV_ERR_IO, "%s holds no trained model yet (no model.safetensors, "
                        "only a training checkpoint): its run stopped before the end; continue "
                        "it with --resume", dir);
    return param_dir_load(dir, p.tensors, p.n_tensors, p.params, err);
}

/* ---- training checkpoints -------------------------------------------------------------- */

static void meta_text(char out[32], const meta_field *m, const void *pos)
{
    const void *at = (const char *)pos + m->offset;
    switch (m->type) {
    case META_INT: snprintf(out, 32, "%d", *(const int *)at); break;
    case META_I64: snprintf(out, 32, "%lld", (long long)*(const int64_t *)at); break;
    case META_U64: snprintf(out, 32, "%llu", (unsigned long long)*(const uint64_t *)at); break;
    case META_F64: snprintf(out, 32, "%.17g", *(const double *)at); break;
    }
}

qkv_status model_checkpoint_save(const model_kind *k, const char *path, param_set p,
                                 const qkv_adam *opt, const void *pos, qkv_error *err)
{
    qkv_tensor_ref *refs = param_refs(p.tensors, p.n_tensors, p.params, 2);
    if (!refs) return qkv_fail(err, QKV_ERR_NOMEM, "out of memory");
    adam_refs(refs + p.n_tensors, opt);
    char vals[1 + MAX_POSITION_FIELDS][32];
    const char *meta[2 * (2 + MAX_POSITION_FIELDS)] = {"format", k->checkpoint_format, "step",
                                                       vals[0]};
    snprintf(vals[0], 32, "%lld", (long long)opt->step);
    for (int i = 0; i < k->n_position; i++) {
        meta_text(vals[1 + i], &k->position[i], pos);
        meta[4 + 2 * i] = k->position[i].key, meta[5 + 2 * i] = vals[1 + i];
    }
    qkv_status st = qkv_tensor_file_save(path, refs, p.n_tensors + 2, meta, 2 + k->n_position,
                                         err);
    free(refs);
    return st;
}

/* Metadata key of f as a number: decimal digits (integer = 1; strtoull alone would take
 * " -5" as 2^64 - 5) or a finite double >= 0 (a time, a sum of losses). */
static qkv_status meta_number(const qkv_tensor_file *f, const char *key, int integer, double *v,
                              unsigned long long *u, const char *path, qkv_error *err)
{
    const char *s = qkv_tensor_file_meta(f, key);
    char *end = NULL;
    errno = 0;
    if (s && integer && *s >= '0' && *s <= '9') *u = strtoull(s, &end, 10);
    else if (s && !integer) *v = strtod(s, &end);
    if (!s || !*s || !end || *end || errno || (!integer && !(isfinite(*v) && *v >= 0.0)))
        return qkv_fail(err, QKV_ERR_FORMAT, "%s: metadata \"%s\" missing or not a%s number",
                        path, key, integer ? " non-negative integer" : " finite non-negative");
    return QKV_OK;
}

static void meta_store(void *pos, const meta_field *m, unsigned long long u, double d)
{
    void *at = (char *)pos + m->offset;
    switch (m->type) {
    case META_INT: *(int *)at = (int)u; break;
    case META_I64: *(int64_t *)at = (int64_t)u; break;
    case META_U64: *(uint64_t *)at = u; break;
    case META_F64: *(double *)at = d; break;
    }
}

static qkv_status position_read(const model_kind *k, const qkv_tensor_file *f, const char *path,
                                int64_t *step, void *pos, qkv_error *err)
{
    unsigned long long s = 0, u[MAX_POSITION_FIELDS] = {0};
    double d[MAX_POSITION_FIELDS] = {0};
    qkv_status st = meta_number(f, "step", 1, NULL, &s, path, err);
    int too_large = s > INT64_MAX;
    for (int doubles = 0; doubles < 2; doubles++)
        for (int i = 0; !st && i < k->n_position; i++) {
            const meta_field *m = &k->position[i];
            if ((m->type == META_F64) != doubles) continue;
            st = meta_number(f, m->key, !doubles, &d[i], &u[i], path, err);
            too_large |= (m->type == META_I64 && u[i] > INT64_MAX) ||
                         (m->type == META_INT && u[i] > INT_MAX);
        }
    if (!st && too_large)
        st = qkv_fail(err, QKV_ERR_FORMAT, "%s: training position out of range", path);
    if (st) return st;
    *step = (int64_t)s;
    for (int i = 0; i < k->n_position; i++) meta_store(pos, &k->position[i], u[i], d[i]);
    return QKV_OK;
}

qkv_status model_checkpoint_load(const model_kind *k, const char *path, param_set p,
                                 qkv_adam *opt, void *pos, qkv_error *err)
{
    qkv_tensor_file f = {0};
    qkv_status st = qkv_tensor_file_load(&f, path, err);
    if (st) return st;
    const char *fmt = qkv_tensor_file_meta(&f, "format");
    if (k->checkpoint_noun && (!fmt || strcmp(fmt, k->checkpoint_format)))
        st = qkv_fail(err, QKV_ERR_FORMAT, "%s: not a %s checkpoint (format \"%s\")", path,
                      k->checkpoint_noun, fmt ? fmt : "");
    float *staged = st ? NULL : malloc(p.n_params * sizeof *staged); /* commit only if valid */
    if (!st && !staged) st = qkv_fail(err, QKV_ERR_NOMEM, "out of memory");
    if (!st) st = param_copy(p.tensors, p.n_tensors, staged, &f, path, "adam.", err);
    const qkv_tensor *mt = NULL, *vt = NULL;
    if (!st) st = adam_find(&f, opt, path, &mt, &vt, err);
    int64_t step = 0;
    if (!st)
        st = (k->read_position ? k->read_position : position_read)(k, &f, path, &step, pos, err);
    if (!st) {
        memcpy(p.params, staged, p.n_params * sizeof *staged);
        memcpy(opt->m, mt->data, opt->n * sizeof(float));
        memcpy(opt->v, vt->data, opt->n * sizeof(float));
        opt->step = step;
    }
    free(staged);
    qkv_tensor_file_free(&f);
    return st;
}

/* ---- whole models of a kind ---------------------------------------------------------------- */

/* The configurations of every kind fit here (checked when one is loaded). */
enum { MODEL_CFG_MAX = 512 };

/* The host's parameters as they are now (a model on a device: downloaded first if training
 * changed them there; core_host_current reports a failed download). */
static param_set params_of(const model_kind *k, const void *model)
{
    const model_core *c = k->core(model);
    return (param_set){c->tensors, c->n_tensors, (float *)core_host_params(c), c->n_params};
}

/* The host's parameters, about to be written: on a device they go up before the next pass,
 * and the typed copies are made again. */
static param_set params_to_write(const model_kind *k, void *model)
{
    model_core *c = k->core(model);
    return (param_set){c->tensors, c->n_tensors, core_params(c), c->n_params};
}

qkv_status model_save(const model_kind *k, const void *model, const char *dir, qkv_error *err)
{
    qkv_status st = core_host_current(k->core(model), err);
    return st ? st : model_dir_save(k, k->config(model), params_of(k, model), dir, err);
}

/* An int8 model file's parameters into the model: its float32 view and its int8 matrices,
 * then int8 where the CPU runs it. */
static qkv_status load_int8(const model_kind *k, void *model, const char *dir, qkv_error *err)
{
    const param_set p = params_to_write(k, model);
    model_core *c = k->core(model);
    int n = 0;
    for (int i = 0; i < p.n_tensors; i++) n += precision_int8_tensor(&p.tensors[i]);
    int8_matrix *q = calloc((size_t)n + 1, sizeof *q);
    if (!q) return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for %d int8 matrices", n);
    qkv_status st = param_dir_load_int8(dir, p.tensors, p.n_tensors, p.params, q, err);
    if (!st) st = precision_adopt_int8(&c->prec, p.tensors, p.n_tensors, q, err);
    for (int i = 0; i < n; i++) int8_matrix_free(&q[i]);
    free(q);
    if (!st && qkv_int8_supported()) st = k->set_precision(model, QKV_PRECISION_INT8, err);
    return st;
}

qkv_status model_load(const model_kind *k, void **model, const char *dir, qkv_error *err)
{
    _Alignas(16) unsigned char cfg[MODEL_CFG_MAX];
    *model = NULL;
    if (k->cfg_size > sizeof cfg)
        return qkv_fail(err, QKV_ERR_ARG, "a %s configuration of %zu bytes: room for %zu",
                        k->format, k->cfg_size, sizeof cfg);
    void *m = NULL;
    qkv_precision weights;
    qkv_status st = model_dir_config(k, cfg, dir, &weights, err);
    if (!st) st = model_dir_fits(dir, k->config_params(cfg), weights, err);
    if (!st) st = k->create(&m, cfg, err);
    if (!st)
        st = weights == QKV_PRECISION_INT8 ? load_int8(k, m, dir, err)
                                           : model_dir_params(params_to_write(k, m), dir, err);
    if (!st) snprintf(k->core(m)->source, sizeof k->core(m)->source, "%s", dir); /* messages */
    if (st && m) k->destroy(m), m = NULL;
    *model = m;
    return st;
}

qkv_status model_save_int8(const model_kind *k, const void *model, const char *dir,
                           qkv_error *err)
{
    const param_set p = params_of(k, model);
    char *json = NULL;
    qkv_status st = config_json(k, k->config(model), 1, &json, err);
    if (st) return st;
    st = param_dir_save_int8(dir, json, p.tensors, p.n_tensors, p.params, k->format, err);
    free(json);
    return st;
}

qkv_status model_save_checkpoint(const model_kind *k, const char *path, const void *model,
                                 const qkv_adam *opt, const void *pos, qkv_error *err)
{
    qkv_status st = core_host_current(k->core(model), err);
    if (!st) st = core_adam_to_host(k->core(model), opt, err); /* the device's moments */
    return st ? st : model_checkpoint_save(k, path, params_of(k, model), opt, pos, err);
}

qkv_status model_load_checkpoint(const model_kind *k, const char *path, void *model,
                                 qkv_adam *opt, void *pos, qkv_error *err)
{
    qkv_status st = model_checkpoint_load(k, path, params_to_write(k, model), opt, pos, err);
    if (!st) core_adam_forget(k->core(model)); /* the optimizer's moments are the file's now */
    return st;
}
