#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Whole-model PyTorch references for tests/unit/test_model_parity.c.

    /usr/bin/python3 tests/parity/make_model_reference.py OUTDIR
    (also run at the end of make_reference.py, so the Makefile's parity rule writes them)

For each configuration below, tools/qkv_torch.py's model of qkv's Transformer starts from random
weights and takes STEPS Adam steps on fixed random batches (cycled), dropout 0, and
OUTDIR/model_<name>.safetensors receives:
    init.<qkv name>, final.<qkv name>   every parameter before the first and after the last step
    grad0.<qkv name>                    the gradient of the first step's mean loss (unclipped)
    batch<k>.src, .src_valid, .tgt_in, .tgt_out   (int32) batch k, used by steps k, k + n, ...
    logits0                             teacher-forced logits of batch 0 at the initial weights
    losses, grad_norms                  (STEPS) per-token mean loss before each update and the
                                        global gradient norm before clipping
and the configuration (qkv_transformer_config's keys) plus the optimiser's settings as metadata.
A step is: zero grads, loss = mean cross-entropy over tokens whose label is not <pad>,
backward, clip_grad_norm_ (when clip > 0), torch.optim.Adam.
"""
import math
import os
import sys
import zlib

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))
import qkv_torch  # noqa: E402

STEPS = 20
N_BATCHES = 4
B, SRC_LEN, TGT_LEN = 3, 7, 6

CONFIGS = {
    # d2l's model: post-norm, no attention bias, ReLU, sinusoidal positions, untied; plain Adam
    "postnorm_d2l": dict(
        cfg=dict(src_vocab=17, tgt_vocab=13, d_model=16, heads=4, ffn=32, enc_layers=2,
                 dec_layers=2, max_len=12, bias=0, pre_norm=0, final_norm=0, act="relu",
                 tie="none", learned_pos=0, ln_eps=1e-5),
        label_smoothing=0.0, clip=0.0, lr=2e-3),
    # the modern variant: pre-norm with final norms, biases, GELU, output tied to the target
    # embedding; label smoothing and gradient clipping
    "prenorm_tied_clip": dict(
        cfg=dict(src_vocab=15, tgt_vocab=19, d_model=16, heads=2, ffn=24, enc_layers=2,
                 dec_layers=2, max_len=10, bias=1, pre_norm=1, final_norm=1, act="gelu",
                 tie="output", learned_pos=0, ln_eps=1e-5),
        label_smoothing=0.1, clip=1.0, lr=2e-3),
    # one shared vocabulary for both embeddings and the output, learned positions, an encoder
    # shallower than the decoder, post-norm with final norms
    "tieall_learned": dict(
        cfg=dict(src_vocab=14, tgt_vocab=14, d_model=8, heads=2, ffn=16, enc_layers=1,
                 dec_layers=2, max_len=9, bias=1, pre_norm=0, final_norm=1, act="relu",
                 tie="all", learned_pos=1, ln_eps=1e-6),
        label_smoothing=0.1, clip=0.0, lr=1e-3),
    # Marian's model (qkv import marian): post-norm, biases everywhere, SiLU, [sin | cos]
    # positions, unscaled embeddings, one vocabulary tied all over, decoding from <pad>
    "marian_silu": dict(
        cfg=dict(src_vocab=16, tgt_vocab=16, d_model=12, heads=3, ffn=20, enc_layers=2,
                 dec_layers=2, max_len=11, bias=1, pre_norm=0, final_norm=0, act="silu",
                 tie="all", learned_pos=0, ln_eps=1e-5, pos_layout="sin_cos",
                 scale_embedding=0, decoder_start=1),
        label_smoothing=0.1, clip=0.0, lr=2e-3),
}


def fstr(x):
    """A float as the shortest decimal that strtof() reads back as the same float32."""
    return repr(float(np.float32(x)))


def random_ids(rng, n, V):
    """n ordinary token ids: <unk> (0) or 4..V-1, never <pad>, <bos>, <eos>."""
    ids = rng.integers(3, V, size=n)
    ids[ids == 3] = 0
    return ids


def make_batch(rng, Vs, Vt, start=2):
    """A padded batch, d2l's layout: the source ends with <eos> then <pad>; the decoder input is
    <bos> then the target without its <eos>; labels are the target then <pad>. Lengths are
    drawn so that most rows are padded and row 0 is always shorter than the batch."""
    src = np.full((B, SRC_LEN), qkv_torch.PAD, np.int32)
    tgt_in = np.full((B, TGT_LEN), qkv_torch.PAD, np.int32)
    tgt_out = np.full((B, TGT_LEN), qkv_torch.PAD, np.int32)
    src_valid = np.zeros(B, np.int32)
    for b in range(B):
        Ls = int(rng.integers(2, SRC_LEN)) if b == 0 else int(rng.integers(2, SRC_LEN + 1))
        Lt = int(rng.integers(2, TGT_LEN)) if b == 0 else int(rng.integers(2, TGT_LEN + 1))
        src[b, :Ls - 1], src[b, Ls - 1], src_valid[b] = random_ids(rng, Ls - 1, Vs), 3, Ls
        y = np.append(random_ids(rng, Lt - 1, Vt), 3)
        tgt_out[b, :Lt] = y
        tgt_in[b, 0], tgt_in[b, 1:Lt] = start, y[:-1]
    return {"src": src, "src_valid": src_valid, "tgt_in": tgt_in, "tgt_out": tgt_out}


def random_weights(model, rng):
    """qkv's initialisation scheme, then every bias, LayerNorm shift and gain moved off its
    initial 0 or 1, so that each of them changes the logits from the first step on."""
    model.reset_parameters(torch.Generator().manual_seed(int(rng.integers(2**31))))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(torch.from_numpy(rng.normal(0.0, 0.1, p.shape).astype(np.float32)))


def check_against_nn_transformer(model, batch):
    """torch.nn.TransformerEncoder/Decoder loaded with the same weights must give the same
    logits: proves that qkv_torch (written with explicit matmuls) is the standard model, so a
    disagreement with qkv is qkv's. Runs in training mode with dropout 0, which keeps torch off
    its nested-tensor fast path (that path zeroes padded positions)."""
    c = model.cfg
    C, H, Fh, act, eps = c["d_model"], c["heads"], c["ffn"], c["act"], c["ln_eps"]
    nn = torch.nn

    def mha_into(dst, src):
        z = torch.zeros(C)
        with torch.no_grad():
            dst.in_proj_weight.copy_(torch.cat([src.W_q, src.W_k, src.W_v]))
            dst.in_proj_bias.copy_(torch.cat([src.b_q if src.b_q is not None else z,
                                              src.b_k if src.b_k is not None else z,
                                              src.b_v if src.b_v is not None else z]))
            dst.out_proj.weight.copy_(src.W_o)
            dst.out_proj.bias.copy_(src.b_o if src.b_o is not None else z)

    def norm_into(dst, src):
        with torch.no_grad():
            dst.weight.copy_(src.gamma), dst.bias.copy_(src.beta)

    def ffn_into(dst, src):
        with torch.no_grad():
            dst.linear1.weight.copy_(src.W1), dst.linear1.bias.copy_(src.b1)
            dst.linear2.weight.copy_(src.W2), dst.linear2.bias.copy_(src.b2)

    def final(norm):
        if norm is None:
            return None
        ln = nn.LayerNorm(C, eps=eps)
        norm_into(ln, norm)
        return ln

    kw = dict(d_model=C, nhead=H, dim_feedforward=Fh, dropout=0.0,
              activation=torch.nn.functional.silu if act == "silu" else act,
              layer_norm_eps=eps, batch_first=True, norm_first=bool(c["pre_norm"]))
    enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(**kw), c["enc_layers"],
                                norm=final(model.encoder.norm), enable_nested_tensor=False)
    dec = nn.TransformerDecoder(nn.TransformerDecoderLayer(**kw), c["dec_layers"],
                                norm=final(model.decoder.norm))
    for ref, ours in zip(enc.layers, model.encoder.blocks()):
        mha_into(ref.self_attn, ours.attention)
        norm_into(ref.norm1, ours.norm1), norm_into(ref.norm2, ours.norm2)
        ffn_into(ref, ours.ffn)
    for ref, ours in zip(dec.layers, model.decoder.blocks()):
        mha_into(ref.self_attn, ours.self_attention)
        mha_into(ref.multihead_attn, ours.cross_attention)
        norm_into(ref.norm1, ours.norm1), norm_into(ref.norm2, ours.norm2)
        norm_into(ref.norm3, ours.norm3)
        ffn_into(ref, ours.ffn)
    enc.train(), dec.train()

    src, tgt_in = torch.as_tensor(batch["src"]), torch.as_tensor(batch["tgt_in"])
    valid = torch.as_tensor(batch["src_valid"]).long()
    pad = torch.arange(src.shape[1]).view(1, -1) >= valid.view(-1, 1)  # True = ignore
    Tt = tgt_in.shape[1]
    causal = torch.triu(torch.full((Tt, Tt), -math.inf), diagonal=1)
    with torch.no_grad():
        pos_s = model.src_positions if c["learned_pos"] else model.positions
        pos_t = model.tgt_positions if c["learned_pos"] else model.positions
        memory = enc(model.embed(src, model.src_E(), pos_s), src_key_padding_mask=pad)
        y = dec(model.embed(tgt_in, model.tgt_E(), pos_t), memory, tgt_mask=causal,
                memory_key_padding_mask=pad)
        want = torch.nn.functional.linear(y, model.out_W(), model.output.b)
        got = model(src, valid, tgt_in)
    err = float((got - want).abs().max())
    assert err <= 1e-5 * max(1.0, float(want.abs().max())), \
        f"qkv_torch differs from torch.nn.Transformer by {err}"


def run(name, spec, save):
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    cfg = qkv_torch.make_config(spec["cfg"], dropout=0.0)
    model = qkv_torch.QKVTransformer(cfg)
    random_weights(model, rng)
    batches = [make_batch(rng, cfg["src_vocab"], cfg["tgt_vocab"], cfg["decoder_start"])
               for _ in range(N_BATCHES)]
    t = {f"batch{k}.{key}": a for k, b in enumerate(batches) for key, a in b.items()}
    t.update({"init." + n: a for n, a in model.qkv_state().items()})

    check_against_nn_transformer(model, batches[0])
    model.eval()
    with torch.no_grad():
        b0 = batches[0]
        t["logits0"] = model(b0["src"], b0["src_valid"], b0["tgt_in"])
    model.train()  # dropout is 0: the same function, as qkv_transformer_loss(train = 1)

    params = list(model.parameters())
    opt = torch.optim.Adam(params, lr=spec["lr"], betas=(0.9, 0.98), eps=1e-9)
    losses, norms = [], []
    for step in range(STEPS):
        b = batches[step % N_BATCHES]
        opt.zero_grad()
        total, tokens = model.loss(b["src"], b["src_valid"], b["tgt_in"], b["tgt_out"],
                                   spec["label_smoothing"])
        loss = total / tokens
        loss.backward()
        if step == 0:
            t.update({"grad0." + n: p.grad.clone() for n, p in model.named_parameters()})
        if spec["clip"] > 0:
            norm = float(torch.nn.utils.clip_grad_norm_(params, spec["clip"]))
        else:
            norm = math.sqrt(sum(float((p.grad.double() ** 2).sum()) for p in params))
        opt.step()
        losses.append(float(loss))
        norms.append(norm)
    if spec["clip"] > 0:
        assert max(norms) > spec["clip"], f"{name}: clipping never acts (norms {norms})"
    t.update({"final." + n: a for n, a in model.qkv_state().items()})
    t["losses"] = np.array(losses, np.float32)
    t["grad_norms"] = np.array(norms, np.float32)

    meta = {k: (fstr(v) if isinstance(v, float) else v) for k, v in cfg.items()}
    meta.update({"steps": STEPS, "n_batches": N_BATCHES, "B": B, "src_len": SRC_LEN,
                 "tgt_len": TGT_LEN, "lr": fstr(spec["lr"]), "beta1": fstr(0.9),
                 "beta2": fstr(0.98), "adam_eps": fstr(1e-9), "clip": fstr(spec["clip"]),
                 "label_smoothing": fstr(spec["label_smoothing"]),
                 "n_tensors": len(qkv_torch.qkv_tensor_table(cfg))})
    save("model_" + name, t, meta)


def write_all(save):
    """Writes every configuration with save(name, tensors, meta) (make_reference.save)."""
    for name, spec in CONFIGS.items():
        run(name, spec, save)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_model_reference.py OUTDIR")
    import make_reference
    make_reference.OUT = sys.argv[1]
    os.makedirs(make_reference.OUT, exist_ok=True)
    write_all(make_reference.save)


if __name__ == "__main__":
    main()
