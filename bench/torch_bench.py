# SPDX-License-Identifier: MIT
"""The PyTorch side of qkv's benchmarks: the same computations as `qkv bench`, printing the
same JSON fields.

    /usr/bin/python3 bench/torch_bench.py train --d-model 512 --heads 8 --layers 6 ...
    /usr/bin/python3 bench/torch_bench.py decode|attention|sgemm ...
    /usr/bin/python3 bench/torch_bench.py attention --kind linear --causal --n 4096 ...
    /usr/bin/python3 bench/torch_bench.py generate --kind softmax --position 10000 ...

train:     nn.Transformer + embeddings (scaled by sqrt(d)) + sinusoidal positions + generator,
           cross-entropy, Adam; one step = forward, backward, clip_grad_norm_, Adam.
decode:    greedy decoding as PyTorch's translation tutorial does it: nn.Transformer has no
           KV cache, so every step runs the decoder over the whole prefix.
attention: forward + backward with autograd, B x H heads, length N, in plain PyTorch (1.13 has
           no fused CPU attention):
             --kind softmax  softmax(Q K^T / sqrt(d)) V, materialised as MultiheadAttention's
                             core does it; --causal masks with masked_fill(-inf);
             --kind linear   phi(Q) (phi(K)^T V) / (phi(Q) . sum phi(K) + eps), phi = elu + 1
                             (Katharopoulos et al. 2020); --causal is the cumulative-sum form,
                             which materialises the prefix sums, N x d x v per head.
           --check FILE recomputes a qkv dump (qkv bench attention --dump) in float64 and
           prints the normalised error of O, dQ, dK, dV instead of timing.
generate:  one token of a decoder-only LM at --position, as qkv bench generate: a KV cache
           (softmax, preallocated (layers, H, T, d) as Hugging Face lays it out) or the
           recurrent state S, z (linear); the prefix goes in by a prefill in chunks of 1024
           queries, then --warmup steps, then --steps timed steps.
Memory: rss_delta_mb is the peak resident memory minus the resident memory before the first
tensor (after import and a small matmul), as qkv bench reports it.
"""
import argparse
import json
import math
import os
import resource
import statistics
import struct
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def timed(fn, steps, warmup):
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(steps):
        t0 = time.perf_counter()
        fn()
        out.append(1e3 * (time.perf_counter() - t0))
    return statistics.median(out)


def peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def rss_mb():
    """Resident memory now (Linux; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2.0 ** 20
    except OSError:
        return 0.0


def warm_runtime_rss_mb():
    """Starts the runtime (threads, BLAS) with a small matmul; the resident memory then is the
    baseline of rss_delta_mb, as qkv bench takes it."""
    a = torch.zeros(256, 256)
    (a @ a).sum().item()
    del a
    return rss_mb()


class Seq2Seq(nn.Module):
    def __init__(self, a):
        super().__init__()
        d = a.d_model
        self.d = d
        self.src_emb = nn.Embedding(a.vocab, d)
        self.tgt_emb = nn.Embedding(a.vocab, d)
        pos = torch.arange(1024).unsqueeze(1)
        div = torch.exp(-torch.arange(0, d, 2) * math.log(10000.0) / d)
        pe = torch.zeros(1024, d)
        pe[:, 0::2] = torch.sin(pos * div)
        pe[:, 1::2] = torch.cos(pos * div)
        self.register_buffer("pe", pe)
        self.drop = nn.Dropout(a.dropout)
        self.transformer = nn.Transformer(d, a.heads, a.layers, a.layers, a.ffn, a.dropout,
                                          batch_first=True)
        self.generator = nn.Linear(d, a.vocab)

    def embed(self, emb, x):
        return self.drop(emb(x) * math.sqrt(self.d) + self.pe[: x.shape[1]])

    def encode(self, src):
        return self.transformer.encoder(self.embed(self.src_emb, src))

    def decode(self, tgt, memory):
        mask = self.transformer.generate_square_subsequent_mask(tgt.shape[1])
        return self.generator(self.transformer.decoder(self.embed(self.tgt_emb, tgt), memory,
                                                       tgt_mask=mask))

    def forward(self, src, tgt):
        return self.decode(tgt, self.encode(src))


def forward_flops(a):
    C, F, B, Ts, Tt = a.d_model, a.ffn, a.batch, a.src_len, a.tgt_len
    Ns, Nt = B * Ts, B * Tt
    enc = 8 * Ns * C * C + 4 * B * Ts * Ts * C + 4 * Ns * C * F
    dec = (8 * Nt * C * C + 4 * B * Tt * Tt * C + 4 * Nt * C * C + 4 * Ns * C * C
           + 4 * B * Tt * Ts * C + 4 * Nt * C * F)
    return a.layers * (enc + dec) + 2 * Nt * C * a.vocab


def bench_train(a):
    model = Seq2Seq(a).train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    g = torch.Generator().manual_seed(a.seed)
    src = torch.randint(4, a.vocab, (a.batch, a.src_len), generator=g)
    tgt = torch.randint(4, a.vocab, (a.batch, a.tgt_len + 1), generator=g)
    loss_fn = nn.CrossEntropyLoss(ignore_index=1)

    def step():
        opt.zero_grad(set_to_none=True)
        logits = model(src, tgt[:, :-1])
        loss = loss_fn(logits.reshape(-1, a.vocab), tgt[:, 1:].reshape(-1))
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    ms = timed(step, a.steps, a.warmup)
    return {"bench": "train", "ms_per_step": ms, "tokens_per_s": a.batch * a.tgt_len / (ms * 1e-3),
            "gflops": 3 * forward_flops(a) / (ms * 1e6), "peak_rss_mb": peak_rss_mb(),
            "threads": torch.get_num_threads()}


@torch.no_grad()
def bench_decode(a):
    model = Seq2Seq(a).eval()
    model.generator.bias[3] = -1e9  # never <eos>: every run decodes new_tokens tokens
    g = torch.Generator().manual_seed(a.seed)
    src = torch.randint(4, a.vocab, (a.batch, a.src_len), generator=g)

    def run():
        memory = model.encode(src)
        ys = torch.full((a.batch, 1), 2, dtype=torch.long)
        for _ in range(a.new_tokens):
            nxt = model.decode(ys, memory)[:, -1].argmax(-1, keepdim=True)
            ys = torch.cat([ys, nxt], dim=1)

    ms = timed(run, a.steps, a.warmup)
    return {"bench": "decode", "ms_per_run": ms, "ms_per_token": ms / a.new_tokens,
            "tokens_per_s": a.batch * a.new_tokens / (ms * 1e-3), "peak_rss_mb": peak_rss_mb(),
            "threads": torch.get_num_threads()}


# ---- attention ----------------------------------------------------------------------------
LINEAR_EPS = 1e-6  # QKV_LINEAR_ATTENTION_EPS


def softmax_attention(q, k, v, mask=None):
    """q, k, v (B, H, N, d); mask (N, N) bool, True where a query may not look."""
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if mask is not None:
        s = s.masked_fill(mask, float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def phi(x):
    return F.elu(x) + 1


def linear_attention(q, k, v):
    """O_i = phi(Q_i) S / (phi(Q_i) . z + eps), S = phi(K)^T V (d, v), z = sum_j phi(K_j)."""
    fq, fk = phi(q), phi(k)
    S = fk.transpose(-1, -2) @ v
    z = fk.sum(-2, keepdim=True)
    return (fq @ S) / ((fq * z).sum(-1, keepdim=True) + LINEAR_EPS)


def causal_linear_attention(q, k, v):
    """S_i, z_i prefix sums over j <= i: cumsum materialises S_i for every i, (B, H, N, d, v)."""
    fq, fk = phi(q), phi(k)
    S = torch.cumsum(fk.unsqueeze(-1) * v.unsqueeze(-2), dim=-3)
    z = torch.cumsum(fk, dim=-2)
    num = torch.einsum("bhnd,bhndv->bhnv", fq, S)
    return num / ((fq * z).sum(-1, keepdim=True) + LINEAR_EPS)


def attention_fn(kind, causal, N):
    if kind == "linear":
        return causal_linear_attention if causal else linear_attention
    mask = torch.ones(N, N, dtype=torch.bool).triu_(1) if causal else None
    return lambda q, k, v: softmax_attention(q, k, v, mask)


def read_safetensors(path):
    """The float32 tensors of a safetensors file (what qkv bench attention --dump writes)."""
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        assert t["dtype"] == "F32", t
        lo, hi = t["data_offsets"]
        out[name] = np.frombuffer(data[8 + n + lo:8 + n + hi], dtype=np.float32).reshape(t["shape"])
    return out


def check_attention(a):
    """Recomputes a qkv dump in float64 and reports max |qkv - torch| / max |torch| per tensor."""
    t = read_safetensors(a.check)
    # qkv keeps heads interleaved, (B, N, H, d); here heads lead, (B, H, N, d)
    q, k, v, do = (torch.from_numpy(t[n].copy()).double().transpose(1, 2) for n in ("Q", "K", "V", "dO"))
    q, k, v = (x.requires_grad_() for x in (q, k, v))
    o = attention_fn(a.kind, a.causal, q.shape[2])(q, k, v)
    o.backward(do)
    err = {}
    for name, ref in [("O", o), ("dQ", q.grad), ("dK", k.grad), ("dV", v.grad)]:
        ref = ref.detach().transpose(1, 2)
        got = torch.from_numpy(t[name].copy()).double()
        err[name] = ((got - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item()
    return {"bench": "attention-check", "kind": a.kind, "causal": int(a.causal),
            "n": q.shape[2], "max_err": max(err.values()), "err": err}


def bench_attention(a):
    if a.check:
        return check_attention(a)
    H, d, N, B = a.heads, a.d_model // a.heads, a.n, a.batch
    rss0 = warm_runtime_rss_mb()
    fn = attention_fn(a.kind, a.causal, N)
    g = torch.Generator().manual_seed(a.seed)
    q, k, v = (torch.randn(B, H, N, d, generator=g, requires_grad=True) for _ in range(3))
    do = torch.randn(B, H, N, d, generator=g)
    fwd, bwd, tot = [], [], []
    for i in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        o = fn(q, k, v)
        t1 = time.perf_counter()
        o.backward(do)
        t2 = time.perf_counter()
        q.grad = k.grad = v.grad = None
        del o
        if i >= a.warmup:
            fwd.append(1e3 * (t1 - t0))
            bwd.append(1e3 * (t2 - t1))
            tot.append(1e3 * (t2 - t0))
    f, b, ms = statistics.median(fwd), statistics.median(bwd), statistics.median(tot)
    flops = 12.0 * B * H * N * d * (d if a.kind == "linear" else N)
    peak = peak_rss_mb()
    return {"bench": "attention", "kernel": "materialised" if a.kind == "softmax" else "linear",
            "causal": int(a.causal), "n": N, "ms": ms, "ms_forward": f, "ms_backward": b,
            "gflops": flops / (ms * 1e6), "peak_rss_mb": peak, "rss_delta_mb": peak - rss0,
            "threads": torch.get_num_threads(), "steps": a.steps}


# ---- generation -------------------------------------------------------------------------------
class TinyLM(nn.Module):
    """qkv_lm's default architecture: x = E[id] sqrt(C) + P[t]; post-norm blocks
    x = LN(x + Attention(x)), x = LN(x + FFN(x)) (ReLU); logits = x W^T + b."""

    def __init__(self, a, T):
        super().__init__()
        C, V = a.d_model, a.vocab
        self.C, self.H, self.d, self.linear = C, a.heads, C // a.heads, a.kind == "linear"
        self.emb = nn.Embedding(V, C)
        pos = torch.arange(T).unsqueeze(1)
        div = torch.exp(-torch.arange(0, C, 2) * math.log(10000.0) / C)
        pe = torch.zeros(T, C)
        pe[:, 0::2] = torch.sin(pos * div)
        pe[:, 1::2] = torch.cos(pos * div)
        self.register_buffer("pe", pe)
        self.blocks = nn.ModuleList()
        for _ in range(a.layers):
            blk = nn.Module()
            blk.wq, blk.wk, blk.wv, blk.wo = (nn.Linear(C, C) for _ in range(4))
            blk.ln1, blk.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
            blk.ff1, blk.ff2 = nn.Linear(C, a.ffn), nn.Linear(a.ffn, C)
            self.blocks.append(blk)
        self.out = nn.Linear(C, V)
        L, H, d = a.layers, self.H, self.d
        if self.linear:  # the recurrent state: S = sum phi(k) v^T (H, d, d), z = sum phi(k)
            state = {"S": (L, H, d, d), "z": (L, H, d)}
        else:  # the KV cache, (layers, H, T, d): one head's keys are contiguous
            state = {"K": (L, H, T, d), "V": (L, H, T, d)}
        for name, shape in state.items():
            self.register_buffer(name, torch.zeros(shape), persistent=False)

    def block_end(self, blk, x, ctx):
        x = blk.ln1(x + blk.wo(ctx))
        return blk.ln2(x + blk.ff2(torch.relu(blk.ff1(x))))

    def prefill(self, ids, chunk=1024):
        """Positions 0 .. n-1 at once, attention in chunks of queries (memory chunk x n)."""
        n, H, d = len(ids), self.H, self.d
        x = self.emb(ids) * math.sqrt(self.C) + self.pe[:n]
        for l, blk in enumerate(self.blocks):
            q, k, v = (w(x).view(n, H, d).transpose(0, 1) for w in (blk.wq, blk.wk, blk.wv))
            ctx = torch.empty(H, n, d, dtype=x.dtype)
            if self.linear:
                fq, fk = phi(q), phi(k)
                S, z = self.S[l].zero_(), self.z[l].zero_()
                for i in range(0, n, chunk):
                    j = min(n, i + chunk)
                    A = (fq[:, i:j] @ fk[:, i:j].transpose(1, 2)).tril_()
                    num = fq[:, i:j] @ S + A @ v[:, i:j]
                    den = (fq[:, i:j] * z.unsqueeze(1)).sum(-1, keepdim=True) + A.sum(-1, keepdim=True)
                    ctx[:, i:j] = num / (den + LINEAR_EPS)
                    S += fk[:, i:j].transpose(1, 2) @ v[:, i:j]
                    z += fk[:, i:j].sum(1)
            else:
                self.K[l, :, :n], self.V[l, :, :n] = k, v
                for i in range(0, n, chunk):
                    j = min(n, i + chunk)
                    mask = torch.ones(j - i, j, dtype=torch.bool).triu_(i + 1)
                    ctx[:, i:j] = softmax_attention(q[:, i:j], k[:, :j], v[:, :j], mask)
            x = self.block_end(blk, x, ctx.transpose(0, 1).reshape(n, self.C))
        return self.out(x[-1])

    def step(self, token, t):
        H, d = self.H, self.d
        x = self.emb.weight[token] * math.sqrt(self.C) + self.pe[t]
        for l, blk in enumerate(self.blocks):
            q, k, v = (w(x).view(H, d) for w in (blk.wq, blk.wk, blk.wv))
            if self.linear:
                fq, fk = phi(q), phi(k)
                self.S[l].addcmul_(fk.unsqueeze(-1), v.unsqueeze(-2))
                self.z[l].add_(fk)
                num = (fq.unsqueeze(1) @ self.S[l]).squeeze(1)
                ctx = num / ((fq * self.z[l]).sum(-1, keepdim=True) + LINEAR_EPS)
            else:
                self.K[l, :, t], self.V[l, :, t] = k, v
                K, V = self.K[l, :, :t + 1], self.V[l, :, :t + 1]
                p = torch.softmax((K @ q.unsqueeze(-1)).squeeze(-1) / math.sqrt(d), dim=-1)
                ctx = (p.unsqueeze(1) @ V).squeeze(1)
            x = self.block_end(blk, x, ctx.reshape(self.C))
        return self.out(x)


@torch.no_grad()
def bench_generate(a):
    P, W, S = a.position, a.warmup, a.steps
    T = max(a.max_len, P + S)
    model = TinyLM(a, T).eval()
    g = torch.Generator().manual_seed(a.seed)
    ids = torch.randint(4, a.vocab, (P + S,), generator=g)
    t0 = time.perf_counter()
    model.prefill(ids[:P - W])
    prefill_ms = 1e3 * (time.perf_counter() - t0)
    ms = []
    for i in range(-W, S):
        t = time.perf_counter()
        model.step(ids[P + i], P + i)
        if i >= 0:
            ms.append(1e3 * (time.perf_counter() - t))
    med = statistics.median(ms)
    d = a.d_model // a.heads
    state = 2 * a.layers * (P + S) * a.d_model if a.kind == "softmax" else a.layers * a.heads * (d * d + d)
    return {"bench": "generate", "attention": a.kind, "position": P, "ms_per_token": med,
            "tokens_per_s": 1e3 / med, "ms_prefill": prefill_ms, "prefill_tokens": P - W,
            "state_mb": state * 4 / 2.0 ** 20, "peak_rss_mb": peak_rss_mb(),
            "threads": torch.get_num_threads(), "layers": a.layers, "vocab": a.vocab,
            "max_len": T, "steps": S}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("what", choices=["train", "decode", "attention", "generate"])
    generate = "generate" in sys.argv[1:2]
    for name, default in [("d-model", 512), ("heads", 8), ("layers", 2 if generate else 6),
                          ("ffn", 2048), ("vocab", 256 if generate else 10000), ("batch", 32),
                          ("src-len", 32), ("tgt-len", 32), ("new-tokens", 32), ("n", 1024),
                          ("steps", 10), ("warmup", 2), ("threads", 2), ("seed", 0),
                          ("position", 100), ("max-len", 0)]:
        p.add_argument("--" + name, type=int, default=default)
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--kind", choices=["softmax", "linear"], default="softmax",
                   help="attention, generate: softmax or linear attention")
    p.add_argument("--causal", action="store_true", help="attention: causal")
    p.add_argument("--check", help="attention: check this qkv dump instead of timing")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    r = {"train": bench_train, "decode": bench_decode, "attention": bench_attention,
         "generate": bench_generate}[a.what](a)
    print(json.dumps(r))


if __name__ == "__main__":
    main()
