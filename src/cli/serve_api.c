/* SPDX-License-Identifier: MIT */
/* qkv serve's OpenAI-shaped API (serve.h):
 *   POST /v1/completions   for a language model; "stream": true as server-sent events
 *   GET  /health, /v1/models (every model the server holds) */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/serve.h"

enum MHD_Result serve_wait_and_answer(server *s, struct MHD_Connection *c, conn *cn, job *j,
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

/* ---- POST /v1/completions ------------------------------------------------------------- */

/* A completion chunk or the whole answer: OpenAI's text_completion object. */
static cJSON *completion_json(const server *s, const char *id, const char *text,
                              const char *finish, const job *j, int usage)
{
    cJSON *o = cJSON_CreateObject(), *choices = cJSON_CreateArray(), *c = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "object", "text_completion");
    cJSON_AddNumberToObject(o, "created", (double)time(NULL));
    (void)s;
    cJSON_AddStringToObject(o, "model", j->m->name);
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
        return serve_refuse(msg, cap, 400, "\"stop\" must be a string or an array of at most %d",
                      MAX_STOPS);
    for (int k = 0; k < n_stop; k++) {
        const cJSON *x = stop_list ? cJSON_GetArrayItem(stop, k) : stop;
        if (!cJSON_IsString(x) || !*x->valuestring)
            return serve_refuse(msg, cap, 400, "\"stop\"[%d] must be a non-empty string", k);
    }
    return 0;
}

/* OpenAI's completion options that qkv does not implement: refused with a 400 naming them
 * unless given their no-op value (clients send those by default), rather than accepted and
 * ignored ("n": 3 returned one choice). */
static int check_unsupported(const cJSON *req, char *msg, size_t cap)
{
    static const struct {
        const char *key, *why;
        double noop; /* the number that asks for nothing (NAN: none does) */
    } options[] = {
        {"n", "one choice per request", 1},
        {"best_of", "one candidate per choice", 1},
        {"echo", "no echo of the prompt", NAN},
        {"logprobs", "no log-probabilities", NAN},
        {"suffix", "no text after the insertion", NAN},
        {"presence_penalty", "no presence penalty", 0},
        {"frequency_penalty", "no frequency penalty", 0},
        {"logit_bias", "no logit bias", NAN},
    };
    for (size_t k = 0; k < sizeof options / sizeof *options; k++) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(req, options[k].key);
        const int noop = !x || cJSON_IsNull(x) || cJSON_IsFalse(x) ||
                         (cJSON_IsNumber(x) && x->valuedouble == options[k].noop) ||
                         (cJSON_IsString(x) && !*x->valuestring) ||
                         (cJSON_IsObject(x) && !x->child);
        if (!noop)
            return serve_refuse(msg, cap, 400, "\"%s\" is not supported: qkv serve gives %s",
                          options[k].key, options[k].why);
    }
    return 0;
}

/* The job of a completion request (checked already): its prompt encoded, its stop strings;
 * NULL with the status in *code and the reason in msg. */
static job *completion_job(served_model *m, const cJSON *req, const char *prompt,
                           const qkv_lm_generation *gen, int *code, char *msg, size_t cap)
{
    const cJSON *stop = cJSON_GetObjectItemCaseSensitive(req, "stop");
    const int stop_list = cJSON_IsArray(stop);
    const int n_stop = stop_list ? cJSON_GetArraySize(stop) : cJSON_IsString(stop) ? 1 : 0;
    job *j = job_new();
    *code = serve_refuse(msg, cap, 500, "out of memory");
    if (!j) return NULL;
    j->kind = JOB_COMPLETE, j->beam = j->n_best = 1, j->m = m;
    const size_t len = strlen(prompt);
    size_t n = 0, unknown = 0;
    j->prompt = malloc((len ? len : 1) * sizeof *j->prompt);
    j->out = malloc(1), j->out_cap = 1;
    qkv_error err = {0};
    if (!j->prompt || !j->out) return job_free(j), NULL;
    j->out[0] = '\0';
    if (qkv_lm_encode(j->prompt, &n, &unknown, &m->lm.vocab, prompt, len, &err)) {
        *code = serve_refuse(msg, cap, 400, "the prompt: %s", err.msg);
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
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(req, "model");
    if (model && !cJSON_IsString(model) && !cJSON_IsNull(model))
        return serve_send_error(c, cn, 400, "\"model\" must be a string");
    const char *id = cJSON_IsString(model) ? model->valuestring : NULL;
    served_model *m = serve_model_named(s, id, 0);
    if (!m && (!id || serve_model_named(s, id, 1)))
        return serve_send_error(c, cn, 400, "%s%s%s is a translation model: use /translate",
                                id ? "\"" : "", id ? id : "this server's model",
                                id ? "\"" : "");
    if (!m) return serve_send_error(c, cn, 404, "no model \"%s\": GET /v1/models lists them", id);
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
    if ((code = check_stop(cJSON_GetObjectItemCaseSensitive(req, "stop"), msg, sizeof msg)) ||
        (code = check_unsupported(req, msg, sizeof msg)))
        return serve_send_error(c, cn, code, "%s", msg);
    const qkv_lm_generation gen = {max_tokens, {temperature, top_k, top_p}, (uint64_t)seed, NULL,
                                   NULL, 1};
    job *j = completion_job(m, req, prompt, &gen, &code, msg, sizeof msg);
    if (!j) return serve_send_error(c, cn, code, "%s", msg);
    j->streaming = cJSON_IsTrue(stream_flag);
    if (max_tokens == 0) j->done = 1, j->refs = 1;
    else if (serve_enqueue(s, j))
        return job_free(j), serve_send_error(c, cn, 503, "the queue is full (%d requests): "
                                             "retry later", s->max_queue);
    cn->j = j;
    char cid[32];
    pthread_mutex_lock(&s->lock);
    snprintf(cid, sizeof cid, "cmpl-%lu", ++s->next_id);
    pthread_mutex_unlock(&s->lock);
    if (j->streaming) return start_stream(s, c, cn, j, cid);
    return serve_wait_and_answer(s, c, cn, j, "completion", completion_answer, cid);
}

/* ---- GET /health, /v1/models ------------------------------------------------------------ */

served_model *serve_model_named(server *s, const char *id, int translation)
{
    served_model *only = NULL;
    int kind = 0;
    for (int i = 0; i < s->n_models; i++) {
        served_model *m = &s->models[i];
        if (!!m->tr != !!translation) continue;
        if (id && !strcmp(id, m->name)) return m;
        only = m, kind++;
    }
    return !id && kind == 1 ? only : NULL;
}

static const char *kind_of(const served_model *m)
{
    return m->tr ? "translation" : "language-model";
}

enum MHD_Result serve_get_health(server *s, struct MHD_Connection *c, conn *cn, int draining)
{
    if (draining) return serve_send_error(c, cn, 503, "stopping");
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "status", "ok");
    if (s->n_models == 1) { /* one model: named, as before there could be more */
        cJSON_AddStringToObject(o, "model", s->models[0].name);
        cJSON_AddStringToObject(o, "kind", kind_of(&s->models[0]));
    }
    cJSON *names = cJSON_AddArrayToObject(o, "models");
    for (int i = 0; i < s->n_models; i++)
        cJSON_AddItemToArray(names, cJSON_CreateString(s->models[i].name));
    return serve_send_json(c, cn, 200, o);
}

enum MHD_Result serve_get_models(server *s, struct MHD_Connection *c, conn *cn)
{
    cJSON *o = cJSON_CreateObject(), *data = cJSON_CreateArray();
    cJSON_AddStringToObject(o, "object", "list");
    for (int i = 0; i < s->n_models; i++) {
        const served_model *sm = &s->models[i];
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "id", sm->name);
        cJSON_AddStringToObject(m, "object", "model");
        cJSON_AddNumberToObject(m, "created", 0);
        cJSON_AddStringToObject(m, "owned_by", "qkv");
        cJSON_AddStringToObject(m, "kind", kind_of(sm));
        if (sm->source[0]) {
            cJSON_AddStringToObject(m, "source", sm->source);
            cJSON_AddStringToObject(m, "target", sm->target);
        }
        cJSON_AddItemToArray(data, m);
    }
    cJSON_AddItemToObject(o, "data", data);
    return serve_send_json(c, cn, 200, o);
}
