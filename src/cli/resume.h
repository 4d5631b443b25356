/* SPDX-License-Identifier: MIT */
/* Resuming is explicit: a resumed run starts from the options its directory recorded
 * (config.json, train.json), the command line changes what it names, and
 *   - an option that defines the model or the data ("fixed": sizes, dropout, seed, data
 *     files, tokenizer, batch, ...) must not change: a difference is an error naming the
 *     option and both values;
 *   - any other recorded option (learning rate, clipping, precision, epochs, ...) may change:
 *     the new value is applied, printed, and kept in train.json's "history".
 * Options not given take the recorded values, so "qkv train --out DIR --resume" continues the
 * run as it was. The command parses its options twice: over its defaults (to find --out and
 * --resume), then, once resume_finish has set every recorded option, over the recorded
 * values; an option given on the command line that differs from the record is then a change.
 * A flag recorded on stays on (a flag cannot be turned off from the command line). Which
 * options a run records, where and how, is said once, in the command's option table
 * (opt_spec.record). */
#ifndef QKV_CLI_RESUME_H
#define QKV_CLI_RESUME_H

#include <stdint.h>

#include <cJSON.h>

#include "cli/args.h"

/* What a run being resumed recorded (the option variables point into it once preset). */
typedef struct {
    const char *dir;
    int64_t step;        /* the checkpoint's */
    cJSON *config, *train;
    cJSON *history;      /* train.json's new "history", once resume_finish has succeeded */
} resume_record;

/* Reads dir's checkpoint (whole, so that an unreadable one is an error before anything
 * starts), config.json and train.json. 0, or -1 after printing why. */
int resume_start(resume_record *rec, const char *dir);

/* Presets every option that opts records (opt_spec.record) from rec, parses argv over them
 * (args_parse from word 2), compares, and makes rec->history: the old one and
 * {"resumed_at_step": step, "changed": {...}}. 0, or the exit status after printing why (2: an
 * option that defines the model or the data differs). */
int resume_finish(resume_record *rec, const opt_spec *opts, int argc, char **argv,
                  const char *cmd);

/* Adds to o (train.json) every option of opts that its run records there, under its key,
 * with its value (a float as its shortest decimal, an unset string left out). config.json's
 * are the library's to write (qkv_config_to_json). -1 when out of memory. */
int resume_record_options(cJSON *o, const opt_spec *opts);

void resume_record_free(resume_record *rec);

/* A 64-bit integer (a seed) as a JSON number written digit for digit: cJSON's numbers are
 * doubles, which round above 2^53 (read back exactly with qkv_json_uint64). */
cJSON *resume_u64_json(uint64_t v);

/* DIR/config.json's text (caller frees; a configuration is small: at most a megabyte), or
 * NULL after printing why. */
char *resume_config_text(const char *dir);

#endif
