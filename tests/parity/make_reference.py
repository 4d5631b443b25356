#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""PyTorch reference tensors for qkv's parity tests (tests/unit/test_parity_*.c).

    /usr/bin/python3 tests/parity/make_reference.py OUTDIR

writes one OUTDIR/<case>.safetensors per case: the inputs and weights (numpy, seeded by the
case name), the upstream gradient dy, the forward output computed by torch in float32, and
the .grad of every input and parameter after y.backward(dy). Dimensions and hyper-parameters
go into the file's "__metadata__" as strings.

Semantics follow include/qkv.h: row-major layouts, heads interleaved (B, T, H, d), masks that
give masked keys weight exactly 0 (a row with no visible key is all zeros), and inverted
dropout whose keep mask comes from qkv's counter-based generator, ported bit-exactly below.
"""
import json
import math
import os
import struct
import sys
import zlib

import numpy as np
import torch
import torch.nn.functional as F

torch.set_default_dtype(torch.float32)
torch.set_num_threads(1)

OUT = None


# ---------------------------------------------------------------------------------------------
# safetensors, written by hand: u64 header length, JSON header, raw little-endian data
# ---------------------------------------------------------------------------------------------

def save(name, tensors, meta):
    header, blobs, off = {}, [], 0
    for key in sorted(tensors):
        a = tensors[key]
        if isinstance(a, torch.Tensor):
            a = a.detach().cpu().numpy()
        a = np.asarray(a)
        if a.dtype == np.float32 or a.dtype == np.float64:
            a, dtype = np.ascontiguousarray(a, dtype="<f4"), "F32"
        elif a.dtype.kind in "iu":
            a, dtype = np.ascontiguousarray(a, dtype="<i4"), "I32"
        else:
            raise TypeError(f"{name}/{key}: dtype {a.dtype}")
        assert a.size > 0, f"{name}/{key} is empty"
        b = a.tobytes()
        header[key] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    header["__metadata__"] = {k: str(v) for k, v in meta.items()}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(os.path.join(OUT, name + ".safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def fstr(x):
    """A float as the shortest decimal that strtof() reads back as the same float32."""
    return repr(float(np.float32(x)))


# ---------------------------------------------------------------------------------------------
# qkv's counter-based generator (src/core/random.c), in numpy uint64 arithmetic
# ---------------------------------------------------------------------------------------------

U64 = np.uint64
GOLDEN = U64(0x9E3779B97F4A7C15)


def splitmix64(z):
    with np.errstate(over="ignore"):
        z = (z ^ (z >> U64(30))) * U64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> U64(27))) * U64(0x94D049BB133111EB)
        return z ^ (z >> U64(31))


def random_u32(seed, i):
    """qkv_random_u32(seed, i) for an array of counters i."""
    with np.errstate(over="ignore"):
        s = splitmix64(np.array(seed, dtype=U64) + GOLDEN)
        i = np.asarray(i, dtype=U64)
        return (splitmix64(s ^ (i * GOLDEN)) >> U64(32)).astype(np.uint32)


def random_uniform(seed, i):
    """qkv_random_uniform: the top 24 bits times 2^-24, exact in float32."""
    return (random_u32(seed, i) >> np.uint32(8)).astype(np.float32) * np.float32(1.0 / 16777216.0)


def keep_mask(shape, p, seed, offset=0):
    """Dropout keep mask over a tensor of this shape, counter = offset + flat index."""
    n = int(np.prod(shape))
    u = random_uniform(seed, np.arange(offset, offset + n, dtype=np.uint64))
    return torch.from_numpy((u >= np.float32(p)).reshape(shape).astype(np.float32))


def dropout(x, p, seed, offset=0):
    if p <= 0:
        return x
    return x * keep_mask(tuple(x.shape), p, seed, offset) / (1.0 - p)


# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------

def rng_for(name):
    return np.random.default_rng(zlib.crc32(name.encode()))


def randn(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def leaf(a):
    return torch.tensor(np.asarray(a, dtype=np.float32), requires_grad=True)


def grads(**tensors):
    """name -> .grad (zeros if the tensor did not take part)."""
    return {k: (t.grad if t.grad is not None else torch.zeros_like(t)) for k, t in tensors.items()}


def visible(B, n, m, valid_lens=None, per_query=False, causal=False):
    """The qkv_mask as a boolean (B, n, m) tensor: True where query (b, i) may see key j."""
    j = torch.arange(m).view(1, 1, m)
    vis = torch.ones(B, n, m, dtype=torch.bool)
    if valid_lens is not None:
        L = torch.tensor(np.asarray(valid_lens, dtype=np.int64))
        L = L.view(B, n, 1) if per_query else L.view(B, 1, 1)
        vis &= j < L
    if causal:
        i = torch.arange(n).view(1, n, 1)
        vis &= j <= i + (m - n)
    return vis


def masked_softmax(S, vis):
    """Softmax over the last axis of S (..., n, m) where vis (broadcastable) is True; masked
    weights are exactly 0 and a row with nothing visible is all zeros. Written so that autograd
    never multiplies 0 by inf: masked scores are replaced before exp."""
    vis = vis.expand_as(S)
    mx = torch.where(vis, S, torch.full_like(S, -math.inf)).amax(-1, keepdim=True)
    mx = torch.where(torch.isfinite(mx), mx, torch.zeros_like(mx)).detach()
    E = torch.where(vis, torch.exp(torch.where(vis, S, torch.zeros_like(S)) - mx),
                    torch.zeros_like(S))
    Z = E.sum(-1, keepdim=True)
    return E / torch.where(Z > 0, Z, torch.ones_like(Z))


def mask_meta(B, n, valid_lens, per_query, causal):
    """Tensors and metadata describing a qkv_mask (lens are padded to the right count)."""
    meta = {"has_lens": int(valid_lens is not None), "per_query": int(per_query),
            "causal": int(causal)}
    t = {}
    if valid_lens is not None:
        t["valid_lens"] = np.asarray(valid_lens, dtype=np.int32).reshape(-1)
        assert t["valid_lens"].size == (B * n if per_query else B)
    return t, meta


# ---------------------------------------------------------------------------------------------
# random numbers: the port itself, checked by the C side against qkv_random_u32/_uniform
# ---------------------------------------------------------------------------------------------

def case_rng():
    seeds = [0, 1, 42, 12345678901234567, 2**64 - 1]
    counters = np.array(list(range(64)) + [1000, 2**31 - 1, 2**32 + 7, 2**63 + 3, 2**64 - 1],
                        dtype=np.uint64)
    t = {}
    for k, s in enumerate(seeds):
        t[f"u32_{k}"] = random_u32(s, counters).view(np.int32)
        t[f"uniform_{k}"] = random_uniform(s, counters)
    meta = {"n_seeds": len(seeds), "n_counters": counters.size}
    for k, s in enumerate(seeds):
        meta[f"seed_{k}"] = s
    for k, c in enumerate(counters):
        meta[f"counter_{k}"] = int(c)
    save("rng", t, meta)


# ---------------------------------------------------------------------------------------------
# linear, embedding, activations, dropout
# ---------------------------------------------------------------------------------------------

def case_linear(name, N, i, o, bias):
    r = rng_for(name)
    x, W, b, dy = leaf(randn(r, N, i)), leaf(randn(r, o, i, scale=0.5)), leaf(randn(r, o)), \
        randn(r, N, o)
    lin = torch.nn.Linear(i, o, bias=bool(bias))
    with torch.no_grad():
        lin.weight.copy_(W)
        if bias:
            lin.bias.copy_(b)
    y = lin(x)
    y.backward(torch.from_numpy(dy))
    t = {"x": x, "W": W, "b": b, "dy": dy, "y": y, "dx": x.grad, "dW": lin.weight.grad}
    if bias:
        t["db"] = lin.bias.grad
    save(name, t, {"N": N, "in": i, "out": o, "bias": bias})


def case_embedding(name, N, V, C, ids):
    r = rng_for(name)
    ids = np.asarray(ids, dtype=np.int32)
    assert ids.size == N
    E, dy = randn(r, V, C), randn(r, N, C)
    emb = torch.nn.Embedding(V, C)
    with torch.no_grad():
        emb.weight.copy_(torch.from_numpy(E))
    y = emb(torch.from_numpy(ids.astype(np.int64)))
    y.backward(torch.from_numpy(dy))
    save(name, {"ids": ids, "E": E, "dy": dy, "y": y, "dE": emb.weight.grad},
         {"N": N, "V": V, "C": C})


def case_activation(name, act, n):
    r = rng_for(name)
    xs = randn(r, n, scale=2.0)
    xs[::7] = 0.0  # relu'(0) = 0 in both
    x, dy = leaf(xs), randn(r, n)
    y = F.relu(x) if act == "relu" else F.gelu(x)  # exact erf GELU
    y.backward(torch.from_numpy(dy))
    save(name, {"x": x, "dy": dy, "y": y, "dx": x.grad}, {"n": n})


def case_dropout(name, n, p, seed, offset):
    r = rng_for(name)
    x, dy = leaf(randn(r, n)), randn(r, n)
    y = dropout(x, p, seed, offset)
    y.backward(torch.from_numpy(dy))
    save(name, {"x": x, "dy": dy, "y": y, "dx": x.grad},
         {"n": n, "p": fstr(p), "seed": seed, "offset": offset})


# ---------------------------------------------------------------------------------------------
# normalisation
# ---------------------------------------------------------------------------------------------

def case_layernorm(name, N, C, eps, shift, row_scales=None):
    """row_scales: one standard deviation per row, so that rows whose variance is below, near
    and above eps tell sqrt(var + eps) from sqrt(var) + eps (and from no eps at all)."""
    r = rng_for(name)
    scale = np.ones((N, 1), np.float32) if row_scales is None else \
        np.asarray(row_scales, np.float32).reshape(N, 1)
    x = leaf(randn(r, N, C) * scale + np.float32(shift))
    g, b, dy = leaf(1 + randn(r, C, scale=0.3)), leaf(randn(r, C, scale=0.3)), randn(r, N, C)
    y = F.layer_norm(x, (C,), g, b, eps)
    y.backward(torch.from_numpy(dy))
    x64 = x.detach().double()
    mean = x64.mean(-1)
    rstd = 1.0 / torch.sqrt(x64.var(-1, unbiased=False) + eps)
    save(name, {"x": x, "gamma": g, "beta": b, "dy": dy, "y": y, "mean": mean, "rstd": rstd,
                "dx": x.grad, "dgamma": g.grad, "dbeta": b.grad},
         {"N": N, "C": C, "eps": fstr(eps)})


def case_rmsnorm(name, N, C, eps, shift):
    r = rng_for(name)
    x = leaf(randn(r, N, C) + np.float32(shift))
    g, dy = leaf(1 + randn(r, C, scale=0.3)), randn(r, N, C)
    y = x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * g
    y.backward(torch.from_numpy(dy))
    rstd = 1.0 / torch.sqrt((x.detach().double() ** 2).mean(-1) + eps)
    save(name, {"x": x, "g": g, "dy": dy, "y": y, "rstd": rstd, "dx": x.grad, "dg": g.grad},
         {"N": N, "C": C, "eps": fstr(eps)})


# ---------------------------------------------------------------------------------------------
# masked softmax, cross-entropy
# ---------------------------------------------------------------------------------------------

def case_masked_softmax(name, B, H, n, m, valid_lens=None, per_query=False, causal=False):
    r = rng_for(name)
    S, dy = leaf(randn(r, B, H, n, m, scale=2.0)), randn(r, B, H, n, m)
    vis = visible(B, n, m, valid_lens, per_query, causal).unsqueeze(1)  # (B, 1, n, m)
    P = masked_softmax(S, vis)
    P.backward(torch.from_numpy(dy))
    mt, meta = mask_meta(B, n, valid_lens, per_query, causal)
    save(name, {"S": S, "dP": dy, "P": P, "dS": S.grad, **mt},
         {"B": B, "H": H, "n": n, "m": m, **meta})


def case_cross_entropy(name, N, V, targets, ignore_index, smoothing, logit_scale=1.0,
                       upstream=1.0):
    r = rng_for(name)
    z = leaf(randn(r, N, V, scale=logit_scale))
    tg = np.asarray(targets, dtype=np.int32)
    assert tg.size == N
    loss = F.cross_entropy(z, torch.from_numpy(tg.astype(np.int64)), reduction="none",
                           ignore_index=ignore_index, label_smoothing=smoothing)
    count = int((tg != ignore_index).sum())
    scale = np.float32(upstream / max(count, 1))  # dL/d(loss per row): L = upstream * mean
    (loss * torch.tensor(scale)).sum().backward()
    lse = torch.logsumexp(z.detach().double(), -1)
    save(name, {"logits": z, "targets": tg, "loss": loss, "lse": lse, "dlogits": z.grad},
         {"N": N, "V": V, "ignore_index": ignore_index, "label_smoothing": fstr(smoothing),
          "scale": fstr(scale), "count": count,
          "sum": repr(float(loss.detach().double().sum()))})


# ---------------------------------------------------------------------------------------------
# scaled dot-product attention, (B, T, H, d) layout
# ---------------------------------------------------------------------------------------------

def sdpa(Q, K, V, vis, p, seed):
    """Q (B, n, H, d), K (B, m, H, d), V (B, m, H, v), vis (B, n, m) -> O (B, n, H, v),
    P (B, H, n, m); dropout counter = flat index into P."""
    d = Q.shape[-1]
    q, k, v = Q.permute(0, 2, 1, 3), K.permute(0, 2, 1, 3), V.permute(0, 2, 1, 3)
    S = q @ k.transpose(-1, -2) / math.sqrt(d)
    P = masked_softmax(S, vis.unsqueeze(1))
    O = dropout(P, p, seed) @ v
    return O.permute(0, 2, 1, 3), P


def case_attention(name, B, H, n, m, d, v, valid_lens=None, per_query=False, causal=False,
                   p=0.0, seed=0):
    r = rng_for(name)
    Q, K, V = leaf(randn(r, B, n, H, d)), leaf(randn(r, B, m, H, d)), leaf(randn(r, B, m, H, v))
    dy = randn(r, B, n, H, v)
    O, P = sdpa(Q, K, V, visible(B, n, m, valid_lens, per_query, causal), p, seed)
    O.backward(torch.from_numpy(dy))
    mt, meta = mask_meta(B, n, valid_lens, per_query, causal)
    save(name, {"Q": Q, "K": K, "V": V, "dO": dy, "O": O, "P": P, "dQ": Q.grad, "dK": K.grad,
                "dV": V.grad, **mt},
         {"B": B, "H": H, "n": n, "m": m, "d": d, "v": v, "p": fstr(p), "seed": seed, **meta})


# ---------------------------------------------------------------------------------------------
# additive attention (d2l 11.3.2)
# ---------------------------------------------------------------------------------------------

def case_additive(name, B, n, m, dq, dk, v, h, valid_lens=None, per_query=False, causal=False,
                  p=0.0, seed=0):
    r = rng_for(name)
    Q, K, V = leaf(randn(r, B, n, dq)), leaf(randn(r, B, m, dk)), leaf(randn(r, B, m, v))
    Wq, Wk, wv = leaf(randn(r, h, dq, scale=0.5)), leaf(randn(r, h, dk, scale=0.5)), \
        leaf(randn(r, h))
    dy = randn(r, B, n, v)
    q, k = Q @ Wq.T, K @ Wk.T                                    # (B, n, h), (B, m, h)
    Fe = torch.tanh(q.unsqueeze(2) + k.unsqueeze(1))             # (B, n, m, h)
    S = Fe @ wv                                                  # (B, n, m)
    P = masked_softmax(S, visible(B, n, m, valid_lens, per_query, causal))
    O = dropout(P, p, seed) @ V
    O.backward(torch.from_numpy(dy))
    mt, meta = mask_meta(B, n, valid_lens, per_query, causal)
    save(name, {"Q": Q, "K": K, "V": V, "W_q": Wq, "W_k": Wk, "w_v": wv, "dO": dy, "O": O,
                "P": P, "q": q, "k": k, "F": Fe, "dQ": Q.grad, "dK": K.grad, "dV": V.grad,
                "dW_q": Wq.grad, "dW_k": Wk.grad, "dw_v": wv.grad, **mt},
         {"B": B, "n": n, "m": m, "dq": dq, "dk": dk, "v": v, "h": h, "p": fstr(p),
          "seed": seed, **meta})


# ---------------------------------------------------------------------------------------------
# multi-head attention (d2l 11.5) with explicit W_q, W_k, W_v, W_o
# ---------------------------------------------------------------------------------------------

def mha(xq, xkv, W, cfg, vis, p, seed):
    """xq (B, n, d_q), xkv (B, m, d_kv) -> y (B, n, d_q), P (B, H, n, m). Head h uses rows
    h*p..h*p+p-1 of each projection: q (B, n, H*p) viewed as (B, n, H, p)."""
    B, n, _ = xq.shape
    m = xkv.shape[1]
    H, hp = cfg["heads"], cfg["head_dim"]
    q = F.linear(xq, W["W_q"], W.get("b_q")).view(B, n, H, hp)
    k = F.linear(xkv, W["W_k"], W.get("b_k")).view(B, m, H, hp)
    v = F.linear(xkv, W["W_v"], W.get("b_v")).view(B, m, H, hp)
    ctx, P = sdpa(q, k, v, vis, p, seed)
    return F.linear(ctx.reshape(B, n, H * hp), W["W_o"], W.get("b_o")), P


def mha_weights(r, d_q, d_kv, H, hp, bias):
    W = {"W_q": leaf(randn(r, H * hp, d_q, scale=d_q ** -0.5)),
         "W_k": leaf(randn(r, H * hp, d_kv, scale=d_kv ** -0.5)),
         "W_v": leaf(randn(r, H * hp, d_kv, scale=d_kv ** -0.5)),
         "W_o": leaf(randn(r, d_q, H * hp, scale=(H * hp) ** -0.5))}
    if bias:
        for k, size in (("b_q", H * hp), ("b_k", H * hp), ("b_v", H * hp), ("b_o", d_q)):
            W[k] = leaf(randn(r, size, scale=0.1))
    return W


def case_mha(name, B, n, m, d_q, d_kv, H, hp, bias, self_attention, valid_lens=None,
             per_query=False, causal=False, p=0.0, seed=0):
    r = rng_for(name)
    cfg = {"heads": H, "head_dim": hp}
    if self_attention:
        assert m == n and d_kv == d_q
    W = mha_weights(r, d_q, d_kv, H, hp, bias)
    xq = leaf(randn(r, B, n, d_q))
    xkv = xq if self_attention else leaf(randn(r, B, m, d_kv))
    dy = randn(r, B, n, d_q)
    y, P = mha(xq, xkv, W, cfg, visible(B, n, m, valid_lens, per_query, causal), p, seed)
    y.backward(torch.from_numpy(dy))
    mt, meta = mask_meta(B, n, valid_lens, per_query, causal)
    t = {"xq": xq, "dy": dy, "y": y, "P": P, "dxq": xq.grad, **mt}
    if not self_attention:
        t.update({"xkv": xkv, "dxkv": xkv.grad})
    for k, w in W.items():
        t[k] = w
        t["d" + k] = w.grad
    save(name, t, {"B": B, "n": n, "m": m, "d_q": d_q, "d_kv": d_kv, "heads": H, "head_dim": hp,
                   "bias": bias, "self": int(self_attention), "p": fstr(p), "seed": seed, **meta})


def case_mha_torch(name, B, T, C, H, valid_lens):
    """torch.nn.MultiheadAttention (self-attention, key padding mask, no dropout) against the
    same weights: proves the explicit formula above is the standard layer."""
    r = rng_for(name)
    mod = torch.nn.MultiheadAttention(C, H, bias=True, batch_first=True)
    W = mha_weights(r, C, C, H, C // H, 1)
    with torch.no_grad():
        mod.in_proj_weight.copy_(torch.cat([W["W_q"], W["W_k"], W["W_v"]]))
        mod.in_proj_bias.copy_(torch.cat([W["b_q"], W["b_k"], W["b_v"]]))
        mod.out_proj.weight.copy_(W["W_o"])
        mod.out_proj.bias.copy_(W["b_o"])
    x, dy = leaf(randn(r, B, T, C)), randn(r, B, T, C)
    pad = ~visible(B, 1, T, valid_lens)[:, 0, :]                     # True = ignore key
    y, P = mod(x, x, x, key_padding_mask=pad, need_weights=True, average_attn_weights=False)
    y.backward(torch.from_numpy(dy))
    # the explicit formula on the same numbers must agree before anything is saved
    y2, P2 = mha(x.detach(), x.detach(), {k: w.detach() for k, w in W.items()},
                 {"heads": H, "head_dim": C // H}, visible(B, T, T, valid_lens), 0.0, 0)
    assert torch.allclose(y, y2, atol=1e-5, rtol=1e-5) and torch.allclose(P, P2, atol=1e-6)
    ipw, ipb = mod.in_proj_weight.grad, mod.in_proj_bias.grad
    t = {"xq": x, "dy": dy, "y": y, "P": P, "dxq": x.grad,
         "valid_lens": np.asarray(valid_lens, dtype=np.int32),
         "dW_q": ipw[:C], "dW_k": ipw[C:2 * C], "dW_v": ipw[2 * C:],
         "db_q": ipb[:C], "db_k": ipb[C:2 * C], "db_v": ipb[2 * C:],
         "dW_o": mod.out_proj.weight.grad, "db_o": mod.out_proj.bias.grad}
    for k, w in W.items():
        t[k] = w
    save(name, t, {"B": B, "n": T, "m": T, "d_q": C, "d_kv": C, "heads": H, "head_dim": C // H,
                   "bias": 1, "self": 1, "p": fstr(0.0), "seed": 0, "has_lens": 1,
                   "per_query": 0, "causal": 0})


# ---------------------------------------------------------------------------------------------
# positional encoding, FFN, residual, AddNorm, pre-norm block
# ---------------------------------------------------------------------------------------------

def sinusoidal(T, C):
    """P[i, 2j] = sin(i / 10000^(2j/C)), P[i, 2j+1] = cos(i / 10000^(2j/C)), in float64."""
    P = np.zeros((T, C))
    pos = np.arange(T, dtype=np.float64)[:, None]
    even = np.arange(0, C, 2, dtype=np.float64)
    ang = pos / np.power(10000.0, even / C)
    P[:, 0::2] = np.sin(ang)
    P[:, 1::2] = np.cos(ang[:, : C // 2])
    return P.astype(np.float32)


def case_sinusoidal(name, T, C):
    save(name, {"P": sinusoidal(T, C)}, {"T": T, "C": C})


def case_positional(name, B, T, C, pos0, scale, learned):
    r = rng_for(name)
    Tmax = pos0 + T + 2
    P = leaf(randn(r, Tmax, C) if learned else sinusoidal(Tmax, C))
    x, dy = leaf(randn(r, B, T, C)), randn(r, B, T, C)
    y = x * np.float32(scale) + P[pos0:pos0 + T]
    y.backward(torch.from_numpy(dy))
    t = {"x": x, "P": P, "dy": dy, "y": y, "dx": x.grad}
    if learned:
        t["dP"] = P.grad
    save(name, t, {"B": B, "T": T, "C": C, "pos0": pos0, "scale": fstr(scale),
                   "learned": int(learned), "Tmax": Tmax})


def ffn(x, W1, b1, W2, b2, act):
    h_pre = F.linear(x, W1, b1)
    h = F.relu(h_pre) if act == "relu" else F.gelu(h_pre)
    return F.linear(h, W2, b2), h_pre, h


def ffn_weights(r, C, Fd, bias):
    W = {"W1": leaf(randn(r, Fd, C, scale=C ** -0.5)),
         "W2": leaf(randn(r, C, Fd, scale=Fd ** -0.5))}
    if bias:
        W["b1"], W["b2"] = leaf(randn(r, Fd, scale=0.1)), leaf(randn(r, C, scale=0.1))
    return W


def case_ffn(name, N, C, Fd, act, bias):
    r = rng_for(name)
    W = ffn_weights(r, C, Fd, bias)
    x, dy = leaf(randn(r, N, C)), randn(r, N, C)
    y, h_pre, h = ffn(x, W["W1"], W.get("b1"), W["W2"], W.get("b2"), act)
    y.backward(torch.from_numpy(dy))
    t = {"x": x, "dy": dy, "y": y, "h_pre": h_pre, "h": h, "dx": x.grad}
    for k, w in W.items():
        t[k] = w
        t["d" + k] = w.grad
    save(name, t, {"N": N, "C": C, "F": Fd, "act": int(act == "gelu"), "bias": bias})


def case_residual(name, n, p, seed):
    r = rng_for(name)
    x, s, dy = leaf(randn(r, n)), leaf(randn(r, n)), randn(r, n)
    y = x + dropout(s, p, seed)
    y.backward(torch.from_numpy(dy))
    save(name, {"x": x, "s": s, "dy": dy, "y": y, "dx": x.grad, "ds": s.grad},
         {"n": n, "p": fstr(p), "seed": seed})


def case_addnorm(name, N, C, eps, p, seed, scale=1.0):
    r = rng_for(name)
    x, s = leaf(randn(r, N, C, scale=scale)), leaf(randn(r, N, C, scale=scale))
    g, b, dy = leaf(1 + randn(r, C, scale=0.3)), leaf(randn(r, C, scale=0.3)), randn(r, N, C)
    z = dropout(s, p, seed) + x
    y = F.layer_norm(z, (C,), g, b, eps)
    y.backward(torch.from_numpy(dy))
    z64 = z.detach().double()
    mean, rstd = z64.mean(-1), 1.0 / torch.sqrt(z64.var(-1, unbiased=False) + eps)
    save(name, {"x": x, "s": s, "gamma": g, "beta": b, "dy": dy, "y": y, "z": z, "mean": mean,
                "rstd": rstd, "dx": x.grad, "ds": s.grad, "dgamma": g.grad, "dbeta": b.grad},
         {"N": N, "C": C, "eps": fstr(eps), "p": fstr(p), "seed": seed})


def case_prenorm(name, N, C, Fd, act, eps, p, seed):
    """x + dropout(FFN(LayerNorm(x))), the pre-norm residual block."""
    r = rng_for(name)
    W = ffn_weights(r, C, Fd, 1)
    g, b = leaf(1 + randn(r, C, scale=0.3)), leaf(randn(r, C, scale=0.3))
    x, dy = leaf(randn(r, N, C)), randn(r, N, C)
    s, _, _ = ffn(F.layer_norm(x, (C,), g, b, eps), W["W1"], W["b1"], W["W2"], W["b2"], act)
    y = x + dropout(s, p, seed)
    y.backward(torch.from_numpy(dy))
    t = {"x": x, "gamma": g, "beta": b, "dy": dy, "y": y, "dx": x.grad, "dgamma": g.grad,
         "dbeta": b.grad}
    for k, w in W.items():
        t[k] = w
        t["d" + k] = w.grad
    save(name, t, {"N": N, "C": C, "F": Fd, "act": int(act == "gelu"), "eps": fstr(eps),
                   "p": fstr(p), "seed": seed})


# ---------------------------------------------------------------------------------------------
# the optimizer: Adam with decoupled weight decay against torch.optim.AdamW
# ---------------------------------------------------------------------------------------------

def case_adamw(name, n, lrs, wd, beta1, beta2, eps):
    """len(lrs) steps of torch.optim.AdamW from random parameters on random gradients, the
    learning rate changed before each step as a schedule does. torch decays p by lr * wd * p
    (decoupled, scaled by the learning rate) before the Adam step; P holds the parameters
    after every step, so a wrong first step and a drift that builds up both show."""
    r = rng_for(name)
    steps = len(lrs)
    p0 = randn(r, n, scale=2.0)
    G = np.stack([randn(r, n, scale=0.1 * (k + 1)) for k in range(steps)])
    p = torch.nn.Parameter(torch.from_numpy(p0.copy()))
    opt = torch.optim.AdamW([p], lr=lrs[0], betas=(beta1, beta2), eps=eps, weight_decay=wd)
    P = []
    for k in range(steps):
        for group in opt.param_groups:
            group["lr"] = lrs[k]
        p.grad = torch.from_numpy(G[k].copy())
        opt.step()
        P.append(p.detach().clone().numpy())
    save(name, {"p0": p0, "grads": G, "lrs": np.asarray(lrs, np.float32), "P": np.stack(P)},
         {"n": n, "steps": steps, "wd": fstr(wd), "beta1": fstr(beta1), "beta2": fstr(beta2),
          "eps": fstr(eps)})


# ---------------------------------------------------------------------------------------------

def main():
    global OUT
    if len(sys.argv) != 2:
        sys.exit("usage: make_reference.py OUTDIR")
    OUT = sys.argv[1]
    os.makedirs(OUT, exist_ok=True)

    case_rng()

    case_linear("linear_n1", 1, 3, 5, 1)
    case_linear("linear_bias", 7, 16, 9, 1)
    case_linear("linear_nobias", 13, 5, 32, 0)

    case_embedding("embedding_n1", 1, 5, 3, [4])
    case_embedding("embedding_repeat", 12, 7, 8, [3, 0, 3, 6, 1, 3, 0, 2, 6, 6, 5, 3])
    case_embedding("embedding_same", 5, 11, 6, [9, 9, 9, 9, 9])

    for n in (1, 37, 300):
        case_activation(f"relu_{n}", "relu", n)
        case_activation(f"gelu_{n}", "gelu", n)

    case_dropout("dropout_n1", 1, 0.5, 3, 0)
    case_dropout("dropout_p10", 1000, 0.1, 7, 0)
    case_dropout("dropout_offset", 333, 0.5, 123456789, 1000)
    case_dropout("dropout_p0", 20, 0.0, 1, 0)

    case_layernorm("layernorm_n1", 1, 8, 1e-5, 0.0)
    case_layernorm("layernorm_odd", 6, 33, 1e-5, 0.0)
    case_layernorm("layernorm_shift", 5, 64, 1e-6, 3.0)
    # eps as large as the variance, and rows whose variance spans it (sqrt(var) + eps, or eps
    # left out, fails each of these)
    case_layernorm("layernorm_eps_large", 6, 16, 0.1, 0.0, [0.03, 0.1, 0.3, 1.0, 3.0, 10.0])
    case_layernorm("layernorm_eps_one", 4, 24, 1.0, -2.0, [0.5, 1.0, 2.0, 4.0])
    case_layernorm("layernorm_small_var", 5, 32, 1e-3, 1.0, [1e-3, 1e-2, 3e-2, 0.1, 1.0])
    case_rmsnorm("rmsnorm_n1", 1, 8, 1e-6, 0.0)
    case_rmsnorm("rmsnorm_odd", 7, 21, 1e-5, 0.5)
    case_rmsnorm("rmsnorm_wide", 3, 96, 1e-6, 0.0)

    case_masked_softmax("softmax_nomask", 2, 1, 3, 5)
    case_masked_softmax("softmax_seq", 3, 2, 4, 6, valid_lens=[6, 0, 3])
    case_masked_softmax("softmax_query", 2, 3, 3, 4, valid_lens=[1, 4, 0, 2, 3, 4],
                        per_query=True)
    case_masked_softmax("softmax_causal", 2, 2, 4, 4, causal=True)
    case_masked_softmax("softmax_causal_seq", 2, 2, 3, 5, valid_lens=[5, 2], causal=True)

    case_cross_entropy("xent_n1", 1, 5, [2], -100, 0.0)
    case_cross_entropy("xent_pad_smooth", 10, 17, [3, 0, 16, 0, 5, 5, 1, 0, 9, 12], 0, 0.1,
                       upstream=0.7)
    case_cross_entropy("xent_pad_inside", 6, 3, [2, 0, 1, 2, 2, 1], 2, 0.0)
    case_cross_entropy("xent_large", 4, 50, [49, 0, 7, -100], -100, 0.2, logit_scale=30.0)

    case_attention("attn_n1", 1, 1, 1, 1, 4, 3)
    case_attention("attn_seq_zero", 2, 1, 3, 5, 4, 6, valid_lens=[2, 0])
    case_attention("attn_causal_heads", 2, 3, 4, 4, 5, 2, causal=True)
    case_attention("attn_query_causal_drop", 2, 2, 3, 6, 8, 4,
                   valid_lens=[6, 2, 0, 4, 5, 1], per_query=True, causal=True, p=0.3, seed=11)
    case_attention("attn_heads_drop", 3, 4, 5, 7, 3, 5, valid_lens=[7, 3, 1], p=0.5, seed=2024)

    case_additive("additive_n1", 1, 1, 1, 3, 2, 4, 5)
    case_additive("additive_seq_zero", 2, 3, 5, 4, 6, 3, 8, valid_lens=[3, 0])
    case_additive("additive_query_causal_drop", 2, 4, 4, 5, 5, 2, 6,
                  valid_lens=[4, 1, 3, 2, 0, 4, 4, 4], per_query=True, causal=True, p=0.25,
                  seed=9)
    case_additive("additive_causal_rect", 1, 2, 5, 3, 4, 3, 4, causal=True)

    case_mha_torch("mha_torch", 2, 5, 8, 2, [5, 3])
    case_mha("mha_self_bias", 2, 5, 5, 12, 12, 3, 4, 1, True, valid_lens=[5, 2])
    case_mha("mha_self_nobias_causal_drop", 2, 4, 4, 8, 8, 2, 4, 0, True, causal=True, p=0.2,
             seed=5)
    case_mha("mha_cross_bias_drop", 2, 3, 6, 8, 5, 2, 3, 1, False, valid_lens=[6, 0], p=0.1,
             seed=77)
    case_mha("mha_cross_query_causal", 1, 3, 5, 6, 4, 3, 2, 0, False,
             valid_lens=[1, 5, 3], per_query=True, causal=True)
    case_mha("mha_self_n1", 1, 1, 1, 4, 4, 1, 4, 1, True)

    case_sinusoidal("sinusoidal_512x64", 512, 64)
    case_sinusoidal("sinusoidal_9x5", 9, 5)
    case_positional("positional_sin", 2, 5, 8, 0, math.sqrt(8), False)
    case_positional("positional_learned", 3, 4, 6, 3, 1.0, True)
    case_positional("positional_one", 1, 1, 4, 7, 2.0, True)

    case_ffn("ffn_relu", 6, 8, 32, "relu", 1)
    case_ffn("ffn_gelu_n1", 1, 5, 7, "gelu", 1)
    case_ffn("ffn_gelu_nobias", 9, 12, 20, "gelu", 0)

    case_residual("residual_n1", 1, 0.0, 0)
    case_residual("residual_drop", 40, 0.3, 3)
    case_residual("residual_nodrop", 25, 0.0, 8)

    case_addnorm("addnorm_n1", 1, 8, 1e-5, 0.0, 0)
    case_addnorm("addnorm_drop", 7, 16, 1e-6, 0.2, 42)
    case_addnorm("addnorm_odd", 3, 13, 1e-5, 0.5, 1234)
    case_addnorm("addnorm_eps_large", 4, 12, 0.05, 0.1, 7, scale=0.2)

    case_adamw("adamw_decay", 37, [1e-2, 3e-2, 3e-2, 1e-2, 5e-3, 1e-3], 0.1, 0.9, 0.999, 1e-8)
    case_adamw("adamw_strong_decay", 8, [0.1, 0.05, 0.2], 0.5, 0.8, 0.98, 1e-6)

    case_prenorm("prenorm_gelu_drop", 6, 8, 16, "gelu", 1e-5, 0.25, 77)
    case_prenorm("prenorm_relu_n1", 1, 4, 8, "relu", 1e-5, 0.0, 0)

    # the whole model trained for 20 Adam steps (tests/unit/test_model_parity.c)
    import make_model_reference
    make_model_reference.write_all(save)

    # the PyTorch tutorial's model through tools/torch2qkv.py (tests/unit/test_torch2qkv.c)
    import make_torch2qkv_reference
    make_torch2qkv_reference.write_all(save, OUT)
    __import__("make_nw_reference").write_all(save)  # Nadaraya-Watson (d2l 11.2)
    __import__("make_linear_reference").write_all(save)  # linear attention vs its quadratic form
    __import__("make_flash_reference").write_all(save)  # flash attention (tiled, O(N) memory)
    __import__("make_lm_reference").write_all(save)  # the decoder-only language model
    __import__("make_beam_reference").write_all(save)  # beam search's rules, scripted logits
    # weights as checkpoints store them: F16/BF16 safetensors, pytorch_model.bin, .npz
    # (tests/unit/test_weights.c)
    __import__("make_weights_reference").write_all(OUT)
    # Hugging Face MarianMT directories for qkv import marian (tests/unit/test_marian.c)
    __import__("make_marian_reference").write_all(save, OUT, os.environ.get("QKV_DATA_DIR",
                                                                         "../shared/data"))
    # Hugging Face NLLB-200 and M2M100 directories for qkv import nllb / m2m100
    # (tests/unit/test_m2m100.c)
    __import__("make_m2m100_reference").write_all(save, OUT, os.environ.get("QKV_DATA_DIR",
                                                                           "../shared/data"))


if __name__ == "__main__":
    main()
