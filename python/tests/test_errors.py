# SPDX-License-Identifier: MIT
"""Errors: wrong types, dtypes and shapes raise TypeError or ValueError naming the argument;
what the library refuses raises a qkv.Error subclass with the library's message; nothing
crashes, even when the extension's own functions are called with nonsense."""
import os

import pytest

import qkv
from qkv import _qkv


def test_exception_classes():
    assert issubclass(qkv.ArgumentError, qkv.Error) and issubclass(qkv.ArgumentError, ValueError)
    assert issubclass(qkv.FormatError, ValueError) and issubclass(qkv.FileError, OSError)
    assert issubclass(qkv.NumericError, ArithmeticError)
    assert issubclass(qkv.OutOfMemoryError, MemoryError)


def test_library_errors_carry_its_message(tmp_path, word_model):
    with pytest.raises(qkv.FileError, match=r"nowhere/config.json: cannot open"):
        qkv.Translator(tmp_path / "nowhere")
    bad = tmp_path / "bad"
    bad.mkdir()
    for f in os.listdir(word_model):
        if os.path.isfile(os.path.join(word_model, f)):
            (bad / f).write_bytes(open(os.path.join(word_model, f), "rb").read())
    good = open(os.path.join(word_model, "config.json")).read()
    (bad / "config.json").write_text(good.replace('"d_model":\t32', '"d_model":\t"wide"'))
    with pytest.raises(qkv.FormatError, match="config.json.*d_model"):
        qkv.Translator(bad)
    (bad / "config.json").write_text(open(os.path.join(word_model, "config.json")).read())
    (bad / "src_vocab.txt").write_text("<unk>\n<pad>\n<bos>\n<eos>\nonly\n")
    with pytest.raises(qkv.FormatError, match="vocabularies have 5 and"):
        qkv.Translator(bad)
    with pytest.raises(qkv.ArgumentError, match="fp16"):
        qkv.Translator(word_model, precision="fp16")
    with pytest.raises(qkv.ArgumentError, match="key-value cache type .fp8."):
        qkv.Translator(word_model, kv_cache="fp8")
    with pytest.raises(qkv.Error):
        qkv.Generator(word_model)  # not a language model
    with pytest.raises(qkv.Error, match="vocab.txt|config.json"):
        qkv.Tokenizer(tmp_path)


def test_wrong_arguments(word_model):
    t = qkv.Translator(word_model)
    with pytest.raises(TypeError, match="not a single str"):
        t.translate_batch("red cat")
    with pytest.raises(TypeError, match=r"source\[1\] must be str"):
        t.translate_batch(["red", 5])
    with pytest.raises(TypeError, match="mixes"):
        t.translate_batch([["red"], "cat"])
    with pytest.raises(ValueError, match="NUL"):
        t.translate_batch(["red\0cat"])
    with pytest.raises(qkv.ArgumentError, match="line break"):
        t.translate_batch(["red\ncat"])
    with pytest.raises(ValueError, match="num_hypotheses"):
        t.translate_batch(["red"], beam_size=2, num_hypotheses=3)
    with pytest.raises(TypeError, match="beam_size"):
        t.translate_batch(["red"], beam_size=2.5)
    with pytest.raises(ValueError, match="beam_stop: unknown beam stopping rule 'never' "
                       r"\(bound, count, hf, hf-early or hf-never\)"):
        t.translate_batch(["red"], beam_stop="never")
    with pytest.raises(ValueError, match="beam_stop"):
        t.translate_batch(["red"], beam_stop=2)
    with pytest.raises(ValueError, match="length_penalty"):
        t.translate_batch(["red"], length_penalty=-1)
    with pytest.raises(ValueError, match="max_batch_size"):
        t.translate_batch(["red"], max_batch_size=0)
    with pytest.raises(TypeError):
        qkv.Translator(word_model, threads="2")
    with pytest.raises(TypeError):
        qkv.eval_bleu("a", "b")
    with pytest.raises(ValueError, match="1 hypotheses but 2 references"):
        qkv.eval_bleu(["a"], ["b", "c"])


np = pytest.importorskip("numpy")


def test_ops_argument_errors():
    ops = qkv.ops
    X = np.zeros((2, 3, 4), np.float32)
    with pytest.raises(TypeError, match="X must be float32, got float64"):
        ops.masked_softmax(X.astype(np.float64))
    with pytest.raises(TypeError, match="must be a numpy array"):
        ops.masked_softmax([[1.0]])
    with pytest.raises(ValueError, match="C-contiguous"):
        ops.masked_softmax(np.zeros((2, 4, 3), np.float32).transpose(0, 2, 1))
    with pytest.raises(ValueError, match=r"valid_lens must have shape \(2,\) or \(2, 3\)"):
        ops.masked_softmax(X, np.array([1, 2, 3]))
    with pytest.raises(TypeError, match="valid_lens must hold integers"):
        ops.masked_softmax(X, np.array([1.5, 2]))
    with pytest.raises(ValueError, match="dimensions"):
        ops.masked_softmax(np.zeros(4, np.float32))
    Q = np.zeros((2, 3, 4), np.float32)
    with pytest.raises(ValueError, match=r"keys must have shape \(2, 5, 4\)"):
        ops.dot_product_attention(Q, np.zeros((2, 5, 3), np.float32), np.zeros((2, 5, 4), np.float32))
    with pytest.raises(ValueError, match="dropout"):
        ops.dot_product_attention(Q, Q, Q, dropout=1.0)
    with pytest.raises(ValueError, match="num_heads"):
        ops.multihead_attention(Q, Q, Q, ops.multihead_attention_parameters(4, 2), 3)
    with pytest.raises(ValueError, match="W1 must have shape"):
        ops.ffn(Q, np.zeros((8, 3), np.float32), None, np.zeros((4, 8), np.float32), None)
    with pytest.raises(ValueError, match="activation"):
        ops.ffn(Q, np.zeros((8, 4), np.float32), None, np.zeros((4, 8), np.float32), None, "tanh")
    with pytest.raises(ValueError, match="outside P's"):
        ops.add_positional_encoding(Q, ops.positional_encoding(2, 4))


def test_the_extension_refuses_what_would_crash():
    """The C functions check every buffer's type and size themselves: the Python layer is not
    the only guard."""
    f = np.zeros(10, np.float32)
    with pytest.raises(ValueError, match="P has 10 values; its shape needs 24"):
        _qkv.masked_softmax_forward(f, f, 2, 1, 3, 4, None, False)
    with pytest.raises(TypeError, match="float32"):
        _qkv.masked_softmax_forward(np.zeros(24), np.zeros(24), 2, 1, 3, 4, None, False)
    with pytest.raises(TypeError, match="writable"):
        ro = np.zeros(24, np.float32)
        ro.flags.writeable = False
        _qkv.masked_softmax_forward(ro, np.zeros(24, np.float32), 2, 1, 3, 4, None, False)
    with pytest.raises(ValueError, match="dimension"):
        _qkv.masked_softmax_forward(f, f, -2, 1, 3, 4, None, False)
    with pytest.raises(ValueError, match="dimension"):
        _qkv.masked_softmax_forward(f, f, 2**30, 2**30, 3, 4, None, False)
    with pytest.raises(ValueError, match="valid_lens has"):
        _qkv.masked_softmax_forward(np.zeros(24, np.float32), np.zeros(24, np.float32), 2, 1, 3,
                                    4, np.zeros(5, np.int32), False)
    with pytest.raises(TypeError):
        _qkv.attention_forward(f, f, f, f, f, (1, 1, 1, 1, 1), None, False, 0.0, 0)
    with pytest.raises(ValueError, match="has 10 values"):
        _qkv.mha_forward(f, f, f, f, f, f, (4, 4, 2, 2, False), 1, 2, 2, None, False, 0.0, 0)
    with pytest.raises(TypeError, match="list of str"):
        _qkv.sacrebleu("abc", ["x"], False)
    with pytest.raises(TypeError, match="unknown option 'dmodel'"):
        _qkv.run("train", "/nonexistent/qkv", [("dmodel", 3)], False, False, None, None, "t", 0)
    with pytest.raises(TypeError, match="pairs"):
        _qkv.run("train", "/nonexistent/qkv", [3], False, False, None, None, "t", 0)
    with pytest.raises(ValueError, match="no run of kind"):
        _qkv.run_options("translate")
