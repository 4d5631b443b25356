/* SPDX-License-Identifier: MIT */
/* qkv_export_ct2: a qkv encoder-decoder as a CTranslate2 model directory, the format that
 * CTranslate2 (and LibreTranslate and Argos Translate over it) runs:
 *
 *   model.bin     u32 6 (the binary version), the spec's name "TransformerSpec", u32 its
 *                 revision (7), u32 n; n variables: name, u8 rank, u32 dims, u8 dtype
 *                 (0 float32, 1 int8, 2 int16), u32 bytes, the bytes (little-endian,
 *                 row-major); u32 m; m aliases: name, name of the variable it is
 *   config.json   special tokens, the decoder's start token, source <bos>/<eos>, ln epsilon
 *   shared_vocabulary.json, or source_vocabulary.json and target_vocabulary.json
 *
 * (strings: u16 length with the NUL, the bytes, NUL), with the variables CTranslate2's
 * python spec (ctranslate2.specs.TransformerSpec) writes, in its order, so that its
 * converters and this one make the same file:
 *   encoder/embeddings_0, decoder/embeddings       qkv's embeddings (scale_embeddings:
 *                                                  times sqrt(d_model) as qkv's option says)
 *   STACK/position_encodings/encodings             qkv's table as qkv computes it (either
 *                                                  sinusoidal layout) or its learned rows
 *   STACK/layer_L/self_attention/linear_0          [W_q; W_k; W_v] fused, linear_1 W_o
 *   decoder/layer_L/attention/linear_0, 1, 2       W_q, [W_k; W_v], W_o of cross-attention
 *   STACK/layer_L/{self_attention,attention,ffn}/layer_norm, ffn/linear_0, linear_1
 *   STACK/layer_norm                               the final LayerNorms (final_norm)
 * (STACK: encoder or decoder)
 *   decoder/projection                             output.W (or the tied embedding), output.b
 * Tied matrices are one variable and aliases, as CTranslate2 writes them. int8 quantises
 * every linear and embedding matrix row by row as CTranslate2's converters do (scale =
 * 127 / max |row|, values rounded half to even). A model that never generates <pad>
 * (suppress_pad) has its <pad> logit biased by -1e9: CTranslate2 has no such option, and
 * <pad> then has no probability (qkv's log-probabilities keep <pad> in their normaliser, so
 * beam scores can differ slightly where <pad> was likely; greedy output is the same). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cJSON.h>

#include "core/internal.h"

#define CT2_BINARY_VERSION 6
#define CT2_SPEC_REVISION 7
#define ABSENT_LOGIT -1e9f

enum { CT2_F32 = 0, CT2_I8 = 1, CT2_I16 = 2 };

typedef struct {
    char name[128];
    int dtype, rank;
    uint32_t shape[2];
    const void *data;
    size_t bytes;
} ct2_var;

typedef struct {
    ct2_var *v;
    int n, cap;
    char (*alias)[2][128];
    int n_alias;
    void **owned; /* buffers made here (fused, quantised, scalars, tables) */
    int n_owned, cap_owned;
    int int8;
    qkv_error *err;
} ct2_model;

static void *own(ct2_model *m, size_t bytes)
{
    if (m->n_owned == m->cap_owned) {
        const int cap = m->cap_owned ? 2 * m->cap_owned : 64;
        void **o = realloc(m->owned, (size_t)cap * sizeof *o);
        if (!o) return NULL;
        m->owned = o, m->cap_owned = cap;
    }
    void *p = malloc(bytes ? bytes : 1);
    if (p) m->owned[m->n_owned++] = p;
    return p;
}

static qkv_status nomem(ct2_model *m)
{
    return qkv_fail(m->err, QKV_ERR_NOMEM, "out of memory writing the CTranslate2 model");
}

static qkv_status add(ct2_model *m, const char *name, int dtype, int rank, uint32_t d0,
                      uint32_t d1, const void *data, size_t bytes)
{
    if (m->n == m->cap) {
        const int cap = m->cap ? 2 * m->cap : 128;
        ct2_var *v = realloc(m->v, (size_t)cap * sizeof *v);
        if (!v) return nomem(m);
        m->v = v, m->cap = cap;
    }
    ct2_var *v = &m->v[m->n++];
    snprintf(v->name, sizeof v->name, "%s", name);
    v->dtype = dtype, v->rank = rank, v->shape[0] = d0, v->shape[1] = d1;
    v->data = data, v->bytes = bytes;
    return QKV_OK;
}

static qkv_status scalar(ct2_model *m, const char *name, int dtype, int value)
{
    const size_t bytes = dtype == CT2_I16 ? 2 : 1;
    unsigned char *p = own(m, bytes);
    if (!p) return nomem(m);
    p[0] = (unsigned char)(value & 0xff);
    if (bytes == 2) p[1] = (unsigned char)((value >> 8) & 0xff);
    return add(m, name, dtype, 0, 0, 0, p, bytes);
}

static qkv_status alias(ct2_model *m, const char *name, const char *target)
{
    char(*a)[2][128] = realloc(m->alias, (size_t)(m->n_alias + 1) * sizeof *a);
    if (!a) return nomem(m);
    m->alias = a;
    snprintf(a[m->n_alias][0], 128, "%s", name);
    snprintf(a[m->n_alias][1], 128, "%s", target);
    m->n_alias++;
    return QKV_OK;
}

/* A (rows, cols) matrix prefix/weight: float32, or int8 with prefix/weight_scale (one scale
 * per row: 127 / max |w|, as CTranslate2's _quantize computes it in float32). */
static qkv_status matrix(ct2_model *m, const char *prefix, const float *w, int rows, int cols)
{
    char name[128];
    snprintf(name, sizeof name, "%s/weight", prefix);
    const size_t n = (size_t)rows * cols;
    if (!m->int8) return add(m, name, CT2_F32, 2, (uint32_t)rows, (uint32_t)cols, w, n * 4);
    signed char *q = own(m, n);
    float *scale = own(m, (size_t)rows * sizeof *scale);
    if (!q || !scale) return nomem(m);
    for (int r = 0; r < rows; r++) {
        const float *row = w + (size_t)r * cols;
        float amax = 0.0f;
        for (int c = 0; c < cols; c++) amax = fmaxf(amax, fabsf(row[c]));
        if (amax == 0.0f) amax = 127.0f;
        amax = fmaxf(amax, 127.0f / 3.40282347e38f);
        scale[r] = 127.0f / amax;
        for (int c = 0; c < cols; c++) {
            const float v = nearbyintf(row[c] * scale[r]); /* half to even, as np.rint */
            q[(size_t)r * cols + c] = (signed char)(v > 127.0f ? 127 : v < -128.0f ? -128 : v);
        }
    }
    qkv_status st = add(m, name, CT2_I8, 2, (uint32_t)rows, (uint32_t)cols, q, n);
    snprintf(name, sizeof name, "%s/weight_scale", prefix);
    return st ? st : add(m, name, CT2_F32, 1, (uint32_t)rows, 0, scale, (size_t)rows * 4);
}

static qkv_status vector(ct2_model *m, const char *name, const float *v, int n)
{
    return add(m, name, CT2_F32, 1, (uint32_t)n, 0, v, (size_t)n * 4);
}

/* ---- qkv's tensors ------------------------------------------------------------------ */

typedef struct {
    const qkv_transformer *t;
    const float *params;
} source;

static const float *tensor(const source *s, const char *name)
{
    for (int i = 0; i < qkv_transformer_num_tensors(s->t); i++) {
        const qkv_param_info p = qkv_transformer_tensor(s->t, i);
        if (!strcmp(p.name, name)) return s->params + p.offset;
    }
    return NULL;
}

/* The rows of the named tensors one after the other (W_q; W_k; W_v), each (rows, cols). */
static const float *fused(ct2_model *m, const source *s, const char *const *names, int k,
                          size_t each)
{
    float *out = own(m, (size_t)k * each * sizeof *out);
    for (int i = 0; out && i < k; i++) {
        const float *t = tensor(s, names[i]);
        if (!t) return NULL;
        memcpy(out + (size_t)i * each, t, each * sizeof *out);
    }
    return out;
}

static qkv_status linear(ct2_model *m, const source *s, const char *prefix, const char *qkv,
                         const char *parts, int rows_each, int cols, int bias)
{
    const int k = (int)strlen(parts);
    char wn[4][96], bn[4][96];
    const char *w[4], *b[4];
    for (int i = 0; i < k; i++) {
        snprintf(wn[i], sizeof wn[i], "%s.W_%c", qkv, parts[i]);
        snprintf(bn[i], sizeof bn[i], "%s.b_%c", qkv, parts[i]);
        w[i] = wn[i], b[i] = bn[i];
    }
    const float *W = fused(m, s, w, k, (size_t)rows_each * cols);
    if (!W) return qkv_fail(m->err, QKV_ERR_FORMAT, "the model has no %s.W_%c", qkv, parts[0]);
    qkv_status st = matrix(m, prefix, W, k * rows_each, cols);
    if (st || !bias) return st;
    const float *B = fused(m, s, b, k, (size_t)rows_each);
    if (!B) return qkv_fail(m->err, QKV_ERR_FORMAT, "the model has no %s.b_%c", qkv, parts[0]);
    char name[128];
    snprintf(name, sizeof name, "%s/bias", prefix);
    return vector(m, name, B, k * rows_each);
}

static qkv_status norm(ct2_model *m, const source *s, const char *prefix, const char *qkv, int C)
{
    char g[96], b[96], name[128];
    snprintf(g, sizeof g, "%s.gamma", qkv), snprintf(b, sizeof b, "%s.beta", qkv);
    const float *gamma = tensor(s, g), *beta = tensor(s, b);
    if (!gamma || !beta) return qkv_fail(m->err, QKV_ERR_FORMAT, "the model has no %s", qkv);
    snprintf(name, sizeof name, "%s/beta", prefix);
    qkv_status st = vector(m, name, beta, C);
    snprintf(name, sizeof name, "%s/gamma", prefix);
    return st ? st : vector(m, name, gamma, C);
}

static qkv_status ffn(ct2_model *m, const source *s, const char *prefix, const char *stack,
                      int l, const char *norm_name, const qkv_transformer_config *c)
{
    char p[128], q[96];
    snprintf(p, sizeof p, "%.100s/layer_norm", prefix);
    snprintf(q, sizeof q, "%.40s.%d.%.20s", stack, l, norm_name);
    qkv_status st = norm(m, s, p, q, c->d_model);
    static const struct {
        const char *w, *b, *ct2;
        int out_ffn;
    } parts[] = {{"W1", "b1", "linear_0", 1}, {"W2", "b2", "linear_1", 0}};
    for (int i = 0; !st && i < 2; i++) {
        char w[96], b[96], name[128];
        snprintf(w, sizeof w, "%s.%d.ffn.%s", stack, l, parts[i].w);
        snprintf(b, sizeof b, "%s.%d.ffn.%s", stack, l, parts[i].b);
        const float *W = tensor(s, w), *B = tensor(s, b);
        if (!W || !B) return qkv_fail(m->err, QKV_ERR_FORMAT, "the model has no %s", w);
        const int rows = parts[i].out_ffn ? c->ffn : c->d_model;
        const int cols = parts[i].out_ffn ? c->d_model : c->ffn;
        snprintf(p, sizeof p, "%.100s/%s", prefix, parts[i].ct2);
        st = matrix(m, p, W, rows, cols);
        snprintf(name, sizeof name, "%.100s/%s/bias", prefix, parts[i].ct2);
        if (!st) st = vector(m, name, B, rows);
    }
    return st;
}

/* The stack's attributes, as the spec's scalars. */
static qkv_status stack_scalars(ct2_model *m, const char *stack, const qkv_transformer_config *c)
{
    /* CTranslate2's Activation: RELU 0, SWISH 2, GELU (erf) 3 */
    const int act = c->act == QKV_ACT_SILU ? 2 : c->act == QKV_ACT_GELU ? 3 : 0;
    char n[128];
    qkv_status st = QKV_OK;
    const int dec = !strcmp(stack, "decoder");
    snprintf(n, sizeof n, "%s/activation", stack), st = scalar(m, n, CT2_I8, act);
    if (!st && dec) st = scalar(m, "decoder/alibi", CT2_I8, 0);
    if (!st && dec) st = scalar(m, "decoder/alibi_use_positive_positions", CT2_I8, 0);
    if (!st && dec) st = scalar(m, "decoder/alignment_heads", CT2_I16, 1);
    if (!st && dec) st = scalar(m, "decoder/alignment_layer", CT2_I16, -1);
    if (!st && !dec) st = scalar(m, "encoder/embeddings_merge", CT2_I8, 0);
    if (!st && !dec) st = scalar(m, "encoder/multi_query_attention", CT2_I8, 0);
    snprintf(n, sizeof n, "%s/num_heads", stack);
    if (!st) st = scalar(m, n, CT2_I16, c->heads);
    snprintf(n, sizeof n, "%s/pre_norm", stack);
    if (!st) st = scalar(m, n, CT2_I8, c->pre_norm);
    if (!st && dec) st = scalar(m, "decoder/scale_alibi", CT2_I8, 0);
    snprintf(n, sizeof n, "%s/scale_embeddings", stack);
    if (!st) st = scalar(m, n, CT2_I8, c->scale_embedding);
    if (!st && dec) st = scalar(m, "decoder/start_from_zero_embedding", CT2_I8, 0);
    return st;
}

/* The positions table of a stack: learned rows, or qkv's sinusoidal table. */
static qkv_status positions(ct2_model *m, const source *s, const char *stack,
                            const qkv_transformer_config *c)
{
    char name[128];
    snprintf(name, sizeof name, "%s/position_encodings/encodings", stack);
    const size_t n = (size_t)c->max_len * c->d_model;
    const float *P = NULL;
    if (c->learned_pos) {
        P = tensor(s, strcmp(stack, "encoder") ? "tgt_positions" : "src_positions");
        if (!P) return qkv_fail(m->err, QKV_ERR_FORMAT, "the model has no learned positions");
    } else {
        float *table = own(m, n * sizeof *table);
        if (!table) return nomem(m);
        if (c->pos_layout == QKV_POS_HALVES) qkv_sinusoidal_table_halves(table, c->max_len, c->d_model);
        else if (c->pos_layout == QKV_POS_FAIRSEQ)
            qkv_sinusoidal_table_fairseq(table, c->max_len, c->d_model);
        else qkv_sinusoidal_table(table, c->max_len, c->d_model);
        P = table;
    }
    return add(m, name, CT2_F32, 2, (uint32_t)c->max_len, (uint32_t)c->d_model, P, n * 4);
}

static qkv_status build(ct2_model *m, const source *s, const qkv_transformer_config *c)
{
    const int C = c->d_model;
    char p[128], q[96];
    qkv_status st = stack_scalars(m, "decoder", c);
    if (!st) st = stack_scalars(m, "encoder", c);
    /* embeddings and the output projection, tied as qkv ties them */
    const float *E_src = tensor(s, c->tie == QKV_TIE_ALL ? "embedding" : "src_embedding");
    const float *E_tgt = tensor(s, c->tie == QKV_TIE_ALL ? "embedding" : "tgt_embedding");
    const float *W_out = c->tie == QKV_TIE_NONE ? tensor(s, "output.W") : E_tgt;
    const float *b_out = tensor(s, "output.b");
    if (!st && (!E_src || !E_tgt || !W_out || !b_out))
        st = qkv_fail(m->err, QKV_ERR_FORMAT, "the model lacks its embeddings or output layer");
    if (!st) st = matrix(m, "decoder/embeddings", E_tgt, c->tgt_vocab, C);
    if (!st && c->tie != QKV_TIE_ALL) st = matrix(m, "encoder/embeddings_0", E_src, c->src_vocab, C);
    if (!st && c->tie == QKV_TIE_ALL) st = alias(m, "encoder/embeddings_0/weight", "decoder/embeddings/weight");
    if (!st && c->tie != QKV_TIE_NONE) st = alias(m, "decoder/projection/weight", "decoder/embeddings/weight");
    if (!st && c->tie == QKV_TIE_NONE) st = matrix(m, "decoder/projection", W_out, c->tgt_vocab, C);
    float *bias = st ? NULL : own(m, (size_t)c->tgt_vocab * sizeof *bias);
    if (!st && !bias) st = nomem(m);
    if (!st) {
        memcpy(bias, b_out, (size_t)c->tgt_vocab * sizeof *bias);
        if (c->suppress_pad) bias[QKV_PAD] = ABSENT_LOGIT;
        st = vector(m, "decoder/projection/bias", bias, c->tgt_vocab);
    }
    for (int k = 0; !st && k < 2; k++) {
        const char *stack = k ? "decoder" : "encoder";
        if ((st = positions(m, s, stack, c))) break;
        if (c->final_norm) {
            snprintf(p, sizeof p, "%s/layer_norm", stack), snprintf(q, sizeof q, "%s.norm", stack);
            if ((st = norm(m, s, p, q, C))) break;
        }
        const int layers = k ? c->dec_layers : c->enc_layers;
        for (int l = 0; !st && l < layers; l++) {
            const char *self = k ? "self_attention" : "attention";
            snprintf(p, sizeof p, "%s/layer_%d/self_attention/linear_0", stack, l);
            snprintf(q, sizeof q, "%s.%d.%s", stack, l, self);
            st = linear(m, s, p, q, "qkv", C, C, c->bias);
            snprintf(p, sizeof p, "%s/layer_%d/self_attention/linear_1", stack, l);
            if (!st) st = linear(m, s, p, q, "o", C, C, c->bias);
            snprintf(p, sizeof p, "%s/layer_%d/self_attention/layer_norm", stack, l);
            snprintf(q, sizeof q, "%s.%d.norm1", stack, l);
            if (!st) st = norm(m, s, p, q, C);
            if (k && !st) { /* cross-attention: W_q, [W_k; W_v], W_o */
                snprintf(q, sizeof q, "decoder.%d.cross_attention", l);
                static const char *const parts[] = {"q", "kv", "o"};
                for (int i = 0; !st && i < 3; i++) {
                    snprintf(p, sizeof p, "decoder/layer_%d/attention/linear_%d", l, i);
                    st = linear(m, s, p, q, parts[i], C, C, c->bias);
                }
                snprintf(p, sizeof p, "decoder/layer_%d/attention/layer_norm", l);
                snprintf(q, sizeof q, "decoder.%d.norm2", l);
                if (!st) st = norm(m, s, p, q, C);
            }
            snprintf(p, sizeof p, "%s/layer_%d/ffn", stack, l);
            if (!st) st = ffn(m, s, p, stack, l, k ? "norm3" : "norm2", c);
        }
    }
    return st;
}

/* ---- writing ------------------------------------------------------------------------ */

static int by_name(const void *a, const void *b)
{
    return strcmp(((const ct2_var *)a)->name, ((const ct2_var *)b)->name);
}

/* Little-endian fields into a growing header buffer. */
typedef struct {
    unsigned char *b;
    size_t n, cap;
    int failed;
} bytes_out;

static void put(bytes_out *o, const void *p, size_t n)
{
    if (o->failed) return;
    if (o->n + n > o->cap) {
        size_t cap = o->cap ? o->cap : 4096;
        while (cap < o->n + n) cap *= 2;
        unsigned char *b = realloc(o->b, cap);
        if (!b) return (void)(o->failed = 1);
        o->b = b, o->cap = cap;
    }
    memcpy(o->b + o->n, p, n), o->n += n;
}

static void put_u(bytes_out *o, uint64_t v, int n)
{
    unsigned char b[8];
    for (int i = 0; i < n; i++) b[i] = (unsigned char)(v >> (8 * i));
    put(o, b, (size_t)n);
}

static void put_str(bytes_out *o, const char *s)
{
    put_u(o, strlen(s) + 1, 2), put(o, s, strlen(s) + 1);
}

static qkv_status write_model_bin(ct2_model *m, const char *dir)
{
    qsort(m->v, (size_t)m->n, sizeof *m->v, by_name);
    /* the chunks: header, then per variable its fields and its data; the fields live in one
     * buffer (offsets until it stops moving) */
    bytes_out h = {0};
    size_t *field_end = malloc(((size_t)m->n + 2) * sizeof *field_end);
    if (!field_end) return nomem(m);
    put_u(&h, CT2_BINARY_VERSION, 4), put_str(&h, "TransformerSpec");
    put_u(&h, CT2_SPEC_REVISION, 4), put_u(&h, (uint64_t)m->n, 4);
    const size_t head = h.n;
    for (int i = 0; i < m->n; i++) {
        const ct2_var *v = &m->v[i];
        put_str(&h, v->name), put_u(&h, (uint64_t)v->rank, 1);
        for (int d = 0; d < v->rank; d++) put_u(&h, v->shape[d], 4);
        put_u(&h, (uint64_t)v->dtype, 1), put_u(&h, v->bytes, 4);
        field_end[i] = h.n;
    }
    const size_t aliases_at = h.n;
    put_u(&h, (uint64_t)m->n_alias, 4);
    for (int i = 0; i < m->n_alias; i++) put_str(&h, m->alias[i][0]), put_str(&h, m->alias[i][1]);
    const size_t k = 2 + 2 * (size_t)m->n;
    const void **chunks = malloc(k * sizeof *chunks);
    size_t *lens = malloc(k * sizeof *lens);
    qkv_status st = h.failed || !chunks || !lens ? nomem(m) : QKV_OK;
    if (!st) {
        size_t c = 0, at = head;
        chunks[c] = h.b, lens[c++] = head;
        for (int i = 0; i < m->n; i++) {
            chunks[c] = h.b + at, lens[c++] = field_end[i] - at, at = field_end[i];
            chunks[c] = m->v[i].data, lens[c++] = m->v[i].bytes;
        }
        chunks[c] = h.b + aliases_at, lens[c++] = h.n - aliases_at;
        char path[4096];
        snprintf(path, sizeof path, "%s/model.bin", dir);
        st = qkv_atomic_write(path, chunks, lens, c, m->err);
    }
    free(chunks), free(lens), free(field_end), free(h.b);
    return st;
}

static qkv_status write_json(const char *dir, const char *name, cJSON *o, qkv_error *err)
{
    char *text = o ? cJSON_Print(o) : NULL, path[4096];
    if (!text) return qkv_fail(err, QKV_ERR_NOMEM, "out of memory");
    snprintf(path, sizeof path, "%s/%s", dir, name);
    size_t len = strlen(text);
    text[len++] = '\n'; /* over the NUL: written by length */
    const void *chunk = text;
    qkv_status st = qkv_atomic_write(path, &chunk, &len, 1, err);
    free(text);
    return st;
}

static cJSON *vocab_list(const qkv_vocab *v)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < v->size; i++) {
        cJSON *s = cJSON_CreateString(qkv_vocab_token(v, i));
        if (!s || !cJSON_AddItemToArray(a, s)) return cJSON_Delete(s), cJSON_Delete(a), NULL;
    }
    return a;
}

static int same_vocab(const qkv_vocab *a, const qkv_vocab *b)
{
    if (a->size != b->size) return 0;
    for (int i = 0; i < a->size; i++)
        if (strcmp(qkv_vocab_token(a, i), qkv_vocab_token(b, i))) return 0;
    return 1;
}

static qkv_status write_config(const char *dir, const qkv_transformer_config *c,
                               const qkv_tokenizer *tok, qkv_error *err)
{
    cJSON *o = cJSON_CreateObject();
    const char *start = c->decoder_start == QKV_PAD   ? "<pad>"
                        : c->decoder_start == QKV_EOS ? "<eos>"
                                                      : "<bos>";
    if (o && cJSON_AddBoolToObject(o, "add_source_bos", tok->source_bos) &&
        cJSON_AddBoolToObject(o, "add_source_eos", 1) &&
        cJSON_AddStringToObject(o, "bos_token", "<bos>") &&
        cJSON_AddStringToObject(o, "decoder_start_token", start) &&
        cJSON_AddStringToObject(o, "eos_token", "<eos>") &&
        cJSON_AddNumberToObject(o, "layer_norm_epsilon", (double)c->ln_eps) &&
        cJSON_AddBoolToObject(o, "multi_query_attention", 0) &&
        cJSON_AddStringToObject(o, "unk_token", "<unk>")) {
        qkv_status st = write_json(dir, "config.json", o, err);
        cJSON_Delete(o);
        return st;
    }
    cJSON_Delete(o);
    return qkv_fail(err, QKV_ERR_NOMEM, "out of memory");
}

/* The model directory's tokenizer files, copied beside the CTranslate2 model where present
 * (a SentencePiece model is what CTranslate2's users feed it with). */
static qkv_status copy_beside(const char *from, const char *to, qkv_error *err)
{
    static const char *const names[] = {"source.spm", "target.spm", "text.json",
                                        "generation.json"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        char src[4096], dst[4096], *data = NULL;
        size_t len = 0;
        if (!qkv_model_dir_file(src, sizeof src, from, names[i])) continue;
        qkv_status st = qkv_read_regular_file(src, QKV_MAX_VOCAB_FILE_BYTES, &data, &len, err);
        snprintf(dst, sizeof dst, "%s/%s", to, names[i]);
        const void *chunk = data;
        if (!st) st = qkv_atomic_write(dst, &chunk, &len, 1, err);
        free(data);
        if (st) return st;
    }
    return QKV_OK;
}

qkv_status qkv_export_ct2(const char *model_dir, const char *out_dir,
                          qkv_ct2_quantization quantization, qkv_error *err)
{
    if (quantization != QKV_CT2_FLOAT32 && quantization != QKV_CT2_INT8)
        return qkv_fail(err, QKV_ERR_ARG, "qkv_export_ct2: quantization %d is neither float32 "
                        "nor int8", (int)quantization);
    /* CTranslate2's config.json would replace the model's own */
    static const char *const relation[] = {"", "is", "is inside", "holds"};
    const int rel = qkv_path_relation(out_dir, model_dir);
    if (rel > 0)
        return qkv_fail(err, QKV_ERR_ARG, "%s %s the model %s: export into another directory",
                        out_dir, relation[rel], model_dir);
    qkv_transformer *t = NULL;
    qkv_tokenizer tok = {0};
    qkv_status st = qkv_transformer_load(&t, model_dir, err);
    if (!st) st = qkv_tokenizer_load(&tok, model_dir, err);
    const qkv_transformer_config *c = st ? NULL : qkv_transformer_get_config(t);
    if (!st && c->enc_layers < 1)
        st = qkv_fail(err, QKV_ERR_FORMAT, "%s: an encoder of embeddings only (enc_layers 0): "
                      "CTranslate2's TransformerEncoder needs a layer", model_dir);
    if (!st && (tok.src.size != c->src_vocab || tok.tgt.size != c->tgt_vocab))
        st = qkv_fail(err, QKV_ERR_FORMAT, "%s: vocabularies of %d and %d tokens for a model "
                      "of %d and %d", model_dir, tok.src.size, tok.tgt.size, c->src_vocab,
                      c->tgt_vocab);
    ct2_model m = {.int8 = quantization == QKV_CT2_INT8, .err = err};
    const source s = {t, st ? NULL : qkv_transformer_params(t)};
    struct stat sb;
    if (!st && stat(out_dir, &sb) && mkdir(out_dir, 0777))
        st = qkv_fail(err, QKV_ERR_IO, "%s: cannot create the directory", out_dir);
    if (!st) st = build(&m, &s, c);
    if (!st) st = write_config(out_dir, c, &tok, err);
    if (!st && same_vocab(&tok.src, &tok.tgt)) {
        cJSON *v = vocab_list(&tok.tgt);
        st = write_json(out_dir, "shared_vocabulary.json", v, err);
        cJSON_Delete(v);
    } else if (!st) {
        cJSON *a = vocab_list(&tok.src), *b = vocab_list(&tok.tgt);
        st = write_json(out_dir, "source_vocabulary.json", a, err);
        if (!st) st = write_json(out_dir, "target_vocabulary.json", b, err);
        cJSON_Delete(a), cJSON_Delete(b);
    }
    if (!st) st = copy_beside(model_dir, out_dir, err);
    if (!st) st = write_model_bin(&m, out_dir); /* last: a directory with model.bin is whole */
    for (int i = 0; i < m.n_owned; i++) free(m.owned[i]);
    free(m.owned), free(m.v), free(m.alias);
    qkv_tokenizer_free(&tok);
    qkv_transformer_free(t);
    return st;
}
