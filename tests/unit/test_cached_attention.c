/* The decoding step's attention (src/inference/cached_attention.c): one query per row over
 * a key-value cache, against qkv_attention_forward with n = 1 and the same valid length, for
 * rows that read other rows of the cache (beam search's hypotheses reading their sentence's
 * encoder output), lengths 0 (no visible key: output 0), partial and full, head sizes with
 * and without a tail past the 8-lane sums, few rows (split by heads) and many (by rows),
 * enough work to be split across threads, and keys gathered position by position from
 * different cache rows (beam search). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "inference/cached_attention.h"
#include "test_util.h"

static void check_case(int B, int H, int d, int m, int cache_rows, int cap)
{
    const int C = H * d;
    const size_t stride = (size_t)cap * C; /* a cache row holds cap positions */
    float *Q = tu_rand((size_t)B * C, 1), *K = tu_rand((size_t)cache_rows * stride, 2);
    float *V = tu_rand((size_t)cache_rows * stride, 3);
    for (size_t i = 0; i < (size_t)B * C; i++) Q[i] *= 3.0f; /* sharper weights */
    int *row = malloc((size_t)B * sizeof *row), *len = malloc((size_t)cache_rows * sizeof *len);
    for (int b = 0; b < B; b++) row[b] = (b * 7 + 3) % cache_rows;
    for (int r = 0; r < cache_rows; r++) len[r] = r == 0 ? 0 : r == 1 ? m : 1 + (r * 5) % m;
    float *O = tu_rand((size_t)B * C, 4), *S = tu_rand((size_t)B * H * m, 5);
    cached_attention(O, S, Q, K, V, stride, B, H, d, m, row, len, NULL, 0);
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
    cached_attention(O, S, Q, K, V, (size_t)m * C, B, H, d, m, NULL, NULL, NULL, 0);
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
    cached_attention(O, S, Q, K, V, stride, B, H, d, m, NULL, NULL, slots, ld);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_attention_forward),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_slots),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
