/* SPDX-License-Identifier: MIT */
/* Continuous batching (qkv_batch_decoder): sentences that join a running batch at different
 * steps, leave it when they end and free their slot for the next get exactly the text
 * qkv_translate gives them (greedy), alone or in one batch, also on a model with Marian's
 * decoding rules (decoding starts from <pad>, <pad> is never produced, forced <eos>) and for
 * sources that spell reserved tokens; over-long sources are cut as the translator cuts them;
 * max_len is the translator's; a cancelled slot is free again; more sources than free slots
 * and bad arguments fail with messages. Beam search and n-best lists in the same batch
 * (qkv_batch_decoder_add_with): every sentence's hypotheses, their texts and scores, are
 * qkv_translate's with the same options, for each stopping rule, a length penalty, Marian's
 * rules and a bf16 cache, with greedy and beam sentences joining the same steps. */
#include <math.h>
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


/* ---- beam search in the batch ------------------------------------------------------------- */

/* What qkv_translate gives each source with o, one sentence at a time: N hypotheses each. */
typedef struct {
    int N;
    char **text;   /* (N sources, N hypotheses): NULL where it found fewer */
    double *score; /* (N sources, N hypotheses) */
    int src_len[N], unknown[N];
    double tol;    /* scores' relative tolerance */
} nbest_ref;

static nbest_ref nbest_reference(qkv_translator *t, const qkv_translate_options *opt)
{
    qkv_translate_options o = *opt;
    o.batch = 1;
    nbest_ref r = {o.n_best, calloc((size_t)N * o.n_best, sizeof(char *)),
                   calloc((size_t)N * o.n_best, sizeof(double)), {0}, {0}, 1e-4};
    for (int i = 0; i < N; i++) {
        qkv_translations tr;
        qkv_error err = {0};
        if (qkv_translate(&tr, t, SOURCES + i, 1, &o, &err)) fail_msg("%s", err.msg);
        for (int k = 0; k < o.n_best; k++) {
            r.text[i * o.n_best + k] = tr.text[k] ? strdup(tr.text[k]) : NULL;
            r.score[i * o.n_best + k] = tr.score[k];
        }
        r.src_len[i] = tr.src_len[0], r.unknown[i] = tr.unknown[0];
        qkv_translations_free(&tr);
    }
    return r;
}

static void nbest_free(nbest_ref *r)
{
    for (int i = 0; i < N * r->N; i++) free(r->text[i]);
    free(r->text), free(r->score);
}

/* Scores as qkv_translate's, up to the float rounding of a step's other rows (within tol;
 * more with a bf16 cache, where a key that rounds the other way moves a score by ~2^-9). */
static int same_score(double a, double b, double tol)
{
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
    if (isinf(a) || isinf(b)) return a == b;
    return fabs(a - b) <= tol * (1.0 + fabs(b));
}

/* Sources join `per_join` at a time every `every` steps as rows allow, alternately with opts[0]
 * and opts[1] (refs[0], refs[1] their references); each finished slot is taken at once and
 * checked, hypothesis by hypothesis. Returns the most rows held at once. */
static int run_mixed(qkv_batch_decoder *bd, const qkv_translate_options *opts,
                     const nbest_ref *refs, int per_join, int every)
{
    const int cap = qkv_batch_decoder_slots(bd);
    int slot_of[64], source_in[64], which_in[64], next = 0, taken = 0, widest = 0, joins = 0;
    qkv_error err = {0};
    for (int s = 0; s < cap; s++) source_in[s] = -1;
    for (int step = 0; taken < N; step++) {
        assert_true(step < 20 * N * MAX_LEN);
        const int w = joins % 2, rows = opts[w].beam > 1 || opts[w].n_best > 1 ||
                                                opts[w].alpha > 0 ? opts[w].beam : 1;
        if (step % every == 0 && next < N) {
            int k = N - next < per_join ? N - next : per_join;
            while (k > 0 && k * rows > qkv_batch_decoder_free_slots(bd)) k--;
            if (k > 0) {
                if (qkv_batch_decoder_add_with(bd, SOURCES + next, k, &opts[w], slot_of, &err))
                    fail_msg("%s", err.msg);
                for (int i = 0; i < k; i++)
                    source_in[slot_of[i]] = next + i, which_in[slot_of[i]] = w;
                next += k, joins++;
            }
        }
        const int held = cap - qkv_batch_decoder_free_slots(bd);
        widest = held > widest ? held : widest;
        if (qkv_batch_decoder_step(bd, &err)) fail_msg("%s", err.msg);
        for (int s = 0; s < cap; s++) {
            if (!qkv_batch_decoder_finished(bd, s)) continue;
            qkv_translations r;
            assert_int_equal(qkv_batch_decoder_take_translations(bd, s, &r, &err), QKV_OK);
            const int i = source_in[s];
            const nbest_ref *ref = &refs[which_in[s]];
            assert_true(i >= 0);
            assert_int_equal(r.count, 1);
            assert_int_equal(r.n_best, opts[which_in[s]].n_best);
            for (int k = 0; k < r.n_best; k++) {
                const char *want = ref->text[i * ref->N + k];
                if (!want || !r.text[k]) {
                    assert_true(!want && !r.text[k] && r.len[k] == -1);
                    continue;
                }
                if (strcmp(r.text[k], want) ||
                    !same_score(r.score[k], ref->score[i * ref->N + k], ref->tol))
                    fail_msg("source %d, hypothesis %d: '%s' %.9g, qkv_translate '%s' %.9g", i,
                             k, r.text[k], r.score[k], want, ref->score[i * ref->N + k]);
            }
            assert_int_equal(r.src_len[0], ref->src_len[i]);
            assert_int_equal(r.unknown[0], ref->unknown[i]);
            assert_int_equal(r.truncated, i == 10); /* the one source longer than MAX_LEN */
            qkv_translations_free(&r);
            source_in[s] = -1, taken++;
        }
    }
    assert_int_equal(qkv_batch_decoder_free_slots(bd), cap);
    return widest;
}

/* A beam request joins the running batch beside greedy ones and leaves it with qkv_translate's
 * n-best list for every stopping rule, with and without a length penalty. */
static void beam_case_tol(qkv_translator *t, int beam, int n_best, float alpha, qkv_beam_stop stop,
                          double tol)
{
    qkv_translate_options o[2] = {qkv_translate_default_options(),
                                  qkv_translate_default_options()};
    o[1].beam = beam, o[1].n_best = n_best, o[1].alpha = alpha, o[1].stop = stop;
    nbest_ref refs[2] = {nbest_reference(t, &o[0]), nbest_reference(t, &o[1])};
    refs[0].tol = refs[1].tol = tol;
    int found = 0;
    for (int i = 0; i < N * n_best; i++) found += refs[1].text[i] != NULL;
    assert_true(found >= N); /* a best hypothesis each, at least */
    qkv_batch_decoder *bd;
    qkv_error err = {0};
    assert_int_equal(qkv_batch_decoder_create(&bd, t, 12, &err), QKV_OK);
    assert_true(run_mixed(bd, o, refs, 1, 2) > beam); /* a beam and others held rows together */
    run_mixed(bd, o, refs, 3, 1);
    const qkv_translate_options only_beam[2] = {o[1], o[1]};
    const nbest_ref only_refs[2] = {refs[1], refs[1]};
    run_mixed(bd, only_beam, only_refs, 2, 3);
    qkv_batch_decoder_free(bd);
    assert_int_equal(qkv_batch_decoder_create(&bd, t, beam, &err), QKV_OK); /* one beam at a time */
    run_mixed(bd, only_beam, only_refs, 1, 1);
    qkv_batch_decoder_free(bd);
    nbest_free(&refs[0]), nbest_free(&refs[1]);
}

static void beam_case(qkv_translator *t, int beam, int n_best, float alpha, qkv_beam_stop stop)
{
    beam_case_tol(t, beam, n_best, alpha, stop, 1e-4);
}

static void test_beams_in_the_batch(void **state)
{
    (void)state;
    qkv_translator *t = random_translator(8);
    beam_case(t, 3, 2, 0.0f, QKV_BEAM_STOP_BOUND);
    beam_case(t, 4, 3, 0.6f, QKV_BEAM_STOP_BOUND);
    beam_case(t, 2, 2, 1.0f, QKV_BEAM_STOP_HF);
    beam_case(t, 3, 1, 0.0f, QKV_BEAM_STOP_COUNT);
    beam_case(t, 1, 1, 0.6f, QKV_BEAM_STOP_BOUND); /* beam 1 that may go on past an <eos> */
    qkv_translator_free(t);
}

/* Marian's rules (start from <pad>, never <pad>, forced <eos>) and a bf16 cache, in beams. */
static void test_beams_marian_and_bf16(void **state)
{
    (void)state;
    qkv_translator *t = translator_of(8, 1);
    beam_case(t, 3, 2, 0.6f, QKV_BEAM_STOP_BOUND);
    beam_case(t, 2, 2, 1.0f, QKV_BEAM_STOP_HF);
    qkv_translator_free(t);
    t = random_translator(5);
    qkv_error err = {0};
    assert_int_equal(qkv_transformer_set_kv_cache(qkv_translator_model(t), QKV_KV_CACHE_BF16,
                                                  &err), QKV_OK);
    beam_case_tol(t, 3, 2, 0.0f, QKV_BEAM_STOP_BOUND, 1e-2);
    qkv_translator_free(t);
}

/* A beam holds K slots until it is taken or cancelled; too few free slots for a beam and bad
 * options fail, nothing added. */
static void test_beam_rows_and_errors(void **state)
{
    (void)state;
    qkv_translator *t = random_translator(4);
    qkv_batch_decoder *bd;
    qkv_error err = {0};
    assert_int_equal(qkv_batch_decoder_create(&bd, t, 5, &err), QKV_OK);
    qkv_translate_options o = qkv_translate_default_options();
    o.beam = 3, o.n_best = 2;
    int slots[2];
    assert_int_equal(qkv_batch_decoder_add_with(bd, SOURCES, 2, &o, slots, &err), QKV_ERR_ARG);
    assert_non_null(strstr(err.msg, "need 6 rows"));
    assert_int_equal(qkv_batch_decoder_free_slots(bd), 5);
    assert_int_equal(qkv_batch_decoder_add_with(bd, SOURCES, 1, &o, slots, &err), QKV_OK);
    assert_int_equal(qkv_batch_decoder_free_slots(bd), 2);
    assert_int_equal(qkv_batch_decoder_running(bd), 1);
    qkv_batch_decoder_cancel(bd, slots[0]);
    assert_int_equal(qkv_batch_decoder_free_slots(bd), 5);
    o.n_best = 4;
    assert_int_equal(qkv_batch_decoder_add_with(bd, SOURCES, 1, &o, slots, &err), QKV_ERR_ARG);
    o.n_best = 1, o.alpha = -1.0f;
    assert_int_equal(qkv_batch_decoder_add_with(bd, SOURCES, 1, &o, slots, &err), QKV_ERR_ARG);
    assert_int_equal(qkv_batch_decoder_free_slots(bd), 5);
    qkv_translations r;
    assert_int_equal(qkv_batch_decoder_take_translations(bd, 0, &r, &err), QKV_ERR_ARG);
    qkv_batch_decoder_free(bd);
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
        cmocka_unit_test(test_beams_in_the_batch),
        cmocka_unit_test(test_beams_marian_and_bf16),
        cmocka_unit_test(test_beam_rows_and_errors),
    };
    return cmocka_run_group_tests_name("batch_decoder", tests, NULL, NULL);
}
