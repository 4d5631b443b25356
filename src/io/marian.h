/* SPDX-License-Identifier: MIT */
/* qkv_import_marian's two sources: a Hugging Face MarianMT directory (marian.c) and Marian's
 * own release, a directory or zip of .npz weights, vocabulary .yml, SentencePiece models and
 * decoder.yml (marian_release.c), which is read into the parts a Hugging Face directory has
 * (transformers' convert_marian_to_pytorch does the same) and imported by the same code. Not
 * part of the API. */
#ifndef QKV_IO_MARIAN_H
#define QKV_IO_MARIAN_H

#include <cJSON.h>

#include "io/hf_dir.h"

/* A Marian model's parts as a Hugging Face directory holds them. */
typedef struct {
    const cJSON *config; /* config.json's object (MarianConfig's keys) */
    const char *config_name;
    const cJSON *src_vocab, *tgt_vocab; /* token -> id (vocab.json's); the same object when
                                         * one vocabulary serves both sides */
    const char *src_vocab_name, *tgt_vocab_name;
    hf_weights *weights; /* under transformers' names */
    const char *spm[2];  /* source.spm and target.spm, their bytes */
    size_t spm_len[2];
    const char *spm_name[2]; /* what to call them in messages (NULL: their names) */
    int clean_up;           /* text.json "clean_up_spaces" */
    const char *generation; /* generation.json's text to write, or NULL */
} marian_parts;

/* Writes the qkv model directory out_dir from the parts (nothing when they are refused). */
qkv_status marian_import_parts(const marian_parts *p, const char *out_dir, qkv_error *err);

/* Whether source is a Marian release: a .zip file, or a directory holding decoder.yml and no
 * config.json. */
int marian_is_release(const char *source);
qkv_status marian_import_release(const char *source, const char *out_dir, qkv_error *err);

/* Marian's YAML reader on text (len bytes), for the fuzzer: read as a vocabulary .yml (its
 * size in *vocab_size) and as decoder.yml (its decoding defaults); QKV_OK when it reads as a
 * vocabulary, else the refusal naming file. */
qkv_status marian_yml_read(const char *text, size_t len, const char *file, int *vocab_size,
                           qkv_error *err);

#endif
