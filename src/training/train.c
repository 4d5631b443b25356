/* The training loop (d2l's train_seq2seq, grown into the paper's recipe): a driver over
 * qkv_transformer_train_step (step.c), which does the math of a step (teacher forcing, masked
 * cross-entropy, clipping, Adam). What this file adds is policy: the learning-rate schedule
 * (constant or the paper's warmup), the epoch's batches (batches.c), validation loss and BLEU
 * every epoch with the best model kept and early stopping (validation.c), the last epochs'
 * models, a time budget, metrics.jsonl, and checkpoints from which a run resumes exactly.
 * Everything random is a pure function of (seed, epoch, step), so the state to save is just
 * the parameters, Adam's moments and where we are; the validation history (best score,
 * patience) is replayed from its own file. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

static void log_metrics(const char *dir, const qkv_train_progress *p)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    /* appended in place, so never through a link: a metrics.jsonl that is one is not ours */
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
    FILE *fp = fd >= 0 ? fdopen(fd, "a") : NULL;
    if (!fp) { /* the log is a convenience; training state lives in the checkpoint */
        if (fd >= 0) close(fd);
        return;
    }
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
    history hist;
    int since_best;         /* validations since the best one */
    qkv_train_progress prog;
    char ckpt[4096], hist_path[4096], best_dir[4096];
} run;

static void run_close(run *r)
{
    plan_free(&r->plan);
    batch_buffers_free(&r->bb);
    history_free(&r->hist);
    qkv_adam_free(&r->opt);
}

/* Checks, the run directory, the optimizer, and a resumed run's position and validations. */
static qkv_status run_open(run *r, qkv_transformer *m, const qkv_dataset *d,
                           const qkv_train_options *o, qkv_error *err)
{
    memset(r, 0, sizeof *r);
    r->m = m, r->d = d, r->o = o;
    qkv_status st = check_options(o, err);
    if (!st) st = check_dataset(m, d, "training", err);
    if (!st && o->valid) st = check_dataset(m, o->valid, "validation", err);
    if (st) return st;
    if (mkdir(o->out_dir, 0777) && errno != EEXIST)
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
    FILE *probe = o->resume ? fopen(r->ckpt, "rb") : NULL;
    if (probe) {
        fclose(probe);
        /* the data order and dropout follow the saved run's seed */
        st = qkv_checkpoint_load(r->ckpt, m, &r->opt, &r->pos, err);
        if (!st && o->valid) st = history_load(&r->hist, r->hist_path, r->pos.epoch, err);
    }
    history_best(&r->hist, o->valid_bleu, &r->since_best);
    const int by_tokens = o->batch_tokens > 0;
    /* a batch by tokens holds at most batch_tokens pairs (each is at least one token long) */
    const int Bmax = by_tokens ? o->batch_tokens : o->batch;
    if (!st) st = plan_init(&r->plan, d, by_tokens, err);
    if (!st) st = batch_buffers_init(&r->bb, Bmax < d->n ? Bmax : d->n, d->num_steps, err);
    if (st) run_close(r);
    r->prog.epochs = o->epochs;
    return st;
}

/* Batch bi of the epoch: one step, then where training stands and the progress report.
 * timed counts the epoch's tokens since t0, for the tokens per second. */
static qkv_status train_batch(run *r, int epoch, int bi, double t0, int64_t *timed,
                              qkv_error *err)
{
    const qkv_train_options *o = r->o;
    const qkv_dataset *d = r->d;
    const int *items = r->plan.items + r->plan.first[bi];
    const int size = r->plan.first[bi + 1] - r->plan.first[bi], T = d->num_steps;
    int Ts, Tt;
    batch_lengths(d, items, size, o->batch_tokens > 0, &Ts, &Tt);
    const qkv_batch batch = gather(d, items, size, Ts, Tt,
                                   qkv_transformer_get_config(r->m)->decoder_start, &r->bb);
    const int64_t step = r->opt.step + 1;
    const qkv_step_options so = {
        learning_rate(o, qkv_transformer_get_config(r->m)->d_model, step), o->clip,
        /* d2l differentiates sum_seq mean_t(loss): each token counts 1/num_steps */
        o->d2l_loss_scale ? 1.0f / (float)T : 0.0f, o->label_smoothing,
        stream_of(r->pos.seed, STREAM_DROPOUT, (uint64_t)step), o->skip_nonfinite};
    qkv_step_result res;
    qkv_status st = qkv_transformer_train_step(r->m, &r->opt, &batch, &so, &res, err);
    if (st == QKV_ERR_NUMERIC) {
        char why[sizeof err->msg];
        snprintf(why, sizeof why, "%s", err ? err->msg : "non-finite loss");
        return qkv_fail(err, st, "step %lld: %s; stopping before the parameters change (the "
                        "last checkpoint is intact)", (long long)step, why);
    }
    if (st) return st;
    qkv_train_progress *p = &r->prog;
    r->pos.batch = bi + 1;
    if (!res.skipped)
        r->pos.epoch_loss += res.loss, r->pos.epoch_tokens += res.tokens, *timed += res.tokens;
    p->epoch = epoch + 1, p->batch = bi + 1, p->step = r->opt.step;
    p->loss = r->pos.epoch_loss / (double)(r->pos.epoch_tokens ? r->pos.epoch_tokens : 1);
    p->d2l_loss = p->loss / T;
    p->tokens_per_s = (double)*timed / (qkv_now_s() - t0 + 1e-9);
    p->grad_norm = res.grad_norm;
    p->lr = so.lr;
    p->end_of_epoch = bi + 1 == r->plan.n_batches;
    p->validated = p->best = p->stopping = 0;
    p->val_loss = p->bleu = NAN;
    return QKV_OK;
}

/* After the last batch of epoch (0-based): validate, remember, keep the best and see whether
 * patience is spent; keep the last keep_epochs models. */
static qkv_status end_epoch(run *r, int epoch, qkv_error *err)
{
    const qkv_train_options *o = r->o;
    qkv_train_progress *p = &r->prog;
    qkv_status st;
    if (o->valid) {
        if ((st = validate(r->m, o, &p->val_loss, &p->bleu, err))) return st;
        if (history_add(&r->hist, epoch + 1, p->val_loss, p->bleu))
            return qkv_fail(err, QKV_ERR_NOMEM, "out of memory");
        if ((st = history_save(&r->hist, r->hist_path, err))) return st;
        p->validated = 1;
        p->best = history_best(&r->hist, o->valid_bleu, &r->since_best) == r->hist.n - 1;
        if (p->best && (st = qkv_transformer_save(r->m, r->best_dir, err))) return st;
        p->stopping = o->patience > 0 && r->since_best >= o->patience;
    }
    if (o->keep_epochs > 0) {
        char dir[4200];
        epoch_dir(dir, sizeof dir, o->out_dir, epoch + 1);
        if ((st = qkv_transformer_save(r->m, dir, err))) return st;
        if (epoch + 1 - o->keep_epochs >= 1) {
            epoch_dir(dir, sizeof dir, o->out_dir, epoch + 1 - o->keep_epochs);
            remove_model_dir(dir);
        }
    }
    return QKV_OK;
}

/* Checkpoint at the end of an epoch, when stopping, and every checkpoint_every steps. */
static qkv_status maybe_checkpoint(run *r, int stop, qkv_error *err)
{
    const int every = r->o->checkpoint_every;
    if (!r->prog.end_of_epoch && !stop && !(every > 0 && r->opt.step % every == 0))
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
    const double run_start = qkv_now_s();
    double longest_epoch = 0.0;
    for (int epoch = r.pos.epoch; epoch < o->epochs && !st && !stopped_early; epoch++) {
        const double epoch_start = qkv_now_s();
        if (o->minutes > 0.0 && epoch_start - run_start + longest_epoch > o->minutes * 60.0) break;
        if (o->batch_tokens > 0) plan_tokens(&r.plan, d, o->batch_tokens, r.pos.seed, epoch);
        else plan_fixed(&r.plan, d, o->batch, r.pos.seed, epoch);
        r.prog.batches = r.plan.n_batches;
        const double t0 = qkv_now_s();
        int64_t timed = 0;
        for (int bi = r.pos.batch; bi < r.plan.n_batches; bi++) {
            if ((st = train_batch(&r, epoch, bi, t0, &timed, err))) break;
            const int stop = o->stop_after_steps > 0 && r.opt.step >= o->stop_after_steps;
            if (r.prog.end_of_epoch) {
                r.pos.epoch = epoch + 1, r.pos.batch = 0;
                if ((st = end_epoch(&r, epoch, err))) break;
            }
            if ((st = maybe_checkpoint(&r, stop, err))) break;
            if (o->progress) o->progress(&r.prog, o->progress_ctx);
            if (r.prog.end_of_epoch) {
                log_metrics(o->out_dir, &r.prog);
                r.pos.epoch_loss = 0.0, r.pos.epoch_tokens = 0;
            }
            if (stop) goto done; /* checkpointed; the model is saved only at the end */
            if (r.prog.stopping) stopped_early = 1;
        }
        r.pos.batch = 0;
        longest_epoch = fmax(longest_epoch, qkv_now_s() - epoch_start);
    }
    if (!st) st = qkv_transformer_save(m, o->out_dir, err);
done:
    run_close(&r);
    return st;
}
