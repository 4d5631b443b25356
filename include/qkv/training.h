/* SPDX-License-Identifier: MIT */
/* qkv/training.h: training: Adam, one training step (qkv_*_train_step), and the training loops of
 * both models with their options. Part of qkv.h, which includes every part; its opening comment is
 * the tour. */
#ifndef QKV_API_TRAINING_H
#define QKV_API_TRAINING_H

#include "qkv/models.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------
 * Training
 * ------------------------------------------------------------------------------------- */

/* The optimiser's settings a run may take. Past them no run learns anything: a learning rate
 * or a weight decay of 1e30 takes the weights to 1e30 and the logits to NaN within a step
 * (every trainer refuses them, QKV_ERR_ARG). The learning rate of the constant schedule is in
 * (0, QKV_MAX_LR], the noam schedule's factor in (0, QKV_MAX_LR_FACTOR], the weight decay in
 * [0, QKV_MAX_WEIGHT_DECAY], Adam's betas in [0, 1) and its epsilon in (0, QKV_MAX_ADAM_EPS]. */
#define QKV_MAX_LR 10.0f
#define QKV_MAX_LR_FACTOR 100.0f
#define QKV_MAX_WEIGHT_DECAY 1.0f
#define QKV_MAX_ADAM_EPS 1.0f

/* Adam (Kingma & Ba 2015) with optional decoupled weight decay (AdamW). */
typedef struct {
    float beta1, beta2, eps, weight_decay;
    int64_t step;
    size_t n;
    float *m, *v; /* owned: first and second moments (n each) */
} qkv_adam;

/* Moments for n parameters; QKV_ERR_ARG for settings outside the limits above. */
QKV_API
qkv_status qkv_adam_init(qkv_adam *opt, size_t n, float beta1, float beta2, float eps,
                         float weight_decay, qkv_error *err);
QKV_API
void qkv_adam_free(qkv_adam *opt);
/* One update of params (n) from grads (n) with learning rate lr. */
QKV_API
void qkv_adam_update(qkv_adam *opt, float *params, const float *grads, float lr);
/* Scales grads so that their global L2 norm is at most max_norm; returns the norm before
 * clipping (NaN or Inf if a gradient is not finite, in which case nothing is scaled). */
QKV_API
double qkv_clip_grad_norm(float *grads, size_t n, double max_norm);

/* ---- data-parallel training ---------------------------------------------------------------
 * A step split over `size` ranks (processes, on one machine or several): rank r runs the
 * loss pass on its shard of the whole batch, the ranks sum their gradients, and every rank
 * applies the same update, so the parameters stay identical everywhere. The library does no
 * communication itself; the caller supplies it here (the qkv tool uses MPI,
 * src/cli/mpi_reducer.c). Every rank calls these in the same order with the same sizes; each
 * returns 0 on success. NULL (or size 1) is one process, as without it. */
typedef struct {
    int rank, size;
    int (*sum_floats)(void *ctx, float *buf, size_t n);   /* in place: the sum over the ranks */
    int (*sum_doubles)(void *ctx, double *buf, size_t n); /* in place: the sum over the ranks */
    int (*broadcast)(void *ctx, void *buf, size_t bytes); /* rank 0's bytes to every rank */
    void *ctx;
    /* Overlap, optional (NULL: the gradients are summed with one sum_floats after the backward
     * pass): start_sum starts summing buf[0 .. n) over the ranks, in place, and returns at once;
     * finish_sums waits for every sum started. The training loops (qkv_train, qkv_lm_train) then
     * sum the gradients in buckets of about bucket_bytes (0: 1 MB) as the backward pass
     * finishes them (qkv_transformer_grad_events), the same buckets in the same order on every
     * rank, so that the sums run while the pass goes on. */
    int (*start_sum)(void *ctx, float *buf, size_t n);
    int (*finish_sums)(void *ctx);
    size_t bucket_bytes;
} qkv_reducer;

/* Rank `rank` of `size`'s shard of a batch of B sequences: [*first, *first + *count), the
 * first B % size ranks taking one more. */
QKV_API
void qkv_shard_of(int B, int rank, int size, int *first, int *count);

/* ---- one training step --------------------------------------------------------------------
 * llm.c's step in one call: zero the gradients, forward and loss, backward, clip the global
 * gradient norm, one Adam update. qkv_train and qkv_lm_train are drivers over it; a program
 * with its own data, schedule or checkpoints calls it directly:
 *
 *     qkv_step_options o = {.lr = 1e-3f, .clip = 1.0f, .dropout_seed = seed + step};
 *     qkv_step_result r;
 *     if (qkv_transformer_train_step(m, &opt, &batch, &o, &r, &err)) ...
 *
 * A loss or gradient that is not finite never reaches the parameters: the step fails with
 * QKV_ERR_NUMERIC and changes nothing but the gradients, or, with skip_nonfinite, is skipped
 * and still counted in opt->step (so that later steps keep their dropout streams). */
typedef struct {
    float lr;              /* this step's learning rate */
    float clip;            /* clip the global gradient norm to this (0: off) */
    float grad_scale;      /* as qkv_loss_options: 0 the per-token mean */
    float label_smoothing; /* as qkv_loss_options */
    uint64_t dropout_seed; /* this step's dropout stream */
    int skip_nonfinite;    /* 1: skip a non-finite step instead of failing */
    /* Data-parallel (reducer->size > 1): the batch is this rank's shard, starting at sequence
     * first_example of the whole batch, and grad_scale must be set (1 / the whole batch's
     * target tokens for the per-token mean); the gradients, loss and tokens are summed over
     * the ranks before clipping, so every rank takes the same step. */
    const qkv_reducer *reducer;
    uint64_t first_example;
} qkv_step_options;

typedef struct {
    double loss;      /* the sum of the token losses (over every rank's shard) */
    int tokens;       /* the tokens counted (over every rank's shard) */
    double grad_norm; /* before clipping; NaN if the loss was not finite */
    int skipped;      /* 1: not applied (skip_nonfinite) */
} qkv_step_result;

/* One step of the encoder-decoder on a teacher-forced batch. */
QKV_API
qkv_status qkv_transformer_train_step(qkv_transformer *m, qkv_adam *opt, const qkv_batch *b,
                                      const qkv_step_options *o, qkv_step_result *r,
                                      qkv_error *err);
/* One step of the language model on ids (B, T) against targets (B, T) (qkv_lm_loss). */
QKV_API
qkv_status qkv_lm_train_step(qkv_lm *m, qkv_adam *opt, const int *ids, const int *targets, int B,
                             int T, const qkv_step_options *o, qkv_step_result *r,
                             qkv_error *err);

/* ---------------------------------------------------------------------------------------
 * The training loop
 * ------------------------------------------------------------------------------------- */

/* Sentence pairs as ids padded to num_steps (d2l's build_array_nmt), owned by the caller. */
typedef struct {
    int n, num_steps;
    const int *src, *src_valid; /* (n, num_steps), (n) */
    const int *tgt, *tgt_valid; /* (n, num_steps), (n): target + <eos>, padded */
} qkv_dataset;

typedef struct {
    int epoch, epochs;     /* 1-based epoch being trained */
    int batch, batches;    /* batches done in this epoch */
    int64_t step;          /* optimizer steps so far */
    double loss;           /* per-token loss over this epoch so far */
    double d2l_loss;       /* what d2l prints: loss / num_steps */
    double tokens_per_s;   /* target tokens per second in this epoch */
    double grad_norm;      /* of the last step, before clipping */
    int end_of_epoch;
    double lr;             /* of the last step */
    int validated;         /* this epoch end ran validation: val_loss (and bleu) hold it */
    double val_loss;       /* per-token cross-entropy on the held-out pairs, no smoothing */
    double bleu;           /* corpus BLEU-4 (0..100) of their greedy translations; NaN if off */
    double sacrebleu, chrf; /* sacreBLEU's BLEU and chrF2 of their text against
                             * valid_reference_text; NaN if off */
    int best;              /* the best validation so far: the model went to out_dir/best */
    int stopping;          /* early stopping ends the run after this epoch */
} qkv_train_progress;

/* The learning rate over steps. */
typedef enum {
    QKV_LR_CONSTANT = 0, /* lr */
    QKV_LR_NOAM = 1      /* the paper's (section 5.3, eq. 3): lr_factor * d_model^-0.5 *
                            min(step^-0.5, step * warmup^-1.5), steps counted from 1 */
} qkv_lr_schedule;

/* "constant" or "noam" ("unknown" outside the enum), and back (QKV_ERR_ARG naming the choices
 * otherwise). */
QKV_API
const char *qkv_lr_schedule_name(qkv_lr_schedule s);
QKV_API
qkv_status qkv_lr_schedule_parse(qkv_lr_schedule *s, const char *name, qkv_error *err);

typedef struct {
    const char *out_dir;    /* checkpoint.safetensors, metrics.jsonl, the model at the end */
    int batch, epochs;
    float lr, beta1, beta2, adam_eps, weight_decay;
    float clip;             /* global gradient norm (<= 0: none) */
    float label_smoothing;
    int d2l_loss_scale;     /* differentiate d2l's loss (sum of per-sequence means) instead of
                             * the per-token mean: same minimum, d2l's step sizes */
    uint64_t seed;          /* data order and dropout */
    int resume;             /* continue from out_dir/checkpoint.safetensors if it exists */
    int checkpoint_every;   /* also checkpoint every this many steps (0: at epoch ends only) */
    int skip_nonfinite;     /* skip a step whose loss or gradient is NaN/Inf instead of failing */
    int stop_after_steps;   /* stop (cleanly, after checkpointing) at this step; 0: never */
    void (*progress)(const qkv_train_progress *p, void *ctx); /* after every step, or NULL */
    void *progress_ctx;
    /* Asked after every step (NULL: never): nonzero stops training there as stop_after_steps
     * does, checkpointed and resumable, the model not saved: how a program lets its user
     * interrupt a run (Ctrl-C) without losing it. Data-parallel: every rank passes one, and
     * rank 0's answer rules. */
    int (*should_stop)(void *ctx);
    void *should_stop_ctx;
    qkv_lr_schedule schedule;
    int warmup;             /* QKV_LR_NOAM: steps of linear warmup (the paper's 4000) */
    float lr_factor;        /* QKV_LR_NOAM: the factor (the paper's 1) */
    int batch_tokens;       /* > 0: batches of sentences of similar length instead of `batch`
                             * pairs: each epoch the shuffled pairs are cut into buckets of
                             * about 64 batches, each bucket sorted by length (the longer of
                             * source and target, <eos> included) and packed while
                             * sentences x longest <= batch_tokens; the batches are then
                             * shuffled. Batches are cut to their longest sentence. */
    /* Validation after every epoch (valid != NULL): the loss, and with valid_bleu the corpus
     * BLEU-4 of greedy translations (max_len = valid->num_steps), go to metrics.jsonl as
     * "val_loss" and "bleu"; the best model so far (highest BLEU, then lowest loss) is
     * written to out_dir/best/ (config.json, model.safetensors), and the history to
     * out_dir/validation.json, from which a resumed run recovers best and patience. */
    const qkv_dataset *valid;
    int valid_bleu;
    /* BLEU over words: with valid_tokenizer set, each translation's text (subword pieces
     * joined into words, qkv_tokenizer_word_ids) is compared word for word with sentence i
     * of valid_references, pair i's reference as words (the target side as
     * qkv_corpus_read_* gives it, before any subword encoding). Both NULL: model ids against
     * the target side of valid up to its <eos>. */
    const qkv_tokenizer *valid_tokenizer;
    const qkv_sentences *valid_references;
    /* With valid_tokenizer and valid_bleu: the references as written (valid->n lines of raw
     * UTF-8), for sacreBLEU's BLEU and chrF2 of the translations' text (qkv_tokenizer_decode),
     * recorded as "sacrebleu" and "chrf" in metrics.jsonl; NULL: not computed. */
    const char *const *valid_reference_text;
    int patience;           /* stop after this many validations in a row without a new best
                             * (0: never) */
    int keep_epochs;        /* also keep the models of the last N epochs in out_dir/epoch-NNN
                             * (for checkpoint averaging; 0: none) */
    double minutes;         /* time budget of this process (0: none): no epoch starts that
                             * would end after it, judged by the longest epoch so far
                             * (validation included) */
    const qkv_reducer *reducer; /* data-parallel over reducer->size ranks (NULL: one process):
                             * each batch is split among the ranks, which keep identical
                             * parameters; rank 0 alone writes out_dir and validates. Every
                             * rank passes the same data and options. A rank whose call fails
                             * returns its error while the others may wait for it in the next
                             * sum: the caller ends the job (MPI_Abort) */
    /* Gradient accumulation: each optimizer step takes accum consecutive batches of the epoch
     * (the last step of an epoch what is left), their gradients summed before the one update
     * (data-parallel: one sum over the ranks per step), as one batch of all their pairs would
     * give (up to float rounding; with fixed batches, exactly the batch accum times larger,
     * dropout included). 0 or 1: one batch per step. */
    int accum;
    /* The schedule by steps (0: by epochs, as above). valid_every: validate every this many
     * steps instead of at epoch ends (the history, best model and patience count these
     * validations; patience stops the run at one, mid-epoch). save_every: every this many
     * steps also checkpoint and keep the model in out_dir/step-NNNNNNN; keep_last: of those,
     * only the last N (0: all). */
    int valid_every, save_every, keep_last;
} qkv_train_options;

/* Defaults as d2l trains its Transformer: batch 64, lr 0.005, Adam with PyTorch's defaults
 * (0.9, 0.999, 1e-8), clip 1, 200 epochs, seed 0, constant learning rate (the noam schedule's
 * warmup 4000 and factor 1 preset), no validation. out_dir must be set. */
QKV_API
qkv_train_options qkv_train_default_options(void);

/* Trains m on data with teacher forcing. Every epoch end (and every checkpoint_every steps)
 * writes out_dir/checkpoint.safetensors atomically and appends a line to metrics.jsonl
 * (never through a symbolic link); the model is saved only at the end (a directory with a
 * checkpoint and no model.safetensors is a run that has not finished, which the loaders
 * refuse); a resumed run continues bit for bit as if it had never stopped (same machine and threads),
 * batches by length, validation, best model and early stopping included.
 * A non-finite loss or gradient stops with QKV_ERR_NUMERIC before the parameters change. */
QKV_API
qkv_status qkv_train(qkv_transformer *m, const qkv_dataset *data, const qkv_train_options *o,
                     qkv_error *err);

/* The batches of similar length that qkv_train makes for epoch `epoch` (0-based) of data
 * with batch_tokens > 0 and seed: items (data->n) receives the example indices, batch b
 * being items[first[b] .. first[b + 1]) (first: data->n + 1 ints). Returns the number of
 * batches, -1 when out of memory or batch_tokens < 1. */
QKV_API
int qkv_train_batches(int *items, int *first, const qkv_dataset *data, int batch_tokens,
                      uint64_t seed, int epoch);

/* ---- training ---------------------------------------------------------------------------
 * Step s trains on B windows of T + 1 consecutive tokens whose starts are drawn uniformly
 * from (seed, s): the inputs are the first T tokens, the targets the last T. Nothing else is
 * random, so a resumed run continues bit for bit (same machine and threads), unless its
 * learning rate follows a time budget. */

typedef struct {
    int64_t step, steps;   /* optimizer steps so far; the planned total (0: a time budget) */
    double epoch;          /* training tokens consumed / training text length */
    double loss;           /* mean training loss per token since the last report */
    double val_loss;       /* held-out loss per token, NaN unless evaluated at this step */
    double tokens_per_s;   /* training tokens per second, since this run started */
    double grad_norm;      /* of the last step, before clipping */
    double lr;             /* of the last step */
    double elapsed_s;      /* training time, resumed runs included */
    int report;            /* 1 when this step wrote a metrics line (every log_every) */
} qkv_lm_train_progress;

typedef struct {
    const char *out_dir;   /* checkpoint.safetensors, metrics.jsonl, the model at the end */
    int batch, context;    /* B windows of T tokens per step; T <= max_len */
    int64_t steps;         /* stop after this many steps (0: only the time budget) */
    double minutes;        /* stop when this much training time has passed (0: no budget) */
    float lr, beta1, beta2, adam_eps, weight_decay;
    int warmup;            /* the learning rate rises linearly over the first warmup steps */
    int cosine;            /* then decays along a cosine to lr / 10 at `steps`, or, without
                              steps, at the end of the time budget (then the schedule follows
                              the machine's speed: not reproducible bit for bit) */
    float clip;            /* global gradient norm (<= 0: none) */
    uint64_t seed;
    int resume;            /* continue from out_dir/checkpoint.safetensors if it exists */
    int log_every;         /* a metrics.jsonl line and a checkpoint every N steps */
    int eval_every;        /* held-out loss every N steps (0: at the end only) */
    int eval_tokens;       /* held-out tokens each evaluation reads (0: all) */
    int64_t stop_after_steps; /* stop (cleanly, after checkpointing) at this step; 0: never */
    void (*progress)(const qkv_lm_train_progress *p, void *ctx); /* every step, or NULL */
    void *progress_ctx;
    /* Asked after every step (NULL: never): nonzero stops there, checkpointed and resumable,
     * as qkv_train_options' should_stop. */
    int (*should_stop)(void *ctx);
    void *should_stop_ctx;
    const qkv_reducer *reducer; /* data-parallel, as qkv_train_options: each step's B windows
                                 * are split among the ranks; rank 0 alone writes out_dir and
                                 * evaluates, and its clock rules a time budget */
    int accum;             /* gradient accumulation: each step takes accum x batch windows in
                              micro-batches of batch, as one step of batch x accum windows
                              (0 or 1: one) */
} qkv_lm_train_options;

/* batch 32, context 128, lr 1e-3, Adam (0.9, 0.99, 1e-8), clip 1, warmup 100, log every
 * 50 steps, evaluate every 500 on 32768 tokens. Set out_dir and steps or minutes. */
QKV_API
qkv_lm_train_options qkv_lm_train_default_options(void);

/* Trains m on train (n_train tokens; at least context + 1), evaluating on val (n_val tokens,
 * may be 0). Every log_every steps and at the end: a checkpoint and a line of
 * out_dir/metrics.jsonl ({"epoch", "step", "loss", "val_loss" when evaluated, "lr",
 * "tokens_per_s", "elapsed_s"}); at the end the model (qkv_lm_save). A non-finite loss or
 * gradient stops with QKV_ERR_NUMERIC before the parameters change. */
QKV_API
qkv_status qkv_lm_train(qkv_lm *m, const int *train, size_t n_train, const int *val,
                        size_t n_val, const qkv_lm_train_options *o, qkv_error *err);

/* The mean next-token loss over tokens (n >= 2) in evaluation mode, read as consecutive
 * windows of T + 1 tokens that overlap by one, so every token after the first is predicted
 * exactly once, B windows per forward pass. *count (may be NULL) receives n - 1. */
QKV_API
qkv_status qkv_lm_evaluate(qkv_lm *m, const int *tokens, size_t n, int T, int B, double *loss,
                           int64_t *count, qkv_error *err);

/* ---------------------------------------------------------------------------------------
 * Scores people can quote: sacreBLEU's BLEU and chrF (Post 2018), computed as pip's
 * sacrebleu 2.x computes them with its defaults, on detokenised text (raw UTF-8 lines).
 * ------------------------------------------------------------------------------------- */

enum { QKV_SACREBLEU_ORDER = 4, QKV_CHRF_ORDER = 6 };

/* sacreBLEU's "13a" tokenisation of one line (mteval-v13a.pl's, as WMT uses it): trailing
 * whitespace dropped, <skipped> and hyphenated line ends removed, &quot; &amp; &lt; &gt;
 * unescaped, punctuation and symbols split off (a full stop or comma only away from digits,
 * a hyphen after a digit), single spaces between tokens. Writes at most cap bytes with the
 * NUL (an empty string if the whole does not fit) and returns the tokenised length without
 * the NUL, as snprintf; (size_t)-1 if out of memory. */
QKV_API
size_t qkv_tokenize_13a(char *out, size_t cap, const char *line);

/* BLEU's sufficient statistics over a corpus (zero-initialise, then add every pair). */
typedef struct {
    int64_t hyp_len, ref_len;                 /* 13a tokens: c and r */
    int64_t correct[QKV_SACREBLEU_ORDER];     /* clipped matches of (index + 1)-grams */
    int64_t total[QKV_SACREBLEU_ORDER];       /* (index + 1)-grams of the hypotheses */
} qkv_sacrebleu_stats;

/* Adds one hypothesis and its reference (detokenised lines, case kept) to st. */
QKV_API
qkv_status qkv_sacrebleu_add(qkv_sacrebleu_stats *st, const char *hyp, const char *ref,
                             qkv_error *err);
/* BLEU (0..100) with mteval's "exp" smoothing (an order without matches counts as
 * 1 / (2^k total), k counting such orders): effective_order 0 is sacrebleu.corpus_bleu's
 * default, 1 sentence_bleu's (orders the hypothesis is too short for do not count).
 * precisions (QKV_SACREBLEU_ORDER, x 100, smoothed) and brevity (BP) may be NULL. */
QKV_API
double qkv_sacrebleu_score(const qkv_sacrebleu_stats *st, int effective_order,
                           double *precisions, double *brevity);
/* The corpus score as `sacrebleu -f text -w 2` prints it: "BLEU|<signature> = 64.79
 * 89.4/80.1/73.3/67.8 (BP = 0.839 ratio = 0.851 hyp_len = 3178 ref_len = 3736)". Returns the
 * length, as snprintf. */
QKV_API
size_t qkv_sacrebleu_format(char *out, size_t cap, const qkv_sacrebleu_stats *st);
/* "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0": what the corpus score is,
 * in sacreBLEU's words (the version it was checked against). */
QKV_API
const char *qkv_sacrebleu_signature(void);

/* chrF's statistics per character n-gram order 1..6 (zero-initialise, then add pairs). */
typedef struct {
    int64_t hyp[QKV_CHRF_ORDER], ref[QKV_CHRF_ORDER], match[QKV_CHRF_ORDER];
} qkv_chrf_stats;

/* Adds one pair: character n-grams of the lines without their whitespace, as sacreBLEU's
 * CHRF() (characters are code points; a hypothesis n-gram counts only where the reference
 * has n-grams of that order). */
QKV_API
qkv_status qkv_chrf_add(qkv_chrf_stats *st, const char *hyp, const char *ref, qkv_error *err);
/* chrF2 (0..100): the F-score with beta 2 of the mean character n-gram precision and recall
 * over the orders both sides have (sacreBLEU's default, eps_smoothing off). */
QKV_API
double qkv_chrf_score(const qkv_chrf_stats *st);
/* "nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:2.6.0". */
QKV_API
const char *qkv_chrf_signature(void);

#ifdef __cplusplus
}
#endif

#endif /* QKV_API_TRAINING_H */
