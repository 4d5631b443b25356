/* SPDX-License-Identifier: MIT */
/* What the translation training driver (train.c) is built from: the batches of an epoch
 * (batches.c), validation with its history (validation.c), and metrics.jsonl, which the
 * language model's driver (lm_train.c) appends to the same way. Private to the library. */
#ifndef QKV_TRAINING_H
#define QKV_TRAINING_H

#include <stdio.h>

#include "core/internal.h"
#include "models/model.h"
#include "ops/cpu/optimizer.h"

/* ---- the optimizer (adam.c) ---------------------------------------------------------------- */

/* The next Adam step's constants at learning rate lr: counts the step (opt->step + 1). */
adam_hyper adam_step_hyper(qkv_adam *opt, float lr);

/* ---- batches (batches.c) ------------------------------------------------------------------ */

/* A pair's length and its place in the shuffled order. */
typedef struct {
    int len, at;
} keyed;

/* An epoch's batches: batch b is the examples items[first[b] .. first[b + 1]). */
typedef struct {
    int *items, *first, n_batches;
    /* batches by length: each pair's length, and work space */
    int *len, *order, *bounds, *perm;
    keyed *keys;
    double mean_len;
} epoch_plan;

qkv_status plan_init(epoch_plan *p, const qkv_dataset *d, int by_tokens, qkv_error *err);
void plan_free(epoch_plan *p);
/* d2l's batches: the examples shuffled from (seed, epoch), `batch` at a time. */
void plan_fixed(epoch_plan *p, const qkv_dataset *d, int batch, uint64_t seed, int epoch);
/* Batches of similar length up to a token budget (qkv_train_batches). */
void plan_tokens(epoch_plan *p, const qkv_dataset *d, int budget, uint64_t seed, int epoch);

/* A batch's ids, sized for the largest batch of a run. */
typedef struct {
    int *src, *src_valid, *tgt_in, *tgt_out;
} batch_buffers;

qkv_status batch_buffers_init(batch_buffers *bb, int B, int T, qkv_error *err);
void batch_buffers_free(batch_buffers *bb);
/* Examples items[0 .. B) as a batch of (B, Ts) sources and (B, Tt) targets; the decoder
 * input is start + Y[:-1], start the model's decoder_start (<bos>, or Marian's <pad>). */
qkv_batch gather(const qkv_dataset *d, const int *items, int B, int Ts, int Tt, int start,
                 batch_buffers *bb);
/* The batch's padded lengths: the dataset's num_steps, or (cut) its longest pair's. */
void batch_lengths(const qkv_dataset *d, const int *items, int B, int cut, int *Ts, int *Tt);

/* ---- validation (validation.c) -------------------------------------------------------------- */

/* Per-token cross-entropy (no smoothing, no dropout) of o->valid, and the corpus BLEU-4
 * (x 100) of its greedy translations when o->valid_bleu (NaN otherwise), and their sacreBLEU
 * and chrF2 when o->valid_reference_text is set too (NaN otherwise). */
qkv_status validate(qkv_transformer *m, const qkv_train_options *o, double *val_loss,
                    double *bleu, double *sacrebleu, double *chrf, qkv_error *err);

/* The validations so far, one per epoch that ran one (or per valid_every steps: each records
 * its step, else -1); best and patience follow from them. */
typedef struct {
    int n, cap;
    int *epoch;
    int64_t *step;
    double *val_loss, *bleu;
} history;

void history_free(history *h);
/* -1: out of memory */
int history_add(history *h, int epoch, int64_t step, double val_loss, double bleu);
/* The index of the best validation (-1 if none) and how many came after it. */
int history_best(const history *h, int by_bleu, int *since);
qkv_status history_save(const history *h, const char *path, qkv_error *err);
/* Reads the validations of epochs <= up_to (those that record a step: of steps <= up_to_step);
 * a missing file is an empty history. */
qkv_status history_load(history *h, const char *path, int up_to, int64_t up_to_step,
                        qkv_error *err);

/* ---- a step in phases (step.c) -------------------------------------------------------------
 * qkv_*_train_step is step_begin, one pass and step_end. Gradient accumulation takes several
 * passes (micro-batches) between them: each adds its gradients, loss and tokens, and the one
 * step_end sums them over the ranks (data-parallel: one allreduce per step), clips and updates.
 * A pass after a failed one (st) does nothing, but every rank still comes to step_end, where
 * the others wait for it in the sums. */
qkv_status step_begin(model_core *c, float *grads, const qkv_step_options *o,
                      int micro_batches, qkv_step_result *r, qkv_error *err);

/* Buckets of the gradient buffer for a data-parallel step whose reducer overlaps (start_sum):
 * contiguous ranges, in the order the backward pass finishes them, each started once the pass
 * has passed the event (grads_done call) it waits for; the last pass of a step carries the
 * hook (bucket_hook), and step_end starts what is left and waits for them all. The same plan
 * on every rank, whatever happens on it: a rank whose pass failed before its backward starts
 * every bucket at step_end, in the same order. */
typedef struct {
    size_t offset, count;
    int after; /* the event after which its gradients are final */
} grad_bucket;

typedef struct {
    grad_bucket *b;
    int n, next, events;
    float *grads;
    const qkv_reducer *rd;
    int failed; /* a start_sum failed */
} grad_buckets;

/* The plan of a model's tensors (n_tensors, qkv_*_tensor), their events (qkv_*_grad_events)
 * and the reducer's bucket size; no plan (b NULL) unless rd overlaps over several ranks and
 * the model's gradients (grads) are on the host. */
qkv_status buckets_init(grad_buckets *p, const qkv_reducer *rd, const model_core *c,
                        float *grads, const qkv_param_info *tensors, const int *event,
                        int n_tensors, qkv_error *err);
void buckets_free(grad_buckets *p);
/* The hook of a pass's options (qkv_loss_options.grads_done with grads_ctx = the plan). */
void bucket_hook(void *ctx);

/* The passes: with hook (the step's last pass under an overlapping reducer), its buckets start
 * during backward. */
qkv_status step_pass_transformer(qkv_transformer *m, const qkv_batch *b,
                                 const qkv_step_options *o, uint64_t first_example,
                                 grad_buckets *hook, qkv_status st, qkv_step_result *r,
                                 qkv_error *err);
qkv_status step_pass_lm(qkv_lm *m, const int *ids, const int *targets, int B, int T,
                        const qkv_step_options *o, uint64_t first_example, grad_buckets *hook,
                        qkv_status st, qkv_step_result *r, qkv_error *err);
/* The sum over the ranks (the buckets, when a plan is given), the clip and the update. */
qkv_status step_end(model_core *c, qkv_adam *opt, qkv_status st, const qkv_step_options *o,
                    grad_buckets *buckets, qkv_step_result *r, qkv_error *err);

/* ---- metrics.jsonl (train.c; train-lm's driver, lm_train.c, too) --------------------------- */

/* Appends one line to dir/metrics.jsonl, never through a symbolic link: line(fp, progress),
 * each driver's own. A failed open, write or close is an error like any other write's, naming
 * the file: the log is the run's record, and losing it silently would leave a run that looks
 * complete. */
qkv_status metrics_append(const char *dir, void (*line)(FILE *fp, const void *progress),
                          const void *progress, qkv_error *err);

#endif
