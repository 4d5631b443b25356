/* SPDX-License-Identifier: MIT */
/* qkv serve's parts: the request and the server they share, and the seams between
 *   cmd_serve.c       the command: options, the model, start-up and shutdown on SIGTERM
 *   serve_decoder.c   the decoding thread: the queue, continuous batching, whole beam searches
 *   serve_http.c      HTTP: bodies, errors, queueing and waiting, dispatch by endpoint
 *   serve_api.c       the API shapes: POST /translate (LibreTranslate's), POST /v1/completions
 *                     (OpenAI's, streamed as server-sent events), GET /health, /v1/models
 *   serve_metrics.c   GET /metrics (Prometheus text) and what it counts
 * The handlers (libmicrohttpd's threads, one per connection) and the decoding thread meet
 * under server.lock: a handler puts a job in the queue and waits on the job's condition; the
 * decoder takes it from there and broadcasts when the job changes. */
#ifndef QKV_CLI_SERVE_H
#define QKV_CLI_SERVE_H

#include <pthread.h>
#include <stddef.h>

#include <cJSON.h>
#include <microhttpd.h>

#include "cli/common.h"

enum {
    MAX_BODY = 1 << 20,     /* bytes of a request body (more: 413) */
    MAX_SOURCES = 128,      /* q items of one request (more: 413) */
    MAX_SOURCE_BYTES = 16384, /* bytes of one q item (more: 413) */
    MAX_COMPLETION = 4096,  /* max_tokens (more: 400) */
    MAX_STOPS = 4,          /* stop strings, as OpenAI's */
    MAX_BEAM = 16,
    N_BUCKETS = 12,         /* the latency histogram's buckets (serve_metrics.c) */
    N_CODES = 8,            /* the HTTP statuses counted one by one (serve_metrics.c) */
};

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
    double queued_at;       /* serve_now() when it entered the queue */
    pthread_cond_t changed; /* its handler waits on it: done, or a completion's new text */
} job;

/* A zeroed request with its condition (NULL: out of memory). */
job *job_new(void);
void job_free(job *j);
/* Marks j done with an HTTP status and a message. */
void job_fail(job *j, int status, const char *msg);

/* ---- the server ----------------------------------------------------------------------- */

typedef struct {
    const char *model_dir, *host, *model_id;
    int port, slots, max_queue, timeout_s;
    double max_delay_s;     /* --max-batch-delay: an idle decoder waits this long for company */
    qkv_precision precision; /* --precision: how the model's linear layers multiply */
    qkv_device device;       /* --device: where it computes */
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
    /* metrics, under lock (serve_metrics.c) */
    unsigned long long by_code[N_CODES + 1], tokens, steps, batch_rows, joined;
    unsigned long long latency[N_BUCKETS + 1], latency_count;
    double latency_sum;
    unsigned long next_id;
    struct MHD_Daemon *daemon;
} server;

/* CLOCK_MONOTONIC in seconds. */
double serve_now(void);

/* Drops one reference to j (the last one frees it). Under lock. */
void serve_release(server *s, job *j);

/* The decoding thread's body (arg: the server); returns once stop_decoder is set and nothing
 * is left to decode. */
void *serve_decoder_main(void *arg);

/* ---- HTTP ----------------------------------------------------------------------------- */

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

/* The daemon on s->host:s->port (port 0: a free one, *bound receives it); NULL after a
 * message. */
struct MHD_Daemon *serve_http_start(server *s, int *bound);

/* Answers: text (taken over, freed by the response) with its content type, a JSON object
 * (deleted), or {"error": message} (with Retry-After on 503). */
enum MHD_Result serve_send_text(struct MHD_Connection *c, conn *cn, int code, char *text,
                                const char *type, int retry_after);
enum MHD_Result serve_send_json(struct MHD_Connection *c, conn *cn, int code, cJSON *o);
enum MHD_Result serve_send_error(struct MHD_Connection *c, conn *cn, int code, const char *fmt,
                                 ...) __attribute__((format(printf, 4, 5)));

/* An optional integer (float) member in [lo, hi]: 0 and *v untouched when absent, -1 (with
 * msg) when of another type or out of range. */
int serve_get_int(const cJSON *o, const char *key, int lo, int hi, int *v, char *msg,
                  size_t cap);
int serve_get_float(const cJSON *o, const char *key, double lo, double hi, float *v, char *msg,
                    size_t cap);

/* Puts j in the queue (the handler keeps one reference, the queue the other); 0, or 503 when
 * the queue is full or the server is stopping. */
int serve_enqueue(server *s, job *j);

/* Waits, under lock, until ready(j, arg) or the request ends: 0, 504 past the timeout, 499
 * when the client went away (then the request is cancelled). */
int serve_wait_for(server *s, job *j, int fd, double start,
                   int (*ready)(const job *, const void *), const void *arg);
/* ready: the job is done. */
int serve_job_done(const job *j, const void *arg);

/* ---- the endpoints (serve_api.c, serve_metrics.c) --------------------------------------- */

enum MHD_Result serve_post_translate(server *s, struct MHD_Connection *c, conn *cn,
                                     const cJSON *req);
enum MHD_Result serve_post_completions(server *s, struct MHD_Connection *c, conn *cn,
                                       const cJSON *req);
enum MHD_Result serve_get_health(server *s, struct MHD_Connection *c, conn *cn, int draining);
enum MHD_Result serve_get_models(server *s, struct MHD_Connection *c, conn *cn);
enum MHD_Result serve_get_metrics(server *s, struct MHD_Connection *c, conn *cn);

/* Counts an answer: its status (0: the connection failed) and its time. Under lock. */
void serve_count(server *s, int code, double seconds);

#endif
