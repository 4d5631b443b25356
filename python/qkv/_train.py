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
import fcntl
import json
import math
import os
import shutil
import struct
import sys

from . import _qkv

# (option, default, type, fixed): type is int, float, str, bool or "seed"; fixed options
# define the model or the data and cannot change when a run is resumed.
_TRAIN_MODEL = [  # recorded in config.json
    ("d_model", 32, int, 1), ("heads", 4, int, 1), ("ffn", 64, int, 1),
    ("enc_layers", 2, int, 1), ("dec_layers", 2, int, 1), ("dropout", 0.1, float, 1),
    ("max_len", 1000, int, 1), ("bias", False, bool, 1), ("pre_norm", False, bool, 1),
    ("final_norm", False, bool, 1), ("act", "relu", str, 1), ("tie", "none", str, 1),
    ("learned_pos", False, bool, 1),
]
_TRAIN_RUN = [  # recorded in train.json
    ("data", None, str, 1), ("tgt", None, str, 1), ("num_steps", 10, int, 1),
    ("num_examples", 0, int, 1), ("min_freq", 2, int, 1), ("tokenizer", "word", str, 1),
    ("vocab_size", 8000, int, 1), ("joint_bpe", False, bool, 1), ("spm_type", "unigram", str, 1),
    ("batch", 64, int, 1), ("batch_tokens", 0, int, 1), ("seed", 0, "seed", 1),
    ("valid", None, str, 1), ("valid_src", None, str, 1), ("valid_tgt", None, str, 1),
    ("valid_bleu", True, bool, 1),
    ("epochs", 200, int, 0), ("schedule", "constant", str, 0), ("lr", 0.005, float, 0),
    ("warmup", 4000, int, 0), ("lr_factor", 1.0, float, 0), ("beta1", 0.9, float, 0),
    ("beta2", 0.999, float, 0), ("adam_eps", 1e-8, float, 0), ("weight_decay", 0.0, float, 0),
    ("clip", 1.0, float, 0), ("label_smoothing", 0.0, float, 0), ("loss", "token", str, 0),
    ("patience", 0, int, 0), ("keep_epochs", 0, int, 0), ("minutes", 0.0, float, 0),
    ("checkpoint_every", 0, int, 0), ("skip_nonfinite", False, bool, 0),
    ("precision", "fp32", str, 0),
]
_TRAIN_OTHER = [  # not recorded: how this process runs
    ("layers", None, int, 0), ("threads", 0, int, 0), ("stop_after_steps", 0, int, 0),
]
_CHOICES = {"tokenizer": ("word", "bpe", "spm"), "spm_type": ("unigram", "bpe"),
            "act": ("relu", "gelu", "silu"), "tie": ("none", "output", "all"),
            "schedule": ("constant", "noam"), "loss": ("token", "d2l"),
            "precision": ("fp32", "bf16"), "vocab": ("char", "byte"),
            "attention": ("softmax", "linear")}

_LM_MODEL = [
    ("d_model", 128, int, 1), ("heads", 4, int, 1), ("ffn", 512, int, 1), ("layers", 4, int, 1),
    ("dropout", 0.1, float, 1), ("pre_norm", False, bool, 1), ("tie", False, bool, 1),
    ("act", "relu", str, 1), ("learned_pos", False, bool, 1), ("no_bias", False, bool, 1),
    ("attention", "softmax", str, 1),
]
_LM_RUN = [
    ("data", None, str, 1), ("vocab", "char", str, 1), ("val_fraction", 0.1, float, 1),
    ("context", 128, int, 1), ("batch", 32, int, 1), ("seed", 0, "seed", 1),
    ("steps", 0, int, 0), ("minutes", 0.0, float, 0), ("lr", 1e-3, float, 0),
    ("warmup", 100, int, 0), ("cosine", False, bool, 0), ("beta2", 0.99, float, 0),
    ("weight_decay", 0.0, float, 0), ("clip", 1.0, float, 0), ("eval_every", 500, int, 0),
    ("eval_tokens", 32768, int, 0), ("log_every", 50, int, 0), ("precision", "fp32", str, 0),
]
_LM_OTHER = [("threads", 0, int, 0), ("stop_after_steps", 0, int, 0)]
# train.json keys that no option sets (skipped when it is read as a config)
_RECORD_ONLY = {"history", "train_tokens", "val_tokens"}
# the run's files, removed by overwrite (the command's names: src/cli/run_dir.c)
_RUN_FILES = {
    "qkv-transformer": ("config.json", "model.safetensors", "checkpoint.safetensors",
                        "train.json", "metrics.jsonl", "validation.json", "src_vocab.txt",
                        "tgt_vocab.txt", "src_bpe.txt", "tgt_bpe.txt", "source.spm",
                        "target.spm", "text.json", "training.png"),
    "qkv-lm": ("config.json", "model.safetensors", "checkpoint.safetensors", "train.json",
               "metrics.jsonl", "vocab.txt", "training.png"),
}


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


def _check(name, value, kind):
    if value is None:
        return None
    if kind is bool:
        if not isinstance(value, bool):
            raise TypeError(f"{name} must be bool, not {type(value).__name__}")
    elif kind in (int, "seed"):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be int, not {type(value).__name__}")
        high = 2**64 - 1 if kind == "seed" else 2**31 - 1
        if not 0 <= value <= high:
            raise ValueError(f"{name} must be in [0, {high}], got {value}")
    elif kind is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"{name} must be a number, not {type(value).__name__}")
        value = float(value)
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"{name} must be a finite number >= 0, got {value}")
    elif kind is str:
        if not isinstance(value, (str, os.PathLike)):
            raise TypeError(f"{name} must be str, not {type(value).__name__}")
        value = os.fspath(value)
        if name in _CHOICES and value not in _CHOICES[name]:
            raise ValueError(f"{name} must be one of {', '.join(_CHOICES[name])}, got {value!r}")
    return value


def _config_options(config, table, command):
    """The options a config (a dict or a JSON file's path) gives, as --config reads it."""
    if config is None:
        return {}
    if isinstance(config, (str, os.PathLike)):
        with open(config, encoding="utf-8") as f:
            try:
                config = json.load(f)
            except json.JSONDecodeError as e:
                raise ValueError(f"{os.fspath(config)}: not JSON: {e}") from None
    if not isinstance(config, dict):
        raise TypeError("config must be a dict of options or the path of a JSON object")
    names = {t[0] for t in table}
    out = {}
    for key, value in config.items():
        name = key.replace("-", "_")
        if name in _RECORD_ONLY:
            continue
        if command == "train" and name == "no_bleu":
            name, value = "valid_bleu", not value
        if command == "train_lm" and name == "bias":
            name, value = "no_bias", not value
        if name not in names:
            raise ValueError(f"config: unknown option {key!r} for qkv.{command}")
        out[name] = value
    return out


def _checkpoint_step(path):
    """The step a checkpoint recorded (safetensors metadata "step")."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(min(n, 1 << 26)))
    return int(header.get("__metadata__", {}).get("step", 0))


def _read_json(path):
    try:
        with open(path, encoding="utf-8") as f:
            d = json.load(f)
    except (OSError, ValueError) as e:
        raise _qkv.FileError(f"resume: {path}: {e}") from None
    if not isinstance(d, dict):
        raise _qkv.FormatError(f"resume: {path}: not a JSON object")
    return d


def _same(a, b):
    if isinstance(a, float) or isinstance(b, float):
        try:
            return f"{float(a):.7g}" == f"{float(b):.7g}"
        except (TypeError, ValueError):
            return False
    return a == b


class _RunDir:
    """The command's claim on a run directory: a lock, and what may be written over."""

    def __init__(self, out, fmt, resume, overwrite):
        if resume and overwrite:
            raise ValueError("resume continues the run in out, overwrite replaces it: give one")
        self.out, self.fd = out, None
        os.makedirs(out, exist_ok=True)
        self.fd = os.open(os.path.join(out, ".qkv.lock"), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW,
                          0o644)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self.fd)
            holder = open(os.path.join(out, ".qkv.lock"), errors="replace").read().strip()
            raise _qkv.FileError(f"{out} is in use by another run ({holder or 'unknown'})") \
                from None
        os.ftruncate(self.fd, 0)
        os.write(self.fd, f"{os.getpid()} python {' '.join(sys.argv)}\n".encode())
        config = os.path.join(out, "config.json")
        if os.path.exists(config):
            try:
                found = json.load(open(config, encoding="utf-8")).get("format")
            except (OSError, ValueError, AttributeError):
                found = None
            if found != fmt and not overwrite:
                self.release()
                raise _qkv.FileError(f"{out} holds another kind of model ({found}); "
                                     "overwrite=True replaces it")
        has_ckpt = os.path.exists(os.path.join(out, "checkpoint.safetensors"))
        has_model = os.path.exists(os.path.join(out, "model.safetensors"))
        if resume and not has_ckpt:
            self.release()
            raise _qkv.FileError(f"{out}: no checkpoint.safetensors to resume from")
        if not resume and (has_ckpt or has_model):
            if not overwrite:
                self.release()
                raise _qkv.FileError(f"{out} already holds a {'trained model' if has_model else 'run'}"
                                     "; resume=True continues it, overwrite=True replaces it")
        if overwrite or (not resume and not has_ckpt):
            for name in _RUN_FILES[fmt]:
                p = os.path.join(out, name)
                if os.path.lexists(p):
                    os.remove(p)
            for name in os.listdir(out):
                p = os.path.join(out, name)
                if (name == "best" or name.startswith("epoch-")) and os.path.isdir(p) and \
                        not os.path.islink(p):
                    shutil.rmtree(p)

    def release(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _options(command, args, config, model_table, run_table, other_table, out, resume):
    """Every option of the run: the defaults, or a resumed run's record, then config, then the
    arguments; and, resuming, the history entry of what changed."""
    table = model_table + run_table + other_table
    kinds = {t[0]: t[2] for t in table}
    given = _config_options(config, table, command)
    if command == "train" and "tgt" in given and "data" in given and "src" not in args:
        given["src"] = given.pop("data")  # an aligned run records its --src as "data"
    for k, v in args.items():
        if v is not None:
            given[k] = v
    if command == "train" and "src" in given:
        given["data"] = given.pop("src")
    for k in list(given):
        if k not in kinds:
            raise TypeError(f"qkv.{command}() got an unknown option {k!r}")
        given[k] = _check(k, given[k], kinds[k])
    opts = {t[0]: t[1] for t in table}
    history = None
    if resume:
        cfg = _read_json(os.path.join(out, "config.json"))
        rec = _read_json(os.path.join(out, "train.json"))
        step = _checkpoint_step(os.path.join(out, "checkpoint.safetensors"))
        recorded = {}
        for name, _, kind, _ in model_table:
            key = "bias" if name == "no_bias" else name
            if key in cfg:
                v = cfg[key]
                recorded[name] = (not v) if name == "no_bias" else v
        if command == "train_lm" and "max_len" in cfg:
            recorded["context"] = cfg["max_len"]
        if command == "train_lm" and "final_norm" in cfg:
            recorded["pre_norm"] = cfg["pre_norm"]
        for name, _, kind, _ in run_table:
            if name in rec:
                recorded[name] = rec[name]
        opts.update(recorded)
        changed = {}
        for name, _, kind, fixed in model_table + run_table:
            if name not in given or name not in recorded or _same(given[name], recorded[name]):
                continue
            if fixed:
                raise ValueError(f"{name}={given[name]!r} differs from this run's "
                                 f"{recorded[name]!r} ({out}): a resumed run keeps the options "
                                 "that define its model and data; start a new run (another "
                                 "out, or overwrite=True) to change it")
            changed[name] = {"was": recorded[name], "now": given[name]}
        entry = {"resumed_at_step": step}
        if changed:
            entry["changed"] = changed
        history = list(rec.get("history", [])) + [entry]
    opts.update(given)
    return opts, history


def _write_json(path, d):
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(d, f, indent="\t")
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _progress_hook(progress):
    if progress is None:
        return None
    if not callable(progress):
        raise TypeError("progress must be callable (it is called with a Progress after each "
                        "step) or None")
    return lambda d: progress(Progress(d))


def _check_train(opts, options, resume):
    if not opts["data"]:
        raise ValueError("train() needs data (a TSV file of pairs), or src with tgt")
    if (opts.get("valid_src") is None) != (opts.get("valid_tgt") is None) or \
            (opts.get("valid") and opts.get("valid_src")):
        raise ValueError("validation is valid (a TSV file) or valid_src with valid_tgt")
    if opts["layers"] is not None and not resume:
        opts["enc_layers"] = options.get("enc_layers", opts["layers"])
        opts["dec_layers"] = options.get("dec_layers", opts["layers"])
    if not 2 <= opts["num_steps"] <= opts["max_len"]:
        raise ValueError("num_steps must be in [2, max_len]")


def _check_lm(opts):
    if not opts["data"]:
        raise ValueError("train_lm() needs data, a text file")
    if opts["steps"] == 0 and opts["minutes"] == 0:
        raise ValueError("train_lm() needs steps or minutes (or both)")
    if opts["context"] < 2 or not 0 <= opts["val_fraction"] < 1:
        raise ValueError("train_lm() needs a context of at least 2 and a val_fraction in [0, 1)")


def train(data=None, out=None, *, src=None, tgt=None, config=None, progress=None,
          resume=False, overwrite=False, **options):
    """Trains an encoder-decoder Transformer on a parallel corpus as `qkv train` does and
    returns the model directory (out), ready for qkv.Translator.

    data: sentence pairs, source<TAB>target a line (d2l's fra.txt); or src and tgt, two
    line-aligned files. options: `qkv train`'s, with underscores (d_model=256, heads=8,
    layers=3, epochs=10, batch_tokens=4096, schedule="noam", tokenizer="spm",
    vocab_size=8000, valid="valid.tsv", precision="bf16", threads=2, ...) and its defaults
    (d2l's model and recipe). config: a dict or a JSON file of options, as --config; what
    the arguments give wins. progress: called with a Progress after every step. resume:
    continue the run in out; overwrite: replace what out holds.
    """
    if out is None:
        raise TypeError("train() needs out, the model directory to write")
    out = os.fspath(out)
    args = dict(options, data=data, src=src, tgt=tgt)
    hook = _progress_hook(progress)
    if resume and overwrite:
        raise ValueError("resume continues the run in out, overwrite replaces it: give one")
    # a resumed run claims its directory first (it reads it); a new one once its options hold
    run_dir = _RunDir(out, "qkv-transformer", True, False) if resume else None
    try:
        opts, history = _options("train", args, config, _TRAIN_MODEL, _TRAIN_RUN,
                                 _TRAIN_OTHER, out, resume)
        _check_train(opts, options, resume)
    except BaseException:
        if run_dir:
            run_dir.release()
        raise
    run_dir = run_dir or _RunDir(out, "qkv-transformer", False, overwrite)
    record = {k: opts[k] for k, *_ in _TRAIN_RUN if opts.get(k) is not None}
    if opts["tokenizer"] == "word":
        for k in ("vocab_size", "joint_bpe", "spm_type"):
            record.pop(k, None)
    elif opts["tokenizer"] == "bpe":
        record.pop("spm_type", None)
    if not (opts.get("valid") or opts.get("valid_src")):
        for k in ("valid_bleu", "patience"):
            record.pop(k, None)
    if history:
        record["history"] = history

    def ready(info):
        _write_json(os.path.join(out, "train.json"), record)

    spec = dict(opts, out=out, resume=int(bool(resume)))
    for k in ("enc_layers", "dec_layers"):
        spec[k] = opts[k]
    for k, v in list(spec.items()):
        if isinstance(v, bool):
            spec[k] = int(v)
    try:
        _qkv.train_transformer(spec, hook, ready)
    finally:
        run_dir.release()
    return out


def train_lm(data=None, out=None, *, config=None, progress=None, resume=False,
             overwrite=False, **options):
    """Trains a decoder-only language model on a text file as `qkv train-lm` does (its last
    val_fraction held out) and returns the model directory (out), ready for qkv.Generator.

    options: `qkv train-lm`'s with underscores (steps=2000 or minutes=10, context=128,
    d_model=128, layers=4, vocab="byte", attention="linear", precision="bf16", ...) and its
    defaults. config, progress, resume, overwrite as qkv.train's.
    """
    if out is None:
        raise TypeError("train_lm() needs out, the model directory to write")
    out = os.fspath(out)
    hook = _progress_hook(progress)
    if resume and overwrite:
        raise ValueError("resume continues the run in out, overwrite replaces it: give one")
    run_dir = _RunDir(out, "qkv-lm", True, False) if resume else None
    try:
        opts, history = _options("train_lm", dict(options, data=data), config, _LM_MODEL,
                                 _LM_RUN, _LM_OTHER, out, resume)
        _check_lm(opts)
    except BaseException:
        if run_dir:
            run_dir.release()
        raise
    run_dir = run_dir or _RunDir(out, "qkv-lm", False, overwrite)

    def ready(info):
        record = {"data": opts["data"], "vocab": opts["vocab"], "context": opts["context"],
                  "batch": opts["batch"], "val_fraction": round(opts["val_fraction"] * 1e6) / 1e6,
                  "train_tokens": info["train_tokens"], "val_tokens": info["val_tokens"]}
        record.update({k: opts[k] for k, *_ in _LM_RUN if k not in record})
        if history:
            record["history"] = history
        _write_json(os.path.join(out, "train.json"), record)

    spec = dict(opts, out=out, resume=int(bool(resume)))
    for k, v in list(spec.items()):
        if isinstance(v, bool):
            spec[k] = int(v)
    try:
        _qkv.train_lm(spec, hook, ready)
    finally:
        run_dir.release()
    return out
