#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""PyTorch references for Nadaraya-Watson kernel regression (tests/unit/test_kernel_regression.c).

Called at the end of make_reference.py's main() with its save(); also runnable alone:

    /usr/bin/python3 tests/parity/make_nw_reference.py OUTDIR

Two kinds of case:
  nw_*      one forward and backward of the pooling layer on random numbers, with masks:
            y = masked_softmax(-((q - k) w)^2 / 2) v, gradients of q, k, v, w given dy;
  nw_d2l    d2l 11.2 as its notebook runs it: the non-parametric fit, then NWKernelRegression
            trained for 5 full-batch SGD steps (lr 0.5, squared loss summed), where each
            training input attends to the other 49.
"""
import os
import sys
import zlib

import numpy as np
import torch
from torch import nn


def rng_for(name):
    return np.random.default_rng(zlib.crc32(name.encode()))


def leaf(a):
    return torch.tensor(np.asarray(a, dtype=np.float32), requires_grad=True)


def case_pooling(save, mr, name, B, n, m, w, valid_lens=None, per_query=False, causal=False):
    r = rng_for(name)
    q = leaf(r.uniform(0, 5, (B, n)))
    k = leaf(r.uniform(0, 5, (B, m)))
    v = leaf(r.standard_normal((B, m)))
    wt = leaf([w])
    dy = r.standard_normal((B, n)).astype(np.float32)
    S = -((q.unsqueeze(-1) - k.unsqueeze(1)) * wt) ** 2 / 2          # (B, n, m)
    P = mr.masked_softmax(S, mr.visible(B, n, m, valid_lens, per_query, causal))
    y = torch.bmm(P, v.unsqueeze(-1)).squeeze(-1)                     # (B, n)
    y.backward(torch.from_numpy(dy))
    t, meta = mr.mask_meta(B, n, valid_lens, per_query, causal)
    t.update({"q": q, "k": k, "v": v, "dy": dy, "y": y, "P": P, "dq": q.grad, "dk": k.grad,
              "dv": v.grad, "dw": wt.grad})
    meta.update({"B": B, "n": n, "m": m, "w": mr.fstr(w)})
    save(name, t, meta)


class NWKernelRegression(nn.Module):
    """d2l 11.2's parametric attention pooling, verbatim."""

    def __init__(self, w0):
        super().__init__()
        self.w = nn.Parameter(torch.tensor([w0], dtype=torch.float32))

    def forward(self, queries, keys, values):
        queries = queries.repeat_interleave(keys.shape[1]).reshape((-1, keys.shape[1]))
        self.attention_weights = nn.functional.softmax(-((queries - keys) * self.w) ** 2 / 2,
                                                       dim=1)
        return torch.bmm(self.attention_weights.unsqueeze(1), values.unsqueeze(-1)).reshape(-1)


def case_d2l(save, name="nw_d2l"):
    r = rng_for(name)
    n_train = 50
    x_train = torch.from_numpy(np.sort(r.uniform(0, 1, n_train) * 5).astype(np.float32))
    f = lambda x: 2 * torch.sin(x) + x ** 0.8
    y_train = f(x_train) + torch.from_numpy(r.normal(0.0, 0.5, n_train).astype(np.float32))
    x_test = torch.arange(0, 5, 0.1)
    n_test = len(x_test)

    # non-parametric: every test input attends to every training input with w = 1
    X_repeat = x_test.repeat_interleave(n_train).reshape((-1, n_train))
    attn_np = nn.functional.softmax(-(X_repeat - x_train) ** 2 / 2, dim=1)
    y_np = torch.matmul(attn_np, y_train)

    # parametric: input i attends to the other inputs (the diagonal is dropped)
    X_tile, Y_tile = x_train.repeat((n_train, 1)), y_train.repeat((n_train, 1))
    off = (1 - torch.eye(n_train)).type(torch.bool)
    keys, values = X_tile[off].reshape((n_train, -1)), Y_tile[off].reshape((n_train, -1))
    w0 = float(np.float32(r.uniform(0, 1)))  # d2l: torch.rand((1,))
    net = NWKernelRegression(w0)
    loss = nn.MSELoss(reduction="none")
    trainer = torch.optim.SGD(net.parameters(), lr=0.5)
    losses = []
    for epoch in range(5):
        trainer.zero_grad()
        l = loss(net(x_train, keys, values), y_train)
        l.sum().backward()
        trainer.step()
        losses.append(float(l.sum()))
    keys, values = x_train.repeat((n_test, 1)), y_train.repeat((n_test, 1))
    with torch.no_grad():
        y_p = net(x_test, keys, values)
    save(name, {"x_train": x_train, "y_train": y_train, "x_test": x_test,
                "y_truth": f(x_test), "y_nonparametric": y_np, "attention_nonparametric": attn_np,
                "losses": np.asarray(losses, dtype=np.float32),
                "w": net.w.detach(), "y_parametric": y_p,
                "attention_parametric": net.attention_weights.detach()},
         {"n_train": n_train, "n_test": n_test, "w0": repr(w0), "epochs": 5, "lr": "0.5"})


def write_all(save):
    """Writes every case with save(name, tensors, meta) (make_reference.save)."""
    import make_reference as mr  # its masks and masked softmax: one definition of the semantics
    case_pooling(save, mr, "nw_plain", 1, 7, 9, 1.0)
    case_pooling(save, mr, "nw_batch_lens", 3, 4, 6, 2.3, valid_lens=[6, 2, 0])
    case_pooling(save, mr, "nw_query_causal", 2, 3, 5, -1.3, valid_lens=[1, 5, 3, 0, 4, 2],
                 per_query=True, causal=True)
    case_pooling(save, mr, "nw_d2l_shape", 50, 1, 49, 0.4)
    case_d2l(save)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_nw_reference.py OUTDIR")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import make_reference
    make_reference.OUT = sys.argv[1]
    os.makedirs(sys.argv[1], exist_ok=True)
    torch.set_num_threads(1)
    write_all(make_reference.save)


if __name__ == "__main__":
    main()
