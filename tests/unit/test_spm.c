/* SPDX-License-Identifier: MIT */
/* SentencePiece through libsentencepiece: models trained here (unigram and BPE, by
 * qkv_spm_train, and one by Debian's spm_train with its own special ids) are loaded from a
 * file and from memory; encoding gives pieces whose ids, spelled back, are the pieces;
 * decoding gives the text back; typed control pieces stay text; qkv's reserved tokens sit at
 * qkv's ids; bad files, bad ids and an impossible vocabulary size are errors. (That the pieces
 * are exactly the reference library's on every line of Multi30k and fra.txt is
 * tests/e2e/test_spm.sh.) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_util.h"

typedef struct {
    char dir[64], text[96], unigram[96], bpe[96];
} fixture;

static const char *const lines[] = {
    "Ein Mann fährt Fahrrad.",
    "Two young, White males are outside near many bushes.",
    "Zwei junge weiße Männer sind im Freien in der Nähe vieler Büsche.",
    "A man in an orange hat starring at something.",
    "Ελληνικά ΚΕΦΑΛΑΙΑ και πεζά.",
    "Il a 42 ans et habite à Paris.",
    "Je suis chez moi.",
    "The dog runs across the green field 3 times!",
};

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    if (!f) return -1;
    snprintf(f->dir, sizeof f->dir, "/tmp/qkv-test-spm-XXXXXX");
    if (!mkdtemp(f->dir)) return free(f), -1;
    snprintf(f->text, sizeof f->text, "%s/text.txt", f->dir);
    snprintf(f->unigram, sizeof f->unigram, "%s/unigram.model", f->dir);
    snprintf(f->bpe, sizeof f->bpe, "%s/bpe.model", f->dir);
    FILE *out = fopen(f->text, "w");
    if (!out) return free(f), -1;
    /* enough repetitions, slightly varied, for the trainers to find pieces */
    for (int r = 0; r < 60; r++)
        for (size_t i = 0; i < sizeof lines / sizeof *lines; i++)
            fprintf(out, "%s%s\n", lines[(i + (size_t)r) % (sizeof lines / sizeof *lines)],
                     r % 3 ? "" : " Noch einmal.");
    fclose(out);
    qkv_error err = {0};
    char *text;
    size_t len;
    qkv_sentences s;
    const qkv_sentences *texts[1] = {&s};
    if (qkv_read_file(f->text, 1 << 20, &text, &len, &err)) return free(f), -1;
    qkv_status st = qkv_sentences_split(&s, text, len, f->text, &err);
    free(text);
    if (!st) st = qkv_spm_train(texts, 1, f->unigram, 100, QKV_SPM_UNIGRAM, &err);
    if (!st) st = qkv_spm_train(texts, 1, f->bpe, 100, QKV_SPM_BPE, &err);
    qkv_sentences_free(&s);
    if (st) {
        fprintf(stderr, "%s\n", err.msg);
        return free(f), -1;
    }
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->dir);
    if (system(cmd)) return -1;
    free(f);
    return 0;
}

static qkv_spm *load(const char *path)
{
    qkv_spm *s = NULL;
    qkv_error err = {0};
    qkv_status st = qkv_spm_load(&s, path, &err);
    if (st) fprintf(stderr, "%s\n", err.msg);
    assert_int_equal(st, QKV_OK);
    return s;
}

/* Every line: ids and pieces agree (piece(id) is the piece, but for unknown pieces), pieces
 * joined with ▁ as spaces are the line, and decoding ids or pieces gives the line back. */
static void check_round_trip(const qkv_spm *s, const char *line)
{
    qkv_error err = {0};
    int *ids, n;
    qkv_sentences pieces;
    char *back = NULL, *back_pieces = NULL;
    assert_int_equal(qkv_spm_encode(s, line, strlen(line), &ids, &n, &err), QKV_OK);
    assert_int_equal(qkv_spm_encode_pieces(s, line, strlen(line), &pieces, &err), QKV_OK);
    assert_int_equal(pieces.count, 1);
    assert_int_equal((int)pieces.n_tokens, n);
    assert_true(n > 0);
    for (int i = 0; i < n; i++) {
        assert_true(ids[i] >= 0 && ids[i] < qkv_spm_size(s));
        if (ids[i] != QKV_UNK) assert_string_equal(qkv_spm_piece(s, ids[i]), pieces.tokens[i]);
        if (ids[i] != QKV_UNK) assert_int_equal(qkv_spm_piece_id(s, pieces.tokens[i]), ids[i]);
        assert_false(qkv_spm_is_control(s, ids[i]));
    }
    assert_int_equal(qkv_spm_decode(s, ids, n, &back, &err), QKV_OK);
    assert_string_equal(back, line);
    assert_int_equal(qkv_spm_decode_pieces(s, pieces.tokens, n, &back_pieces, &err), QKV_OK);
    assert_string_equal(back_pieces, line);
    free(ids), free(back), free(back_pieces);
    qkv_sentences_free(&pieces);
}

static void check_model(const char *path, int vocab_size)
{
    qkv_spm *s = load(path);
    assert_int_equal(qkv_spm_size(s), vocab_size);
    const qkv_spm_specials sp = qkv_spm_special_ids(s);
    assert_int_equal(sp.unk, QKV_UNK);
    assert_int_equal(sp.pad, QKV_PAD);
    assert_int_equal(sp.bos, QKV_BOS);
    assert_int_equal(sp.eos, QKV_EOS);
    assert_string_equal(qkv_spm_piece(s, QKV_UNK), "<unk>");
    assert_string_equal(qkv_spm_piece(s, QKV_PAD), "<pad>");
    assert_string_equal(qkv_spm_piece(s, QKV_BOS), "<bos>");
    assert_string_equal(qkv_spm_piece(s, QKV_EOS), "<eos>");
    assert_true(qkv_spm_is_control(s, QKV_PAD) && qkv_spm_is_control(s, QKV_EOS));
    assert_null(qkv_spm_piece(s, -1));
    assert_null(qkv_spm_piece(s, vocab_size));
    assert_int_equal(qkv_spm_piece_id(s, "no such piece"), QKV_UNK);
    for (size_t i = 0; i < sizeof lines / sizeof *lines; i++) check_round_trip(s, lines[i]);
    /* case kept: capitals are pieces of their own, not folded */
    int *ids, n;
    qkv_error err = {0};
    assert_int_equal(qkv_spm_encode(s, "MANN", 4, &ids, &n, &err), QKV_OK);
    char *back;
    assert_int_equal(qkv_spm_decode(s, ids, n, &back, &err), QKV_OK);
    assert_string_equal(back, "MANN");
    free(ids), free(back);
    qkv_spm_free(s);
}

static void test_unigram(void **state) { check_model(((fixture *)*state)->unigram, 100); }
static void test_bpe(void **state) { check_model(((fixture *)*state)->bpe, 100); }

/* A BPE model is not a unigram one: the same text, other pieces somewhere. */
static void test_types_differ(void **state)
{
    const fixture *f = *state;
    qkv_spm *u = load(f->unigram), *b = load(f->bpe);
    int differ = 0;
    for (int id = QKV_N_RESERVED; id < 100 && !differ; id++)
        differ = strcmp(qkv_spm_piece(u, id), qkv_spm_piece(b, id)) != 0;
    assert_true(differ);
    qkv_spm_free(u), qkv_spm_free(b);
}

/* "<pad>", "<eos>"... typed in the text are characters, never the control ids; characters
 * the model never saw are <unk>, and decode as the unknown piece's surface " ⁇ ". */
static void test_control_pieces_are_text(void **state)
{
    qkv_spm *s = load(((fixture *)*state)->unigram);
    const char *text = "Ein <pad> Mann <eos> <bos> <unk> fährt";
    int *ids, n;
    qkv_error err = {0};
    assert_int_equal(qkv_spm_encode(s, text, strlen(text), &ids, &n, &err), QKV_OK);
    for (int i = 0; i < n; i++) assert_true(ids[i] == QKV_UNK || ids[i] >= QKV_N_RESERVED);
    free(ids);
    assert_int_equal(qkv_spm_encode(s, "☃", strlen("☃"), &ids, &n, &err), QKV_OK);
    int unknown = 0;
    for (int i = 0; i < n; i++) unknown += ids[i] == QKV_UNK;
    assert_int_equal(unknown, 1);
    free(ids);
    /* control ids decode as nothing */
    assert_int_equal(qkv_spm_encode(s, "Ein Mann", 8, &ids, &n, &err), QKV_OK);
    int with_controls[16] = {QKV_BOS};
    assert_true(n < 12);
    memcpy(with_controls + 1, ids, (size_t)n * sizeof *ids);
    with_controls[n + 1] = QKV_EOS, with_controls[n + 2] = QKV_PAD;
    char *back;
    assert_int_equal(qkv_spm_decode(s, with_controls, n + 3, &back, &err), QKV_OK);
    assert_string_equal(back, "Ein Mann");
    free(back), free(ids);
    qkv_spm_free(s);
}

/* The bytes of a model file load into the same model. */
static void test_load_bytes(void **state)
{
    const fixture *f = *state;
    char *bytes;
    size_t size;
    qkv_error err = {0};
    assert_int_equal(qkv_read_file(f->bpe, 1 << 24, &bytes, &size, &err), QKV_OK);
    qkv_spm *m, *s = load(f->bpe);
    assert_int_equal(qkv_spm_load_bytes(&m, bytes, size, "bpe", &err), QKV_OK);
    assert_int_equal(qkv_spm_size(m), qkv_spm_size(s));
    for (int id = 0; id < qkv_spm_size(s); id++)
        assert_string_equal(qkv_spm_piece(m, id), qkv_spm_piece(s, id));
    qkv_spm_free(m);
    assert_int_equal(qkv_spm_load_bytes(&m, bytes, size / 2, "half", &err), QKV_ERR_FORMAT);
    assert_null(m);
    assert_non_null(strstr(err.msg, "half"));
    free(bytes);
    qkv_spm_free(s);
}

/* A model from Debian's spm_train, with SentencePiece's own special ids (unk 0, <s> 1,
 * </s> 2, no pad), reads as it is. Skipped without spm_train. */
static void test_foreign_model(void **state)
{
    const fixture *f = *state;
    if (system("command -v spm_train >/dev/null 2>&1")) skip();
    char cmd[512], path[128];
    snprintf(cmd, sizeof cmd, "spm_train --input='%s' --model_prefix='%s/foreign' "
             "--vocab_size=100 --minloglevel=2 >/dev/null 2>&1", f->text, f->dir);
    assert_int_equal(system(cmd), 0);
    snprintf(path, sizeof path, "%s/foreign.model", f->dir);
    qkv_spm *s = load(path);
    const qkv_spm_specials sp = qkv_spm_special_ids(s);
    assert_int_equal(sp.unk, 0);
    assert_int_equal(sp.bos, 1);
    assert_int_equal(sp.eos, 2);
    assert_int_equal(sp.pad, -1);
    assert_string_equal(qkv_spm_piece(s, 1), "<s>");
    check_round_trip(s, lines[0]);
    qkv_spm_free(s);
}

static void test_errors(void **state)
{
    const fixture *f = *state;
    qkv_spm *s = NULL;
    qkv_error err = {0};
    char path[128];
    snprintf(path, sizeof path, "%s/missing.model", f->dir);
    assert_int_equal(qkv_spm_load(&s, path, &err), QKV_ERR_IO);
    assert_non_null(strstr(err.msg, "missing.model"));
    assert_null(s);
    /* a text file is no model */
    assert_int_equal(qkv_spm_load(&s, f->text, &err), QKV_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "text.txt"));
    assert_null(s);
    s = load(f->unigram);
    char *text = NULL;
    const int bad[] = {5, 100};
    assert_int_equal(qkv_spm_decode(s, bad, 2, &text, &err), QKV_ERR_ARG);
    assert_non_null(strstr(err.msg, "100"));
    assert_null(text);
    qkv_spm_free(s);
    qkv_spm_free(NULL);
    /* more pieces than the text has material for; and too few for the reserved ones */
    qkv_sentences words;
    const char *few = "a few words\nand some more\n";
    assert_int_equal(qkv_sentences_split(&words, few, strlen(few), "t", &err), QKV_OK);
    const qkv_sentences *texts[1] = {&words};
    snprintf(path, sizeof path, "%s/huge.model", f->dir);
    assert_int_equal(qkv_spm_train(texts, 1, path, 1000, QKV_SPM_BPE, &err), QKV_ERR_ARG);
    assert_non_null(strstr(err.msg, "huge.model"));
    assert_non_null(strstr(err.msg, "ocabulary size"));
    assert_int_equal(access(path, F_OK), -1);
    assert_int_equal(qkv_spm_train(texts, 1, path, 4, QKV_SPM_UNIGRAM, &err), QKV_ERR_ARG);
    qkv_sentences_free(&words);
}

/* Texts on which libsentencepiece's trainer ends its process (a failed CHECK: normalisation
 * leaves no character) fail with a status, the trainer's message in it, and the caller goes
 * on: lines of U+3000, of control characters, of zero-width characters. A model trained after
 * them is still made. */
static void test_trainer_cannot_end_the_caller(void **state)
{
    const fixture *f = *state;
    static const char *const bad_lines[] = {"\xe3\x80\x80", "\x01\x02\x03",
                                            "\xe2\x80\x8b\xe2\x80\x8c"};
    char path[128], text[50 * 8];
    qkv_error err = {0};
    snprintf(path, sizeof path, "%s/doomed.model", f->dir);
    for (size_t b = 0; b < sizeof bad_lines / sizeof *bad_lines; b++) {
        size_t len = 0;
        for (int i = 0; i < 50; i++)
            len += (size_t)snprintf(text + len, sizeof text - len, "%s\n", bad_lines[b]);
        qkv_sentences words;
        assert_int_equal(qkv_sentences_split(&words, text, len, "t", &err), QKV_OK);
        const qkv_sentences *texts[1] = {&words};
        assert_int_equal(qkv_spm_train(texts, 1, path, 60, QKV_SPM_UNIGRAM, &err), QKV_ERR_ARG);
        assert_non_null(strstr(err.msg, "doomed.model: SentencePiece's trainer stopped"));
        assert_non_null(strstr(err.msg, "required_chars_"));
        assert_null(strchr(err.msg, '\n'));
        assert_int_equal(access(path, F_OK), -1);
        qkv_sentences_free(&words);
    }
    char *fine;
    size_t fine_len;
    assert_int_equal(qkv_read_file(f->text, 1 << 20, &fine, &fine_len, &err), QKV_OK);
    qkv_sentences words;
    assert_int_equal(qkv_sentences_split(&words, fine, fine_len, "t", &err), QKV_OK);
    free(fine);
    const qkv_sentences *texts[1] = {&words};
    assert_int_equal(qkv_spm_train(texts, 1, path, 100, QKV_SPM_BPE, &err), QKV_OK);
    qkv_spm *s = load(path);
    assert_int_equal(qkv_spm_size(s), 100);
    qkv_spm_free(s);
    qkv_sentences_free(&words);
}

/* A qkv-trained model's pieces are a qkv vocabulary with the same ids; a model with other
 * special ids is refused, naming it. */
static void test_vocab(void **state)
{
    const fixture *f = *state;
    qkv_spm *s = load(f->bpe);
    qkv_vocab v;
    qkv_error err = {0};
    assert_int_equal(qkv_spm_vocab(&v, s, f->bpe, &err), QKV_OK);
    assert_int_equal(v.size, qkv_spm_size(s));
    for (int id = 0; id < v.size; id++) {
        assert_string_equal(qkv_vocab_token(&v, id), qkv_spm_piece(s, id));
        assert_int_equal(qkv_vocab_id(&v, qkv_spm_piece(s, id)), id);
    }
    qkv_vocab_free(&v);
    qkv_spm_free(s);
    char path[128];
    snprintf(path, sizeof path, "%s/foreign.model", f->dir);
    if (access(path, R_OK)) return; /* test_foreign_model made it, if spm_train exists */
    s = load(path);
    assert_int_equal(qkv_spm_vocab(&v, s, path, &err), QKV_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "foreign.model: piece 1 is \"<s>\""));
    assert_int_equal(v.size, 0);
    qkv_spm_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unigram),
        cmocka_unit_test(test_bpe),
        cmocka_unit_test(test_types_differ),
        cmocka_unit_test(test_control_pieces_are_text),
        cmocka_unit_test(test_load_bytes),
        cmocka_unit_test(test_foreign_model),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_trainer_cannot_end_the_caller),
        cmocka_unit_test(test_vocab),
    };
    return cmocka_run_group_tests_name("spm", tests, setup, teardown);
}
