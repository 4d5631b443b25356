#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A command-line fuzzer for the qkv tool (issue #17, item 6).

Random option vectors and values against every command of a qkv binary, each run under a
memory limit (RLIMIT_AS) and a wall-clock limit, on tiny inputs in a temporary directory.
The options come from each command's --help: their placeholders (N, FLOAT, TEXT, FILE, DIR,
or the choices a|b|c), their ranges ("(N in [a, b]; default d)", "(FLOAT > 0; ...)") and their
other names ("the same as --NAME", "-m, --model").
It fails on:
  - a run that ends by a signal (a crash, an abort, the kernel's OOM kill) or hits the limit;
  - exit 0 when a numeric value lies outside its option's range or is not a number;
  - a non-zero exit without a message (stderr empty, or just "qkv: ");
  - a sanitizer report on stderr (QKV built with -fsanitize=...; run it with --memory-mb 0,
    which also leaves out the large sizes below: there is no limit for them to meet).
Values inside their ranges are drawn near the low end, and each command starts from arguments
that make it small (fixture.base), so that a run that is accepted ends in a second or so;
one value in ten is a large one (the top of its range), which must meet the memory limit
with a message, not a crash, and may take long (its timeouts are counted, not failures).

Usage: cli_fuzz.py QKV [--seconds S] [--seed N] [--memory-mb M] [--timeout S] [--artifacts DIR]
Stdlib only (any python3).
"""
import argparse
import os
import random
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time

# Words the string options take (--tokenizer, --act, --tie, --attention, --vocab, --kind, ...)
CHOICES = ["word", "bpe", "relu", "gelu", "none", "output", "all", "softmax", "linear", "flash",
           "materialised", "char", "byte", "fp32", "bf16", "token", "d2l", "constant", "noam"]
# Texts no option may read as a number (C's strtol and strtof: "nan" and "inf" are refused as
# not finite, "1e309" as out of range), and those an integer option may not ("0x10" is 16 to
# strtof, "1e3" 1000).
JUNK = ["", "abc", "1e", "nan", "inf", "-inf", "3 ", "--5", "1e309", "-1e309", "٣", "\x01false",
        "true", "1,5"]
JUNK_INT = ["1.5", "0x10", "1e3", "99999999999999999999", "2147483648"]
BENCH_KINDS = ["train", "decode", "attention", "generate", "sgemm"]


class Option:
    def __init__(self, name, kind, range_text, choices=None):
        # kind: N (integer), X (number), S (string), C (one of choices), F (flag)
        self.name, self.kind, self.choices = name, kind, choices or []
        self.lo, self.hi, self.lo_closed, self.hi_closed = -float("inf"), float("inf"), 0, 0
        if range_text is None:
            return
        r = range_text.strip()
        m = re.fullmatch(r"in ([\[(])\s*(\S+),\s*(\S+)\s*([\])])", r)
        if m:
            self.lo_closed, self.hi_closed = m.group(1) == "[", m.group(4) == "]"
            self.lo, self.hi = float(m.group(2)), float(m.group(3))
            return
        m = re.fullmatch(r"([<>]=?)\s*(\S+)", r)
        if not m:
            raise ValueError("cannot read the range '%s' of --%s" % (r, name))
        x = float(m.group(2))
        if m.group(1)[0] == ">":
            self.lo, self.lo_closed = x, m.group(1) == ">="
        else:
            self.hi, self.hi_closed = x, m.group(1) == "<="

    def inside(self, x):
        return ((x >= self.lo) if self.lo_closed else (x > self.lo)) and \
               ((x <= self.hi) if self.hi_closed else (x < self.hi))

    def holds(self, x):
        """Whether an integer option takes x: inside its range, and an int unless the range
        reaches past one (a 64-bit seed prints its top, 2^64 - 1)."""
        wide = self.hi != float("inf") and self.hi > 2147483647
        return self.inside(x) and (wide or -2147483648 <= x <= 2147483647)


def read_help(qkv, words):
    """The options of `qkv WORDS --help`: [Option]. --help itself must exit 0 on stdout."""
    p = subprocess.run([qkv] + words + ["--help"], capture_output=True, text=True, timeout=30)
    if p.returncode != 0 or not p.stdout or p.stderr:
        raise SystemExit("qkv %s --help: exit %d, stderr %r" % (" ".join(words), p.returncode,
                                                                p.stderr[:200]))
    opts, aliases = [], []
    for line in p.stdout.splitlines():
        m = re.match(r"^  (?:-[a-z], |    )--([a-z0-9-]+)(?: (\S+))?\s{2,}(.*)$", line)
        if not m or m.group(1) in ("help", "config"):
            continue
        name, word, text = m.groups()
        alias = re.match(r"the same as --([a-z0-9-]+)", text)
        if alias:
            aliases.append((name, alias.group(1)))
            continue
        kind = {None: "F", "N": "N", "FLOAT": "X", "TEXT": "S", "FILE": "S", "DIR": "S"}.get(word, "C")
        rng = None
        if kind in "NX":
            r = re.search(r"\(%s ((?:in [\[(][^;]*[\])])|(?:[<>]=? [^;]*)); default" % word, line)
            if not r:
                raise SystemExit("qkv %s --help: no range for --%s: %s" % (" ".join(words),
                                                                          name, line))
            rng = r.group(1)
        opts.append(Option(name, kind, rng, word.split("|") if kind == "C" else None))
    by_name = {o.name: o for o in opts}
    for name, target in aliases:  # another name of an option takes what it takes
        if target not in by_name:
            raise SystemExit("qkv %s --help: --%s is the same as --%s, which is not listed" %
                             (" ".join(words), name, target))
        t = by_name[target]
        a = Option(name, t.kind, None, t.choices)
        a.lo, a.hi, a.lo_closed, a.hi_closed = t.lo, t.hi, t.lo_closed, t.hi_closed
        opts.append(a)
    return opts


def fmt(x, kind):
    return str(int(x)) if kind == "N" else repr(float(x))


def value_inside(o, rnd):
    """A value in range, near the low end (runs stay small)."""
    lo = o.lo if o.lo != -float("inf") else 0.0
    if o.kind == "N":
        start = int(lo) + (0 if o.lo_closed or lo != int(lo) else 1)
        for _ in range(8):
            x = start + rnd.choice([0, 0, 1, 2, 3])
            if o.inside(x):
                return fmt(x, "N")
        return fmt(start, "N")
    for _ in range(8):
        x = lo + rnd.choice([0.0, 1e-6, 0.1, 0.5, 0.9, 0.999, 1.0, 2.0])
        if o.inside(x):
            return fmt(x, "X")
    return fmt((o.lo + o.hi) / 2 if o.hi != float("inf") else lo + 1.0, "X")


def value_large(o, rnd):
    """A value in range near its top (or large where there is none): sizes that should meet
    the memory limit as an error message, not a crash. A run with one may take long."""
    top = o.hi if o.hi != float("inf") else 1e6 if o.kind == "N" else 1e9
    for x in (top, top - 1, top / 2, top / 16):
        x = int(x) if o.kind == "N" else x
        if o.inside(x):
            return fmt(x, o.kind)
    return None


def value_outside(o, rnd):
    """A value outside the range or not a number at all, or None if the range has no outside
    that the type can hold."""
    cands = []
    if o.lo != -float("inf"):
        if o.kind == "N":
            cands.append(o.lo - 1 if o.lo_closed else o.lo)
        else:
            cands += [o.lo - 1e-3, o.lo - 1.0] + ([] if o.lo_closed else [o.lo])
        cands.append(-2147483647)
    if o.hi != float("inf"):
        if o.kind == "N":
            cands.append(o.hi + 1 if o.hi_closed else o.hi)
        else:
            cands += [o.hi + 1e-3] + ([] if o.hi_closed else [o.hi])
        cands.append(2147483647 if o.kind == "N" else 1e30)
    cands = [c for c in cands if not o.inside(c)]
    if o.kind == "N":
        cands = [c for c in cands if -2147483647 <= c <= 2147483647 and c == int(c)]
    if cands and rnd.random() < 0.7:
        return fmt(rnd.choice(cands), o.kind)
    # the integer junk that is a number ("2147483648") only where the option cannot hold it
    junk_int = [x for x in JUNK_INT if not (x.isdigit() and o.holds(int(x)))]
    return rnd.choice(JUNK + (junk_int if o.kind == "N" else []))


class Fixture:
    """Tiny inputs, a tiny translation model and a tiny language model, in a temp dir."""

    def __init__(self, qkv, root):
        self.root, self.n = root, 0
        w = lambda name, text: open(os.path.join(root, name), "w").write(text) and None
        pairs = "go .\tva !\nhi .\tsalut !\nrun !\tcours !\nwho ?\tqui ?\nwow !\tça alors !\n"
        w("pairs.tsv", pairs)
        w("src.txt", "".join(l.split("\t")[0] + "\n" for l in pairs.splitlines()))
        w("tgt.txt", "".join(l.split("\t")[1] + "\n" for l in pairs.splitlines()))
        w("text.txt", "the cat sat on the mat. the dog sat on the log.\n" * 3)
        w("empty.txt", "")
        w("bad.json", '{"lr": -1}')
        w("ok.json", '{"quiet": true}')
        os.mkdir(os.path.join(root, "adir"))
        self.model = os.path.join(root, "model")
        self.lm = os.path.join(root, "lm")
        env = quiet_env()
        subprocess.run([qkv, "train", "--data", self.p("pairs.tsv"), "--out", self.model,
                        "--d-model", "8", "--heads", "2", "--ffn", "16", "--layers", "1",
                        "--batch", "2", "--max-tokens", "6", "--epochs", "2", "--min-freq", "1",
                        "--threads", "1", "--quiet"], check=True, env=env, timeout=120)
        subprocess.run([qkv, "train-lm", "--data", self.p("text.txt"), "--out", self.lm,
                        "--d-model", "8", "--heads", "2", "--ffn", "16", "--layers", "1",
                        "--context", "8", "--batch", "2", "--steps", "3", "--threads", "1",
                        "--quiet"], check=True, env=env, timeout=120, stdout=subprocess.DEVNULL)

    def p(self, name):
        return os.path.join(self.root, name)

    def fresh(self):
        self.n += 1
        return self.p("out-%d" % self.n)

    def string(self, rnd):
        return rnd.choice([self.p("pairs.tsv"), self.p("src.txt"), self.p("tgt.txt"),
                           self.p("text.txt"), self.p("empty.txt"), self.p("adir"),
                           self.p("absent"), self.model, self.lm, "/dev/null", self.fresh(),
                           self.p("bad.json"), self.p("ok.json"), ""] + CHOICES)

    def base(self, cmd):
        """Arguments that keep an accepted run small; the random ones come after (and may
        override them)."""
        small = ["--d-model", "8", "--heads", "2", "--ffn", "16", "--layers", "1"]
        return {
            "demo": ["--out", self.fresh(), "--train", "4", "--epochs", "1"],
            "train": ["--data", self.p("pairs.tsv"), "--out", self.fresh(), "--batch", "2",
                      "--max-tokens", "6", "--epochs", "1", "--min-freq", "1"] + small,
            "translate": ["--model", self.model],
            "eval": ["--model", self.model, "--data", self.p("pairs.tsv")],
            "average": ["--out", self.fresh(), self.model],
            "info": [],
            "plot": [self.model],
            "train-lm": ["--data", self.p("text.txt"), "--out", self.fresh(), "--context", "8",
                         "--batch", "2", "--steps", "2"] + small,
            "generate": ["--model", self.lm, "--tokens", "3"],
            "eval-lm": ["--model", self.lm, "--data", self.p("text.txt")],
            "bench": small + ["--vocab", "16", "--batch", "2", "--src-len", "4", "--tgt-len",
                              "4", "--new-tokens", "2", "--n", "8", "--m", "8", "--k", "8",
                              "--steps", "1", "--warmup", "0", "--position", "2"],
        }.get(cmd, [])


def quiet_env():
    env = dict(os.environ)
    # one thread each; passive waits set here so that qkv does not re-execute itself
    env.update(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", OMP_WAIT_POLICY="passive")
    return env


def limits(memory_mb, cpu_s):
    def apply():
        if memory_mb:  # 0: none (AddressSanitizer's shadow memory needs terabytes of it)
            resource.setrlimit(resource.RLIMIT_AS, (memory_mb << 20, memory_mb << 20))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        os.setsid()
    return apply


def one_case(rnd, fx, cmd, opts, large_ok):
    """(argv after `qkv`, whether some value is outside its range or not a number, whether
    some value is a large one)."""
    words = cmd.split()
    args = list(fx.base(words[0]))
    if words[0] == "plot" and rnd.random() < 0.4:
        args = ["--positional", fx.fresh()]
    outside = large = False
    for _ in range(rnd.choice([0, 1, 1, 2, 3, 4, 6])):
        r = rnd.random()
        if r < 0.04:
            args.append(rnd.choice(["--frobnicate", "--", "-x", "stray", "--help", "--config"]))
            continue
        if r < 0.08:
            args += ["--config", rnd.choice([fx.p("bad.json"), fx.p("ok.json"), fx.p("absent"),
                                             fx.p("pairs.tsv"), fx.p("adir")])]
            continue
        if not opts:
            continue
        o = rnd.choice(opts)
        if o.kind == "F":
            args.append("--" + o.name)
        elif o.kind == "S":
            args += ["--" + o.name, fx.string(rnd)]
        elif o.kind == "C":
            args += ["--" + o.name, rnd.choice(o.choices + [fx.string(rnd)])]
        else:
            r, v = rnd.random(), None
            if r < 0.5:
                v = value_outside(o, rnd)
                outside = v is not None
            elif r < 0.6 and large_ok:
                v = value_large(o, rnd)
                large = v is not None
            if v is None:
                v = value_inside(o, rnd)
            args += ["--%s=%s" % (o.name, v)] if rnd.random() < 0.3 else ["--" + o.name, v]
    return words + args, outside, large


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("qkv")
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--memory-mb", type=int, default=4096)
    ap.add_argument("--timeout", type=float, default=30)
    ap.add_argument("--artifacts", default=None, help="write each failure's command here")
    a = ap.parse_args()
    qkv = os.path.realpath(a.qkv)
    seed = a.seed if a.seed is not None else int.from_bytes(os.urandom(4), "little")
    rnd = random.Random(seed)
    print("cli_fuzz: seed %d, %.0f s, %d MiB, %.0f s a run" % (seed, a.seconds, a.memory_mb,
                                                               a.timeout), flush=True)
    top = subprocess.run([qkv, "--help"], capture_output=True, text=True, timeout=30).stdout
    commands = re.findall(r"^  ([a-z][a-z-]*)  ", top, re.M)  # not --version
    if not commands:
        raise SystemExit("qkv --help lists no command")
    tables = {}
    for c in commands:
        for words in ([c + " " + k for k in BENCH_KINDS] if c == "bench" else [c]):
            tables[words] = read_help(qkv, words.split())
    root = tempfile.mkdtemp(prefix="qkv-cli-fuzz-")
    failures, runs, accepted, slow, t_end = [], 0, 0, 0, time.time() + a.seconds
    try:
        fx = Fixture(qkv, root)
        env = quiet_env()
        while time.time() < t_end:
            cmd = rnd.choice(sorted(tables))
            argv, outside, large = one_case(rnd, fx, cmd, tables[cmd], a.memory_mb > 0)
            stdin = open(fx.p("src.txt"), "rb")
            try:
                p = subprocess.run([qkv] + argv, stdin=stdin, capture_output=True, env=env,
                                   cwd=root, timeout=a.timeout,
                                   preexec_fn=limits(a.memory_mb, int(a.timeout) + 5))
                rc, err = p.returncode, p.stderr.decode("utf-8", "replace")
            except subprocess.TimeoutExpired as e:
                rc, err = "timeout", (e.stderr or b"").decode("utf-8", "replace")
            finally:
                stdin.close()
            runs += 1
            accepted += rc == 0
            why = None
            if rc == "timeout" and large and not outside:
                slow += 1  # a large size may legitimately take long
            elif rc == "timeout":
                why = "ran past %.0f s" % a.timeout
            elif rc < 0:
                why = "killed by signal %s" % signal.Signals(-rc).name
            elif rc == 0 and outside and "--help" not in argv:
                why = "exit 0 with a value outside its range"
            elif re.search(r"Sanitizer|runtime error:", err):
                why = "a sanitizer report (exit %d)" % rc
            elif rc != 0 and not re.search(r"\S", re.sub(r"qkv[ a-z-]*:", "", err)):
                why = "exit %d without a message" % rc
            if why:
                line = "qkv " + " ".join(repr(x) if (not x or " " in x or "\x01" in x) else x
                                         for x in argv)
                failures.append((why, line, err[-600:]))
                print("FAIL %s: %s\n  stderr: %s" % (why, line, err[-600:].strip()), flush=True)
                if len(failures) >= 20:
                    break
            # what accepted runs wrote: keep the disk small
            for d in os.listdir(root):
                if d.startswith("out-"):
                    shutil.rmtree(os.path.join(root, d), ignore_errors=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if a.artifacts and failures:
        os.makedirs(a.artifacts, exist_ok=True)
        with open(os.path.join(a.artifacts, "cli-fuzz-seed-%d.txt" % seed), "w") as f:
            for why, line, err in failures:
                f.write("# %s\n%s\n# stderr: %s\n\n" % (why, line, err.replace("\n", "\n# ")))
    print("cli_fuzz: %d runs over %d commands (%d exited 0, %d with a large size timed out), "
          "%d failures (seed %d)" % (runs, len(tables), accepted, slow, len(failures), seed))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
