#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# How OpenMP's waits cost a decoding step (issue 19, item 3). A greedy step at batch 1 opens
# some 50 parallel regions, one per product, and each wakes the second thread; with sleeping
# (passive) waits every wake-up is a futex round trip, with spinning waits it is a few hundred
# cycles but a spinning thread burns its core while another process needs it. This times, per
# wait scheme, alternating the schemes in every round:
#   ms per decoding step (qkv bench decode, d512 6+6, random weights, batch 1 and 32), alone
#   and with COMPETE busy loops sharing the cores; training tokens/s (qkv bench train, d256
#   3+3, batch 64 x 32 x 32) alone and with the competitors.
# Schemes: passive (OMP_WAIT_POLICY=passive: sleep at once), spinN (policy unset,
# GOMP_SPINCOUNT=N: spin N iterations, then sleep), active (OMP_WAIT_POLICY=active: spin for
# up to minutes; decoding alone only: with competitors it collapses, 10-50x slower).
# Each round holds LOCK (default /tmp/qkv-cpu.lock) so that other benchmarks on a shared
# machine do not run at the same time; a busy machine still makes every number provisional.
# Usage: bench/handoff_bench.sh [QKV]   (default build/qkv)
#   REPS=5 SPINS="100 1000" COMPETE=2 TRAIN=1 ACTIVE=1 LOCK=/tmp/qkv-cpu.lock
#   (ACTIVE=0 leaves out the active scheme, the slowest on a busy machine)
set -eu
QKV=$(realpath "${1:-build/qkv}")
REPS=${REPS:-5}
SPINS=${SPINS:-"100 1000"}
COMPETE=${COMPETE:-2}
TRAIN=${TRAIN:-1}
ACTIVE=${ACTIVE:-1}
LOCK=${LOCK:-/tmp/qkv-cpu.lock}
T=$(mktemp -d)
busy=()
stop_competitors() {
  for p in "${busy[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${busy[@]}"; do wait "$p" 2>/dev/null || true; done
  busy=()
}
trap 'stop_competitors; rm -rf "$T"' EXIT
start_competitors() {
  for _ in $(seq "$COMPETE"); do
    sh -c 'while :; do :; done' &
    busy+=($!)
  done
}

schemes=(passive)
for n in $SPINS; do schemes+=("spin$n"); done
[ "$ACTIVE" = 1 ] && schemes+=(active)

# run SCHEME CMD...: CMD under the scheme's environment (QKV_NO_REEXEC keeps qkv from
# choosing a policy itself)
run() {
  local s=$1; shift
  case $s in
    passive) env -u GOMP_SPINCOUNT OMP_WAIT_POLICY=passive "$@" ;;
    active) env -u GOMP_SPINCOUNT OMP_WAIT_POLICY=active "$@" ;;
    spin*) env -u OMP_WAIT_POLICY QKV_NO_REEXEC=1 GOMP_SPINCOUNT="${s#spin}" "$@" ;;
  esac
}
field() { sed -n "s/.*\"$1\": \([0-9.]*\).*/\1/p"; }
decode() { # decode SCHEME BATCH -> ms per step
  run "$1" "$QKV" bench decode --threads 2 --batch "$2" --src-len 16 --new-tokens 32 \
    --steps "$([ "$2" = 1 ] && echo 5 || echo 3)" --warmup 1 | field ms_per_token
}
train() { # train SCHEME -> target tokens/s
  run "$1" "$QKV" bench train --threads 2 --d-model 256 --heads 4 --ffn 1024 --layers 3 \
    --batch 64 --src-len 32 --tgt-len 32 --steps 3 --warmup 1 | field tokens_per_s
}
# one measurement: appended to $T/KEY
measure() { local key=$1; shift; "$@" >>"$T/$key"; }

exec 9>"$LOCK"
for r in $(seq "$REPS"); do
  flock 9
  for s in "${schemes[@]}"; do
    measure "$s.b1" decode "$s" 1
    measure "$s.b32" decode "$s" 32
    [ "$TRAIN" = 1 ] && [ "$s" != active ] && measure "$s.train" train "$s"
  done
  start_competitors
  for s in "${schemes[@]}"; do
    [ "$s" = active ] && continue
    measure "$s.b1c" decode "$s" 1
    measure "$s.b32c" decode "$s" 32
    [ "$TRAIN" = 1 ] && measure "$s.trainc" train "$s"
  done
  stop_competitors
  flock -u 9
  echo "round $r of $REPS done" >&2
done

# median (min-max) of a file of numbers
stat() {
  [ -s "$1" ] || { echo "-"; return; }
  sort -g "$1" | awk '{a[NR] = $1} END {printf "%.2f (%.2f-%.2f)", a[int((NR + 1) / 2)], a[1], a[NR]}'
}
echo "median (min-max) of $REPS rounds; competitors: $COMPETE busy loops; $(nproc) cores;" \
  "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
printf "%-12s %-22s %-22s %-22s %-22s %-24s %-24s\n" scheme "b1 ms/step" "b1 contended" \
  "b32 ms/step" "b32 contended" "train tok/s" "train contended"
for s in "${schemes[@]}"; do
  printf "%-12s %-22s %-22s %-22s %-22s %-24s %-24s\n" "$s" "$(stat "$T/$s.b1")" \
    "$(stat "$T/$s.b1c")" "$(stat "$T/$s.b32")" "$(stat "$T/$s.b32c")" "$(stat "$T/$s.train")" \
    "$(stat "$T/$s.trainc")"
done
