/* SPDX-License-Identifier: MIT */
/* qkv serve's decoding threads (serve.h): each owns the models it serves (all of them, or one:
 * --scheduler). A translation joins its model's running batch at the next step and leaves it
 * when it ends (continuous batching), greedy decoding and beam search alike: a beam of K is K
 * rows of the batch, so a beam request no longer stops the greedy ones behind it. Completions
 * join the language model's batch the same way (qkv_lm_batch). Concurrent clients share each
 * step's reading of the weights while a lone request is decoded as soon as it arrives. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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
    free(j->cut), free(j->src_lang), free(j->tgt_lang);
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

/* ---- translation ------------------------------------------------------------------------ */

/* Source i of j, finished in its slot: its hypotheses into the job. Under lock. */
static void take_source(server *s, job *j, int i)
{
    qkv_translations r;
    qkv_error err = {0};
    if (qkv_batch_decoder_take_translations(j->m->bd, j->slot[i], &r, &err)) {
        job_fail(j, 500, err.msg);
        return;
    }
    for (int k = 0; k < j->n_best && k < r.n_best; k++) {
        const size_t h = (size_t)i * j->n_best + k;
        j->text[h] = r.text[k], r.text[k] = NULL, j->score[h] = r.score[k];
    }
    const int tokens = r.len[0] > 0 ? r.len[0] : 0;
    j->cut[i] = r.truncated > 0;
    j->tokens += tokens, s->tokens += (unsigned)tokens;
    qkv_translations_free(&r);
}

/* Moves the slots of finished sources into their jobs; a job whose sources are all back is
 * done. Under lock. */
static void collect(server *s, served_model *m)
{
    for (job **p = &m->running; *p;) {
        job *j = *p;
        for (int i = 0; i < j->joined; i++) {
            if (j->slot[i] < 0 || !qkv_batch_decoder_finished(m->bd, j->slot[i])) continue;
            take_source(s, j, i);
            j->slot[i] = -1, j->finished++;
        }
        if (j->finished == j->n || j->cancelled || j->done) {
            for (int i = 0; i < j->joined; i++)
                if (j->slot[i] >= 0) qkv_batch_decoder_cancel(m->bd, j->slot[i]);
            j->done = 1;
            *p = j->run_next;
            pthread_cond_broadcast(&j->changed);
            serve_release(s, j);
        } else {
            p = &j->run_next;
        }
    }
}

/* Slots a source of j takes: a beam's K, else one (qkv_batch_decoder_add_with). */
static int rows_per_source(const job *j) { return j->beam > 1 || j->n_best > 1 ? j->beam : 1; }

/* Translations join while slots are free: each source of a request joins as its rows free,
 * the request leaves the queue when its last source has joined (sources that join together
 * share one encoder pass). Under lock; released while the model encodes. */
static void admit_translations(server *s, served_model *m)
{
    qkv_error err = {0};
    while (m->queue) {
        job *j = m->queue;
        int k = j->n - j->joined;
        const int fit = qkv_batch_decoder_free_slots(m->bd) / rows_per_source(j);
        if (k > fit) k = fit;
        if (k <= 0) break;
        if (j->joined == 0) { /* now running: the decoder holds its reference there */
            j->refs++;
            j->run_next = m->running, m->running = j;
        }
        qkv_translate_options o = qkv_translate_default_options();
        o.beam = j->beam, o.n_best = j->n_best, o.max_len = j->max_len;
        pthread_mutex_unlock(&s->lock);
        qkv_status st = QKV_OK;
        if (m->languages) /* the languages are read when the sources join */
            st = qkv_translator_set_languages(m->tr, j->src_lang, j->tgt_lang, &err);
        if (!st)
            st = qkv_batch_decoder_add_with(m->bd, (const char *const *)j->src + j->joined, k,
                                            &o, j->slot + j->joined, &err);
        pthread_mutex_lock(&s->lock);
        if (st) job_fail(j, st == QKV_ERR_ARG ? 400 : 500, err.msg);
        else j->joined += k, s->joined += (unsigned)k;
        if (st || j->joined == j->n) { /* leaves the queue */
            m->queue = j->next, m->queued--, s->queued--;
            if (!m->queue) m->queue_tail = NULL;
            serve_release(s, j);
        } else {
            break;
        }
    }
}

/* Rows the model's batch holds now. */
static int rows_held(const served_model *m)
{
    return m->bd ? qkv_batch_decoder_slots(m->bd) - qkv_batch_decoder_free_slots(m->bd)
                 : qkv_lm_batch_running(m->lb);
}

/* A test's hook (QKV_SERVE_HOLD_FILE): while that file exists, the decoder holds its batch
 * between admitting requests and stepping, so that a test can fill the queue or run past
 * --timeout without depending on the machine's speed. Under lock; released while it waits. */
static void test_hold(server *s)
{
    const char *path = getenv("QKV_SERVE_HOLD_FILE");
    struct stat sb;
    while (path && *path && !s->draining && !s->stop_decoder && !stat(path, &sb)) {
        pthread_mutex_unlock(&s->lock);
        nanosleep(&(struct timespec){0, 10000000L}, NULL);
        pthread_mutex_lock(&s->lock);
    }
}

/* A test's hook (QKV_SERVE_STEP_DELAY_MS): every decoder step waits that long first, so that
 * a long generation lasts long enough for a test to watch it run. Lock not held. */
static void test_pace(void)
{
    const char *ms = getenv("QKV_SERVE_STEP_DELAY_MS");
    const long n = ms ? strtol(ms, NULL, 10) : 0;
    if (n > 0 && n < 10000)
        nanosleep(&(struct timespec){n / 1000, (n % 1000) * 1000000L}, NULL);
}

/* A translation model's round: waiting requests join, one decoder step runs, and what
 * finished is handed back. Under lock; released while the model runs. */
static void translation_round(server *s, served_model *m)
{
    admit_translations(s, m);
    test_hold(s);
    const int rows = rows_held(m);
    if (rows && qkv_batch_decoder_running(m->bd)) {
        qkv_error err = {0};
        pthread_mutex_unlock(&s->lock);
        test_pace();
        qkv_status st = qkv_batch_decoder_step(m->bd, &err);
        pthread_mutex_lock(&s->lock);
        s->steps++, s->batch_rows += (unsigned)rows;
        if (st)
            for (job *j = m->running; j; j = j->run_next) job_fail(j, 500, err.msg);
    }
    collect(s, m);
}

/* ---- completions ------------------------------------------------------------------------ */

/* A completion's new token: its text appended, stop strings looked for. Under lock; nonzero
 * when the completion ends here (a stop string, or its client went away). */
static int append_token(server *s, job *j, int id)
{
    char piece[16];
    size_t n = qkv_lm_token_text(piece, sizeof piece, &j->m->lm.vocab, id);
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
static void lm_round(server *s, served_model *m)
{
    qkv_error err = {0};
    while (m->queue && qkv_lm_batch_free_slots(m->lb) > 0) {
        job *j = m->queue; /* the queue's reference passes to the slot */
        m->queue = j->next, m->queued--, s->queued--;
        if (!m->queue) m->queue_tail = NULL;
        int slot = -1;
        pthread_mutex_unlock(&s->lock);
        qkv_status st = qkv_lm_batch_add(m->lb, j->prompt, j->n_prompt, &j->gen, &slot, &err);
        pthread_mutex_lock(&s->lock);
        if (st) {
            job_fail(j, st == QKV_ERR_ARG ? 400 : 500, err.msg);
            pthread_cond_broadcast(&j->changed);
            serve_release(s, j);
            continue;
        }
        m->lm_job[slot] = j, s->joined++;
    }
    test_hold(s);
    const int rows = qkv_lm_batch_running(m->lb);
    if (!rows) return;
    pthread_mutex_unlock(&s->lock);
    test_pace();
    qkv_status st = qkv_lm_batch_step(m->lb, m->drawn, &err);
    pthread_mutex_lock(&s->lock);
    s->steps++, s->batch_rows += (unsigned)rows;
    for (int slot = 0; slot < qkv_lm_batch_slots(m->lb); slot++) {
        job *j = m->lm_job[slot];
        if (!j) continue;
        int end = st != QKV_OK;
        if (st) job_fail(j, 500, err.msg);
        else if (m->drawn[slot] >= 0) end = append_token(s, j, m->drawn[slot]);
        const int over = end || j->cancelled || qkv_lm_batch_finished(m->lb, slot);
        if (over) {
            qkv_lm_batch_release(m->lb, slot);
            j->done = 1;
            m->lm_job[slot] = NULL;
        }
        /* only a stream needs each token; a plain request the end */
        if (over || j->streaming) pthread_cond_broadcast(&j->changed);
        if (over) serve_release(s, j);
    }
}

/* ---- scheduling ------------------------------------------------------------------------- */

/* Whether m has anything to do: requests waiting, or a batch running. Under lock. */
static int busy(const served_model *m)
{
    return m->queue || m->running || (m->lb && qkv_lm_batch_running(m->lb));
}

/* Dynamic batching's delay (--max-batch-delay): an idle model lets its oldest waiting request
 * wait up to max_delay_s for others to join its first step, unless the waiting ones already
 * fill the free slots or the server is stopping. 1 while it should wait (then *until is when,
 * in serve_now() time); 0 to go on. Under lock. */
static int batch_delay(const server *s, const served_model *m, double *until)
{
    if (s->max_delay_s <= 0 || !m->queue || s->draining || s->stop_decoder) return 0;
    if (m->running || (m->lb && qkv_lm_batch_running(m->lb))) return 0; /* not idle */
    int waiting = 0;
    for (const job *j = m->queue; j; j = j->next)
        waiting += j->kind == JOB_TRANSLATE ? (j->n - j->joined) * rows_per_source(j) : 1;
    const int free_slots = m->lb ? qkv_lm_batch_free_slots(m->lb)
                                 : qkv_batch_decoder_free_slots(m->bd);
    *until = m->queue->queued_at + s->max_delay_s;
    return waiting < free_slots && serve_now() < *until;
}

/* Requests cancelled (or failed) while waiting leave the queue. Under lock. */
static void drop_cancelled(server *s, served_model *m)
{
    for (job **p = &m->queue; *p;) {
        job *j = *p;
        if (!j->cancelled && !j->done) {
            p = &j->next;
            continue;
        }
        *p = j->next, m->queued--, s->queued--;
        j->done = 1;
        serve_release(s, j);
    }
    m->queue_tail = NULL;
    for (job *j = m->queue; j; j = j->next) m->queue_tail = j;
}

typedef struct {
    server *s;
    int thread;
    pthread_t id;
} decoder_thread;

/* Waits on the work condition until `until` (serve_now() time; 0: no limit). Under lock. */
static void wait_for_work(server *s, double until)
{
    if (until <= 0) {
        pthread_cond_wait(&s->work, &s->lock);
        return;
    }
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    const long long ns = (long long)t.tv_nsec + (long long)((until - serve_now()) * 1e9) + 1;
    t.tv_sec += (time_t)(ns / 1000000000LL), t.tv_nsec = (long)(ns % 1000000000LL);
    pthread_cond_timedwait(&s->work, &s->lock, &t);
}

/* A decoding thread: a round of every busy model it serves, in turn (one step each, so that
 * models that share a thread share its time), until it is stopped and nothing is left. */
static void *decoder_main(void *arg)
{
    const decoder_thread *t = arg;
    server *s = t->s;
    pthread_mutex_lock(&s->lock);
    for (;;) {
        int any = 0, ran = 0;
        double until = 0;
        for (int i = 0; i < s->n_models; i++) {
            served_model *m = &s->models[i];
            if (m->thread != t->thread) continue;
            drop_cancelled(s, m);
            if (!busy(m)) continue;
            any = 1;
            double u;
            if (batch_delay(s, m, &u)) { /* woken early by each new request, to count again */
                until = until > 0 && until < u ? until : u;
                continue;
            }
            if (m->lb) lm_round(s, m);
            else translation_round(s, m);
            ran = 1;
        }
        if (ran) continue;
        if (!any && s->stop_decoder) break;
        wait_for_work(s, any ? until : 0);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

int serve_decoders_start(server *s)
{
    s->n_threads = s->per_model_threads ? s->n_models : 1;
    decoder_thread *t = calloc((size_t)s->n_threads, sizeof *t);
    if (!t) {
        fprintf(stderr, "qkv serve: out of memory\n");
        return -1;
    }
    for (int i = 0; i < s->n_models; i++) s->models[i].thread = s->per_model_threads ? i : 0;
    s->decoders = t;
    for (int i = 0; i < s->n_threads; i++) {
        t[i].s = s, t[i].thread = i;
        if (pthread_create(&t[i].id, NULL, decoder_main, &t[i])) {
            fprintf(stderr, "qkv serve: cannot start a decoding thread\n");
            s->n_threads = i;
            serve_decoders_stop(s);
            return -1;
        }
    }
    return 0;
}

void serve_decoders_stop(server *s)
{
    decoder_thread *t = s->decoders;
    pthread_mutex_lock(&s->lock);
    s->stop_decoder = 1;
    pthread_cond_broadcast(&s->work);
    pthread_mutex_unlock(&s->lock);
    for (int i = 0; t && i < s->n_threads; i++) pthread_join(t[i].id, NULL);
    free(t);
    s->decoders = NULL;
}
