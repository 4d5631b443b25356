/* SPDX-License-Identifier: MIT */
/* Model directories and training checkpoints, one implementation for every kind of model
 * (transformer_dir.c: the encoder-decoder, lm_dir.c: the language model). A directory is
 *   config.json        the configuration, as JSON ({"format": ..., "version": 1, ...})
 *   model.safetensors  every parameter under its table name, float32
 * or, in an int8 model file (config.json's "weights": "int8"; qkv_model_quantize), the
 * weight matrices that int8 quantises as int8 with their per-row scales (param_file.h)
 * and a checkpoint (one safetensors file) adds Adam's moments and step and where training
 * stands, so that it resumes exactly. A kind says what differs: its format name, the members
 * of its config.json and the metadata of its training position, as tables. */
#ifndef QKV_MODEL_DIR_H
#define QKV_MODEL_DIR_H

#include "models/model.h"

/* One member of config.json: where it lives in the configuration struct and how it is
 * written. A CHOICE is one of the library's enums, written by its name (core/names.h). */
typedef enum { FIELD_INT, FIELD_FLOAT, FIELD_FLAG, FIELD_CHOICE } field_type;
typedef struct {
    const char *key;
    field_type type;
    size_t offset;
    qkv_enum names; /* CHOICE: which enum */
    int optional; /* 1: a config.json without the key keeps the default (options added after
                     models were saved: those older directories read as they always did) */
} config_field;

/* A row of a kind's table: member of the configuration struct T, written as key. */
#define CONFIG_FIELD(T, key, type, member) {key, type, offsetof(T, member), 0, 0}
#define CONFIG_CHOICE(T, key, member, names) {key, FIELD_CHOICE, offsetof(T, member), names, 0}
#define CONFIG_OPTIONAL(T, key, type, member, names) {key, type, offsetof(T, member), names, 1}
/* The members both kinds have, each group in the order both write it (config.json's order
 * is that of saved models): the widths, and the rules of every block. */
#define CONFIG_WIDTH_FIELDS(T)                                                                 \
    CONFIG_FIELD(T, "d_model", FIELD_INT, d_model),                                            \
    CONFIG_FIELD(T, "heads", FIELD_INT, heads),                                                \
    CONFIG_FIELD(T, "ffn", FIELD_INT, ffn)
#define CONFIG_BLOCK_FIELDS(T)                                                                 \
    CONFIG_FIELD(T, "max_len", FIELD_INT, max_len),                                            \
    CONFIG_FIELD(T, "dropout", FIELD_FLOAT, dropout),                                          \
    CONFIG_FIELD(T, "bias", FIELD_FLAG, bias),                                                 \
    CONFIG_FIELD(T, "pre_norm", FIELD_FLAG, pre_norm),                                         \
    CONFIG_FIELD(T, "final_norm", FIELD_FLAG, final_norm),                                     \
    CONFIG_CHOICE(T, "act", act, QKV_ENUM_ACTIVATION)

/* One metadata entry of a checkpoint's training position (after "format" and "step"): where
 * it lives in the position struct, and its C type. */
typedef enum { META_INT, META_I64, META_U64, META_F64 } meta_type;
typedef struct {
    const char *key;
    meta_type type;
    size_t offset;
} meta_field;

enum { MAX_POSITION_FIELDS = 8 };

/* A model's parameters as its table lays them out in one buffer. */
typedef struct {
    const qkv_param_info *tensors;
    int n_tensors;
    float *params;
    size_t n_params;
} param_set;

typedef struct model_kind model_kind;
struct model_kind {
    const char *format;            /* "format" of config.json and of model.safetensors */
    const char *format_note;       /* added to the message for a config.json of another format */
    const char *checkpoint_format; /* "format" of a checkpoint */
    /* The checkpoint's format is checked on load only when this names the kind ("not a
     * <noun> checkpoint"); NULL: not checked (the encoder-decoder never did). */
    const char *checkpoint_noun;
    const config_field *fields; /* config.json's members after "format" and "version" */
    int n_fields;
    const meta_field *position; /* at most MAX_POSITION_FIELDS (checked where it is defined) */
    int n_position;
    void (*defaults)(void *cfg);
    qkv_status (*check)(const void *cfg, qkv_error *err);
    /* Reads "step" and the position from f into *step and *pos, writing them only if all is
     * valid. NULL: the table's entries, strictly: integers are decimal digits only (strtoull
     * alone would read " -5" as 2^64 - 5), at most INT64_MAX (INT_MAX for an int), doubles
     * finite and >= 0; integers are read before doubles, each in table order. */
    qkv_status (*read_position)(const model_kind *k, const qkv_tensor_file *f, const char *path,
                                int64_t *step, void *pos, qkv_error *err);
    /* The model itself, for the calls over a whole model (model_save, model_load, ...): its
     * configuration's size and parameter count, making and freeing one, its core and its
     * configuration. */
    size_t cfg_size;
    double (*config_params)(const void *cfg);
    qkv_status (*create)(void **model, const void *cfg, qkv_error *err);
    void (*destroy)(void *model);
    model_core *(*core)(const void *model);
    const void *(*config)(const void *model);
    qkv_status (*set_precision)(void *model, qkv_precision p, qkv_error *err);
};

/* The two kinds (transformer_dir.c, lm_dir.c). */
extern const model_kind transformer_kind, lm_kind;

/* The configuration as JSON text (caller frees), and back: defaults, then every member of
 * the kind's table (each required), then the kind's check; errors name file and key. */
qkv_status model_config_to_json(const model_kind *k, const void *cfg, char **json,
                                qkv_error *err);
qkv_status model_config_from_json(const model_kind *k, void *cfg, const char *json,
                                  const char *file, qkv_error *err);

/* dir/config.json and dir/model.safetensors, each written atomically; dir is created. */
qkv_status model_dir_save(const model_kind *k, const void *cfg, param_set p, const char *dir,
                          qkv_error *err);
/* dir/config.json as a checked configuration of kind k, and how its model file stores the
 * weights: *weights QKV_PRECISION_FP32 (float32, also when config.json does not say) or
 * QKV_PRECISION_INT8. */
qkv_status model_dir_config(const model_kind *k, void *cfg, const char *dir,
                            qkv_precision *weights, qkv_error *err);
/* Refuses, before the model is built, a dir/config.json describing n_params floats that a
 * dir/model.safetensors of its size cannot hold (at 4 bytes a parameter, or 1 in an int8
 * model file) (a mistyped or hostile dimension would
 * otherwise allocate gigabytes and only then meet a tensor of the wrong shape). A missing
 * or non-regular model file is left to model_dir_params to report. */
qkv_status model_dir_fits(const char *dir, double n_params, qkv_precision weights,
                          qkv_error *err);
/* dir/model.safetensors into p.params: every tensor of the table, float32, its shape, finite;
 * no other tensor. */
qkv_status model_dir_params(param_set p, const char *dir, qkv_error *err);

/* The parameters, Adam's moments ("adam.m", "adam.v") and metadata "format", "step" and the
 * kind's position, in one safetensors file written atomically. */
qkv_status model_checkpoint_save(const model_kind *k, const char *path, param_set p,
                                 const qkv_adam *opt, const void *pos, qkv_error *err);
/* Validates everything in the file before it changes p.params, opt or *pos. */
qkv_status model_checkpoint_load(const model_kind *k, const char *path, param_set p,
                                 qkv_adam *opt, void *pos, qkv_error *err);

/* ---- whole models of a kind: what each kind's public save, load and checkpoint calls are ---- */

/* dir/config.json and dir/model.safetensors of the model (model_dir_save). */
qkv_status model_save(const model_kind *k, const void *model, const char *dir, qkv_error *err);
/* A new model from dir: its checked configuration, the size check, the parameters. An int8
 * model file's model holds the dequantised weights as its float32 parameters and the file's
 * int8 matrices as its int8 ones (precision_adopt_int8), and is set to int8 where the CPU
 * runs it. On failure *model is NULL. */
qkv_status model_load(const model_kind *k, void **model, const char *dir, qkv_error *err);
/* dir/config.json (with "weights": "int8") and dir/model.safetensors of the model with its
 * weight matrices quantised to int8 (param_dir_save_int8). */
qkv_status model_save_int8(const model_kind *k, const void *model, const char *dir,
                           qkv_error *err);
qkv_status model_save_checkpoint(const model_kind *k, const char *path, const void *model,
                                 const qkv_adam *opt, const void *pos, qkv_error *err);
/* model_checkpoint_load into the model's parameters; the typed copies stop being current. */
qkv_status model_load_checkpoint(const model_kind *k, const char *path, void *model,
                                 qkv_adam *opt, void *pos, qkv_error *err);

/* The typed calls of a kind over the generic ones above, defined once here and stamped out
 * in transformer_dir.c and lm_dir.c under each kind's names (the public API's, and the
 * language model's internal checkpoint calls): a macro, because C gives one body two typed
 * signatures no other way, and the two kinds' calls must stay the same calls. */
#define MODEL_DIR_CALLS(kind, T, config_t, position_t, to_json, from_json, save, load,         \
                        checkpoint_save, checkpoint_load)                                        \
    qkv_status to_json(const config_t *c, char **json, qkv_error *err)                           \
    {                                                                                            \
        return model_config_to_json(&kind, c, json, err);                                        \
    }                                                                                            \
    qkv_status from_json(config_t *c, const char *json, const char *file, qkv_error *err)        \
    {                                                                                            \
        return model_config_from_json(&kind, c, json, file, err);                                \
    }                                                                                            \
    qkv_status save(const T *m, const char *dir, qkv_error *err)                                 \
    {                                                                                            \
        return model_save(&kind, m, dir, err);                                                   \
    }                                                                                            \
    qkv_status load(T **out, const char *dir, qkv_error *err)                                    \
    {                                                                                            \
        void *m;                                                                                 \
        qkv_status st = model_load(&kind, &m, dir, err);                                         \
        *out = m;                                                                                \
        return st;                                                                               \
    }                                                                                            \
    qkv_status checkpoint_save(const char *path, const T *m, const qkv_adam *opt,                \
                               const position_t *pos, qkv_error *err)                            \
    {                                                                                            \
        return model_save_checkpoint(&kind, path, m, opt, pos, err);                             \
    }                                                                                            \
    qkv_status checkpoint_load(const char *path, T *m, qkv_adam *opt, position_t *pos,           \
                               qkv_error *err)                                                   \
    {                                                                                            \
        return model_load_checkpoint(&kind, path, m, opt, pos, err);                             \
    }

#endif
