/* SPDX-License-Identifier: MIT */
/* config.json reading for model directories; see json_fields.h. */
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/json_fields.h"
#include "core/names.h"

qkv_status json_get_int(const cJSON *o, const char *key, int *v, const char *file,
                        qkv_error *err)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    if (cJSON_IsBool(x)) return *v = cJSON_IsTrue(x), QKV_OK;
    if (!cJSON_IsNumber(x) || x->valuedouble != floor(x->valuedouble))
        return qkv_fail(err, QKV_ERR_FORMAT, "%s: \"%s\" must be an integer", file, key);
    /* an integer too large for an int is named as such; one in range meets the limits of
     * the configuration's check, with their names */
    if (!(fabs(x->valuedouble) <= INT_MAX))
        return qkv_fail(err, QKV_ERR_FORMAT, "%s: \"%s\" = %.17g is out of range (at most %d)",
                        file, key, x->valuedouble, INT_MAX);
    *v = (int)x->valuedouble;
    return QKV_OK;
}

qkv_status json_get_flag(const cJSON *o, const char *key, int *v, const char *file,
                         qkv_error *err)
{
    qkv_status st = json_get_int(o, key, v, file, err);
    if (st || (*v != 0 && *v != 1))
        return qkv_fail(err, QKV_ERR_FORMAT, "%s: \"%s\" must be true or false", file, key);
    return QKV_OK;
}

qkv_status json_get_float(const cJSON *o, const char *key, float *v, const char *file,
                          qkv_error *err)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(x) || !(fabs(x->valuedouble) <= FLT_MAX))
        return qkv_fail(err, QKV_ERR_FORMAT, "%s: \"%s\" must be a number", file, key);
    *v = (float)x->valuedouble;
    return QKV_OK;
}

qkv_status json_get_choice(const cJSON *o, const char *key, qkv_enum e, int *v,
                           const char *file, qkv_error *err)
{
    int n;
    const char *const *names = enum_names(e, &n);
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    for (int i = 0; cJSON_IsString(x) && i < n; i++)
        if (!strcmp(x->valuestring, names[i])) return *v = i, QKV_OK;
    char list[256] = "";
    for (int i = 0, at = 0; i < n && at < (int)sizeof list; i++)
        at += snprintf(list + at, sizeof list - (size_t)at, "%s%s", i ? ", " : "", names[i]);
    return qkv_fail(err, QKV_ERR_FORMAT, "%s: \"%s\" must be one of %s", file, key, list);
}
