# SPDX-License-Identifier: MIT
"""qkv.train and qkv.train_lm: `qkv train` and `qkv train-lm` from Python.

The options are the command's, spelled with underscores (d_model for --d-model), with its
defaults; `config` takes what `--config` takes (a dict, or the path of a JSON object, such as a
run's train.json). The run directory follows the command's rules: a new run refuses a
directory that holds a trained model or a run's checkpoint (overwrite=True replaces it), and
resume=True continues the run there from its checkpoint with the options it recorded, of which
those that define the model or the data cannot change (the others may: the change is kept in
train.json's "history"). A lock on the directory (.qkv.lock, the command's) keeps a second run
out. Ctrl-C (KeyboardInterrupt) or an exception from the progress callback stops training at
the next step, with a checkpoint that resume=True continues from, and is then raised.
"""
import math
import os
import sys
import warnings

from . import _qkv

# The options of each kind of run come from the library (the table `qkv train` and
# `qkv train-lm` parse): (name, type, choices, record key or None, fixed).
_KINDS = {"train": "train", "train_lm": "train_lm"}
# not the run's: how this process runs it
_OWN = {"threads"}
# train.json keys that no option sets (skipped when it is read as a config)
_RECORD_ONLY = {"history", "train_tokens", "val_tokens"}


def _table(command):
    """{name or record key: (option name, type, choices, inverted)} of a kind of run."""
    out = {}
    for name, kind, choices, key, _ in _qkv.run_options(command):
        out[name] = (name, kind, choices, False)
        if key:
            inverted = key.startswith("!")
            out.setdefault(key.lstrip("!"), (name, kind, choices, inverted))
    return out


class Progress:
    """Where training stands after a step, as the progress callback receives it: for qkv.train
    epoch, epochs, batch, batches, step, loss (per token, this epoch), d2l_loss, tokens_per_s,
    grad_norm, lr, end_of_epoch, and after a validation validated, val_loss, bleu, sacrebleu,
    chrf, best, stopping; for qkv.train_lm step, steps, epoch, loss, val_loss (NaN unless
    evaluated at this step), tokens_per_s, grad_norm, lr, elapsed_s, report."""

    def __init__(self, d):
        self.__dict__.update(d)

    def __repr__(self):
        return "Progress(" + ", ".join(f"{k}={v!r}" for k, v in self.__dict__.items()) + ")"


def _check(name, value, kind, choices):
    """value checked for the option's Python type (the library checks its range)."""
    if value is None:
        if kind not in ("path", "str"):
            raise TypeError(f"{name} cannot be None")
        return None
    if kind == "bool":
        if not isinstance(value, bool):
            raise TypeError(f"{name} must be bool, not {type(value).__name__}")
    elif kind in ("int", "seed"):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be int, not {type(value).__name__}")
        high = 2**64 - 1 if kind == "seed" else 2**31 - 1
        if not -2**31 <= value <= high:
            raise ValueError(f"{name} must be in [0, {high}], got {value}")
    elif kind == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"{name} must be a number, not {type(value).__name__}")
        value = float(value)
        if not math.isfinite(value):
            raise ValueError(f"{name} must be a finite number, got {value}")
    else:
        if not isinstance(value, (str, os.PathLike)):
            raise TypeError(f"{name} must be str, not {type(value).__name__}")
        value = os.fspath(value)
        if kind == "choice" and value not in choices:
            raise ValueError(f"{name} must be one of {', '.join(choices)}, got {value!r}")
    return value


def _config_items(config, command):
    """The (key, value) pairs a config (a dict or a JSON file's path) gives, as --config reads
    it: a key is an option's name or the key its run records it under."""
    if config is None:
        return []
    if isinstance(config, (str, os.PathLike)):
        import json
        with open(config, encoding="utf-8") as f:
            try:
                config = json.load(f)
            except json.JSONDecodeError as e:
                raise ValueError(f"{os.fspath(config)}: not JSON: {e}") from None
    if not isinstance(config, dict):
        raise TypeError("config must be a dict of options or the path of a JSON object")
    config = {k: v for k, v in config.items() if k not in _RECORD_ONLY}
    if command == "train" and "tgt" in config and "data" in config and "src" not in config:
        config["src"] = config.pop("data")  # an older run recorded its --src as "data"
    table = _table(command)
    for key in config:
        if key.replace("-", "_") not in table:
            raise ValueError(f"config: unknown option {key!r} for qkv.{command}")
    return [(k.replace("-", "_"), v) for k, v in config.items()]


def _progress_hook(progress):
    if progress is None:
        return None
    if not callable(progress):
        raise TypeError("progress must be callable (it is called with a Progress after each "
                        "step) or None")
    return lambda d: progress(Progress(d))


def _notice(text):
    warnings.warn(text[len("warning: "):] if text.startswith("warning: ") else text,
                  RuntimeWarning, stacklevel=3)


def _run(command, out, items, config, progress, resume, overwrite):
    if out is None:
        raise TypeError(f"{command}() needs out, the model directory to write")
    out = os.fspath(out)
    if resume and overwrite:
        raise ValueError("resume continues the run in out, overwrite replaces it: give one")
    hook = _progress_hook(progress)
    table = _table(command)
    threads = 0
    options = []
    for key, value in _config_items(config, command) + items:
        if key in _OWN:
            threads = _check(key, value, "int", ())
            continue
        if key not in table:
            raise TypeError(f"qkv.{command}() got an unknown option {key!r}")
        name, kind, choices, _ = table[key]
        options.append((key, _check(key, value, kind, choices)))
    if threads < 0:
        raise ValueError(f"threads must be >= 0, got {threads}")
    # a preset sets its values first; the options given win over them
    options.sort(key=lambda kv: kv[0] != "preset")
    holder = "python " + " ".join(sys.argv)
    _qkv.run(_KINDS[command], out, options, bool(resume), bool(overwrite), hook, _notice,
             holder, threads)
    return out


def train(data=None, out=None, *, src=None, tgt=None, config=None, progress=None,
          resume=False, overwrite=False, **options):
    """Trains an encoder-decoder Transformer on a parallel corpus as `qkv train` does and
    returns the model directory (out), ready for qkv.Translator.

    data: sentence pairs, source<TAB>target a line (d2l's fra.txt); or src and tgt, two
    line-aligned files. options: `qkv train`'s, with underscores (d_model=256, heads=8,
    layers=3, epochs=10, batch_tokens=4096, schedule="noam", tokenizer="spm",
    vocab_size=8000, valid="valid.tsv", precision="bf16", threads=2, ...) and its defaults
    (d2l's model and recipe); preset="transformer-base", "transformer-big" or "d2l" sets the
    paper's (or d2l's) hyper-parameters first, which the options given override (a warning lists
    them); a name train.json records an option under works too
    (num_steps for max_tokens, valid_bleu=False for no_bleu). config: a dict or a JSON file of
    options, as --config; what the arguments give wins. progress: called with a Progress
    after every step. resume: continue the run in out, with the options it recorded (those
    that define the model or the data cannot change); overwrite: replace what out holds.
    Warnings of the run (sentences cut to max_tokens, a resumed run's changes) are
    RuntimeWarnings.
    """
    items = [(k, v) for k, v in (("data", data), ("src", src), ("tgt", tgt)) if v is not None]
    items += [(k, v) for k, v in options.items() if v is not None]
    return _run("train", out, items, config, progress, resume, overwrite)


def train_lm(data=None, out=None, *, config=None, progress=None, resume=False,
             overwrite=False, **options):
    """Trains a decoder-only language model on a text file as `qkv train-lm` does (its last
    val_fraction held out) and returns the model directory (out), ready for qkv.Generator.

    options: `qkv train-lm`'s with underscores (steps=2000 or minutes=10, context=128,
    d_model=128, layers=4, vocab="byte", attention="linear", precision="bf16", ...) and its
    defaults. config, progress, resume, overwrite as qkv.train's.
    """
    items = [("data", data)] if data is not None else []
    items += [(k, v) for k, v in options.items() if v is not None]
    return _run("train_lm", out, items, config, progress, resume, overwrite)
