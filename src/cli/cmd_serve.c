/* SPDX-License-Identifier: MIT */
/* qkv serve: a model directory behind HTTP (libmicrohttpd, one thread per connection).
 *   POST /translate        LibreTranslate's shape: {"q": "text" | [...]} -> {"translatedText"}
 *   POST /v1/completions   OpenAI's, for a language model; "stream": true as server-sent events
 *   GET  /health, /v1/models, /metrics (Prometheus text)
 * One decoding thread owns the model (serve_decoder.c). Requests wait in a bounded queue (full:
 * 503 with Retry-After); greedy translations and completions join the running batch at the next
 * step and leave it when they end (continuous batching). This file: the options, the model,
 * start-up, and the end: SIGTERM or SIGINT (taken by sigwait in the main thread, no handler, no
 * global state) stops accepting, finishes what is in flight, and exits 0. The parts and how
 * they meet: serve.h. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/serve.h"

/* The model directory: a language model when it holds vocab.txt (qkv train-lm), else a
 * translation model. 0, or the exit status. */
static int open_model(server *s)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/vocab.txt", s->model_dir);
    struct stat sb;
    qkv_error err = {0};
    if (!stat(path, &sb)) {
        if (lm_dir_load(&s->lm, s->model_dir, &s->precision, s->device)) return 1;
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
        qkv_transformer_set_device(qkv_translator_model(s->tr), s->device, &err) ||
        qkv_transformer_set_precision(qkv_translator_model(s->tr), s->precision, &err) ||
        qkv_batch_decoder_create(&s->bd, s->tr, s->slots, &err)) {
        fprintf(stderr, "qkv serve: %s\n", err.msg);
        return 1;
    }
    return 0;
}
/* Serves until SIGTERM or SIGINT (in stop), then stops accepting and waits until every
 * request in flight has been answered. 0, or 1 when the server could not start. */
static int serve_until_stopped(server *s, const sigset_t *stop)
{
    int bound = 0;
    s->daemon = serve_http_start(s, &bound);
    if (!s->daemon) return 1;
    const char *host = s->host;
    printf("qkv serve: %s model %s on http://%s%s%s:%d\n", s->tr ? "translation" : "language",
           s->model_dir, strchr(host, ':') ? "[" : "", host, strchr(host, ':') ? "]" : "", bound);
    fflush(stdout);
    int sig = 0;
    sigwait(stop, &sig);
    fprintf(stderr, "qkv serve: %s: finishing the requests in flight\n",
            sig == SIGTERM ? "SIGTERM" : "SIGINT");
    pthread_mutex_lock(&s->lock);
    s->draining = 1;
    pthread_cond_signal(&s->work); /* a batch being waited for starts now */
    pthread_mutex_unlock(&s->lock);
    const MHD_socket listener = MHD_quiesce_daemon(s->daemon);
    /* a client that stalls mid-request is not waited for beyond the timeout (which also
     * ends it through MHD's connection timeout), or 60 s without one */
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += s->timeout_s > 0 ? s->timeout_s + 10 : 60;
    pthread_mutex_lock(&s->lock);
    while (s->in_flight > 0)
        if (pthread_cond_timedwait(&s->news, &s->lock, &until) == ETIMEDOUT) {
            fprintf(stderr, "qkv serve: %d requests still open: closing them\n", s->in_flight);
            break;
        }
    pthread_mutex_unlock(&s->lock);
    MHD_stop_daemon(s->daemon);
    if (listener != MHD_INVALID_SOCKET) close(listener);
    return 0;
}

/* The options into s; 0, 1 after --help, or the exit status 2. */
static int serve_options(server *s, int argc, char **argv, int *threads)
{
    int slots = 64, max_queue = 256, timeout = 60, port = 8080, delay_ms = 0;
    const char *host = "127.0.0.1", *model = NULL;
    opt_choice precision = {QKV_ENUM_PRECISION, NULL, QKV_PRECISION_FP32},
               device = {QKV_ENUM_DEVICE, NULL, QKV_DEVICE_CPU};
    const opt_spec opts[] = {
        {"model", OPT_DIR, &model, "model directory: translation (qkv train) or language "
                                   "model (qkv train-lm)", NULL, NULL},
        {"m", OPT_ALIAS, "model", NULL, NULL, NULL},
        {"host", OPT_STRING, &host, "address to listen on", NULL, NULL},
        {"port", OPT_INT, &port, "port (0: a free one, printed)", "[0, 65535]", NULL},
        {"threads", OPT_INT, threads, "decoding threads (0: all cores)", ARG_THREADS, NULL},
        {"t", OPT_ALIAS, "threads", NULL, NULL, NULL},
        {"max-batch-size", OPT_INT, &slots, "sentences (or completions) decoded together: the "
                                            "running batch's slots", "[1, 4096]", NULL},
        {"max-batch-tokens", OPT_ALIAS, "max-batch-size", "its older name", NULL, NULL},
        {"max-batch-delay", OPT_INT, &delay_ms, "milliseconds an idle server waits for more "
                                                "requests to start a batch with (0: none)",
         "[0, 60000]", NULL},
        {"max-queue", OPT_INT, &max_queue, "requests waiting beyond the batch (more: 503)",
         "[1, 1000000]", NULL},
        {"timeout", OPT_INT, &timeout, "seconds a request may take (more: 504; 0: none)",
         "[0, 86400]", NULL},
        {"precision", OPT_CHOICE, &precision, CLI_PRECISION_HELP, NULL, NULL},
        {"device", OPT_CHOICE, &device, CLI_DEVICE_HELP, NULL, NULL},
        {0},
    };
    int rc = args_parse(argc, argv, 2, opts,
                        "usage: qkv serve --model DIR [--host TEXT] [--port N] [--threads N] "
                        "[--max-batch-size N] [--max-batch-delay N] [--max-queue N] "
                        "[--timeout N] [--precision fp32|bf16|int8] [--device cpu|cuda]\n"
                        "Serves a model over HTTP: POST /translate, POST /v1/completions, "
                        "GET /health /v1/models /metrics.");
    if (rc) return rc > 0 ? 1 : 2;
    if (!model) {
        fprintf(stderr, "qkv serve: needs --model DIR\n");
        return 2;
    }
    s->precision = (qkv_precision)precision.value, s->device = (qkv_device)device.value;
    if (timeout > 0 && delay_ms >= 1000 * timeout) {
        fprintf(stderr, "qkv serve: --max-batch-delay %d ms is not below --timeout %d s: requests "
                "would time out waiting for company\n", delay_ms, timeout);
        return 2;
    }
    s->model_dir = model, s->host = host, s->port = port, s->slots = slots;
    s->max_queue = max_queue, s->timeout_s = timeout, s->max_delay_s = 1e-3 * delay_ms;
    const char *base = strrchr(model, '/');
    s->model_id = base && base[1] ? base + 1 : model;
    return 0;
}

int cmd_serve(int argc, char **argv)
{
    server s = {0};
    int threads = 0;
    int rc = serve_options(&s, argc, argv, &threads);
    if (rc) return rc == 1 ? 0 : rc;
    if (cli_device(s.device, "serve")) return 1;
    /* SIGTERM and SIGINT are taken by sigwait: blocked in every thread, which inherit the mask
     * (the decoder, the HTTP threads, OpenMP's) */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM), sigaddset(&stop, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    signal(SIGPIPE, SIG_IGN); /* a client gone mid-answer is an error to handle, not a death */
    cli_threads(threads);
    if ((rc = open_model(&s))) goto free_model;
    pthread_mutex_init(&s.lock, NULL);
    pthread_cond_init(&s.work, NULL), pthread_cond_init(&s.news, NULL);
    pthread_t decoder;
    if (pthread_create(&decoder, NULL, serve_decoder_main, &s)) {
        fprintf(stderr, "qkv serve: cannot start the decoding thread\n");
        rc = 1;
        goto free_model;
    }
    rc = serve_until_stopped(&s, &stop);
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
