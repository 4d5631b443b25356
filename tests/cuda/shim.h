/* SPDX-License-Identifier: MIT */
/* A stand-in for the CUDA runtime, cuBLAS and the kernels of ops/cuda (kernels.h) that runs on
 * the CPU, so that backend/cuda.c, compiled against the real CUDA headers, and the models
 * above it run where there is no GPU (tests/unit/test_cuda_host.c).
 *
 *   memory      cudaMalloc hands out pieces of one region that the host cannot touch
 *               (PROT_NONE): host code that reads or writes device memory directly, instead
 *               of through a transfer, dies there. The shim's own kernels, copies and GEMMs
 *               open the region for the length of the call.
 *   kernels     each launcher runs the library's CPU kernel of the same meaning; cuBLAS's
 *               products are computed from their documented column-major definition.
 *   faults      the n-th call of a kind fails as the real thing would: cudaMalloc with
 *               cudaErrorMemoryAllocation, a launch with a sticky launch failure, a cuBLAS
 *               call with CUBLAS_STATUS_EXECUTION_FAILED, a copy with an error; and
 *               cudaGetDeviceCount with a chosen error (no driver, no device).
 *   counts      allocations live, transfers up and down (calls and bytes), launches.
 * The state is one global: the CUDA runtime's API has no handle to hang it on. */
#ifndef QKV_TESTS_CUDA_SHIM_H
#define QKV_TESTS_CUDA_SHIM_H

#include <cuda_runtime_api.h>
#include <stddef.h>

typedef struct {
    /* faults: the n-th call (counted from 1 since shim_reset) fails; 0: none */
    int fail_malloc_at, fail_launch_at, fail_blas_at, fail_copy_at, fail_blas_create;
    cudaError_t device_error; /* cudaGetDeviceCount's answer (cudaSuccess: one GPU) */
    /* counts since shim_reset */
    int mallocs, launches, blas_calls, copies;
    int uploads, downloads;           /* cudaMemcpy host to device, device to host */
    size_t upload_bytes, download_bytes;
    int misuse; /* host memory given to a kernel or freed as device memory, a copy whose
                 * direction contradicts its pointers: a test requires none */
    /* now */
    int live;                         /* allocations not freed */
    size_t live_bytes;
} cuda_shim;

extern cuda_shim shim;

/* Counts and faults back to zero (live allocations stay what they are). */
void shim_reset(void);
/* Whether p lies in device memory the shim handed out and has not taken back. */
int shim_is_device(const void *p);
/* The size of the live allocation at p, 0 if none starts there. */
size_t shim_size_of(const void *p);

#endif
