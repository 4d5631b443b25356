#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""A random-weight MarianMT model of OPUS-MT's shape, as a Hugging Face directory, for
bench/ct2_bench.py's Marian rows (`make bench-ct2`). Nothing is downloaded.

    /usr/bin/python3 bench/marian_model.py OUT_DIR [--d-model 512] [--ffn 2048] [--layers 6]
        [--heads 8] [--vocab 58101] [--data ../shared/data] [--seed 1]

OUT_DIR receives what save_pretrained writes for a MarianMTModel (config.json,
model.safetensors) and what MarianTokenizer reads (vocab.json, source.spm, target.spm,
tokenizer_config.json): the layout of an OPUS-MT model on the Hugging Face hub, e.g.
Helsinki-NLP/opus-mt-de-en (d512, 6+6 layers, 8 heads, FFN 2048, swish, scaled embeddings,
one vocabulary of 58,101 pieces with <pad> last, shared by both sides and tied to the output).
The SentencePiece models are trained on the first 20,000 lines of Multi30k's training set
(German for the source, English for the target); vocab.json holds their pieces and filler
pieces up to --vocab, so the output layer has OPUS-MT's 58,101 rows. The weights are
transformers' own initialisation (normal, std init_std 0.02; zero biases; LayerNorms at 1)
under --seed: the speed of a model does not depend on what it learned, and the int8 check
compares qkv against itself on the same weights.
"""
import argparse
import json
import os
import sys
import tempfile


def train_spm(lines, prefix, vocab_size):
    import sentencepiece as spm
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_prefix=prefix, vocab_size=vocab_size,
        model_type="unigram", character_coverage=1.0, bos_id=-1, eos_id=-1, unk_id=0,
        pad_id=-1, hard_vocab_limit=False, minloglevel=2, num_threads=2)
    return prefix + ".model"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--d-model", type=int, default=512)
    ap.add_argument("--ffn", type=int, default=2048)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=58101)
    ap.add_argument("--pieces", type=int, default=8000, help="SentencePiece pieces per side")
    ap.add_argument("--data", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                   "..", "..", "shared", "data"))
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()

    import sentencepiece as spm
    import torch
    from transformers import MarianConfig, MarianMTModel

    lines = {}
    for side in ("de", "en"):
        path = os.path.join(args.data, "multi30k", f"train.{side}")
        with open(path, encoding="utf-8") as f:
            lines[side] = [l.strip() for l, _ in zip(f, range(20000 if args.pieces > 1000 else 2000))]
    os.makedirs(args.out, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        models = {}
        for side, name in (("de", "source.spm"), ("en", "target.spm")):
            p = train_spm(lines[side], os.path.join(tmp, side), args.pieces)
            with open(p, "rb") as f, open(os.path.join(args.out, name), "wb") as g:
                g.write(f.read())
            models[side] = p
        # vocab.json as OPUS-MT's: </s> 0, <unk> 1, the pieces of both models, <pad> last
        vocab = {"</s>": 0, "<unk>": 1}
        for p in (models["de"], models["en"]):
            sp = spm.SentencePieceProcessor(model_file=p)
            for i in range(sp.get_piece_size()):
                piece = sp.id_to_piece(i)
                if piece not in vocab and piece != "<pad>":
                    vocab[piece] = len(vocab)
    if len(vocab) >= args.vocab:
        sys.exit(f"marian_model: {len(vocab)} pieces do not fit a vocabulary of {args.vocab}")
    while len(vocab) < args.vocab - 1:
        vocab[f"<filler{len(vocab)}>"] = len(vocab)
    vocab["<pad>"] = len(vocab)
    with open(os.path.join(args.out, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False, indent=1)
    with open(os.path.join(args.out, "tokenizer_config.json"), "w") as f:
        json.dump({"separate_vocabs": False, "source_lang": "de", "target_lang": "en",
                   "model_max_length": 512}, f)
    pad = vocab["<pad>"]
    cfg = MarianConfig(
        vocab_size=len(vocab), decoder_vocab_size=len(vocab), d_model=args.d_model,
        encoder_layers=args.layers, decoder_layers=args.layers,
        encoder_attention_heads=args.heads, decoder_attention_heads=args.heads,
        encoder_ffn_dim=args.ffn, decoder_ffn_dim=args.ffn, activation_function="swish",
        scale_embedding=True, max_position_embeddings=512, pad_token_id=pad,
        decoder_start_token_id=pad, eos_token_id=0, forced_eos_token_id=0,
        bad_words_ids=[[pad]], num_beams=4, max_length=512)
    torch.manual_seed(args.seed)
    model = MarianMTModel(cfg).eval()
    model.save_pretrained(args.out, safe_serialization=True)
    n = sum(p.numel() for p in model.parameters())
    print(f"marian_model: {args.out}: d{args.d_model} {args.layers}+{args.layers} FFN {args.ffn}, "
          f"vocabulary {len(vocab)}, {n:,} parameters", file=sys.stderr)


if __name__ == "__main__":
    main()
