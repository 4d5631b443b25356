/* SPDX-License-Identifier: MIT */
/* The batch decoder (qkv/translator.h): continuous batching of translation, greedy or by beam
 * search, the slots of inference/slots.h over the translator's model. A sentence is tokenised
 * and encoded as qkv_translate does it (source_tokens, source_rows), starts from the model's
 * start token, is filtered by the model's rules, searched as qkv_translate searches it (greedy
 * decoding under the same condition, else a beam of its own) and limited as qkv_translate
 * limits it, so that each gets the translations qkv_translate gives it with the same options. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "inference/decode.h"
#include "inference/slots.h"

struct qkv_batch_decoder {
    qkv_translator *t;
    slots *s;
    int *ids, *valid; /* (slots * max_len), (slots): sources being encoded */
    slot_goal *goals; /* (slots) */
    struct {          /* (slots) what a slot's sentence was given, for its results */
        int n_best, limit, greedy, src_len, unknown, src_tokens;
    } *sent;
};

qkv_status qkv_batch_decoder_create(qkv_batch_decoder **out, qkv_translator *t, int n,
                                    qkv_error *err)
{
    *out = NULL;
    if (!t || n < 1)
        return qkv_fail(err, QKV_ERR_ARG, "a batch decoder needs a translator and slots >= 1 "
                        "(got %d)", n);
    qkv_transformer *m = qkv_translator_model(t);
    const int T = qkv_transformer_get_config(m)->max_len;
    qkv_batch_decoder *bd = calloc(1, sizeof *bd);
    if (!bd) return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for a batch decoder");
    bd->t = t;
    bd->ids = malloc((size_t)n * T * sizeof *bd->ids);
    bd->valid = malloc((size_t)n * sizeof *bd->valid);
    bd->goals = malloc((size_t)n * sizeof *bd->goals);
    bd->sent = malloc((size_t)n * sizeof *bd->sent);
    if (!bd->ids || !bd->valid || !bd->goals || !bd->sent) {
        qkv_batch_decoder_free(bd);
        return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for a batch decoder of %d slots", n);
    }
    decoder *d = NULL;
    qkv_status st = decoder_create_transformer(&d, m, n, T, n, T, err);
    if (!st && (st = slots_create(&bd->s, d, n, err))) decoder_free(d);
    if (st) return qkv_batch_decoder_free(bd), st;
    *out = bd;
    return QKV_OK;
}

void qkv_batch_decoder_free(qkv_batch_decoder *bd)
{
    if (!bd) return;
    slots_free(bd->s);
    free(bd->ids), free(bd->valid), free(bd->goals), free(bd->sent);
    free(bd);
}

int qkv_batch_decoder_slots(const qkv_batch_decoder *bd) { return slots_count(bd->s); }
int qkv_batch_decoder_free_slots(const qkv_batch_decoder *bd) { return slots_in(bd->s, SLOT_FREE); }
int qkv_batch_decoder_running(const qkv_batch_decoder *bd)
{
    return slots_in(bd->s, SLOT_RUNNING);
}


qkv_status qkv_batch_decoder_add_with(qkv_batch_decoder *bd, const char *const *sources, int n,
                                      const qkv_translate_options *o, int *slot, qkv_error *err)
{
    const qkv_tokenizer *tk = qkv_translator_tokenizer(bd->t);
    const decoder_info info = slots_info(bd->s);
    if (n < 1 || !sources || !slot || !o)
        return qkv_fail(err, QKV_ERR_ARG, "a batch decoder takes n >= 1 sources (got %d)", n);
    qkv_status st = translate_check_options(o, 0, err);
    if (st) return st;
    const int greedy = translate_greedy(o); /* where qkv_translate decodes greedily */
    const int rows = greedy ? n : n * o->beam, free_rows = slots_in(bd->s, SLOT_FREE);
    if (rows > free_rows)
        return qkv_fail(err, QKV_ERR_ARG, "%d sources need %d rows but there are %d free slots", n,
                        rows, free_rows);
    if (tk->forced_target && tk->languages && !tk->tgt_forced)
        return qkv_fail(err, QKV_ERR_ARG, "the model translates into many languages: which one "
                        "(qkv_translator_set_languages)?");
    qkv_sentences src = {0};
    if ((st = source_tokens(&src, tk, sources, n, err))) return st;
    /* each translation's length as qkv_translate allows it */
    const int cap = o->max_len && o->max_len < info.max_len ? o->max_len : info.max_len;
    slot_goal plain = {1, 1, {0.0f, 0, 1.0f}, 0, decoding_rules_of(&info), 0, {0}};
    /* a multilingual model's target language: its token forced first (copied by the slot) */
    const int forced = tk->tgt_forced;
    plain.rules.prefix = &forced, plain.rules.n_prefix = forced > 0;
    for (int i = 0; i < n; i++) {
        slot_goal *g = &bd->goals[i];
        *g = plain;
        g->tokens = translate_length_limit(o, qkv_sentence_len(&src, i), cap);
        if (!greedy)
            g->beam = (qkv_beam_options){o->beam, o->n_best, g->tokens, o->alpha, o->stop, NULL};
    }
    int Ts;
    source_rows(bd->ids, bd->valid, &Ts, tk, &src, 0, n, info.max_len);
    st = slots_start_sources(bd->s, bd->ids, bd->valid, n, Ts, bd->goals, slot, err);
    for (int i = 0; !st && i < n; i++) {
        const int len = qkv_sentence_len(&src, i);
        int unknown = 0;
        for (size_t k = src.start[i]; k < src.start[i + 1]; k++)
            unknown += qkv_vocab_id(&tk->src, src.tokens[k]) < QKV_N_RESERVED;
        bd->sent[slot[i]].n_best = greedy ? 1 : o->n_best;
        bd->sent[slot[i]].limit = bd->goals[i].tokens, bd->sent[slot[i]].greedy = greedy;
        bd->sent[slot[i]].src_len = len, bd->sent[slot[i]].unknown = unknown;
        bd->sent[slot[i]].src_tokens = len + 1 + tk->source_bos + (tk->src_prefix > 0);
    }
    qkv_sentences_free(&src);
    return st;
}

qkv_status qkv_batch_decoder_add(qkv_batch_decoder *bd, const char *const *sources, int n,
                                 int max_len, int *slot, qkv_error *err)
{
    if (max_len < 0) return qkv_fail(err, QKV_ERR_ARG, "max_len must be >= 0, got %d", max_len);
    qkv_translate_options o = qkv_translate_default_options();
    o.max_len = max_len;
    return qkv_batch_decoder_add_with(bd, sources, n, &o, slot, err);
}

qkv_status qkv_batch_decoder_step(qkv_batch_decoder *bd, qkv_error *err)
{
    return slots_step(bd->s, NULL, err);
}

int qkv_batch_decoder_finished(const qkv_batch_decoder *bd, int slot)
{
    return slot_of(bd->s, slot) == SLOT_DONE;
}

/* The text of ids (n), malloc'd, into *text. */
static qkv_status detokenize(const qkv_batch_decoder *bd, const int *ids, int n, char **text,
                             qkv_error *err)
{
    const qkv_tokenizer *tk = qkv_translator_tokenizer(bd->t);
    const size_t need = qkv_tokenizer_decode(tk, NULL, 0, ids, n);
    if (!(*text = malloc(need + 1)))
        return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for a translation's text");
    qkv_tokenizer_decode(tk, *text, need + 1, ids, n);
    return QKV_OK;
}

/* Hypothesis k of a finished slot: its tokens (NULL when the search found fewer), count and
 * score (NaN from greedy decoding). */
static const int *hypothesis(const qkv_batch_decoder *bd, int slot, int k, int *n, double *score)
{
    const beam_sentence *b = slot_beam(bd->s, slot);
    if (!b) {
        *score = NAN;
        return k == 0 ? slot_tokens(bd->s, slot, n) : (*n = -1, NULL);
    }
    if (k >= beam_sentence_found(b)) return *n = -1, *score = -INFINITY, NULL;
    return beam_sentence_hypothesis(b, k, n, score, NULL);
}

qkv_status qkv_batch_decoder_take(qkv_batch_decoder *bd, int slot, char **text, int *tokens,
                                  qkv_error *err)
{
    *text = NULL;
    if (!qkv_batch_decoder_finished(bd, slot))
        return qkv_fail(err, QKV_ERR_ARG, "slot %d holds no finished translation", slot);
    int n;
    double score;
    const int *ids = hypothesis(bd, slot, 0, &n, &score);
    qkv_status st = ids ? detokenize(bd, ids, n, text, err) : QKV_OK;
    if (!ids && !(*text = calloc(1, 1)))
        st = qkv_fail(err, QKV_ERR_NOMEM, "out of memory for a translation's text");
    if (st) return st;
    if (tokens) *tokens = ids ? n : 0;
    slots_release(bd->s, slot);
    return QKV_OK;
}

qkv_status qkv_batch_decoder_take_translations(qkv_batch_decoder *bd, int slot,
                                               qkv_translations *r, qkv_error *err)
{
    memset(r, 0, sizeof *r);
    if (!qkv_batch_decoder_finished(bd, slot))
        return qkv_fail(err, QKV_ERR_ARG, "slot %d holds no finished translation", slot);
    const int N = bd->sent[slot].n_best, L = bd->sent[slot].limit;
    const int limit = slots_info(bd->s).max_len;
    r->count = 1, r->n_best = N, r->max_len = L, r->first_truncated = -1;
    if (bd->sent[slot].src_tokens > limit)
        r->truncated = 1, r->first_truncated = 0,
        r->first_truncated_len = bd->sent[slot].src_tokens;
    r->text = calloc((size_t)N, sizeof *r->text);
    r->ids = malloc((size_t)N * L * sizeof *r->ids);
    r->len = malloc((size_t)N * sizeof *r->len), r->score = malloc((size_t)N * sizeof *r->score);
    r->src_len = malloc(sizeof *r->src_len), r->unknown = malloc(sizeof *r->unknown);
    qkv_status st = r->text && r->ids && r->len && r->score && r->src_len && r->unknown
                        ? QKV_OK
                        : qkv_fail(err, QKV_ERR_NOMEM, "out of memory for %d translations", N);
    for (int k = 0; !st && k < N; k++) {
        int n;
        const int *ids = hypothesis(bd, slot, k, &n, &r->score[k]);
        r->len[k] = ids ? n : -1;
        if (!ids) continue;
        memcpy(r->ids + (size_t)k * L, ids, (size_t)n * sizeof *ids);
        st = detokenize(bd, ids, n, &r->text[k], err);
    }
    if (st) return qkv_translations_free(r), st;
    r->src_len[0] = bd->sent[slot].src_len, r->unknown[0] = bd->sent[slot].unknown;
    slots_release(bd->s, slot);
    return QKV_OK;
}

void qkv_batch_decoder_cancel(qkv_batch_decoder *bd, int slot) { slots_release(bd->s, slot); }
