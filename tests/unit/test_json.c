/* SPDX-License-Identifier: MIT */
/* qkv_json_parse, the one reader of every JSON text: the whole input is one value (nothing
 * but white space after it), no NUL byte, no key twice in an object, and every number's text
 * kept so that a 64-bit integer is read exactly (qkv_json_uint64). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cJSON.h>

#include "qkv.h"
#include "test_util.h"

static cJSON *parse_ok(const char *text, size_t len)
{
    cJSON *o = NULL;
    qkv_error err = {0};
    if (qkv_json_parse(&o, text, len, "t.json", &err)) fail_msg("%s: %s", text, err.msg);
    return o;
}

/* text is refused, the message naming the text and holding want */
static void refused(const char *text, size_t len, const char *want)
{
    cJSON *o = (cJSON *)1;
    qkv_error err = {0};
    if (qkv_json_parse(&o, text, len, "t.json", &err) != QKV_ERR_FORMAT)
        fail_msg("accepted: %.*s", (int)len, text);
    assert_null(o);
    if (strncmp(err.msg, "t.json: ", 8) || !strstr(err.msg, want))
        fail_msg("message \"%s\" lacks \"%s\"", err.msg, want);
}

#define REFUSED(lit, want) refused(lit, sizeof lit - 1, want)

static void test_whole_input(void **state)
{
    (void)state;
    cJSON *o = parse_ok("{\"q\": \"Ein Hund.\"}\n \t\r\n", 22);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(o, "q")->valuestring, "Ein Hund.");
    cJSON_Delete(o);
    cJSON_Delete(parse_ok("[1, 2]", 6));
    cJSON_Delete(parse_ok("\xEF\xBB\xBF{\"a\": 1}", 11)); /* a byte-order mark, as cJSON reads */
    REFUSED("{\"q\":\"Ein Hund.\"}garbage", "more after the JSON value (at byte 17)");
    REFUSED("{\"a\": 1}{\"a\": 2}", "more after the JSON value (at byte 8)");
    REFUSED("{\"a\": 1}\n,", "more after the JSON value (at byte 9)");
    REFUSED("{\"a\": 1}\0", "NUL byte (at byte 8)");
    REFUSED("{\"a\": \"x\0y\"}", "NUL byte (at byte 8)");
    REFUSED("{\"a\": 1,}", "not valid JSON (at byte");
    /* cJSON skips any byte up to 32 as white space; JSON's is space, tab and line breaks */
    REFUSED("{\"a\":\x1e 1}", "a control character (0x1e) at byte 5, outside any string");
    REFUSED("\x01[1]", "a control character (0x01) at byte 0");
    REFUSED("[1]\x0b", "more after the JSON value (at byte 3)");
    cJSON_Delete(parse_ok("{\"a\": \"\x1e\"}", 10)); /* inside a string: its own business */
    /* \u0000 ends cJSON's string there, the rest dropped unseen */
    REFUSED("{\"q\": \"Ein Hund.\\u0000 Zwei\"}", "a NUL character (\\u0000) in a string (at byte 16)");
    REFUSED("{\"a\\u0000b\": 1}", "a NUL character");
    REFUSED("[\"x\", [\"\\u0000\"]]", "a NUL character");
    cJSON_Delete(parse_ok("[\"\\\\u0000\"]", 11)); /* an escaped backslash, then text */
    REFUSED("", "not valid JSON");
    REFUSED("   ", "not valid JSON");
}

static void test_duplicate_keys(void **state)
{
    (void)state;
    REFUSED("{\"a\": 1, \"a\": 1}", "the key \"a\" appears twice");
    REFUSED("{\"a\": 1, \"b\": 2, \"a\": 3}", "the key \"a\" appears twice");
    REFUSED("{\"x\": {\"b\": true, \"c\": 0, \"b\": false}}", "the key \"b\" appears twice");
    REFUSED("[1, [{\"c\": 1, \"c\": 2}]]", "the key \"c\" appears twice");
    /* the same key in two objects, and keys that differ only in case, are fine */
    cJSON_Delete(parse_ok("{\"a\": {\"a\": 1}, \"b\": [{\"a\": 2}, {\"a\": 3}], \"A\": 4}", 50));
    /* many keys (a vocabulary): each checked once */
    enum { N = 20000 };
    char *big = malloc(N * 16 + 16);
    assert_non_null(big);
    size_t len = (size_t)sprintf(big, "{");
    for (int i = 0; i < N; i++) len += (size_t)sprintf(big + len, "%s\"t%d\": %d", i ? "," : "", i, i);
    len += (size_t)sprintf(big + len, "}");
    cJSON *o = parse_ok(big, len);
    assert_int_equal(cJSON_GetArraySize(o), N);
    cJSON_Delete(o);
    memcpy(big + len - 1, ",\"t7\":1}", 9);
    refused(big, len + 7, "the key \"t7\" appears twice");
    free(big);
}

static void test_exact_integers(void **state)
{
    (void)state;
    static const char text[] =
        "{\"s\": \"a\\\"}],{\", \"n\": [1, {\"k\": \"\\\\\", \"m\": -2.5e-3}, true, null],"
        " \"seed\": 123456789012345678, \"max\": 18446744073709551615,"
        " \"over\": 18446744073709551616, \"neg\": -1, \"half\": 1.5, \"e\": 1e3,"
        " \"big_e\": 1e30, \"float\": 7.0}";
    cJSON *o = parse_ok(text, sizeof text - 1);
    uint64_t v = 0;
    assert_true(qkv_json_uint64(cJSON_GetObjectItemCaseSensitive(o, "seed"), &v));
    assert_true(v == 123456789012345678ULL); /* a double would hold ...680 */
    assert_true(qkv_json_uint64(cJSON_GetObjectItemCaseSensitive(o, "max"), &v));
    assert_true(v == UINT64_MAX);
    assert_false(qkv_json_uint64(cJSON_GetObjectItemCaseSensitive(o, "over"), &v));
    assert_false(qkv_json_uint64(cJSON_GetObjectItemCaseSensitive(o, "neg"), &v));
    assert_false(qkv_json_uint64(cJSON_GetObjectItemCaseSensitive(o, "half"), &v));
    assert_false(qkv_json_uint64(cJSON_GetObjectItemCaseSensitive(o, "big_e"), &v));
    assert_false(qkv_json_uint64(cJSON_GetObjectItemCaseSensitive(o, "s"), &v));
    assert_true(qkv_json_uint64(cJSON_GetObjectItemCaseSensitive(o, "e"), &v));
    assert_true(v == 1000);
    assert_true(qkv_json_uint64(cJSON_GetObjectItemCaseSensitive(o, "float"), &v));
    assert_true(v == 7);
    /* the walk kept its place through strings holding quotes and brackets */
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(o, "n");
    assert_string_equal(cJSON_GetArrayItem(n, 0)->valuestring, "1");
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(n, 1), "m");
    assert_string_equal(m->valuestring, "-2.5e-3");
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(o, "s")->valuestring, "a\"}],{");
    /* a duplicate keeps the text; a number made in memory has none, and reads as its double */
    cJSON *copy = cJSON_Duplicate(o, 1);
    assert_true(qkv_json_uint64(cJSON_GetObjectItemCaseSensitive(copy, "seed"), &v));
    assert_true(v == 123456789012345678ULL);
    cJSON_Delete(copy);
    cJSON *made = cJSON_CreateNumber(42);
    assert_true(qkv_json_uint64(made, &v));
    assert_true(v == 42);
    cJSON_Delete(made);
    cJSON_Delete(o);
}

static void test_load(void **state)
{
    (void)state;
    char dir[] = "/tmp/qkv-json-XXXXXX", path[64];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/c.json", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("{\"seed\": 18446744073709551615}\n{}", f);
    fclose(f);
    cJSON *o = NULL;
    qkv_error err = {0};
    assert_int_equal(qkv_json_load(&o, path, 1000, &err), QKV_ERR_FORMAT);
    assert_non_null(strstr(err.msg, path));
    assert_non_null(strstr(err.msg, "more after the JSON value (at byte 31)"));
    assert_null(o);
    assert_int_equal(qkv_json_load(&o, "/dev/zero", 1000, &err), QKV_ERR_IO);
    assert_int_equal(qkv_json_load(&o, path, 10, &err), QKV_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "more than 10 bytes"));
    unlink(path);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_whole_input),
        cmocka_unit_test(test_duplicate_keys),
        cmocka_unit_test(test_exact_integers),
        cmocka_unit_test(test_load),
    };
    return cmocka_run_group_tests_name("json", tests, NULL, NULL);
}
