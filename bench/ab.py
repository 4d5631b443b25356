# SPDX-License-Identifier: MIT
"""Two qkv binaries against each other, alternating, on bench.py's benchmarks.

    python3 bench/ab.py --a OLD/qkv --b build/qkv [--runs 5] [--only NAME...]

For a change that should not move speed (a refactor): every run of every benchmark runs A, then
B, with the same flags, threads and environment, in both precisions where bench.py has them,
with the environment as it is and with OPENBLAS_CORETYPE unset; the table gives the medians and
B/A. Hold a lock around it (flock /tmp/qkv-cpu.lock) so that nothing else shares the cores.
"""
import argparse
import datetime
import os
import platform
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import BENCHES, PRECISIONS, env_for, run_json  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--a", required=True, help="the qkv binary before")
    p.add_argument("--b", required=True, help="the qkv binary after")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--only", nargs="*", help="run benchmarks whose name contains one of these")
    a = p.parse_args()
    for unset in (False, True):
        env = env_for(unset)
        label = "OPENBLAS_CORETYPE unset" if unset else "environment as is (OPENBLAS_CORETYPE=%s)" % \
            os.environ.get("OPENBLAS_CORETYPE", "unset")
        print("\n## %s" % label, flush=True)
        print("| benchmark | A | B | B/A | spread A | spread B |")
        print("| --- | --- | --- | --- | --- | --- |")
        for name, kind, flags, field, unit in BENCHES:
            if a.only and not any(o in name for o in a.only):
                continue
            for precision in PRECISIONS if kind in ("train", "decode") else ("fp32",):
                runs = {"a": [], "b": []}
                for _ in range(a.runs):
                    for which in ("a", "b"):
                        q = run_json([getattr(a, which), "bench", kind] + flags +
                                     ["--threads", "2", "--precision", precision], env)
                        runs[which].append(q[field])
                ma, mb = statistics.median(runs["a"]), statistics.median(runs["b"])
                spread = lambda r, m: "%.1f%%" % (100 * (max(r) - min(r)) / m)  # noqa: E731
                print("| %s %s | %.1f %s | %.1f %s | %.3f | %s | %s |" %
                      (name, precision, ma, unit, mb, unit, mb / ma, spread(runs["a"], ma),
                       spread(runs["b"], mb)), flush=True)
    print("\n%s, %s, %d runs each, alternating A and B" %
          (datetime.date.today().isoformat(), platform.processor() or platform.machine(), a.runs))


if __name__ == "__main__":
    main()
