/* SPDX-License-Identifier: MIT */
/* The translator from a program: a model directory opened once, sentences translated with
 * beam search, the two best hypotheses of each printed with their scores.
 *
 *   translate MODEL_DIR "sentence" ["sentence" ...]
 *
 * Built with the library (make examples, or against an installed qkv:
 * cc -o translate translate.c $(pkg-config --cflags --libs qkv)); docs/library.md shows it. */
#include <stdio.h>

#include "qkv.h"

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODEL_DIR SENTENCE...\n", argv[0]);
        return 2;
    }
    qkv_error err;
    qkv_translator *t;
    if (qkv_translator_open(&t, argv[1], &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    qkv_translate_options o = qkv_translate_default_options(); /* greedy, batches of 32 */
    o.beam = 4, o.alpha = 0.6f, o.n_best = 2;
    qkv_translations r;
    if (qkv_translate(&r, t, (const char *const *)argv + 2, argc - 2, &o, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        qkv_translator_free(t);
        return 1;
    }
    for (int h = 0; h < r.count * r.n_best; h++) /* sentence h / n_best, best first */
        if (r.text[h]) printf("%d ||| %s ||| %.4f\n", h / r.n_best, r.text[h], r.score[h]);
    if (r.truncated) fprintf(stderr, "%d sources were longer than the model allows\n", r.truncated);
    qkv_translations_free(&r);
    qkv_translator_free(t);
    return 0;
}
