/* SPDX-License-Identifier: MIT */
/* A Hugging Face model directory's JSON files and weights (see hf_dir.h). */
#include "io/hf_dir.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_JSON_BYTES ((size_t)64 << 20) /* vocab.json of 250k pieces is ~6 MB */
#define MAX_SHARDS 1000

qkv_status hf_json(cJSON **out, const char *dir, const char *name, int required, qkv_error *err)
{
    char path[4096], *text = NULL;
    size_t len = 0;
    *out = NULL;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    struct stat sb;
    if (!required && stat(path, &sb)) return QKV_OK;
    qkv_status st = qkv_read_regular_file(path, MAX_JSON_BYTES, &text, &len, err);
    if (!st) st = qkv_json_parse(out, text, len, path, err);
    free(text);
    if (st) return st;
    if (cJSON_IsObject(*out)) return QKV_OK;
    cJSON_Delete(*out), *out = NULL;
    return qkv_fail(err, QKV_ERR_FORMAT, "%s: not a JSON object", path);
}

qkv_status hf_int(const cJSON *o, const char *key, int def, int *v, const char *file,
                  qkv_error *err)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!x || cJSON_IsNull(x)) return *v = def, QKV_OK;
    if (!cJSON_IsNumber(x) || x->valuedouble != floor(x->valuedouble) || fabs(x->valuedouble) > 1e9)
        return qkv_fail(err, QKV_ERR_FORMAT, "%s: \"%s\" must be an integer", file, key);
    *v = (int)x->valuedouble;
    return QKV_OK;
}

qkv_status hf_bool(const cJSON *o, const char *key, int def, int *v, const char *file,
                   qkv_error *err)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!x || cJSON_IsNull(x)) return *v = def, QKV_OK;
    if (!cJSON_IsBool(x))
        return qkv_fail(err, QKV_ERR_FORMAT, "%s: \"%s\" must be true or false", file, key);
    *v = cJSON_IsTrue(x);
    return QKV_OK;
}

const char *hf_str(const cJSON *o, const char *key, const char *def)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(x) ? x->valuestring : def;
}

qkv_status hf_output_apart(const char *out, const char *dir, qkv_error *err)
{
    static const char *const relation[] = {"", "is", "is inside", "holds"};
    const int rel = qkv_path_relation(out, dir);
    return rel > 0 ? qkv_fail(err, QKV_ERR_ARG, "%s %s the input %s: import into another "
                              "directory", out, relation[rel], dir)
                   : QKV_OK;
}

qkv_status hf_spm_loads(const char *bytes, size_t len, const char *name, qkv_error *err)
{
    qkv_spm *model = NULL; /* an empty, junk or truncated file does not load */
    qkv_status st = qkv_spm_load_bytes(&model, bytes, len, name, err);
    qkv_spm_free(model);
    return st;
}

qkv_status hf_weights_finite(qkv_transformer *m, const char *file, qkv_error *err)
{
    const float *params = qkv_transformer_params(m);
    for (int i = 0; i < qkv_transformer_num_tensors(m); i++) {
        const qkv_param_info t = qkv_transformer_tensor(m, i);
        for (size_t k = 0; k < t.numel; k++)
            if (!isfinite(params[t.offset + k]))
                return qkv_fail(err, QKV_ERR_NUMERIC, "%s: the weights of qkv's tensor '%s' hold "
                                "%g at element %zu (a NaN or Inf)", file, t.name,
                                (double)params[t.offset + k], k);
    }
    return QKV_OK;
}

qkv_status hf_string(const cJSON *o, const char *key, const char *def, const char **v,
                     const char *file, qkv_error *err)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    *v = def;
    if (!x) return QKV_OK;
    if (!cJSON_IsString(x))
        return qkv_fail(err, QKV_ERR_FORMAT, "%s: \"%s\" must be a string%s", file, key,
                        cJSON_IsNull(x) ? " (it is null)" : "");
    *v = x->valuestring;
    return QKV_OK;
}

/* ---- weights ------------------------------------------------------------------------ */

static int exists(const char *dir, const char *name)
{
    char path[4096];
    struct stat sb;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return !stat(path, &sb);
}

static qkv_status load_one(qkv_tensor_file *f, const char *dir, const char *name, qkv_error *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    const size_t n = strlen(name);
    return n > 4 && !strcmp(name + n - 4, ".bin") ? qkv_tensor_file_load_pytorch(f, path, err)
                                                  : qkv_tensor_file_load(f, path, err);
}

/* An index's "weight_map": every shard it names (plain file names) loaded once, and every
 * tensor it maps found in the shard it names. */
static qkv_status load_sharded(hf_weights *w, const char *dir, const char *index, qkv_error *err)
{
    cJSON *o = NULL;
    qkv_status st = hf_json(&o, dir, index, 1, err);
    if (st) return st;
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(o, "weight_map");
    const char *names[MAX_SHARDS];
    int n = 0;
    if (!cJSON_IsObject(map) || !map->child)
        st = qkv_fail(err, QKV_ERR_FORMAT, "%s: no \"weight_map\" of tensor names to files",
                      w->file);
    for (const cJSON *e = map ? map->child : NULL; !st && e; e = e->next) {
        if (!cJSON_IsString(e) || !*e->valuestring || strchr(e->valuestring, '/') ||
            !strcmp(e->valuestring, ".."))
            st = qkv_fail(err, QKV_ERR_FORMAT,
                          "%s: \"%.100s\" is not mapped to a file name "
                          "beside the index",
                          w->file, e->string);
        int k = 0;
        while (!st && k < n && strcmp(names[k], e->valuestring)) k++;
        if (!st && k == n && n == MAX_SHARDS)
            st = qkv_fail(err, QKV_ERR_FORMAT, "%s: more than %d shards", w->file, MAX_SHARDS);
        else if (!st && k == n) names[n++] = e->valuestring;
    }
    if (!st && (!(w->shards = calloc((size_t)n, sizeof *w->shards)) ||
                !(w->used = calloc((size_t)n, sizeof *w->used))))
        st = qkv_fail(err, QKV_ERR_NOMEM, "%s: out of memory", w->file);
    for (int k = 0; !st && k < n; k++) {
        st = load_one(&w->shards[k], dir, names[k], err);
        if (!st) w->n = k + 1;
    }
    for (const cJSON *e = map ? map->child : NULL; !st && e; e = e->next) {
        int k = 0;
        while (strcmp(names[k], e->valuestring)) k++;
        if (!qkv_tensor_file_get(&w->shards[k], e->string))
            st = qkv_fail(err, QKV_ERR_FORMAT,
                          "%s: tensor '%.100s' is not in %s, where the "
                          "index puts it",
                          w->file, e->string, names[k]);
    }
    cJSON_Delete(o);
    return st;
}

qkv_status hf_weights_load(hf_weights *w, const char *dir, qkv_error *err)
{
    memset(w, 0, sizeof *w);
    static const char *const single[] = {"model.safetensors", "pytorch_model.bin"};
    static const char *const index[] = {"model.safetensors.index.json",
                                        "pytorch_model.bin.index.json"};
    qkv_status st = QKV_OK;
    int k = 0;
    while (k < 2 && !exists(dir, single[k]) && !exists(dir, index[k])) k++;
    if (k == 2)
        return qkv_fail(err, QKV_ERR_IO,
                        "%s/model.safetensors: missing (and no "
                        "pytorch_model.bin, nor an index of shards of either)",
                        dir);
    if (exists(dir, single[k])) {
        snprintf(w->file, sizeof w->file, "%s/%s", dir, single[k]);
        if (!(w->shards = calloc(1, sizeof *w->shards)) || !(w->used = calloc(1, sizeof *w->used)))
            st = qkv_fail(err, QKV_ERR_NOMEM, "out of memory");
        if (!st) st = load_one(w->shards, dir, single[k], err);
        if (!st) w->n = 1;
    } else {
        snprintf(w->file, sizeof w->file, "%s/%s", dir, index[k]);
        st = load_sharded(w, dir, index[k], err);
    }
    for (int i = 0; !st && i < w->n; i++)
        if (!(w->used[i] = calloc((size_t)w->shards[i].count + 1, 1)))
            st = qkv_fail(err, QKV_ERR_NOMEM, "out of memory");
    for (int i = 0; !st && i < w->n; i++) /* a name in two shards would be read from one */
        for (int t = 0; !st && t < w->shards[i].count; t++)
            for (int j = 0; !st && j < i; j++)
                if (qkv_tensor_file_get(&w->shards[j], w->shards[i].tensors[t].name))
                    st = qkv_fail(err, QKV_ERR_FORMAT, "%s: tensor '%.100s' is in two shards",
                                  w->file, w->shards[i].tensors[t].name);
    if (st) hf_weights_free(w);
    return st;
}

void hf_weights_free(hf_weights *w)
{
    for (int i = 0; i < w->n; i++) qkv_tensor_file_free(&w->shards[i]);
    for (int i = 0; w->used && i < w->n; i++) free(w->used[i]);
    free(w->shards), free(w->used);
    memset(w, 0, sizeof *w);
}

const qkv_tensor *hf_weights_peek(const hf_weights *w, const char *name)
{
    for (int i = 0; i < w->n; i++) {
        const qkv_tensor *t = qkv_tensor_file_get(&w->shards[i], name);
        if (t) return t;
    }
    return NULL;
}

const qkv_tensor *hf_weights_get(hf_weights *w, const char *name)
{
    for (int i = 0; i < w->n; i++) {
        const qkv_tensor *t = qkv_tensor_file_get(&w->shards[i], name);
        if (t) return w->used[i][t - w->shards[i].tensors] = 1, t;
    }
    return NULL;
}

const char *hf_weights_unused(const hf_weights *w)
{
    for (int i = 0; i < w->n; i++)
        for (int t = 0; t < w->shards[i].count; t++)
            if (!w->used[i][t]) return w->shards[i].tensors[t].name;
    return NULL;
}

qkv_status hf_generation(char **out, const char *dir, qkv_error *err)
{
    cJSON *g = NULL;
    *out = NULL;
    char file[4096];
    qkv_status st = hf_json(&g, dir, "generation_config.json", 0, err);
    snprintf(file, sizeof file, "%s/%s", dir, g ? "generation_config.json" : "config.json");
    if (!st && !g) st = hf_json(&g, dir, "config.json", 1, err);
    if (st) return st;
    int beams = 1, max_length = 0;
    st = hf_int(g, "num_beams", 1, &beams, file, err);
    if (!st) st = hf_int(g, "max_length", 0, &max_length, file, err);
    const cJSON *lp = cJSON_GetObjectItemCaseSensitive(g, "length_penalty");
    /* transformers' early_stopping (GenerationConfig: true, false or "never"; false when
     * absent) is the stopping rule of its BeamSearchScorer */
    const cJSON *early = cJSON_GetObjectItemCaseSensitive(g, "early_stopping");
    qkv_beam_stop rule = QKV_BEAM_STOP_HF;
    if (cJSON_IsTrue(early)) rule = QKV_BEAM_STOP_HF_EARLY;
    else if (cJSON_IsString(early) && !strcmp(early->valuestring, "never"))
        rule = QKV_BEAM_STOP_HF_NEVER;
    else if (early && !cJSON_IsFalse(early) && !cJSON_IsNull(early) && !st)
        st = qkv_fail(err, QKV_ERR_FORMAT, "%s: \"early_stopping\" must be true, false or "
                      "\"never\"", file);
    char *text = st ? NULL : malloc(256);
    if (!st && !text) st = qkv_fail(err, QKV_ERR_NOMEM, "out of memory");
    if (!st) {
        int n = snprintf(text, 256, "{\n  \"from\": \"%s\",\n  \"beam\": %d,\n"
                         "  \"beam_stop\": \"%s\"", g ? strrchr(file, '/') + 1 : "config.json",
                         beams > 0 && beams <= 256 ? beams : 1, qkv_beam_stop_name(rule));
        if (cJSON_IsNumber(lp) && lp->valuedouble >= 0 && lp->valuedouble <= 100)
            n += snprintf(text + n, (size_t)(256 - n), ",\n  \"length_penalty\": %g",
                          lp->valuedouble);
        if (max_length > 1 && max_length <= 65537)
            n += snprintf(text + n, (size_t)(256 - n), ",\n  \"max_len\": %d", max_length - 1);
        snprintf(text + n, (size_t)(256 - n), "\n}\n");
        *out = text;
    }
    cJSON_Delete(g);
    return st;
}

/* ---- a BART-family model's tensors into qkv's ------------------------------------------ */

/* HF tensor `name` as float32 of shape (rows, cols) (cols 0: a vector; (1, n) is read as n);
 * with more_rows, (rows or more, cols), of which the first rows are read. */
qkv_status hf_import_rows(const float **out, hf_importer *im, const char *name, int rows, int cols,
                          int more_rows, qkv_error *err)
{
    const qkv_tensor *t = hf_weights_get(im->w, name);
    if (!t) return qkv_fail(err, QKV_ERR_FORMAT, "%s: tensor '%s' is missing", im->file, name);
    if (t->dtype != QKV_F32)
        return qkv_fail(err, QKV_ERR_FORMAT,
                        "%s: tensor '%s' is not floating-point weights of "
                        "float32, float16 or bfloat16",
                        im->file, name);
    const int64_t s0 = t->shape[0], s1 = t->ndim > 1 ? t->shape[1] : 0;
    const int fits = cols ? t->ndim == 2 && (s0 == rows || (more_rows && s0 > rows)) && s1 == cols
                          : (t->ndim == 1 && s0 == rows) || (t->ndim == 2 && s0 == 1 && s1 == rows);
    if (!fits)
        return qkv_fail(err, QKV_ERR_FORMAT,
                        "%s: tensor '%s' has shape (%lld%s%lld), the "
                        "configuration needs (%d%s%d)",
                        im->file, name, (long long)t->shape[0], t->ndim > 1 ? ", " : "",
                        t->ndim > 1 ? (long long)t->shape[1] : 0LL, rows, cols ? ", " : "", cols);
    *out = (const float *)t->data;
    return QKV_OK;
}

qkv_status hf_import_get(const float **out, hf_importer *im, const char *name, int rows, int cols,
                         qkv_error *err)
{
    return hf_import_rows(out, im, name, rows, cols, 0, err);
}

/* qkv's tensor `name`, marked written. */
float *hf_import_slot(hf_importer *im, const char *name, size_t *numel)
{
    for (int i = 0; i < qkv_transformer_num_tensors(im->m); i++) {
        const qkv_param_info t = qkv_transformer_tensor(im->m, i);
        if (strcmp(t.name, name)) continue;
        im->written[i] = 1;
        *numel = t.numel;
        return qkv_transformer_params(im->m) + t.offset;
    }
    return NULL;
}

/* HF tensor hf (same shape as qkv's) -> qkv tensor q */
qkv_status hf_import_copy(hf_importer *im, const char *hf, const char *q, qkv_error *err)
{
    for (int i = 0; i < qkv_transformer_num_tensors(im->m); i++) {
        const qkv_param_info t = qkv_transformer_tensor(im->m, i);
        if (strcmp(t.name, q)) continue;
        const float *src;
        qkv_status st = hf_import_get(&src, im, hf, t.shape[0], t.ndim == 2 ? t.shape[1] : 0, err);
        if (st) return st;
        im->written[i] = 1;
        memcpy(qkv_transformer_params(im->m) + t.offset, src, t.numel * sizeof *src);
        return QKV_OK;
    }
    return qkv_fail(err, QKV_ERR_ARG, "qkv's model has no tensor '%s'", q);
}

/* The first of the names that the file holds (save_pretrained keeps one name of tied
 * tensors, which one depends on the version), all of them marked used. */
const char *hf_import_first(hf_importer *im, const char *const *names, int n)
{
    const char *found = NULL;
    for (int i = 0; i < n; i++)
        if (hf_weights_get(im->w, names[i]) && !found) found = names[i];
    return found;
}

qkv_status hf_import_layers(hf_importer *im, const qkv_transformer_config *c, qkv_error *err)
{
    /* HF's name within a layer -> qkv's, per stack */
    static const char *const enc[][2] = {{"self_attn.q_proj", "attention.%c_q"},
                                         {"self_attn.k_proj", "attention.%c_k"},
                                         {"self_attn.v_proj", "attention.%c_v"},
                                         {"self_attn.out_proj", "attention.%c_o"},
                                         {"self_attn_layer_norm", "norm1"},
                                         {"fc1", "ffn.%c1"},
                                         {"fc2", "ffn.%c2"},
                                         {"final_layer_norm", "norm2"}};
    static const char *const dec[][2] = {{"self_attn.q_proj", "self_attention.%c_q"},
                                         {"self_attn.k_proj", "self_attention.%c_k"},
                                         {"self_attn.v_proj", "self_attention.%c_v"},
                                         {"self_attn.out_proj", "self_attention.%c_o"},
                                         {"self_attn_layer_norm", "norm1"},
                                         {"encoder_attn.q_proj", "cross_attention.%c_q"},
                                         {"encoder_attn.k_proj", "cross_attention.%c_k"},
                                         {"encoder_attn.v_proj", "cross_attention.%c_v"},
                                         {"encoder_attn.out_proj", "cross_attention.%c_o"},
                                         {"encoder_attn_layer_norm", "norm2"},
                                         {"fc1", "ffn.%c1"},
                                         {"fc2", "ffn.%c2"},
                                         {"final_layer_norm", "norm3"}};
    qkv_status st = QKV_OK;
    for (int s = 0; s < 2 && !st; s++) {
        const char *stack = s ? "decoder" : "encoder";
        const int layers = s ? c->dec_layers : c->enc_layers, n = s ? 13 : 8;
        for (int l = 0; l < layers && !st; l++)
            for (int i = 0; i < n && !st; i++) {
                const char *const *pair = s ? dec[i] : enc[i];
                const int norm = !strchr(pair[1], '%');
                for (int w = 0; w < 2 && !st; w++) { /* weight then bias */
                    char hf[160], q[160], leaf[48];
                    snprintf(hf, sizeof hf, "model.%s.layers.%d.%s.%s", stack, l, pair[0],
                             w ? "bias" : "weight");
                    if (norm) snprintf(leaf, sizeof leaf, "%s.%s", pair[1], w ? "beta" : "gamma");
                    else snprintf(leaf, sizeof leaf, pair[1], w ? 'b' : 'W');
                    snprintf(q, sizeof q, "%s.%d.%s", stack, l, leaf);
                    st = hf_import_copy(im, hf, q, err);
                }
            }
    }
    return st;
}
