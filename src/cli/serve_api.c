/* SPDX-License-Identifier: MIT */
/* qkv serve's API shapes (serve.h):
 *   POST /translate        LibreTranslate's: {"q": "text" | [...]} -> {"translatedText"}, with
 *                          "beam", "alternatives" (n-best) and "max_len"
 *   POST /v1/completions   OpenAI's, for a language model; "stream": true as server-sent events
 *   GET  /health, /v1/models */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/serve.h"

/* code, with msg formatted: a request refused. */
static int refuse(char *msg, size_t cap, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int refuse(char *msg, size_t cap, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, cap, fmt, ap);
    va_end(ap);
    return code;
}

/* The answer of a request, shaped from its finished job (under lock). */
typedef cJSON *(*answer_shape)(const server *s, const job *j, const void *arg);

/* Waits for j (in the queue, or done already) and answers: the shape of its result, its
 * failure, 504 past the timeout, nothing when the client went away. what: "translation" or
 * "completion", for the timeout's message. */
static enum MHD_Result wait_and_answer(server *s, struct MHD_Connection *c, conn *cn, job *j,
                                       const char *what, answer_shape shape, const void *arg)
{
    char msg[600];
    cn->j = j;
    pthread_mutex_lock(&s->lock);
    const int w = serve_wait_for(s, j, cn->fd, cn->start, serve_job_done, NULL);
    cJSON *o = !w && !j->status ? shape(s, j, arg) : NULL;
    const int status = j->status;
    snprintf(msg, sizeof msg, "%s", j->error);
    serve_release(s, j);
    cn->j = NULL;
    pthread_mutex_unlock(&s->lock);
    if (w == 499) return MHD_NO; /* nobody to answer */
    if (w == 504)
        return serve_send_error(c, cn, 504, "the %s took longer than %d s", what, s->timeout_s);
    if (status) return serve_send_error(c, cn, status, "%s", msg);
    return serve_send_json(c, cn, 200, o);
}

/* ---- POST /translate -------------------------------------------------------------------- */

/* "q" and the other members of a translation request checked: 0, or the status with msg. */
static int check_translate(const cJSON *req, char *msg, size_t cap)
{
    const cJSON *q = cJSON_GetObjectItemCaseSensitive(req, "q");
    const int is_list = cJSON_IsArray(q);
    if (!cJSON_IsString(q) && !is_list)
        return refuse(msg, cap, 400, "\"q\" must be a string or an array of strings");
    const int n = is_list ? cJSON_GetArraySize(q) : 1;
    if (n > MAX_SOURCES)
        return refuse(msg, cap, 413, "%d texts in \"q\": at most %d per request", n, MAX_SOURCES);
    for (int i = 0; i < n; i++) {
        const cJSON *x = is_list ? cJSON_GetArrayItem(q, i) : q;
        if (!cJSON_IsString(x)) return refuse(msg, cap, 400, "\"q\"[%d] must be a string", i);
        if (strlen(x->valuestring) > MAX_SOURCE_BYTES)
            return refuse(msg, cap, 413, "\"q\"[%d] has %zu bytes: at most %d", i,
                          strlen(x->valuestring), MAX_SOURCE_BYTES);
        if (strchr(x->valuestring, '\n') || strchr(x->valuestring, '\r'))
            return refuse(msg, cap, 400, "\"q\"[%d] holds a line break: send one sentence per "
                          "text (an array of them)", i);
    }
    static const char *const strings[] = {"source", "target", "format", "api_key"};
    for (size_t k = 0; k < sizeof strings / sizeof *strings; k++) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(req, strings[k]);
        if (x && !cJSON_IsString(x) && !cJSON_IsNull(x))
            return refuse(msg, cap, 400, "\"%s\" must be a string", strings[k]);
    }
    const cJSON *format = cJSON_GetObjectItemCaseSensitive(req, "format");
    if (cJSON_IsString(format) && strcmp(format->valuestring, "text"))
        return refuse(msg, cap, 400, "\"format\": only \"text\" is supported");
    return 0;
}

/* The job of the sources q (a string, or an array of n); NULL when out of memory. */
static job *translate_job(const cJSON *q, int n, int beam, int alternatives, int max_len)
{
    job *j = job_new();
    if (!j) return NULL;
    j->kind = JOB_TRANSLATE, j->n = n, j->max_len = max_len, j->n_best = alternatives + 1;
    j->beam = beam > j->n_best ? beam : j->n_best;
    j->src = calloc((size_t)n, sizeof *j->src);
    j->text = calloc((size_t)n * j->n_best, sizeof *j->text);
    j->score = calloc((size_t)n * j->n_best, sizeof *j->score);
    j->slot = malloc((size_t)n * sizeof *j->slot);
    int ok = j->src && j->text && j->score && j->slot;
    for (int i = 0; ok && i < n; i++) {
        j->slot[i] = -1;
        ok = !!(j->src[i] = strdup((cJSON_IsArray(q) ? cJSON_GetArrayItem(q, i) : q)->valuestring));
    }
    if (!ok) job_free(j), j = NULL;
    return j;
}

/* {"translatedText", "alternatives" (n-best), "scores" (beam search)}: each a list when "q"
 * was one (arg: nonzero), else the one text's. */
static cJSON *translation_json(const server *s, const job *j, const void *arg)
{
    (void)s;
    const int is_list = *(const int *)arg, alternatives = j->n_best - 1;
    cJSON *o = cJSON_CreateObject();
    cJSON *texts = cJSON_CreateArray(), *alts = cJSON_CreateArray(), *scores = cJSON_CreateArray();
    for (int i = 0; i < j->n; i++) {
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
    return o;
}

enum MHD_Result serve_post_translate(server *s, struct MHD_Connection *c, conn *cn,
                                     const cJSON *req)
{
    char msg[600];
    if (!s->tr)
        return serve_send_error(c, cn, 400, "this server holds a language model: use "
                                "/v1/completions");
    int code = check_translate(req, msg, sizeof msg);
    if (code) return serve_send_error(c, cn, code, "%s", msg);
    const int limit = qkv_transformer_get_config(qkv_translator_model(s->tr))->max_len;
    int beam = 1, alternatives = 0, max_len = 0;
    if (serve_get_int(req, "beam", 1, MAX_BEAM, &beam, msg, sizeof msg) ||
        serve_get_int(req, "alternatives", 0, MAX_BEAM - 1, &alternatives, msg, sizeof msg) ||
        serve_get_int(req, "max_len", 1, limit, &max_len, msg, sizeof msg))
        return serve_send_error(c, cn, 400, "%s", msg);
    const cJSON *q = cJSON_GetObjectItemCaseSensitive(req, "q");
    const int is_list = cJSON_IsArray(q), n = is_list ? cJSON_GetArraySize(q) : 1;
    job *j = translate_job(q, n, beam, alternatives, max_len);
    if (!j) return serve_send_error(c, cn, 500, "out of memory");
    if (n == 0) j->done = 1, j->refs = 1;
    else if (serve_enqueue(s, j))
        return job_free(j), serve_send_error(c, cn, 503, "the queue is full (%d requests): "
                                             "retry later", s->max_queue);
    return wait_and_answer(s, c, cn, j, "translation", translation_json, &is_list);
}

/* ---- POST /v1/completions ------------------------------------------------------------- */

/* A completion chunk or the whole answer: OpenAI's text_completion object. */
static cJSON *completion_json(const server *s, const char *id, const char *text,
                              const char *finish, const job *j, int usage)
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

/* The whole answer of a finished completion (arg: its id). */
static cJSON *completion_answer(const server *s, const job *j, const void *arg)
{
    return completion_json(s, arg, j->out, j->stop_hit ? "stop" : "length", j, 1);
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

/* The next event once there is news: "data: {chunk}\n\n" (NULL: the stream ends in error). */
static char *next_event(stream *st)
{
    server *s = st->s;
    job *j = st->j;
    pthread_mutex_lock(&s->lock);
    if (serve_wait_for(s, j, st->fd, st->start, has_news, st)) {
        pthread_mutex_unlock(&s->lock);
        return NULL;
    }
    size_t upto = j->done ? j->out_len : j->out_len - holdback(j);
    char *piece = strndup(j->out + st->sent, upto - st->sent);
    st->sent = upto;
    cJSON *o = NULL;
    if (j->status) {
        o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "error", j->error);
    } else if (piece) {
        o = completion_json(s, st->id, piece, j->done ? (j->stop_hit ? "stop" : "length") : NULL,
                            j, j->done);
    }
    if (j->done) st->finished = 1;
    pthread_mutex_unlock(&s->lock);
    free(piece);
    char *text = o ? cJSON_PrintUnformatted(o) : NULL, *event = NULL;
    cJSON_Delete(o);
    if (!text) return NULL;
    size_t n = strlen(text);
    if ((event = malloc(n + 9))) snprintf(event, n + 9, "data: %s\n\n", text);
    free(text);
    return event;
}

/* Server-sent events: "data: {chunk}\n\n" per piece of text, then "data: [DONE]\n\n". */
static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    stream *st = cls;
    if (!st->pending) {
        if (st->finished == 2) return MHD_CONTENT_READER_END_OF_STREAM;
        if (st->finished == 1) st->pending = strdup("data: [DONE]\n\n"), st->finished = 2;
        else st->pending = next_event(st);
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
    serve_release(s, st->j);
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->lock);
    free(st->pending);
    free(st);
}

/* Answers with the event stream of j (queued), which the stream's callbacks then own. */
static enum MHD_Result start_stream(server *s, struct MHD_Connection *c, conn *cn, job *j,
                                    const char *id)
{
    stream *st = calloc(1, sizeof *st);
    if (!st) {
        pthread_mutex_lock(&s->lock);
        j->cancelled = 1, serve_release(s, j), cn->j = NULL;
        pthread_mutex_unlock(&s->lock);
        return serve_send_error(c, cn, 500, "out of memory");
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

/* "stop": a string or an array of at most MAX_STOPS non-empty ones; 0, or 400 with msg. */
static int check_stop(const cJSON *stop, char *msg, size_t cap)
{
    const int stop_list = cJSON_IsArray(stop);
    const int n_stop = stop_list ? cJSON_GetArraySize(stop) : cJSON_IsString(stop) ? 1 : 0;
    if ((stop && !cJSON_IsNull(stop) && !stop_list && !cJSON_IsString(stop)) || n_stop > MAX_STOPS)
        return refuse(msg, cap, 400, "\"stop\" must be a string or an array of at most %d",
                      MAX_STOPS);
    for (int k = 0; k < n_stop; k++) {
        const cJSON *x = stop_list ? cJSON_GetArrayItem(stop, k) : stop;
        if (!cJSON_IsString(x) || !*x->valuestring)
            return refuse(msg, cap, 400, "\"stop\"[%d] must be a non-empty string", k);
    }
    return 0;
}

/* The job of a completion request (checked already): its prompt encoded, its stop strings;
 * NULL with the status in *code and the reason in msg. */
static job *completion_job(const server *s, const cJSON *req, const char *prompt,
                           const qkv_lm_generation *gen, int *code, char *msg, size_t cap)
{
    const cJSON *stop = cJSON_GetObjectItemCaseSensitive(req, "stop");
    const int stop_list = cJSON_IsArray(stop);
    const int n_stop = stop_list ? cJSON_GetArraySize(stop) : cJSON_IsString(stop) ? 1 : 0;
    job *j = job_new();
    *code = refuse(msg, cap, 500, "out of memory");
    if (!j) return NULL;
    j->kind = JOB_COMPLETE, j->beam = j->n_best = 1;
    const size_t len = strlen(prompt);
    size_t n = 0, unknown = 0;
    j->prompt = malloc((len ? len : 1) * sizeof *j->prompt);
    j->out = malloc(1), j->out_cap = 1;
    qkv_error err = {0};
    if (!j->prompt || !j->out) return job_free(j), NULL;
    j->out[0] = '\0';
    if (qkv_lm_encode(j->prompt, &n, &unknown, &s->lm.vocab, prompt, len, &err)) {
        *code = refuse(msg, cap, 400, "the prompt: %s", err.msg);
        return job_free(j), NULL;
    }
    j->n_prompt = (int)n;
    for (int k = 0; k < n_stop; k++)
        if (!(j->stop[j->n_stop++] = strdup((stop_list ? cJSON_GetArrayItem(stop, k)
                                                      : stop)->valuestring)))
            return job_free(j), NULL;
    j->gen = *gen;
    return j;
}

enum MHD_Result serve_post_completions(server *s, struct MHD_Connection *c, conn *cn,
                                       const cJSON *req)
{
    char msg[600];
    if (!s->lm.model)
        return serve_send_error(c, cn, 400, "this server holds a translation model: use "
                                "/translate");
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(req, "prompt");
    if (cJSON_IsArray(p) && cJSON_GetArraySize(p) == 1) p = cJSON_GetArrayItem(p, 0);
    if (p && !cJSON_IsString(p))
        return serve_send_error(c, cn, 400, "\"prompt\" must be a string (or an array of one)");
    const char *prompt = p && *p->valuestring ? p->valuestring : "\n";
    if (strlen(prompt) > MAX_BODY) return serve_send_error(c, cn, 413, "the prompt is too long");
    int max_tokens = 16, top_k = 0, seed = 0, code;
    float temperature = 1.0f, top_p = 1.0f;
    if (serve_get_int(req, "max_tokens", 0, MAX_COMPLETION, &max_tokens, msg, sizeof msg) ||
        serve_get_int(req, "top_k", 0, 1 << 30, &top_k, msg, sizeof msg) ||
        serve_get_int(req, "seed", 0, INT32_MAX, &seed, msg, sizeof msg) ||
        serve_get_float(req, "temperature", 0.0, 100.0, &temperature, msg, sizeof msg) ||
        serve_get_float(req, "top_p", 1e-6, 1.0, &top_p, msg, sizeof msg))
        return serve_send_error(c, cn, 400, "%s", msg);
    const cJSON *stream_flag = cJSON_GetObjectItemCaseSensitive(req, "stream");
    if (stream_flag && !cJSON_IsBool(stream_flag) && !cJSON_IsNull(stream_flag))
        return serve_send_error(c, cn, 400, "\"stream\" must be true or false");
    if ((code = check_stop(cJSON_GetObjectItemCaseSensitive(req, "stop"), msg, sizeof msg)))
        return serve_send_error(c, cn, code, "%s", msg);
    const qkv_lm_generation gen = {max_tokens, {temperature, top_k, top_p}, (uint64_t)seed, NULL,
                                   NULL, 1};
    job *j = completion_job(s, req, prompt, &gen, &code, msg, sizeof msg);
    if (!j) return serve_send_error(c, cn, code, "%s", msg);
    j->streaming = cJSON_IsTrue(stream_flag);
    if (max_tokens == 0) j->done = 1, j->refs = 1;
    else if (serve_enqueue(s, j))
        return job_free(j), serve_send_error(c, cn, 503, "the queue is full (%d requests): "
                                             "retry later", s->max_queue);
    cn->j = j;
    char id[32];
    pthread_mutex_lock(&s->lock);
    snprintf(id, sizeof id, "cmpl-%lu", ++s->next_id);
    pthread_mutex_unlock(&s->lock);
    if (j->streaming) return start_stream(s, c, cn, j, id);
    return wait_and_answer(s, c, cn, j, "completion", completion_answer, id);
}

/* ---- GET /health, /v1/models ------------------------------------------------------------ */

enum MHD_Result serve_get_health(server *s, struct MHD_Connection *c, conn *cn, int draining)
{
    if (draining) return serve_send_error(c, cn, 503, "stopping");
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "status", "ok");
    cJSON_AddStringToObject(o, "model", s->model_id);
    cJSON_AddStringToObject(o, "kind", s->tr ? "translation" : "language-model");
    return serve_send_json(c, cn, 200, o);
}

enum MHD_Result serve_get_models(server *s, struct MHD_Connection *c, conn *cn)
{
    cJSON *o = cJSON_CreateObject(), *data = cJSON_CreateArray(), *m = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON_AddStringToObject(m, "id", s->model_id);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddStringToObject(m, "owned_by", "qkv");
    cJSON_AddStringToObject(m, "kind", s->tr ? "translation" : "language-model");
    cJSON_AddItemToArray(data, m);
    cJSON_AddItemToObject(o, "data", data);
    return serve_send_json(c, cn, 200, o);
}
