/* SPDX-License-Identifier: MIT */
/* The library's one clock; see qkv_now_s in qkv.h. */
#include <time.h>

#include "core/internal.h"

double qkv_now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
