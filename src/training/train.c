/* The training loop (d2l's train_seq2seq, grown into the paper's recipe): teacher forcing,
 * masked cross-entropy, Adam with a constant rate or the paper's warmup schedule, gradient
 * clipping, fixed-size batches or batches of similar length up to a token budget, validation
 * loss and BLEU every epoch with the best model kept and early stopping, and checkpoints
 * from which a run resumes exactly. Everything random is a pure function of (seed, epoch,
 * step), so the state to save is just the parameters, Adam's moments and where we are; the
 * validation history (best score, patience) is replayed from its own file. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cJSON.h>

#include "core/internal.h"

qkv_train_options qkv_train_default_options(void)
{
    qkv_train_options o = {0};
    o.batch = 64, o.epochs = 200, o.lr = 0.005f;
    o.beta1 = 0.9f, o.beta2 = 0.999f, o.adam_eps = 1e-8f, o.clip = 1.0f; /* torch.optim.Adam's */
    o.schedule = QKV_LR_CONSTANT, o.warmup = 4000, o.lr_factor = 1.0f;   /* the paper's */
    return o;
}

/* The paper's eq. 3 at optimizer step `step` (from 1). */
static float learning_rate(const qkv_train_options *o, int d_model, int64_t step)
{
    if (o->schedule != QKV_LR_NOAM) return o->lr;
    double s = (double)step, w = (double)o->warmup;
    return (float)(o->lr_factor / sqrt((double)d_model) * fmin(1.0 / sqrt(s), s * pow(w, -1.5)));
}

/* A Fisher-Yates shuffle of 0..n-1 drawn from stream. */
static void shuffle(int *order, int n, uint64_t stream)
{
    for (int i = 0; i < n; i++) order[i] = i;
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(qkv_random_u32(stream, (uint64_t)i) % (uint32_t)(i + 1));
        int t = order[i];
        order[i] = order[j], order[j] = t;
    }
}

/* The order of the examples in an epoch, drawn from (seed, epoch). */
static void epoch_order(int *order, int n, uint64_t seed, int epoch)
{
    shuffle(order, n, stream_of(seed, STREAM_ORDER, (uint64_t)epoch));
}

/* An epoch's batches: batch b is the examples items[first[b] .. first[b + 1]). */
typedef struct {
    int len, at; /* a pair's length and its place in the shuffled order */
} keyed;

typedef struct {
    int *items, *first, n_batches;
    /* batches by length: each pair's length, and work space */
    int *len, *order, *bounds, *perm;
    keyed *keys;
    double mean_len;
} epoch_plan;

static void plan_free(epoch_plan *p)
{
    free(p->items), free(p->first), free(p->len), free(p->order), free(p->bounds);
    free(p->perm), free(p->keys);
}

/* The length a pair occupies in a padded batch: the longer side, <eos> included. */
static int pair_len(const qkv_dataset *d, int e)
{
    int n = d->src_valid[e] > d->tgt_valid[e] ? d->src_valid[e] : d->tgt_valid[e];
    return n > 1 ? n : 1;
}

static qkv_status plan_init(epoch_plan *p, const qkv_dataset *d, int by_tokens, qkv_error *err)
{
    memset(p, 0, sizeof *p);
    const size_t n = (size_t)d->n;
    p->items = malloc(n * sizeof *p->items), p->first = malloc((n + 1) * sizeof *p->first);
    int ok = p->items && p->first;
    if (by_tokens) {
        p->len = malloc(n * sizeof *p->len), p->order = malloc(n * sizeof *p->order);
        p->bounds = malloc((n + 1) * sizeof *p->bounds), p->perm = malloc(n * sizeof *p->perm);
        p->keys = malloc(n * sizeof *p->keys);
        ok = ok && p->len && p->order && p->bounds && p->perm && p->keys;
    }
    if (!ok) {
        plan_free(p);
        return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for batches");
    }
    if (by_tokens) {
        double total = 0.0;
        for (int e = 0; e < d->n; e++) total += p->len[e] = pair_len(d, e);
        p->mean_len = total / d->n;
    }
    return QKV_OK;
}

/* d2l's batches: the shuffled examples, `batch` at a time. */
static void plan_fixed(epoch_plan *p, const qkv_dataset *d, int batch, uint64_t seed, int epoch)
{
    epoch_order(p->items, d->n, seed, epoch);
    p->n_batches = (d->n + batch - 1) / batch;
    for (int b = 0; b < p->n_batches; b++) p->first[b] = b * batch;
    p->first[p->n_batches] = d->n;
}

static int by_length(const void *a, const void *b)
{
    const keyed *x = a, *y = b;
    if (x->len != y->len) return (x->len > y->len) - (x->len < y->len);
    return (x->at > y->at) - (x->at < y->at);
}

/* Batches of similar length: the shuffled examples in buckets of about 64 batches, each
 * sorted by length (ties keep the shuffled order) and packed while count x longest <=
 * budget; then the batches are shuffled, so an epoch does not run from short to long. */
static void plan_tokens(epoch_plan *p, const qkv_dataset *d, int budget, uint64_t seed,
                        int epoch)
{
    const int n = d->n;
    epoch_order(p->order, n, seed, epoch);
    const int bucket = (int)fmin((double)n, fmax(1.0, 64.0 * budget / p->mean_len));
    for (int i = 0; i < n; i++) p->keys[i] = (keyed){p->len[p->order[i]], i};
    for (int b0 = 0; b0 < n; b0 += bucket)
        qsort(p->keys + b0, (size_t)(n - b0 < bucket ? n - b0 : bucket), sizeof *p->keys,
              by_length);
    /* pack: batch k is keys[bounds[k] .. bounds[k + 1]) */
    int nb = 0, count = 0, longest = 0;
    for (int i = 0; i < n; i++) {
        int wider = p->keys[i].len > longest ? p->keys[i].len : longest;
        if (count > 0 && (int64_t)(count + 1) * wider > budget) {
            p->bounds[nb++] = i - count;
            count = 0, wider = p->keys[i].len;
        }
        count++, longest = wider;
    }
    p->bounds[nb++] = n - count;
    p->bounds[nb] = n;
    /* the batches in an order from a second stream of (seed, epoch) */
    shuffle(p->perm, nb, stream_of(seed, STREAM_BATCHES, (uint64_t)epoch));
    int at = 0;
    for (int k = 0; k < nb; k++) {
        p->first[k] = at;
        for (int i = p->bounds[p->perm[k]]; i < p->bounds[p->perm[k] + 1]; i++)
            p->items[at++] = p->order[p->keys[i].at];
    }
    p->first[nb] = n;
    p->n_batches = nb;
}

int qkv_train_batches(int *items, int *first, const qkv_dataset *d, int batch_tokens,
                      uint64_t seed, int epoch)
{
    epoch_plan p;
    if (batch_tokens < 1 || d->n < 1 || plan_init(&p, d, 1, NULL)) return -1;
    plan_tokens(&p, d, batch_tokens, seed, epoch);
    memcpy(items, p.items, (size_t)d->n * sizeof *items);
    memcpy(first, p.first, ((size_t)p.n_batches + 1) * sizeof *first);
    int n = p.n_batches;
    plan_free(&p);
    return n;
}

typedef struct {
    int *src, *src_valid, *tgt_in, *tgt_out;
} batch_buffers;

/* Gather examples items[0 .. B) into a batch of (B, Ts) sources and (B, Tt) targets;
 * decoder input is <bos> + Y[:-1]. */
static qkv_batch gather(const qkv_dataset *d, const int *items, int B, int Ts, int Tt,
                        batch_buffers *bb)
{
    const int T = d->num_steps;
    for (int i = 0; i < B; i++) {
        int e = items[i];
        memcpy(bb->src + (size_t)i * Ts, d->src + (size_t)e * T, Ts * sizeof(int));
        memcpy(bb->tgt_out + (size_t)i * Tt, d->tgt + (size_t)e * T, Tt * sizeof(int));
        bb->src_valid[i] = d->src_valid[e];
        bb->tgt_in[(size_t)i * Tt] = QKV_BOS;
        memcpy(bb->tgt_in + (size_t)i * Tt + 1, d->tgt + (size_t)e * T, (Tt - 1) * sizeof(int));
    }
    return (qkv_batch){B, Ts, Tt, bb->src, bb->src_valid, bb->tgt_in, bb->tgt_out};
}

/* The batch's padded lengths: the dataset's num_steps, or cut to its longest pair. */
static void batch_lengths(const qkv_dataset *d, const int *items, int B, int cut, int *Ts,
                          int *Tt)
{
    *Ts = *Tt = d->num_steps;
    if (!cut) return;
    *Ts = *Tt = 1;
    for (int i = 0; i < B; i++) {
        if (d->src_valid[items[i]] > *Ts) *Ts = d->src_valid[items[i]];
        if (d->tgt_valid[items[i]] > *Tt) *Tt = d->tgt_valid[items[i]];
    }
}

static void log_metrics(const char *dir, const qkv_train_progress *p)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    FILE *fp = fopen(path, "a");
    if (!fp) return; /* the log is a convenience; training state lives in the checkpoint */
    fprintf(fp, "{\"epoch\": %d, \"step\": %lld, \"loss\": %.6f, \"d2l_loss\": %.6f, "
            "\"tokens_per_s\": %.1f, \"lr\": %.6g", p->epoch, (long long)p->step, p->loss,
            p->d2l_loss, p->tokens_per_s, p->lr);
    if (p->validated) {
        fprintf(fp, ", \"val_loss\": %.6f", p->val_loss);
        if (!isnan(p->bleu)) fprintf(fp, ", \"bleu\": %.4f", p->bleu);
    }
    fprintf(fp, "}\n");
    fclose(fp);
}

static qkv_status check_dataset(const qkv_transformer *m, const qkv_dataset *d,
                                const char *what, qkv_error *err)
{
    const qkv_transformer_config *c = qkv_transformer_get_config(m);
    if (d->n <= 0 || d->num_steps <= 0)
        return qkv_fail(err, QKV_ERR_ARG, "the %s data is empty", what);
    if (d->num_steps > c->max_len)
        return qkv_fail(err, QKV_ERR_ARG, "%s data: num_steps %d exceeds the model's maximum "
                        "length %d", what, d->num_steps, c->max_len);
    for (size_t i = 0; i < (size_t)d->n * d->num_steps; i++)
        if (d->src[i] < 0 || d->src[i] >= c->src_vocab || d->tgt[i] < 0 ||
            d->tgt[i] >= c->tgt_vocab)
            return qkv_fail(err, QKV_ERR_ARG, "%s example %zu: a token id is outside the "
                            "vocabulary", what, i / d->num_steps);
    for (int e = 0; e < d->n; e++)
        if (d->src_valid[e] < 0 || d->src_valid[e] > d->num_steps || d->tgt_valid[e] < 0 ||
            d->tgt_valid[e] > d->num_steps)
            return qkv_fail(err, QKV_ERR_ARG, "%s example %d: a valid length is outside [0, %d]",
                            what, e, d->num_steps);
    return QKV_OK;
}

static qkv_status check_options(const qkv_train_options *o, qkv_error *err)
{
    if (o->batch <= 0 || o->epochs < 0 || !o->out_dir)
        return qkv_fail(err, QKV_ERR_ARG, "training needs batch > 0, epochs >= 0 and an output "
                        "directory");
    if (o->schedule == QKV_LR_NOAM && (o->warmup < 1 || !(o->lr_factor > 0.0f)))
        return qkv_fail(err, QKV_ERR_ARG, "the noam schedule needs warmup >= 1 (got %d) and a "
                        "positive factor (got %g)", o->warmup, (double)o->lr_factor);
    if (o->schedule != QKV_LR_CONSTANT && o->schedule != QKV_LR_NOAM)
        return qkv_fail(err, QKV_ERR_ARG, "unknown learning-rate schedule %d", (int)o->schedule);
    if (o->batch_tokens < 0 || o->patience < 0 || o->keep_epochs < 0 || !(o->minutes >= 0.0))
        return qkv_fail(err, QKV_ERR_ARG, "batch_tokens, patience, keep_epochs and minutes must "
                        "be >= 0");
    if (!o->valid && (o->patience > 0 || o->valid_bleu))
        return qkv_fail(err, QKV_ERR_ARG, "patience and BLEU need validation data");
    if (!o->valid_tokenizer != !o->valid_references)
        return qkv_fail(err, QKV_ERR_ARG, "valid_tokenizer and valid_references go together");
    if (o->valid_references && o->valid && o->valid_references->count != o->valid->n)
        return qkv_fail(err, QKV_ERR_ARG, "%d validation references for %d validation pairs",
                        o->valid_references->count, o->valid->n);
    return QKV_OK;
}

/* ---------------------------------------------------------------------------------------
 * Validation
 * ------------------------------------------------------------------------------------- */

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
static qkv_status validate(qkv_transformer *m, const qkv_train_options *o, double *val_loss,
                           double *bleu, qkv_error *err)
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
    for (int first = 0; !st && first < d->n; first += B) {
        int size = d->n - first < B ? d->n - first : B;
        for (int i = 0; i < size; i++) items[i] = first + i;
        qkv_batch batch = gather(d, items, size, T, T, &bb);
        double loss = 0.0;
        int count = 0;
        st = qkv_transformer_loss(m, &batch, NULL /* evaluation */, &loss, &count, err);
        sum += loss, tokens += count;
        if (st || !o->valid_bleu) continue;
        st = qkv_transformer_greedy(m, batch.src, batch.src_valid, size, T, T, out, out_len, err);
        for (int i = 0; !st && i < size; i++) {
            const int e = first + i, *hyp = out + (size_t)i * T, *ref;
            int n_hyp = out_len[i], n_ref;
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
    free(items), free(bb.src), free(bb.src_valid), free(bb.tgt_in), free(bb.tgt_out);
    free(out), free(out_len), free(words);
    references_free(&rw);
    return st;
}

/* The validations so far, one per epoch that ran one; best and patience follow from them. */
typedef struct {
    int n, cap;
    int *epoch;
    double *val_loss, *bleu;
} history;

static void history_free(history *h)
{
    free(h->epoch), free(h->val_loss), free(h->bleu);
    memset(h, 0, sizeof *h);
}

static int history_add(history *h, int epoch, double val_loss, double bleu)
{
    if (h->n == h->cap) {
        int cap = h->cap ? 2 * h->cap : 64;
        int *e = realloc(h->epoch, (size_t)cap * sizeof *e);
        if (e) h->epoch = e;
        double *l = realloc(h->val_loss, (size_t)cap * sizeof *l);
        if (l) h->val_loss = l;
        double *b = realloc(h->bleu, (size_t)cap * sizeof *b);
        if (b) h->bleu = b;
        if (!e || !l || !b) return -1;
        h->cap = cap;
    }
    h->epoch[h->n] = epoch, h->val_loss[h->n] = val_loss, h->bleu[h->n] = bleu;
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
static int history_best(const history *h, int by_bleu, int *since)
{
    int best = -1;
    for (int i = 0; i < h->n; i++)
        if (best < 0 || beats(h, i, best, by_bleu)) best = i;
    *since = best < 0 ? 0 : h->n - 1 - best;
    return best;
}

static qkv_status history_save(const history *h, const char *path, qkv_error *err)
{
    size_t cap = 64 + (size_t)h->n * 96, len = 0;
    char *text = malloc(cap);
    if (!text) return qkv_fail(err, QKV_ERR_NOMEM, "out of memory");
    len += (size_t)snprintf(text + len, cap - len, "{\"validations\": [");
    for (int i = 0; i < h->n; i++) {
        len += (size_t)snprintf(text + len, cap - len, "%s\n  {\"epoch\": %d, \"val_loss\": %.17g",
                                i ? "," : "", h->epoch[i], h->val_loss[i]);
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

/* Reads the validations of epochs <= up_to (later ones belong to a run that was cut short
 * before its checkpoint, and will be made again). A missing file is an empty history. */
static qkv_status history_load(history *h, const char *path, int up_to, qkv_error *err)
{
    FILE *f = fopen(path, "rb");
    if (!f) return QKV_OK;
    size_t cap = 1 << 16, n = 0;
    char *text = malloc(cap);
    while (text) {
        n += fread(text + n, 1, cap - 1 - n, f);
        if (n < cap - 1) break;
        char *bigger = realloc(text, cap * 2);
        if (!bigger) free(text);
        text = bigger, cap *= 2;
    }
    fclose(f);
    if (!text) return qkv_fail(err, QKV_ERR_NOMEM, "%s: out of memory", path);
    text[n] = '\0';
    cJSON *o = cJSON_Parse(text);
    free(text);
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
        if (!cJSON_IsNumber(e) || !cJSON_IsNumber(l) || (b && !cJSON_IsNumber(b))) {
            st = qkv_fail(err, QKV_ERR_FORMAT, "%s: validation %d lacks a numeric epoch or "
                          "val_loss", path, i);
            break;
        }
        if (e->valuedouble <= up_to &&
            history_add(h, (int)e->valuedouble, l->valuedouble, b ? b->valuedouble : NAN))
            st = qkv_fail(err, QKV_ERR_NOMEM, "out of memory");
    }
    cJSON_Delete(o);
    return st;
}

/* out_dir/epoch-NNN for epoch (1-based). */
static void epoch_dir(char *out, size_t cap, const char *dir, int epoch)
{
    snprintf(out, cap, "%s/epoch-%03d", dir, epoch);
}

static void remove_model_dir(const char *dir)
{
    char path[4200 + 32]; /* dir comes from a 4200-byte buffer */
    snprintf(path, sizeof path, "%s/config.json", dir);
    remove(path);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    remove(path);
    rmdir(dir); /* fails, harmlessly, if someone put other files there */
}

/* ---------------------------------------------------------------------------------------
 * The loop
 * ------------------------------------------------------------------------------------- */

qkv_status qkv_train(qkv_transformer *m, const qkv_dataset *d, const qkv_train_options *o,
                     qkv_error *err)
{
    qkv_status st = check_options(o, err);
    if (!st) st = check_dataset(m, d, "training", err);
    if (!st && o->valid) st = check_dataset(m, o->valid, "validation", err);
    if (st) return st;
    if (mkdir(o->out_dir, 0777) && errno != EEXIST)
        return qkv_fail(err, QKV_ERR_IO, "%s: cannot create the directory: %s", o->out_dir,
                        strerror(errno));
    const int d_model = qkv_transformer_get_config(m)->d_model;
    const size_t n = qkv_transformer_num_params(m);
    float *params = qkv_transformer_params(m), *grads = qkv_transformer_grads(m);
    if (!grads) return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for gradients");
    qkv_adam opt;
    if ((st = qkv_adam_init(&opt, n, o->beta1, o->beta2, o->adam_eps, o->weight_decay, err)))
        return st;
    char ckpt[4096], hist_path[4096], best_dir[4096];
    snprintf(ckpt, sizeof ckpt, "%s/checkpoint.safetensors", o->out_dir);
    snprintf(hist_path, sizeof hist_path, "%s/validation.json", o->out_dir);
    snprintf(best_dir, sizeof best_dir, "%s/best", o->out_dir);
    qkv_train_position pos = {0, 0, o->seed, 0.0, 0};
    FILE *probe = o->resume ? fopen(ckpt, "rb") : NULL;
    if (probe) {
        fclose(probe);
        /* the data order and dropout follow the saved run's seed */
        if ((st = qkv_checkpoint_load(ckpt, m, &opt, &pos, err))) return qkv_adam_free(&opt), st;
    }
    history hist = {0};
    if (o->valid && probe && (st = history_load(&hist, hist_path, pos.epoch, err)))
        return qkv_adam_free(&opt), st;
    int since_best = 0;
    history_best(&hist, o->valid_bleu, &since_best);
    const int by_tokens = o->batch_tokens > 0;
    /* a batch by tokens holds at most batch_tokens pairs (each is at least one token long) */
    const int T = d->num_steps, Bmax = by_tokens ? o->batch_tokens : o->batch;
    epoch_plan plan;
    if ((st = plan_init(&plan, d, by_tokens, err))) return history_free(&hist), qkv_adam_free(&opt), st;
    const size_t cells = (size_t)(Bmax < d->n ? Bmax : d->n) * T;
    batch_buffers bb = {malloc(cells * sizeof(int)), malloc(cells / T * sizeof(int)),
                        malloc(cells * sizeof(int)), malloc(cells * sizeof(int))};
    if (!bb.src || !bb.src_valid || !bb.tgt_in || !bb.tgt_out) {
        st = qkv_fail(err, QKV_ERR_NOMEM, "out of memory for batches");
        goto done;
    }
    qkv_train_progress prog = {0};
    prog.epochs = o->epochs;
    int stopped_early = o->patience > 0 && since_best >= o->patience && hist.n > 0;
    const double run_start = qkv_now_s();
    double longest_epoch = 0.0;
    for (int epoch = pos.epoch; epoch < o->epochs && !st && !stopped_early; epoch++) {
        const double epoch_start = qkv_now_s();
        if (o->minutes > 0.0 && epoch_start - run_start + longest_epoch > o->minutes * 60.0) break;
        if (by_tokens) plan_tokens(&plan, d, o->batch_tokens, pos.seed, epoch);
        else plan_fixed(&plan, d, o->batch, pos.seed, epoch);
        const int batches = plan.n_batches;
        prog.batches = batches;
        double t0 = qkv_now_s();
        int64_t epoch_tokens_timed = 0;
        for (int bi = pos.batch; bi < batches; bi++) {
            const int *items = plan.items + plan.first[bi], size = plan.first[bi + 1] - plan.first[bi];
            int Ts, Tt;
            batch_lengths(d, items, size, by_tokens, &Ts, &Tt);
            qkv_batch batch = gather(d, items, size, Ts, Tt, &bb);
            memset(grads, 0, n * sizeof *grads);
            double loss = 0.0;
            int tokens = 0;
            uint64_t dropout_seed = stream_of(pos.seed, STREAM_DROPOUT, (uint64_t)opt.step + 1);
            /* d2l differentiates sum_seq mean_t(loss): each token counts 1/num_steps. */
            float scale = o->d2l_loss_scale ? 1.0f / (float)T : 0.0f; /* 0: per-token mean */
            const qkv_loss_options pass = {.backward = 1, .grad_scale = scale,
                                           .label_smoothing = o->label_smoothing, .train = 1,
                                           .dropout_seed = dropout_seed};
            st = qkv_transformer_loss(m, &batch, &pass, &loss, &tokens, err);
            /* A non-finite loss or gradient never reaches the parameters: the step stops the
             * run (the last checkpoint is intact) or, when asked, is skipped. A skipped step
             * still counts, so later steps keep their dropout streams. */
            int skipped = 0;
            double norm = NAN;
            if (st == QKV_ERR_NUMERIC) {
                if (!o->skip_nonfinite) {
                    char why[sizeof err->msg];
                    snprintf(why, sizeof why, "%s", err ? err->msg : "non-finite loss");
                    qkv_fail(err, st, "step %lld: %s; stopping before the parameters change "
                             "(the last checkpoint is intact)", (long long)opt.step + 1, why);
                    break;
                }
                st = QKV_OK, skipped = 1;
            }
            if (st) break;
            if (!skipped) {
                norm = qkv_clip_grad_norm(grads, n, o->clip);
                if (!isfinite(norm) && !o->skip_nonfinite) {
                    st = qkv_fail(err, QKV_ERR_NUMERIC, "step %lld: the gradient norm is not "
                                  "finite; stopping before the parameters change (the last "
                                  "checkpoint is intact)", (long long)opt.step + 1);
                    break;
                }
                skipped = !isfinite(norm);
            }
            const float lr = learning_rate(o, d_model, opt.step + 1);
            if (skipped)
                opt.step++;
            else
                qkv_adam_update(&opt, params, grads, lr);
            pos.batch = bi + 1;
            if (!skipped)
                pos.epoch_loss += loss, pos.epoch_tokens += tokens, epoch_tokens_timed += tokens;
            prog.epoch = epoch + 1, prog.batch = bi + 1, prog.step = opt.step;
            prog.loss = pos.epoch_loss / (double)(pos.epoch_tokens ? pos.epoch_tokens : 1);
            prog.d2l_loss = prog.loss / T;
            prog.tokens_per_s = (double)epoch_tokens_timed / (qkv_now_s() - t0 + 1e-9);
            prog.grad_norm = norm;
            prog.lr = lr;
            prog.end_of_epoch = bi + 1 == batches;
            prog.validated = prog.best = prog.stopping = 0;
            prog.val_loss = prog.bleu = NAN;
            int stop = o->stop_after_steps > 0 && opt.step >= o->stop_after_steps;
            if (prog.end_of_epoch) pos.epoch = epoch + 1, pos.batch = 0;
            if (prog.end_of_epoch && o->valid) {
                /* validate, remember, keep the best, and see whether patience is spent */
                if ((st = validate(m, o, &prog.val_loss, &prog.bleu, err))) break;
                if (history_add(&hist, epoch + 1, prog.val_loss, prog.bleu)) {
                    st = qkv_fail(err, QKV_ERR_NOMEM, "out of memory");
                    break;
                }
                if ((st = history_save(&hist, hist_path, err))) break;
                prog.validated = 1;
                prog.best = history_best(&hist, o->valid_bleu, &since_best) == hist.n - 1;
                if (prog.best && (st = qkv_transformer_save(m, best_dir, err))) break;
                prog.stopping = o->patience > 0 && since_best >= o->patience;
            }
            if (prog.end_of_epoch && o->keep_epochs > 0) {
                char dir[4200];
                epoch_dir(dir, sizeof dir, o->out_dir, epoch + 1);
                if ((st = qkv_transformer_save(m, dir, err))) break;
                if (epoch + 1 - o->keep_epochs >= 1) {
                    epoch_dir(dir, sizeof dir, o->out_dir, epoch + 1 - o->keep_epochs);
                    remove_model_dir(dir);
                }
            }
            if (prog.end_of_epoch || stop ||
                (o->checkpoint_every > 0 && opt.step % o->checkpoint_every == 0)) {
                qkv_train_position saved = pos;
                if (prog.end_of_epoch) saved.epoch_loss = 0.0, saved.epoch_tokens = 0;
                if ((st = qkv_checkpoint_save(ckpt, m, &opt, &saved, err))) break;
            }
            if (o->progress) o->progress(&prog, o->progress_ctx);
            if (prog.end_of_epoch) {
                log_metrics(o->out_dir, &prog);
                pos.epoch_loss = 0.0, pos.epoch_tokens = 0;
            }
            if (stop) goto done;
            if (prog.stopping) stopped_early = 1;
        }
        pos.batch = 0;
        longest_epoch = fmax(longest_epoch, qkv_now_s() - epoch_start);
    }
    if (!st) st = qkv_transformer_save(m, o->out_dir, err);
done:
    plan_free(&plan);
    free(bb.src), free(bb.src_valid), free(bb.tgt_in), free(bb.tgt_out);
    history_free(&hist);
    qkv_adam_free(&opt);
    return st;
}
