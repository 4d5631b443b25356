/* SPDX-License-Identifier: MIT */
/* The translator: a model directory opened once, then sentences in and text out. Sources
 * are tokenised as the model's text was, cut to the model's length, decoded in batches
 * (greedy or beam search over the KV cache) and turned back into text; what the caller
 * should know (truncation) comes back in the results, never on a terminal. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "inference/decode.h"
#include "text/tokenizer.h"

struct qkv_translator {
    qkv_transformer *model;
    qkv_tokenizer tok;
    int num_steps; /* train.json's, 0 if unknown */
};

/* The tokenizer must give ids the model has rows for; dir (or NULL) names the files. */
static qkv_status check_vocab(const qkv_transformer *m, const qkv_tokenizer *tok,
                              const char *dir, qkv_error *err)
{
    const qkv_transformer_config *c = qkv_transformer_get_config(m);
    if (tok->src.size == c->src_vocab && tok->tgt.size == c->tgt_vocab) return QKV_OK;
    return qkv_fail(err, dir ? QKV_ERR_FORMAT : QKV_ERR_ARG, "%s%sthe vocabularies have %d and "
                    "%d tokens but the model was built for %d and %d", dir ? dir : "",
                    dir ? ": " : "", tok->src.size, tok->tgt.size, c->src_vocab, c->tgt_vocab);
}

qkv_status qkv_translator_create(qkv_translator **out, qkv_transformer *m, qkv_tokenizer *tok,
                                 int num_steps, qkv_error *err)
{
    *out = NULL;
    if (!m || !tok) return qkv_fail(err, QKV_ERR_ARG, "a translator needs a model and a tokenizer");
    qkv_status st = check_vocab(m, tok, NULL, err);
    if (st) return st;
    if (num_steps < 0 || num_steps > qkv_transformer_get_config(m)->max_len)
        return qkv_fail(err, QKV_ERR_ARG, "num_steps %d outside [0, the model's max_len %d]",
                        num_steps, qkv_transformer_get_config(m)->max_len);
    qkv_translator *t = calloc(1, sizeof *t);
    if (!t) return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for a translator");
    t->model = m, t->tok = *tok, t->num_steps = num_steps;
    memset(tok, 0, sizeof *tok);
    *out = t;
    return QKV_OK;
}

/* train.json's num_steps when it is a length the model accepts; 0 otherwise. */
static qkv_status read_num_steps(int *num_steps, const char *dir, const qkv_transformer *m,
                                 qkv_error *err)
{
    cJSON *o;
    *num_steps = 0;
    qkv_status st = model_dir_json(&o, dir, "train.json", err);
    const cJSON *ns = cJSON_GetObjectItemCaseSensitive(o, "num_steps");
    if (cJSON_IsNumber(ns) && ns->valuedouble >= 1 &&
        ns->valuedouble <= qkv_transformer_get_config(m)->max_len)
        *num_steps = (int)ns->valuedouble;
    cJSON_Delete(o);
    return st;
}

qkv_status qkv_translator_open(qkv_translator **out, const char *dir, qkv_error *err)
{
    *out = NULL;
    qkv_transformer *m = NULL;
    qkv_tokenizer tok = {0};
    int num_steps = 0;
    qkv_status st = qkv_transformer_load(&m, dir, err);
    if (!st) st = qkv_tokenizer_load(&tok, dir, err);
    if (!st) st = check_vocab(m, &tok, dir, err);
    if (!st) st = read_num_steps(&num_steps, dir, m, err);
    if (!st) st = qkv_translator_create(out, m, &tok, num_steps, err);
    if (st) {
        qkv_transformer_free(m);
        qkv_tokenizer_free(&tok);
    }
    return st;
}

void qkv_translator_free(qkv_translator *t)
{
    if (!t) return;
    qkv_transformer_free(t->model);
    qkv_tokenizer_free(&t->tok);
    free(t);
}

qkv_transformer *qkv_translator_model(qkv_translator *t) { return t->model; }
const qkv_tokenizer *qkv_translator_tokenizer(const qkv_translator *t) { return &t->tok; }
int qkv_translator_num_steps(const qkv_translator *t) { return t->num_steps; }

qkv_translate_options qkv_translate_default_options(void)
{
    return (qkv_translate_options){.beam = 1, .n_best = 1, .alpha = 0.0f, .max_len = 0,
                                   .max_len_a = 1.5f, .max_len_b = 10, .batch = 32,
                                   .precision = QKV_PRECISION_FP32};
}

void qkv_translations_free(qkv_translations *r)
{
    if (!r) return;
    for (size_t h = 0; r->text && h < (size_t)r->count * r->n_best; h++) free(r->text[h]);
    free(r->text), free(r->ids), free(r->len), free(r->score);
    free(r->src_len), free(r->unknown);
    memset(r, 0, sizeof *r);
}

qkv_status translate_check_options(const qkv_translate_options *o, int batched,
                                  qkv_error *err)
{
    if (o->beam < 1 || o->n_best < 1 || o->n_best > o->beam || !(o->alpha >= 0.0f) ||
        !isfinite(o->alpha) || (unsigned)o->stop > QKV_BEAM_STOP_HF_NEVER)
        return qkv_fail(err, QKV_ERR_ARG, "translation needs beam >= 1, 1 <= n_best <= beam, "
                        "finite alpha >= 0 and a known stopping rule (got %d, %d, %g, %d)",
                        o->beam, o->n_best, (double)o->alpha, (int)o->stop);
    if (o->max_len < 0 || !(o->max_len_a >= 0.0f) || o->max_len_a > 1e6f || o->max_len_b < 0)
        return qkv_fail(err, QKV_ERR_ARG, "translation needs max_len >= 0, max_len_a in [0, 1e6] "
                        "and max_len_b >= 0 (got %d, %g, %d)", o->max_len, (double)o->max_len_a,
                        o->max_len_b);
    if (batched && o->batch < 1)
        return qkv_fail(err, QKV_ERR_ARG, "translation needs batch >= 1 (got %d)", o->batch);
    return QKV_OK;
}

/* Tokens a source occupies in the encoder: its own, <eos>, and <bos> when the model's
 * sources start with one. */
static int source_len(const qkv_translator *t, const qkv_sentences *src, int i)
{
    return qkv_sentence_len(src, i) + 1 + t->tok.source_bos + (t->tok.src_prefix > 0);
}

/* Sentence i's limit: floor(a * n + b) for its n tokens, at least 1, at most cap. */
int translate_length_limit(const qkv_translate_options *o, int n, int cap)
{
    if (o->max_len_a == 0.0f && o->max_len_b == 0) return cap;
    const double l = floor((double)o->max_len_a * n + o->max_len_b);
    return l < 1.0 ? 1 : l > cap ? cap : (int)l;
}

/* Empty results for count sentences, each sentence's length limit (limits, count) and which
 * sources the model's max_len cuts. */
static qkv_status results_init(qkv_translations *r, int **limits, const qkv_translator *t,
                               const qkv_sentences *src, const qkv_translate_options *o,
                               qkv_error *err)
{
    const int limit = qkv_transformer_get_config(t->model)->max_len;
    const int cap = o->max_len && o->max_len < limit ? o->max_len : limit;
    r->count = src->count, r->n_best = o->n_best, r->max_len = 1;
    r->first_truncated = -1;
    *limits = malloc(((size_t)src->count + 1) * sizeof **limits);
    if (!*limits) return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for %d translations",
                                  r->count);
    for (int i = 0; i < src->count; i++) {
        (*limits)[i] = translate_length_limit(o, qkv_sentence_len(src, i), cap);
        if ((*limits)[i] > r->max_len) r->max_len = (*limits)[i];
        const int n = source_len(t, src, i);
        if (n <= limit) continue;
        if (!r->truncated++) r->first_truncated = i, r->first_truncated_len = n;
    }
    const size_t H = (size_t)r->count * r->n_best;
    if (!H) return QKV_OK;
    r->src_len = malloc((size_t)r->count * sizeof *r->src_len);
    r->unknown = malloc((size_t)r->count * sizeof *r->unknown);
    if (!r->src_len || !r->unknown)
        return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for %d translations", r->count);
    for (int i = 0; i < src->count; i++) {
        r->src_len[i] = qkv_sentence_len(src, i), r->unknown[i] = 0;
        for (size_t k = src->start[i]; k < src->start[i + 1]; k++)
            r->unknown[i] += qkv_vocab_id(&t->tok.src, src->tokens[k]) < QKV_N_RESERVED;
    }
    r->text = calloc(H, sizeof *r->text);
    r->ids = malloc(H * r->max_len * sizeof *r->ids);
    r->len = malloc(H * sizeof *r->len), r->score = malloc(H * sizeof *r->score);
    if (!r->text || !r->ids || !r->len || !r->score)
        return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for %d translations", r->count);
    return QKV_OK;
}

/* Decoding's buffers for batches of up to B sentences of up to T source tokens. */
typedef struct {
    int *src, *valid, *out, *out_len;
    double *score;
} batch_buffers;

static void buffers_free(batch_buffers *b)
{
    free(b->src), free(b->valid), free(b->out), free(b->out_len), free(b->score);
}

/* Whatever fails to allocate is NULL, for buffers_free. */
static qkv_status buffers_init(batch_buffers *b, int B, int T, const qkv_translations *r,
                               qkv_error *err)
{
    const size_t hyps = (size_t)B * r->n_best;
    b->src = malloc((size_t)B * T * sizeof *b->src);
    b->valid = malloc((size_t)B * sizeof *b->valid);
    b->out = malloc(hyps * r->max_len * sizeof *b->out);
    b->out_len = malloc(hyps * sizeof *b->out_len), b->score = malloc(hyps * sizeof *b->score);
    if (b->src && b->valid && b->out && b->out_len && b->score) return QKV_OK;
    return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for a batch of %d sentences", B);
}

void source_rows(int *ids, int *valid, int *Ts, const qkv_tokenizer *tok,
                 const qkv_sentences *src, int first, int B, int max_len)
{
    /* [<bos>] [language token] words <eos> */
    const int lead = tok->source_bos, bos = lead + (tok->src_prefix > 0);
    *Ts = 1;
    for (int i = 0; i < B; i++) {
        const int n = qkv_sentence_len(src, first + i) + 1 + bos;
        if (n > *Ts) *Ts = n < max_len ? n : max_len;
    }
    for (int i = 0; i < B; i++) {
        const char *const *words = src->tokens + src->start[first + i];
        int *row = ids + (size_t)i * *Ts;
        if (lead) row[0] = QKV_BOS;
        if (bos > lead && bos <= *Ts) row[lead] = tok->src_prefix;
        const int n = qkv_sentence_len(src, first + i);
        qkv_vocab_encode(row + bos, &tok->src, words, n, *Ts - bos);
        /* a source's own tokens are text: one spelling <pad>, <bos> or <eos> is unknown (a
         * <pad> would be masked out, with everything after it: valid_len counts non-pads) */
        for (int k = bos; k < bos + n && k < *Ts; k++)
            if (row[k] < QKV_N_RESERVED) row[k] = QKV_UNK;
        valid[i] = bos + n + 1 < *Ts ? bos + n + 1 : *Ts; /* the words and <eos>, as fit */
    }
}

int translate_greedy(const qkv_translate_options *o)
{
    /* K = 1 is greedy decoding, except that the rules that bound what a live hypothesis can
     * still reach by the longest length's lp may carry on past an <eos> for a longer one */
    return o->beam == 1 && o->n_best == 1 &&
           (o->alpha == 0.0f ||
            (o->stop != QKV_BEAM_STOP_BOUND && o->stop != QKV_BEAM_STOP_HF_NEVER));
}

/* Every source decoded, batch by batch, into r's ids, lengths and scores. */
static qkv_status decode_all(qkv_translations *r, qkv_translator *t, const qkv_sentences *src,
                             const int *limits, const qkv_translate_options *o, qkv_error *err)
{
    const int limit = qkv_transformer_get_config(t->model)->max_len, N = r->n_best;
    const int greedy = translate_greedy(o), L = r->max_len;
    const int Bmax = o->batch < src->count ? o->batch : src->count;
    int longest = 1;
    for (int i = 0; i < src->count; i++) {
        const int n = source_len(t, src, i);
        if (n > longest) longest = n < limit ? n : limit;
    }
    batch_buffers b;
    qkv_status st = buffers_init(&b, Bmax, longest, r, err);
    qkv_beam_options bo = {o->beam, o->n_best, L, o->alpha, o->stop, NULL};
    /* the model's rules, and a multilingual model's target language: its token forced first */
    const decoder_info info = decoder_transformer_info(t->model);
    const int forced = t->tok.tgt_forced;
    decoding_rules rules = decoding_rules_of(&info);
    rules.prefix = &forced, rules.n_prefix = forced > 0;
    qkv_beam_results br = {b.out, b.out_len, b.score, NULL};
    for (int first = 0; !st && first < src->count; first += Bmax) {
        const int B = src->count - first < Bmax ? src->count - first : Bmax;
        int T;
        source_rows(b.src, b.valid, &T, &t->tok, src, first, B, limit);
        bo.max_lens = limits + first;
        st = greedy ? greedy_decode(t->model, b.src, b.valid, B, T, L, limits + first, &rules,
                                    b.out, b.out_len, err)
                    : beam_decode(t->model, b.src, b.valid, B, T, &bo, &rules, &br, err);
        for (int i = 0; !st && i < B * N; i++) {
            const size_t h = (size_t)first * N + i;
            memcpy(r->ids + h * L, b.out + (size_t)i * L,
                   (size_t)(b.out_len[i] > 0 ? b.out_len[i] : 0) * sizeof *r->ids);
            r->len[h] = b.out_len[i];
            r->score[h] = greedy ? NAN : b.score[i];
        }
    }
    buffers_free(&b);
    return st;
}

/* The text of every hypothesis found. */
static qkv_status detokenize(qkv_translations *r, const qkv_translator *t, qkv_error *err)
{
    for (size_t h = 0; h < (size_t)r->count * r->n_best; h++) {
        if (r->len[h] < 0) continue;
        const int *ids = r->ids + h * r->max_len;
        const size_t need = qkv_tokenizer_decode(&t->tok, NULL, 0, ids, r->len[h]);
        if (!(r->text[h] = malloc(need + 1)))
            return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for a translation's text");
        qkv_tokenizer_decode(&t->tok, r->text[h], need + 1, ids, r->len[h]);
    }
    return QKV_OK;
}

qkv_status qkv_translator_set_languages(qkv_translator *t, const char *source,
                                        const char *target, qkv_error *err)
{
    return qkv_tokenizer_set_languages(&t->tok, source, target, err);
}

qkv_status qkv_translate_tokens(qkv_translations *out, qkv_translator *t,
                                const qkv_sentences *src, const qkv_translate_options *o,
                                qkv_error *err)
{
    memset(out, 0, sizeof *out);
    qkv_status st = translate_check_options(o, 1, err);
    if (st) return st;
    if (t->tok.forced_target && t->tok.languages && !t->tok.tgt_forced)
        return qkv_fail(err, QKV_ERR_ARG, "the model translates into many languages: which one "
                        "(--target-lang)?");
    if (qkv_transformer_get_precision(t->model) != o->precision)
        st = qkv_transformer_set_precision(t->model, o->precision, err);
    int *limits = NULL;
    if (!st) st = results_init(out, &limits, t, src, o, err);
    if (!st && src->count) st = decode_all(out, t, src, limits, o, err);
    if (!st && src->count) st = detokenize(out, t, err);
    free(limits);
    if (st) qkv_translations_free(out);
    return st;
}

qkv_status qkv_translate_words(qkv_translations *out, qkv_translator *t,
                               const qkv_sentences *words, const qkv_translate_options *o,
                               qkv_error *err)
{
    memset(out, 0, sizeof *out);
    qkv_sentences src = {0};
    qkv_status st = translate_check_options(o, 1, err);
    if (!st) st = qkv_tokenizer_tokens(&t->tok, &src, words, 0, err);
    if (!st) st = qkv_translate_tokens(out, t, &src, o, err);
    qkv_sentences_free(&src);
    return st;
}

/* The sources as words, one sentence each. */
static qkv_status source_words(qkv_sentences *words, const qkv_tokenizer *tok,
                               const char *const *sources, int n, qkv_error *err)
{
    memset(words, 0, sizeof *words);
    /* one line per source, so that the tokenizer's messages name a source by its line */
    size_t bytes = 1;
    for (int i = 0; i < n; i++) {
        if (!sources[i] || strchr(sources[i], '\n'))
            return qkv_fail(err, QKV_ERR_ARG, "source:%d: %s", i + 1, sources[i] ?
                            "a line break inside (one sentence per source)" : "NULL");
        bytes += strlen(sources[i]) + 1;
    }
    char *text = malloc(bytes), *at = text;
    if (!text) return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for %d sources", n);
    for (int i = 0; i < n; i++) {
        const size_t len = strlen(sources[i]);
        memcpy(at, sources[i], len);
        at += len, *at++ = '\n';
    }
    qkv_status st = qkv_tokenizer_words(tok, words, text, (size_t)(at - text), "source", err);
    free(text);
    return st;
}

qkv_status source_tokens(qkv_sentences *tokens, const qkv_tokenizer *tok,
                         const char *const *sources, int n, qkv_error *err)
{
    qkv_sentences words;
    qkv_status st = source_words(&words, tok, sources, n, err);
    if (!st) st = qkv_tokenizer_tokens(tok, tokens, &words, 0, err);
    qkv_sentences_free(&words);
    return st;
}

qkv_status qkv_translate(qkv_translations *out, qkv_translator *t, const char *const *sources,
                         int n, const qkv_translate_options *o, qkv_error *err)
{
    memset(out, 0, sizeof *out);
    qkv_status st = translate_check_options(o, 1, err);
    if (st) return st;
    if (n < 0 || (n > 0 && !sources))
        return qkv_fail(err, QKV_ERR_ARG, "translation needs n >= 0 sources and an array of "
                        "them (got %d%s)", n, sources ? "" : " and NULL");
    qkv_sentences words;
    st = source_words(&words, &t->tok, sources, n, err);
    if (!st) st = qkv_translate_words(out, t, &words, o, err);
    qkv_sentences_free(&words);
    return st;
}
