/* SPDX-License-Identifier: MIT */
/* Weights as checkpoints store them, against what numpy and torch read from the same files
 * (tests/parity/make_weights_reference.py writes both):
 *   half       safetensors F16 and BF16 read as F32 bit for bit as numpy's astype(float32)
 *              widens float16 and torch's .float() bfloat16, for all 65536 patterns of each
 *   pytorch    qkv_tensor_file_load_pytorch of torch.save's state dicts (every storage type,
 *              views with strides and offsets, shared storages, pickle protocols 2 and 4,
 *              nn.Parameters) equal to the tensors torch saved, element for element
 *   npz        qkv_tensor_file_load_npz of numpy.savez and savez_compressed (Fortran order,
 *              Marian's special:model.yml as metadata)
 *   refused    the legacy format, a pickle calling os.system, a pickled nn.Module and a
 *              TorchScript archive are refused with their reason, and nothing runs
 * and bytes in memory: damaged zips, pickles and .npy headers refused with a message. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_util.h"

static const char *parity_dir(void)
{
    const char *d = getenv("QKV_PARITY_DIR");
    return d ? d : "build/parity";
}


/* got's tensors are want's, names, dtypes, shapes and bytes, and no others. */
static void same_tensors(const char *what, const qkv_tensor_file *got, const qkv_tensor_file *want)
{
    if (got->count != want->count)
        fail_msg("%s: %d tensors, the reference has %d", what, got->count, want->count);
    for (int i = 0; i < want->count; i++) {
        const qkv_tensor *w = &want->tensors[i], *g = qkv_tensor_file_get(got, w->name);
        if (!g) fail_msg("%s: no tensor '%s'", what, w->name);
        if (g->dtype != w->dtype || g->ndim != w->ndim || g->numel != w->numel)
            fail_msg("%s: '%s': dtype %d, %d dims, %lld elements; the reference: %d, %d, %lld",
                     what, w->name, g->dtype, g->ndim, (long long)g->numel, w->dtype, w->ndim,
                     (long long)w->numel);
        for (int d = 0; d < w->ndim; d++) assert_int_equal(g->shape[d], w->shape[d]);
        if (memcmp(g->data, w->data, (size_t)w->numel * qkv_dtype_size(w->dtype)))
            fail_msg("%s: '%s': the elements differ from the reference", what, w->name);
    }
}

static void load_case(const char *name, const char *ext, qkv_tensor_file *f, qkv_tensor_file *ref)
{
    char path[1024];
    qkv_error err = {0};
    snprintf(path, sizeof path, "%s/weights_%s.%s", parity_dir(), name, ext);
    qkv_status st = !strcmp(ext, "bin")   ? qkv_tensor_file_load_pytorch(f, path, &err)
                    : !strcmp(ext, "npz") ? qkv_tensor_file_load_npz(f, path, &err)
                                          : qkv_tensor_file_load(f, path, &err);
    if (st) fail_msg("%s", err.msg);
    snprintf(path, sizeof path, "weights_%s_ref", name);
    tu_reference_load(ref, path);
}

static void test_half_precision_safetensors(void **state)
{
    (void)state;
    qkv_tensor_file f, ref;
    load_case("half", "safetensors", &f, &ref);
    static const char *const names[][2] = {{"f16", "f16_bits"}, {"bf16", "bf16_bits"}};
    for (int k = 0; k < 2; k++) {
        const qkv_tensor *t = qkv_tensor_file_get(&f, names[k][0]);
        size_t n;
        const int *bits = tu_ref_i32(&ref, names[k][1], &n);
        assert_non_null(t);
        assert_int_equal(t->dtype, QKV_F32);
        assert_int_equal(t->numel, 65536);
        assert_int_equal(n, 65536);
        if (memcmp(t->data, bits, n * 4)) {
            const unsigned *g = t->data;
            for (size_t i = 0; i < n; i++)
                if (g[i] != (unsigned)bits[i])
                    fail_msg("%s: pattern %zu: qkv 0x%08x, numpy/torch 0x%08x", names[k][0], i,
                             g[i], (unsigned)bits[i]);
        }
    }
    size_t n;
    const float *f32 = tu_ref_f32(&ref, "f32", &n);
    assert_memory_equal(qkv_tensor_file_get(&f, "f32")->data, f32, n * 4);
    printf("F16 and BF16: all 65536 patterns of each read as numpy and torch widen them\n");
    qkv_tensor_file_free(&f), qkv_tensor_file_free(&ref);
}

static void check_case(const char *name, const char *ext)
{
    qkv_tensor_file f, ref;
    load_case(name, ext, &f, &ref);
    same_tensors(name, &f, &ref);
    const char *yml = qkv_tensor_file_meta(&ref, "special:model.yml");
    if (yml) assert_string_equal(qkv_tensor_file_meta(&f, "special:model.yml"), yml);
    printf("%s: %d tensors as torch/numpy saved them\n", name, f.count);
    qkv_tensor_file_free(&f), qkv_tensor_file_free(&ref);
}

static void test_pytorch_state_dicts(void **state)
{
    (void)state;
    check_case("pt_basic", "bin");
    check_case("pt_proto4", "bin");
}

static void test_npz(void **state)
{
    (void)state;
    check_case("npz", "npz");
    check_case("npz_deflate", "npz");
}

static void test_refused_checkpoints(void **state)
{
    (void)state;
    char path[2048], line[1024];
    snprintf(path, sizeof path, "%s/weights_refused.txt", parity_dir());
    FILE *list = fopen(path, "r");
    assert_non_null(list);
    int n = 0;
    while (fgets(line, sizeof line, list)) {
        char *tab = strchr(line, '\t');
        assert_non_null(tab);
        *tab = '\0', tab[strcspn(tab + 1, "\n") + 1] = '\0';
        snprintf(path, sizeof path, "%s/%s", parity_dir(), line);
        qkv_tensor_file f;
        qkv_error err = {0};
        assert_int_equal(qkv_tensor_file_load_pytorch(&f, path, &err), QKV_ERR_FORMAT);
        if (!strstr(err.msg, tab + 1) || !strstr(err.msg, line))
            fail_msg("%s: the refusal \"%s\" does not say \"%s\"", line, err.msg, tab + 1);
        assert_int_equal(f.count, 0);
        assert_null(f.tensors);
        n++;
    }
    fclose(list);
    assert_int_equal(n, 4);
}

/* A stored zip of the given entries, built in memory (CRC-32 from the library's zip reader
 * is what is checked: here it is computed the slow way, bit by bit). */
static uint32_t crc32_of(const unsigned char *p, size_t n)
{
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
    }
    return ~c;
}

static void put16(unsigned char *p, unsigned v)
{
    p[0] = (unsigned char)v, p[1] = (unsigned char)(v >> 8);
}
static void put32(unsigned char *p, uint32_t v) { put16(p, v & 0xffff), put16(p + 2, v >> 16); }

static size_t make_zip(unsigned char *out, int n, const char *const *names,
                       const unsigned char *const *data, const size_t *len)
{
    size_t at = 0, offsets[8];
    for (int i = 0; i < n; i++) {
        const size_t nl = strlen(names[i]);
        offsets[i] = at;
        memset(out + at, 0, 30);
        put32(out + at, 0x04034b50u), put32(out + at + 14, crc32_of(data[i], len[i]));
        put32(out + at + 18, (uint32_t)len[i]), put32(out + at + 22, (uint32_t)len[i]);
        put16(out + at + 26, (unsigned)nl);
        memcpy(out + at + 30, names[i], nl), memcpy(out + at + 30 + nl, data[i], len[i]);
        at += 30 + nl + len[i];
    }
    const size_t cd = at;
    for (int i = 0; i < n; i++) {
        const size_t nl = strlen(names[i]);
        memset(out + at, 0, 46);
        put32(out + at, 0x02014b50u), put32(out + at + 16, crc32_of(data[i], len[i]));
        put32(out + at + 20, (uint32_t)len[i]), put32(out + at + 24, (uint32_t)len[i]);
        put16(out + at + 28, (unsigned)nl), put32(out + at + 42, (uint32_t)offsets[i]);
        memcpy(out + at + 46, names[i], nl);
        at += 46 + nl;
    }
    memset(out + at, 0, 22);
    put32(out + at, 0x06054b50u), put16(out + at + 8, (unsigned)n),
        put16(out + at + 10, (unsigned)n);
    put32(out + at + 12, (uint32_t)(at - cd)), put32(out + at + 16, (uint32_t)cd);
    return at + 22;
}

static void expect_pickle_refused(const char *pickle, size_t len, const char *words)
{
    unsigned char zip[4096];
    const char *names[] = {"archive/data.pkl"};
    const unsigned char *data[] = {(const unsigned char *)pickle};
    const size_t n = make_zip(zip, 1, names, data, &len);
    qkv_tensor_file f;
    qkv_error err = {0};
    assert_int_equal(qkv_tensor_file_parse_pytorch(&f, zip, n, "x.bin", &err), QKV_ERR_FORMAT);
    if (!strstr(err.msg, words)) fail_msg("\"%s\" does not say \"%s\"", err.msg, words);
}

static void test_hostile_pickles(void **state)
{
    (void)state;
#define P(s) s, sizeof s - 1
    expect_pickle_refused(P("\x80\x02"
                            "cbuiltins\neval\n."),
                          "builtins.eval");
    expect_pickle_refused(P("\x80\x02(."), "does not end with one object");
    expect_pickle_refused(P("\x80\x02h\x05."), "memo get of an unset index");
    expect_pickle_refused(P("\x80\x02X\xff\xff\xff\x7f"), "passes the end");
    expect_pickle_refused(P("\x80\x02}K\x01K\x02s."), "not a name and a tensor");
    expect_pickle_refused(P("\x80\x02}X\x01\x00\x00\x00"
                            "a(X\x07\x00\x00\x00"
                            "storage"
                            "ctorch\nFloatStorage\nX\x01\x00\x00\x00"
                            "0X\x03\x00\x00\x00"
                            "cpuK\x04tQs."),
                          "not a name and a tensor");
    expect_pickle_refused(P("\x80\x02\x8a\x09\x01\x02\x03\x04\x05\x06\x07\x08\x09."),
                          "wider than 64 bits");
    expect_pickle_refused(P("\x80\x02I1\n."), "opcode 0x49");
    expect_pickle_refused(P("\x80\x02."), "does not end with one object");
    expect_pickle_refused(P("\x80\x02}"), "no STOP opcode");
#undef P
}

/* {'w': _rebuild_tensor_v2(storage '0' of 4 floats, offset, (2, 2), (2, 1), False, {})}:
 * read at offset 0; at offset 1 its last element passes the storage's end; without the
 * storage's entry, refused. */
static void test_views_checked(void **state)
{
    (void)state;
    static const unsigned char head[] = "\x80\x02}X\x01\x00\x00\x00w"
                                        "ctorch._utils\n_rebuild_tensor_v2\n"
                                        "((X\x07\x00\x00\x00storage"
                                        "ctorch\nFloatStorage\n"
                                        "X\x01\x00\x00\x00"
                                        "0X\x03\x00\x00\x00"
                                        "cpuK\x04tQK";
    static const unsigned char tail[] = "K\x02K\x02\x86K\x02K\x01\x86\x89}tRs.";
    const float data[4] = {1, 2, 3, 4};
    for (int offset = 0; offset <= 1; offset++) {
        unsigned char pkl[512];
        size_t n = sizeof head - 1;
        memcpy(pkl, head, n);
        pkl[n++] = (unsigned char)offset;
        memcpy(pkl + n, tail, sizeof tail - 1), n += sizeof tail - 1;
        const char *names[] = {"archive/data.pkl", "archive/data/0"};
        const unsigned char *bytes[] = {pkl, (const unsigned char *)data};
        const size_t lens[] = {n, sizeof data};
        unsigned char zip[4096];
        qkv_tensor_file f;
        qkv_error err = {0};
        size_t zn = make_zip(zip, 2, names, bytes, lens);
        const qkv_status st = qkv_tensor_file_parse_pytorch(&f, zip, zn, "v.bin", &err);
        if (offset == 1) {
            assert_int_equal(st, QKV_ERR_FORMAT);
            assert_non_null(strstr(err.msg, "past the end of its storage"));
            continue;
        }
        if (st) fail_msg("%s", err.msg);
        assert_int_equal(f.count, 1);
        assert_memory_equal(f.tensors[0].data, data, sizeof data);
        qkv_tensor_file_free(&f);
        zn = make_zip(zip, 1, names, bytes, lens);
        assert_int_equal(qkv_tensor_file_parse_pytorch(&f, zip, zn, "v.bin", &err), QKV_ERR_FORMAT);
        assert_non_null(strstr(err.msg, "is not in the archive"));
    }
}

static void test_damaged_archives(void **state)
{
    (void)state;
    qkv_tensor_file f;
    qkv_error err = {0};
    unsigned char zip[4096];
    const char *names[] = {"archive/data.pkl"};
    const unsigned char pkl[] = "\x80\x02}.";
    const unsigned char *data[] = {pkl};
    const size_t len = sizeof pkl - 1;
    const size_t n = make_zip(zip, 1, names, data, &len);
    assert_int_equal(qkv_tensor_file_parse_pytorch(&f, zip, n, "ok.bin", &err), QKV_OK);
    assert_int_equal(f.count, 0);
    qkv_tensor_file_free(&f);
    /* every truncation is refused, never read past */
    for (size_t k = 0; k < n; k++) {
        unsigned char *cut = malloc(k ? k : 1);
        memcpy(cut, zip, k);
        assert_int_equal(qkv_tensor_file_parse_pytorch(&f, cut, k, "cut.bin", &err),
                         QKV_ERR_FORMAT);
        free(cut);
    }
    zip[30 + strlen(names[0]) + 2] ^= 1; /* a data byte: the CRC-32 no longer matches */
    assert_int_equal(qkv_tensor_file_parse_pytorch(&f, zip, n, "crc.bin", &err), QKV_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "CRC-32"));
    assert_int_equal(qkv_tensor_file_parse_pytorch(&f, "hello", 5, "txt.bin", &err),
                     QKV_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "not a PyTorch checkpoint"));
    /* .npy headers */
    static const char *const headers[] = {
        "{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }",
        "{'descr': '<f4', 'fortran_order': False, }",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (1, }",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }",
    };
    static const char *const words[] = {"dtype '>f4'", "a .npy header", "a .npy header",
                                        "2 float32 elements need 8 bytes"};
    for (int i = 0; i < 4; i++) {
        unsigned char npy[256] = "\x93NUMPY\x01\x00";
        const size_t hl = strlen(headers[i]);
        npy[8] = (unsigned char)hl, npy[9] = 0;
        memcpy(npy + 10, headers[i], hl);
        memset(npy + 10 + hl, 0, 4); /* one float32 */
        const char *nn[] = {"x.npy"};
        const unsigned char *dd[] = {npy};
        const size_t ll = 10 + hl + 4;
        const size_t zn = make_zip(zip, 1, nn, dd, &ll);
        assert_int_equal(qkv_tensor_file_parse_npz(&f, zip, zn, "h.npz", &err), QKV_ERR_FORMAT);
        if (!strstr(err.msg, words[i])) fail_msg("\"%s\" does not say \"%s\"", err.msg, words[i]);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_half_precision_safetensors),
        cmocka_unit_test(test_pytorch_state_dicts),
        cmocka_unit_test(test_npz),
        cmocka_unit_test(test_refused_checkpoints),
        cmocka_unit_test(test_hostile_pickles),
        cmocka_unit_test(test_views_checked),
        cmocka_unit_test(test_damaged_archives),
    };
    return cmocka_run_group_tests_name("weights", tests, NULL, NULL);
}
