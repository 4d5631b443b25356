/* A model is a directory:
 *   config.json        the qkv_transformer_config, as JSON
 *   model.safetensors  every parameter under its table name, float32
 *   src_vocab.txt, tgt_vocab.txt   one token per line (written by the caller)
 * A training checkpoint (checkpoint.safetensors) additionally holds Adam's moments and the
 * position in the data, so that training resumes exactly where it stopped. */
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cJSON.h>

#include "models/transformer_internal.h"

#define FORMAT_NAME "qkv-transformer"
#define FORMAT_VERSION 1

static const char *act_name(qkv_activation a) { return a == QKV_ACT_GELU ? "gelu" : "relu"; }
static const char *tie_name(qkv_tie t)
{
    return t == QKV_TIE_ALL ? "all" : t == QKV_TIE_OUTPUT ? "output" : "none";
}

static void join(char *out, size_t cap, const char *dir, const char *file)
{
    snprintf(out, cap, "%s/%s", dir, file);
}

qkv_status qkv_config_to_json(const qkv_transformer_config *c, char **json, qkv_error *err)
{
    cJSON *o = cJSON_CreateObject();
    if (!o) return qkv_fail(err, QKV_ERR_NOMEM, "out of memory");
    cJSON_AddStringToObject(o, "format", FORMAT_NAME);
    cJSON_AddNumberToObject(o, "version", FORMAT_VERSION);
    cJSON_AddNumberToObject(o, "src_vocab", c->src_vocab);
    cJSON_AddNumberToObject(o, "tgt_vocab", c->tgt_vocab);
    cJSON_AddNumberToObject(o, "d_model", c->d_model);
    cJSON_AddNumberToObject(o, "heads", c->heads);
    cJSON_AddNumberToObject(o, "ffn", c->ffn);
    cJSON_AddNumberToObject(o, "enc_layers", c->enc_layers);
    cJSON_AddNumberToObject(o, "dec_layers", c->dec_layers);
    cJSON_AddNumberToObject(o, "max_len", c->max_len);
    cJSON_AddNumberToObject(o, "dropout", c->dropout);
    cJSON_AddBoolToObject(o, "bias", c->bias);
    cJSON_AddBoolToObject(o, "pre_norm", c->pre_norm);
    cJSON_AddBoolToObject(o, "final_norm", c->final_norm);
    cJSON_AddStringToObject(o, "act", act_name(c->act));
    cJSON_AddStringToObject(o, "tie", tie_name(c->tie));
    cJSON_AddBoolToObject(o, "learned_pos", c->learned_pos);
    cJSON_AddNumberToObject(o, "ln_eps", c->ln_eps);
    *json = cJSON_Print(o);
    cJSON_Delete(o);
    return *json ? QKV_OK : qkv_fail(err, QKV_ERR_NOMEM, "out of memory");
}

static qkv_status get_int(const cJSON *o, const char *key, int *v, const char *file,
                          qkv_error *err)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    if (cJSON_IsBool(x)) return *v = cJSON_IsTrue(x), QKV_OK;
    if (!cJSON_IsNumber(x) || x->valuedouble != floor(x->valuedouble) ||
        fabs(x->valuedouble) > 1e9)
        return qkv_fail(err, QKV_ERR_FORMAT, "%s: \"%s\" must be an integer", file, key);
    *v = (int)x->valuedouble;
    return QKV_OK;
}

static qkv_status get_flag(const cJSON *o, const char *key, int *v, const char *file,
                           qkv_error *err)
{
    qkv_status st = get_int(o, key, v, file, err);
    if (!st && *v != 0 && *v != 1)
        return qkv_fail(err, QKV_ERR_FORMAT, "%s: \"%s\" must be true or false", file, key);
    return st;
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

static qkv_status get_choice(const cJSON *o, const char *key, const char *const *names, int n,
                             int *v, const char *file, qkv_error *err)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    for (int i = 0; cJSON_IsString(x) && i < n; i++)
        if (!strcmp(x->valuestring, names[i])) return *v = i, QKV_OK;
    return qkv_fail(err, QKV_ERR_FORMAT, "%s: \"%s\" must be one of %s%s%s%s%s", file, key,
                    names[0], n > 1 ? ", " : "", n > 1 ? names[1] : "", n > 2 ? ", " : "",
                    n > 2 ? names[2] : "");
}

qkv_status qkv_config_from_json(qkv_transformer_config *c, const char *json, const char *file,
                                qkv_error *err)
{
    cJSON *o = cJSON_Parse(json);
    if (!o || !cJSON_IsObject(o)) {
        cJSON_Delete(o);
        return qkv_fail(err, QKV_ERR_FORMAT, "%s: not a JSON object", file);
    }
    qkv_status st = QKV_OK;
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(o, "format");
    int version = 0, act = 0, tie = 0;
    *c = qkv_transformer_default_config();
    static const char *const acts[] = {"relu", "gelu"}, *const ties[] = {"none", "output", "all"};
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, FORMAT_NAME))
        st = qkv_fail(err, QKV_ERR_FORMAT, "%s: \"format\" must be \"%s\"", file, FORMAT_NAME);
    if (!st) st = get_int(o, "version", &version, file, err);
    if (!st && version != FORMAT_VERSION)
        st = qkv_fail(err, QKV_ERR_FORMAT, "%s: version %d is not supported (this qkv reads "
                      "version %d)", file, version, FORMAT_VERSION);
    if (!st) st = get_int(o, "src_vocab", &c->src_vocab, file, err);
    if (!st) st = get_int(o, "tgt_vocab", &c->tgt_vocab, file, err);
    if (!st) st = get_int(o, "d_model", &c->d_model, file, err);
    if (!st) st = get_int(o, "heads", &c->heads, file, err);
    if (!st) st = get_int(o, "ffn", &c->ffn, file, err);
    if (!st) st = get_int(o, "enc_layers", &c->enc_layers, file, err);
    if (!st) st = get_int(o, "dec_layers", &c->dec_layers, file, err);
    if (!st) st = get_int(o, "max_len", &c->max_len, file, err);
    if (!st) st = get_float(o, "dropout", &c->dropout, file, err);
    if (!st) st = get_flag(o, "bias", &c->bias, file, err);
    if (!st) st = get_flag(o, "pre_norm", &c->pre_norm, file, err);
    if (!st) st = get_flag(o, "final_norm", &c->final_norm, file, err);
    if (!st) st = get_choice(o, "act", acts, 2, &act, file, err);
    if (!st) st = get_choice(o, "tie", ties, 3, &tie, file, err);
    if (!st) st = get_flag(o, "learned_pos", &c->learned_pos, file, err);
    if (!st) st = get_float(o, "ln_eps", &c->ln_eps, file, err);
    cJSON_Delete(o);
    c->act = (qkv_activation)act, c->tie = (qkv_tie)tie;
    if (!st && (st = qkv_transformer_config_check(c, err)) && err) {
        char why[sizeof err->msg]; /* err->msg cannot be both source and target of vsnprintf */
        memcpy(why, err->msg, sizeof why);
        qkv_fail(err, st, "%s: %s", file, why);
    }
    return st;
}

static qkv_status read_text(const char *path, char **text, qkv_error *err)
{
    FILE *fp = fopen(path, "rb");
    if (!fp) return qkv_fail(err, QKV_ERR_IO, "%s: %s", path, strerror(errno));
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            cap = (len + 4096 + 1) * 2;
            if (cap > (64u << 20)) {
                free(buf), fclose(fp);
                return qkv_fail(err, QKV_ERR_FORMAT, "%s: larger than 64 MiB", path);
            }
            char *nb = realloc(buf, cap);
            if (!nb) return free(buf), fclose(fp), qkv_fail(err, QKV_ERR_NOMEM, "out of memory");
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
    if (strlen(buf) != len)
        return free(buf), qkv_fail(err, QKV_ERR_FORMAT, "%s: contains a NUL byte", path);
    *text = buf;
    return QKV_OK;
}

/* The parameters as tensor references (names and shapes from the table). */
static qkv_tensor_ref *param_refs(const qkv_transformer *m, const float *base, int extra)
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

qkv_status qkv_transformer_save(const qkv_transformer *m, const char *dir, qkv_error *err)
{
    char path[4096];
    if (mkdir(dir, 0777) && errno != EEXIST)
        return qkv_fail(err, QKV_ERR_IO, "%s: cannot create the directory: %s", dir,
                        strerror(errno));
    char *json = NULL;
    qkv_status st = qkv_config_to_json(&m->cfg, &json, err);
    if (st) return st;
    join(path, sizeof path, dir, "config.json");
    const void *chunk[2] = {json, "\n"};
    size_t lens[2] = {strlen(json), 1};
    st = qkv_atomic_write(path, chunk, lens, 2, err);
    free(json);
    if (st) return st;
    qkv_tensor_ref *refs = param_refs(m, m->params, 0);
    if (!refs) return qkv_fail(err, QKV_ERR_NOMEM, "out of memory");
    join(path, sizeof path, dir, "model.safetensors");
    const char *meta[2] = {"format", FORMAT_NAME};
    st = qkv_tensor_file_save(path, refs, m->n_tensors, meta, 1, err);
    free(refs);
    return st;
}

/* Copy every table tensor from f into base: each must be present, float32, of the table's
 * shape; a tensor f holds that the model does not know is an error unless it starts with
 * one of the allowed prefixes. */
static qkv_status copy_params(qkv_transformer *m, float *base, const qkv_tensor_file *f,
                              const char *path, const char *allowed_prefix, qkv_error *err)
{
    for (int i = 0; i < m->n_tensors; i++) {
        const qkv_param_info *t = &m->tensors[i];
        const qkv_tensor *x = qkv_tensor_file_get(f, t->name);
        if (!x) return qkv_fail(err, QKV_ERR_FORMAT, "%s: tensor \"%s\" is missing", path, t->name);
        int64_t want[2] = {t->shape[0], t->shape[1]};
        if (x->dtype != QKV_F32)
            return qkv_fail(err, QKV_ERR_FORMAT, "%s: tensor \"%s\" must be F32", path, t->name);
        if (x->ndim != t->ndim || x->shape[0] != want[0] || (t->ndim == 2 && x->shape[1] != want[1]))
            return qkv_fail(err, QKV_ERR_FORMAT, "%s: tensor \"%s\" has shape [%lld%s%lld], the "
                            "configuration needs [%lld%s%lld]", path, t->name,
                            (long long)x->shape[0], x->ndim > 1 ? ", " : "",
                            x->ndim > 1 ? (long long)x->shape[1] : 0LL, (long long)want[0],
                            t->ndim > 1 ? ", " : "", t->ndim > 1 ? (long long)want[1] : 0LL);
        memcpy(base + t->offset, x->data, t->numel * sizeof(float));
    }
    for (int j = 0; j < f->count; j++) {
        const char *name = f->tensors[j].name;
        int known = allowed_prefix && !strncmp(name, allowed_prefix, strlen(allowed_prefix));
        for (int i = 0; i < m->n_tensors && !known; i++) known = !strcmp(name, m->tensors[i].name);
        if (!known)
            return qkv_fail(err, QKV_ERR_FORMAT, "%s: unexpected tensor \"%s\" (not part of "
                            "this configuration)", path, name);
    }
    for (size_t i = 0; i < m->n_params; i++)
        if (!isfinite(base[i])) {
            for (int k = 0; k < m->n_tensors; k++)
                if (i >= m->tensors[k].offset && i < m->tensors[k].offset + m->tensors[k].numel)
                    return qkv_fail(err, QKV_ERR_NUMERIC, "%s: tensor \"%s\" holds a NaN or Inf "
                                    "at element %zu", path, m->tensors[k].name,
                                    i - m->tensors[k].offset);
        }
    return QKV_OK;
}

qkv_status qkv_transformer_load(qkv_transformer **out, const char *dir, qkv_error *err)
{
    char path[4096];
    char *json = NULL;
    *out = NULL;
    join(path, sizeof path, dir, "config.json");
    qkv_status st = read_text(path, &json, err);
    qkv_transformer_config cfg;
    if (!st) st = qkv_config_from_json(&cfg, json, path, err);
    free(json);
    if (st) return st;
    qkv_transformer *m = NULL;
    if ((st = qkv_transformer_create(&m, &cfg, 0, err))) return st;
    qkv_tensor_file f = {0};
    join(path, sizeof path, dir, "model.safetensors");
    st = qkv_tensor_file_load(&f, path, err);
    if (!st) st = copy_params(m, m->params, &f, path, NULL, err);
    qkv_tensor_file_free(&f);
    if (st) return qkv_transformer_free(m), st;
    *out = m;
    return QKV_OK;
}

/* ---- training checkpoints -------------------------------------------------------------- */

qkv_status qkv_checkpoint_save(const char *path, const qkv_transformer *m, const qkv_adam *opt,
                               const qkv_train_position *pos, qkv_error *err)
{
    qkv_tensor_ref *refs = param_refs(m, m->params, 2);
    if (!refs) return qkv_fail(err, QKV_ERR_NOMEM, "out of memory");
    refs[m->n_tensors] = (qkv_tensor_ref){"adam.m", QKV_F32, 1, {(int64_t)opt->n}, opt->m};
    refs[m->n_tensors + 1] = (qkv_tensor_ref){"adam.v", QKV_F32, 1, {(int64_t)opt->n}, opt->v};
    char vals[6][32];
    snprintf(vals[0], 32, "%lld", (long long)opt->step);
    snprintf(vals[1], 32, "%d", pos->epoch);
    snprintf(vals[2], 32, "%d", pos->batch);
    snprintf(vals[3], 32, "%llu", (unsigned long long)pos->seed);
    snprintf(vals[4], 32, "%.17g", pos->epoch_loss);
    snprintf(vals[5], 32, "%lld", (long long)pos->epoch_tokens);
    const char *meta[] = {"format", FORMAT_NAME "-checkpoint", "step", vals[0], "epoch", vals[1],
                          "batch", vals[2], "seed", vals[3], "epoch_loss", vals[4],
                          "epoch_tokens", vals[5]};
    qkv_status st = qkv_tensor_file_save(path, refs, m->n_tensors + 2, meta, 7, err);
    free(refs);
    return st;
}

static qkv_status meta_i64(const qkv_tensor_file *f, const char *key, long long *v,
                           const char *path, qkv_error *err)
{
    const char *s = qkv_tensor_file_meta(f, key);
    char *end = NULL;
    errno = 0;
    if (s) *v = strtoll(s, &end, 10);
    if (!s || !*s || *end || errno)
        return qkv_fail(err, QKV_ERR_FORMAT, "%s: metadata \"%s\" missing or not an integer",
                        path, key);
    return QKV_OK;
}

qkv_status qkv_checkpoint_load(const char *path, qkv_transformer *m, qkv_adam *opt,
                               qkv_train_position *pos, qkv_error *err)
{
    qkv_tensor_file f = {0};
    qkv_status st = qkv_tensor_file_load(&f, path, err);
    if (st) return st;
    float *staged = malloc(m->n_params * sizeof *staged); /* commit only a fully valid file */
    if (!staged) st = qkv_fail(err, QKV_ERR_NOMEM, "out of memory");
    if (!st) st = copy_params(m, staged, &f, path, "adam.", err);
    const qkv_tensor *mt = qkv_tensor_file_get(&f, "adam.m"), *vt = qkv_tensor_file_get(&f, "adam.v");
    if (!st && (!mt || !vt || mt->dtype != QKV_F32 || vt->dtype != QKV_F32 ||
                mt->numel != (int64_t)opt->n || vt->numel != (int64_t)opt->n))
        st = qkv_fail(err, QKV_ERR_FORMAT, "%s: Adam moments \"adam.m\"/\"adam.v\" missing or "
                      "not %zu floats", path, opt->n);
    long long step = 0, epoch = 0, batch = 0, tokens = 0;
    if (!st) st = meta_i64(&f, "step", &step, path, err);
    if (!st) st = meta_i64(&f, "epoch", &epoch, path, err);
    if (!st) st = meta_i64(&f, "batch", &batch, path, err);
    if (!st) st = meta_i64(&f, "epoch_tokens", &tokens, path, err);
    const char *seed_s = qkv_tensor_file_meta(&f, "seed"), *loss_s = qkv_tensor_file_meta(&f, "epoch_loss");
    char *end_seed = NULL, *end_loss = NULL;
    unsigned long long seed = 0;
    double epoch_loss = 0.0;
    errno = 0;
    if (seed_s && *seed_s >= '0' && *seed_s <= '9') seed = strtoull(seed_s, &end_seed, 10);
    if (loss_s) epoch_loss = strtod(loss_s, &end_loss);
    if (!st && (!end_seed || *end_seed || !end_loss || end_loss == loss_s || *end_loss || errno ||
                !isfinite(epoch_loss) || epoch_loss < 0.0))
        st = qkv_fail(err, QKV_ERR_FORMAT, "%s: metadata \"seed\"/\"epoch_loss\" missing or "
                      "malformed", path);
    if (!st && (step < 0 || epoch < 0 || batch < 0 || tokens < 0 || epoch > INT_MAX ||
                batch > INT_MAX))
        st = qkv_fail(err, QKV_ERR_FORMAT, "%s: training position out of range", path);
    if (!st) {
        memcpy(m->params, staged, m->n_params * sizeof *staged);
        memcpy(opt->m, mt->data, opt->n * sizeof(float));
        memcpy(opt->v, vt->data, opt->n * sizeof(float));
        opt->step = step;
        pos->epoch = (int)epoch, pos->batch = (int)batch;
        pos->seed = seed;
        pos->epoch_loss = epoch_loss, pos->epoch_tokens = tokens;
    }
    free(staged);
    qkv_tensor_file_free(&f);
    return st;
}
