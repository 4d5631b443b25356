#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""CTranslate2 against qkv on one model, for tests/e2e/test_ct2.sh (qkv export ct2).

    ct2_check.py QKV_MODEL_DIR CT2_DIR SOURCES QKV_OUTPUT MAX_LEN [--compute-type T]
                 [--same-as CT2_DIR2 --compute-type2 T2]
    ct2_check.py --logits REFERENCE.safetensors VOCAB_JSON CT2_DIR [TARGET_VOCAB_JSON]

Tokenises each line of SOURCES as qkv does (a SentencePiece model's pieces, or the line's
whitespace-separated words), translates the tokens greedily with ctranslate2.Translator,
detokenises as the model's text.json says (MarianTokenizer's rules for "detokenize":
"marian") and compares each line with QKV_OUTPUT, qkv translate's output for the same
sources. Exit 1 on any difference. With --same-as, the outputs of CT2_DIR2 (under
--compute-type2) must equal CT2_DIR's instead: the int8 file written by qkv against
CTranslate2's own quantisation of the float32 one. With --logits: CTranslate2's
log-probabilities of reference targets against transformers' logits (check_logits).""" 
import argparse
import json
import os
import sys

import ctranslate2


def tokenizer(model_dir):
    text = {}
    if os.path.exists(os.path.join(model_dir, "text.json")):
        text = json.load(open(os.path.join(model_dir, "text.json")))
    vocab = [l.rstrip("\n") for l in open(os.path.join(model_dir, "src_vocab.txt"), encoding="utf-8")]
    known = set(vocab)
    if text.get("tokenizer") in ("spm", "sentencepiece"):
        import sentencepiece as spm
        src = spm.SentencePieceProcessor(model_file=os.path.join(model_dir, text.get("source_spm", "source.spm")))
        tgt = spm.SentencePieceProcessor(model_file=os.path.join(model_dir, text.get("target_spm", "target.spm")))

        def encode(line):
            pieces = src.encode(" ".join(line.split()), out_type=str)
            return [p if p in known else "<unk>" for p in pieces]

        def decode(tokens):
            tokens = [t for t in tokens if t not in ("<pad>", "<bos>", "<unk>")]
            s = tgt.decode_pieces(tokens)
            if text.get("detokenize", "sentencepiece") == "sentencepiece":
                return s.rstrip(" ")
            s = s.replace("\u2581", " ").strip()
            if text.get("clean_up_spaces"):
                for a, b in ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"),
                             (" n't", "n't"), (" 'm", "'m"), (" 's", "'s"), (" 've", "'ve"),
                             (" 're", "'re")):
                    s = s.replace(a, b)
            return s
        return encode, decode
    return (lambda line: [w if w in known else "<unk>" for w in line.split()],
            lambda tokens: " ".join(t for t in tokens if t not in ("<pad>", "<bos>")))


def translate(ct2_dir, compute_type, batches, max_len):
    t = ctranslate2.Translator(ct2_dir, device="cpu", compute_type=compute_type, inter_threads=1,
                               intra_threads=1)
    # min_decoding_length 0: qkv (and transformers) let <eos> come first; CTranslate2 does not
    # by default
    out = t.translate_batch(batches, beam_size=1, max_decoding_length=max_len,
                            min_decoding_length=0)
    return [r.hypotheses[0] for r in out]


def check_logits(ref, vocab_json, ct2_dir, target_vocab_json=None):
    """CTranslate2's log-probabilities of the reference targets (score_batch) against
    transformers' logits in ref (make_marian_reference.py's src, src_valid, tgt_in, logits),
    normalised without <pad> (which the exported model never generates), within 1e-4."""
    import numpy as np
    from safetensors.numpy import load_file
    r = load_file(ref)
    sv = {i: p for p, i in json.load(open(vocab_json, encoding="utf-8")).items()}
    tv = {i: p for p, i in json.load(open(target_vocab_json or vocab_json, encoding="utf-8")).items()}
    pad = [i for i, p in tv.items() if p == "<pad>"][0]
    eos = [i for i, p in tv.items() if p == "</s>"][0]
    t = ctranslate2.Translator(ct2_dir, device="cpu", compute_type="float32", intra_threads=1)
    worst, n = 0.0, 0
    for k in range(r["src"].shape[0]):
        src = [sv[int(i)] for i in r["src"][k][: int(r["src_valid"][k]) - 1]]
        ids = [int(i) for i in r["tgt_in"][k][1:]]
        if pad in ids:
            ids = ids[: ids.index(pad)]
        if eos in ids:
            ids = ids[: ids.index(eos)]
        got = t.score_batch([[s if s != "</s>" else "<eos>" for s in src]],
                            [[tv[i] for i in ids]])[0].log_probs
        logits = r["logits"][k].astype(np.float64)
        logits[:, pad] = -np.inf
        logp = logits - np.log(np.exp(logits - logits.max(1, keepdims=True)).sum(1, keepdims=True)) \
            - logits.max(1, keepdims=True)
        for j, want_id in enumerate(ids + [eos]):
            d = abs(got[j] - logp[j, want_id])
            worst, n = max(worst, d), n + 1
            if not d <= 1e-4 * max(1.0, abs(logp[j, want_id])):
                print(f"sentence {k}, position {j}: CTranslate2 {got[j]:.7g}, transformers "
                      f"{logp[j, want_id]:.7g}", file=sys.stderr)
                sys.exit(1)
    print(f"{n} log-probabilities of CTranslate2 within {worst:.1e} of transformers' "
          f"({ct2_dir})", file=sys.stderr)


def main():
    if sys.argv[1] == "--logits":
        check_logits(*sys.argv[2:])
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("model"), ap.add_argument("ct2"), ap.add_argument("sources")
    ap.add_argument("qkv_output"), ap.add_argument("max_len", type=int)
    ap.add_argument("--compute-type", default="float32")
    ap.add_argument("--same-as"), ap.add_argument("--compute-type2", default="float32")
    a = ap.parse_args()
    encode, decode = tokenizer(a.model)
    lines = open(a.sources, encoding="utf-8").read().splitlines()
    got = translate(a.ct2, a.compute_type, [encode(l) for l in lines], a.max_len)
    if a.same_as:
        want = translate(a.same_as, a.compute_type2, [encode(l) for l in lines], a.max_len)
        what = f"{a.same_as} ({a.compute_type2})"
    else:
        want = [l.split(" ") for l in open(a.qkv_output, encoding="utf-8").read().splitlines()]
        got = [decode(h).split(" ") for h in got]
        what = "qkv translate"
    bad = [i for i, (g, w) in enumerate(zip(got, want)) if g != w]
    if len(got) != len(want):
        bad.append(min(len(got), len(want)))
    for i in bad[:3]:
        print(f"line {i + 1}: CTranslate2 {' '.join(got[i]) if i < len(got) else '-'!r}, "
              f"{what} {' '.join(want[i]) if i < len(want) else '-'!r}", file=sys.stderr)
    print(f"{len(lines) - len(bad)} of {len(lines)} sentences as {what} "
          f"({a.ct2}, {a.compute_type})", file=sys.stderr)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
