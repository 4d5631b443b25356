/* SPDX-License-Identifier: MIT */
/* qkv_tensor_file_parse_npz on raw bytes, two ways. An input that starts with "PK" is a whole
 * .npz archive. Any other input is one .npy file: the harness stores it as a.npy, and as
 * special:model.yml.npy (Marian's configuration, read as metadata), in a zip with correct
 * CRCs, so that mutations reach the .npy header parser. Either way the input must be refused
 * with a message naming the file, or give tensors whose every byte lies in the owned buffer
 * with as many elements as their shapes say. */
#include "fuzz_common.h"

#define NAME "fuzz.npz"


int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    qkv_tensor_file f;
    qkv_error err = {0};
    qkv_status st;
    if (size >= 2 && data[0] == 'P' && data[1] == 'K') {
        st = qkv_tensor_file_parse_npz(&f, data, size, NAME, &err);
    } else {
        const char *names[] = {"a.npy", "special:model.yml.npy"};
        const unsigned char *bytes[] = {data, data};
        const size_t lens[] = {size, size};
        unsigned char *zip = malloc(2 * size + 1024);
        if (!zip) return 0;
        const int special = size && (data[size - 1] & 1); /* a.npy alone, or both */
        const size_t n = fuzz_stored_zip(zip, 1 + special, names, bytes, lens);
        st = qkv_tensor_file_parse_npz(&f, zip, n, NAME, &err);
        free(zip);
    }
    if (st != QKV_OK) {
        FUZZ_CHECK(st == QKV_ERR_FORMAT || st == QKV_ERR_NOMEM);
        FUZZ_CHECK(err.code == st && strstr(err.msg, NAME) == err.msg);
        FUZZ_CHECK(f.count == 0 && !f.tensors && !f.buffer && !f.metadata_json);
        return 0;
    }
    unsigned sum = 0;
    for (int i = 0; i < f.count; i++) {
        const qkv_tensor *t = &f.tensors[i];
        FUZZ_CHECK(t->ndim >= 0 && t->ndim <= QKV_MAX_DIMS);
        int64_t numel = 1;
        for (int d = 0; d < t->ndim; d++) numel *= t->shape[d];
        FUZZ_CHECK(numel == t->numel && (uintptr_t)t->data % 64 == 0);
        const unsigned char *p = t->data;
        for (size_t b = 0; b < (size_t)t->numel * qkv_dtype_size(t->dtype); b++) sum += p[b];
        FUZZ_CHECK(qkv_tensor_file_get(&f, t->name) == t);
    }
    const char *yml = qkv_tensor_file_meta(&f, "special:model.yml");
    if (yml) sum += (unsigned)strlen(yml);
    if (f.metadata_json) FUZZ_CHECK(f.metadata_json[0] == '{');
    qkv_tensor_file_free(&f);
    return (int)(sum & 0); /* the sum makes every data byte a load ASan checks */
}
