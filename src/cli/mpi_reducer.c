/* SPDX-License-Identifier: MIT */
/* qkv_reducer on MPI (Open MPI): the sums are MPI_Allreduce in place, the broadcasts MPI_Bcast
 * from rank 0, both in pieces of at most 2^30 elements (MPI counts are ints). MPI's default
 * error handler stays: a rank that dies (killed, out of memory) makes mpirun end the whole
 * job and say which rank, which is what a user of a stuck job needs. */
#include <limits.h>
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
    cli_sum_stats *s = ctx;
    const double t0 = MPI_Wtime();
    if (MPI_Barrier(MPI_COMM_WORLD) != MPI_SUCCESS) return -1;
    const double t1 = MPI_Wtime();
    const int rc = sum_in_place(buf, n, sizeof *buf, MPI_FLOAT);
    s->wait += t1 - t0, s->seconds += MPI_Wtime() - t1;
    s->bytes = (double)n * sizeof *buf, s->calls++;
    return rc;
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
    c->reducer = (qkv_reducer){0, 1, sum_floats, sum_doubles, broadcast, &c->stats};
    if (!getenv("OMPI_COMM_WORLD_SIZE")) return 0; /* not started by mpirun: one rank */
    if (MPI_Init(NULL, NULL) != MPI_SUCCESS) {
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
    if (rc && c->reducer.size > 1) {
        fprintf(stderr, "qkv: rank %d of %d failed (status %d); ending the job\n",
                c->reducer.rank, c->reducer.size, rc);
        MPI_Abort(MPI_COMM_WORLD, rc);
    }
    const cli_sum_stats *s = &c->stats;
    if (c->report && c->reducer.rank == 0 && s->calls > 0)
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
