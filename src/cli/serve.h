/* SPDX-License-Identifier: MIT */
/* qkv serve's parts: the request and the server they share, and the seams between
 *   cmd_serve.c       the command: options, the models, start-up and shutdown on SIGTERM
 *   serve_decoder.c   the decoding threads: the queues, continuous batching (greedy, beam
 *                     search, sampling)
 *   serve_http.c      HTTP: bodies, errors, queueing and waiting, dispatch by endpoint
 *   serve_libre.c     LibreTranslate's API: POST /translate (JSON or form bodies, lines,
 *                     HTML), GET/POST /languages, /detect, /frontend/settings, API keys
 *   serve_api.c       OpenAI's: POST /v1/completions (streamed as server-sent events), GET
 *                     /health, /v1/models
 *   serve_metrics.c   GET /metrics (Prometheus text) and what it counts
 * The handlers (libmicrohttpd's threads, one per connection) and the decoding threads meet
 * under server.lock: a handler puts a job in its model's queue and waits on the job's
 * condition; a decoder takes it from there and broadcasts when the job changes. */
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
    MAX_LINES = 1024,       /* lines (or HTML text nodes) of one request, all items (more: 413) */
    MAX_MODELS = 64,        /* --model given this often at most */
    MAX_COMPLETION = 4096,  /* max_tokens (more: 400) */
    MAX_STOPS = 4,          /* stop strings, as OpenAI's */
    MAX_BEAM = 16,
    N_BUCKETS = 12,         /* the latency histogram's buckets (serve_metrics.c) */
    N_CODES = 8,            /* the HTTP statuses counted one by one (serve_metrics.c) */
};

/* ---- requests ------------------------------------------------------------------------- */

typedef enum { JOB_TRANSLATE, JOB_COMPLETE } job_kind;

struct served_model;

typedef struct job {
    job_kind kind;
    struct served_model *m; /* the model that serves it */
    char *src_lang, *tgt_lang; /* a multilingual model's languages for it (NULL: the model's) */
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
    int *cut;               /* (n) whether source i was longer than the model's max_len, and
                             * cut to it (as the CLI cuts it, and warns) */
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

/* A connection whose request headers have not all come (serve_http.c): cut once they take
 * longer than --header-timeout. */
typedef struct pending {
    int fd;
    double since;           /* serve_now() when it began waiting for headers */
    int watched;            /* in the server's list */
    struct pending *prev, *next;
} pending;

/* A model the server holds, with its own running batch and queue. */
typedef struct served_model {
    char name[256];         /* its id: NAME of --model NAME=DIR, else the directory's name */
    const char *dir;
    char source[32], target[32]; /* the languages of a NAME "src-tgt" ("" when not a pair) */
    const char *languages;  /* a multilingual model's codes ("code\0token\0" pairs), or NULL */
    qkv_translator *tr;     /* one of the two */
    lm_dir lm;
    qkv_batch_decoder *bd;  /* a translation model's running batch */
    qkv_lm_batch *lb;       /* a language model's */
    job **lm_job;           /* (slots) the completion in each of lb's slots */
    int *drawn;             /* (slots) one step's tokens */
    job *queue, *queue_tail, *running; /* waiting to join; joined (translation) */
    int queued;
    int thread;             /* the decoding thread that serves it */
} served_model;

typedef struct {
    const char *host;
    int port, slots, max_queue, timeout_s;
    int header_timeout_s;   /* --header-timeout: seconds a request's headers may take */
    int per_address;        /* --max-per-address: connections one client address may hold */
    double max_delay_s;     /* --max-batch-delay: an idle decoder waits this long for company */
    qkv_precision precision; /* --precision: how the models' linear layers multiply */
    int precision_given;     /* else each model's own (int8 for an int8 model file) */
    qkv_device device;       /* --device: where they compute */
    served_model *models;   /* (n_models) in the order given */
    int n_models;
    int per_model_threads;  /* --scheduler per-model: a decoding thread per model */
    int prefill_chunk;      /* --prefill-chunk: prompt tokens a step takes from a long prompt */
    int n_threads;          /* decoding threads */
    void *decoders;         /* (n_threads) serve_decoder.c's */
    struct api_keys *keys;  /* --api-keys: NULL when any client may call */
    pthread_mutex_t lock;
    pthread_cond_t work;    /* the decoders wait for requests (broadcast: each looks at its own) */
    pthread_cond_t news;    /* a request ended (shutdown waits for in_flight to reach 0) */
    int queued, in_flight, draining, stop_decoder; /* queued: in every model's queue */
    /* metrics, under lock (serve_metrics.c) */
    unsigned long long by_code[N_CODES + 1], tokens, steps, batch_rows, joined;
    unsigned long long latency[N_BUCKETS + 1], latency_count;
    double latency_sum;
    unsigned long next_id, headers_cut;
    struct MHD_Daemon *daemon;
    pending *waiting_headers; /* under lock; the watch thread cuts the slow ones */
    pthread_t watch;
    pthread_cond_t watch_wake;
    int watching, stop_watch;
} server;

/* CLOCK_MONOTONIC in seconds. */
double serve_now(void);

/* Drops one reference to j (the last one frees it). Under lock. */
void serve_release(server *s, job *j);

/* Starts the decoding threads (one for every model, or one for all); 0, or -1 after a
 * message. serve_decoders_stop sets stop_decoder and joins them once nothing is left. */
int serve_decoders_start(server *s);
void serve_decoders_stop(server *s);

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
    int openai;           /* a /v1/ path: errors in OpenAI's shape */
} conn;

/* The daemon on s->host:s->port (port 0: a free one, *bound receives it), and the thread that
 * cuts connections whose headers take longer than s->header_timeout_s; NULL after a message.
 * s->lock must be initialised. serve_http_stop stops both. */
struct MHD_Daemon *serve_http_start(server *s, int *bound);
void serve_http_stop(server *s);

/* Whether s[0..n) is well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates, at most
 * U+10FFFF). */
int serve_utf8_valid(const unsigned char *s, size_t n);

/* Answers: text (taken over, freed by the response) with its content type, a JSON object
 * (deleted), or {"error": message} (with Retry-After on 503). */
enum MHD_Result serve_send_text(struct MHD_Connection *c, conn *cn, int code, char *text,
                                const char *type, int retry_after);
enum MHD_Result serve_send_json(struct MHD_Connection *c, conn *cn, int code, cJSON *o);
enum MHD_Result serve_send_error(struct MHD_Connection *c, conn *cn, int code, const char *fmt,
                                 ...) __attribute__((format(printf, 4, 5)));

/* code, with msg (cap bytes) formatted: a request refused, its status and why. */
int serve_refuse(char *msg, size_t cap, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* An optional integer (float) member in [lo, hi]: 0 and *v untouched when absent, -1 (with
 * msg) when of another type or out of range. */
int serve_get_int(const cJSON *o, const char *key, int lo, int hi, int *v, char *msg,
                  size_t cap);
int serve_get_float(const cJSON *o, const char *key, double lo, double hi, float *v, char *msg,
                    size_t cap);

/* Puts j in its model's queue (the handler keeps one reference, the queue the other); 0, or
 * 503 when the queues are full (--max-queue requests in all) or the server is stopping. */
int serve_enqueue(server *s, job *j);

/* Waits, under lock, until ready(j, arg) or the request ends: 0, 504 past the timeout, 499
 * when the client went away (then the request is cancelled). */
int serve_wait_for(server *s, job *j, int fd, double start,
                   int (*ready)(const job *, const void *), const void *arg);
/* ready: the job is done. */
int serve_job_done(const job *j, const void *arg);

/* ---- the endpoints (serve_libre.c, serve_api.c, serve_metrics.c) ------------------------ */

/* The answer of a request, shaped from its finished job (under lock). */
typedef cJSON *(*answer_shape)(const server *s, const job *j, const void *arg);
/* Waits for j (in the queue, or done already) and answers: the shape of its result, its
 * failure, 504 past the timeout, nothing when the client went away. what: "translation" or
 * "completion", for the timeout's message. */
enum MHD_Result serve_wait_and_answer(server *s, struct MHD_Connection *c, conn *cn, job *j,
                                      const char *what, answer_shape shape, const void *arg);

/* The model of the given id (NULL: the only one of its kind, when there is one), or NULL. */
served_model *serve_model_named(server *s, const char *id, int translation);

/* POST /translate and the rest of LibreTranslate's API: req is the body as a JSON object
 * (a form body's fields as strings). */
enum MHD_Result serve_post_translate(server *s, struct MHD_Connection *c, conn *cn,
                                     const cJSON *req);
enum MHD_Result serve_languages(server *s, struct MHD_Connection *c, conn *cn);
enum MHD_Result serve_detect(server *s, struct MHD_Connection *c, conn *cn, const cJSON *req);
enum MHD_Result serve_frontend_settings(server *s, struct MHD_Connection *c, conn *cn);
/* --api-keys FILE: each line "KEY" or "KEY LIMIT" (requests a minute; 0: no limit). NULL
 * after a message. */
struct api_keys *serve_keys_load(const char *path);
void serve_keys_free(struct api_keys *k);
/* Whether req's "api_key" may call now (counted when it may): 0, or 403 / 429 with msg. */
int serve_key_check(server *s, const cJSON *req, char *msg, size_t cap);
/* A form body (application/x-www-form-urlencoded) as a JSON object of strings; NULL with
 * msg when it is not one. */
cJSON *serve_form_parse(const char *body, size_t len, char *msg, size_t cap);

enum MHD_Result serve_post_completions(server *s, struct MHD_Connection *c, conn *cn,
                                       const cJSON *req);
enum MHD_Result serve_get_health(server *s, struct MHD_Connection *c, conn *cn, int draining);
enum MHD_Result serve_get_models(server *s, struct MHD_Connection *c, conn *cn);
enum MHD_Result serve_get_metrics(server *s, struct MHD_Connection *c, conn *cn);

/* Counts an answer: its status (0: the connection failed) and its time. Under lock. */
void serve_count(server *s, int code, double seconds);

#endif
