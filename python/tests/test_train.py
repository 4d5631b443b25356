# SPDX-License-Identifier: MIT
"""qkv.train and qkv.train_lm: the models `qkv train` and `qkv train-lm` make with the same
options, byte for byte; progress; Ctrl-C and exceptions stopping at a resumable step; the run
directory's rules."""
import json
import os
import signal
import threading
import time

import pytest

import qkv
from conftest import run_qkv

SMALL = dict(epochs=3, min_freq=1, batch=32, threads=1)


def same_file(a, b):
    with open(a, "rb") as fa, open(b, "rb") as fb:
        return fa.read() == fb.read()


def test_train_equals_cli(data_dir, tmp_path):
    a, b = tmp_path / "cli", tmp_path / "py"
    run_qkv("train", "--data", data_dir / "pairs.tsv", "--out", a, "--epochs", 3, "--min-freq",
            1, "--batch", 32, "--threads", 1, "--valid", data_dir / "valid.tsv", "--quiet")
    seen = []
    out = qkv.train(data_dir / "pairs.tsv", b, valid=str(data_dir / "valid.tsv"), progress=seen.append,
                    **SMALL)
    assert out == str(b)
    for f in ("model.safetensors", "src_vocab.txt", "tgt_vocab.txt", "config.json",
              "validation.json", "best/model.safetensors"):
        assert same_file(a / f, b / f), f
    assert json.loads((a / "train.json").read_text()) == json.loads((b / "train.json").read_text())
    steps = [p.step for p in seen]
    assert steps == list(range(1, len(seen) + 1)) and seen[-1].epoch == 3
    assert sum(p.validated for p in seen) == 3 and "Progress(" in repr(seen[0])
    assert qkv.Translator(out).translate_batch(["red cat ."])[0].hypotheses


def test_subword_runs_equal_cli(data_dir, tmp_path):
    for tok in ("bpe", "spm"):
        a, b = tmp_path / f"cli-{tok}", tmp_path / f"py-{tok}"
        run_qkv("train", "--data", data_dir / "pairs.tsv", "--out", a, "--epochs", 1,
                "--batch", 32, "--threads", 1, "--tokenizer", tok, "--vocab-size", 30,
                "--joint-bpe", "--tie", "all", "--quiet")
        qkv.train(data_dir / "pairs.tsv", b, epochs=1, batch=32, threads=1, tokenizer=tok,
                  vocab_size=30, joint_bpe=True, tie="all")
        assert same_file(a / "model.safetensors", b / "model.safetensors"), tok
        assert (a / "text.json").read_text() == (b / "text.json").read_text()


def test_preset_and_accumulation_equal_cli(data_dir, tmp_path):
    """A preset, overridden where given, and gradient accumulation: the command's run, byte
    for byte; the preset's values come as a warning."""
    a, b = tmp_path / "cli", tmp_path / "py"
    run_qkv("train", "--data", data_dir / "pairs.tsv", "--out", a, "--preset", "d2l",
            "--epochs", 2, "--min-freq", 1, "--batch", 8, "--accum", 4, "--threads", 1,
            "--quiet")
    with pytest.warns(RuntimeWarning, match="preset d2l: d_model=32"):
        qkv.train(data_dir / "pairs.tsv", b, preset="d2l", epochs=2, min_freq=1, batch=8,
                  accum=4, threads=1)
    assert same_file(a / "model.safetensors", b / "model.safetensors")
    ta, tb = (json.loads((d / "train.json").read_text()) for d in (a, b))
    assert ta == tb and tb["preset"] == "d2l" and tb["accum"] == 4 and tb["loss"] == "d2l"
    with pytest.raises(ValueError, match="no preset 'base'"):
        qkv.train(data_dir / "pairs.tsv", tmp_path / "x", preset="base")


def test_an_exception_stops_at_a_resumable_step(data_dir, tmp_path):
    full, cut = tmp_path / "full", tmp_path / "cut"
    qkv.train(data_dir / "pairs.tsv", full, **SMALL)

    def stop_at_5(p):
        if p.step == 5:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        qkv.train(data_dir / "pairs.tsv", cut, progress=stop_at_5, **SMALL)
    assert (cut / "checkpoint.safetensors").exists() and not (cut / "model.safetensors").exists()
    with pytest.raises(qkv.FileError, match="resume=True continues it"):
        qkv.train(data_dir / "pairs.tsv", cut, **SMALL)
    qkv.train(out=cut, resume=True, threads=1)  # the recorded options
    assert same_file(full / "model.safetensors", cut / "model.safetensors")
    history = json.loads((cut / "train.json").read_text())["history"]
    assert history == [{"resumed_at_step": 6}]


def test_ctrl_c_stops_at_a_resumable_step(data_dir, tmp_path):
    """SIGINT while the library trains (the GIL released, no progress callback) stops it at
    the next step."""
    out = tmp_path / "m"

    def interrupt():  # once training is under way: its first epoch has ended
        while not (out / "metrics.jsonl").exists():
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGINT)

    # Python installs its Ctrl-C handler only where SIGINT was not ignored when it started, and
    # a shell starts its background jobs with SIGINT ignored: install it, as a terminal has it
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    t = threading.Thread(target=interrupt)
    t.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            qkv.train(data_dir / "pairs.tsv", out, epochs=2000, min_freq=1, batch=32, threads=1)
    finally:
        t.join()
        signal.signal(signal.SIGINT, before)
    assert (out / "checkpoint.safetensors").exists() and not (out / "model.safetensors").exists()
    qkv.train(out=out, resume=True, epochs=1)  # a lower epoch count: it ends at once
    assert (out / "model.safetensors").exists()
    change = json.loads((out / "train.json").read_text())["history"][-1]["changed"]
    assert change == {"epochs": {"was": 2000, "now": 1}}


def test_resume_refuses_a_change_of_model_or_data(data_dir, tmp_path):
    out = tmp_path / "m"

    def interrupt(p):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        qkv.train(data_dir / "pairs.tsv", out, progress=interrupt, **SMALL)
    with pytest.raises(ValueError, match="d_model=64 differs from this run's 32"):
        qkv.train(out=out, resume=True, d_model=64)
    with pytest.raises(qkv.FileError, match="no checkpoint"):
        qkv.train(data_dir / "pairs.tsv", tmp_path / "empty", resume=True)


def test_options_and_config(data_dir, tmp_path):
    with pytest.raises(TypeError, match="unknown option 'dmodel'"):
        qkv.train(data_dir / "pairs.tsv", tmp_path / "a", dmodel=3)
    with pytest.raises(ValueError, match="tokenizer must be one of"):
        qkv.train(data_dir / "pairs.tsv", tmp_path / "a", tokenizer="chars")
    with pytest.raises(ValueError, match="config: unknown option 'beam'"):
        qkv.train(data_dir / "pairs.tsv", tmp_path / "a", config={"beam": 4})
    with pytest.raises(TypeError, match="must be int"):
        qkv.train(data_dir / "pairs.tsv", tmp_path / "a", epochs="3")
    # a run's train.json is a config: the same run again
    a = tmp_path / "first"
    qkv.train(data_dir / "pairs.tsv", a, **SMALL)
    b = qkv.train(out=tmp_path / "again", config=a / "train.json", threads=1)
    assert same_file(a / "model.safetensors", os.path.join(b, "model.safetensors"))
    with pytest.raises(qkv.FileError, match="already holds a trained model"):
        qkv.train(data_dir / "pairs.tsv", a, **SMALL)
    qkv.train(data_dir / "pairs.tsv", a, overwrite=True, **dict(SMALL, epochs=1))
    # library errors carry the library's message
    with pytest.raises(qkv.FileError, match="nowhere.tsv"):
        qkv.train(tmp_path / "nowhere.tsv", tmp_path / "b")


def test_train_lm_equals_cli(data_dir, tmp_path):
    a, b = tmp_path / "cli", tmp_path / "py"
    opts = ["--steps", 20, "--context", 16, "--d-model", 32, "--heads", 2, "--ffn", 64,
            "--layers", 1, "--batch", 4, "--log-every", 5, "--eval-every", 10, "--threads", 1]
    run_qkv("train-lm", "--data", data_dir / "text.txt", "--out", a, *opts, "--quiet")
    seen = []
    qkv.train_lm(data_dir / "text.txt", b, steps=20, context=16, d_model=32, heads=2, ffn=64,
                 layers=1, batch=4, log_every=5, eval_every=10, threads=1, progress=seen.append)
    for f in ("model.safetensors", "vocab.txt", "config.json"):
        assert same_file(a / f, b / f), f
    assert json.loads((a / "train.json").read_text()) == json.loads((b / "train.json").read_text())
    assert [p.step for p in seen] == list(range(1, 21))
    assert sum(p.val_loss == p.val_loss for p in seen) == 2  # evaluated at 10 and 20
    g = qkv.Generator(b)
    assert len(g.generate("the", max_length=10, seed=1)) == 10


def test_train_lm_stops_and_resumes(data_dir, tmp_path):
    full, cut = tmp_path / "full", tmp_path / "cut"
    opts = dict(steps=12, context=16, d_model=16, heads=2, ffn=32, layers=1, batch=4,
                log_every=4, threads=1)
    qkv.train_lm(data_dir / "text.txt", full, **opts)

    def stop_at_7(p):
        if p.step == 7:
            raise RuntimeError("enough")

    with pytest.raises(RuntimeError, match="enough"):
        qkv.train_lm(data_dir / "text.txt", cut, progress=stop_at_7, **opts)
    qkv.train_lm(out=cut, resume=True, threads=1)
    assert same_file(full / "model.safetensors", cut / "model.safetensors")
    with pytest.raises(ValueError, match="steps or minutes"):
        qkv.train_lm(data_dir / "text.txt", tmp_path / "x")


def test_the_command_resumes_a_python_run_and_back(data_dir, tmp_path):
    full, a, b = tmp_path / "full", tmp_path / "a", tmp_path / "b"
    run_qkv("train", "--data", data_dir / "pairs.tsv", "--out", full, "--epochs", 3,
            "--min-freq", 1, "--batch", 32, "--threads", 1, "--quiet")

    def stop_at_4(p):
        if p.step == 4:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        qkv.train(data_dir / "pairs.tsv", a, progress=stop_at_4, **SMALL)
    run_qkv("train", "--out", a, "--resume", "--threads", 1, "--quiet")
    assert same_file(full / "model.safetensors", a / "model.safetensors")
    run_qkv("train", "--data", data_dir / "pairs.tsv", "--out", b, "--epochs", 3, "--min-freq",
            1, "--batch", 32, "--threads", 1, "--stop-after-steps", 9, "--quiet")
    qkv.train(out=b, resume=True, threads=1)
    assert same_file(full / "model.safetensors", b / "model.safetensors")
