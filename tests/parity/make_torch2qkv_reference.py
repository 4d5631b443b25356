#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""References for the PyTorch interop tests: tools/torch2qkv.py on the model of PyTorch's
tutorial "Language Translation with nn.Transformer".

    /usr/bin/python3 tests/parity/make_torch2qkv_reference.py OUTDIR
    (also run at the end of make_reference.py, so the Makefile's parity rule writes them)

The tutorial's Seq2SeqTransformer, create_mask, greedy_decode and translate are written out
below as the tutorial has them (seq-first tensors, special ids <unk> 0, <pad> 1, <bos> 2,
<eos> 3). A small model (emb 32, 4 heads, 2+2 layers, FFN 64, vocabularies 30 and 35) is
trained for 80 steps on a toy "translation" (each source word becomes its target word followed
by one of five others), so that greedy outputs depend on the input. A model trained this
briefly stops early, so the generator's <eos> bias is then lowered just enough (the first of a
few shifts) that some sentences run into the tutorial's length cap while others end in <eos>.
Then:
    OUTDIR/t2q/model.pt                 torch.save(model.state_dict())
    OUTDIR/t2q/vocab.src.txt, vocab.tgt.txt   the vocabularies, one token a line
    OUTDIR/t2q/qkv_model/               tools/torch2qkv.py's output (its main(), in-process)
    OUTDIR/t2q/translations.tsv         per greedy sentence: source<TAB>max_len<TAB>eos<TAB>
                                        translation, the tutorial's translate() with its
                                        <bos>/<eos> removed and spaces normalised
    OUTDIR/torch2qkv.safetensors        (tests/unit/test_torch2qkv.c)
        logits.src (B, S), logits.src_valid (B), logits.tgt_in (B, T), logits.tgt_valid (B)
            a padded teacher-forced batch in qkv's (batch, time) layout; src as the tutorial
            builds it (<bos> words <eos> <pad>...), tgt_in = tgt[:-1]
        logits (B, T, tgt_vocab)        the tutorial model's forward() (eval mode) on it
        greedy.src (K, S) padded with <pad>, greedy.src_len (K) tokens with <bos> and <eos>
        greedy.out (K, L) padded, greedy.out_len (K)   greedy_decode's tokens after <bos>,
                                        without the final <eos>
        greedy.max_len (K)              num_tokens + 4: the most tokens greedy_decode emits
        greedy.eos (K)                  1 if the sentence ended with <eos>, 0 if it hit the cap
    and the configuration as metadata.
A sentence is left out if at some greedy step the top logit leads the runner-up by less than
MARGIN, so that float rounding cannot flip an argmax between PyTorch and qkv.
"""
import contextlib
import io
import math
import os
import sys

import numpy as np
import torch
from torch import Tensor, nn
from torch.nn import Transformer

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))
import torch2qkv  # noqa: E402

UNK_IDX, PAD_IDX, BOS_IDX, EOS_IDX = 0, 1, 2, 3
SPECIALS = ["<unk>", "<pad>", "<bos>", "<eos>"]
DEVICE = torch.device("cpu")
MARGIN = 1e-3
MIN_EACH = 3

EMB_SIZE, NHEAD, FFN_HID_DIM, NUM_ENCODER_LAYERS, NUM_DECODER_LAYERS = 32, 4, 64, 2, 2

# Capitalised words, punctuation glued to nothing and non-ASCII letters: d2l preprocessing
# (lower-casing, splitting punctuation) would turn many of them into <unk>.
SRC_WORDS = ["Ein", "Hund", "läuft", "schnell", ".", "Die", "Katze", "schläft", "!", "Mann",
             "Frau", "sieht", "einen", "Ball", "Kind", "spielt", "im", "Park", "grünen",
             "Straße", "über", "die", "Brücke", "zwei", "Männer", "essen"]
TGT_WORDS = ["A", "dog", "runs", "fast", ".", "The", "cat", "sleeps", "!", "man", "woman",
             "sees", "a", "ball", "child", "plays", "in", "the", "park", "green", "street",
             "over", "bridge", "two", "men", "eat", "quickly", "big", "small", "red", "café"]
N_SRC = len(SRC_WORDS)


# ---------------------------------------------------------------------------------------------
# The tutorial's model, as it is written there
# ---------------------------------------------------------------------------------------------

class PositionalEncoding(nn.Module):
    def __init__(self, emb_size: int, dropout: float, maxlen: int = 5000):
        super(PositionalEncoding, self).__init__()
        den = torch.exp(- torch.arange(0, emb_size, 2) * math.log(10000) / emb_size)
        pos = torch.arange(0, maxlen).reshape(maxlen, 1)
        pos_embedding = torch.zeros((maxlen, emb_size))
        pos_embedding[:, 0::2] = torch.sin(pos * den)
        pos_embedding[:, 1::2] = torch.cos(pos * den)
        pos_embedding = pos_embedding.unsqueeze(-2)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer('pos_embedding', pos_embedding)

    def forward(self, token_embedding: Tensor):
        return self.dropout(token_embedding + self.pos_embedding[:token_embedding.size(0), :])


class TokenEmbedding(nn.Module):
    def __init__(self, vocab_size: int, emb_size):
        super(TokenEmbedding, self).__init__()
        self.embedding = nn.Embedding(vocab_size, emb_size)
        self.emb_size = emb_size

    def forward(self, tokens: Tensor):
        return self.embedding(tokens.long()) * math.sqrt(self.emb_size)


class Seq2SeqTransformer(nn.Module):
    def __init__(self, num_encoder_layers, num_decoder_layers, emb_size, nhead, src_vocab_size,
                 tgt_vocab_size, dim_feedforward=512, dropout=0.1):
        super(Seq2SeqTransformer, self).__init__()
        self.transformer = Transformer(d_model=emb_size, nhead=nhead,
                                       num_encoder_layers=num_encoder_layers,
                                       num_decoder_layers=num_decoder_layers,
                                       dim_feedforward=dim_feedforward, dropout=dropout)
        self.generator = nn.Linear(emb_size, tgt_vocab_size)
        self.src_tok_emb = TokenEmbedding(src_vocab_size, emb_size)
        self.tgt_tok_emb = TokenEmbedding(tgt_vocab_size, emb_size)
        self.positional_encoding = PositionalEncoding(emb_size, dropout=dropout)

    def forward(self, src, trg, src_mask, tgt_mask, src_padding_mask, tgt_padding_mask,
                memory_key_padding_mask):
        src_emb = self.positional_encoding(self.src_tok_emb(src))
        tgt_emb = self.positional_encoding(self.tgt_tok_emb(trg))
        outs = self.transformer(src_emb, tgt_emb, src_mask, tgt_mask, None, src_padding_mask,
                                tgt_padding_mask, memory_key_padding_mask)
        return self.generator(outs)

    def encode(self, src, src_mask):
        return self.transformer.encoder(self.positional_encoding(self.src_tok_emb(src)), src_mask)

    def decode(self, tgt, memory, tgt_mask):
        return self.transformer.decoder(self.positional_encoding(self.tgt_tok_emb(tgt)), memory,
                                        tgt_mask)


def generate_square_subsequent_mask(sz):
    mask = (torch.triu(torch.ones((sz, sz), device=DEVICE)) == 1).transpose(0, 1)
    mask = mask.float().masked_fill(mask == 0, float('-inf')).masked_fill(mask == 1, float(0.0))
    return mask


def create_mask(src, tgt):
    src_seq_len = src.shape[0]
    tgt_seq_len = tgt.shape[0]
    tgt_mask = generate_square_subsequent_mask(tgt_seq_len)
    src_mask = torch.zeros((src_seq_len, src_seq_len), device=DEVICE).type(torch.bool)
    src_padding_mask = (src == PAD_IDX).transpose(0, 1)
    tgt_padding_mask = (tgt == PAD_IDX).transpose(0, 1)
    return src_mask, tgt_mask, src_padding_mask, tgt_padding_mask


def greedy_decode(model, src, src_mask, max_len, start_symbol):
    src = src.to(DEVICE)
    src_mask = src_mask.to(DEVICE)
    memory = model.encode(src, src_mask)
    ys = torch.ones(1, 1).fill_(start_symbol).type(torch.long).to(DEVICE)
    for i in range(max_len - 1):
        memory = memory.to(DEVICE)
        tgt_mask = (generate_square_subsequent_mask(ys.size(0)).type(torch.bool)).to(DEVICE)
        out = model.decode(ys, memory, tgt_mask)
        out = out.transpose(0, 1)
        prob = model.generator(out[:, -1])
        _, next_word = torch.max(prob, dim=1)
        next_word = next_word.item()
        ys = torch.cat([ys, torch.ones(1, 1).type_as(src.data).fill_(next_word)], dim=0)
        if next_word == EOS_IDX:
            break
    return ys


def translate(model, src_sentence, src_stoi, tgt_itos):
    """The tutorial's translate(), with text_transform = whitespace split, vocabulary lookup
    (unknown words -> <unk>), <bos> ... <eos> (its spaCy tokenizer replaced by split())."""
    model.eval()
    ids = [BOS_IDX] + [src_stoi.get(w, UNK_IDX) for w in src_sentence.split()] + [EOS_IDX]
    src = torch.tensor(ids).view(-1, 1)
    num_tokens = src.shape[0]
    src_mask = (torch.zeros(num_tokens, num_tokens)).type(torch.bool)
    tgt_tokens = greedy_decode(model, src, src_mask, max_len=num_tokens + 5,
                               start_symbol=BOS_IDX).flatten()
    text = " ".join(tgt_itos[int(i)] for i in tgt_tokens)
    return text.replace("<bos>", "").replace("<eos>", ""), [int(i) for i in tgt_tokens]


# ---------------------------------------------------------------------------------------------
# The toy task and its training
# ---------------------------------------------------------------------------------------------

def target_of(words):
    """Source word k -> target words k and 26 + k % 5."""
    out = []
    for k in words:
        out.append(k)
        out.append(N_SRC + k % 5)
    return out


def pad_batch(seqs):
    """Seq-first (T, N) long tensor, <pad> after each sequence."""
    T = max(len(s) for s in seqs)
    x = torch.full((T, len(seqs)), PAD_IDX, dtype=torch.long)
    for n, s in enumerate(seqs):
        x[:len(s), n] = torch.tensor(s)
    return x


def make_pairs(rng, n, max_words):
    pairs = []
    for _ in range(n):
        words = [int(w) for w in rng.integers(0, N_SRC, size=int(rng.integers(1, max_words + 1)))]
        src = [BOS_IDX] + [4 + w for w in words] + [EOS_IDX]
        tgt = [BOS_IDX] + [4 + w for w in target_of(words)] + [EOS_IDX]
        pairs.append((src, tgt))
    return pairs


def train(model, rng, steps, batch):
    """The tutorial's train_epoch on freshly drawn toy batches."""
    loss_fn = torch.nn.CrossEntropyLoss(ignore_index=PAD_IDX)
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3, betas=(0.9, 0.98), eps=1e-9)
    model.train()
    for _ in range(steps):
        pairs = make_pairs(rng, batch, 7)
        src, tgt = pad_batch([p[0] for p in pairs]), pad_batch([p[1] for p in pairs])
        tgt_input = tgt[:-1, :]
        src_mask, tgt_mask, src_padding_mask, tgt_padding_mask = create_mask(src, tgt_input)
        logits = model(src, tgt_input, src_mask, tgt_mask, src_padding_mask, tgt_padding_mask,
                       src_padding_mask)
        optimizer.zero_grad()
        tgt_out = tgt[1:, :]
        loss = loss_fn(logits.reshape(-1, logits.shape[-1]), tgt_out.reshape(-1))
        loss.backward()
        optimizer.step()
    return float(loss)


def step_margins(model, src_ids, ys):
    """The lead of the top logit over the runner-up at every step greedy_decode took."""
    with torch.no_grad():
        src = torch.tensor(src_ids).view(-1, 1)
        memory = model.encode(src, torch.zeros(len(src_ids), len(src_ids), dtype=torch.bool))
        tgt = torch.tensor(ys[:-1]).view(-1, 1)
        mask = generate_square_subsequent_mask(tgt.size(0)).type(torch.bool)
        logits = model.generator(model.decode(tgt, memory, mask))[:, 0]  # (steps, V)
        top2 = torch.topk(logits, 2, dim=-1).values
        margins = (top2[:, 0] - top2[:, 1]).tolist()
        if min(margins) >= MARGIN:
            assert torch.equal(logits.argmax(-1), torch.tensor(ys[1:])), "decode is not causal"
        return margins


# Sentences for greedy decoding: one word to seven, an unknown word ("Zebra"), capitals and
# punctuation that d2l's preprocessing would change. Every word asks for two target words, so
# the longer ones can reach the cap of num_tokens + 4 tokens.
SENTENCES = [
    "Ein Hund läuft schnell .",
    "Die Katze schläft !",
    "Mann",
    "zwei Männer essen im grünen Park .",
    "Ein Zebra sieht einen Ball",
    "Frau Kind Straße über die Brücke",
    "Ein schnell Katze Mann einen spielt grünen",
    "die Männer Ein Mann spielt Katze",
    "Brücke spielt im Park",
    "Die Frau sieht einen Hund .",
]


def greedy_rows(model, sentences, src_stoi, tgt_itos):
    """translate() of each sentence that greedy_decode decides by at least MARGIN at every
    step: (src ids, words emitted without <bos>/<eos>, qkv's max_len, ended with <eos>) and
    the line of translations.tsv."""
    rows, lines = [], []
    for sentence in sentences:
        text, ys = translate(model, sentence, src_stoi, tgt_itos)
        src_ids = [BOS_IDX] + [src_stoi.get(w, UNK_IDX) for w in sentence.split()] + [EOS_IDX]
        eos = ys[-1] == EOS_IDX
        words = ys[1:-1] if eos else ys[1:]
        if min(step_margins(model, src_ids, ys)) < MARGIN or PAD_IDX in words or BOS_IDX in words:
            continue  # a near tie, or a token translate() prints differently from qkv
        assert " ".join(tgt_itos[w] for w in words) == " ".join(text.split())
        rows.append((src_ids, words, len(src_ids) + 4, int(eos)))
        lines.append(f"{sentence}\t{len(src_ids) + 4}\t{int(eos)}\t{' '.join(text.split())}\n")
    return rows, lines


def select_sentences(model, src_stoi, tgt_itos):
    """Greedy rows for SENTENCES and some random ones, with at least MIN_EACH that end with
    <eos> and MIN_EACH that run into the cap. A briefly trained model stops early, so the
    generator's <eos> bias is lowered by the first shift that makes enough of them run on
    (the shift stays in the saved model)."""
    rng = np.random.default_rng(11)
    extra = [" ".join(SRC_WORDS[k] for k in rng.integers(0, N_SRC, size=int(rng.integers(3, 10))))
             for _ in range(10)]
    bias = model.generator.bias
    base = float(bias[EOS_IDX])
    for delta in (0.0, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0):
        with torch.no_grad():
            bias[EOS_IDX] = base - delta
        rows, lines = greedy_rows(model, SENTENCES + extra, src_stoi, tgt_itos)
        n_eos = sum(r[3] for r in rows)
        if n_eos >= MIN_EACH and len(rows) - n_eos >= MIN_EACH:
            return rows, lines, delta
    raise SystemExit("make_torch2qkv_reference.py: no <eos> shift gives sentences of both kinds "
                     f"(last: {n_eos} of {len(rows)} end with <eos>)")


def write_all(save, out_root):
    """Writes OUTDIR/t2q/ and OUTDIR/torch2qkv.safetensors through save(name, tensors, meta)
    (make_reference.save, which writes OUTDIR/<name>.safetensors)."""
    torch.manual_seed(0)
    rng = np.random.default_rng(2024)
    src_itos, tgt_itos = SPECIALS + SRC_WORDS, SPECIALS + TGT_WORDS
    src_stoi = {w: i for i, w in enumerate(src_itos)}
    model = Seq2SeqTransformer(NUM_ENCODER_LAYERS, NUM_DECODER_LAYERS, EMB_SIZE, NHEAD,
                               len(src_itos), len(tgt_itos), FFN_HID_DIM)
    for p in model.parameters():
        if p.dim() > 1:
            nn.init.xavier_uniform_(p)
    final_loss = train(model, rng, steps=80, batch=32)
    model.eval()
    rows, lines, delta = select_sentences(model, src_stoi, tgt_itos)

    out = os.path.join(out_root, "t2q")
    os.makedirs(out, exist_ok=True)
    torch.save(model.state_dict(), os.path.join(out, "model.pt"))
    for name, itos in (("vocab.src.txt", src_itos), ("vocab.tgt.txt", tgt_itos)):
        with open(os.path.join(out, name), "w", encoding="utf-8") as f:
            f.write("".join(t + "\n" for t in itos))
    qkv_dir = os.path.join(out, "qkv_model")
    argv = [os.path.join(out, "model.pt"), "--heads", str(NHEAD), "--src-vocab",
            os.path.join(out, "vocab.src.txt"), "--tgt-vocab", os.path.join(out, "vocab.tgt.txt"),
            "--out", qkv_dir]
    with contextlib.redirect_stdout(io.StringIO()):
        rc = torch2qkv.main(argv)
    assert rc == 0, f"torch2qkv.py {' '.join(argv)} failed"

    t = {}
    # teacher-forced logits of a padded batch, as the tutorial's evaluate() computes them
    pairs = make_pairs(np.random.default_rng(7), 4, 6)
    pairs[0] = ([BOS_IDX] + [4 + w for w in range(8)] + [EOS_IDX],
                [BOS_IDX] + [4 + w for w in target_of(range(8))] + [EOS_IDX])  # the longest
    src, tgt = pad_batch([p[0] for p in pairs]), pad_batch([p[1] for p in pairs])
    tgt_input = tgt[:-1, :]
    src_mask, tgt_mask, src_padding_mask, tgt_padding_mask = create_mask(src, tgt_input)
    with torch.no_grad():
        logits = model(src, tgt_input, src_mask, tgt_mask, src_padding_mask, tgt_padding_mask,
                       src_padding_mask)
    t["logits"] = logits.transpose(0, 1)                       # (B, T, V)
    t["logits.src"] = src.t()
    t["logits.src_valid"] = (src != PAD_IDX).sum(0)
    t["logits.tgt_in"] = tgt_input.t()
    t["logits.tgt_valid"] = (tgt_input != PAD_IDX).sum(0)
    assert int(t["logits.src_valid"].min()) < src.shape[0], "no padded source in the batch"
    assert int(t["logits.tgt_valid"].min()) < tgt_input.shape[0], "no padded target in the batch"

    # greedy translations
    K, S = len(rows), max(len(r[0]) for r in rows)
    L = max(max(len(r[1]) for r in rows), 1)
    g_src = np.full((K, S), PAD_IDX, np.int32)
    g_out = np.full((K, L), PAD_IDX, np.int32)
    for k, (s, w, _, _) in enumerate(rows):
        g_src[k, :len(s)] = s
        g_out[k, :len(w)] = w
    t["greedy.src"], t["greedy.out"] = g_src, g_out
    t["greedy.src_len"] = np.array([len(r[0]) for r in rows], np.int32)
    t["greedy.out_len"] = np.array([len(r[1]) for r in rows], np.int32)
    t["greedy.max_len"] = np.array([r[2] for r in rows], np.int32)
    t["greedy.eos"] = np.array([r[3] for r in rows], np.int32)
    with open(os.path.join(out, "translations.tsv"), "w", encoding="utf-8") as f:
        f.writelines(lines)

    meta = {"src_vocab": len(src_itos), "tgt_vocab": len(tgt_itos), "d_model": EMB_SIZE,
            "heads": NHEAD, "ffn": FFN_HID_DIM, "enc_layers": NUM_ENCODER_LAYERS,
            "dec_layers": NUM_DECODER_LAYERS, "max_len": 5000, "n_sentences": K,
            "train_loss": repr(final_loss), "margin": repr(MARGIN), "eos_shift": repr(delta)}
    save("torch2qkv", t, meta)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_torch2qkv_reference.py OUTDIR")
    import make_reference
    make_reference.OUT = sys.argv[1]
    os.makedirs(make_reference.OUT, exist_ok=True)
    write_all(make_reference.save, make_reference.OUT)


if __name__ == "__main__":
    main()
