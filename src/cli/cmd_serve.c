/* SPDX-License-Identifier: MIT */
/* qkv serve: a model directory behind HTTP (libmicrohttpd, one thread per connection).
 *   POST /translate        LibreTranslate's shape: {"q": "text" | [...]} -> {"translatedText"}
 *   POST /v1/completions   OpenAI's, for a language model; "stream": true as server-sent events
 *   GET  /health, /v1/models, /metrics (Prometheus text)
 * One decoding thread owns the model. Requests wait in a bounded queue (full: 503 with
 * Retry-After); greedy translations join the running batch of the library's batch decoder at
 * the next step and leave it when they end (continuous batching), so concurrent clients share
 * each step's reading of the weights while a lone request is decoded as soon as it arrives.
 * Completions join the language model's batch the same way (qkv_lm_batch), each token streamed
 * as it is drawn. Beam search and n-best requests are decoded whole by qkv_translate between
 * steps.
 * A handler waits for its request in short slices and, between them, looks at its socket: a
 * client that went away cancels its request and frees its slot; one that waits past --timeout
 * gets 504. SIGTERM or SIGINT (taken by sigwait in the main thread, no handler, no global
 * state): stop accepting, finish what is in flight, exit 0. */
#include <errno.h>
#include <stdarg.h>
#include <math.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cJSON.h>
#include <microhttpd.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/common.h"

enum {
    MAX_BODY = 1 << 20,     /* bytes of a request body (more: 413) */
    MAX_SOURCES = 128,      /* q items of one request (more: 413) */
    MAX_SOURCE_BYTES = 16384, /* bytes of one q item (more: 413) */
    MAX_COMPLETION = 4096,  /* max_tokens (more: 400) */
    MAX_STOPS = 4,          /* stop strings, as OpenAI's */
    MAX_BEAM = 16,
    N_BUCKETS = 12,
};
static const double BUCKETS[N_BUCKETS] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5,
                                          10, 30};
static const int CODES[] = {200, 400, 404, 405, 413, 500, 503, 504};
enum { N_CODES = sizeof CODES / sizeof *CODES };

/* ---- requests ------------------------------------------------------------------------- */

typedef enum { JOB_TRANSLATE, JOB_COMPLETE } job_kind;

typedef struct job {
    job_kind kind;
    struct job *next;       /* in the queue */
    struct job *run_next;   /* among the running (a translation some of whose sources joined) */
    int refs;               /* the handler's and the decoder's */
    int done, cancelled;    /* done: the result is complete (or failed: status) */
    int status;             /* HTTP status of a failure; 0 while fine */
    char error[512];
    /* translation: n sources, each given a slot when it joins; greedy unless beam/n_best */
    int n, joined, finished, max_len, beam, n_best;
    char **src, **text;     /* (n) the sources; (n * n_best) the translations */
    double *score;          /* (n * n_best) beam search's scores */
    int *slot;              /* (n) the batch decoder's slot of source i, -1 once taken */
    /* completion */
    int *prompt, n_prompt;
    qkv_lm_generation gen;
    char *stop[MAX_STOPS];
    int n_stop, stop_hit;
    int streaming;          /* its handler sends each piece as it comes */
    char *out;              /* the text so far */
    size_t out_len, out_cap;
    int tokens;             /* tokens produced (either kind) */
    double queued_at;       /* now_s() when it entered the queue */
    pthread_cond_t changed; /* its handler waits on it: done, or a completion's new text */
} job;

/* A zeroed request with its condition (NULL: out of memory). */
static job *job_new(void)
{
    job *j = calloc(1, sizeof *j);
    if (j && pthread_cond_init(&j->changed, NULL)) free(j), j = NULL;
    return j;
}

static void job_free(job *j)
{
    for (int i = 0; j->src && i < j->n; i++) free(j->src[i]);
    for (int i = 0; j->text && i < j->n * j->n_best; i++) free(j->text[i]);
    for (int i = 0; i < j->n_stop; i++) free(j->stop[i]);
    free(j->src), free(j->text), free(j->score), free(j->slot), free(j->prompt), free(j->out);
    pthread_cond_destroy(&j->changed);
    free(j);
}

/* ---- the server ----------------------------------------------------------------------- */

typedef struct {
    const char *model_dir, *host, *model_id;
    int port, slots, max_queue, timeout_s;
    double max_delay_s;     /* --max-batch-delay: an idle decoder waits this long for company */
    qkv_precision precision; /* --precision: how the model's linear layers multiply */
    qkv_translator *tr;     /* one of the two */
    lm_dir lm;
    qkv_batch_decoder *bd;  /* a translation model's running batch */
    qkv_lm_batch *lb;       /* a language model's */
    job **lm_job;           /* (slots) the completion in each of lb's slots */
    int *drawn;             /* (slots) one step's tokens */
    pthread_mutex_t lock;
    pthread_cond_t work;    /* the decoder waits for requests */
    pthread_cond_t news;    /* a request ended (shutdown waits for in_flight to reach 0) */
    job *queue, *queue_tail, *running; /* waiting to join; joined (translation) */
    int queued, in_flight, draining, stop_decoder;
    /* metrics, under lock */
    unsigned long long by_code[N_CODES + 1], tokens, steps, batch_rows, joined;
    unsigned long long latency[N_BUCKETS + 1], latency_count;
    double latency_sum;
    unsigned long next_id;
    struct MHD_Daemon *daemon;
} server;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void release(server *s, job *j) /* under lock */
{
    (void)s;
    if (--j->refs == 0) job_free(j);
}

static void fail_job(job *j, int status, const char *msg)
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
                fail_job(j, 500, err.msg);
            j->slot[i] = -1, j->finished++, j->tokens += tokens, s->tokens += (unsigned)tokens;
        }
        if (j->finished == j->n || j->cancelled || j->done) {
            for (int i = 0; i < j->joined; i++)
                if (j->slot[i] >= 0) qkv_batch_decoder_cancel(s->bd, j->slot[i]);
            j->done = 1;
            *p = j->run_next;
            pthread_cond_broadcast(&j->changed);
            release(s, j);
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
        fail_job(j, st == QKV_ERR_ARG ? 400 : 500, err.msg);
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
    release(s, j);
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
            fail_job(j, 500, "out of memory for a completion");
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
            fail_job(j, st == QKV_ERR_ARG ? 400 : 500, err.msg);
            pthread_cond_broadcast(&j->changed);
            release(s, j);
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
        if (st) fail_job(j, 500, err.msg);
        else if (s->drawn[slot] >= 0) end = append_token(s, j, s->drawn[slot]);
        const int over = end || j->cancelled || qkv_lm_batch_finished(s->lb, slot);
        if (over) {
            qkv_lm_batch_release(s->lb, slot);
            j->done = 1;
            s->lm_job[slot] = NULL;
        }
        /* only a stream needs each token; a plain request the end */
        if (over || j->streaming) pthread_cond_broadcast(&j->changed);
        if (over) release(s, j);
    }
}

/* Dynamic batching's delay (--max-batch-delay): an idle decoder lets the oldest waiting request
 * wait up to max_delay_s for others to join its first step, unless the waiting ones already fill
 * the free slots or the server is stopping. 1 while it should wait (then *until is when, in
 * now_s() time); 0 to go on. Under lock. */
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
    return waiting < free_slots && now_s() < *until;
}

/* Admits waiting translations into free slots (their sources join together: one encoder
 * pass), runs one decoder step, and hands back what finished; beam search runs whole when it
 * reaches the head of the queue. For a language model: lm_round. */
static void *decoder_main(void *arg)
{
    server *s = arg;
    qkv_error err = {0};
    pthread_mutex_lock(&s->lock);
    for (;;) {
        while (!s->queue && !s->running && !(s->lb && qkv_lm_batch_running(s->lb)) &&
               !s->stop_decoder)
            pthread_cond_wait(&s->work, &s->lock);
        if (!s->queue && !s->running && !(s->lb && qkv_lm_batch_running(s->lb)) &&
            s->stop_decoder)
            break;
        /* requests cancelled while waiting leave the queue */
        for (job **p = &s->queue; *p;) {
            job *j = *p;
            if (!j->cancelled && !j->done) {
                p = &j->next;
                continue;
            }
            *p = j->next, s->queued--;
            j->done = 1;
            release(s, j);
        }
        s->queue_tail = NULL;
        for (job *j = s->queue; j; j = j->next) s->queue_tail = j;
        double until;
        if (batch_delay(s, &until)) { /* woken early by each new request, to count again */
            struct timespec t;
            clock_gettime(CLOCK_REALTIME, &t);
            const double left = until - now_s();
            const long long ns = (long long)t.tv_nsec + (long long)(left * 1e9) + 1;
            t.tv_sec += (time_t)(ns / 1000000000LL), t.tv_nsec = (long)(ns % 1000000000LL);
            pthread_cond_timedwait(&s->work, &s->lock, &t);
            continue;
        }
        if (s->lb) {
            lm_round(s);
            continue;
        }
        job *head = s->queue;
        if (head && (head->beam > 1 || head->n_best > 1)) {
            if (s->running) goto step; /* the batch first: whole requests do not mix with it */
            s->queue = head->next, s->queued--;
            if (!s->queue) s->queue_tail = NULL;
            pthread_mutex_unlock(&s->lock);
            translate_whole(s, head);
            pthread_mutex_lock(&s->lock);
            continue;
        }
        /* greedy translations join while slots are free: each source of a request joins as a
         * slot frees, the request leaves the queue when its last source has joined */
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
            if (st) fail_job(j, st == QKV_ERR_ARG ? 400 : 500, err.msg);
            else j->joined += k, s->joined += (unsigned)k;
            if (st || j->joined == j->n) { /* leaves the queue */
                s->queue = j->next, s->queued--;
                if (!s->queue) s->queue_tail = NULL;
                release(s, j);
            } else {
                break;
            }
        }
    step:;
        const int rows = s->bd ? qkv_batch_decoder_running(s->bd) : 0;
        if (rows) {
            pthread_mutex_unlock(&s->lock);
            qkv_status st = qkv_batch_decoder_step(s->bd, &err);
            pthread_mutex_lock(&s->lock);
            s->steps++, s->batch_rows += (unsigned)rows;
            if (st)
                for (job *j = s->running; j; j = j->run_next) fail_job(j, 500, err.msg);
        }
        collect(s);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

/* ---- HTTP: bodies, JSON, errors ------------------------------------------------------- */

/* Whether s[0..n) is well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates, at most
 * U+10FFFF). */
static int utf8_valid(const unsigned char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        const unsigned c = s[i];
        int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!len || (c & 0xFE) == 0xC0 || i + (size_t)len > n) return 0;
        unsigned cp = len == 1 ? c : c & (0x7Fu >> len);
        for (int k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return 0;
            cp = cp << 6 | (s[i + k] & 0x3Fu);
        }
        if ((len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
            (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
            return 0;
        i += (size_t)len;
    }
    return 1;
}

/* What a connection accumulates: the request body, and the request once queued. */
typedef struct {
    char *body;
    size_t len;
    int too_large;
    double start;
    job *j;
    int fd;               /* the client's socket, to notice that it went away */
    int code;             /* the status sent (for the metrics) */
} conn;

static void count_code(server *s, int code, double seconds) /* under lock */
{
    int k = 0;
    while (k < N_CODES && CODES[k] != code) k++;
    s->by_code[k]++;
    int b = 0;
    while (b < N_BUCKETS && seconds > BUCKETS[b]) b++;
    s->latency[b]++, s->latency_count++, s->latency_sum += seconds;
}

static enum MHD_Result send_text(struct MHD_Connection *c, conn *cn, int code, char *text,
                                 const char *type, int retry_after)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    if (!r) return free(text), MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (retry_after) MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, "1");
    enum MHD_Result ok = MHD_queue_response(c, (unsigned)code, r);
    MHD_destroy_response(r);
    cn->code = code;
    return ok;
}

static enum MHD_Result send_json(struct MHD_Connection *c, conn *cn, int code, cJSON *o)
{
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!text) return MHD_NO;
    size_t n = strlen(text);
    char *line = malloc(n + 2); /* a newline, for curl's output */
    if (!line) return free(text), MHD_NO;
    memcpy(line, text, n), line[n] = '\n', line[n + 1] = '\0';
    free(text);
    return send_text(c, cn, code, line, "application/json", 0);
}

/* {"error": message} with the status (OpenAI's clients read error.message, LibreTranslate's
 * read error: both are there). */
static enum MHD_Result send_error(struct MHD_Connection *c, conn *cn, int code, const char *fmt,
                                  ...) __attribute__((format(printf, 4, 5)));
static enum MHD_Result send_error(struct MHD_Connection *c, conn *cn, int code, const char *fmt,
                                  ...)
{
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    cJSON *o = cJSON_CreateObject(), *e = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "error", msg);
    cJSON_AddStringToObject(e, "message", msg);
    cJSON_AddNumberToObject(e, "code", code);
    cJSON_AddItemToObject(o, "detail", e);
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!text) return MHD_NO;
    size_t n = strlen(text);
    char *line = realloc(text, n + 2);
    if (!line) return free(text), MHD_NO;
    line[n] = '\n', line[n + 1] = '\0';
    return send_text(c, cn, code, line, "application/json", code == 503);
}

/* An optional integer member in [lo, hi]: 0 and *v untouched when absent, -1 (with msg) when
 * of another type or out of range. */
static int get_int(const cJSON *o, const char *key, int lo, int hi, int *v, char *msg,
                   size_t cap)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!x || cJSON_IsNull(x)) return 0;
    if (!cJSON_IsNumber(x) || x->valuedouble != floor(x->valuedouble) || x->valuedouble < lo ||
        x->valuedouble > hi) {
        snprintf(msg, cap, "\"%s\" must be an integer in [%d, %d]", key, lo, hi);
        return -1;
    }
    *v = (int)x->valuedouble;
    return 0;
}

static int get_float(const cJSON *o, const char *key, double lo, double hi, float *v, char *msg,
                     size_t cap)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!x || cJSON_IsNull(x)) return 0;
    if (!cJSON_IsNumber(x) || !(x->valuedouble >= lo && x->valuedouble <= hi)) {
        snprintf(msg, cap, "\"%s\" must be a number in [%g, %g]", key, lo, hi);
        return -1;
    }
    *v = (float)x->valuedouble;
    return 0;
}

/* ---- HTTP: queueing and waiting ------------------------------------------------------- */

/* Whether the client closed its end (a read would give end of file). */
static int client_gone(int fd)
{
    if (fd < 0) return 0;
    char b;
    ssize_t n = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

/* Puts j in the queue (the handler keeps one reference, the queue the other); 0, or 503 when
 * the queue is full or the server is stopping. */
static int enqueue(server *s, job *j)
{
    pthread_mutex_lock(&s->lock);
    if (s->draining || s->queued >= s->max_queue) {
        pthread_mutex_unlock(&s->lock);
        return 503;
    }
    j->refs = 2;
    j->queued_at = now_s();
    if (s->queue_tail) s->queue_tail->next = j;
    else s->queue = j;
    s->queue_tail = j, s->queued++;
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->lock);
    return 0;
}

/* Waits, under lock, until ready(j) or the request ends: 0, 504 past the timeout, 499 when
 * the client went away (then the request is cancelled). */
static int wait_for(server *s, job *j, int fd, double start,
                    int (*ready)(const job *, const void *), const void *arg)
{
    while (!ready(j, arg)) {
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        t.tv_nsec += 50 * 1000000L;
        if (t.tv_nsec >= 1000000000L) t.tv_sec++, t.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&j->changed, &s->lock, &t);
        if (ready(j, arg)) break;
        if (client_gone(fd)) {
            j->cancelled = 1;
            pthread_cond_signal(&s->work);
            return 499;
        }
        if (s->timeout_s > 0 && now_s() - start > s->timeout_s) {
            j->cancelled = 1;
            pthread_cond_signal(&s->work);
            return 504;
        }
    }
    return 0;
}

static int is_done(const job *j, const void *arg)
{
    (void)arg;
    return j->done;
}

/* ---- POST /translate -------------------------------------------------------------------- */

static enum MHD_Result post_translate(server *s, struct MHD_Connection *c, conn *cn,
                                      const cJSON *req)
{
    char msg[600];
    if (!s->tr)
        return send_error(c, cn, 400, "this server holds a language model: use "
                          "/v1/completions");
    const cJSON *q = cJSON_GetObjectItemCaseSensitive(req, "q");
    const int is_list = cJSON_IsArray(q);
    if (!cJSON_IsString(q) && !is_list)
        return send_error(c, cn, 400, "\"q\" must be a string or an array of strings");
    const int n = is_list ? cJSON_GetArraySize(q) : 1;
    if (n > MAX_SOURCES)
        return send_error(c, cn, 413, "%d texts in \"q\": at most %d per request", n,
                          MAX_SOURCES);
    for (int i = 0; i < n; i++) {
        const cJSON *x = is_list ? cJSON_GetArrayItem(q, i) : q;
        if (!cJSON_IsString(x))
            return send_error(c, cn, 400, "\"q\"[%d] must be a string", i);
        if (strlen(x->valuestring) > MAX_SOURCE_BYTES)
            return send_error(c, cn, 413, "\"q\"[%d] has %zu bytes: at most %d", i,
                              strlen(x->valuestring), MAX_SOURCE_BYTES);
        if (strchr(x->valuestring, '\n') || strchr(x->valuestring, '\r'))
            return send_error(c, cn, 400, "\"q\"[%d] holds a line break: send one sentence per "
                              "text (an array of them)", i);
    }
    static const char *const strings[] = {"source", "target", "format", "api_key"};
    for (size_t k = 0; k < sizeof strings / sizeof *strings; k++) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(req, strings[k]);
        if (x && !cJSON_IsString(x) && !cJSON_IsNull(x))
            return send_error(c, cn, 400, "\"%s\" must be a string", strings[k]);
    }
    const cJSON *format = cJSON_GetObjectItemCaseSensitive(req, "format");
    if (cJSON_IsString(format) && strcmp(format->valuestring, "text"))
        return send_error(c, cn, 400, "\"format\": only \"text\" is supported");
    const int limit = qkv_transformer_get_config(qkv_translator_model(s->tr))->max_len;
    int beam = 1, alternatives = 0, max_len = 0;
    if (get_int(req, "beam", 1, MAX_BEAM, &beam, msg, sizeof msg) ||
        get_int(req, "alternatives", 0, MAX_BEAM - 1, &alternatives, msg, sizeof msg) ||
        get_int(req, "max_len", 1, limit, &max_len, msg, sizeof msg))
        return send_error(c, cn, 400, "%s", msg);
    job *j = job_new();
    if (!j) return send_error(c, cn, 500, "out of memory");
    j->kind = JOB_TRANSLATE, j->n = n, j->max_len = max_len, j->n_best = alternatives + 1;
    j->beam = beam > j->n_best ? beam : j->n_best;
    j->src = calloc((size_t)n, sizeof *j->src);
    j->text = calloc((size_t)n * j->n_best, sizeof *j->text);
    j->score = calloc((size_t)n * j->n_best, sizeof *j->score);
    j->slot = malloc((size_t)n * sizeof *j->slot);
    int ok = j->src && j->text && j->score && j->slot;
    for (int i = 0; ok && i < n; i++) {
        j->slot[i] = -1;
        ok = !!(j->src[i] = strdup((is_list ? cJSON_GetArrayItem(q, i) : q)->valuestring));
    }
    if (!ok) return job_free(j), send_error(c, cn, 500, "out of memory");
    if (n == 0) j->done = 1, j->refs = 1;
    else if (enqueue(s, j))
        return job_free(j), send_error(c, cn, 503, "the queue is full (%d requests): retry "
                                       "later", s->max_queue);
    cn->j = j;
    pthread_mutex_lock(&s->lock);
    int w = wait_for(s, j, cn->fd, cn->start, is_done, NULL);
    cJSON *o = NULL;
    if (!w && !j->status) {
        o = cJSON_CreateObject();
        cJSON *texts = cJSON_CreateArray(), *alts = cJSON_CreateArray(),
              *scores = cJSON_CreateArray();
        for (int i = 0; i < n; i++) {
            const char *best = j->text[(size_t)i * j->n_best];
            cJSON_AddItemToArray(texts, cJSON_CreateString(best ? best : ""));
            cJSON *a = cJSON_CreateArray(), *sc = cJSON_CreateArray();
            for (int k = 0; k < j->n_best; k++) {
                const size_t h = (size_t)i * j->n_best + k;
                if (k > 0 && j->text[h]) cJSON_AddItemToArray(a, cJSON_CreateString(j->text[h]));
                if (j->beam > 1 && j->text[h] && isfinite(j->score[h]))
                    cJSON_AddItemToArray(sc, cJSON_CreateNumber(j->score[h]));
            }
            cJSON_AddItemToArray(alts, a), cJSON_AddItemToArray(scores, sc);
        }
        if (is_list) {
            cJSON_AddItemToObject(o, "translatedText", texts);
        } else {
            cJSON_AddItemToObject(o, "translatedText",
                                  cJSON_Duplicate(cJSON_GetArrayItem(texts, 0), 1));
            cJSON_Delete(texts);
            cJSON *a0 = cJSON_DetachItemFromArray(alts, 0), *s0 = cJSON_DetachItemFromArray(scores, 0);
            cJSON_Delete(alts), cJSON_Delete(scores);
            alts = a0, scores = s0;
        }
        if (alternatives) cJSON_AddItemToObject(o, "alternatives", alts);
        else cJSON_Delete(alts);
        if (j->beam > 1) cJSON_AddItemToObject(o, "scores", scores);
        else cJSON_Delete(scores);
    }
    const int status = j->status;
    snprintf(msg, sizeof msg, "%s", j->error);
    release(s, j);
    cn->j = NULL;
    pthread_mutex_unlock(&s->lock);
    if (w == 499) return MHD_NO; /* nobody to answer */
    if (w == 504) return send_error(c, cn, 504, "the translation took longer than %d s",
                                    s->timeout_s);
    if (status) return send_error(c, cn, status, "%s", msg);
    return send_json(c, cn, 200, o);
}

/* ---- POST /v1/completions ------------------------------------------------------------- */

/* A completion chunk or the whole answer: OpenAI's text_completion object. */
static cJSON *completion_json(server *s, const char *id, const char *text, const char *finish,
                              const job *j, int usage)
{
    cJSON *o = cJSON_CreateObject(), *choices = cJSON_CreateArray(), *c = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "object", "text_completion");
    cJSON_AddNumberToObject(o, "created", (double)time(NULL));
    cJSON_AddStringToObject(o, "model", s->model_id);
    cJSON_AddStringToObject(c, "text", text);
    cJSON_AddNumberToObject(c, "index", 0);
    cJSON_AddNullToObject(c, "logprobs");
    if (finish) cJSON_AddStringToObject(c, "finish_reason", finish);
    else cJSON_AddNullToObject(c, "finish_reason");
    cJSON_AddItemToArray(choices, c);
    cJSON_AddItemToObject(o, "choices", choices);
    if (usage) {
        cJSON *u = cJSON_CreateObject();
        cJSON_AddNumberToObject(u, "prompt_tokens", j->n_prompt);
        cJSON_AddNumberToObject(u, "completion_tokens", j->tokens);
        cJSON_AddNumberToObject(u, "total_tokens", j->n_prompt + j->tokens);
        cJSON_AddItemToObject(o, "usage", u);
    }
    return o;
}

/* The stop strings' longest length - 1: text the stream holds back until it is sure no stop
 * string begins there. */
static size_t holdback(const job *j)
{
    size_t h = 0;
    for (int k = 0; k < j->n_stop; k++)
        if (strlen(j->stop[k]) > h + 1) h = strlen(j->stop[k]) - 1;
    return h;
}

typedef struct {
    server *s;
    job *j;             /* the stream holds the handler's reference */
    int fd;
    double start;
    size_t sent;        /* bytes of j->out sent */
    int finished;       /* the last chunk went out; next: [DONE] */
    char id[32];
    char *pending;      /* a chunk that did not fit the buffer yet */
    size_t pending_len, pending_at;
} stream;

static int has_news(const job *j, const void *arg)
{
    const stream *st = arg;
    return j->done || j->out_len > st->sent + holdback(j);
}

/* Server-sent events: "data: {chunk}\n\n" per piece of text, then "data: [DONE]\n\n". */
static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    stream *st = cls;
    server *s = st->s;
    if (!st->pending) {
        if (st->finished == 2) return MHD_CONTENT_READER_END_OF_STREAM;
        if (st->finished == 1) {
            st->pending = strdup("data: [DONE]\n\n"), st->finished = 2;
        } else {
            job *j = st->j;
            pthread_mutex_lock(&s->lock);
            int w = wait_for(s, j, st->fd, st->start, has_news, st);
            if (w) {
                pthread_mutex_unlock(&s->lock);
                return MHD_CONTENT_READER_END_WITH_ERROR;
            }
            size_t upto = j->done ? j->out_len : j->out_len - holdback(j);
            char *piece = strndup(j->out + st->sent, upto - st->sent);
            st->sent = upto;
            cJSON *o = NULL;
            if (j->status) {
                o = cJSON_CreateObject();
                cJSON_AddStringToObject(o, "error", j->error);
            } else if (piece) {
                o = completion_json(s, st->id, piece, j->done ? (j->stop_hit ? "stop" : "length")
                                    : NULL, j, j->done);
            }
            if (j->done) st->finished = 1;
            pthread_mutex_unlock(&s->lock);
            free(piece);
            char *text = o ? cJSON_PrintUnformatted(o) : NULL;
            cJSON_Delete(o);
            if (!text) return MHD_CONTENT_READER_END_WITH_ERROR;
            size_t n = strlen(text);
            if (!(st->pending = malloc(n + 9))) return free(text), MHD_CONTENT_READER_END_WITH_ERROR;
            snprintf(st->pending, n + 9, "data: %s\n\n", text);
            free(text);
        }
        if (!st->pending) return MHD_CONTENT_READER_END_WITH_ERROR;
        st->pending_len = strlen(st->pending), st->pending_at = 0;
    }
    size_t n = st->pending_len - st->pending_at < max ? st->pending_len - st->pending_at : max;
    memcpy(buf, st->pending + st->pending_at, n);
    st->pending_at += n;
    if (st->pending_at == st->pending_len) free(st->pending), st->pending = NULL;
    return (ssize_t)n;
}

static void stream_free(void *cls)
{
    stream *st = cls;
    server *s = st->s;
    pthread_mutex_lock(&s->lock);
    if (!st->j->done) st->j->cancelled = 1;
    release(s, st->j);
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->lock);
    free(st->pending);
    free(st);
}

static enum MHD_Result post_completions(server *s, struct MHD_Connection *c, conn *cn,
                                        const cJSON *req)
{
    char msg[600];
    if (!s->lm.model)
        return send_error(c, cn, 400, "this server holds a translation model: use /translate");
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(req, "prompt");
    if (cJSON_IsArray(p) && cJSON_GetArraySize(p) == 1) p = cJSON_GetArrayItem(p, 0);
    if (p && !cJSON_IsString(p))
        return send_error(c, cn, 400, "\"prompt\" must be a string (or an array of one)");
    const char *prompt = p && *p->valuestring ? p->valuestring : "\n";
    if (strlen(prompt) > MAX_BODY)
        return send_error(c, cn, 413, "the prompt is too long");
    int max_tokens = 16, top_k = 0, seed = 0;
    float temperature = 1.0f, top_p = 1.0f;
    if (get_int(req, "max_tokens", 0, MAX_COMPLETION, &max_tokens, msg, sizeof msg) ||
        get_int(req, "top_k", 0, 1 << 30, &top_k, msg, sizeof msg) ||
        get_int(req, "seed", 0, INT32_MAX, &seed, msg, sizeof msg) ||
        get_float(req, "temperature", 0.0, 100.0, &temperature, msg, sizeof msg) ||
        get_float(req, "top_p", 1e-6, 1.0, &top_p, msg, sizeof msg))
        return send_error(c, cn, 400, "%s", msg);
    const cJSON *stream_flag = cJSON_GetObjectItemCaseSensitive(req, "stream");
    if (stream_flag && !cJSON_IsBool(stream_flag) && !cJSON_IsNull(stream_flag))
        return send_error(c, cn, 400, "\"stream\" must be true or false");
    const cJSON *stop = cJSON_GetObjectItemCaseSensitive(req, "stop");
    const int stop_list = cJSON_IsArray(stop);
    const int n_stop = stop_list ? cJSON_GetArraySize(stop) : cJSON_IsString(stop) ? 1 : 0;
    if ((stop && !cJSON_IsNull(stop) && !stop_list && !cJSON_IsString(stop)) || n_stop > MAX_STOPS)
        return send_error(c, cn, 400, "\"stop\" must be a string or an array of at most %d",
                          MAX_STOPS);
    for (int k = 0; k < n_stop; k++) {
        const cJSON *x = stop_list ? cJSON_GetArrayItem(stop, k) : stop;
        if (!cJSON_IsString(x) || !*x->valuestring)
            return send_error(c, cn, 400, "\"stop\"[%d] must be a non-empty string", k);
    }
    job *j = job_new();
    if (!j) return send_error(c, cn, 500, "out of memory");
    j->kind = JOB_COMPLETE, j->beam = j->n_best = 1;
    const size_t len = strlen(prompt);
    size_t n = 0, unknown = 0;
    j->prompt = malloc((len ? len : 1) * sizeof *j->prompt);
    j->out = malloc(1), j->out_cap = 1;
    qkv_error err = {0};
    if (!j->prompt || !j->out) return job_free(j), send_error(c, cn, 500, "out of memory");
    j->out[0] = '\0';
    if (qkv_lm_encode(j->prompt, &n, &unknown, &s->lm.vocab, prompt, len, &err))
        return job_free(j), send_error(c, cn, 400, "the prompt: %s", err.msg);
    j->n_prompt = (int)n;
    for (int k = 0; k < n_stop; k++)
        if (!(j->stop[j->n_stop++] = strdup((stop_list ? cJSON_GetArrayItem(stop, k)
                                                      : stop)->valuestring)))
            return job_free(j), send_error(c, cn, 500, "out of memory");
    j->gen = (qkv_lm_generation){max_tokens, {temperature, top_k, top_p}, (uint64_t)seed, NULL,
                                 NULL, 1};
    j->streaming = cJSON_IsTrue(stream_flag);
    if (max_tokens == 0) j->done = 1, j->refs = 1;
    else if (enqueue(s, j))
        return job_free(j), send_error(c, cn, 503, "the queue is full (%d requests): retry "
                                       "later", s->max_queue);
    cn->j = j;
    char id[32];
    pthread_mutex_lock(&s->lock);
    snprintf(id, sizeof id, "cmpl-%lu", ++s->next_id);
    pthread_mutex_unlock(&s->lock);
    if (cJSON_IsTrue(stream_flag)) {
        stream *st = calloc(1, sizeof *st);
        if (!st) {
            pthread_mutex_lock(&s->lock);
            j->cancelled = 1, release(s, j), cn->j = NULL;
            pthread_mutex_unlock(&s->lock);
            return send_error(c, cn, 500, "out of memory");
        }
        st->s = s, st->j = j, st->fd = cn->fd, st->start = cn->start;
        cn->j = NULL;
        snprintf(st->id, sizeof st->id, "%s", id);
        struct MHD_Response *r =
            MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, st, stream_free);
        if (!r) return stream_free(st), MHD_NO;
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
        MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        MHD_add_response_header(r, "X-Accel-Buffering", "no"); /* nginx: pass events on */
        enum MHD_Result ok = MHD_queue_response(c, MHD_HTTP_OK, r);
        MHD_destroy_response(r);
        cn->code = 200;
        return ok;
    }
    pthread_mutex_lock(&s->lock);
    int w = wait_for(s, j, cn->fd, cn->start, is_done, NULL);
    cJSON *o = !w && !j->status ? completion_json(s, id, j->out, j->stop_hit ? "stop" : "length",
                                                  j, 1)
                                : NULL;
    const int status = j->status;
    snprintf(msg, sizeof msg, "%s", j->error);
    release(s, j);
    cn->j = NULL;
    pthread_mutex_unlock(&s->lock);
    if (w == 499) return MHD_NO;
    if (w == 504) return send_error(c, cn, 504, "the completion took longer than %d s",
                                    s->timeout_s);
    if (status) return send_error(c, cn, status, "%s", msg);
    return send_json(c, cn, 200, o);
}

/* ---- GET endpoints -------------------------------------------------------------------- */

static enum MHD_Result get_metrics(server *s, struct MHD_Connection *c, conn *cn)
{
    size_t cap = 8192, n = 0;
    char *t = malloc(cap);
    if (!t) return MHD_NO;
#define OUT(...) (n += (size_t)snprintf(t + n, n < cap ? cap - n : 0, __VA_ARGS__))
    pthread_mutex_lock(&s->lock);
    OUT("# HELP qkv_requests_total Requests answered, by HTTP status.\n"
        "# TYPE qkv_requests_total counter\n");
    for (int k = 0; k <= N_CODES; k++)
        if (k < N_CODES) OUT("qkv_requests_total{code=\"%d\"} %llu\n", CODES[k], s->by_code[k]);
        else OUT("qkv_requests_total{code=\"other\"} %llu\n", s->by_code[k]);
    OUT("# HELP qkv_tokens_generated_total Tokens produced (translations and completions).\n"
        "# TYPE qkv_tokens_generated_total counter\nqkv_tokens_generated_total %llu\n", s->tokens);
    OUT("# HELP qkv_queue_length Requests waiting to join the batch.\n"
        "# TYPE qkv_queue_length gauge\nqkv_queue_length %d\n", s->queued);
    OUT("# HELP qkv_requests_in_flight Requests being answered.\n"
        "# TYPE qkv_requests_in_flight gauge\nqkv_requests_in_flight %d\n", s->in_flight);
    OUT("# HELP qkv_batch_size Sentences decoded together per decoder step.\n"
        "# TYPE qkv_batch_size summary\nqkv_batch_size_sum %llu\nqkv_batch_size_count %llu\n",
        s->batch_rows, s->steps);
    OUT("# HELP qkv_batch_slots Slots of the running batch (--max-batch-tokens).\n"
        "# TYPE qkv_batch_slots gauge\nqkv_batch_slots %d\n", s->slots);
    OUT("# HELP qkv_request_duration_seconds Time from request to answer.\n"
        "# TYPE qkv_request_duration_seconds histogram\n");
    unsigned long long cum = 0;
    for (int b = 0; b < N_BUCKETS; b++) {
        cum += s->latency[b];
        OUT("qkv_request_duration_seconds_bucket{le=\"%g\"} %llu\n", BUCKETS[b], cum);
    }
    OUT("qkv_request_duration_seconds_bucket{le=\"+Inf\"} %llu\n"
        "qkv_request_duration_seconds_sum %.6f\nqkv_request_duration_seconds_count %llu\n",
        s->latency_count, s->latency_sum, s->latency_count);
    pthread_mutex_unlock(&s->lock);
#undef OUT
    if (n >= cap) n = cap - 1;
    t[n] = '\0';
    return send_text(c, cn, 200, t, "text/plain; version=0.0.4", 0);
}

static enum MHD_Result get_models(server *s, struct MHD_Connection *c, conn *cn)
{
    cJSON *o = cJSON_CreateObject(), *data = cJSON_CreateArray(), *m = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON_AddStringToObject(m, "id", s->model_id);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddStringToObject(m, "owned_by", "qkv");
    cJSON_AddStringToObject(m, "kind", s->tr ? "translation" : "language-model");
    cJSON_AddItemToArray(data, m);
    cJSON_AddItemToObject(o, "data", data);
    return send_json(c, cn, 200, o);
}

/* ---- dispatch ------------------------------------------------------------------------- */

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    (void)version;
    server *s = cls;
    conn *cn = *con_cls;
    if (!cn) { /* the headers: the body, if any, comes in the next calls */
        if (!(cn = calloc(1, sizeof *cn))) return MHD_NO;
        cn->start = now_s(), cn->fd = -1, cn->code = 500;
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (ci) cn->fd = ci->connect_fd;
        *con_cls = cn;
        pthread_mutex_lock(&s->lock);
        s->in_flight++;
        pthread_mutex_unlock(&s->lock);
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > MAX_BODY)
            return send_error(c, cn, 413, "the body has %s bytes: at most %d", cl, MAX_BODY);
        return MHD_YES;
    }
    if (*upload_data_size) { /* a piece of the body */
        if (cn->len + *upload_data_size > MAX_BODY) {
            cn->too_large = 1;
        } else if (!cn->too_large) {
            char *grown = realloc(cn->body, cn->len + *upload_data_size + 1);
            if (!grown) return MHD_NO;
            cn->body = grown;
            memcpy(cn->body + cn->len, upload_data, *upload_data_size);
            cn->len += *upload_data_size, cn->body[cn->len] = '\0';
        }
        *upload_data_size = 0;
        return MHD_YES;
    }
    const int get = !strcmp(method, "GET") || !strcmp(method, "HEAD"),
              post = !strcmp(method, "POST");
    pthread_mutex_lock(&s->lock);
    const int draining = s->draining;
    pthread_mutex_unlock(&s->lock);
    if (!strcmp(url, "/health")) {
        if (!get) return send_error(c, cn, 405, "%s /health: use GET", method);
        if (draining) return send_error(c, cn, 503, "stopping");
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "status", "ok");
        cJSON_AddStringToObject(o, "model", s->model_id);
        cJSON_AddStringToObject(o, "kind", s->tr ? "translation" : "language-model");
        return send_json(c, cn, 200, o);
    }
    if (!strcmp(url, "/metrics")) {
        if (!get) return send_error(c, cn, 405, "%s /metrics: use GET", method);
        return get_metrics(s, c, cn);
    }
    if (!strcmp(url, "/v1/models")) {
        if (!get) return send_error(c, cn, 405, "%s /v1/models: use GET", method);
        return get_models(s, c, cn);
    }
    const int translate = !strcmp(url, "/translate"), complete = !strcmp(url, "/v1/completions");
    if (!translate && !complete) return send_error(c, cn, 404, "no endpoint %s", url);
    if (!post) return send_error(c, cn, 405, "%s %s: use POST", method, url);
    if (cn->too_large)
        return send_error(c, cn, 413, "the body is larger than %d bytes", MAX_BODY);
    if (draining) return send_error(c, cn, 503, "the server is stopping");
    if (!cn->body || !cn->len) return send_error(c, cn, 400, "the body is empty: send JSON");
    if (!utf8_valid((const unsigned char *)cn->body, cn->len))
        return send_error(c, cn, 400, "the body is not valid UTF-8");
    const char *end = NULL;
    cJSON *req = cJSON_ParseWithLengthOpts(cn->body, cn->len, &end, 0);
    if (!req) {
        const size_t at = end ? (size_t)(end - cn->body) : 0;
        return send_error(c, cn, 400, "malformed JSON at byte %zu", at);
    }
    if (!cJSON_IsObject(req)) {
        cJSON_Delete(req);
        return send_error(c, cn, 400, "the body must be a JSON object");
    }
    enum MHD_Result r = translate ? post_translate(s, c, cn, req) : post_completions(s, c, cn, req);
    cJSON_Delete(req);
    return r;
}

/* After the answer went out (or the connection failed): the metrics, and the request's end. */
static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)c;
    server *s = cls;
    conn *cn = *con_cls;
    if (!cn) return;
    pthread_mutex_lock(&s->lock);
    count_code(s, toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? cn->code : 0,
               now_s() - cn->start);
    s->in_flight--;
    pthread_cond_broadcast(&s->news);
    pthread_mutex_unlock(&s->lock);
    free(cn->body);
    free(cn);
    *con_cls = NULL;
}

/* ---- qkv serve ------------------------------------------------------------------------ */

/* The model directory: a language model when it holds vocab.txt (qkv train-lm), else a
 * translation model. 0, or the exit status. */
static int open_model(server *s)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/vocab.txt", s->model_dir);
    struct stat sb;
    qkv_error err = {0};
    if (!stat(path, &sb)) {
        if (lm_dir_load(&s->lm, s->model_dir, &s->precision)) return 1;
        s->lm_job = calloc((size_t)s->slots, sizeof *s->lm_job);
        s->drawn = calloc((size_t)s->slots, sizeof *s->drawn);
        if (!s->lm_job || !s->drawn) {
            fprintf(stderr, "qkv serve: out of memory\n");
            return 1;
        }
        if (qkv_lm_batch_create(&s->lb, s->lm.model, s->slots, &err)) {
            fprintf(stderr, "qkv serve: %s\n", err.msg);
            return 1;
        }
        return 0;
    }
    if (qkv_translator_open(&s->tr, s->model_dir, &err) ||
        qkv_transformer_set_precision(qkv_translator_model(s->tr), s->precision, &err) ||
        qkv_batch_decoder_create(&s->bd, s->tr, s->slots, &err)) {
        fprintf(stderr, "qkv serve: %s\n", err.msg);
        return 1;
    }
    return 0;
}

/* The daemon on host:port (port 0: a free one, *bound receives it). */
static struct MHD_Daemon *start_http(server *s, int *bound)
{
    struct addrinfo hints = {0}, *ai = NULL;
    char port[16];
    hints.ai_family = AF_UNSPEC, hints.ai_socktype = SOCK_STREAM, hints.ai_flags = AI_PASSIVE;
    snprintf(port, sizeof port, "%d", s->port);
    int rc = getaddrinfo(s->host, port, &hints, &ai);
    if (rc) {
        fprintf(stderr, "qkv serve: --host %s: %s\n", s->host, gai_strerror(rc));
        return NULL;
    }
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                     MHD_USE_ITC | MHD_USE_ERROR_LOG | MHD_USE_POLL;
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    /* connections beyond what the queue and the batch can hold are refused outright */
    const unsigned limit = (unsigned)(s->max_queue + s->slots + 64);
    struct MHD_Daemon *d = MHD_start_daemon(
        flags, 0, NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_CONNECTION_LIMIT, limit,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)(s->timeout_s > 0 ? s->timeout_s + 5 : 0),
        MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024u, MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!d) {
        fprintf(stderr, "qkv serve: cannot listen on %s:%d: %s\n", s->host, s->port,
                strerror(errno));
        return NULL;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    *bound = di ? di->port : s->port;
    return d;
}

int cmd_serve(int argc, char **argv)
{
    server s = {0};
    int threads = 0, slots = 64, max_queue = 256, timeout = 60, port = 8080, delay_ms = 0;
    const char *host = "127.0.0.1", *model = NULL, *precision = "fp32";
    const opt_spec opts[] = {
        {"model", OPT_STRING, &model, "model directory: translation (qkv train) or language "
                                      "model (qkv train-lm)", NULL},
        {"host", OPT_STRING, &host, "address to listen on", NULL},
        {"port", OPT_INT, &port, "port (0: a free one, printed)", "[0, 65535]"},
        {"threads", OPT_INT, &threads, "decoding threads (0: all cores)", ARG_THREADS},
        {"max-batch-tokens", OPT_INT, &slots, "tokens decoded per step: sentences in the "
                                              "running batch", "[1, 4096]"},
        {"max-batch-delay", OPT_INT, &delay_ms, "milliseconds an idle server waits for more "
                                                "requests to start a batch with (0: none)",
         "[0, 60000]"},
        {"max-queue", OPT_INT, &max_queue, "requests waiting beyond the batch (more: 503)",
         "[1, 1000000]"},
        {"timeout", OPT_INT, &timeout, "seconds a request may take (more: 504; 0: none)",
         "[0, 86400]"},
        {"precision", OPT_STRING, &precision, CLI_PRECISION_HELP, NULL},
        {NULL, 0, NULL, NULL, NULL},
    };
    int rc = args_parse(argc, argv, 2, opts,
                        "usage: qkv serve --model DIR [--host 127.0.0.1] [--port 8080] "
                        "[--threads N] [--max-batch-tokens N] [--max-batch-delay MS] "
                        "[--max-queue N] [--timeout S] "
                        "[--precision fp32|bf16|int8]\n"
                        "POST /translate, POST /v1/completions, GET /health /v1/models /metrics");
    if (rc) return rc > 0 ? 0 : 2;
    if (!model) {
        fprintf(stderr, "qkv serve: needs --model DIR\n");
        return 2;
    }
    if (cli_precision(precision, &s.precision)) return 2;
    if (timeout > 0 && delay_ms >= 1000 * timeout) {
        fprintf(stderr, "qkv serve: --max-batch-delay %d ms is not below --timeout %d s: requests "
                "would time out waiting for company\n", delay_ms, timeout);
        return 2;
    }
    /* SIGTERM and SIGINT are taken by sigwait below: blocked in every thread, which inherit
     * the mask (the decoder, the HTTP threads, OpenMP's) */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM), sigaddset(&stop, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    signal(SIGPIPE, SIG_IGN); /* a client gone mid-answer is an error to handle, not a death */
    s.model_dir = model, s.host = host, s.port = port, s.slots = slots;
    s.max_queue = max_queue, s.timeout_s = timeout, s.max_delay_s = 1e-3 * delay_ms;
    const char *base = strrchr(model, '/');
    s.model_id = base && base[1] ? base + 1 : model;
    cli_threads(threads);
    if ((rc = open_model(&s))) goto free_model;
    pthread_mutex_init(&s.lock, NULL);
    pthread_cond_init(&s.work, NULL), pthread_cond_init(&s.news, NULL);
    pthread_t decoder;
    if (pthread_create(&decoder, NULL, decoder_main, &s)) {
        fprintf(stderr, "qkv serve: cannot start the decoding thread\n");
        rc = 1;
        goto free_model;
    }
    int bound = 0;
    s.daemon = start_http(&s, &bound);
    if (!s.daemon) {
        rc = 1;
    } else {
        printf("qkv serve: %s model %s on http://%s%s%s:%d\n", s.tr ? "translation" : "language",
               model, strchr(host, ':') ? "[" : "", host, strchr(host, ':') ? "]" : "", bound);
        fflush(stdout);
        int sig = 0;
        sigwait(&stop, &sig);
        fprintf(stderr, "qkv serve: %s: finishing the requests in flight\n",
                sig == SIGTERM ? "SIGTERM" : "SIGINT");
        /* stop accepting; then wait until every request in flight has been answered */
        pthread_mutex_lock(&s.lock);
        s.draining = 1;
        pthread_cond_signal(&s.work); /* a batch being waited for starts now */
        pthread_mutex_unlock(&s.lock);
        const MHD_socket listener = MHD_quiesce_daemon(s.daemon);
        /* a client that stalls mid-request is not waited for beyond the timeout (which also
         * ends it through MHD's connection timeout), or 60 s without one */
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += timeout > 0 ? timeout + 10 : 60;
        pthread_mutex_lock(&s.lock);
        while (s.in_flight > 0)
            if (pthread_cond_timedwait(&s.news, &s.lock, &until) == ETIMEDOUT) {
                fprintf(stderr, "qkv serve: %d requests still open: closing them\n",
                        s.in_flight);
                break;
            }
        pthread_mutex_unlock(&s.lock);
        MHD_stop_daemon(s.daemon);
        if (listener != MHD_INVALID_SOCKET) close(listener);
        rc = 0;
    }
    pthread_mutex_lock(&s.lock);
    s.stop_decoder = 1;
    pthread_cond_signal(&s.work);
    pthread_mutex_unlock(&s.lock);
    pthread_join(decoder, NULL);
    pthread_mutex_destroy(&s.lock);
    pthread_cond_destroy(&s.work), pthread_cond_destroy(&s.news);
free_model:
    qkv_batch_decoder_free(s.bd);
    qkv_lm_batch_free(s.lb);
    free(s.lm_job), free(s.drawn);
    qkv_translator_free(s.tr);
    if (s.lm.model) lm_dir_free(&s.lm);
    if (!rc) fprintf(stderr, "qkv serve: stopped\n");
    return rc;
}
