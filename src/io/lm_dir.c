/* SPDX-License-Identifier: MIT */
/* The language model's directory (model_dir.h), which the caller completes with vocab.txt
 * (one token per line), and its training checkpoint. */
#include <stddef.h>

#include "io/model_dir.h"
#include "models/language_model_internal.h"

#define FIELD(key, type, member) {key, type, offsetof(qkv_lm_config, member), 0, 0}
#define CHOICE(key, member, names) {key, FIELD_CHOICE, offsetof(qkv_lm_config, member), names, 0}
static const config_field fields[] = {
    FIELD("vocab", FIELD_INT, vocab),
    FIELD("d_model", FIELD_INT, d_model),
    FIELD("heads", FIELD_INT, heads),
    FIELD("ffn", FIELD_INT, ffn),
    FIELD("layers", FIELD_INT, layers),
    FIELD("max_len", FIELD_INT, max_len),
    FIELD("dropout", FIELD_FLOAT, dropout),
    FIELD("bias", FIELD_FLAG, bias),
    FIELD("pre_norm", FIELD_FLAG, pre_norm),
    FIELD("final_norm", FIELD_FLAG, final_norm),
    CHOICE("act", act, QKV_ENUM_ACTIVATION),
    FIELD("tie", FIELD_FLAG, tie),
    FIELD("learned_pos", FIELD_FLAG, learned_pos),
    CHOICE("attention", attention, QKV_ENUM_ATTENTION),
    FIELD("ln_eps", FIELD_FLOAT, ln_eps),
};
_Static_assert(sizeof(qkv_activation) == sizeof(int) && sizeof(qkv_attention_kind) == sizeof(int),
               "a CHOICE member is accessed as an int");

static const meta_field position[] = {
    {"seed", META_U64, offsetof(lm_train_position, seed)},
    {"elapsed_s", META_F64, offsetof(lm_train_position, elapsed_s)},
    {"loss_sum", META_F64, offsetof(lm_train_position, loss_sum)},
    {"loss_tokens", META_I64, offsetof(lm_train_position, loss_tokens)},
    {"train_tokens", META_I64, offsetof(lm_train_position, train_tokens)},
};
_Static_assert(sizeof position / sizeof *position <= MAX_POSITION_FIELDS, "too many");

static void defaults(void *cfg) { *(qkv_lm_config *)cfg = qkv_lm_default_config(); }
static qkv_status check(const void *cfg, qkv_error *err) { return qkv_lm_config_check(cfg, err); }

static const model_kind lm_kind = {
    "qkv-lm", " (a language model)", "qkv-lm-checkpoint", "language-model",
    fields, sizeof fields / sizeof *fields, position, sizeof position / sizeof *position,
    defaults, check, NULL,
};

/* The host's parameters as they are now (on a device: downloaded if training changed them). */
static param_set params_of(const qkv_lm *m)
{
    return (param_set){m->core.tensors, m->core.n_tensors, (float *)core_host_params(&m->core),
                       m->core.n_params};
}

/* The host's parameters, about to be written: they go up to a device before the next pass. */
static param_set params_to_write(qkv_lm *m)
{
    return (param_set){m->core.tensors, m->core.n_tensors, core_params(&m->core),
                       m->core.n_params};
}

qkv_status qkv_lm_config_to_json(const qkv_lm_config *c, char **json, qkv_error *err)
{
    return model_config_to_json(&lm_kind, c, json, err);
}

qkv_status qkv_lm_config_from_json(qkv_lm_config *c, const char *json, const char *file,
                                   qkv_error *err)
{
    return model_config_from_json(&lm_kind, c, json, file, err);
}

qkv_status qkv_lm_save(const qkv_lm *m, const char *dir, qkv_error *err)
{
    qkv_status st = core_host_current(&m->core, err);
    return st ? st : model_dir_save(&lm_kind, &m->cfg, params_of(m), dir, err);
}

qkv_status qkv_lm_load(qkv_lm **out, const char *dir, qkv_error *err)
{
    qkv_lm_config cfg;
    qkv_lm *m = NULL;
    qkv_status st = model_dir_config(&lm_kind, &cfg, dir, err);
    if (!st) st = model_dir_fits(dir, lm_config_params(&cfg), err);
    if (!st) st = qkv_lm_create(&m, &cfg, 0, err);
    if (!st) st = model_dir_params(params_to_write(m), dir, err);
    if (st) qkv_lm_free(m), m = NULL;
    *out = m;
    return st;
}

qkv_status lm_checkpoint_save(const char *path, const qkv_lm *m, const qkv_adam *opt,
                              const lm_train_position *pos, qkv_error *err)
{
    qkv_status st = core_host_current(&m->core, err);
    if (!st) st = core_adam_to_host(&m->core, opt, err);
    return st ? st : model_checkpoint_save(&lm_kind, path, params_of(m), opt, pos, err);
}

qkv_status lm_checkpoint_load(const char *path, qkv_lm *m, qkv_adam *opt,
                              lm_train_position *pos, qkv_error *err)
{
    qkv_status st = model_checkpoint_load(&lm_kind, path, params_to_write(m), opt, pos, err);
    if (!st) core_adam_forget(&m->core); /* the optimizer's moments are the file's now */
    return st;
}
