#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A plain reference for qkv's byte-pair encoding (src/text/bpe.c), to cross-check the merge
sequence: Sennrich et al.'s algorithm as literally as it can be written, recounting every
pair of the whole vocabulary before each merge (slow, obviously right).

Rules shared with qkv_bpe_learn (see include/qkv.h):
  * a word is U+2581 + the d2l word token; the alphabet is every character, most frequent
    first, ties by UTF-8 bytes, cut to vocab_size - 4 (the rest are unknown: None here);
    '\\r', '\\n' and a literal U+2581 are always unknown;
  * each step merges the pair with the highest count (each distinct word weighted by its
    frequency), ties by the left then the right symbol's UTF-8 bytes (smaller first), every
    occurrence left to right; pairs seen fewer than twice, or spelling a reserved token,
    never merge; a merge whose string already is a symbol adds no symbol;
  * stop when the symbols number vocab_size - 4.

Prints, for each case that tests/unit/test_bpe.c checks, the number of characters, merges,
symbols and the FNV-1a 64 digest of the merges written "left right\\n" (the qkv_bpe_save
lines). Usage: bpe_reference.py [DATA_DIR]   (default ../shared/data)
"""
import sys
from collections import Counter

SPACE = "\u2581"
RESERVED = ("<unk>", "<pad>", "<bos>", "<eos>")


def preprocess(text):
    """d2l's preprocess_nmt (qkv_preprocess agrees with it on these files)."""
    text = text.replace("\u202f", " ").replace("\xa0", " ").lower()
    out = []
    for i, ch in enumerate(text):
        out.append(" " + ch if i > 0 and ch in ",.!?" and text[i - 1] != " " else ch)
    return "".join(out)


def words_of(line):
    return [w for w in preprocess(line).split(" ") if w]


def learn(words, vocab_size):
    counts = Counter(SPACE + w for w in words)
    chars = Counter()
    for w, f in counts.items():
        for ch in w:
            chars[ch] += f
    for bad in ("\r", "\n"):
        chars.pop(bad, None)
    # a literal U+2581 inside a word is unknown; the marker itself counts once per word
    chars[SPACE] = sum(counts.values())
    alphabet = sorted(chars, key=lambda c: (-chars[c], c.encode()))[: vocab_size - 4]
    known = set(alphabet)
    seqs = {}
    for w, f in counts.items():
        seq = [SPACE] + [c if c in known and c != SPACE else None for c in w[1:]]
        seqs[w] = seq
    symbols = list(alphabet)
    symbol_set = set(symbols)
    merges = []
    while len(symbols) < vocab_size - 4:
        stats = Counter()
        for w, seq in seqs.items():
            for a, b in zip(seq, seq[1:]):
                if a is not None and b is not None:
                    stats[(a, b)] += counts[w]
        cands = [(p, c) for p, c in stats.items() if c >= 2 and p[0] + p[1] not in RESERVED]
        if not cands:
            break
        (a, b), _ = min(cands, key=lambda pc: (-pc[1], pc[0][0].encode(), pc[0][1].encode()))
        merges.append((a, b))
        ab = a + b
        if ab not in symbol_set:
            symbols.append(ab)
            symbol_set.add(ab)
        for w, seq in seqs.items():
            out, i = [], 0
            while i < len(seq):
                if i + 1 < len(seq) and seq[i] == a and seq[i + 1] == b:
                    out.append(ab)
                    i += 2
                else:
                    out.append(seq[i])
                    i += 1
            seqs[w] = out
    return alphabet, merges, symbols


def fnv1a(data):
    h = 14695981039346656037
    for byte in data:
        h = ((h ^ byte) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


def report(name, words, vocab_size):
    alphabet, merges, symbols = learn(words, vocab_size)
    text = "".join(f"{a} {b}\n" for a, b in merges).encode()
    print(f"{name}: chars {len(alphabet)} merges {len(merges)} symbols {len(symbols)} "
          f"digest 0x{fnv1a(text):016x}ull")
    return merges


def lines(path, n):
    with open(path, encoding="utf-8") as f:
        return [next(f).rstrip("\n") for _ in range(n)]


def main():
    data = sys.argv[1] if len(sys.argv) > 1 else "../shared/data"
    toy = ["low"] * 5 + ["lower"] * 2 + ["newest"] * 6 + ["widest"] * 3
    merges = report("toy", toy, 4 + 10 + 10)
    print("  toy merges:", ", ".join(f"{a}+{b}" for a, b in merges))
    # fra.txt: the first 2000 lines, both columns, one joint encoding
    fra = []
    for line in lines(f"{data}/fra-eng/fra.txt", 2000):
        src, tgt = preprocess(line).split("\t")[:2]
        fra += [w for w in src.split(" ") if w] + [w for w in tgt.split(" ") if w]
    report("fra2000 joint 600", fra, 600)
    # Multi30k validation: per language and joint
    de = [w for l in lines(f"{data}/multi30k/val.de", 1014) for w in words_of(l)]
    en = [w for l in lines(f"{data}/multi30k/val.en", 1014) for w in words_of(l)]
    report("val.de 500", de, 500)
    report("val.de+en joint 1000", de + en, 1000)
    # a vocabulary smaller than the alphabet: the rarest characters are unknown
    report("val.de 40", de, 40)


if __name__ == "__main__":
    main()
