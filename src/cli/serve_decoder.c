/* SPDX-License-Identifier: MIT */
/* qkv serve's decoding thread (serve.h): it owns the model. Greedy translations join the
 * running batch of the library's batch decoder at the next step and leave it when they end
 * (continuous batching), so concurrent clients share each step's reading of the weights while
 * a lone request is decoded as soon as it arrives. Completions join the language model's batch
 * the same way (qkv_lm_batch). Beam search and n-best requests are decoded whole by
 * qkv_translate between steps. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/serve.h"

job *job_new(void)
{
    job *j = calloc(1, sizeof *j);
    if (j && pthread_cond_init(&j->changed, NULL)) free(j), j = NULL;
    return j;
}

void job_free(job *j)
{
    for (int i = 0; j->src && i < j->n; i++) free(j->src[i]);
    for (int i = 0; j->text && i < j->n * j->n_best; i++) free(j->text[i]);
    for (int i = 0; i < j->n_stop; i++) free(j->stop[i]);
    free(j->src), free(j->text), free(j->score), free(j->slot), free(j->prompt), free(j->out);
    pthread_cond_destroy(&j->changed);
    free(j);
}

double serve_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

void serve_release(server *s, job *j)
{
    (void)s;
    if (--j->refs == 0) job_free(j);
}

void job_fail(job *j, int status, const char *msg)
{
    j->status = status, j->done = 1;
    snprintf(j->error, sizeof j->error, "%s", msg);
}

/* ---- the decoding thread -------------------------------------------------------------- */

/* Moves the slots of finished sources into their jobs; a job whose sources are all back is
 * done. Under lock. */
static void collect(server *s)
{
    qkv_error err = {0};
    for (job **p = &s->running; *p;) {
        job *j = *p;
        for (int i = 0; i < j->joined; i++) {
            if (j->slot[i] < 0 || !qkv_batch_decoder_finished(s->bd, j->slot[i])) continue;
            int tokens = 0;
            if (qkv_batch_decoder_take(s->bd, j->slot[i], &j->text[i], &tokens, &err))
                job_fail(j, 500, err.msg);
            j->slot[i] = -1, j->finished++, j->tokens += tokens, s->tokens += (unsigned)tokens;
        }
        if (j->finished == j->n || j->cancelled || j->done) {
            for (int i = 0; i < j->joined; i++)
                if (j->slot[i] >= 0) qkv_batch_decoder_cancel(s->bd, j->slot[i]);
            j->done = 1;
            *p = j->run_next;
            pthread_cond_broadcast(&j->changed);
            serve_release(s, j);
        } else {
            p = &j->run_next;
        }
    }
}

/* Beam search or n-best lists: the whole request by qkv_translate (lock not held). */
static void translate_whole(server *s, job *j)
{
    qkv_translate_options o = qkv_translate_default_options();
    o.beam = j->beam, o.n_best = j->n_best, o.max_len = j->max_len, o.batch = j->n;
    qkv_translations r;
    qkv_error err = {0};
    qkv_status st = qkv_translate(&r, s->tr, (const char *const *)j->src, j->n, &o, &err);
    pthread_mutex_lock(&s->lock);
    if (st) {
        job_fail(j, st == QKV_ERR_ARG ? 400 : 500, err.msg);
    } else {
        for (int h = 0; h < j->n * j->n_best; h++) {
            j->text[h] = r.text[h], r.text[h] = NULL;
            j->score[h] = r.score[h];
            j->tokens += r.len[h] > 0 ? r.len[h] : 0;
        }
        s->tokens += (unsigned)j->tokens;
        j->done = 1;
    }
    if (!st) qkv_translations_free(&r);
    pthread_cond_broadcast(&j->changed);
    serve_release(s, j);
    pthread_mutex_unlock(&s->lock);
}

/* A completion's new token: its text appended, stop strings looked for. Under lock; nonzero
 * when the completion ends here (a stop string, or its client went away). */
static int append_token(server *s, job *j, int id)
{
    char piece[16];
    size_t n = qkv_lm_token_text(piece, sizeof piece, &s->lm.vocab, id);
    if (j->out_len + n + 1 > j->out_cap) {
        size_t cap = 2 * (j->out_len + n + 1);
        char *grown = realloc(j->out, cap);
        if (!grown) {
            job_fail(j, 500, "out of memory for a completion");
            return 1;
        }
        j->out = grown, j->out_cap = cap;
    }
    memcpy(j->out + j->out_len, piece, n);
    j->out_len += n, j->out[j->out_len] = '\0';
    j->tokens++, s->tokens++;
    for (int k = 0; k < j->n_stop; k++) { /* the text ends before the first stop string */
        char *at = strstr(j->out, j->stop[k]);
        if (at) j->out_len = (size_t)(at - j->out), *at = '\0', j->stop_hit = 1;
    }
    return j->stop_hit || j->cancelled;
}

/* Completions: waiting ones join free slots (a prefill each), then one step draws a token for
 * every running one. Called with the lock held; releases it while the model runs. */
static void lm_round(server *s)
{
    qkv_error err = {0};
    while (s->queue && qkv_lm_batch_free_slots(s->lb) > 0) {
        job *j = s->queue; /* the queue's reference passes to the slot */
        s->queue = j->next, s->queued--;
        if (!s->queue) s->queue_tail = NULL;
        int slot = -1;
        pthread_mutex_unlock(&s->lock);
        qkv_status st = qkv_lm_batch_add(s->lb, j->prompt, j->n_prompt, &j->gen, &slot, &err);
        pthread_mutex_lock(&s->lock);
        if (st) {
            job_fail(j, st == QKV_ERR_ARG ? 400 : 500, err.msg);
            pthread_cond_broadcast(&j->changed);
            serve_release(s, j);
            continue;
        }
        s->lm_job[slot] = j, s->joined++;
    }
    const int rows = qkv_lm_batch_running(s->lb);
    if (!rows) return;
    pthread_mutex_unlock(&s->lock);
    qkv_status st = qkv_lm_batch_step(s->lb, s->drawn, &err);
    pthread_mutex_lock(&s->lock);
    s->steps++, s->batch_rows += (unsigned)rows;
    for (int slot = 0; slot < qkv_lm_batch_slots(s->lb); slot++) {
        job *j = s->lm_job[slot];
        if (!j) continue;
        int end = st != QKV_OK;
        if (st) job_fail(j, 500, err.msg);
        else if (s->drawn[slot] >= 0) end = append_token(s, j, s->drawn[slot]);
        const int over = end || j->cancelled || qkv_lm_batch_finished(s->lb, slot);
        if (over) {
            qkv_lm_batch_release(s->lb, slot);
            j->done = 1;
            s->lm_job[slot] = NULL;
        }
        /* only a stream needs each token; a plain request the end */
        if (over || j->streaming) pthread_cond_broadcast(&j->changed);
        if (over) serve_release(s, j);
    }
}

/* Dynamic batching's delay (--max-batch-delay): an idle decoder lets the oldest waiting request
 * wait up to max_delay_s for others to join its first step, unless the waiting ones already fill
 * the free slots or the server is stopping. 1 while it should wait (then *until is when, in
 * serve_now() time); 0 to go on. Under lock. */
static int batch_delay(const server *s, double *until)
{
    if (s->max_delay_s <= 0 || !s->queue || s->draining || s->stop_decoder) return 0;
    if (s->running || (s->lb && qkv_lm_batch_running(s->lb))) return 0; /* not idle */
    int waiting = 0, free_slots;
    for (const job *j = s->queue; j; j = j->next) {
        if (j->kind == JOB_TRANSLATE && (j->beam > 1 || j->n_best > 1)) return 0; /* decoded whole */
        waiting += j->kind == JOB_TRANSLATE ? j->n - j->joined : 1;
    }
    free_slots = s->lb ? qkv_lm_batch_free_slots(s->lb) : qkv_batch_decoder_free_slots(s->bd);
    *until = s->queue->queued_at + s->max_delay_s;
    return waiting < free_slots && serve_now() < *until;
}

/* Whether the decoder has anything to do: requests waiting, or a batch running. Under lock. */
static int busy(const server *s)
{
    return s->queue || s->running || (s->lb && qkv_lm_batch_running(s->lb));
}

/* Requests cancelled (or failed) while waiting leave the queue. Under lock. */
static void drop_cancelled(server *s)
{
    for (job **p = &s->queue; *p;) {
        job *j = *p;
        if (!j->cancelled && !j->done) {
            p = &j->next;
            continue;
        }
        *p = j->next, s->queued--;
        j->done = 1;
        serve_release(s, j);
    }
    s->queue_tail = NULL;
    for (job *j = s->queue; j; j = j->next) s->queue_tail = j;
}

/* Greedy translations join while slots are free: each source of a request joins as a slot
 * frees, the request leaves the queue when its last source has joined (their sources join
 * together: one encoder pass). Under lock; released while the model encodes. */
static void admit_greedy(server *s)
{
    qkv_error err = {0};
    while (s->queue && s->queue->kind == JOB_TRANSLATE && s->queue->beam == 1 &&
           s->queue->n_best == 1) {
        job *j = s->queue;
        int k = j->n - j->joined, free_slots = qkv_batch_decoder_free_slots(s->bd);
        if (k > free_slots) k = free_slots;
        if (k <= 0) break;
        if (j->joined == 0) { /* now running: the decoder holds its reference there */
            j->refs++;
            j->run_next = s->running, s->running = j;
        }
        pthread_mutex_unlock(&s->lock);
        qkv_status st = qkv_batch_decoder_add(s->bd, (const char *const *)j->src + j->joined,
                                              k, j->max_len, j->slot + j->joined, &err);
        pthread_mutex_lock(&s->lock);
        if (st) job_fail(j, st == QKV_ERR_ARG ? 400 : 500, err.msg);
        else j->joined += k, s->joined += (unsigned)k;
        if (st || j->joined == j->n) { /* leaves the queue */
            s->queue = j->next, s->queued--;
            if (!s->queue) s->queue_tail = NULL;
            serve_release(s, j);
        } else {
            break;
        }
    }
}

/* A translation model's round: beam search runs whole when it reaches the head of the queue
 * and nothing is running; otherwise waiting greedy translations join, one decoder step runs,
 * and what finished is handed back. Under lock; released while the model runs. */
static void translation_round(server *s)
{
    job *head = s->queue;
    if (head && (head->beam > 1 || head->n_best > 1)) {
        if (!s->running) {
            s->queue = head->next, s->queued--;
            if (!s->queue) s->queue_tail = NULL;
            pthread_mutex_unlock(&s->lock);
            translate_whole(s, head);
            pthread_mutex_lock(&s->lock);
            return;
        } /* else the batch first: whole requests do not mix with it */
    } else {
        admit_greedy(s);
    }
    const int rows = s->bd ? qkv_batch_decoder_running(s->bd) : 0;
    if (rows) {
        qkv_error err = {0};
        pthread_mutex_unlock(&s->lock);
        qkv_status st = qkv_batch_decoder_step(s->bd, &err);
        pthread_mutex_lock(&s->lock);
        s->steps++, s->batch_rows += (unsigned)rows;
        if (st)
            for (job *j = s->running; j; j = j->run_next) job_fail(j, 500, err.msg);
    }
    collect(s);
}

void *serve_decoder_main(void *arg)
{
    server *s = arg;
    pthread_mutex_lock(&s->lock);
    for (;;) {
        while (!busy(s) && !s->stop_decoder) pthread_cond_wait(&s->work, &s->lock);
        if (!busy(s) && s->stop_decoder) break;
        drop_cancelled(s);
        double until;
        if (batch_delay(s, &until)) { /* woken early by each new request, to count again */
            struct timespec t;
            clock_gettime(CLOCK_REALTIME, &t);
            const double left = until - serve_now();
            const long long ns = (long long)t.tv_nsec + (long long)(left * 1e9) + 1;
            t.tv_sec += (time_t)(ns / 1000000000LL), t.tv_nsec = (long)(ns % 1000000000LL);
            pthread_cond_timedwait(&s->work, &s->lock, &t);
            continue;
        }
        if (s->lb) lm_round(s);
        else translation_round(s);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}
