#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Translate a file with a pretrained Marian (OPUS-MT) model from Python.

    python examples/python_translate.py MODEL_DIR INPUT [--out OUTPUT] [--ref REFERENCES]
        [--beam 4] [--batch 32]

MODEL_DIR is a Hugging Face MarianMT directory (e.g. Helsinki-NLP/opus-mt-de-en, fetched with
`huggingface-cli download Helsinki-NLP/opus-mt-de-en --local-dir opus-mt-de-en`; see
docs/pretrained.md), imported here with qkv.import_marian into MODEL_DIR.qkv the first time,
or a qkv model directory. INPUT holds one sentence a line; the translations go to OUTPUT (or
standard output) as `qkv translate --input INPUT` writes them, and with REFERENCES their
sacreBLEU BLEU and chrF2 are printed to standard error.
"""
import argparse
import os
import sys

import qkv


def model_dir(path):
    """A qkv model directory: path itself, or its import (path.qkv) if it is Hugging Face's."""
    if os.path.exists(os.path.join(path, "src_vocab.txt")):
        return path
    out = path.rstrip("/") + ".qkv"
    if not os.path.exists(os.path.join(out, "model.safetensors")):
        print(f"importing {path} into {out}", file=sys.stderr)
        qkv.import_marian(path, out)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("input")
    ap.add_argument("--out", help="translations (default: standard output)")
    ap.add_argument("--ref", help="reference translations, line by line, for BLEU and chrF2")
    ap.add_argument("--beam", type=int, default=4, help="beam size (1: greedy)")
    ap.add_argument("--batch", type=int, default=32, help="sentences translated together")
    args = ap.parse_args()

    translator = qkv.Translator(model_dir(args.model))
    print(translator, file=sys.stderr)
    out = open(args.out, "w", encoding="utf-8") if args.out else sys.stdout
    hyps = []
    with open(args.input, encoding="utf-8") as f:
        for r in translator.translate_iterable(f, batch_size=args.batch, beam_size=args.beam):
            hyps.append(r.hypotheses[0] if r.hypotheses else "")
            print(hyps[-1], file=out, flush=True)
    if args.out:
        out.close()
    if args.ref:
        with open(args.ref, encoding="utf-8") as f:
            refs = [line.rstrip("\r\n") for line in f]
        print(qkv.eval_bleu(hyps, refs[:len(hyps)]), file=sys.stderr)


if __name__ == "__main__":
    main()
