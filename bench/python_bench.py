#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Translator.translate_batch beside `qkv translate` on the same sentences (make bench-python).

The Python package should add nothing but the call: both sides run the same library on the same
model, sentences, batch size, beam and threads. The command's time is its translation alone:
the wall time of `qkv translate --input FILE` over the sentences less that over one sentence
(process start, model load). Python's is the wall time of translate_batch in a fresh interpreter
with the model loaded. The two alternate, REPS times each; the report gives each side's median
and the ratio python / command (1.00: the same; the goal is within 5%).

    python3 bench/python_bench.py --qkv build/qkv [--model DIR] [--sentences N] [--batch 32]
        [--beam 1] [--threads 0] [--reps 5] [--python PYTHON]

--model: a qkv model directory (default: d2l's English-French model trained here once into
build/bench-python/model, 40 seconds); the sentences are fra.txt's English side
(../shared/data/fra-eng, or QKV_DATA_DIR). --python: an interpreter where `import qkv` works
(default: this one; `pip install ./python` first). Run it as the README's Speed section says:
`flock /work/cpu.lock`, on a quiet machine, with OPENBLAS_CORETYPE=Haswell exported and unset.
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PY_SIDE = r"""
import json, sys, time
import qkv
model, path, batch, beam, threads = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
lines = [l.rstrip("\n") for l in open(path, encoding="utf-8")]
t = qkv.Translator(model, threads=threads)
t0 = time.perf_counter()
r = t.translate_batch(lines, beam_size=beam, max_batch_size=batch)
dt = time.perf_counter() - t0
print(json.dumps({"seconds": dt, "first": r[0].hypotheses[0] if r[0].hypotheses else ""}))
"""


def cli_seconds(qkv, model, path, batch, beam, threads):
    cmd = [qkv, "translate", "--model", model, "--input", path, "--batch", str(batch),
           "--beam", str(beam), "--threads", str(threads)]
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return time.perf_counter() - t0, out.splitlines()


def python_seconds(python, model, path, batch, beam, threads):
    out = subprocess.run([python, "-c", PY_SIDE, model, path, str(batch), str(beam),
                          str(threads)], capture_output=True, text=True, check=True,
                         cwd="/tmp").stdout
    return json.loads(out)


def cpu_model():
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--qkv", default=os.path.join(ROOT, "build", "qkv"))
    ap.add_argument("--model")
    ap.add_argument("--sentences", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--beam", type=int, default=1)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--python", default=sys.executable)
    args = ap.parse_args()

    data = os.path.join(os.environ.get("QKV_DATA_DIR", os.path.join(ROOT, "..", "shared", "data")),
                        "fra-eng", "fra.txt")
    work = os.path.join(ROOT, "build", "bench-python")
    os.makedirs(work, exist_ok=True)
    model = args.model or os.path.join(work, "model")
    if not args.model and not os.path.exists(os.path.join(model, "model.safetensors")):
        print("training d2l's English-French model once (about 40 s)", file=sys.stderr)
        subprocess.run([args.qkv, "train", "--data", data, "--num-examples", "601", "--out",
                        model, "--epochs", "200", "--loss", "d2l", "--quiet", "--overwrite"],
                       check=True)
    lines = []
    for line in open(data, encoding="utf-8"):
        lines.append(line.split("\t")[0])
        if len(lines) == args.sentences:
            break
    many, one = os.path.join(work, "many.txt"), os.path.join(work, "one.txt")
    open(many, "w", encoding="utf-8").write("\n".join(lines) + "\n")
    open(one, "w", encoding="utf-8").write(lines[0] + "\n")

    opts = (args.batch, args.beam, args.threads)
    cli, py = [], []
    same = True
    for rep in range(args.reps):  # alternating, so that a change of load falls on both
        total, out = cli_seconds(args.qkv, model, many, *opts)
        start, _ = cli_seconds(args.qkv, model, one, *opts)
        cli.append(total - start)
        r = python_seconds(args.python, model, many, *opts)
        py.append(r["seconds"])
        same &= r["first"] == out[0]
    c, p = statistics.median(cli), statistics.median(py)
    print(f"date: {time.strftime('%Y-%m-%d %H:%M')}, cpu: {cpu_model()}, "
          f"load: {os.getloadavg()[0]:.2f}, OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}")
    print(f"{len(lines)} sentences, batch {args.batch}, beam {args.beam}, threads "
          f"{args.threads or 'all'}, {args.reps} alternating repetitions")
    print(f"qkv translate (less start and load): median {c:.3f} s  [{', '.join(f'{x:.3f}' for x in cli)}]")
    print(f"Translator.translate_batch:           median {p:.3f} s  [{', '.join(f'{x:.3f}' for x in py)}]")
    print(f"python / command: {p / c:.3f}   (same first translation: {same})")


if __name__ == "__main__":
    main()
