/* SPDX-License-Identifier: MIT */
/* Where one directory lies relative to another; see qkv_path_relation in qkv/core.h. */
#define _DEFAULT_SOURCE /* realpath */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"

/* path made absolute with links resolved, though its last components may not exist yet;
 * NULL if no parent of it can be resolved. */
static char *resolved(const char *path)
{
    char *p = realpath(path, NULL);
    if (p) return p;
    const char *slash = strrchr(path, '/');
    if (errno != ENOENT || (slash && !slash[1])) return NULL;
    char *parent = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
    char *base = parent ? resolved(parent) : NULL;
    free(parent);
    const char *name = slash ? slash + 1 : path;
    if (!base || !strcmp(name, "..") || !strcmp(name, ".")) return free(base), NULL;
    const size_t n = strlen(base) + strlen(name) + 2;
    char *out = malloc(n);
    if (out) snprintf(out, n, "%s%s%s", base, strcmp(base, "/") ? "/" : "", name);
    free(base);
    return out;
}

/* Whether directory path `inner` lies inside `outer` (or is it). */
static int within(const char *inner, const char *outer)
{
    const size_t n = strlen(outer);
    return !strncmp(inner, outer, n) && (inner[n] == '/' || !inner[n] || !strcmp(outer, "/"));
}

int qkv_path_relation(const char *a, const char *b)
{
    char *ra = resolved(a), *rb = realpath(b, NULL);
    int rel = !ra || !rb ? -1
              : !strcmp(ra, rb) ? 1 : within(ra, rb) ? 2 : within(rb, ra) ? 3 : 0;
    free(ra), free(rb);
    return rel;
}
