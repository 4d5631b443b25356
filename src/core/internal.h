/* SPDX-License-Identifier: MIT */
/* Private helpers shared by the library's source files. Not part of the API. */
#ifndef QKV_INTERNAL_H
#define QKV_INTERNAL_H

#include <cblas.h>
#include <math.h>
#include <stddef.h>

#include "core/random_stream.h"
#include "qkv.h"

/* Fill err (if not NULL) with code and a printf-style message; returns code. */
qkv_status qkv_fail(qkv_error *err, qkv_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* QKV_OK unless path names a device, FIFO or socket: qkv writes a file by renaming a new
 * one over it, which would replace such a node (as root, `--out /dev/null` would become a
 * regular file) instead of writing to it. A missing path, a regular file, a symbolic link
 * (replaced, never followed) and a directory (refused by the rename) pass. */
qkv_status replaceable_target(const char *path, qkv_error *err);

/* A new file next to path, for writing and then renaming over it: path.tmp.PID.K, the one name
 * every writer of qkv gives its temporaries (a run directory's claim removes those whose PID
 * is gone), K the first free from 0, created exclusively with permissions mode (less the
 * umask). Returns its descriptor and *tmp (malloc'd), or -1 with errno set. */
int create_temporary(const char *path, unsigned mode, char **tmp);

/* path opened for reading as qkv_open_file opens a regular file (never waiting on a FIFO,
 * refusing anything but a regular file), as a descriptor the caller closes; *size: its size
 * in bytes. For readers that seek (safetensors): QKV_ERR_IO naming path otherwise. */
qkv_status open_regular(const char *path, int *fd, uint64_t *size, qkv_error *err);

/* Row-major C = alpha * op(A) op(B) + beta * C, with op(X) = X or X^T: a thin name for
 * cblas_sgemm so the math reads as "C (M,N) = A (M,K) B (K,N)". */
static inline void gemm(int transA, int transB, int M, int N, int K, float alpha,
                        const float *A, int lda, const float *B, int ldb, float beta, float *C,
                        int ldc)
{
    cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans,
                transB ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C,
                ldc);
}

/* The stream for one purpose of a run: value(seed, purpose, index) mixes all three, so the
 * streams of initialisation, data order and dropout never share numbers, whatever the seed
 * (arithmetic on the seed, such as seed * k + i, let the stream of tensor i's initialisation
 * be that of epoch i - 1's shuffle when the seed was 0). */
enum { STREAM_INIT = 1, STREAM_ORDER, STREAM_BATCHES, STREAM_DROPOUT, STREAM_WINDOWS };

static inline uint64_t stream_of(uint64_t seed, uint64_t purpose, uint64_t index)
{
    return splitmix64_mix(splitmix64_mix(seed ^ (purpose * 0xd1b54a32d192ed03ULL)) ^
                          (index * 0x9e3779b97f4a7c15ULL + purpose));
}

/* A uniform float in [0, 1) from the top 24 bits. */
static inline float random_uniform(uint64_t seed, uint64_t i)
{
    return (float)(random_u32(seed, i) >> 8) * (1.0f / 16777216.0f);
}

/* Whether element i of a dropout stream is kept: u(seed, offset + i) >= p. */
static inline int dropout_keep(float p, uint64_t seed, uint64_t i)
{
    return random_uniform(seed, i) >= p;
}


#endif
