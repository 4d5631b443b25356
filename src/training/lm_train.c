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
    if (st) return st;
    *loss = counted ? total / (double)counted : 0.0;
    if (count) *count = counted;
    return QKV_OK;
}

/* Appends one line to dir/metrics.jsonl. A failure is an error like any other write's: the
 * log is the run's record, and losing it silently would leave a run that looks complete. */
static qkv_status log_metrics(const char *dir, const qkv_lm_train_progress *p, qkv_error *err)
{
    char path[4096];
    FILE *fp;
    qkv_status st = metrics_open(&fp, path, sizeof path, dir, err);
    if (st) return st;
    fprintf(fp, "{\"epoch\": %.6f, \"step\": %lld, \"loss\": %.6f", p->epoch,
            (long long)p->step, p->loss);
    if (!isnan(p->val_loss)) fprintf(fp, ", \"val_loss\": %.6f", p->val_loss);
    fprintf(fp, ", \"lr\": %.6g, \"grad_norm\": %.4f, \"tokens_per_s\": %.1f, \"elapsed_s\": "
            "%.2f}\n", p->lr, p->grad_norm, p->tokens_per_s, p->elapsed_s);
    return metrics_close(fp, path, err);
}

static qkv_status check_options(const qkv_lm *m, size_t n_train, const qkv_lm_train_options *o,
                                qkv_error *err)
{
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
    return QKV_OK;
}

qkv_status qkv_lm_train(qkv_lm *m, const int *train, size_t n_train, const int *val,
                        size_t n_val, const qkv_lm_train_options *o, qkv_error *err)
{
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
    const size_t n = qkv_lm_num_params(m);
    const int B = o->batch, T = o->context;
    if (!qkv_lm_grads(m)) return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for gradients");
    qkv_adam opt;
    if ((st = qkv_adam_init(&opt, n, o->beta1, o->beta2, o->adam_eps, o->weight_decay, err)))
        return st;
    char ckpt[4096], metrics[4096];
    snprintf(ckpt, sizeof ckpt, "%s/checkpoint.safetensors", o->out_dir);
    snprintf(metrics, sizeof metrics, "%s/metrics.jsonl", o->out_dir);
    lm_train_position pos = {o->seed, 0.0, 0.0, 0, (int64_t)n_train};
    FILE *probe = o->resume && writer ? fopen(ckpt, "rb") : NULL;
    if (probe) {
        fclose(probe);
        /* windows and dropout follow the saved run's seed */
        if ((st = lm_checkpoint_load(ckpt, m, &opt, &pos, err))) return qkv_adam_free(&opt), st;
        if (pos.train_tokens != (int64_t)n_train) {
            qkv_adam_free(&opt);
            return qkv_fail(err, QKV_ERR_ARG, "%s was trained on a text of %lld tokens, this one "
                            "has %zu: resume on the same data", ckpt,
                            (long long)pos.train_tokens, n_train);
        }
    } else if (writer) {
        remove(metrics); /* a fresh run starts a fresh log */
    }
    if (rd_parallel(rd) &&
        (st = rd_share_state(rd, qkv_lm_params(m), &opt, &pos, sizeof pos, err))) {
        qkv_adam_free(&opt);
        return st;
    }
    int *ids = malloc((size_t)B * T * sizeof *ids), *targets = malloc((size_t)B * T * sizeof *ids);
    if (!ids || !targets) {
        st = qkv_fail(err, QKV_ERR_NOMEM, "out of memory for batches");
        goto done;
    }
    const double t0 = qkv_now_s(), elapsed0 = pos.elapsed_s, budget = o->minutes * 60.0;
    int64_t run_tokens = 0;
    qkv_lm_train_progress prog = {0};
    prog.steps = o->steps, prog.val_loss = NAN;
    for (;;) {
        double elapsed = elapsed0 + (qkv_now_s() - t0);
        if (budget > 0.0 && (st = rd_share(rd, &elapsed, sizeof elapsed, err))) break;
        if ((o->steps > 0 && opt.step >= o->steps) || (budget > 0.0 && elapsed >= budget)) break;
        const int64_t s = opt.step; /* steps done: this is step s + 1 */
        gather_windows(ids, targets, train, n_train, B, T, pos.seed, s);
        /* the schedule at this step; with a time budget, at the time it starts */
        const double lr = learning_rate(o, s + 1, elapsed, budget);
        float grad_scale = 0.0f; /* the per-token mean */
        int first = 0, count = B;
        if (rd_parallel(rd)) { /* over the whole batch's tokens, whichever shard holds them */
            const int64_t tokens = rd_target_tokens(targets, (size_t)B * T);
            grad_scale = 1.0f / (float)(tokens ? tokens : 1);
            qkv_shard_of(B, rd->rank, rd->size, &first, &count);
        }
        const qkv_step_options so = {(float)lr, o->clip, grad_scale, 0.0f,
                                     stream_of(pos.seed, STREAM_DROPOUT, (uint64_t)s + 1), 0,
                                     rd, (uint64_t)first};
        qkv_step_result res;
        if ((st = qkv_lm_train_step(m, &opt, ids + (size_t)first * T, targets + (size_t)first * T,
                                    count, T, &so, &res, err))) {
            if (st == QKV_ERR_NUMERIC) {
                char why[sizeof err->msg];
                snprintf(why, sizeof why, "%s", err ? err->msg : "non-finite loss");
                st = qkv_fail(err, st, "step %lld: %s; stopping before the parameters change "
                              "(the last checkpoint is intact)", (long long)s + 1, why);
            }
            break;
        }
        const double loss = res.loss, norm = res.grad_norm;
        const int tokens = res.tokens;
        pos.loss_sum += loss, pos.loss_tokens += tokens, run_tokens += tokens;
        elapsed = elapsed0 + (qkv_now_s() - t0);
        if (budget > 0.0 && (st = rd_share(rd, &elapsed, sizeof elapsed, err))) break;
        pos.elapsed_s = elapsed;
        int stop = o->stop_after_steps > 0 && opt.step >= o->stop_after_steps;
        if ((st = rd_ask_stop(o->should_stop, o->should_stop_ctx, rd, &stop, err))) break;
        const int last = (o->steps > 0 && opt.step >= o->steps) ||
                         (budget > 0.0 && elapsed >= budget);
        const int evaluate = writer && n_val >= 2 &&
                             ((o->eval_every > 0 && opt.step % o->eval_every == 0) || last);
        prog.step = opt.step;
        prog.epoch = (double)opt.step * B * T / (double)n_train;
        prog.loss = pos.loss_sum / (double)(pos.loss_tokens ? pos.loss_tokens : 1);
        prog.val_loss = NAN;
        prog.tokens_per_s = (double)run_tokens / (qkv_now_s() - t0 + 1e-9);
        prog.grad_norm = norm, prog.lr = lr, prog.elapsed_s = elapsed;
        prog.report = opt.step % o->log_every == 0 || evaluate || last || stop;
        if (evaluate) {
            size_t nv = o->eval_tokens > 0 && n_val > (size_t)o->eval_tokens ? (size_t)o->eval_tokens
                                                                              : n_val;
            if ((st = qkv_lm_evaluate(m, val, nv, T, B, &prog.val_loss, NULL, err))) break;
        }
        if (prog.report && writer) {
            if ((st = log_metrics(o->out_dir, &prog, err))) break;
            pos.loss_sum = 0.0, pos.loss_tokens = 0;
            if ((st = lm_checkpoint_save(ckpt, m, &opt, &pos, err))) break;
        }
        if (o->progress) o->progress(&prog, o->progress_ctx);
        if (stop && !last) goto done; /* the model is saved only at the end */
    }
    if (!st && writer) st = qkv_lm_save(m, o->out_dir, err);
done:
    free(ids), free(targets);
    qkv_adam_free(&opt);
    return st;
}
