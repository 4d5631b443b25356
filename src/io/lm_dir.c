/* A language model is a directory:
 *   config.json        the qkv_lm_config, as JSON ("format": "qkv-lm")
 *   model.safetensors  every parameter under its table name, float32
 *   vocab.txt          one token per line (written by the caller)
 * and a training checkpoint (checkpoint.safetensors) adds Adam's moments and where training
 * stands, so that it resumes exactly. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>

#include "io/json_fields.h"
#include "io/param_file.h"
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
    static const char *const acts[] = {"relu", "gelu"}, *const attentions[] = {"softmax", "linear"};
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, FORMAT_NAME))
        st = qkv_fail(err, QKV_ERR_FORMAT, "%s: \"format\" must be \"%s\" (a language model)",
                      file, FORMAT_NAME);
    if (!st) st = json_get_int(o, "version", &version, file, err);
    if (!st && version != FORMAT_VERSION)
        st = qkv_fail(err, QKV_ERR_FORMAT, "%s: version %d is not supported (this qkv reads "
                      "version %d)", file, version, FORMAT_VERSION);
    if (!st) st = json_get_int(o, "vocab", &c->vocab, file, err);
    if (!st) st = json_get_int(o, "d_model", &c->d_model, file, err);
    if (!st) st = json_get_int(o, "heads", &c->heads, file, err);
    if (!st) st = json_get_int(o, "ffn", &c->ffn, file, err);
    if (!st) st = json_get_int(o, "layers", &c->layers, file, err);
    if (!st) st = json_get_int(o, "max_len", &c->max_len, file, err);
    if (!st) st = json_get_float(o, "dropout", &c->dropout, file, err);
    if (!st) st = json_get_flag(o, "bias", &c->bias, file, err);
    if (!st) st = json_get_flag(o, "pre_norm", &c->pre_norm, file, err);
    if (!st) st = json_get_flag(o, "final_norm", &c->final_norm, file, err);
    if (!st) st = json_get_choice(o, "act", acts, 2, &act, file, err);
    if (!st) st = json_get_flag(o, "tie", &c->tie, file, err);
    if (!st) st = json_get_flag(o, "learned_pos", &c->learned_pos, file, err);
    if (!st) st = json_get_choice(o, "attention", attentions, 2, &attention, file, err);
    if (!st) st = json_get_float(o, "ln_eps", &c->ln_eps, file, err);
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

qkv_status qkv_lm_save(const qkv_lm *m, const char *dir, qkv_error *err)
{
    char *json = NULL;
    qkv_status st = qkv_lm_config_to_json(&m->cfg, &json, err);
    if (st) return st;
    st = param_dir_save(dir, json, m->core.tensors, m->core.n_tensors, m->core.params, FORMAT_NAME, err);
    free(json);
    return st;
}

qkv_status qkv_lm_load(qkv_lm **out, const char *dir, qkv_error *err)
{
    char path[4096];
    char *json = NULL;
    *out = NULL;
    snprintf(path, sizeof path, "%s/config.json", dir);
    qkv_status st = json_read_text(path, &json, err);
    qkv_lm_config cfg;
    if (!st) st = qkv_lm_config_from_json(&cfg, json, path, err);
    free(json);
    if (st) return st;
    qkv_lm *m = NULL;
    if ((st = qkv_lm_create(&m, &cfg, 0, err))) return st;
    st = param_dir_load(dir, m->core.tensors, m->core.n_tensors, m->core.params, err);
    if (st) return qkv_lm_free(m), st;
    *out = m;
    return QKV_OK;
}

/* ---- training checkpoints -------------------------------------------------------------- */

qkv_status lm_checkpoint_save(const char *path, const qkv_lm *m, const qkv_adam *opt,
                              const lm_train_position *pos, qkv_error *err)
{
    qkv_tensor_ref *refs = param_refs(m->core.tensors, m->core.n_tensors, m->core.params, 2);
    if (!refs) return qkv_fail(err, QKV_ERR_NOMEM, "out of memory");
    adam_refs(refs + m->core.n_tensors, opt);
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
    qkv_status st = qkv_tensor_file_save(path, refs, m->core.n_tensors + 2, meta, 7, err);
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
    float *staged = st ? NULL : malloc(m->core.n_params * sizeof *staged); /* commit only if valid */
    if (!st && !staged) st = qkv_fail(err, QKV_ERR_NOMEM, "out of memory");
    if (!st) st = param_copy(m->core.tensors, m->core.n_tensors, staged, &f, path, "adam.", err);
    const qkv_tensor *mt = NULL, *vt = NULL;
    if (!st) st = adam_find(&f, opt, path, &mt, &vt, err);
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
        memcpy(m->core.params, staged, m->core.n_params * sizeof *staged);
        precision_touch(&m->core.prec); /* the bf16 copy, if any, is of the old parameters */
        memcpy(opt->m, mt->data, opt->n * sizeof(float));
        memcpy(opt->v, vt->data, opt->n * sizeof(float));
        opt->step = (int64_t)step;
        *pos = (lm_train_position){seed, elapsed, loss, (int64_t)tokens, (int64_t)train_tokens};
    }
    free(staged);
    qkv_tensor_file_free(&f);
    return st;
}
