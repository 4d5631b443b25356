#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""qkv translate against CTranslate2 on models this benchmark trains itself, and on random-weight
MarianMT models of OPUS-MT's shapes (`make bench-ct2`).

    python3 bench/ct2_bench.py --qkv build/qkv [--reps 3] [--env both|asis|unset] [--tiny]
        [--models d512,d256,marian-d512,marian-d1024]

Run it with the python3 that has `ctranslate2` and `safetensors` (the Makefile target installs
them with pip when they are missing); only the standard library is imported here, the
converter, tokenizer and CTranslate2 runner are ../shared/ct2's scripts, run as subprocesses.

What it does, in order:
  1. data: the first 18,000 pairs of fra.txt for training; 300 held-out pairs from the lines
     after them (every 10th line, skipping any English sentence that is in the training set or
     already held out), English -> French;
  2. trains the issue's two models (d512 6+6 pre-norm, d256 3+3 pre-norm) for a fixed number of
     epochs with fixed seeds, so every run trains the same models; they are cached in
     build/bench-ct2/models/NAME-KEY, KEY a hash of the options and the training data, so a
     rerun does not retrain;
  3. converts each to CTranslate2 (float32, and int8 weights);
  4. times translation of the held-out English, tokens/s: CTranslate2 float32 and int8, qkv
     fp32 and bf16, and qkv int8 when `qkv translate --help` offers it; greedy and beam 4 at
     batch 1 and 32, 2 threads, engines alternating inside every repetition, medians of
     --reps; each engine's load and start excluded (CTranslate2: its own timer around
     translate_batch; qkv: the full run minus the same command on one sentence, as speed.sh);
     every timed block holds /tmp/qkv-cpu.lock (flock) so that benchmarks on a shared machine
     do not overlap;
  5. with OPENBLAS_CORETYPE as exported and unset (--env both; one pass when it is not set);
  6. quality: sacreBLEU of every engine's greedy and beam-4 output on the held-out set (`qkv
     eval --hyp`), the difference from qkv fp32's, and the share of sentences identical to qkv
     fp32's output;
  7. prints the tables and writes build/bench-ct2/results.json.

The Marian rows (marian-d512: OPUS-MT's shape, d512 6+6, 8 heads, FFN 2048, one vocabulary of
58,101 pieces tied to the output; marian-d1024: d1024 6+6, 16 heads, FFN 4096, the same
vocabulary), each in its own steps:
  1. the model: a Hugging Face MarianMT directory with random weights, built by
     bench/marian_model.py under --hf-python (transformers, torch, sentencepiece: benchmark
     tools only), cached in build/bench-ct2/models/NAME-KEY;
  2. qkv's model: `qkv import marian`; CTranslate2's: its own converter for Hugging Face models
     (ctranslate2.converters.TransformersConverter, what ct2-transformers-converter runs), in
     float32 and int8 (--quantization int8);
  3. the input: the first --marian-sentences (500) lines of Multi30k's German validation set;
     both engines decode to at most --marian-max-len (64) tokens (a random model never ends a
     sentence of its own, so every translation is that long), from the model's <pad>, never
     producing <pad>;
  4. timing as above (CTranslate2 through bench/ct2_marian.py: translate_batch alone; qkv: the
     full run less a run on no input: start and load), every engine once per repetition, greedy and beam 4 at
     batch 1 and 32; the ratio is CTranslate2's best time over qkv's best;
  5. quality: the share of sentences whose greedy and beam-4 output at each precision is
     identical to the same engine's float32 output.
"""
import argparse
import datetime
import fcntl
import hashlib
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The two models of issue 19. Fixed epochs (not minutes) and seeds: the same model every run.
MODELS = {
    "d512": ["--d-model", "512", "--heads", "8", "--ffn", "2048", "--layers", "6", "--pre-norm",
             "--num-steps", "12", "--batch", "64", "--epochs", "1", "--lr", "0.0003", "--seed", "1"],
    "d256": ["--d-model", "256", "--heads", "4", "--ffn", "1024", "--layers", "3", "--pre-norm",
             "--num-steps", "12", "--batch", "64", "--epochs", "3", "--lr", "0.001", "--seed", "1"],
}
TINY = {  # --tiny: the whole pipeline in about a minute (numbers meaningless)
    "tiny": ["--d-model", "64", "--heads", "4", "--ffn", "128", "--layers", "2", "--pre-norm",
             "--num-steps", "10", "--batch", "64", "--epochs", "2", "--lr", "0.005", "--seed", "1"],
}
SETTINGS = [(1, 1), (1, 32), (4, 1), (4, 32)]  # (beam, batch)


def parse_settings(text):
    """--settings: BEAMxBATCH, comma-separated, each one of SETTINGS, in SETTINGS' order."""
    want = set()
    for item in text.split(","):
        try:
            beam, batch = (int(v) for v in item.strip().split("x"))
        except ValueError:
            raise argparse.ArgumentTypeError(f"{item!r}: not BEAMxBATCH (e.g. 4x32)")
        if (beam, batch) not in SETTINGS:
            raise argparse.ArgumentTypeError(f"{item!r}: one of " + ", ".join(f"{a}x{b}" for a, b in SETTINGS))
        want.add((beam, batch))
    return [s for s in SETTINGS if s in want]


def quality_beams(settings):
    """The beams whose batch-32 outputs the quality rows compare."""
    return [beam for beam in (1, 4) if (beam, 32) in settings]
ENGINES = ["ct2 float32", "ct2 int8", "qkv fp32", "qkv bf16", "qkv int8"]
# Random-weight MarianMT models of OPUS-MT's shapes (bench/marian_model.py options).
MARIAN = {
    "marian-d512": ["--d-model", "512", "--ffn", "2048", "--heads", "8", "--layers", "6"],
    "marian-d1024": ["--d-model", "1024", "--ffn", "4096", "--heads", "16", "--layers", "6"],
}
MARIAN_TINY = {  # --tiny: the Marian pipeline in a minute (numbers meaningless)
    "marian-tiny": ["--d-model", "64", "--ffn", "128", "--heads", "4", "--layers", "2",
                    "--vocab", "3000", "--pieces", "600"],
}


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def run(cmd, **kw):
    r = subprocess.run(cmd, **kw)
    if r.returncode != 0:
        if r.stderr:
            log(r.stderr.decode(errors="replace").rstrip())
        raise subprocess.CalledProcessError(r.returncode, cmd)
    return r


def sha(data):
    return hashlib.sha256(data).hexdigest()


def prepare_data(fra, out, n_train, n_held):
    """Training pairs = the first n_train lines; held-out = every 10th line after them whose
    English is in neither the training set nor the held-out set so far."""
    os.makedirs(out, exist_ok=True)
    with open(fra, encoding="utf-8") as f:
        lines = f.read().split("\n")
    train = lines[:n_train]
    seen = {l.split("\t")[0] for l in train}
    held, i = [], n_train
    while len(held) < n_held:
        if i >= len(lines) or not lines[i]:
            sys.exit(f"ct2_bench: {fra}: too few lines for {n_held} held-out pairs")
        en = lines[i].split("\t")[0]
        if en not in seen:
            held.append(lines[i])
            seen.add(en)
        i += 10
    paths = {k: os.path.join(out, f"{k}") for k in ("train.tsv", "held.tsv", "held.en", "held.fr")}
    texts = {"train.tsv": train, "held.tsv": held, "held.en": [h.split("\t")[0] for h in held],
             "held.fr": [h.split("\t")[1] for h in held]}
    for k, rows in texts.items():
        data = ("\n".join(rows) + "\n").encode("utf-8")
        try:
            with open(paths[k], "rb") as f:
                if f.read() == data:
                    continue
        except OSError:
            pass
        with open(paths[k], "wb") as f:
            f.write(data)
    return paths, sha(("\n".join(train)).encode("utf-8"))


def train_model(args, name, opts, data, data_hash, precision):
    """Trains (or finds in the cache) one model; returns its directory and training seconds."""
    full = opts + ["--precision", precision, "--threads", "2"]
    key = sha(json.dumps([full, data_hash]).encode())[:12]
    mdir = os.path.join(args.out, "models", f"{name}-{key}")
    done = os.path.join(mdir, ".trained")
    if os.path.exists(done):
        with open(done) as f:
            return mdir, json.load(f)
    os.makedirs(os.path.dirname(mdir), exist_ok=True)
    log(f"ct2_bench: training {name} ({' '.join(full)}) into {mdir}")
    t0 = time.time()
    run([args.qkv, "train", "--data", data["train.tsv"], "--out", mdir, "--overwrite", "--quiet"] + full)
    info = {"options": full, "train_seconds": round(time.time() - t0, 1), "key": key}
    with open(done, "w") as f:
        json.dump(info, f)
    return mdir, info


# config.json fields qkv added after ../shared/ct2/qkv2ct2.py was written, with the values that
# mean what the converter assumes (d2l's interleaved sinusoid, embeddings scaled by sqrt(d),
# decoding from <bos>, nothing suppressed or forced: every model `qkv train` makes).
NEWER_FIELDS = {"pos_layout": "interleaved", "scale_embedding": True, "decoder_start": "<bos>",
                "suppress_pad": False, "forced_eos": False}


def converter_view(mdir):
    """A directory the converter accepts: links to the model's files, and config.json without
    the newer fields, which are checked to hold the values the converter assumes."""
    with open(os.path.join(mdir, "config.json")) as f:
        cfg = json.load(f)
    for k, v in NEWER_FIELDS.items():
        if k in cfg and cfg.pop(k) != v:
            sys.exit(f"ct2_bench: {mdir}/config.json: {k} is not {v!r}: qkv2ct2.py cannot convert it")
    view = os.path.join(mdir, "ct2-view")
    os.makedirs(view, exist_ok=True)
    for name in os.listdir(mdir):
        src = os.path.join(mdir, name)
        if name != "config.json" and os.path.isfile(src) and not os.path.exists(os.path.join(view, name)):
            os.symlink(src, os.path.join(view, name))
    with open(os.path.join(view, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    return view


def convert(args, mdir):
    """CTranslate2 float32 and int8 conversions beside the model (cached with it)."""
    out = {}
    view = converter_view(mdir)
    for q in ("float32", "int8"):
        d = os.path.join(mdir, f"ct2-{q}")
        if not os.path.exists(os.path.join(d, "qkv.json")):
            cmd = [sys.executable, os.path.join(args.ct2_dir, "qkv2ct2.py"), view, d]
            if q != "float32":
                cmd += ["--quantization", q]
            run(cmd, stdout=subprocess.DEVNULL)
        out[q] = d
    return out


def qkv_precisions(qkv, mdir, one):
    """fp32 always; bf16 when this CPU runs it; int8 when this qkv offers it (--help)."""
    helptext = subprocess.run([qkv, "translate", "--help"], capture_output=True, text=True).stdout
    line = next((l for l in helptext.splitlines() if l.strip().startswith("--precision")), "")
    precs = ["fp32"]
    for p in ("bf16", "int8"):
        if not re.search(rf"\b{p}\b", line):
            continue
        r = subprocess.run([qkv, "translate", "--model", mdir, "--input", one, "--precision", p,
                            "--threads", "1"], capture_output=True, text=True)
        if r.returncode == 0:
            precs.append(p)
        else:
            log(f"ct2_bench: qkv --precision {p} refused here: {r.stderr.strip()}")
    return precs


class CpuLock:
    """flock on a shared file: timed blocks of different benchmarks never overlap."""

    def __init__(self, path):
        self.path, self.f = path, None

    def __enter__(self):
        if self.path:
            self.f = open(self.path, "a")
            fcntl.flock(self.f, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        if self.f:
            fcntl.flock(self.f, fcntl.LOCK_UN)
            self.f.close()


def time_ct2(args, ct2_model, tok, env, beam, batch, compute_type, out_path):
    cmd = [sys.executable, os.path.join(args.ct2_dir, "ct2_translate.py"), ct2_model, "--beam", str(beam),
           "--batch", str(batch), "--threads", "2", "--max-len", str(args.max_len),
           "--compute-type", compute_type, "--detok"]
    with open(tok, "rb") as fin, open(out_path, "wb") as fout:
        r = subprocess.run(cmd, stdin=fin, stdout=fout, stderr=subprocess.PIPE, env=env, check=True)
    stats = json.loads(r.stderr.decode().strip().splitlines()[-1])
    return stats["seconds"], stats["output_tokens"]


def time_qkv(args, mdir, text, one, env, beam, batch, precision, out_path):
    """Wall seconds of the full run and of the same command on one sentence (start, load)."""
    base = [args.qkv, "translate", "--model", mdir, "--threads", "2", "--max-len", str(args.max_len),
            "--max-len-a", "0", "--max-len-b", "0", "--beam", str(beam), "--batch", str(batch),
            "--precision", precision]
    if beam > 1:  # the rule ct2_translate.py's default (--beam-stop qkv) gives CTranslate2: K finished
        base += ["--beam-stop", "count"]
    # stderr kept out of the way (warnings about unknown words), shown if qkv fails
    t0 = time.perf_counter()
    with open(out_path, "wb") as fout:
        run(base + ["--input", text], stdout=fout, stderr=subprocess.PIPE, env=env)
    t1 = time.perf_counter()
    run(base + ["--input", one], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    t2 = time.perf_counter()
    with open(out_path, encoding="utf-8") as f:
        ntok = sum(len(l.split()) for l in f)  # word models: one token per space-separated word
    return (t1 - t0, t2 - t1), ntok


def word_references(ct2_dir, held_fr, out):
    """The references as a word model writes its output: d2l's preprocessing (lower case, a
    space before punctuation), so that BLEU compares words, not case and spacing."""
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import qkv_tokenize as t\n"
            "for l in open(sys.argv[2], encoding='utf-8'): print(' '.join(t.split_words(t.preprocess_d2l(l.rstrip('\\n')))))")
    with open(out, "w", encoding="utf-8") as f:
        run([sys.executable, "-c", code, ct2_dir, held_fr], stdout=f)
    return out


def bleu(qkv, hyp, refs):
    r = subprocess.run([qkv, "eval", "--hyp", hyp, "--tgt", refs], capture_output=True,
                       text=True, check=True)
    m = re.search(r"^BLEU\S* = ([0-9.]+)", r.stdout, re.M)
    return float(m.group(1)) if m else None


def agreement(a, b):
    with open(a, encoding="utf-8") as fa, open(b, encoding="utf-8") as fb:
        la, lb = fa.read().splitlines(), fb.read().splitlines()
    return sum(x == y for x, y in zip(la, lb)) / max(len(la), 1)


def bench_model(args, name, mdir, ct2, data, tok, one, precs, env_name, env):
    engines = [e for e in ENGINES if e.startswith("ct2") or e.split()[1] in precs]
    outdir = os.path.join(args.out, "outputs", env_name, name)
    os.makedirs(outdir, exist_ok=True)
    rows = []
    for beam, batch in args.settings:
        times = {e: [] for e in engines}
        ntoks = {}
        with CpuLock(args.lock):
            for r in range(args.reps):
                for e in engines:  # alternating: every repetition runs every engine once
                    out = os.path.join(outdir, f"{e.replace(' ', '-')}-beam{beam}-batch{batch}.txt")
                    if e.startswith("ct2"):
                        ct = e.split()[1]
                        s, n = time_ct2(args, ct2[ct], tok, env, beam, batch, ct, out)
                    else:
                        s, n = time_qkv(args, mdir, data["held.en"], one, env, beam, batch, e.split()[1], out)
                    times[e].append(s)
                    ntoks[e] = n
        # qkv: median full run minus median one-sentence run (a difference of medians, not a
        # median of differences: under load single differences can go negative on small models)
        secs = {}
        for e in engines:
            if e.startswith("ct2"):
                secs[e] = statistics.median(times[e])
            else:
                secs[e] = (statistics.median(t[0] for t in times[e]) -
                           statistics.median(t[1] for t in times[e]))
        row = {"beam": beam, "batch": batch, "runs": times, "seconds": secs, "output_tokens": ntoks,
               "tokens_per_s": {e: ntoks[e] / secs[e] if secs[e] > 0 else None for e in engines}}
        tps = row["tokens_per_s"]
        best_q = max((v for e, v in tps.items() if e.startswith("qkv") and v), default=None)
        best_c = max((v for e, v in tps.items() if e.startswith("ct2") and v), default=None)
        row["qkv_best_over_ct2_best"] = best_q / best_c if best_q and best_c else None
        rows.append(row)
        log(f"ct2_bench: {env_name} {name} beam {beam} batch {batch}: " +
            ", ".join(f"{e} {v:.0f}" if v else f"{e} -" for e, v in tps.items()))
    # quality: outputs of the last repetition at batch 32
    quality = {}
    for beam in quality_beams(args.settings):
        ref = os.path.join(outdir, f"qkv-fp32-beam{beam}-batch32.txt")
        q = {}
        for e in engines:
            hyp = os.path.join(outdir, f"{e.replace(' ', '-')}-beam{beam}-batch32.txt")
            q[e] = {"bleu": bleu(args.qkv, hyp, data["held.words"]), "same_as_qkv_fp32": agreement(hyp, ref)}
        base = q["qkv fp32"]["bleu"]
        for e in engines:
            q[e]["bleu_minus_qkv_fp32"] = None if base is None or q[e]["bleu"] is None else q[e]["bleu"] - base
        quality[f"beam{beam}"] = q
    return {"engines": engines, "settings": rows, "quality": quality}


def fmt_table(name, res, minfo):
    engines = res["engines"]
    lines = [f"{name}: {minfo['parameters']:,} parameters, trained {' '.join(minfo['options'])} "
             f"({minfo['train_seconds']:.0f} s)", ""]
    head = ["setting"] + [e.replace("ct2", "CT2") for e in ENGINES] + ["qkv best / CT2 best"]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("| " + " | ".join("---" for _ in head) + " |")
    for row in res["settings"]:
        label = f"{'greedy' if row['beam'] == 1 else 'beam 4'}, batch {row['batch']}"
        cells = [("n/a" if e not in engines else "-" if not row["tokens_per_s"][e]
                  else f"{row['tokens_per_s'][e]:,.0f}") for e in ENGINES]
        ratio = row["qkv_best_over_ct2_best"]
        lines.append("| " + " | ".join([label] + cells + [f"{ratio:.2f}x" if ratio else "-"]) + " |")
    if any(v is None for row in res["settings"] for v in row["tokens_per_s"].values()):
        lines.append("")
        lines.append("(- : the one-sentence run took as long as the full run: too noisy to time)")
    lines.append("")
    lines.append("| quality (batch 32) | " + " | ".join(e.replace("ct2", "CT2") for e in ENGINES) + " |")
    lines.append("| --- | " + " | ".join("---" for _ in ENGINES) + " |")
    for beam in (int(k[4:]) for k in res["quality"]):
        q = res["quality"][f"beam{beam}"]
        what = "greedy" if beam == 1 else "beam 4"

        def cell(e, f):
            return f(q[e]) if e in q else "n/a"
        lines.append(f"| {what} BLEU (- qkv fp32) | " + " | ".join(
            cell(e, lambda x: f"{x['bleu']:.2f} ({x['bleu_minus_qkv_fp32']:+.2f})") for e in ENGINES) + " |")
        lines.append(f"| {what} same as qkv fp32 | " + " | ".join(
            cell(e, lambda x: f"{100 * x['same_as_qkv_fp32']:.1f}%") for e in ENGINES) + " |")
    return "\n".join(lines)


# ---- the Marian rows ---------------------------------------------------------------------------

# CTranslate2's converter for Hugging Face models, run as ct2-transformers-converter runs it;
# from_pretrained's `dtype` argument is passed as `torch_dtype` to a transformers that predates
# the new name (4.38 here), which is all the shim changes.
CONVERT = """
import sys
from ctranslate2.converters.transformers import TransformersConverter
class Converter(TransformersConverter):
    def load_model(self, model_class, path, **kw):
        if "dtype" in kw:
            kw["torch_dtype"] = kw.pop("dtype")
        return super().load_model(model_class, path, **kw)
Converter(sys.argv[1]).convert(sys.argv[2], quantization=sys.argv[3] if sys.argv[3] != "float32" else None,
                               force=True)
"""


def build_marian(args, name, opts):
    """The random-weight Hugging Face model, qkv's import and CTranslate2's conversions, cached."""
    key = sha(json.dumps([opts, "seed 1"]).encode())[:12]
    mdir = os.path.join(args.out, "models", f"{name}-{key}")
    hf, qdir = os.path.join(mdir, "hf"), os.path.join(mdir, "qkv")
    done = os.path.join(mdir, ".built")
    if not os.path.exists(done):
        log(f"ct2_bench: building {name} ({' '.join(opts)}) into {mdir}")
        os.makedirs(mdir, exist_ok=True)
        run([args.hf_python, os.path.join(ROOT, "bench", "marian_model.py"), hf, "--data",
             os.path.dirname(os.path.dirname(args.marian_data))] + opts, stderr=subprocess.PIPE)
        os.makedirs(qdir, exist_ok=True)
        run([args.qkv, "import", "marian", hf, "--out", qdir, "--overwrite"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        for q in ("float32", "int8"):
            run([args.hf_python, "-c", CONVERT, hf, os.path.join(mdir, f"ct2-{q}"), q],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        with open(done, "w") as f:
            json.dump({"options": opts, "key": key}, f)
    return mdir, hf, qdir, {q: os.path.join(mdir, f"ct2-{q}") for q in ("float32", "int8")}


def marian_input(args):
    """The first n lines of Multi30k's German validation set, and an empty input (qkv's start and
    load alone)."""
    out = os.path.join(args.out, "data-marian")
    os.makedirs(out, exist_ok=True)
    with open(args.marian_data, encoding="utf-8") as f:
        lines = [l.rstrip("\n") for l, _ in zip(f, range(args.marian_sentences))]
    paths = {"text": os.path.join(out, f"val{len(lines)}.de"), "one": os.path.join(out, "one.de"),
             "empty": os.path.join(out, "empty.de")}
    for k, rows in (("text", lines), ("one", lines[:1]), ("empty", [])):
        with open(paths[k], "w", encoding="utf-8") as f:
            f.write("".join(r + "\n" for r in rows))
    return paths


def time_ct2_marian(args, ct2_model, hf, text, env, beam, batch, compute_type, out_path):
    cmd = [sys.executable, os.path.join(ROOT, "bench", "ct2_marian.py"), ct2_model,
           os.path.join(hf, "source.spm"), "--input", text, "--beam", str(beam), "--batch",
           str(batch), "--threads", "2", "--max-len", str(args.marian_max_len), "--compute-type",
           compute_type, "--detok", hf]
    with open(out_path, "wb") as fout:
        r = subprocess.run(cmd, stdout=fout, stderr=subprocess.PIPE, env=env, check=True)
    stats = json.loads(r.stderr.decode().strip().splitlines()[-1])
    return stats["seconds"], stats["output_tokens"]


def time_qkv_marian(args, qdir, inp, env, beam, batch, precision, out_path):
    """Wall seconds of the full run and of the same command on no input (start, load)."""
    base = [args.qkv, "translate", "--model", qdir, "--threads", "2", "--max-len",
            str(args.marian_max_len), "--max-len-a", "0", "--max-len-b", "0", "--beam", str(beam),
            "--batch", str(batch), "--precision", precision]
    t0 = time.perf_counter()
    with open(out_path, "wb") as fout:
        run(base + ["--input", inp["text"]], stdout=fout, stderr=subprocess.PIPE, env=env)
    t1 = time.perf_counter()
    run(base + ["--input", inp["empty"]], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    return (t1 - t0, time.perf_counter() - t1)


def bench_marian(args, name, hf, qdir, ct2, inp, precs, env_name, env):
    engines = [e for e in ENGINES if e.startswith("ct2") or e.split()[1] in precs]
    outdir = os.path.join(args.out, "outputs", env_name, name)
    os.makedirs(outdir, exist_ok=True)
    rows = []
    for beam, batch in args.settings:
        times, tokens = {e: [] for e in engines}, {}
        with CpuLock(args.lock):
            for r in range(args.reps):
                for e in engines:
                    out = os.path.join(outdir, f"{e.replace(' ', '-')}-beam{beam}-batch{batch}.txt")
                    kind, prec = e.split()
                    if kind == "ct2":
                        s, n = time_ct2_marian(args, ct2[prec], hf, inp["text"], env, beam, batch,
                                               prec, out)
                        tokens[e] = n
                    else:
                        s = time_qkv_marian(args, qdir, inp, env, beam, batch, prec, out)
                    times[e].append(s)
        secs = {e: statistics.median(times[e]) if e.startswith("ct2") else
                (statistics.median(t[0] for t in times[e]) - statistics.median(t[1] for t in times[e]))
                for e in engines}
        best_q = min((v for e, v in secs.items() if e.startswith("qkv") and v > 0), default=None)
        best_c = min((v for e, v in secs.items() if e.startswith("ct2") and v > 0), default=None)
        row = {"beam": beam, "batch": batch, "runs": times, "seconds": secs, "ct2_output_tokens": tokens,
               "qkv_best_over_ct2_best": best_c / best_q if best_q and best_c else None}
        rows.append(row)
        log(f"ct2_bench: {env_name} {name} beam {beam} batch {batch}: " +
            ", ".join(f"{e} {v:.2f} s" for e, v in secs.items()))
    quality = {}
    for beam in quality_beams(args.settings):
        q = {}
        for e in engines:
            kind = e.split()[0]
            ref = os.path.join(outdir, f"{kind}-{'float32' if kind == 'ct2' else 'fp32'}-beam{beam}-batch32.txt")
            hyp = os.path.join(outdir, f"{e.replace(' ', '-')}-beam{beam}-batch32.txt")
            q[e] = {"same_as_own_float32": agreement(hyp, ref)}
        # the premise of comparing speeds: both engines translate alike in float32
        q["qkv fp32"]["same_as_ct2_float32"] = agreement(
            os.path.join(outdir, f"qkv-fp32-beam{beam}-batch32.txt"),
            os.path.join(outdir, f"ct2-float32-beam{beam}-batch32.txt"))
        quality[f"beam{beam}"] = q
    return {"engines": engines, "settings": rows, "quality": quality}


def fmt_marian(name, res, opts, args):
    engines = res["engines"]
    vocab = opts[opts.index("--vocab") + 1] if "--vocab" in opts else "58101"
    lines = [f"{name}: random-weight MarianMT ({' '.join(opts)}, vocabulary {int(vocab):,} tied), "
             f"{args.marian_sentences} Multi30k val sentences (German), up to {args.marian_max_len} "
             f"tokens; seconds (lower is better)", ""]
    head = ["setting"] + [e.replace("ct2", "CT2") for e in ENGINES] + ["qkv best / CT2 best (speed)"]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("| " + " | ".join("---" for _ in head) + " |")
    for row in res["settings"]:
        label = f"{'greedy' if row['beam'] == 1 else 'beam 4'}, batch {row['batch']}"
        cells = ["n/a" if e not in engines else f"{row['seconds'][e]:.2f}" for e in ENGINES]
        ratio = row["qkv_best_over_ct2_best"]
        lines.append("| " + " | ".join([label] + cells + [f"{ratio:.2f}x" if ratio else "-"]) + " |")
    lines.append("")
    lines.append("| same as its own float32 (batch 32) | " + " | ".join(e.replace("ct2", "CT2") for e in ENGINES) + " |")
    lines.append("| --- | " + " | ".join("---" for _ in ENGINES) + " |")
    for beam in (int(k[4:]) for k in res["quality"]):
        q = res["quality"][f"beam{beam}"]
        lines.append(f"| {'greedy' if beam == 1 else 'beam 4'} | " + " | ".join(
            f"{100 * q[e]['same_as_own_float32']:.1f}%" if e in q else "n/a" for e in ENGINES) + " |")
    lines.append("")
    lines.append("qkv fp32 = CT2 float32 (batch 32): " + ", ".join(
        f"{'greedy' if b == 1 else 'beam 4'} {100 * res['quality'][f'beam{b}']['qkv fp32']['same_as_ct2_float32']:.1f}%"
        for b in (int(k[4:]) for k in res["quality"])))
    return "\n".join(lines)


def count_parameters(qkv_dir):
    """Parameters from model.safetensors' header (8-byte length, JSON of shapes)."""
    with open(os.path.join(qkv_dir, "model.safetensors"), "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
    total = 0
    for k, v in header.items():
        if k != "__metadata__":
            p = 1
            for s in v["shape"]:
                p *= s
            total += p
    return total


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for l in f:
                if l.startswith("model name"):
                    return l.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--qkv", default=os.path.join(ROOT, "build", "qkv"))
    ap.add_argument("--ct2-dir", default=os.path.join(ROOT, "..", "shared", "ct2"),
                    help="../shared/ct2: qkv2ct2.py, qkv_tokenize.py, ct2_translate.py")
    ap.add_argument("--data", default=os.path.join(ROOT, "..", "shared", "data", "fra-eng", "fra.txt"))
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "bench-ct2"))
    ap.add_argument("--reps", type=int, default=int(os.environ.get("REPS", "3")))
    ap.add_argument("--env", choices=["both", "asis", "unset"], default="both",
                    help="OPENBLAS_CORETYPE as exported, unset, or both passes (default)")
    ap.add_argument("--models", default="d512,d256,marian-d512,marian-d1024",
                    help="comma-separated: d512, d256 (fra-eng, trained here), marian-d512, "
                         "marian-d1024 (random-weight MarianMT)")
    ap.add_argument("--hf-python", default="/usr/bin/python3",
                    help="a python3 with torch, transformers, sentencepiece and ctranslate2: "
                         "builds and converts the Marian models")
    ap.add_argument("--marian-data", default=os.path.join(ROOT, "..", "shared", "data", "multi30k", "val.de"))
    ap.add_argument("--marian-sentences", type=int, default=500)
    ap.add_argument("--marian-max-len", type=int, default=64, help="longest Marian translation, tokens")
    ap.add_argument("--epochs", type=int, default=0,
                    help="train every model for this many epochs instead of its own (0: d512 1, d256 3)")
    ap.add_argument("--max-len", type=int, default=16, help="longest translation, tokens")
    ap.add_argument("--train-precision", default="bf16", help="bf16 (falls back to fp32 if refused) or fp32")
    ap.add_argument("--lock", default="/tmp/qkv-cpu.lock", help="flock file around timed blocks ('' = none)")
    ap.add_argument("--tiny", action="store_true", help="a d64 2+2 model on 2,000 pairs, 60 sentences, "
                    "and a d64 2+2 Marian model on 20: a quick check")
    ap.add_argument("--settings", type=parse_settings, default=list(SETTINGS),
                    help="BEAMxBATCH, comma-separated: the settings to time (default 1x1,1x32,4x1,4x32)")
    ap.add_argument("--dry-run", action="store_true", help="print the plan and exit")
    args = ap.parse_args()
    if args.reps < 1:
        ap.error("--reps must be >= 1")
    args.qkv = os.path.abspath(args.qkv)
    args.out = os.path.abspath(args.out)
    names = args.models.split(",")
    for k in names:
        if k not in MODELS and k not in MARIAN:
            ap.error(f"--models: unknown model {k} (d512, d256, marian-d512, marian-d1024)")
    models = TINY if args.tiny else {k: MODELS[k] for k in names if k in MODELS}
    marian = MARIAN_TINY if args.tiny else {k: MARIAN[k] for k in names if k in MARIAN}
    if args.tiny:
        args.marian_sentences, args.marian_max_len = 20, 16
    n_train, n_held = (2000, 60) if args.tiny else (18000, 300)
    if args.epochs > 0:  # a new cache key, so these are trained anew
        models = {k: [str(args.epochs) if i > 0 and o[i - 1] == "--epochs" else x
                      for i, x in enumerate(o)] for k, o in models.items()}

    exported = os.environ.get("OPENBLAS_CORETYPE")
    envs = []
    base_env = dict(os.environ, OMP_WAIT_POLICY="passive", CT2_FORCE_CPU_ISA="AVX512")
    unset_env = {k: v for k, v in base_env.items() if k != "OPENBLAS_CORETYPE"}
    if args.env in ("both", "asis") and exported is not None:
        envs.append((f"OPENBLAS_CORETYPE={exported}", base_env))
    if args.env in ("both", "unset") or exported is None:
        envs.append(("OPENBLAS_CORETYPE unset", unset_env))
    if args.dry_run:
        print(json.dumps({"models": models, "marian": marian, "train_pairs": n_train, "held_out": n_held, "reps": args.reps,
                          "environments": [e for e, _ in envs], "settings": args.settings,
                          "qkv": args.qkv, "ct2_dir": args.ct2_dir, "out": args.out}))
        return
    for f in ("qkv2ct2.py", "qkv_tokenize.py", "ct2_translate.py"):
        if not os.path.exists(os.path.join(args.ct2_dir, f)):
            sys.exit(f"ct2_bench: {args.ct2_dir}/{f}: missing (--ct2-dir)")
    t_start = time.time()
    if models:
        data, data_hash = prepare_data(args.data, os.path.join(args.out, "data" + ("-tiny" if args.tiny else "")),
                                       n_train, n_held)
        data["held.words"] = word_references(args.ct2_dir, data["held.fr"],
                                             os.path.join(os.path.dirname(data["held.en"]), "held.fr.words"))
        one = os.path.join(os.path.dirname(data["held.en"]), "one.en")
        with open(data["held.en"], encoding="utf-8") as f, open(one, "w", encoding="utf-8") as g:
            g.write(f.readline())

    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    ct2_version = subprocess.run([sys.executable, "-c", "import ctranslate2; print(ctranslate2.__version__)"],
                                 capture_output=True, text=True).stdout.strip()
    report = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
              "commit": commit, "cpu": cpu_name(), "cores": os.cpu_count(), "threads": 2,
              "ctranslate2": ct2_version, "ct2_force_cpu_isa": "AVX512", "reps": args.reps,
              "max_len": args.max_len, "train_pairs": n_train, "held_out": n_held,
              "openblas_coretype_exported": exported, "load_average": os.getloadavg(), "models": {},
              "marian_sentences": args.marian_sentences, "marian_max_len": args.marian_max_len}
    tables = []
    for name, opts in models.items():
        prec = args.train_precision
        try:
            mdir, minfo = train_model(args, name, opts, data, data_hash, prec)
        except subprocess.CalledProcessError:
            if prec == "fp32":
                raise
            log(f"ct2_bench: training in {prec} failed; training in fp32")
            mdir, minfo = train_model(args, name, opts, data, data_hash, "fp32")
        minfo["parameters"] = count_parameters(mdir)
        ct2 = convert(args, mdir)
        tok = os.path.join(mdir, "held.tok")
        with open(data["held.en"], "rb") as fin, open(tok, "wb") as fout:
            run([sys.executable, os.path.join(args.ct2_dir, "qkv_tokenize.py"), converter_view(mdir)], stdin=fin, stdout=fout)
        precs = qkv_precisions(args.qkv, mdir, one)
        report["models"][name] = {"dir": mdir, **minfo, "qkv_precisions": precs, "results": {}}
        for env_name, env in envs:
            res = bench_model(args, name, mdir, ct2, data, tok, one, precs, env_name, env)
            report["models"][name]["results"][env_name] = res
            tables.append(f"### {name}, {env_name}\n\n" + fmt_table(name, res, minfo))
    if marian:
        inp = marian_input(args)
    for name, opts in marian.items():
        mdir, hf, qdir, ct2 = build_marian(args, name, opts)
        precs = qkv_precisions(args.qkv, qdir, inp["one"])
        report["models"][name] = {"dir": mdir, "options": opts, "parameters": count_parameters(qdir),
                                  "qkv_precisions": precs, "results": {}}
        for env_name, env in envs:
            res = bench_marian(args, name, hf, qdir, ct2, inp, precs, env_name, env)
            report["models"][name]["results"][env_name] = res
            tables.append(f"### {name}, {env_name}\n\n" + fmt_marian(name, res, opts, args))
    report["wall_seconds"] = round(time.time() - t_start, 1)
    os.makedirs(args.out, exist_ok=True)
    stem = os.path.join(args.out, "results-" + "+".join(list(models) + list(marian)))
    js = stem + ".json"
    with open(js, "w") as f:
        json.dump(report, f, indent=1)
    head = (f"qkv translate against CTranslate2 {ct2_version} (AVX-512), {report['date']}, qkv {commit}, "
          f"{report['cpu']} ({report['cores']} cores), 2 threads, OMP_WAIT_POLICY=passive, "
          f"OPENBLAS_CORETYPE {'=' + exported if exported else 'not exported'}; median of {args.reps}; "
          f"fra-eng: {n_held} held-out sentences (English -> French), up to {args.max_len} tokens, "
          f"tokens/s of translation (load excluded); Marian: seconds of translation (load excluded)\n")
    text = head + "\n" + "\n\n".join(tables) + "\n"
    with open(stem + ".md", "w") as f:
        f.write(text)
    print(text)
    print(f"(results: {js} and {stem}.md; {report['wall_seconds']:.0f} s)")


if __name__ == "__main__":
    main()
