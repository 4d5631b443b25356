/* SPDX-License-Identifier: MIT */
/* Training the language model on one long text, a driver over qkv_lm_train_step (step.c):
 * each step takes B random windows of T + 1 consecutive tokens (inputs: the first T,
 * targets: the last T), with warm-up and an optional cosine decay of the learning rate, and
 * checkpoints from which a run resumes exactly.
 * The windows and the dropout of step s are pure functions of (seed, s), so the state to save
 * is the parameters, Adam's moments and the step. Random windows rather than an epoch's
 * shuffled tiling: any step can be recomputed without replaying an epoch's order, and a time
 * budget needs no notion of epochs (those reported are tokens consumed / text length).
 * Data-parallel (o->reducer): every rank draws the same B windows and trains on its shard of
 * them (qkv_shard_of); rank 0 alone writes out_dir and evaluates, and its clock is the one a
 * time budget and its schedule follow. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "models/language_model_internal.h"
#include "training/parallel.h"
#include "training/training.h"

qkv_lm_train_options qkv_lm_train_default_options(void)
{
    qkv_lm_train_options o = {0};
    o.batch = 32, o.context = 128, o.lr = 1e-3f;
    o.beta1 = 0.9f, o.beta2 = 0.99f, o.adam_eps = 1e-8f, o.clip = 1.0f, o.warmup = 100;
    o.log_every = 50, o.eval_every = 500, o.eval_tokens = 32768;
    return o;
}

/* The learning rate of step s (1-based): linear warm-up, then constant or a cosine from lr
 * down to lr / 10, over the steps when they are given, else over the time budget (elapsed_s
 * of budget_s: such a run's schedule depends on the machine's speed). */
static double learning_rate(const qkv_lm_train_options *o, int64_t s, double elapsed_s,
                            double budget_s)
{
    double lr = o->lr;
    if (o->warmup > 0 && s <= o->warmup) return lr * (double)s / o->warmup;
    if (!o->cosine) return lr;
    double t = o->steps > 0 ? (double)(s - o->warmup) / (double)(o->steps - o->warmup)
                            : elapsed_s / budget_s;
    t = t < 0.0 ? 0.0 : t > 1.0 ? 1.0 : t;
    return lr * (0.1 + 0.45 * (1.0 + cos(3.14159265358979323846 * t)));
}

/* Windows of step s: inputs ids (B, T) = text[start_b ..), targets (B, T) one token later,
 * each start uniform in [0, n - T) from the stream of (seed, s). */
static void gather_windows(int *ids, int *targets, const int *text, size_t n, int B, int T,
                           uint64_t seed, int64_t s)
{
    const uint64_t stream = stream_of(seed, STREAM_WINDOWS, 0);
    const uint64_t starts = (uint64_t)(n - (size_t)T);
    for (int b = 0; b < B; b++) {
        uint64_t i = 2 * ((uint64_t)s * (uint64_t)B + (uint64_t)b);
        uint64_t r = ((uint64_t)qkv_random_u32(stream, i) << 32) | qkv_random_u32(stream, i + 1);
        const int *w = text + r % starts;
        memcpy(ids + (size_t)b * T, w, (size_t)T * sizeof *ids);
        memcpy(targets + (size_t)b * T, w + 1, (size_t)T * sizeof *targets);
    }
}

qkv_status qkv_lm_evaluate(qkv_lm *m, const int *tokens, size_t n, int T, int B, double *loss,
                           int64_t *count, qkv_error *err)
{
    if (n < 2 || T < 1 || B < 1 || T > m->cfg.max_len)
        return qkv_fail(err, QKV_ERR_ARG, "evaluation needs at least 2 tokens, windows of 1 to "
                        "%d tokens and a batch >= 1 (got %zu tokens, T %d, B %d)",
                        m->cfg.max_len, n, T, B);
    const size_t windows = (n - 1) / (size_t)T, rest = (n - 1) % (size_t)T;
    int *ids = malloc((size_t)B * T * sizeof *ids), *tg = malloc((size_t)B * T * sizeof *tg);
    qkv_status st = ids && tg ? QKV_OK : qkv_fail(err, QKV_ERR_NOMEM, "out of memory");
    double total = 0.0;
    int64_t counted = 0;
    /* full windows B at a time, then the shorter last one */
    for (size_t w = 0; !st && w < windows + (rest > 0);) {
        const int len = w < windows ? T : (int)rest;
        const int b = w < windows ? (windows - w < (size_t)B ? (int)(windows - w) : B) : 1;
        for (int k = 0; k < b; k++) {
            const int *x = tokens + (w + (size_t)k) * T;
            memcpy(ids + (size_t)k * len, x, (size_t)len * sizeof *ids);
            memcpy(tg + (size_t)k * len, x + 1, (size_t)len * sizeof *tg);
        }
        double sum = 0.0;
        int c = 0;
        st = qkv_lm_loss(m, ids, tg, b, len, NULL /* evaluation */, &sum, &c, err);
        total += sum, counted += c, w += (size_t)b;
    }
    free(ids), free(tg);
    if (st == QKV_ERR_NUMERIC && m->core.source[0]) {
        /* no step changed a loaded model: its weights are past float's range, as the
         * decoder's logits check says for generation */
        char why[sizeof err->msg];
        snprintf(why, sizeof why, "%s", err ? err->msg : "the loss is not finite");
        st = qkv_fail(err, st, "%s: %s: its weights overflow float's range", m->core.source, why);
    }
    if (st) return st;
    *loss = counted ? total / (double)counted : 0.0;
    if (count) *count = counted;
    return QKV_OK;
}

/* One line of dir/metrics.jsonl (metrics_append). */
static void metrics_line(FILE *fp, const void *progress)
{
    const qkv_lm_train_progress *p = progress;
    fprintf(fp, "{\"epoch\": %.6f, \"step\": %lld, \"loss\": %.6f", p->epoch,
            (long long)p->step, p->loss);
    if (!isnan(p->val_loss)) fprintf(fp, ", \"val_loss\": %.6f", p->val_loss);
    fprintf(fp, ", \"lr\": %.6g, \"grad_norm\": %.4f, \"tokens_per_s\": %.1f, \"elapsed_s\": "
            "%.2f}\n", p->lr, p->grad_norm, p->tokens_per_s, p->elapsed_s);
}

/* Micro-batches per optimizer step. */
static int accum_of(const qkv_lm_train_options *o) { return o->accum > 1 ? o->accum : 1; }

static qkv_status check_options(const qkv_lm *m, size_t n_train, const qkv_lm_train_options *o,
                                qkv_error *err)
{
    if (o->accum < 0) return qkv_fail(err, QKV_ERR_ARG, "accum must be >= 0, got %d", o->accum);
    if (!o->out_dir) return qkv_fail(err, QKV_ERR_ARG, "training needs an output directory");
    if (o->batch < 1 || o->context < 1 || o->context > m->cfg.max_len)
        return qkv_fail(err, QKV_ERR_ARG, "need batch >= 1 and a context of 1 to %d tokens (the "
                        "model's max_len), got batch %d, context %d", m->cfg.max_len, o->batch,
                        o->context);
    if (n_train < (size_t)o->context + 1)
        return qkv_fail(err, QKV_ERR_ARG, "the training text has %zu tokens; a context of %d "
                        "needs at least %d", n_train, o->context, o->context + 1);
    if (o->steps < 0 || !(o->minutes >= 0.0) || (o->steps == 0 && o->minutes == 0.0))
        return qkv_fail(err, QKV_ERR_ARG, "give a number of steps, a time budget, or both");
    if (o->cosine && o->steps > 0 && o->steps <= o->warmup)
        return qkv_fail(err, QKV_ERR_ARG, "a cosine schedule needs steps (%lld) > warmup (%d)",
                        (long long)o->steps, o->warmup);
    if (o->log_every < 1 || o->eval_every < 0 || o->eval_tokens < 0 || o->warmup < 0)
        return qkv_fail(err, QKV_ERR_ARG, "log_every must be >= 1; eval_every, eval_tokens and "
                        "warmup >= 0");
    if (!(o->lr > 0.0f && o->lr <= QKV_MAX_LR))
        return qkv_fail(err, QKV_ERR_ARG, "the learning rate must be in (0, %g] (got %g)",
                        (double)QKV_MAX_LR, (double)o->lr);
    return QKV_OK;
}

/* A run of qkv_lm_train: the optimizer, where training stands, the batch buffers, the clock. */
typedef struct {
    qkv_adam opt;
    lm_train_position pos;
    char ckpt[4096];
    int *ids, *targets; /* (B, T) */
    double t0, elapsed0, budget;
    int64_t run_tokens;
    qkv_lm_train_progress prog;
    grad_buckets gb; /* the gradients' buckets under an overlapping reducer */
} lm_run;

/* The run's start: checks, the output directory, gradients and Adam's moments, and, with
 * resume, the checkpoint's state (shared by every rank). */
static qkv_status run_open(lm_run *r, qkv_lm *m, const int *train, size_t n_train,
                           const qkv_lm_train_options *o, qkv_error *err)
{
    memset(r, 0, sizeof *r);
    qkv_status st = check_options(m, n_train, o, err);
    if (st) return st;
    for (size_t i = 0; i < n_train; i++)
        if (train[i] < 0 || train[i] >= m->cfg.vocab)
            return qkv_fail(err, QKV_ERR_ARG, "training token %zu: id %d outside the vocabulary",
                            i, train[i]);
    const qkv_reducer *rd = o->reducer;
    const int writer = rd_writer(rd);
    if ((st = rd_check_same(rd, rd_hash_ids(0, train, n_train), "training texts", err))) return st;
    if (writer && mkdir(o->out_dir, 0777) && errno != EEXIST)
        return qkv_fail(err, QKV_ERR_IO, "%s: cannot create the directory: %s", o->out_dir,
                        strerror(errno));
    if (!qkv_lm_grads(m)) return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for gradients");
    if ((st = qkv_adam_init(&r->opt, qkv_lm_num_params(m), o->beta1, o->beta2, o->adam_eps,
                            o->weight_decay, err)))
        return st;
    char metrics[4096];
    snprintf(r->ckpt, sizeof r->ckpt, "%s/checkpoint.safetensors", o->out_dir);
    snprintf(metrics, sizeof metrics, "%s/metrics.jsonl", o->out_dir);
    r->pos = (lm_train_position){o->seed, 0.0, 0.0, 0, (int64_t)n_train};
    struct stat sb; /* present: read (a FIFO or device there is refused, not waited on) */
    if (o->resume && writer && !stat(r->ckpt, &sb)) {
        /* windows and dropout follow the saved run's seed */
        if ((st = lm_checkpoint_load(r->ckpt, m, &r->opt, &r->pos, err))) return st;
        if (r->pos.train_tokens != (int64_t)n_train)
            return qkv_fail(err, QKV_ERR_ARG, "%s was trained on a text of %lld tokens, this one "
                            "has %zu: resume on the same data", r->ckpt,
                            (long long)r->pos.train_tokens, n_train);
    } else if (writer) {
        remove(metrics); /* a fresh run starts a fresh log */
    }
    if (rd_parallel(rd) &&
        (st = rd_share_state(rd, qkv_lm_params(m), &r->opt, &r->pos, sizeof r->pos, err)))
        return st;
    const size_t BT = (size_t)o->batch * accum_of(o) * o->context;
    if (!(r->ids = malloc(BT * sizeof *r->ids)) || !(r->targets = malloc(BT * sizeof *r->ids)))
        return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for batches");
    if (rd && rd->start_sum) { /* the gradients' buckets, for an overlapping reducer */
        const int n = qkv_lm_num_tensors(m);
        qkv_param_info *t = malloc((size_t)n * sizeof *t);
        int *event = malloc((size_t)n * sizeof *event);
        st = t && event ? QKV_OK : qkv_fail(err, QKV_ERR_NOMEM, "out of memory");
        if (!st) {
            for (int i = 0; i < n; i++) t[i] = qkv_lm_tensor(m, i);
            qkv_lm_grad_events(m, event);
            st = buckets_init(&r->gb, rd, &m->core, lm_grads(m), t, event, n, err);
        }
        free(t), free(event);
        if (st) return st;
    }
    r->t0 = qkv_now_s(), r->elapsed0 = r->pos.elapsed_s, r->budget = o->minutes * 60.0;
    r->prog.steps = o->steps, r->prog.val_loss = NAN;
    return QKV_OK;
}

static void run_close(lm_run *r)
{
    free(r->ids), free(r->targets);
    qkv_adam_free(&r->opt);
    buckets_free(&r->gb);
}

/* The training time so far, the same on every rank when a time budget decides. */
static qkv_status run_elapsed(lm_run *r, const qkv_reducer *rd, double *elapsed, qkv_error *err)
{
    *elapsed = r->elapsed0 + (qkv_now_s() - r->t0);
    return r->budget > 0.0 ? rd_share(rd, elapsed, sizeof *elapsed, err) : QKV_OK;
}

/* Step s + 1: its windows (accum x batch of them, as a batch that large would draw), then one
 * optimizer step over them, micro-batch by micro-batch, each pass on this rank's shard (the
 * mean over the whole step's tokens). */
static qkv_status run_step(lm_run *r, qkv_lm *m, const int *train, size_t n_train,
                           const qkv_lm_train_options *o, double elapsed, double *lr,
                           qkv_step_result *res, qkv_error *err)
{
    const qkv_reducer *rd = o->reducer;
    const int B = o->batch, T = o->context, n = accum_of(o);
    const int64_t s = r->opt.step;
    gather_windows(r->ids, r->targets, train, n_train, B * n, T, r->pos.seed, s);
    /* the schedule at this step; with a time budget, at the time it starts */
    *lr = learning_rate(o, s + 1, elapsed, r->budget);
    float grad_scale = 0.0f; /* the per-token mean */
    if (rd_parallel(rd) || n > 1) { /* over the whole step's tokens, whichever pass holds them */
        const int64_t tokens = rd_target_tokens(r->targets, (size_t)B * n * T);
        grad_scale = 1.0f / (float)(tokens ? tokens : 1);
    }
    const qkv_step_options so = {(float)*lr, o->clip, grad_scale, 0.0f,
                                 stream_of(r->pos.seed, STREAM_DROPOUT, (uint64_t)s + 1), 0, rd,
                                 0};
    qkv_status st = step_begin(&m->core, lm_grads(m), &so, n, res, err);
    if (st) return st;
    for (int k = 0; k < n; k++) {
        int first = 0, count = B;
        if (rd_parallel(rd)) qkv_shard_of(B, rd->rank, rd->size, &first, &count);
        const size_t row = (size_t)k * B + (size_t)first;
        st = step_pass_lm(m, r->ids + row * T, r->targets + row * T, count, T, &so, row,
                          k == n - 1 ? &r->gb : NULL, st, res, err);
    }
    st = step_end(&m->core, &r->opt, st, &so, &r->gb, res, err);
    if (st == QKV_ERR_NUMERIC) {
        char why[sizeof err->msg];
        snprintf(why, sizeof why, "%s", err ? err->msg : "non-finite loss");
        st = qkv_fail(err, st, "step %lld: %s; stopping before the parameters change (the last "
                      "checkpoint is intact)", (long long)s + 1, why);
    }
    return st;
}

/* After a step: the progress, and at a report the held-out loss (when due), the log line and
 * the checkpoint (the writer's). */
static qkv_status run_report(lm_run *r, qkv_lm *m, const int *val, size_t n_val, size_t n_train,
                             const qkv_lm_train_options *o, int last, int stop, qkv_error *err)
{
    const int writer = rd_writer(o->reducer), B = o->batch, T = o->context;
    const int64_t step = r->opt.step;
    const int evaluate = writer && n_val >= 2 &&
                         ((o->eval_every > 0 && step % o->eval_every == 0) || last);
    qkv_lm_train_progress *prog = &r->prog;
    prog->step = step;
    prog->epoch = (double)step * B * accum_of(o) * T / (double)n_train;
    prog->loss = r->pos.loss_sum / (double)(r->pos.loss_tokens ? r->pos.loss_tokens : 1);
    prog->val_loss = NAN;
    prog->tokens_per_s = (double)r->run_tokens / (qkv_now_s() - r->t0 + 1e-9);
    prog->elapsed_s = r->pos.elapsed_s;
    prog->report = step % o->log_every == 0 || evaluate || last || stop;
    qkv_status st = QKV_OK;
    if (evaluate) {
        const size_t nv = o->eval_tokens > 0 && n_val > (size_t)o->eval_tokens
                              ? (size_t)o->eval_tokens : n_val;
        if ((st = qkv_lm_evaluate(m, val, nv, T, B, &prog->val_loss, NULL, err))) return st;
    }
    if (prog->report && writer) {
        if ((st = metrics_append(o->out_dir, metrics_line, prog, err))) return st;
        r->pos.loss_sum = 0.0, r->pos.loss_tokens = 0;
        if ((st = lm_checkpoint_save(r->ckpt, m, &r->opt, &r->pos, err))) return st;
    }
    if (o->progress) o->progress(prog, o->progress_ctx);
    return QKV_OK;
}

qkv_status qkv_lm_train(qkv_lm *m, const int *train, size_t n_train, const int *val,
                        size_t n_val, const qkv_lm_train_options *o, qkv_error *err)
{
    const qkv_reducer *rd = o->reducer;
    lm_run r;
    qkv_status st = run_open(&r, m, train, n_train, o, err);
    int stopped = 0;
    while (!st) {
        double elapsed, lr;
        if ((st = run_elapsed(&r, rd, &elapsed, err))) break;
        if ((o->steps > 0 && r.opt.step >= o->steps) || (r.budget > 0.0 && elapsed >= r.budget))
            break;
        qkv_step_result res;
        if ((st = run_step(&r, m, train, n_train, o, elapsed, &lr, &res, err))) break;
        r.pos.loss_sum += res.loss, r.pos.loss_tokens += res.tokens;
        r.run_tokens += res.tokens;
        if ((st = run_elapsed(&r, rd, &elapsed, err))) break;
        r.pos.elapsed_s = elapsed;
        r.prog.grad_norm = res.grad_norm, r.prog.lr = lr;
        int stop = o->stop_after_steps > 0 && r.opt.step >= o->stop_after_steps;
        if ((st = rd_ask_stop(o->should_stop, o->should_stop_ctx, rd, &stop, err))) break;
        const int last = (o->steps > 0 && r.opt.step >= o->steps) ||
                         (r.budget > 0.0 && elapsed >= r.budget);
        if ((st = run_report(&r, m, val, n_val, n_train, o, last, stop, err))) break;
        if (stop && !last) { /* the model is saved only at the end */
            stopped = 1;
            break;
        }
    }
    if (!st && !stopped && rd_writer(rd)) st = qkv_lm_save(m, o->out_dir, err);
    run_close(&r);
    return st;
}
