#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Translate text with a CTranslate2 model converted from a Hugging Face MarianMT directory
(ct2-transformers-converter), timing translate_batch alone: bench/ct2_bench.py's Marian rows.

    python3 bench/ct2_marian.py CT2_DIR SOURCE_SPM --input FILE [--beam N] [--batch B]
        [--threads T] [--max-len N] [--compute-type int8|float32]

Each line is encoded as MarianTokenizer encodes it (the source SentencePiece model's pieces,
then </s>); decoding starts from the model's decoder start (<pad>), never emits <pad>, and
stops at </s> or after --max-len tokens. stdout: each translation's pieces, space-separated,
or with --detok HF_DIR its text as MarianTokenizer.convert_tokens_to_string writes it (what
`qkv translate` prints for the model imported from HF_DIR); stderr: one JSON line {"sentences", "output_tokens", "seconds", "load_seconds"}, seconds being
the wall time of translate_batch.
"""
import argparse
import json
import sys
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("spm")
    ap.add_argument("--input", required=True)
    ap.add_argument("--beam", type=int, default=1)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-len", type=int, default=64)
    ap.add_argument("--compute-type", default="default")
    ap.add_argument("--detok", metavar="HF_DIR", help="print text, as MarianTokenizer of HF_DIR")
    args = ap.parse_args()
    import ctranslate2
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=args.spm)
    with open(args.input, encoding="utf-8") as f:
        lines = [l.rstrip("\n") for l in f]
    sources = [sp.encode(l, out_type=str) + ["</s>"] for l in lines]
    t0 = time.perf_counter()
    tr = ctranslate2.Translator(args.model, device="cpu", compute_type=args.compute_type,
                                intra_threads=args.threads, inter_threads=1)
    t1 = time.perf_counter()
    results = tr.translate_batch(sources, beam_size=args.beam, max_batch_size=args.batch,
                                 batch_type="examples", max_decoding_length=args.max_len)
    t2 = time.perf_counter()
    detok = " ".join
    if args.detok:
        from transformers import MarianTokenizer
        detok = MarianTokenizer.from_pretrained(args.detok).convert_tokens_to_string
    n = 0
    out = []
    for r in results:
        tokens = r.hypotheses[0]
        n += len(tokens)
        out.append(detok(tokens))
    sys.stdout.write("\n".join(out) + "\n")
    print(json.dumps({"sentences": len(lines), "output_tokens": n, "seconds": t2 - t1,
                      "load_seconds": t1 - t0, "compute_type": tr.compute_type}),
          file=sys.stderr)


if __name__ == "__main__":
    main()
