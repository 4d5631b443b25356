/* SPDX-License-Identifier: MIT */
/* The names of the library's enums, one table each (qkv/core.h, "Names of the library's
 * enums"): what config.json, train.json, the public qkv_*_name / qkv_*_parse calls and the
 * command line spell. */
#ifndef QKV_CORE_NAMES_H
#define QKV_CORE_NAMES_H

#include "qkv.h"

/* Enum e's names by value (n of them), or NULL for an e outside qkv_enum. */
const char *const *enum_names(qkv_enum e, int *n);

/* qkv_enum_name with "unknown" for a value outside the table: what the typed calls return. */
const char *enum_name_or_unknown(qkv_enum e, int v);

#endif
