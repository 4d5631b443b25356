/* SPDX-License-Identifier: MIT */
/* --config FILE.json expanded into options; see config_args.h. */
#include "cli/config_args.h"

#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qkv.h"

#define MAX_CONFIG_BYTES (1u << 20) /* options fit in far less */

/* Keys a run records but no option sets: skipped, so that a run's train.json is a config. */
static const char *const RECORD_ONLY[] = {"history", "train_tokens", "val_tokens"};

/* The allocations of an expansion, NULL-terminated: the new argv first, then its words. */
typedef struct {
    char **v;
    int n, cap;
} owned_list;

static char *own(owned_list *l, char *p)
{
    if (!p) return NULL;
    if (l->n + 2 > l->cap) {
        int cap = l->cap ? 2 * l->cap : 64;
        char **v = realloc(l->v, (size_t)cap * sizeof *v);
        if (!v) return free(p), NULL;
        l->v = v, l->cap = cap;
    }
    l->v[l->n++] = p;
    l->v[l->n] = NULL;
    return p;
}

static int is_config(const char *a)
{
    return !strcmp(a, CONFIG_BEGIN) || !strncmp(a, CONFIG_BEGIN "=", sizeof CONFIG_BEGIN);
}

/* "--NAME=VALUE" (VALUE NULL: "--NAME"), owned by l. */
static char *option_word(owned_list *l, const char *name, const char *value)
{
    size_t n = strlen(name) + (value ? strlen(value) + 1 : 0) + 3;
    char *w = malloc(n);
    if (w) snprintf(w, n, "--%s%s%s", name, value ? "=" : "", value ? value : "");
    return own(l, w);
}

/* The words of one file's options, appended to out (room for them is there: counted before). */
static int expand_file(const char *cmd, const char *path, owned_list *l, char **out, int *n,
                       int room)
{
    qkv_error err = {0};
    cJSON *root = NULL;
    if (qkv_json_load(&root, path, MAX_CONFIG_BYTES, &err))
        return fprintf(stderr, "qkv %s: --config: %s\n", cmd, err.msg), -1;
    if (!cJSON_IsObject(root)) {
        fprintf(stderr, "qkv %s: %s: not a JSON object of options {\"name\": value, ...}\n", cmd,
                path);
        return cJSON_Delete(root), -1;
    }
    config_args_legacy(root);
    int rc = 0;
    for (const cJSON *x = root->child; x && !rc; x = x->next) {
        const char *key = x->string;
        int skip = 0;
        for (size_t i = 0; i < sizeof RECORD_ONLY / sizeof *RECORD_ONLY; i++)
            skip |= !strcmp(key, RECORD_ONLY[i]);
        if (skip) continue;
        /* the key as it is: args_parse finds the option by its name, with '_' or '-', or by
         * the key its run records it under (args.h) */
        if (!*key || strlen(key) >= 128 ||
            strspn(key, "abcdefghijklmnopqrstuvwxyz0123456789-_") != strlen(key) ||
            !strcmp(key, "config") || !strcmp(key, "config-end") || !strcmp(key, "help")) {
            fprintf(stderr, "qkv %s: %s: \"%s\" is not an option of qkv %s (see --help)\n", cmd,
                    path, key, cmd);
            rc = -1;
            break;
        }
        char num[64], *word = NULL;
        const char *digits = cJSON_IsNumber(x) && x->valuestring ? x->valuestring : "";
        digits += *digits == '-';
        if (cJSON_IsBool(x)) /* a flag: true sets it; false is an explicit "off" */
            word = option_word(l, key, cJSON_IsTrue(x) ? NULL : CONFIG_FALSE);
        else if (cJSON_IsNumber(x)) {
            const double v = x->valuedouble;
            /* an integer as written (a 64-bit seed has more digits than a double keeps) */
            if (*digits && strspn(digits, "0123456789") == strlen(digits) &&
                strlen(x->valuestring) < sizeof num)
                snprintf(num, sizeof num, "%s", x->valuestring);
            else if (v == floor(v) && fabs(v) < 1e18) snprintf(num, sizeof num, "%.0f", v);
            else snprintf(num, sizeof num, "%.9g", v); /* 9 digits: a float exactly */
            word = option_word(l, key, num);
        } else if (cJSON_IsString(x) && x->valuestring[0] != CONFIG_FALSE[0])
            word = option_word(l, key, x->valuestring);
        else {
            fprintf(stderr, "qkv %s: %s: \"%s\" must be a number, a string, true or false\n", cmd,
                    path, key);
            rc = -1;
            break;
        }
        if (!word || *n >= room) {
            fprintf(stderr, "qkv %s: %s: out of memory\n", cmd, path);
            rc = -1;
            break;
        }
        out[(*n)++] = word;
    }
    cJSON_Delete(root);
    return rc;
}

/* How many keys the file may hold at most: the room its words need. */
static int count_keys(const char *path)
{
    qkv_error err = {0};
    cJSON *root = NULL;
    if (qkv_json_load(&root, path, MAX_CONFIG_BYTES, &err)) return 0; /* said later */
    const int n = cJSON_IsObject(root) ? cJSON_GetArraySize(root) : 0;
    cJSON_Delete(root);
    return n;
}

int config_args_expand(int *argc, char ***argv, char ***owned)
{
    int n_in = *argc, files = 0, room = 0;
    char **in = *argv;
    *owned = NULL;
    for (int i = 2; i < n_in; i++)
        if (is_config(in[i])) {
            const char *path = in[i][sizeof CONFIG_BEGIN - 1] == '=' ? in[i] + sizeof CONFIG_BEGIN
                               : i + 1 < n_in ? in[++i] : NULL;
            if (!path) return fprintf(stderr, "qkv %s: --config needs a file\n", in[1]), -1;
            files++, room += count_keys(path);
        }
    if (!files) return 0;
    owned_list l = {0};
    const int cap = n_in + 2 * files + room + 1; /* + each block's end, the file's words, NULL */
    char **out = calloc((size_t)cap, sizeof *out);
    if (!out || !own(&l, (char *)out)) return fprintf(stderr, "qkv: out of memory\n"), -1;
    /* the command, its leading words that are not options (bench KIND, plot DIR), the files'
     * blocks, then the rest of the command line, which args_parse reads last */
    int n = 0, first = 2;
    out[n++] = in[0], out[n++] = in[1];
    while (first < n_in && in[first][0] != '-') out[n++] = in[first++];
    for (int i = first; i < n_in; i++) {
        if (!is_config(in[i])) continue;
        const int joined = in[i][sizeof CONFIG_BEGIN - 1] == '=';
        char *path = joined ? in[i] + sizeof CONFIG_BEGIN : in[++i];
        out[n++] = (char *)CONFIG_BEGIN, out[n++] = path;
        if (expand_file(in[1], path, &l, out, &n, cap - 2)) {
            config_args_free(l.v);
            return -1;
        }
        out[n++] = (char *)CONFIG_END;
    }
    for (int i = first; i < n_in; i++) {
        if (is_config(in[i])) {
            i += in[i][sizeof CONFIG_BEGIN - 1] != '=';
            continue;
        }
        out[n++] = in[i];
    }
    out[n] = NULL;
    *argc = n, *argv = out, *owned = l.v;
    return 0;
}

void config_args_legacy(cJSON *record)
{
    if (cJSON_GetObjectItemCaseSensitive(record, "data") &&
        cJSON_GetObjectItemCaseSensitive(record, "tgt") &&
        !cJSON_GetObjectItemCaseSensitive(record, "src"))
        cJSON_AddItemToObject(record, "src",
                              cJSON_DetachItemFromObjectCaseSensitive(record, "data"));
}

void config_args_free(char **owned)
{
    if (!owned) return;
    for (char **p = owned; *p; p++) free(*p);
    free(owned);
}
