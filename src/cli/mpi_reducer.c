/* SPDX-License-Identifier: MIT */
/* qkv_reducer on MPI (Open MPI): the sums are MPI_Allreduce in place, the broadcasts MPI_Bcast
 * from rank 0, both in pieces of at most 2^30 elements (MPI counts are ints). MPI's default
 * error handler stays: a rank that dies (killed, out of memory) makes mpirun end the whole
 * job and say which rank, which is what a user of a stuck job needs. With --allreduce bucketed
 * the gradients' sums are nonblocking, one per bucket, driven by a thread of their own. */
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>
#include <omp.h>

#include "cli/mpi_reducer.h"

enum { PIECE = 1 << 30 };

static int sum_in_place(void *buf, size_t n, size_t size, MPI_Datatype type)
{
    for (size_t at = 0; at < n; at += PIECE) {
        const int count = (int)(n - at < PIECE ? n - at : PIECE);
        if (MPI_Allreduce(MPI_IN_PLACE, (char *)buf + at * size, count, type, MPI_SUM,
                          MPI_COMM_WORLD) != MPI_SUCCESS)
            return -1;
    }
    return 0;
}

/* The gradients' sum. The barrier first (tens of microseconds on one machine) separates the
 * wait for the slowest rank from the communication in the report. */
static int sum_floats(void *ctx, float *buf, size_t n)
{
    cli_sum_stats *s = &((cli_ranks *)ctx)->stats;
    const double t0 = MPI_Wtime();
    if (MPI_Barrier(MPI_COMM_WORLD) != MPI_SUCCESS) return -1;
    const double t1 = MPI_Wtime();
    const int rc = sum_in_place(buf, n, sizeof *buf, MPI_FLOAT);
    s->wait += t1 - t0, s->seconds += MPI_Wtime() - t1;
    s->bytes = (double)n * sizeof *buf, s->calls++;
    return rc;
}

/* ---- the overlapped sums ----------------------------------------------------------------- */

struct cli_overlap {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake, idle;
    struct { float *buf; size_t n; } *queue; /* handed over, not yet started */
    int queued, cap;
    MPI_Request *req;  /* started, maybe not finished */
    int active, req_cap;
    int quit, failed, started;
    cli_sum_stats *stats;
};

/* Starts the queued sums (the lock held), in the order they came. */
static void start_queued(cli_overlap *o)
{
    for (int q = 0; q < o->queued; q++)
        for (size_t at = 0; at < o->queue[q].n; at += PIECE) {
            const int count = (int)(o->queue[q].n - at < PIECE ? o->queue[q].n - at : PIECE);
            if (o->active == o->req_cap) {
                MPI_Request *r = realloc(o->req, (size_t)(2 * o->req_cap + 8) * sizeof *r);
                if (!r) {
                    o->failed = 1;
                    continue;
                }
                o->req = r, o->req_cap = 2 * o->req_cap + 8;
            }
            if (MPI_Iallreduce(MPI_IN_PLACE, o->queue[q].buf + at, count, MPI_FLOAT, MPI_SUM,
                               MPI_COMM_WORLD, &o->req[o->active]) != MPI_SUCCESS)
                o->failed = 1;
            else
                o->active++;
        }
    o->queued = 0;
}

/* The thread: starts what is handed over, drives what runs (MPI_Testall, then a pause of
 * 50 us: polling without the pause would take a core from the backward pass), and says when
 * nothing is left. */
static void *overlap_thread(void *arg)
{
    cli_overlap *o = arg;
    pthread_mutex_lock(&o->lock);
    while (!o->quit) {
        start_queued(o);
        if (o->active) {
            int done = 0;
            pthread_mutex_unlock(&o->lock);
            const int bad = MPI_Testall(o->active, o->req, &done, MPI_STATUSES_IGNORE) !=
                            MPI_SUCCESS;
            if (!done && !bad) nanosleep(&(struct timespec){0, 50000}, NULL);
            pthread_mutex_lock(&o->lock);
            if (done || bad) o->active = 0, o->failed |= bad;
            continue;
        }
        pthread_cond_broadcast(&o->idle);
        pthread_cond_wait(&o->wake, &o->lock);
    }
    pthread_mutex_unlock(&o->lock);
    return NULL;
}

static int start_sum(void *ctx, float *buf, size_t n)
{
    cli_overlap *o = ((cli_ranks *)ctx)->overlap;
    pthread_mutex_lock(&o->lock);
    if (o->queued == o->cap) {
        void *q = realloc(o->queue, (size_t)(2 * o->cap + 8) * sizeof *o->queue);
        if (!q) {
            pthread_mutex_unlock(&o->lock);
            return -1;
        }
        o->queue = q, o->cap = 2 * o->cap + 8;
    }
    if (!o->started) o->started = 1, o->stats->t_first = qkv_now_s();
    o->queue[o->queued].buf = buf, o->queue[o->queued++].n = n;
    o->stats->bytes_step += (double)n * sizeof *buf;
    pthread_cond_signal(&o->wake);
    pthread_mutex_unlock(&o->lock);
    return 0;
}

/* Waits for every sum started; the time waited here is the communication the backward pass
 * did not hide. */
static int finish_sums(void *ctx)
{
    cli_ranks *c = ctx;
    cli_overlap *o = c->overlap;
    cli_sum_stats *s = &c->stats;
    const double t0 = qkv_now_s();
    pthread_mutex_lock(&o->lock);
    while (o->queued || o->active) pthread_cond_wait(&o->idle, &o->lock);
    const int failed = o->failed;
    o->failed = 0, o->started = 0;
    pthread_mutex_unlock(&o->lock);
    const double t1 = qkv_now_s();
    s->seconds += t1 - t0, s->span += t1 - (s->t_first ? s->t_first : t0), s->calls++;
    s->t_first = 0.0;
    s->bytes = s->bytes_step, s->bytes_step = 0.0;
    return failed ? -1 : 0;
}

int cli_ranks_overlap(cli_ranks *c, int bucket_kb)
{
    if (c->reducer.size < 2) return 0;
    int level = MPI_THREAD_SINGLE;
    MPI_Query_thread(&level);
    cli_overlap *o = calloc(1, sizeof *o);
    if (level < MPI_THREAD_SERIALIZED || !o) {
        fprintf(stderr, "qkv: --allreduce bucketed needs MPI_THREAD_SERIALIZED (this MPI gives "
                "%d) and a little memory\n", level);
        free(o);
        return -1;
    }
    pthread_mutex_init(&o->lock, NULL);
    pthread_cond_init(&o->wake, NULL), pthread_cond_init(&o->idle, NULL);
    o->stats = &c->stats;
    if (pthread_create(&o->thread, NULL, overlap_thread, o)) {
        fprintf(stderr, "qkv: cannot start the allreduce thread\n");
        free(o);
        return -1;
    }
    c->overlap = o;
    c->reducer.start_sum = start_sum, c->reducer.finish_sums = finish_sums;
    c->reducer.ctx = c, c->reducer.bucket_bytes = (size_t)bucket_kb << 10;
    return 0;
}

/* Stops the thread (nothing is running between steps). */
static void overlap_stop(cli_ranks *c)
{
    cli_overlap *o = c->overlap;
    if (!o) return;
    pthread_mutex_lock(&o->lock);
    o->quit = 1;
    pthread_cond_signal(&o->wake);
    pthread_mutex_unlock(&o->lock);
    pthread_join(o->thread, NULL);
    pthread_mutex_destroy(&o->lock);
    pthread_cond_destroy(&o->wake), pthread_cond_destroy(&o->idle);
    free(o->queue), free(o->req), free(o);
    c->overlap = NULL;
}

static int sum_doubles(void *ctx, double *buf, size_t n)
{
    (void)ctx;
    return sum_in_place(buf, n, sizeof *buf, MPI_DOUBLE);
}

static int broadcast(void *ctx, void *buf, size_t bytes)
{
    (void)ctx;
    for (size_t at = 0; at < bytes; at += PIECE) {
        const int count = (int)(bytes - at < PIECE ? bytes - at : PIECE);
        if (MPI_Bcast((char *)buf + at, count, MPI_BYTE, 0, MPI_COMM_WORLD) != MPI_SUCCESS)
            return -1;
    }
    return 0;
}

/* FNV-1a over the arguments after the program's name (whose path may differ by machine),
 * each with its terminating NUL so that "ab" "c" and "a" "bc" differ. */
static uint64_t arguments_hash(int argc, char **argv)
{
    uint64_t h = 14695981039346656037ull;
    for (int i = 1; i < argc; i++)
        for (const char *s = argv[i];; s++) {
            h = (h ^ (unsigned char)*s) * 1099511628211ull;
            if (!*s) break;
        }
    return h;
}

int cli_ranks_open(cli_ranks *c, int argc, char **argv)
{
    memset(c, 0, sizeof *c);
    c->reducer = (qkv_reducer){0, 1, sum_floats, sum_doubles, broadcast, c, NULL, NULL, 0};
    if (!getenv("OMPI_COMM_WORLD_SIZE")) return 0; /* not started by mpirun: one rank */
    int level; /* serialized: --allreduce bucketed sums in a thread of its own (checked there) */
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &level) != MPI_SUCCESS) {
        fprintf(stderr, "qkv: MPI_Init failed\n");
        return 1;
    }
    c->mpi = 1;
    c->stats.t0 = MPI_Wtime();
    MPI_Comm_rank(MPI_COMM_WORLD, &c->reducer.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &c->reducer.size);
    uint64_t mine = arguments_hash(argc, argv), rank0 = mine;
    MPI_Bcast(&rank0, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    int differs = mine != rank0, ranks_differing = 0;
    MPI_Allreduce(&differs, &ranks_differing, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (!ranks_differing) return 0;
    if (differs)
        fprintf(stderr, "qkv: rank %d of %d was started with other options than rank 0\n",
                c->reducer.rank, c->reducer.size);
    MPI_Barrier(MPI_COMM_WORLD); /* those lines first, then rank 0's verdict */
    if (c->reducer.rank == 0)
        fprintf(stderr, "qkv: %d of %d ranks have options that differ from rank 0's; every "
                "rank must run the same command line; stopping\n", ranks_differing,
                c->reducer.size);
    MPI_Finalize();
    c->mpi = 0;
    return 2;
}

int cli_ranks_threads(const cli_ranks *c, int threads)
{
    if (threads > 0 || c->reducer.size < 2) return threads;
    const char *local = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    const int here = local ? atoi(local) : 1, cores = omp_get_num_procs();
    const int share = here > 1 ? cores / here : cores;
    return share > 1 ? share : 1;
}

int cli_ranks_close(cli_ranks *c, int rc)
{
    if (!c->mpi) return rc;
    c->mpi = 0;
    overlap_stop(c);
    if (rc && c->reducer.size > 1) {
        fprintf(stderr, "qkv: rank %d of %d failed (status %d); ending the job\n",
                c->reducer.rank, c->reducer.size, rc);
        MPI_Abort(MPI_COMM_WORLD, rc);
    }
    const cli_sum_stats *s = &c->stats;
    if (c->report && c->reducer.rank == 0 && s->calls > 0 && c->reducer.start_sum)
        fprintf(stderr, "qkv: gradient allreduce over %d ranks, bucketed (%zu KiB): %.2f ms per "
                "step waited after the backward pass (%.1f MB, %ld steps), %.1f%% of the run's "
                "%.1f s; the sums ran %.2f ms per step from the first bucket\n", c->reducer.size,
                c->reducer.bucket_bytes >> 10, 1e3 * s->seconds / (double)s->calls,
                s->bytes / 1e6, s->calls, 100.0 * s->seconds / (MPI_Wtime() - s->t0),
                MPI_Wtime() - s->t0, 1e3 * s->span / (double)s->calls);
    else if (c->report && c->reducer.rank == 0 && s->calls > 0)
        fprintf(stderr, "qkv: gradient allreduce over %d ranks: %.2f ms per step (%.1f MB, %ld "
                "steps), %.1f%% of the run's %.1f s; rank 0 waited %.2f ms per step for the "
                "slowest rank before it\n", c->reducer.size, 1e3 * s->seconds / (double)s->calls,
                s->bytes / 1e6, s->calls, 100.0 * s->seconds / (MPI_Wtime() - s->t0),
                MPI_Wtime() - s->t0, 1e3 * s->wait / (double)s->calls);
    MPI_Finalize();
    return rc;
}

int cli_ranks_run(int argc, char **argv, cli_ranks_main main)
{
    cli_ranks job;
    const int rc = cli_ranks_open(&job, argc, argv);
    return rc ? rc : cli_ranks_close(&job, main(argc, argv, &job));
}

int cli_ranks_writer(cli_ranks *job, int *quiet)
{
    const int writer = job->reducer.rank == 0;
    if (!writer) *quiet = 1;
    job->report = !*quiet;
    return writer;
}
