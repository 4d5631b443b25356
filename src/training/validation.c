/* SPDX-License-Identifier: MIT */
/* Validation during training: the held-out loss and BLEU of each epoch, and their history
 * (validation.json), from which the best epoch and the patience left follow, also after a
 * resume. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cJSON.h>

#include "training/training.h"

/* The reference words of validation BLEU as ids of a vocabulary of those words, into which
 * the translations' words are looked up (qkv_tokenizer_word_ids). Made for each validation:
 * milliseconds beside the decoding. */
typedef struct {
    qkv_vocab words;
    int *ids; /* reference i is ids[start[i] .. start[i + 1]) of valid_references */
} reference_words;

static void references_free(reference_words *r)
{
    qkv_vocab_free(&r->words);
    free(r->ids);
    memset(r, 0, sizeof *r);
}

static qkv_status references_init(reference_words *r, const qkv_sentences *refs,
                                  qkv_error *err)
{
    memset(r, 0, sizeof *r);
    if (!refs) return QKV_OK;
    qkv_status st = qkv_vocab_build(&r->words, refs->tokens, refs->n_tokens, 1, err);
    if (st) return st;
    if (!(r->ids = malloc((refs->n_tokens ? refs->n_tokens : 1) * sizeof *r->ids))) {
        references_free(r);
        return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for the validation references");
    }
    for (size_t i = 0; i < refs->n_tokens; i++)
        r->ids[i] = qkv_vocab_id(&r->words, refs->tokens[i]);
    return QKV_OK;
}

/* Per-token cross-entropy (no smoothing, no dropout) of the held-out pairs, and the corpus
 * BLEU-4 (x 100) of their greedy translations when asked (NaN otherwise). */
qkv_status validate(qkv_transformer *m, const qkv_train_options *o, double *val_loss,
                    double *bleu, double *sacrebleu, double *chrf, qkv_error *err)
{
    const qkv_dataset *d = o->valid;
    const int T = d->num_steps, B = 64;
    int *items = malloc((size_t)B * sizeof *items);
    batch_buffers bb = {malloc((size_t)B * T * sizeof(int)), malloc((size_t)B * sizeof(int)),
                        malloc((size_t)B * T * sizeof(int)), malloc((size_t)B * T * sizeof(int))};
    int *out = malloc((size_t)B * T * sizeof *out), *out_len = malloc((size_t)B * sizeof *out_len);
    int *words = malloc(((size_t)T + 1) * sizeof *words);
    const qkv_sentences *refs = o->valid_bleu ? o->valid_references : NULL;
    reference_words rw;
    qkv_status st = references_init(&rw, refs, err);
    if (!st && (!items || !bb.src || !bb.src_valid || !bb.tgt_in || !bb.tgt_out || !out ||
                !out_len || !words))
        st = qkv_fail(err, QKV_ERR_NOMEM, "out of memory for validation");
    double sum = 0.0;
    int64_t tokens = 0;
    qkv_bleu_stats stats = {0};
    qkv_sacrebleu_stats sacre = {0};
    qkv_chrf_stats chrf_stats = {0};
    const char *const *ref_text = refs ? o->valid_reference_text : NULL;
    char *text = NULL;
    size_t text_cap = 0;
    for (int first = 0; !st && first < d->n; first += B) {
        int size = d->n - first < B ? d->n - first : B;
        for (int i = 0; i < size; i++) items[i] = first + i;
        qkv_batch batch = gather(d, items, size, T, T, qkv_transformer_get_config(m)->decoder_start, &bb);
        double loss = 0.0;
        int count = 0;
        st = qkv_transformer_loss(m, &batch, NULL /* evaluation */, &loss, &count, err);
        sum += loss, tokens += count;
        if (st || !o->valid_bleu) continue;
        st = qkv_transformer_greedy(m, batch.src, batch.src_valid, size, T, T, out, out_len, err);
        for (int i = 0; !st && i < size; i++) {
            const int e = first + i, *hyp = out + (size_t)i * T, *ref;
            int n_hyp = out_len[i], n_ref;
            if (ref_text) { /* the translation's text against the reference as written */
                const size_t need = qkv_tokenizer_decode(o->valid_tokenizer, NULL, 0, hyp, n_hyp);
                if (need + 1 > text_cap) {
                    char *grown = realloc(text, need + 1);
                    if (!grown) {
                        st = qkv_fail(err, QKV_ERR_NOMEM, "out of memory for a translation");
                        break;
                    }
                    text = grown, text_cap = need + 1;
                }
                qkv_tokenizer_decode(o->valid_tokenizer, text, text_cap, hyp, n_hyp);
                if ((st = qkv_sacrebleu_add(&sacre, text, ref_text[e], err)) ||
                    (st = qkv_chrf_add(&chrf_stats, text, ref_text[e], err)))
                    break;
            }
            if (refs) {
                n_hyp = qkv_tokenizer_word_ids(o->valid_tokenizer, &rw.words, words, T + 1,
                                               hyp, n_hyp);
                if (n_hyp < 0) {
                    st = qkv_fail(err, QKV_ERR_NOMEM, "out of memory for a translation's words");
                    break;
                }
                hyp = words;
                ref = rw.ids + refs->start[e], n_ref = qkv_sentence_len(refs, e);
            } else { /* the target up to its <eos> */
                ref = d->tgt + (size_t)e * T;
                for (n_ref = 0; n_ref < d->tgt_valid[e] && ref[n_ref] != QKV_EOS; n_ref++) {}
            }
            st = qkv_bleu_stats_add(&stats, hyp, n_hyp, ref, n_ref, err);
        }
    }
    *val_loss = sum / (double)(tokens ? tokens : 1);
    *bleu = o->valid_bleu ? 100.0 * qkv_bleu_stats_score(&stats) : NAN;
    *sacrebleu = ref_text ? qkv_sacrebleu_score(&sacre, 0, NULL, NULL) : NAN;
    *chrf = ref_text ? qkv_chrf_score(&chrf_stats) : NAN;
    free(text);
    free(items), free(bb.src), free(bb.src_valid), free(bb.tgt_in), free(bb.tgt_out);
    free(out), free(out_len), free(words);
    references_free(&rw);
    return st;
}


void history_free(history *h)
{
    free(h->epoch), free(h->step), free(h->val_loss), free(h->bleu);
    memset(h, 0, sizeof *h);
}

int history_add(history *h, int epoch, int64_t step, double val_loss, double bleu)
{
    if (h->n == h->cap) {
        int cap = h->cap ? 2 * h->cap : 64;
        int *e = realloc(h->epoch, (size_t)cap * sizeof *e);
        if (e) h->epoch = e;
        int64_t *s = realloc(h->step, (size_t)cap * sizeof *s);
        if (s) h->step = s;
        double *l = realloc(h->val_loss, (size_t)cap * sizeof *l);
        if (l) h->val_loss = l;
        double *b = realloc(h->bleu, (size_t)cap * sizeof *b);
        if (b) h->bleu = b;
        if (!e || !s || !l || !b) return -1;
        h->cap = cap;
    }
    h->epoch[h->n] = epoch, h->step[h->n] = step, h->val_loss[h->n] = val_loss;
    h->bleu[h->n] = bleu;
    h->n++;
    return 0;
}

/* Whether validation i beats validation j: higher BLEU when it is measured (early on it is
 * often 0 for every epoch), then lower loss. */
static int beats(const history *h, int i, int j, int by_bleu)
{
    if (by_bleu && h->bleu[i] != h->bleu[j]) return h->bleu[i] > h->bleu[j];
    return h->val_loss[i] < h->val_loss[j];
}

/* The index of the best validation (-1 if none) and how many came after it. */
int history_best(const history *h, int by_bleu, int *since)
{
    int best = -1;
    for (int i = 0; i < h->n; i++)
        if (best < 0 || beats(h, i, best, by_bleu)) best = i;
    *since = best < 0 ? 0 : h->n - 1 - best;
    return best;
}

qkv_status history_save(const history *h, const char *path, qkv_error *err)
{
    size_t cap = 64 + (size_t)h->n * 128, len = 0;
    char *text = malloc(cap);
    if (!text) return qkv_fail(err, QKV_ERR_NOMEM, "out of memory");
    len += (size_t)snprintf(text + len, cap - len, "{\"validations\": [");
    for (int i = 0; i < h->n; i++) {
        len += (size_t)snprintf(text + len, cap - len, "%s\n  {\"epoch\": %d", i ? "," : "",
                                h->epoch[i]);
        if (h->step[i] >= 0)
            len += (size_t)snprintf(text + len, cap - len, ", \"step\": %lld",
                                    (long long)h->step[i]);
        len += (size_t)snprintf(text + len, cap - len, ", \"val_loss\": %.17g", h->val_loss[i]);
        if (!isnan(h->bleu[i]))
            len += (size_t)snprintf(text + len, cap - len, ", \"bleu\": %.17g", h->bleu[i]);
        len += (size_t)snprintf(text + len, cap - len, "}");
    }
    len += (size_t)snprintf(text + len, cap - len, "\n]}\n");
    const void *chunks[1] = {text};
    qkv_status st = qkv_atomic_write(path, chunks, &len, 1, err);
    free(text);
    return st;
}

/* Reads the validations of epochs <= up_to, or of steps <= up_to_step for those that record
 * their step (later ones belong to a run that was cut short before its checkpoint, and will be
 * made again). A missing file is an empty history. */
qkv_status history_load(history *h, const char *path, int up_to, int64_t up_to_step,
                        qkv_error *err)
{
    struct stat sb;
    if (lstat(path, &sb) && errno == ENOENT) return QKV_OK;
    char *text = NULL;
    size_t n = 0;
    qkv_status read = qkv_read_regular_file(path, QKV_MAX_TEXT_BYTES, &text, &n, err);
    cJSON *o = NULL;
    if (!read) read = qkv_json_parse(&o, text, n, path, err);
    free(text);
    if (read) return read;
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(o, "validations"), *v;
    qkv_status st = cJSON_IsArray(list) ? QKV_OK
                    : qkv_fail(err, QKV_ERR_FORMAT, "%s: expected {\"validations\": [...]}", path);
    int i = 0;
    cJSON_ArrayForEach(v, list) {
        i++;
        if (st) break;
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(v, "epoch");
        const cJSON *l = cJSON_GetObjectItemCaseSensitive(v, "val_loss");
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(v, "bleu");
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(v, "step");
        if (!cJSON_IsNumber(e) || !cJSON_IsNumber(l) || (b && !cJSON_IsNumber(b)) ||
            (s && !cJSON_IsNumber(s))) {
            st = qkv_fail(err, QKV_ERR_FORMAT, "%s: validation %d lacks a numeric epoch or "
                          "val_loss (or has a step that is not a number)", path, i);
            break;
        }
        const int64_t step = s ? (int64_t)s->valuedouble : -1;
        if ((s ? step <= up_to_step : e->valuedouble <= up_to) &&
            history_add(h, (int)e->valuedouble, step, l->valuedouble, b ? b->valuedouble : NAN))
            st = qkv_fail(err, QKV_ERR_NOMEM, "out of memory");
    }
    cJSON_Delete(o);
    return st;
}
