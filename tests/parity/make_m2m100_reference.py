#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Small random-weight M2M100 and NLLB-200 models (M2M100ForConditionalGeneration, one
architecture for both) and what transformers computes with them, for tests/unit/test_m2m100.c
and tests/e2e/test_m2m100.sh (qkv import nllb, qkv import m2m100).

    /usr/bin/python3 tests/parity/make_m2m100_reference.py OUTDIR [DATA_DIR]
    (also run at the end of make_reference.py)

Nothing is downloaded: a tiny SentencePiece model is trained on Multi30k's German and English
lines (DATA_DIR/multi30k/train.{de,en}; a few built-in lines when absent), and the tokenizer
is transformers' own, built at test time: NllbTokenizer over it (NLLB's 202 language codes,
"deu_Latn"), or M2M100Tokenizer (a fairseq vocab.json of its pieces, M2M100's 100 codes,
"de"). The model gets random weights, then TRAIN_STEPS Adam steps. For each configuration
OUTDIR/m2m100_<name>/ is the Hugging Face directory save_pretrained writes and
OUTDIR/m2m100_<name>.safetensors holds, in Hugging Face's ids:
    src (N, Ts), src_valid (N)      the sources as the tokenizer encodes them: the source
                                     language token, pieces, </s>
    tgt_in (N, Tt)                   teacher-forced decoder inputs: </s> (the start), the
                                     target language token, the reference's pieces
    logits (N, Tt, V)                the model's logits for them
    greedy (N, L), greedy_len (N)    generate(forced_bos_token_id=target language,
                                     num_beams=1, max_new_tokens=MAX_NEW) without the start
                                     token, the language token and the final </s>
    beam0 (N, L), beam0_len (N)      generate(num_beams=BEAM, early_stopping=False), likewise
    <rule>_<K> (N, L), <rule>_<K>_len (N)
                                     generate(num_beams=K, early_stopping=True ("early") or
                                     "never" ("never")) for each (rule, K) of RULES, likewise
with metadata max_new, beam, src_lang, tgt_lang (the codes), forced (the language token's
id), rules (the "<rule>_<K>" names, comma-separated) and, for each, <rule>_<K>_differ: how
many sentences generate(num_beams=K, early_stopping=False) translates otherwise (the rules
are seen to differ). The texts are OUTDIR/m2m100_<name>.src, the translations
OUTDIR/m2m100_<name>.greedy.txt, .beam4.txt and .<rule>_<K>.txt
(tokenizer.batch_decode(skip_special_tokens=True)).
"""
import json
import os
import sys

import numpy as np
import torch

MAX_NEW = 24
TRAIN_STEPS, TRAIN_LR = 200, 1e-2
BEAM = 4
# transformers' other stopping rules (early_stopping True, "never"), each with these beams
RULES = [("early", True, K) for K in (2, 3, 4, 6)] + [("never", "never", 4)]
FALLBACK = [("Ein Mann fährt Fahrrad.", "A man rides a bike."),
            ("Zwei Hunde spielen im Schnee.", "Two dogs play in the snow."),
            ("Eine Frau liest ein Buch im Park.", "A woman reads a book in the park."),
            ("Kinder laufen am Strand.", "Children run on the beach.")]

# name -> tokenizer ("nllb" or "m2m100"), direction (source side of the data, codes), and
# M2M100Config overrides
CONFIGS = {
    # NLLB's tokenizer; one embedding for both sides and the output (tie_word_embeddings),
    # scaled embeddings, ReLU, German to English
    "nllb_tied": dict(tok="nllb", src="de", tgt="en", n=24, cfg=dict(
        d_model=16, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=32, decoder_ffn_dim=32,
        activation_function="relu", scale_embedding=True)),
    # NLLB's tokenizer the other way, an output projection of its own, GELU, odd head count
    "nllb_untied_gelu": dict(tok="nllb", src="en", tgt="de", n=24, cfg=dict(
        d_model=12, encoder_layers=1, decoder_layers=2, encoder_attention_heads=3,
        decoder_attention_heads=3, encoder_ffn_dim=24, decoder_ffn_dim=24,
        activation_function="gelu", scale_embedding=True, tie_word_embeddings=False)),
    # M2M100's tokenizer (vocab.json, "__de__"), unscaled embeddings
    "m2m100_unscaled": dict(tok="m2m100", src="de", tgt="en", n=24, cfg=dict(
        d_model=16, encoder_layers=2, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32,
        activation_function="relu", scale_embedding=False)),
}
CODES = {"nllb": {"de": "deu_Latn", "en": "eng_Latn"}, "m2m100": {"de": "de", "en": "en"}}


def read_pairs(data_dir, n):
    de = os.path.join(data_dir, "multi30k", "train.de")
    en = os.path.join(data_dir, "multi30k", "train.en")
    if not (os.path.exists(de) and os.path.exists(en)):
        return FALLBACK * (n // len(FALLBACK) + 1)
    with open(de, encoding="utf-8") as f, open(en, encoding="utf-8") as g:
        return [(a.strip(), b.strip()) for a, b, _ in zip(f, g, range(n))]


def train_spm(lines, prefix):
    import sentencepiece as spm
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_prefix=prefix, vocab_size=500, model_type="unigram",
        character_coverage=1.0, hard_vocab_limit=False, minloglevel=2, num_threads=1)
    return prefix + ".model"


def tokenizer(kind, spm_path, d, src, tgt):
    from transformers import M2M100Tokenizer, NllbTokenizer
    if kind == "nllb":
        tok = NllbTokenizer(vocab_file=spm_path, src_lang=src, tgt_lang=tgt)
    else:
        import sentencepiece as spm
        sp = spm.SentencePieceProcessor(model_file=spm_path)
        vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
        for i in range(sp.get_piece_size()):
            p = sp.id_to_piece(i)
            if p not in vocab:
                vocab[p] = len(vocab)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "vocab.json"), "w", encoding="utf-8") as f:
            json.dump(vocab, f, ensure_ascii=False)
        from transformers.models.m2m_100.tokenization_m2m_100 import FAIRSEQ_LANGUAGE_CODES
        # the language tokens special, as the hub's special_tokens_map.json makes them (so
        # that decoding with skip_special_tokens drops them)
        tok = M2M100Tokenizer(vocab_file=os.path.join(d, "vocab.json"), spm_file=spm_path,
                              src_lang=src, tgt_lang=tgt, additional_special_tokens=[
                                  f"__{c}__" for c in FAIRSEQ_LANGUAGE_CODES["m2m100"]])
    tok.save_pretrained(d)
    return type(tok).from_pretrained(d, src_lang=src, tgt_lang=tgt)


def build(name, spec, out, pairs, tmp):
    from transformers import M2M100Config, M2M100ForConditionalGeneration
    d = os.path.join(out, "m2m100_" + name)
    codes = CODES[spec["tok"]]
    src, tgt = codes[spec["src"]], codes[spec["tgt"]]
    side = {"de": 0, "en": 1}
    src_lines = [p[side[spec["src"]]] for p in pairs]
    tgt_lines = [p[side[spec["tgt"]]] for p in pairs]
    spm_path = train_spm([p[0] for p in pairs] + [p[1] for p in pairs], os.path.join(tmp, name))
    tok = tokenizer(spec["tok"], spm_path, d, src, tgt)
    forced = tok.get_lang_id(tgt) if spec["tok"] == "m2m100" else tok.convert_tokens_to_ids(tgt)
    # M2M100Tokenizer's language tokens are not among its len(): they follow vocab.json
    V = len(tok) if spec["tok"] == "nllb" else max(tok.lang_token_to_id.values()) + 1
    cfg = M2M100Config(vocab_size=V, max_position_embeddings=128, pad_token_id=1,
                       bos_token_id=0, eos_token_id=2, decoder_start_token_id=2,
                       forced_eos_token_id=2, dropout=0.1, **spec["cfg"])
    torch.manual_seed(len(name))
    model = M2M100ForConditionalGeneration(cfg).eval()
    with torch.no_grad():  # random biases and norms, so that every one of them matters
        g = torch.Generator().manual_seed(7)
        for pname, p in model.named_parameters():
            if p.dim() == 1 or "layer_norm" in pname:
                p.add_(torch.randn(p.shape, generator=g) * 0.1)
    torch.manual_seed(0)
    enc = tok(src_lines, text_target=tgt_lines, return_tensors="pt", padding=True, truncation=True,
              max_length=48)
    labels = enc["labels"].masked_fill(enc["labels"] == 1, -100)
    opt = torch.optim.Adam(model.parameters(), lr=TRAIN_LR)
    model.train()
    for _ in range(TRAIN_STEPS):
        idx = torch.randint(0, labels.shape[0], (32,))
        loss = model(input_ids=enc["input_ids"][idx], attention_mask=enc["attention_mask"][idx],
                     labels=labels[idx]).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    model.save_pretrained(d, safe_serialization=True)

    short = [p for p in pairs if len(p[0]) < 70 and len(p[1]) < 70][-spec["n"]:]
    texts = [p[side[spec["src"]]] for p in short]
    refs = [p[side[spec["tgt"]]] for p in short]
    enc = tok(texts, return_tensors="pt", padding=True)
    with torch.no_grad():
        lab = tok(text_target=refs, return_tensors="pt", padding=True)["input_ids"]
        tgt_in = torch.cat([torch.full((lab.shape[0], 1), 2), lab[:, :-1]], dim=1)
        logits = model(**enc, decoder_input_ids=tgt_in).logits
        greedy = model.generate(**enc, forced_bos_token_id=forced, num_beams=1, do_sample=False,
                                max_new_tokens=MAX_NEW)
        beam = model.generate(**enc, forced_bos_token_id=forced, num_beams=BEAM, do_sample=False,
                              max_new_tokens=MAX_NEW, early_stopping=False, length_penalty=1.0)
        others = {}
        for rule, early, k in RULES:
            kw = dict(forced_bos_token_id=forced, num_beams=k, do_sample=False,
                      max_new_tokens=MAX_NEW, length_penalty=1.0)
            plain = model.generate(**enc, early_stopping=False, **kw)
            seqs = model.generate(**enc, early_stopping=early, **kw)
            differ = sum(a != b for a, b in zip(tok.batch_decode(plain, skip_special_tokens=True),
                                                tok.batch_decode(seqs, skip_special_tokens=True)))
            others[f"{rule}_{k}"] = (seqs, differ)

    def outputs(seqs):
        rows, lens = [], []
        for row in seqs[:, 2:].tolist():  # without the start and the language token
            ids = []
            for t in row:
                if t in (1, 2):
                    break
                ids.append(t)
            rows.append(ids + [-1] * (MAX_NEW - len(ids)))
            lens.append(len(ids))
        return np.array(rows, np.int32), np.array(lens, np.int32)

    assert (greedy[:, 1] == forced).all() and (beam[:, 1] == forced).all()
    tensors = {"src": enc["input_ids"].numpy().astype(np.int32),
               "src_valid": enc["attention_mask"].sum(1).numpy().astype(np.int32),
               "tgt_in": tgt_in.numpy().astype(np.int32),
               "logits": logits.numpy().astype(np.float32)}
    tensors["greedy"], tensors["greedy_len"] = outputs(greedy)
    tensors["beam0"], tensors["beam0_len"] = outputs(beam)
    with open(os.path.join(out, f"m2m100_{name}.src"), "w", encoding="utf-8") as f:
        f.write("\n".join(texts) + "\n")
    meta = {"max_new": MAX_NEW, "beam": BEAM, "src_lang": src, "tgt_lang": tgt,
            "forced": forced, "n": len(texts), "rules": ",".join(others)}
    texts_out = [("greedy", greedy), (f"beam{BEAM}", beam)]
    for key, (seqs, differ) in others.items():
        assert (seqs[:, 1] == forced).all()
        tensors[key], tensors[key + "_len"] = outputs(seqs)
        meta[key + "_differ"] = differ
        texts_out.append((key, seqs))
    for what, seqs in texts_out:
        with open(os.path.join(out, f"m2m100_{name}.{what}.txt"), "w", encoding="utf-8") as f:
            f.write("\n".join(tok.batch_decode(seqs, skip_special_tokens=True)) + "\n")
    return tensors, meta


def write_all(save, out, data_dir="../shared/data"):
    import tempfile
    pairs = read_pairs(data_dir, 400)
    with tempfile.TemporaryDirectory() as tmp:
        for name, spec in CONFIGS.items():
            tensors, meta = build(name, spec, out, pairs, tmp)
            save("m2m100_" + name, tensors, meta)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import make_reference
    make_reference.OUT = sys.argv[1]
    os.makedirs(sys.argv[1], exist_ok=True)
    write_all(make_reference.save, sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "../shared/data")
