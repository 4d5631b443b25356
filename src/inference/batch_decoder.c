/* SPDX-License-Identifier: MIT */
/* The batch decoder (qkv/translator.h): continuous batching of greedy translation, the slots
 * of inference/slots.h over the translator's model. A sentence is tokenised and encoded as
 * qkv_translate does it (source_tokens, source_rows), starts from the model's start token, is
 * filtered by the model's rules and limited as qkv_translate limits it, so that each gets the
 * translation qkv_translate gives it with beam 1. */
#include <stdlib.h>
#include <string.h>

#include "inference/decode.h"
#include "inference/slots.h"

struct qkv_batch_decoder {
    qkv_translator *t;
    slots *s;
    int *ids, *valid; /* (slots * max_len), (slots): sources being encoded */
    slot_goal *goals; /* (slots) */
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
    if (!bd->ids || !bd->valid || !bd->goals) {
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
    free(bd->ids), free(bd->valid), free(bd->goals);
    free(bd);
}

int qkv_batch_decoder_slots(const qkv_batch_decoder *bd) { return slots_count(bd->s); }
int qkv_batch_decoder_free_slots(const qkv_batch_decoder *bd) { return slots_in(bd->s, SLOT_FREE); }
int qkv_batch_decoder_running(const qkv_batch_decoder *bd)
{
    return slots_in(bd->s, SLOT_RUNNING);
}

qkv_status qkv_batch_decoder_add(qkv_batch_decoder *bd, const char *const *sources, int n,
                                 int max_len, int *slot, qkv_error *err)
{
    const qkv_tokenizer *tk = qkv_translator_tokenizer(bd->t);
    const decoder_info info = slots_info(bd->s);
    if (n < 1 || !sources || !slot)
        return qkv_fail(err, QKV_ERR_ARG, "a batch decoder takes n >= 1 sources (got %d)", n);
    if (max_len < 0) return qkv_fail(err, QKV_ERR_ARG, "max_len must be >= 0, got %d", max_len);
    if (n > slots_in(bd->s, SLOT_FREE))
        return qkv_fail(err, QKV_ERR_ARG, "%d sources but %d free slots", n,
                        slots_in(bd->s, SLOT_FREE));
    qkv_sentences src = {0};
    qkv_status st = source_tokens(&src, tk, sources, n, err);
    if (st) return st;
    /* each translation's length as qkv_translate allows it (its defaults for the rest) */
    const qkv_translate_options o = qkv_translate_default_options();
    const int cap = max_len && max_len < info.max_len ? max_len : info.max_len;
    const slot_goal greedy = {1, 1, {0.0f, 0, 1.0f}, 0, decoding_rules_of(&info), 0};
    for (int i = 0; i < n; i++) {
        bd->goals[i] = greedy;
        bd->goals[i].tokens = translate_length_limit(&o, qkv_sentence_len(&src, i), cap);
    }
    int Ts;
    source_rows(bd->ids, bd->valid, &Ts, tk, &src, 0, n, info.max_len);
    qkv_sentences_free(&src);
    return slots_start_sources(bd->s, bd->ids, bd->valid, n, Ts, bd->goals, slot, err);
}

qkv_status qkv_batch_decoder_step(qkv_batch_decoder *bd, qkv_error *err)
{
    return slots_step(bd->s, NULL, err);
}

int qkv_batch_decoder_finished(const qkv_batch_decoder *bd, int slot)
{
    return slot_of(bd->s, slot) == SLOT_DONE;
}

qkv_status qkv_batch_decoder_take(qkv_batch_decoder *bd, int slot, char **text, int *tokens,
                                  qkv_error *err)
{
    *text = NULL;
    if (!qkv_batch_decoder_finished(bd, slot))
        return qkv_fail(err, QKV_ERR_ARG, "slot %d holds no finished translation", slot);
    const qkv_tokenizer *tk = qkv_translator_tokenizer(bd->t);
    int n;
    const int *ids = slot_tokens(bd->s, slot, &n);
    const size_t need = qkv_tokenizer_decode(tk, NULL, 0, ids, n);
    if (!(*text = malloc(need + 1)))
        return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for a translation's text");
    qkv_tokenizer_decode(tk, *text, need + 1, ids, n);
    if (tokens) *tokens = n;
    slots_release(bd->s, slot);
    return QKV_OK;
}

void qkv_batch_decoder_cancel(qkv_batch_decoder *bd, int slot) { slots_release(bd->s, slot); }
