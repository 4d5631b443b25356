/* SPDX-License-Identifier: MIT */
/* The language model's directory (model_dir.h), which the caller completes with vocab.txt
 * (one token per line), and its training checkpoint. */
#include <stddef.h>

#include "io/model_dir.h"
#include "models/language_model_internal.h"

#define FIELD(key, type, member) CONFIG_FIELD(qkv_lm_config, key, type, member)
#define CHOICE(key, member, names) CONFIG_CHOICE(qkv_lm_config, key, member, names)
static const config_field fields[] = {
    FIELD("vocab", FIELD_INT, vocab),
    CONFIG_WIDTH_FIELDS(qkv_lm_config),
    FIELD("layers", FIELD_INT, layers),
    CONFIG_BLOCK_FIELDS(qkv_lm_config),
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

MODEL_DIR_CALLS(lm_kind, qkv_lm, qkv_lm_config, lm_train_position, qkv_lm_config_to_json,
                qkv_lm_config_from_json, qkv_lm_save, qkv_lm_load, lm_checkpoint_save,
                lm_checkpoint_load)
