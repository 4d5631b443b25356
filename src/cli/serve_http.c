/* SPDX-License-Identifier: MIT */
/* qkv serve's HTTP layer (serve.h): libmicrohttpd with one thread per connection. A request's
 * body is gathered, checked (size, UTF-8, a JSON object) and dispatched by endpoint; a handler
 * waits for its job in short slices and, between them, looks at its socket: a client that went
 * away cancels its request and frees its slot; one that waits past --timeout gets 504.
 *
 * Connections are bounded three ways: in all (--max-queue + --max-batch-tokens + 64), per
 * client address (--max-per-address, libmicrohttpd's per-IP limit), and in the time their
 * request headers may take (--header-timeout, from the connection's start or the end of its
 * previous request, however slowly the bytes trickle in: libmicrohttpd's own timeout only
 * counts idle time, which a byte every few seconds resets; a watch thread shuts the socket of
 * a connection past it, and libmicrohttpd then closes it as any connection whose client left).
 *
 * What libmicrohttpd answers itself, before any handler of qkv runs: a request whose headers
 * it cannot parse. A Content-Length that is not a decimal number ("-1", "abc", "5, 6", "1e23")
 * gets its 400 with an HTML body ("Request malformed ... wrong value for Content-Length"), and
 * libmicrohttpd 0.9.75 writes that answer's status line and headers twice (348 bytes where
 * its Content-Length says 138), then closes the connection; qkv never sees the request
 * (tests/e2e/test_serve.sh pins this down, so that another version of the library is
 * noticed). Every answer qkv itself gives, a Content-Length over the body limit included
 * (413), is one JSON object. */
#include <errno.h>
#include <math.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

#include "cli/serve.h"

/* ---- HTTP: bodies, JSON, errors ------------------------------------------------------- */

int serve_utf8_valid(const unsigned char *s, size_t n)
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

/* LibreTranslate's clients read "error" as the message ("detail" repeats it with the status);
 * under /v1/, OpenAI's shape: "error" an object with the message, type and code. */
enum MHD_Result serve_send_error(struct MHD_Connection *c, conn *cn, int code, const char *fmt,
                                 ...)
{
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    cJSON *o = cJSON_CreateObject(), *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "message", msg);
    if (cn->openai) { /* OpenAI's error object: its clients raise their error class by status */
        cJSON_AddStringToObject(e, "type", code == 404 ? "not_found_error"
                                           : code < 500 ? "invalid_request_error" : "server_error");
        cJSON_AddNullToObject(e, "param");
        cJSON_AddNumberToObject(e, "code", code);
        cJSON_AddItemToObject(o, "error", e);
    } else {
        cJSON_AddStringToObject(o, "error", msg);
        cJSON_AddNumberToObject(e, "code", code);
        cJSON_AddItemToObject(o, "detail", e);
    }
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!text) return MHD_NO;
    size_t n = strlen(text);
    char *line = realloc(text, n + 2);
    if (!line) return free(text), MHD_NO;
    line[n] = '\n', line[n + 1] = '\0';
    return serve_send_text(c, cn, code, line, "application/json", code == 503);
}

int serve_refuse(char *msg, size_t cap, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, cap, fmt, ap);
    va_end(ap);
    return code;
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
    served_model *m = j->m;
    pthread_mutex_lock(&s->lock);
    if (s->draining || s->queued >= s->max_queue) {
        pthread_mutex_unlock(&s->lock);
        return 503;
    }
    j->refs = 2;
    j->queued_at = serve_now();
    if (m->queue_tail) m->queue_tail->next = j;
    else m->queue = j;
    m->queue_tail = j, m->queued++, s->queued++;
    pthread_cond_broadcast(&s->work);
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
            pthread_cond_broadcast(&s->work);
            return 499;
        }
        if (s->timeout_s > 0 && serve_now() - start > s->timeout_s) {
            j->cancelled = 1;
            pthread_cond_broadcast(&s->work);
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

/* ---- connections: per-address limit, header deadline ------------------------------------ */

static void watch_link(server *s, pending *p)
{
    if (p->watched) return;
    p->prev = NULL, p->next = s->waiting_headers;
    if (p->next) p->next->prev = p;
    s->waiting_headers = p, p->watched = 1;
}

static void watch_unlink(server *s, pending *p)
{
    if (!p->watched) return;
    if (p->prev) p->prev->next = p->next;
    else s->waiting_headers = p->next;
    if (p->next) p->next->prev = p->prev;
    p->prev = p->next = NULL, p->watched = 0;
}

/* A connection starts waiting for headers (STARTED), and stops being watched (CLOSED). */
static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    server *s = cls;
    pending *p = *socket_context;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (!ci || !(p = calloc(1, sizeof *p))) return; /* unwatched, still bounded when idle */
        p->fd = ci->connect_fd, p->since = serve_now();
        pthread_mutex_lock(&s->lock);
        watch_link(s, p);
        pthread_mutex_unlock(&s->lock);
        *socket_context = p;
        return;
    }
    if (!p) return;
    pthread_mutex_lock(&s->lock);
    watch_unlink(s, p);
    pthread_mutex_unlock(&s->lock);
    free(p);
    *socket_context = NULL;
}

/* The connection's pending entry (NULL if unwatched). */
static pending *pending_of(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

/* Shuts the sockets of connections whose headers are past the deadline, every quarter of a
 * second, until serve_http_stop. */
static void *watch_headers(void *arg)
{
    server *s = arg;
    pthread_mutex_lock(&s->lock);
    while (!s->stop_watch) {
        const double now = serve_now();
        for (pending *p = s->waiting_headers, *next; p; p = next) {
            next = p->next;
            if (now - p->since <= s->header_timeout_s) continue;
            shutdown(p->fd, SHUT_RDWR); /* libmicrohttpd still owns (and closes) the socket */
            watch_unlink(s, p);
            s->headers_cut++;
        }
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        t.tv_nsec += 250 * 1000000L;
        if (t.tv_nsec >= 1000000000L) t.tv_sec++, t.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&s->watch_wake, &s->lock, &t);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

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
    pending *p = pending_of(c);
    pthread_mutex_lock(&s->lock);
    s->in_flight++;
    if (p) watch_unlink(s, p); /* its headers are in */
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

/* Whether the body is a form's (application/x-www-form-urlencoded), as LibreTranslate's
 * clients send: so its Content-Type says, and it does not open a JSON object (curl --data
 * sends JSON under the form's type unless told otherwise; no form field is named "{"). */
static int form_body(struct MHD_Connection *c, const conn *cn)
{
    const char *type = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");
    size_t i = 0;
    while (i < cn->len && strchr(" \t\r\n", cn->body[i])) i++;
    return type && !strncasecmp(type, "application/x-www-form-urlencoded", 33) &&
           !(i < cn->len && cn->body[i] == '{');
}

/* A POST's body as a JSON object, or NULL after answering why not: a form's fields as strings
 * (serve_form_parse), or one JSON value and nothing after it, no NUL (raw or \u0000, which
 * would cut a text short), no key twice (qkv_json_parse, the library's one JSON reader). */
static cJSON *json_body(struct MHD_Connection *c, conn *cn, enum MHD_Result *r)
{
    char msg[600];
    cJSON *req = NULL;
    qkv_error err = {0};
    const int form = cn->body && cn->len && form_body(c, cn);
    if (!cn->body || !cn->len)
        *r = serve_send_error(c, cn, 400, "the body is empty: send JSON");
    else if (!serve_utf8_valid((const unsigned char *)cn->body, cn->len))
        *r = serve_send_error(c, cn, 400, "the body is not valid UTF-8");
    else if (form && !(req = serve_form_parse(cn->body, cn->len, msg, sizeof msg)))
        *r = serve_send_error(c, cn, 400, "%s", msg);
    else if (!form && qkv_json_parse(&req, cn->body, cn->len, "the body", &err))
        *r = serve_send_error(c, cn, 400, "%s", err.msg);
    else if (!cJSON_IsObject(req))
        *r = serve_send_error(c, cn, 400, "the body must be a JSON object");
    else
        return req;
    cJSON_Delete(req);
    return NULL;
}

/* The endpoints answered with GET, and those with POST (a body); LibreTranslate's clients
 * call /languages either way. */
typedef enum { EP_NONE, EP_HEALTH, EP_METRICS, EP_MODELS, EP_SETTINGS, EP_LANGUAGES,
               EP_TRANSLATE, EP_DETECT, EP_COMPLETIONS, EP_CHAT } endpoint;

static endpoint endpoint_of(const char *url, int *get_ok, int *post_ok)
{
    static const struct {
        const char *url;
        endpoint e;
        int get, post;
    } table[] = {
        {"/health", EP_HEALTH, 1, 0},          {"/metrics", EP_METRICS, 1, 0},
        {"/v1/models", EP_MODELS, 1, 0},       {"/frontend/settings", EP_SETTINGS, 1, 0},
        {"/languages", EP_LANGUAGES, 1, 1},    {"/translate", EP_TRANSLATE, 0, 1},
        {"/detect", EP_DETECT, 0, 1},          {"/v1/completions", EP_COMPLETIONS, 0, 1},
        {"/v1/chat/completions", EP_CHAT, 1, 1},
    };
    for (size_t k = 0; k < sizeof table / sizeof *table; k++)
        if (!strcmp(url, table[k].url)) {
            *get_ok = table[k].get, *post_ok = table[k].post;
            return table[k].e;
        }
    return EP_NONE;
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
    int get_ok = 0, post_ok = 0;
    const endpoint e = endpoint_of(url, &get_ok, &post_ok);
    cn->openai = !strncmp(url, "/v1/", 4);
    if (e == EP_CHAT)
        return serve_send_error(c, cn, 404, "%s: qkv's language models are not chat models "
                                "(trained on raw text, without roles): use /v1/completions", url);
    if (e == EP_NONE) return serve_send_error(c, cn, 404, "no endpoint %s", url);
    if (!(get && get_ok) && !(post && post_ok))
        return serve_send_error(c, cn, 405, "%s %s: use %s", method, url,
                                get_ok && post_ok ? "GET or POST" : get_ok ? "GET" : "POST");
    if (cn->too_large)
        return serve_send_error(c, cn, 413, "the body is larger than %d bytes", MAX_BODY);
    switch (e) {
    case EP_HEALTH: return serve_get_health(s, c, cn, draining);
    case EP_METRICS: return serve_get_metrics(s, c, cn);
    case EP_MODELS: return serve_get_models(s, c, cn);
    case EP_SETTINGS: return serve_frontend_settings(s, c, cn);
    case EP_LANGUAGES: return serve_languages(s, c, cn);
    default: break;
    }
    if (draining) return serve_send_error(c, cn, 503, "the server is stopping");
    enum MHD_Result r = MHD_NO;
    cJSON *req = json_body(c, cn, &r);
    if (!req) return r;
    r = e == EP_TRANSLATE ? serve_post_translate(s, c, cn, req)
        : e == EP_DETECT  ? serve_detect(s, c, cn, req)
                          : serve_post_completions(s, c, cn, req);
    cJSON_Delete(req);
    return r;
}

/* After the answer went out (or the connection failed): the metrics, and the request's end. */
static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    server *s = cls;
    conn *cn = *con_cls;
    if (!cn) return;
    pending *p = pending_of(c);
    pthread_mutex_lock(&s->lock);
    if (p) p->since = serve_now(), watch_link(s, p); /* a kept-alive connection's next headers */
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
    /* connections beyond what the queue and the batch can hold are refused outright; one
     * client address may take half of them (--max-per-address 0) */
    const unsigned limit = (unsigned)(s->max_queue + s->slots + 64);
    const unsigned per_address = s->per_address > 0 ? (unsigned)s->per_address : limit / 2;
    s->stop_watch = 0;
    if (pthread_cond_init(&s->watch_wake, NULL) ||
        pthread_create(&s->watch, NULL, watch_headers, s)) {
        fprintf(stderr, "qkv serve: cannot start the thread that watches request headers\n");
        freeaddrinfo(ai);
        return NULL;
    }
    s->watching = 1;
    struct MHD_Daemon *d = MHD_start_daemon(
        flags, 0, NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_NOTIFY_CONNECTION,
        on_connection, s, MHD_OPTION_CONNECTION_LIMIT, limit,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, per_address,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)(s->timeout_s > 0 ? s->timeout_s + 5 : 0),
        MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024u, MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!d) {
        fprintf(stderr, "qkv serve: cannot listen on %s:%d: %s\n", s->host, s->port,
                strerror(errno));
        s->daemon = NULL;
        serve_http_stop(s);
        return NULL;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    *bound = di ? di->port : s->port;
    return d;
}

void serve_http_stop(server *s)
{
    if (s->daemon) MHD_stop_daemon(s->daemon); /* every connection closed: none watched */
    s->daemon = NULL;
    if (!s->watching) return;
    pthread_mutex_lock(&s->lock);
    s->stop_watch = 1;
    pthread_cond_signal(&s->watch_wake);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->watch, NULL);
    pthread_cond_destroy(&s->watch_wake);
    s->watching = 0;
}
