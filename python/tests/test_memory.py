# SPDX-License-Identifier: MIT
"""Memory is freed with each call and each object: 10,000 calls do not grow the process (RSS,
for what C allocates) nor Python's own allocations (tracemalloc)."""
import gc
import tracemalloc

import pytest

import qkv

CALLS = 10_000


def rss_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def growth(call, calls=CALLS):
    """(RSS growth in KiB, traced Python growth in bytes) over calls, after a warm-up."""
    for _ in range(200):
        call()
    gc.collect()
    tracemalloc.start()
    rss0, (py0, _) = rss_kib(), tracemalloc.get_traced_memory()
    for _ in range(calls):
        call()
    gc.collect()
    rss1, (py1, _) = rss_kib(), tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return rss1 - rss0, py1 - py0


# A leak of one small struct per call (some 100 bytes) is 1 MiB over 10,000 calls.
LIMIT_KIB, LIMIT_PY = 768, 64 * 1024


def test_translation(word_model):
    t = qkv.Translator(word_model, threads=1)
    rss, py = growth(lambda: t.translate_batch(["red cat sees dog ."], beam_size=2,
                                               num_hypotheses=2, return_scores=True))
    assert rss < LIMIT_KIB and py < LIMIT_PY, (rss, py)


def test_objects(word_model, lm_model):
    def make():
        qkv.Translator(word_model).translate_batch(["red cat ."])
        qkv.Tokenizer(word_model).encode("red cat")
        g = qkv.Generator(lm_model)
        g.generate("the", max_length=2)
        s = g.generate_tokens("the", max_length=50)
        next(s)
        del s
    rss, py = growth(make, 1000)
    assert rss < LIMIT_KIB and py < LIMIT_PY, (rss, py)


def test_generation_scoring_and_errors(lm_model, tmp_path):
    g = qkv.Generator(lm_model, threads=1)

    def call():
        g.generate("the cat", max_length=3, seed=2)
        qkv.eval_bleu(["a b c d"], ["a b c e"])
        try:
            qkv.Translator(tmp_path / "none")
        except qkv.FileError:
            pass
    rss, py = growth(call)
    assert rss < LIMIT_KIB and py < LIMIT_PY, (rss, py)


def test_ops():
    np = pytest.importorskip("numpy")
    rng = np.random.default_rng(0)
    Q = rng.standard_normal((2, 4, 8)).astype(np.float32)
    params = qkv.ops.multihead_attention_parameters(8, 2, bias=True)

    def call():
        O, P = qkv.ops.dot_product_attention(Q, Q, Q, np.array([2, 4]))
        qkv.ops.dot_product_attention_backward(O, Q, Q, Q, P)
        y, s = qkv.ops.multihead_attention(Q, Q, Q, params, 2)
        qkv.ops.multihead_attention_backward(y, s)
        try:
            qkv.ops.masked_softmax(Q, np.array([1, 2, 3]))
        except ValueError:
            pass
    rss, py = growth(call)
    assert rss < LIMIT_KIB and py < LIMIT_PY, (rss, py)
