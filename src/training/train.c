/* The training loop (d2l's train_seq2seq): teacher forcing, masked cross-entropy, Adam,
 * gradient clipping, with checkpoints from which a run resumes exactly. Everything random
 * is a pure function of (seed, epoch, step), so the state to save is just the parameters,
 * Adam's moments and where we are. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/stat.h>
#include <time.h>

#include "core/internal.h"

qkv_train_options qkv_train_default_options(void)
{
    qkv_train_options o = {0};
    o.batch = 64, o.epochs = 200, o.lr = 0.005f;
    o.beta1 = 0.9f, o.beta2 = 0.999f, o.adam_eps = 1e-8f, o.clip = 1.0f; /* torch.optim.Adam's */
    return o;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The order of the examples in an epoch: a Fisher-Yates shuffle drawn from (seed, epoch). */
static void epoch_order(int *order, int n, uint64_t seed, int epoch)
{
    uint64_t stream = seed * 0x9e3779b97f4a7c15ULL + (uint64_t)epoch + 1;
    for (int i = 0; i < n; i++) order[i] = i;
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(qkv_random_u32(stream, (uint64_t)i) % (uint32_t)(i + 1));
        int t = order[i];
        order[i] = order[j], order[j] = t;
    }
}

typedef struct {
    int *src, *src_valid, *tgt_in, *tgt_out;
} batch_buffers;

/* Gather examples order[first .. first+B) into a batch; decoder input is <bos> + Y[:-1]. */
static qkv_batch gather(const qkv_dataset *d, const int *order, int first, int B, batch_buffers *bb)
{
    const int T = d->num_steps;
    for (int i = 0; i < B; i++) {
        int e = order[first + i];
        memcpy(bb->src + (size_t)i * T, d->src + (size_t)e * T, T * sizeof(int));
        memcpy(bb->tgt_out + (size_t)i * T, d->tgt + (size_t)e * T, T * sizeof(int));
        bb->src_valid[i] = d->src_valid[e];
        bb->tgt_in[(size_t)i * T] = QKV_BOS;
        memcpy(bb->tgt_in + (size_t)i * T + 1, d->tgt + (size_t)e * T, (T - 1) * sizeof(int));
    }
    return (qkv_batch){B, T, T, bb->src, bb->src_valid, bb->tgt_in, bb->tgt_out};
}

static void log_metrics(const char *dir, const qkv_train_progress *p)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    FILE *fp = fopen(path, "a");
    if (!fp) return; /* the log is a convenience; training state lives in the checkpoint */
    fprintf(fp, "{\"epoch\": %d, \"step\": %lld, \"loss\": %.6f, \"d2l_loss\": %.6f, "
            "\"tokens_per_s\": %.1f}\n", p->epoch, (long long)p->step, p->loss, p->d2l_loss,
            p->tokens_per_s);
    fclose(fp);
}

static qkv_status check_dataset(const qkv_transformer *m, const qkv_dataset *d, qkv_error *err)
{
    const qkv_transformer_config *c = qkv_transformer_get_config(m);
    if (d->n <= 0 || d->num_steps <= 0)
        return qkv_fail(err, QKV_ERR_ARG, "the training data is empty");
    if (d->num_steps > c->max_len)
        return qkv_fail(err, QKV_ERR_ARG, "num_steps %d exceeds the model's maximum length %d",
                        d->num_steps, c->max_len);
    for (size_t i = 0; i < (size_t)d->n * d->num_steps; i++)
        if (d->src[i] < 0 || d->src[i] >= c->src_vocab || d->tgt[i] < 0 ||
            d->tgt[i] >= c->tgt_vocab)
            return qkv_fail(err, QKV_ERR_ARG, "example %zu: a token id is outside the "
                            "vocabulary", i / d->num_steps);
    return QKV_OK;
}

qkv_status qkv_train(qkv_transformer *m, const qkv_dataset *d, const qkv_train_options *o,
                     qkv_error *err)
{
    qkv_status st = check_dataset(m, d, err);
    if (st) return st;
    if (o->batch <= 0 || o->epochs < 0 || !o->out_dir)
        return qkv_fail(err, QKV_ERR_ARG, "training needs batch > 0, epochs >= 0 and an output "
                        "directory");
    if (mkdir(o->out_dir, 0777) && errno != EEXIST)
        return qkv_fail(err, QKV_ERR_IO, "%s: cannot create the directory: %s", o->out_dir,
                        strerror(errno));
    const size_t n = qkv_transformer_num_params(m);
    float *params = qkv_transformer_params(m), *grads = qkv_transformer_grads(m);
    if (!grads) return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for gradients");
    qkv_adam opt;
    if ((st = qkv_adam_init(&opt, n, o->beta1, o->beta2, o->adam_eps, o->weight_decay, err)))
        return st;
    char ckpt[4096];
    snprintf(ckpt, sizeof ckpt, "%s/checkpoint.safetensors", o->out_dir);
    qkv_train_position pos = {0, 0, o->seed, 0.0, 0};
    FILE *probe = o->resume ? fopen(ckpt, "rb") : NULL;
    if (probe) {
        fclose(probe);
        /* the data order and dropout follow the saved run's seed */
        if ((st = qkv_checkpoint_load(ckpt, m, &opt, &pos, err))) return qkv_adam_free(&opt), st;
    }
    const int T = d->num_steps, B = o->batch, batches = (d->n + B - 1) / B;
    int *order = malloc((size_t)d->n * sizeof *order);
    batch_buffers bb = {malloc((size_t)B * T * sizeof(int)), malloc((size_t)B * sizeof(int)),
                        malloc((size_t)B * T * sizeof(int)), malloc((size_t)B * T * sizeof(int))};
    if (!order || !bb.src || !bb.src_valid || !bb.tgt_in || !bb.tgt_out) {
        st = qkv_fail(err, QKV_ERR_NOMEM, "out of memory for batches");
        goto done;
    }
    qkv_train_progress prog = {0};
    prog.epochs = o->epochs, prog.batches = batches;
    for (int epoch = pos.epoch; epoch < o->epochs && !st; epoch++) {
        epoch_order(order, d->n, pos.seed, epoch);
        double t0 = now_s();
        int64_t epoch_tokens_timed = 0;
        for (int bi = pos.batch; bi < batches; bi++) {
            int first = bi * B, size = d->n - first < B ? d->n - first : B;
            qkv_batch batch = gather(d, order, first, size, &bb);
            memset(grads, 0, n * sizeof *grads);
            double loss = 0.0;
            int tokens = 0;
            uint64_t dropout_seed = pos.seed ^ ((uint64_t)(opt.step + 1) * 0xd1b54a32d192ed03ULL);
            /* d2l differentiates sum_seq mean_t(loss): each token counts 1/num_steps. */
            float scale = o->d2l_loss_scale ? 1.0f / (float)T : 0.0f; /* 0: per-token mean */
            st = qkv_transformer_loss(m, &batch, 1, scale, o->label_smoothing, 1, dropout_seed,
                                      &loss, &tokens, err);
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
            if (skipped)
                opt.step++;
            else
                qkv_adam_update(&opt, params, grads, o->lr);
            pos.batch = bi + 1;
            if (!skipped)
                pos.epoch_loss += loss, pos.epoch_tokens += tokens, epoch_tokens_timed += tokens;
            prog.epoch = epoch + 1, prog.batch = bi + 1, prog.step = opt.step;
            prog.loss = pos.epoch_loss / (double)(pos.epoch_tokens ? pos.epoch_tokens : 1);
            prog.d2l_loss = prog.loss / T;
            prog.tokens_per_s = (double)epoch_tokens_timed / (now_s() - t0 + 1e-9);
            prog.grad_norm = norm;
            prog.end_of_epoch = bi + 1 == batches;
            int stop = o->stop_after_steps > 0 && opt.step >= o->stop_after_steps;
            if (prog.end_of_epoch) pos.epoch = epoch + 1, pos.batch = 0;
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
        }
        pos.batch = 0;
    }
    if (!st) st = qkv_transformer_save(m, o->out_dir, err);
done:
    free(order), free(bb.src), free(bb.src_valid), free(bb.tgt_in), free(bb.tgt_out);
    qkv_adam_free(&opt);
    return st;
}
