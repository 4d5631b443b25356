# SPDX-License-Identifier: MIT
"""The GIL is released while the library works: a Python thread keeps counting while another
translates, generates or runs an op; measured by counts, not by times. Several threads may
share one Translator (calls wait for each other) and get what one thread gets."""
import sys
import threading
import time

import qkv
from conftest import SENTENCES


def counts_during(call):
    """How far a counting thread gets while call() runs in this thread. The switch interval
    is made so long that the interpreter never takes the GIL from a thread: the counter (which
    gives the GIL up at every count) can count only while this thread has released it, so it
    stays near 0 if call() holds the GIL throughout, whatever the machine's speed or load."""
    stop, ready, count = threading.Event(), threading.Event(), [0]

    def counter():
        while not stop.is_set():
            count[0] += 1
            ready.set()
            time.sleep(0)  # the GIL to whoever waits for it

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1000.0)
    try:
        t = threading.Thread(target=counter)
        t.start()
        ready.wait()
        before = count[0]
        call()
        moved = count[0] - before
        stop.set()
        t.join()
    finally:
        sys.setswitchinterval(interval)
    return moved


def test_translation_releases_the_gil(word_model):
    tr = qkv.Translator(word_model, threads=1)
    batch = SENTENCES * 40
    moved = counts_during(lambda: tr.translate_batch(batch, beam_size=4))
    assert moved > 10, moved  # held throughout: 0


def test_generation_releases_the_gil(lm_model):
    g = qkv.Generator(lm_model, threads=1)
    moved = counts_during(lambda: g.generate("the", max_length=3000, seed=1))
    assert moved > 10, moved  # held throughout: 0


def test_training_releases_the_gil(data_dir, tmp_path):
    moved = counts_during(lambda: qkv.train(data_dir / "pairs.tsv", tmp_path / "m", epochs=2,
                                            min_freq=1, batch=16, threads=1))
    assert moved > 10, moved  # held throughout: 0


def test_ops_release_the_gil():
    import pytest
    np = pytest.importorskip("numpy")
    rng = np.random.default_rng(0)
    Q = rng.standard_normal((8, 256, 8, 32)).astype(np.float32)
    moved = counts_during(lambda: qkv.ops.dot_product_attention(Q, Q, Q))
    assert moved > 10, moved  # held throughout: 0


def test_one_translator_shared_by_threads(word_model):
    tr = qkv.Translator(word_model)
    want = [r.hypotheses for r in tr.translate_batch(SENTENCES, beam_size=3, num_hypotheses=2)]
    got, errors = [None] * 6, []

    def work(i):
        try:
            for _ in range(5):
                got[i] = [r.hypotheses for r in tr.translate_batch(SENTENCES, beam_size=3,
                                                                   num_hypotheses=2)]
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and all(g == want for g in got)


def test_two_translators_in_two_threads(word_model, marian_model):
    a, b = qkv.Translator(word_model, threads=1), qkv.Translator(marian_model, threads=1)
    want_a = a.translate_batch(SENTENCES)
    want_b = b.translate_batch(["Hello world."])
    out = {}
    ta = threading.Thread(target=lambda: out.setdefault("a", a.translate_batch(SENTENCES)))
    tb = threading.Thread(target=lambda: out.setdefault("b", b.translate_batch(["Hello world."])))
    ta.start(), tb.start()
    ta.join(), tb.join()
    assert out["a"] == want_a and out["b"] == want_b
