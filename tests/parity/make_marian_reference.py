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
    # a multi-target model: >>fra<< and >>ita<< in the vocabulary, every source led by
    # >>fra<< (MarianTokenizer reads it as one token; qkv translate --target-lang fra)
    "shared_multi_target": dict(vocab="shared", langs=[">>fra<<", ">>ita<<"], target="fra",
                                cfg=dict(
        d_model=16, encoder_layers=1, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=32, decoder_ffn_dim=32,
        activation_function="swish", scale_embedding=True, max_position_embeddings=128)),
    "shared_source_pieces": dict(vocab="shared", source_boost=8.0, n=40, seed=12, cfg=dict(
        d_model=16, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=32, decoder_ffn_dim=32,
        activation_function="swish", scale_embedding=True, max_position_embeddings=128)),
}


# Marian's own releases (qkv import marian RELEASE_DIR or RELEASE.zip): random-weight models
# of Marian's shape (scaled embeddings, <pad> last, </s> 0) written as Marian writes them
# (model.npz under Marian's names with special:model.yml, vocabulary .yml, decoder.yml,
# source.spm, target.spm), then converted by transformers' own convert_marian_to_pytorch
# (OpusState), whose model is the reference; decoder.yml's beam-size and normalize are the
# defaults qkv must decode with.
RELEASES = {
    # one vocabulary and one embedding for everything (tied-embeddings-all)
    "release_shared": dict(vocab="shared", beam_size=3, normalize=0.6, ffn_act="swish", cfg=dict(
        d_model=16, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=32, decoder_ffn_dim=32,
        activation_function="swish", scale_embedding=True, max_position_embeddings=128)),
    # separate vocabularies (src.vocab.yml, trg.vocab.yml) and embeddings, the output tied to
    # the target embedding (tied-embeddings)
    "release_separate": dict(vocab="separate", pad_last=True, vocab_size=420, beam_size=5,
                             normalize=1.0, ffn_act="relu", cfg=dict(
        d_model=12, encoder_layers=1, decoder_layers=2, encoder_attention_heads=3,
        decoder_attention_heads=3, encoder_ffn_dim=24, decoder_ffn_dim=24,
        activation_function="relu", scale_embedding=True, max_position_embeddings=128,
        share_encoder_decoder_embeddings=False, tie_word_embeddings=True)),
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


def write_vocab(path, spm_paths, pad_last=True, size=None, extra=()):
    """Marian's vocab.json: </s> 0, <unk> 1, the pieces of the SentencePiece models, <pad>
    last (as OPUS-MT's), or <pad> 2 (two vocabularies must agree on its id: the
    configuration has one pad_token_id); with size, filler pieces before <pad> make it that
    large (two vocabularies with <pad> last must be of one size)."""
    import sentencepiece as spm
    pieces = []
    for p in spm_paths:
        sp = spm.SentencePieceProcessor(model_file=p)
        pieces += [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    vocab = {"</s>": 0, "<unk>": 1}
    if not pad_last:
        vocab["<pad>"] = 2
    for token in extra:  # language tokens of a multi-target model
        vocab[token] = len(vocab)
    for piece in pieces:
        if piece not in vocab and piece != "<pad>":
            vocab[piece] = len(vocab)
    if size:
        assert len(vocab) < size, (len(vocab), size)
        while len(vocab) < size - 1:
            vocab[f"<filler{len(vocab)}>"] = len(vocab)
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


def make_model(name, spec, d, pairs, tmp):
    """A trained random-weight MarianMTModel saved as a Hugging Face directory d, its
    tokenizer, the vocabularies (token -> id) and the target SentencePiece model's path."""
    from transformers import MarianConfig, MarianMTModel, MarianTokenizer
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
        pad_last = spec.get("pad_last", False)
        sv = write_vocab(os.path.join(d, "vocab.json"), [src_spm], pad_last=pad_last,
                         size=spec.get("vocab_size"))
        tv = write_vocab(os.path.join(d, "target_vocab.json"), [tgt_spm], pad_last=pad_last,
                         size=spec.get("vocab_size"))
    else:
        sv = tv = write_vocab(os.path.join(d, "vocab.json"), [src_spm, tgt_spm],
                              extra=spec.get("langs", ()))
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
    lead = f">>{spec['target']}<< " if spec.get("target") else ""
    train(model, tok, [lead + line for line in src_lines], tgt_lines)
    return model, tok, sv, tv, tgt_spm


def build(name, spec, out, pairs, tmp):
    d = os.path.join(out, "marian_" + name)
    model, tok, sv, tv, tgt_spm = make_model(name, spec, d, pairs, tmp)
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
    return references(name, spec, model, tok, tv, out, pairs, source_only)


def references(name, spec, model, tok, tv, out, pairs, source_only=()):
    """transformers' logits, greedy and beam outputs of the model for the test sentences, in
    Marian's ids, and their texts (OUTDIR/marian_<name>.*)."""
    cfg = model.config
    # the README's example first, then the last short pairs
    n_sentences = spec.get("n", N_SENTENCES)
    short = [FALLBACK[0]] + [p for p in pairs if len(p[0]) < 70 and len(p[1]) < 70][1 - n_sentences:]
    texts, refs = [p[0] for p in short], [p[1] for p in short]
    lead = f">>{spec['target']}<< " if spec.get("target") else ""
    enc = tok([lead + t for t in texts], return_tensors="pt", padding=True)
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


# transformers' BART_CONVERTER backwards: Hugging Face's name within a layer -> Marian's
MARIAN_NAMES = {
    "self_attn.q_proj": "self_Wq", "self_attn.k_proj": "self_Wk", "self_attn.v_proj": "self_Wv",
    "self_attn.out_proj": "self_Wo", "self_attn_layer_norm": "self_Wo_ln",
    "fc1": "ffn_W1", "fc2": "ffn_W2", "final_layer_norm": "ffn_ffn_ln",
    "encoder_attn.q_proj": "context_Wq", "encoder_attn.k_proj": "context_Wk",
    "encoder_attn.v_proj": "context_Wv", "encoder_attn.out_proj": "context_Wo",
    "encoder_attn_layer_norm": "context_Wo_ln",
}


def marian_state(model, spec):
    """The model's weights as Marian's model.npz holds them: (in, out) matrices, (1, n) vectors,
    embeddings without the <pad> row that transformers' converter adds back, and the
    configuration as special:model.yml."""
    sd = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    npz = {}
    for k, v in sd.items():
        parts = k.split(".")
        if len(parts) > 4 and parts[1] in ("encoder", "decoder") and parts[2] == "layers":
            stack, layer, rest = parts[1], int(parts[3]), ".".join(parts[4:-1])
            leaf = parts[-1]
            base = MARIAN_NAMES[rest]
            if base.endswith("_ln"):
                name = base + ("_scale" if leaf == "weight" else "_bias")
            elif leaf == "weight":
                name = base
            else:
                name = base.replace("_W", "_b")
            npz[f"{stack}_l{layer + 1}_{name}"] = (v.T if v.ndim == 2 else v[None, :]).astype(np.float32)
    if spec["vocab"] == "shared":
        npz["Wemb"] = sd["model.shared.weight"][:-1]
    else:
        npz["encoder_Wemb"] = sd["model.encoder.embed_tokens.weight"][:-1]
        npz["decoder_Wemb"] = sd["model.decoder.embed_tokens.weight"][:-1]
    npz["decoder_ff_logit_out_b"] = sd["final_logits_bias"][:, :-1]
    c = spec["cfg"]
    shared = spec["vocab"] == "shared"
    V = sd["final_logits_bias"].shape[1] - 1
    yml = "\n".join([
        "type: transformer", f"dim-vocabs:\n  - {V}\n  - {V}", f"dim-emb: {c['d_model']}",
        f"enc-depth: {c['encoder_layers']}", f"dec-depth: {c['decoder_layers']}",
        f"transformer-heads: {c['encoder_attention_heads']}",
        f"transformer-dim-ffn: {c['encoder_ffn_dim']}",
        f"transformer-ffn-activation: {spec['ffn_act']}", "transformer-ffn-depth: 2",
        "transformer-aan-depth: 2", "transformer-aan-nogate: false",
        "transformer-decoder-autoreg: self-attention", "transformer-no-projection: false",
        "transformer-postprocess-emb: d", "transformer-postprocess: dan",
        'transformer-preprocess: ""', "transformer-tied-layers:\n  []",
        "transformer-train-position-embeddings: false", "layer-normalization: false",
        "right-left: false", "ulr-dim-emb: 0", "dec-cell-base-depth: 2",
        "dec-cell-high-depth: 1", f"tied-embeddings-all: {str(shared).lower()}",
        f"tied-embeddings-src: {str(shared).lower()}", "tied-embeddings: true",
        "# written by tests/parity/make_marian_reference.py", "version: v1.7.6"]) + "\n"
    npz["special:model.yml"] = np.frombuffer(yml.encode() + b"\0", dtype=np.int8)
    return npz


def write_release(rel, model, sv, tv, spec, src_spm, tgt_spm):
    """The model as Marian releases it, in the directory rel."""
    import shutil
    import yaml
    os.makedirs(rel, exist_ok=True)
    np.savez(os.path.join(rel, "opus.spm.transformer.model1.npz.best-perplexity.npz"),
             **marian_state(model, spec))

    def dump(vocab, path):  # Marian's vocabulary has no <pad>
        with open(path, "w", encoding="utf-8") as f:
            yaml.safe_dump({k: v for k, v in vocab.items() if k != "<pad>"}, f,
                           allow_unicode=True, sort_keys=False)
    if spec["vocab"] == "shared":
        vocabs = ["opus.spm.vocab.yml"] * 2
        dump(sv, os.path.join(rel, vocabs[0]))
    else:
        vocabs = ["opus.spm.src.vocab.yml", "opus.spm.trg.vocab.yml"]
        dump(sv, os.path.join(rel, vocabs[0]))
        dump(tv, os.path.join(rel, vocabs[1]))
    with open(os.path.join(rel, "decoder.yml"), "w") as f:
        f.write("models:\n  - opus.spm.transformer.model1.npz.best-perplexity.npz\n"
                f"vocabs:\n  - {vocabs[0]}\n  - {vocabs[1]}\n"
                f"beam-size: {spec['beam_size']}\nnormalize: {spec['normalize']}\n"
                "word-penalty: 0\nmini-batch: 16\nmaxi-batch: 100\nmaxi-batch-sort: src\n"
                "relative-paths: true\n")
    shutil.copy(src_spm, os.path.join(rel, "source.spm"))
    shutil.copy(tgt_spm, os.path.join(rel, "target.spm"))
    with open(os.path.join(rel, "README.md"), "w") as f:
        f.write("# a random-weight model in the layout of an OPUS-MT release\n")


def build_release(name, spec, out, pairs, tmp):
    """A Marian release of a trained random model (OUTDIR/marian_<name>/ and its zip,
    OUTDIR/marian_<name>.zip), transformers' conversion of it (OUTDIR/marian_<name>_hf/) and
    the references of that conversion."""
    import shutil
    import zipfile
    from pathlib import Path
    from transformers import MarianMTModel, MarianTokenizer
    from transformers.models.marian.convert_marian_to_pytorch import OpusState
    model, tok, sv, tv, _ = make_model(name, spec, os.path.join(tmp, name + "_hf0"), pairs, tmp)
    rel = os.path.join(out, "marian_" + name)
    shutil.rmtree(rel, ignore_errors=True)
    write_release(rel, model, sv, tv, spec, os.path.join(tmp, name + "_src.model"),
                  os.path.join(tmp, name + "_tgt.model"))
    with zipfile.ZipFile(rel + ".zip", "w", zipfile.ZIP_DEFLATED) as z:
        for f in sorted(os.listdir(rel)):
            z.write(os.path.join(rel, f), f)
    conv = os.path.join(tmp, name + "_conv")  # the converter writes into its source directory
    shutil.copytree(rel, conv)
    state = OpusState(Path(conv))
    # sinusoidal positions are no weights: the converter's table of dim-emb rows is made
    # long enough for the test's sentences
    state.hf_config.max_position_embeddings = 128
    hf_model = state.load_marian_model().eval()
    # the converter puts the embeddings in after the output projection was tied to them, so
    # the projection keeps its random initial weights (and, saved beside the embeddings,
    # becomes them again on loading); tied as the configuration says, it is Marian's
    hf_model.tie_weights()
    hf = os.path.join(out, "marian_" + name + "_hf")
    hf_model.save_pretrained(hf, safe_serialization=True)
    state.tokenizer.save_pretrained(hf)
    hf_model = MarianMTModel.from_pretrained(hf).eval()  # the model as saved
    ref = state.state_dict["Wemb" if spec["vocab"] == "shared" else "decoder_Wemb"]
    assert np.array_equal(hf_model.lm_head.weight.detach().numpy()[:-1], ref)
    hf_tok = MarianTokenizer.from_pretrained(hf)
    tensors, meta = references(name, spec, hf_model, hf_tok, hf_tok.encoder if spec["vocab"] ==
                               "shared" else hf_tok.target_encoder, out, pairs)
    # decoding as decoder.yml says: beam-size, and normalize as the length penalty
    texts = open(os.path.join(out, f"marian_{name}.de"), encoding="utf-8").read().splitlines()
    enc = hf_tok(texts, return_tensors="pt", padding=True)
    with torch.no_grad():
        seqs = hf_model.generate(**enc, num_beams=spec["beam_size"], do_sample=False,
                                 max_new_tokens=MAX_NEW, length_penalty=spec["normalize"],
                                 early_stopping=False)
    with open(os.path.join(out, f"marian_{name}.default.en"), "w", encoding="utf-8") as f:
        f.write("\n".join(hf_tok.batch_decode(seqs, skip_special_tokens=True)) + "\n")
    return tensors, meta


def write_all(save, out, data_dir="../shared/data"):
    import tempfile
    pairs = read_pairs(data_dir, 400)
    with tempfile.TemporaryDirectory() as tmp:
        for name, spec in CONFIGS.items():
            tensors, meta = build(name, spec, out, pairs, tmp)
            save("marian_" + name, tensors, meta)
        for name, spec in RELEASES.items():
            tensors, meta = build_release(name, spec, out, pairs, tmp)
            save("marian_" + name, tensors, meta)


if __name__ == "__main__":
    sys.path.insert(0, HERE)
    import make_reference
    make_reference.OUT = sys.argv[1]
    os.makedirs(sys.argv[1], exist_ok=True)
    write_all(make_reference.save, sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "../shared/data")
