/* SPDX-License-Identifier: MIT */
/* The training loop (d2l's train_seq2seq, grown into the paper's recipe): a driver over
 * qkv_transformer_train_step (step.c), which does the math of a step (teacher forcing, masked
 * cross-entropy, clipping, Adam). What this file adds is policy: the learning-rate schedule
 * (constant or the paper's warmup), the epoch's batches (batches.c), validation loss and BLEU
 * every epoch with the best model kept and early stopping (validation.c), the last epochs'
 * models, a time budget, metrics.jsonl, and checkpoints from which a run resumes exactly.
 * Everything random is a pure function of (seed, epoch, step), so the state to save is just
 * the parameters, Adam's moments and where we are; the validation history (best score,
 * patience) is replayed from its own file.
 * Data-parallel (o->reducer, several ranks): every rank plans the same batches and takes its
 * shard of each (qkv_shard_of); the step sums the gradients. Rank 0 alone touches the run
 * directory (checkpoint, metrics, validation, models) and hands every decision that depends
 * on it (resumed state, early stopping, the time budget) to the others. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "models/transformer_internal.h"
#include "training/parallel.h"
#include "training/training.h"

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

/* Batches per optimizer step. */
static int accum_of(const qkv_train_options *o) { return o->accum > 1 ? o->accum : 1; }

qkv_status metrics_append(const char *dir, void (*line)(FILE *fp, const void *progress),
                          const void *progress, qkv_error *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    /* appended in place, so never through a link: a metrics.jsonl that is one is not ours */
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
    FILE *fp = fd >= 0 ? fdopen(fd, "a") : NULL;
    if (!fp) {
        int e = errno;
        if (fd >= 0) close(fd);
        return qkv_fail(err, QKV_ERR_IO, "%s: cannot append: %s", path,
                        e == ELOOP ? "it is a symbolic link (qkv never writes through one)"
                                   : strerror(e));
    }
    line(fp, progress);
    int bad = ferror(fp), e = errno;
    if (fclose(fp) != 0 && !bad) bad = 1, e = errno;
    if (bad) return qkv_fail(err, QKV_ERR_IO, "%s: cannot append: %s", path, strerror(e));
    return QKV_OK;
}

/* One line of dir/metrics.jsonl (metrics_append). */
static void metrics_line(FILE *fp, const void *progress)
{
    const qkv_train_progress *p = progress;
    fprintf(fp, "{\"epoch\": %d, \"step\": %lld, \"loss\": %.6f, \"d2l_loss\": %.6f, "
            "\"tokens_per_s\": %.1f, \"lr\": %.6g", p->epoch, (long long)p->step, p->loss,
            p->d2l_loss, p->tokens_per_s, p->lr);
    if (p->validated) {
        fprintf(fp, ", \"val_loss\": %.6f", p->val_loss);
        if (!isnan(p->bleu)) fprintf(fp, ", \"bleu\": %.4f", p->bleu);
        if (!isnan(p->sacrebleu))
            fprintf(fp, ", \"sacrebleu\": %.4f, \"chrf\": %.4f", p->sacrebleu, p->chrf);
    }
    fprintf(fp, "}\n");
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
    if (o->schedule == QKV_LR_NOAM &&
        (o->warmup < 1 || !(o->lr_factor > 0.0f && o->lr_factor <= QKV_MAX_LR_FACTOR)))
        return qkv_fail(err, QKV_ERR_ARG, "the noam schedule needs warmup >= 1 (got %d) and a "
                        "factor in (0, %g] (got %g)", o->warmup, (double)QKV_MAX_LR_FACTOR,
                        (double)o->lr_factor);
    if (o->schedule == QKV_LR_CONSTANT && !(o->lr > 0.0f && o->lr <= QKV_MAX_LR))
        return qkv_fail(err, QKV_ERR_ARG, "the learning rate must be in (0, %g] (got %g)",
                        (double)QKV_MAX_LR, (double)o->lr);
    if (o->schedule != QKV_LR_CONSTANT && o->schedule != QKV_LR_NOAM)
        return qkv_fail(err, QKV_ERR_ARG, "unknown learning-rate schedule %d", (int)o->schedule);
    if (o->batch_tokens < 0 || o->patience < 0 || o->keep_epochs < 0 || !(o->minutes >= 0.0))
        return qkv_fail(err, QKV_ERR_ARG, "batch_tokens, patience, keep_epochs and minutes must "
                        "be >= 0");
    if (!o->valid && (o->patience > 0 || o->valid_bleu || o->valid_every > 0))
        return qkv_fail(err, QKV_ERR_ARG, "patience, BLEU and valid_every need validation data");
    if (o->accum < 0 || o->valid_every < 0 || o->save_every < 0 || o->keep_last < 0)
        return qkv_fail(err, QKV_ERR_ARG, "accum, valid_every, save_every and keep_last must be "
                        ">= 0");
    if (!o->valid_tokenizer != !o->valid_references)
        return qkv_fail(err, QKV_ERR_ARG, "valid_tokenizer and valid_references go together");
    if (o->valid_references && o->valid && o->valid_references->count != o->valid->n)
        return qkv_fail(err, QKV_ERR_ARG, "%d validation references for %d validation pairs",
                        o->valid_references->count, o->valid->n);
    return QKV_OK;
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

/* A training run: the model and data, the optimizer, where training stands, the epoch's
 * batches, the validations so far and the paths of the run directory. */
typedef struct {
    qkv_transformer *m;
    const qkv_dataset *d;
    const qkv_train_options *o;
    qkv_adam opt;
    qkv_train_position pos;
    epoch_plan plan;
    batch_buffers bb;
    qkv_batch *micro;       /* a step's micro-batches (accum) */
    grad_buckets gb;        /* the gradients' buckets under an overlapping reducer */
    history hist;
    int since_best;         /* validations since the best one */
    qkv_train_progress prog;
    const qkv_reducer *rd;  /* data-parallel ranks, or NULL */
    int writer;             /* this rank writes the run directory */
    char ckpt[4096], hist_path[4096], best_dir[4096];
} run;

static void run_close(run *r)
{
    plan_free(&r->plan);
    batch_buffers_free(&r->bb);
    free(r->micro);
    buckets_free(&r->gb);
    history_free(&r->hist);
    qkv_adam_free(&r->opt);
}

/* The gradients' buckets, when the reducer overlaps its sums with the backward pass. */
static qkv_status plan_buckets(run *r, qkv_error *err)
{
    if (!r->rd || !r->rd->start_sum) return QKV_OK;
    const int n = qkv_transformer_num_tensors(r->m);
    qkv_param_info *t = malloc((size_t)n * sizeof *t);
    int *event = malloc((size_t)n * sizeof *event);
    qkv_status st = t && event ? QKV_OK : qkv_fail(err, QKV_ERR_NOMEM, "out of memory");
    if (!st) {
        for (int i = 0; i < n; i++) t[i] = qkv_transformer_tensor(r->m, i);
        qkv_transformer_grad_events(r->m, event);
        st = buckets_init(&r->gb, r->rd, &r->m->core, transformer_grads(r->m), t, event, n,
                          err);
    }
    free(t), free(event);
    return st;
}

/* Checks, the run directory, the optimizer, and a resumed run's position and validations. */
static qkv_status run_open(run *r, qkv_transformer *m, const qkv_dataset *d,
                           const qkv_train_options *o, qkv_error *err)
{
    memset(r, 0, sizeof *r);
    r->m = m, r->d = d, r->o = o, r->rd = o->reducer, r->writer = rd_writer(o->reducer);
    qkv_status st = check_options(o, err);
    if (!st) st = check_dataset(m, d, "training", err);
    if (!st && o->valid) st = check_dataset(m, o->valid, "validation", err);
    if (!st && rd_parallel(r->rd)) {
        const size_t cells = (size_t)d->n * d->num_steps;
        uint64_t h = rd_hash_ids(0, &d->num_steps, 1);
        h = rd_hash_ids(rd_hash_ids(h, d->src, cells), d->tgt, cells);
        h = rd_hash_ids(rd_hash_ids(h, d->src_valid, (size_t)d->n), d->tgt_valid, (size_t)d->n);
        st = rd_check_same(r->rd, h, "training pairs", err);
    }
    if (st) return st;
    if (r->writer && mkdir(o->out_dir, 0777) && errno != EEXIST)
        return qkv_fail(err, QKV_ERR_IO, "%s: cannot create the directory: %s", o->out_dir,
                        strerror(errno));
    if (!qkv_transformer_grads(m))
        return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for gradients");
    if ((st = qkv_adam_init(&r->opt, qkv_transformer_num_params(m), o->beta1, o->beta2,
                            o->adam_eps, o->weight_decay, err)))
        return st;
    snprintf(r->ckpt, sizeof r->ckpt, "%s/checkpoint.safetensors", o->out_dir);
    snprintf(r->hist_path, sizeof r->hist_path, "%s/validation.json", o->out_dir);
    snprintf(r->best_dir, sizeof r->best_dir, "%s/best", o->out_dir);
    r->pos = (qkv_train_position){0, 0, o->seed, 0.0, 0};
    struct stat sb; /* present: read (a FIFO or device there is refused, not waited on) */
    if (o->resume && r->writer && !stat(r->ckpt, &sb)) {
        /* the data order and dropout follow the saved run's seed */
        st = qkv_checkpoint_load(r->ckpt, m, &r->opt, &r->pos, err);
        if (!st && o->valid)
            st = history_load(&r->hist, r->hist_path, r->pos.epoch, r->opt.step, err);
    }
    history_best(&r->hist, o->valid_bleu, &r->since_best);
    if (!st && rd_parallel(r->rd))
        st = rd_share_state(r->rd, qkv_transformer_params(m), &r->opt, &r->pos, sizeof r->pos,
                            err);
    const int by_tokens = o->batch_tokens > 0;
    /* a batch by tokens holds at most batch_tokens pairs (each is at least one token long) */
    const int Bmax = by_tokens ? o->batch_tokens : o->batch;
    if (!st) st = plan_init(&r->plan, d, by_tokens, err);
    /* room for a step's micro-batches, one after the other */
    if (!st) st = batch_buffers_init(&r->bb, accum_of(o) * (Bmax < d->n ? Bmax : d->n),
                                     d->num_steps, err);
    if (!st && !(r->micro = malloc((size_t)accum_of(o) * sizeof *r->micro)))
        st = qkv_fail(err, QKV_ERR_NOMEM, "out of memory for batches");
    if (!st) st = plan_buckets(r, err);
    if (st) run_close(r);
    r->prog.epochs = o->epochs;
    return st;
}

/* Micro-batch bi of the epoch gathered into the buffers after the rows before it. */
static qkv_batch gather_micro(run *r, int bi, int rows_before, int *cells_before)
{
    const qkv_dataset *d = r->d;
    const int *items = r->plan.items + r->plan.first[bi];
    const int size = r->plan.first[bi + 1] - r->plan.first[bi];
    int Ts, Tt;
    /* the whole batch's lengths, on every rank: a shard is padded as the whole batch is */
    batch_lengths(d, items, size, r->o->batch_tokens > 0, &Ts, &Tt);
    const int cells = *cells_before;
    batch_buffers at = {r->bb.src + cells, r->bb.src_valid + rows_before, r->bb.tgt_in + cells,
                        r->bb.tgt_out + cells};
    *cells_before += size * (Ts > Tt ? Ts : Tt);
    return gather(d, items, size, Ts, Tt, qkv_transformer_get_config(r->m)->decoder_start, &at);
}

/* This rank's shard of a (micro-)batch. */
static qkv_batch shard_of(const qkv_batch *b, const qkv_reducer *rd, int *first)
{
    int count;
    qkv_shard_of(b->B, rd->rank, rd->size, first, &count);
    return (qkv_batch){count, b->src_len, b->tgt_len, b->src + (size_t)*first * b->src_len,
                       b->src_valid + *first, b->tgt_in + (size_t)*first * b->tgt_len,
                       b->tgt_out + (size_t)*first * b->tgt_len};
}

/* The step's passes: micro-batches bi .. bi + n of the epoch, each (data-parallel: this rank's
 * shard of each) numbered after the sequences of the ones before it, so that its dropout masks
 * are those of one batch of them all. */
static qkv_status step_passes(run *r, int bi, int n, const qkv_step_options *so,
                              qkv_step_result *res, qkv_error *err)
{
    qkv_batch *micro = r->micro;
    int rows = 0, cells = 0;
    int64_t tokens = 0;
    for (int k = 0; k < n; k++) {
        micro[k] = gather_micro(r, bi + k, rows, &cells);
        rows += micro[k].B;
        tokens += rd_target_tokens(micro[k].tgt_out, (size_t)micro[k].B * micro[k].tgt_len);
    }
    qkv_step_options o = *so;
    /* the per-token mean over the whole step's tokens, whichever pass (or shard) holds them */
    if (!r->o->d2l_loss_scale && (n > 1 || rd_parallel(r->rd)))
        o.grad_scale = 1.0f / (float)(tokens ? tokens : 1);
    qkv_status st = step_begin(&r->m->core, transformer_grads(r->m), &o, n, res, err);
    if (st) return st;
    for (int k = 0, before = 0; k < n; before += micro[k].B, k++) {
        int first = 0;
        const qkv_batch b = rd_parallel(r->rd) ? shard_of(&micro[k], r->rd, &first) : micro[k];
        st = step_pass_transformer(r->m, &b, &o, (uint64_t)(before + first),
                                   k == n - 1 ? &r->gb : NULL, st, res, err);
    }
    return step_end(&r->m->core, &r->opt, st, &o, &r->gb, res, err);
}

/* One optimizer step over batches bi .. bi + n of the epoch, then where training stands and
 * the progress report. timed counts the epoch's tokens since t0, for the tokens per second. */
static qkv_status train_step(run *r, int epoch, int bi, int n, double t0, int64_t *timed,
                             qkv_error *err)
{
    const qkv_train_options *o = r->o;
    const int T = r->d->num_steps;
    const int64_t step = r->opt.step + 1;
    /* d2l differentiates sum_seq mean_t(loss): each token counts 1/num_steps */
    const float grad_scale = o->d2l_loss_scale ? 1.0f / (float)T : 0.0f;
    const qkv_step_options so = {
        learning_rate(o, qkv_transformer_get_config(r->m)->d_model, step), o->clip, grad_scale,
        o->label_smoothing, stream_of(r->pos.seed, STREAM_DROPOUT, (uint64_t)step),
        o->skip_nonfinite, r->rd, 0};
    qkv_step_result res;
    qkv_status st = step_passes(r, bi, n, &so, &res, err);
    if (st == QKV_ERR_NUMERIC) {
        char why[sizeof err->msg];
        snprintf(why, sizeof why, "%s", err ? err->msg : "non-finite loss");
        return qkv_fail(err, st, "step %lld: %s; stopping before the parameters change (the "
                        "last checkpoint is intact)", (long long)step, why);
    }
    if (st) return st;
    qkv_train_progress *p = &r->prog;
    r->pos.batch = bi + n;
    if (!res.skipped)
        r->pos.epoch_loss += res.loss, r->pos.epoch_tokens += res.tokens, *timed += res.tokens;
    p->epoch = epoch + 1, p->batch = bi + n, p->step = r->opt.step;
    p->loss = r->pos.epoch_loss / (double)(r->pos.epoch_tokens ? r->pos.epoch_tokens : 1);
    p->d2l_loss = p->loss / T;
    p->tokens_per_s = (double)*timed / (qkv_now_s() - t0 + 1e-9);
    p->grad_norm = res.grad_norm;
    p->lr = so.lr;
    p->end_of_epoch = bi + n == r->plan.n_batches;
    p->validated = p->best = p->stopping = 0;
    p->val_loss = p->bleu = p->sacrebleu = p->chrf = NAN;
    return QKV_OK;
}

/* A validation now (in epoch, 1-based): the loss and BLEU, the history, the best model kept,
 * and whether patience is spent; rank 0 validates and tells the others. */
static qkv_status validate_now(run *r, int epoch, qkv_error *err)
{
    const qkv_train_options *o = r->o;
    qkv_train_progress *p = &r->prog;
    qkv_status st;
    if (r->writer) {
        if ((st = validate(r->m, o, &p->val_loss, &p->bleu, &p->sacrebleu, &p->chrf, err)))
            return st;
        /* by steps, the history records each validation's step, which a resumed run reads */
        if (history_add(&r->hist, epoch, o->valid_every > 0 ? r->opt.step : -1, p->val_loss,
                        p->bleu))
            return qkv_fail(err, QKV_ERR_NOMEM, "out of memory");
        if ((st = history_save(&r->hist, r->hist_path, err))) return st;
        p->validated = 1;
        p->best = history_best(&r->hist, o->valid_bleu, &r->since_best) == r->hist.n - 1;
        if (p->best && (st = qkv_transformer_save(r->m, r->best_dir, err))) return st;
        p->stopping = o->patience > 0 && r->since_best >= o->patience;
    }
    if (rd_parallel(r->rd)) { /* rank 0 validated; early stopping is its call */
        struct { double val_loss, bleu; int validated, best, stopping; } v = {
            p->val_loss, p->bleu, p->validated, p->best, p->stopping};
        if ((st = rd_share(r->rd, &v, sizeof v, err))) return st;
        p->val_loss = v.val_loss, p->bleu = v.bleu;
        p->validated = v.validated, p->best = v.best, p->stopping = v.stopping;
    }
    return QKV_OK;
}

/* Keeps the model at this point in dir (epoch-NNN, step-NNNNNNN) and removes the one that
 * falls out of the kept ones (old_dir; "" when none does). */
static qkv_status keep_model(run *r, const char *dir, const char *old_dir, qkv_error *err)
{
    qkv_status st = qkv_transformer_save(r->m, dir, err);
    if (!st && old_dir[0]) remove_model_dir(old_dir);
    return st;
}

/* After the last batch of epoch (0-based): validate (by epochs), keep the last keep_epochs
 * models. */
static qkv_status end_epoch(run *r, int epoch, qkv_error *err)
{
    const qkv_train_options *o = r->o;
    qkv_status st;
    if (o->valid && o->valid_every == 0 && (st = validate_now(r, epoch + 1, err))) return st;
    if (o->keep_epochs > 0 && r->writer) {
        char dir[4200], old[4200] = "";
        epoch_dir(dir, sizeof dir, o->out_dir, epoch + 1);
        if (epoch + 1 - o->keep_epochs >= 1)
            epoch_dir(old, sizeof old, o->out_dir, epoch + 1 - o->keep_epochs);
        if ((st = keep_model(r, dir, old, err))) return st;
    }
    return QKV_OK;
}

/* After a step, by steps: a validation every valid_every steps, the model kept every
 * save_every (and the last keep_last of them). */
static qkv_status at_step(run *r, int epoch, qkv_error *err)
{
    const qkv_train_options *o = r->o;
    const int64_t step = r->opt.step;
    qkv_status st;
    if (o->valid && o->valid_every > 0 && step % o->valid_every == 0 &&
        (st = validate_now(r, epoch + 1, err)))
        return st;
    if (o->save_every > 0 && step % o->save_every == 0 && r->writer) {
        char dir[4200], old[4200] = "";
        snprintf(dir, sizeof dir, "%s/step-%07lld", o->out_dir, (long long)step);
        const int64_t gone = step - (int64_t)o->keep_last * o->save_every;
        if (o->keep_last > 0 && gone > 0)
            snprintf(old, sizeof old, "%s/step-%07lld", o->out_dir, (long long)gone);
        if ((st = keep_model(r, dir, old, err))) return st;
    }
    return QKV_OK;
}

/* Checkpoint at the end of an epoch, when stopping, every checkpoint_every steps, at every
 * save_every step and after a validation by steps. */
static qkv_status maybe_checkpoint(run *r, int stop, qkv_error *err)
{
    const int every = r->o->checkpoint_every;
    if (!r->writer) return QKV_OK;
    const int64_t step = r->opt.step;
    const int save = r->o->save_every > 0 && step % r->o->save_every == 0;
    if (!r->prog.end_of_epoch && !stop && !(every > 0 && step % every == 0) && !save &&
        !(r->prog.validated && r->o->valid_every > 0))
        return QKV_OK;
    qkv_train_position saved = r->pos;
    if (r->prog.end_of_epoch) saved.epoch_loss = 0.0, saved.epoch_tokens = 0;
    return qkv_checkpoint_save(r->ckpt, r->m, &r->opt, &saved, err);
}

qkv_status qkv_train(qkv_transformer *m, const qkv_dataset *d, const qkv_train_options *o,
                     qkv_error *err)
{
    run r;
    qkv_status st = run_open(&r, m, d, o, err);
    if (st) return st;
    int stopped_early = o->patience > 0 && r.since_best >= o->patience && r.hist.n > 0;
    if ((st = rd_share(r.rd, &stopped_early, sizeof stopped_early, err))) goto done;
    const double run_start = qkv_now_s();
    double longest_epoch = 0.0;
    for (int epoch = r.pos.epoch; epoch < o->epochs && !st && !stopped_early; epoch++) {
        const double epoch_start = qkv_now_s();
        if (o->minutes > 0.0) { /* rank 0's clock decides for every rank */
            int out_of_time = epoch_start - run_start + longest_epoch > o->minutes * 60.0;
            if ((st = rd_share(r.rd, &out_of_time, sizeof out_of_time, err))) break;
            if (out_of_time) break;
        }
        if (o->batch_tokens > 0) plan_tokens(&r.plan, d, o->batch_tokens, r.pos.seed, epoch);
        else plan_fixed(&r.plan, d, o->batch, r.pos.seed, epoch);
        r.prog.batches = r.plan.n_batches;
        const double t0 = qkv_now_s();
        int64_t timed = 0;
        for (int bi = r.pos.batch; bi < r.plan.n_batches && !stopped_early;) {
            const int n = r.plan.n_batches - bi < accum_of(o) ? r.plan.n_batches - bi
                                                              : accum_of(o);
            if ((st = train_step(&r, epoch, bi, n, t0, &timed, err))) break;
            bi += n;
            int stop = o->stop_after_steps > 0 && r.opt.step >= o->stop_after_steps;
            if ((st = rd_ask_stop(o->should_stop, o->should_stop_ctx, r.rd, &stop, err))) break;
            if (r.prog.end_of_epoch) {
                r.pos.epoch = epoch + 1, r.pos.batch = 0;
                if ((st = end_epoch(&r, epoch, err))) break;
            }
            if ((st = at_step(&r, epoch, err)) || (st = maybe_checkpoint(&r, stop, err))) break;
            if (o->progress) o->progress(&r.prog, o->progress_ctx);
            if (r.writer && (r.prog.end_of_epoch || r.prog.validated) &&
                (st = metrics_append(o->out_dir, metrics_line, &r.prog, err)))
                break;
            if (r.prog.end_of_epoch) r.pos.epoch_loss = 0.0, r.pos.epoch_tokens = 0;
            if (stop) goto done; /* checkpointed; the model is saved only at the end */
            if (r.prog.stopping) stopped_early = 1;
        }
        r.pos.batch = 0;
        longest_epoch = fmax(longest_epoch, qkv_now_s() - epoch_start);
    }
    if (!st && r.writer) st = qkv_transformer_save(m, o->out_dir, err);
done:
    run_close(&r);
    return st;
}
