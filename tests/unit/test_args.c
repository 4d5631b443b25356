/* The CLI's option parser: range texts, the checks at their open and closed ends, values
 * refused by args_parse, and a numeric option without a range refusing its whole table. */
#include "cli/args.c" /* the parser is part of the qkv tool, not of libqkv */

#include "test_util.h"

static void test_range_texts(void **state)
{
    (void)state;
    opt_range r;
    assert_int_equal(args_range_parse("[0, 1)", &r), 0);
    assert_true(r.lo == 0.0 && r.hi == 1.0 && r.lo_closed && !r.hi_closed);
    assert_int_equal(args_range_parse(" (0,1] ", &r), 0);
    assert_true(r.lo == 0.0 && r.hi == 1.0 && !r.lo_closed && r.hi_closed);
    assert_int_equal(args_range_parse("> 0", &r), 0);
    assert_true(r.lo == 0.0 && !r.lo_closed && isinf(r.hi));
    assert_int_equal(args_range_parse(">= 1e-3", &r), 0);
    assert_true(r.lo == 1e-3 && r.lo_closed);
    assert_int_equal(args_range_parse("<= 10", &r), 0);
    assert_true(r.hi == 10.0 && r.hi_closed && isinf(r.lo));
    assert_int_equal(args_range_parse("[2, 2]", &r), 0);
    const char *bad[] = {NULL, "", "0, 1", "[0, 1", "[0 1]", "[1, 0]", "(2, 2]", "> ", ">= x",
                         "[0, 1) x", "= 3", "[nan, 1]", "[0, inf)"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        if (args_range_parse(bad[i], &r) != -1) print_error("'%s' was read as a range\n", bad[i]);
        assert_int_equal(args_range_parse(bad[i], &r), -1);
    }
}

/* Each end of each kind of range, one value inside and one just outside. */
static void test_ends(void **state)
{
    (void)state;
    float x = 0;
    int n = 0;
    opt_spec f = {"x", OPT_FLOAT, &x, "", "[0, 1)"}, i = {"n", OPT_INT, &n, "", "(-2, 3]"};
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
        {"lr", OPT_FLOAT, &lr, "", ARG_GT0},       {"steps", OPT_INT, &steps, "", "[2, 8]"},
        {"seed", OPT_U64, &seed, "", ARG_SEED},    {"quiet", OPT_FLAG, &quiet, "", NULL},
        {"out", OPT_STRING, &out, "", NULL},       {NULL, 0, NULL, NULL, NULL},
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

/* A numeric row without a range, or a flag with one, is a programming error that every
 * parse of the table reports (so `qkv CMD --help` in the tests finds it). */
static void test_table_without_range_fails(void **state)
{
    (void)state;
    int n = 1, flag = 0;
    const opt_spec no_range[] = {{"n", OPT_INT, &n, "", NULL}, {NULL, 0, NULL, NULL, NULL}};
    const opt_spec bad_range[] = {{"n", OPT_INT, &n, "", "[1, 2"}, {NULL, 0, NULL, NULL, NULL}};
    const opt_spec flag_range[] = {{"f", OPT_FLAG, &flag, "", ">= 0"}, {NULL, 0, NULL, NULL, NULL}};
    char *help[] = {"qkv", "t", "--help"};
    assert_int_equal(args_parse(3, help, 2, no_range, ""), -1);
    assert_int_equal(args_parse(3, help, 2, bad_range, ""), -1);
    assert_int_equal(args_parse(3, help, 2, flag_range, ""), -1);
    assert_int_equal(args_table_check(no_range, "t"), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_range_texts),
        cmocka_unit_test(test_ends),
        cmocka_unit_test(test_parse_refuses_values_out_of_range),
        cmocka_unit_test(test_table_without_range_fails),
    };
    return cmocka_run_group_tests_name("args", tests, NULL, NULL);
}
