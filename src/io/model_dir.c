/* A model is a directory:
 *   config.json        the qkv_transformer_config, as JSON
 *   model.safetensors  every parameter under its table name, float32
 *   src_vocab.txt, tgt_vocab.txt   one token per line (written by the caller)
 * A training checkpoint (checkpoint.safetensors) additionally holds Adam's moments and the
 * position in the data, so that training resumes exactly where it stopped. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>

#include "io/json_fields.h"
#include "io/param_file.h"
#include "models/transformer_internal.h"

#define FORMAT_NAME "qkv-transformer"
#define FORMAT_VERSION 1

static const char *act_name(qkv_activation a) { return a == QKV_ACT_GELU ? "gelu" : "relu"; }
static const char *tie_name(qkv_tie t)
{
    return t == QKV_TIE_ALL ? "all" : t == QKV_TIE_OUTPUT ? "output" : "none";
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
    if (!st) st = json_get_int(o, "version", &version, file, err);
    if (!st && version != FORMAT_VERSION)
        st = qkv_fail(err, QKV_ERR_FORMAT, "%s: version %d is not supported (this qkv reads "
                      "version %d)", file, version, FORMAT_VERSION);
    if (!st) st = json_get_int(o, "src_vocab", &c->src_vocab, file, err);
    if (!st) st = json_get_int(o, "tgt_vocab", &c->tgt_vocab, file, err);
    if (!st) st = json_get_int(o, "d_model", &c->d_model, file, err);
    if (!st) st = json_get_int(o, "heads", &c->heads, file, err);
    if (!st) st = json_get_int(o, "ffn", &c->ffn, file, err);
    if (!st) st = json_get_int(o, "enc_layers", &c->enc_layers, file, err);
    if (!st) st = json_get_int(o, "dec_layers", &c->dec_layers, file, err);
    if (!st) st = json_get_int(o, "max_len", &c->max_len, file, err);
    if (!st) st = json_get_float(o, "dropout", &c->dropout, file, err);
    if (!st) st = json_get_flag(o, "bias", &c->bias, file, err);
    if (!st) st = json_get_flag(o, "pre_norm", &c->pre_norm, file, err);
    if (!st) st = json_get_flag(o, "final_norm", &c->final_norm, file, err);
    if (!st) st = json_get_choice(o, "act", acts, 2, &act, file, err);
    if (!st) st = json_get_choice(o, "tie", ties, 3, &tie, file, err);
    if (!st) st = json_get_flag(o, "learned_pos", &c->learned_pos, file, err);
    if (!st) st = json_get_float(o, "ln_eps", &c->ln_eps, file, err);
    cJSON_Delete(o);
    c->act = (qkv_activation)act, c->tie = (qkv_tie)tie;
    if (!st && (st = qkv_transformer_config_check(c, err)) && err) {
        char why[sizeof err->msg]; /* err->msg cannot be both source and target of vsnprintf */
        memcpy(why, err->msg, sizeof why);
        qkv_fail(err, st, "%s: %s", file, why);
    }
    return st;
}

qkv_status qkv_transformer_save(const qkv_transformer *m, const char *dir, qkv_error *err)
{
    char *json = NULL;
    qkv_status st = qkv_config_to_json(&m->cfg, &json, err);
    if (st) return st;
    st = param_dir_save(dir, json, m->core.tensors, m->core.n_tensors, m->core.params, FORMAT_NAME, err);
    free(json);
    return st;
}

qkv_status qkv_transformer_load(qkv_transformer **out, const char *dir, qkv_error *err)
{
    char path[4096];
    char *json = NULL;
    *out = NULL;
    snprintf(path, sizeof path, "%s/config.json", dir);
    qkv_status st = json_read_text(path, &json, err);
    qkv_transformer_config cfg;
    if (!st) st = qkv_config_from_json(&cfg, json, path, err);
    free(json);
    if (st) return st;
    qkv_transformer *m = NULL;
    if ((st = qkv_transformer_create(&m, &cfg, 0, err))) return st;
    st = param_dir_load(dir, m->core.tensors, m->core.n_tensors, m->core.params, err);
    if (st) return qkv_transformer_free(m), st;
    *out = m;
    return QKV_OK;
}

/* ---- training checkpoints -------------------------------------------------------------- */

qkv_status qkv_checkpoint_save(const char *path, const qkv_transformer *m, const qkv_adam *opt,
                               const qkv_train_position *pos, qkv_error *err)
{
    qkv_tensor_ref *refs = param_refs(m->core.tensors, m->core.n_tensors, m->core.params, 2);
    if (!refs) return qkv_fail(err, QKV_ERR_NOMEM, "out of memory");
    adam_refs(refs + m->core.n_tensors, opt);
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
    qkv_status st = qkv_tensor_file_save(path, refs, m->core.n_tensors + 2, meta, 7, err);
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
    float *staged = malloc(m->core.n_params * sizeof *staged); /* commit only a fully valid file */
    if (!staged) st = qkv_fail(err, QKV_ERR_NOMEM, "out of memory");
    if (!st) st = param_copy(m->core.tensors, m->core.n_tensors, staged, &f, path, "adam.", err);
    const qkv_tensor *mt = NULL, *vt = NULL;
    if (!st) st = adam_find(&f, opt, path, &mt, &vt, err);
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
        memcpy(m->core.params, staged, m->core.n_params * sizeof *staged);
        precision_touch(&m->core.prec); /* the bf16 copy, if any, is of the old parameters */
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
