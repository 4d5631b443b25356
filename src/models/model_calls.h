/* SPDX-License-Identifier: MIT */
/* The public calls both models answer the same way over their model_core: the configuration
 * and the parameter table, precision, device, key-value cache and gradients. They are written
 * once, here, and stamped out under each model's typed names (include/qkv/models.h) by
 *   MODEL_CORE_CALLS(qkv_transformer, transformer, walk, retype, 0)   encoder_decoder.c
 *   MODEL_CORE_CALLS(qkv_lm, lm, walk, retype, m->dims.linear_attention)  language_model.c
 * A macro, because C gives one body two typed signatures no other way; a function over
 * model_core behind each typed name would still write every signature twice, and the two
 * sets drifted before (a call one model had and the other lacked). Private to the library. */
#ifndef QKV_MODEL_CALLS_H
#define QKV_MODEL_CALLS_H

#include "models/model.h"

/* For a model type T (a struct with cfg, core, w and g: the configuration of type T##_config,
 * its model_core, the parameter and gradient views), with its parameter walk, its retype
 * (core_set_precision) and linear (an expression of m: whether its self-attention is linear),
 * defines the public T##_get_config, _num_tensors, _tensor, _num_params, _params,
 * _set_precision, _get_precision, _set_device, _get_device, _set_kv_cache, _get_kv_cache,
 * _kv_cache_type, _grads, and the library's NAME##_set_device (a device table) and
 * NAME##_grads (the gradients where the kernels write them). */
#define MODEL_CORE_CALLS(T, NAME, walk, retype, linear)                                         \
    const T##_config *T##_get_config(const T *m) { return &m->cfg; }                           \
    int T##_num_tensors(const T *m) { return m->core.n_tensors; }                              \
    qkv_param_info T##_tensor(const T *m, int i) { return m->core.tensors[i]; }                \
    size_t T##_num_params(const T *m) { return m->core.n_params; }                             \
    float *T##_params(T *m) { return core_params(&m->core); }                                  \
                                                                                               \
    qkv_status T##_set_precision(T *m, qkv_precision p, qkv_error *err)                        \
    {                                                                                          \
        return core_set_precision(&m->core, p, retype, m, err);                                \
    }                                                                                          \
    qkv_precision T##_get_precision(const T *m) { return m->core.prec.precision; }             \
                                                                                               \
    qkv_status NAME##_set_device(T *m, const device *dev, qkv_error *err)                      \
    {                                                                                          \
        return core_set_device(&m->core, dev, linear, walk, &m->cfg, &m->w, retype, m, err);   \
    }                                                                                          \
    qkv_status T##_set_device(T *m, qkv_device d, qkv_error *err)                              \
    {                                                                                          \
        const device *dev;                                                                     \
        qkv_status st = core_device_of(&dev, d, err);                                          \
        return st ? st : NAME##_set_device(m, dev, err);                                       \
    }                                                                                          \
    qkv_device T##_get_device(const T *m)                                                      \
    {                                                                                          \
        return m->core.dev ? QKV_DEVICE_CUDA : QKV_DEVICE_CPU;                                 \
    }                                                                                          \
                                                                                               \
    qkv_status T##_set_kv_cache(T *m, qkv_kv_cache kv, qkv_error *err)                         \
    {                                                                                          \
        return core_set_kv_cache(&m->core, kv, err);                                           \
    }                                                                                          \
    qkv_kv_cache T##_get_kv_cache(const T *m) { return m->core.kv_cache; }                     \
    qkv_kv_cache T##_kv_cache_type(const T *m) { return core_kv_cache_type(&m->core); }        \
                                                                                               \
    float *NAME##_grads(T *m) { return core_grads(&m->core, walk, &m->cfg, &m->g); }           \
    float *T##_grads(T *m) { return NAME##_grads(m) ? core_grads_host(&m->core) : NULL; }

#endif
