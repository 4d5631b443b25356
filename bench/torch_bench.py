"""The PyTorch side of qkv's benchmarks: the same computations as `qkv bench`, printing the
same JSON fields.

    /usr/bin/python3 bench/torch_bench.py train --d-model 512 --heads 8 --layers 6 ...
    /usr/bin/python3 bench/torch_bench.py decode|attention|sgemm ...

train:     nn.Transformer + embeddings (scaled by sqrt(d)) + sinusoidal positions + generator,
           cross-entropy, Adam; one step = forward, backward, clip_grad_norm_, Adam.
decode:    greedy decoding as PyTorch's translation tutorial does it: nn.Transformer has no
           KV cache, so every step runs the decoder over the whole prefix.
attention: softmax(Q K^T / sqrt(d)) V forward + backward, B x H heads, length N.
"""
import argparse
import json
import math
import resource
import statistics
import time

import torch
import torch.nn as nn


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


def bench_attention(a):
    H, d, N, B = a.heads, a.d_model // a.heads, a.n, a.batch
    g = torch.Generator().manual_seed(a.seed)
    q, k, v = (torch.randn(B, H, N, d, generator=g, requires_grad=True) for _ in range(3))
    do = torch.randn(B, H, N, d, generator=g)
    fwd, bwd = [], []
    for i in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        o = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d), dim=-1) @ v
        t1 = time.perf_counter()
        o.backward(do)
        t2 = time.perf_counter()
        q.grad = k.grad = v.grad = None
        if i >= a.warmup:
            fwd.append(1e3 * (t1 - t0))
            bwd.append(1e3 * (t2 - t1))
    f, b = statistics.median(fwd), statistics.median(bwd)
    return {"bench": "attention", "n": N, "ms_forward": f, "ms_backward": b,
            "gflops": 12.0 * B * H * N * N * d / ((f + b) * 1e6), "peak_rss_mb": peak_rss_mb(),
            "threads": torch.get_num_threads()}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("what", choices=["train", "decode", "attention"])
    for name, default in [("d-model", 512), ("heads", 8), ("layers", 6), ("ffn", 2048),
                          ("vocab", 10000), ("batch", 32), ("src-len", 32), ("tgt-len", 32),
                          ("new-tokens", 32), ("n", 1024), ("steps", 10), ("warmup", 2),
                          ("threads", 2), ("seed", 0)]:
        p.add_argument("--" + name, type=int, default=default)
    p.add_argument("--dropout", type=float, default=0.1)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    r = {"train": bench_train, "decode": bench_decode, "attention": bench_attention}[a.what](a)
    print(json.dumps(r))


if __name__ == "__main__":
    main()
