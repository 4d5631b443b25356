/* SPDX-License-Identifier: MIT */
/* Shared helpers for qkv's tests: tolerance checks that fail the running cmocka test,
 * finite-difference gradient checks, and access to PyTorch reference files. */
#ifndef QKV_TEST_UTIL_H
#define QKV_TEST_UTIL_H

#include <setjmp.h> /* cmocka needs these before its header */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "qkv.h"

/* Forward tolerance of the parity tests: |got - want| <= atol + rtol |want| elementwise. */
#define TU_FWD_ATOL 1e-5f
#define TU_FWD_RTOL 1e-5f
/* Gradient tolerance: max |got - want| <= TU_GRAD_REL * max |want| per tensor. */
#define TU_GRAD_REL 1e-4f

/* Fails the current test (naming the tensor and the worst element) unless every element
 * satisfies |got - want| <= atol + rtol |want|; NaN anywhere fails. */
void tu_check_close(const char *name, const float *got, const float *want, size_t n,
                    float atol, float rtol);
/* Fails unless max |got - want| <= rel * max |want| (and everything is finite). */
void tu_check_grad(const char *name, const float *got, const float *want, size_t n, float rel);
/* Fails unless every value is finite. */
void tu_check_finite(const char *name, const float *x, size_t n);

/* A scalar loss of the current parameters, recomputed by a finite-difference check. */
typedef double (*tu_loss_fn)(void *ctx);

/* L = sum_i out[i] * r[i] in double: the loss whose gradient w.r.t. out is r. */
double tu_dot(const float *out, const float *r, size_t n);

/* Central differences dL/dx[i] = (L(x + h e_i) - L(x - h e_i)) / 2h on up to max_checks
 * elements of x (spread over the tensor), compared with analytic[i]:
 * |num - ana| <= tol * max(max|analytic|, 1e-2) must hold. Fails the test otherwise. */
void tu_gradcheck(const char *name, float *x, size_t n, const float *analytic, tu_loss_fn loss,
                  void *ctx, float h, float tol, int max_checks);

/* The central-difference step and tolerance every gradient check in the suite uses: inputs are
 * O(1) floats, so h = 1e-2 keeps float rounding of the loss (~1e-6 relative) far below the
 * difference while the O(h^2) truncation error stays ~1e-4. */
#define TU_FD_STEP 1e-2f
#define TU_FD_TOL 1e-2f

/* Reference tensors written by tests/parity/make_reference.py, in $QKV_PARITY_DIR/<name>.safetensors.
 * Fails the test if the file cannot be loaded. */
void tu_reference_load(qkv_tensor_file *f, const char *name);
/* The float tensor `name` of f (fails the test if missing or not float32). */
const float *tu_ref_f32(const qkv_tensor_file *f, const char *name, size_t *numel);
/* The int32 tensor `name` of f (fails the test if missing or not int32). */
const int *tu_ref_i32(const qkv_tensor_file *f, const char *name, size_t *numel);
/* An integer metadata value of f (fails the test if missing). */
int tu_ref_int(const qkv_tensor_file *f, const char *key);
/* A float metadata value of f (fails the test if missing). */
float tu_ref_float(const qkv_tensor_file *f, const char *key);

/* ---- training tests' fixtures ---- */

/* A copy task: up to TU_COPY_MAX pairs of TU_COPY_T positions, and the dataset over them. */
enum { TU_COPY_T = 10, TU_COPY_MAX = 160 };
typedef struct {
    int src[TU_COPY_MAX * TU_COPY_T], src_valid[TU_COPY_MAX];
    int tgt[TU_COPY_MAX * TU_COPY_T], tgt_valid[TU_COPY_MAX];
    qkv_dataset d;
} tu_copy_data;
/* n pairs from seed: sources of 1..8 tokens drawn from the V - 4 that are not reserved, each
 * target its source, then <eos>, padded. */
void tu_copy_task(tu_copy_data *x, int n, int V, uint64_t seed);
/* An encoder-decoder of one block each side, d_model 16, 2 heads, ffn 32, max_len 16, over
 * vocabularies of V tokens, initialised from seed. */
qkv_transformer *tu_small_transformer(int V, float dropout, uint64_t seed);
/* A new directory /tmp/PREFIX_XXXXXX, its name into dir (cap bytes); and rm -rf of one. */
void tu_temp_dir(char *dir, size_t cap, const char *prefix);
void tu_remove_tree(const char *dir);

/* calloc that fails the test instead of returning NULL. */
float *tu_zeros(size_t n);
/* malloc + uniform(-1, 1) fill from seed. */
float *tu_rand(size_t n, uint64_t seed);
/* A copy of n floats. */
float *tu_copy(const float *x, size_t n);

#endif
