/* SPDX-License-Identifier: MIT */
/* The translator: a model directory written here (word vocabularies, subword encodings,
 * whitespace tokens with <bos>) opens and translates raw strings exactly as
 * qkv_transformer_greedy / qkv_transformer_beam decode the same ids in the same batches; text
 * is the ids' detokenised text; n-best scores are beam search's; over-long sources are cut
 * and reported; empty input and batches larger than the batch size work; a best/ directory
 * takes its vocabularies from its parent; bad directories and options fail with messages
 * naming the file or the option. And validation BLEU in qkv_train, given the tokenizer and
 * the references as words, is BLEU over the translations' words. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_util.h"

enum { MAX_LEN = 12, NUM_STEPS = 7 };

static const char *const SRC_TEXT =
    "the cat sat on the mat .\na dog ran to the big house .\nthe red cat ran .\n"
    "a big dog sat on a red mat !\n";
static const char *const TGT_TEXT =
    "le chat est sur le tapis .\nun chien court vers la grande maison .\nle chat rouge court .\n"
    "un grand chien est sur un tapis rouge !\n";

static void temp_dir(char *dir, size_t cap)
{
    snprintf(dir, cap, "/tmp/qkv_translator_XXXXXX");
    assert_non_null(mkdtemp(dir));
}

static void remove_tree(const char *dir)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

static void write_file(const char *dir, const char *name, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_true(fputs(text, f) >= 0);
    assert_int_equal(fclose(f), 0);
}

static void remove_file(const char *dir, const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    assert_int_equal(remove(path), 0);
}

/* A random model over the vocabularies, with sharper distributions than the initialisation's
 * and <eos> favoured, so that beams differ from greedy and translations end at varied
 * lengths. */
static qkv_transformer *random_model(int src_vocab, int tgt_vocab, uint64_t seed)
{
    qkv_transformer_config cfg = qkv_transformer_default_config();
    cfg.src_vocab = src_vocab, cfg.tgt_vocab = tgt_vocab, cfg.dropout = 0.0f, cfg.bias = 1;
    cfg.max_len = MAX_LEN, cfg.d_model = 16, cfg.heads = 2, cfg.ffn = 24;
    qkv_transformer *m;
    assert_int_equal(qkv_transformer_create(&m, &cfg, seed, NULL), QKV_OK);
    float *p = qkv_transformer_params(m);
    for (size_t i = 0; i < qkv_transformer_num_params(m); i++) p[i] *= 1.5f;
    for (int i = 0; i < qkv_transformer_num_tensors(m); i++) {
        qkv_param_info t = qkv_transformer_tensor(m, i);
        if (!strcmp(t.name, "output.b")) p[t.offset + QKV_EOS] += 5.0f;
    }
    return m;
}

/* A model directory with word vocabularies from the texts above and train.json. */
static void word_model_dir(char *dir, size_t cap, uint64_t seed)
{
    temp_dir(dir, cap);
    qkv_sentences s = {0}, t = {0};
    qkv_vocab sv = {0}, tv = {0};
    char path[512];
    assert_int_equal(qkv_sentences_from_text(&s, SRC_TEXT, strlen(SRC_TEXT), "src", NULL), QKV_OK);
    assert_int_equal(qkv_sentences_from_text(&t, TGT_TEXT, strlen(TGT_TEXT), "tgt", NULL), QKV_OK);
    assert_int_equal(qkv_vocab_build(&sv, s.tokens, s.n_tokens, 1, NULL), QKV_OK);
    assert_int_equal(qkv_vocab_build(&tv, t.tokens, t.n_tokens, 1, NULL), QKV_OK);
    qkv_transformer *m = random_model(sv.size, tv.size, seed);
    assert_int_equal(qkv_transformer_save(m, dir, NULL), QKV_OK);
    snprintf(path, sizeof path, "%s/src_vocab.txt", dir);
    assert_int_equal(qkv_vocab_save(&sv, path, NULL), QKV_OK);
    snprintf(path, sizeof path, "%s/tgt_vocab.txt", dir);
    assert_int_equal(qkv_vocab_save(&tv, path, NULL), QKV_OK);
    write_file(dir, "train.json", "{\"num_steps\": 7, \"tokenizer\": \"word\"}\n");
    qkv_transformer_free(m);
    qkv_sentences_free(&s), qkv_sentences_free(&t);
    qkv_vocab_free(&sv), qkv_vocab_free(&tv);
}

static qkv_translator *open_ok(const char *dir)
{
    qkv_translator *t = NULL;
    qkv_error err = {0};
    if (qkv_translator_open(&t, dir, &err)) fail_msg("%s", err.msg);
    return t;
}

/* The source ids the translator must feed the model: [<bos>] + the tokens' ids + <eos>, cut
 * to the model's length (losing <eos>). Returns the count. */
static int source_ids(int *ids, const qkv_vocab *v, const qkv_sentences *s, int i, int bos)
{
    int n = 0;
    if (bos) ids[n++] = QKV_BOS;
    for (int k = 0; k < qkv_sentence_len(s, i); k++)
        ids[n++] = qkv_vocab_id(v, s->tokens[s->start[i] + k]);
    ids[n++] = QKV_EOS;
    return n < MAX_LEN ? n : MAX_LEN;
}

/* What the model itself decodes for the sources `tokens` (the model's tokens) in batches of
 * `batch`, each padded to its longest source: ids (count, n_best, max_len), len, score.
 * beam NULL: greedy decoding. */
static void reference(qkv_translator *t, const qkv_sentences *tokens, int batch, int max_len,
                      const qkv_beam_options *beam, int *ids, int *len, double *score)
{
    qkv_transformer *m = qkv_translator_model(t);
    const qkv_tokenizer *tok = qkv_translator_tokenizer(t);
    const int N = beam ? beam->n_best : 1;
    int row[64], src[16 * MAX_LEN], valid[16];
    for (int first = 0; first < tokens->count; first += batch) {
        const int B = tokens->count - first < batch ? tokens->count - first : batch;
        int T = 1;
        for (int b = 0; b < B; b++) {
            valid[b] = source_ids(row, &tok->src, tokens, first + b, tok->source_bos);
            if (valid[b] > T) T = valid[b];
        }
        for (int b = 0; b < B; b++) {
            source_ids(row, &tok->src, tokens, first + b, tok->source_bos);
            for (int k = 0; k < T; k++) src[b * T + k] = k < valid[b] ? row[k] : QKV_PAD;
        }
        const size_t at = (size_t)first * N;
        qkv_beam_results out = {ids + at * max_len, len + at, score + at, NULL};
        if (beam)
            assert_int_equal(qkv_transformer_beam(m, src, valid, B, T, beam, &out, NULL), QKV_OK);
        else
            assert_int_equal(qkv_transformer_greedy(m, src, valid, B, T, max_len,
                                                    ids + at * max_len, len + at, NULL), QKV_OK);
    }
}

/* r holds exactly the reference's ids, lengths and scores (NaN for greedy), and the text of
 * each hypothesis found is its ids' text. limits (count) or NULL: each sentence's length limit
 * below r->max_len, for greedy decoding (whose output to a limit is the longer one's prefix). */
static void check_results_limits(const qkv_translations *r, qkv_translator *t,
                                 const qkv_sentences *tokens, int batch,
                                 const qkv_beam_options *beam, const int *limits)
{
    const int H = r->count * r->n_best, L = r->max_len;
    int *ids = calloc((size_t)H * L + 1, sizeof *ids), *len = calloc((size_t)H + 1, sizeof *len);
    double *score = calloc((size_t)H + 1, sizeof *score);
    reference(t, tokens, batch, L, beam, ids, len, score);
    for (int h = 0; limits && !beam && h < H; h++)
        if (len[h] > limits[h]) len[h] = limits[h];
    for (int h = 0; h < H; h++) {
        assert_int_equal(r->len[h], len[h]);
        if (len[h] < 0) {
            assert_null(r->text[h]);
            continue;
        }
        assert_memory_equal(r->ids + (size_t)h * L, ids + (size_t)h * L, (size_t)len[h] * sizeof *ids);
        if (beam) assert_true(r->score[h] == score[h]);
        else assert_true(isnan(r->score[h]));
        char text[512];
        qkv_tokenizer_decode(qkv_translator_tokenizer(t), text, sizeof text, ids + (size_t)h * L,
                             len[h]);
        assert_non_null(r->text[h]);
        assert_string_equal(r->text[h], text);
    }
    free(ids), free(len), free(score);
}

static void check_results(const qkv_translations *r, qkv_translator *t,
                          const qkv_sentences *tokens, int batch, const qkv_beam_options *beam)
{
    check_results_limits(r, t, tokens, batch, beam, NULL);
}

/* The sources as the model's tokens, read the way the translator reads raw strings. */
static void tokens_of(qkv_sentences *out, qkv_translator *t, const char *const *src, int n)
{
    char text[4096] = "";
    for (int i = 0; i < n; i++) strcat(strcat(text, src[i]), "\n");
    qkv_sentences words;
    const qkv_tokenizer *tok = qkv_translator_tokenizer(t);
    assert_int_equal(qkv_tokenizer_words(tok, &words, text, strlen(text), "test", NULL), QKV_OK);
    assert_int_equal(qkv_tokenizer_tokens(tok, out, &words, 0, NULL), QKV_OK);
    qkv_sentences_free(&words);
}

static const char *const SOURCES[] = {
    "The cat sat on the mat.", "a zebra ran", "", "Dog, red dog!", "the big red house .",
    "a cat ran to the mat", "on the", "the mat sat on a red dog .", "big", "a red cat !",
    "the dog ran to a big red house on the mat",
};
enum { N_SOURCES = sizeof SOURCES / sizeof *SOURCES };

/* Greedy: by default each sentence at most 1.5 n + 10 tokens (n its source's) and the
 * model's max_len, exactly the model's own decoding, and a batch of 3 for 11 sentences gives
 * what one batch of 32 gives. */
static void test_greedy_is_the_models(void **state)
{
    (void)state;
    char dir[64];
    word_model_dir(dir, sizeof dir, 1);
    qkv_translator *t = open_ok(dir);
    assert_int_equal(qkv_translator_num_steps(t), NUM_STEPS);
    qkv_sentences tokens;
    tokens_of(&tokens, t, SOURCES, N_SOURCES);
    qkv_translate_options o = qkv_translate_default_options();
    qkv_translations r, r3;
    qkv_error err = {0};
    assert_int_equal(qkv_translate(&r, t, SOURCES, N_SOURCES, &o, &err), QKV_OK);
    assert_int_equal(r.count, N_SOURCES);
    assert_int_equal(r.n_best, 1);
    int limits[N_SOURCES];
    for (int i = 0; i < N_SOURCES; i++) {
        const int l = (int)floor(1.5 * qkv_sentence_len(&tokens, i) + 10);
        limits[i] = l < MAX_LEN ? l : MAX_LEN;
    }
    assert_int_equal(r.max_len, MAX_LEN); /* not train.json's NUM_STEPS */
    assert_int_equal(r.truncated, 0);
    assert_int_equal(r.first_truncated, -1);
    check_results_limits(&r, t, &tokens, 32, NULL, limits);
    int shorter = 0, unknown = 0;
    for (int i = 0; i < N_SOURCES; i++) {
        assert_true(r.len[i] <= limits[i]);
        shorter += r.len[i] < limits[i];
    }
    for (size_t k = 0; k < tokens.n_tokens; k++)
        unknown += qkv_vocab_id(&qkv_translator_tokenizer(t)->src, tokens.tokens[k]) == QKV_UNK;
    assert_true(shorter > 0 && shorter < N_SOURCES); /* <eos> and max_len both end some */
    assert_true(unknown >= 1);                       /* "zebra" reads as <unk> */
    o.batch = 3;
    assert_int_equal(qkv_translate(&r3, t, SOURCES, N_SOURCES, &o, &err), QKV_OK);
    check_results_limits(&r3, t, &tokens, 3, NULL, limits);
    for (int i = 0; i < N_SOURCES; i++) assert_string_equal(r3.text[i], r.text[i]);
    qkv_translations_free(&r), qkv_translations_free(&r3);
    qkv_translations_free(&r3); /* freeing twice is harmless */
    qkv_sentences_free(&tokens);
    qkv_translator_free(t);
    remove_tree(dir);
}

/* Beam search with n-best lists: beam search's ids and scores, best first, in batches of 4
 * and of 32 (the same hypotheses; scores within rounding of another padding). */
static void test_beam_n_best(void **state)
{
    (void)state;
    char dir[64];
    word_model_dir(dir, sizeof dir, 2);
    qkv_translator *t = open_ok(dir);
    qkv_sentences tokens;
    tokens_of(&tokens, t, SOURCES, N_SOURCES);
    qkv_translate_options o = qkv_translate_default_options();
    o.beam = 4, o.n_best = 3, o.alpha = 0.6f, o.max_len = 9, o.batch = 4;
    const qkv_beam_options bo = {4, 3, 9, 0.6f, QKV_BEAM_STOP_BOUND, NULL};
    qkv_translations r, r32;
    qkv_error err = {0};
    assert_int_equal(qkv_translate(&r, t, SOURCES, N_SOURCES, &o, &err), QKV_OK);
    assert_int_equal(r.n_best, 3);
    assert_int_equal(r.max_len, 9);
    check_results(&r, t, &tokens, 4, &bo);
    o.batch = 32;
    assert_int_equal(qkv_translate(&r32, t, SOURCES, N_SOURCES, &o, &err), QKV_OK);
    check_results(&r32, t, &tokens, 32, &bo);
    int differ = 0;
    for (int i = 0; i < N_SOURCES; i++)
        for (int k = 0; k < 3; k++) {
            const int h = i * 3 + k;
            assert_int_equal(r.len[h], r32.len[h]);
            if (r.len[h] < 0) continue;
            assert_string_equal(r.text[h], r32.text[h]);
            assert_true(fabs(r.score[h] - r32.score[h]) <= 1e-5 * (1 + fabs(r.score[h])));
            if (k) assert_true(r.score[h] <= r.score[h - 1]);
            if (k) differ += strcmp(r.text[h], r.text[h - 1]) != 0;
        }
    assert_true(differ > 0); /* the n-best lists are real lists */
    qkv_translations_free(&r), qkv_translations_free(&r32);
    qkv_sentences_free(&tokens);
    qkv_translator_free(t);
    remove_tree(dir);
}

/* Weights past float's range give logits that are not finite: every search fails with
 * QKV_ERR_NUMERIC naming the model's directory (beam search printed "<unk> ... ||| -nan" and
 * exit 0), and the results are left empty. */
static void test_nonfinite_logits_name_the_model(void **state)
{
    (void)state;
    char dir[64];
    word_model_dir(dir, sizeof dir, 3);
    qkv_translator *t = open_ok(dir);
    qkv_transformer *m = qkv_translator_model(t);
    float *p = qkv_transformer_params(m);
    for (size_t i = 0; i < qkv_transformer_num_params(m); i++) p[i] *= 1e30f;
    char want[160];
    snprintf(want, sizeof want, "%s: the model's logits are not finite", dir);
    /* float32 writes the logits out; int8 chooses from them a chunk at a time */
    for (int int8 = 0; int8 <= qkv_int8_supported(); int8++) {
        for (int beam = 1; beam <= 4; beam += 3) {
            qkv_translate_options o = qkv_translate_default_options();
            o.beam = beam, o.n_best = beam == 4 ? 2 : 1, o.max_len = 5;
            o.precision = int8 ? QKV_PRECISION_INT8 : QKV_PRECISION_FP32;
            qkv_translations r;
            qkv_error err = {0};
            assert_int_equal(qkv_translate(&r, t, SOURCES, N_SOURCES, &o, &err), QKV_ERR_NUMERIC);
            if (strncmp(err.msg, want, strlen(want)))
                fail_msg("\"%s\" lacks \"%s\"", err.msg, want);
            assert_null(r.text);
        }
    }
    qkv_translator_free(t);
    remove_tree(dir);
}

/* A CTranslate2 export into the model's own directory (or one inside it) is refused before
 * anything is written: its config.json would replace the model's. */
static void test_export_ct2_apart_from_the_model(void **state)
{
    (void)state;
    char dir[64], out[128];
    word_model_dir(dir, sizeof dir, 3);
    const char *const spellings[] = {"%s", "%s/.", "%s/sub"};
    for (size_t i = 0; i < sizeof spellings / sizeof *spellings; i++) {
        snprintf(out, sizeof out, spellings[i], dir);
        qkv_error err = {0};
        assert_int_equal(qkv_export_ct2(dir, out, QKV_CT2_FLOAT32, &err), QKV_ERR_ARG);
        if (!strstr(err.msg, "export into another directory")) fail_msg("%s", err.msg);
    }
    struct stat sb;
    snprintf(out, sizeof out, "%s/sub", dir);
    assert_int_not_equal(stat(out, &sb), 0);
    snprintf(out, sizeof out, "%s/model.bin", dir);
    assert_int_not_equal(stat(out, &sb), 0);
    qkv_translator_free(open_ok(dir)); /* config.json is still the model's */
    remove_tree(dir);
}

/* A target vocabulary of five ids has five one-token hypotheses: asked for eight, the rest
 * come back missing (no text, length -1), as beam search reports them. */
static void test_fewer_hypotheses_than_asked(void **state)
{
    (void)state;
    qkv_tokenizer tok = {0};
    qkv_sentences s, x;
    assert_int_equal(qkv_sentences_from_text(&s, SRC_TEXT, strlen(SRC_TEXT), "src", NULL), QKV_OK);
    assert_int_equal(qkv_sentences_from_text(&x, "x\n", 2, "tgt", NULL), QKV_OK);
    assert_int_equal(qkv_vocab_build(&tok.src, s.tokens, s.n_tokens, 1, NULL), QKV_OK);
    assert_int_equal(qkv_vocab_build(&tok.tgt, x.tokens, x.n_tokens, 1, NULL), QKV_OK);
    qkv_translator *t;
    assert_int_equal(qkv_translator_create(&t, random_model(tok.src.size, 5, 10), &tok, 0, NULL),
                     QKV_OK);
    qkv_sentences tokens;
    tokens_of(&tokens, t, SOURCES, 3);
    qkv_translate_options o = qkv_translate_default_options();
    o.beam = o.n_best = 8, o.max_len = 1;
    const qkv_beam_options bo = {8, 8, 1, 0.0f, QKV_BEAM_STOP_BOUND, NULL};
    qkv_translations r;
    assert_int_equal(qkv_translate(&r, t, SOURCES, 3, &o, NULL), QKV_OK);
    check_results(&r, t, &tokens, 32, &bo);
    int missing = 0;
    for (int h = 0; h < 3 * 8; h++) missing += r.len[h] < 0;
    assert_int_equal(missing, 3 * 3);
    qkv_translations_free(&r);
    qkv_sentences_free(&tokens), qkv_sentences_free(&s), qkv_sentences_free(&x);
    qkv_translator_free(t);
}

/* Sources longer than the model's 12 positions are cut (losing <eos>) and counted; the
 * first is named with its length; a translation may be as long as the model allows. */
static void test_truncation(void **state)
{
    (void)state;
    char dir[64];
    word_model_dir(dir, sizeof dir, 3);
    qkv_translator *t = open_ok(dir);
    const char *src[] = {"the cat", "the cat sat on the mat and the dog ran to the big house",
                         "a red dog", "a b c d e f g h i j k", "a b c d e f g h i j"};
    qkv_sentences tokens;
    tokens_of(&tokens, t, src, 5);
    qkv_translate_options o = qkv_translate_default_options();
    o.max_len = 50; /* more than the model's 12 */
    qkv_translations r;
    assert_int_equal(qkv_translate(&r, t, src, 5, &o, NULL), QKV_OK);
    assert_int_equal(r.max_len, MAX_LEN);
    assert_int_equal(r.truncated, 1); /* "a .. k" is 11 words + <eos>: it fits */
    assert_int_equal(r.first_truncated, 1);
    assert_int_equal(r.first_truncated_len, 15);
    check_results(&r, t, &tokens, 32, NULL);
    qkv_translations_free(&r);
    const char *two[] = {src[0], "the mat the mat the mat the mat the mat the mat the mat"};
    assert_int_equal(qkv_translate(&r, t, two, 2, &o, NULL), QKV_OK);
    assert_int_equal(r.truncated, 1);
    assert_int_equal(r.first_truncated, 1);
    assert_int_equal(r.first_truncated_len, 15);
    qkv_translations_free(&r);
    qkv_sentences_free(&tokens);
    qkv_translator_free(t);
    remove_tree(dir);
}

/* No sources: no translations, no error, from raw strings or from sentences. */
static void test_empty_input(void **state)
{
    (void)state;
    char dir[64];
    word_model_dir(dir, sizeof dir, 4);
    qkv_translator *t = open_ok(dir);
    qkv_translate_options o = qkv_translate_default_options();
    o.beam = 2;
    qkv_translations r;
    assert_int_equal(qkv_translate(&r, t, NULL, 0, &o, NULL), QKV_OK);
    assert_int_equal(r.count, 0);
    assert_null(r.text);
    qkv_translations_free(&r);
    qkv_sentences none = {0}, blank;
    assert_int_equal(qkv_translate_words(&r, t, &none, &o, NULL), QKV_OK);
    assert_int_equal(r.count, 0);
    qkv_translations_free(&r);
    assert_int_equal(qkv_sentences_from_text(&blank, "", 0, "blank", NULL), QKV_OK);
    assert_int_equal(qkv_translate_words(&r, t, &blank, &o, NULL), QKV_OK);
    assert_int_equal(r.count, 0);
    qkv_translations_free(&r);
    qkv_sentences_free(&blank);
    qkv_translator_free(t);
    remove_tree(dir);
}

/* A subword model: sources become pieces, translations come back as words; its best/ (the
 * model files alone, as training writes them) opens with the parent's tokenizer. */
static void test_subword_model_and_best_dir(void **state)
{
    (void)state;
    char dir[64], path[128];
    temp_dir(dir, sizeof dir);
    qkv_sentences s, g;
    qkv_bpe bpe;
    qkv_vocab v;
    assert_int_equal(qkv_sentences_from_text(&s, SRC_TEXT, strlen(SRC_TEXT), "src", NULL), QKV_OK);
    assert_int_equal(qkv_sentences_from_text(&g, TGT_TEXT, strlen(TGT_TEXT), "tgt", NULL), QKV_OK);
    const qkv_sentences *both[2] = {&s, &g};
    assert_int_equal(qkv_bpe_learn(&bpe, both, 2, 48, NULL), QKV_OK);
    assert_int_equal(qkv_bpe_vocab(&v, &bpe, NULL), QKV_OK);
    qkv_transformer *m = random_model(v.size, v.size, 5);
    assert_int_equal(qkv_transformer_save(m, dir, NULL), QKV_OK);
    snprintf(path, sizeof path, "%s/best", dir);
    assert_int_equal(qkv_transformer_save(m, path, NULL), QKV_OK);
    const char *files[] = {"src_vocab.txt", "tgt_vocab.txt", "src_bpe.txt", "tgt_bpe.txt"};
    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        assert_int_equal(i < 2 ? qkv_vocab_save(&v, path, NULL) : qkv_bpe_save(&bpe, path, NULL),
                         QKV_OK);
    }
    write_file(dir, "text.json", "{\"tokenizer\": \"bpe\", \"joint\": true}\n");
    qkv_translator *t = open_ok(dir);
    assert_int_equal(qkv_translator_tokenizer(t)->kind, QKV_TOKENIZER_BPE);
    assert_int_equal(qkv_translator_num_steps(t), 0); /* no train.json: 100, cut to 12 */
    qkv_sentences tokens;
    tokens_of(&tokens, t, SOURCES, N_SOURCES);
    assert_memory_equal(tokens.tokens[0], QKV_BPE_SPACE, 3); /* pieces, not words */
    qkv_translate_options o = qkv_translate_default_options();
    qkv_translations r, rb;
    assert_int_equal(qkv_translate(&r, t, SOURCES, N_SOURCES, &o, NULL), QKV_OK);
    assert_int_equal(r.max_len, MAX_LEN);
    check_results(&r, t, &tokens, 32, NULL);
    for (int i = 0; i < N_SOURCES; i++) assert_null(strstr(r.text[i], QKV_BPE_SPACE));
    /* the pieces given as they are (qkv_translate_tokens) translate as the text does; given
     * as words, each piece would be split again */
    qkv_translations rt;
    assert_int_equal(qkv_translate_tokens(&rt, t, &tokens, &o, NULL), QKV_OK);
    for (int i = 0; i < N_SOURCES; i++) {
        assert_int_equal(rt.len[i], r.len[i]);
        assert_string_equal(rt.text[i], r.text[i]);
    }
    qkv_translations_free(&rt);
    snprintf(path, sizeof path, "%s/best", dir);
    qkv_translator *tb = open_ok(path);
    assert_int_equal(qkv_translate(&rb, tb, SOURCES, N_SOURCES, &o, NULL), QKV_OK);
    for (int i = 0; i < N_SOURCES; i++) assert_string_equal(rb.text[i], r.text[i]);
    qkv_translations_free(&r), qkv_translations_free(&rb);
    qkv_translator_free(t), qkv_translator_free(tb);
    qkv_sentences_free(&tokens), qkv_sentences_free(&s), qkv_sentences_free(&g);
    qkv_bpe_free(&bpe), qkv_vocab_free(&v);
    qkv_transformer_free(m);
    remove_tree(dir);
}

/* text.json's whitespace tokens (no lower-casing, punctuation kept) and <bos> first. */
static void test_whitespace_tokens_with_bos(void **state)
{
    (void)state;
    char dir[64];
    word_model_dir(dir, sizeof dir, 6);
    write_file(dir, "text.json", "{\"tokenizer\": \"whitespace\", \"source_bos\": true}\n");
    qkv_translator *t = open_ok(dir);
    const char *src[] = {"the cat sat.", "The cat sat .", "a\tdog  ran"};
    qkv_sentences tokens;
    tokens_of(&tokens, t, src, 3);
    assert_int_equal(tokens.n_tokens, 3 + 4 + 3); /* "sat." and "The" are tokens as they are */
    qkv_translate_options o = qkv_translate_default_options();
    o.beam = 3, o.n_best = 2;
    qkv_translations r;
    assert_int_equal(qkv_translate(&r, t, src, 3, &o, NULL), QKV_OK);
    const qkv_beam_options bo = {3, 2, MAX_LEN, 0.0f, QKV_BEAM_STOP_BOUND, NULL};
    check_results(&r, t, &tokens, 32, &bo);
    qkv_translations_free(&r);
    qkv_sentences_free(&tokens);
    qkv_translator_free(t);
    remove_tree(dir);
}

static void expect_open_error(const char *dir, qkv_status code, const char *needle)
{
    qkv_translator *t = (qkv_translator *)&t; /* not NULL: open must clear it */
    qkv_error err = {0};
    assert_int_equal(qkv_translator_open(&t, dir, &err), code);
    assert_null(t);
    if (!strstr(err.msg, needle)) fail_msg("\"%s\" does not name %s", err.msg, needle);
}

/* Bad directories: each failure names the file. */
static void test_open_errors(void **state)
{
    (void)state;
    char dir[64], path[128];
    word_model_dir(dir, sizeof dir, 7);
    snprintf(path, sizeof path, "%s/nowhere", dir);
    expect_open_error(path, QKV_ERR_IO, "config.json");
    write_file(dir, "text.json", "{\"tokenizer\": \"characters\"}\n");
    expect_open_error(dir, QKV_ERR_FORMAT, "text.json: unknown tokenizer \"characters\"");
    /* a SentencePiece model names its models, which must be there */
    write_file(dir, "text.json", "{\"tokenizer\": \"sentencepiece\"}\n");
    expect_open_error(dir, QKV_ERR_IO, "source.spm: cannot open");
    write_file(dir, "text.json", "{\"tokenizer\": \"spm\", \"source_spm\": \"../x.spm\"}\n");
    expect_open_error(dir, QKV_ERR_FORMAT, "\"source_spm\" must be a file name");
    write_file(dir, "text.json", "{\"tokenizer\": \"spm\", \"detokenize\": \"moses\"}\n");
    expect_open_error(dir, QKV_ERR_FORMAT, "text.json: \"detokenize\" must be");
    write_file(dir, "text.json", "{\"tokenizer\": \"spm\", \"clean_up_spaces\": 1}\n");
    expect_open_error(dir, QKV_ERR_FORMAT, "text.json: \"clean_up_spaces\" must be true or false");
    write_file(dir, "text.json", "{\"tokenizer\": ");
    expect_open_error(dir, QKV_ERR_FORMAT, "text.json: not valid JSON");
    write_file(dir, "text.json", "{\"tokenizer\": \"bpe\"}\n");
    expect_open_error(dir, QKV_ERR_IO, "src_bpe.txt");
    remove_file(dir, "text.json");
    /* subword files without the text.json that says so: a mixed directory, not a word model */
    write_file(dir, "tgt_bpe.txt", "#qkv-bpe 1\n");
    expect_open_error(dir, QKV_ERR_FORMAT, "tgt_bpe.txt: a subword encoding, but text.json");
    remove_file(dir, "tgt_bpe.txt");
    /* a run that stopped before saving its model: config and checkpoint, no model */
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    char moved[160];
    snprintf(moved, sizeof moved, "%s/checkpoint.safetensors", dir);
    assert_int_equal(rename(path, moved), 0);
    expect_open_error(dir, QKV_ERR_IO, "holds no trained model yet");
    assert_int_equal(rename(moved, path), 0);
    write_file(dir, "train.json", "num_steps = 7\n");
    expect_open_error(dir, QKV_ERR_FORMAT, "train.json: not valid JSON");
    remove_file(dir, "train.json");
    snprintf(path, sizeof path, "%s/src_vocab.txt", dir);
    char *saved = NULL;
    {
        FILE *f = fopen(path, "rb");
        assert_non_null(f);
        saved = calloc(4096, 1);
        assert_true(fread(saved, 1, 4095, f) > 0);
        fclose(f);
    }
    write_file(dir, "src_vocab.txt", "<unk>\n<pad>\n<bos>\n<eos>\nthe\n");
    expect_open_error(dir, QKV_ERR_FORMAT, "vocabularies have 5 and");
    write_file(dir, "src_vocab.txt", "<unk>\n<pad>\n<bos>\n<eos>\nthe\nthe\n");
    expect_open_error(dir, QKV_ERR_FORMAT, "src_vocab.txt");
    write_file(dir, "src_vocab.txt", saved);
    free(saved);
    remove_file(dir, "tgt_vocab.txt");
    expect_open_error(dir, QKV_ERR_IO, "tgt_vocab.txt");
    remove_tree(dir);
}

/* Each sentence's limit a * n + b follows its source, greedy and beam alike: a sentence
 * translates as the model decodes it alone with that limit; --max-len caps it; a = b = 0 is
 * no limit but the cap. */
static void test_length_follows_source(void **state)
{
    (void)state;
    char dir[64];
    word_model_dir(dir, sizeof dir, 10);
    qkv_translator *t = open_ok(dir);
    qkv_transformer *m = qkv_translator_model(t);
    qkv_sentences tokens;
    tokens_of(&tokens, t, SOURCES, N_SOURCES);
    int at_limit = 0;
    for (int variant = 0; variant < 4; variant++) {
        qkv_translate_options o = qkv_translate_default_options();
        o.max_len_a = variant == 3 ? 0.0f : 0.5f, o.max_len_b = variant == 3 ? 0 : 2;
        o.max_len = variant == 2 ? 3 : 0;
        if (variant & 1) o.beam = 3, o.n_best = 2;
        qkv_translations r;
        assert_int_equal(qkv_translate(&r, t, SOURCES, N_SOURCES, &o, NULL), QKV_OK);
        for (int i = 0; i < N_SOURCES; i++) {
            const int n = qkv_sentence_len(&tokens, i), cap = o.max_len ? o.max_len : MAX_LEN;
            int limit = variant == 3 ? cap : (int)floor(0.5 * n + 2);
            if (limit > cap) limit = cap;
            /* the sentence alone, decoded to its limit */
            int row[64], ids[2 * MAX_LEN], len[2];
            int valid = source_ids(row, &qkv_translator_tokenizer(t)->src, &tokens, i, 0);
            if (o.beam == 1)
                assert_int_equal(qkv_transformer_greedy(m, row, &valid, 1, valid, limit, ids, len,
                                                        NULL), QKV_OK);
            else {
                const qkv_beam_options bo = {3, 2, limit, 0.0f, QKV_BEAM_STOP_BOUND, NULL};
                assert_int_equal(qkv_transformer_beam(m, row, &valid, 1, valid, &bo,
                                                      &(qkv_beam_results){ids, len, NULL, NULL},
                                                      NULL), QKV_OK);
            }
            for (int k = 0; k < o.n_best; k++) {
                const size_t h = (size_t)i * o.n_best + k;
                if (r.len[h] != len[k])
                    fail_msg("variant %d sentence %d hypothesis %d: %d tokens, alone to %d: %d",
                             variant, i, k, r.len[h], limit, len[k]);
                assert_memory_equal(r.ids + h * r.max_len, ids + k * limit,
                                    (size_t)(len[k] > 0 ? len[k] : 0) * sizeof *ids);
                at_limit += len[k] == limit;
            }
        }
        qkv_translations_free(&r);
    }
    assert_true(at_limit > 0); /* the limits were reached, so they were tested */
    qkv_sentences_free(&tokens);
    qkv_translator_free(t);
    remove_tree(dir);
}

/* Options out of range and sources that are not one line of UTF-8 fail, naming what is
 * wrong, and leave the results empty. */
static void test_bad_options_and_sources(void **state)
{
    (void)state;
    char dir[64];
    word_model_dir(dir, sizeof dir, 8);
    qkv_translator *t = open_ok(dir);
    const char *src[] = {"the cat", "a dog"};
    enum { NBAD = 12 };
    qkv_translate_options bad[NBAD];
    for (int k = 0; k < NBAD; k++) bad[k] = qkv_translate_default_options();
    bad[0].beam = 0, bad[1].n_best = 0, bad[2].beam = 2, bad[2].n_best = 3;
    bad[3].alpha = -0.5f, bad[4].alpha = NAN, bad[5].batch = 0, bad[6].max_len = -1;
    bad[8].max_len_a = -1.0f, bad[9].max_len_a = NAN, bad[10].max_len_b = -1;
    bad[11].stop = (qkv_beam_stop)(QKV_BEAM_STOP_HF_NEVER + 1);
    bad[7].precision = (qkv_precision)7; /* last, for the message below */
    qkv_translations r;
    qkv_error err = {0};
    for (int k = NBAD - 1; k >= 0; k--) {
        memset(&r, 0xff, sizeof r);
        assert_int_equal(qkv_translate(&r, t, src, 2, &bad[k], &err), QKV_ERR_ARG);
        assert_int_equal(r.count, 0);
        assert_null(r.text);
        assert_null(r.ids);
    }
    assert_non_null(strstr(err.msg, "beam >= 1")); /* bad[0] */
    memset(&r, 0xff, sizeof r);
    assert_int_equal(qkv_translate(&r, t, src, 2, &bad[7], &err), QKV_ERR_ARG);
    assert_non_null(strstr(err.msg, "precision"));
    qkv_translate_options o = qkv_translate_default_options();
    const char *newline[] = {"the cat", "a dog\nthe mat"}, *null[] = {"the cat", NULL};
    assert_int_equal(qkv_translate(&r, t, newline, 2, &o, &err), QKV_ERR_ARG);
    assert_non_null(strstr(err.msg, "source:2"));
    assert_int_equal(qkv_translate(&r, t, null, 2, &o, &err), QKV_ERR_ARG);
    assert_non_null(strstr(err.msg, "source:2"));
    const char *utf8[] = {"the cat", "a \xff dog"};
    assert_int_equal(qkv_translate(&r, t, utf8, 2, &o, &err), QKV_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "source:2"));
    assert_int_equal(qkv_translate(&r, t, NULL, 1, &o, &err), QKV_ERR_ARG);
    assert_int_equal(qkv_translate(&r, t, src, -1, &o, &err), QKV_ERR_ARG);
    assert_int_equal(r.count, 0);
    qkv_translator_free(t);
    remove_tree(dir);
}

/* A translator around a model in memory: it takes the model and the tokenizer on success
 * (the tokenizer zeroed), neither on failure. */
/* Typed reserved tokens are text: "<pad>" and "<eos>" reach the encoder as <unk> (so the
 * translation is that of the same sentence with "<unk>" there; a <pad> id used to mask the
 * rest of the source), and the results count each source's unknown tokens. */
static void test_reserved_tokens_are_text(void **state)
{
    (void)state;
    char dir[64];
    word_model_dir(dir, sizeof dir, 8);
    qkv_translator *t = open_ok(dir);
    const char *typed[] = {"the <pad> cat <eos> sat", "the <bos> cat sat", "zz yy the"};
    const char *unk[] = {"the <unk> cat <unk> sat", "the <unk> cat sat", "zz yy the"};
    qkv_translate_options o = qkv_translate_default_options();
    qkv_translations a, b;
    assert_int_equal(qkv_translate(&a, t, typed, 3, &o, NULL), QKV_OK);
    assert_int_equal(qkv_translate(&b, t, unk, 3, &o, NULL), QKV_OK);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(a.len[i], b.len[i]);
        assert_memory_equal(a.ids + (size_t)i * a.max_len, b.ids + (size_t)i * b.max_len,
                            (size_t)a.len[i] * sizeof *a.ids);
        assert_int_equal(a.src_len[i], b.src_len[i]);
        assert_int_equal(a.unknown[i], b.unknown[i]);
    }
    assert_int_equal(a.src_len[0], 5);
    assert_int_equal(a.unknown[0], 2);
    assert_int_equal(a.unknown[1], 1);
    assert_int_equal(a.src_len[2], 3);
    assert_int_equal(a.unknown[2], 2); /* "zz", "yy": mostly unknown */
    qkv_translations_free(&a), qkv_translations_free(&b);
    /* so are tokens given as the model's: a reserved one is <unk>, as one the vocabulary lacks */
    qkv_sentences tokens;
    tokens_of(&tokens, t, unk, 1);
    tokens.tokens[1] = "<pad>", tokens.tokens[3] = "nosuchword";
    assert_int_equal(qkv_translate_tokens(&a, t, &tokens, &o, NULL), QKV_OK);
    assert_int_equal(qkv_translate(&b, t, unk, 1, &o, NULL), QKV_OK);
    assert_int_equal(a.len[0], b.len[0]);
    assert_memory_equal(a.ids, b.ids, (size_t)a.len[0] * sizeof *a.ids);
    assert_int_equal(a.unknown[0], 2);
    qkv_translations_free(&a), qkv_translations_free(&b);
    qkv_sentences_free(&tokens);
    qkv_translator_free(t);
    remove_tree(dir);
}

static void test_create_from_memory(void **state)
{
    (void)state;
    qkv_tokenizer tok = {0};
    qkv_sentences s;
    assert_int_equal(qkv_sentences_from_text(&s, SRC_TEXT, strlen(SRC_TEXT), "src", NULL), QKV_OK);
    assert_int_equal(qkv_vocab_build(&tok.src, s.tokens, s.n_tokens, 1, NULL), QKV_OK);
    assert_int_equal(qkv_vocab_build(&tok.tgt, s.tokens, s.n_tokens, 2, NULL), QKV_OK);
    qkv_transformer *m = random_model(tok.src.size, tok.src.size, 9);
    qkv_translator *t = NULL;
    qkv_error err = {0};
    assert_int_equal(qkv_translator_create(&t, m, &tok, 0, &err), QKV_ERR_ARG);
    assert_non_null(strstr(err.msg, "vocabularies"));
    assert_null(t);
    assert_true(tok.tgt.size > 0); /* still the caller's */
    qkv_vocab_free(&tok.tgt);
    assert_int_equal(qkv_vocab_build(&tok.tgt, s.tokens, s.n_tokens, 1, NULL), QKV_OK);
    assert_int_equal(qkv_translator_create(&t, m, &tok, MAX_LEN + 1, &err), QKV_ERR_ARG);
    assert_int_equal(qkv_translator_create(&t, m, &tok, 5, &err), QKV_OK);
    assert_int_equal(tok.src.size, 0);
    assert_ptr_equal(qkv_translator_model(t), m);
    assert_int_equal(qkv_translator_num_steps(t), 5);
    const char *src[] = {"the red cat"};
    qkv_translations r;
    qkv_translate_options o = qkv_translate_default_options();
    assert_int_equal(qkv_translate(&r, t, src, 1, &o, &err), QKV_OK);
    assert_int_equal(r.max_len, MAX_LEN); /* 1.5 * 3 + 10 tokens, cut to the model's */
    qkv_translations_free(&r);
    qkv_translator_free(t);
    qkv_sentences_free(&s);
}

/* Words of a translation as ids of reference words: known words their id, unknown ones an
 * id of their own below zero, "<unk>" QKV_UNK; subword pieces are joined into words first;
 * nothing after <eos> counts, nor beyond cap. */
static void test_word_ids(void **state)
{
    (void)state;
    qkv_sentences s;
    const char *refs = "the cat sat\n";
    assert_int_equal(qkv_sentences_from_text(&s, refs, strlen(refs), "refs", NULL), QKV_OK);
    qkv_tokenizer tok = {0};
    qkv_vocab words;
    assert_int_equal(qkv_vocab_build(&words, s.tokens, s.n_tokens, 1, NULL), QKV_OK);
    const int the = qkv_vocab_id(&words, "the"), sat = qkv_vocab_id(&words, "sat");
    assert_true(the >= QKV_N_RESERVED && sat >= QKV_N_RESERVED);
    const qkv_sentences *texts[1] = {&s};
    assert_int_equal(qkv_bpe_learn(&tok.tgt_bpe, texts, 1, 12, NULL), QKV_OK);
    assert_int_equal(qkv_bpe_vocab(&tok.tgt, &tok.tgt_bpe, NULL), QKV_OK);
    tok.kind = QKV_TOKENIZER_BPE;
    int ids[32], out[32];
    const char *text = "the cats sat the";
    int n = qkv_bpe_encode(ids, &tok.tgt_bpe, text, strlen(text));
    assert_true(n > 4);
    ids[n++] = QKV_EOS, ids[n++] = ids[0];
    assert_int_equal(qkv_tokenizer_word_ids(&tok, &words, out, 32, ids, n), 4);
    const int want[4] = {the, -2, sat, the};
    assert_memory_equal(out, want, sizeof want);
    assert_int_equal(qkv_tokenizer_word_ids(&tok, &words, out, 2, ids, n), 2);
    qkv_tokenizer_free(&tok);
    /* word tokens: <unk> stays <unk>, "mat" is not among the references */
    const char *tgt = "the mat\n";
    qkv_sentences t;
    assert_int_equal(qkv_sentences_from_text(&t, tgt, strlen(tgt), "tgt", NULL), QKV_OK);
    assert_int_equal(qkv_vocab_build(&tok.tgt, t.tokens, t.n_tokens, 1, NULL), QKV_OK);
    const int word_ids[3] = {qkv_vocab_id(&tok.tgt, "the"), QKV_UNK, qkv_vocab_id(&tok.tgt, "mat")};
    const int want_words[3] = {the, QKV_UNK, -3};
    assert_int_equal(qkv_tokenizer_word_ids(&tok, &words, out, 32, word_ids, 3), 3);
    assert_memory_equal(out, want_words, sizeof want_words);
    qkv_tokenizer_free(&tok);
    qkv_vocab_free(&words);
    qkv_sentences_free(&s), qkv_sentences_free(&t);
}

/* ---- validation BLEU in training -------------------------------------------------------- */

typedef struct {
    double bleu;
    int validated;
} last_validation;

static void keep(const qkv_train_progress *p, void *ctx)
{
    last_validation *v = ctx;
    if (p->validated) v->bleu = p->bleu, v->validated++;
}

/* The id of word w in a list of distinct words, added if new: BLEU's tokens, made here
 * without the library's vocabularies. */
static int intern(const char **list, int *n, const char *w)
{
    for (int i = 0; i < *n; i++)
        if (!strcmp(list[i], w)) return i;
    list[*n] = w;
    return (*n)++;
}

/* A copy task in subword pieces: qkv_train's validation BLEU (tokenizer + references as
 * words) is corpus BLEU-4 of the greedy translations' words against the reference words,
 * recomputed here from the text; it is not the BLEU over pieces. */
static void test_validation_bleu_over_words(void **state)
{
    (void)state;
    enum { N = 160, NV = 24, T = 16 };
    static const char *const W[] = {"ab", "ba", "abc", "cab", "bc", "ca", "cc", "bab"};
    char text[N * 24] = "", *at = text;
    for (int e = 0; e < N; e++) {
        int len = 2 + (int)(qkv_random_u32(11, (uint64_t)e * 9) % 4);
        for (int k = 0; k < len; k++)
            at += sprintf(at, "%s%s", k ? " " : "", W[qkv_random_u32(12, (uint64_t)e * 9 + k) % 8]);
        *at++ = '\n';
    }
    *at = '\0';
    qkv_sentences words, pieces, refs = {0};
    qkv_tokenizer tok = {0};
    assert_int_equal(qkv_sentences_from_text(&words, text, strlen(text), "copy", NULL), QKV_OK);
    const qkv_sentences *texts[1] = {&words};
    assert_int_equal(qkv_bpe_learn(&tok.src_bpe, texts, 1, 14, NULL), QKV_OK);
    assert_int_equal(qkv_bpe_learn(&tok.tgt_bpe, texts, 1, 14, NULL), QKV_OK);
    assert_int_equal(qkv_bpe_vocab(&tok.src, &tok.src_bpe, NULL), QKV_OK);
    assert_int_equal(qkv_bpe_vocab(&tok.tgt, &tok.tgt_bpe, NULL), QKV_OK);
    tok.kind = QKV_TOKENIZER_BPE;
    assert_int_equal(qkv_tokenizer_tokens(&tok, &pieces, &words, 0, NULL), QKV_OK);
    int *ids = malloc(N * T * sizeof *ids), *valid = malloc(N * sizeof *valid);
    assert_int_equal(qkv_sentences_encode(ids, valid, &pieces, &tok.src, T, NULL), QKV_OK);
    qkv_dataset d = {N, T, ids, valid, ids, valid}, v = {NV, T, ids, valid, ids, valid};
    /* the references: the first NV sentences, as words */
    const char *end = text;
    for (int e = 0; e < NV; e++) end = strchr(end, '\n') + 1;
    assert_int_equal(qkv_sentences_from_text(&refs, text, (size_t)(end - text), "refs", NULL),
                     QKV_OK);
    qkv_transformer_config cfg = qkv_transformer_default_config();
    cfg.src_vocab = tok.src.size, cfg.tgt_vocab = tok.tgt.size, cfg.d_model = 32;
    cfg.heads = 2, cfg.ffn = 64, cfg.enc_layers = cfg.dec_layers = 1, cfg.max_len = 16;
    cfg.dropout = 0.0f;
    qkv_transformer *m;
    assert_int_equal(qkv_transformer_create(&m, &cfg, 3, NULL), QKV_OK);
    char dir[64];
    temp_dir(dir, sizeof dir);
    last_validation last = {0};
    qkv_train_options o = qkv_train_default_options();
    o.out_dir = dir, o.batch = 16, o.epochs = 30, o.lr = 0.005f, o.valid = &v, o.valid_bleu = 1;
    o.valid_tokenizer = &tok, o.valid_references = &refs;
    o.progress = keep, o.progress_ctx = &last;
    qkv_error err = {0};
    assert_int_equal(qkv_train(m, &d, &o, &err), QKV_OK);
    assert_int_equal(last.validated, o.epochs);
    /* recomputed: translations' text split into words, ids interned with the references' */
    int out[NV * T], len[NV], hyp[NV][T + 1], ref[NV][T], hn[NV], rn[NV], n_list = 0;
    const char *list[NV * (T + 8)];
    char line[NV][128];
    assert_int_equal(qkv_transformer_greedy(m, ids, valid, NV, T, T, out, len, NULL), QKV_OK);
    for (int e = 0; e < NV; e++) {
        rn[e] = qkv_sentence_len(&refs, e);
        for (int k = 0; k < rn[e]; k++)
            ref[e][k] = intern(list, &n_list, refs.tokens[refs.start[e] + k]);
    }
    const int known = n_list;
    int pieces_differ = 0;
    for (int e = 0; e < NV; e++) {
        qkv_tokenizer_decode(&tok, line[e], sizeof line[e], out + e * T, len[e]);
        hn[e] = 0;
        for (char *w = strtok(line[e], " "); w; w = strtok(NULL, " ")) {
            const int id = intern(list, &n_list, w);
            hyp[e][hn[e]] = id < known ? id : -1 - hn[e];
            hn[e]++;
        }
        pieces_differ += hn[e] != len[e];
    }
    const int *hp[NV], *rp[NV];
    for (int e = 0; e < NV; e++) hp[e] = hyp[e], rp[e] = ref[e];
    double bleu;
    assert_int_equal(qkv_corpus_bleu(&bleu, hp, hn, rp, rn, NV, NULL), QKV_OK);
    print_message("validation BLEU over words %.2f\n", last.bleu);
    assert_true(fabs(last.bleu - 100.0 * bleu) < 1e-9);
    assert_true(bleu > 0.0);       /* the comparison has teeth */
    assert_true(pieces_differ > 0); /* and words are not pieces here */
    /* the references must be one per validation pair, and come with the tokenizer */
    o.valid_references = &words;
    assert_int_equal(qkv_train(m, &d, &o, &err), QKV_ERR_ARG);
    assert_non_null(strstr(err.msg, "references"));
    o.valid_references = &refs, o.valid_tokenizer = NULL;
    assert_int_equal(qkv_train(m, &d, &o, &err), QKV_ERR_ARG);
    qkv_transformer_free(m);
    qkv_tokenizer_free(&tok);
    qkv_sentences_free(&words), qkv_sentences_free(&pieces), qkv_sentences_free(&refs);
    free(ids), free(valid);
    remove_tree(dir);
}

int main(void)
{
    qkv_set_threads(2);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_is_the_models),
        cmocka_unit_test(test_beam_n_best),
        cmocka_unit_test(test_nonfinite_logits_name_the_model),
        cmocka_unit_test(test_export_ct2_apart_from_the_model),
        cmocka_unit_test(test_fewer_hypotheses_than_asked),
        cmocka_unit_test(test_truncation),
        cmocka_unit_test(test_empty_input),
        cmocka_unit_test(test_subword_model_and_best_dir),
        cmocka_unit_test(test_whitespace_tokens_with_bos),
        cmocka_unit_test(test_open_errors),
        cmocka_unit_test(test_length_follows_source),
        cmocka_unit_test(test_bad_options_and_sources),
        cmocka_unit_test(test_reserved_tokens_are_text),
        cmocka_unit_test(test_create_from_memory),
        cmocka_unit_test(test_word_ids),
        cmocka_unit_test(test_validation_bleu_over_words),
    };
    return cmocka_run_group_tests_name("translator", tests, NULL, NULL);
}
