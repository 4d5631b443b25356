/* SPDX-License-Identifier: MIT */
/* Reading a Hugging Face model directory, for the importers (marian.c, m2m100.c): its JSON
 * files and its weights however they are stored (model.safetensors, pytorch_model.bin, or
 * either sharded with an index), every tensor marked when the importer takes it, so that a
 * tensor it has no place for is found. Not part of the API. */
#ifndef QKV_IO_HF_DIR_H
#define QKV_IO_HF_DIR_H

#include <cJSON.h>

#include "core/internal.h"

/* dir/name as a JSON object; with required 0 a missing file gives *out NULL and QKV_OK. */
qkv_status hf_json(cJSON **out, const char *dir, const char *name, int required, qkv_error *err);
/* A member of o (def when absent or null); QKV_ERR_FORMAT naming file and key when it has
 * another type. hf_int: an integer within +-1e9. */
qkv_status hf_int(const cJSON *o, const char *key, int def, int *v, const char *file,
                  qkv_error *err);
qkv_status hf_bool(const cJSON *o, const char *key, int def, int *v, const char *file,
                   qkv_error *err);
const char *hf_str(const cJSON *o, const char *key, const char *def);

typedef struct {
    qkv_tensor_file *shards;
    int n;
    char **used;     /* per shard, per tensor */
    char file[4096]; /* what was read, for messages: a path, or the index's */
} hf_weights;

/* The directory's weights: model.safetensors, else model.safetensors.index.json and its
 * shards, else pytorch_model.bin, else pytorch_model.bin.index.json and its shards. */
qkv_status hf_weights_load(hf_weights *w, const char *dir, qkv_error *err);
void hf_weights_free(hf_weights *w);
/* The tensor called name (marked used), or NULL. */
const qkv_tensor *hf_weights_get(hf_weights *w, const char *name);
/* The tensor called name without marking it, or NULL. */
const qkv_tensor *hf_weights_peek(const hf_weights *w, const char *name);
/* The first tensor no hf_weights_get took, or NULL. */
const char *hf_weights_unused(const hf_weights *w);

#endif
