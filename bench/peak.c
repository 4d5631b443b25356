/* SPDX-License-Identifier: MIT */
/* The arithmetic roofs of this CPU, for docs/benchmarks/pytorch.md: AVX-512 FMA (float32) and
 * VDPBF16PS (bf16 pairs into float32) issued back to back on independent accumulators, no
 * memory traffic, on every OpenMP thread at once. Prints GFLOP/s (2 per multiply-add) of wall
 * time and per CPU-second (the latter stays meaningful on a shared machine: the same fraction
 * of a GEMM's CPU time can be compared with it).
 *
 *   make build/peak && OMP_NUM_THREADS=2 build/peak
 *
 * Twelve accumulators cover the instructions' latency (4-6 cycles) times two pipes. */
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <time.h>

#define CHAINS 12

static double seconds(clockid_t clock)
{
    struct timespec t;
    clock_gettime(clock, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* `reps` rounds of CHAINS instructions; returns a value that depends on every accumulator so
 * the compiler keeps them. */
__attribute__((target("avx512f,avx512bf16"))) static float spin(int bf16, long reps)
{
    __m512 c[CHAINS];
    for (int i = 0; i < CHAINS; i++) c[i] = _mm512_set1_ps(1e-9f * (float)i);
    const __m512 x = _mm512_set1_ps(1.0f), y = _mm512_set1_ps(1e-9f);
    const __m512bh a = (__m512bh)_mm512_set1_epi32(0x3f803f80);  /* (1, 1) */
    const __m512bh b = (__m512bh)_mm512_set1_epi32(0x00010001);  /* two tiny values */
    if (bf16)
        for (long r = 0; r < reps; r++) {
            #pragma GCC unroll 12
            for (int i = 0; i < CHAINS; i++) c[i] = _mm512_dpbf16_ps(c[i], a, b);
        }
    else
        for (long r = 0; r < reps; r++) {
            #pragma GCC unroll 12
            for (int i = 0; i < CHAINS; i++) c[i] = _mm512_fmadd_ps(c[i], x, y);
        }
    float s = 0;
    for (int i = 0; i < CHAINS; i++) s += _mm512_reduce_add_ps(c[i]);
    return s;
}

int main(void)
{
    const long reps = 100000000;
    for (int bf16 = 0; bf16 < 2; bf16++) {
        double cpu = 0, wall = seconds(CLOCK_MONOTONIC);
        float sink = 0;
        #pragma omp parallel reduction(+ : cpu, sink)
        {
            double t0 = seconds(CLOCK_THREAD_CPUTIME_ID);
            sink += spin(bf16, reps);
            cpu += seconds(CLOCK_THREAD_CPUTIME_ID) - t0;
        }
        wall = seconds(CLOCK_MONOTONIC) - wall;
        /* flops per instruction: 16 lanes x 2 (FMA) or 16 lanes x 2 pairs x 2 (VDPBF16PS) */
        const double flops = (double)omp_get_max_threads() * reps * CHAINS * (bf16 ? 64 : 32);
        printf("{\"peak\": \"%s\", \"threads\": %d, \"gflops\": %.1f, \"gflops_per_cpu_s\": %.1f, "
               "\"sink\": %g}\n", bf16 ? "vdpbf16ps" : "fma", omp_get_max_threads(),
               flops / wall * 1e-9, flops / cpu * 1e-9, (double)sink);
    }
    return 0;
}
