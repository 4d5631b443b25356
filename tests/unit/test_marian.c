/* SPDX-License-Identifier: MIT */
/* What Marian / OPUS-MT models need of the encoder-decoder (qkv import marian): SiLU, the
 * [sin | cos] positional table, unscaled embeddings, decoding from <pad>, <pad> never
 * generated, and that a config.json without these keys still reads as d2l's model (their
 * training parity is test_model_parity's case model_marian_silu); then qkv_import_marian
 * against Hugging Face's MarianMTModel: tests/parity/make_marian_reference.py writes small
 * random-weight MarianMT directories and what transformers computes with them, and each is
 * imported and must give
 *   logits   |qkv - HF| <= 1e-4 max(1, |HF|) for every sentence, position and token, and
 *            the same log-normaliser (qkv's extra <bos> column takes no probability)
 *   greedy   generate(num_beams=1)'s tokens, token for token, for every sentence
 *   beam     generate(num_beams=4, length_penalty=1.0 and 0.6)'s, the same, under
 *            QKV_BEAM_STOP_HF (transformers' scorer) with the model's forced_eos
 * with ids mapped through the two vocabularies' token strings (not through the importer's
 * own map). The command line (refusals, the directory) is tests/e2e/test_marian.sh. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cJSON.h>

#include "test_util.h"

static void test_silu(void **state)
{
    (void)state;
    const float x[] = {-90.0f, -3.0f, -0.5f, 0.0f, 0.25f, 2.0f, 90.0f};
    const size_t n = sizeof x / sizeof *x;
    float y[7], dx[7] = {0}, dy[7];
    qkv_silu_forward(y, x, n);
    for (size_t i = 0; i < n; i++) {
        const double s = 1.0 / (1.0 + exp(-(double)x[i]));
        assert_true(fabs(y[i] - x[i] * s) <= 1e-6 * (1.0 + fabs(x[i] * s)));
        dy[i] = 1.0f + (float)i;
    }
    qkv_silu_backward(dx, dy, x, n);
    for (size_t i = 0; i < n; i++) { /* central differences in double */
        const double h = 1e-4, a = x[i] - h, b = x[i] + h;
        const double fd = (b / (1.0 + exp(-b)) - a / (1.0 + exp(-a))) / (2 * h);
        assert_true(fabs(dx[i] - dy[i] * fd) <= 1e-4 * dy[i]);
    }
    assert_false(isnan(y[0]) || isnan(dx[0]) || isnan(dx[n - 1]));
}

/* [sin | cos]: the interleaved table's columns, moved (even C); odd C has one more sine */
static void test_halves_table(void **state)
{
    (void)state;
    enum { T = 7, C = 10 };
    float inter[T * C], halves[T * C];
    qkv_sinusoidal_table(inter, T, C);
    qkv_sinusoidal_table_halves(halves, T, C);
    for (int i = 0; i < T; i++)
        for (int j = 0; j < C / 2; j++) {
            assert_true(halves[i * C + j] == inter[i * C + 2 * j]);
            assert_true(halves[i * C + C / 2 + j] == inter[i * C + 2 * j + 1]);
        }
    float odd[T * 5];
    qkv_sinusoidal_table_halves(odd, T, 5);
    for (int i = 0; i < T; i++) { /* sines at 10000^(0, 2/5, 4/5), cosines at (0, 2/5) */
        assert_true(fabsf(odd[i * 5 + 2] - (float)sin(i / pow(10000.0, 4.0 / 5))) < 1e-7f);
        assert_true(fabsf(odd[i * 5 + 4] - (float)cos(i / pow(10000.0, 2.0 / 5))) < 1e-7f);
    }
}

static qkv_transformer_config marian_config(void)
{
    qkv_transformer_config c = qkv_transformer_default_config();
    c.src_vocab = c.tgt_vocab = 12, c.d_model = 8, c.heads = 2, c.ffn = 16, c.max_len = 16;
    c.dropout = 0.0f, c.bias = 1, c.act = QKV_ACT_SILU, c.tie = QKV_TIE_ALL;
    c.pos_layout = QKV_POS_HALVES, c.scale_embedding = 0, c.decoder_start = QKV_PAD;
    c.suppress_pad = 1, c.forced_eos = 1;
    return c;
}

static void test_config_json(void **state)
{
    (void)state;
    qkv_error err = {0};
    const qkv_transformer_config c = marian_config();
    char *json = NULL;
    assert_int_equal(qkv_config_to_json(&c, &json, &err), QKV_OK);
    assert_non_null(strstr(json, "\"silu\"") && strstr(json, "\"sin_cos\"") &&
                    strstr(json, "\"<pad>\""));
    qkv_transformer_config back;
    assert_int_equal(qkv_config_from_json(&back, json, "x.json", &err), QKV_OK);
    assert_int_equal(back.act, QKV_ACT_SILU);
    assert_int_equal(back.pos_layout, QKV_POS_HALVES);
    assert_int_equal(back.scale_embedding, 0);
    assert_int_equal(back.decoder_start, QKV_PAD);
    assert_int_equal(back.suppress_pad, 1);
    assert_int_equal(back.forced_eos, 1);
    free(json);
    /* a model directory written before these options: d2l's behaviour */
    const char *old = "{\"format\": \"qkv-transformer\", \"version\": 1, \"src_vocab\": 9, "
                      "\"tgt_vocab\": 9, \"d_model\": 8, \"heads\": 2, \"ffn\": 16, "
                      "\"enc_layers\": 1, \"dec_layers\": 1, \"max_len\": 10, \"dropout\": 0.1, "
                      "\"bias\": false, \"pre_norm\": false, \"final_norm\": false, "
                      "\"act\": \"relu\", \"tie\": \"none\", \"learned_pos\": false, "
                      "\"ln_eps\": 1e-05}";
    if (qkv_config_from_json(&back, old, "old.json", &err)) fail_msg("%s", err.msg);
    assert_int_equal(back.pos_layout, QKV_POS_INTERLEAVED);
    assert_int_equal(back.scale_embedding, 1);
    assert_int_equal(back.decoder_start, QKV_BOS);
    assert_int_equal(back.suppress_pad, 0);
    assert_int_equal(back.forced_eos, 0);
    char bad[1024];
    snprintf(bad, sizeof bad, "%.*s, \"decoder_start\": \"<unk>\"}", (int)strlen(old) - 1, old);
    assert_int_not_equal(qkv_config_from_json(&back, bad, "bad.json", &err), QKV_OK);
    assert_non_null(strstr(err.msg, "bad.json"));
}

/* Decoding starts from decoder_start and never produces <pad>, even when <pad> is the argmax
 * everywhere: greedy's first token is the argmax of the teacher-forced logits after <pad>,
 * and beam search with K = 1 is greedy decoding. */
static void test_start_and_suppress(void **state)
{
    (void)state;
    qkv_error err = {0};
    qkv_transformer_config c = marian_config();
    qkv_transformer *m;
    assert_int_equal(qkv_transformer_create(&m, &c, 7, &err), QKV_OK);
    qkv_param_info b = {0};
    for (int i = 0; i < qkv_transformer_num_tensors(m); i++)
        if (!strcmp(qkv_transformer_tensor(m, i).name, "output.b")) b = qkv_transformer_tensor(m, i);
    float *p = qkv_transformer_params(m);
    p[b.offset + QKV_PAD] = 1e4f; /* <pad> would win every step */
    p[b.offset + QKV_EOS] = -1e4f; /* and no sentence ends early */
    enum { Ts = 4, T = 6 };
    const int src[Ts] = {5, 6, 7, QKV_EOS}, valid = Ts;
    int out[T], len = 0;
    assert_int_equal(qkv_transformer_greedy(m, src, &valid, 1, Ts, T, out, &len, &err), QKV_OK);
    assert_int_equal(len, T);
    for (int t = 0; t < T; t++) assert_int_not_equal(out[t], QKV_PAD);
    /* the first token from the logits after <pad>, without <pad> */
    const int tgt_in[1] = {QKV_PAD};
    float logits[12];
    const qkv_batch batch = {1, Ts, 1, src, &valid, tgt_in, tgt_in};
    assert_int_equal(qkv_transformer_logits(m, &batch, logits, &err), QKV_OK);
    int best = QKV_UNK;
    for (int v = 1; v < 12; v++)
        if (v != QKV_PAD && logits[v] > logits[best]) best = v;
    assert_int_equal(out[0], best);
    int bout[T], blen = 0;
    const qkv_beam_options o = {1, 1, T, 0.0f, QKV_BEAM_STOP_BOUND, NULL};
    qkv_beam_results r = {bout, &blen, NULL, NULL};
    assert_int_equal(qkv_transformer_beam(m, src, &valid, 1, Ts, &o, &r, &err), QKV_OK);
    assert_int_equal(blen, len);
    assert_memory_equal(bout, out, (size_t)len * sizeof *out);
    /* without suppress_pad, <pad> is what it produces */
    c.suppress_pad = 0;
    qkv_transformer *m2;
    assert_int_equal(qkv_transformer_create(&m2, &c, 7, &err), QKV_OK);
    memcpy(qkv_transformer_params(m2), p, qkv_transformer_num_params(m) * sizeof *p);
    assert_int_equal(qkv_transformer_greedy(m2, src, &valid, 1, Ts, T, out, &len, &err), QKV_OK);
    assert_int_equal(out[0], QKV_PAD);
    qkv_transformer_free(m2);
    qkv_transformer_free(m);
}

/* ---- the import against transformers ------------------------------------------------ */

static const char *parity_dir(void)
{
    const char *d = getenv("QKV_PARITY_DIR");
    return d ? d : "build/parity";
}

/* Marian id -> qkv id through the token strings of HF's vocab.json and qkv's vocabulary
 * file; *rows receives Marian's vocabulary size. */
static int *marian_to_qkv(const char *vocab_json, const char *qkv_vocab_path, int *rows)
{
    qkv_error err = {0};
    char *text = NULL;
    size_t len = 0;
    if (qkv_read_file(vocab_json, SIZE_MAX, &text, &len, &err)) fail_msg("%s", err.msg);
    cJSON *o = cJSON_Parse(text);
    free(text);
    assert_non_null(o);
    qkv_vocab v;
    if (qkv_vocab_load(&v, qkv_vocab_path, &err)) fail_msg("%s", err.msg);
    *rows = cJSON_GetArraySize(o);
    assert_int_equal(v.size, *rows + 1); /* + <bos> */
    int *map = malloc((size_t)*rows * sizeof *map);
    for (const cJSON *e = o->child; e; e = e->next) {
        const int id = e->valueint;
        map[id] = !strcmp(e->string, "</s>") ? QKV_EOS : qkv_vocab_id(&v, e->string);
        if (strcmp(e->string, "</s>")) assert_string_equal(qkv_vocab_token(&v, map[id]), e->string);
    }
    qkv_vocab_free(&v);
    cJSON_Delete(o);
    return map;
}

/* qkv's outputs (N, T) against transformers' (N, max_new) in Marian ids; the tokens compared */
static int same_outputs(const char *name, const char *what, const int *got, const int *got_len,
                        int T, const int *want, const int *want_len, int max_new,
                        const int *tmap, int N)
{
    int tokens = 0;
    for (int i = 0; i < N; i++) {
        if (got_len[i] != want_len[i])
            fail_msg("%s, %s: sentence %d: qkv's output has %d tokens, transformers' %d", name,
                     what, i, got_len[i], want_len[i]);
        for (int j = 0; j < want_len[i]; j++)
            if (got[(size_t)i * T + j] != tmap[want[(size_t)i * max_new + j]])
                fail_msg("%s, %s: sentence %d, token %d: qkv %d, transformers %d (qkv id %d)",
                         name, what, i, j, got[(size_t)i * T + j], want[(size_t)i * max_new + j],
                         tmap[want[(size_t)i * max_new + j]]);
        tokens += want_len[i];
    }
    return tokens;
}

/* qkv_tokenizer_decode of the imported directory against MarianTokenizer.decode on the
 * random piece sequences of marian_<name>.decode.tsv (pieces only the source model knows,
 * <unk>, spaces before punctuation: text.json's "detokenize": "marian" and
 * "clean_up_spaces"). */
static void check_decodings(const char *name, const char *dir)
{
    char path[1200], line[4096], text[4096];
    snprintf(path, sizeof path, "%s/marian_%s.decode.tsv", parity_dir(), name);
    FILE *f = fopen(path, "r");
    if (!f) fail_msg("%s: cannot open", path);
    qkv_tokenizer tok;
    qkv_error err = {0};
    if (qkv_tokenizer_load(&tok, dir, &err)) fail_msg("%s", err.msg);
    assert_int_equal(tok.detokenize, QKV_DETOK_MARIAN);
    int lines = 0, differ = 0;
    while (fgets(line, sizeof line, f)) {
        char *tab = strchr(line, '\t'), *save = NULL;
        assert_non_null(tab);
        *tab = '\0';
        tab[strcspn(tab + 1, "\n") + 1] = '\0';
        int ids[64], n = 0;
        for (char *p = strtok_r(line, " ", &save); p && n < 64; p = strtok_r(NULL, " ", &save)) {
            ids[n] = qkv_vocab_id(&tok.tgt, p);
            assert_true(ids[n] != QKV_UNK || !strcmp(p, "<unk>"));
            n++;
        }
        qkv_tokenizer_decode(&tok, text, sizeof text, ids, n);
        if (strcmp(text, tab + 1))
            fail_msg("%s: line %d: qkv \"%s\", MarianTokenizer \"%s\"", path, lines + 1, text,
                     tab + 1);
        /* the pieces the target model decodes itself would differ without the rendering */
        char *plain = NULL;
        const char *pieces[64];
        int k = 0;
        for (int i = 0; i < n; i++)
            if (ids[i] != QKV_UNK) pieces[k++] = qkv_vocab_token(&tok.tgt, ids[i]);
        if (!qkv_spm_decode_pieces(tok.tgt_spm, pieces, k, &plain, &err))
            differ += strcmp(plain, text) != 0;
        free(plain);
        lines++;
    }
    fclose(f);
    assert_true(lines >= 100);
    printf("%s: %d piece sequences decoded as MarianTokenizer does (%d of them unlike "
           "SentencePiece's own decoding)\n", name, lines, differ);
    qkv_tokenizer_free(&tok);
}

/* The import of marian_<name> (a Hugging Face directory, or a Marian release whose
 * transformers conversion is marian_<name>_hf, the one the references were computed with). */
static void check_import(const char *name, int release)
{
    char hf[1024], source[1024], ref[256], out[] = "/tmp/qkv_marian_XXXXXX", path[1200],
                                            path2[1200];
    snprintf(source, sizeof source, "%s/marian_%s", parity_dir(), name);
    snprintf(hf, sizeof hf, "%s/marian_%s%s", parity_dir(), name, release ? "_hf" : "");
    snprintf(ref, sizeof ref, "marian_%s", name);
    assert_non_null(mkdtemp(out));
    qkv_error err = {0};
    if (qkv_import_marian(source, out, &err)) fail_msg("%s", err.msg);
    qkv_transformer *m;
    if (qkv_transformer_load(&m, out, &err)) fail_msg("%s", err.msg);
    int Vs = 0, Vt = 0;
    snprintf(path, sizeof path, "%s/vocab.json", hf), snprintf(path2, sizeof path2, "%s/src_vocab.txt", out);
    int *smap = marian_to_qkv(path, path2, &Vs);
    snprintf(path, sizeof path, "%s/target_vocab.json", hf);
    if (access(path, F_OK)) snprintf(path, sizeof path, "%s/vocab.json", hf);
    snprintf(path2, sizeof path2, "%s/tgt_vocab.txt", out);
    int *tmap = marian_to_qkv(path, path2, &Vt);

    qkv_tensor_file f;
    tu_reference_load(&f, ref);
    const qkv_tensor *src = qkv_tensor_file_get(&f, "src"), *tin = qkv_tensor_file_get(&f, "tgt_in");
    const int N = (int)src->shape[0], Ts = (int)src->shape[1], Tt = (int)tin->shape[1];
    const int V = qkv_transformer_get_config(m)->tgt_vocab;
    size_t n;
    const int *src_m = tu_ref_i32(&f, "src", &n), *valid = tu_ref_i32(&f, "src_valid", &n);
    const int *tin_m = tu_ref_i32(&f, "tgt_in", &n);
    const float *want = tu_ref_f32(&f, "logits", &n);
    assert_int_equal(n, (size_t)N * Tt * Vt);
    int *s = malloc((size_t)N * Ts * sizeof *s), *t = malloc((size_t)N * Tt * sizeof *t);
    for (int i = 0; i < N * Ts; i++) s[i] = smap[src_m[i]];
    for (int i = 0; i < N * Tt; i++) t[i] = tmap[tin_m[i]];
    float *got = malloc((size_t)N * Tt * V * sizeof *got);
    const qkv_batch b = {N, Ts, Tt, s, valid, t, t};
    if (qkv_transformer_logits(m, &b, got, &err)) fail_msg("%s", err.msg);
    double worst = 0.0;
    for (int r = 0; r < N * Tt; r++)
        for (int k = 0; k < Vt; k++) {
            const double w = want[(size_t)r * Vt + k], g = got[(size_t)r * V + tmap[k]];
            const double d = fabs(g - w) / (fabs(w) > 1.0 ? fabs(w) : 1.0);
            if (!(d <= 1e-4))
                fail_msg("%s: logits of sentence %d, position %d, token %d: qkv %.7g, "
                         "transformers %.7g", name, r / Tt, r % Tt, k, g, w);
            if (d > worst) worst = d;
        }
    /* and the normaliser: qkv's extra <bos> column takes no probability */
    for (int r = 0; r < N * Tt; r++) {
        double zq = 0.0, zh = 0.0;
        for (int k = 0; k < V; k++) zq += exp((double)got[(size_t)r * V + k]);
        for (int k = 0; k < Vt; k++) zh += exp((double)want[(size_t)r * Vt + k]);
        if (!(fabs(log(zq) - log(zh)) <= 1e-4))
            fail_msg("%s: row %d: log-normaliser qkv %.7g, transformers %.7g", name, r, log(zq),
                     log(zh));
    }

    /* greedy: generate(max_new_tokens) forces </s> as its last token */
    const int max_new = tu_ref_int(&f, "max_new"), T = max_new - 1;
    const int *greedy = tu_ref_i32(&f, "greedy", &n), *glen = tu_ref_i32(&f, "greedy_len", &n);
    int *out_ids = malloc((size_t)N * T * sizeof *out_ids), *out_len = malloc((size_t)N * sizeof *out_len);
    if (qkv_transformer_greedy(m, s, valid, N, Ts, T, out_ids, out_len, &err)) fail_msg("%s", err.msg);
    const int tokens = same_outputs(name, "greedy", out_ids, out_len, T, greedy, glen, max_new,
                                    tmap, N);
    /* beam search: transformers' BeamSearchScorer (QKV_BEAM_STOP_HF) with its length_penalty */
    int beam_tokens = 0;
    for (int k = 0; k < 2; k++) {
        char key[32], len_key[32], lp_key[32];
        snprintf(key, sizeof key, "beam%d", k), snprintf(len_key, sizeof len_key, "beam%d_len", k);
        snprintf(lp_key, sizeof lp_key, "length_penalty%d", k);
        const qkv_beam_options o = {tu_ref_int(&f, "beam"), 1, T, tu_ref_float(&f, lp_key),
                                    QKV_BEAM_STOP_HF, NULL};
        qkv_beam_results r = {out_ids, out_len, NULL, NULL};
        if (qkv_transformer_beam(m, s, valid, N, Ts, &o, &r, &err)) fail_msg("%s", err.msg);
        char what[64];
        snprintf(what, sizeof what, "beam %d, length_penalty %g", o.beam, (double)o.alpha);
        beam_tokens += same_outputs(name, what, out_ids, out_len, T, tu_ref_i32(&f, key, &n),
                                    tu_ref_i32(&f, len_key, &n), max_new, tmap, N);
    }
    check_decodings(name, out);
    printf("%s: %d sentences: logits within %.1e (relative, max(1, |HF|)), greedy identical "
           "(%d tokens), beam identical (%d tokens, 2 length penalties)\n", name, N, worst,
           tokens, beam_tokens);
    free(out_ids), free(out_len), free(got), free(s), free(t), free(smap), free(tmap);
    qkv_tensor_file_free(&f);
    qkv_transformer_free(m);
    static const char *const files[] = {"config.json", "model.safetensors", "src_vocab.txt",
                                        "tgt_vocab.txt", "source.spm", "target.spm", "text.json",
                                        "generation.json"};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        snprintf(path, sizeof path, "%s/%s", out, files[i]);
        unlink(path);
    }
    rmdir(out);
}

static void test_import_shared_swish(void **state) { (void)state, check_import("shared_swish", 0); }
static void test_import_separate_gelu(void **state) { (void)state, check_import("separate_gelu", 0); }
static void test_import_shared_relu_untied(void **state)
{
    (void)state, check_import("shared_relu_untied", 0);
}

static void test_import_shared_multi_target(void **state)
{
    (void)state, check_import("shared_multi_target", 0);
}

/* Marian's own format: the release directories of make_marian_reference.py's RELEASES */
static void test_import_release_shared(void **state)
{
    (void)state, check_import("release_shared", 1);
}

static void test_import_release_separate(void **state)
{
    (void)state, check_import("release_separate", 1);
}

static void test_import_shared_source_pieces(void **state)
{
    (void)state, check_import("shared_source_pieces", 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_silu),
        cmocka_unit_test(test_halves_table),
        cmocka_unit_test(test_config_json),
        cmocka_unit_test(test_start_and_suppress),
        cmocka_unit_test(test_import_shared_swish),
        cmocka_unit_test(test_import_separate_gelu),
        cmocka_unit_test(test_import_shared_relu_untied),
        cmocka_unit_test(test_import_shared_source_pieces),
        cmocka_unit_test(test_import_shared_multi_target),
        cmocka_unit_test(test_import_release_shared),
        cmocka_unit_test(test_import_release_separate),
    };
    return cmocka_run_group_tests_name("marian", tests, NULL, NULL);
}
