#!/usr/bin/env bash
# The bf16 key-value cache (issue 19, item 2): the time of one new token of a decoder-only LM
# at position ~100 and ~10,000, with the cache in float32 and in bf16, as `qkv bench generate`
# measures it (random weights: a step's time does not depend on what the model learned; d_model
# 512, 8 heads, 2 blocks, FFN 2048, a byte vocabulary, sinusoidal positions, so attention over
# the cache, not the output layer, is what grows with the position). The linear layers are
# float32 in the first rows and, where the CPU has AVX512-BF16, bf16 in the last (--precision
# bf16, whose default cache is bf16). Each run holds /tmp/qkv-cpu.lock (the machine is shared).
# Usage: bench/kv_cache_bench.sh [QKV] [STEPS]   (defaults: build/qkv, 30 timed tokens)
# POSITIONS="100 10000" (the default) sets the positions, THREADS=2 the threads.
# Prints a Markdown table: ms per token (median) and tokens/s of each cache, and the speed-up.
set -eu
QKV=$(realpath "${1:-build/qkv}")
STEPS=${2:-30}
THREADS=${THREADS:-2}
# one process per row: a float32-cache and a bf16-cache state of the same model, their timed
# steps alternating (--kv-compare), so that both see the same load
run() { # position precision -> "ms32 tps32 ms16 tps16"
  flock /tmp/qkv-cpu.lock "$QKV" bench generate --position "$1" --steps "$STEPS" --warmup 3 \
    --threads "$THREADS" --precision "$2" --kv-compare |
    sed -n 's/.*"ms_per_token": \([0-9.]*\), "tokens_per_s": \([0-9.]*\).*/\1 \2/p' | tr '\n' ' '
  echo
}
precisions=(fp32)
grep -q avx512_bf16 /proc/cpuinfo && precisions+=(bf16)
echo "| precision | position | fp32 cache ms/token (tok/s) | bf16 cache ms/token (tok/s) | speed-up |"
echo "| --- | --- | --- | --- | --- |"
for p in "${precisions[@]}"; do
  for pos in ${POSITIONS:-100 10000}; do
    read -r ms32 tps32 ms16 tps16 < <(run "$pos" "$p")
    echo "| $p | $pos | $ms32 ($tps32) | $ms16 ($tps16) |" \
         "$(awk -v a="$ms32" -v b="$ms16" 'BEGIN { printf "%.2fx", a / b }') |"
  done
done
