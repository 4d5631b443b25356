/* SPDX-License-Identifier: MIT */
/* qkv_tensor_file_parse_pytorch on raw bytes, two ways. An input that starts with "PK" is a
 * whole archive (its zip structure mutated). Any other input is a pickle: the harness puts it
 * in torch.save's layout as archive/data.pkl, beside storages archive/data/0 .. 5 of 64
 * bytes each, with correct CRCs, so that mutations reach the pickle machine rather than dying
 * at the checksum. Either way the input must be refused with a message naming the file, or
 * give tensors whose every byte lies in the owned buffer with as many elements as their
 * shapes say. Nothing the pickle names is ever called. */
#include "fuzz_common.h"

#define NAME "fuzz.bin"


int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    qkv_tensor_file f;
    qkv_error err = {0};
    qkv_status st;
    if (size >= 2 && data[0] == 'P' && data[1] == 'K') {
        st = qkv_tensor_file_parse_pytorch(&f, data, size, NAME, &err);
    } else {
        static unsigned char storage[6][64];
        for (int k = 0; k < 6; k++)
            for (int b = 0; b < 64; b++) storage[k][b] = (unsigned char)(k * 64 + b);
        const char *names[] = {"archive/data.pkl", "archive/data/0", "archive/data/1",
                               "archive/data/2",   "archive/data/3", "archive/data/4",
                               "archive/data/5"};
        const unsigned char *bytes[] = {data,       storage[0], storage[1], storage[2],
                                        storage[3], storage[4], storage[5]};
        const size_t lens[] = {size, 64, 64, 64, 64, 64, 64};
        unsigned char *zip = malloc(size + 2048);
        if (!zip) return 0;
        const size_t n = fuzz_stored_zip(zip, 7, names, bytes, lens);
        st = qkv_tensor_file_parse_pytorch(&f, zip, n, NAME, &err);
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
    qkv_tensor_file_free(&f);
    return (int)(sum & 0); /* the sum makes every data byte a load ASan checks */
}
