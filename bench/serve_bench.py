#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""qkv serve under load: requests/s, tokens/s and p50/p99 latency at concurrency 1, 8 and 64,
for a translation model and a language model, beside the offline CLI's throughput on the same
inputs (qkv translate over the same sentences, qkv generate for the same number of tokens); then
the mix (--mix): 64 connections of greedy translations alone, and with one request in ten a
beam-4 search, p50/p99 of the greedy requests in each (a beam is rows of the running batch, so
the greedy requests' p99 should stay within 2x of theirs alone) and requests/s; and two models
served by one shared decoding thread or by one each (--scheduler shared / per-model).

    make bench-serve            (or: python3 bench/serve_bench.py --qkv build/qkv)
    python3 bench/serve_bench.py --qkv build/qkv --translation-model DIR --only-mix

Without --translation-model / --lm-model it trains its own: a translation model of the
Multi30k example's size (examples/multi30k.sh: d_model 256, 8 heads, 3 + 3 layers, joint BPE
of 8000) for --train-minutes on Multi30k, and a character language model (d_model 128, 4
layers, context 128) on Tiny Shakespeare. A briefly trained model translates worse, not
slower per token; the token counts are reported so that runs can be compared. A benchmark,
not a test: it checks only that every answer is a 200. Standard library only."""
import argparse
import http.client
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time


def start_server(qkv, model, threads, extra=()):
    p = subprocess.Popen([qkv, "serve", "--model", model, "--port", "0", "--threads", str(threads),
                          *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    while line and " on http://" not in line:  # a line per model before the address
        line = p.stdout.readline()
    m = re.search(r"http://([^:]+):(\d+)$", line.strip())
    if not m:
        p.kill()
        sys.exit(f"qkv serve did not start: {line} {p.stderr.read()}")
    return p, m.group(1), int(m.group(2))


def metric(host, port, name):
    c = http.client.HTTPConnection(host, port, timeout=60)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    c.close()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


def load(host, port, path, bodies, concurrency):
    """Sends every body once from `concurrency` clients (keep-alive connections); returns the
    latencies and the wall time."""
    lat, lock, nxt, errors = [], threading.Lock(), [0], []

    def client():
        c = http.client.HTTPConnection(host, port, timeout=600)
        while True:
            with lock:
                i = nxt[0]
                nxt[0] += 1
            if i >= len(bodies):
                break
            t0 = time.perf_counter()
            c.request("POST", path, body=bodies[i], headers={"Content-Type": "application/json"})
            r = c.getresponse()
            r.read()
            dt = time.perf_counter() - t0
            with lock:
                lat.append(dt)
                if r.status != 200:
                    errors.append(r.status)
        c.close()

    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if errors:
        sys.exit(f"{len(errors)} answers were not 200: {sorted(set(errors))}")
    return lat, wall


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def load_mixed(host, port, bodies, kinds, concurrency):
    """As load, each body of a kind ("greedy", "beam"); returns the latencies by kind, wall."""
    lat, lock, nxt, errors = {k: [] for k in set(kinds)}, threading.Lock(), [0], []

    def client():
        c = http.client.HTTPConnection(host, port, timeout=600)
        while True:
            with lock:
                i = nxt[0]
                nxt[0] += 1
            if i >= len(bodies):
                break
            t0 = time.perf_counter()
            c.request("POST", "/translate", body=bodies[i],
                      headers={"Content-Type": "application/json"})
            r = c.getresponse()
            r.read()
            dt = time.perf_counter() - t0
            with lock:
                lat[kinds[i]].append(dt)
                if r.status != 200:
                    errors.append(r.status)
        c.close()

    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        sys.exit(f"{len(errors)} answers were not 200: {sorted(set(errors))}")
    return lat, time.perf_counter() - t0


def mix_rows(qkv, tm, threads, sentences, connections, slots):
    """Greedy translations alone, then with every tenth a beam-4 request, at `connections`."""
    rows = []
    for share in (0, 10):
        kinds = ["beam" if share and i % share == share - 1 else "greedy"
                 for i in range(len(sentences))]
        bodies = [json.dumps({"q": s, **({"beam": 4} if k == "beam" else {})})
                  for s, k in zip(sentences, kinds)]
        p, host, port = start_server(qkv, tm, threads, ("--max-batch-tokens", str(slots)))
        try:
            load_mixed(host, port, bodies[:64], kinds[:64], connections)  # warm up
            lat, wall = load_mixed(host, port, bodies, kinds, connections)
        finally:
            p.terminate()
            p.wait()
        name = "greedy only" if not share else f"greedy + {100 // share}% beam 4"
        for k in ("greedy", "beam"):
            if lat.get(k):
                rows.append((name, k, len(lat[k]), len(bodies) / wall,
                             1000 * statistics.median(lat[k]), 1000 * pct(lat[k], 0.99)))
        print(f"  {name}: {len(bodies) / wall:.1f} req/s", flush=True)
    return rows


def scheduler_rows(qkv, tm, threads, sentences, connections):
    """Two models (one directory as en-de and de-en), half the requests each, one decoding
    thread for both or one each."""
    rows = []
    bodies = [json.dumps({"q": s, "source": "en" if i % 2 else "de",
                          "target": "de" if i % 2 else "en"}) for i, s in enumerate(sentences)]
    for sched in ("shared", "per-model"):
        p, host, port = start_server(qkv, tm, threads, ("--model", f"de-en={tm}", "--model",
                                                        f"en-de={tm}", "--scheduler", sched))
        try:
            load_mixed(host, port, bodies[:64], ["greedy"] * 64, connections)
            lat, wall = load_mixed(host, port, bodies, ["greedy"] * len(bodies), connections)
        finally:
            p.terminate()
            p.wait()
        rows.append((sched, len(bodies) / wall, 1000 * statistics.median(lat["greedy"]),
                     1000 * pct(lat["greedy"], 0.99)))
        print(f"  --scheduler {sched}: {rows[-1][1]:.1f} req/s", flush=True)
    return rows


def print_mix(mix, sched, a):
    print("\n| mix (64 connections) | requests | n | requests/s (all) | p50 ms | p99 ms |")
    print("|---|---|---:|---:|---:|---:|")
    for name, kind, n, rps, p50, p99 in mix:
        print(f"| {name} | {kind} | {n} | {rps:.1f} | {p50:.1f} | {p99:.1f} |")
    greedy = {name: p99 for name, kind, n, rps, p50, p99 in mix if kind == "greedy"}
    alone, mixed = greedy.get("greedy only"), greedy.get("greedy + 10% beam 4")
    if alone and mixed:
        print(f"\ngreedy p99 with 10% beam 4 / alone: {mixed / alone:.2f} (the aim: within 2)")
    if sched:
        print("\n| two models, 64 connections | requests/s | p50 ms | p99 ms |")
        print("|---|---:|---:|---:|")
    for sched_name, rps, p50, p99 in sched:
        print(f"| --scheduler {sched_name} | {rps:.1f} | {p50:.1f} | {p99:.1f} |")


def run_rows(name, host, port, path, bodies, levels):
    rows = []
    for c in levels:
        before = metric(host, port, "qkv_tokens_generated_total")
        steps0 = metric(host, port, "qkv_batch_size_count")
        rows0 = metric(host, port, "qkv_batch_size_sum")
        lat, wall = load(host, port, path, bodies, c)
        tokens = metric(host, port, "qkv_tokens_generated_total") - before
        steps = metric(host, port, "qkv_batch_size_count") - steps0
        batch = (metric(host, port, "qkv_batch_size_sum") - rows0) / steps if steps else 1.0
        rows.append((name, f"server, {c} client{'s' if c > 1 else ''}", len(bodies) / wall,
                     tokens / wall, 1000 * statistics.median(lat), 1000 * pct(lat, 0.99), batch))
        print(f"  {rows[-1][1]}: {rows[-1][2]:.1f} req/s, {rows[-1][3]:.0f} tok/s", flush=True)
    return rows, tokens


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--qkv", default="build/qkv")
    ap.add_argument("--data", default=os.environ.get("QKV_DATA_DIR", "../shared/data"))
    ap.add_argument("--translation-model")
    ap.add_argument("--lm-model")
    ap.add_argument("--train-minutes", type=float, default=2.0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--sentences", type=int, default=512, help="translation requests per level")
    ap.add_argument("--completions", type=int, default=64, help="completion requests per level")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--levels", default="1,8,64")
    ap.add_argument("--mix-slots", type=int, default=64, help="--max-batch-size of the mix")
    ap.add_argument("--only-mix", action="store_true", help="the mix and the schedulers only")
    ap.add_argument("--no-schedulers", action="store_true",
                    help="not the two-model run (a qkv from before --scheduler)")
    a = ap.parse_args()
    levels = [int(x) for x in a.levels.split(",")]
    work = tempfile.mkdtemp(prefix="qkv-serve-bench-")
    m30k = os.path.join(a.data, "multi30k")
    tm = a.translation_model
    if not tm:
        tm = os.path.join(work, "tm")
        print(f"training a Multi30k-size translation model for {a.train_minutes} min ...", flush=True)
        subprocess.run([a.qkv, "train", "--src", f"{m30k}/train.de", "--tgt", f"{m30k}/train.en",
                        "--tokenizer", "bpe", "--joint-bpe", "--vocab-size", "8000", "--tie", "all",
                        "--d-model", "256", "--heads", "8", "--ffn", "512", "--layers", "3",
                        "--batch-tokens", "3000", "--num-steps", "64", "--lr", "5e-4", "--clip", "1",
                        "--epochs", "100", "--minutes", str(a.train_minutes), "--threads",
                        str(a.threads), "--quiet", "--out", tm], check=True,
                       stdout=subprocess.DEVNULL)
    lm = a.lm_model
    if not lm and not a.only_mix:
        lm = os.path.join(work, "lm")
        print(f"training a character language model for {a.train_minutes / 2} min ...", flush=True)
        subprocess.run([a.qkv, "train-lm", "--data", f"{a.data}/tinyshakespeare/input.txt",
                        "--d-model", "128", "--heads", "4", "--ffn", "512", "--layers", "4",
                        "--context", "128", "--batch", "16", "--minutes", str(a.train_minutes / 2),
                        "--threads", str(a.threads), "--quiet", "--out", lm], check=True,
                       stdout=subprocess.DEVNULL)
    with open(f"{m30k}/test_2016_flickr.de", encoding="utf-8") as f:
        sentences = [l.strip() for l in f if l.strip()][:a.sentences]
    rows = []
    print("the mix:", flush=True)
    mix = mix_rows(a.qkv, tm, a.threads, sentences, 64, a.mix_slots)
    sched = []
    if not a.no_schedulers:
        print("two models:", flush=True)
        sched = scheduler_rows(a.qkv, tm, a.threads, sentences, 64)
    if a.only_mix:
        print_mix(mix, sched, a)
        print(f"\n{len(sentences)} Multi30k test sentences (de->en, one per request); --threads "
              f"{a.threads}; model {tm}")
        return

    # ---- translation: offline, then the server
    src = os.path.join(work, "src.txt")
    with open(src, "w", encoding="utf-8") as f:
        f.write("\n".join(sentences) + "\n")
    def timed(path):
        t0 = time.perf_counter()
        subprocess.run([a.qkv, "translate", "--model", tm, "--input", path, "--threads",
                        str(a.threads)], check=True, capture_output=True)
        return time.perf_counter() - t0
    empty = os.path.join(work, "empty.txt")
    open(empty, "w").close()
    startup = min(timed(empty) for _ in range(3))  # loading the model, which a server does once
    offline_wall = timed(src) - startup
    p, host, port = start_server(a.qkv, tm, a.threads)
    try:
        print("translation:", flush=True)
        bodies = [json.dumps({"q": s}) for s in sentences]
        r, tokens = run_rows("translation", host, port, "/translate", bodies, levels)
    finally:
        p.terminate()
        p.wait()
    # the server's tokens are the same greedy translations' tokens as the CLI's
    rows.append(("translation", f"offline `qkv translate` (batch 32; {startup:.2f} s start-up not counted)", len(sentences) / offline_wall,
                 tokens / offline_wall, float("nan"), float("nan"), 32.0))
    rows.extend(r)

    # ---- language model: offline qkv generate for the same total of tokens, then the server
    prompts = [s for s in open(f"{a.data}/tinyshakespeare/input.txt", encoding="utf-8")
               .read().split("\n\n")[:a.completions]]
    total = a.completions * a.max_tokens
    def generate(tokens):
        t0 = time.perf_counter()
        subprocess.run([a.qkv, "generate", "--model", lm, "--prompt", prompts[0], "--tokens",
                        str(tokens), "--threads", str(a.threads)], check=True, capture_output=True)
        return time.perf_counter() - t0
    gen_startup = min(generate(1) for _ in range(3))
    gen_wall = generate(total) - gen_startup
    p, host, port = start_server(a.qkv, lm, a.threads)
    try:
        print("language model:", flush=True)
        bodies = [json.dumps({"prompt": pr, "max_tokens": a.max_tokens, "seed": i})
                  for i, pr in enumerate(prompts)]
        r, _ = run_rows("language model", host, port, "/v1/completions", bodies, levels)
    finally:
        p.terminate()
        p.wait()
    rows.append(("language model", f"offline `qkv generate` ({total} tokens, one text; start-up not counted)", float("nan"),
                 total / gen_wall, float("nan"), float("nan"), 1.0))
    rows.extend(r)

    print(f"\n| model | run | requests/s | tokens/s | p50 ms | p99 ms | mean batch |")
    print("|---|---|---:|---:|---:|---:|---:|")
    fmt = lambda x, d: "" if x != x else f"{x:.{d}f}"
    for name, run, rps, tps, p50, p99, batch in rows:
        print(f"| {name} | {run} | {fmt(rps, 1)} | {fmt(tps, 0)} | {fmt(p50, 1)} | {fmt(p99, 1)} "
              f"| {fmt(batch, 1)} |")
    print_mix(mix, sched, a)
    print(f"\n{len(sentences)} Multi30k test sentences (de->en, one per request); {a.completions} "
          f"completions of {a.max_tokens} tokens; --threads {a.threads}; models in {work}")


if __name__ == "__main__":
    main()
