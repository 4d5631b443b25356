/* SentencePiece models through libsentencepiece (src/io/spm_shim.cc): loading, encoding to
 * ids and pieces, decoding, and training one with qkv's special pieces at qkv's ids. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "io/spm_shim.h"

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

qkv_status qkv_spm_train(const char *input_path, const char *model_path, int vocab_size,
                         qkv_spm_type type, qkv_error *err)
{
    if (vocab_size <= QKV_N_RESERVED)
        return qkv_fail(err, QKV_ERR_ARG, "a SentencePiece vocabulary needs more than the %d "
                        "reserved pieces (got %d)", QKV_N_RESERVED, vocab_size);
    char size[32];
    snprintf(size, sizeof size, "%d", vocab_size);
    /* qkv's reserved tokens at qkv's ids, so that piece ids are vocabulary ids; one thread,
     * so that the pieces learned do not depend on the machine. */
    const char *const keys[] = {
        "input", "vocab_size", "model_type", "character_coverage", "split_digits",
        "unk_id", "pad_id", "bos_id", "eos_id",
        "unk_piece", "pad_piece", "bos_piece", "eos_piece",
        "num_threads", "minloglevel",
    };
    const char *const values[] = {
        input_path, size, type == QKV_SPM_BPE ? "bpe" : "unigram", "1.0", "true",
        "0", "1", "2", "3",
        "<unk>", "<pad>", "<bos>", "<eos>",
        "1", "2",
    };
    char why[512] = "", *model;
    size_t bytes;
    if (spm_shim_train(keys, values, (int)(sizeof keys / sizeof *keys), &model, &bytes, why,
                       sizeof why))
        return qkv_fail(err, QKV_ERR_ARG, "%.400s: SentencePiece training failed: %.500s",
                        input_path, why);
    const void *chunk = model;
    qkv_status st = qkv_atomic_write(model_path, &chunk, &bytes, 1, err);
    free(model);
    return st;
}
