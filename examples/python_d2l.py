#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""d2l's English-French Transformer (d2l-zh 10.7), trained from Python, its loss plotted.

    python examples/python_d2l.py [--data fra.txt] [--out DIR] [--epochs 200] [--seed 0]

The first 600 pairs of fra.txt (d2l's load_data_nmt keeps 601), d_model 32, 2+2 layers, 4
heads, FFN 64, dropout 0.1, batch 64, num_steps 10, lr 0.005, min_freq 2, d2l's loss scaling:
examples/d2l_fra_eng.sh's settings, through qkv.train instead of `qkv train`. The progress
callback collects d2l's loss per epoch; with matplotlib installed the curve is written to
DIR/loss.png. Then d2l's four sentences are translated and scored as d2l scores them.
fra.txt: the d2l data (http://www.manythings.org/anki/fra-eng.zip), or ../shared/data's copy.
"""
import argparse
import math
import os
import tempfile

import qkv

EN = ["go .", "i lost .", "he's calm .", "i'm home ."]
FR = ["va !", "j'ai perdu .", "il est calme .", "je suis chez moi ."]


def d2l_bleu(pred, label, k=2):
    """d2l's bleu(pred_seq, label_seq, k) over words."""
    p, l = pred.split(" "), label.split(" ")
    score = math.exp(min(0, 1 - len(l) / len(p))) if p else 0.0
    for n in range(1, k + 1):
        if len(p) < n:
            return 0.0
        counts = {}
        for i in range(len(l) - n + 1):
            counts[" ".join(l[i:i + n])] = counts.get(" ".join(l[i:i + n]), 0) + 1
        matches = 0
        for i in range(len(p) - n + 1):
            g = " ".join(p[i:i + n])
            if counts.get(g, 0) > 0:
                matches += 1
                counts[g] -= 1
        score *= math.pow(matches / (len(p) - n + 1), math.pow(0.5, n))
    return score


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    default = os.path.join(os.environ.get("QKV_DATA_DIR", os.path.join(here, "..", "..", "shared",
                                                                        "data")),
                           "fra-eng", "fra.txt")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=default)
    ap.add_argument("--out", help="the model directory (default: a temporary one)")
    ap.add_argument("--epochs", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    out = args.out or os.path.join(tempfile.mkdtemp(), "fra-eng")

    epochs, losses = [], []

    def progress(p):
        if p.end_of_epoch:
            epochs.append(p.epoch)
            losses.append(p.d2l_loss)
            if p.epoch % 10 == 0 or p.epoch == p.epochs:
                print(f"epoch {p.epoch}/{p.epochs}  loss {p.d2l_loss:.3f}  "
                      f"{p.tokens_per_s:.0f} tokens/s", flush=True)

    qkv.train(args.data, out, overwrite=True, num_examples=601, d_model=32, heads=4, ffn=64,
              layers=2, dropout=0.1, batch=64, num_steps=10, lr=0.005, epochs=args.epochs,
              min_freq=2, clip=1.0, loss="d2l", seed=args.seed, progress=progress)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        plt.figure(figsize=(5, 3.5))
        plt.plot(epochs, losses)
        plt.xlabel("epoch")
        plt.ylabel("loss (d2l's)")
        plt.yscale("log")
        plt.tight_layout()
        plt.savefig(os.path.join(out, "loss.png"), dpi=100)
        print(f"loss curve: {os.path.join(out, 'loss.png')}")
    except ImportError:
        print("(matplotlib is not installed: no loss curve)")

    translator = qkv.Translator(out)
    for en, fr, r in zip(EN, FR, translator.translate_batch(EN)):
        print(f"{en} => {r.hypotheses[0]}, bleu {d2l_bleu(r.hypotheses[0], fr):.3f}")
    print(f"model: {out}")


if __name__ == "__main__":
    main()
