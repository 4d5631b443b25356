/* SPDX-License-Identifier: MIT */
/* Reading a model directory's config.json (model_dir.c): typed members that fail with a
 * message naming the file and the key. */
#ifndef QKV_JSON_FIELDS_H
#define QKV_JSON_FIELDS_H

#include <cJSON.h>

#include "core/internal.h"

/* An integer member (a boolean reads as 0/1), |v| <= 1e9. */
qkv_status json_get_int(const cJSON *o, const char *key, int *v, const char *file,
                        qkv_error *err);
/* A boolean member (or the integer 0 or 1). */
qkv_status json_get_flag(const cJSON *o, const char *key, int *v, const char *file,
                         qkv_error *err);
/* A number member that fits a float. */
qkv_status json_get_float(const cJSON *o, const char *key, float *v, const char *file,
                          qkv_error *err);
/* A string member that must be one of enum e's names (core/names.h): *v = its value. */
qkv_status json_get_choice(const cJSON *o, const char *key, qkv_enum e, int *v,
                           const char *file, qkv_error *err);

#endif
