/* SPDX-License-Identifier: MIT */
/* Continuous batching (qkv_batch_decoder): sentences that join a running batch at different
 * steps, leave it when they end and free their slot for the next get exactly the text
 * qkv_translate gives them (greedy), alone or in one batch, also on a model with Marian's
 * decoding rules (decoding starts from <pad>, <pad> is never produced, forced <eos>) and for
 * sources that spell reserved tokens; over-long sources are cut as the translator cuts them;
 * max_len is the translator's; a cancelled slot is free again; more sources than free slots
 * and bad arguments fail with messages. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

enum { MAX_LEN = 12 };

static const char *const TEXT =
    "the cat sat on the mat .\na dog ran to the big house .\nthe red cat ran .\n"
    "a big dog sat on a red mat !\n";

static const char *const SOURCES[] = {
    "the cat sat on the mat .", "a zebra ran", "", "dog red dog !", "the big red house .",
    "a cat ran to the mat", "on the", "the mat sat on a red dog .", "big", "a red cat !",
    "the dog ran to a big red house on the mat the cat sat on the mat", /* cut to MAX_LEN */
    "the <pad> cat sat", "<eos> red dog", "<bos>", /* text that spells reserved tokens */
};
enum { N = sizeof SOURCES / sizeof *SOURCES };

/* A translator over word vocabularies of TEXT with a random model whose distributions are
 * sharper than the initialisation's, that favour <eos> and never choose <pad>, <unk> or <bos>,
 * so translations end at varied lengths; with marian, the model decodes by Marian's rules
 * (starts from <pad>, never produces it, forced <eos>; halves positions, no embedding scale)
 * and favours <pad>, so that only the rule keeps it out. */
static qkv_translator *translator_of(uint64_t seed, int marian)
{
    qkv_sentences s = {0};
    qkv_tokenizer tok = {0};
    assert_int_equal(qkv_sentences_from_text(&s, TEXT, strlen(TEXT), "text", NULL), QKV_OK);
    assert_int_equal(qkv_vocab_build(&tok.src, s.tokens, s.n_tokens, 1, NULL), QKV_OK);
    assert_int_equal(qkv_vocab_build(&tok.tgt, s.tokens, s.n_tokens, 1, NULL), QKV_OK);
    qkv_sentences_free(&s);
    qkv_transformer_config cfg = qkv_transformer_default_config();
    cfg.src_vocab = tok.src.size, cfg.tgt_vocab = tok.tgt.size, cfg.dropout = 0.0f;
    cfg.max_len = MAX_LEN, cfg.d_model = 16, cfg.heads = 2, cfg.ffn = 24, cfg.bias = 1;
    if (marian) {
        cfg.decoder_start = QKV_PAD, cfg.suppress_pad = 1, cfg.forced_eos = 1;
        cfg.pos_layout = QKV_POS_HALVES, cfg.scale_embedding = 0, cfg.act = QKV_ACT_SILU;
    }
    qkv_transformer *m;
    assert_int_equal(qkv_transformer_create(&m, &cfg, seed, NULL), QKV_OK);
    float *p = qkv_transformer_params(m);
    for (size_t i = 0; i < qkv_transformer_num_params(m); i++) p[i] *= 1.5f;
    for (int i = 0; i < qkv_transformer_num_tensors(m); i++) {
        qkv_param_info t = qkv_transformer_tensor(m, i);
        if (strcmp(t.name, "output.b")) continue;
        p[t.offset + QKV_EOS] += 1.0f; /* and no <pad>, <unk>, <bos> */
        p[t.offset + QKV_PAD] = p[t.offset + QKV_UNK] = p[t.offset + QKV_BOS] = -30.0f;
        if (marian) p[t.offset + QKV_PAD] = 3.0f;
    }
    qkv_translator *t;
    assert_int_equal(qkv_translator_create(&t, m, &tok, 0, NULL), QKV_OK);
    return t;
}

static qkv_translator *random_translator(uint64_t seed) { return translator_of(seed, 0); }

/* The translations qkv_translate gives, one sentence at a time. */
static char **reference(qkv_translator *t, int max_len)
{
    char **text = calloc(N, sizeof *text);
    qkv_translate_options o = qkv_translate_default_options();
    o.max_len = max_len, o.batch = 1;
    for (int i = 0; i < N; i++) {
        qkv_translations r;
        qkv_error err = {0};
        if (qkv_translate(&r, t, SOURCES + i, 1, &o, &err)) fail_msg("%s", err.msg);
        text[i] = strdup(r.text[0]);
        qkv_translations_free(&r);
    }
    return text;
}

static void free_texts(char **text)
{
    for (int i = 0; i < N; i++) free(text[i]);
    free(text);
}

/* Sources join `per_join` at a time every `every` steps (as slots allow); each finished slot
 * is taken at once. Checks every text against ref; returns the largest running batch. */
static int run_staggered(qkv_batch_decoder *bd, char **ref, int per_join, int every,
                         int max_len)
{
    const int cap = qkv_batch_decoder_slots(bd);
    int slot_of[64], source_in[64], next = 0, taken = 0, widest = 0;
    qkv_error err = {0};
    for (int s = 0; s < cap; s++) source_in[s] = -1;
    for (int step = 0; taken < N; step++) {
        assert_true(step < 10 * N * MAX_LEN);
        if (step % every == 0 && next < N) {
            int k = N - next < per_join ? N - next : per_join;
            if (k > qkv_batch_decoder_free_slots(bd)) k = qkv_batch_decoder_free_slots(bd);
            if (k > 0) {
                if (qkv_batch_decoder_add(bd, SOURCES + next, k, max_len, slot_of, &err))
                    fail_msg("%s", err.msg);
                for (int i = 0; i < k; i++) source_in[slot_of[i]] = next + i;
                next += k;
            }
        }
        const int running = qkv_batch_decoder_running(bd);
        widest = running > widest ? running : widest;
        if (qkv_batch_decoder_step(bd, &err)) fail_msg("%s", err.msg);
        for (int s = 0; s < cap; s++) {
            if (!qkv_batch_decoder_finished(bd, s)) continue;
            char *text;
            int tokens = -1;
            assert_int_equal(qkv_batch_decoder_take(bd, s, &text, &tokens, &err), QKV_OK);
            assert_true(source_in[s] >= 0);
            assert_string_equal(text, ref[source_in[s]]);
            assert_true(tokens >= 0 && tokens <= (max_len ? max_len : 100));
            free(text);
            source_in[s] = -1, taken++;
        }
    }
    assert_int_equal(qkv_batch_decoder_free_slots(bd), cap);
    return widest;
}

static void test_staggered_joins_match_translate(void **state)
{
    (void)state;
    qkv_translator *t = random_translator(8);
    char **ref = reference(t, 0), **ref5 = reference(t, 5);
    int lengths = 0;
    for (int i = 0; i < N; i++) lengths += (int)strlen(ref[i]);
    assert_true(lengths > 0);
    qkv_batch_decoder *bd;
    qkv_error err = {0};
    assert_int_equal(qkv_batch_decoder_create(&bd, t, 4, &err), QKV_OK);
    assert_true(run_staggered(bd, ref, 1, 2, 0) >= 2); /* they did run together */
    run_staggered(bd, ref, 3, 1, 0);
    run_staggered(bd, ref5, 2, 3, 5);
    qkv_batch_decoder_free(bd);
    assert_int_equal(qkv_batch_decoder_create(&bd, t, 1, &err), QKV_OK); /* one at a time */
    run_staggered(bd, ref, 1, 1, 0);
    qkv_batch_decoder_free(bd);
    assert_int_equal(qkv_batch_decoder_create(&bd, t, 32, &err), QKV_OK); /* all at once */
    assert_int_equal(run_staggered(bd, ref, N, 1, 0), N);
    qkv_batch_decoder_free(bd);
    free_texts(ref), free_texts(ref5);
    qkv_translator_free(t);
}

/* A model with Marian's rules: the slots start each sentence from <pad>, never produce <pad>
 * (which the model favours), encode text that spells a reserved token as <unk>, and give
 * qkv_translate's text for every sentence, whatever the joins. */
static void test_marian_rules(void **state)
{
    (void)state;
    qkv_translator *t = translator_of(8, 1);
    char **ref = reference(t, 0);
    int nonempty = 0;
    for (int i = 0; i < N; i++) {
        assert_null(strstr(ref[i], "<pad>"));
        nonempty += ref[i][0] != '\0';
    }
    assert_true(nonempty >= N / 2);
    qkv_batch_decoder *bd;
    qkv_error err = {0};
    assert_int_equal(qkv_batch_decoder_create(&bd, t, 4, &err), QKV_OK);
    assert_true(run_staggered(bd, ref, 1, 2, 0) >= 2);
    run_staggered(bd, ref, 3, 1, 0);
    qkv_batch_decoder_free(bd);
    assert_int_equal(qkv_batch_decoder_create(&bd, t, 32, &err), QKV_OK);
    assert_int_equal(run_staggered(bd, ref, N, 1, 0), N);
    qkv_batch_decoder_free(bd);
    free_texts(ref);
    qkv_translator_free(t);
}

/* With a bf16 key-value cache (self-attention and the sources' cross-attention keys and
 * values) the slots still give qkv_translate's text exactly, qkv_translate reading the same
 * bf16 cache; and most texts are those of the float32 cache (the rounding can flip a close
 * choice of these random models, not many). */
static void test_bf16_cache_slots(void **state)
{
    (void)state;
    qkv_translator *t = random_translator(8);
    char **ref32 = reference(t, 0);
    qkv_error err = {0};
    assert_int_equal(qkv_transformer_set_kv_cache(qkv_translator_model(t), QKV_KV_CACHE_BF16,
                                                  &err), QKV_OK);
    char **ref = reference(t, 0);
    int same = 0;
    for (int i = 0; i < N; i++) same += !strcmp(ref[i], ref32[i]);
    print_message("bf16 cache: %d of %d translations as with float32\n", same, N);
    assert_true(same >= N - 2);
    qkv_batch_decoder *bd;
    assert_int_equal(qkv_batch_decoder_create(&bd, t, 4, &err), QKV_OK);
    assert_true(run_staggered(bd, ref, 1, 2, 0) >= 2);
    run_staggered(bd, ref, 3, 1, 0);
    qkv_batch_decoder_free(bd);
    free_texts(ref), free_texts(ref32);
    qkv_translator_free(t);
}

static void test_cancel_and_errors(void **state)
{
    (void)state;
    qkv_translator *t = random_translator(4);
    qkv_batch_decoder *bd;
    qkv_error err = {0};
    assert_int_equal(qkv_batch_decoder_create(&bd, t, 0, &err), QKV_ERR_ARG);
    assert_null(bd);
    assert_int_equal(qkv_batch_decoder_create(&bd, t, 2, &err), QKV_OK);
    int slots[3];
    assert_int_equal(qkv_batch_decoder_add(bd, SOURCES, 3, 0, slots, &err), QKV_ERR_ARG);
    assert_non_null(strstr(err.msg, "free slots"));
    assert_int_equal(qkv_batch_decoder_free_slots(bd), 2);
    const char *broken[] = {"a line\nbreak"};
    assert_int_equal(qkv_batch_decoder_add(bd, broken, 1, 0, slots, &err), QKV_ERR_ARG);
    assert_non_null(strstr(err.msg, "source:1"));
    assert_int_equal(qkv_batch_decoder_add(bd, SOURCES, 1, -1, slots, &err), QKV_ERR_ARG);
    assert_int_equal(qkv_batch_decoder_add(bd, SOURCES, 2, 0, slots, &err), QKV_OK);
    assert_int_equal(qkv_batch_decoder_free_slots(bd), 0);
    char *text;
    assert_int_equal(qkv_batch_decoder_take(bd, slots[0], &text, NULL, &err), QKV_ERR_ARG);
    qkv_batch_decoder_cancel(bd, slots[0]);
    assert_int_equal(qkv_batch_decoder_free_slots(bd), 1);
    assert_int_equal(qkv_batch_decoder_running(bd), 1);
    qkv_batch_decoder_free(bd);
    qkv_translator_free(t);
}

int main(void)
{
    qkv_set_threads(2);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_staggered_joins_match_translate),
        cmocka_unit_test(test_marian_rules),
        cmocka_unit_test(test_bf16_cache_slots),
        cmocka_unit_test(test_cancel_and_errors),
    };
    return cmocka_run_group_tests_name("batch_decoder", tests, NULL, NULL);
}
