/* SPDX-License-Identifier: MIT */
/* qkv serve's metrics (serve.h): requests by status, their latency, tokens, the batch's size
 * per step and the queue, as Prometheus text on GET /metrics. */
#include <stdio.h>
#include <stdlib.h>

#include "cli/serve.h"

/* The latency histogram's upper bounds (seconds) and the statuses counted one by one (any
 * other: "other"). */
static const double BUCKETS[N_BUCKETS] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5,
                                          10, 30};
static const int CODES[N_CODES] = {200, 400, 404, 405, 413, 500, 503, 504};

void serve_count(server *s, int code, double seconds)
{
    int k = 0;
    while (k < N_CODES && CODES[k] != code) k++;
    s->by_code[k]++;
    int b = 0;
    while (b < N_BUCKETS && seconds > BUCKETS[b]) b++;
    s->latency[b]++, s->latency_count++, s->latency_sum += seconds;
}

enum MHD_Result serve_get_metrics(server *s, struct MHD_Connection *c, conn *cn)
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
    OUT("# HELP qkv_connections_cut_total Connections closed because their request headers "
        "took longer than --header-timeout.\n"
        "# TYPE qkv_connections_cut_total counter\nqkv_connections_cut_total %lu\n",
        s->headers_cut);
    OUT("# HELP qkv_batch_slots Slots of the running batch (--max-batch-size).\n"
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
    return serve_send_text(c, cn, 200, t, "text/plain; version=0.0.4", 0);
}

