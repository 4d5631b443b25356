/* SPDX-License-Identifier: MIT */
/* qkv_tensor_file_parse on raw bytes: a hostile safetensors image must either be rejected
 * with a message naming the file, or give tensors whose every byte lies in the owned buffer,
 * aligned, with as many elements as the shape says and names that are unique. */
#include "fuzz_common.h"

#define NAME "fuzz.safetensors"


int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    qkv_tensor_file f;
    qkv_error err = {0};
    qkv_status st = qkv_tensor_file_parse(&f, data, size, NAME, &err);
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
    (void)qkv_tensor_file_meta(&f, "format");
    if (f.metadata_json) FUZZ_CHECK(f.metadata_json[0] == '{');
    qkv_tensor_file_free(&f);
    return (int)(sum & 0); /* the sum makes every data byte a load ASan checks */
}
