/* SPDX-License-Identifier: MIT */
/* The names of the library's enums; see names.h. */
#include "core/names.h"

#include <stdio.h>
#include <string.h>

#include "core/internal.h"

static const char *const activations[] = {"relu", "gelu", "silu"};
static const char *const ties[] = {"none", "output", "all"};
static const char *const pos_layouts[] = {"interleaved", "sin_cos", "fairseq"};
static const char *const attentions[] = {"softmax", "linear"};
static const char *const beam_stops[] = {"bound", "count", "hf", "hf-early", "hf-never"};
static const char *const precisions[] = {"fp32", "bf16", "int8"};
static const char *const kv_caches[] = {"auto", "fp32", "bf16"};
static const char *const lr_schedules[] = {"constant", "noam"};
static const char *const spm_types[] = {"unigram", "bpe"};
static const char *const reserved[] = {"<unk>", "<pad>", "<bos>", "<eos>"};
static const char *const ct2_quantizations[] = {"float32", "int8"};
static const char *const devices[] = {"cpu", "cuda"};

#define TABLE(names, what) {names, (int)(sizeof names / sizeof *names), what}
static const struct {
    const char *const *names;
    int n;
    const char *what; /* for "unknown WHAT 'x' (a, b or c)" */
} tables[QKV_N_ENUMS] = {
    [QKV_ENUM_ACTIVATION] = TABLE(activations, "activation"),
    [QKV_ENUM_TIE] = TABLE(ties, "weight tying"),
    [QKV_ENUM_POS_LAYOUT] = TABLE(pos_layouts, "positional layout"),
    [QKV_ENUM_ATTENTION] = TABLE(attentions, "attention kind"),
    [QKV_ENUM_BEAM_STOP] = TABLE(beam_stops, "beam stopping rule"),
    [QKV_ENUM_PRECISION] = TABLE(precisions, "precision"),
    [QKV_ENUM_KV_CACHE] = TABLE(kv_caches, "key-value cache type"),
    [QKV_ENUM_LR_SCHEDULE] = TABLE(lr_schedules, "learning-rate schedule"),
    [QKV_ENUM_SPM_TYPE] = TABLE(spm_types, "SentencePiece model type"),
    [QKV_ENUM_RESERVED] = TABLE(reserved, "reserved token"),
    [QKV_ENUM_CT2_QUANTIZATION] = TABLE(ct2_quantizations, "CTranslate2 quantization"),
    [QKV_ENUM_DEVICE] = TABLE(devices, "device"),
};
/* the tables index by value: each enum's values are 0, 1, ... in the order above */
_Static_assert(QKV_ACT_RELU == 0 && QKV_ACT_GELU == 1 && QKV_ACT_SILU == 2, "activations");
_Static_assert(QKV_TIE_NONE == 0 && QKV_TIE_OUTPUT == 1 && QKV_TIE_ALL == 2, "ties");
_Static_assert(QKV_POS_INTERLEAVED == 0 && QKV_POS_HALVES == 1 && QKV_POS_FAIRSEQ == 2,
               "positional layouts");
_Static_assert(QKV_ATTENTION_SOFTMAX == 0 && QKV_ATTENTION_LINEAR == 1, "attention kinds");
_Static_assert(QKV_BEAM_STOP_BOUND == 0 && QKV_BEAM_STOP_COUNT == 1 && QKV_BEAM_STOP_HF == 2 &&
                   QKV_BEAM_STOP_HF_EARLY == 3 && QKV_BEAM_STOP_HF_NEVER == 4,
               "beam stopping rules");
_Static_assert(QKV_PRECISION_FP32 == 0 && QKV_PRECISION_BF16 == 1 && QKV_PRECISION_INT8 == 2,
               "precisions");
_Static_assert(QKV_KV_CACHE_AUTO == 0 && QKV_KV_CACHE_FP32 == 1 && QKV_KV_CACHE_BF16 == 2,
               "key-value cache types");
_Static_assert(QKV_LR_CONSTANT == 0 && QKV_LR_NOAM == 1, "learning-rate schedules");
_Static_assert(QKV_SPM_UNIGRAM == 0 && QKV_SPM_BPE == 1, "SentencePiece model types");
_Static_assert(QKV_UNK == 0 && QKV_PAD == 1 && QKV_BOS == 2 && QKV_EOS == 3 &&
                   QKV_N_RESERVED == sizeof reserved / sizeof *reserved,
               "reserved tokens");
_Static_assert(QKV_CT2_FLOAT32 == 0 && QKV_CT2_INT8 == 1, "CTranslate2 quantizations");
_Static_assert(QKV_DEVICE_CPU == 0 && QKV_DEVICE_CUDA == 1, "devices");

const char *const *enum_names(qkv_enum e, int *n)
{
    if ((int)e < 0 || e >= QKV_N_ENUMS) return *n = 0, NULL;
    *n = tables[e].n;
    return tables[e].names;
}

const char *qkv_enum_name(qkv_enum e, int v)
{
    int n;
    const char *const *names = enum_names(e, &n);
    return names && v >= 0 && v < n ? names[v] : NULL;
}

const char *enum_name_or_unknown(qkv_enum e, int v)
{
    const char *name = qkv_enum_name(e, v);
    return name ? name : "unknown";
}

qkv_status qkv_enum_parse(qkv_enum e, const char *name, int *v, qkv_error *err)
{
    int n;
    const char *const *names = enum_names(e, &n);
    if (!names) return qkv_fail(err, QKV_ERR_ARG, "qkv_enum_parse: no enum %d", (int)e);
    for (int i = 0; name && i < n; i++)
        if (!strcmp(name, names[i])) return *v = i, QKV_OK;
    char list[256] = "";
    for (int i = 0, at = 0; i < n && at < (int)sizeof list; i++)
        at += snprintf(list + at, sizeof list - (size_t)at, "%s%s", i == 0 ? "" : i < n - 1 ? ", "
                       : " or ", names[i]);
    return qkv_fail(err, QKV_ERR_ARG, "unknown %s '%s' (%s)", tables[e].what,
                    name ? name : "(null)", list);
}

/* The typed calls: each enum's name and parse over its table. */
#define NAMED(type, prefix, e)                                                                 \
    const char *prefix##_name(type x) { return enum_name_or_unknown(e, (int)x); }              \
    qkv_status prefix##_parse(type *x, const char *name, qkv_error *err)                       \
    {                                                                                          \
        int v = 0;                                                                             \
        const qkv_status st = qkv_enum_parse(e, name, &v, err);                                \
        if (!st) *x = (type)v;                                                                 \
        return st;                                                                             \
    }
NAMED(qkv_activation, qkv_activation, QKV_ENUM_ACTIVATION)
NAMED(qkv_tie, qkv_tie, QKV_ENUM_TIE)
NAMED(qkv_pos_layout, qkv_pos_layout, QKV_ENUM_POS_LAYOUT)
NAMED(qkv_attention_kind, qkv_attention_kind, QKV_ENUM_ATTENTION)
NAMED(qkv_beam_stop, qkv_beam_stop, QKV_ENUM_BEAM_STOP)
NAMED(qkv_precision, qkv_precision, QKV_ENUM_PRECISION)
NAMED(qkv_kv_cache, qkv_kv_cache, QKV_ENUM_KV_CACHE)
NAMED(qkv_lr_schedule, qkv_lr_schedule, QKV_ENUM_LR_SCHEDULE)
NAMED(qkv_spm_type, qkv_spm_type, QKV_ENUM_SPM_TYPE)
NAMED(qkv_ct2_quantization, qkv_ct2_quantization, QKV_ENUM_CT2_QUANTIZATION)
NAMED(qkv_device, qkv_device, QKV_ENUM_DEVICE)
