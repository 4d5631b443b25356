/* SPDX-License-Identifier: MIT */
/* The figures the command-line tool draws: training curves, positional encodings, and the
 * attention maps of translated sentences. Each prints its own error and returns -1 on failure. */
#ifndef QKV_CLI_FIGURES_H
#define QKV_CLI_FIGURES_H

#include "cli/common.h"

/* DIR/metrics.jsonl (one JSON object per epoch: epoch, loss, optional val_loss and bleu) as
 * training curves in out_png (NULL: DIR/training.png). */
int fig_training(const char *dir, const char *out_png);
/* fig_training(dir, NULL) after a run: 1, silently, when the run logged no epoch. */
int fig_training_after_run(const char *dir);

/* d2l 11.6's figures of the sinusoidal table P (positions, d_model) in out_dir:
 * positional-encoding.png (columns 6-9 against the position) and
 * positional-encoding-heatmap.png (all of P). d_model >= 10. */
int fig_positional(const char *out_dir, int positions, int d_model);

/* For sentence number `number` (1-based) of a translation by tr: src_tok (n_src) the source
 * as the model's tokens (subword pieces for a subword model), tgt (n_tgt) the translation's
 * ids. Writes out_dir/sentence-<number>-encoder.png,
 * -decoder-self.png, -cross.png and sentence-<number>.json (tokens, weights, and where each
 * figure put its panels). viz is an open figure context. */
int fig_attention(qkv_viz *viz, qkv_translator *tr, const char *out_dir, int number,
                  const char *const *src_tok, int n_src, const int *tgt, int n_tgt);

/* mkdir -p. */
int fig_mkdirs(const char *path);

#endif
