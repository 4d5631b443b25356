#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""tools/torch2qkv.py on inputs that are not what it expects: each must fail with a clear
message (no traceback) and write nothing; the variants it accepts (CRLF vocabularies, a
DataParallel "module." prefix, a checkpoint dict) must give the very files of the reference
conversion. Run by tests/e2e/test_torch2qkv.sh:

    /usr/bin/python3 tests/e2e/torch2qkv_errors.py PARITY_DIR/t2q TMPDIR

PARITY_DIR/t2q holds model.pt, vocab.src.txt, vocab.tgt.txt and qkv_model/ as
tests/parity/make_torch2qkv_reference.py wrote them. Prints "ok   NAME" or "FAIL NAME: why"
per case.
"""
import contextlib
import filecmp
import io
import os
import re
import shutil
import sys
import traceback

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))
import torch2qkv  # noqa: E402

REF, TMP = sys.argv[1], sys.argv[2]
GOOD_SD = torch.load(os.path.join(REF, "model.pt"), map_location="cpu")
SRC_VOCAB = open(os.path.join(REF, "vocab.src.txt"), encoding="utf-8").read().splitlines()
TGT_VOCAB = open(os.path.join(REF, "vocab.tgt.txt"), encoding="utf-8").read().splitlines()
counter = [0]


def path(name):
    counter[0] += 1
    return os.path.join(TMP, f"{counter[0]:02d}_{name}")


def save_sd(sd):
    p = path("model.pt")
    torch.save(sd, p)
    return p


def save_text(text, binary=False):
    p = path("vocab.txt")
    with open(p, "wb") as f:
        f.write(text if binary else text.encode("utf-8"))
    return p


def vocab_text(tokens, eol="\n"):
    return "".join(t + eol for t in tokens)


def run(state_dict=None, heads="4", src=None, tgt=None, extra=(), out=None):
    """torch2qkv.main on these inputs (the reference ones where None): (status, stderr, out)."""
    out = out or path("out")
    argv = [state_dict or os.path.join(REF, "model.pt"), "--heads", heads,
            "--src-vocab", src or os.path.join(REF, "vocab.src.txt"),
            "--tgt-vocab", tgt or os.path.join(REF, "vocab.tgt.txt"), "--out", out, *extra]
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            rc = torch2qkv.main(argv)
        except SystemExit as e:  # argparse
            rc = e.code
        except Exception:  # noqa: BLE001 - an escaped exception is the failure we look for
            rc = "traceback"
            err.write(traceback.format_exc())
    return rc, err.getvalue(), out


def listing(d):
    """{file: bytes} of a directory, None if it does not exist."""
    if not os.path.isdir(d):
        return None
    return {f: open(os.path.join(d, f), "rb").read() for f in sorted(os.listdir(d))}


def expect_error(name, pattern, **kw):
    before = listing(kw["out"]) if "out" in kw else None
    rc, err, out = run(**kw)
    if rc == "traceback" or "Traceback" in err:
        print(f"FAIL {name}: traceback instead of a message:\n{err}")
    elif rc in (0, None):
        print(f"FAIL {name}: accepted")
    elif not re.search(pattern, err):
        print(f"FAIL {name}: message {err.strip()!r} does not match {pattern!r}")
    elif listing(out) != before:
        print(f"FAIL {name}: {out} was written although the input is bad")
    else:
        print(f"ok   {name}: {err.strip().splitlines()[-1]}")


def expect_same(name, **kw):
    """Converts and compares every file with the reference conversion."""
    rc, err, out = run(**kw)
    ref = os.path.join(REF, "qkv_model")
    files = sorted(os.listdir(ref))
    if rc != 0:
        print(f"FAIL {name}: status {rc}: {err.strip()}")
    elif sorted(os.listdir(out)) != files:
        print(f"FAIL {name}: wrote {sorted(os.listdir(out))}, the reference has {files}")
    else:
        differ = [f for f in files if not filecmp.cmp(os.path.join(out, f), os.path.join(ref, f),
                                                      shallow=False)]
        print(f"FAIL {name}: {differ} differ" if differ else f"ok   {name}")


def edited(**changes):
    """The reference state_dict with entries replaced (value) or removed (None)."""
    sd = dict(GOOD_SD)
    for k, v in changes.items():
        if v is None:
            del sd[k]
        else:
            sd[k] = v
    return save_sd(sd)


def main():
    L = "transformer.decoder.layers"
    # not the tutorial's state_dict
    expect_error("missing tensor", r"missing transformer\.decoder\.layers\.1\.norm3\.weight",
                 state_dict=edited(**{f"{L}.1.norm3.weight": None}))
    expect_error("unexpected tensor", r"unexpected transformer\.decoder\.layers\.0\.extra\.weight",
                 state_dict=edited(**{f"{L}.0.extra.weight": torch.zeros(3)}))
    expect_error("missing layer in the middle", r"missing transformer\.encoder\.layers\.0\.",
                 state_dict=save_sd({k: v for k, v in GOOD_SD.items()
                                     if not k.startswith("transformer.encoder.layers.0.")}))
    expect_error("transposed FFN weight",
                 r"'transformer\.encoder\.layers\.1\.linear2\.weight' has shape \(64, 32\), "
                 r"expected \(32, 64\)",
                 state_dict=edited(**{"transformer.encoder.layers.1.linear2.weight":
                                      GOOD_SD["transformer.encoder.layers.1.linear2.weight"].t()}))
    expect_error("generator of another vocabulary",
                 r"'generator\.weight' has shape \(34, 32\), expected \(35, 32\)",
                 state_dict=edited(**{"generator.weight": GOOD_SD["generator.weight"][:-1]}))
    expect_error("attention of another width", r"in_proj_weight' has shape \(96, 16\)",
                 state_dict=edited(**{f"{L}.1.multihead_attn.in_proj_weight": torch.zeros(96, 16)}))
    expect_error("not the sinusoidal table", r"not the sinusoidal table",
                 state_dict=edited(**{"positional_encoding.pos_embedding":
                                      GOOD_SD["positional_encoding.pos_embedding"] * 1.01}))
    expect_error("NaN in a weight", r"'transformer\.encoder\.norm\.bias' holds a NaN",
                 state_dict=edited(**{"transformer.encoder.norm.bias":
                                      torch.full((32,), float("nan"))}))
    expect_error("integer tensor", r"dtype torch\.int64",
                 state_dict=edited(**{"generator.bias": torch.zeros(35, dtype=torch.long)}))
    expect_error("a list, not a state_dict", r"holds a list, not a state_dict",
                 state_dict=save_sd([1, 2, 3]))
    expect_error("not a torch file", r"not a file written by torch\.save",
                 state_dict=save_text("hello\n"))
    expect_error("no such file", r"no such file", state_dict=os.path.join(TMP, "absent.pt"))
    # heads
    expect_error("heads not dividing d_model", r"--heads 5 does not divide emb_size 32",
                 heads="5")
    expect_error("zero heads", r"--heads 0 does not divide", heads="0")
    expect_error("max_len below 2", r"--max-len 1", extra=("--max-len", "1"))
    # vocabularies
    expect_error("source vocabulary one short",
                 r"29 tokens, but the model's source embedding \(src_tok_emb\) has 30 rows",
                 src=save_text(vocab_text(SRC_VOCAB[:-1])))
    expect_error("target vocabulary one long",
                 r"36 tokens, but the model's target embedding \(tgt_tok_emb\) has 35 rows",
                 tgt=save_text(vocab_text(TGT_VOCAB + ["extra"])))
    expect_error("specials out of order", r":2: expected '<pad>'.*found '<bos>'",
                 tgt=save_text(vocab_text([TGT_VOCAB[0], TGT_VOCAB[2], TGT_VOCAB[1]]
                                          + TGT_VOCAB[3:])))
    expect_error("no specials", r":1: expected '<unk>'",
                 src=save_text(vocab_text(SRC_VOCAB[4:] + SRC_VOCAB[:4])))
    expect_error("duplicate token", r":30: duplicate token 'Hund' \(first on line 6\)",
                 src=save_text(vocab_text(SRC_VOCAB[:-1] + ["Hund"])))
    expect_error("empty line", r":7: empty line",
                 src=save_text(vocab_text(SRC_VOCAB[:6] + [""] + SRC_VOCAB[7:])))
    expect_error("invalid UTF-8", r":6: invalid UTF-8",
                 src=save_text(vocab_text(SRC_VOCAB).encode().replace(b"Hund", b"H\xffnd"),
                               binary=True))
    expect_error("missing vocabulary file", r"absent\.txt: No such file",
                 src=os.path.join(TMP, "absent.txt"))
    # the output directory
    other = path("trained_model")
    os.makedirs(other)
    with open(os.path.join(other, "train.json"), "w") as f:
        f.write('{"num_steps": 10}\n')
    expect_error("output directory of another model",
                 r"holds files of another model \(train\.json\); convert into a new or empty",
                 out=other)
    expect_error("output path is a file", r"exists and is not a directory",
                 out=save_text("not a directory\n"))
    again = path("earlier_conversion")
    shutil.copytree(os.path.join(REF, "qkv_model"), again)
    with open(os.path.join(again, "config.json"), "w") as f:
        f.write("{}\n")
    expect_same("over an earlier conversion", out=again)
    # variants that are the same model
    expect_same("CRLF vocabularies", src=save_text(vocab_text(SRC_VOCAB, "\r\n")),
                tgt=save_text(vocab_text(TGT_VOCAB, "\r\n")))
    expect_same("nn.DataParallel prefix",
                state_dict=save_sd({"module." + k: v for k, v in GOOD_SD.items()}))
    expect_same("checkpoint dict", state_dict=save_sd({"epoch": 18, "model_state_dict": GOOD_SD,
                                                       "optimizer_state_dict": {}}))
    expect_same("float64 weights", state_dict=save_sd({k: v.double() for k, v in GOOD_SD.items()}))


if __name__ == "__main__":
    main()
