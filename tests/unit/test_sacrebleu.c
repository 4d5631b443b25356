/* SPDX-License-Identifier: MIT */
/* sacreBLEU's scores (src/training/sacrebleu.c): the 13a tokenisation of tricky lines, BLEU
 * and chrF of a few pairs, corpus and sentence level, all as pip's sacrebleu 2.6.0 gives them
 * (the expected values were printed by it); the tokeniser's buffer contract; bad arguments.
 * tests/e2e/test_sacrebleu.sh compares with sacrebleu itself over Multi30k. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

static void test_13a_tokenizer(void **state)
{
    (void)state;
    static const char *const cases[][2] = {
        {"Hello, world!", "Hello , world !"},
        {"It costs $3,000.50 (approx.).", "It costs $ 3,000.50 ( approx . ) ."},
        {"The 5-year-old's toy-car.", "The 5 - year-old's toy-car ."},
        {"e.g. U.S.A. vs. a.b,c", "e . g . U . S . A . vs . a . b , c"},
        {"&quot;Quoted&quot; &amp;lt; tags &gt;", "\" Quoted \" < tags >"},
        {"x<skipped>y", "xy"},
        {"line-\nbreak", "linebreak"},
        {"  lots   of\tspace \xc2\xa0here\xe3\x80\x80 ", "lots of space here"}, /* NBSP, U+3000 */
        {"Gr\xc3\xb6\xc3\x9f" "e. Caf\xc3\xa9, na\xc3\xafve\xe2\x80\xa6",
         "Gr\xc3\xb6\xc3\x9f" "e . Caf\xc3\xa9 , na\xc3\xafve\xe2\x80\xa6"},
        {"a...b,,c", "a . . . b , , c"},
        {"1.5, 2.5. 3", "1.5 , 2.5 . 3"},
        {"7-8 - 9--10", "7 - 8 - 9 - -10"},
        {"{[(<>)]}|\\^_`~@#%*+=:;?/", "{ [ ( < > ) ] } | \\ ^ _ ` ~ @ # % * + = : ; ? /"},
        {"l'homme d'affaires", "l'homme d'affaires"},
        {"trailing space \xe2\x80\x89", "trailing space"}, /* U+2009 thin space */
        {"..,", ". . ,"},
        {"", ""},
        {"   ", ""},
        {"\xc3\xa9.", "\xc3\xa9 ."},
        {"3.,4", "3 . , 4"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        char out[256];
        const size_t n = qkv_tokenize_13a(out, sizeof out, cases[k][0]);
        if (strcmp(out, cases[k][1]))
            fail_msg("13a of \"%s\": \"%s\", sacreBLEU \"%s\"", cases[k][0], out, cases[k][1]);
        assert_int_equal(n, strlen(cases[k][1]));
    }
    /* too small a buffer: the length needed, and an empty string */
    char small[8];
    assert_int_equal(qkv_tokenize_13a(small, sizeof small, "Hello, world!"), 15);
    assert_string_equal(small, "");
    assert_int_equal(qkv_tokenize_13a(NULL, 0, "Hello, world!"), 15);
    char exact[16];
    assert_int_equal(qkv_tokenize_13a(exact, sizeof exact, "Hello, world!"), 15);
    assert_string_equal(exact, "Hello , world !");
}

/* One pair's corpus BLEU, sentence BLEU and chrF against sacrebleu's (1e-9). */
static void test_scores_of_pairs(void **state)
{
    (void)state;
    static const struct {
        const char *hyp, *ref;
        double corpus, sentence, chrf;
    } pairs[] = {
        {"The cat sat on the mat.", "The cat sat on the mat.", 100.0, 100.0, 100.0},
        {"The cat", "The cat sat on the mat.", 0.0, 8.208499862389884, 25.639786226160933},
        {"", "The cat.", 0.0, 0.0, 0.0},
        {"a b", "x y z", 0.0, 0.0, 0.0},
        {"Ein Mann f\xc3\xa4hrt Fahrrad.", "Ein Mann f\xc3\xa4hrt ein Fahrrad.",
         40.93653765389909, 40.93653765389909, 74.44930607922377},
        {"the CAT sat", "The cat sat", 0.0, 27.516060407455225, 21.59391534391534},
        /* references too short for 5- and 6-grams: those orders do not count */
        {"a cat sat", "a cat", 0.0, 55.03212081491043, 79.06824146981627},
        {"Hello there", "Hi", 0.0, 0.0, 13.88888888888889},
    };
    for (size_t k = 0; k < sizeof pairs / sizeof *pairs; k++) {
        qkv_sacrebleu_stats s = {0};
        qkv_chrf_stats c = {0};
        assert_int_equal(qkv_sacrebleu_add(&s, pairs[k].hyp, pairs[k].ref, NULL), QKV_OK);
        assert_int_equal(qkv_chrf_add(&c, pairs[k].hyp, pairs[k].ref, NULL), QKV_OK);
        const double got[3] = {qkv_sacrebleu_score(&s, 0, NULL, NULL),
                               qkv_sacrebleu_score(&s, 1, NULL, NULL), qkv_chrf_score(&c)};
        const double want[3] = {pairs[k].corpus, pairs[k].sentence, pairs[k].chrf};
        for (int i = 0; i < 3; i++)
            if (fabs(got[i] - want[i]) > 1e-9)
                fail_msg("pair %zu score %d: %.12f, sacreBLEU %.12f", k, i, got[i], want[i]);
    }
    /* a corpus is its pairs' statistics summed, and prints as sacrebleu -f text -w 2 does */
    qkv_sacrebleu_stats s = {0};
    for (size_t k = 0; k < sizeof pairs / sizeof *pairs; k++)
        assert_int_equal(qkv_sacrebleu_add(&s, pairs[k].hyp, pairs[k].ref, NULL), QKV_OK);
    char line[256];
    qkv_sacrebleu_format(line, sizeof line, &s);
    print_message("%s\n", line);
    assert_non_null(strstr(line, "BLEU|nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:"));
    assert_non_null(strstr(qkv_chrf_signature(), "nc:6|nw:0|space:no"));
    /* a hypothesis's 6-grams count only where its reference has some, across a corpus too */
    qkv_chrf_stats c = {0};
    assert_int_equal(qkv_chrf_add(&c, "a cat sat", "a cat", NULL), QKV_OK);
    assert_int_equal(qkv_chrf_add(&c, "The cat sat on the mat.", "The cat sat on the mat.", NULL),
                     QKV_OK);
    assert_true(fabs(qkv_chrf_score(&c) - 98.01697557726088) < 1e-9);
}

static void test_bad_arguments(void **state)
{
    (void)state;
    qkv_sacrebleu_stats s = {0};
    qkv_chrf_stats c = {0};
    qkv_error err = {0};
    assert_int_equal(qkv_sacrebleu_add(&s, NULL, "x", &err), QKV_ERR_ARG);
    assert_int_equal(qkv_sacrebleu_add(NULL, "x", "x", &err), QKV_ERR_ARG);
    assert_int_equal(qkv_chrf_add(&c, "x", NULL, &err), QKV_ERR_ARG);
    assert_non_null(strstr(err.msg, "chrF"));
    /* invalid UTF-8 is scored, byte by byte, not refused */
    assert_int_equal(qkv_chrf_add(&c, "\xff\xfe" "abc", "\xff" "abc", &err), QKV_OK);
    assert_int_equal(qkv_sacrebleu_add(&s, "\xff\xfe" "abc", "\xff" "abc", &err), QKV_OK);
    assert_true(qkv_chrf_score(&c) > 0.0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_13a_tokenizer),
        cmocka_unit_test(test_scores_of_pairs),
        cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests_name("sacrebleu", tests, NULL, NULL);
}
