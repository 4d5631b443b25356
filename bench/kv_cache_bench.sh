#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The bf16 key-value cache (issue 19, item 2): the time of one new token of a decoder-only LM
# at position ~100 and ~10,000, with the cache in float32 and in bf16, as `qkv bench generate`
# measures it (random weights: a step's time does not depend on what the model learned; d_model
# 512, 8 heads, 2 blocks, FFN 2048, a byte vocabulary, sinusoidal positions, so attention over
# the cache, not the output layer, is what grows with the position). The linear layers are
# float32 in the first rows and, where the CPU has AVX512-BF16, bf16 in the last (--precision
# bf16, whose default cache is bf16). Each run holds /tmp/qkv-cpu.lock (the machine is shared).
# Usage: bench/kv_cache_bench.sh [QKV] [STEPS]   (defaults: build/qkv, 40 timed tokens)
# POSITIONS="100 10000" (the default) sets the positions, THREADS=2 the threads.
# Prints a Markdown table: ms per token of each cache, the median and the fastest step (on a
# shared machine the fastest is the nearest to an idle machine's), and the speed-ups.
set -eu
QKV=$(realpath "${1:-build/qkv}")
STEPS=${2:-40}
THREADS=${THREADS:-2}
# one process per row: a float32-cache and a bf16-cache state of the same model, their timed
# steps alternating (--kv-compare), so that both see the same load
run() { # position precision -> "med32 min32 med16 min16"
  flock /tmp/qkv-cpu.lock "$QKV" bench generate --position "$1" --steps "$STEPS" --warmup 3 \
    --threads "$THREADS" --precision "$2" --kv-compare |
    sed -n 's/.*"ms_per_token": \([0-9.]*\), .*"ms_per_token_min": \([0-9.]*\),.*/\1 \2/p' |
    tr '\n' ' '
  echo
}
precisions=(fp32)
grep -q avx512_bf16 /proc/cpuinfo && precisions+=(bf16)
echo "| precision | position | fp32 cache: ms/token median, fastest | bf16 cache: median, fastest |" \
     "speed-up (median, fastest) |"
echo "| --- | --- | --- | --- | --- |"
for p in "${precisions[@]}"; do
  for pos in ${POSITIONS:-100 10000}; do
    read -r med32 min32 med16 min16 < <(run "$pos" "$p")
    echo "| $p | $pos | $med32, $min32 | $med16, $min16 |" \
         "$(awk -v a="$med32" -v b="$med16" -v c="$min32" -v d="$min16" \
              'BEGIN { printf "%.2fx, %.2fx", a / b, c / d }') |"
  done
done
