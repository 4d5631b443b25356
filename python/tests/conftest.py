# SPDX-License-Identifier: MIT
"""Fixtures of the Python package's tests: the qkv command ($QKV) makes the models that the
package and the command are compared on, so neither side's output is its own reference."""
import os
import random
import subprocess

import pytest

QKV = os.environ.get("QKV", "build/qkv")
PARITY = os.environ.get("QKV_PARITY_DIR", "build/parity")


def run_qkv(*args, input=None):
    """The qkv command's stdout; a failure fails the test with its stderr."""
    r = subprocess.run([QKV, *map(str, args)], input=input, capture_output=True, text=True)
    assert r.returncode == 0, f"qkv {' '.join(map(str, args))}: {r.stderr}"
    return r.stdout


WORDS = "red blue green cat dog bird sees likes eats big small old new fish tree".split()


def reversal_pairs(n, seed):
    """Pairs "w1 w2 ... .<TAB>... w2 w1 ." of random words: a task a tiny model learns fast."""
    rng = random.Random(seed)
    pairs = []
    for _ in range(n):
        s = [rng.choice(WORDS) for _ in range(rng.randint(2, 5))]
        pairs.append(" ".join(s) + " .\t" + " ".join(reversed(s)) + " .")
    return pairs


@pytest.fixture(scope="session")
def qkv_bin():
    return QKV


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("data")
    # a few sources start with a language token (>>fra<<), as multilingual OPUS-MT models' do
    pairs = reversal_pairs(200, 1) + [">>fra<< " + p for p in reversal_pairs(5, 4)]
    (d / "pairs.tsv").write_text("\n".join(pairs) + "\n")
    (d / "valid.tsv").write_text("\n".join(reversal_pairs(20, 2)) + "\n")
    rng = random.Random(3)
    text = "".join(rng.choice(["the cat sat. ", "a dog ran! ", "birds sing, ", "fish swim\n"])
                   for _ in range(400))
    (d / "text.txt").write_text(text)
    return d


SENTENCES = ["red cat sees dog .", "big old tree .", "the fish eats", "", "blue blue blue .",
             "dog likes small bird .", "new green fish eats old tree ."]


@pytest.fixture(scope="session")
def word_model(tmp_path_factory, data_dir):
    """A word-level encoder-decoder trained by `qkv train` (seconds)."""
    out = tmp_path_factory.mktemp("word") / "m"
    run_qkv("train", "--data", data_dir / "pairs.tsv", "--out", out, "--epochs", 15,
            "--min-freq", 1, "--batch", 32, "--threads", 1, "--quiet")
    return str(out)


@pytest.fixture(scope="session")
def marian_model(tmp_path_factory):
    """A random-weight Marian model (tests/parity/make_marian_reference.py) imported by
    `qkv import marian`: SentencePiece, silu, <pad> as the decoder's start."""
    hf = os.path.join(PARITY, "marian_shared_swish")
    if not os.path.isfile(os.path.join(hf, "config.json")):
        pytest.fail(f"no {hf} (make build/parity/.stamp writes it)")
    out = tmp_path_factory.mktemp("marian") / "m"
    run_qkv("import", "marian", hf, "--out", out)
    return str(out)


@pytest.fixture(scope="session")
def lm_model(tmp_path_factory, data_dir):
    """A character-level language model trained by `qkv train-lm`."""
    out = tmp_path_factory.mktemp("lm") / "m"
    run_qkv("train-lm", "--data", data_dir / "text.txt", "--out", out, "--steps", 30,
            "--context", 32, "--d-model", 32, "--heads", 2, "--ffn", 64, "--layers", 1,
            "--batch", 8, "--threads", 1, "--quiet")
    return str(out)
