/* SPDX-License-Identifier: MIT */
/* Tensor files: round trips through save and load, every kind of hostile header, and the
 * atomic save keeping the old file when anything goes wrong. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cJSON.h>

#include "test_util.h"

/* ---------------------------------------------------------------------------------------
 * Fixtures: a fresh temporary directory per test
 * ------------------------------------------------------------------------------------- */

typedef struct {
    char dir[64];
    char path[128]; /* dir/t.safetensors */
} fixture;

static int setup(void **state)
{
    fixture *fx = calloc(1, sizeof *fx);
    if (!fx) return -1;
    strcpy(fx->dir, "/tmp/qkv-st-XXXXXX");
    if (!mkdtemp(fx->dir)) {
        free(fx);
        return -1;
    }
    snprintf(fx->path, sizeof fx->path, "%s/t.safetensors", fx->dir);
    *state = fx;
    return 0;
}

static void remove_tree(const char *dir)
{
    chmod(dir, 0700);
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char p[512];
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            struct stat sb;
            if (lstat(p, &sb) == 0 && S_ISDIR(sb.st_mode)) remove_tree(p);
            else unlink(p);
        }
        closedir(d);
    }
    rmdir(dir);
}

static int teardown(void **state)
{
    fixture *fx = *state;
    remove_tree(fx->dir);
    free(fx);
    return 0;
}

static int count_entries(const char *dir)
{
    int n = 0;
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    closedir(d);
    return n;
}

static unsigned char *read_file(const char *path, size_t *len)
{
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)n + 1);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, (size_t)n, fp), (size_t)n);
    fclose(fp);
    *len = (size_t)n;
    return b;
}

static uint64_t le64(const unsigned char *p)
{
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | p[i];
    return n;
}

/* An image: the 8-byte length of header, header, then data_len bytes 0, 1, 2, ... */
static unsigned char *image(const char *header, size_t header_len, size_t data_len, size_t *len)
{
    *len = 8 + header_len + data_len;
    unsigned char *b = malloc(*len + 1);
    assert_non_null(b);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)header_len >> (8 * i));
    memcpy(b + 8, header, header_len);
    for (size_t i = 0; i < data_len; i++) b[8 + header_len + i] = (unsigned char)i;
    return b;
}

static void assert_empty(const qkv_tensor_file *f)
{
    assert_null(f->tensors);
    assert_int_equal(f->count, 0);
    assert_null(f->metadata_json);
    assert_null(f->buffer);
}

static void assert_msg_has(const qkv_error *err, const char *want)
{
    if (!strstr(err->msg, want)) fail_msg("error \"%s\" does not mention \"%s\"", err->msg, want);
}

/* ---------------------------------------------------------------------------------------
 * Round trips
 * ------------------------------------------------------------------------------------- */

static const float W[6] = {1.5f, -2.25f, 3.0f, 0.0f, -0.0f, 1e-30f};
static const int32_t IDS[5] = {0, -1, 7, 2147483647, -2147483647 - 1};
static const int64_t STEPS[4] = {1, -2, 9007199254740993LL, INT64_MIN};
static const double X64[3] = {3.141592653589793, -1e300, 5e-324};
static const float SCALAR = 42.5f;

/* Mixed dtypes in an order whose natural layout would misalign the 8-byte ones. */
static const qkv_tensor_ref REFS[] = {
    {"W", QKV_F32, 2, {2, 3}, W},
    {"ids", QKV_I32, 1, {5}, IDS},
    {"steps", QKV_I64, 2, {2, 2}, STEPS},
    {"x64", QKV_F64, 1, {3}, X64},
    {"scalar", QKV_F32, 0, {0}, &SCALAR},
    {"empty", QKV_F32, 2, {0, 5}, NULL},
    {"empty_i64", QKV_I64, 1, {0}, NULL},
};
#define N_REFS (int)(sizeof REFS / sizeof REFS[0])

static const char *const META[] = {
    "step", "42",
    "note", "quote \" backslash \\ newline \n tab \t unicode \xc3\xa9\xe2\x82\xac",
};


static void test_round_trip(void **state)
{
    fixture *fx = *state;
    qkv_error err = {0};
    assert_int_equal(qkv_tensor_file_save(fx->path, REFS, N_REFS, META, 2, &err), QKV_OK);

    qkv_tensor_file f;
    assert_int_equal(qkv_tensor_file_load(&f, fx->path, &err), QKV_OK);
    assert_int_equal(f.count, N_REFS);
    for (int i = 0; i < N_REFS; i++) {
        const qkv_tensor *t = &f.tensors[i];
        const qkv_tensor_ref *r = &REFS[i];
        assert_string_equal(t->name, r->name); /* file order = the order given */
        assert_ptr_equal(qkv_tensor_file_get(&f, r->name), t);
        assert_int_equal(t->dtype, r->dtype);
        assert_int_equal(t->ndim, r->ndim);
        int64_t numel = 1;
        for (int d = 0; d < r->ndim; d++) {
            assert_int_equal(t->shape[d], r->shape[d]);
            numel *= r->shape[d];
        }
        assert_int_equal(t->numel, numel);
        assert_non_null(t->data);
        assert_int_equal((uintptr_t)t->data % qkv_dtype_size(t->dtype), 0);
        if (numel) assert_memory_equal(t->data, r->data, (size_t)numel * qkv_dtype_size(r->dtype));
    }
    assert_int_equal(*(const float *)qkv_tensor_file_get(&f, "scalar")->data, 42.5f);
    assert_null(qkv_tensor_file_get(&f, "missing"));

    assert_string_equal(qkv_tensor_file_meta(&f, "step"), "42");
    assert_string_equal(qkv_tensor_file_meta(&f, "note"), META[3]);
    assert_null(qkv_tensor_file_meta(&f, "absent"));
    cJSON *m = cJSON_Parse(f.metadata_json);
    assert_non_null(m);
    assert_int_equal(cJSON_GetArraySize(m), 2);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(m, "note")->valuestring, META[3]);
    cJSON_Delete(m);

    qkv_tensor_file_free(&f);
    assert_empty(&f);
    qkv_tensor_file_free(&f); /* twice is harmless */
    assert_int_equal(count_entries(fx->dir), 1); /* no temporary file left behind */
}

/* The layout the reference reader demands: a header padded to 8 bytes, and tensors that
 * cover the data section exactly, each at an offset aligned for its dtype. */
static void test_file_layout(void **state)
{
    fixture *fx = *state;
    qkv_error err = {0};
    assert_int_equal(qkv_tensor_file_save(fx->path, REFS, N_REFS, NULL, 0, &err), QKV_OK);
    size_t len;
    unsigned char *b = read_file(fx->path, &len);
    uint64_t n = le64(b);
    assert_int_equal(n % 8, 0);
    assert_true(8 + n <= len);
    cJSON *h = cJSON_ParseWithLength((const char *)b + 8, (size_t)n);
    assert_non_null(h);
    assert_null(cJSON_GetObjectItemCaseSensitive(h, "__metadata__"));

    uint64_t covered = 0, data_len = len - 8 - n;
    const cJSON *e = h->child;
    for (int i = 0; i < N_REFS; i++, e = e->next) {
        assert_string_equal(e->string, REFS[i].name);
        const cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
        uint64_t begin = (uint64_t)off->child->valuedouble;
        uint64_t end = (uint64_t)off->child->next->valuedouble;
        assert_int_equal(begin % qkv_dtype_size(REFS[i].dtype), 0);
        assert_true(end <= data_len);
        covered += end - begin;
        if (end > begin) assert_memory_equal(b + 8 + n + begin, REFS[i].data, end - begin);
    }
    assert_int_equal(covered, data_len); /* no gaps, no overlaps (the sum fits exactly) */
    cJSON_Delete(h);
    free(b);
}

static void test_empty_file_and_overwrite(void **state)
{
    fixture *fx = *state;
    qkv_error err = {0};
    assert_int_equal(qkv_tensor_file_save(fx->path, REFS, N_REFS, META, 2, &err), QKV_OK);
    assert_int_equal(qkv_tensor_file_save(fx->path, NULL, 0, NULL, 0, &err), QKV_OK);
    size_t len;
    unsigned char *b = read_file(fx->path, &len);
    assert_int_equal(len, 16); /* 8 + "{}" padded to 8 */
    assert_memory_equal(b + 8, "{}      ", 8);
    free(b);
    qkv_tensor_file f;
    assert_int_equal(qkv_tensor_file_load(&f, fx->path, &err), QKV_OK);
    assert_int_equal(f.count, 0);
    assert_null(f.metadata_json);
    assert_null(qkv_tensor_file_meta(&f, "step"));
    assert_null(qkv_tensor_file_get(&f, "W"));
    qkv_tensor_file_free(&f);
    assert_int_equal(count_entries(fx->dir), 1);
}

/* Dimensions past 1e15 must be written as exact integers, not in a double's exponent form. */
static void test_big_dimensions_exact(void **state)
{
    fixture *fx = *state;
    const int64_t big = 9007199254740992LL; /* 2^53, the largest a reader must accept */
    qkv_tensor_ref t = {"wide", QKV_F64, 3, {0, big, 1000000000000001LL}, NULL};
    qkv_error err = {0};
    assert_int_equal(qkv_tensor_file_save(fx->path, &t, 1, NULL, 0, &err), QKV_OK);
    size_t len;
    unsigned char *b = read_file(fx->path, &len);
    b[len] = '\0';
    assert_non_null(strstr((const char *)b + 8, "[0,9007199254740992,1000000000000001]"));
    free(b);
    qkv_tensor_file f;
    assert_int_equal(qkv_tensor_file_load(&f, fx->path, &err), QKV_OK);
    assert_int_equal(f.tensors[0].shape[1], big);
    assert_int_equal(f.tensors[0].shape[2], 1000000000000001LL);
    assert_int_equal(f.tensors[0].numel, 0);
    qkv_tensor_file_free(&f);
}

/* Offsets that are not multiples of the dtype size, a gap, trailing padding, and an image
 * at an odd address: the data must still come back aligned and exact. */
static void test_parse_realigns_and_allows_gaps(void **state)
{
    (void)state;
    const char *h = "{\"i\": {\"dtype\": \"I32\", \"shape\": [1], \"data_offsets\": [0, 4]},"
                    " \"d\": {\"dtype\": \"F64\", \"shape\": [], \"data_offsets\": [4, 12]},"
                    " \"g\": {\"dtype\": \"F32\", \"shape\": [1, 1], \"data_offsets\": [16, 20]},"
                    " \"e\": {\"dtype\": \"I64\", \"shape\": [3, 0], \"data_offsets\": [13, 13],"
                    " \"extra\": [1, {}]}}  \n ";
    size_t len;
    unsigned char *b = image(h, strlen(h), 20, &len);
    unsigned char *odd = malloc(len + 1);
    assert_non_null(odd);
    memcpy(odd + 1, b, len);
    const double d = -0.1;
    const float g = 7.75f;
    const int32_t i = 123456;
    unsigned char *data = odd + 1 + 8 + strlen(h);
    memcpy(data, &i, 4);
    memcpy(data + 4, &d, 8);
    memcpy(data + 16, &g, 4);

    qkv_tensor_file f;
    qkv_error err = {0};
    assert_int_equal(qkv_tensor_file_parse(&f, odd + 1, len, "odd.safetensors", &err), QKV_OK);
    const qkv_tensor *td = qkv_tensor_file_get(&f, "d");
    assert_non_null(td);
    assert_int_equal((uintptr_t)td->data % 8, 0);
    assert_int_equal(td->ndim, 0);
    assert_int_equal(td->numel, 1);
    assert_true(*(const double *)td->data == d);
    assert_int_equal(*(const int32_t *)qkv_tensor_file_get(&f, "i")->data, i);
    assert_true(*(const float *)qkv_tensor_file_get(&f, "g")->data == g);
    const qkv_tensor *te = qkv_tensor_file_get(&f, "e");
    assert_int_equal(te->numel, 0);
    assert_int_equal(te->shape[0], 3);
    qkv_tensor_file_free(&f);
    free(odd);
    free(b);
}

/* ---------------------------------------------------------------------------------------
 * Hostile headers
 * ------------------------------------------------------------------------------------- */

typedef struct {
    const char *header;
    size_t data_len;
    const char *want; /* in the message, besides the file name */
    const char *want2;
} bad_case;

/* One tensor entry, and one with the usual fields spelled out. */
#define E(name, body) "{\"" name "\": {" body "}}"
#define T(name, dtype, shape, offsets)                                                     \
    E(name, "\"dtype\": " dtype ", \"shape\": " shape ", \"data_offsets\": " offsets)
#define F32_1 "\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]"

static const bad_case BAD[] = {
    {"", 0, "not valid JSON", NULL},
    {"{\"a\": ", 0, "not valid JSON", NULL},
    {"[1, 2]", 0, "not a JSON object", NULL},
    {"{} x", 0, "unexpected text", NULL},
    {"{\"w_num\": 5}", 0, "w_num", "not a JSON object"},
    {E("w_nodtype", "\"shape\": [1], \"data_offsets\": [0, 4]"), 4, "w_nodtype", "dtype"},
    {T("w_dtnum", "3", "[1]", "[0, 4]"), 4, "w_dtnum", "dtype"},
    {T("w_f8", "\"F8_E4M3\"", "[4]", "[0, 4]"), 4, "w_f8", "F8_E4M3"},
    /* half precision is read (as F32), its size checked as stored: 2 bytes an element */
    {T("w_half", "\"F16\"", "[3]", "[0, 4]"), 4, "w_half", "float16 elements need 6"},
    {T("w_bf16", "\"BF16\"", "[1]", "[0, 4]"), 4, "w_bf16", "bfloat16 elements need 2"},
    {E("w_noshape", "\"dtype\": \"F32\", \"data_offsets\": [0, 4]"), 4, "w_noshape", "shape"},
    {T("w_shape4", "\"F32\"", "4", "[0, 16]"), 16, "w_shape4", "shape"},
    {T("w_neg", "\"F32\"", "[-1]", "[0, 4]"), 4, "w_neg", "shape[0]"},
    {T("w_frac", "\"F32\"", "[1, 2.5]", "[0, 4]"), 4, "w_frac", "shape[1]"},
    {T("w_strdim", "\"F32\"", "[\"2\"]", "[0, 8]"), 8, "w_strdim", "shape[0]"},
    {T("w_hugedim", "\"F32\"", "[1e20]", "[0, 8]"), 8, "w_hugedim", "shape[0]"},
    {T("w_9d", "\"F32\"", "[1,1,1,1,1,1,1,1,1]", "[0, 4]"), 4, "w_9d", "QKV_MAX_DIMS"},
    {T("w_big", "\"F32\"", "[4294967296, 4294967296, 4294967296]", "[0, 4]"), 4, "w_big",
     "overflow"},
    {T("w_big2", "\"F64\"", "[2147483648, 2147483648]", "[0, 4]"), 4, "w_big2", "overflow"},
    {E("w_nooff", "\"dtype\": \"F32\", \"shape\": [1]"), 4, "w_nooff", "data_offsets"},
    {T("w_off1", "\"F32\"", "[1]", "[4]"), 4, "w_off1", "data_offsets"},
    {T("w_offfrac", "\"F32\"", "[1]", "[0, 4.5]"), 8, "w_offfrac", "data_offsets"},
    {T("w_offneg", "\"F32\"", "[1]", "[-4, 0]"), 4, "w_offneg", "data_offsets"},
    {T("w_offbig", "\"F32\"", "[1]", "[0, 1e300]"), 4, "w_offbig", "data_offsets"},
    {T("w_back", "\"F32\"", "[1]", "[8, 4]"), 8, "w_back", "before"},
    {T("w_past", "\"F32\"", "[4]", "[0, 16]"), 8, "w_past", "past the data section"},
    {T("w_size", "\"F32\"", "[3]", "[0, 8]"), 12, "w_size", "need 12"},
    {"{\"w_a\": {" F32_1 "}, \"w_ov\": {\"dtype\": \"F32\", \"shape\": [2], "
     "\"data_offsets\": [2, 10]}}", 12, "w_ov", "overlap tensor 'w_a'"},
    {"{\"w_dup\": {" F32_1 "}, \"w_dup\": {\"dtype\": \"F32\", \"shape\": [1], "
     "\"data_offsets\": [4, 8]}}", 8, "w_dup", "twice"},
    {"{\"__metadata__\": {\"k_num\": 1}}", 0, "k_num", "not a string"},
    {"{\"__metadata__\": \"x\"}", 0, "__metadata__", "not a JSON object"},
    {"{\"__metadata__\": {}, \"__metadata__\": {}}", 0, "__metadata__", "twice"},
    {"{\"__metadata__\": {\"k_dup\": \"1\", \"k_dup\": \"2\"}}", 0, "k_dup", "twice"},
    /* a control character in a name is not echoed to the terminal */
    {T("w_\\u001b[2Jesc", "\"U16\"", "[2]", "[0, 4]"), 4, "'w_?[2Jesc'", "U16"},
    {"{\"w_\xff\": {" F32_1 "}}", 4, "UTF-8", NULL},
    {"{\"w_\xc0\xaf\": {" F32_1 "}}", 4, "UTF-8", NULL},         /* overlong '/' */
    {"{\"w_\xed\xa0\x80\": {" F32_1 "}}", 4, "UTF-8", NULL},     /* a surrogate */
};

static void check_bad(const unsigned char *b, size_t len, const char *what, const char *want,
                      const char *want2)
{
    qkv_tensor_file f;
    memset(&f, 0xAB, sizeof f); /* whatever was there, a failure must leave it empty */
    qkv_error err = {0};
    qkv_status st = qkv_tensor_file_parse(&f, b, len, "mem.safetensors", &err);
    if (st != QKV_ERR_FORMAT)
        fail_msg("case %s: status %s, want malformed input (%s)", what, qkv_status_name(st),
                 err.msg);
    assert_int_equal(err.code, QKV_ERR_FORMAT);
    assert_msg_has(&err, "mem.safetensors");
    assert_msg_has(&err, want);
    if (want2) assert_msg_has(&err, want2);
    assert_empty(&f);
    qkv_tensor_file_free(&f);
}

static void test_hostile_headers(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        size_t len;
        unsigned char *b = image(BAD[i].header, strlen(BAD[i].header), BAD[i].data_len, &len);
        check_bad(b, len, BAD[i].header, BAD[i].want, BAD[i].want2);
        free(b);
    }
}

static void test_hostile_lengths(void **state)
{
    (void)state;
    size_t len;
    unsigned char *b = image("{}", 2, 0, &len);
    check_bad(b, 5, "5 bytes", "too short", NULL);
    check_bad(b, 0, "0 bytes", "too short", NULL);
    b[0] = 100; /* header length past the end */
    check_bad(b, len, "long header", "past the end", NULL);
    memset(b, 0xFF, 8); /* 2^64 - 1 */
    check_bad(b, len, "absurd header", "limit", NULL);
    free(b);

    const char nul[] = "{\"w\": {}\0}";
    b = image(nul, sizeof nul - 1, 0, &len);
    check_bad(b, len, "NUL", "NUL byte", NULL);
    free(b);

    qkv_tensor_file f;
    qkv_error err = {0};
    assert_int_equal(qkv_tensor_file_parse(&f, NULL, 0, NULL, &err), QKV_ERR_FORMAT);
    assert_empty(&f);
}

/* ---------------------------------------------------------------------------------------
 * Every length and offset check on its boundary: the largest value accepted and the
 * smallest refused (a bound off by one, e.g. a header allowed to end one byte past the
 * file, fails here; AddressSanitizer alone sees it only when the extra byte is unmapped).
 * ------------------------------------------------------------------------------------- */

static void set_header_len(unsigned char *b, uint64_t n)
{
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(n >> (8 * i));
}

static void check_good(const unsigned char *b, size_t len, const char *what, int count)
{
    qkv_tensor_file f;
    qkv_error err = {0};
    if (qkv_tensor_file_parse(&f, b, len, "mem.safetensors", &err) != QKV_OK)
        fail_msg("case %s: refused: %s", what, err.msg);
    assert_int_equal(f.count, count);
    qkv_tensor_file_free(&f);
}

/* One header, accepted with good_len bytes of data and refused with bad_len. */
static void check_data_boundary(const char *header, size_t good_len, size_t bad_len,
                                const char *want)
{
    size_t len;
    unsigned char *b = image(header, strlen(header), good_len, &len);
    check_good(b, len, header, 1);
    free(b);
    b = image(header, strlen(header), bad_len, &len);
    check_bad(b, len, header, want, NULL);
    free(b);
}

static void test_header_length_boundaries(void **state)
{
    (void)state;
    /* the file length: 8 bytes hold the prefix (then the empty header is what is wrong),
     * 7 do not */
    size_t len;
    unsigned char *b = image("", 0, 0, &len);
    check_bad(b, 8, "8 bytes", "not valid JSON", NULL);
    check_bad(b, 7, "7 bytes", "too short", NULL);
    free(b);

    /* the header length: up to the last byte of the file, and not one byte further. image()
     * allocates a byte past the image, set to a space, so a reader that wrongly takes it
     * reads "{} " as a valid header and this test sees the success */
    b = image("{}", 2, 0, &len);
    b[len] = ' ';
    check_good(b, len, "header ends at the end of the file", 0);
    set_header_len(b, len - 8 + 1);
    check_bad(b, len, "header one byte past the file", "past the end", NULL);
    set_header_len(b, len - 8 - 1);
    check_bad(b, len, "header one byte short", "not valid JSON", NULL); /* "{", then "}" */
    free(b);

    /* the header limit: exactly MAX_HEADER_BYTES (10^8) is not over it, so what is wrong with
     * this small file is its end; one more is over the limit, whatever the file */
    b = image("{}", 2, 0, &len);
    set_header_len(b, 100000000u);
    check_bad(b, len, "header at the limit", "past the end", NULL);
    set_header_len(b, 100000001u);
    check_bad(b, len, "header over the limit", "limit", NULL);
    free(b);
}

/* The same header bound through qkv_tensor_file_load, which reads with pread: a header one
 * byte past the end must be refused for what it is, not met as a short read. */
static void test_header_length_boundary_on_disk(void **state)
{
    fixture *fx = *state;
    size_t len;
    unsigned char *b = image("{}  ", 4, 0, &len);
    set_header_len(b, len - 8 + 1);
    FILE *fp = fopen(fx->path, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(b, 1, len, fp), len);
    assert_int_equal(fclose(fp), 0);
    qkv_tensor_file f;
    qkv_error err = {0};
    assert_int_equal(qkv_tensor_file_load(&f, fx->path, &err), QKV_ERR_FORMAT);
    assert_msg_has(&err, fx->path);
    assert_msg_has(&err, "past the end");
    assert_empty(&f);
    free(b);
}

static void test_offset_boundaries(void **state)
{
    (void)state;
    /* a tensor's end: the last byte of the data section, not one past it */
    check_data_boundary(T("w", "\"F32\"", "[1]", "[0, 4]"), 4, 3, "past the data section");
    check_data_boundary(T("w", "\"I64\"", "[2]", "[8, 24]"), 24, 23, "past the data section");
    /* an empty tensor may sit at the very end, not past it */
    check_data_boundary(T("w", "\"F32\"", "[0]", "[4, 4]"), 4, 3, "past the data section");
    /* the bytes a tensor holds: exactly its elements', not one more or less */
    size_t len;
    unsigned char *b;
    const char *more = T("w", "\"F32\"", "[2]", "[0, 9]");
    const char *less = T("w", "\"F32\"", "[2]", "[0, 7]");
    b = image(more, strlen(more), 9, &len);
    check_bad(b, len, more, "hold 9 bytes", "need 8");
    free(b);
    b = image(less, strlen(less), 9, &len);
    check_bad(b, len, less, "hold 7 bytes", "need 8");
    free(b);
    /* begin == end is an empty span, end one before begin is backwards */
    const char *back = T("w", "\"F32\"", "[0]", "[4, 3]");
    b = image(back, strlen(back), 4, &len);
    check_bad(b, len, back, "before", NULL);
    free(b);

    /* two tensors: touching is allowed, sharing one byte is not */
    const char *touch = "{\"a\": {" F32_1 "}, \"b\": {\"dtype\": \"F32\", \"shape\": [1], "
                        "\"data_offsets\": [4, 8]}}";
    const char *share = "{\"a\": {" F32_1 "}, \"b\": {\"dtype\": \"F32\", \"shape\": [1], "
                        "\"data_offsets\": [3, 7]}}";
    b = image(touch, strlen(touch), 8, &len);
    check_good(b, len, touch, 2);
    free(b);
    b = image(share, strlen(share), 8, &len);
    check_bad(b, len, share, "overlap tensor 'a'", NULL);
    free(b);
}

static void test_shape_boundaries(void **state)
{
    (void)state;
    size_t len;
    unsigned char *b;
    /* QKV_MAX_DIMS dimensions are read, one more is refused (w_9d above) */
    const char *d8 = T("w", "\"F32\"", "[1, 1, 1, 1, 1, 1, 1, 2]", "[0, 8]");
    b = image(d8, strlen(d8), 8, &len);
    check_good(b, len, d8, 1);
    free(b);
    /* a dimension of 2^53 (the largest integer a JSON number holds exactly) is read; 2^53 + 2
     * (the next double) is refused */
    const char *big = T("w", "\"F32\"", "[9007199254740992, 0]", "[0, 0]");
    const char *past = T("w", "\"F32\"", "[9007199254740994, 0]", "[0, 0]");
    b = image(big, strlen(big), 0, &len);
    check_good(b, len, big, 1);
    free(b);
    b = image(past, strlen(past), 0, &len);
    check_bad(b, len, past, "shape[0]", NULL);
    free(b);
    /* the element count times the dtype size: (2^30 - 1)(2^30 + 1) F64s = 8 (2^60 - 1) bytes
     * fit int64 (the offsets are then what is wrong), 2^30 * 2^30 F64s = 2^63 bytes do not */
    const char *fits = T("w", "\"F64\"", "[1073741823, 1073741825]", "[0, 8]");
    const char *over = T("w", "\"F64\"", "[1073741824, 1073741824]", "[0, 8]");
    b = image(fits, strlen(fits), 8, &len);
    check_bad(b, len, fits, "need 9223372036854775800", NULL);
    free(b);
    b = image(over, strlen(over), 8, &len);
    check_bad(b, len, over, "overflow", NULL);
    free(b);
}

/* ---------------------------------------------------------------------------------------
 * Loading from disk
 * ------------------------------------------------------------------------------------- */

static void test_load_errors(void **state)
{
    fixture *fx = *state;
    qkv_tensor_file f;
    qkv_error err = {0};
    assert_int_equal(qkv_tensor_file_load(&f, fx->path, &err), QKV_ERR_IO);
    assert_msg_has(&err, fx->path);
    assert_empty(&f);
    assert_int_equal(qkv_tensor_file_load(&f, fx->dir, &err), QKV_ERR_IO);
    assert_msg_has(&err, fx->dir);
    assert_empty(&f);

    /* A truncated file: the last tensor in the data section now runs past its end. */
    assert_int_equal(qkv_tensor_file_save(fx->path, REFS, 4, NULL, 0, &err), QKV_OK);
    struct stat sb;
    assert_int_equal(stat(fx->path, &sb), 0);
    assert_int_equal(truncate(fx->path, sb.st_size - 1), 0);
    assert_int_equal(qkv_tensor_file_load(&f, fx->path, &err), QKV_ERR_FORMAT);
    assert_msg_has(&err, fx->path);
    assert_msg_has(&err, "tensor 'ids'"); /* the 4-byte dtypes are written last */
    assert_msg_has(&err, "past the data section");
    assert_empty(&f);
    assert_int_equal(truncate(fx->path, 7), 0);
    assert_int_equal(qkv_tensor_file_load(&f, fx->path, &err), QKV_ERR_FORMAT);
    assert_msg_has(&err, "too short");
}

/* ---------------------------------------------------------------------------------------
 * Saving: bad arguments and failures keep the old file
 * ------------------------------------------------------------------------------------- */

static void expect_save_arg_error(const char *path, const qkv_tensor_ref *t, int count,
                                  const char *const *meta, int n_meta, const char *want)
{
    qkv_error err = {0};
    qkv_status st = qkv_tensor_file_save(path, t, count, meta, n_meta, &err);
    if (st != QKV_ERR_ARG)
        fail_msg("want invalid argument (%s), got %s: %s", want, qkv_status_name(st), err.msg);
    assert_msg_has(&err, path);
    assert_msg_has(&err, want);
    struct stat sb;
    assert_int_equal(stat(path, &sb), -1); /* nothing was written */
}

static void test_save_bad_arguments(void **state)
{
    fixture *fx = *state;
    const char *p = fx->path;
    float x[2] = {1, 2};
    qkv_tensor_ref t[2] = {{"a", QKV_F32, 1, {2}, x}, {"b", QKV_F32, 1, {2}, x}};

    t[1].data = NULL;
    expect_save_arg_error(p, t, 2, NULL, 0, "'b': NULL data");
    t[1].data = x;
    t[1].ndim = QKV_MAX_DIMS + 1;
    expect_save_arg_error(p, t, 2, NULL, 0, "'b': ndim 9");
    t[1].ndim = -1;
    expect_save_arg_error(p, t, 2, NULL, 0, "'b': ndim -1");
    t[1].ndim = 2;
    t[1].shape[1] = -3;
    expect_save_arg_error(p, t, 2, NULL, 0, "'b': shape[1] = -3");
    t[1].ndim = 1;
    t[1].dtype = (qkv_dtype)7;
    expect_save_arg_error(p, t, 2, NULL, 0, "'b': unknown dtype");
    t[1].dtype = QKV_F32;
    t[1].name = "a";
    expect_save_arg_error(p, t, 2, NULL, 0, "'a' given twice");
    t[1].name = "__metadata__";
    expect_save_arg_error(p, t, 2, NULL, 0, "reserved");
    t[1].name = NULL;
    expect_save_arg_error(p, t, 2, NULL, 0, "tensor 1");
    t[1].name = "b\xff";
    expect_save_arg_error(p, t, 2, NULL, 0, "UTF-8");
    t[1].name = "b";
    expect_save_arg_error(p, t, -1, NULL, 0, "count -1");
    expect_save_arg_error(p, NULL, 2, NULL, 0, "count 2");
    const char *m1[] = {"k", NULL};
    expect_save_arg_error(p, t, 2, m1, 1, "metadata value 0");
    const char *m2[] = {"k", "1", "k", "2"};
    expect_save_arg_error(p, t, 2, m2, 2, "metadata key 'k' given twice");
    expect_save_arg_error(p, t, 2, NULL, 1, "n_meta 1");

    qkv_error err = {0};
    assert_int_equal(qkv_tensor_file_save(NULL, t, 2, NULL, 0, &err), QKV_ERR_ARG);
    assert_int_equal(count_entries(fx->dir), 0);
}

static void assert_old_file_intact(const fixture *fx)
{
    qkv_tensor_file f;
    qkv_error err = {0};
    assert_int_equal(qkv_tensor_file_load(&f, fx->path, &err), QKV_OK);
    assert_int_equal(f.count, 1);
    assert_string_equal(f.tensors[0].name, "W");
    assert_memory_equal(f.tensors[0].data, W, sizeof W);
    qkv_tensor_file_free(&f);
}

static void test_save_over_directory(void **state)
{
    fixture *fx = *state;
    char sub[256], inner[300];
    snprintf(sub, sizeof sub, "%s/sub.safetensors", fx->dir);
    snprintf(inner, sizeof inner, "%s/keep", sub);
    assert_int_equal(mkdir(sub, 0700), 0);
    FILE *fp = fopen(inner, "w");
    assert_non_null(fp);
    fclose(fp);

    qkv_error err = {0};
    assert_int_equal(qkv_tensor_file_save(sub, REFS, 1, NULL, 0, &err), QKV_ERR_IO);
    assert_msg_has(&err, sub);
    assert_msg_has(&err, "rename");
    struct stat sb;
    assert_int_equal(stat(inner, &sb), 0);
    assert_int_equal(count_entries(fx->dir), 1); /* sub only: the temporary file is gone */
    assert_int_equal(count_entries(sub), 1);
}

/* Runs fn in a child process (so it may drop privileges or lower limits) and returns its
 * exit status: 0 when fn's checks passed. */
static int in_child(int (*fn)(const fixture *), const fixture *fx)
{
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) _exit(fn(fx));
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
}

static int save_fails_with_io(const fixture *fx, const char *why)
{
    static const float big[1 << 15] = {0};
    qkv_tensor_ref t = {"W", QKV_F32, 1, {1 << 15}, big};
    qkv_error err = {0};
    qkv_status st = qkv_tensor_file_save(fx->path, &t, 1, NULL, 0, &err);
    if (st != QKV_ERR_IO || !strstr(err.msg, fx->path) || !strstr(err.msg, why)) {
        fprintf(stderr, "save: %s: %s (want an I/O error with \"%s\")\n", qkv_status_name(st),
                err.msg, why);
        return 1;
    }
    return 0;
}

static int save_as_nobody(const fixture *fx)
{
    if (geteuid() == 0) {
        /* root writes anywhere: become nobody so the permission bits apply */
        struct passwd *pw = getpwnam("nobody");
        uid_t uid = pw ? pw->pw_uid : 65534;
        gid_t gid = pw ? pw->pw_gid : 65534;
        if (setgid(gid) != 0 || setuid(uid) != 0) return 2;
    }
    return save_fails_with_io(fx, "Permission denied");
}

static int save_with_small_file_limit(const fixture *fx)
{
    signal(SIGXFSZ, SIG_IGN); /* a write past the limit then fails with EFBIG */
    struct rlimit rl = {16384, 16384};
    if (setrlimit(RLIMIT_FSIZE, &rl) != 0) return 2;
    return save_fails_with_io(fx, "too large");
}

/* A FIFO (or a device) where the file goes is refused, not replaced by the rename. */
static void test_save_over_fifo(void **state)
{
    fixture *fx = *state;
    assert_int_equal(mkfifo(fx->path, 0600), 0);
    qkv_error err = {0};
    assert_int_equal(qkv_tensor_file_save(fx->path, REFS, 1, NULL, 0, &err), QKV_ERR_IO);
    assert_msg_has(&err, fx->path);
    assert_msg_has(&err, "is a device, FIFO or socket");
    struct stat sb;
    assert_int_equal(lstat(fx->path, &sb), 0);
    assert_true(S_ISFIFO(sb.st_mode));
    const void *chunk[1] = {"x"};
    const size_t len[1] = {1};
    assert_int_equal(qkv_atomic_write(fx->path, chunk, len, 1, &err), QKV_ERR_IO);
    assert_msg_has(&err, "is a device, FIFO or socket");
    assert_int_equal(lstat(fx->path, &sb), 0);
    assert_true(S_ISFIFO(sb.st_mode));
    unlink(fx->path);
}

static void test_save_into_unwritable_directory(void **state)
{
    fixture *fx = *state;
    qkv_error err = {0};
    assert_int_equal(qkv_tensor_file_save(fx->path, REFS, 1, NULL, 0, &err), QKV_OK);
    assert_int_equal(chmod(fx->dir, 0555), 0);
    assert_int_equal(in_child(save_as_nobody, fx), 0);
    assert_int_equal(chmod(fx->dir, 0700), 0);
    assert_old_file_intact(fx);
    assert_int_equal(count_entries(fx->dir), 1);
}

static void test_save_write_failure(void **state)
{
    fixture *fx = *state;
    qkv_error err = {0};
    assert_int_equal(qkv_tensor_file_save(fx->path, REFS, 1, NULL, 0, &err), QKV_OK);
    assert_int_equal(in_child(save_with_small_file_limit, fx), 0);
    assert_old_file_intact(fx);
    assert_int_equal(count_entries(fx->dir), 1);
}

static void test_free_zeroed(void **state)
{
    (void)state;
    qkv_tensor_file f = {0};
    qkv_tensor_file_free(&f);
    qkv_tensor_file_free(NULL);
    assert_null(qkv_tensor_file_get(&f, "x"));
    assert_null(qkv_tensor_file_meta(&f, "x"));
}

/* ---------------------------------------------------------------------------------------
 * Python reads what qkv writes
 * ------------------------------------------------------------------------------------- */

/* The safetensors convention as the reference reader enforces it, in numpy: offsets sorted
 * must tile the data section exactly, and every tensor must decode to the values written. */
static const char *PY_CHECK =
    "import json, struct, sys, numpy as np\n"
    "b = open(sys.argv[1], 'rb').read()\n"
    "n = struct.unpack('<Q', b[:8])[0]\n"
    "h = json.loads(b[8:8 + n].decode('utf-8'))\n"
    "meta = h.pop('__metadata__')\n"
    "assert meta == {'step': '42', 'note': 'quote \" backslash \\\\ newline \\n tab \\t unicode "
    "\\u00e9\\u20ac'}, meta\n"
    "data = b[8 + n:]\n"
    "assert (8 + n) % 8 == 0\n"
    "spans = sorted(tuple(v['data_offsets']) for v in h.values())\n"
    "at = 0\n"
    "for s, e in spans:\n"
    "    assert s == at, (s, at)\n"
    "    at = e\n"
    "assert at == len(data)\n"
    "dt = {'F32': '<f4', 'I32': '<i4', 'I64': '<i8', 'F64': '<f8'}\n"
    "def t(k):\n"
    "    v = h[k]; s, e = v['data_offsets']\n"
    "    return np.frombuffer(data[s:e], dtype=dt[v['dtype']]).reshape(v['shape'])\n"
    "assert list(h) == ['W', 'ids', 'steps', 'x64', 'scalar', 'empty', 'empty_i64']\n"
    "assert t('W').shape == (2, 3) and t('W')[0, 1] == -2.25\n"
    "assert t('W')[1, 2] == np.float32(1e-30)\n"
    "assert t('ids').tolist() == [0, -1, 7, 2**31 - 1, -2**31]\n"
    "assert t('steps').tolist() == [[1, -2], [2**53 + 1, -2**63]]\n"
    "assert t('x64').tolist() == [3.141592653589793, -1e300, 5e-324]\n"
    "assert t('scalar').shape == () and t('scalar') == 42.5\n"
    "assert t('empty').shape == (0, 5) and t('empty_i64').shape == (0,)\n";

static void test_python_reads_it(void **state)
{
    fixture *fx = *state;
    const char *py = "/usr/bin/python3";
    if (access(py, X_OK) != 0) skip();
    qkv_error err = {0};
    assert_int_equal(qkv_tensor_file_save(fx->path, REFS, N_REFS, META, 2, &err), QKV_OK);
    char script[128];
    snprintf(script, sizeof script, "%s/check.py", fx->dir);
    FILE *fp = fopen(script, "w");
    assert_non_null(fp);
    fputs(PY_CHECK, fp);
    fclose(fp);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s -c 'import numpy' 2>/dev/null", py);
    if (system(cmd) != 0) skip(); /* no numpy: nothing to check with */
    snprintf(cmd, sizeof cmd, "%s %s %s", py, script, fx->path);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_file_layout, setup, teardown),
        cmocka_unit_test_setup_teardown(test_empty_file_and_overwrite, setup, teardown),
        cmocka_unit_test_setup_teardown(test_big_dimensions_exact, setup, teardown),
        cmocka_unit_test(test_parse_realigns_and_allows_gaps),
        cmocka_unit_test(test_hostile_headers),
        cmocka_unit_test(test_hostile_lengths),
        cmocka_unit_test(test_header_length_boundaries),
        cmocka_unit_test_setup_teardown(test_header_length_boundary_on_disk, setup, teardown),
        cmocka_unit_test(test_offset_boundaries),
        cmocka_unit_test(test_shape_boundaries),
        cmocka_unit_test_setup_teardown(test_load_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_save_bad_arguments, setup, teardown),
        cmocka_unit_test_setup_teardown(test_save_over_directory, setup, teardown),
        cmocka_unit_test_setup_teardown(test_save_over_fifo, setup, teardown),
        cmocka_unit_test_setup_teardown(test_save_into_unwritable_directory, setup, teardown),
        cmocka_unit_test_setup_teardown(test_save_write_failure, setup, teardown),
        cmocka_unit_test(test_free_zeroed),
        cmocka_unit_test_setup_teardown(test_python_reads_it, setup, teardown),
    };
    return cmocka_run_group_tests_name("safetensors", tests, NULL, NULL);
}
