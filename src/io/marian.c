/* SPDX-License-Identifier: MIT */
/* qkv_import_marian: a Hugging Face MarianMT directory (the OPUS-MT models) as a qkv model
 * directory.
 *
 * Marian's Transformer (modeling_marian.py) is the paper's post-norm model with biases on
 * every projection, no final LayerNorm, FFN activation swish (SiLU), GELU or ReLU,
 * sinusoidal positions laid out [sin | cos], embeddings scaled by sqrt(d_model) when
 * scale_embedding, one vocabulary shared by both sides (or two), the output projection tied
 * to the target embedding (or its own lm_head), a final logits bias, decoding started from
 * <pad>, and <pad> never generated (bad_words_ids). Each of these is an option of qkv's
 * encoder-decoder, so the import only renames and reorders:
 *   ids       qkv's vocabularies start with <unk> <pad> <bos> <eos>; Marian's has </s> (0),
 *             <unk>, <pad> (last) and no <bos>. Marian id m becomes qkv id to_qkv[m]: its
 *             specials to qkv's reserved ids, every other token in Marian's order from 4. The
 *             <bos> row that Marian lacks is zero in the embeddings (decoding starts from
 *             <pad>, so it is never an input) and its output bias is -1e9 (exp(-1e9) is 0 in
 *             float: it never takes probability, and log-softmax is Marian's over its own
 *             tokens).
 *   tensors   model.{encoder,decoder}.layers.L.{self_attn,encoder_attn}.{q,k,v,out}_proj,
 *             *_layer_norm, fc1, fc2 -> qkv's names; (out, in) weights are qkv's layout.
 *   weights   model.safetensors or pytorch_model.bin (or shards of either), float32, float16
 *             or bfloat16 (widened exactly), read by hf_dir.c.
 * What qkv cannot represent (another architecture, pre-norm, a LayerNorm on the embeddings,
 * learned positions, other bad words) is refused with the reason. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cJSON.h>

#include "core/internal.h"
#include "io/hf_dir.h"
#include "io/marian.h"

#define ABSENT_LOGIT -1e9f /* the output bias of the <bos> Marian lacks */

/* ---- Hugging Face's config.json --------------------------------------------------------- */

typedef struct {
    int V_src, V_tgt; /* vocab_size, decoder_vocab_size */
    int pad, eos, start;
    int share;    /* share_encoder_decoder_embeddings */
    int tie_out;  /* tie_word_embeddings: the output projection is the target embedding */
    int suppress; /* bad_words_ids == [[pad]] */
    int forced;   /* forced_eos_token_id == eos_token_id */
    qkv_transformer_config cfg;
} hf_config;

/* Marian's options that change the architecture away from what qkv imports: must be false. */
static qkv_status refuse_flags(const cJSON *o, const char *file, qkv_error *err)
{
    static const char *const flags[] = {"normalize_before", "add_final_layer_norm",
                                        "normalize_embedding", "add_bias_logits",
                                        "scale_attention"};
    for (size_t i = 0; i < sizeof flags / sizeof *flags; i++) {
        int v = 0;
        qkv_status st = hf_bool(o, flags[i], 0, &v, file, err);
        if (st) return st;
        if (v)
            return qkv_fail(err, QKV_ERR_FORMAT,
                            "%s: \"%s\": true is not Marian's "
                            "architecture as qkv imports it (post-norm, no extra LayerNorm, no "
                            "extra logits bias)",
                            file, flags[i]);
    }
    int fixed = 1;
    qkv_status st = hf_bool(o, "static_position_embeddings", 1, &fixed, file, err);
    if (!st && !fixed)
        st = qkv_fail(err, QKV_ERR_FORMAT,
                      "%s: learned positions "
                      "(\"static_position_embeddings\": false) are not Marian's sinusoidal "
                      "table",
                      file);
    return st;
}

/* bad_words_ids: none, or [[pad]] (what OPUS-MT's configurations hold) */
static qkv_status read_bad_words(const cJSON *o, int pad, int *suppress, const char *file,
                                 qkv_error *err)
{
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(o, "bad_words_ids");
    *suppress = 0;
    if (!b || cJSON_IsNull(b)) return QKV_OK;
    const cJSON *first = cJSON_IsArray(b) && cJSON_GetArraySize(b) == 1 ? b->child : NULL;
    if (first && cJSON_IsArray(first) && cJSON_GetArraySize(first) == 1 &&
        cJSON_IsNumber(first->child) && first->child->valuedouble == pad)
        return *suppress = 1, QKV_OK;
    return qkv_fail(err, QKV_ERR_FORMAT,
                    "%s: \"bad_words_ids\" other than [[%d]] (the pad "
                    "token): qkv can only keep <pad> from being generated",
                    file, pad);
}

/* config.json's object o (named file in messages) as qkv's configuration. Long: each key of
 * MarianConfig read in turn, then checked together; the list is the function. */
static qkv_status read_config(hf_config *h, const cJSON *o, const char *file, qkv_error *err)
{
    qkv_status st = QKV_OK;
    const char *type = hf_str(o, "model_type", NULL);
    if (!type || strcmp(type, "marian"))
        return qkv_fail(err, QKV_ERR_FORMAT,
                        "%s: \"model_type\" is \"%.60s\", not \"marian\": "
                        "qkv import marian reads MarianMT (OPUS-MT) models only",
                        file, type ? type : "(missing)");
    qkv_transformer_config *c = &h->cfg;
    *c = qkv_transformer_default_config();
    int enc_heads = 0, dec_heads = 0, enc_ffn = 0, dec_ffn = 0, scale = 0;
    /* the defaults are MarianConfig's */
    if (!st) st = hf_int(o, "vocab_size", 58101, &h->V_src, file, err);
    if (!st) st = hf_int(o, "decoder_vocab_size", h->V_src, &h->V_tgt, file, err);
    if (!st) st = hf_int(o, "d_model", 1024, &c->d_model, file, err);
    if (!st) st = hf_int(o, "encoder_layers", 12, &c->enc_layers, file, err);
    if (!st) st = hf_int(o, "decoder_layers", 12, &c->dec_layers, file, err);
    if (!st) st = hf_int(o, "encoder_attention_heads", 16, &enc_heads, file, err);
    if (!st) st = hf_int(o, "decoder_attention_heads", 16, &dec_heads, file, err);
    if (!st) st = hf_int(o, "encoder_ffn_dim", 4096, &enc_ffn, file, err);
    if (!st) st = hf_int(o, "decoder_ffn_dim", 4096, &dec_ffn, file, err);
    if (!st) st = hf_int(o, "max_position_embeddings", 1024, &c->max_len, file, err);
    if (!st) st = hf_int(o, "pad_token_id", 58100, &h->pad, file, err);
    if (!st) st = hf_int(o, "eos_token_id", 0, &h->eos, file, err);
    if (!st) st = hf_int(o, "decoder_start_token_id", h->pad, &h->start, file, err);
    if (!st) st = hf_bool(o, "scale_embedding", 0, &scale, file, err);
    if (!st) st = hf_bool(o, "share_encoder_decoder_embeddings", 1, &h->share, file, err);
    if (!st) st = hf_bool(o, "tie_word_embeddings", 1, &h->tie_out, file, err);
    if (!st) st = refuse_flags(o, file, err);
    if (!st) st = read_bad_words(o, h->pad, &h->suppress, file, err);
    /* absent: MarianConfig's default, 0 (the end token); null: none */
    int forced_id = 0;
    if (cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(o, "forced_eos_token_id"))) forced_id = -1;
    else if (!st) st = hf_int(o, "forced_eos_token_id", 0, &forced_id, file, err);
    if (!st && forced_id >= 0 && forced_id != h->eos)
        st = qkv_fail(err, QKV_ERR_FORMAT,
                      "%s: \"forced_eos_token_id\" %d is not the end "
                      "token (%d)",
                      file, forced_id, h->eos);
    h->forced = forced_id == h->eos;
    const char *act = "gelu";
    if (!st) st = hf_string(o, "activation_function", "gelu", &act, file, err);
    const cJSON *drop = cJSON_GetObjectItemCaseSensitive(o, "dropout");
    if (cJSON_IsNumber(drop) && drop->valuedouble >= 0.0 && drop->valuedouble < 1.0)
        c->dropout = (float)drop->valuedouble;
    if (!st && (enc_heads != dec_heads || enc_ffn != dec_ffn))
        st = qkv_fail(err, QKV_ERR_FORMAT,
                      "%s: the encoder and the decoder differ (heads %d "
                      "and %d, FFN %d and %d): qkv's stacks share one shape",
                      file, enc_heads, dec_heads, enc_ffn, dec_ffn);
    if (!st && h->start != h->pad)
        st = qkv_fail(err, QKV_ERR_FORMAT,
                      "%s: decoding starts from id %d, not the pad token "
                      "(%d): qkv starts Marian models from <pad>",
                      file, h->start, h->pad);
    if (!st && h->share && h->V_src != h->V_tgt)
        st = qkv_fail(err, QKV_ERR_FORMAT,
                      "%s: shared embeddings with vocabularies of %d and "
                      "%d tokens",
                      file, h->V_src, h->V_tgt);
    if (!st) {
        if (!strcmp(act, "swish") || !strcmp(act, "silu")) c->act = QKV_ACT_SILU;
        else if (!strcmp(act, "gelu")) c->act = QKV_ACT_GELU; /* the erf form, as qkv's */
        else if (!strcmp(act, "relu")) c->act = QKV_ACT_RELU;
        else
            st = qkv_fail(err, QKV_ERR_FORMAT,
                          "%s: activation \"%.40s\": qkv has swish "
                          "(silu), gelu and relu",
                          file, act);
    }
    if (st) return st;
    c->src_vocab = h->V_src + 1, c->tgt_vocab = h->V_tgt + 1; /* + the <bos> row */
    c->heads = enc_heads, c->ffn = enc_ffn;
    c->bias = 1, c->pre_norm = 0, c->final_norm = 0, c->learned_pos = 0, c->ln_eps = 1e-5f;
    c->tie = h->share ? (h->tie_out ? QKV_TIE_ALL : QKV_TIE_NONE)
                      : (h->tie_out ? QKV_TIE_OUTPUT : QKV_TIE_NONE);
    c->pos_layout = QKV_POS_HALVES, c->scale_embedding = scale;
    c->decoder_start = QKV_PAD, c->suppress_pad = h->suppress, c->forced_eos = h->forced;
    if ((st = qkv_transformer_config_check(c, err))) {
        char why[sizeof err->msg];
        memcpy(why, err->msg, sizeof why);
        return qkv_fail(err, st, "%s: %s", file, why);
    }
    return QKV_OK;
}

/* ---- vocab.json: Marian's ids, and qkv's order ----------------------------------------- */

typedef struct {
    int rows;    /* Marian's ids 0 .. rows - 1 */
    int *to_qkv; /* (rows) */
    char *text;  /* the qkv vocabulary file, line i = qkv id i */
    size_t len;
} id_map;

static void id_map_free(id_map *v)
{
    free(v->to_qkv), free(v->text);
    memset(v, 0, sizeof *v);
}

static int reserved_of(const char *token)
{
    static const char *const marian[QKV_N_RESERVED] = {"<unk>", "<pad>", NULL, "</s>"};
    for (int r = 0; r < QKV_N_RESERVED; r++)
        if (marian[r] && !strcmp(token, marian[r])) return r;
    return -1;
}

/* A vocabulary object o (token -> Marian id; named file in messages) for rows embedding rows. */
static qkv_status read_vocab(id_map *v, const cJSON *o, const char *file, int rows,
                             const hf_config *h, qkv_error *err)
{
    memset(v, 0, sizeof *v);
    qkv_status st = QKV_OK;
    const char **by_id = calloc((size_t)rows, sizeof *by_id);
    v->to_qkv = malloc((size_t)rows * sizeof *v->to_qkv);
    size_t bytes = 64;
    if (!by_id || !v->to_qkv) st = qkv_fail(err, QKV_ERR_NOMEM, "%s: out of memory", file);
    for (const cJSON *e = o->child; !st && e; e = e->next) {
        const double id = cJSON_IsNumber(e) ? e->valuedouble : -1.0;
        if (id != floor(id) || id < 0 || id >= rows)
            st = qkv_fail(err, QKV_ERR_FORMAT,
                          "%s: token \"%.60s\" has id %g, outside the "
                          "model's %d embedding rows",
                          file, e->string, id, rows);
        else if (by_id[(int)id])
            st = qkv_fail(err, QKV_ERR_FORMAT, "%s: tokens \"%.60s\" and \"%.60s\" share id %d",
                          file, by_id[(int)id], e->string, (int)id);
        else if (!*e->string || strpbrk(e->string, "\r\n"))
            st = qkv_fail(err, QKV_ERR_FORMAT,
                          "%s: id %d: a token that is empty or holds a "
                          "line break cannot be a line of qkv's vocabulary file",
                          file, (int)id);
        else if (!strcmp(e->string, "<bos>") || !strcmp(e->string, "<eos>"))
            st = qkv_fail(err, QKV_ERR_FORMAT,
                          "%s: the token \"%s\" (id %d) would collide "
                          "with qkv's reserved token of that name",
                          file, e->string, (int)id);
        else by_id[(int)id] = e->string, bytes += strlen(e->string) + 1;
    }
    int special[QKV_N_RESERVED] = {-1, -1, -1, -1};
    for (int m = 0; !st && m < rows; m++) {
        if (!by_id[m]) {
            st = qkv_fail(err, QKV_ERR_FORMAT,
                          "%s: no token has id %d (the model has %d "
                          "embedding rows)",
                          file, m, rows);
            break;
        }
        const int r = reserved_of(by_id[m]);
        if (r >= 0) special[r] = m;
    }
    if (!st && (special[QKV_UNK] < 0 || special[QKV_PAD] != h->pad || special[QKV_EOS] != h->eos))
        st = qkv_fail(err, QKV_ERR_FORMAT,
                      "%s: needs <unk>, <pad> with id %d and </s> with id "
                      "%d (config.json's pad_token_id and eos_token_id); has them at %d, %d, %d",
                      file, h->pad, h->eos, special[QKV_UNK], special[QKV_PAD], special[QKV_EOS]);
    if (!st && !(v->text = malloc(bytes)))
        st = qkv_fail(err, QKV_ERR_NOMEM, "%s: out of memory", file);
    if (!st) {
        v->rows = rows;
        v->len = (size_t)sprintf(v->text, "<unk>\n<pad>\n<bos>\n<eos>\n");
        int next = QKV_N_RESERVED;
        for (int m = 0; m < rows; m++) {
            const int r = reserved_of(by_id[m]);
            if (r >= 0) {
                v->to_qkv[m] = r;
                continue;
            }
            v->to_qkv[m] = next++;
            v->len += (size_t)sprintf(v->text + v->len, "%s\n", by_id[m]);
        }
    }
    free(by_id);
    if (st) id_map_free(v);
    return st;
}

/* ---- model.safetensors -> qkv's parameter table --------------------------------------- */

/* Rows (Marian ids) of an embedding or output projection (rows, C) into qkv's order; the
 * <bos> row Marian lacks is zero. transformers 4.38 gives a decoder embedding that is not
 * shared the encoder's vocab_size rows even when decoder_vocab_size is smaller: the rows
 * past the target vocabulary are no token's and are left out. */
static qkv_status copy_rows(hf_importer *im, const char *hf, const char *q, const id_map *ids,
                            int C, qkv_error *err)
{
    const float *src;
    size_t n = 0;
    qkv_status st = hf_import_rows(&src, im, hf, ids->rows, C, !strcmp(q, "tgt_embedding"), err);
    if (st) return st;
    float *dst = hf_import_slot(im, q, &n);
    if (!dst || n != (size_t)(ids->rows + 1) * C)
        return qkv_fail(err, QKV_ERR_ARG, "qkv's '%s' does not fit %s", q, hf);
    memset(dst + (size_t)QKV_BOS * C, 0, (size_t)C * sizeof *dst);
    for (int m = 0; m < ids->rows; m++)
        memcpy(dst + (size_t)ids->to_qkv[m] * C, src + (size_t)m * C, (size_t)C * sizeof *dst);
    return QKV_OK;
}

static qkv_status copy_embeddings(hf_importer *im, const hf_config *h, const id_map *src,
                                  const id_map *tgt, qkv_error *err)
{
    const int C = h->cfg.d_model;
    static const char *const shared[] = {"model.shared.weight", "model.encoder.embed_tokens.weight",
                                         "model.decoder.embed_tokens.weight"};
    static const char *const enc[] = {"model.encoder.embed_tokens.weight", "model.shared.weight"};
    static const char *const dec[] = {"model.decoder.embed_tokens.weight"};
    static const char *const head[] = {"lm_head.weight"};
    const char *e = hf_import_first(im, h->share ? shared : enc, h->share ? 3 : 2);
    const char *d = h->share ? e : hf_import_first(im, dec, 1);
    const char *out = hf_import_first(im, head, 1);
    if (!e || !d)
        return qkv_fail(err, QKV_ERR_FORMAT,
                        "%s: no %s embedding (model.shared.weight or "
                        "model.%s.embed_tokens.weight)",
                        im->file, e ? "decoder" : "encoder", e ? "decoder" : "encoder");
    if (!h->tie_out && !out)
        return qkv_fail(err, QKV_ERR_FORMAT,
                        "%s: tie_word_embeddings is false but there is no "
                        "lm_head.weight",
                        im->file);
    const qkv_tie tie = h->cfg.tie;
    qkv_status st =
        copy_rows(im, e, tie == QKV_TIE_ALL ? "embedding" : "src_embedding", src, C, err);
    if (!st && tie != QKV_TIE_ALL) st = copy_rows(im, d, "tgt_embedding", tgt, C, err);
    if (!st && tie == QKV_TIE_NONE) st = copy_rows(im, out, "output.W", tgt, C, err);
    if (st) return st;
    /* final_logits_bias (1, V) -> output.b, with -1e9 for <bos> */
    const float *b;
    size_t n = 0;
    if ((st = hf_import_get(&b, im, "final_logits_bias", h->V_tgt, 0, err))) return st;
    float *ob = hf_import_slot(im, "output.b", &n);
    for (int m = 0; m < h->V_tgt; m++) ob[tgt->to_qkv[m]] = b[m];
    ob[QKV_BOS] = ABSENT_LOGIT;
    return QKV_OK;
}

/* HF's sinusoidal positions are not parameters; a file that holds them anyway must hold
 * Marian's table, else the model is not one qkv reads. */
static qkv_status check_positions(hf_importer *im, const hf_config *h, qkv_error *err)
{
    static const char *const names[] = {"model.encoder.embed_positions.weight",
                                        "model.decoder.embed_positions.weight"};
    const int T = h->cfg.max_len, C = h->cfg.d_model;
    float *table = NULL;
    for (int k = 0; k < 2; k++) {
        const qkv_tensor *t = hf_weights_peek(im->w, names[k]);
        if (!t) continue;
        const float *p;
        qkv_status st = hf_import_get(&p, im, names[k], T, C, err);
        if (!st && !table && !(table = malloc((size_t)T * C * sizeof *table)))
            st = qkv_fail(err, QKV_ERR_NOMEM, "out of memory");
        if (st) return free(table), st;
        qkv_sinusoidal_table_halves(table, T, C);
        for (size_t i = 0; i < (size_t)T * C; i++)
            if (fabsf(p[i] - table[i]) > 1e-4f) {
                free(table);
                return qkv_fail(err, QKV_ERR_FORMAT,
                                "%s: '%s' is not the [sin | cos] "
                                "sinusoidal table (row %zu, column %zu): learned positions are "
                                "not Marian's",
                                im->file, names[k], i / C, i % C);
            }
    }
    free(table);
    return QKV_OK;
}

static qkv_status read_model(qkv_transformer **out, hf_weights *w, const hf_config *h,
                             const id_map *src, const id_map *tgt, qkv_error *err)
{
    *out = NULL;
    hf_importer im = {w, w->file, NULL, NULL};
    qkv_status st = qkv_transformer_create(&im.m, &h->cfg, 0, err);
    if (!st && !(im.written = calloc((size_t)qkv_transformer_num_tensors(im.m), 1)))
        st = qkv_fail(err, QKV_ERR_NOMEM, "out of memory");
    if (!st) st = copy_embeddings(&im, h, src, tgt, err);
    if (!st) st = hf_import_layers(&im, &h->cfg, err);
    if (!st) st = check_positions(&im, h, err);
    const char *unused = st ? NULL : hf_weights_unused(w);
    if (unused)
        st = qkv_fail(err, QKV_ERR_FORMAT,
                      "%s: tensor '%s' has no place in qkv's model of "
                      "this configuration (an architecture qkv does not import)",
                      w->file, unused);
    for (int i = 0; !st && i < qkv_transformer_num_tensors(im.m); i++)
        if (!im.written[i])
            st = qkv_fail(err, QKV_ERR_FORMAT, "%s: nothing for qkv's tensor '%s'", w->file,
                          qkv_transformer_tensor(im.m, i).name);
    /* weights no reader would load are refused before anything is written */
    if (!st) st = hf_weights_finite(im.m, w->file, err);
    free(im.written);
    if (st) qkv_transformer_free(im.m);
    else *out = im.m;
    return st;
}

/* ---- the model directory --------------------------------------------------------------- */

static qkv_status write_text(const char *dir, const char *name, const char *text, size_t len,
                             qkv_error *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    const void *chunks[1] = {text};
    return qkv_atomic_write(path, chunks, &len, 1, err);
}

qkv_status marian_import_parts(const marian_parts *p, const char *out_dir, qkv_error *err)
{
    hf_config h;
    id_map src = {0}, tgt = {0};
    qkv_transformer *m = NULL;
    qkv_status st = read_config(&h, p->config, p->config_name, err);
    if (!st && h.share && p->tgt_vocab != p->src_vocab)
        st = qkv_fail(err, QKV_ERR_FORMAT,
                      "%s: two vocabularies, but %s shares one embedding "
                      "between them",
                      p->tgt_vocab_name, p->config_name);
    if (!st) st = read_vocab(&src, p->src_vocab, p->src_vocab_name, h.V_src, &h, err);
    if (!st) st = read_vocab(&tgt, p->tgt_vocab, p->tgt_vocab_name, h.V_tgt, &h, err);
    static const char *const spm[] = {"source.spm", "target.spm"};
    for (int i = 0; !st && i < 2; i++)
        st = hf_spm_loads(p->spm[i], p->spm_len[i], p->spm_name[i] ? p->spm_name[i] : spm[i], err);
    if (!st) st = read_model(&m, p->weights, &h, &src, &tgt, err);
    if (!st) st = write_text(out_dir, "src_vocab.txt", src.text, src.len, err);
    if (!st) st = write_text(out_dir, "tgt_vocab.txt", tgt.text, tgt.len, err);
    for (int i = 0; !st && i < 2; i++)
        st = write_text(out_dir, spm[i], p->spm[i], p->spm_len[i], err);
    if (!st) {
        char text_json[512];
        const int n = snprintf(text_json, sizeof text_json,
                               "{\n  \"tokenizer\": \"spm\",\n  \"source_spm\": \"source.spm\",\n"
                               "  \"target_spm\": \"target.spm\",\n  \"detokenize\": \"marian\",\n"
                               "  \"clean_up_spaces\": %s,\n  \"imported_from\": \"marian\"\n}\n",
                               p->clean_up ? "true" : "false");
        st = write_text(out_dir, "text.json", text_json, (size_t)n, err);
    }
    if (!st && p->generation)
        st = write_text(out_dir, "generation.json", p->generation, strlen(p->generation), err);
    /* what was written, read back as translating will read it, before the model: a
     * directory with model.safetensors is complete */
    qkv_tokenizer check = {0};
    if (!st) st = qkv_tokenizer_load(&check, out_dir, err);
    qkv_tokenizer_free(&check);
    if (!st) st = qkv_transformer_save(m, out_dir, err);
    qkv_transformer_free(m);
    id_map_free(&src), id_map_free(&tgt);
    return st;
}

/* tokenizer_config.json's "clean_up_tokenization_spaces" (absent, or no file: true, the
 * default of transformers' tokenizers). */
static qkv_status read_clean_up(int *clean_up, const char *dir, qkv_error *err)
{
    cJSON *o = NULL;
    qkv_status st = hf_json(&o, dir, "tokenizer_config.json", 0, err);
    char file[4096];
    snprintf(file, sizeof file, "%s/tokenizer_config.json", dir);
    if (!st && o) st = hf_bool(o, "clean_up_tokenization_spaces", 1, clean_up, file, err);
    cJSON_Delete(o);
    return st;
}

/* A Hugging Face MarianMT directory. */
static qkv_status import_hf(const char *dir, const char *out_dir, qkv_error *err)
{
    char config[4096], vocab[4096], target_vocab[4096];
    snprintf(config, sizeof config, "%s/config.json", dir);
    snprintf(vocab, sizeof vocab, "%s/vocab.json", dir);
    snprintf(target_vocab, sizeof target_vocab, "%s/target_vocab.json", dir);
    struct stat sb;
    const int separate = !stat(target_vocab, &sb);
    char spm_names[2][4096];
    snprintf(spm_names[0], sizeof spm_names[0], "%s/source.spm", dir);
    snprintf(spm_names[1], sizeof spm_names[1], "%s/target.spm", dir);
    marian_parts p = {.config_name = config,
                      .spm_name = {spm_names[0], spm_names[1]},
                      .src_vocab_name = vocab,
                      .tgt_vocab_name = separate ? target_vocab : vocab,
                      .clean_up = 1};
    cJSON *o = NULL, *sv = NULL, *tv = NULL;
    hf_weights w = {0};
    char *spm[2] = {NULL, NULL};
    qkv_status st = hf_json(&o, dir, "config.json", 1, err);
    if (!st) st = hf_json(&sv, dir, "vocab.json", 1, err);
    if (!st && separate) st = hf_json(&tv, dir, "target_vocab.json", 1, err);
    /* both SentencePiece models before the weights: translating needs them */
    static const char *const names[] = {"source.spm", "target.spm"};
    for (int i = 0; !st && i < 2; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (stat(path, &sb))
            st = qkv_fail(err, QKV_ERR_IO,
                          "%s: missing (a MarianMT directory has source.spm "
                          "and target.spm, its SentencePiece models)",
                          path);
        else st = qkv_read_regular_file(path, QKV_MAX_VOCAB_FILE_BYTES, &spm[i], &p.spm_len[i],
                                        err);
    }
    if (!st) st = read_clean_up(&p.clean_up, dir, err);
    char *generation = NULL;
    if (!st) st = hf_generation(&generation, dir, err);
    p.generation = generation;
    if (!st) st = hf_weights_load(&w, dir, err);
    if (!st) {
        p.config = o, p.src_vocab = sv, p.tgt_vocab = separate ? tv : sv, p.weights = &w;
        p.spm[0] = spm[0], p.spm[1] = spm[1];
        st = marian_import_parts(&p, out_dir, err);
    }
    hf_weights_free(&w);
    cJSON_Delete(o), cJSON_Delete(sv), cJSON_Delete(tv);
    free(spm[0]), free(spm[1]), free(generation);
    return st;
}

qkv_status qkv_import_marian(const char *source, const char *out_dir, qkv_error *err)
{
    qkv_status st = hf_output_apart(out_dir, source, err);
    if (st) return st;
    if (marian_is_release(source)) return marian_import_release(source, out_dir, err);
    return import_hf(source, out_dir, err);
}
