#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Small random-weight Marian (OPUS-MT) models and what Hugging Face's transformers computes
with them, for tests/unit/test_marian.c and tests/e2e/test_marian.sh (qkv import marian).

    /usr/bin/python3 tests/parity/make_marian_reference.py OUTDIR [DATA_DIR]
    (also run at the end of make_reference.py, so the Makefile's parity rule writes them)

Nothing is downloaded: tiny SentencePiece models are trained with pip's sentencepiece on a few
hundred lines of Multi30k (DATA_DIR/multi30k/train.{de,en}, default ../shared/data; a few
built-in lines when it is absent), and MarianMTModel gets random weights, then TRAIN_STEPS
Adam steps on those lines (so that it ends sentences at lengths of its own). For each
configuration below OUTDIR/marian_<name>/ is a Hugging Face MarianMT directory as
save_pretrained writes it (config.json, model.safetensors; vocab.json, source.spm,
target.spm and, with separate vocabularies, target_vocab.json), and
OUTDIR/marian_<name>.safetensors holds, in Marian's own ids:
    src (N, Ts), src_valid (N)      the sentences as MarianTokenizer encodes them (</s> last)
    tgt_in (N, Tt)                   teacher-forced decoder inputs: <pad> (the decoder's start)
                                     then reference target ids
    logits (N, Tt, V_target)         MarianMTModel's logits for them
    greedy (N, L), greedy_len (N)    generate(num_beams=1, max_new_tokens=MAX_NEW) without the
                                     start token and the final </s>
    beam<k> (N, L), beam<k>_len (N)  generate(num_beams=BEAM, length_penalty=LENGTH_PENALTIES[k],
                                     early_stopping=False), likewise
with metadata max_new (qkv's --max-len is max_new - 1: generate forces </s> as token max_new),
n (the sentences), beam and length_penalty<k>. The texts themselves are in OUTDIR/marian_<name>.de (one per line), their
greedy translations as text in OUTDIR/marian_<name>.greedy.en and their beam translations
(BEAM, LENGTH_PENALTIES[0]) in OUTDIR/marian_<name>.beam<BEAM>.en; OUTDIR/marian_<name>.decode.tsv
holds random target piece sequences and MarianTokenizer's text of each (write_decodings).
"""
import json
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
MAX_NEW = 24
TRAIN_STEPS, TRAIN_LR = 250, 1e-2
N_SENTENCES = 24
BEAM = 4
LENGTH_PENALTIES = (1.0, 0.6)  # transformers' default, and GNMT's

FALLBACK = [
    ("Ein Mann fährt Fahrrad.", "A man rides a bike."),
    ("Zwei Hunde spielen im Schnee.", "Two dogs play in the snow."),
    ("Eine Frau liest ein Buch im Park.", "A woman reads a book in the park."),
    ("Kinder laufen am Strand.", "Children run on the beach."),
    ("Ein Junge springt ins Wasser.", "A boy jumps into the water."),
    ("Die Leute stehen vor einem Gebäude.", "The people stand in front of a building."),
]

# name -> MarianConfig overrides; vocab: "shared" (one vocabulary, one embedding for both
# sides and the output) or "separate" (source and target vocabularies, untied embeddings)
CONFIGS = {
    # OPUS-MT's shape: SiLU (swish), scaled embeddings, one shared vocabulary
    "shared_swish": dict(vocab="shared", cfg=dict(
        d_model=16, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=32, decoder_ffn_dim=32,
        activation_function="swish", scale_embedding=True, max_position_embeddings=128)),
    # separate source and target vocabularies (tokenizer separate_vocabs) and embeddings, an
    # output projection of its own (transformers 4.38 cannot tie it to a target embedding of
    # another size than the source's)
    "separate_gelu": dict(vocab="separate", cfg=dict(
        d_model=12, encoder_layers=1, decoder_layers=2, encoder_attention_heads=3,
        decoder_attention_heads=3, encoder_ffn_dim=24, decoder_ffn_dim=24,
        activation_function="gelu", scale_embedding=True, max_position_embeddings=96,
        share_encoder_decoder_embeddings=False, tie_word_embeddings=False)),
    # ReLU, unscaled embeddings, odd d_model ([sin | cos] with one more sine), one embedding
    # for both sides but an output projection of its own
    "shared_relu_untied": dict(vocab="shared", cfg=dict(
        d_model=10, encoder_layers=2, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=20, decoder_ffn_dim=20,
        activation_function="relu", scale_embedding=False, max_position_embeddings=80,
        tie_word_embeddings=False)),
    # shared_swish's shape, with 40 pieces that only the source SentencePiece model knows
    # made likely (source_boost on their output bias): most outputs hold such pieces, which
    # the target model cannot decode (MarianTokenizer renders their "\u2581" as a space)
    "shared_source_pieces": dict(vocab="shared", source_boost=8.0, n=40, seed=12, cfg=dict(
        d_model=16, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=32, decoder_ffn_dim=32,
        activation_function="swish", scale_embedding=True, max_position_embeddings=128)),
}


def read_pairs(data_dir, n):
    de = os.path.join(data_dir, "multi30k", "train.de")
    en = os.path.join(data_dir, "multi30k", "train.en")
    if not (os.path.exists(de) and os.path.exists(en)):
        return FALLBACK * (n // len(FALLBACK) + 1)
    with open(de, encoding="utf-8") as f, open(en, encoding="utf-8") as g:
        return [(a.strip(), b.strip()) for a, b, _ in zip(f, g, range(n))]


def train_spm(lines, prefix, vocab_size):
    import sentencepiece as spm
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_prefix=prefix, vocab_size=vocab_size,
        model_type="unigram", character_coverage=1.0, bos_id=-1, eos_id=-1, unk_id=0,
        pad_id=-1, hard_vocab_limit=False, minloglevel=2, num_threads=1, seed_sentencepiece_size=5000)
    return prefix + ".model"


def write_vocab(path, spm_paths, pad_last=True):
    """Marian's vocab.json: </s> 0, <unk> 1, the pieces of the SentencePiece models, <pad>
    last (as OPUS-MT's), or <pad> 2 (two vocabularies must agree on its id: the
    configuration has one pad_token_id)."""
    import sentencepiece as spm
    pieces = []
    for p in spm_paths:
        sp = spm.SentencePieceProcessor(model_file=p)
        pieces += [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    vocab = {"</s>": 0, "<unk>": 1}
    if not pad_last:
        vocab["<pad>"] = 2
    for piece in pieces:
        if piece not in vocab and piece != "<pad>":
            vocab[piece] = len(vocab)
    if pad_last:
        vocab["<pad>"] = len(vocab)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False, indent=1)
    return vocab


def train(model, tok, src_lines, tgt_lines):
    """A few Adam steps on the pairs, so that the model ends its sentences at lengths of their
    own (a random model puts </s> first or never) and beam search has choices to make."""
    torch.manual_seed(0)
    enc = tok(src_lines, text_target=tgt_lines, return_tensors="pt", padding=True,
              truncation=True, max_length=48)
    labels = enc["labels"].masked_fill(enc["labels"] == model.config.pad_token_id, -100)
    opt = torch.optim.Adam(model.parameters(), lr=TRAIN_LR)
    model.train()
    for step in range(TRAIN_STEPS):
        idx = torch.randint(0, labels.shape[0], (32,))
        loss = model(input_ids=enc["input_ids"][idx], attention_mask=enc["attention_mask"][idx],
                     labels=labels[idx]).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    return float(loss)


def build(name, spec, out, pairs, tmp):
    from transformers import MarianConfig, MarianMTModel, MarianTokenizer
    d = os.path.join(out, "marian_" + name)
    os.makedirs(d, exist_ok=True)
    src_lines = [p[0] for p in pairs]
    tgt_lines = [p[1] for p in pairs]
    src_spm = train_spm(src_lines, os.path.join(tmp, name + "_src"), 400)
    tgt_spm = train_spm(tgt_lines, os.path.join(tmp, name + "_tgt"), 300)
    for spm_path, dst in ((src_spm, "source.spm"), (tgt_spm, "target.spm")):
        with open(spm_path, "rb") as f, open(os.path.join(d, dst), "wb") as g:
            g.write(f.read())
    separate = spec["vocab"] == "separate"
    if separate:
        sv = write_vocab(os.path.join(d, "vocab.json"), [src_spm], pad_last=False)
        tv = write_vocab(os.path.join(d, "target_vocab.json"), [tgt_spm], pad_last=False)
    else:
        sv = tv = write_vocab(os.path.join(d, "vocab.json"), [src_spm, tgt_spm])
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"separate_vocabs": separate, "source_lang": "de", "target_lang": "en",
                   "model_max_length": 512}, f)
    pad = sv["<pad>"]
    assert tv["<pad>"] == pad or separate
    cfg = MarianConfig(vocab_size=len(sv), decoder_vocab_size=len(tv), pad_token_id=tv["<pad>"],
                       decoder_start_token_id=tv["<pad>"], eos_token_id=0,
                       forced_eos_token_id=0, bad_words_ids=[[tv["<pad>"]]], dropout=0.1,
                       **spec["cfg"])
    torch.manual_seed(spec.get("seed", len(name)))
    model = MarianMTModel(cfg).eval()
    with torch.no_grad():  # random biases and norms, so that every one of them matters
        g = torch.Generator().manual_seed(7)
        for pname, p in model.named_parameters():
            if p.dim() == 1 or "layer_norm" in pname:
                p.add_(torch.randn(p.shape, generator=g) * 0.1)
        model.final_logits_bias.normal_(0.0, 0.5, generator=g)
    model.save_pretrained(d, safe_serialization=True)
    tok = MarianTokenizer.from_pretrained(d)
    train(model, tok, src_lines, tgt_lines)
    with torch.no_grad():  # <pad> so likely that only bad_words_ids keeps it out
        model.final_logits_bias[0, tv["<pad>"]] += 8.0
    source_only = []
    if spec.get("source_boost"):
        import sentencepiece as spm
        sp = spm.SentencePieceProcessor(model_file=tgt_spm)
        known = {sp.id_to_piece(i) for i in range(sp.get_piece_size())}
        source_only = [i for piece, i in tv.items()
                       if piece not in known and piece not in ("</s>", "<unk>", "<pad>")]
        g = torch.Generator().manual_seed(3)
        chosen = torch.tensor(source_only)[torch.randperm(len(source_only), generator=g)[:40]]
        with torch.no_grad():
            model.final_logits_bias[0, chosen] += spec["source_boost"]
    model.save_pretrained(d, safe_serialization=True)

    # the README's example first, then the last short pairs
    n_sentences = spec.get("n", N_SENTENCES)
    short = [FALLBACK[0]] + [p for p in pairs if len(p[0]) < 70 and len(p[1]) < 70][1 - n_sentences:]
    texts, refs = [p[0] for p in short], [p[1] for p in short]
    enc = tok(texts, return_tensors="pt", padding=True)
    with torch.no_grad():
        tgt = tok(text_target=refs, return_tensors="pt", padding=True)["input_ids"]
        start = torch.full((tgt.shape[0], 1), cfg.decoder_start_token_id)
        tgt_in = torch.cat([start, tgt[:, :-1]], dim=1)
        logits = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"],
                       decoder_input_ids=tgt_in).logits
        greedy = model.generate(**enc, num_beams=1, do_sample=False, max_new_tokens=MAX_NEW)
        beams = {lp: model.generate(**enc, num_beams=BEAM, do_sample=False,
                                    max_new_tokens=MAX_NEW, length_penalty=lp,
                                    early_stopping=False)
                 for lp in LENGTH_PENALTIES}

    def outputs(seqs):
        rows, lens = [], []
        for row in seqs[:, 1:].tolist():  # without the start token
            ids = []
            for t in row:
                if t == 0 or t == tv["<pad>"]:
                    break
                ids.append(t)
            rows.append(ids + [-1] * (MAX_NEW - len(ids)))
            lens.append(len(ids))
        return np.array(rows, np.int32), np.array(lens, np.int32)

    tensors = {
        "src": enc["input_ids"].numpy().astype(np.int32),
        "src_valid": enc["attention_mask"].sum(1).numpy().astype(np.int32),
        "tgt_in": tgt_in.numpy().astype(np.int32),
        "logits": logits.numpy().astype(np.float32),
    }
    tensors["greedy"], tensors["greedy_len"] = outputs(greedy)
    for k, lp in enumerate(LENGTH_PENALTIES):
        tensors[f"beam{k}"], tensors[f"beam{k}_len"] = outputs(beams[lp])
    if source_only:  # the point of the configuration: outputs the target model cannot decode
        held = sum(any(t in set(source_only) for t in row) for row in greedy.tolist())
        assert held >= len(texts) // 2, f"{name}: only {held} outputs hold source-only pieces"
        print(name, held, "of", len(texts), "outputs hold source-only pieces", file=sys.stderr)
    with open(os.path.join(out, "marian_" + name + ".de"), "w", encoding="utf-8") as f:
        f.write("\n".join(texts) + "\n")
    for what, seqs in (("greedy", greedy), (f"beam{BEAM}", beams[LENGTH_PENALTIES[0]])):
        with open(os.path.join(out, f"marian_{name}.{what}.en"), "w", encoding="utf-8") as f:
            f.write("\n".join(tok.batch_decode(seqs, skip_special_tokens=True)) + "\n")
    write_decodings(os.path.join(out, f"marian_{name}.decode.tsv"), tok, tv)
    meta = {"max_new": MAX_NEW, "n": len(texts), "beam": BEAM}
    meta.update({f"length_penalty{k}": repr(lp) for k, lp in enumerate(LENGTH_PENALTIES)})
    return tensors, meta


def write_decodings(path, tok, vocab, n=300):
    """Random sequences of target pieces (</s> and <pad> aside; <unk> and punctuation
    frequent, so that skipping, stripping and clean_up_tokenization all matter) and their
    text as MarianTokenizer.decode(skip_special_tokens=True) gives it: one line each, the
    pieces joined by spaces, a tab, the text."""
    import random
    rng = random.Random(5)
    pieces = [p for p in vocab if p not in ("</s>", "<pad>")]
    punct = [p for p in pieces if any(c in p for c in ".,!?'")] + ["<unk>"]
    with open(path, "w", encoding="utf-8") as f:
        for _ in range(n):
            seq = [rng.choice(punct if rng.random() < 0.4 else pieces)
                   for _ in range(rng.randint(1, 10))]
            text = tok.decode([vocab[p] for p in seq], skip_special_tokens=True)
            assert "\t" not in text and "\n" not in text
            f.write(" ".join(seq) + "\t" + text + "\n")


def write_all(save, out, data_dir="../shared/data"):
    import tempfile
    pairs = read_pairs(data_dir, 400)
    with tempfile.TemporaryDirectory() as tmp:
        for name, spec in CONFIGS.items():
            tensors, meta = build(name, spec, out, pairs, tmp)
            save("marian_" + name, tensors, meta)


if __name__ == "__main__":
    sys.path.insert(0, HERE)
    import make_reference
    make_reference.OUT = sys.argv[1]
    os.makedirs(sys.argv[1], exist_ok=True)
    write_all(make_reference.save, sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "../shared/data")
