#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Language-model PyTorch references for tests/unit/test_lm_parity.c.

    /usr/bin/python3 tests/parity/make_lm_reference.py OUTDIR
    (also run at the end of make_reference.py, so the Makefile's parity rule writes them)

For each configuration below, tools/qkv_torch.py's QKVLanguageModel starts from random weights
and takes STEPS Adam steps on fixed random batches (cycled), dropout 0, and
OUTDIR/lm_<name>.safetensors receives:
    init.<qkv name>, final.<qkv name>   every parameter before the first and after the last step
    grad0.<qkv name>                    the gradient of the first step's mean loss (unclipped)
    batch<k>.ids, batch<k>.targets      (int32, (B, T)) batch k, used by steps k, k + n, ...;
                                        targets are the ids shifted by one, a few <pad>
    logits0                             causal logits of batch 0 at the initial weights
    losses, grad_norms                  (STEPS) mean loss before each update and the global
                                        gradient norm before clipping
and the configuration (qkv_lm_config's keys) plus the optimiser's settings as metadata. A step
is: zero grads, loss = mean cross-entropy over targets that are not <pad>, backward,
clip_grad_norm_ (when clip > 0), torch.optim.Adam. The softmax models are first checked against
torch.nn.TransformerEncoder under a causal mask loaded with the same weights.
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
B, T = 3, 7

CONFIGS = {
    # the paper's arrangement: post-norm, ReLU, sinusoidal positions, untied, no attention bias
    "softmax_postnorm": dict(
        cfg=dict(vocab=17, d_model=16, heads=4, ffn=32, layers=2, max_len=10, bias=0,
                 pre_norm=0, final_norm=0, act="relu", tie=0, learned_pos=0,
                 attention="softmax", ln_eps=1e-5),
        clip=0.0, lr=2e-3),
    # GPT's: pre-norm with a final norm, GELU, biases, learned positions, tied; clipping
    "softmax_prenorm_tied": dict(
        cfg=dict(vocab=19, d_model=16, heads=2, ffn=24, layers=2, max_len=8, bias=1,
                 pre_norm=1, final_norm=1, act="gelu", tie=1, learned_pos=1,
                 attention="softmax", ln_eps=1e-5),
        clip=1.0, lr=2e-3),
    # linear attention, pre-norm, learned positions, untied, clipping
    "linear_prenorm": dict(
        cfg=dict(vocab=15, d_model=16, heads=4, ffn=32, layers=2, max_len=7, bias=1,
                 pre_norm=1, final_norm=1, act="gelu", tie=0, learned_pos=1,
                 attention="linear", ln_eps=1e-5),
        clip=1.0, lr=2e-3),
    # linear attention, post-norm, ReLU, tied, sinusoidal positions
    "linear_postnorm_tied": dict(
        cfg=dict(vocab=13, d_model=8, heads=2, ffn=16, layers=2, max_len=9, bias=1,
                 pre_norm=0, final_norm=0, act="relu", tie=1, learned_pos=0,
                 attention="linear", ln_eps=1e-6),
        clip=0.0, lr=1e-3),
}


def fstr(x):
    """A float as the shortest decimal that strtof() reads back as the same float32."""
    return repr(float(np.float32(x)))


def make_batch(rng, V):
    """Windows of T + 1 ordinary tokens (<unk> or 4..V-1): inputs the first T, targets the
    last T; in row 0 the last two targets are <pad> (not counted)."""
    seq = rng.integers(3, V, size=(B, T + 1))
    seq[seq == 3] = 0
    ids, targets = seq[:, :T].astype(np.int32), seq[:, 1:].astype(np.int32)
    targets[0, -2:] = qkv_torch.PAD
    return {"ids": ids, "targets": targets}


def random_weights(model, rng):
    """qkv's initialisation scheme, then every bias, LayerNorm shift and gain moved off its
    initial 0 or 1, so that each of them changes the logits from the first step on."""
    model.reset_parameters(torch.Generator().manual_seed(int(rng.integers(2**31))))
    with torch.no_grad():
        for _, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(torch.from_numpy(rng.normal(0.0, 0.1, p.shape).astype(np.float32)))


def check_against_nn_transformer(model, ids):
    """A softmax model is torch.nn.TransformerEncoder under a causal mask: loaded with the same
    weights, it must give the same logits (training mode, dropout 0, off the fast path)."""
    c = model.cfg
    C, eps = c["d_model"], c["ln_eps"]
    nn = torch.nn
    kw = dict(d_model=C, nhead=c["heads"], dim_feedforward=c["ffn"], dropout=0.0,
              activation=c["act"], layer_norm_eps=eps, batch_first=True,
              norm_first=bool(c["pre_norm"]))
    final = None
    if model.decoder.norm is not None:
        final = nn.LayerNorm(C, eps=eps)
    enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(**kw), c["layers"], norm=final,
                                enable_nested_tensor=False)
    z = torch.zeros(C)
    with torch.no_grad():
        if final is not None:
            final.weight.copy_(model.decoder.norm.gamma), final.bias.copy_(model.decoder.norm.beta)
        for ref, ours in zip(enc.layers, model.decoder.blocks()):
            a = ours.attention
            ref.self_attn.in_proj_weight.copy_(torch.cat([a.W_q, a.W_k, a.W_v]))
            ref.self_attn.in_proj_bias.copy_(torch.cat([a.b_q if a.b_q is not None else z,
                                                        a.b_k if a.b_k is not None else z,
                                                        a.b_v if a.b_v is not None else z]))
            ref.self_attn.out_proj.weight.copy_(a.W_o)
            ref.self_attn.out_proj.bias.copy_(a.b_o if a.b_o is not None else z)
            ref.norm1.weight.copy_(ours.norm1.gamma), ref.norm1.bias.copy_(ours.norm1.beta)
            ref.norm2.weight.copy_(ours.norm2.gamma), ref.norm2.bias.copy_(ours.norm2.beta)
            ref.linear1.weight.copy_(ours.ffn.W1), ref.linear1.bias.copy_(ours.ffn.b1)
            ref.linear2.weight.copy_(ours.ffn.W2), ref.linear2.bias.copy_(ours.ffn.b2)
    enc.train()
    ids = torch.as_tensor(ids)
    causal = torch.triu(torch.full((ids.shape[1], ids.shape[1]), -math.inf), diagonal=1)
    with torch.no_grad():
        y = enc(model.embed(ids, model.embedding, model.positions), mask=causal)
        want = torch.nn.functional.linear(y, model.out_W(), model.output.b)
        got = model(ids)
    err = float((got - want).abs().max())
    assert err <= 1e-5 * max(1.0, float(want.abs().max())), \
        f"qkv_torch's language model differs from torch.nn.TransformerEncoder by {err}"


def run(name, spec, save):
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    cfg = qkv_torch.make_lm_config(spec["cfg"], dropout=0.0)
    model = qkv_torch.QKVLanguageModel(cfg)
    random_weights(model, rng)
    batches = [make_batch(rng, cfg["vocab"]) for _ in range(N_BATCHES)]
    t = {f"batch{k}.{key}": a for k, b in enumerate(batches) for key, a in b.items()}
    t.update({"init." + n: a for n, a in model.qkv_state().items()})
    if cfg["attention"] == "softmax":
        check_against_nn_transformer(model, batches[0]["ids"])
    model.eval()
    with torch.no_grad():
        t["logits0"] = model(batches[0]["ids"])
    model.train()  # dropout is 0: the same function, as qkv_lm_loss(train = 1)

    params = list(model.parameters())
    opt = torch.optim.Adam(params, lr=spec["lr"], betas=(0.9, 0.98), eps=1e-9)
    losses, norms = [], []
    for step in range(STEPS):
        b = batches[step % N_BATCHES]
        opt.zero_grad()
        total, tokens = model.loss(b["ids"], b["targets"])
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
    meta.update({"steps": STEPS, "n_batches": N_BATCHES, "B": B, "T": T, "lr": fstr(spec["lr"]),
                 "beta1": fstr(0.9), "beta2": fstr(0.98), "adam_eps": fstr(1e-9),
                 "clip": fstr(spec["clip"]),
                 "n_tensors": len(qkv_torch.qkv_lm_tensor_table(cfg))})
    save("lm_" + name, t, meta)


def write_all(save):
    """Writes every configuration with save(name, tensors, meta) (make_reference.save)."""
    for name, spec in CONFIGS.items():
        run(name, spec, save)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_lm_reference.py OUTDIR")
    import make_reference
    make_reference.OUT = sys.argv[1]
    os.makedirs(make_reference.OUT, exist_ok=True)
    write_all(make_reference.save)


if __name__ == "__main__":
    main()
