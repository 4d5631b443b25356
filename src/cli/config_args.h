/* SPDX-License-Identifier: MIT */
/* --config FILE.json: options from a JSON object, for every command.
 *
 * main() expands each "--config FILE" (or "--config=FILE") of the command line into the
 * options FILE names, in a block that args_parse reads first (the command line wins):
 *   qkv train --lr 0.01 --config run.json   ->   qkv train --config run.json --lr=0.005
 *                                                 --tie=output --bias --config-end --lr 0.01
 * A key is an option's name, with '_' or '-' ("label_smoothing", "label-smoothing"), or the
 * key a run records the option under (args.h: "valid_bleu": false is --no-bleu); a value is a
 * number, a string or a boolean (a flag: true sets it, false leaves it off). So what
 * train.json and train-lm's train.json record is a valid --config: its record-only keys
 * ("history", "train_tokens", "val_tokens") are skipped. args_parse finds each key's option and
 * checks it as it checks the command line (unknown keys, types, ranges), naming FILE. */
#ifndef QKV_CLI_CONFIG_ARGS_H
#define QKV_CLI_CONFIG_ARGS_H

#include <cJSON.h>

/* The words args_parse knows a block by, and the value a JSON false becomes (a byte no JSON
 * string of a config may start with). */
#define CONFIG_BEGIN "--config"
#define CONFIG_END "--config-end"
#define CONFIG_FALSE "\001false"

/* Replaces *argv (and *argc) by the expanded command line when it has a --config; *owned then
 * holds every allocation, for config_args_free, else NULL. 0, or -1 after a message naming the
 * file (and key). */
int config_args_expand(int *argc, char ***argv, char ***owned);
void config_args_free(char **owned);

/* A record written before runs recorded --src as "src": one with "data" and "tgt" names its
 * source file "data" (as --src), renamed here (a --config file, a resumed run's train.json). */
void config_args_legacy(cJSON *record);

#endif
