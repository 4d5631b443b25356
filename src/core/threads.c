/* One thread count for our OpenMP kernels and for OpenBLAS (its OpenMP build reads the same
 * runtime, and runs single-threaded when called inside one of our parallel regions). */
#include <omp.h>

#include "core/internal.h"

void openblas_set_num_threads(int num_threads);

void qkv_set_threads(int n)
{
    if (n <= 0) return;
    omp_set_num_threads(n);
    openblas_set_num_threads(n);
}

int qkv_get_threads(void) { return omp_get_max_threads(); }
