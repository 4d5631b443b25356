#include "cli/common.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>

static void join(char *out, size_t cap, const char *dir, const char *file)
{
    snprintf(out, cap, "%s/%s", dir, file);
}

char *cli_read_all(const char *path, size_t *len)
{
    FILE *fp = (!path || !strcmp(path, "-")) ? stdin : fopen(path, "rb");
    if (!fp) {
        fprintf(stderr, "qkv: %s: %s\n", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (n + 1 >= cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf), buf = NULL;
                break;
            }
            buf = nb, cap *= 2;
        }
        size_t r = fread(buf + n, 1, cap - n - 1, fp);
        n += r;
        if (r == 0) break;
    }
    if (fp != stdin) fclose(fp);
    if (!buf) {
        fprintf(stderr, "qkv: out of memory reading %s\n", path ? path : "stdin");
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

/* DIR/name parsed as JSON, or NULL if the file is absent or not JSON. */
static cJSON *read_json(const char *dir, const char *name)
{
    char path[4096];
    join(path, sizeof path, dir, name);
    FILE *probe = fopen(path, "rb");
    if (!probe) return NULL;
    fclose(probe);
    size_t len;
    char *text = cli_read_all(path, &len);
    cJSON *o = text ? cJSON_Parse(text) : NULL;
    free(text);
    return o;
}

qkv_status cli_tokenize(const cli_model *cm, qkv_sentences *out, const char *text, size_t len,
                        const char *name, qkv_error *err)
{
    return cm->whitespace ? qkv_sentences_split(out, text, len, name, err)
                          : qkv_sentences_from_text(out, text, len, name, err);
}

int cli_model_load(cli_model *cm, const char *dir)
{
    memset(cm, 0, sizeof *cm);
    qkv_error err = {0};
    char path[4096];
    if (qkv_transformer_load(&cm->model, dir, &err)) goto fail;
    join(path, sizeof path, dir, "src_vocab.txt");
    if (qkv_vocab_load(&cm->src, path, &err)) goto fail;
    join(path, sizeof path, dir, "tgt_vocab.txt");
    if (qkv_vocab_load(&cm->tgt, path, &err)) goto fail;
    const qkv_transformer_config *c = qkv_transformer_get_config(cm->model);
    if (cm->src.size != c->src_vocab || cm->tgt.size != c->tgt_vocab) {
        snprintf(err.msg, sizeof err.msg, "%s: the vocabularies have %d and %d tokens but the "
                 "model was built for %d and %d", dir, cm->src.size, cm->tgt.size, c->src_vocab,
                 c->tgt_vocab);
        goto fail;
    }
    cJSON *o = read_json(dir, "train.json");
    const cJSON *ns = cJSON_GetObjectItemCaseSensitive(o, "num_steps");
    if (cJSON_IsNumber(ns) && ns->valuedouble >= 1 && ns->valuedouble <= c->max_len)
        cm->num_steps = (int)ns->valuedouble;
    cJSON_Delete(o);
    o = read_json(dir, "text.json");
    const cJSON *tk = cJSON_GetObjectItemCaseSensitive(o, "tokenizer");
    cm->whitespace = cJSON_IsString(tk) && !strcmp(tk->valuestring, "whitespace");
    cm->source_bos = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "source_bos"));
    if (o && cJSON_IsString(tk) && !cm->whitespace && strcmp(tk->valuestring, "d2l")) {
        snprintf(err.msg, sizeof err.msg, "%s/text.json: unknown tokenizer \"%s\"", dir,
                 tk->valuestring);
        cJSON_Delete(o);
        goto fail;
    }
    cJSON_Delete(o);
    return 0;
fail:
    fprintf(stderr, "qkv: %s\n", err.msg);
    cli_model_free(cm);
    return -1;
}

void cli_model_free(cli_model *cm)
{
    qkv_transformer_free(cm->model);
    qkv_vocab_free(&cm->src), qkv_vocab_free(&cm->tgt);
    memset(cm, 0, sizeof *cm);
}

int cli_translate(cli_model *cm, const qkv_sentences *src, int max_len, int batch, int *ids,
                  int *lens)
{
    const int limit = qkv_transformer_get_config(cm->model)->max_len;
    int longest = 1, warned = 0;
    for (int i = 0; i < src->count; i++) {
        int n = qkv_sentence_len(src, i) + 1 + cm->source_bos; /* + <eos> (and <bos>) */
        if (n > limit) {
            if (!warned)
                fprintf(stderr, "qkv: warning: sentence %d has %d tokens with <eos>; the model "
                        "accepts %d, so it is truncated (and others like it)\n", i + 1, n, limit);
            warned = 1, n = limit;
        }
        if (n > longest) longest = n;
    }
    int *s = malloc((size_t)batch * longest * sizeof *s), *valid = malloc((size_t)batch * sizeof *valid);
    int *out = malloc((size_t)batch * max_len * sizeof *out), *out_len = malloc((size_t)batch * sizeof *out_len);
    int rc = 0;
    if (!s || !valid || !out || !out_len) {
        fprintf(stderr, "qkv: out of memory\n");
        rc = -1;
    }
    for (int first = 0; !rc && first < src->count; first += batch) {
        int B = src->count - first < batch ? src->count - first : batch, T = 1;
        for (int b = 0; b < B; b++) {
            int n = qkv_sentence_len(src, first + b) + 1 + cm->source_bos;
            if (n > limit) n = limit;
            if (n > T) T = n;
        }
        for (int b = 0; b < B; b++) {
            const char *const *tok = src->tokens + src->start[first + b];
            int *row = s + (size_t)b * T;
            if (cm->source_bos) row[0] = QKV_BOS;
            valid[b] = cm->source_bos + qkv_vocab_encode(row + cm->source_bos, &cm->src, tok,
                                                         qkv_sentence_len(src, first + b),
                                                         T - cm->source_bos);
        }
        qkv_error err = {0};
        if (qkv_transformer_greedy(cm->model, s, valid, B, T, max_len, out, out_len, &err)) {
            fprintf(stderr, "qkv: %s\n", err.msg);
            rc = -1;
            break;
        }
        for (int b = 0; b < B; b++) {
            memcpy(ids + (size_t)(first + b) * max_len, out + (size_t)b * max_len,
                   (size_t)out_len[b] * sizeof *ids);
            lens[first + b] = out_len[b];
        }
    }
    free(s), free(valid), free(out), free(out_len);
    return rc;
}

void cli_threads(int n)
{
    if (n > 0) qkv_set_threads(n);
}
