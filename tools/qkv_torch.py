# SPDX-License-Identifier: MIT
"""qkv's encoder-decoder Transformer in PyTorch: the same model, parameter for parameter.

    import qkv_torch
    model = qkv_torch.QKVTransformer(cfg)                  # cfg: qkv_transformer_config as a dict
    model.load_qkv_state(tensors)                          # {qkv name: array of qkv's shape}
    logits = model(src, src_valid, tgt_in)                 # (B, Tt, tgt_vocab)
    loss_sum, tokens = model.loss(src, src_valid, tgt_in, tgt_out, label_smoothing=0.1)
    tensors = model.qkv_state()                            # back to qkv's names and shapes

The configuration has the keys of qkv_transformer_config (include/qkv.h): src_vocab, tgt_vocab,
d_model, heads, ffn, enc_layers, dec_layers, max_len, dropout, bias, pre_norm, final_norm,
act ('relu' | 'gelu' | 'silu'), tie ('none' | 'output' | 'all'), learned_pos, ln_eps, and
Marian's options pos_layout ('interleaved' | 'sin_cos'), scale_embedding, decoder_start (the id
of the first decoder input, 2 <bos> or 1 <pad>), suppress_pad (decoding only). Missing keys
take the values of qkv_transformer_default_config().

What the model computes (src/models/encoder_decoder.c), C = d_model, H = heads, p = C / H:
  embedding   X = dropout(E[ids] * s + P[:T]), s = sqrt(C) (1 without scale_embedding), P the
              sinusoidal table (interleaved or [sin | cos]) or learned positions
  sublayer    post-norm: LayerNorm(x + dropout(f(x)))      pre-norm: x + dropout(f(LayerNorm(x)))
  encoder     per block: self-attention over the source (keys j < src_valid[b]), then the FFN;
              an optional final LayerNorm ("encoder.norm", final_norm and enc_layers > 0)
  decoder     per block: causal self-attention (query i sees keys j <= i; the target has no
              valid lengths), attention over the encoder output (keys j < src_valid[b]), FFN;
              an optional final LayerNorm ("decoder.norm")
  output      logits = Y W^T + b, W = output.W, or the target embedding when tied
  attention   q = x W_q^T + b_q (B, n, C) and likewise k, v; head h is columns h*p..h*p+p-1;
              O = softmax(q_h k_h^T / sqrt(p)) v_h with masked weights exactly 0 (a row with no
              visible key is all zeros), dropout on the weights; y = concat(O_h) W_o^T + b_o.
              Attention biases exist only when bias = 1.
  FFN         act(x W1^T + b1) W2^T + b2, always with biases; act is ReLU, the exact GELU or SiLU
  loss        cross-entropy over the tokens whose label is not <pad> (id 1), with optional
              label smoothing as torch.nn.CrossEntropyLoss

Parameters live under qkv's names ("encoder.0.attention.W_q", "decoder.1.norm3.beta",
"output.b", ...) with qkv's shapes, registered in qkv's order, so named_parameters() is qkv's
tensor table (qkv_transformer_tensor) and state_dict() can be written as a qkv checkpoint.

Dropout here draws from torch's generator: with dropout > 0 in training mode the masks are not
qkv's (whose counter-based streams are ported in tests/parity/make_reference.py), only their
distribution is; every other quantity is the same function of the same parameters.
"""
import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

PAD, BOS, EOS = 1, 2, 3

DEFAULT_CONFIG = {
    "src_vocab": 0, "tgt_vocab": 0, "d_model": 32, "heads": 4, "ffn": 64, "enc_layers": 2,
    "dec_layers": 2, "max_len": 1000, "dropout": 0.1, "bias": 0, "pre_norm": 0, "final_norm": 0,
    "act": "relu", "tie": "none", "learned_pos": 0, "ln_eps": 1e-5,
    "pos_layout": "interleaved", "scale_embedding": 1, "decoder_start": BOS, "suppress_pad": 0,
}

_ACTS = {0: "relu", 1: "gelu", 2: "silu", "relu": "relu", "gelu": "gelu", "silu": "silu"}
_LAYOUTS = {0: "interleaved", 1: "sin_cos", "interleaved": "interleaved", "sin_cos": "sin_cos"}
_TIES = {0: "none", 1: "output", 2: "all", "none": "none", "output": "output", "all": "all"}


def make_config(cfg=None, **overrides):
    """A complete, normalised configuration: defaults, then cfg, then overrides. act and tie
    may also be given as qkv's enum values (0/1 and 0/1/2)."""
    c = dict(DEFAULT_CONFIG)
    c.update(cfg or {})
    c.update(overrides)
    unknown = set(c) - set(DEFAULT_CONFIG)
    if unknown:
        raise ValueError(f"unknown configuration keys: {sorted(unknown)}")
    c["act"], c["tie"] = _ACTS[c["act"]], _TIES[c["tie"]]
    c["pos_layout"] = _LAYOUTS[c["pos_layout"]]
    for k in DEFAULT_CONFIG:
        if k not in ("act", "tie", "dropout", "ln_eps", "pos_layout"):
            c[k] = int(c[k])
    c["dropout"], c["ln_eps"] = float(c["dropout"]), float(c["ln_eps"])
    if c["src_vocab"] < 4 or c["tgt_vocab"] < 4:
        raise ValueError("vocabulary sizes must be at least 4 (the reserved tokens)")
    if c["d_model"] % c["heads"]:
        raise ValueError(f"d_model ({c['d_model']}) must be a multiple of heads ({c['heads']})")
    if c["tie"] == "all" and c["src_vocab"] != c["tgt_vocab"]:
        raise ValueError("tie 'all' needs one shared vocabulary")
    return c


def qkv_tensor_table(cfg):
    """[(name, shape)] of every parameter in qkv's order (the walk() of
    src/models/transformer.c)."""
    c = make_config(cfg)
    C, Fh, Vs, Vt = c["d_model"], c["ffn"], c["src_vocab"], c["tgt_vocab"]
    t = []

    def mha(prefix):
        for w in "qkvo":
            t.append((f"{prefix}.W_{w}", (C, C)))
            if c["bias"]:
                t.append((f"{prefix}.b_{w}", (C,)))

    def norm(prefix):
        t.extend([(f"{prefix}.gamma", (C,)), (f"{prefix}.beta", (C,))])

    def ffn(prefix):
        t.extend([(f"{prefix}.W1", (Fh, C)), (f"{prefix}.b1", (Fh,)), (f"{prefix}.W2", (C, Fh)),
                  (f"{prefix}.b2", (C,))])

    if c["tie"] == "all":
        t.append(("embedding", (Vs, C)))
    else:
        t.extend([("src_embedding", (Vs, C)), ("tgt_embedding", (Vt, C))])
    if c["learned_pos"]:
        t.extend([("src_positions", (c["max_len"], C)), ("tgt_positions", (c["max_len"], C))])
    for l in range(c["enc_layers"]):
        mha(f"encoder.{l}.attention"), norm(f"encoder.{l}.norm1")
        ffn(f"encoder.{l}.ffn"), norm(f"encoder.{l}.norm2")
    if c["final_norm"] and c["enc_layers"]:
        norm("encoder.norm")
    for l in range(c["dec_layers"]):
        mha(f"decoder.{l}.self_attention"), norm(f"decoder.{l}.norm1")
        mha(f"decoder.{l}.cross_attention"), norm(f"decoder.{l}.norm2")
        ffn(f"decoder.{l}.ffn"), norm(f"decoder.{l}.norm3")
    if c["final_norm"]:
        norm("decoder.norm")
    if c["tie"] == "none":
        t.append(("output.W", (Vt, C)))
    t.append(("output.b", (Vt,)))
    return t


def sinusoidal_table(T, C, layout="interleaved"):
    """P (T, C): P[i, 2j] = sin(i / 10000^(2j/C)), P[i, 2j+1] = cos(same), computed in float64
    and rounded to float32, as qkv_sinusoidal_table; layout 'sin_cos': the same frequencies as
    [sin | cos] halves (qkv_sinusoidal_table_halves, Marian's layout)."""
    if layout == "sin_cos":
        S = (C + 1) // 2
        pos = np.arange(T, dtype=np.float64)[:, None]
        angle = pos / np.power(10000.0, 2.0 * np.arange(S, dtype=np.float64) / C)
        P = np.concatenate([np.sin(angle), np.cos(angle[:, :C - S])], axis=1)
        return torch.from_numpy(P.astype(np.float32))
    pos = np.arange(T, dtype=np.float64)[:, None]
    two_j = (np.arange(C) & ~1).astype(np.float64)
    angle = pos / np.power(10000.0, two_j / C)
    P = np.where(np.arange(C) % 2 == 0, np.sin(angle), np.cos(angle))
    return torch.from_numpy(P.astype(np.float32))


def masked_softmax(S, visible):
    """softmax(S) over the last axis where visible (broadcastable bool) is True; masked weights
    are exactly 0 and a row with no visible key is all zeros (never NaN). Masked scores are
    replaced before exp, so autograd never multiplies 0 by inf."""
    visible = visible.expand_as(S)
    S = torch.where(visible, S, torch.full_like(S, -math.inf))
    row_max = S.amax(-1, keepdim=True).detach()
    row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))
    E = torch.where(visible, torch.exp(torch.where(visible, S - row_max, torch.zeros_like(S))),
                    torch.zeros_like(S))
    Z = E.sum(-1, keepdim=True)
    return E / torch.where(Z > 0, Z, torch.ones_like(Z))


def key_mask(B, n, m, valid_lens=None, causal=False):
    """(B, n, m) bool, True where query i of sequence b may see key j: j < valid_lens[b] and,
    when causal, j <= i + (m - n)."""
    j = torch.arange(m).view(1, 1, m)
    vis = torch.ones(B, n, m, dtype=torch.bool)
    if valid_lens is not None:
        vis = vis & (j < torch.as_tensor(valid_lens).view(B, 1, 1))
    if causal:
        vis = vis & (j <= torch.arange(n).view(1, n, 1) + (m - n))
    return vis


class LayerNorm(nn.Module):
    """y = (x - mean) / sqrt(var + eps) * gamma + beta over the last axis (biased variance)."""

    def __init__(self, C, eps):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(C))
        self.beta = nn.Parameter(torch.zeros(C))
        self.eps = eps

    def forward(self, x):
        return F.layer_norm(x, (x.shape[-1],), self.gamma, self.beta, self.eps)


class MultiHeadAttention(nn.Module):
    """Concat(head_1..head_H) W_o^T + b_o, head_h = Attention(x_q W_q^T + b_q, ...) restricted
    to columns h*p..h*p+p-1 of the projections; W_* (C, C) as (out, in), like nn.Linear."""

    def __init__(self, C, H, bias):
        super().__init__()
        self.H = H
        for w in "qkvo":
            self.register_parameter(f"W_{w}", nn.Parameter(torch.empty(C, C)))
            self.register_parameter(f"b_{w}", nn.Parameter(torch.zeros(C)) if bias else None)

    def forward(self, xq, xkv, visible, p_drop):
        """xq (B, n, C) attends to xkv (B, m, C) where visible (B, n, m) -> (B, n, C)."""
        B, n, C = xq.shape
        m, H = xkv.shape[1], self.H
        hp = C // H
        q = F.linear(xq, self.W_q, self.b_q).view(B, n, H, hp).transpose(1, 2)  # (B, H, n, p)
        k = F.linear(xkv, self.W_k, self.b_k).view(B, m, H, hp).transpose(1, 2)  # (B, H, m, p)
        v = F.linear(xkv, self.W_v, self.b_v).view(B, m, H, hp).transpose(1, 2)  # (B, H, m, p)
        S = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(hp)                  # (B, H, n, m)
        P = masked_softmax(S, visible.unsqueeze(1))
        self.weights = P.detach()  # for inspection, as qkv_mha_cache.P
        ctx = torch.matmul(F.dropout(P, p_drop, self.training), v)               # (B, H, n, p)
        return F.linear(ctx.transpose(1, 2).reshape(B, n, C), self.W_o, self.b_o)


class FeedForward(nn.Module):
    """act(x W1^T + b1) W2^T + b2."""

    def __init__(self, C, Fh, act):
        super().__init__()
        self.W1 = nn.Parameter(torch.empty(Fh, C))
        self.b1 = nn.Parameter(torch.zeros(Fh))
        self.W2 = nn.Parameter(torch.empty(C, Fh))
        self.b2 = nn.Parameter(torch.zeros(C))
        # F.gelu: the exact erf form
        self.act = {"relu": F.relu, "gelu": F.gelu, "silu": F.silu}[act]

    def forward(self, x):
        return F.linear(self.act(F.linear(x, self.W1, self.b1)), self.W2, self.b2)


class _Block(nn.Module):
    def sublayer(self, x, norm, f):
        """post-norm: LayerNorm(x + dropout(f(x)));  pre-norm: x + dropout(f(LayerNorm(x)))."""
        if self.pre_norm:
            return x + F.dropout(f(norm(x)), self.p, self.training)
        return norm(x + F.dropout(f(x), self.p, self.training))


class EncoderBlock(_Block):
    def __init__(self, c):
        super().__init__()
        C, self.pre_norm, self.p = c["d_model"], c["pre_norm"], c["dropout"]
        self.attention = MultiHeadAttention(C, c["heads"], c["bias"])
        self.norm1 = LayerNorm(C, c["ln_eps"])
        self.ffn = FeedForward(C, c["ffn"], c["act"])
        self.norm2 = LayerNorm(C, c["ln_eps"])

    def forward(self, x, src_visible):
        x = self.sublayer(x, self.norm1, lambda u: self.attention(u, u, src_visible, self.p))
        return self.sublayer(x, self.norm2, self.ffn)


class DecoderBlock(_Block):
    def __init__(self, c):
        super().__init__()
        C, self.pre_norm, self.p = c["d_model"], c["pre_norm"], c["dropout"]
        self.self_attention = MultiHeadAttention(C, c["heads"], c["bias"])
        self.norm1 = LayerNorm(C, c["ln_eps"])
        self.cross_attention = MultiHeadAttention(C, c["heads"], c["bias"])
        self.norm2 = LayerNorm(C, c["ln_eps"])
        self.ffn = FeedForward(C, c["ffn"], c["act"])
        self.norm3 = LayerNorm(C, c["ln_eps"])

    def forward(self, y, memory, causal_visible, cross_visible):
        y = self.sublayer(y, self.norm1,
                          lambda u: self.self_attention(u, u, causal_visible, self.p))
        y = self.sublayer(y, self.norm2,
                          lambda u: self.cross_attention(u, memory, cross_visible, self.p))
        return self.sublayer(y, self.norm3, self.ffn)


class Stack(nn.Module):
    """Blocks registered as "0", "1", ... and an optional final LayerNorm "norm", so that the
    parameter names read "encoder.0.attention.W_q" and "encoder.norm.gamma"."""

    def __init__(self, blocks, norm):
        super().__init__()
        self.n = len(blocks)
        for i, b in enumerate(blocks):
            self.add_module(str(i), b)
        self.norm = norm

    def blocks(self):
        return [getattr(self, str(i)) for i in range(self.n)]


class Output(nn.Module):
    """logits = y W^T + b; W is the target embedding when tied (then this holds only b)."""

    def __init__(self, C, V, tied):
        super().__init__()
        self.W = None if tied else nn.Parameter(torch.empty(V, C))
        self.b = nn.Parameter(torch.zeros(V))


class QKVTransformer(nn.Module):
    """qkv's encoder-decoder Transformer; see the module docstring for the exact semantics."""

    def __init__(self, cfg):
        super().__init__()
        c = self.cfg = make_config(cfg)
        C, Vs, Vt = c["d_model"], c["src_vocab"], c["tgt_vocab"]
        # registered in qkv's order: named_parameters() is qkv's tensor table
        if c["tie"] == "all":
            self.embedding = nn.Parameter(torch.empty(Vs, C))
        else:
            self.src_embedding = nn.Parameter(torch.empty(Vs, C))
            self.tgt_embedding = nn.Parameter(torch.empty(Vt, C))
        if c["learned_pos"]:
            self.src_positions = nn.Parameter(torch.empty(c["max_len"], C))
            self.tgt_positions = nn.Parameter(torch.empty(c["max_len"], C))
        else:
            self.register_buffer("positions", sinusoidal_table(c["max_len"], C, c["pos_layout"]),
                                 persistent=False)
        final = c["final_norm"]
        self.encoder = Stack([EncoderBlock(c) for _ in range(c["enc_layers"])],
                             LayerNorm(C, c["ln_eps"]) if final and c["enc_layers"] else None)
        self.decoder = Stack([DecoderBlock(c) for _ in range(c["dec_layers"])],
                             LayerNorm(C, c["ln_eps"]) if final else None)
        self.output = Output(C, Vt, c["tie"] != "none")
        table = [(n, tuple(p.shape)) for n, p in self.named_parameters()]
        assert table == qkv_tensor_table(c), "parameter registration out of qkv's order"
        self.reset_parameters()

    # ---- parameters ------------------------------------------------------------------------

    def src_E(self):
        return self.embedding if self.cfg["tie"] == "all" else self.src_embedding

    def tgt_E(self):
        return self.embedding if self.cfg["tie"] == "all" else self.tgt_embedding

    def out_W(self):
        return self.tgt_E() if self.cfg["tie"] != "none" else self.output.W

    def reset_parameters(self, generator=None):
        """qkv's scheme (qkv_transformer_create) from torch's generator: Xavier-uniform
        matrices, N(0, 1) embeddings and positions (N(0, 1/C) for an embedding tied to the
        output), zero biases and LayerNorm shifts, unit LayerNorm gains."""
        C = self.cfg["d_model"]
        with torch.no_grad():
            for name, p in self.named_parameters():
                if "embedding" in name:
                    std = C ** -0.5 if self.cfg["tie"] != "none" else 1.0
                    p.normal_(0.0, std, generator=generator)
                elif "positions" in name:
                    p.normal_(0.0, 1.0, generator=generator)
                elif name.endswith("gamma"):
                    p.fill_(1.0)
                elif p.dim() == 2:
                    a = math.sqrt(6.0 / (p.shape[0] + p.shape[1]))
                    p.uniform_(-a, a, generator=generator)
                else:
                    p.zero_()

    def qkv_state(self):
        """{qkv name: float32 numpy array of qkv's shape}, in qkv's order."""
        return {n: p.detach().cpu().numpy().astype(np.float32).copy()
                for n, p in self.named_parameters()}

    def load_qkv_state(self, tensors):
        """Copy every parameter from {qkv name: array-like}; the names must be exactly qkv's
        tensor table for this configuration and every shape must match."""
        params = dict(self.named_parameters())
        missing = [n for n in params if n not in tensors]
        extra = [n for n in tensors if n not in params]
        if missing or extra:
            raise KeyError(f"state does not match the configuration: missing {missing}, "
                           f"unexpected {extra}")
        with torch.no_grad():
            for n, p in params.items():
                t = torch.as_tensor(np.asarray(tensors[n], dtype=np.float32))
                if tuple(t.shape) != tuple(p.shape):
                    raise ValueError(f"tensor '{n}': shape {tuple(t.shape)}, the model needs "
                                     f"{tuple(p.shape)}")
                p.copy_(t)

    # ---- forward ---------------------------------------------------------------------------

    def embed(self, ids, E, positions):
        """dropout(E[ids] * sqrt(C) + P[:T]) (paper, sections 3.4 and 3.5); no scale without
        scale_embedding."""
        T = ids.shape[1]
        s = math.sqrt(self.cfg["d_model"]) if self.cfg.get("scale_embedding", 1) else 1.0
        x = F.embedding(ids.long(), E) * s + positions[:T]
        return F.dropout(x, self.cfg["dropout"], self.training)

    def encode(self, src, src_valid):
        """src (B, Ts) ids, src_valid (B) -> the encoder output (B, Ts, C)."""
        B, Ts = src.shape
        pos = self.src_positions if self.cfg["learned_pos"] else self.positions
        x = self.embed(src, self.src_E(), pos)
        visible = key_mask(B, Ts, Ts, src_valid)
        for block in self.encoder.blocks():
            x = block(x, visible)
        return self.encoder.norm(x) if self.encoder.norm is not None else x

    def decode(self, tgt_in, memory, src_valid):
        """tgt_in (B, Tt) ids, memory (B, Ts, C) -> logits (B, Tt, tgt_vocab)."""
        B, Tt = tgt_in.shape
        Ts = memory.shape[1]
        pos = self.tgt_positions if self.cfg["learned_pos"] else self.positions
        y = self.embed(tgt_in, self.tgt_E(), pos)
        causal = key_mask(B, Tt, Tt, causal=True)
        cross = key_mask(B, Tt, Ts, src_valid)
        for block in self.decoder.blocks():
            y = block(y, memory, causal, cross)
        if self.decoder.norm is not None:
            y = self.decoder.norm(y)
        return F.linear(y, self.out_W(), self.output.b)

    def forward(self, src, src_valid, tgt_in):
        """Teacher-forced logits (B, Tt, tgt_vocab), as qkv_transformer_logits (in eval mode)."""
        src, tgt_in = torch.as_tensor(src), torch.as_tensor(tgt_in)
        src_valid = torch.as_tensor(src_valid).long()
        return self.decode(tgt_in, self.encode(src, src_valid), src_valid)

    def loss(self, src, src_valid, tgt_in, tgt_out, label_smoothing=0.0):
        """(sum of the cross-entropy of every token whose label is not <pad>, their count), as
        qkv_transformer_loss's *loss_sum and *tokens; sum / count is the per-token mean."""
        logits = self(src, src_valid, tgt_in)
        labels = torch.as_tensor(tgt_out).long().reshape(-1)
        total = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels, ignore_index=PAD,
                                label_smoothing=label_smoothing, reduction="sum")
        return total, int((labels != PAD).sum())


# ---- the decoder-only language model (src/models/language_model.c) -------------------------
#
#   model = qkv_torch.QKVLanguageModel(cfg)     # cfg: qkv_lm_config as a dict
#   logits = model(ids)                         # ids (B, T) -> (B, T, vocab), causal
#   loss_sum, tokens = model.loss(ids, targets) # targets equal to <pad> are not counted
#
# The configuration has the keys of qkv_lm_config: vocab, d_model, heads, ffn, layers, max_len,
# dropout, bias, pre_norm, final_norm, act ('relu' | 'gelu'), tie (0/1: output = embedding),
# learned_pos, attention ('softmax' | 'linear'), ln_eps; missing keys take
# qkv_lm_default_config()'s values. The model is the encoder-decoder's decoder without
# cross-attention: X = dropout(E[ids] sqrt(C) + P), per block causal self-attention then the
# FFN, each a post- or pre-norm residual sublayer as above, an optional final LayerNorm
# ("decoder.norm"), logits = Y W^T + b. Linear attention (Katharopoulos et al. 2020) has the
# same four projections; head h computes O_i = sum_{j<=i} M_ij v_j / (sum_{j<=i} M_ij + eps),
# M_ij = phi(q_i) . phi(k_j), phi = elu + 1, written here in its quadratic form, so it shares
# nothing with qkv's prefix-sum scan but the formula.

LM_DEFAULT_CONFIG = {
    "vocab": 0, "d_model": 128, "heads": 4, "ffn": 512, "layers": 4, "max_len": 128,
    "dropout": 0.1, "bias": 1, "pre_norm": 0, "final_norm": 0, "act": "relu", "tie": 0,
    "learned_pos": 0, "attention": "softmax", "ln_eps": 1e-5,
}

_ATTENTIONS = {0: "softmax", 1: "linear", "softmax": "softmax", "linear": "linear"}
LINEAR_ATTENTION_EPS = float(np.float32(1e-6))  # QKV_LINEAR_ATTENTION_EPS


def make_lm_config(cfg=None, **overrides):
    """A complete, normalised qkv_lm_config: defaults, then cfg, then overrides. act and
    attention may also be given as qkv's enum values."""
    c = dict(LM_DEFAULT_CONFIG)
    c.update(cfg or {})
    c.update(overrides)
    unknown = set(c) - set(LM_DEFAULT_CONFIG)
    if unknown:
        raise ValueError(f"unknown configuration keys: {sorted(unknown)}")
    c["act"], c["attention"] = _ACTS[c["act"]], _ATTENTIONS[c["attention"]]
    for k in LM_DEFAULT_CONFIG:
        if k not in ("act", "attention", "dropout", "ln_eps"):
            c[k] = int(c[k])
    c["dropout"], c["ln_eps"] = float(c["dropout"]), float(c["ln_eps"])
    if c["vocab"] < 4:
        raise ValueError("the vocabulary must hold at least the 4 reserved tokens")
    if c["d_model"] % c["heads"]:
        raise ValueError(f"d_model ({c['d_model']}) must be a multiple of heads ({c['heads']})")
    return c


def qkv_lm_tensor_table(cfg):
    """[(name, shape)] of every parameter in qkv's order (the walk() of
    src/models/language_model.c)."""
    c = make_lm_config(cfg)
    C, Fh, V = c["d_model"], c["ffn"], c["vocab"]
    t = [("embedding", (V, C))]
    if c["learned_pos"]:
        t.append(("positions", (c["max_len"], C)))
    for l in range(c["layers"]):
        for w in "qkvo":
            t.append((f"decoder.{l}.attention.W_{w}", (C, C)))
            if c["bias"]:
                t.append((f"decoder.{l}.attention.b_{w}", (C,)))
        t.extend([(f"decoder.{l}.norm1.gamma", (C,)), (f"decoder.{l}.norm1.beta", (C,)),
                  (f"decoder.{l}.ffn.W1", (Fh, C)), (f"decoder.{l}.ffn.b1", (Fh,)),
                  (f"decoder.{l}.ffn.W2", (C, Fh)), (f"decoder.{l}.ffn.b2", (C,)),
                  (f"decoder.{l}.norm2.gamma", (C,)), (f"decoder.{l}.norm2.beta", (C,))])
    if c["final_norm"]:
        t.extend([("decoder.norm.gamma", (C,)), ("decoder.norm.beta", (C,))])
    if not c["tie"]:
        t.append(("output.W", (V, C)))
    t.append(("output.b", (V,)))
    return t


class LinearMultiHeadAttention(MultiHeadAttention):
    """MultiHeadAttention's projections around linear attention instead of softmax: head h is
    O = (M v_h) / (M 1 + eps), M = (phi(q_h) phi(k_h)^T) masked to the visible keys. There are
    no attention weights to drop out."""

    def forward(self, xq, xkv, visible, p_drop):
        B, n, C = xq.shape
        m, H = xkv.shape[1], self.H
        hp = C // H
        phi = lambda x: F.elu(x) + 1.0  # noqa: E731
        q = F.linear(xq, self.W_q, self.b_q).view(B, n, H, hp).transpose(1, 2)   # (B, H, n, p)
        k = F.linear(xkv, self.W_k, self.b_k).view(B, m, H, hp).transpose(1, 2)  # (B, H, m, p)
        v = F.linear(xkv, self.W_v, self.b_v).view(B, m, H, hp).transpose(1, 2)  # (B, H, m, p)
        M = torch.matmul(phi(q), phi(k).transpose(-1, -2))                        # (B, H, n, m)
        M = M * visible.unsqueeze(1).to(M.dtype)
        ctx = torch.matmul(M, v) / (M.sum(-1, keepdim=True) + LINEAR_ATTENTION_EPS)
        return F.linear(ctx.transpose(1, 2).reshape(B, n, C), self.W_o, self.b_o)


class LMBlock(EncoderBlock):
    """An encoder block (attention, norm1, ffn, norm2) run under a causal mask, with softmax or
    linear attention."""

    def __init__(self, c):
        super().__init__(c)
        if c["attention"] == "linear":
            self.attention = LinearMultiHeadAttention(C=c["d_model"], H=c["heads"],
                                                      bias=c["bias"])


class QKVLanguageModel(nn.Module):
    """qkv's decoder-only language model; see the comment above for the exact semantics."""

    def __init__(self, cfg):
        super().__init__()
        c = self.cfg = make_lm_config(cfg)
        C, V = c["d_model"], c["vocab"]
        # registered in qkv's order: named_parameters() is qkv's tensor table
        self.embedding = nn.Parameter(torch.empty(V, C))
        if c["learned_pos"]:
            self.positions = nn.Parameter(torch.empty(c["max_len"], C))
        else:
            self.register_buffer("positions", sinusoidal_table(c["max_len"], C),
                                 persistent=False)
        self.decoder = Stack([LMBlock(c) for _ in range(c["layers"])],
                             LayerNorm(C, c["ln_eps"]) if c["final_norm"] else None)
        self.output = Output(C, V, bool(c["tie"]))
        table = [(n, tuple(p.shape)) for n, p in self.named_parameters()]
        assert table == qkv_lm_tensor_table(c), "parameter registration out of qkv's order"
        self.reset_parameters()

    def out_W(self):
        return self.embedding if self.cfg["tie"] else self.output.W

    def reset_parameters(self, generator=None):
        """qkv_lm_create's scheme from torch's generator: Xavier-uniform matrices, N(0, 1)
        embedding and positions (N(0, 1/C) for an embedding tied to the output), zero biases
        and LayerNorm shifts, unit LayerNorm gains."""
        C = self.cfg["d_model"]
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name in ("embedding", "positions"):
                    tied = name == "embedding" and self.cfg["tie"]
                    p.normal_(0.0, C ** -0.5 if tied else 1.0, generator=generator)
                elif name.endswith("gamma"):
                    p.fill_(1.0)
                elif p.dim() == 2:
                    a = math.sqrt(6.0 / (p.shape[0] + p.shape[1]))
                    p.uniform_(-a, a, generator=generator)
                else:
                    p.zero_()

    qkv_state = QKVTransformer.qkv_state
    load_qkv_state = QKVTransformer.load_qkv_state
    embed = QKVTransformer.embed

    def forward(self, ids):
        """ids (B, T) -> logits (B, T, vocab) of the causal forward pass, as qkv_lm_logits
        (in eval mode)."""
        ids = torch.as_tensor(ids)
        B, T = ids.shape
        x = self.embed(ids, self.embedding, self.positions)
        visible = key_mask(B, T, T, causal=True)
        for block in self.decoder.blocks():
            x = block(x, visible)
        if self.decoder.norm is not None:
            x = self.decoder.norm(x)
        return F.linear(x, self.out_W(), self.output.b)

    def loss(self, ids, targets):
        """(sum of the cross-entropy of every position whose target is not <pad>, their count),
        as qkv_lm_loss's *loss_sum and *tokens."""
        logits = self(ids)
        labels = torch.as_tensor(targets).long().reshape(-1)
        total = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels, ignore_index=PAD,
                                reduction="sum")
        return total, int((labels != PAD).sum())
