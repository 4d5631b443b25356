# SPDX-License-Identifier: MIT
"""Softmax against linear attention, qkv beside PyTorch (issue #5, item 4).

    /usr/bin/python3 bench/attention_bench.py --qkv build/qkv            # the full sweep
    /usr/bin/python3 bench/attention_bench.py --qkv build/qkv --quick    # N <= 2048, a few minutes

Attention: forward + backward at N = 256, 512, ..., 16384 (batch 1, 8 heads, head dim 64,
i.e. d_model 512), non-causal and causal, of
    qkv      softmax attention materialised (qkv_attention_*: an N x N matrix per head),
             softmax flash attention (qkv_flash_attention_*: tiles, memory linear in N),
             linear attention (qkv_linear_attention_*; causal: the prefix-sum scan);
    PyTorch  softmax attention materialised (QK^T / sqrt(d), masked_fill, softmax, PV, autograd)
             and linear attention (non-causal phi(Q) (phi(K)^T V); causal the cumulative-sum
             form, which materialises the N x d x v prefix sums).
Generation: the time of one token of a decoder-only LM with random weights (d_model 512,
8 heads, FFN 2048, 2 layers, a byte vocabulary of 256) at positions 100 and 10,000: a KV cache
(softmax) against a recurrent state (linear), qkv (`qkv bench generate`) and PyTorch.

Every measurement is a fresh process, qkv and PyTorch alternate, and each time is the median
over --runs processes of each process's median step (one warmup step first). ms is forward +
backward, timed as bench.py times, with glibc keeping freed memory (PyTorch frees and
reallocates its tensors every step; glibc's default unmaps big ones, and each step would fault
them in again). That setting fragments PyTorch's heap, so memory comes from one more fresh
process per cell with glibc's defaults: MB is its peak resident memory minus the resident
memory before the first tensor (runtime started), i.e. what the tensors alive at the peak
cost, inputs and gradients included. A cell whose estimated memory exceeds --max-gb (16 GB,
or 85% of this machine's memory if less) is timed with glibc's defaults if that fits (marked
*), else skipped and marked so. The ratio columns are PyTorch time / qkv time for the same
mathematics (flash is compared with PyTorch's materialised softmax): above 1, qkv is faster.
Before timing, qkv's output and gradients at N = 256 are checked against the PyTorch
implementations, run in float64, for every kernel (a failed check makes the exit status 1).
Generation is timed in bench.py's environment too.
"""
import argparse
import datetime
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TORCH = os.path.join(HERE, "torch_bench.py")
SHAPE = ["--d-model", "512", "--heads", "8", "--batch", "1"]
HEADS, HEAD_DIM = 8, 64
GEN_SHAPE = ["--d-model", "512", "--heads", "8", "--ffn", "2048", "--layers", "2", "--vocab", "256"]

# (name, program, kind): the qkv kernels and their PyTorch counterparts; `versus` names the
# PyTorch implementation of the same mathematics.
IMPLS = [
    ("qkv materialised", "qkv", "softmax"),
    ("PyTorch softmax", "torch", "softmax"),
    ("qkv flash", "qkv", "flash"),
    ("qkv linear", "qkv", "linear"),
    ("PyTorch linear", "torch", "linear"),
]
VERSUS = {"qkv materialised": "PyTorch softmax", "qkv flash": "PyTorch softmax",
          "qkv linear": "PyTorch linear"}
CHECK_TOLERANCE = 1e-4  # max |qkv - reference| / max |reference|, per tensor


def estimated_gb(name, n, causal, allocator):
    """Peak memory of one measurement, from the buffers each implementation holds (floats of 4
    bytes; B = 1). qkv allocates once, whatever the allocator. PyTorch's factors are measured at
    N = 1024, 2048: with glibc's defaults its autograd graph peaks at about 3 N x N matrices per
    head for softmax and 4.1 copies of the N x d x v prefix sums for causal linear attention;
    with glibc never unmapping (the timing runs) freed tensors leave holes in the heap and the
    peak is 8.5-9.5 and 6.7 of them (7.5 taken, to be safe)."""
    x = 8 * n * HEADS * HEAD_DIM  # Q K V O dO dQ dK dV
    nn_ = HEADS * n * n
    ndv = HEADS * n * HEAD_DIM * HEAD_DIM
    heap = allocator == "no-unmap"
    floats = {
        "qkv materialised": x + 2 * nn_,               # P, and the dP scratch
        "qkv flash": x + 2 * HEADS * n,
        "qkv linear": x + 6 * n * HEADS * HEAD_DIM,
        "PyTorch softmax": x + ((10 if causal else 9) if heap else 3.3) * nn_,
        "PyTorch linear": x + ((7.5 if heap else 4.3) * ndv if causal else 8 * n * HEADS * HEAD_DIM),
    }[name]
    return floats * 4 / 1e9


def steps_for(n):
    """Steps per process (after one warmup): fewer where one step takes seconds."""
    return 5 if n <= 1024 else 3 if n <= 4096 else 1


def environment(threads, allocator):
    """no-unmap: bench.py's setting, glibc keeps freed memory (PyTorch frees and allocates its
    tensors every step; unmapped, they would be faulted in again, zero-filled, each time).
    default: glibc as it comes, where the peak resident memory is what is alive at the peak."""
    env = dict(os.environ)
    env.update({"OMP_WAIT_POLICY": "passive", "OMP_NUM_THREADS": str(threads)})
    for k in ("MALLOC_MMAP_MAX_", "MALLOC_TRIM_THRESHOLD_"):
        env.pop(k, None)
    if allocator == "no-unmap":
        env.update({"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(1 << 40)})
    return env


def run_json(cmd, env):
    try:
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600)
    except OSError as e:
        raise RuntimeError("%s: %s" % (cmd[0], e))
    if out.returncode != 0:
        raise RuntimeError("%s failed (%d): %s" % (" ".join(cmd), out.returncode,
                                                   out.stderr.strip()[-300:]))
    return json.loads(out.stdout.strip().splitlines()[-1])


def command(a, program, what, flags):
    if program == "qkv":
        return [a.qkv, "bench", what] + flags
    return [sys.executable, TORCH, what] + flags


def machine():
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            model = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return model


def mem_total_gb():
    try:
        with open("/proc/meminfo") as f:
            return int(next(l for l in f if l.startswith("MemTotal")).split()[1]) / 1e6
    except (OSError, StopIteration):
        return float("inf")


def git_commit():
    try:
        return subprocess.run(["git", "-C", HERE, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True).stdout.strip() or "?"
    except OSError:
        return "?"


def log(msg):
    print(msg, file=sys.stderr, flush=True)


# ---- correctness ----------------------------------------------------------------------------
def check(a):
    """qkv's O, dQ, dK, dV at N = 256 against the PyTorch implementations in float64."""
    rows, ok = [], True
    env = environment(a.threads, "default")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "dump.safetensors")
        for kind in ("softmax", "flash", "linear"):
            for causal in (0, 1):
                c = ["--causal"] if causal else []
                try:
                    run_json(command(a, "qkv", "attention", SHAPE + ["--n", "256", "--kind", kind,
                             "--steps", "1", "--warmup", "0", "--dump", path] + c), env)
                    r = run_json(command(a, "torch", "attention", ["--kind", "linear" if kind ==
                                 "linear" else "softmax", "--check", path] + c), env)
                except RuntimeError as e:
                    log("  %s" % str(e)[:400])
                    r = {"max_err": float("nan")}
                good = r["max_err"] <= CHECK_TOLERANCE
                ok &= good
                rows.append("%s%s %.1e%s" % (kind, " causal" if causal else "", r["max_err"],
                                             "" if good else " FAIL"))
    return ok, rows


# ---- attention ------------------------------------------------------------------------------
def bench_attention(a, limit_gb, results):
    """results[(name, causal, n)] = {"ms": [...], "mb": MB, "allocator": ...} or {"skip": why}.
    Each run is one timing process; the first run adds one memory process (one forward +
    backward with glibc's default allocator)."""
    envs = {k: environment(a.threads, k) for k in ("no-unmap", "default")}
    failed = set()
    t_start = time.time()
    for n in a.sizes:
        steps = ["--steps", str(steps_for(n)), "--warmup", "1"]
        for run in range(a.runs):
            for causal in (0, 1):
                for name, program, kind in IMPLS:
                    key = (name, causal, n)
                    if (name, causal) in failed:
                        results[key] = {"skip": "failed at a smaller N"}
                        continue
                    # time where glibc keeps freed memory if that fits, else with its defaults
                    alloc = next((al for al in ("no-unmap", "default")
                                  if estimated_gb(name, n, causal, al) <= limit_gb), None)
                    if alloc is None:
                        results[key] = {"skip": "needs ~%.1f GB" % estimated_gb(name, n, causal, "default")}
                        continue
                    flags = SHAPE + ["--n", str(n), "--kind", kind, "--threads", str(a.threads)]
                    flags += ["--causal"] if causal else []
                    cell = results.setdefault(key, {"ms": [], "allocator": alloc})
                    try:
                        if run == 0:
                            r = run_json(command(a, program, "attention", flags +
                                                 ["--steps", "1", "--warmup", "0"]), envs["default"])
                            cell["mb"] = r["rss_delta_mb"]
                        r = run_json(command(a, program, "attention", flags + steps), envs[alloc])
                    except (RuntimeError, subprocess.TimeoutExpired) as e:
                        log("  %s" % str(e)[:400])
                        failed.add((name, causal))
                        results[key] = {"skip": "failed"}
                        continue
                    cell["ms"].append(r["ms"])
                    log("[%6.0f s] N=%-5d run %d %-6s %-16s %9.2f ms %8.1f MB%s" %
                        (time.time() - t_start, n, run + 1, "causal" if causal else "", name,
                         r["ms"], cell["mb"], "" if alloc == "no-unmap" else " (default allocator)"))


def med(results, key, field="ms"):
    cell = results.get(key, {})
    return statistics.median(cell[field]) if cell.get(field) else None


def crossover(results, sizes, fast, slow, causal):
    """The smallest N from which `fast` beats `slow` at every larger N measured, and a log-log
    interpolation of where their time ratio crosses 1."""
    pts = [(n, med(results, (fast, causal, n), "ms"), med(results, (slow, causal, n), "ms"))
           for n in sizes]
    pts = [(n, f, s) for n, f, s in pts if f is not None and s is not None]
    if not pts:
        return "not measured"
    last_slower = None
    for i, (n, f, s) in enumerate(pts):
        if f >= s:
            last_slower = i
    if last_slower is None:
        return "N <= %d (faster at every N measured)" % pts[0][0]
    if last_slower == len(pts) - 1:
        skipped = [n for n in sizes if n > pts[-1][0]]
        why = " (%s not measured beyond: memory)" % slow if skipped else ""
        return "not reached by N = %d%s" % (pts[-1][0], why)
    (n0, f0, s0), (n1, f1, s1) = pts[last_slower], pts[last_slower + 1]
    r0, r1 = math.log(f0 / s0), math.log(f1 / s1)
    est = math.exp(math.log(n0) + (math.log(n1) - math.log(n0)) * r0 / (r0 - r1))
    return "N = %d (ratio crosses 1 near N ~ %d)" % (n1, round(est))


def attention_tables(results, sizes):
    out = []
    names = [n for n, _, _ in IMPLS]
    order = ["qkv materialised", "qkv flash", "qkv linear", "PyTorch softmax", "PyTorch linear"]
    for causal in (0, 1):
        out.append("\n### Attention forward + backward, %s (B 1, H 8, d 64)\n" %
                   ("causal" if causal else "non-causal"))
        head = ["N"] + ["%s ms | MB" % n for n in order] + ["materialised x", "flash x", "linear x"]
        out.append("| " + " | ".join(head) + " |")
        out.append("|" + " --- |" * (1 + 2 * len(order) + 3))
        for n in sizes:
            row = [str(n)]
            for name in order:
                cell = results.get((name, causal, n), {})
                if "skip" in cell:
                    row += ["skipped", cell["skip"]]
                elif cell.get("ms"):
                    mark = "" if cell["allocator"] == "no-unmap" else "*"
                    row += ["%.2f%s" % (med(results, (name, causal, n)), mark), "%.0f" % cell["mb"]]
                else:
                    row += ["-", "-"]
            for q in ("qkv materialised", "qkv flash", "qkv linear"):
                tq, tt = med(results, (q, causal, n), "ms"), med(results, (VERSUS[q], causal, n), "ms")
                row.append("%.2fx" % (tt / tq) if tq and tt else "-")
            out.append("| " + " | ".join(row) + " |")
        assert set(order) == set(names)
    out.append("\n### Crossover: where linear attention becomes faster than softmax\n")
    for causal in (0, 1):
        c = "causal" if causal else "non-causal"
        for fast, slow in [("qkv linear", "qkv materialised"), ("qkv linear", "qkv flash"),
                           ("PyTorch linear", "PyTorch softmax")]:
            out.append("- %s, %s vs %s: %s" % (c, fast, slow, crossover(results, sizes, fast, slow, causal)))
    return out


# ---- generation -----------------------------------------------------------------------------
def bench_generate(a, results):
    env = environment(a.threads, "no-unmap")
    t_start = time.time()
    max_len = max(a.positions) + a.gen_steps
    for pos in a.positions:
        for run in range(a.runs):
            for kind in ("softmax", "linear"):
                for program in ("qkv", "torch"):
                    flags = GEN_SHAPE + ["--kind", kind, "--position", str(pos), "--steps",
                                         str(a.gen_steps), "--warmup", "2", "--max-len",
                                         str(max_len), "--threads", str(a.threads)]
                    key = (program, kind, pos)
                    try:
                        r = run_json(command(a, program, "generate", flags), env)
                    except (RuntimeError, subprocess.TimeoutExpired) as e:
                        log("  %s" % str(e)[:400])
                        results[key] = {"skip": "failed"}
                        continue
                    cell = results.setdefault(key, {"ms": [], "state": r["state_mb"]})
                    if "ms" in cell:
                        cell["ms"].append(r["ms_per_token"])
                    log("[%6.0f s] position %-6d run %d %-5s %-7s %8.3f ms/token (prefill %.0f ms)" %
                        (time.time() - t_start, pos, run + 1, program, kind, r["ms_per_token"],
                         r["ms_prefill"]))


def generate_table(results, positions, a):
    out = ["\n### Generation: ms per token (decoder-only LM, d_model 512, 8 heads, FFN 2048, "
           "2 layers, vocab 256; median of %d steps, then of %d processes)\n" % (a.gen_steps, a.runs),
           "| position | qkv softmax (KV cache) | qkv linear (state) | PyTorch softmax | "
           "PyTorch linear | softmax x | linear x | KV cache MB | linear state MB |",
           "|" + " --- |" * 9]

    def m(program, kind, pos):
        cell = results.get((program, kind, pos), {})
        return statistics.median(cell["ms"]) if cell.get("ms") else None

    for pos in positions:
        vals = [m(p, k, pos) for p, k in [("qkv", "softmax"), ("qkv", "linear"),
                                           ("torch", "softmax"), ("torch", "linear")]]
        row = [str(pos)] + ["%.3f" % v if v else "failed" for v in vals]
        row.append("%.2fx" % (vals[2] / vals[0]) if vals[0] and vals[2] else "-")
        row.append("%.2fx" % (vals[3] / vals[1]) if vals[1] and vals[3] else "-")
        for kind in ("softmax", "linear"):
            cell = results.get(("qkv", kind, pos), {})
            row.append("%.2f" % cell["state"] if "state" in cell else "-")
        out.append("| " + " | ".join(row) + " |")
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--qkv", default="build/qkv")
    p.add_argument("--runs", type=int, default=3, help="processes per measurement (median)")
    p.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)),
                   help="threads of both (default: the cores this process may use)")
    p.add_argument("--sizes", default="256,512,1024,2048,4096,8192,16384")
    p.add_argument("--positions", default="100,10000", help="generation: timed positions")
    p.add_argument("--gen-steps", type=int, default=8, help="generation: timed steps")
    p.add_argument("--max-gb", type=float, default=16.0, help="skip what would need more")
    p.add_argument("--quick", action="store_true", help="N <= 2048, positions 100 and 1000")
    p.add_argument("--only", choices=["attention", "generate"], help="one half only")
    p.add_argument("--no-check", action="store_true", help="skip the correctness check")
    p.add_argument("--json", help="also write the raw measurements here")
    a = p.parse_args()
    if a.quick:
        a.sizes, a.positions = "256,512,1024,2048", "100,1000"
    a.sizes = [int(x) for x in a.sizes.split(",")]
    a.positions = [int(x) for x in a.positions.split(",")]
    if a.runs < 1 or a.threads < 1:
        p.error("--runs and --threads must be positive")
    limit_gb = min(a.max_gb, 0.85 * mem_total_gb())
    t0 = time.time()
    lines = ["## Softmax vs linear attention, qkv beside PyTorch",
             "",
             "%s, %s, %d threads, %.0f GB memory, OPENBLAS_CORETYPE=%s, PyTorch %s, qkv %s; "
             "median of %d processes per cell, alternating qkv and PyTorch; memory limit %.1f GB" %
             (datetime.datetime.now().strftime("%Y-%m-%d %H:%M"), machine(), a.threads,
              mem_total_gb(), os.environ.get("OPENBLAS_CORETYPE", "unset"),
              subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__)"],
                             capture_output=True, text=True).stdout.strip(), git_commit(),
              a.runs, limit_gb)]
    ok = True
    if not a.no_check:
        ok, rows = check(a)
        lines.append("")
        lines.append("Correctness at N = 256, max |qkv - PyTorch float64| / max |PyTorch| over "
                     "O, dQ, dK, dV: " + ", ".join(rows))
        log(lines[-1])
    att, gen = {}, {}
    if a.only != "generate":
        bench_attention(a, limit_gb, att)
        lines += attention_tables(att, a.sizes)
        lines.append("\nms: forward + backward, timed with glibc keeping freed memory (bench.py's "
                     "setting; * where that would not fit in the memory limit: glibc's defaults, "
                     "so PyTorch's page faults are in the time). MB: peak resident memory minus "
                     "the resident memory before the first tensor, of a separate process with "
                     "glibc's defaults. x: PyTorch time / qkv time (> 1: qkv faster; flash "
                     "against PyTorch's materialised softmax).")
    if a.only != "attention":
        bench_generate(a, gen)
        lines += generate_table(gen, a.positions, a)
        lines.append("\nx: PyTorch time / qkv time. KV cache and state: what the model keeps at "
                     "that position (2 layers).")
    lines.append("\nTotal time %.0f s." % (time.time() - t0))
    print("\n".join(lines))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"attention": [dict(zip(("impl", "causal", "n"), k), **v) for k, v in att.items()],
                       "generate": [dict(zip(("program", "kind", "position"), k), **v)
                                    for k, v in gen.items()]}, f, indent=1)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
