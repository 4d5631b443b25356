/* SPDX-License-Identifier: MIT */
/* qkv serve's HTTP layer (serve.h): libmicrohttpd with one thread per connection. A request's
 * body is gathered, checked (size, UTF-8, a JSON object) and dispatched by endpoint; a handler
 * waits for its job in short slices and, between them, looks at its socket: a client that went
 * away cancels its request and frees its slot; one that waits past --timeout gets 504. */
#include <errno.h>
#include <math.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "cli/serve.h"

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

enum MHD_Result serve_send_text(struct MHD_Connection *c, conn *cn, int code, char *text,
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

enum MHD_Result serve_send_json(struct MHD_Connection *c, conn *cn, int code, cJSON *o)
{
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!text) return MHD_NO;
    size_t n = strlen(text);
    char *line = malloc(n + 2); /* a newline, for curl's output */
    if (!line) return free(text), MHD_NO;
    memcpy(line, text, n), line[n] = '\n', line[n + 1] = '\0';
    free(text);
    return serve_send_text(c, cn, code, line, "application/json", 0);
}

/* OpenAI's clients read error.message, LibreTranslate's read error: both are there. */
enum MHD_Result serve_send_error(struct MHD_Connection *c, conn *cn, int code, const char *fmt,
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
    return serve_send_text(c, cn, code, line, "application/json", code == 503);
}

int serve_get_int(const cJSON *o, const char *key, int lo, int hi, int *v, char *msg,
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

int serve_get_float(const cJSON *o, const char *key, double lo, double hi, float *v, char *msg,
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

int serve_enqueue(server *s, job *j)
{
    pthread_mutex_lock(&s->lock);
    if (s->draining || s->queued >= s->max_queue) {
        pthread_mutex_unlock(&s->lock);
        return 503;
    }
    j->refs = 2;
    j->queued_at = serve_now();
    if (s->queue_tail) s->queue_tail->next = j;
    else s->queue = j;
    s->queue_tail = j, s->queued++;
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->lock);
    return 0;
}

int serve_wait_for(server *s, job *j, int fd, double start,
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
        if (s->timeout_s > 0 && serve_now() - start > s->timeout_s) {
            j->cancelled = 1;
            pthread_cond_signal(&s->work);
            return 504;
        }
    }
    return 0;
}

int serve_job_done(const job *j, const void *arg)
{
    (void)arg;
    return j->done;
}

/* ---- dispatch ------------------------------------------------------------------------- */

/* A request's first call, with its headers: its connection state, counted in flight. */
static enum MHD_Result begin_request(server *s, struct MHD_Connection *c, void **con_cls)
{
    conn *cn = calloc(1, sizeof *cn);
    if (!cn) return MHD_NO;
    cn->start = serve_now(), cn->fd = -1, cn->code = 500;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (ci) cn->fd = ci->connect_fd;
    *con_cls = cn;
    pthread_mutex_lock(&s->lock);
    s->in_flight++;
    pthread_mutex_unlock(&s->lock);
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
    if (cl && strtoull(cl, NULL, 10) > MAX_BODY)
        return serve_send_error(c, cn, 413, "the body has %s bytes: at most %d", cl, MAX_BODY);
    return MHD_YES;
}

/* A piece of the body (beyond MAX_BODY only noted: 413 once it is all in). */
static enum MHD_Result add_body(conn *cn, const char *data, size_t n)
{
    if (cn->len + n > MAX_BODY) {
        cn->too_large = 1;
    } else if (!cn->too_large) {
        char *grown = realloc(cn->body, cn->len + n + 1);
        if (!grown) return MHD_NO;
        cn->body = grown;
        memcpy(cn->body + cn->len, data, n);
        cn->len += n, cn->body[cn->len] = '\0';
    }
    return MHD_YES;
}

/* A POST's body as a JSON object, or NULL after answering why not. */
static cJSON *json_body(struct MHD_Connection *c, conn *cn, enum MHD_Result *r)
{
    const char *end = NULL;
    cJSON *req = NULL;
    if (!cn->body || !cn->len)
        *r = serve_send_error(c, cn, 400, "the body is empty: send JSON");
    else if (!utf8_valid((const unsigned char *)cn->body, cn->len))
        *r = serve_send_error(c, cn, 400, "the body is not valid UTF-8");
    else if (!(req = cJSON_ParseWithLengthOpts(cn->body, cn->len, &end, 0)))
        *r = serve_send_error(c, cn, 400, "malformed JSON at byte %zu",
                              end ? (size_t)(end - cn->body) : (size_t)0);
    else if (!cJSON_IsObject(req))
        *r = serve_send_error(c, cn, 400, "the body must be a JSON object");
    else
        return req;
    cJSON_Delete(req);
    return NULL;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    (void)version;
    server *s = cls;
    conn *cn = *con_cls;
    if (!cn) return begin_request(s, c, con_cls); /* the body, if any, comes in the next calls */
    if (*upload_data_size) {
        const size_t n = *upload_data_size;
        *upload_data_size = 0;
        return add_body(cn, upload_data, n);
    }
    const int get = !strcmp(method, "GET") || !strcmp(method, "HEAD"),
              post = !strcmp(method, "POST");
    pthread_mutex_lock(&s->lock);
    const int draining = s->draining;
    pthread_mutex_unlock(&s->lock);
    static const char *const gets[] = {"/health", "/metrics", "/v1/models"};
    for (int k = 0; k < 3; k++)
        if (!strcmp(url, gets[k]) && !get)
            return serve_send_error(c, cn, 405, "%s %s: use GET", method, url);
    if (!strcmp(url, "/health")) return serve_get_health(s, c, cn, draining);
    if (!strcmp(url, "/metrics")) return serve_get_metrics(s, c, cn);
    if (!strcmp(url, "/v1/models")) return serve_get_models(s, c, cn);
    const int translate = !strcmp(url, "/translate"), complete = !strcmp(url, "/v1/completions");
    if (!translate && !complete) return serve_send_error(c, cn, 404, "no endpoint %s", url);
    if (!post) return serve_send_error(c, cn, 405, "%s %s: use POST", method, url);
    if (cn->too_large)
        return serve_send_error(c, cn, 413, "the body is larger than %d bytes", MAX_BODY);
    if (draining) return serve_send_error(c, cn, 503, "the server is stopping");
    enum MHD_Result r = MHD_NO;
    cJSON *req = json_body(c, cn, &r);
    if (!req) return r;
    r = translate ? serve_post_translate(s, c, cn, req) : serve_post_completions(s, c, cn, req);
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
    serve_count(s, toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? cn->code : 0,
                serve_now() - cn->start);
    s->in_flight--;
    pthread_cond_broadcast(&s->news);
    pthread_mutex_unlock(&s->lock);
    free(cn->body);
    free(cn);
    *con_cls = NULL;
}

struct MHD_Daemon *serve_http_start(server *s, int *bound)
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

