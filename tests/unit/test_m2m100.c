/* SPDX-License-Identifier: MIT */
/* qkv_import_nllb and qkv_import_m2m100 against transformers' M2M100ForConditionalGeneration:
 * tests/parity/make_m2m100_reference.py writes small random-weight NLLB-200 and M2M100
 * directories (tokenizers built by transformers at test time) and what transformers computes
 * with them; each is imported and must give
 *   logits   |qkv - HF| <= 1e-4 max(1, |HF|) for every sentence, position and token
 *            (teacher-forced: </s>, the target-language token, the reference)
 *   greedy   generate(forced_bos_token_id=the target language)'s tokens, token for token,
 *            with the language token forced as the first output (decoding_rules' prefix)
 *   beam     generate(num_beams=4, early_stopping=False)'s, the same, under
 *            QKV_BEAM_STOP_HF; and generate(num_beams=K, early_stopping=True)'s for K = 2,
 *            3, 4, 6 under QKV_BEAM_STOP_HF_EARLY and early_stopping="never"'s under
 *            QKV_BEAM_STOP_HF_NEVER (the reference counts the sentences where each differs
 *            from early_stopping=False: on nllb_tied some must, for the comparison to tell
 *            the rules apart)
 * with Hugging Face's ids mapped to qkv's (fairseq's <s> <pad> </s> <unk> are qkv's <bos>
 * <pad> <eos> <unk>; every other id is kept, which the vocabulary files must show). The command
 * line (--source-lang, --target-lang, the text) is tests/e2e/test_m2m100.sh. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "inference/decode.h"
#include "test_util.h"

static const char *parity_dir(void)
{
    const char *d = getenv("QKV_PARITY_DIR");
    return d ? d : "build/parity";
}

static int to_qkv(int id)
{
    static const int first[4] = {QKV_BOS, QKV_PAD, QKV_EOS, QKV_UNK};
    return id < 4 ? first[id] : id;
}

static void same(const char *name, const char *what, const int *got, const int *got_len, int T,
                 const int *want, const int *want_len, int max_new, int N)
{
    for (int i = 0; i < N; i++) {
        /* qkv's output starts with the forced language token, transformers' here does not */
        if (got_len[i] - 1 != want_len[i])
            fail_msg("%s, %s: sentence %d: qkv %d tokens, transformers %d", name, what, i,
                     got_len[i] - 1, want_len[i]);
        for (int j = 0; j < want_len[i]; j++)
            if (got[(size_t)i * T + 1 + j] != to_qkv(want[(size_t)i * max_new + j]))
                fail_msg("%s, %s: sentence %d, token %d: qkv %d, transformers %d", name, what, i,
                         j, got[(size_t)i * T + 1 + j], want[(size_t)i * max_new + j]);
    }
}

/* The batch decoder (greedy and beam, staggered) gives qkv_translate's translations with the
 * target language's token forced and the source's prefixed, and refuses to guess a target. */
static void batch_as_translate(const char *dir, const char *src_lang, const char *tgt_lang)
{
    static const char *const text[] = {"Hello world.", "A small house by the sea.", "Yes",
                                       "The cat sat on the mat and looked at the dog."};
    enum { n = sizeof text / sizeof *text };
    qkv_translator *tr;
    qkv_error err = {0};
    if (qkv_translator_open(&tr, dir, &err)) fail_msg("%s", err.msg);
    qkv_batch_decoder *bd;
    if (qkv_batch_decoder_create(&bd, tr, 3 * n, &err)) fail_msg("%s", err.msg);
    int slot[n];
    if (qkv_tokenizer_set_languages((qkv_tokenizer *)qkv_translator_tokenizer(tr), NULL, NULL,
                                    &err) == QKV_OK &&
        !qkv_translator_tokenizer(tr)->tgt_forced)
        assert_int_equal(qkv_batch_decoder_add(bd, text, 1, 0, slot, &err), QKV_ERR_ARG);
    if (qkv_translator_set_languages(tr, src_lang, tgt_lang, &err)) fail_msg("%s", err.msg);
    for (int beam = 1; beam <= 3; beam += 2) {
        qkv_translate_options o = qkv_translate_default_options();
        o.beam = o.n_best = beam, o.max_len = 8;
        qkv_translations want;
        if (qkv_translate(&want, tr, text, n, &o, &err)) fail_msg("%s", err.msg);
        for (int i = 0; i < n; i++) /* one joins each step */
            if (qkv_batch_decoder_add_with(bd, text + i, 1, &o, slot + i, &err) ||
                qkv_batch_decoder_step(bd, &err))
                fail_msg("%s", err.msg);
        for (int done = 0, steps = 0; done < n; steps++) {
            assert_true(steps < 100);
            for (int i = 0; i < n; i++) {
                if (slot[i] < 0 || !qkv_batch_decoder_finished(bd, slot[i])) continue;
                qkv_translations got;
                if (qkv_batch_decoder_take_translations(bd, slot[i], &got, &err))
                    fail_msg("%s", err.msg);
                for (int k = 0; k < beam; k++)
                    if ((got.text[k] == NULL) != (want.text[i * beam + k] == NULL) ||
                        (got.text[k] && strcmp(got.text[k], want.text[i * beam + k])))
                        fail_msg("%s, beam %d, source %d, hypothesis %d: batch '%s', "
                                 "qkv_translate '%s'", dir, beam, i, k, got.text[k],
                                 want.text[i * beam + k]);
                qkv_translations_free(&got);
                slot[i] = -1, done++;
            }
            if (done < n && qkv_batch_decoder_step(bd, &err)) fail_msg("%s", err.msg);
        }
        qkv_translations_free(&want);
    }
    qkv_batch_decoder_free(bd);
    qkv_translator_free(tr);
}

/* differ: whether early_stopping True and False must translate some sentence differently
 * there (on nllb_tied they do at beam 2), so that the comparison can tell the rules apart. */
static void check(const char *name, int nllb, int differ_some)
{
    char hf[1024], ref[256], out[] = "/tmp/qkv_m2m100_XXXXXX", path[1200];
    snprintf(hf, sizeof hf, "%s/m2m100_%s", parity_dir(), name);
    snprintf(ref, sizeof ref, "m2m100_%s", name);
    assert_non_null(mkdtemp(out));
    qkv_error err = {0};
    if ((nllb ? qkv_import_nllb : qkv_import_m2m100)(hf, out, &err)) fail_msg("%s", err.msg);
    qkv_transformer *m;
    if (qkv_transformer_load(&m, out, &err)) fail_msg("%s", err.msg);
    qkv_tensor_file f;
    tu_reference_load(&f, ref);
    size_t n;
    const qkv_tensor *srct = qkv_tensor_file_get(&f, "src"), *tin = qkv_tensor_file_get(&f, "tgt_in");
    const int N = (int)srct->shape[0], Ts = (int)srct->shape[1], Tt = (int)tin->shape[1];
    const int V = qkv_transformer_get_config(m)->tgt_vocab;
    const int *src_h = tu_ref_i32(&f, "src", &n), *valid = tu_ref_i32(&f, "src_valid", &n);
    const int *tin_h = tu_ref_i32(&f, "tgt_in", &n);
    const float *want = tu_ref_f32(&f, "logits", &n);
    assert_int_equal(n, (size_t)N * Tt * V);
    /* the vocabulary file keeps Hugging Face's ids: the forced language token is its line */
    qkv_vocab voc;
    snprintf(path, sizeof path, "%s/tgt_vocab.txt", out);
    if (qkv_vocab_load(&voc, path, &err)) fail_msg("%s", err.msg);
    const int forced = tu_ref_int(&f, "forced");
    const char *code = qkv_tensor_file_meta(&f, "tgt_lang");
    assert_non_null(strstr(qkv_vocab_token(&voc, forced), code));
    qkv_vocab_free(&voc);
    int *s = malloc((size_t)N * Ts * sizeof *s), *t = malloc((size_t)N * Tt * sizeof *t);
    for (int i = 0; i < N * Ts; i++) s[i] = to_qkv(src_h[i]);
    for (int i = 0; i < N * Tt; i++) t[i] = to_qkv(tin_h[i]);
    float *got = malloc((size_t)N * Tt * V * sizeof *got);
    const qkv_batch b = {N, Ts, Tt, s, valid, t, t};
    if (qkv_transformer_logits(m, &b, got, &err)) fail_msg("%s", err.msg);
    double worst = 0.0;
    int rows = 0;
    for (int r = 0; r < N * Tt; r++)
        /* fairseq gives a padding input the padding row's position: no reference past it */
        for (int k = 0; k < V && (r % Tt == 0 || t[r] != QKV_PAD); k++) {
            rows += k == 0;
            const double w = want[(size_t)r * V + k], g = got[(size_t)r * V + to_qkv(k)];
            const double d = fabs(g - w) / (fabs(w) > 1.0 ? fabs(w) : 1.0);
            if (!(d <= 1e-4))
                fail_msg("%s: logits of sentence %d, position %d, token %d: qkv %.7g, "
                         "transformers %.7g", name, r / Tt, r % Tt, k, g, w);
            if (d > worst) worst = d;
        }
    /* greedy and beam with the target language forced first */
    const int max_new = tu_ref_int(&f, "max_new"), T = max_new - 1;
    decoding_rules rules = {QKV_EOS, 0, 0, qkv_transformer_get_config(m)->forced_eos, &forced, 1};
    const int qforced = to_qkv(forced);
    rules.prefix = &qforced;
    int *ids = malloc((size_t)N * T * sizeof *ids), *len = malloc((size_t)N * sizeof *len);
    if (greedy_decode(m, s, valid, N, Ts, T, NULL, &rules, ids, len, &err)) fail_msg("%s", err.msg);
    same(name, "greedy", ids, len, T, tu_ref_i32(&f, "greedy", &n), tu_ref_i32(&f, "greedy_len", &n),
         max_new, N);
    const qkv_beam_options o = {tu_ref_int(&f, "beam"), 1, T, 1.0f, QKV_BEAM_STOP_HF, NULL};
    qkv_beam_results r = {ids, len, NULL, NULL};
    if (beam_decode(m, s, valid, N, Ts, &o, &rules, &r, &err)) fail_msg("%s", err.msg);
    same(name, "beam", ids, len, T, tu_ref_i32(&f, "beam0", &n), tu_ref_i32(&f, "beam0_len", &n),
         max_new, N);
    printf("%s: %d sentences: logits within %.1e (%d positions), greedy and beam %d identical "
           "with %s forced\n", name, N, worst, rows, o.beam, code);
    /* transformers' other stopping rules, "early_K" and "never_K" */
    char names[256], key[64];
    snprintf(names, sizeof names, "%s", qkv_tensor_file_meta(&f, "rules"));
    int differ = 0;
    for (char *save = NULL, *rule = strtok_r(names, ",", &save); rule;
         rule = strtok_r(NULL, ",", &save)) {
        const int K = atoi(strchr(rule, '_') + 1);
        const qkv_beam_options ro = {K, 1, T, 1.0f, rule[0] == 'e' ? QKV_BEAM_STOP_HF_EARLY
                                                                    : QKV_BEAM_STOP_HF_NEVER,
                                     NULL};
        if (beam_decode(m, s, valid, N, Ts, &ro, &rules, &r, &err)) fail_msg("%s", err.msg);
        snprintf(key, sizeof key, "%s_len", rule);
        same(name, rule, ids, len, T, tu_ref_i32(&f, rule, &n), tu_ref_i32(&f, key, &n), max_new,
             N);
        snprintf(key, sizeof key, "%s_differ", rule);
        const int d = tu_ref_int(&f, key);
        printf("%s: %s (%s, beam %d) identical; %d of %d sentences differ from "
               "early_stopping=False\n", name, rule, qkv_beam_stop_name(ro.stop), K, d, N);
        if (rule[0] == 'e') differ += d;
    }
    if (differ_some) assert_true(differ > 0);
    free(ids), free(len), free(got), free(s), free(t);
    qkv_transformer_free(m);
    batch_as_translate(out, qkv_tensor_file_meta(&f, "src_lang"), code);
    qkv_tensor_file_free(&f);
    static const char *const files[] = {"config.json", "model.safetensors", "src_vocab.txt",
                                        "tgt_vocab.txt", "source.spm", "target.spm",
                                        "text.json", "generation.json"};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        snprintf(path, sizeof path, "%s/%s", out, files[i]);
        unlink(path);
    }
    rmdir(out);
}

static void test_nllb_tied(void **state) { (void)state, check("nllb_tied", 1, 1); }
static void test_nllb_untied_gelu(void **state) { (void)state, check("nllb_untied_gelu", 1, 0); }
static void test_m2m100_unscaled(void **state) { (void)state, check("m2m100_unscaled", 0, 0); }

/* fairseq's table: row i is position i + 2, [sin | cos] at exp(-j ln(10000) / (h - 1)) */
static void test_fairseq_table(void **state)
{
    (void)state;
    enum { T = 5, C = 7 };
    float P[T * C];
    qkv_sinusoidal_table_fairseq(P, T, C);
    for (int i = 0; i < T; i++)
        for (int j = 0; j < 3; j++) {
            const double w = exp(-j * log(10000.0) / 2.0);
            assert_true(fabs(P[i * C + j] - sin((i + 2) * w)) < 1e-6);
            assert_true(fabs(P[i * C + 3 + j] - cos((i + 2) * w)) < 1e-6);
        }
    for (int i = 0; i < T; i++) assert_true(P[i * C + C - 1] == 0.0f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fairseq_table),
        cmocka_unit_test(test_nllb_tied),
        cmocka_unit_test(test_nllb_untied_gelu),
        cmocka_unit_test(test_m2m100_unscaled),
    };
    return cmocka_run_group_tests_name("m2m100", tests, NULL, NULL);
}
