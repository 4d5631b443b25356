/* SPDX-License-Identifier: MIT */
/* qkv plot: figures without a display.
 *   qkv plot DIR                  DIR/metrics.jsonl -> DIR/training.png (training curves)
 *   qkv plot --positional OUTDIR  d2l 11.6's two figures of the sinusoidal encoding */
#include <stdio.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/figures.h"

int cmd_plot(int argc, char **argv)
{
    const char *out = NULL, *positional = NULL;
    int positions = 60, d_model = 32;
    const opt_spec opts[] = {
        {"out", OPT_FILE, &out, "training curves to this PNG (default DIR/training.png)", NULL,
         NULL},
        {"o", OPT_ALIAS, "out", NULL, NULL, NULL},
        {"positional", OPT_DIR, &positional,
         "write positional-encoding.png and positional-encoding-heatmap.png into this directory",
         NULL, NULL},
        {"positions", OPT_INT, &positions, "positions shown with --positional", "[2, 4096]", NULL},
        {"d-model", OPT_INT, &d_model,
         "encoding width with --positional (the figures show columns 6-9)", "[10, 4096]", NULL},
        {0},
    };
    const char *usage = "usage: qkv plot DIR [--out FILE]   training curves of a model directory\n"
                        "       qkv plot --positional DIR   the sinusoidal positional encoding";
    /* DIR is the one argument that is not an option */
    const char *dir = argc > 2 && argv[2][0] != '-' ? argv[2] : NULL;
    int rc = args_parse(argc, argv, dir ? 3 : 2, opts, usage);
    if (rc) return rc > 0 ? 0 : 2;
    if (!dir == !positional) {
        fprintf(stderr, "qkv plot: give a model directory or --positional DIR (see --help)\n");
        return 2;
    }
    const int first = dir ? 3 : 2;
    if (dir && (args_given(argc, argv, first, opts, "positions") ||
                args_given(argc, argv, first, opts, "d-model"))) {
        fprintf(stderr, "qkv plot: --positions and --d-model are for --positional\n");
        return 2;
    }
    if (positional && out) {
        fprintf(stderr, "qkv plot: --out names the training-curve figure of DIR; --positional "
                "writes into its directory\n");
        return 2;
    }
    if (positional) {
        if (fig_positional(positional, positions, d_model)) return 1;
        printf("wrote %s/positional-encoding.png and %s/positional-encoding-heatmap.png\n",
               positional, positional);
        return 0;
    }
    if (fig_training(dir, out)) return 1;
    if (out) printf("wrote %s\n", out);
    else printf("wrote %s/training.png\n", dir);
    return 0;
}
