#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Linear attention references for tests/unit/test_linear_attention.c.

    /usr/bin/python3 tests/parity/make_linear_reference.py OUTDIR
    (also run at the end of make_reference.py, so the Makefile's parity rule writes them)

The reference is the QUADRATIC form of Katharopoulos et al. (2020), eq. 4, written directly:
materialise the similarities phi(Q) phi(K)^T (B, H, n, m), zero the keys a query may not see,
normalise each row by its sum plus eps:

    O_i = sum_j M_ij V_j / (sum_j M_ij + eps),   M_ij = phi(Q_i) . phi(K_j) [j visible to i]

with phi = elu + 1, so it shares nothing with qkv's O(N) sums and scans except the formula.
Visible: j < valid_lens[b] (when given) and, causal, j <= i + (m - n) (qkv_mask's rule).
Computed in float64 by autograd and stored as float32: OUTDIR/<case>.safetensors holds Q, K, V,
dO, O, dQ, dK, dV (heads interleaved, (B, T, H, d) as qkv), valid_lens (int32, when
has_lens) and the dimensions as metadata.
"""
import os
import sys
import zlib

import numpy as np
import torch
import torch.nn.functional as F

EPS = float(np.float32(1e-6))  # QKV_LINEAR_ATTENTION_EPS

#        name                  B  H   n    m   d   v  causal  valid_lens
CASES = [("linattn_one_query",  1, 1,  1,   3,  4,  3, 0, None),
         ("linattn_rect_lens",  3, 2,  4,   7,  5,  3, 0, [7, 1, 4]),
         ("linattn_len0",       2, 3,  3,   5,  2,  4, 0, [0, 5]),
         ("linattn_long",       2, 2, 80, 120, 16, 24, 0, [120, 33]),
         ("linattn_causal",     2, 3,  6,   6,  4,  5, 1, None),
         ("linattn_causal_lens", 3, 2, 5,   5,  3,  6, 1, [5, 1, 3]),
         ("linattn_causal_prefix", 2, 2, 3, 7,  4,  3, 1, [7, 5]),
         ("linattn_causal_fewkeys", 1, 2, 5, 3, 3,  2, 1, None),
         ("linattn_causal_long", 2, 4, 96, 96, 16,  8, 1, [96, 50]),
         # head dims of real models: phi's vector path (32 values at a time), with and
         # without a tail after it
         ("linattn_wide",       2, 2, 40,  50, 64, 64, 0, [50, 17]),
         ("linattn_causal_wide", 1, 2, 33, 33, 40, 16, 1, None)]


def phi(x):
    return F.elu(x) + 1.0


def quadratic_linear_attention(Q, K, V, valid_lens, causal):
    """Q (B, n, H, d), K (B, m, H, d), V (B, m, H, v) -> O (B, n, H, v), by eq. 4 with the
    n x m similarity matrix written out."""
    B, n, H, _ = Q.shape
    m = K.shape[1]
    q, k, v = Q.permute(0, 2, 1, 3), K.permute(0, 2, 1, 3), V.permute(0, 2, 1, 3)
    M = phi(q) @ phi(k).transpose(-1, -2)                       # (B, H, n, m)
    j = torch.arange(m).view(1, 1, m)
    vis = torch.ones(B, n, m, dtype=torch.bool)
    if valid_lens is not None:
        vis &= j < torch.tensor(valid_lens).view(B, 1, 1)
    if causal:
        vis &= j <= torch.arange(n).view(1, n, 1) + (m - n)
    M = M * vis.unsqueeze(1).to(M.dtype)
    O = (M @ v) / (M.sum(-1, keepdim=True) + EPS)
    return O.permute(0, 2, 1, 3)


def case(save, name, B, H, n, m, d, v, causal, valid_lens):
    r = np.random.default_rng(zlib.crc32(name.encode()))
    # float32 draws, widened: the reference is exact for the very inputs qkv reads
    draw = lambda *s: torch.from_numpy(r.standard_normal(s).astype(np.float32)).double()  # noqa
    Q, K, V = (draw(B, n, H, d).requires_grad_(), draw(B, m, H, d).requires_grad_(),
               draw(B, m, H, v).requires_grad_())
    dO = draw(B, n, H, v)
    O = quadratic_linear_attention(Q, K, V, valid_lens, causal)
    O.backward(dO)
    f32 = lambda t: t.detach().numpy().astype(np.float32)  # noqa: E731
    t = {"Q": f32(Q), "K": f32(K), "V": f32(V), "dO": f32(dO), "O": f32(O),
         "dQ": f32(Q.grad), "dK": f32(K.grad), "dV": f32(V.grad)}
    if valid_lens is not None:
        t["valid_lens"] = np.asarray(valid_lens, dtype=np.int32)
    save(name, t, {"B": B, "H": H, "n": n, "m": m, "d": d, "v": v, "causal": causal,
                   "has_lens": int(valid_lens is not None)})


def write_all(save):
    """Writes every case with save(name, tensors, meta) (make_reference.save)."""
    for c in CASES:
        case(save, *c)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_linear_reference.py OUTDIR")
    import make_reference
    make_reference.OUT = sys.argv[1]
    os.makedirs(make_reference.OUT, exist_ok=True)
    write_all(make_reference.save)


if __name__ == "__main__":
    main()
