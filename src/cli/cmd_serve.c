/* SPDX-License-Identifier: MIT */
/* qkv serve: model directories behind HTTP (libmicrohttpd, one thread per connection).
 *   POST /translate        LibreTranslate's API: {"q": "text" | [...], "source", "target"} ->
 *                          {"translatedText"}; GET/POST /languages, /detect,
 *                          /frontend/settings
 *   POST /v1/completions   OpenAI's, for a language model; "stream": true as server-sent events
 *   GET  /health, /v1/models, /metrics (Prometheus text)
 * Decoding threads own the models (serve_decoder.c). Requests wait in bounded queues (full:
 * 503 with Retry-After); translations (greedy or beam search) and completions join their
 * model's running batch at the next step and leave it when they end (continuous batching).
 * This file: the options, the models, start-up, and the end: SIGTERM or SIGINT (taken by
 * sigwait in the main thread, no handler, no global state) stops accepting, finishes what is in
 * flight, and exits 0. The parts and how they meet: serve.h. */
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

/* A model directory (m->dir) opened: a language model when it holds vocab.txt (qkv train-lm),
 * else a translation model, with its running batch. 0, or 1 after a message naming it. */
static int open_model(server *s, served_model *m)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/vocab.txt", m->dir);
    struct stat sb;
    qkv_error err = {0};
    if (!stat(path, &sb)) {
        if (lm_dir_load(&m->lm, m->dir, s->precision_given ? &s->precision : NULL, s->device)) {
            fprintf(stderr, "qkv serve: model %s (%s) could not be loaded\n", m->name, m->dir);
            return 1;
        }
        m->lm_job = calloc((size_t)s->slots, sizeof *m->lm_job);
        m->drawn = calloc((size_t)s->slots, sizeof *m->drawn);
        if (!m->lm_job || !m->drawn) {
            fprintf(stderr, "qkv serve: out of memory\n");
            return 1;
        }
        if (qkv_lm_batch_create(&m->lb, m->lm.model, s->slots, &err)) {
            fprintf(stderr, "qkv serve: model %s: %s\n", m->name, err.msg);
            return 1;
        }
        qkv_lm_batch_set_prefill_chunk(m->lb, s->prefill_chunk);
        return 0;
    }
    if (qkv_translator_open(&m->tr, m->dir, &err) ||
        qkv_transformer_set_device(qkv_translator_model(m->tr), s->device, &err) ||
        (s->precision_given &&
         qkv_transformer_set_precision(qkv_translator_model(m->tr), s->precision, &err)) ||
        qkv_batch_decoder_create(&m->bd, m->tr, s->slots, &err)) {
        fprintf(stderr, "qkv serve: model %s: %s\n", m->name, err.msg);
        return 1;
    }
    m->languages = qkv_translator_tokenizer(m->tr)->languages;
    return 0;
}

static void close_model(served_model *m)
{
    qkv_batch_decoder_free(m->bd);
    qkv_lm_batch_free(m->lb);
    free(m->lm_job), free(m->drawn);
    qkv_translator_free(m->tr);
    if (m->lm.model) lm_dir_free(&m->lm);
}

/* Every model, or none: a model that fails to load stops the server before it listens. */
static int open_models(server *s)
{
    for (int i = 0; i < s->n_models; i++)
        if (open_model(s, &s->models[i])) return 1;
    return 0;
}

/* --model [NAME=]DIR into m: NAME (else the directory's last name) is its id, and a NAME of
 * two language codes "src-tgt" its language pair. 0, or 2 after a message. */
static int model_spec(served_model *m, const char *spec)
{
    const char *eq = strchr(spec, '='), *dir = eq ? eq + 1 : spec;
    if (!*dir) {
        fprintf(stderr, "qkv serve: --model %s: no directory after '='\n", spec);
        return 2;
    }
    const size_t n = eq ? (size_t)(eq - spec) : 0;
    if (eq && (n == 0 || n >= sizeof m->name)) {
        fprintf(stderr, "qkv serve: --model %s: the name before '=' must have 1 to %zu "
                "characters\n", spec, sizeof m->name - 1);
        return 2;
    }
    m->dir = dir;
    if (eq) {
        memcpy(m->name, spec, n), m->name[n] = '\0';
    } else {
        size_t len = strlen(dir);
        while (len > 1 && dir[len - 1] == '/') len--;
        const char *base = dir + len;
        while (base > dir && base[-1] != '/') base--;
        snprintf(m->name, sizeof m->name, "%.*s", (int)(dir + len - base), base);
    }
    /* "en-de", "pt-BR-en": the source is all before the last '-', the target after it */
    const char *dash = strrchr(m->name, '-');
    if (eq && dash && dash > m->name && dash[1] && (size_t)(dash - m->name) < sizeof m->source &&
        strlen(dash + 1) < sizeof m->target && !strchr(m->name, ' ')) {
        snprintf(m->source, sizeof m->source, "%.*s", (int)(dash - m->name), m->name);
        snprintf(m->target, sizeof m->target, "%s", dash + 1);
    }
    return 0;
}

/* Every --model of argv (the option table keeps only the last): into s->models. 0, or 2. */
static int model_specs(server *s, int argc, char **argv)
{
    const char **spec = calloc((size_t)argc + 1, sizeof *spec);
    int n = 0;
    if (!spec) return 2;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--")) break;
        if ((!strcmp(argv[i], "--model") || !strcmp(argv[i], "-m")) && i + 1 < argc)
            spec[n++] = argv[++i];
        else if (!strncmp(argv[i], "--model=", 8)) spec[n++] = argv[i] + 8;
    }
    int rc = 0;
    if (n > MAX_MODELS) {
        fprintf(stderr, "qkv serve: %d --model options: at most %d\n", n, MAX_MODELS);
        rc = 2;
    } else if (n && !(s->models = calloc((size_t)n, sizeof *s->models))) {
        rc = 2;
    }
    for (int i = 0; !rc && i < n; i++) {
        rc = model_spec(&s->models[i], spec[i]);
        for (int k = 0; !rc && k < i; k++)
            if (!strcmp(s->models[k].name, s->models[i].name)) {
                fprintf(stderr, "qkv serve: two models named %s: name them (--model "
                        "NAME=DIR)\n", s->models[i].name);
                rc = 2;
            }
        s->n_models = i + 1;
    }
    free(spec);
    return rc;
}

/* Serves until SIGTERM or SIGINT (in stop), then stops accepting and waits until every
 * request in flight has been answered. 0, or 1 when the server could not start. */
static int serve_until_stopped(server *s, const sigset_t *stop)
{
    int bound = 0;
    s->daemon = serve_http_start(s, &bound);
    if (!s->daemon) return 1;
    const char *host = s->host;
    for (int i = 0; i + 1 < s->n_models; i++)
        printf("qkv serve: %s model %s (%s)\n", s->models[i].tr ? "translation" : "language",
               s->models[i].name, s->models[i].dir);
    const served_model *last = &s->models[s->n_models - 1];
    printf("qkv serve: %s model %s on http://%s%s%s:%d\n", last->tr ? "translation" : "language",
           last->dir, strchr(host, ':') ? "[" : "", host, strchr(host, ':') ? "]" : "", bound);
    fflush(stdout);
    int sig = 0;
    sigwait(stop, &sig);
    fprintf(stderr, "qkv serve: %s: finishing the requests in flight\n",
            sig == SIGTERM ? "SIGTERM" : "SIGINT");
    pthread_mutex_lock(&s->lock);
    s->draining = 1;
    pthread_cond_broadcast(&s->work); /* a batch being waited for starts now */
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
    serve_http_stop(s);
    if (listener != MHD_INVALID_SOCKET) close(listener);
    return 0;
}

/* The options into s; 0, 1 after --help, or the exit status 2. */
static int serve_options(server *s, int argc, char **argv, int *threads)
{
    int slots = 64, max_queue = 256, timeout = 60, port = 8080, delay_ms = 0;
    int header_timeout = 10, per_address = 0, prefill_chunk = 64;
    const char *host = "127.0.0.1", *model = NULL, *scheduler = "shared", *keys = NULL;
    opt_choice precision = {QKV_ENUM_PRECISION, NULL, QKV_PRECISION_FP32},
               device = {QKV_ENUM_DEVICE, NULL, QKV_DEVICE_CPU};
    const opt_spec opts[] = {
        {"model", OPT_DIR, &model, "[NAME=]DIR: a model directory, translation (qkv train) "
                                      "or language model (qkv train-lm); again for more models "
                                      "(NAME: its id, e.g. the language pair en-de)", NULL, NULL},
        {"m", OPT_ALIAS, "model", NULL, NULL, NULL},
        {"scheduler", OPT_STRING, &scheduler, "shared (one decoding thread takes turns over "
                                              "the models) or per-model (a thread each)", NULL,
         NULL},
        {"api-keys", OPT_FILE, &keys, "API keys, one a line, each with an optional limit of "
                                      "requests a minute: only they may translate", NULL, NULL},
        {"host", OPT_STRING, &host, "address to listen on", NULL, NULL},
        {"port", OPT_INT, &port, "port (0: a free one, printed)", "[0, 65535]", NULL},
        {"threads", OPT_INT, threads, "decoding threads (0: all cores)", ARG_THREADS, NULL},
        {"t", OPT_ALIAS, "threads", NULL, NULL, NULL},
        {"max-batch-size", OPT_INT, &slots, "rows decoded together, per model: the running "
                                            "batch's slots (a beam of K takes K)", "[1, 4096]",
         NULL},
        {"max-batch-tokens", OPT_ALIAS, "max-batch-size", "its older name", NULL, NULL},
        {"max-batch-delay", OPT_INT, &delay_ms, "milliseconds an idle server waits for more "
                                                "requests to start a batch with (0: none)",
         "[0, 60000]", NULL},
        {"prefill-chunk", OPT_INT, &prefill_chunk, "prompt tokens a step takes from a long "
                                                   "prompt that joins running completions, "
                                                   "so that it does not stall them (0: the "
                                                   "whole prompt at once)", "[0, 4096]", NULL},
        {"max-queue", OPT_INT, &max_queue, "requests waiting beyond the batch (more: 503)",
         "[1, 1000000]", NULL},
        {"timeout", OPT_INT, &timeout, "seconds a request may take (more: 504; 0: none)",
         "[0, 86400]", NULL},
        {"header-timeout", OPT_INT, &header_timeout, "seconds a request's headers may take to "
                                                     "arrive (more: the connection is closed)",
         "[1, 3600]", NULL},
        {"max-per-address", OPT_INT, &per_address, "connections one client address may hold "
                                                   "(0: half of all the server takes)",
         "[0, 1000000]", NULL},
        {"precision", OPT_CHOICE, &precision, CLI_PRECISION_HELP, NULL, NULL},
        {"device", OPT_CHOICE, &device, CLI_DEVICE_HELP, NULL, NULL},
        {0},
    };
    int rc = args_parse(argc, argv, 2, opts,
                        "usage: qkv serve --model [NAME=]DIR [--model ...] [--host TEXT] "
                        "[--port N] [--scheduler shared|per-model] [--api-keys FILE] "
                        "[--threads N] [--max-batch-size N] [--max-batch-delay N] "
                        "[--prefill-chunk N] "
                        "[--max-queue N] [--timeout N] [--header-timeout N] "
                        "[--max-per-address N] [--precision fp32|bf16|int8] "
                        "[--device cpu|cuda]\n"
                        "Serves models over HTTP: POST /translate, POST /v1/completions, "
                        "GET /health /v1/models /metrics /languages.");
    if (rc) return rc > 0 ? 1 : 2;
    if (!model) {
        fprintf(stderr, "qkv serve: needs --model DIR\n");
        return 2;
    }
    s->precision = (qkv_precision)precision.value, s->device = (qkv_device)device.value;
    s->precision_given = args_given(argc, argv, 2, opts, "precision");
    if ((rc = model_specs(s, argc, argv))) return rc;
    if (strcmp(scheduler, "shared") && strcmp(scheduler, "per-model")) {
        fprintf(stderr, "qkv serve: --scheduler %s: shared or per-model\n", scheduler);
        return 2;
    }
    s->per_model_threads = !strcmp(scheduler, "per-model");
    if (keys && !(s->keys = serve_keys_load(keys))) return 2;
    if (timeout > 0 && delay_ms >= 1000 * timeout) {
        fprintf(stderr, "qkv serve: --max-batch-delay %d ms is not below --timeout %d s: requests "
                "would time out waiting for company\n", delay_ms, timeout);
        return 2;
    }
    s->host = host, s->port = port, s->slots = slots;
    s->max_queue = max_queue, s->timeout_s = timeout, s->max_delay_s = 1e-3 * delay_ms;
    s->header_timeout_s = header_timeout, s->per_address = per_address;
    s->prefill_chunk = prefill_chunk;
    return 0;
}

int cmd_serve(int argc, char **argv)
{
    server s = {0};
    int threads = 0;
    int rc = serve_options(&s, argc, argv, &threads);
    if (!rc && cli_device(s.device, "serve")) rc = 3; /* a GPU that is not there: exit 1 */
    if (rc) {
        free(s.models);
        serve_keys_free(s.keys);
        return rc == 1 ? 0 : rc == 3 ? 1 : rc;
    }
    /* SIGTERM and SIGINT are taken by sigwait: blocked in every thread, which inherit the mask
     * (the decoder, the HTTP threads, OpenMP's) */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM), sigaddset(&stop, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    signal(SIGPIPE, SIG_IGN); /* a client gone mid-answer is an error to handle, not a death */
    cli_threads(threads);
    if ((rc = open_models(&s))) goto free_models;
    pthread_mutex_init(&s.lock, NULL);
    pthread_cond_init(&s.work, NULL), pthread_cond_init(&s.news, NULL);
    if (serve_decoders_start(&s)) {
        rc = 1;
    } else {
        rc = serve_until_stopped(&s, &stop);
        serve_decoders_stop(&s);
    }
    pthread_mutex_destroy(&s.lock);
    pthread_cond_destroy(&s.work), pthread_cond_destroy(&s.news);
free_models:
    for (int i = 0; i < s.n_models; i++) close_model(&s.models[i]);
    free(s.models);
    serve_keys_free(s.keys);
    if (!rc) fprintf(stderr, "qkv serve: stopped\n");
    return rc;
}
