/* SPDX-License-Identifier: MIT */
/* The encoder-decoder's model directory (model_dir.h), which the caller completes with
 * src_vocab.txt and tgt_vocab.txt (one token per line), and its training checkpoint. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>

#include <cJSON.h>

#include "io/model_dir.h"
#include "models/transformer_internal.h"

#define FIELD(key, type, member) CONFIG_FIELD(qkv_transformer_config, key, type, member)
#define CHOICE(key, member, names) CONFIG_CHOICE(qkv_transformer_config, key, member, names)
#define OPTIONAL(key, type, member, names) \
    CONFIG_OPTIONAL(qkv_transformer_config, key, type, member, names)
static const config_field fields[] = {
    FIELD("src_vocab", FIELD_INT, src_vocab),
    FIELD("tgt_vocab", FIELD_INT, tgt_vocab),
    CONFIG_WIDTH_FIELDS(qkv_transformer_config),
    FIELD("enc_layers", FIELD_INT, enc_layers),
    FIELD("dec_layers", FIELD_INT, dec_layers),
    CONFIG_BLOCK_FIELDS(qkv_transformer_config),
    CHOICE("tie", tie, QKV_ENUM_TIE),
    FIELD("learned_pos", FIELD_FLAG, learned_pos),
    FIELD("ln_eps", FIELD_FLOAT, ln_eps),
    /* Marian's options (qkv import marian) */
    OPTIONAL("pos_layout", FIELD_CHOICE, pos_layout, QKV_ENUM_POS_LAYOUT),
    OPTIONAL("scale_embedding", FIELD_FLAG, scale_embedding, 0),
    OPTIONAL("decoder_start", FIELD_CHOICE, decoder_start, QKV_ENUM_RESERVED), /* a token id */
    OPTIONAL("suppress_pad", FIELD_FLAG, suppress_pad, 0),
    OPTIONAL("forced_eos", FIELD_FLAG, forced_eos, 0),
};
_Static_assert(sizeof(qkv_activation) == sizeof(int) && sizeof(qkv_tie) == sizeof(int) &&
                   sizeof(qkv_pos_layout) == sizeof(int),
               "a CHOICE member is accessed as an int");

static const meta_field position[] = {
    {"epoch", META_INT, offsetof(qkv_train_position, epoch)},
    {"batch", META_INT, offsetof(qkv_train_position, batch)},
    {"seed", META_U64, offsetof(qkv_train_position, seed)},
    {"epoch_loss", META_F64, offsetof(qkv_train_position, epoch_loss)},
    {"epoch_tokens", META_I64, offsetof(qkv_train_position, epoch_tokens)},
};
_Static_assert(sizeof position / sizeof *position <= MAX_POSITION_FIELDS, "too many");

static void defaults(void *cfg)
{
    *(qkv_transformer_config *)cfg = qkv_transformer_default_config();
}

static qkv_status check(const void *cfg, qkv_error *err)
{
    return qkv_transformer_config_check(cfg, err);
}

static qkv_status meta_i64(const qkv_tensor_file *f, const char *key, long long *v,
                           const char *path, qkv_error *err)
{
    const char *s = qkv_tensor_file_meta(f, key);
    char *end = NULL;
    errno = 0;
    if (s) *v = strtoll(s, &end, 10);
    if (!s || !*s || *end || errno)
        return qkv_fail(err, QKV_ERR_FORMAT, "%s: metadata \"%s\" missing or not an integer",
                        path, key);
    return QKV_OK;
}

/* The position as the first checkpoints were read: looser than the language model's rule
 * (strtoll takes " 5", "+5"; a negative value is refused as out of range), and kept so that
 * every checkpoint read before is read now, with the same messages. */
static qkv_status read_position(const model_kind *k, const qkv_tensor_file *f, const char *path,
                                int64_t *step_out, void *out, qkv_error *err)
{
    (void)k;
    long long step = 0, epoch = 0, batch = 0, tokens = 0;
    qkv_status st = meta_i64(f, "step", &step, path, err);
    if (!st) st = meta_i64(f, "epoch", &epoch, path, err);
    if (!st) st = meta_i64(f, "batch", &batch, path, err);
    if (!st) st = meta_i64(f, "epoch_tokens", &tokens, path, err);
    const char *seed_s = qkv_tensor_file_meta(f, "seed");
    const char *loss_s = qkv_tensor_file_meta(f, "epoch_loss");
    char *end_seed = NULL, *end_loss = NULL;
    unsigned long long seed = 0;
    double epoch_loss = 0.0;
    errno = 0;
    if (seed_s && *seed_s >= '0' && *seed_s <= '9') seed = strtoull(seed_s, &end_seed, 10);
    if (loss_s) epoch_loss = strtod(loss_s, &end_loss);
    if (!st && (!end_seed || *end_seed || !end_loss || end_loss == loss_s || *end_loss || errno ||
                !isfinite(epoch_loss) || epoch_loss < 0.0))
        st = qkv_fail(err, QKV_ERR_FORMAT, "%s: metadata \"seed\"/\"epoch_loss\" missing or "
                      "malformed", path);
    if (!st && (step < 0 || epoch < 0 || batch < 0 || tokens < 0 || epoch > INT_MAX ||
                batch > INT_MAX))
        st = qkv_fail(err, QKV_ERR_FORMAT, "%s: training position out of range", path);
    if (st) return st;
    *step_out = step;
    *(qkv_train_position *)out = (qkv_train_position){(int)epoch, (int)batch, seed, epoch_loss,
                                                      tokens};
    return QKV_OK;
}

/* The model behind model_dir.h's whole-model calls. */
static double config_params(const void *cfg) { return transformer_config_params(cfg); }
static qkv_status create(void **model, const void *cfg, qkv_error *err)
{
    /* no initialisation: every parameter is read from the file (d2l's for 74M parameters
     * took longer than reading them) */
    return transformer_create((qkv_transformer **)model, cfg, 0, 0, err);
}
static void destroy(void *model) { qkv_transformer_free(model); }
static model_core *core_of(const void *model) { return &((qkv_transformer *)model)->core; }
static const void *config_of(const void *model) { return &((const qkv_transformer *)model)->cfg; }

static qkv_status set_precision(void *model, qkv_precision p, qkv_error *err)
{
    return qkv_transformer_set_precision(model, p, err);
}

const model_kind transformer_kind = {
    "qkv-transformer", "", "qkv-transformer-checkpoint", NULL,
    fields, sizeof fields / sizeof *fields, position, sizeof position / sizeof *position,
    defaults, check, read_position,
    sizeof(qkv_transformer_config), config_params, create, destroy, core_of, config_of,
    set_precision,
};

MODEL_DIR_CALLS(transformer_kind, qkv_transformer, qkv_transformer_config, qkv_train_position,
                qkv_config_to_json, qkv_config_from_json, qkv_transformer_save,
                qkv_transformer_load, qkv_checkpoint_save, qkv_checkpoint_load)

qkv_status qkv_generation_defaults_read(qkv_generation_defaults *g, const char *dir,
                                        qkv_error *err)
{
    *g = (qkv_generation_defaults){0, 0, 0.0, -1, 0};
    char path[4096];
    if (!qkv_model_dir_file(path, sizeof path, dir, "generation.json")) return QKV_OK;
    cJSON *o = NULL;
    qkv_status st = qkv_json_load(&o, path, QKV_MAX_CONFIG_BYTES, err);
    if (st) return st;
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        return qkv_fail(err, QKV_ERR_FORMAT, "%s: not a JSON object", path);
    }
    const cJSON *beam = cJSON_GetObjectItemCaseSensitive(o, "beam");
    const cJSON *lp = cJSON_GetObjectItemCaseSensitive(o, "length_penalty");
    const cJSON *rule = cJSON_GetObjectItemCaseSensitive(o, "beam_stop");
    const cJSON *max_len = cJSON_GetObjectItemCaseSensitive(o, "max_len");
    if (cJSON_IsNumber(beam) && beam->valuedouble >= 1 && beam->valuedouble <= 256)
        g->beam = (int)beam->valuedouble;
    if (cJSON_IsNumber(lp) && lp->valuedouble >= 0 && lp->valuedouble <= 100)
        g->has_length_penalty = 1, g->length_penalty = lp->valuedouble;
    int v;
    if (cJSON_IsString(rule) && !qkv_enum_parse(QKV_ENUM_BEAM_STOP, rule->valuestring, &v, NULL))
        g->beam_stop = v;
    if (cJSON_IsNumber(max_len) && max_len->valuedouble >= 1 && max_len->valuedouble <= 65536)
        g->max_len = (int)max_len->valuedouble;
    cJSON_Delete(o);
    return QKV_OK;
}
