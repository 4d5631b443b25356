# SPDX-License-Identifier: MIT
"""qkv.ops forward and backward against PyTorch (autograd) within float32 tolerance, as a
student would check their d2l implementation; the masked softmax also against NumPy alone."""
import numpy as np
import pytest

np_ = pytest.importorskip("numpy")
import qkv  # noqa: E402

ops = qkv.ops
RTOL, ATOL = 1e-4, 1e-5


def close(a, b, name=""):
    b = b.detach().numpy() if hasattr(b, "detach") else b
    np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL, err_msg=name)


def rand(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def test_masked_softmax_against_numpy():
    rng = np.random.default_rng(0)
    X = rand(rng, 2, 3, 5)
    lens = np.array([2, 4])
    P = ops.masked_softmax(X, lens)
    ref = np.where(np.arange(5)[None, None, :] < lens[:, None, None], np.exp(X), 0)
    ref /= ref.sum(-1, keepdims=True)
    close(P, ref)
    # per query, and a row that sees nothing is all zeros (never NaN)
    P2 = ops.masked_softmax(X, np.array([[1, 0, 5], [2, 2, 3]]))
    assert np.all(P2[0, 1] == 0) and np.allclose(P2[0, 0], [1, 0, 0, 0, 0])
    causal = ops.masked_softmax(rand(rng, 1, 2, 4, 4), causal=True)
    assert np.all(np.triu(causal[0, 0], 1) == 0)


torch = pytest.importorskip("torch")


def t(x):
    return torch.tensor(x, requires_grad=True)


def test_masked_softmax_backward():
    rng = np.random.default_rng(1)
    X, dP = rand(rng, 2, 2, 3, 6), rand(rng, 2, 2, 3, 6)
    lens = np.array([3, 6])
    P = ops.masked_softmax(X, lens)
    Xt = t(X)
    mask = torch.arange(6)[None, None, None, :] < torch.tensor(lens)[:, None, None, None]
    Pt = torch.softmax(Xt.masked_fill(~mask, float("-inf")), -1)
    Pt.backward(torch.tensor(dP))
    close(P, Pt)
    close(ops.masked_softmax_backward(dP, P), Xt.grad)


def torch_attention(Q, K, V, lens=None, causal=False):
    d = Q.shape[-1]
    S = Q @ K.transpose(-1, -2) / d ** 0.5
    if lens is not None:
        keep = torch.arange(K.shape[-2])[None, None, :] < torch.tensor(lens).reshape(-1, 1, 1)
        S = S.masked_fill(~keep, float("-inf"))
    if causal:
        n, m = S.shape[-2:]
        S = S.masked_fill(torch.ones(n, m, dtype=torch.bool).triu(1 + m - n), float("-inf"))
    P = torch.softmax(S, -1)
    return P @ V, P


@pytest.mark.parametrize("causal", [False, True])
def test_dot_product_attention(causal):
    rng = np.random.default_rng(2)
    Q, K, V, dO = rand(rng, 2, 4, 8), rand(rng, 2, 4 if causal else 6, 8), None, None
    V = rand(rng, 2, K.shape[1], 5)
    dO = rand(rng, 2, 4, 5)
    lens = None if causal else np.array([3, 6])
    O, P = ops.dot_product_attention(Q, K, V, lens, causal=causal)
    Qt, Kt, Vt = t(Q), t(K), t(V)
    Ot, Pt = torch_attention(Qt, Kt, Vt, lens, causal)
    Ot.backward(torch.tensor(dO))
    close(O, Ot, "O"), close(P, Pt, "P")
    for g, ref, name in zip(ops.dot_product_attention_backward(dO, Q, K, V, P),
                            (Qt.grad, Kt.grad, Vt.grad), "QKV"):
        close(g, ref, "d" + name)


def test_dot_product_attention_with_heads_axis():
    rng = np.random.default_rng(3)
    B, n, m, H, d = 2, 3, 5, 4, 6
    Q, K, V = rand(rng, B, n, H, d), rand(rng, B, m, H, d), rand(rng, B, m, H, d)
    O, P = ops.dot_product_attention(Q, K, V)
    assert O.shape == (B, n, H, d) and P.shape == (B, H, n, m)
    Ot, _ = torch_attention(*(torch.tensor(x).transpose(1, 2) for x in (Q, K, V)))
    close(O, Ot.transpose(1, 2))


def test_additive_attention():
    rng = np.random.default_rng(4)
    B, n, m, dq, dk, v, h = 2, 3, 5, 4, 6, 7, 8
    Q, K, V = rand(rng, B, n, dq), rand(rng, B, m, dk), rand(rng, B, m, v)
    W_q, W_k, w_v = rand(rng, h, dq), rand(rng, h, dk), rand(rng, 1, h)
    lens = np.array([2, 5])
    dO = rand(rng, B, n, v)
    O, saved = ops.additive_attention(Q, K, V, W_q, W_k, w_v, lens)
    Qt, Kt, Vt, Wqt, Wkt, wvt = map(t, (Q, K, V, W_q, W_k, w_v))
    features = torch.tanh((Qt @ Wqt.T)[:, :, None, :] + (Kt @ Wkt.T)[:, None, :, :])
    S = (features @ wvt.T).squeeze(-1)
    keep = torch.arange(m)[None, None, :] < torch.tensor(lens)[:, None, None]
    Pt = torch.softmax(S.masked_fill(~keep, float("-inf")), -1)
    Ot = Pt @ Vt
    Ot.backward(torch.tensor(dO))
    close(O, Ot, "O"), close(saved.attention_weights, Pt, "P")
    g = ops.additive_attention_backward(dO, saved)
    for name, ref in (("dqueries", Qt), ("dkeys", Kt), ("dvalues", Vt), ("dW_q", Wqt),
                      ("dW_k", Wkt), ("dw_v", wvt)):
        close(g[name], ref.grad, name)


@pytest.mark.parametrize("bias", [False, True])
def test_multihead_attention(bias):
    rng = np.random.default_rng(5)
    B, n, m, C, H = 2, 4, 6, 16, 4
    params = ops.multihead_attention_parameters(C, H, bias=bias, seed=1)
    if bias:
        params = {k: (rand(rng, *v.shape) if k.startswith("b_") else v) for k, v in params.items()}
    X, Y, Z = rand(rng, B, n, C), rand(rng, B, m, C), rand(rng, B, m, C)
    lens = np.array([3, 6])
    dy = rand(rng, B, n, C)
    y, saved = ops.multihead_attention(X, Y, Z, params, H, lens)
    mha = torch.nn.MultiheadAttention(C, H, bias=bias, batch_first=True)
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.tensor(np.concatenate([params["W_q"], params["W_k"],
                                                              params["W_v"]])))
        mha.out_proj.weight.copy_(torch.tensor(params["W_o"]))
        if bias:
            mha.in_proj_bias.copy_(torch.tensor(np.concatenate([params["b_q"], params["b_k"],
                                                                params["b_v"]])))
            mha.out_proj.bias.copy_(torch.tensor(params["b_o"]))
    Xt, Yt, Zt = t(X), t(Y), t(Z)
    pad = torch.arange(m)[None, :] >= torch.tensor(lens)[:, None]
    yt, Pt = mha(Xt, Yt, Zt, key_padding_mask=pad, average_attn_weights=False)
    yt.backward(torch.tensor(dy))
    close(y, yt, "y"), close(saved.attention_weights, Pt, "P")
    g = ops.multihead_attention_backward(dy, saved)
    close(g["dqueries"], Xt.grad, "dqueries")
    close(g["dkeys"], Yt.grad, "dkeys"), close(g["dvalues"], Zt.grad, "dvalues")
    W = mha.in_proj_weight.grad
    close(np.concatenate([g["dW_q"], g["dW_k"], g["dW_v"]]), W, "dW_qkv")
    close(g["dW_o"], mha.out_proj.weight.grad, "dW_o")
    if bias:
        close(np.concatenate([g["db_q"], g["db_k"], g["db_v"]]), mha.in_proj_bias.grad, "db")
        close(g["db_o"], mha.out_proj.bias.grad, "db_o")


@pytest.mark.parametrize("causal", [False, True])
def test_linear_attention(causal):
    rng = np.random.default_rng(6)
    B, n, d, v = 2, 5, 4, 3
    Q, K, V, dO = rand(rng, B, n, d), rand(rng, B, n, d), rand(rng, B, n, v), rand(rng, B, n, v)
    O = ops.linear_attention(Q, K, V, causal=causal)
    Qt, Kt, Vt = t(Q), t(K), t(V)
    phq, phk = torch.nn.functional.elu(Qt) + 1, torch.nn.functional.elu(Kt) + 1
    A = phq @ phk.transpose(-1, -2)
    if causal:
        A = A * torch.ones(n, n).tril()
    Ot = (A @ Vt) / (A.sum(-1, keepdim=True) + 1e-6)
    Ot.backward(torch.tensor(dO))
    close(O, Ot, "O")
    for g, ref, name in zip(ops.linear_attention_backward(dO, Q, K, V, causal=causal),
                            (Qt.grad, Kt.grad, Vt.grad), "QKV"):
        close(g, ref, "d" + name)


def test_positional_encoding_is_d2ls():
    P = ops.positional_encoding(50, 16)
    X = np.arange(50, dtype=np.float32).reshape(-1, 1) / np.power(
        10000, np.arange(0, 16, 2, dtype=np.float32) / 16)
    ref = np.zeros((50, 16), np.float32)
    ref[:, 0::2], ref[:, 1::2] = np.sin(X), np.cos(X)
    close(P, ref)
    halves = ops.positional_encoding(50, 16, layout="halves")
    close(halves[:, :8], np.sin(X)), close(halves[:, 8:], np.cos(X))
    rng = np.random.default_rng(7)
    E, dY = rand(rng, 2, 6, 16), rand(rng, 2, 6, 16)
    Y = ops.add_positional_encoding(E, P, scale=4.0, start=3)
    close(Y, E * 4 + P[3:9])
    dX, dP = ops.add_positional_encoding_backward(dY, P, scale=4.0, start=3)
    close(dX, dY * 4)
    close(dP[3:9], dY.sum(0)), close(dP[:3], np.zeros((3, 16)))


@pytest.mark.parametrize("act", ["relu", "gelu", "silu"])
def test_ffn(act):
    rng = np.random.default_rng(8)
    X, dY = rand(rng, 2, 3, 8), rand(rng, 2, 3, 8)
    W1, b1, W2, b2 = rand(rng, 16, 8), rand(rng, 16), rand(rng, 8, 16), rand(rng, 8)
    Y, saved = ops.ffn(X, W1, b1, W2, b2, activation=act)
    Xt, W1t, b1t, W2t, b2t = map(t, (X, W1, b1, W2, b2))
    f = {"relu": torch.relu, "gelu": torch.nn.functional.gelu,
         "silu": torch.nn.functional.silu}[act]
    Yt = f(Xt @ W1t.T + b1t) @ W2t.T + b2t
    Yt.backward(torch.tensor(dY))
    close(Y, Yt, "Y")
    g = ops.ffn_backward(dY, saved)
    for name, ref in (("dX", Xt), ("dW1", W1t), ("db1", b1t), ("dW2", W2t), ("db2", b2t)):
        close(g[name], ref.grad, name)


def test_layer_norm_and_add_norm():
    rng = np.random.default_rng(9)
    X, Y, dout = rand(rng, 2, 3, 8), rand(rng, 2, 3, 8), rand(rng, 2, 3, 8)
    gamma, beta = rand(rng, 8), rand(rng, 8)
    out, saved = ops.add_norm(X, Y, gamma, beta)
    Xt, Yt, gt, bt = map(t, (X, Y, gamma, beta))
    ref = torch.nn.functional.layer_norm(Xt + Yt, (8,), gt, bt, 1e-5)
    ref.backward(torch.tensor(dout))
    close(out, ref, "out")
    g = ops.add_norm_backward(dout, saved)
    for name, r in (("dX", Xt), ("dY", Yt), ("dgamma", gt), ("dbeta", bt)):
        close(g[name], r.grad, name)
    ln, s = ops.layer_norm(X, gamma, beta)
    Xt2, gt2, bt2 = map(t, (X, gamma, beta))
    r2 = torch.nn.functional.layer_norm(Xt2, (8,), gt2, bt2, 1e-5)
    r2.backward(torch.tensor(dout))
    close(ln, r2)
    g2 = ops.layer_norm_backward(dout, s)
    close(g2["dX"], Xt2.grad), close(g2["dgamma"], gt2.grad), close(g2["dbeta"], bt2.grad)


def test_dropout_is_reproducible_and_inverted():
    rng = np.random.default_rng(10)
    Q, K, V = rand(rng, 2, 4, 8), rand(rng, 2, 6, 8), rand(rng, 2, 6, 8)
    a, P = ops.dot_product_attention(Q, K, V, dropout=0.5, seed=9)
    b, _ = ops.dot_product_attention(Q, K, V, dropout=0.5, seed=9)
    c, _ = ops.dot_product_attention(Q, K, V, dropout=0.5, seed=10)
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    dO = rand(rng, 2, 4, 8)
    g1 = ops.dot_product_attention_backward(dO, Q, K, V, P, dropout=0.5, seed=9)
    g2 = ops.dot_product_attention_backward(dO, Q, K, V, P, dropout=0.5, seed=9)
    assert all(np.array_equal(x, y) for x, y in zip(g1, g2))
