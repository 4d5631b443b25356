/* SPDX-License-Identifier: MIT */
/* The CLI's option parser: range texts, the checks at their open and closed ends, values
 * refused by args_parse, a numeric option without a range refusing its whole table, and
 * --config files (their expansion into options, and args_parse reading the block). */
#include "cli/args.c" /* the parser is part of the qkv tool, not of libqkv */
#include "cli/config_args.c"

#include <unistd.h>

#include "test_util.h"

static void test_range_texts(void **state)
{
    (void)state;
    qkv_range r;
    assert_int_equal(qkv_range_parse("[0, 1)", &r), 0);
    assert_true(r.lo == 0.0 && r.hi == 1.0 && r.lo_closed && !r.hi_closed);
    assert_int_equal(qkv_range_parse(" (0,1] ", &r), 0);
    assert_true(r.lo == 0.0 && r.hi == 1.0 && !r.lo_closed && r.hi_closed);
    assert_int_equal(qkv_range_parse("> 0", &r), 0);
    assert_true(r.lo == 0.0 && !r.lo_closed && isinf(r.hi));
    assert_int_equal(qkv_range_parse(">= 1e-3", &r), 0);
    assert_true(r.lo == 1e-3 && r.lo_closed);
    assert_int_equal(qkv_range_parse("<= 10", &r), 0);
    assert_true(r.hi == 10.0 && r.hi_closed && isinf(r.lo));
    assert_int_equal(qkv_range_parse("[2, 2]", &r), 0);
    const char *bad[] = {NULL, "", "0, 1", "[0, 1", "[0 1]", "[1, 0]", "(2, 2]", "> ", ">= x",
                         "[0, 1) x", "= 3", "[nan, 1]", "[0, inf)"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        if (qkv_range_parse(bad[i], &r) != -1) print_error("'%s' was read as a range\n", bad[i]);
        assert_int_equal(qkv_range_parse(bad[i], &r), -1);
    }
}

/* Each end of each kind of range, one value inside and one just outside. */
static void test_ends(void **state)
{
    (void)state;
    float x = 0;
    int n = 0;
    opt_spec f = {"x", OPT_FLOAT, &x, "", "[0, 1)", NULL}, i = {"n", OPT_INT, &n, "", "(-2, 3]", NULL};
    x = 0.0f, assert_int_equal(args_check(&f, "t", NULL), 0);
    x = -1e-7f, assert_int_equal(args_check(&f, "t", NULL), -1);
    x = 0.99999994f, assert_int_equal(args_check(&f, "t", NULL), 0);
    x = 1.0f, assert_int_equal(args_check(&f, "t", NULL), -1);
    n = -2, assert_int_equal(args_check(&i, "t", NULL), -1);
    n = -1, assert_int_equal(args_check(&i, "t", NULL), 0);
    n = 3, assert_int_equal(args_check(&i, "t", NULL), 0);
    n = 4, assert_int_equal(args_check(&i, "t", NULL), -1);
    f.range = "> 0";
    x = 0.0f, assert_int_equal(args_check(&f, "t", NULL), -1);
    x = 1e-30f, assert_int_equal(args_check(&f, "t", NULL), 0);
}

static void test_parse_refuses_values_out_of_range(void **state)
{
    (void)state;
    float lr = 0.5f;
    int steps = 10, quiet = 0;
    uint64_t seed = 0;
    const char *out = NULL;
    const opt_spec opts[] = {
        {"lr", OPT_FLOAT, &lr, "", ARG_GT0, NULL},       {"steps", OPT_INT, &steps, "", "[2, 8]", NULL},
        {"seed", OPT_U64, &seed, "", ARG_SEED, NULL},    {"quiet", OPT_FLAG, &quiet, "", NULL, NULL},
        {"out", OPT_STRING, &out, "", NULL, NULL},       {0},
    };
    char *ok[] = {"qkv", "t", "--lr", "0.1", "--steps=8", "--seed", "18446744073709551615",
                  "--quiet", "--out", "d"};
    assert_int_equal(args_parse(10, ok, 2, opts, ""), 0);
    assert_true(lr == 0.1f && steps == 8 && seed == UINT64_MAX && quiet && !strcmp(out, "d"));
    char *neg[] = {"qkv", "t", "--lr", "-0.1"}, *zero[] = {"qkv", "t", "--lr=0"},
         *big[] = {"qkv", "t", "--steps", "9"}, *huge[] = {"qkv", "t", "--steps", "2147483647"},
         *seed_neg[] = {"qkv", "t", "--seed", "-1"}, *seed_sp[] = {"qkv", "t", "--seed", " -1"};
    assert_int_equal(args_parse(4, neg, 2, opts, ""), -1);
    assert_int_equal(args_parse(3, zero, 2, opts, ""), -1);
    assert_int_equal(args_parse(4, big, 2, opts, ""), -1);
    assert_int_equal(args_parse(4, huge, 2, opts, ""), -1);
    assert_int_equal(args_parse(4, seed_neg, 2, opts, ""), -1);
    assert_int_equal(args_parse(4, seed_sp, 2, opts, ""), -1);
}

/* A float is a decimal number: hexadecimal ("0x10", read by strtof as 16), "inf", "nan" and
 * half numbers are not; a value a float cannot hold is too small or too large, said so (it
 * was "not a valid number"). */
static void test_float_texts(void **state)
{
    (void)state;
    float x = 1.0f;
    const opt_spec opts[] = {{"x", OPT_FLOAT, &x, "", ">= 0", NULL}, {0}};
    static const char *const good[] = {"0", "16", "0.5", ".5", "5.", "1e-3", "1E+3", "+2",
                                       "3.4e38", "1.2e-38"};
    static const char *const bad[] = {"0x10", "0X1p4", "inf", "nan", "infinity", "1e", "e3", ".",
                                      "", " 1", "1 ", "1,5", "--1", "1e+"};
    static const char *const tiny[] = {"1e-45", "1e-39", "1e-300"};
    static const char *const big[] = {"1e39", "3.5e38", "1e300"};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        char *argv[] = {"qkv", "t", "--x", (char *)good[i]};
        if (args_parse(4, argv, 2, opts, "")) fail_msg("'%s' refused", good[i]);
    }
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char *argv[] = {"qkv", "t", "--x", (char *)bad[i]};
        if (args_parse(4, argv, 2, opts, "") != -1) fail_msg("'%s' read as %g", bad[i], (double)x);
    }
    for (size_t i = 0; i < sizeof tiny / sizeof *tiny; i++) {
        char *argv[] = {"qkv", "t", "--x", (char *)tiny[i]};
        if (args_parse(4, argv, 2, opts, "") != -1) fail_msg("'%s' read as %g", tiny[i], (double)x);
    }
    for (size_t i = 0; i < sizeof big / sizeof *big; i++) {
        char *argv[] = {"qkv", "t", "--x", (char *)big[i]};
        if (args_parse(4, argv, 2, opts, "") != -1) fail_msg("'%s' read as %g", big[i], (double)x);
    }
}

/* The size and optimiser ranges of the CLI are the library's limits: the upper end of each
 * is the constant the library checks (a range wider than the limit showed a size in --help
 * that the model then refused). */
static void test_ranges_are_the_library_limits(void **state)
{
    (void)state;
    const struct {
        const char *range;
        double limit, lo;
    } pairs[] = {
        {ARG_D_MODEL, QKV_MAX_D_MODEL, 1}, {ARG_FFN, QKV_MAX_FFN, 1},
        {ARG_LAYERS, QKV_MAX_LAYERS, 1},   {ARG_LAYERS_GE0, QKV_MAX_LAYERS, 0},
        {ARG_MAX_LEN, QKV_MAX_LEN, 2},     {ARG_LR, QKV_MAX_LR, 0},
        {ARG_LR_FACTOR, QKV_MAX_LR_FACTOR, 0}, {ARG_WEIGHT_DECAY, QKV_MAX_WEIGHT_DECAY, 0},
        {ARG_ADAM_EPS, QKV_MAX_ADAM_EPS, 0},
    };
    for (size_t i = 0; i < sizeof pairs / sizeof *pairs; i++) {
        qkv_range r;
        assert_int_equal(qkv_range_parse(pairs[i].range, &r), 0);
        if (r.hi != pairs[i].limit || !r.hi_closed || r.lo != pairs[i].lo)
            fail_msg("range %s is not [%g, %g]", pairs[i].range, pairs[i].lo, pairs[i].limit);
    }
}

/* A numeric row without a range, or a flag with one, is a programming error that every
 * parse of the table reports (so `qkv CMD --help` in the tests finds it). */
static void test_table_without_range_fails(void **state)
{
    (void)state;
    int n = 1, flag = 0;
    const opt_spec no_range[] = {{"n", OPT_INT, &n, "", NULL, NULL}, {0}};
    const opt_spec bad_range[] = {{"n", OPT_INT, &n, "", "[1, 2", NULL}, {0}};
    const opt_spec flag_range[] = {{"f", OPT_FLAG, &flag, "", ">= 0", NULL}, {0}};
    char *help[] = {"qkv", "t", "--help"};
    assert_int_equal(args_parse(3, help, 2, no_range, ""), -1);
    assert_int_equal(args_parse(3, help, 2, bad_range, ""), -1);
    assert_int_equal(args_parse(3, help, 2, flag_range, ""), -1);
    assert_int_equal(args_table_check(no_range, "t"), -1);
}

/* A --config block: flags true and false, values checked, unknown keys refused; the command
 * line after the block wins. */
static void test_config_block(void **state)
{
    (void)state;
    float lr = 0.5f;
    int steps = 4, quiet = 1;
    const opt_spec opts[] = {
        {"lr", OPT_FLOAT, &lr, "", ARG_GT0, NULL},
        {"steps", OPT_INT, &steps, "", "[2, 8]", NULL},
        {"quiet", OPT_FLAG, &quiet, "", NULL, NULL},
        {0},
    };
    char *ok[] = {"qkv", "t", CONFIG_BEGIN, "f.json", "--lr=0.25", "--steps=3",
                  "--quiet=" CONFIG_FALSE, CONFIG_END, "--steps", "5"};
    assert_int_equal(args_parse(10, ok, 2, opts, ""), 0);
    assert_true(lr == 0.25f && steps == 5 && quiet == 0);
    char *unknown[] = {"qkv", "t", CONFIG_BEGIN, "f.json", "--frob=1", CONFIG_END};
    char *range[] = {"qkv", "t", CONFIG_BEGIN, "f.json", "--steps=9", CONFIG_END};
    char *true_value[] = {"qkv", "t", CONFIG_BEGIN, "f.json", "--lr", "0.5", CONFIG_END};
    char *false_value[] = {"qkv", "t", CONFIG_BEGIN, "f.json", "--lr=" CONFIG_FALSE, CONFIG_END};
    char *typed_false[] = {"qkv", "t", "--quiet=" CONFIG_FALSE}; /* only a file says false */
    assert_int_equal(args_parse(6, unknown, 2, opts, ""), -1);
    assert_int_equal(args_parse(6, range, 2, opts, ""), -1);
    assert_int_equal(args_parse(7, true_value, 2, opts, ""), -1);
    assert_int_equal(args_parse(6, false_value, 2, opts, ""), -1);
    assert_int_equal(args_parse(3, typed_false, 2, opts, ""), -1);
    assert_true(args_given(10, ok, 2, opts, "quiet") && !args_typed(10, ok, 2, opts, "quiet"));
    assert_true(args_typed(10, ok, 2, opts, "steps") && !args_given(10, ok, 2, opts, "st"));
}

/* Another name of an option (a long alias, a short one), a choice among names, and in a
 * --config file the key a run records an option under, a flag's opposite included. */
static void test_aliases_choices_records(void **state)
{
    (void)state;
    int steps = 4, no_bleu = 0, layers = 1;
    const char *model = NULL;
    opt_choice act = {QKV_ENUM_ACTIVATION, NULL, QKV_ACT_RELU};
    static const char *const kinds[] = {"word", "bpe", NULL};
    opt_choice kind = {0, kinds, 0};
    const opt_spec opts[] = {
        {"max-tokens", OPT_INT, &steps, "", "[2, 8]", "data num_steps"},
        {"num-steps", OPT_ALIAS, "max-tokens", "d2l's name", NULL, NULL},
        {"model", OPT_DIR, &model, "", NULL, NULL},
        {"m", OPT_ALIAS, "model", NULL, NULL, NULL},
        {"no-bleu", OPT_FLAG, &no_bleu, "", NULL, "data !valid_bleu"},
        {"layers", OPT_INT, &layers, "", "[1, 9]", "model enc_layers"},
        {"act", OPT_CHOICE, &act, "", NULL, "model"},
        {"kind", OPT_CHOICE, &kind, "", NULL, NULL},
        {0},
    };
    char *ok[] = {"qkv", "t", "--num-steps", "6", "-m", "dir", "--act=gelu", "--kind", "bpe"};
    assert_int_equal(args_parse(9, ok, 2, opts, ""), 0);
    assert_true(steps == 6 && !strcmp(model, "dir") && act.value == QKV_ACT_GELU &&
                kind.value == 1);
    assert_true(args_given(9, ok, 2, opts, "max-tokens") && args_given(9, ok, 2, opts, "model"));
    assert_false(args_given(9, ok, 2, opts, "layers"));
    /* a file names options by their record keys: num_steps, valid_bleu (false: --no-bleu on) */
    char *file[] = {"qkv", "t", CONFIG_BEGIN, "f.json", "--num_steps=3", "--valid_bleu=" CONFIG_FALSE,
                    "--enc_layers=5", CONFIG_END};
    assert_int_equal(args_parse(8, file, 2, opts, ""), 0);
    assert_true(steps == 3 && no_bleu == 1 && layers == 5);
    char *on[] = {"qkv", "t", CONFIG_BEGIN, "f.json", "--valid_bleu", CONFIG_END};
    assert_int_equal(args_parse(6, on, 2, opts, ""), 0);
    assert_int_equal(no_bleu, 0);
    /* record keys and underscores only in a file; short options only with one dash */
    char *typed_key[] = {"qkv", "t", "--num_steps", "3"}, *long_m[] = {"qkv", "t", "--m", "d"},
         *short_model[] = {"qkv", "t", "-model", "d"}, *bad_choice[] = {"qkv", "t", "--act", "tanh"};
    assert_int_equal(args_parse(4, typed_key, 2, opts, ""), -1);
    assert_int_equal(args_parse(4, long_m, 2, opts, ""), -1);
    assert_int_equal(args_parse(4, short_model, 2, opts, ""), -1);
    assert_int_equal(args_parse(4, bad_choice, 2, opts, ""), -1);
    qkv_record r;
    assert_int_equal(args_record(&opts[4], &r), 1);
    assert_true(r.in_train && r.fixed && r.inverted && !strcmp(r.key, "valid_bleu"));
    assert_int_equal(args_record(&opts[6], &r), 1);
    assert_true(!r.in_train && r.fixed && !r.inverted && !strcmp(r.key, "act"));
    assert_int_equal(args_record(&opts[2], &r), 0);
}

/* Rows that cannot be meant fail every parse of their table, as a bad range does. */
static void test_table_faults(void **state)
{
    (void)state;
    int n = 1;
    const opt_spec no_target[] = {{"n", OPT_INT, &n, "", ">= 0", NULL},
                                  {"x", OPT_ALIAS, "nothing", NULL, NULL, NULL}, {0}};
    const opt_spec bad_record[] = {{"n", OPT_INT, &n, "", ">= 0", "config"}, {0}};
    const opt_spec inverted_int[] = {{"n", OPT_INT, &n, "", ">= 0", "data !n"}, {0}};
    const opt_spec twice[] = {{"n", OPT_INT, &n, "", ">= 0", NULL},
                              {"n", OPT_INT, &n, "", ">= 0", NULL}, {0}};
    assert_int_equal(args_table_check(no_target, "t"), -1);
    assert_int_equal(args_table_check(bad_record, "t"), -1);
    assert_int_equal(args_table_check(inverted_int, "t"), -1);
    assert_int_equal(args_table_check(twice, "t"), -1);
}

/* config_args_expand: the block goes after the command's leading words and before the
 * command line, keys become options, record-only keys are skipped. */
static void test_config_expand(void **state)
{
    (void)state;
    char path[] = "/tmp/qkv-test-args-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char json[] = "{\"label_smoothing\": 0.1, \"quiet\": true, \"bias\": false, "
                        "\"epochs\": 3, \"act\": \"gelu\", \"history\": [1], "
                        "\"valid_bleu\": false, \"data\": \"a.txt\", \"tgt\": \"b.txt\"}";
    assert_int_equal(write(fd, json, sizeof json - 1), (ssize_t)(sizeof json - 1));
    close(fd);
    char *in[] = {"qkv", "train", "--lr", "1", "--config", path, "--out", "d", NULL};
    int argc = 8;
    char **argv = in, **owned = NULL;
    assert_int_equal(config_args_expand(&argc, &argv, &owned), 0);
    /* keys stay as written (args_parse finds their options); "data" with "tgt" is the
     * source file of a record written before "src" was recorded */
    const char *want[] = {"qkv", "train", CONFIG_BEGIN, path, "--label_smoothing=0.1",
                          "--quiet", "--bias=" CONFIG_FALSE, "--epochs=3", "--act=gelu",
                          "--valid_bleu=" CONFIG_FALSE, "--tgt=b.txt", "--src=a.txt", CONFIG_END,
                          "--lr", "1", "--out", "d"};
    assert_int_equal(argc, (int)(sizeof want / sizeof *want));
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], want[i])) print_error("word %d: '%s', want '%s'\n", i, argv[i], want[i]);
        assert_string_equal(argv[i], want[i]);
    }
    assert_null(argv[argc]);
    config_args_free(owned);
    /* bench KIND and plot DIR stay first */
    char *bench[] = {"qkv", "bench", "train", "--config=" , NULL};
    char joined[64];
    snprintf(joined, sizeof joined, "--config=%s", path);
    bench[3] = joined;
    argc = 4, argv = bench;
    assert_int_equal(config_args_expand(&argc, &argv, &owned), 0);
    assert_string_equal(argv[2], "train");
    assert_string_equal(argv[3], CONFIG_BEGIN);
    config_args_free(owned);
    /* no --config: nothing changes */
    char *plain[] = {"qkv", "info", "--d-model", "8", NULL};
    argc = 4, argv = plain;
    assert_int_equal(config_args_expand(&argc, &argv, &owned), 0);
    assert_true(argv == plain && argc == 4 && !owned);
    /* an unknown key of a file is refused by args_parse; a key that names no option at all
     * (upper case, "help") by the expansion */
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("{\"Help\": true}", f);
    fclose(f);
    char *bad[] = {"qkv", "train", "--config", path, NULL};
    argc = 4, argv = bad;
    assert_int_equal(config_args_expand(&argc, &argv, &owned), -1);
    assert_null(owned);
    unlink(path);
}

/* A --config file is one JSON object read whole: text after it, a key twice, or two spellings
 * of one option are refused; an integer is passed on as written (a 64-bit seed exactly). */
static void test_config_strict(void **state)
{
    (void)state;
    static const char *const refused[] = {
        "{\"epochs\": 3}garbage",
        "{\"epochs\": 3}{\"epochs\": 4}",
        "{\"epochs\": 3, \"epochs\": 4}",
    };
    char path[] = "/tmp/qkv-test-args-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    char *in[] = {"qkv", "train", "--config", path, NULL};
    int argc;
    char **argv, **owned = NULL;
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fputs(refused[i], f);
        fclose(f);
        argc = 4, argv = in;
        if (config_args_expand(&argc, &argv, &owned) != -1) fail_msg("accepted %s", refused[i]);
        assert_null(owned);
    }
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("{\"seed\": 18446744073709551615, \"epochs\": 3, \"lr\": 1e-3, \"warmup\": -7}\n\n", f);
    fclose(f);
    argc = 4, argv = in;
    assert_int_equal(config_args_expand(&argc, &argv, &owned), 0);
    assert_int_equal(argc, 9);
    assert_string_equal(argv[4], "--seed=18446744073709551615");
    assert_string_equal(argv[5], "--epochs=3");
    assert_string_equal(argv[6], "--lr=0.001");
    assert_string_equal(argv[7], "--warmup=-7");
    config_args_free(owned);
    unlink(path);
    /* two keys of one file for one option (its names with '_' or '-', the key a run records
     * it under, an alias): which counts would be the keys' order, so neither does; a file and
     * the command line, or two files, may each set it (the later wins) */
    float ls = 0.0f;
    int no_bleu = 0, steps = 4;
    const opt_spec opts[] = {
        {"label-smoothing", OPT_FLOAT, &ls, "", ARG_RATE, "train label_smoothing"},
        {"no-bleu", OPT_FLAG, &no_bleu, "", NULL, "data !valid_bleu"},
        {"max-tokens", OPT_INT, &steps, "", "[2, 8]", "data num_steps"},
        {"num-steps", OPT_ALIAS, "max-tokens", "", NULL, NULL},
        {0},
    };
    char *spellings[] = {"qkv", "t", CONFIG_BEGIN, "f.json", "--label_smoothing=0.1",
                         "--label-smoothing=0.2", CONFIG_END};
    char *record_key[] = {"qkv", "t", CONFIG_BEGIN, "f.json", "--valid_bleu=" CONFIG_FALSE,
                          "--no-bleu", CONFIG_END};
    char *alias[] = {"qkv", "t", CONFIG_BEGIN, "f.json", "--num_steps=3", "--max-tokens=5",
                     CONFIG_END};
    assert_int_equal(args_parse(7, spellings, 2, opts, ""), -1);
    assert_int_equal(args_parse(7, record_key, 2, opts, ""), -1);
    assert_int_equal(args_parse(7, alias, 2, opts, ""), -1);
    char *two_places[] = {"qkv", "t", CONFIG_BEGIN, "a.json", "--label_smoothing=0.1", CONFIG_END,
                          CONFIG_BEGIN, "b.json", "--label-smoothing=0.2", CONFIG_END,
                          "--label-smoothing", "0.3"};
    assert_int_equal(args_parse(12, two_places, 2, opts, ""), 0);
    assert_true(ls == 0.3f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_range_texts),
        cmocka_unit_test(test_ends),
        cmocka_unit_test(test_parse_refuses_values_out_of_range),
        cmocka_unit_test(test_table_without_range_fails),
        cmocka_unit_test(test_config_block),
        cmocka_unit_test(test_aliases_choices_records),
        cmocka_unit_test(test_table_faults),
        cmocka_unit_test(test_config_expand),
        cmocka_unit_test(test_float_texts),
        cmocka_unit_test(test_ranges_are_the_library_limits),
        cmocka_unit_test(test_config_strict),
    };
    return cmocka_run_group_tests_name("args", tests, NULL, NULL);
}
