/* SPDX-License-Identifier: MIT */
/* The thin C interface that src/text/spm_shim.cc puts over libsentencepiece's C++ classes
 * (SentencePieceProcessor, SentencePieceTrainer). Only src/text/spm.c calls it; the API is
 * qkv/text.h's qkv_spm_*. Strings are UTF-8; every function is noexcept (a C++ exception
 * never crosses into C: it becomes a message). A buffer a function returns through char **
 * or int ** was allocated with malloc and belongs to the caller. Not part of the API. */
#ifndef QKV_IO_SPM_SHIM_H
#define QKV_IO_SPM_SHIM_H

#include <stddef.h>

#ifdef __cplusplus
#define SPM_NOEXCEPT noexcept
extern "C" {
#else
#define SPM_NOEXCEPT
#endif

typedef struct spm_shim spm_shim;

/* A model from a .model/.spm file, or from its serialised bytes when path is NULL. NULL on
 * failure, with libsentencepiece's reason in why (cap bytes). */
spm_shim *spm_shim_load(const char *path, const void *bytes, size_t size, char *why,
                        size_t cap) SPM_NOEXCEPT;
void spm_shim_free(spm_shim *s) SPM_NOEXCEPT;

int spm_shim_size(const spm_shim *s) SPM_NOEXCEPT;
/* The id of piece (the unknown id when the model lacks it). */
int spm_shim_piece_to_id(const spm_shim *s, const char *piece, size_t len) SPM_NOEXCEPT;
/* The piece of id, valid while s lives; NULL outside [0, size). */
const char *spm_shim_id_to_piece(const spm_shim *s, int id) SPM_NOEXCEPT;
/* unk, bos, eos, pad ids in that order (-1 where the model has none); control and unused
 * flags of one id. */
void spm_shim_special_ids(const spm_shim *s, int ids[4]) SPM_NOEXCEPT;
int spm_shim_is_control(const spm_shim *s, int id) SPM_NOEXCEPT;

/* text[0..len) as ids: *ids (malloc'd, *n of them). Returns 0, or -1 with why. */
int spm_shim_encode_ids(const spm_shim *s, const char *text, size_t len, int **ids, int *n,
                        char *why, size_t cap) SPM_NOEXCEPT;
/* text[0..len) as pieces, their surface forms (an unknown piece is the text it covers):
 * *bytes (malloc'd) holds *n NUL-terminated pieces one after the other. */
int spm_shim_encode_pieces(const spm_shim *s, const char *text, size_t len, char **bytes,
                           int *n, char *why, size_t cap) SPM_NOEXCEPT;
/* The text of ids[0..n) (control ids are empty), or of n pieces: *text (malloc'd,
 * NUL-terminated, *len bytes). */
int spm_shim_decode_ids(const spm_shim *s, const int *ids, int n, char **text, size_t *len,
                        char *why, size_t cap) SPM_NOEXCEPT;
int spm_shim_decode_pieces(const spm_shim *s, const char *const *pieces, int n, char **text,
                           size_t *len, char *why, size_t cap) SPM_NOEXCEPT;

/* SentencePieceTrainer::Train over the options as key/value strings (keys[i] = values[i],
 * e.g. "vocab_size") and the sentences[0..count) (NUL-terminated lines): the model's
 * serialised bytes in *model (malloc'd, *size). */
int spm_shim_train(const char *const *keys, const char *const *values, int n,
                   const char *const *sentences, size_t count, char **model, size_t *size,
                   char *why, size_t cap) SPM_NOEXCEPT;

#ifdef __cplusplus
}
#endif

#endif
