#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Flash attention references for tests/unit/test_flash_attention.c.

    /usr/bin/python3 tests/parity/make_flash_reference.py OUTDIR
    (also run at the end of make_reference.py, so the Makefile's parity rule writes them)

PyTorch's materialised softmax attention (make_reference.sdpa: masked softmax, dropout from
qkv's counter-based generator, heads interleaved (B, T, H, d)) on shapes that cross qkv's
128 x 128 tiles, plus the row log-sum-exp L (B, H, n) that qkv_flash_attention_forward saves,
computed in float64 over the visible scores (-inf for a row that sees no key).
OUTDIR/<case>.safetensors holds Q, K, V, dO, O, L, dQ, dK, dV, valid_lens (when has_lens)
and the dimensions, p and seed as metadata.
"""
import math
import os
import sys

import numpy as np
import torch

import make_reference as mr

#        name                   B  H    n    m   d   v  lens        per_query causal  p    seed
CASES = [("flash_causal_prefix", 2, 2, 140, 300, 16,  8, [300, 190], False,    True,   0.0, 0),
         ("flash_query_dropout", 2, 3, 133, 131,  8, 12, "query",    True,     False,  0.25, 99)]


def logsumexp_rows(Q, K, vis):
    """L (B, H, n) = log sum_j exp(q_i . k_j / sqrt d) over visible j, in float64."""
    q = Q.detach().double().permute(0, 2, 1, 3)
    k = K.detach().double().permute(0, 2, 1, 3)
    S = q @ k.transpose(-1, -2) / math.sqrt(Q.shape[-1])
    S = S.masked_fill(~vis.unsqueeze(1), -math.inf)
    return torch.logsumexp(S, dim=-1)  # -inf where nothing is visible


def case(save, name, B, H, n, m, d, v, lens, per_query, causal, p, seed):
    r = mr.rng_for(name)
    if lens == "query":  # every length from 0 to m, the first row 0
        lens = r.integers(0, m + 1, size=B * n)
        lens[0] = 0
        lens = lens.tolist()
    Q = mr.leaf(mr.randn(r, B, n, H, d, scale=3.0))
    K, V = mr.leaf(mr.randn(r, B, m, H, d)), mr.leaf(mr.randn(r, B, m, H, v))
    dy = mr.randn(r, B, n, H, v)
    vis = mr.visible(B, n, m, lens, per_query, causal)
    O, _ = mr.sdpa(Q, K, V, vis, p, seed)
    O.backward(torch.from_numpy(dy))
    mt, meta = mr.mask_meta(B, n, lens, per_query, causal)
    save(name, {"Q": Q, "K": K, "V": V, "dO": dy, "O": O, "L": logsumexp_rows(Q, K, vis),
                "dQ": Q.grad, "dK": K.grad, "dV": V.grad, **mt},
         {"B": B, "H": H, "n": n, "m": m, "d": d, "v": v, "p": mr.fstr(p), "seed": seed, **meta})


def write_all(save):
    """Writes every case with save(name, tensors, meta) (make_reference.save)."""
    for c in CASES:
        case(save, *c)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_flash_reference.py OUTDIR")
    mr.OUT = sys.argv[1]
    os.makedirs(mr.OUT, exist_ok=True)
    write_all(mr.save)


if __name__ == "__main__":
    main()
