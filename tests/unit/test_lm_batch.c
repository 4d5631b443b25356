/* SPDX-License-Identifier: MIT */
/* Continuous batching of generation (qkv_lm_batch): texts that join a running batch at
 * different steps, with their own prompts, lengths, sampling and seeds, draw exactly the
 * tokens qkv_lm_generate draws for each alone, through the restart from the last half of the
 * context when a text outgrows it, with softmax and linear attention; a released slot is free
 * again; bad arguments fail. With chunked prefill, prompts that join running texts are fed a
 * chunk a step and still draw qkv_lm_generate's tokens, and a prompt's logits fed in chunks
 * are within 1e-4 of its one-pass prefill's. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "models/decoder.h"
#include "test_util.h"

enum { V = 23, CONTEXT = 12, N = 7 };

static qkv_lm *random_lm(qkv_attention_kind attention, qkv_kv_cache kv)
{
    qkv_lm_config c = qkv_lm_default_config();
    c.vocab = V, c.d_model = 16, c.heads = 2, c.ffn = 32, c.layers = 2, c.max_len = CONTEXT;
    c.dropout = 0.0f, c.attention = attention;
    qkv_lm *m;
    assert_int_equal(qkv_lm_create(&m, &c, 5, NULL), QKV_OK);
    float *p = qkv_lm_params(m);
    for (size_t i = 0; i < qkv_lm_num_params(m); i++) p[i] *= 2.0f; /* sharper choices */
    assert_int_equal(qkv_lm_set_kv_cache(m, kv, NULL), QKV_OK);
    return m;
}

/* Text k: its prompt (1 + k % 5 tokens, up to 15: longer than the context), length, sampling. */
static int prompt_of(int *ids, int k)
{
    const int n = k == 3 ? 15 : 1 + k % 5;
    for (int i = 0; i < n; i++) ids[i] = 4 + (k * 7 + i * 3) % (V - 4);
    return n;
}

static qkv_lm_generation generation_of(int k)
{
    qkv_lm_generation g = {5 + 6 * k, {k % 3 == 0 ? 0.0f : 0.9f, k % 2 ? 5 : 0, k == 4 ? 0.8f : 1.0f},
                           (uint64_t)(100 + k), NULL, NULL, k % 2};
    return g; /* lengths 5 .. 41: several restart at the context of 12 */
}

static void check_chunked(qkv_attention_kind attention, int slots, int every, qkv_kv_cache kv,
                          int chunk)
{
    qkv_lm *m = random_lm(attention, kv);
    int ref[N][64], got[N][64], n_got[N] = {0}, ids[16];
    qkv_error err = {0};
    for (int k = 0; k < N; k++) {
        const qkv_lm_generation g = generation_of(k);
        int n = 0;
        if (qkv_lm_generate(m, ids, prompt_of(ids, k), ref[k], &n, &g, &err)) fail_msg("%s", err.msg);
        assert_int_equal(n, g.tokens);
    }
    qkv_lm_batch *b;
    assert_int_equal(qkv_lm_batch_create(&b, m, slots, &err), QKV_OK);
    qkv_lm_batch_set_prefill_chunk(b, chunk);
    int text_in[16], drawn[16], next = 0, finished = 0, widest = 0;
    for (int s = 0; s < slots; s++) text_in[s] = -1;
    for (int step = 0; finished < N; step++) {
        assert_true(step < 1000);
        if (step % every == 0)
            while (next < N && qkv_lm_batch_free_slots(b) > 0) {
                const qkv_lm_generation g = generation_of(next);
                int s;
                if (qkv_lm_batch_add(b, ids, prompt_of(ids, next), &g, &s, &err))
                    fail_msg("%s", err.msg);
                text_in[s] = next++;
                if (every > 1) break; /* one at a time */
            }
        const int running = qkv_lm_batch_running(b);
        widest = running > widest ? running : widest;
        if (qkv_lm_batch_step(b, drawn, &err)) fail_msg("%s", err.msg);
        for (int s = 0; s < slots; s++) {
            if (drawn[s] >= 0) got[text_in[s]][n_got[text_in[s]]++] = drawn[s];
            if (!qkv_lm_batch_finished(b, s)) continue;
            const int k = text_in[s];
            assert_int_equal(n_got[k], generation_of(k).tokens);
            assert_memory_equal(got[k], ref[k], (size_t)n_got[k] * sizeof **got);
            qkv_lm_batch_release(b, s);
            text_in[s] = -1, finished++;
        }
    }
    assert_true(slots == 1 || widest > 1);
    assert_int_equal(qkv_lm_batch_free_slots(b), slots);
    qkv_lm_batch_free(b);
    qkv_lm_free(m);
}

static void check_batched(qkv_attention_kind attention, int slots, int every, qkv_kv_cache kv)
{
    check_chunked(attention, slots, every, kv, 0);
}

static void test_softmax(void **state)
{
    (void)state;
    check_batched(QKV_ATTENTION_SOFTMAX, 3, 2, QKV_KV_CACHE_AUTO);
    check_batched(QKV_ATTENTION_SOFTMAX, 8, 1, QKV_KV_CACHE_AUTO);
    check_batched(QKV_ATTENTION_SOFTMAX, 1, 1, QKV_KV_CACHE_AUTO);
}

/* The same with a bf16 cache: each slot's cache row holds what a text alone would */
static void test_softmax_bf16_cache(void **state)
{
    (void)state;
    check_batched(QKV_ATTENTION_SOFTMAX, 3, 2, QKV_KV_CACHE_BF16);
    check_batched(QKV_ATTENTION_SOFTMAX, 8, 1, QKV_KV_CACHE_BF16);
}

static void test_linear(void **state)
{
    (void)state;
    check_batched(QKV_ATTENTION_LINEAR, 3, 2, QKV_KV_CACHE_AUTO);
}

/* Prompts that join running texts fed 2 or 3 tokens a step (the 15-token prompt, its last 12,
 * in 4 to 6 steps) draw the same tokens; also with one slot (never fed in chunks: nothing
 * else runs when it joins) and with linear attention (the chunk's rows update the state in
 * order). */
static void test_chunked_prefill(void **state)
{
    (void)state;
    check_chunked(QKV_ATTENTION_SOFTMAX, 3, 2, QKV_KV_CACHE_AUTO, 2);
    check_chunked(QKV_ATTENTION_SOFTMAX, 8, 3, QKV_KV_CACHE_AUTO, 3);
    check_chunked(QKV_ATTENTION_SOFTMAX, 1, 1, QKV_KV_CACHE_AUTO, 2);
    check_chunked(QKV_ATTENTION_SOFTMAX, 4, 2, QKV_KV_CACHE_BF16, 2);
    check_chunked(QKV_ATTENTION_LINEAR, 3, 2, QKV_KV_CACHE_AUTO, 2);
}

/* A prompt fed in chunks of c through decoder steps (rows of one cache row at consecutive
 * positions) gives the logits of its one-pass prefill within 1e-4, and the same argmax. */
static void test_chunk_logits(void **state)
{
    (void)state;
    for (int a = 0; a < 2; a++) {
        qkv_lm *m = random_lm(a ? QKV_ATTENTION_LINEAR : QKV_ATTENTION_SOFTMAX, QKV_KV_CACHE_AUTO);
        qkv_error err = {0};
        int ids[CONTEXT];
        for (int i = 0; i < CONTEXT; i++) ids[i] = 4 + (i * 5) % (V - 4);
        decoder *one, *chunked;
        float want[V];
        assert_int_equal(decoder_create_lm(&one, m, 1, 0, &err), QKV_OK);
        assert_int_equal(decoder_prefill(one, 0, 0, ids, CONTEXT, want, &err), QKV_OK);
        for (int c = 1; c <= 5; c++) {
            assert_int_equal(decoder_create_lm(&chunked, m, 6, 0, &err), QKV_OK);
            float *z = NULL;
            int last = 0;
            for (int p = 0; p < CONTEXT; p += c) {
                const int n = CONTEXT - p < c ? CONTEXT - p : c;
                int row[6], pos[6];
                for (int k = 0; k < n; k++) row[k] = 2, pos[k] = p + k;
                const decoder_rows r = {n, row, pos, NULL, NULL, 0};
                assert_int_equal(decoder_step(chunked, &r, ids + p, &z, &err), QKV_OK);
                last = n - 1;
            }
            double worst = 0.0;
            for (int v = 0; v < V; v++) {
                const double d = fabs((double)z[(size_t)last * V + v] - want[v]);
                worst = d > worst ? d : worst;
            }
            if (!(worst <= 1e-4)) fail_msg("chunks of %d: logits %.3g from the prefill's", c, worst);
            int best = 0, best_c = 0;
            for (int v = 1; v < V; v++) {
                if (want[v] > want[best]) best = v;
                if (z[(size_t)last * V + v] > z[(size_t)last * V + best_c]) best_c = v;
            }
            assert_int_equal(best, best_c);
            decoder_free(chunked);
        }
        decoder_free(one);
        qkv_lm_free(m);
    }
}

static void test_errors_and_release(void **state)
{
    (void)state;
    qkv_lm *m = random_lm(QKV_ATTENTION_SOFTMAX, QKV_KV_CACHE_AUTO);
    qkv_lm_batch *b;
    qkv_error err = {0};
    assert_int_equal(qkv_lm_batch_create(&b, m, 0, &err), QKV_ERR_ARG);
    assert_int_equal(qkv_lm_batch_create(&b, m, 1, &err), QKV_OK);
    int ids[2] = {5, V}, s;
    qkv_lm_generation g = generation_of(0);
    assert_int_equal(qkv_lm_batch_add(b, ids, 2, &g, &s, &err), QKV_ERR_ARG);
    assert_non_null(strstr(err.msg, "outside the vocabulary"));
    assert_int_equal(qkv_lm_batch_add(b, ids, 0, &g, &s, &err), QKV_ERR_ARG);
    g.tokens = 0;
    assert_int_equal(qkv_lm_batch_add(b, ids, 1, &g, &s, &err), QKV_ERR_ARG);
    g.tokens = 3;
    assert_int_equal(qkv_lm_batch_add(b, ids, 1, &g, &s, &err), QKV_OK);
    assert_int_equal(qkv_lm_batch_add(b, ids, 1, &g, &s, &err), QKV_ERR_ARG); /* full */
    assert_non_null(strstr(err.msg, "no free slot"));
    qkv_lm_batch_release(b, 0);
    assert_int_equal(qkv_lm_batch_free_slots(b), 1);
    qkv_lm_batch_free(b);
    qkv_lm_free(m);
}

int main(void)
{
    qkv_set_threads(2);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_softmax),
        cmocka_unit_test(test_softmax_bf16_cache),
        cmocka_unit_test(test_linear),
        cmocka_unit_test(test_chunked_prefill),
        cmocka_unit_test(test_chunk_logits),
        cmocka_unit_test(test_errors_and_release),
    };
    return cmocka_run_group_tests_name("lm_batch", tests, NULL, NULL);
}
