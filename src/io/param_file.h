/* SPDX-License-Identifier: MIT */
/* A parameter table in safetensors files, for model directories and checkpoints (model_dir.c):
 * the weights of a saved model, and the parameters and Adam moments of a training
 * checkpoint. */
#ifndef QKV_PARAM_FILE_H
#define QKV_PARAM_FILE_H

#include "core/internal.h"
#include "models/precision.h"

/* The suffix of an int8 weight's scales in an int8 model file: NAME.scale beside NAME. */
#define INT8_SCALE ".scale"

/* The table's tensors (from base: the parameters, or staged copies) as references, with room
 * for extra more after them; NULL when out of memory. The caller frees. */
qkv_tensor_ref *param_refs(const qkv_param_info *tensors, int n, const float *base, int extra);

/* Copies every table tensor of f into base: present, float32, the table's shape, finite.
 * Any other tensor is an error unless its name starts with allowed_prefix. */
qkv_status param_copy(const qkv_param_info *tensors, int n, float *base,
                      const qkv_tensor_file *f, const char *path, const char *allowed_prefix,
                      qkv_error *err);

/* An int8 model file's tensors (param_dir_save_int8) into base and q: the weight matrices
 * that int8 quantises (precision_int8_tensor), each as NAME (I8, the table's shape, values in
 * [-127, 127]) with NAME.scale (F32, one per row: finite, >= 0, 0 only for a row of zeros),
 * packed into q (one per such tensor, in the table's order) and dequantised into base; every
 * other tensor as param_copy reads it; no unknown tensor. */
qkv_status param_copy_int8(const qkv_param_info *tensors, int n, float *base, int8_matrix *q,
                           const qkv_tensor_file *f, const char *path, qkv_error *err);

/* dir/model.safetensors with the weight matrices that int8 quantises stored as int8 with
 * their per-row scales (int8_quantise_row of params), the rest float32, then dir/config.json
 * (json and a newline), each written atomically; dir is created if need be. */
qkv_status param_dir_save_int8(const char *dir, const char *json, const qkv_param_info *tensors,
                               int n, const float *params, const char *format, qkv_error *err);
/* dir/model.safetensors of an int8 model file into params and q (param_copy_int8). */
qkv_status param_dir_load_int8(const char *dir, const qkv_param_info *tensors, int n,
                               float *params, int8_matrix *q, qkv_error *err);

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
