/* SPDX-License-Identifier: MIT */
/* The names of the library's enums (qkv/core.h): every value of every enum has a name that
 * parses back to it, the typed calls agree with the generic ones, the names are the ones
 * config.json has always spelled, and an unknown name fails naming every choice. */
#include <stdio.h>
#include <string.h>

#include "qkv.h"
#include "test_util.h"

/* Each enum's names in value order, as config.json, train.json and the command line spell
 * them: a model directory written before depends on these exact words. */
static const struct {
    qkv_enum e;
    const char *names[6]; /* NULL-terminated */
} WANT[] = {
    {QKV_ENUM_ACTIVATION, {"relu", "gelu", "silu"}},
    {QKV_ENUM_TIE, {"none", "output", "all"}},
    {QKV_ENUM_POS_LAYOUT, {"interleaved", "sin_cos", "fairseq"}},
    {QKV_ENUM_ATTENTION, {"softmax", "linear"}},
    {QKV_ENUM_BEAM_STOP, {"bound", "count", "hf", "hf-early", "hf-never"}},
    {QKV_ENUM_PRECISION, {"fp32", "bf16", "int8"}},
    {QKV_ENUM_KV_CACHE, {"auto", "fp32", "bf16"}},
    {QKV_ENUM_LR_SCHEDULE, {"constant", "noam"}},
    {QKV_ENUM_SPM_TYPE, {"unigram", "bpe"}},
    {QKV_ENUM_RESERVED, {"<unk>", "<pad>", "<bos>", "<eos>"}},
    {QKV_ENUM_CT2_QUANTIZATION, {"float32", "int8"}},
    {QKV_ENUM_DEVICE, {"cpu", "cuda"}},
};

static void test_every_name_round_trips(void **state)
{
    (void)state;
    assert_int_equal(sizeof WANT / sizeof *WANT, QKV_N_ENUMS);
    for (size_t k = 0; k < sizeof WANT / sizeof *WANT; k++) {
        int n = 0;
        while (WANT[k].names[n]) n++;
        for (int v = 0; v < n; v++) {
            const char *name = qkv_enum_name(WANT[k].e, v);
            if (!name || strcmp(name, WANT[k].names[v])) {
                print_error("enum %d value %d: '%s', want '%s'\n", (int)WANT[k].e, v,
                            name ? name : "(null)", WANT[k].names[v]);
                fail();
            }
            int back = -1;
            qkv_error err = {0};
            assert_int_equal(qkv_enum_parse(WANT[k].e, name, &back, &err), QKV_OK);
            assert_int_equal(back, v);
        }
        assert_null(qkv_enum_name(WANT[k].e, n)); /* the list ends */
        assert_null(qkv_enum_name(WANT[k].e, -1));
    }
    assert_null(qkv_enum_name(QKV_N_ENUMS, 0));
}

/* The typed calls read the same tables: a value's name, "unknown" outside, and the parse. */
static void test_typed_calls(void **state)
{
    (void)state;
    qkv_error err = {0};
    assert_string_equal(qkv_activation_name(QKV_ACT_SILU), "silu");
    assert_string_equal(qkv_activation_name((qkv_activation)7), "unknown");
    assert_string_equal(qkv_tie_name(QKV_TIE_OUTPUT), "output");
    assert_string_equal(qkv_pos_layout_name(QKV_POS_HALVES), "sin_cos");
    assert_string_equal(qkv_attention_kind_name(QKV_ATTENTION_LINEAR), "linear");
    assert_string_equal(qkv_beam_stop_name(QKV_BEAM_STOP_HF), "hf");
    assert_string_equal(qkv_beam_stop_name(QKV_BEAM_STOP_HF_EARLY), "hf-early");
    assert_string_equal(qkv_beam_stop_name(QKV_BEAM_STOP_HF_NEVER), "hf-never");
    assert_string_equal(qkv_beam_stop_name((qkv_beam_stop)5), "unknown");
    assert_string_equal(qkv_precision_name(QKV_PRECISION_INT8), "int8");
    assert_string_equal(qkv_precision_name((qkv_precision)9), "unknown");
    assert_string_equal(qkv_kv_cache_name(QKV_KV_CACHE_BF16), "bf16");
    assert_string_equal(qkv_lr_schedule_name(QKV_LR_NOAM), "noam");
    assert_string_equal(qkv_spm_type_name(QKV_SPM_BPE), "bpe");
    assert_string_equal(qkv_ct2_quantization_name(QKV_CT2_INT8), "int8");
    qkv_activation a = QKV_ACT_RELU;
    qkv_tie t = QKV_TIE_NONE;
    qkv_pos_layout p = QKV_POS_INTERLEAVED;
    qkv_attention_kind k = QKV_ATTENTION_SOFTMAX;
    qkv_beam_stop s = QKV_BEAM_STOP_BOUND;
    qkv_lr_schedule l = QKV_LR_CONSTANT;
    qkv_spm_type m = QKV_SPM_UNIGRAM;
    assert_int_equal(qkv_activation_parse(&a, "gelu", &err), QKV_OK);
    assert_int_equal(a, QKV_ACT_GELU);
    assert_int_equal(qkv_tie_parse(&t, "all", &err), QKV_OK);
    assert_int_equal(t, QKV_TIE_ALL);
    assert_int_equal(qkv_pos_layout_parse(&p, "sin_cos", &err), QKV_OK);
    assert_int_equal(p, QKV_POS_HALVES);
    assert_int_equal(qkv_attention_kind_parse(&k, "linear", &err), QKV_OK);
    assert_int_equal(k, QKV_ATTENTION_LINEAR);
    assert_int_equal(qkv_beam_stop_parse(&s, "count", &err), QKV_OK);
    assert_int_equal(s, QKV_BEAM_STOP_COUNT);
    assert_int_equal(qkv_beam_stop_parse(&s, "hf-early", &err), QKV_OK);
    assert_int_equal(s, QKV_BEAM_STOP_HF_EARLY);
    assert_int_equal(qkv_lr_schedule_parse(&l, "noam", &err), QKV_OK);
    assert_int_equal(l, QKV_LR_NOAM);
    assert_int_equal(qkv_spm_type_parse(&m, "bpe", &err), QKV_OK);
    assert_int_equal(m, QKV_SPM_BPE);
    /* a failed parse leaves the value as it was */
    assert_int_equal(qkv_activation_parse(&a, "swish", &err), QKV_ERR_ARG);
    assert_int_equal(a, QKV_ACT_GELU);
}

/* An unknown name (and NULL, and a case that differs) fails naming what was expected. */
static void test_unknown_names(void **state)
{
    (void)state;
    qkv_error err = {0};
    int v = 5;
    assert_int_equal(qkv_enum_parse(QKV_ENUM_ACTIVATION, "Relu", &v, &err), QKV_ERR_ARG);
    assert_string_equal(err.msg, "unknown activation 'Relu' (relu, gelu or silu)");
    assert_int_equal(v, 5);
    assert_int_equal(qkv_enum_parse(QKV_ENUM_PRECISION, NULL, &v, &err), QKV_ERR_ARG);
    assert_string_equal(err.msg, "unknown precision '(null)' (fp32, bf16 or int8)");
    qkv_kv_cache c;
    assert_int_equal(qkv_kv_cache_parse(&c, "fp16", &err), QKV_ERR_ARG);
    assert_string_equal(err.msg, "unknown key-value cache type 'fp16' (auto, fp32 or bf16)");
    assert_int_equal(qkv_enum_parse(QKV_ENUM_SPM_TYPE, "", &v, &err), QKV_ERR_ARG);
    assert_string_equal(err.msg, "unknown SentencePiece model type '' (unigram or bpe)");
    assert_int_equal(qkv_enum_parse(QKV_N_ENUMS, "relu", &v, &err), QKV_ERR_ARG);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_name_round_trips),
        cmocka_unit_test(test_typed_calls),
        cmocka_unit_test(test_unknown_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
