/* SPDX-License-Identifier: MIT */
/* int8 model files (qkv_model_quantize): a model directory written again with its weight
 * matrices stored as int8 (model_dir.h, param_file.h), beside copies of its other files. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cJSON.h>

#include "io/model_dir.h"

/* The files of a model directory that the int8 one makes anew (the weights, the
 * configuration) or must not carry over (a training run's checkpoints and figures). */
static int made_anew(const char *name)
{
    const size_t n = strlen(name);
    return name[0] == '.' || !strcmp(name, "config.json") ||
           (n > 12 && !strcmp(name + n - 12, ".safetensors")) ||
           (n > 4 && !strcmp(name + n - 4, ".png"));
}

/* Every other regular file of dir (vocabularies, tokenizer models, text.json,
 * generation.json, train.json) copied into out. */
static qkv_status copy_files(const char *dir, const char *out, qkv_error *err)
{
    DIR *d = opendir(dir);
    if (!d) return qkv_fail(err, QKV_ERR_IO, "%s: cannot list the directory: %s", dir,
                            strerror(errno));
    qkv_status st = QKV_OK;
    for (struct dirent *e; !st && (e = readdir(d));) {
        char from[4096], to[4096];
        struct stat sb;
        if (made_anew(e->d_name)) continue;
        snprintf(from, sizeof from, "%s/%s", dir, e->d_name);
        if (stat(from, &sb) || !S_ISREG(sb.st_mode)) continue;
        snprintf(to, sizeof to, "%s/%s", out, e->d_name);
        char *data = NULL;
        size_t len = 0;
        st = qkv_read_file(from, QKV_MAX_TEXT_BYTES, &data, &len, err);
        const void *chunks[1] = {data};
        if (!st) st = qkv_atomic_write(to, chunks, &len, 1, err);
        free(data);
    }
    closedir(d);
    return st;
}

/* The kind of model dir holds: config.json's "format". */
static qkv_status kind_of(const model_kind **k, const char *dir, qkv_error *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    char *text = NULL;
    size_t len = 0;
    qkv_status st = qkv_read_file(path, QKV_MAX_CONFIG_BYTES, &text, &len, err);
    if (st) return st;
    cJSON *o = cJSON_ParseWithLength(text, len);
    free(text);
    const cJSON *f = o ? cJSON_GetObjectItemCaseSensitive(o, "format") : NULL;
    *k = cJSON_IsString(f) && !strcmp(f->valuestring, lm_kind.format) ? &lm_kind
                                                                      : &transformer_kind;
    cJSON_Delete(o);
    return QKV_OK;
}

qkv_status qkv_model_quantize(const char *dir, const char *out_dir, qkv_precision p,
                              qkv_error *err)
{
    if (!dir || !out_dir)
        return qkv_fail(err, QKV_ERR_ARG, "qkv_model_quantize needs a model directory and an "
                        "output directory");
    if (p != QKV_PRECISION_INT8)
        return qkv_fail(err, QKV_ERR_ARG, "a model file is stored quantised at int8 only (got "
                        "%s)", qkv_precision_name(p) ? qkv_precision_name(p) : "?");
    /* the model's own config.json and weights would be replaced, or copied into themselves */
    static const char *const relation[] = {"", "is", "is inside", "holds"};
    const int rel = qkv_path_relation(out_dir, dir);
    if (rel > 0)
        return qkv_fail(err, QKV_ERR_ARG, "%s %s the model %s: the int8 model goes into a "
                        "directory of its own", out_dir, relation[rel], dir);
    const model_kind *k;
    void *m = NULL;
    qkv_status st = kind_of(&k, dir, err);
    if (!st) st = model_load(k, &m, dir, err);
    if (!st && k->core(m)->prec.int8_file)
        st = qkv_fail(err, QKV_ERR_ARG, "%s holds an int8 model file already", dir);
    if (!st && mkdir(out_dir, 0777) && errno != EEXIST)
        st = qkv_fail(err, QKV_ERR_IO, "%s: cannot create the directory: %s", out_dir,
                      strerror(errno));
    /* the other files first, the model last: out_dir is a model once config.json is there */
    if (!st) st = copy_files(dir, out_dir, err);
    if (!st) st = model_save_int8(k, m, out_dir, err);
    if (m) k->destroy(m);
    return st;
}
