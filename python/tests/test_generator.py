# SPDX-License-Identifier: MIT
"""qkv.Generator against `qkv generate` with the same seed, and its token stream."""
import threading

import pytest

import qkv
from conftest import run_qkv


@pytest.mark.parametrize("prompt,opts", [
    ("the cat", dict(temperature=0.8, top_k=5, seed=7)),
    ("a dog", dict(temperature=1.0, top_p=0.9, seed=123456789)),
    ("", dict(temperature=0.0, seed=0)),
])
def test_generate_equals_cli(lm_model, prompt, opts):
    g = qkv.Generator(lm_model)
    text = g.generate(prompt, max_length=60, **opts)
    args = ["--tokens", 60, "--temperature", opts["temperature"], "--seed", opts["seed"]]
    if "top_k" in opts:
        args += ["--top-k", opts["top_k"]]
    if "top_p" in opts:
        args += ["--top-p", opts["top_p"]]
    cli = run_qkv("generate", "--model", lm_model, "--prompt", prompt, *args)
    assert cli == (prompt or "\n") + text + "\n"
    # a batch continues each prompt as if alone
    assert g.generate([prompt, "s" + prompt], max_length=60, **opts)[0] == text


def test_stream_gives_the_same_tokens(lm_model):
    g = qkv.Generator(lm_model)
    text = g.generate("birds", max_length=80, temperature=0.7, seed=3)
    pieces = list(g.generate_tokens("birds", max_length=80, temperature=0.7, seed=3))
    assert len(pieces) == 80 and "".join(pieces) == text
    assert g.generate_batch(["birds"], max_length=80, temperature=0.7, seed=3)[0].text == text


def test_stream_closed_early_frees_the_model(lm_model):
    g = qkv.Generator(lm_model)
    s = g.generate_tokens("fish", max_length=100000, seed=1)
    first = [next(s) for _ in range(3)]
    assert len(first) == 3
    s.close()
    assert list(s) == []
    # dropped without close, too: the model is free again
    s2 = g.generate_tokens("fish", max_length=100000, seed=1)
    next(s2)
    del s2
    done = []
    t = threading.Thread(target=lambda: done.append(g.generate("fish", max_length=5, seed=1)))
    t.start()
    t.join(60)
    assert done and len(done[0]) == 5


def test_zero_tokens_and_repr(lm_model):
    g = qkv.Generator(lm_model)
    assert g.generate("cat", max_length=0) == ""
    assert list(g.generate_tokens("cat", max_length=0)) == []
    assert "Generator(" in repr(g) and "context=32" in repr(g)
    assert g.context == 32 and g.config["format"] == "qkv-lm"


def test_unknown_prompt_characters_warn(lm_model):
    g = qkv.Generator(lm_model)
    with pytest.warns(UserWarning, match="not in the model's vocabulary"):
        g.generate("ZZZ", max_length=2)


def test_bad_sampling(lm_model):
    g = qkv.Generator(lm_model)
    with pytest.raises(ValueError, match="temperature 0 is greedy"):
        g.generate("a", temperature=0, top_k=3)
    with pytest.raises(ValueError):
        g.generate("a", top_p=0.0)
    with pytest.raises(TypeError):
        g.generate(5)
    with pytest.raises(TypeError):
        g.generate("a", max_length="10")
