#include "cli/common.h"

#include <errno.h>
#include <math.h>
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

/* The path of a model file: DIR/name, or DIR/../name when DIR lacks it (best/, epoch-NNN/). */
static void aux_path(char *out, size_t cap, const char *dir, const char *name)
{
    join(out, cap, dir, name);
    FILE *probe = fopen(out, "rb");
    if (probe) {
        fclose(probe);
        return;
    }
    char other[4096];
    snprintf(other, sizeof other, "%s/../%s", dir, name);
    if ((probe = fopen(other, "rb"))) {
        fclose(probe);
        if (strlen(other) < cap) memcpy(out, other, strlen(other) + 1);
    }
}

/* DIR/name (or DIR/../name) parsed as JSON, or NULL if the file is absent or not JSON. */
static cJSON *read_json(const char *dir, const char *name)
{
    char path[4096];
    aux_path(path, sizeof path, dir, name);
    FILE *probe = fopen(path, "rb");
    if (!probe) return NULL;
    fclose(probe);
    size_t len;
    char *text = cli_read_all(path, &len);
    cJSON *o = text ? cJSON_Parse(text) : NULL;
    free(text);
    return o;
}

int cli_subwords(const cli_model *cm, qkv_sentences *s, int target)
{
    if (!cm->bpe) return 0;
    qkv_sentences pieces;
    qkv_error err = {0};
    if (qkv_bpe_encode_sentences(&pieces, target ? &cm->tgt_bpe : &cm->src_bpe, s, &err)) {
        fprintf(stderr, "qkv: %s\n", err.msg);
        return -1;
    }
    qkv_sentences_free(s);
    *s = pieces;
    return 0;
}

qkv_status cli_tokenize(const cli_model *cm, qkv_sentences *out, const char *text, size_t len,
                        const char *name, qkv_error *err)
{
    qkv_status st = cm->whitespace ? qkv_sentences_split(out, text, len, name, err)
                                   : qkv_sentences_from_text(out, text, len, name, err);
    if (st || !cm->bpe) return st;
    qkv_sentences pieces;
    st = qkv_bpe_encode_sentences(&pieces, &cm->src_bpe, out, err);
    qkv_sentences_free(out);
    if (!st) *out = pieces;
    return st;
}

char *cli_detokenize(const cli_model *cm, const int *ids, int n)
{
    size_t need = cm->bpe ? qkv_bpe_decode(NULL, 0, &cm->tgt_bpe, ids, n)
                          : qkv_vocab_decode(NULL, 0, &cm->tgt, ids, n);
    char *line = malloc(need + 1);
    if (!line) {
        fprintf(stderr, "qkv: out of memory\n");
        return NULL;
    }
    if (cm->bpe) qkv_bpe_decode(line, need + 1, &cm->tgt_bpe, ids, n);
    else qkv_vocab_decode(line, need + 1, &cm->tgt, ids, n);
    return line;
}

int cli_translation_words(const cli_model *cm, const qkv_vocab *words, int *out, int cap,
                          const int *ids, int n)
{
    char *text = cli_detokenize(cm, ids, n), *save = NULL;
    int count = 0;
    for (char *w = text ? strtok_r(text, " ", &save) : NULL; w && count < cap;
         w = strtok_r(NULL, " ", &save)) {
        int id = qkv_vocab_id(words, w);
        out[count] = id == QKV_UNK && strcmp(w, "<unk>") ? -1 - count : id;
        count++;
    }
    free(text);
    return count;
}

/* A subword encoding and the vocabulary file beside it must agree token for token. */
static int load_bpe(qkv_bpe *b, const qkv_vocab *v, const char *dir, const char *name,
                    qkv_error *err)
{
    char path[4096];
    aux_path(path, sizeof path, dir, name);
    if (qkv_bpe_load(b, path, err)) return -1;
    int agree = v->size == QKV_N_RESERVED + b->n_symbols;
    for (int i = 0; agree && i < b->n_symbols; i++)
        agree = !strcmp(v->idx_to_token[QKV_N_RESERVED + i], b->symbols[i]);
    if (!agree) {
        snprintf(err->msg, sizeof err->msg, "%.400s: its %d symbols are not the vocabulary's %d "
                 "tokens after the reserved ones", path, b->n_symbols, v->size - QKV_N_RESERVED);
        return -1;
    }
    return 0;
}

int cli_model_load(cli_model *cm, const char *dir)
{
    memset(cm, 0, sizeof *cm);
    qkv_error err = {0};
    char path[4096];
    if (qkv_transformer_load(&cm->model, dir, &err)) goto fail;
    aux_path(path, sizeof path, dir, "src_vocab.txt");
    if (qkv_vocab_load(&cm->src, path, &err)) goto fail;
    aux_path(path, sizeof path, dir, "tgt_vocab.txt");
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
    cm->bpe = cJSON_IsString(tk) && !strcmp(tk->valuestring, "bpe");
    cm->source_bos = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "source_bos"));
    if (o && cJSON_IsString(tk) && !cm->whitespace && !cm->bpe && strcmp(tk->valuestring, "d2l")) {
        snprintf(err.msg, sizeof err.msg, "%s/text.json: unknown tokenizer \"%s\"", dir,
                 tk->valuestring);
        cJSON_Delete(o);
        goto fail;
    }
    cJSON_Delete(o);
    if (cm->bpe && (load_bpe(&cm->src_bpe, &cm->src, dir, "src_bpe.txt", &err) ||
                    load_bpe(&cm->tgt_bpe, &cm->tgt, dir, "tgt_bpe.txt", &err)))
        goto fail;
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
    qkv_bpe_free(&cm->src_bpe), qkv_bpe_free(&cm->tgt_bpe);
    memset(cm, 0, sizeof *cm);
}

int cli_translate(cli_model *cm, const qkv_sentences *src, int max_len, int batch, int *ids,
                  int *lens)
{
    return cli_translate_beam(cm, src, max_len, batch, NULL, ids, lens, NULL);
}

int cli_translate_beam(cli_model *cm, const qkv_sentences *src, int max_len, int batch,
                       const qkv_beam_options *beam, int *ids, int *lens, double *scores)
{
    const int limit = qkv_transformer_get_config(cm->model)->max_len;
    const int greedy = !beam || (beam->beam == 1 && beam->n_best == 1);
    const int N = greedy ? 1 : beam->n_best;
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
    int *out = malloc((size_t)batch * N * max_len * sizeof *out);
    int *out_len = malloc((size_t)batch * N * sizeof *out_len);
    double *sc = malloc((size_t)batch * N * sizeof *sc);
    int rc = 0;
    if (!s || !valid || !out || !out_len || !sc) {
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
        qkv_beam_options o = greedy ? (qkv_beam_options){1, 1, max_len, 0.0f} : *beam;
        o.max_len = max_len;
        if (greedy ? qkv_transformer_greedy(cm->model, s, valid, B, T, max_len, out, out_len, &err)
                   : qkv_transformer_beam(cm->model, s, valid, B, T, &o,
                                          &(qkv_beam_results){out, out_len, sc, NULL}, &err)) {
            fprintf(stderr, "qkv: %s\n", err.msg);
            rc = -1;
            break;
        }
        for (int i = 0; i < B * N; i++) {
            const size_t to = (size_t)first * N + i;
            memcpy(ids + to * max_len, out + (size_t)i * max_len,
                   (size_t)(out_len[i] > 0 ? out_len[i] : 0) * sizeof *ids);
            lens[to] = out_len[i];
            if (scores) scores[to] = greedy ? NAN : sc[i];
        }
    }
    free(s), free(valid), free(out), free(out_len), free(sc);
    return rc;
}

void cli_threads(int n)
{
    if (n > 0) qkv_set_threads(n);
}

int cli_precision(const char *name, qkv_precision *p)
{
    qkv_error err = {0};
    if (!qkv_precision_parse(p, name, &err)) return 0;
    fprintf(stderr, "qkv: --precision: %s\n", err.msg);
    return -1;
}
