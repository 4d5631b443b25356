/* SPDX-License-Identifier: MIT */
/* Comparing a resumed run's options with what its directory recorded; see resume.h. */
#include "cli/resume.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/config_args.h"
#include "qkv.h"

/* Whether the JSON item has the type the option needs, and a value it can hold. */
static int type_fits(const opt_spec *o, const cJSON *x)
{
    const double v = cJSON_IsNumber(x) ? x->valuedouble : 0.0;
    switch (o->type) {
    case OPT_INT: return cJSON_IsNumber(x) && v >= INT_MIN && v <= INT_MAX;
    case OPT_FLOAT: return cJSON_IsNumber(x) && fabs(v) <= FLT_MAX;
    case OPT_U64: {
        uint64_t u;
        return qkv_json_uint64(x, &u);
    }
    case OPT_STRING:
    case OPT_FILE:
    case OPT_DIR:
    case OPT_CHOICE: return cJSON_IsString(x);
    case OPT_FLAG: return cJSON_IsBool(x);
    case OPT_ALIAS: break;
    }
    return 0;
}

/* The recorded item of o, and the file it was read from; NULL when o is not recorded or its
 * key is absent. */
static const cJSON *recorded(const resume_record *rec, const opt_spec *o, opt_record *r,
                             const char *const files[2], const char **file)
{
    if (args_record(o, r) <= 0) return NULL;
    *file = files[r->in_train];
    return cJSON_GetObjectItemCaseSensitive(r->in_train ? rec->train : rec->config, r->key);
}

/* Sets every recorded option from the record, checked as the command line is. */
static int resume_preset(const resume_record *rec, const opt_spec *opts,
                         const char *const files[2], const char *cmd)
{
    for (const opt_spec *o = opts; o->name; o++) {
        opt_record r;
        const char *file = NULL;
        const cJSON *x = recorded(rec, o, &r, files, &file);
        if (!x) continue;
        if (!type_fits(o, x)) {
            const int number = o->type == OPT_INT || o->type == OPT_FLOAT || o->type == OPT_U64;
            fprintf(stderr, "qkv: %s: \"%s\" must be a %s\n", file, r.key,
                    o->type == OPT_FLAG ? "boolean" : number ? "number in the option's range"
                                                             : "string");
            return -1;
        }
        switch (o->type) {
        case OPT_INT: *(int *)o->value = (int)x->valuedouble; break;
        case OPT_U64: qkv_json_uint64(x, (uint64_t *)o->value); break;
        case OPT_FLOAT: *(float *)o->value = (float)x->valuedouble; break;
        case OPT_STRING:
        case OPT_FILE:
        case OPT_DIR: *(const char **)o->value = x->valuestring; break;
        case OPT_CHOICE:
            if (args_choice_set(o, x->valuestring, cmd, file)) return -1;
            break;
        case OPT_FLAG: *(int *)o->value = cJSON_IsTrue(x) != r.inverted; break;
        case OPT_ALIAS: break;
        }
        if (args_check(o, cmd, file)) return -1; /* a recorded value must be one --NAME takes */
    }
    return 0;
}

/* The option's value as text (a float as train.json writes it: 7 significant digits). */
static void value_text(char *out, size_t cap, const opt_spec *o)
{
    switch (o->type) {
    case OPT_INT: snprintf(out, cap, "%d", *(const int *)o->value); break;
    case OPT_U64:
        snprintf(out, cap, "%llu", (unsigned long long)*(const uint64_t *)o->value);
        break;
    case OPT_FLOAT: snprintf(out, cap, "%.7g", (double)*(const float *)o->value); break;
    case OPT_STRING:
    case OPT_FILE:
    case OPT_DIR: {
        const char *s = *(const char *const *)o->value;
        snprintf(out, cap, "%s", s ? s : "(none)");
        break;
    }
    case OPT_CHOICE: {
        const opt_choice *c = o->value;
        snprintf(out, cap, "%s", args_choice_name(c, c->value));
        break;
    }
    case OPT_FLAG: snprintf(out, cap, "%s", *(const int *)o->value ? "on" : "off"); break;
    case OPT_ALIAS: snprintf(out, cap, "?"); break;
    }
}

/* The recorded item as the same text (a flag in the option's sense). */
static void recorded_text(char *out, size_t cap, const opt_spec *o, const cJSON *x, int inverted)
{
    uint64_t u;
    if (!x) snprintf(out, cap, "(none)");
    else if (cJSON_IsString(x)) snprintf(out, cap, "%s", x->valuestring);
    else if (cJSON_IsBool(x)) snprintf(out, cap, "%s", cJSON_IsTrue(x) != inverted ? "on" : "off");
    else if (o->type == OPT_FLOAT) snprintf(out, cap, "%.7g", (double)(float)x->valuedouble);
    else if (o->type == OPT_U64 && qkv_json_uint64(x, &u))
        snprintf(out, cap, "%llu", (unsigned long long)u);
    else snprintf(out, cap, "%.17g", x->valuedouble);
}

cJSON *resume_u64_json(uint64_t v)
{
    char digits[24];
    snprintf(digits, sizeof digits, "%llu", (unsigned long long)v);
    return cJSON_CreateRaw(digits);
}

/* The option's value as JSON, as the run records it. */
static cJSON *value_json(const opt_spec *o, int inverted)
{
    switch (o->type) {
    case OPT_INT: return cJSON_CreateNumber(*(const int *)o->value);
    case OPT_U64: return resume_u64_json(*(const uint64_t *)o->value);
    case OPT_FLOAT: {
        char t[32];
        snprintf(t, sizeof t, "%.7g", (double)*(const float *)o->value);
        return cJSON_CreateNumber(strtod(t, NULL));
    }
    case OPT_STRING:
    case OPT_FILE:
    case OPT_DIR: {
        const char *s = *(const char *const *)o->value;
        return s ? cJSON_CreateString(s) : cJSON_CreateNull();
    }
    case OPT_CHOICE: {
        const opt_choice *c = o->value;
        return cJSON_CreateString(args_choice_name(c, c->value));
    }
    case OPT_FLAG: return cJSON_CreateBool(*(const int *)o->value != inverted);
    case OPT_ALIAS: break;
    }
    return cJSON_CreateNull();
}

/* The fixed recorded options that differ (printed; returns how many), or with fixed 0 the
 * others that changed (printed and added to changes). */
static int resume_compare(const resume_record *rec, const opt_spec *opts,
                          const char *const files[2], const char *cmd, int fixed, cJSON *changes)
{
    int differ = 0;
    for (const opt_spec *o = opts; o->name; o++) {
        opt_record r;
        const char *file = NULL;
        const cJSON *x = recorded(rec, o, &r, files, &file);
        if (!o->record || r.fixed != fixed) continue;
        /* an absent number, flag or choice was not recorded (an older qkv, or an option that
         * did not apply); an absent file or text is one that was not given */
        if (!x && !(o->type == OPT_STRING || o->type == OPT_FILE || o->type == OPT_DIR)) continue;
        char now[512], was[512];
        value_text(now, sizeof now, o);
        recorded_text(was, sizeof was, o, x, r.inverted);
        if (!strcmp(now, was)) continue;
        if (r.fixed) {
            fprintf(stderr, "%s: --%s %s differs from this run's %s (%s): a resumed run keeps "
                    "the options that define its model and data; start a new run (another "
                    "--out, or --overwrite) to change it\n", cmd, o->name, now, was, file);
            differ++;
            continue;
        }
        fprintf(stderr, "%s: resuming with --%s %s (was %s)\n", cmd, o->name, now, was);
        cJSON *c = cJSON_CreateObject();
        cJSON_AddItemToObject(c, "was", x ? cJSON_Duplicate(x, 1) : cJSON_CreateNull());
        cJSON_AddItemToObject(c, "now", value_json(o, r.inverted));
        cJSON_AddItemToObject(changes, o->name, c);
    }
    return differ;
}

int resume_record_options(cJSON *o, const opt_spec *opts)
{
    for (const opt_spec *x = opts; x->name; x++) {
        opt_record r;
        if (args_record(x, &r) <= 0 || !r.in_train) continue;
        if ((x->type == OPT_STRING || x->type == OPT_FILE || x->type == OPT_DIR) &&
            !*(const char *const *)x->value)
            continue;
        cJSON *v = value_json(x, r.inverted);
        if (!v || !cJSON_AddItemToObject(o, r.key, v)) return cJSON_Delete(v), -1;
    }
    return 0;
}

static cJSON *resume_read_json(const char *dir, const char *name)
{
    char path[4096];
    qkv_error err = {0};
    snprintf(path, sizeof path, "%s/%s", dir, name);
    cJSON *o = NULL;
    if (qkv_json_load(&o, path, QKV_MAX_CONFIG_BYTES, &err)) {
        fprintf(stderr, "qkv: --resume: %s\n", err.msg);
        return NULL;
    }
    if (!cJSON_IsObject(o)) {
        fprintf(stderr, "qkv: --resume: %s: not a JSON object\n", path);
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

static int64_t resume_checkpoint_step(const char *dir)
{
    char path[4096];
    qkv_tensor_file f = {0};
    qkv_error err = {0};
    snprintf(path, sizeof path, "%s/checkpoint.safetensors", dir);
    if (qkv_tensor_file_load(&f, path, &err)) {
        fprintf(stderr, "qkv: --resume: %s\n", err.msg);
        return -1;
    }
    const char *s = qkv_tensor_file_meta(&f, "step");
    char *end = NULL;
    long long step = s ? strtoll(s, &end, 10) : -1;
    if (!s || !*s || *end || step < 0) {
        fprintf(stderr, "qkv: --resume: %s: metadata \"step\" missing or not a step\n", path);
        step = -1;
    }
    qkv_tensor_file_free(&f);
    return step;
}

static cJSON *resume_history(const cJSON *train_json, int64_t step, cJSON *changes)
{
    const cJSON *old = cJSON_GetObjectItemCaseSensitive(train_json, "history");
    cJSON *h = cJSON_IsArray(old) ? cJSON_Duplicate(old, 1) : cJSON_CreateArray();
    cJSON *entry = cJSON_CreateObject();
    if (!h || !entry) {
        cJSON_Delete(h), cJSON_Delete(entry), cJSON_Delete(changes);
        return NULL;
    }
    cJSON_AddNumberToObject(entry, "resumed_at_step", (double)step);
    if (cJSON_GetArraySize(changes) > 0) cJSON_AddItemToObject(entry, "changed", changes);
    else cJSON_Delete(changes);
    cJSON_AddItemToArray(h, entry);
    return h;
}

int resume_start(resume_record *rec, const char *dir)
{
    memset(rec, 0, sizeof *rec);
    rec->dir = dir;
    rec->step = resume_checkpoint_step(dir);
    if (rec->step < 0 || !(rec->config = resume_read_json(dir, "config.json")) ||
        !(rec->train = resume_read_json(dir, "train.json")))
        return -1;
    config_args_legacy(rec->train);
    return 0;
}

int resume_finish(resume_record *rec, const opt_spec *opts, int argc, char **argv,
                  const char *cmd)
{
    char paths[2][4200];
    snprintf(paths[0], sizeof paths[0], "%s/config.json", rec->dir);
    snprintf(paths[1], sizeof paths[1], "%s/train.json", rec->dir);
    const char *const files[2] = {paths[0], paths[1]};
    if (resume_preset(rec, opts, files, cmd)) return 1;
    if (args_parse(argc, argv, 2, opts, "")) return 2;
    cJSON *changes = cJSON_CreateObject();
    if (!changes) return 1;
    /* every fixed option that differs, then (only if none does) every change */
    int differ = resume_compare(rec, opts, files, cmd, 1, changes);
    if (!differ) differ = resume_compare(rec, opts, files, cmd, 0, changes);
    if (differ) return cJSON_Delete(changes), 2;
    rec->history = resume_history(rec->train, rec->step, changes);
    return rec->history ? 0 : 1;
}

char *resume_config_text(const char *dir)
{
    char path[4096], *text = NULL;
    qkv_error err = {0};
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (!qkv_read_regular_file(path, QKV_MAX_CONFIG_BYTES, &text, NULL, &err)) return text;
    fprintf(stderr, "qkv: %s\n", err.msg);
    return NULL;
}

void resume_record_free(resume_record *rec)
{
    cJSON_Delete(rec->config), cJSON_Delete(rec->train), cJSON_Delete(rec->history);
    memset(rec, 0, sizeof *rec);
}
