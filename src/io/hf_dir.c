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
    qkv_status st = qkv_read_file(path, MAX_JSON_BYTES, &text, &len, err);
    if (st) return st;
    *out = cJSON_ParseWithLength(text, len);
    free(text);
    if (*out && cJSON_IsObject(*out)) return QKV_OK;
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
