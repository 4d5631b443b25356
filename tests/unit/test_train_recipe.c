/* SPDX-License-Identifier: MIT */
/* The paper's training recipe in qkv_train: the noam learning-rate schedule step by step,
 * batches of similar length under a token budget (every pair once, budget kept, reproducible
 * from the seed, less padding than shuffled batches), validation loss and BLEU equal to an
 * independent computation, the best model kept, early stopping, and exact resume with all of
 * it (a validation history cut short by a crash is replayed, not trusted). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_util.h"

enum { V = 12, T = TU_COPY_T, NTRAIN = 160, NVALID = 24 };

typedef tu_copy_data data; /* tu_copy_task */

static qkv_transformer *small_model(uint64_t seed) { return tu_small_transformer(V, 0.1f, seed); }

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    buf[n] = '\0';
    *len = (size_t)n;
    return buf;
}

static int same_file(const char *a, const char *b)
{
    size_t la, lb;
    char *x = slurp(a, &la), *y = slurp(b, &lb);
    int same = x && y && la == lb && !memcmp(x, y, la);
    free(x), free(y);
    return same;
}

/* ---- the schedule -------------------------------------------------------------------- */

typedef struct {
    int n;
    double lr[512], val_loss[16], bleu[16];
    int epoch_end[512], validated[16], best[16], stopping, n_validated;
    double last_val_loss, last_bleu;
} record;

static void keep(const qkv_train_progress *p, void *ctx)
{
    record *r = ctx;
    if (r->n < 512) r->lr[r->n] = p->lr, r->epoch_end[r->n] = p->end_of_epoch, r->n++;
    if (p->validated && p->epoch <= 16) {
        r->validated[p->epoch - 1] = 1;
        r->val_loss[p->epoch - 1] = p->val_loss, r->bleu[p->epoch - 1] = p->bleu;
        r->best[p->epoch - 1] = p->best;
    }
    if (p->validated) r->n_validated++, r->last_val_loss = p->val_loss, r->last_bleu = p->bleu;
    r->stopping |= p->stopping;
}

/* lr = F d^-0.5 min(s^-0.5, s w^-1.5): rises linearly to its peak at s = w, then decays. */
static void test_noam_schedule(void **state)
{
    (void)state;
    data x;
    tu_copy_task(&x, NTRAIN, V, 1);
    qkv_transformer *m = small_model(2);
    char dir[64];
    tu_temp_dir(dir, sizeof dir, "qkv_train");
    record r = {0};
    qkv_train_options o = qkv_train_default_options();
    o.out_dir = dir, o.batch = 16, o.epochs = 3, o.schedule = QKV_LR_NOAM, o.warmup = 12;
    o.lr_factor = 2.0f, o.progress = keep, o.progress_ctx = &r;
    assert_int_equal(qkv_train(m, &x.d, &o, NULL), QKV_OK);
    assert_int_equal(r.n, 30);
    for (int s = 1; s <= r.n; s++) {
        float want = (float)(2.0 / sqrt(16.0) * fmin(1.0 / sqrt(s), s * pow(12.0, -1.5)));
        assert_true(r.lr[s - 1] == want);
    }
    assert_true(fabs(r.lr[11] - 2.0 / 4.0 / sqrt(12.0)) < 1e-7); /* the peak, at s = warmup */
    assert_true(r.lr[0] < r.lr[5] && r.lr[5] < r.lr[11] && r.lr[11] > r.lr[29]);
    qkv_error err = {0};
    o.warmup = 0;
    assert_int_equal(qkv_train(m, &x.d, &o, &err), QKV_ERR_ARG);
    assert_non_null(strstr(err.msg, "warmup"));
    qkv_transformer_free(m);
    tu_remove_tree(dir);
}

/* ---- batches by length ------------------------------------------------------------------ */

static void test_token_batches(void **state)
{
    (void)state;
    data x;
    tu_copy_task(&x, NTRAIN, V, 3);
    const int budget = 64;
    int items[NTRAIN], first[NTRAIN + 1], items2[NTRAIN], first2[NTRAIN + 1];
    int n = qkv_train_batches(items, first, &x.d, budget, 7, 0);
    assert_true(n > 0);
    int seen[NTRAIN] = {0};
    long padded = 0, real = 0;
    for (int b = 0; b < n; b++) {
        int count = first[b + 1] - first[b], longest = 0;
        assert_true(count >= 1);
        for (int i = first[b]; i < first[b + 1]; i++) {
            int e = items[i], len = x.src_valid[e] > x.tgt_valid[e] ? x.src_valid[e] : x.tgt_valid[e];
            seen[e]++;
            longest = len > longest ? len : longest;
            real += len;
        }
        assert_true(count * longest <= budget); /* no pair here is longer than the budget */
        padded += (long)count * longest;
    }
    for (int e = 0; e < NTRAIN; e++) assert_int_equal(seen[e], 1);
    assert_int_equal(first[n], NTRAIN);
    /* sorted by length within buckets: little padding (shuffled batches of the same sizes
     * waste about a third here) */
    assert_true((double)real / padded > 0.9);
    /* the same seed and epoch, the same batches; another epoch or seed, others */
    assert_int_equal(qkv_train_batches(items2, first2, &x.d, budget, 7, 0), n);
    assert_memory_equal(items, items2, sizeof items);
    assert_memory_equal(first, first2, (size_t)(n + 1) * sizeof *first);
    int n1 = qkv_train_batches(items2, first2, &x.d, budget, 7, 1);
    assert_true(n1 != n || memcmp(items, items2, sizeof items));
    int n2 = qkv_train_batches(items2, first2, &x.d, budget, 8, 0);
    assert_true(n2 != n || memcmp(items, items2, sizeof items));
    /* a budget below the longest pair still makes progress: one pair per batch */
    assert_int_equal(qkv_train_batches(items2, first2, &x.d, 1, 7, 0), NTRAIN);
    assert_int_equal(qkv_train_batches(items2, first2, &x.d, 0, 7, 0), -1);
}

/* ---- validation, best model, early stopping ------------------------------------------------ */

/* The validation loss and BLEU qkv_train reports, recomputed from the final model. */
static void test_validation_values(void **state)
{
    (void)state;
    data x, y;
    tu_copy_task(&x, NTRAIN, V, 4);
    tu_copy_task(&y, NVALID, V, 4); /* the first training pairs: BLEU rises as they are learnt */
    qkv_transformer *m = small_model(6);
    char dir[64];
    tu_temp_dir(dir, sizeof dir, "qkv_train");
    record r = {0};
    qkv_train_options o = qkv_train_default_options();
    o.out_dir = dir, o.batch_tokens = 96, o.epochs = 30, o.lr = 0.005f;
    o.valid = &y.d, o.valid_bleu = 1, o.progress = keep, o.progress_ctx = &r;
    assert_int_equal(qkv_train(m, &x.d, &o, NULL), QKV_OK);
    assert_int_equal(r.n_validated, o.epochs);
    /* the loss: every validation token, no smoothing, no dropout */
    double sum = 0.0;
    int tokens = 0, tin[NVALID * T];
    for (int e = 0; e < NVALID; e++) {
        tin[e * T] = QKV_BOS;
        memcpy(tin + e * T + 1, y.tgt + e * T, (T - 1) * sizeof *tin);
    }
    qkv_batch all = {NVALID, T, T, y.src, y.src_valid, tin, y.tgt};
    assert_int_equal(qkv_transformer_loss(m, &all, NULL, &sum, &tokens, NULL), QKV_OK);
    assert_true(fabs(r.last_val_loss - sum / tokens) < 1e-6 * (1 + sum / tokens));
    /* BLEU: greedy translations against the targets up to <eos> */
    int out[NVALID * T], len[NVALID], ref_len[NVALID];
    const int *hyps[NVALID], *refs[NVALID];
    assert_int_equal(qkv_transformer_greedy(m, y.src, y.src_valid, NVALID, T, T, out, len, NULL), QKV_OK);
    for (int e = 0; e < NVALID; e++)
        hyps[e] = out + e * T, refs[e] = y.tgt + e * T, ref_len[e] = y.tgt_valid[e] - 1;
    double bleu;
    assert_int_equal(qkv_corpus_bleu(&bleu, hyps, len, refs, ref_len, NVALID, NULL), QKV_OK);
    assert_true(fabs(r.last_bleu - 100.0 * bleu) < 1e-9);
    print_message("validation: loss %.4f, BLEU %.2f\n", r.last_val_loss, r.last_bleu);
    assert_true(bleu > 0.0); /* the comparison has teeth */
    /* metrics.jsonl carries both */
    char path[128];
    size_t n;
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    char *log = slurp(path, &n);
    assert_non_null(log);
    assert_non_null(strstr(log, "\"val_loss\": "));
    assert_non_null(strstr(log, "\"bleu\": "));
    free(log);
    qkv_transformer_free(m);
    tu_remove_tree(dir);
}

/* best/ holds the model of the best epoch; a learning rate far too high makes validation
 * worse, and patience ends the run. */
static void test_best_and_early_stopping(void **state)
{
    (void)state;
    data x, y;
    tu_copy_task(&x, NTRAIN, V, 7);
    tu_copy_task(&y, NVALID, V, 8);
    qkv_transformer *m = small_model(9);
    char dir[64], a[128], b[128];
    tu_temp_dir(dir, sizeof dir, "qkv_train");
    record r = {0};
    qkv_train_options o = qkv_train_default_options();
    o.out_dir = dir, o.batch = 32, o.epochs = 4, o.lr = 0.01f, o.keep_epochs = 4;
    o.valid = &y.d, o.progress = keep, o.progress_ctx = &r;
    assert_int_equal(qkv_train(m, &x.d, &o, NULL), QKV_OK);
    int best = 0;
    double lowest = INFINITY;
    for (int e = 0; e < 4; e++) { /* "best" flags each new lowest loss (no BLEU here) */
        assert_int_equal(r.best[e], r.val_loss[e] < lowest);
        if (r.val_loss[e] < lowest) lowest = r.val_loss[e], best = e;
    }
    snprintf(a, sizeof a, "%s/best/model.safetensors", dir);
    snprintf(b, sizeof b, "%s/epoch-%03d/model.safetensors", dir, best + 1);
    assert_true(same_file(a, b));
    qkv_transformer_free(m);
    tu_remove_tree(dir);

    /* a rate that wrecks the model: no better epoch after the first, patience 2 */
    m = small_model(9);
    tu_temp_dir(dir, sizeof dir, "qkv_train");
    memset(&r, 0, sizeof r);
    o.out_dir = dir, o.epochs = 20, o.lr = 3.0f, o.patience = 2, o.keep_epochs = 0;
    assert_int_equal(qkv_train(m, &x.d, &o, NULL), QKV_OK);
    assert_true(r.stopping);
    int epochs = 0;
    while (epochs < 16 && r.validated[epochs]) epochs++;
    assert_true(epochs < 20);
    best = 0;
    for (int e = 1; e < epochs; e++)
        if (r.val_loss[e] < r.val_loss[best]) best = e;
    assert_int_equal(epochs, best + 1 + 2); /* the best, then patience epochs without */
    /* resuming a run that stopped early trains no further */
    record again = {0};
    o.resume = 1, o.progress_ctx = &again;
    assert_int_equal(qkv_train(m, &x.d, &o, NULL), QKV_OK);
    assert_int_equal(again.n, 0);
    qkv_transformer_free(m);
    tu_remove_tree(dir);
}

/* Stopping mid-epoch and resuming gives the same model, best model and history bit for bit,
 * with batches by length, the noam schedule and validation; a history entry written after
 * the last checkpoint (a crash between the two) is dropped and made again. */
static void test_exact_resume(void **state)
{
    (void)state;
    data x, y;
    tu_copy_task(&x, NTRAIN, V, 10);
    tu_copy_task(&y, NVALID, V, 11);
    char full[64], cut[64], pa[160], pb[160];
    tu_temp_dir(full, sizeof full, "qkv_train");
    tu_temp_dir(cut, sizeof cut, "qkv_train");
    qkv_train_options o = qkv_train_default_options();
    o.batch_tokens = 80, o.epochs = 3, o.schedule = QKV_LR_NOAM, o.warmup = 10;
    o.valid = &y.d, o.valid_bleu = 1, o.patience = 5, o.seed = 3;
    qkv_transformer *m = small_model(12);
    o.out_dir = full;
    assert_int_equal(qkv_train(m, &x.d, &o, NULL), QKV_OK);
    qkv_transformer_free(m);

    m = small_model(12);
    o.out_dir = cut, o.stop_after_steps = 7; /* inside the first epoch */
    assert_int_equal(qkv_train(m, &x.d, &o, NULL), QKV_OK);
    qkv_transformer_free(m);
    m = small_model(99); /* resuming restores every parameter */
    o.stop_after_steps = 0, o.resume = 1, o.epochs = 2;
    assert_int_equal(qkv_train(m, &x.d, &o, NULL), QKV_OK);
    /* a crash after validating epoch 3 but before its checkpoint: a stale, too good entry */
    snprintf(pa, sizeof pa, "%s/validation.json", cut);
    size_t n;
    char *h = slurp(pa, &n);
    char *end = strrchr(h, ']');
    assert_non_null(end);
    FILE *f = fopen(pa, "wb");
    fprintf(f, "%.*s,\n  {\"epoch\": 3, \"val_loss\": 0.0, \"bleu\": 100.0}\n]}\n",
            (int)(end - h - 1), h);
    fclose(f);
    free(h);
    o.epochs = 3;
    assert_int_equal(qkv_train(m, &x.d, &o, NULL), QKV_OK);
    qkv_transformer_free(m);
    const char *files[] = {"model.safetensors", "checkpoint.safetensors", "validation.json",
                           "best/model.safetensors"};
    for (int i = 0; i < 4; i++) {
        snprintf(pa, sizeof pa, "%s/%s", full, files[i]);
        snprintf(pb, sizeof pb, "%s/%s", cut, files[i]);
        if (!same_file(pa, pb)) fail_msg("%s differs after stop + resume", files[i]);
    }
    tu_remove_tree(full);
    tu_remove_tree(cut);
}

/* should_stop, asked after every step, stops where it says as stop_after_steps stops there:
 * the same checkpoint byte for byte, no model, and a resumed run ends with the full run's. */
typedef struct {
    int asked, at;
} stopper;

static int stop_at(void *ctx)
{
    stopper *s = ctx;
    return ++s->asked >= s->at;
}

static void test_should_stop(void **state)
{
    (void)state;
    data x;
    tu_copy_task(&x, NTRAIN, V, 15);
    char a[64], b[64], pa[160], pb[160];
    tu_temp_dir(a, sizeof a, "qkv_train");
    tu_temp_dir(b, sizeof b, "qkv_train");
    qkv_train_options o = qkv_train_default_options();
    o.batch = 16, o.epochs = 2, o.seed = 5;
    qkv_transformer *m = small_model(16);
    o.out_dir = a, o.stop_after_steps = 6;
    assert_int_equal(qkv_train(m, &x.d, &o, NULL), QKV_OK);
    qkv_transformer_free(m);
    m = small_model(16);
    stopper s = {0, 6};
    o.out_dir = b, o.stop_after_steps = 0, o.should_stop = stop_at, o.should_stop_ctx = &s;
    assert_int_equal(qkv_train(m, &x.d, &o, NULL), QKV_OK);
    assert_int_equal(s.asked, 6);
    snprintf(pa, sizeof pa, "%s/checkpoint.safetensors", a);
    snprintf(pb, sizeof pb, "%s/checkpoint.safetensors", b);
    assert_true(same_file(pa, pb));
    snprintf(pb, sizeof pb, "%s/model.safetensors", b);
    assert_int_equal(access(pb, F_OK), -1);
    /* resumed without the callback, the run finishes as if never stopped */
    o.should_stop = NULL, o.resume = 1;
    assert_int_equal(qkv_train(m, &x.d, &o, NULL), QKV_OK);
    qkv_transformer_free(m);
    m = small_model(16);
    o.out_dir = a, o.resume = 0;
    assert_int_equal(qkv_train(m, &x.d, &o, NULL), QKV_OK);
    qkv_transformer_free(m);
    snprintf(pa, sizeof pa, "%s/model.safetensors", a);
    assert_true(same_file(pa, pb));
    tu_remove_tree(a);
    tu_remove_tree(b);
}

static void test_rejects_bad_options(void **state)
{
    (void)state;
    data x;
    tu_copy_task(&x, NTRAIN, V, 13);
    qkv_transformer *m = small_model(14);
    qkv_error err = {0};
    qkv_train_options o = qkv_train_default_options();
    o.out_dir = "/tmp/qkv_never_written", o.patience = 2;
    assert_int_equal(qkv_train(m, &x.d, &o, &err), QKV_ERR_ARG);
    assert_non_null(strstr(err.msg, "validation"));
    o.patience = 0, o.batch_tokens = -1;
    assert_int_equal(qkv_train(m, &x.d, &o, &err), QKV_ERR_ARG);
    data y;
    tu_copy_task(&y, NVALID, V, 15);
    y.src[3] = V; /* outside the vocabulary */
    o.batch_tokens = 0, o.valid = &y.d;
    assert_int_equal(qkv_train(m, &x.d, &o, &err), QKV_ERR_ARG);
    assert_non_null(strstr(err.msg, "validation example 0"));
    struct stat sb;
    assert_int_equal(stat("/tmp/qkv_never_written", &sb), -1);
    qkv_transformer_free(m);
}

int main(void)
{
    qkv_set_threads(2);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_noam_schedule),
        cmocka_unit_test(test_token_batches),
        cmocka_unit_test(test_validation_values),
        cmocka_unit_test(test_best_and_early_stopping),
        cmocka_unit_test(test_exact_resume),
        cmocka_unit_test(test_should_stop),
        cmocka_unit_test(test_rejects_bad_options),
    };
    return cmocka_run_group_tests_name("train_recipe", tests, NULL, NULL);
}
