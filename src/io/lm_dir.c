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

/* The model behind model_dir.h's whole-model calls. */
static double config_params(const void *cfg) { return lm_config_params(cfg); }
static qkv_status create(void **model, const void *cfg, qkv_error *err)
{
    return lm_create((qkv_lm **)model, cfg, 0, 0, err); /* every parameter is read */
}
static void destroy(void *model) { qkv_lm_free(model); }
static model_core *core_of(const void *model) { return &((qkv_lm *)model)->core; }
static const void *config_of(const void *model) { return &((const qkv_lm *)model)->cfg; }

static qkv_status set_precision(void *model, qkv_precision p, qkv_error *err)
{
    return qkv_lm_set_precision(model, p, err);
}

const model_kind lm_kind = {
    "qkv-lm", " (a language model)", "qkv-lm-checkpoint", "language-model",
    fields, sizeof fields / sizeof *fields, position, sizeof position / sizeof *position,
    defaults, check, NULL,
    sizeof(qkv_lm_config), config_params, create, destroy, core_of, config_of,
    set_precision,
};

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
    return model_save(&lm_kind, m, dir, err);
}

qkv_status qkv_lm_load(qkv_lm **out, const char *dir, qkv_error *err)
{
    void *m;
    qkv_status st = model_load(&lm_kind, &m, dir, err);
    *out = m;
    return st;
}

qkv_status lm_checkpoint_save(const char *path, const qkv_lm *m, const qkv_adam *opt,
                              const lm_train_position *pos, qkv_error *err)
{
    return model_save_checkpoint(&lm_kind, path, m, opt, pos, err);
}

qkv_status lm_checkpoint_load(const char *path, qkv_lm *m, qkv_adam *opt,
                              lm_train_position *pos, qkv_error *err)
{
    return model_load_checkpoint(&lm_kind, path, m, opt, pos, err);
}
