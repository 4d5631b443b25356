/* SPDX-License-Identifier: MIT */
/* Error reporting: a status code and a message in a caller-owned struct, never a global. */
#include <stdarg.h>
#include <stdio.h>

#include "core/internal.h"

qkv_status qkv_fail(qkv_error *err, qkv_status code, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        err->code = code;
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return code;
}

const char *qkv_status_name(qkv_status s)
{
    switch (s) {
    case QKV_OK: return "ok";
    case QKV_ERR_NOMEM: return "out of memory";
    case QKV_ERR_ARG: return "invalid argument";
    case QKV_ERR_IO: return "input/output error";
    case QKV_ERR_FORMAT: return "malformed input";
    case QKV_ERR_NUMERIC: return "non-finite value";
    case QKV_ERR_DEVICE: return "device failure";
    }
    return "unknown status";
}
