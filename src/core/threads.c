/* SPDX-License-Identifier: MIT */
/* One thread count for our OpenMP kernels and for OpenBLAS (its OpenMP build reads the same
 * runtime, and runs single-threaded when called inside one of our parallel regions), and the
 * check that the OpenBLAS loaded is that build. */
#define _GNU_SOURCE /* dladdr */
#include <dlfcn.h>
#include <omp.h>

#include "core/internal.h"

void openblas_set_num_threads(int num_threads);
int openblas_get_parallel(void); /* 0 sequential, 1 pthreads, 2 OpenMP */

void qkv_set_threads(int n)
{
    if (n <= 0) return;
    omp_set_num_threads(n);
    openblas_set_num_threads(n);
}

int qkv_get_threads(void) { return omp_get_max_threads(); }

qkv_status qkv_blas_check(qkv_error *err)
{
    int model = openblas_get_parallel();
    if (model == 2) return QKV_OK;
    /* the file the dynamic loader took libopenblas.so.0 from */
    Dl_info info;
    const char *file = dladdr((void *)openblas_get_parallel, &info) && info.dli_fname
                           ? info.dli_fname
                           : "linked statically";
    if (model == 1)
        return qkv_fail(err, QKV_ERR_ARG,
                        "the OpenBLAS loaded is its pthreads build (%s), but qkv needs its "
                        "OpenMP build: with the pthreads one, two thread pools compete for the "
                        "cores and results change with the thread count. Install "
                        "libopenblas0-openmp, and keep other OpenBLAS builds out of "
                        "LD_LIBRARY_PATH and LD_PRELOAD (qkv is linked to look in the OpenMP "
                        "build's directory first)",
                        file);
    return qkv_fail(err, QKV_ERR_ARG,
                    "the OpenBLAS loaded is its %s build (%s), but qkv needs its OpenMP build, "
                    "which shares qkv's threads. Install libopenblas0-openmp, and keep other "
                    "OpenBLAS builds out of LD_LIBRARY_PATH and LD_PRELOAD (qkv is linked to "
                    "look in the OpenMP build's directory first)",
                    model == 0 ? "sequential" : "unknown (not sequential, pthreads or OpenMP)",
                    file);
}
