/* SPDX-License-Identifier: MIT */
/* A model's tokenizer: the vocabularies, subword encodings and text.json of a model
 * directory, and the steps between text and ids that translating and scoring take. */
#include "text/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/json_fields.h"

int qkv_model_dir_file(char *path, size_t cap, const char *dir, const char *name)
{
    /* whether a name is there, not whether it reads: opening a FIFO would wait for a
     * writer, and the reader refuses what is not a regular file, naming it */
    struct stat sb;
    snprintf(path, cap, "%s/%s", dir, name);
    if (!stat(path, &sb)) return 1;
    char parent[4096];
    if ((size_t)snprintf(parent, sizeof parent, "%s/../%s", dir, name) >= sizeof parent ||
        strlen(parent) >= cap || stat(parent, &sb))
        return 0;
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
    qkv_status st = qkv_read_regular_file(path, QKV_MAX_CONFIG_BYTES, &text, &len, err);
    if (!st) st = qkv_json_parse(out, text, len, path, err);
    free(text);
    return st;
}

void qkv_tokenizer_free(qkv_tokenizer *t)
{
    if (!t) return;
    qkv_vocab_free(&t->src), qkv_vocab_free(&t->tgt);
    qkv_bpe_free(&t->src_bpe), qkv_bpe_free(&t->tgt_bpe);
    qkv_spm_free(t->src_spm), qkv_spm_free(t->tgt_spm);
    free(t->languages);
    memset(t, 0, sizeof *t);
}

/* A file name of text.json beside the model: a plain name, never a path out of the
 * directory. */
static qkv_status spm_name(char *name, size_t cap, const cJSON *o, const char *key,
                           const char *fallback, const char *dir, qkv_error *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    const char *n = cJSON_IsString(v) ? v->valuestring : fallback;
    if (v && (!cJSON_IsString(v) || !*n || strchr(n, '/') || !strcmp(n, "..") ||
              strlen(n) >= cap)) {
        char path[4096];
        qkv_model_dir_file(path, sizeof path, dir, "text.json");
        return qkv_fail(err, QKV_ERR_FORMAT, "%.400s: \"%s\" must be a file name beside it "
                        "(no '/')", path, key);
    }
    snprintf(name, cap, "%s", n);
    return QKV_OK;
}

/* text.json's "languages" object (code -> token) as t->languages' pairs; "language_source",
 * "language_target"; the default codes into src_lang / tgt_lang (cap bytes each). */
static qkv_status read_languages(qkv_tokenizer *t, const cJSON *o, const char *dir,
                                 char *src_lang, char *tgt_lang, size_t cap, qkv_error *err)
{
    const cJSON *l = cJSON_GetObjectItemCaseSensitive(o, "languages");
    *src_lang = *tgt_lang = '\0';
    if (!l) return QKV_OK;
    size_t bytes = 1;
    int ok = cJSON_IsObject(l);
    for (const cJSON *e = ok ? l->child : NULL; ok && e; e = e->next)
        if (!(ok = cJSON_IsString(e) && *e->string && *e->valuestring))
            break;
        else bytes += strlen(e->string) + strlen(e->valuestring) + 2;
    if (!ok) {
        char path[4096];
        qkv_model_dir_file(path, sizeof path, dir, "text.json");
        return qkv_fail(err, QKV_ERR_FORMAT, "%.400s: \"languages\" must map codes to tokens",
                        path);
    }
    char *at = t->languages = malloc(bytes);
    if (!at) return qkv_fail(err, QKV_ERR_NOMEM, "out of memory");
    for (const cJSON *e = l->child; e; e = e->next) {
        at = stpcpy(at, e->string) + 1;
        at = stpcpy(at, e->valuestring) + 1;
    }
    *at = '\0';
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(o, "language_source");
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(o, "language_target");
    t->prefixed_source = cJSON_IsString(s) && !strcmp(s->valuestring, "prefix");
    t->forced_target = cJSON_IsString(g) && !strcmp(g->valuestring, "forced");
    const cJSON *ds = cJSON_GetObjectItemCaseSensitive(o, "source_lang");
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(o, "target_lang");
    if (cJSON_IsString(ds)) snprintf(src_lang, cap, "%s", ds->valuestring);
    if (cJSON_IsString(dt)) snprintf(tgt_lang, cap, "%s", dt->valuestring);
    return QKV_OK;
}

/* The >>xxx<< tokens of a SentencePiece model's source vocabulary (OPUS-MT's multi-target
 * models) as its languages: a source starts with its target's. */
static qkv_status marian_languages(qkv_tokenizer *t, qkv_error *err)
{
    size_t bytes = 1;
    for (int i = 0; i < t->src.size; i++) {
        const char *w = qkv_vocab_token(&t->src, i);
        const size_t n = strlen(w);
        if (n > 4 && !strncmp(w, ">>", 2) && !strcmp(w + n - 2, "<<")) bytes += 2 * n;
    }
    if (bytes == 1) return QKV_OK;
    char *at = t->languages = malloc(bytes);
    if (!at) return qkv_fail(err, QKV_ERR_NOMEM, "out of memory");
    for (int i = 0; i < t->src.size; i++) {
        const char *w = qkv_vocab_token(&t->src, i);
        const size_t n = strlen(w);
        if (!(n > 4 && !strncmp(w, ">>", 2) && !strcmp(w + n - 2, "<<"))) continue;
        memcpy(at, w + 2, n - 4), at[n - 4] = '\0', at += n - 3;
        at = stpcpy(at, w) + 1;
    }
    *at = '\0';
    return QKV_OK;
}

/* The token of a language code, or NULL. */
static const char *language_token(const qkv_tokenizer *t, const char *code)
{
    for (const char *p = t->languages; p && *p;) {
        const char *token = p + strlen(p) + 1;
        if (!strcmp(p, code)) return token;
        p = token + strlen(token) + 1;
    }
    return NULL;
}

static qkv_status unknown_language(const qkv_tokenizer *t, const char *what, const char *code,
                                   qkv_error *err)
{
    if (!t->languages)
        return qkv_fail(err, QKV_ERR_ARG, "%s language '%.60s': the model has no languages to "
                        "choose from", what, code);
    char some[200] = "";
    size_t n = 0;
    int count = 0;
    for (const char *p = t->languages; *p; count++) {
        const char *token = p + strlen(p) + 1;
        if (count < 12 && n < sizeof some - 20)
            n += (size_t)snprintf(some + n, sizeof some - n, "%s%s", count ? ", " : "", p);
        p = token + strlen(token) + 1;
    }
    return qkv_fail(err, QKV_ERR_ARG, "%s language '%.60s' is not one of the model's %d (%s%s)",
                    what, code, count, some, count > 12 ? ", ..." : "");
}

qkv_status qkv_tokenizer_set_languages(qkv_tokenizer *t, const char *source, const char *target,
                                       qkv_error *err)
{
    if (source && *source) {
        const char *token = language_token(t, source);
        if (!token || !t->prefixed_source)
            return token ? qkv_fail(err, QKV_ERR_ARG, "source language '%.60s': the model reads "
                                    "its source without a language token", source)
                         : unknown_language(t, "source", source, err);
        t->src_prefix = qkv_vocab_id(&t->src, token);
    }
    if (target && *target) {
        const char *token = language_token(t, target);
        if (!token) return unknown_language(t, "target", target, err);
        if (t->forced_target) t->tgt_forced = qkv_vocab_id(&t->tgt, token);
        else t->src_prefix = qkv_vocab_id(&t->src, token);
    }
    return QKV_OK;
}

/* text.json's "detokenize" (a SentencePiece model's) and "clean_up_spaces". */
static qkv_status read_detokenize(qkv_tokenizer *t, const cJSON *o, const char *dir,
                                  qkv_error *err)
{
    static const char *const names[] = {"sentencepiece", "marian", "m2m100", "nllb"};
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(o, "detokenize");
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(o, "clean_up_spaces");
    int k = 0;
    if (cJSON_IsString(d))
        while (k < 4 && strcmp(d->valuestring, names[k])) k++;
    if ((d && (!cJSON_IsString(d) || k == 4)) || (c && !cJSON_IsBool(c))) {
        char path[4096];
        qkv_model_dir_file(path, sizeof path, dir, "text.json");
        return qkv_fail(err, QKV_ERR_FORMAT, "%.400s: %s", path,
                        c && !cJSON_IsBool(c) ? "\"clean_up_spaces\" must be true or false"
                        : "\"detokenize\" must be \"sentencepiece\", \"marian\", \"m2m100\" "
                          "or \"nllb\"");
    }
    t->detokenize = (qkv_detokenizer)k;
    t->clean_up_spaces = cJSON_IsTrue(c);
    return QKV_OK;
}

/* text.json: the tokenizer's kind, whether sources start with <bos>, and a SentencePiece
 * model's files (src_name, tgt_name: cap bytes each). */
static qkv_status read_text_json(qkv_tokenizer *t, const char *dir, char *src_name,
                                 char *tgt_name, size_t cap, char *src_lang, char *tgt_lang,
                                 qkv_error *err)
{
    static const char *const kinds[] = {"d2l", "whitespace", "bpe", "spm"};
    snprintf(src_name, cap, "source.spm"), snprintf(tgt_name, cap, "target.spm");
    cJSON *o;
    qkv_status st = model_dir_json(&o, dir, "text.json", err);
    if (st || !o) return st;
    const cJSON *tk = cJSON_GetObjectItemCaseSensitive(o, "tokenizer");
    if (cJSON_IsString(tk)) {
        int k = 0;
        while (k < 4 && strcmp(tk->valuestring, kinds[k])) k++;
        if (!strcmp(tk->valuestring, "sentencepiece")) k = QKV_TOKENIZER_SPM; /* a synonym */
        if (k == 4) {
            char path[4096];
            qkv_model_dir_file(path, sizeof path, dir, "text.json");
            st = qkv_fail(err, QKV_ERR_FORMAT, "%s: unknown tokenizer \"%.100s\"", path,
                          tk->valuestring);
        }
        t->kind = (qkv_tokenizer_kind)k;
    }
    t->source_bos = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "source_bos"));
    const cJSON *kase = cJSON_GetObjectItemCaseSensitive(o, "case");
    t->keep_case = t->kind == QKV_TOKENIZER_SPM ||
                   (cJSON_IsString(kase) && !strcmp(kase->valuestring, "keep"));
    if (!st) st = spm_name(src_name, cap, o, "source_spm", "source.spm", dir, err);
    if (!st) st = spm_name(tgt_name, cap, o, "target_spm", "target.spm", dir, err);
    if (!st) st = read_detokenize(t, o, dir, err);
    if (!st) st = read_languages(t, o, dir, src_lang, tgt_lang, cap, err);
    cJSON_Delete(o);
    return st;
}

static qkv_status load_spm(qkv_spm **s, const char *dir, const char *name, qkv_error *err)
{
    char path[4096];
    qkv_model_dir_file(path, sizeof path, dir, name);
    return qkv_spm_load(s, path, err);
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
    char src_spm[256], tgt_spm[256], src_lang[256] = "", tgt_lang[256] = "";
    if (!st) st = read_text_json(t, dir, src_spm, tgt_spm, sizeof src_spm, src_lang, tgt_lang, err);
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
    if (!st && t->kind == QKV_TOKENIZER_SPM) {
        st = load_spm(&t->src_spm, dir, src_spm, err);
        if (!st) st = load_spm(&t->tgt_spm, dir, tgt_spm, err);
        if (!st && !t->languages) st = marian_languages(t, err);
    }
    /* text.json's default languages: one the model lacks is its directory's error */
    if (!st) st = qkv_tokenizer_set_languages(t, src_lang, tgt_lang, err);
    if (st) qkv_tokenizer_free(t);
    return st;
}

qkv_status qkv_tokenizer_words(const qkv_tokenizer *t, qkv_sentences *out, const char *text,
                               size_t len, const char *name, qkv_error *err)
{
    if (t->kind != QKV_TOKENIZER_WHITESPACE && !t->keep_case)
        return qkv_sentences_from_text(out, text, len, name, err);
    qkv_status st = qkv_sentences_split(out, text, len, name, err);
    /* a cased byte-pair model learned its pieces from NFC text (qkv_corpus_nfc in training):
     * "é" typed as e + U+0301 must give the pieces of the precomposed "é" */
    if (!st && t->kind == QKV_TOKENIZER_BPE && t->keep_case && (st = qkv_sentences_nfc(out, err)))
        qkv_sentences_free(out);
    return st;
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

/* Each sentence's words joined by spaces (the raw line, up to runs of whitespace, which
 * SentencePiece's normaliser collapses anyway) as the pieces of spm. */
static qkv_status spm_sentences(qkv_sentences *out, const qkv_spm *spm,
                                const qkv_sentences *words, qkv_error *err)
{
    memset(out, 0, sizeof *out);
    size_t line_cap = 64, n_pieces = 0, n_bytes = 0, piece_cap = 64, byte_cap = 256;
    char *line = malloc(line_cap), *bytes = malloc(byte_cap);
    size_t *at = malloc(piece_cap * sizeof *at);
    size_t *start = malloc(((size_t)words->count + 1) * sizeof *start);
    qkv_status st = line && bytes && at && start ? QKV_OK
                    : qkv_fail(err, QKV_ERR_NOMEM, "out of memory for %d sentences",
                               words->count);
    if (start) start[0] = 0;
    for (int i = 0; !st && i < words->count; i++) {
        size_t len = 0;
        for (size_t k = words->start[i]; !st && k < words->start[i + 1]; k++) {
            const size_t w = strlen(words->tokens[k]);
            if (len + w + 2 > line_cap) {
                char *more = realloc(line, 2 * (len + w + 2));
                if (!more) st = qkv_fail(err, QKV_ERR_NOMEM, "out of memory");
                else line = more, line_cap = 2 * (len + w + 2);
            }
            if (st) break;
            if (len) line[len++] = ' ';
            memcpy(line + len, words->tokens[k], w);
            len += w;
        }
        qkv_sentences pieces = {0};
        if (!st) st = qkv_spm_encode_pieces(spm, line ? line : "", len, &pieces, err);
        for (size_t k = 0; !st && k < pieces.n_tokens; k++) {
            const size_t w = strlen(pieces.tokens[k]) + 1;
            if (n_pieces == piece_cap) {
                size_t *more = realloc(at, 2 * piece_cap * sizeof *at);
                if (!more) st = qkv_fail(err, QKV_ERR_NOMEM, "out of memory");
                else at = more, piece_cap *= 2;
            }
            if (!st && n_bytes + w > byte_cap) {
                char *more = realloc(bytes, 2 * (n_bytes + w));
                if (!more) st = qkv_fail(err, QKV_ERR_NOMEM, "out of memory");
                else bytes = more, byte_cap = 2 * (n_bytes + w);
            }
            if (st) break;
            at[n_pieces++] = n_bytes;
            memcpy(bytes + n_bytes, pieces.tokens[k], w);
            n_bytes += w;
        }
        qkv_sentences_free(&pieces);
        if (!st) start[i + 1] = n_pieces;
    }
    const char **tokens = st ? NULL : malloc((n_pieces ? n_pieces : 1) * sizeof *tokens);
    if (!st && !tokens) st = qkv_fail(err, QKV_ERR_NOMEM, "out of memory for pieces");
    free(line);
    if (st) {
        free(bytes), free(at), free(start);
        return st;
    }
    for (size_t k = 0; k < n_pieces; k++) tokens[k] = bytes + at[k];
    free(at);
    *out = (qkv_sentences){words->count, n_pieces, tokens, start, bytes};
    return QKV_OK;
}

qkv_status qkv_tokenizer_tokens(const qkv_tokenizer *t, qkv_sentences *out,
                                const qkv_sentences *words, int target, qkv_error *err)
{
    if (t->kind == QKV_TOKENIZER_SPM)
        return spm_sentences(out, target ? t->tgt_spm : t->src_spm, words, err);
    if (t->kind != QKV_TOKENIZER_BPE) return sentences_copy(out, words, err);
    return qkv_bpe_encode_sentences(out, target ? &t->tgt_bpe : &t->src_bpe, words, err);
}

/* Every "▁" (U+2581, UTF-8 E2 96 81) of text as a space, in place. */
static void metaspace_to_spaces(char *text)
{
    char *w = text;
    for (const char *r = text; *r;)
        if (!strncmp(r, "\xe2\x96\x81", 3)) *w++ = ' ', r += 3;
        else *w++ = *r++;
    *w = '\0';
}

/* Python's str.strip() for the whitespace SentencePiece's normaliser leaves: ASCII's. */
static void strip_spaces(char *text)
{
    size_t end = strlen(text), begin = 0;
    while (end > 0 && strchr(" \t\n\v\f\r", text[end - 1])) end--;
    while (begin < end && strchr(" \t\n\v\f\r", text[begin])) begin++;
    memmove(text, text + begin, end - begin);
    text[end - begin] = '\0';
}

/* transformers' clean_up_tokenization: its replacements in its order, each over the whole
 * text, in place (every one shortens). */
static void clean_up_spaces(char *text)
{
    static const char *const from[] = {" .", " ?", " !", " ,", " ' ", " n't", " 'm", " 's",
                                       " 've", " 're"};
    static const char *const to[] = {".", "?", "!", ",", "'", "n't", "'m", "'s", "'ve", "'re"};
    for (size_t k = 0; k < sizeof from / sizeof *from; k++) {
        const size_t nf = strlen(from[k]), nt = strlen(to[k]);
        char *w = text;
        for (const char *r = text; *r;)
            if (!strncmp(r, from[k], nf)) memcpy(w, to[k], nt), w += nt, r += nf;
            else *w++ = *r++;
        *w = '\0';
    }
}

/* The pieces concatenated (NllbTokenizer's "".join); NULL when out of memory. */
static char *join_pieces(const char *const *pieces, int n)
{
    size_t len = 1;
    for (int i = 0; i < n; i++) len += strlen(pieces[i]);
    char *text = malloc(len), *at = text;
    for (int i = 0; text && i < n; i++) at = stpcpy(at, pieces[i]);
    if (text) *at = '\0';
    return text;
}

/* Whether token is one of the model's language tokens. */
static int is_language_token(const qkv_tokenizer *t, const char *token)
{
    for (const char *p = t->languages; p && *p;) {
        const char *tok = p + strlen(p) + 1;
        if (!strcmp(tok, token)) return 1;
        p = tok + strlen(tok) + 1;
    }
    return 0;
}

/* The text of target ids up to the first <eos>: their pieces (the target vocabulary's tokens,
 * <pad> and <bos> skipped, ids outside it read as <unk>) detokenised as text.json says.
 * Out of memory gives "". */
static size_t spm_decode(const qkv_tokenizer *t, char *out, size_t cap, const int *ids, int n)
{
    const char **pieces = malloc((n > 0 ? (size_t)n : 1) * sizeof *pieces);
    char *text = NULL;
    int k = 0;
    const int hf = t->detokenize != QKV_DETOK_SPM;
    for (int i = 0; pieces && i < n && ids[i] != QKV_EOS; i++) {
        if (ids[i] == QKV_PAD || ids[i] == QKV_BOS) continue;
        const char *p = qkv_vocab_token(&t->tgt, ids[i]);
        if (hf && (!p || ids[i] == QKV_UNK)) continue; /* skip_special_tokens drops <unk> */
        /* and NLLB's and M2M100's language tokens (special there; MarianTokenizer prints
         * a >>xxx<< the model produces) */
        if (p && t->forced_target && is_language_token(t, p)) continue;
        pieces[k++] = p ? p : "<unk>";
    }
    qkv_error err = {0};
    if (pieces && t->detokenize == QKV_DETOK_NLLB) text = join_pieces(pieces, k);
    else if (pieces && qkv_spm_decode_pieces(t->tgt_spm, pieces, k, &text, &err)) text = NULL;
    free(pieces);
    if (text && hf) {
        /* sentencepiece passes a piece it lacks through as it is, "▁" and all; the
         * tokenizers of transformers (and OPUS-MT's postprocessing) read it as a space */
        if (t->detokenize != QKV_DETOK_M2M100) metaspace_to_spaces(text);
        strip_spaces(text);
    } else if (text) {
        /* a translation ending in a lone "▁" piece decodes with a trailing space: none is
         * text */
        size_t end = strlen(text);
        while (end > 0 && text[end - 1] == ' ') text[--end] = '\0';
    }
    if (text && t->clean_up_spaces) clean_up_spaces(text);
    const size_t len = snprintf(out, cap, "%s", text ? text : "");
    free(text);
    return len;
}

size_t qkv_tokenizer_decode(const qkv_tokenizer *t, char *out, size_t cap, const int *ids,
                            int n)
{
    if (t->kind == QKV_TOKENIZER_SPM) return spm_decode(t, out, cap, ids, n);
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
