/* SPDX-License-Identifier: MIT */
/* The examples of d2l's attention chapter, as tests: the numbers the book shows must come out. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

/* d2l 11.3.1: masked_softmax(torch.rand(2, 2, 4), torch.tensor([2, 3])) */
static void test_masked_softmax_valid_lens(void **state)
{
    (void)state;
    float S[16], P[16];
    qkv_fill_uniform(S, 16, 0.0f, 1.0f, 1);
    int lens[2] = {2, 3};
    qkv_mask mask = {lens, 0, 0};
    qkv_masked_softmax_forward(P, S, 2, 1, 2, 4, &mask);
    for (int b = 0; b < 2; b++)
        for (int i = 0; i < 2; i++) {
            float sum = 0.0f;
            for (int j = 0; j < 4; j++) {
                float w = P[(b * 2 + i) * 4 + j];
                if (j >= lens[b]) assert_true(w == 0.0f); /* exactly zero, as d2l shows */
                else assert_true(w > 0.0f);
                sum += w;
            }
            assert_float_equal(sum, 1.0f, 1e-6f);
        }
}

/* d2l 11.3.1: valid lengths per query, torch.tensor([[1, 3], [2, 4]]) */
static void test_masked_softmax_per_query(void **state)
{
    (void)state;
    float S[16], P[16];
    qkv_fill_uniform(S, 16, 0.0f, 1.0f, 2);
    int lens[4] = {1, 3, 2, 4};
    qkv_mask mask = {lens, 1, 0};
    qkv_masked_softmax_forward(P, S, 2, 1, 2, 4, &mask);
    for (int r = 0; r < 4; r++) {
        float sum = 0.0f;
        for (int j = 0; j < 4; j++) {
            float w = P[r * 4 + j];
            assert_true(j >= lens[r] ? w == 0.0f : w > 0.0f);
            sum += w;
        }
        assert_float_equal(sum, 1.0f, 1e-6f);
    }
    assert_float_equal(P[0], 1.0f, 0.0f); /* one visible key takes all the weight */
}

/* d2l 11.3.2: additive attention over identical keys averages the valid values:
 * queries ~N(0,1) (2,1,20), keys ones (2,10,2), values arange(40) as (10,4) per batch,
 * valid_lens [2, 6], hidden 8, eval mode -> [[2,3,4,5]] and [[10,11,12,13]]. */
static void test_additive_attention_example(void **state)
{
    (void)state;
    enum { B = 2, n = 1, m = 10, dq = 20, dk = 2, v = 4, h = 8 };
    float Q[B * n * dq], K[B * m * dk], V[B * m * v], O[B * n * v];
    qkv_fill_normal(Q, B * n * dq, 0.0f, 1.0f, 3);
    for (int i = 0; i < B * m * dk; i++) K[i] = 1.0f;
    for (int b = 0; b < B; b++)
        for (int i = 0; i < m * v; i++) V[b * m * v + i] = (float)i;
    float W_q[h * dq], W_k[h * dk], w_v[h];
    qkv_init_xavier_uniform(W_q, h, dq, 4);
    qkv_init_xavier_uniform(W_k, h, dk, 5);
    qkv_init_xavier_uniform(w_v, 1, h, 6);
    qkv_additive_weights w = {W_q, W_k, w_v};
    float cq[B * n * h], ck[B * m * h], F[B * n * m * h], P[B * n * m];
    qkv_additive_cache cache = {cq, ck, F, P};
    int lens[B] = {2, 6};
    qkv_mask mask = {lens, 0, 0};
    qkv_additive_attention_forward(O, &cache, &(qkv_attention_inputs){Q, K, V}, &w,
                                   &(qkv_additive_shape){B, n, m, dq, dk, v, h}, &mask,
                                   (qkv_dropout){0.0f, 0, 0}, NULL);
    const float want[B * n * v] = {2, 3, 4, 5, 10, 11, 12, 13};
    for (int i = 0; i < B * n * v; i++) assert_float_equal(O[i], want[i], 1e-5f);
    for (int j = 0; j < m; j++) {
        assert_float_equal(P[j], j < 2 ? 0.5f : 0.0f, 1e-6f);
        assert_float_equal(P[m + j], j < 6 ? 1.0f / 6.0f : 0.0f, 1e-6f);
    }
}

/* d2l 11.3.3: scaled dot-product attention on the same keys and values gives the same
 * uniform weights (queries ~N(0,1) of shape (2,1,2)). */
static void test_dot_product_attention_example(void **state)
{
    (void)state;
    enum { B = 2, n = 1, m = 10, d = 2, v = 4 };
    float Q[B * n * d], K[B * m * d], V[B * m * v], O[B * n * v], P[B * n * m];
    qkv_fill_normal(Q, B * n * d, 0.0f, 1.0f, 7);
    for (int i = 0; i < B * m * d; i++) K[i] = 1.0f;
    for (int b = 0; b < B; b++)
        for (int i = 0; i < m * v; i++) V[b * m * v + i] = (float)i;
    int lens[B] = {2, 6};
    qkv_mask mask = {lens, 0, 0};
    qkv_attention_forward(O, P, &(qkv_attention_inputs){Q, K, V},
                          &(qkv_attention_shape){B, 1, n, m, d, v}, &mask, (qkv_dropout){0.0f, 0, 0},
                          NULL);
    const float want[B * n * v] = {2, 3, 4, 5, 10, 11, 12, 13};
    for (int i = 0; i < B * n * v; i++) assert_float_equal(O[i], want[i], 1e-5f);
    for (int j = 0; j < m; j++) assert_float_equal(P[m + j], j < 6 ? 1.0f / 6.0f : 0.0f, 1e-6f);
}

/* d2l 11.7.2: LayerNorm of [[1, 2], [2, 3]] is [[-1, 1], [-1, 1]]. */
static void test_layernorm_example(void **state)
{
    (void)state;
    const float x[4] = {1, 2, 2, 3};
    float gamma[2] = {1, 1}, beta[2] = {0, 0};
    float y[4], mean[2], rstd[2];
    qkv_layernorm_forward(y, mean, rstd, x, &(qkv_layernorm_weights){gamma, beta}, 2, 2, 1e-5f);
    const float want[4] = {-1, 1, -1, 1};
    for (int i = 0; i < 4; i++) assert_float_equal(y[i], want[i], 1e-4f);
    assert_float_equal(mean[0], 1.5f, 0.0f);
    assert_float_equal(mean[1], 2.5f, 0.0f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_masked_softmax_valid_lens),
        cmocka_unit_test(test_masked_softmax_per_query),
        cmocka_unit_test(test_additive_attention_example),
        cmocka_unit_test(test_dot_product_attention_example),
        cmocka_unit_test(test_layernorm_example),
    };
    return cmocka_run_group_tests_name("d2l examples", tests, NULL, NULL);
}
