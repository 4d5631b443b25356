"""qkv against PyTorch, side by side in one run.

    /usr/bin/python3 bench/bench.py [--qkv build/qkv] [--runs 5] [--quick] [--only NAME...]

Every benchmark runs qkv (`qkv bench ...`) and the same computation in PyTorch
(bench/torch_bench.py) alternately, --runs times each, with the same shapes, threads and
environment, and reports the median of the runs' medians, the speed ratio qkv/PyTorch, and
qkv's achieved GFLOP/s as a fraction of an sgemm roof measured in the same run. Everything is
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
BIG = ["--d-model", "512", "--heads", "8", "--layers", "6", "--ffn", "2048", "--vocab", "10000"]
SMALL = ["--d-model", "256", "--heads", "4", "--layers", "3", "--ffn", "1024", "--vocab", "10000"]

BENCHES = [
    # name, kind, shape flags, the field compared (higher is better), unit
    ("train d512 6+6 b32", "train", BIG + ["--batch", "32", "--src-len", "32", "--tgt-len", "32"],
     "tokens_per_s", "target tok/s"),
    ("train d256 3+3 b64", "train", SMALL + ["--batch", "64", "--src-len", "32", "--tgt-len", "32"],
     "tokens_per_s", "target tok/s"),
    ("decode d512 b1", "decode", BIG + ["--batch", "1", "--src-len", "32", "--new-tokens", "32"],
     "tokens_per_s", "tok/s"),
    ("decode d512 b32", "decode", BIG + ["--batch", "32", "--src-len", "32", "--new-tokens", "32"],
     "tokens_per_s", "tok/s"),
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
        roof = []
        for _ in range(runs):
            for m, n, k in [(1024, 2048, 512), (1024, 512, 2048)]:
                roof.append(run_json([a.qkv, "bench", "sgemm", "--m", str(m), "--n", str(n),
                                      "--k", str(k), "--threads", "2", "--steps", "10"], env)["gflops"])
        roof_gflops = statistics.median(roof)
        print("\n## %s: sgemm roof %.0f GFLOP/s (2 threads)" % (label, roof_gflops), flush=True)
        print("| benchmark | qkv | PyTorch | qkv/PyTorch | qkv GFLOP/s | of roof |")
        print("| --- | --- | --- | --- | --- | --- |")
        for name, kind, flags, field, unit in BENCHES:
            if a.only and not any(o in name for o in a.only):
                continue
            extra = steps if "--steps" not in flags else []
            qkv_runs, torch_runs, qkv_gf = [], [], []
            try:
                for _ in range(runs):
                    q = run_json([a.qkv, "bench", kind] + flags + extra + ["--threads", "2"], env)
                    t = run_json([py, os.path.join(HERE, "torch_bench.py"), kind] + flags + extra +
                                 ["--threads", "2"], env)
                    qkv_runs.append(q[field]), torch_runs.append(t[field])
                    qkv_gf.append(q.get("gflops", float("nan")))
            except RuntimeError as e:
                print("| %s | failed: %s |  |  |  |  |" % (name, str(e)[:120]))
                continue
            qm, tm, gf = statistics.median(qkv_runs), statistics.median(torch_runs), statistics.median(qkv_gf)
            row = (name, "%.1f %s" % (qm, unit), "%.1f %s" % (tm, unit), "%.2fx" % (qm / tm),
                   "%.1f" % gf if gf == gf else "-", "%.0f%%" % (100 * gf / roof_gflops) if gf == gf else "-")
            rows.append((label,) + row)
            print("| " + " | ".join(row) + " |", flush=True)
    print("\n%s, %s, %d runs each, alternating qkv and PyTorch" %
          (datetime.date.today().isoformat(), platform.processor() or platform.machine(), runs))


if __name__ == "__main__":
    main()
