/* A model's tokenizer: the vocabularies, subword encodings and text.json of a model
 * directory, and the steps between text and ids that translating and scoring take. */
#include "io/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/json_fields.h"

int qkv_model_dir_file(char *path, size_t cap, const char *dir, const char *name)
{
    snprintf(path, cap, "%s/%s", dir, name);
    FILE *probe = fopen(path, "rb");
    if (probe) return fclose(probe), 1;
    char parent[4096];
    if ((size_t)snprintf(parent, sizeof parent, "%s/../%s", dir, name) >= sizeof parent ||
        strlen(parent) >= cap || !(probe = fopen(parent, "rb")))
        return 0;
    fclose(probe);
    memcpy(path, parent, strlen(parent) + 1);
    return 1;
}

qkv_status model_dir_json(cJSON **out, const char *dir, const char *name, qkv_error *err)
{
    char path[4096], *text = NULL;
    size_t len = 0;
    *out = NULL;
    if (!qkv_model_dir_file(path, sizeof path, dir, name)) return QKV_OK;
    /* a model's JSON files are small: a megabyte is far beyond any of them */
    qkv_status st = qkv_read_file(path, QKV_MAX_CONFIG_BYTES, &text, &len, err);
    if (!st && strlen(text) != len)
        st = qkv_fail(err, QKV_ERR_FORMAT, "%s: contains a NUL byte", path);
    if (st) return free(text), st;
    *out = cJSON_Parse(text);
    free(text);
    return *out ? QKV_OK : qkv_fail(err, QKV_ERR_FORMAT, "%s: not valid JSON", path);
}

void qkv_tokenizer_free(qkv_tokenizer *t)
{
    if (!t) return;
    qkv_vocab_free(&t->src), qkv_vocab_free(&t->tgt);
    qkv_bpe_free(&t->src_bpe), qkv_bpe_free(&t->tgt_bpe);
    memset(t, 0, sizeof *t);
}

/* text.json: the tokenizer's kind and whether sources start with <bos>. */
static qkv_status read_text_json(qkv_tokenizer *t, const char *dir, qkv_error *err)
{
    static const char *const kinds[] = {"d2l", "whitespace", "bpe"};
    cJSON *o;
    qkv_status st = model_dir_json(&o, dir, "text.json", err);
    if (st || !o) return st;
    const cJSON *tk = cJSON_GetObjectItemCaseSensitive(o, "tokenizer");
    if (cJSON_IsString(tk)) {
        int k = 0;
        while (k < 3 && strcmp(tk->valuestring, kinds[k])) k++;
        if (k == 3) {
            char path[4096];
            qkv_model_dir_file(path, sizeof path, dir, "text.json");
            st = qkv_fail(err, QKV_ERR_FORMAT, "%s: unknown tokenizer \"%.100s\"", path,
                          tk->valuestring);
        }
        t->kind = (qkv_tokenizer_kind)k;
    }
    t->source_bos = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "source_bos"));
    cJSON_Delete(o);
    return st;
}

/* A subword encoding and the vocabulary file beside it must agree token for token. */
static qkv_status load_bpe(qkv_bpe *b, const qkv_vocab *v, const char *dir, const char *name,
                           qkv_error *err)
{
    char path[4096];
    qkv_model_dir_file(path, sizeof path, dir, name);
    qkv_status st = qkv_bpe_load(b, path, err);
    if (st) return st;
    int agree = v->size == QKV_N_RESERVED + b->n_symbols;
    for (int i = 0; agree && i < b->n_symbols; i++)
        agree = !strcmp(v->idx_to_token[QKV_N_RESERVED + i], b->symbols[i]);
    if (!agree)
        return qkv_fail(err, QKV_ERR_FORMAT, "%.400s: its %d symbols are not the vocabulary's "
                        "%d tokens after the reserved ones", path, b->n_symbols,
                        v->size - QKV_N_RESERVED);
    return QKV_OK;
}

qkv_status qkv_tokenizer_load(qkv_tokenizer *t, const char *dir, qkv_error *err)
{
    memset(t, 0, sizeof *t);
    char path[4096];
    qkv_model_dir_file(path, sizeof path, dir, "src_vocab.txt");
    qkv_status st = qkv_vocab_load(&t->src, path, err);
    if (!st) {
        qkv_model_dir_file(path, sizeof path, dir, "tgt_vocab.txt");
        st = qkv_vocab_load(&t->tgt, path, err);
    }
    if (!st) st = read_text_json(t, dir, err);
    if (!st && t->kind != QKV_TOKENIZER_BPE &&
        (qkv_model_dir_file(path, sizeof path, dir, "src_bpe.txt") ||
         qkv_model_dir_file(path, sizeof path, dir, "tgt_bpe.txt")))
        /* read as words, a subword model's input would be unknown tokens: gibberish */
        st = qkv_fail(err, QKV_ERR_FORMAT, "%.400s: a subword encoding, but text.json does not "
                      "say the model reads subwords (\"tokenizer\": \"bpe\"); the directory is "
                      "incomplete or mixed", path);
    if (!st && t->kind == QKV_TOKENIZER_BPE) {
        st = load_bpe(&t->src_bpe, &t->src, dir, "src_bpe.txt", err);
        if (!st) st = load_bpe(&t->tgt_bpe, &t->tgt, dir, "tgt_bpe.txt", err);
    }
    if (st) qkv_tokenizer_free(t);
    return st;
}

qkv_status qkv_tokenizer_words(const qkv_tokenizer *t, qkv_sentences *out, const char *text,
                               size_t len, const char *name, qkv_error *err)
{
    return t->kind == QKV_TOKENIZER_WHITESPACE ? qkv_sentences_split(out, text, len, name, err)
                                               : qkv_sentences_from_text(out, text, len, name, err);
}

static qkv_status sentences_copy(qkv_sentences *out, const qkv_sentences *s, qkv_error *err)
{
    memset(out, 0, sizeof *out);
    size_t bytes = 0;
    for (size_t i = 0; i < s->n_tokens; i++) bytes += strlen(s->tokens[i]) + 1;
    out->tokens = malloc((s->n_tokens ? s->n_tokens : 1) * sizeof *out->tokens);
    out->start = malloc(((size_t)s->count + 1) * sizeof *out->start);
    out->storage = malloc(bytes ? bytes : 1);
    if (!out->tokens || !out->start || !out->storage) {
        qkv_sentences_free(out);
        return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for %zu tokens", s->n_tokens);
    }
    char *at = out->storage;
    for (size_t i = 0; i < s->n_tokens; i++) {
        const size_t n = strlen(s->tokens[i]) + 1;
        out->tokens[i] = memcpy(at, s->tokens[i], n);
        at += n;
    }
    out->start[0] = 0; /* a zeroed qkv_sentences (no sentences) has no start array */
    if (s->count) memcpy(out->start, s->start, ((size_t)s->count + 1) * sizeof *out->start);
    out->count = s->count, out->n_tokens = s->n_tokens;
    return QKV_OK;
}

qkv_status qkv_tokenizer_tokens(const qkv_tokenizer *t, qkv_sentences *out,
                                const qkv_sentences *words, int target, qkv_error *err)
{
    if (t->kind != QKV_TOKENIZER_BPE) return sentences_copy(out, words, err);
    return qkv_bpe_encode_sentences(out, target ? &t->tgt_bpe : &t->src_bpe, words, err);
}

size_t qkv_tokenizer_decode(const qkv_tokenizer *t, char *out, size_t cap, const int *ids,
                            int n)
{
    return t->kind == QKV_TOKENIZER_BPE ? qkv_bpe_decode(out, cap, &t->tgt_bpe, ids, n)
                                        : qkv_vocab_decode(out, cap, &t->tgt, ids, n);
}

int qkv_tokenizer_word_ids(const qkv_tokenizer *t, const qkv_vocab *words, int *out, int cap,
                           const int *ids, int n)
{
    const size_t need = qkv_tokenizer_decode(t, NULL, 0, ids, n);
    char *text = malloc(need + 1), *save = NULL;
    if (!text) return -1;
    qkv_tokenizer_decode(t, text, need + 1, ids, n);
    int count = 0;
    for (char *w = strtok_r(text, " ", &save); w && count < cap; w = strtok_r(NULL, " ", &save)) {
        const int id = qkv_vocab_id(words, w);
        out[count] = id == QKV_UNK && strcmp(w, "<unk>") ? -1 - count : id;
        count++;
    }
    free(text);
    return count;
}
