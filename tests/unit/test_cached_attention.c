/* SPDX-License-Identifier: MIT */
/* The decoding step's attention (src/ops/cpu/cached_attention.c): one query per row over
 * a key-value cache, against qkv_attention_forward with n = 1 and the same valid length, for
 * rows that read other rows of the cache (beam search's hypotheses reading their sentence's
 * encoder output), lengths 0 (no visible key: output 0), partial and full, head sizes with
 * and without a tail past the 8-lane sums, few rows (split by heads) and many (by rows),
 * enough work to be split across threads, and keys gathered position by position from
 * different cache rows (beam search). A bf16 cache against the float32 one, within the bound
 * that rounding each cached value to bf16 allows. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/cpu/cached_attention.h"
#include "ops/cpu/bf16.h"
#include "test_util.h"

/* The kernel over the layouts these tests build: query b reads cache row row[b] (row NULL: b)
 * and sees the len[row[b]] keys of that row (len NULL: m), or with ancestry its position j in
 * cache row ancestry[b * ld + j], m keys. */
static void attend(float *O, float *S, const float *Q, const void *K, const void *V,
                   kv_dtype type, size_t stride, int B, int H, int d, int m, const int *row,
                   const int *len, const int *ancestry, int ld)
{
    int *rows = calloc((size_t)B, sizeof *rows), *lens = calloc((size_t)B, sizeof *lens);
    for (int b = 0; b < B; b++) {
        rows[b] = row ? row[b] : b;
        lens[b] = !ancestry && len ? len[rows[b]] : m;
    }
    const kv_view kv = {K, V, type, stride, ancestry ? KV_ANCESTRY : KV_ROWS, rows, ancestry, ld,
                        lens};
    cached_attention(O, S, Q, &kv, B, H, d, m);
    free(rows), free(lens);
}

static void check_case(int B, int H, int d, int m, int cache_rows, int cap)
{
    const int C = H * d;
    const size_t stride = (size_t)cap * C; /* a cache row holds cap positions */
    float *Q = tu_rand((size_t)B * C, 1), *K = tu_rand((size_t)cache_rows * stride, 2);
    float *V = tu_rand((size_t)cache_rows * stride, 3);
    for (size_t i = 0; i < (size_t)B * C; i++) Q[i] *= 3.0f; /* sharper weights */
    int *row = calloc((size_t)B, sizeof *row), *len = calloc((size_t)cache_rows, sizeof *len);
    for (int b = 0; b < B; b++) row[b] = (b * 7 + 3) % cache_rows;
    for (int r = 0; r < cache_rows; r++) len[r] = r == 0 ? 0 : r == 1 ? m : 1 + (r * 5) % m;
    float *O = tu_rand((size_t)B * C, 4), *S = tu_rand((size_t)B * H * m, 5);
    attend(O, S, Q, K, V, KV_FP32, stride, B, H, d, m, row, len, NULL, 0);
    float *O_ref = tu_zeros((size_t)C), *P_ref = tu_zeros((size_t)H * m);
    for (int b = 0; b < B; b++) {
        const int r = row[b];
        qkv_mask mask = {&len[r], 0, 0};
        qkv_attention_forward(O_ref, P_ref,
                              &(qkv_attention_inputs){Q + (size_t)b * C, K + r * stride,
                                                      V + r * stride},
                              &(qkv_attention_shape){1, H, 1, m, d, d}, &mask,
                              (qkv_dropout){0.0f, 0, 0}, NULL);
        tu_check_close("O", O + (size_t)b * C, O_ref, (size_t)C, TU_FWD_ATOL, TU_FWD_RTOL);
        tu_check_close("weights", S + (size_t)b * H * m, P_ref, (size_t)H * m, TU_FWD_ATOL,
                       TU_FWD_RTOL);
        if (len[r] == 0)
            for (int i = 0; i < C; i++) assert_true(O[(size_t)b * C + i] == 0.0f);
    }
    free(Q), free(K), free(V), free(row), free(len), free(O), free(S), free(O_ref), free(P_ref);
}

static void test_matches_attention_forward(void **state)
{
    (void)state;
    check_case(5, 3, 13, 11, 4, 16); /* d past 8 lanes, m not a multiple of 4 */
    check_case(3, 2, 8, 1, 2, 1);    /* one key */
    check_case(2, 8, 64, 257, 3, 300); /* a decoder's shape, heads split across threads */
    check_case(6, 8, 64, 130, 3, 140); /* rows split across threads */
    check_case(1, 1, 3, 6, 3, 6);    /* d below one vector */
}

/* No row map and no lengths: row b reads cache row b, every key. */
static void test_defaults(void **state)
{
    (void)state;
    const int B = 2, H = 2, d = 9, m = 7, C = H * d;
    float *Q = tu_rand((size_t)B * C, 6), *K = tu_rand((size_t)B * m * C, 7);
    float *V = tu_rand((size_t)B * m * C, 8), *O = tu_zeros((size_t)B * C);
    float *S = tu_zeros((size_t)B * H * m), *O_ref = tu_zeros((size_t)B * C);
    float *P_ref = tu_zeros((size_t)B * H * m);
    attend(O, S, Q, K, V, KV_FP32, (size_t)m * C, B, H, d, m, NULL, NULL, NULL, 0);
    qkv_attention_forward(O_ref, P_ref, &(qkv_attention_inputs){Q, K, V},
                          &(qkv_attention_shape){B, H, 1, m, d, d}, NULL, (qkv_dropout){0.0f, 0, 0},
                          NULL);
    tu_check_close("O", O, O_ref, (size_t)B * C, TU_FWD_ATOL, TU_FWD_RTOL);
    tu_check_close("weights", S, P_ref, (size_t)B * H * m, TU_FWD_ATOL, TU_FWD_RTOL);
    free(Q), free(K), free(V), free(O), free(S), free(O_ref), free(P_ref);
}

/* With slots, position j of row b comes from cache row slots[b][j] (beam search's shared
 * prefixes): the same as attending over those keys gathered into one row. */
static void test_slots(void **state)
{
    (void)state;
    const int B = 6, H = 4, d = 13, m = 10, cap = 12, cache_rows = 5, C = H * d, ld = cap;
    const size_t stride = (size_t)cap * C;
    float *Q = tu_rand((size_t)B * C, 9), *K = tu_rand((size_t)cache_rows * stride, 10);
    float *V = tu_rand((size_t)cache_rows * stride, 11);
    int *slots = malloc((size_t)B * ld * sizeof *slots);
    for (int b = 0; b < B; b++)
        for (int j = 0; j < ld; j++)
            slots[b * ld + j] = (int)(qkv_random_u32(12, (uint64_t)b * ld + j) % cache_rows);
    float *O = tu_zeros((size_t)B * C), *S = tu_zeros((size_t)B * H * m);
    attend(O, S, Q, K, V, KV_FP32, stride, B, H, d, m, NULL, NULL, slots, ld);
    float *Kg = tu_zeros((size_t)m * C), *Vg = tu_zeros((size_t)m * C);
    float *O_ref = tu_zeros((size_t)C), *P_ref = tu_zeros((size_t)H * m);
    for (int b = 0; b < B; b++) {
        for (int j = 0; j < m; j++) {
            const size_t from = slots[b * ld + j] * stride + (size_t)j * C;
            memcpy(Kg + (size_t)j * C, K + from, (size_t)C * sizeof *Kg);
            memcpy(Vg + (size_t)j * C, V + from, (size_t)C * sizeof *Vg);
        }
        qkv_attention_forward(O_ref, P_ref, &(qkv_attention_inputs){Q + (size_t)b * C, Kg, Vg},
                              &(qkv_attention_shape){1, H, 1, m, d, d}, NULL,
                              (qkv_dropout){0.0f, 0, 0}, NULL);
        tu_check_close("O", O + (size_t)b * C, O_ref, (size_t)C, TU_FWD_ATOL, TU_FWD_RTOL);
        tu_check_close("weights", S + (size_t)b * H * m, P_ref, (size_t)H * m, TU_FWD_ATOL,
                       TU_FWD_RTOL);
    }
    free(Q), free(K), free(V), free(slots), free(O), free(S), free(Kg), free(Vg), free(O_ref);
    free(P_ref);
}

/* ---- a bf16 cache ------------------------------------------------------------------------
 * Every layout (row map and lengths, defaults, slots) through the bf16 kernel, against
 *   - the float32 kernel over the cache's values widened back to float32: the same numbers,
 *     so they agree to float32 rounding (a kernel that reads, widens or sums wrongly fails);
 *   - the float32 kernel over the float32 cache, within what storing each value in bf16
 *     allows. Each stored value is k (1 + e), |e| <= u = 2^-8 (round to nearest, 8
 *     significant bits), so a score q.k / sqrt(d) moves by at most
 *         D_j = u sum_i |q_i k_ji| / sqrt(d),   D = max_j D_j;
 *     a softmax weight then moves by a factor within [e^-2D, e^2D]: |p'_j - p_j| <=
 *     (e^2D - 1) p_j, and an output feature
 *         |o'_i - o_i| <= (e^2D - 1) sum_j p_j |v'_ji| + u sum_j p_j |v_ji|,
 *     plus float32 rounding (TU_FWD_ATOL, TU_FWD_RTOL). */

enum { LAYOUT_ROWS, LAYOUT_DEFAULT, LAYOUT_SLOTS };

/* The cache position of key j of row b (head 0, feature 0). */
static size_t key_offset(const int *slots, int ld, int b, int r, size_t stride, int j, int C)
{
    return (slots ? (size_t)slots[b * ld + j] * stride : r * stride) + (size_t)j * C;
}

/* Whether the bf16 weights S and outputs O of row b, head h, are within the bound of the
 * float32 ones Sf, Of (p: Sf's row, the weights before rounding). */
static void check_bound(int b, int h, int keys, const float *q, const float *p, const float *pb,
                        const float *Kh, const float *Vh, const float *Vwh, const size_t *at,
                        const float *o, const float *of, int d, int m)
{
    const double u = 1.0 / 256;
    double D = 0;
    for (int j = 0; j < keys; j++) {
        double s = 0;
        for (int i = 0; i < d; i++) s += fabs((double)q[i] * Kh[at[j] + i]);
        D = fmax(D, u * s / sqrt((double)d));
    }
    const double grow = exp(2 * D) - 1;
    for (int j = 0; j < m; j++) {
        const double bound = grow * p[j] + TU_FWD_ATOL + TU_FWD_RTOL * fabs(p[j]);
        if (fabs((double)pb[j] - p[j]) > bound)
            fail_msg("row %d head %d weight %d: bf16 %g, fp32 %g, bound %g", b, h, j, pb[j],
                     p[j], bound);
    }
    for (int i = 0; i < d; i++) {
        double sv = 0, svb = 0;
        for (int j = 0; j < keys; j++)
            sv += p[j] * fabs((double)Vh[at[j] + i]), svb += p[j] * fabs((double)Vwh[at[j] + i]);
        const double bound = grow * svb + u * sv + TU_FWD_ATOL + TU_FWD_RTOL * fabs(of[i]);
        if (fabs((double)o[i] - of[i]) > bound)
            fail_msg("row %d head %d feature %d: bf16 %g, fp32 %g, bound %g", b, h, i, o[i],
                     of[i], bound);
        if (keys == 0) assert_true(o[i] == 0.0f);
    }
}

static void check_bf16(int layout, int B, int H, int d, int m, int cache_rows, int cap)
{
    const int C = H * d;
    const size_t stride = (size_t)cap * C, n = (size_t)cache_rows * stride;
    float *Q = tu_rand((size_t)B * C, 21), *K = tu_rand(n, 22), *V = tu_rand(n, 23);
    for (size_t i = 0; i < (size_t)B * C; i++) Q[i] *= 3.0f; /* sharper weights */
    uint16_t *Kb = malloc(n * sizeof *Kb), *Vb = malloc(n * sizeof *Vb);
    float *Kw = tu_zeros(n), *Vw = tu_zeros(n);
    kv_cache_store(Kb, KV_BF16, 0, K, n), kv_cache_store(Vb, KV_BF16, 0, V, n);
    for (size_t i = 0; i < n; i++) {
        assert_true(Kb[i] == bf16_from_float(K[i]) && Vb[i] == bf16_from_float(V[i]));
        Kw[i] = bf16_to_float(Kb[i]), Vw[i] = bf16_to_float(Vb[i]);
    }
    int *row = NULL, *len = NULL, *slots = NULL, ld = 0;
    if (layout == LAYOUT_ROWS) {
        row = malloc((size_t)B * sizeof *row), len = malloc((size_t)cache_rows * sizeof *len);
        for (int b = 0; b < B; b++) row[b] = (b * 7 + 3) % cache_rows;
        for (int r = 0; r < cache_rows; r++) len[r] = r == 0 ? 0 : r == 1 ? m : 1 + (r * 5) % m;
    } else if (layout == LAYOUT_SLOTS) {
        ld = cap, slots = malloc((size_t)B * ld * sizeof *slots);
        for (int b = 0; b < B; b++)
            for (int j = 0; j < ld; j++)
                slots[b * ld + j] = (int)(qkv_random_u32(24, (uint64_t)b * ld + j) % cache_rows);
    }
    float *O = tu_rand((size_t)B * C, 25), *S = tu_rand((size_t)B * H * m, 26);
    float *Ow = tu_zeros((size_t)B * C), *Sw = tu_zeros((size_t)B * H * m);
    float *Of = tu_zeros((size_t)B * C), *Sf = tu_zeros((size_t)B * H * m);
    attend(O, S, Q, Kb, Vb, KV_BF16, stride, B, H, d, m, row, len, slots, ld);
    attend(Ow, Sw, Q, Kw, Vw, KV_FP32, stride, B, H, d, m, row, len, slots, ld);
    attend(Of, Sf, Q, K, V, KV_FP32, stride, B, H, d, m, row, len, slots, ld);
    tu_check_close("O (bf16 kernel, widened cache)", O, Ow, (size_t)B * C, TU_FWD_ATOL,
                   TU_FWD_RTOL);
    tu_check_close("weights (bf16 kernel, widened cache)", S, Sw, (size_t)B * H * m,
                   TU_FWD_ATOL, TU_FWD_RTOL);
    size_t *at = malloc((size_t)m * sizeof *at);
    for (int b = 0; b < B; b++) {
        const int r = row ? row[b] : b;
        const int keys = slots ? m : len && len[r] < m ? len[r] : m;
        for (int j = 0; j < keys; j++) at[j] = key_offset(slots, ld, b, r, stride, j, C);
        for (int h = 0; h < H; h++) {
            const size_t bh = (size_t)b * H + h, hd = (size_t)h * d;
            check_bound(b, h, keys, Q + (size_t)b * C + hd, Sf + bh * m, S + bh * m, K + hd,
                        V + hd, Vw + hd, at, O + (size_t)b * C + hd, Of + (size_t)b * C + hd, d,
                        m);
        }
    }
    free(at), free(Q), free(K), free(V), free(Kb), free(Vb), free(Kw), free(Vw), free(row);
    free(len), free(slots), free(O), free(S), free(Ow), free(Sw), free(Of), free(Sf);
}

static void test_bf16_cache(void **state)
{
    (void)state;
    check_bf16(LAYOUT_ROWS, 5, 3, 13, 11, 4, 16);       /* d with a tail, m not 4k, length 0 */
    check_bf16(LAYOUT_ROWS, 3, 2, 8, 1, 2, 1);          /* one key, d below one vector */
    check_bf16(LAYOUT_ROWS, 2, 8, 64, 257, 3, 300);     /* heads split across threads */
    check_bf16(LAYOUT_ROWS, 6, 8, 64, 130, 3, 140);     /* rows split across threads */
    check_bf16(LAYOUT_DEFAULT, 2, 2, 9, 7, 2, 7);
    check_bf16(LAYOUT_DEFAULT, 1, 4, 32, 1003, 1, 1003); /* one sequence, a long cache */
    check_bf16(LAYOUT_SLOTS, 6, 4, 13, 10, 5, 12);      /* beam search's shared prefixes */
    check_bf16(LAYOUT_SLOTS, 4, 8, 64, 67, 4, 80);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_attention_forward),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_slots),
        cmocka_unit_test(test_bf16_cache),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
