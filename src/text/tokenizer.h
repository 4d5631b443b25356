/* SPDX-License-Identifier: MIT */
/* Reading the JSON files beside a model (text.json, train.json): shared by the tokenizer and
 * the translator. Not part of the API. */
#ifndef QKV_IO_TOKENIZER_H
#define QKV_IO_TOKENIZER_H

#include <cJSON.h>

#include "core/internal.h"

/* dir/name (or dir/../name, qkv_model_dir_file) parsed: *out is NULL when neither exists;
 * a file that is not JSON is QKV_ERR_FORMAT naming it. The caller frees *out with
 * cJSON_Delete. */
qkv_status model_dir_json(cJSON **out, const char *dir, const char *name, qkv_error *err);

#endif
