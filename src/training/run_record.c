/* SPDX-License-Identifier: MIT */
/* What a run records of its options, and how a resumed run compares with it.
 *
 * Resuming is explicit: a resumed run starts from the options its directory recorded
 * (config.json, train.json), its user's changes what they name, and
 *   - an option that defines the model or the data ("fixed": sizes, dropout, seed, data
 *     files, tokenizer, batch, ...) must not change: a difference is an error naming the
 *     option and both values;
 *   - any other recorded option (learning rate, clipping, precision, epochs, ...) may change:
 *     the new value is applied, told (a notice), and kept in train.json's "history".
 * Options not given take the recorded values, so resuming with nothing else continues the run
 * as it was. Which options a run records, where and how, is said once, in the option table
 * (qkv_option.record). */
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "training/run_internal.h"

/* Whether the JSON item has the type the option needs, and a value it can hold. */
static int type_fits(const qkv_option *o, const cJSON *x)
{
    const double v = cJSON_IsNumber(x) ? x->valuedouble : 0.0;
    uint64_t u;
    switch (o->type) {
    case QKV_OPTION_INT: return cJSON_IsNumber(x) && v >= INT_MIN && v <= INT_MAX;
    case QKV_OPTION_FLOAT: return cJSON_IsNumber(x) && fabs(v) <= FLT_MAX;
    case QKV_OPTION_U64: return qkv_json_uint64(x, &u);
    case QKV_OPTION_FILE:
    case QKV_OPTION_TEXT:
    case QKV_OPTION_CHOICE: return cJSON_IsString(x);
    case QKV_OPTION_FLAG: return cJSON_IsBool(x);
    }
    return 0;
}

/* The recorded item of option i, and the file it was read from; NULL when i is not recorded or
 * its key is absent. */
static const cJSON *recorded(const qkv_run *r, int i, qkv_record *rec, const char **file)
{
    if (!run_record_parse(&r->opts[i], rec)) return NULL;
    *file = rec->in_train ? r->train_path : r->config_path;
    return cJSON_GetObjectItemCaseSensitive(rec->in_train ? r->train : r->config, rec->key);
}

/* Sets option i from its recorded item x, checked as when set (naming file). */
static qkv_status preset_one(qkv_run *r, int i, const cJSON *x, const qkv_record *rec,
                             const char *file, qkv_error *err)
{
    const qkv_option *o = &r->opts[i];
    if (!type_fits(o, x)) {
        const int number = o->type == QKV_OPTION_INT || o->type == QKV_OPTION_FLOAT ||
                           o->type == QKV_OPTION_U64;
        return qkv_fail(err, QKV_ERR_FORMAT, "%s: \"%s\" must be a %s", file, rec->key,
                        o->type == QKV_OPTION_FLAG ? "boolean"
                        : number                   ? "number in the option's range"
                                                   : "string");
    }
    char got[64];
    switch (o->type) {
    case QKV_OPTION_INT:
        snprintf(got, sizeof got, "%d", (int)x->valuedouble);
        r->v[i].i = (int)x->valuedouble;
        return run_check_range(r, i, r->v[i].i, got, file, err);
    case QKV_OPTION_FLOAT:
        r->v[i].f = (float)x->valuedouble;
        snprintf(got, sizeof got, "%g", (double)r->v[i].f);
        return run_check_range(r, i, r->v[i].f, got, file, err);
    case QKV_OPTION_U64: qkv_json_uint64(x, &r->v[i].u); return QKV_OK;
    case QKV_OPTION_FILE:
    case QKV_OPTION_TEXT: return qkv_run_set_text(r, i, x->valuestring, err);
    case QKV_OPTION_CHOICE: return run_choice_of(r, i, x->valuestring, &r->v[i].i, file, err);
    case QKV_OPTION_FLAG: r->v[i].i = cJSON_IsTrue(x) != rec->inverted; return QKV_OK;
    }
    return QKV_OK;
}

static qkv_status read_object(cJSON **o, const char *path, qkv_error *err)
{
    char why[sizeof err->msg];
    qkv_status st = qkv_json_load(o, path, QKV_MAX_CONFIG_BYTES, err);
    if (!st && !cJSON_IsObject(*o)) st = qkv_fail(err, QKV_ERR_FORMAT, "%s: not a JSON object",
                                                  path);
    if (!st) return QKV_OK;
    snprintf(why, sizeof why, "%s", err->msg);
    return qkv_fail(err, st, "--resume: %s", why);
}

/* The step a checkpoint recorded (its metadata "step"), read whole so that an unreadable one
 * is an error before anything starts. */
static qkv_status checkpoint_step(const char *dir, int64_t *step, qkv_error *err)
{
    char path[4200], why[sizeof err->msg];
    qkv_tensor_file f = {0};
    snprintf(path, sizeof path, "%s/checkpoint.safetensors", dir);
    qkv_status st = qkv_tensor_file_load(&f, path, err);
    if (st) {
        snprintf(why, sizeof why, "%s", err->msg);
        return qkv_fail(err, st, "--resume: %s", why);
    }
    const char *s = qkv_tensor_file_meta(&f, "step");
    char *end = NULL;
    const long long v = s ? strtoll(s, &end, 10) : -1;
    if (!s || !*s || *end || v < 0)
        st = qkv_fail(err, QKV_ERR_FORMAT, "--resume: %s: metadata \"step\" missing or not a "
                      "step", path);
    *step = v;
    qkv_tensor_file_free(&f);
    return st;
}

/* A record written before runs recorded --src as "src": one with "data" and "tgt" names its
 * source file "data" (as --src), renamed here. */
static void legacy_names(cJSON *train)
{
    if (cJSON_GetObjectItemCaseSensitive(train, "data") &&
        cJSON_GetObjectItemCaseSensitive(train, "tgt") &&
        !cJSON_GetObjectItemCaseSensitive(train, "src"))
        cJSON_AddItemToObject(train, "src",
                              cJSON_DetachItemFromObjectCaseSensitive(train, "data"));
}

qkv_status run_record_read(qkv_run *r, qkv_error *err)
{
    snprintf(r->config_path, sizeof r->config_path, "%s/config.json", r->out);
    snprintf(r->train_path, sizeof r->train_path, "%s/train.json", r->out);
    qkv_status st = checkpoint_step(r->out, &r->resumed_step, err);
    if (!st) st = read_object(&r->config, r->config_path, err);
    if (!st) st = read_object(&r->train, r->train_path, err);
    if (st) return st;
    legacy_names(r->train);
    for (int i = 0; i < r->n_opts && !st; i++) {
        qkv_record rec;
        const char *file = NULL;
        const cJSON *x = recorded(r, i, &rec, &file);
        if (x) st = preset_one(r, i, x, &rec, file, err);
    }
    return st;
}

/* The option's value as JSON, as the run records it. */
static cJSON *value_json(const qkv_run *r, int i, int inverted)
{
    const run_value *v = &r->v[i];
    char t[32];
    switch (r->opts[i].type) {
    case QKV_OPTION_INT: return cJSON_CreateNumber(v->i);
    case QKV_OPTION_U64: /* digit for digit: cJSON's numbers are doubles, which round above 2^53 */
        snprintf(t, sizeof t, "%llu", (unsigned long long)v->u);
        return cJSON_CreateRaw(t);
    case QKV_OPTION_FLOAT: /* the shortest decimal a float reads back from */
        snprintf(t, sizeof t, "%.7g", (double)v->f);
        return cJSON_CreateNumber(strtod(t, NULL));
    case QKV_OPTION_FILE:
    case QKV_OPTION_TEXT: return v->s ? cJSON_CreateString(v->s) : cJSON_CreateNull();
    case QKV_OPTION_CHOICE: return cJSON_CreateString(qkv_option_choice(&r->opts[i], v->i));
    case QKV_OPTION_FLAG: return cJSON_CreateBool(v->i != inverted);
    }
    return cJSON_CreateNull();
}

/* The recorded item as text, as run_value_text writes a value (a flag in the option's sense). */
static void recorded_text(char *out, size_t cap, const qkv_option *o, const cJSON *x,
                          int inverted)
{
    uint64_t u;
    if (!x) snprintf(out, cap, "(none)");
    else if (cJSON_IsString(x)) snprintf(out, cap, "%s", x->valuestring);
    else if (cJSON_IsBool(x)) snprintf(out, cap, "%s", cJSON_IsTrue(x) != inverted ? "on" : "off");
    else if (o->type == QKV_OPTION_FLOAT) snprintf(out, cap, "%.7g", (double)(float)x->valuedouble);
    else if (o->type == QKV_OPTION_U64 && qkv_json_uint64(x, &u))
        snprintf(out, cap, "%llu", (unsigned long long)u);
    else snprintf(out, cap, "%.17g", x->valuedouble);
}

/* The option spelled with a value: "--d-model 64", "d_model=64". */
static void spelled_value(const qkv_run *r, int i, const char *value, char *out, size_t cap)
{
    char name[80];
    run_spelled(r, i, name, sizeof name);
    snprintf(out, cap, r->naming == QKV_NAMING_COMMAND ? "%s %s" : "%s=%s", name, value);
}

/* The fixed recorded options that differ (each a line of why, appended to msg; returns how
 * many), or with fixed 0 the others that changed (each a notice, added to changes). */
static int compare(qkv_run *r, int fixed, cJSON *changes, char *msg, size_t cap)
{
    int differ = 0;
    for (int i = 0; i < r->n_opts; i++) {
        qkv_record rec;
        const char *file = NULL;
        const qkv_option *o = &r->opts[i];
        const cJSON *x = recorded(r, i, &rec, &file);
        if (!o->record || rec.fixed != fixed) continue;
        /* an absent number, flag or choice was not recorded (an older qkv, or an option that
         * did not apply); an absent file or text is one that was not given */
        if (!x && o->type != QKV_OPTION_FILE && o->type != QKV_OPTION_TEXT) continue;
        char now[512], was[512], now_spelled[600];
        run_value_text(r, i, now, sizeof now);
        recorded_text(was, sizeof was, o, x, rec.inverted);
        if (!strcmp(now, was)) continue;
        spelled_value(r, i, now, now_spelled, sizeof now_spelled);
        if (fixed) {
            char line[8192];
            const size_t n = strlen(msg);
            snprintf(line, sizeof line, "%s%s differs from this run's %s (%s): a resumed run keeps "
                     "the options that define its model and data; start a new run (another %s, "
                     "or %s) to change it", n ? "\n" : "", now_spelled, was, file,
                     r->naming ? "out" : "--out", r->naming ? "overwrite=True" : "--overwrite");
            if (n + strlen(line) < cap) memcpy(msg + n, line, strlen(line) + 1);
            differ++;
            continue;
        }
        run_notice(r, "resuming with %s (was %s)", now_spelled, was);
        cJSON *c = cJSON_CreateObject();
        cJSON_AddItemToObject(c, "was", x ? cJSON_Duplicate(x, 1) : cJSON_CreateNull());
        cJSON_AddItemToObject(c, "now", value_json(r, i, rec.inverted));
        cJSON_AddItemToObject(changes, o->name, c);
    }
    return differ;
}

qkv_status run_record_compare(qkv_run *r, qkv_error *err)
{
    cJSON *changes = cJSON_CreateObject();
    if (!changes) return qkv_fail(err, QKV_ERR_NOMEM, "out of memory");
    /* every fixed option that differs, then (only if none does) every change */
    char msg[sizeof err->msg] = "";
    if (compare(r, 1, changes, msg, sizeof msg)) {
        cJSON_Delete(changes);
        return qkv_fail(err, QKV_ERR_ARG, "%s", msg);
    }
    compare(r, 0, changes, msg, sizeof msg);
    const cJSON *old = cJSON_GetObjectItemCaseSensitive(r->train, "history");
    cJSON *h = cJSON_IsArray(old) ? cJSON_Duplicate(old, 1) : cJSON_CreateArray();
    cJSON *entry = cJSON_CreateObject();
    if (!h || !entry) {
        cJSON_Delete(h), cJSON_Delete(entry), cJSON_Delete(changes);
        return qkv_fail(err, QKV_ERR_NOMEM, "out of memory");
    }
    cJSON_AddNumberToObject(entry, "resumed_at_step", (double)r->resumed_step);
    if (cJSON_GetArraySize(changes) > 0) cJSON_AddItemToObject(entry, "changed", changes);
    else cJSON_Delete(changes);
    cJSON_AddItemToArray(h, entry);
    cJSON_Delete(r->history);
    r->history = h;
    return QKV_OK;
}

/* Whether option i applies to this qkv train run (train.json leaves out the subword options of
 * a word model and the validation options of a run without validation). */
static int applies(const qkv_run *r, int i)
{
    if (r->kind != QKV_RUN_TRANSLATION) return 1;
    const int tok = r->v[T_TOKENIZER].i, valid = r->v[T_VALID].s || r->v[T_VALID_SRC].s;
    if (i == T_VOCAB_SIZE || i == T_JOINT_BPE) return tok != TOKENIZER_WORD;
    if (i == T_SPM_TYPE) return tok == TOKENIZER_SPM;
    if (i == T_NO_BLEU || i == T_PATIENCE || i == T_VALID_EVERY) return valid;
    return 1;
}

qkv_status run_record_write(const qkv_run *r, qkv_error *err)
{
    cJSON *j = cJSON_CreateObject();
    char *text = NULL;
    int ok = j != NULL;
    for (int i = 0; i < r->n_opts && ok; i++) {
        qkv_record rec;
        const qkv_option *o = &r->opts[i];
        if (!run_record_parse(o, &rec) || !rec.in_train || !applies(r, i)) continue;
        if ((o->type == QKV_OPTION_FILE || o->type == QKV_OPTION_TEXT) && !r->v[i].s) continue;
        cJSON *v = value_json(r, i, rec.inverted);
        ok = v && cJSON_AddItemToObject(j, rec.key, v);
        if (!ok) cJSON_Delete(v);
    }
    if (ok && r->kind == QKV_RUN_LM) {
        cJSON_AddNumberToObject(j, "train_tokens", (double)r->n_train);
        cJSON_AddNumberToObject(j, "val_tokens", (double)r->n_val);
    }
    if (ok && r->history) cJSON_AddItemToObject(j, "history", cJSON_Duplicate(r->history, 1));
    if (ok) text = cJSON_Print(j);
    cJSON_Delete(j);
    char path[4200];
    snprintf(path, sizeof path, "%s/train.json", r->out);
    if (!text) return qkv_fail(err, QKV_ERR_NOMEM, "%s: out of memory", path);
    const void *chunks[1] = {text};
    const size_t lens[1] = {strlen(text)};
    const qkv_status st = qkv_atomic_write(path, chunks, lens, 1, err);
    free(text);
    return st;
}
