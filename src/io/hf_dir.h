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
/* What every importer checks, so that nothing a reader of the imported model would refuse is
 * written: out is apart from the input dir (not it, not inside it, not holding it: claiming
 * it could empty the input); a SentencePiece model's bytes that load (name in messages); the
 * model's weights all finite (file: where they came from). */
qkv_status hf_output_apart(const char *out, const char *dir, qkv_error *err);
qkv_status hf_spm_loads(const char *bytes, size_t len, const char *name, qkv_error *err);
qkv_status hf_weights_finite(qkv_transformer *m, const char *file, qkv_error *err);

/* A string member: *v = def when absent; QKV_ERR_FORMAT naming file and key when present but
 * not a string (null included: transformers has no default for it then). */
qkv_status hf_string(const cJSON *o, const char *key, const char *def, const char **v,
                     const char *file, qkv_error *err);

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

/* generation_config.json (or, without it, config.json's own keys) as the text of qkv's
 * generation.json (malloc'd): num_beams, length_penalty, max_length less the start token,
 * and early_stopping as transformers' stopping rule (false: hf, true: hf-early, "never":
 * hf-never; QKV_ERR_FORMAT naming the file for anything else). */
qkv_status hf_generation(char **text, const char *dir, qkv_error *err);

/* ---- a BART-family model's tensors (Marian, M2M100, NLLB) into qkv's parameters ---------- */

/* The weights being imported into model m (file: their name in messages); written[i] marks
 * qkv's tensor i as filled. */
typedef struct {
    hf_weights *w;
    const char *file;
    qkv_transformer *m;
    char *written; /* (qkv's tensor count) */
} hf_importer;

/* HF tensor `name` as float32 of shape (rows, cols) (cols 0: a vector; (1, n) is read as n);
 * with more_rows, (rows or more, cols), of which the first rows are read. */
qkv_status hf_import_rows(const float **out, hf_importer *im, const char *name, int rows, int cols,
                          int more_rows, qkv_error *err);
qkv_status hf_import_get(const float **out, hf_importer *im, const char *name, int rows, int cols,
                         qkv_error *err);
/* qkv's tensor `name` (numel: its size), marked written; NULL if the model has none. */
float *hf_import_slot(hf_importer *im, const char *name, size_t *numel);
/* HF tensor hf (of qkv's shape) -> qkv tensor q. */
qkv_status hf_import_copy(hf_importer *im, const char *hf, const char *q, qkv_error *err);
/* The first of the names the weights hold, all of them marked used (save_pretrained keeps
 * one name of tied tensors, which one depends on the version). */
const char *hf_import_first(hf_importer *im, const char *const *names, int n);
/* Every layer: model.{encoder,decoder}.layers.L.{self_attn,encoder_attn}.{q,k,v,out}_proj,
 * *_layer_norm, fc1, fc2 -> qkv's names ((out, in) weights are qkv's layout). */
qkv_status hf_import_layers(hf_importer *im, const qkv_transformer_config *c, qkv_error *err);

#endif
