/* SPDX-License-Identifier: MIT */
/* The generator: a language model's directory as one object (the model, its vocabulary and
 * what train.json says of its training), and qkv_model_open, which opens a model directory of
 * either kind. */
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer.h"

struct qkv_generator {
    qkv_lm *model;
    qkv_vocab vocab;
    qkv_lm_run_info info;
};

/* train.json's settings, where they are what a run writes; the defaults otherwise. */
static qkv_status read_run_info(qkv_lm_run_info *info, const char *dir, int max_len,
                                qkv_error *err)
{
    cJSON *o;
    *info = (qkv_lm_run_info){0, 0, 0, 0.1f};
    qkv_status st = model_dir_json(&o, dir, "train.json", err);
    const cJSON *x;
    if (cJSON_IsNumber(x = cJSON_GetObjectItemCaseSensitive(o, "context")) &&
        x->valuedouble >= 1 && x->valuedouble <= max_len)
        info->context = x->valueint;
    if (cJSON_IsNumber(x = cJSON_GetObjectItemCaseSensitive(o, "batch")) && x->valuedouble >= 1 &&
        x->valuedouble <= 1e6)
        info->batch = x->valueint;
    if (cJSON_IsNumber(x = cJSON_GetObjectItemCaseSensitive(o, "val_fraction")) &&
        x->valuedouble >= 0.0 && x->valuedouble < 1.0)
        info->val_fraction = (float)x->valuedouble;
    x = cJSON_GetObjectItemCaseSensitive(o, "vocab");
    info->byte_level = cJSON_IsString(x) && !strcmp(x->valuestring, "byte");
    cJSON_Delete(o);
    return st;
}

qkv_status qkv_generator_create(qkv_generator **out, qkv_lm *m, qkv_vocab *v,
                                const qkv_lm_run_info *info, qkv_error *err)
{
    *out = NULL;
    if (!m || !v) return qkv_fail(err, QKV_ERR_ARG, "a generator needs a model and a vocabulary");
    const int V = qkv_lm_get_config(m)->vocab;
    if (v->size != V)
        return qkv_fail(err, QKV_ERR_ARG, "the vocabulary has %d tokens but the model was built "
                        "for %d", v->size, V);
    qkv_generator *g = calloc(1, sizeof *g);
    if (!g) return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for a generator");
    g->model = m, g->vocab = *v;
    g->info = info ? *info : (qkv_lm_run_info){0, 0, 0, 0.1f};
    memset(v, 0, sizeof *v);
    *out = g;
    return QKV_OK;
}

qkv_status qkv_generator_open(qkv_generator **out, const char *dir, qkv_error *err)
{
    *out = NULL;
    qkv_lm *m = NULL;
    qkv_vocab v = {0};
    qkv_lm_run_info info;
    char path[4096];
    qkv_status st = qkv_lm_load(&m, dir, err);
    if (!st) {
        snprintf(path, sizeof path, "%s/vocab.txt", dir);
        st = qkv_vocab_load(&v, path, err);
    }
    if (!st && v.size != qkv_lm_get_config(m)->vocab)
        st = qkv_fail(err, QKV_ERR_FORMAT, "%.400s: the vocabulary has %d tokens but the model "
                      "was built for %d", path, v.size, qkv_lm_get_config(m)->vocab);
    if (!st) st = read_run_info(&info, dir, qkv_lm_get_config(m)->max_len, err);
    if (!st) st = qkv_generator_create(out, m, &v, &info, err);
    if (st) {
        qkv_lm_free(m);
        qkv_vocab_free(&v);
    }
    return st;
}

void qkv_generator_free(qkv_generator *g)
{
    if (!g) return;
    qkv_lm_free(g->model);
    qkv_vocab_free(&g->vocab);
    free(g);
}

qkv_lm *qkv_generator_model(qkv_generator *g) { return g->model; }
const qkv_vocab *qkv_generator_vocab(const qkv_generator *g) { return &g->vocab; }
const qkv_lm_run_info *qkv_generator_run_info(const qkv_generator *g) { return &g->info; }

qkv_status qkv_generator_encode(const qkv_generator *g, const char *text, size_t len, int **ids,
                                size_t *n, size_t *unknown, qkv_error *err)
{
    *ids = malloc((len ? len : 1) * sizeof **ids);
    if (!*ids) return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for %zu tokens", len);
    qkv_status st = qkv_lm_encode(*ids, n, unknown, &g->vocab, text, len, err);
    if (st) free(*ids), *ids = NULL;
    return st;
}

size_t qkv_generator_decode(const qkv_generator *g, char *out, size_t cap, const int *ids,
                            int n)
{
    size_t need = 0;
    for (int i = 0; i < n; i++) {
        char piece[8];
        const size_t k = qkv_lm_token_text(piece, sizeof piece, &g->vocab, ids[i]);
        if (out && need + k < cap) memcpy(out + need, piece, k);
        need += k;
    }
    if (out && cap) out[need < cap ? need : cap - 1] = '\0';
    return need;
}

/* ---- any model directory ------------------------------------------------------------------ */

/* "qkv-lm" when config.json says so: the language model; anything else is left to the
 * translator to open (and to name what is wrong with it). */
static qkv_status is_lm_dir(int *lm, const char *dir, qkv_error *err)
{
    cJSON *o;
    char path[4096];
    *lm = 0;
    snprintf(path, sizeof path, "%s/config.json", dir);
    qkv_status st = qkv_json_load(&o, path, QKV_MAX_CONFIG_BYTES, err);
    if (st) return st;
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, "format");
    *lm = cJSON_IsString(f) && !strcmp(f->valuestring, "qkv-lm");
    cJSON_Delete(o);
    return QKV_OK;
}

qkv_status qkv_model_open(qkv_model *out, const char *dir, qkv_error *err)
{
    memset(out, 0, sizeof *out);
    if (!dir) return qkv_fail(err, QKV_ERR_ARG, "a model directory is needed (got NULL)");
    int lm;
    qkv_status st = is_lm_dir(&lm, dir, err);
    if (st) return st;
    if (lm) {
        out->kind = QKV_MODEL_GENERATOR;
        return qkv_generator_open(&out->generator, dir, err);
    }
    out->kind = QKV_MODEL_TRANSLATOR;
    return qkv_translator_open(&out->translator, dir, err);
}

void qkv_model_close(qkv_model *m)
{
    if (!m) return;
    qkv_translator_free(m->translator);
    qkv_generator_free(m->generator);
    memset(m, 0, sizeof *m);
}
