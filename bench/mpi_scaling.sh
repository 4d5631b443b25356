#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Data-parallel scaling on one machine (issue 20): the same train-lm job as 1 rank x 1 thread
# and 1 rank x 2 threads (no mpirun) and as 2 ranks x 1 thread (mpirun), for a small and a
# larger model; prints tokens/s of each and, from qkv's own report, the gradient allreduce
# time per step and the time rank 0 waited for the slower rank before it. Each run holds /tmp/qkv-cpu.lock (the machine is shared).
# Usage: bench/mpi_scaling.sh [QKV] [TEXT]   (defaults: build/qkv, Tiny Shakespeare's first 200 KB)
# MPI_ARGS: more mpirun options (e.g. "--mca mpi_yield_when_idle 1" on a busy machine).
# SCALE=K runs K times the steps (longer, steadier runs; default 1: 150 and 20 steps).
set -eu
QKV=$(realpath "${1:-build/qkv}")
TEXT=${2:-${QKV_DATA_DIR:-../shared/data}/tinyshakespeare/input.txt}
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
head -c 200000 "$TEXT" >"$T/text.txt"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# name, steps, model options
SIZES=("small 150 --d-model 64 --heads 4 --ffn 256 --layers 2"
       "large 20 --d-model 256 --heads 4 --ffn 1024 --layers 4")
tokens_per_s() { tail -n 1 "$1/metrics.jsonl" | sed -n 's/.*"tokens_per_s": \([0-9.]*\).*/\1/p'; }
for size in "${SIZES[@]}"; do
  set -- $size; name=$1 steps=$(( $2 * ${SCALE:-1} )); shift 2
  common=(train-lm --data "$T/text.txt" "$@" --context 64 --batch 16 --steps "$steps"
          --log-every "$steps" --eval-every 0 --val-fraction 0 --seed 1)
  flock /tmp/qkv-cpu.lock "$QKV" "${common[@]}" --threads 1 --out "$T/$name-1x1" 2>/dev/null >/dev/null
  flock /tmp/qkv-cpu.lock "$QKV" "${common[@]}" --threads 2 --out "$T/$name-1x2" 2>"$T/err1" >/dev/null
  flock /tmp/qkv-cpu.lock mpirun --bind-to none ${MPI_ARGS:-} -np 2 "$QKV" "${common[@]}" --threads 1 \
    --out "$T/$name-2x1" 2>"$T/err2" >/dev/null
  params=$(grep -o '[0-9]* parameters' "$T/err1")
  echo "$name ($params): 1 rank x 1 thread $(tokens_per_s "$T/$name-1x1");" \
       "1 rank x 2 threads $(tokens_per_s "$T/$name-1x2") tokens/s;" \
       "2 ranks x 1 thread $(tokens_per_s "$T/$name-2x1") tokens/s"
  grep "gradient allreduce" "$T/err2" | sed 's/^qkv: /  /'
done
