/* SPDX-License-Identifier: MIT */
/* SentencePiece models through libsentencepiece (src/text/spm_shim.cc): loading, encoding to
 * ids and pieces, decoding, and training one with qkv's special pieces at qkv's ids. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "text/spm_shim.h"

struct qkv_spm {
    spm_shim *shim;
};

static qkv_status loaded(qkv_spm **out, spm_shim *shim, const char *name, const char *why,
                         qkv_error *err)
{
    if (!shim)
        return qkv_fail(err, QKV_ERR_FORMAT, "%.400s: not a SentencePiece model: %.500s", name,
                        why);
    if (!(*out = malloc(sizeof **out))) {
        spm_shim_free(shim);
        return qkv_fail(err, QKV_ERR_NOMEM, "%.400s: out of memory", name);
    }
    (*out)->shim = shim;
    return QKV_OK;
}

qkv_status qkv_spm_load(qkv_spm **out, const char *path, qkv_error *err)
{
    *out = NULL;
    /* libsentencepiece reports a missing file as a generic "not found"; say it plainly */
    FILE *probe = fopen(path, "rb");
    if (!probe) return qkv_fail(err, QKV_ERR_IO, "%.400s: cannot open", path);
    fclose(probe);
    char why[512] = "";
    return loaded(out, spm_shim_load(path, NULL, 0, why, sizeof why), path, why, err);
}

qkv_status qkv_spm_load_bytes(qkv_spm **out, const void *bytes, size_t size,
                              const char *name, qkv_error *err)
{
    *out = NULL;
    char why[512] = "";
    return loaded(out, spm_shim_load(NULL, bytes, size, why, sizeof why),
                  name ? name : "SentencePiece model", why, err);
}

void qkv_spm_free(qkv_spm *s)
{
    if (!s) return;
    spm_shim_free(s->shim);
    free(s);
}

int qkv_spm_size(const qkv_spm *s) { return spm_shim_size(s->shim); }

int qkv_spm_piece_id(const qkv_spm *s, const char *piece)
{
    return spm_shim_piece_to_id(s->shim, piece, strlen(piece));
}

const char *qkv_spm_piece(const qkv_spm *s, int id) { return spm_shim_id_to_piece(s->shim, id); }

qkv_spm_specials qkv_spm_special_ids(const qkv_spm *s)
{
    int ids[4];
    spm_shim_special_ids(s->shim, ids);
    return (qkv_spm_specials){ids[0], ids[1], ids[2], ids[3]};
}

int qkv_spm_is_control(const qkv_spm *s, int id) { return spm_shim_is_control(s->shim, id); }

qkv_status qkv_spm_encode(const qkv_spm *s, const char *text, size_t len, int **ids, int *n,
                          qkv_error *err)
{
    char why[512] = "";
    if (spm_shim_encode_ids(s->shim, text, len, ids, n, why, sizeof why))
        return qkv_fail(err, QKV_ERR_FORMAT, "SentencePiece cannot encode the text: %s", why);
    return QKV_OK;
}

qkv_status qkv_spm_encode_pieces(const qkv_spm *s, const char *text, size_t len,
                                 qkv_sentences *out, qkv_error *err)
{
    memset(out, 0, sizeof *out);
    char why[512] = "", *bytes;
    int n;
    if (spm_shim_encode_pieces(s->shim, text, len, &bytes, &n, why, sizeof why))
        return qkv_fail(err, QKV_ERR_FORMAT, "SentencePiece cannot encode the text: %s", why);
    out->tokens = malloc((n ? (size_t)n : 1) * sizeof *out->tokens);
    out->start = malloc(2 * sizeof *out->start);
    if (!out->tokens || !out->start) {
        free(bytes);
        qkv_sentences_free(out);
        return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for %d pieces", n);
    }
    const char *at = bytes;
    for (int i = 0; i < n; i++, at += strlen(at) + 1) out->tokens[i] = at;
    out->storage = bytes;
    out->count = 1, out->n_tokens = (size_t)n;
    out->start[0] = 0, out->start[1] = (size_t)n;
    return QKV_OK;
}

qkv_status qkv_spm_decode(const qkv_spm *s, const int *ids, int n, char **text,
                          qkv_error *err)
{
    *text = NULL;
    const int size = spm_shim_size(s->shim);
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= size)
            return qkv_fail(err, QKV_ERR_ARG, "id %d (position %d) outside the SentencePiece "
                            "model's %d pieces", ids[i], i, size);
    char why[512] = "";
    size_t len;
    if (spm_shim_decode_ids(s->shim, ids, n, text, &len, why, sizeof why))
        return qkv_fail(err, QKV_ERR_FORMAT, "SentencePiece cannot decode: %s", why);
    return QKV_OK;
}

qkv_status qkv_spm_decode_pieces(const qkv_spm *s, const char *const *pieces, int n,
                                 char **text, qkv_error *err)
{
    char why[512] = "";
    size_t len;
    if (spm_shim_decode_pieces(s->shim, pieces, n, text, &len, why, sizeof why))
        return qkv_fail(err, QKV_ERR_FORMAT, "SentencePiece cannot decode: %s", why);
    return QKV_OK;
}

/* Each sentence of the texts as one line, its tokens joined by single spaces: *lines points
 * into *bytes (both malloc'd). */
static qkv_status join_sentences(char ***lines, char **bytes, size_t *count,
                                 const qkv_sentences *const *texts, int n_texts, qkv_error *err)
{
    size_t n = 0, total = 0;
    for (int t = 0; t < n_texts; t++) {
        n += (size_t)texts[t]->count;
        for (size_t k = 0; k < texts[t]->n_tokens; k++) total += strlen(texts[t]->tokens[k]) + 1;
        total += (size_t)texts[t]->count; /* an empty sentence still ends in NUL */
    }
    *lines = malloc((n ? n : 1) * sizeof **lines), *bytes = malloc(total ? total : 1);
    if (!*lines || !*bytes) {
        free(*lines), free(*bytes);
        return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for %zu sentences", n);
    }
    char *at = *bytes;
    size_t line = 0;
    for (int t = 0; t < n_texts; t++)
        for (int i = 0; i < texts[t]->count; i++) {
            (*lines)[line++] = at;
            for (size_t k = texts[t]->start[i]; k < texts[t]->start[i + 1]; k++) {
                if (k > texts[t]->start[i]) *at++ = ' ';
                const size_t len = strlen(texts[t]->tokens[k]);
                memcpy(at, texts[t]->tokens[k], len);
                at += len;
            }
            *at++ = '\0';
        }
    *count = n;
    return QKV_OK;
}

qkv_status qkv_spm_train(const qkv_sentences *const *texts, int n_texts,
                         const char *model_path, int vocab_size, qkv_spm_type type,
                         qkv_error *err)
{
    if (vocab_size <= QKV_N_RESERVED || n_texts < 1)
        return qkv_fail(err, QKV_ERR_ARG, "a SentencePiece model needs a text and more than "
                        "the %d reserved pieces (got %d texts, %d pieces)", QKV_N_RESERVED,
                        n_texts, vocab_size);
    char size[32];
    snprintf(size, sizeof size, "%d", vocab_size);
    /* qkv's reserved tokens at qkv's ids, so that piece ids are vocabulary ids; one thread,
     * so that the pieces learned do not depend on the machine; every sentence, in order */
    const char *const keys[] = {
        "vocab_size", "model_type", "character_coverage", "split_digits",
        "unk_id", "pad_id", "bos_id", "eos_id",
        "unk_piece", "pad_piece", "bos_piece", "eos_piece",
        "num_threads", "minloglevel", "input_sentence_size", "shuffle_input_sentence",
    };
    const char *const values[] = {
        size, qkv_spm_type_name(type), "1.0", "true", /* qkv's names are SentencePiece's */
        "0", "1", "2", "3",
        qkv_enum_name(QKV_ENUM_RESERVED, QKV_UNK), qkv_enum_name(QKV_ENUM_RESERVED, QKV_PAD),
        qkv_enum_name(QKV_ENUM_RESERVED, QKV_BOS), qkv_enum_name(QKV_ENUM_RESERVED, QKV_EOS),
        "1", "2", "0", "false",
    };
    char **lines, *bytes, why[512] = "", *model;
    size_t count = 0, model_size = 0;
    qkv_status st = join_sentences(&lines, &bytes, &count, texts, n_texts, err);
    if (st) return st;
    const int failed = spm_shim_train(keys, values, (int)(sizeof keys / sizeof *keys),
                                      (const char *const *)lines, count, &model, &model_size,
                                      why, sizeof why);
    free(lines), free(bytes);
    if (failed)
        return qkv_fail(err, QKV_ERR_ARG, "%.400s: SentencePiece training failed: %.500s",
                        model_path, why);
    const void *chunk = model;
    st = qkv_atomic_write(model_path, &chunk, &model_size, 1, err);
    free(model);
    return st;
}

qkv_status qkv_spm_vocab(qkv_vocab *v, const qkv_spm *s, const char *name, qkv_error *err)
{
    memset(v, 0, sizeof *v);
    const int n = qkv_spm_size(s);
    for (int id = 0; id < QKV_N_RESERVED; id++) {
        const char *p = qkv_spm_piece(s, id);
        if (!p || strcmp(p, qkv_enum_name(QKV_ENUM_RESERVED, id)))
            return qkv_fail(err, QKV_ERR_FORMAT, "%.400s: piece %d is \"%.40s\", not %s: not a "
                            "model with qkv's reserved pieces (qkv_spm_train makes those)",
                            name, id, p ? p : "(none)", qkv_enum_name(QKV_ENUM_RESERVED, id));
    }
    const char **pieces = malloc((size_t)n * sizeof *pieces);
    if (!pieces) return qkv_fail(err, QKV_ERR_NOMEM, "out of memory for %d pieces", n);
    for (int id = 0; id < n; id++) pieces[id] = qkv_spm_piece(s, id);
    /* every piece once: d2l's frequency order keeps the order of first occurrence, and the
     * reserved four keep their ids */
    qkv_status st = qkv_vocab_build(v, pieces, (size_t)n, 1, err);
    free(pieces);
    if (!st && v->size != n)
        st = qkv_fail(err, QKV_ERR_FORMAT, "%.400s: %d pieces make a vocabulary of %d", name, n,
                      v->size);
    if (st) qkv_vocab_free(v);
    return st;
}
