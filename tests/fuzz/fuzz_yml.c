/* SPDX-License-Identifier: MIT */
/* Marian's YAML reader (decoder.yml, the vocabulary .yml files of a release) on the input, read
 * as a vocabulary and as decoder.yml. A vocabulary it accepts has an id for every piece and
 * <pad> (at least one entry); one it refuses is QKV_ERR_FORMAT named by the file, first. */
#include "fuzz_common.h"

#include "io/marian.h"

#define NAME "fuzz/vocab.yml"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    qkv_error err = {0};
    int vocab = 0;
    qkv_status st = marian_yml_read((const char *)data, size, NAME, &vocab, &err);
    if (st != QKV_OK) {
        FUZZ_CHECK(st == QKV_ERR_FORMAT && err.code == st && fuzz_named_once(err.msg, NAME));
        return 0;
    }
    FUZZ_CHECK(vocab >= 1);
    return 0;
}
