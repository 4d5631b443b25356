/* A language model is a directory:
 *   config.json        the qkv_lm_config, as JSON ("format": "qkv-lm")
 *   model.safetensors  every parameter under its table name, float32
 *   vocab.txt          one token per line (written by the caller)
 * and a training checkpoint (checkpoint.safetensors) adds Adam's moments and where training
 * stands, so that it resumes exactly. */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cJSON.h>

#include "models/language_model_internal.h"

#define FORMAT_NAME "qkv-lm"
#define FORMAT_VERSION 1

qkv_status qkv_lm_config_to_json(const qkv_lm_config *c, char **json, qkv_error *err)
{
    cJSON *o = cJSON_CreateObject();
    if (!o) return qkv_fail(err, QKV_ERR_NOMEM, "out of memory");
    cJSON_AddStringToObject(o, "format", FORMAT_NAME);
    cJSON_AddNumberToObject(o, "version", FORMAT_VERSION);
    cJSON_AddNumberToObject(o, "vocab", c->vocab);
    cJSON_AddNumberToObject(o, "d_model", c->d_model);
    cJSON_AddNumberToObject(o, "heads", c->heads);
    cJSON_AddNumberToObject(o, "ffn", c->ffn);
    cJSON_AddNumberToObject(o, "layers", c->layers);
    cJSON_AddNumberToObject(o, "max_len", c->max_len);
    cJSON_AddNumberToObject(o, "dropout", c->dropout);
    cJSON_AddBoolToObject(o, "bias", c->bias);
    cJSON_AddBoolToObject(o, "pre_norm", c->pre_norm);
    cJSON_AddBoolToObject(o, "final_norm", c->final_norm);
    cJSON_AddStringToObject(o, "act", c->act == QKV_ACT_GELU ? "gelu" : "relu");
    cJSON_AddBoolToObject(o, "tie", c->tie);
    cJSON_AddBoolToObject(o, "learned_pos", c->learned_pos);
    cJSON_AddStringToObject(o, "attention",
                            c->attention == QKV_ATTENTION_LINEAR ? "linear" : "softmax");
    cJSON_AddNumberToObject(o, "ln_eps", c->ln_eps);
    *json = cJSON_Print(o);
    cJSON_Delete(o);
    return *json ? QKV_OK : qkv_fail(err, QKV_ERR_NOMEM, "out of memory");
}

/* An integer (or boolean, as 0/1) member; flag = 1 requires 0 or 1. */
static qkv_status get_int(const cJSON *o, const char *key, int *v, int flag, const char *file,
                          qkv_error *err)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    if (cJSON_IsBool(x)) return *v = cJSON_IsTrue(x), QKV_OK;
    if (!cJSON_IsNumber(x) || x->valuedouble != floor(x->valuedouble) ||
        fabs(x->valuedouble) > 1e9 || (flag && x->valuedouble != 0 && x->valuedouble != 1))
        return qkv_fail(err, QKV_ERR_FORMAT, "%s: \"%s\" must be %s", file, key,
                        flag ? "true or false" : "an integer");
    *v = (int)x->valuedouble;
    return QKV_OK;
}

static qkv_status get_float(const cJSON *o, const char *key, float *v, const char *file,
                            qkv_error *err)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(x) || !(fabs(x->valuedouble) <= FLT_MAX))
        return qkv_fail(err, QKV_ERR_FORMAT, "%s: \"%s\" must be a number", file, key);
    *v = (float)x->valuedouble;
    return QKV_OK;
}

/* A string member that must be a or b: *v = 0 or 1. */
static qkv_status get_choice(const cJSON *o, const char *key, const char *a, const char *b,
                             int *v, const char *file, qkv_error *err)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    if (cJSON_IsString(x) && !strcmp(x->valuestring, a)) return *v = 0, QKV_OK;
    if (cJSON_IsString(x) && !strcmp(x->valuestring, b)) return *v = 1, QKV_OK;
    return qkv_fail(err, QKV_ERR_FORMAT, "%s: \"%s\" must be \"%s\" or \"%s\"", file, key, a, b);
}

qkv_status qkv_lm_config_from_json(qkv_lm_config *c, const char *json, const char *file,
                                   qkv_error *err)
{
    *c = qkv_lm_default_config();
    cJSON *o = cJSON_Parse(json);
    if (!o || !cJSON_IsObject(o)) {
        cJSON_Delete(o);
        return qkv_fail(err, QKV_ERR_FORMAT, "%s: not a JSON object", file);
    }
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(o, "format");
    qkv_status st = QKV_OK;
    int version = 0, act = 0, attention = 0;
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, FORMAT_NAME))
        st = qkv_fail(err, QKV_ERR_FORMAT, "%s: \"format\" must be \"%s\" (a language model)",
                      file, FORMAT_NAME);
    if (!st) st = get_int(o, "version", &version, 0, file, err);
    if (!st && version != FORMAT_VERSION)
        st = qkv_fail(err, QKV_ERR_FORMAT, "%s: version %d is not supported (this qkv reads "
                      "version %d)", file, version, FORMAT_VERSION);
    if (!st) st = get_int(o, "vocab", &c->vocab, 0, file, err);
    if (!st) st = get_int(o, "d_model", &c->d_model, 0, file, err);
    if (!st) st = get_int(o, "heads", &c->heads, 0, file, err);
    if (!st) st = get_int(o, "ffn", &c->ffn, 0, file, err);
    if (!st) st = get_int(o, "layers", &c->layers, 0, file, err);
    if (!st) st = get_int(o, "max_len", &c->max_len, 0, file, err);
    if (!st) st = get_float(o, "dropout", &c->dropout, file, err);
    if (!st) st = get_int(o, "bias", &c->bias, 1, file, err);
    if (!st) st = get_int(o, "pre_norm", &c->pre_norm, 1, file, err);
    if (!st) st = get_int(o, "final_norm", &c->final_norm, 1, file, err);
    if (!st) st = get_choice(o, "act", "relu", "gelu", &act, file, err);
    if (!st) st = get_int(o, "tie", &c->tie, 1, file, err);
    if (!st) st = get_int(o, "learned_pos", &c->learned_pos, 1, file, err);
    if (!st) st = get_choice(o, "attention", "softmax", "linear", &attention, file, err);
    if (!st) st = get_float(o, "ln_eps", &c->ln_eps, file, err);
    cJSON_Delete(o);
    c->act = act ? QKV_ACT_GELU : QKV_ACT_RELU;
    c->attention = attention ? QKV_ATTENTION_LINEAR : QKV_ATTENTION_SOFTMAX;
    if (!st && (st = qkv_lm_config_check(c, err)) && err) {
        char why[sizeof err->msg]; /* err->msg cannot be both source and target */
        memcpy(why, err->msg, sizeof why);
        qkv_fail(err, st, "%s: %s", file, why);
    }
    return st;
}

/* ---- parameters as safetensors ---------------------------------------------------------- */

/* The parameters (from base: the parameters, or staged copies) as tensor references, with
 * room for extra more. */
static qkv_tensor_ref *param_refs(const qkv_lm *m, const float *base, int extra)
{
    qkv_tensor_ref *refs = calloc((size_t)m->n_tensors + extra, sizeof *refs);
    if (!refs) return NULL;
    for (int i = 0; i < m->n_tensors; i++) {
        const qkv_param_info *t = &m->tensors[i];
        refs[i] = (qkv_tensor_ref){t->name, QKV_F32, t->ndim, {t->shape[0], t->shape[1]},
                                   base + t->offset};
    }
    return refs;
}

/* Copies every table tensor of f into base: present, float32, the table's shape, finite.
 * Any other tensor is an error unless its name starts with allowed_prefix. */
static qkv_status copy_params(const qkv_lm *m, float *base, const qkv_tensor_file *f,
                              const char *path, const char *allowed_prefix, qkv_error *err)
{
    for (int i = 0; i < m->n_tensors; i++) {
        const qkv_param_info *t = &m->tensors[i];
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
        for (int i = 0; i < m->n_tensors && !known; i++) known = !strcmp(name, m->tensors[i].name);
        if (!known)
            return qkv_fail(err, QKV_ERR_FORMAT, "%s: unexpected tensor \"%s\" (not part of "
                            "this configuration)", path, name);
    }
    return QKV_OK;
}

static qkv_status read_text(const char *path, char **text, qkv_error *err)
{
    FILE *fp = fopen(path, "rb");
    if (!fp) return qkv_fail(err, QKV_ERR_IO, "%s: %s", path, strerror(errno));
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4097 > cap) {
            cap = (len + 4097) * 2;
            char *nb = cap <= (1u << 20) ? realloc(buf, cap) : NULL;
            if (!nb) {
                free(buf), fclose(fp);
                return qkv_fail(err, QKV_ERR_FORMAT, "%s: too large for a configuration", path);
            }
            buf = nb;
        }
        size_t r = fread(buf + len, 1, 4096, fp);
        len += r;
        if (r < 4096) break;
    }
    int bad = ferror(fp);
    fclose(fp);
    if (bad) return free(buf), qkv_fail(err, QKV_ERR_IO, "%s: read error", path);
    buf[len] = '\0';
    *text = buf;
    return QKV_OK;
}

qkv_status qkv_lm_save(const qkv_lm *m, const char *dir, qkv_error *err)
{
    char path[4096];
    if (mkdir(dir, 0777) && errno != EEXIST)
        return qkv_fail(err, QKV_ERR_IO, "%s: cannot create the directory: %s", dir,
                        strerror(errno));
    char *json = NULL;
    qkv_status st = qkv_lm_config_to_json(&m->cfg, &json, err);
    if (st) return st;
    snprintf(path, sizeof path, "%s/config.json", dir);
    const void *chunks[2] = {json, "\n"};
    size_t lens[2] = {strlen(json), 1};
    st = qkv_atomic_write(path, chunks, lens, 2, err);
    free(json);
    if (st) return st;
    qkv_tensor_ref *refs = param_refs(m, m->params, 0);
    if (!refs) return qkv_fail(err, QKV_ERR_NOMEM, "out of memory");
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    const char *meta[2] = {"format", FORMAT_NAME};
    st = qkv_tensor_file_save(path, refs, m->n_tensors, meta, 1, err);
    free(refs);
    return st;
}

qkv_status qkv_lm_load(qkv_lm **out, const char *dir, qkv_error *err)
{
    char path[4096];
    char *json = NULL;
    *out = NULL;
    snprintf(path, sizeof path, "%s/config.json", dir);
    qkv_status st = read_text(path, &json, err);
    qkv_lm_config cfg;
    if (!st) st = qkv_lm_config_from_json(&cfg, json, path, err);
    free(json);
    if (st) return st;
    qkv_lm *m = NULL;
    if ((st = qkv_lm_create(&m, &cfg, 0, err))) return st;
    qkv_tensor_file f = {0};
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    st = qkv_tensor_file_load(&f, path, err);
    if (!st) st = copy_params(m, m->params, &f, path, NULL, err);
    qkv_tensor_file_free(&f);
    if (st) return qkv_lm_free(m), st;
    *out = m;
    return QKV_OK;
}

/* ---- training checkpoints -------------------------------------------------------------- */

qkv_status lm_checkpoint_save(const char *path, const qkv_lm *m, const qkv_adam *opt,
                              const lm_train_position *pos, qkv_error *err)
{
    qkv_tensor_ref *refs = param_refs(m, m->params, 2);
    if (!refs) return qkv_fail(err, QKV_ERR_NOMEM, "out of memory");
    refs[m->n_tensors] = (qkv_tensor_ref){"adam.m", QKV_F32, 1, {(int64_t)opt->n}, opt->m};
    refs[m->n_tensors + 1] = (qkv_tensor_ref){"adam.v", QKV_F32, 1, {(int64_t)opt->n}, opt->v};
    char vals[6][32];
    snprintf(vals[0], 32, "%lld", (long long)opt->step);
    snprintf(vals[1], 32, "%llu", (unsigned long long)pos->seed);
    snprintf(vals[2], 32, "%.17g", pos->elapsed_s);
    snprintf(vals[3], 32, "%.17g", pos->loss_sum);
    snprintf(vals[4], 32, "%lld", (long long)pos->loss_tokens);
    snprintf(vals[5], 32, "%lld", (long long)pos->train_tokens);
    const char *meta[] = {"format", FORMAT_NAME "-checkpoint", "step", vals[0], "seed", vals[1],
                          "elapsed_s", vals[2], "loss_sum", vals[3], "loss_tokens", vals[4],
                          "train_tokens", vals[5]};
    qkv_status st = qkv_tensor_file_save(path, refs, m->n_tensors + 2, meta, 7, err);
    free(refs);
    return st;
}

/* Metadata key of f as a number: an integer (integer = 1, non-negative) or a finite double. */
static qkv_status meta_number(const qkv_tensor_file *f, const char *key, int integer, double *v,
                              unsigned long long *u, const char *path, qkv_error *err)
{
    const char *s = qkv_tensor_file_meta(f, key);
    char *end = NULL;
    errno = 0;
    if (s && integer) *u = strtoull(s, &end, 10);
    else if (s) *v = strtod(s, &end);
    if (!s || !*s || *end || errno || (integer && *s == '-') || (!integer && !isfinite(*v)))
        return qkv_fail(err, QKV_ERR_FORMAT, "%s: metadata \"%s\" missing or not a%s number",
                        path, key, integer ? " non-negative integer" : " finite");
    return QKV_OK;
}

qkv_status lm_checkpoint_load(const char *path, qkv_lm *m, qkv_adam *opt,
                              lm_train_position *pos, qkv_error *err)
{
    qkv_tensor_file f = {0};
    qkv_status st = qkv_tensor_file_load(&f, path, err);
    if (st) return st;
    const char *fmt = qkv_tensor_file_meta(&f, "format");
    if (!fmt || strcmp(fmt, FORMAT_NAME "-checkpoint"))
        st = qkv_fail(err, QKV_ERR_FORMAT, "%s: not a language-model checkpoint (format \"%s\")",
                      path, fmt ? fmt : "");
    float *staged = st ? NULL : malloc(m->n_params * sizeof *staged); /* commit only if valid */
    if (!st && !staged) st = qkv_fail(err, QKV_ERR_NOMEM, "out of memory");
    if (!st) st = copy_params(m, staged, &f, path, "adam.", err);
    const qkv_tensor *mt = qkv_tensor_file_get(&f, "adam.m"), *vt = qkv_tensor_file_get(&f, "adam.v");
    if (!st && (!mt || !vt || mt->dtype != QKV_F32 || vt->dtype != QKV_F32 ||
                mt->numel != (int64_t)opt->n || vt->numel != (int64_t)opt->n))
        st = qkv_fail(err, QKV_ERR_FORMAT, "%s: Adam moments \"adam.m\"/\"adam.v\" missing or "
                      "not %zu floats", path, opt->n);
    unsigned long long step = 0, seed = 0, tokens = 0, train_tokens = 0;
    double elapsed = 0.0, loss = 0.0;
    if (!st) st = meta_number(&f, "step", 1, NULL, &step, path, err);
    if (!st) st = meta_number(&f, "seed", 1, NULL, &seed, path, err);
    if (!st) st = meta_number(&f, "loss_tokens", 1, NULL, &tokens, path, err);
    if (!st) st = meta_number(&f, "train_tokens", 1, NULL, &train_tokens, path, err);
    if (!st) st = meta_number(&f, "elapsed_s", 0, &elapsed, NULL, path, err);
    if (!st) st = meta_number(&f, "loss_sum", 0, &loss, NULL, path, err);
    if (!st && (step > INT64_MAX || tokens > INT64_MAX || train_tokens > INT64_MAX))
        st = qkv_fail(err, QKV_ERR_FORMAT, "%s: training position out of range", path);
    if (!st) {
        memcpy(m->params, staged, m->n_params * sizeof *staged);
        memcpy(opt->m, mt->data, opt->n * sizeof(float));
        memcpy(opt->v, vt->data, opt->n * sizeof(float));
        opt->step = (int64_t)step;
        *pos = (lm_train_position){seed, elapsed, loss, (int64_t)tokens, (int64_t)train_tokens};
    }
    free(staged);
    qkv_tensor_file_free(&f);
    return st;
}
