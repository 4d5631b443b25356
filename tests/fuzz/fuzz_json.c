/* SPDX-License-Identifier: MIT */
/* qkv_json_parse, the one JSON reader, on the raw bytes. Besides cJSON's own verdict it must
 * refuse a NUL byte or a \u0000 escape, anything after the value but white space, a control
 * character between tokens, and a key twice in an object;
 * what it accepts is what cJSON parses of the same bytes (the same tree), and every number
 * keeps its own text, which reads back as the number (the walk that finds those texts never
 * loses its place in the input). A refusal names the input once. */
#include <math.h>

#include <cJSON.h>

#include "fuzz_common.h"

#define NAME "fuzz.json"

static int has_duplicate(const cJSON *x)
{
    for (const cJSON *c = x ? x->child : NULL; c; c = c->next) {
        if (cJSON_IsObject(x))
            for (const cJSON *d = c->next; d; d = d->next)
                if (!strcmp(c->string, d->string)) return 1;
        if (has_duplicate(c)) return 1;
    }
    return 0;
}

/* The same tree: types, keys, strings, and numbers equal as doubles (cJSON_Compare calls two
 * infinities different). */
static int same_tree(const cJSON *a, const cJSON *b)
{
    if ((a->type & 0xFF) != (b->type & 0xFF)) return 0;
    if ((a->string || b->string) && (!a->string || !b->string || strcmp(a->string, b->string)))
        return 0;
    if (cJSON_IsNumber(a) && !(a->valuedouble == b->valuedouble ||
                               (isnan(a->valuedouble) && isnan(b->valuedouble))))
        return 0;
    if (cJSON_IsString(a) && strcmp(a->valuestring, b->valuestring)) return 0;
    const cJSON *x = a->child, *y = b->child;
    for (; x && y; x = x->next, y = y->next)
        if (!same_tree(x, y)) return 0;
    return !x && !y;
}

/* A byte below 32 other than JSON's white space, outside the strings (cJSON skips it), or a
 * \u0000 escape inside one (cJSON ends the string there). */
static int control_outside_strings(const char *t, size_t n)
{
    int in_string = 0;
    for (size_t i = 0; i < n; i++) {
        const unsigned char c = (unsigned char)t[i];
        if (in_string) {
            if (c == '\\' && n - i >= 6 && !memcmp(t + i + 1, "u0000", 5)) return 1;
            if (c == '\\') i++;
            else if (c == '"') in_string = 0;
        } else if (c == '"') in_string = 1;
        else if (c < 32 && c != ' ' && c != '\t' && c != '\n' && c != '\r') return 1;
    }
    return 0;
}

static void check_numbers(const cJSON *x)
{
    for (const cJSON *c = x ? x->child : NULL; c; c = c->next) {
        if (cJSON_IsNumber(c)) {
            FUZZ_CHECK(c->valuestring != NULL);
            const double d = strtod(c->valuestring, NULL);
            FUZZ_CHECK(d == c->valuedouble || (isnan(d) && isnan(c->valuedouble)));
        }
        check_numbers(c);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;
    cJSON *o = NULL;
    qkv_error err = {0};
    const qkv_status st = qkv_json_parse(&o, text, size, NAME, &err);
    /* cJSON's own reading of the same bytes, and what it lets through */
    const char *end = NULL;
    cJSON *ref = memchr(text, '\0', size) ? NULL : cJSON_ParseWithLengthOpts(text, size, &end, 0);
    int whole = 0;
    if (ref) {
        while (end < text + size && *end && strchr(" \t\r\n", *end)) end++;
        whole = end == text + size && !has_duplicate(ref) && !control_outside_strings(text, size);
    }
    if (st != QKV_OK) {
        FUZZ_CHECK(st == QKV_ERR_FORMAT && err.code == st && o == NULL);
        FUZZ_CHECK(fuzz_named_once(err.msg, NAME));
        FUZZ_CHECK(!whole);
    } else {
        FUZZ_CHECK(whole && same_tree(o, ref));
        if (cJSON_IsNumber(o)) {
            FUZZ_CHECK(o->valuestring && strtod(o->valuestring, NULL) == o->valuedouble);
        }
        check_numbers(o);
    }
    cJSON_Delete(o);
    cJSON_Delete(ref);
    return 0;
}
