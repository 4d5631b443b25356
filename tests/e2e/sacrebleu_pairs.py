# SPDX-License-Identifier: MIT
"""Writes hypotheses made from reference lines by systematic damage, for test_sacrebleu.sh:
dropped, swapped, repeated and replaced words, case changes, punctuation added or spaced
off, tricky tokens (numbers with commas, hyphens after digits, HTML entities, <skipped>,
abbreviations, non-ASCII letters and spaces) and empty lines.
    perturb.py REFS OUT_HYPS SEED"""
import random
import sys

TRICKY = ["3,000", "5-year", "&amp;", "&quot;hi&quot;", "<skipped>", "e.g.", "U.S.A.", "1.5",
          "l'homme", '"quoted"', "(x)", "a/b", "\u00df", "Gr\u00f6\u00dfe.", "caf\u00e9,",
          "\u2014", "\u2026", "\u00a0", "x\u2009y", "10-20", "$5.", "{}", "--"]


def damage(s, rng):
    w = s.split()
    k = rng.randrange(10)
    if k == 0 and len(w) > 1:
        del w[rng.randrange(len(w))]
    elif k == 1 and len(w) > 2:
        i = rng.randrange(len(w) - 1)
        w[i], w[i + 1] = w[i + 1], w[i]
    elif k == 2:
        w = [x.upper() if rng.random() < 0.3 else x for x in w]
    elif k == 3:
        w = [x + rng.choice([",", ".", "!", "?", ";", "...", " ."]) if rng.random() < 0.2 else x
             for x in w]
    elif k == 4:
        w = [rng.choice(TRICKY) if rng.random() < 0.2 else x for x in w]
    elif k == 5:
        w = w + w[:2]
    elif k == 6:
        w = [x.lower() for x in w]
    elif k == 7:
        return s.rstrip(".").rstrip() + " ."
    elif k == 8:
        return ""
    return " ".join(w)


def main():
    refs = [l.rstrip("\n") for l in open(sys.argv[1], encoding="utf-8")]
    rng = random.Random(int(sys.argv[3]))
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        for r in refs:
            f.write(damage(r, rng) + "\n")


if __name__ == "__main__":
    main()
