# SPDX-License-Identifier: MIT
"""qkv against PyTorch, side by side in one run.

    /usr/bin/python3 bench/bench.py [--qkv build/qkv] [--runs 5] [--quick] [--only NAME...]

Every benchmark runs qkv (`qkv bench ...`) and the same computation in PyTorch
(bench/torch_bench.py) alternately, --runs times each, with the same shapes, threads and
environment, and reports the median of the runs' medians, the speed ratio qkv/PyTorch, and
qkv's achieved GFLOP/s as a fraction of a roof measured in the same run: OpenBLAS's sgemm for
float32, qkv's own bf16 GEMM for --precision bf16 (training and decoding run qkv in both
precisions within every alternation, against the same float32 PyTorch). Everything is
measured twice: with the environment as it is, and with OPENBLAS_CORETYPE unset (the machines
this project runs on export OPENBLAS_CORETYPE=Haswell, which halves OpenBLAS on Zen 5).
Machines are shared and noisy: compare ratios, not absolute times across runs.
"""
import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PRECISIONS = ("fp32", "bf16")
BIG = ["--d-model", "512", "--heads", "8", "--layers", "6", "--ffn", "2048", "--vocab", "10000"]
SMALL = ["--d-model", "256", "--heads", "4", "--layers", "3", "--ffn", "1024", "--vocab", "10000"]

TRAIN_STEPS = ["--steps", "5", "--warmup", "1"]
BENCHES = [
    # name, kind, shape flags, the field compared (higher is better), unit
    ("train d512 6+6 b32", "train", BIG + ["--batch", "32", "--src-len", "32", "--tgt-len", "32"] +
     TRAIN_STEPS, "tokens_per_s", "target tok/s"),
    ("train d256 3+3 b64", "train", SMALL + ["--batch", "64", "--src-len", "32", "--tgt-len", "32"] +
     TRAIN_STEPS, "tokens_per_s", "target tok/s"),
    ("decode d512 b1", "decode", BIG + ["--batch", "1", "--src-len", "32", "--new-tokens", "32",
                                        "--steps", "5", "--warmup", "1"], "tokens_per_s", "tok/s"),
    ("decode d512 b32", "decode", BIG + ["--batch", "32", "--src-len", "32", "--new-tokens", "32",
                                         "--steps", "3", "--warmup", "1"], "tokens_per_s", "tok/s"),
    ("attention N=1024", "attention", ["--d-model", "512", "--heads", "8", "--batch", "1", "--n", "1024"],
     "gflops", "GFLOP/s"),
    ("attention N=4096", "attention", ["--d-model", "512", "--heads", "8", "--batch", "1", "--n", "4096",
                                       "--steps", "3", "--warmup", "1"], "gflops", "GFLOP/s"),
]


def env_for(coretype_unset):
    env = dict(os.environ)
    env.update({"OMP_WAIT_POLICY": "passive", "MALLOC_MMAP_MAX_": "0",
                "MALLOC_TRIM_THRESHOLD_": str(1 << 40), "OMP_NUM_THREADS": "2"})
    if coretype_unset:
        env.pop("OPENBLAS_CORETYPE", None)
    return env


def run_json(cmd, env):
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        raise RuntimeError("%s failed: %s" % (" ".join(cmd), out.stderr.strip()[-500:]))
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[1])
    p.add_argument("--qkv", default="build/qkv")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--quick", action="store_true", help="3 steps per run, 3 runs")
    p.add_argument("--only", nargs="*", help="run benchmarks whose name contains one of these")
    a = p.parse_args()
    runs = 3 if a.quick else a.runs
    steps = ["--steps", "3", "--warmup", "1"] if a.quick else []
    py = sys.executable
    rows = []
    for unset in (False, True):
        env = env_for(unset)
        label = "OPENBLAS_CORETYPE unset" if unset else "environment as is (OPENBLAS_CORETYPE=%s)" % \
            os.environ.get("OPENBLAS_CORETYPE", "unset")
        roofs = {}
        for precision in PRECISIONS:
            roof = []
            for _ in range(runs):
                for m, n, k in [(1024, 2048, 512), (1024, 512, 2048)]:
                    roof.append(run_json([a.qkv, "bench", "sgemm", "--m", str(m), "--n", str(n),
                                          "--k", str(k), "--threads", "2", "--steps", "10",
                                          "--precision", precision], env)["gflops"])
            roofs[precision] = statistics.median(roof)
        print("\n## %s: roof (2 threads) %.0f GFLOP/s OpenBLAS sgemm, %.0f GFLOP/s qkv bf16 GEMM" %
              (label, roofs["fp32"], roofs["bf16"]), flush=True)
        print("| benchmark | qkv | PyTorch (fp32) | qkv/PyTorch | qkv GFLOP/s | of roof |")
        print("| --- | --- | --- | --- | --- | --- |")
        for name, kind, flags, field, unit in BENCHES:
            if a.only and not any(o in name for o in a.only):
                continue
            if a.quick and "--steps" in flags:
                flags = flags[:flags.index("--steps")]
            extra = steps if "--steps" not in flags else []
            precisions = PRECISIONS if kind in ("train", "decode") else ("fp32",)
            qkv_runs = {p: [] for p in precisions}
            qkv_gf = {p: [] for p in precisions}
            torch_runs = []
            try:
                for _ in range(runs):
                    for precision in precisions:
                        q = run_json([a.qkv, "bench", kind] + flags + extra +
                                     ["--threads", "2", "--precision", precision], env)
                        qkv_runs[precision].append(q[field])
                        qkv_gf[precision].append(q.get("gflops", float("nan")))
                    t = run_json([py, os.path.join(HERE, "torch_bench.py"), kind] + flags + extra +
                                 ["--threads", "2"], env)
                    torch_runs.append(t[field])
            except RuntimeError as e:
                print("| %s | failed: %s |  |  |  |  |" % (name, str(e)[:120]))
                continue
            tm = statistics.median(torch_runs)
            for precision in precisions:
                qm, gf = statistics.median(qkv_runs[precision]), statistics.median(qkv_gf[precision])
                row = ("%s %s" % (name, precision), "%.1f %s" % (qm, unit), "%.1f %s" % (tm, unit),
                       "%.2fx" % (qm / tm), "%.1f" % gf if gf == gf else "-",
                       "%.0f%%" % (100 * gf / roofs[precision]) if gf == gf else "-")
                rows.append((label,) + row)
                print("| " + " | ".join(row) + " |", flush=True)
    print("\n%s, %s, %d runs each, alternating qkv and PyTorch" %
          (datetime.date.today().isoformat(), platform.processor() or platform.machine(), runs))


if __name__ == "__main__":
    main()
