/* SPDX-License-Identifier: MIT */
/* The ranks of an `mpirun` job as the library's qkv_reducer (mpi_reducer.c), so that
 * `mpirun -np N qkv train ...` trains one model data-parallel; without mpirun, one process
 * as always. The library itself knows nothing of MPI: only the qkv tool links it. */
#ifndef QKV_CLI_MPI_REDUCER_H
#define QKV_CLI_MPI_REDUCER_H

#include "qkv.h"

/* Time in the gradients' sums, split at a barrier: waiting for the slowest rank to finish its
 * backward pass, then MPI_Allreduce itself (the communication). */
typedef struct {
    double wait, seconds, bytes; /* in sum_floats, and the bytes of its last call; bucketed:
                                  * seconds is the wait in finish_sums (what the backward pass
                                  * did not hide), bytes a step's */
    long calls;
    double t0;             /* MPI_Wtime at cli_ranks_open */
    double span;           /* bucketed: from a step's first start_sum to its finish_sums' end */
    double t_first, bytes_step;
} cli_sum_stats;

/* The overlapped sums' thread (mpi_reducer.c). */
typedef struct cli_overlap cli_overlap;

typedef struct {
    qkv_reducer reducer; /* rank 0 of 1 without mpirun */
    cli_overlap *overlap; /* --allreduce bucketed: the thread that drives the sums */
    int mpi;             /* MPI is initialised (the process was started by mpirun) */
    int report;          /* rank 0 prints the allreduce time at the end (not --quiet) */
    cli_sum_stats stats;
} cli_ranks;

/* Joins the job when started by mpirun (OMPI_COMM_WORLD_SIZE is set), else one rank; then
 * checks that every rank runs the same command line (rank 0's hash of argv[1..] against
 * each one's), since ranks that disagree would train different models or wait for each other
 * forever. 0, or the exit status (message printed; MPI already finalised). */
int cli_ranks_open(cli_ranks *c, int argc, char **argv);
/* --threads of a rank: `threads` when given (> 0); by default (0), under mpirun, the cores this
 * rank may use shared among the ranks on its machine (OMPI_COMM_WORLD_LOCAL_SIZE), at least 1,
 * as torchrun and Horovod do, rather than every rank starting a thread per core. */
int cli_ranks_threads(const cli_ranks *c, int threads);
/* The job's end: MPI_Finalize after success (rc 0), rank 0 first printing the gradients'
 * allreduce time per step when c->report; after a failure on a rank of several, MPI_Abort,
 * since the other ranks may be waiting for this one in a sum. Returns rc. */
int cli_ranks_close(cli_ranks *c, int rc);
/* A training command's body, run by every rank of the job (rank 0 of 1 without mpirun). */
typedef int (*cli_ranks_main)(int argc, char **argv, cli_ranks *job);
/* The whole of a training command: joins the job, runs main on this rank, ends the job with
 * main's exit status (cli_ranks_open, cli_ranks_close). */
int cli_ranks_run(int argc, char **argv, cli_ranks_main main);
/* The choices of --allreduce: flat (0), bucketed (1). */
static const char *const ALLREDUCE[] = {"flat", "bucketed", NULL};

/* --allreduce bucketed: the reducer gains start_sum and finish_sums, buckets of bucket_kb
 * KiB, and a thread that starts each bucket's MPI_Iallreduce as the backward pass hands it
 * over and drives them while the pass goes on (Open MPI advances a nonblocking collective only
 * inside MPI calls); the training thread makes no MPI call until finish_sums has waited for
 * them. Nothing to do on one rank. 0, or -1 after printing why. */
int cli_ranks_overlap(cli_ranks *job, int bucket_kb);

/* 1 on the rank that writes the run directory and speaks for the job (rank 0); the others
 * get *quiet = 1 and print only their errors. Rank 0 reports the allreduce time at the end
 * unless *quiet. */
int cli_ranks_writer(cli_ranks *job, int *quiet);

#endif
