# SPDX-License-Identifier: MIT
"""The d2l building blocks of the Transformer on numpy arrays, forward and backward, computed
by qkv's C kernels: check a NumPy or PyTorch implementation against them in a notebook.

    import numpy as np, qkv
    X = np.random.rand(2, 2, 4).astype(np.float32)
    P = qkv.ops.masked_softmax(X, np.array([2, 3]))            # d2l 11.3.1
    dX = qkv.ops.masked_softmax_backward(np.ones_like(P), P)

Arrays are float32 and C-contiguous (np.ascontiguousarray(x, np.float32) makes one); shapes
follow d2l's: queries (batch, queries, features), keys and values (batch, keys, features),
valid_lens (batch,) or (batch, queries). A wrong type, dtype or shape raises TypeError or
ValueError naming the argument. Forwards that keep activations for their backward return
(output, saved); the backward takes the output's gradient and saved, and returns fresh
gradients (the C kernels accumulate; zeros are passed to them here). Dropout is the library's
counter-based one: the same (dropout, seed) gives the same mask in forward and backward.
Each call releases the GIL.
"""
import numpy as np

from . import _qkv

__all__ = [
    "masked_softmax", "masked_softmax_backward",
    "dot_product_attention", "dot_product_attention_backward",
    "additive_attention", "additive_attention_backward",
    "multihead_attention", "multihead_attention_backward", "multihead_attention_parameters",
    "linear_attention", "linear_attention_backward",
    "positional_encoding", "add_positional_encoding", "add_positional_encoding_backward",
    "ffn", "ffn_backward", "layer_norm", "layer_norm_backward", "add_norm", "add_norm_backward",
    "Saved",
]

_ACTIVATIONS = {"relu": 0, "gelu": 1, "silu": 2}


class Saved:
    """What a forward keeps for its backward (and for looking at: attention_weights where
    the op has them)."""

    def __init__(self, **arrays):
        self.__dict__.update(arrays)

    def __repr__(self):
        shapes = ", ".join(f"{k}={v.shape}" if isinstance(v, np.ndarray) else f"{k}={v!r}"
                           for k, v in self.__dict__.items())
        return f"Saved({shapes})"


def _array(name, x, ndim=None):
    """x, checked to be a C-contiguous float32 array of ndim dimensions (one of ndim)."""
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name} must be a numpy array, not {type(x).__name__}")
    if x.dtype != np.float32:
        raise TypeError(f"{name} must be float32, got {x.dtype} (use x.astype(np.float32))")
    if not x.flags.c_contiguous:
        raise ValueError(f"{name} must be C-contiguous (use np.ascontiguousarray({name}))")
    if ndim is not None and x.ndim not in (ndim if isinstance(ndim, tuple) else (ndim,)):
        raise ValueError(f"{name} must have {' or '.join(map(str, np.atleast_1d(ndim)))} "
                         f"dimensions, got shape {x.shape}")
    if 0 in x.shape:
        raise ValueError(f"{name} has an empty dimension: shape {x.shape}")
    return x


def _expect(name, x, shape):
    if tuple(x.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)}, got {tuple(x.shape)}")


def _lens(valid_lens, B, n, per_query=True):
    """valid_lens as int32: None, (B,) or, where allowed, (B, n)."""
    if valid_lens is None:
        return None
    v = np.asarray(valid_lens)
    if not np.issubdtype(v.dtype, np.integer):
        raise TypeError(f"valid_lens must hold integers, got {v.dtype}")
    if v.shape != (B,) and not (per_query and v.shape in ((B, n), (B * n,))):
        allowed = f"({B},)" + (f" or ({B}, {n})" if per_query else "")
        raise ValueError(f"valid_lens must have shape {allowed}, got {v.shape}")
    if v.size and (v.min() < 0 or v.max() > 2**31 - 1):
        raise ValueError("valid_lens must be in [0, 2^31)")
    return np.ascontiguousarray(v.reshape(-1), dtype=np.int32)


def _rate(dropout, seed):
    dropout = float(dropout)
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {dropout}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**64:
        raise ValueError(f"seed must be an int in [0, 2^64), got {seed!r}")
    return dropout, int(seed)


# ---- masked softmax (d2l 11.3.1) --------------------------------------------------------

def masked_softmax(X, valid_lens=None, causal=False):
    """softmax over the last axis with positions past each valid length given weight 0 (a row
    that sees no key is all zeros). X: (batch, queries, keys) or (batch, heads, queries, keys);
    valid_lens: None, (batch,) or (batch, queries); causal: query i sees keys j <= i."""
    X = _array("X", X, (3, 4))
    B, H, n, m = (X.shape[0], 1, *X.shape[1:]) if X.ndim == 3 else X.shape
    P = np.empty_like(X)
    _qkv.masked_softmax_forward(P, X, B, H, n, m, _lens(valid_lens, B, n), bool(causal))
    return P


def masked_softmax_backward(dP, P):
    """The gradient of masked_softmax's input, given dP and its output P."""
    P = _array("P", P)
    dP = _array("dP", dP)
    _expect("dP", dP, P.shape)
    dX = np.zeros_like(P)
    _qkv.masked_softmax_backward(dX, dP, P, P.size // P.shape[-1], P.shape[-1])
    return dX


# ---- scaled dot-product attention (d2l 11.3.2) --------------------------------------------

def _attention_shape(Q, K, V):
    """(B, H, n, m, d, v) of Q (B, n, d) or (B, n, H, d), K, V alike."""
    Q, K, V = _array("queries", Q, (3, 4)), _array("keys", K, (3, 4)), _array("values", V, (3, 4))
    if not Q.ndim == K.ndim == V.ndim:
        raise ValueError("queries, keys and values must have the same number of dimensions")
    if Q.ndim == 3:
        (B, n, d), (_, m, _), (_, _, v), H = Q.shape, K.shape, V.shape, 1
    else:
        (B, n, H, d), (_, m, _, _), (_, _, _, v) = Q.shape, K.shape, V.shape
    _expect("keys", K, (B, m, d) if Q.ndim == 3 else (B, m, H, d))
    _expect("values", V, (B, m, v) if Q.ndim == 3 else (B, m, H, v))
    return (B, H, n, m, d, v)


def dot_product_attention(queries, keys, values, valid_lens=None, causal=False, dropout=0.0,
                          seed=0):
    """softmax(Q K^T / sqrt(d)) V with masked_softmax's mask and dropout on the weights.
    queries (batch, n, d), keys (batch, m, d), values (batch, m, v) -> (output (batch, n, v),
    attention weights (batch, n, m), before dropout). With a heads axis, (batch, n, heads, d)
    and so on: the weights are then (batch, heads, n, m)."""
    s = _attention_shape(queries, keys, values)
    B, H, n, m, d, v = s
    p, seed = _rate(dropout, seed)
    O = np.empty(queries.shape[:-1] + (v,), np.float32)
    P = np.empty((B, H, n, m) if queries.ndim == 4 else (B, n, m), np.float32)
    _qkv.attention_forward(O, P, queries, keys, values, s, _lens(valid_lens, B, n),
                           bool(causal), p, seed)
    return O, P


def dot_product_attention_backward(dO, queries, keys, values, attention_weights, dropout=0.0,
                                   seed=0):
    """The gradients (dqueries, dkeys, dvalues) of dot_product_attention given dO, its inputs
    and the weights it returned (its dropout and seed, if any)."""
    s = _attention_shape(queries, keys, values)
    B, H, n, m, d, v = s
    p, seed = _rate(dropout, seed)
    dO = _array("dO", dO)
    _expect("dO", dO, queries.shape[:-1] + (v,))
    P = _array("attention_weights", attention_weights)
    _expect("attention_weights", P, (B, H, n, m) if queries.ndim == 4 else (B, n, m))
    dQ, dK, dV = np.zeros_like(queries), np.zeros_like(keys), np.zeros_like(values)
    _qkv.attention_backward(dQ, dK, dV, dO, P, queries, keys, values, s, p, seed)
    return dQ, dK, dV


# ---- additive attention (d2l 11.3.2) ------------------------------------------------------

def additive_attention(queries, keys, values, W_q, W_k, w_v, valid_lens=None, dropout=0.0,
                       seed=0):
    """d2l's AdditiveAttention: a(q, k) = w_v^T tanh(W_q q + W_k k), masked softmax over the
    keys, then the weighted sum of the values. queries (batch, n, dq), keys (batch, m, dk),
    values (batch, m, v); W_q (h, dq), W_k (h, dk), w_v (h,) or (1, h) (nn.Linear's weights,
    no biases). Returns (output (batch, n, v), saved); saved.attention_weights (batch, n, m)."""
    Q, K, V = _array("queries", queries, 3), _array("keys", keys, 3), _array("values", values, 3)
    B, n, dq = Q.shape
    m, dk, v = K.shape[1], K.shape[2], V.shape[2]
    _expect("keys", K, (B, m, dk))
    _expect("values", V, (B, m, v))
    W_q, W_k = _array("W_q", W_q, 2), _array("W_k", W_k, 2)
    h = W_q.shape[0]
    _expect("W_q", W_q, (h, dq))
    _expect("W_k", W_k, (h, dk))
    w_v = _array("w_v", w_v, (1, 2))
    if w_v.size != h:
        raise ValueError(f"w_v must have {h} values (shape ({h},) or (1, {h})), got {w_v.shape}")
    p, seed = _rate(dropout, seed)
    shape = (B, n, m, dq, dk, v, h)
    O = np.empty((B, n, v), np.float32)
    saved = Saved(q=np.empty((B, n, h), np.float32), k=np.empty((B, m, h), np.float32),
                  features=np.empty((B, n, m, h), np.float32),
                  attention_weights=np.empty((B, n, m), np.float32), queries=Q, keys=K,
                  values=V, W_q=W_q, W_k=W_k, w_v=w_v, shape=shape, dropout=p, seed=seed)
    _qkv.additive_attention_forward(O, saved.q, saved.k, saved.features, saved.attention_weights,
                                    Q, K, V, W_q, W_k, w_v, shape, _lens(valid_lens, B, n), p,
                                    seed)
    return O, saved


def additive_attention_backward(dO, saved):
    """The gradients of additive_attention: a dict of dqueries, dkeys, dvalues, dW_q, dW_k
    and dw_v (shaped as the inputs)."""
    s = saved
    dO = _array("dO", dO)
    _expect("dO", dO, (s.shape[0], s.shape[1], s.shape[5]))
    g = {"dqueries": np.zeros_like(s.queries), "dkeys": np.zeros_like(s.keys),
         "dvalues": np.zeros_like(s.values), "dW_q": np.zeros_like(s.W_q),
         "dW_k": np.zeros_like(s.W_k), "dw_v": np.zeros_like(s.w_v)}
    _qkv.additive_attention_backward(g["dqueries"], g["dkeys"], g["dvalues"], g["dW_q"],
                                     g["dW_k"], g["dw_v"], dO, s.q, s.k, s.features,
                                     s.attention_weights, s.queries, s.keys, s.values, s.W_q,
                                     s.W_k, s.w_v, s.shape, s.dropout, s.seed)
    return g


# ---- multi-head attention (d2l 11.5) ----------------------------------------------------

_MHA_NAMES = ("W_q", "b_q", "W_k", "b_k", "W_v", "b_v", "W_o", "b_o")


def multihead_attention_parameters(num_hiddens, num_heads, query_size=None, key_size=None,
                                   bias=False, seed=0):
    """Parameters for multihead_attention, Xavier-uniform as qkv initialises them: a dict of
    W_q (num_hiddens, query_size), W_k, W_v (num_hiddens, key_size), W_o (query_size,
    num_hiddens) and, with bias, b_q, b_k, b_v (num_hiddens), b_o (query_size). query_size
    and key_size default to num_hiddens (d2l's LazyLinear sees that)."""
    if num_hiddens % num_heads:
        raise ValueError(f"num_hiddens {num_hiddens} is not a multiple of num_heads {num_heads}")
    dq = query_size or num_hiddens
    dk = key_size or num_hiddens
    rng = np.random.default_rng(seed)

    def xavier(o, i):
        a = np.sqrt(6.0 / (i + o))
        return rng.uniform(-a, a, (o, i)).astype(np.float32)

    p = {"W_q": xavier(num_hiddens, dq), "W_k": xavier(num_hiddens, dk),
         "W_v": xavier(num_hiddens, dk), "W_o": xavier(dq, num_hiddens)}
    if bias:
        p.update(b_q=np.zeros(num_hiddens, np.float32), b_k=np.zeros(num_hiddens, np.float32),
                 b_v=np.zeros(num_hiddens, np.float32), b_o=np.zeros(dq, np.float32))
    return p


def multihead_attention(queries, keys, values, params, num_heads, valid_lens=None,
                        causal=False, dropout=0.0, seed=0):
    """d2l's MultiHeadAttention: each of num_heads heads attends with its slice of the
    projections W_q, W_k, W_v (nn.Linear's (out, in) weights, as params holds them: see
    multihead_attention_parameters), the heads concatenated and projected by W_o.
    queries (batch, n, query_size), keys and values (batch, m, key_size) -> (output (batch, n,
    query_size), saved); saved.attention_weights (batch, heads, n, m)."""
    Q, K, V = _array("queries", queries, 3), _array("keys", keys, 3), _array("values", values, 3)
    B, n, dq = Q.shape
    m, dk = K.shape[1], K.shape[2]
    _expect("values", V, (B, m, dk))
    if not isinstance(params, dict):
        raise TypeError("params must be a dict of arrays (multihead_attention_parameters)")
    bias = "b_q" in params
    W_q = _array("W_q", params.get("W_q"), 2)
    hp = W_q.shape[0]
    if isinstance(num_heads, bool) or not isinstance(num_heads, int) or num_heads < 1 or hp % num_heads:
        raise ValueError(f"num_heads must be a positive divisor of {hp}, got {num_heads!r}")
    shapes = {"W_q": (hp, dq), "b_q": (hp,), "W_k": (hp, dk), "b_k": (hp,), "W_v": (hp, dk),
              "b_v": (hp,), "W_o": (dq, hp), "b_o": (dq,)}
    names = [k for k in _MHA_NAMES if bias or not k.startswith("b_")]
    for k in names:
        _expect(k, _array(k, params.get(k)), shapes[k])
    flat = np.concatenate([params[k].reshape(-1) for k in names])
    cfg = (dq, dk, num_heads, hp // num_heads, bias)
    p, seed = _rate(dropout, seed)
    hpq, hpk = B * n * hp, B * m * hp
    cache = np.empty(2 * hpq + 2 * hpk + B * num_heads * n * m, np.float32)
    y = np.empty((B, n, dq), np.float32)
    _qkv.mha_forward(y, cache, Q, K, V, flat, cfg, B, n, m, _lens(valid_lens, B, n),
                     bool(causal), p, seed)
    weights = cache[2 * hpq + 2 * hpk:].reshape(B, num_heads, n, m)
    return y, Saved(cache=cache, attention_weights=weights, queries=Q, keys=K, values=V,
                    flat=flat, names=names, shapes=shapes, cfg=cfg, dropout=p, seed=seed)


def multihead_attention_backward(dy, saved):
    """The gradients of multihead_attention: a dict of dqueries, dkeys, dvalues and d<name>
    for every parameter (dW_q, ...). For self-attention (one array as queries, keys and
    values) the input's gradient is the sum of the three."""
    s = saved
    dy = _array("dy", dy)
    _expect("dy", dy, s.queries.shape)
    B, n, _ = s.queries.shape
    m = s.keys.shape[1]
    dQ, dK, dV = np.zeros_like(s.queries), np.zeros_like(s.keys), np.zeros_like(s.values)
    dflat = np.zeros_like(s.flat)
    _qkv.mha_backward(dQ, dK, dV, dflat, dy, s.cache, s.queries, s.keys, s.values, s.flat,
                      s.cfg, B, n, m, s.dropout, s.seed)
    g = {"dqueries": dQ, "dkeys": dK, "dvalues": dV}
    at = 0
    for k in s.names:
        size = int(np.prod(s.shapes[k]))
        g["d" + k] = dflat[at:at + size].reshape(s.shapes[k])
        at += size
    return g


# ---- linear attention (Katharopoulos et al. 2020) ------------------------------------------

def linear_attention(queries, keys, values, valid_lens=None, causal=False):
    """phi(Q) (sum_j phi(K_j) V_j^T) / (phi(Q) sum_j phi(K_j)), phi = elu + 1: attention in
    time linear in the length. Shapes as dot_product_attention's; valid_lens (batch,)."""
    s = _attention_shape(queries, keys, values)
    O = np.empty(queries.shape[:-1] + (s[5],), np.float32)
    _qkv.linear_attention_forward(O, queries, keys, values, s,
                                  _lens(valid_lens, s[0], s[2], False), bool(causal))
    return O


def linear_attention_backward(dO, queries, keys, values, valid_lens=None, causal=False):
    """(dqueries, dkeys, dvalues) of linear_attention given dO and its inputs."""
    s = _attention_shape(queries, keys, values)
    dO = _array("dO", dO)
    _expect("dO", dO, queries.shape[:-1] + (s[5],))
    dQ, dK, dV = np.zeros_like(queries), np.zeros_like(keys), np.zeros_like(values)
    _qkv.linear_attention_backward(dQ, dK, dV, dO, queries, keys, values, s,
                                   _lens(valid_lens, s[0], s[2], False), bool(causal))
    return dQ, dK, dV


# ---- positional encoding (d2l 11.6.3) -----------------------------------------------------

def positional_encoding(max_len, num_hiddens, layout="interleaved"):
    """The sinusoidal table P (max_len, num_hiddens): P[i, 2j] = sin(i / 10000^(2j/d)),
    P[i, 2j+1] = cos(...) (d2l's PositionalEncoding.P); layout "halves" puts the sines in the
    first half and the cosines in the second (Marian, Hugging Face)."""
    for name, v in (("max_len", max_len), ("num_hiddens", num_hiddens)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    if layout not in ("interleaved", "halves"):
        raise ValueError(f"layout must be 'interleaved' or 'halves', got {layout!r}")
    P = np.empty((max_len, num_hiddens), np.float32)
    _qkv.sinusoidal_table(P, max_len, num_hiddens, layout == "halves")
    return P


def _positions(X, P, start):
    X = _array("X", X, 3)
    P = _array("P", P, 2)
    if P.shape[1] != X.shape[2]:
        raise ValueError(f"P has {P.shape[1]} columns, X {X.shape[2]} features")
    if isinstance(start, bool) or not isinstance(start, int) or start < 0 or \
            start + X.shape[1] > P.shape[0]:
        raise ValueError(f"positions {start}..{start + X.shape[1] - 1} are outside P's "
                         f"{P.shape[0]} rows")
    return X, P


def add_positional_encoding(X, P, scale=1.0, start=0):
    """X * scale + P[start : start + steps], d2l's PositionalEncoding without its dropout
    (scale sqrt(d_model) for token embeddings, as the Transformer's encoder). X (batch,
    steps, num_hiddens), P a table (max_len, num_hiddens)."""
    X, P = _positions(X, P, start)
    Y = np.empty_like(X)
    _qkv.positional_forward(Y, X, P, *X.shape, P.shape[0], start, float(scale))
    return Y


def add_positional_encoding_backward(dY, P, scale=1.0, start=0):
    """(dX, dP): dP is the table's gradient, for learned positions."""
    dY, P = _positions(dY, P, start)
    dX, dP = np.zeros_like(dY), np.zeros_like(P)
    _qkv.positional_backward(dX, dP, dY, *dY.shape, P.shape[0], start, float(scale))
    return dX, dP


# ---- position-wise FFN (d2l 11.7.2) ------------------------------------------------------

def ffn(X, W1, b1, W2, b2, activation="relu"):
    """d2l's PositionWiseFFN: act(X W1^T + b1) W2^T + b2 over the last axis. X (..., C),
    W1 (F, C), b1 (F,) or None, W2 (C, F), b2 (C,) or None; activation relu, gelu or silu.
    Returns (Y, saved)."""
    X = _array("X", X)
    C = X.shape[-1]
    W1, W2 = _array("W1", W1, 2), _array("W2", W2, 2)
    F = W1.shape[0]
    _expect("W1", W1, (F, C))
    _expect("W2", W2, (C, F))
    if b1 is not None:
        _expect("b1", _array("b1", b1), (F,))
    if b2 is not None:
        _expect("b2", _array("b2", b2), (C,))
    if activation not in _ACTIVATIONS:
        raise ValueError(f"activation must be relu, gelu or silu, got {activation!r}")
    N = X.size // C
    Y = np.empty_like(X)
    h_pre, h = np.empty((N, F), np.float32), np.empty((N, F), np.float32)
    _qkv.ffn_forward(Y, h_pre, h, X, W1, b1, W2, b2, N, C, F, _ACTIVATIONS[activation])
    return Y, Saved(h_pre=h_pre, h=h, X=X, W1=W1, b1=b1, W2=W2, b2=b2, activation=activation)


def ffn_backward(dY, saved):
    """The gradients of ffn: a dict of dX, dW1, db1, dW2, db2 (db1/db2 None without bias)."""
    s = saved
    dY = _array("dY", dY)
    _expect("dY", dY, s.X.shape)
    C, F = s.W2.shape
    N = s.X.size // C
    g = {"dX": np.zeros_like(s.X), "dW1": np.zeros_like(s.W1),
         "db1": None if s.b1 is None else np.zeros_like(s.b1), "dW2": np.zeros_like(s.W2),
         "db2": None if s.b2 is None else np.zeros_like(s.b2)}
    _qkv.ffn_backward(g["dX"], g["dW1"], g["db1"], g["dW2"], g["db2"], dY, s.h_pre, s.h, s.X,
                      s.W1, s.b1, s.W2, s.b2, N, C, F, _ACTIVATIONS[s.activation])
    return g


# ---- LayerNorm and AddNorm (d2l 11.7.2) ----------------------------------------------------

def _norm_args(X, gamma, beta):
    X = _array("X", X)
    C = X.shape[-1]
    _expect("gamma", _array("gamma", gamma), (C,))
    _expect("beta", _array("beta", beta), (C,))
    return X, X.size // C, C


def layer_norm(X, gamma, beta, eps=1e-5):
    """LayerNorm over the last axis (biased variance, as torch.nn.LayerNorm). Returns
    (Y, saved)."""
    X, N, C = _norm_args(X, gamma, beta)
    Y = np.empty_like(X)
    mean, rstd = np.empty(N, np.float32), np.empty(N, np.float32)
    _qkv.layernorm_forward(Y, mean, rstd, X, gamma, beta, N, C, float(eps))
    return Y, Saved(mean=mean, rstd=rstd, X=X, gamma=gamma, beta=beta)


def layer_norm_backward(dY, saved):
    """The gradients of layer_norm: a dict of dX, dgamma, dbeta."""
    s = saved
    dY = _array("dY", dY)
    _expect("dY", dY, s.X.shape)
    C = s.X.shape[-1]
    g = {"dX": np.zeros_like(s.X), "dgamma": np.zeros_like(s.gamma),
         "dbeta": np.zeros_like(s.beta)}
    _qkv.layernorm_backward(g["dX"], g["dgamma"], g["dbeta"], dY, s.X, s.mean, s.rstd, s.gamma,
                            s.beta, s.X.size // C, C)
    return g


def add_norm(X, Y, gamma, beta, eps=1e-5, dropout=0.0, seed=0):
    """d2l's AddNorm: LayerNorm(dropout(Y) + X), the residual connection around a sublayer
    whose output is Y. Returns (out, saved)."""
    X, N, C = _norm_args(X, gamma, beta)
    Y = _array("Y", Y)
    _expect("Y", Y, X.shape)
    p, seed = _rate(dropout, seed)
    out, z = np.empty_like(X), np.empty_like(X)
    mean, rstd = np.empty(N, np.float32), np.empty(N, np.float32)
    _qkv.addnorm_forward(out, z, mean, rstd, X, Y, gamma, beta, N, C, float(eps), p, seed)
    return out, Saved(z=z, mean=mean, rstd=rstd, gamma=gamma, beta=beta, dropout=p, seed=seed)


def add_norm_backward(dout, saved):
    """The gradients of add_norm: a dict of dX, dY, dgamma, dbeta."""
    s = saved
    dout = _array("dout", dout)
    _expect("dout", dout, s.z.shape)
    C = s.z.shape[-1]
    g = {"dX": np.zeros_like(s.z), "dY": np.zeros_like(s.z), "dgamma": np.zeros_like(s.gamma),
         "dbeta": np.zeros_like(s.beta)}
    _qkv.addnorm_backward(g["dX"], g["dY"], g["dgamma"], g["dbeta"], dout, s.z, s.mean, s.rstd,
                          s.gamma, s.beta, s.z.size // C, C, s.dropout, s.seed)
    return g
