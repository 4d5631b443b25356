/* SPDX-License-Identifier: MIT */
/* qkv_import_m2m100: a Hugging Face M2M100 or NLLB-200 directory (one architecture in
 * transformers, M2M100ForConditionalGeneration) as a qkv model directory.
 *
 * The model is fairseq's pre-norm Transformer: a LayerNorm before each sublayer and one after
 * each stack (encoder.layer_norm, decoder.layer_norm), biases everywhere, ReLU (or the
 * configured activation), embeddings scaled by sqrt(d_model) when scale_embedding, fairseq's
 * sinusoidal positions counted from the padding index, one embedding for both sides and
 * (tie_word_embeddings) the output, no logits bias; decoding starts from </s>, with the
 * target-language token forced as the first generated token. Each is an option of qkv's
 * encoder-decoder:
 *   ids       fairseq's dictionary starts <s> <pad> </s> <unk>, qkv's <unk> <pad> <bos> <eos>:
 *             the first four are permuted, every other id is kept. The tokens: NLLB's are the
 *             SentencePiece model's pieces at their id + 1 (NllbTokenizer's fairseq offset),
 *             M2M100's vocab.json's; then the tokenizer's added tokens (tokenizer_config.json's
 *             added_tokens_decoder: the language tokens "deu_Latn" or "__de__", <mask>), or
 *             without it the tokenizer's own order of its language codes.
 *   tensors   the BART-family names (hf_dir.c's hf_import_layers), and the final LayerNorms.
 *   text      text.json: the SentencePiece model on both sides, the detokenisation of
 *             NllbTokenizer or M2M100Tokenizer, the language codes and their tokens (a source
 *             starts with its language's token; the target's is forced first).
 * What qkv cannot represent (another architecture, a mixture of experts, a LayerNorm on the
 * embeddings, another dictionary) is refused with the reason. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/internal.h"
#include "io/hf_dir.h"

/* transformers' FAIRSEQ_LANGUAGE_CODES["m2m100"]: M2M100Tokenizer's languages, in the order of
 * their ids after vocab.json, for a directory whose tokenizer_config.json lists none. */
static const char *const M2M100_CODES[] = {
    "af", "am", "ar", "ast", "az", "ba", "be", "bg", "bn", "br", "bs", "ca", "ceb", "cs", "cy",
    "da", "de", "el", "en", "es", "et", "fa", "ff", "fi", "fr", "fy", "ga", "gd", "gl", "gu",
    "ha", "he", "hi", "hr", "ht", "hu", "hy", "id", "ig", "ilo", "is", "it", "ja", "jv", "ka",
    "kk", "km", "kn", "ko", "lb", "lg", "ln", "lo", "lt", "lv", "mg", "mk", "ml", "mn", "mr",
    "ms", "my", "ne", "nl", "no", "ns", "oc", "or", "pa", "pl", "ps", "pt", "ro", "ru", "sd",
    "si", "sk", "sl", "so", "sq", "sr", "ss", "su", "sv", "sw", "ta", "th", "tl", "tn", "tr",
    "uk", "ur", "uz", "vi", "wo", "xh", "yi", "yo", "zh", "zu"};

typedef struct {
    int nllb; /* 1: NllbTokenizer's conventions, 0: M2M100Tokenizer's */
    int V, eos_forced, tie_out, clean_up;
    qkv_transformer_config cfg;
    char **tokens; /* (V) by Hugging Face id; NULL where nothing names the id */
    char src_lang[64], tgt_lang[64];
} m2m;

static void m2m_free(m2m *h)
{
    for (int i = 0; h->tokens && i < h->V; i++) free(h->tokens[i]);
    free(h->tokens);
}

static qkv_status read_config(m2m *h, const char *dir, qkv_error *err)
{
    char file[4096];
    snprintf(file, sizeof file, "%s/config.json", dir);
    cJSON *o = NULL;
    qkv_status st = hf_json(&o, dir, "config.json", 1, err);
    if (st) return st;
    const char *type = hf_str(o, "model_type", NULL);
    if (!type || (strcmp(type, "m2m_100") && strcmp(type, "m2m100")))
        st = qkv_fail(err, QKV_ERR_FORMAT, "%s: \"model_type\" is \"%.60s\", not \"m2m_100\" "
                      "(M2M100 and NLLB-200's dense models; a mixture of experts is not "
                      "imported)", file, type ? type : "(missing)");
    qkv_transformer_config *c = &h->cfg;
    *c = qkv_transformer_default_config();
    int heads[2] = {0, 0}, ffn[2] = {0, 0}, ids[5] = {0}, scale = 1, forced = -1;
    static const struct {
        const char *key;
        int def;
    } specials[5] = {{"bos_token_id", 0}, {"pad_token_id", 1}, {"eos_token_id", 2},
                     {"decoder_start_token_id", 2}, {"forced_eos_token_id", 2}};
    /* the defaults are M2M100Config's */
    if (!st) st = hf_int(o, "vocab_size", 128112, &h->V, file, err);
    if (!st) st = hf_int(o, "d_model", 1024, &c->d_model, file, err);
    if (!st) st = hf_int(o, "encoder_layers", 12, &c->enc_layers, file, err);
    if (!st) st = hf_int(o, "decoder_layers", 12, &c->dec_layers, file, err);
    if (!st) st = hf_int(o, "encoder_attention_heads", 16, &heads[0], file, err);
    if (!st) st = hf_int(o, "decoder_attention_heads", 16, &heads[1], file, err);
    if (!st) st = hf_int(o, "encoder_ffn_dim", 4096, &ffn[0], file, err);
    if (!st) st = hf_int(o, "decoder_ffn_dim", 4096, &ffn[1], file, err);
    if (!st) st = hf_int(o, "max_position_embeddings", 1024, &c->max_len, file, err);
    if (!st) st = hf_bool(o, "scale_embedding", 1, &scale, file, err);
    if (!st) st = hf_bool(o, "tie_word_embeddings", 1, &h->tie_out, file, err);
    for (int i = 0; !st && i < 5; i++) st = hf_int(o, specials[i].key, specials[i].def, &ids[i], file, err);
    forced = ids[4];
    if (cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(o, "forced_eos_token_id"))) forced = -1;
    if (!st && (ids[0] != 0 || ids[1] != 1 || ids[2] != 2))
        st = qkv_fail(err, QKV_ERR_FORMAT, "%s: <s> <pad> </s> at ids %d %d %d, not fairseq's "
                      "0 1 2", file, ids[0], ids[1], ids[2]);
    if (!st && ids[3] != 2)
        st = qkv_fail(err, QKV_ERR_FORMAT, "%s: decoding starts from id %d, not </s> (2): not "
                      "M2M100's decoding", file, ids[3]);
    if (!st && forced >= 0 && forced != 2)
        st = qkv_fail(err, QKV_ERR_FORMAT, "%s: \"forced_eos_token_id\" %d is not </s>", file,
                      forced);
    if (!st && (heads[0] != heads[1] || ffn[0] != ffn[1]))
        st = qkv_fail(err, QKV_ERR_FORMAT, "%s: the encoder and the decoder differ (heads %d "
                      "and %d, FFN %d and %d): qkv's stacks share one shape", file, heads[0],
                      heads[1], ffn[0], ffn[1]);
    const char *act = "relu";
    if (!st) st = hf_string(o, "activation_function", "relu", &act, file, err);
    if (!st) {
        if (!strcmp(act, "relu")) c->act = QKV_ACT_RELU;
        else if (!strcmp(act, "gelu")) c->act = QKV_ACT_GELU;
        else if (!strcmp(act, "swish") || !strcmp(act, "silu")) c->act = QKV_ACT_SILU;
        else st = qkv_fail(err, QKV_ERR_FORMAT, "%s: activation \"%.40s\": qkv has relu, gelu "
                           "and swish (silu)", file, act);
    }
    cJSON_Delete(o);
    if (st) return st;
    h->eos_forced = forced == 2;
    c->src_vocab = c->tgt_vocab = h->V;
    c->heads = heads[0], c->ffn = ffn[0], c->dropout = 0.0f;
    c->bias = 1, c->pre_norm = 1, c->final_norm = 1, c->learned_pos = 0, c->ln_eps = 1e-5f;
    c->tie = h->tie_out ? QKV_TIE_ALL : QKV_TIE_NONE;
    c->pos_layout = QKV_POS_FAIRSEQ, c->scale_embedding = scale;
    c->decoder_start = QKV_EOS, c->suppress_pad = 0, c->forced_eos = h->eos_forced;
    if ((st = qkv_transformer_config_check(c, err))) {
        char why[sizeof err->msg];
        memcpy(why, err->msg, sizeof why);
        return qkv_fail(err, st, "%s: %s", file, why);
    }
    return QKV_OK;
}

/* ---- the dictionary ----------------------------------------------------------------- */

static qkv_status put(m2m *h, int id, const char *token, const char *file, qkv_error *err)
{
    if (id < 0 || id >= h->V)
        return qkv_fail(err, QKV_ERR_FORMAT, "%s: token \"%.60s\" has id %d, outside the model's "
                        "%d embedding rows", file, token, id, h->V);
    if (!*token || strpbrk(token, "\r\n"))
        return qkv_fail(err, QKV_ERR_FORMAT, "%s: id %d: a token that is empty or holds a line "
                        "break cannot be a line of qkv's vocabulary file", file, id);
    char *copy = strdup(token);
    if (!copy) return qkv_fail(err, QKV_ERR_NOMEM, "out of memory");
    free(h->tokens[id]);
    h->tokens[id] = copy;
    return QKV_OK;
}

static int is_nllb_code(const char *s)
{
    return strlen(s) == 8 && islower((unsigned char)s[0]) && islower((unsigned char)s[1]) &&
           islower((unsigned char)s[2]) && s[3] == '_' && isupper((unsigned char)s[4]);
}

/* A language token's code ("deu_Latn"; "__de__" -> "de"), or NULL. */
static const char *code_of(const m2m *h, const char *token, char *buf, size_t cap)
{
    if (h->nllb) return is_nllb_code(token) ? token : NULL;
    const size_t n = strlen(token);
    if (n < 5 || n - 4 >= cap || strncmp(token, "__", 2) || strcmp(token + n - 2, "__")) return NULL;
    memcpy(buf, token + 2, n - 4), buf[n - 4] = '\0';
    return buf;
}

static qkv_status read_tokens(m2m *h, const char *dir, qkv_error *err)
{
    char file[4096];
    if (!(h->tokens = calloc((size_t)h->V, sizeof *h->tokens)))
        return qkv_fail(err, QKV_ERR_NOMEM, "out of memory");
    static const char *const specials[] = {"<s>", "<pad>", "</s>", "<unk>"};
    qkv_status st = QKV_OK;
    for (int i = 0; !st && i < 4; i++) st = put(h, i, specials[i], "config.json", err);
    cJSON *tc = NULL;
    if (!st) st = hf_json(&tc, dir, "tokenizer_config.json", 0, err);
    snprintf(file, sizeof file, "%s/tokenizer_config.json", dir);
    const char *cls = hf_str(tc, "tokenizer_class", NULL);
    if (!st && cls && !strstr(cls, h->nllb ? "Nllb" : "M2M100"))
        st = qkv_fail(err, QKV_ERR_FORMAT, "%s: \"tokenizer_class\" is \"%.60s\": import it "
                      "with qkv import %s", file, cls, h->nllb ? "m2m100" : "nllb");
    if (!st) st = hf_bool(tc, "clean_up_tokenization_spaces", 1, &h->clean_up, file, err);
    snprintf(h->src_lang, sizeof h->src_lang, "%s", hf_str(tc, "src_lang", ""));
    snprintf(h->tgt_lang, sizeof h->tgt_lang, "%s", hf_str(tc, "tgt_lang", ""));
    int base = 0; /* the first id after the pieces */
    if (!st && h->nllb) {
        qkv_spm *sp = NULL;
        snprintf(file, sizeof file, "%s/sentencepiece.bpe.model", dir);
        st = qkv_spm_load(&sp, file, err);
        const int n = st ? 0 : qkv_spm_size(sp);
        for (int k = 3; !st && k < n; k++) st = put(h, k + 1, qkv_spm_piece(sp, k), file, err);
        base = n + 1;
        qkv_spm_free(sp);
    } else if (!st) {
        cJSON *v = NULL;
        snprintf(file, sizeof file, "%s/vocab.json", dir);
        st = hf_json(&v, dir, "vocab.json", 1, err);
        for (const cJSON *e = v ? v->child : NULL; !st && e; e = e->next) {
            if (!cJSON_IsNumber(e))
                st = qkv_fail(err, QKV_ERR_FORMAT, "%s: \"%.60s\" has no id", file, e->string);
            else if (e->valueint >= 4) st = put(h, e->valueint, e->string, file, err);
            if (e->valueint >= base) base = e->valueint + 1;
        }
        cJSON_Delete(v);
    }
    /* the added tokens: language tokens, <mask>; by id where the file says, else in the
     * tokenizer's own order */
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(tc, "added_tokens_decoder");
    snprintf(file, sizeof file, "%s/tokenizer_config.json", dir);
    for (const cJSON *e = cJSON_IsObject(added) ? added->child : NULL; !st && e; e = e->next) {
        const char *content = hf_str(e, "content", NULL);
        char *end;
        const long id = strtol(e->string, &end, 10);
        if (!content || *end) st = qkv_fail(err, QKV_ERR_FORMAT, "%s: added token \"%.40s\" "
                                            "without an id and a content", file, e->string);
        else if (id >= 4) st = put(h, (int)id, content, file, err);
    }
    if (!st && !cJSON_IsObject(added)) {
        if (h->nllb) {
            const cJSON *codes = cJSON_GetObjectItemCaseSensitive(tc, "additional_special_tokens");
            int k = 0;
            for (const cJSON *e = cJSON_IsArray(codes) ? codes->child : NULL; !st && e; e = e->next)
                if (cJSON_IsString(e)) st = put(h, base + k++, e->valuestring, file, err);
            if (!st) st = put(h, base + k, "<mask>", file, err);
        } else {
            for (size_t k = 0; !st && k < sizeof M2M100_CODES / sizeof *M2M100_CODES; k++) {
                char t[16];
                snprintf(t, sizeof t, "__%s__", M2M100_CODES[k]);
                st = put(h, base + (int)k, t, file, err);
            }
        }
    }
    cJSON_Delete(tc);
    for (int i = 0; !st && i < h->V; i++) { /* ids nothing names: the model's spare rows */
        char t[32];
        snprintf(t, sizeof t, "<unused%d>", i);
        if (!h->tokens[i]) st = put(h, i, t, "config.json", err);
    }
    return st;
}

/* fairseq id -> qkv id: the first four permuted, the rest kept. */
static int to_qkv(int id)
{
    static const int first[4] = {QKV_BOS, QKV_PAD, QKV_EOS, QKV_UNK};
    return id < 4 ? first[id] : id;
}

static qkv_status write_file(const char *dir, const char *name, const char *text, size_t len,
                             qkv_error *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    const void *chunk = text;
    return qkv_atomic_write(path, &chunk, &len, 1, err);
}

static qkv_status write_vocab(const m2m *h, const char *out, qkv_error *err)
{
    size_t bytes = 64;
    for (int i = 0; i < h->V; i++) bytes += strlen(h->tokens[i]) + 1;
    char *text = malloc(bytes);
    if (!text) return qkv_fail(err, QKV_ERR_NOMEM, "out of memory");
    size_t n = (size_t)sprintf(text, "<unk>\n<pad>\n<bos>\n<eos>\n");
    qkv_status st = QKV_OK;
    for (int i = 4; !st && i < h->V; i++) {
        if (!strcmp(h->tokens[i], "<unk>") || !strcmp(h->tokens[i], "<pad>") ||
            !strcmp(h->tokens[i], "<bos>") || !strcmp(h->tokens[i], "<eos>"))
            st = qkv_fail(err, QKV_ERR_FORMAT, "the token \"%s\" (id %d) would collide with "
                          "qkv's reserved token of that name", h->tokens[i], i);
        n += (size_t)sprintf(text + n, "%s\n", h->tokens[i]);
    }
    if (!st) st = write_file(out, "src_vocab.txt", text, n, err);
    if (!st) st = write_file(out, "tgt_vocab.txt", text, n, err);
    free(text);
    return st;
}

/* ---- weights ------------------------------------------------------------------------ */

/* An embedding or output matrix (V, C) into qkv's id order. */
static qkv_status copy_rows(hf_importer *im, const char *hf, const char *q, int V, int C,
                            qkv_error *err)
{
    const float *src;
    size_t n = 0;
    qkv_status st = hf_import_get(&src, im, hf, V, C, err);
    if (st) return st;
    float *dst = hf_import_slot(im, q, &n);
    if (!dst || n != (size_t)V * C)
        return qkv_fail(err, QKV_ERR_ARG, "qkv's '%s' does not fit %s", q, hf);
    for (int i = 0; i < V; i++)
        memcpy(dst + (size_t)to_qkv(i) * C, src + (size_t)i * C, (size_t)C * sizeof *dst);
    return QKV_OK;
}

static qkv_status read_model(qkv_transformer **out, hf_weights *w, const m2m *h, qkv_error *err)
{
    const qkv_transformer_config *c = &h->cfg;
    hf_importer im = {w, w->file, NULL, NULL};
    qkv_status st = qkv_transformer_create(&im.m, c, 0, err);
    if (!st && !(im.written = calloc((size_t)qkv_transformer_num_tensors(im.m), 1)))
        st = qkv_fail(err, QKV_ERR_NOMEM, "out of memory");
    static const char *const shared[] = {"model.shared.weight", "model.encoder.embed_tokens.weight",
                                         "model.decoder.embed_tokens.weight"};
    static const char *const head[] = {"lm_head.weight"};
    static const char *const positions[] = {"model.encoder.embed_positions.weights",
                                            "model.decoder.embed_positions.weights"};
    const char *e = st ? NULL : hf_import_first(&im, shared, 3);
    const char *o = st ? NULL : hf_import_first(&im, head, 1);
    hf_import_first(&im, positions, 2); /* fairseq's table, computed: never a parameter */
    if (!st && !e) st = qkv_fail(err, QKV_ERR_FORMAT, "%s: no model.shared.weight", w->file);
    if (!st && !h->tie_out && !o)
        st = qkv_fail(err, QKV_ERR_FORMAT, "%s: tie_word_embeddings is false but there is no "
                      "lm_head.weight", w->file);
    const int V = h->V, C = c->d_model;
    if (!st && c->tie == QKV_TIE_ALL) st = copy_rows(&im, e, "embedding", V, C, err);
    if (!st && c->tie == QKV_TIE_NONE) st = copy_rows(&im, e, "src_embedding", V, C, err);
    if (!st && c->tie == QKV_TIE_NONE) st = copy_rows(&im, e, "tgt_embedding", V, C, err);
    if (!st && c->tie == QKV_TIE_NONE) st = copy_rows(&im, o, "output.W", V, C, err);
    size_t n = 0;
    float *b = st ? NULL : hf_import_slot(&im, "output.b", &n);
    if (b) memset(b, 0, n * sizeof *b); /* M2M100 has no logits bias */
    if (!st) st = hf_import_layers(&im, c, err);
    for (int s = 0; !st && s < 2; s++)
        for (int k = 0; !st && k < 2; k++) {
            char hf[96], q[64];
            const char *stack = s ? "decoder" : "encoder";
            snprintf(hf, sizeof hf, "model.%s.layer_norm.%s", stack, k ? "bias" : "weight");
            snprintf(q, sizeof q, "%s.norm.%s", stack, k ? "beta" : "gamma");
            st = hf_import_copy(&im, hf, q, err);
        }
    const char *unused = st ? NULL : hf_weights_unused(w);
    if (unused)
        st = qkv_fail(err, QKV_ERR_FORMAT, "%s: tensor '%s' has no place in qkv's model of this "
                      "configuration (an architecture qkv does not import)", w->file, unused);
    for (int i = 0; !st && i < qkv_transformer_num_tensors(im.m); i++)
        if (!im.written[i])
            st = qkv_fail(err, QKV_ERR_FORMAT, "%s: nothing for qkv's tensor '%s'", w->file,
                          qkv_transformer_tensor(im.m, i).name);
    free(im.written);
    if (st) qkv_transformer_free(im.m);
    else *out = im.m;
    return st;
}

/* ---- text.json and generation.json -------------------------------------------------- */

static qkv_status write_text_json(const m2m *h, const char *out, qkv_error *err)
{
    cJSON *o = cJSON_CreateObject(), *langs = cJSON_CreateObject();
    int ok = o && langs;
    ok = ok && cJSON_AddStringToObject(o, "tokenizer", "spm") &&
         cJSON_AddStringToObject(o, "source_spm", "source.spm") &&
         cJSON_AddStringToObject(o, "target_spm", "target.spm") &&
         cJSON_AddStringToObject(o, "detokenize", h->nllb ? "nllb" : "m2m100") &&
         cJSON_AddBoolToObject(o, "clean_up_spaces", h->clean_up);
    for (int i = 4; ok && i < h->V; i++) {
        char buf[64];
        const char *code = code_of(h, h->tokens[i], buf, sizeof buf);
        if (code) ok = cJSON_AddStringToObject(langs, code, h->tokens[i]) != NULL;
    }
    ok = ok && cJSON_AddItemToObject(o, "languages", langs);
    if (ok) langs = NULL;
    ok = ok && cJSON_AddStringToObject(o, "language_source", "prefix") &&
         cJSON_AddStringToObject(o, "language_target", "forced");
    if (ok && *h->src_lang) ok = cJSON_AddStringToObject(o, "source_lang", h->src_lang) != NULL;
    if (ok && *h->tgt_lang) ok = cJSON_AddStringToObject(o, "target_lang", h->tgt_lang) != NULL;
    ok = ok && cJSON_AddStringToObject(o, "imported_from", h->nllb ? "nllb" : "m2m100");
    char *text = ok ? cJSON_Print(o) : NULL;
    cJSON_Delete(o), cJSON_Delete(langs);
    if (!text) return qkv_fail(err, QKV_ERR_NOMEM, "out of memory");
    qkv_status st = write_file(out, "text.json", text, strlen(text), err);
    free(text);
    return st;
}

static qkv_status import(const char *dir, const char *out, int nllb, qkv_error *err)
{
    m2m h = {.nllb = nllb, .clean_up = 1};
    hf_weights w = {0};
    qkv_transformer *m = NULL;
    char spm[4096], *bytes = NULL;
    size_t len = 0;
    snprintf(spm, sizeof spm, "%s/sentencepiece.bpe.model", dir);
    qkv_status st = hf_output_apart(out, dir, err);
    if (!st) st = read_config(&h, dir, err);
    if (!st) st = read_tokens(&h, dir, err);
    if (!st) st = qkv_read_regular_file(spm, QKV_MAX_VOCAB_FILE_BYTES, &bytes, &len, err);
    if (!st) st = hf_spm_loads(bytes, len, spm, err);
    if (!st) st = hf_weights_load(&w, dir, err);
    if (!st) st = read_model(&m, &w, &h, err);
    if (!st) st = hf_weights_finite(m, w.file, err);
    hf_weights_free(&w);
    char *generation = NULL; /* read before anything is written: it can be refused */
    if (!st) st = hf_generation(&generation, dir, err);
    if (!st) st = write_vocab(&h, out, err);
    if (!st) st = write_file(out, "source.spm", bytes, len, err);
    if (!st) st = write_file(out, "target.spm", bytes, len, err);
    if (!st) st = write_text_json(&h, out, err);
    if (!st) st = write_file(out, "generation.json", generation, strlen(generation), err);
    free(generation);
    qkv_tokenizer check = {0}; /* what was written, read back as translating reads it */
    if (!st) st = qkv_tokenizer_load(&check, out, err);
    qkv_tokenizer_free(&check);
    if (!st) st = qkv_transformer_save(m, out, err); /* last: the directory is then whole */
    qkv_transformer_free(m);
    free(bytes);
    m2m_free(&h);
    return st;
}

qkv_status qkv_import_m2m100(const char *hf_dir, const char *out_dir, qkv_error *err)
{
    return import(hf_dir, out_dir, 0, err);
}

qkv_status qkv_import_nllb(const char *hf_dir, const char *out_dir, qkv_error *err)
{
    return import(hf_dir, out_dir, 1, err);
}
