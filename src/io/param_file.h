/* SPDX-License-Identifier: MIT */
/* A parameter table in safetensors files, for model directories and checkpoints (model_dir.c):
 * the weights of a saved model, and the parameters and Adam moments of a training
 * checkpoint. */
#ifndef QKV_PARAM_FILE_H
#define QKV_PARAM_FILE_H

#include "core/internal.h"

/* The table's tensors (from base: the parameters, or staged copies) as references, with room
 * for extra more after them; NULL when out of memory. The caller frees. */
qkv_tensor_ref *param_refs(const qkv_param_info *tensors, int n, const float *base, int extra);

/* Copies every table tensor of f into base: present, float32, the table's shape, finite.
 * Any other tensor is an error unless its name starts with allowed_prefix. */
qkv_status param_copy(const qkv_param_info *tensors, int n, float *base,
                      const qkv_tensor_file *f, const char *path, const char *allowed_prefix,
                      qkv_error *err);

/* dir/config.json (json and a newline) and dir/model.safetensors (the table from params,
 * with metadata "format" = format), each written atomically; dir is created if need be. */
qkv_status param_dir_save(const char *dir, const char *json, const qkv_param_info *tensors,
                          int n, const float *params, const char *format, qkv_error *err);

/* dir/model.safetensors into params (the table's layout; see param_copy). */
qkv_status param_dir_load(const char *dir, const qkv_param_info *tensors, int n, float *params,
                          qkv_error *err);

/* Adam's moments as the two tensors "adam.m", "adam.v" that follow a checkpoint's table. */
void adam_refs(qkv_tensor_ref refs[2], const qkv_adam *opt);

/* Finds "adam.m" and "adam.v" in f: float32, opt->n elements each. */
qkv_status adam_find(const qkv_tensor_file *f, const qkv_adam *opt, const char *path,
                     const qkv_tensor **m, const qkv_tensor **v, qkv_error *err);

#endif
