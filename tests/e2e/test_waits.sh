#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# How qkv sets OpenMP's waits before libgomp loads (src/cli/main.c choose_waits): training
# sleeps at once (OMP_WAIT_POLICY=passive); the decoding commands spin a bounded
# GOMP_SPINCOUNT=1000 when the cores are free, else sleep too; a user's own OMP_WAIT_POLICY or
# GOMP_SPINCOUNT is left as it is. Each command is caught blocked reading a FIFO that this
# script holds open for writing (qkv refuses a FIFO without a writer rather than wait), after
# qkv has started itself again, and its environment read from /proc.
# Usage: test_waits.sh QKV_BINARY
set -u
QKV=$(realpath "$1")
FRA=${QKV_DATA_DIR:-../shared/data}/fra-eng/fra.txt
. "$(dirname "$0")/lib.sh" # $T, ok, bad, check, expect_fail
if [ ! -r "$FRA" ] || [ ! -r /proc/self/environ ]; then
  echo "skip: no $FRA or no /proc"; echo "0 passed, 0 failed"; exit 0
fi
mkfifo "$T/fifo"

# waits_of ENV... -- QKV_ARGS...: "policy=P spin=S" of qkv started with ENV (P, S: "-" unset)
# while it blocks reading the FIFO (held open here, as fd 3, and not passed to qkv)
waits_of() {
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  exec 3<>"$T/fifo"
  env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT -u QKV_NO_REEXEC "${envs[@]}" "$QKV" "$@" \
    >/dev/null 2>&1 3>&- &
  local pid=$! e=""
  for _ in $(seq 100); do # until it has started again (QKV_NO_REEXEC marks the second start)
    e=$(tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null)
    case $e in *QKV_NO_REEXEC=*|*OMP_WAIT_POLICY=active*) break ;; esac
    sleep 0.05
  done
  exec 3>&- # unblock it: an empty input
  wait "$pid" 2>/dev/null
  local p s
  p=$(sed -n 's/^OMP_WAIT_POLICY=//p' <<<"$e"); s=$(sed -n 's/^GOMP_SPINCOUNT=//p' <<<"$e")
  echo "policy=${p:--} spin=${s:--}"
}

"$QKV" train --data "$FRA" --num-examples 40 --d-model 8 --heads 2 --ffn 16 --layers 1 \
  --epochs 1 --num-steps 6 --threads 1 --quiet --out "$T/m" >/dev/null 2>&1
check "a tiny model to translate with" test -r "$T/m/model.safetensors"

got=$(waits_of -- train --data "$T/fifo" --out "$T/t" --quiet)
check "train sleeps at once ($got)" test "$got" = "policy=passive spin=-"
# translate spins only on free cores (1-minute load average below half the cores): the load is
# read before and after; when both readings agree the outcome must match them, and only when
# the load crossed the line in between may it be either
free() { awk -v c="$(nproc)" '{ print ($1 < 0.5 * c) ? "free" : "busy" }' /proc/loadavg; }
before=$(free)
got=$(waits_of -- translate --model "$T/m" --input "$T/fifo")
after=$(free)
case "$before $after $got" in
  "free free policy=- spin=1000"|"busy busy policy=passive spin=-") ok "translate on $before cores ($got)" ;;
  "free busy "*|"busy free "*)
    case $got in
      "policy=passive spin=-"|"policy=- spin=1000") ok "translate while the load crossed ($got)" ;;
      *) bad "translate while the load crossed ($got)" ;;
    esac ;;
  *) bad "translate on $before cores: a bounded spin if free, else passive ($got)" ;;
esac
got=$(waits_of GOMP_SPINCOUNT=50 -- train --data "$T/fifo" --out "$T/t" --quiet)
check "a user's GOMP_SPINCOUNT is kept, no policy forced ($got)" test "$got" = "policy=- spin=50"
got=$(waits_of OMP_WAIT_POLICY=active -- translate --model "$T/m" --input "$T/fifo")
check "a user's OMP_WAIT_POLICY is kept ($got)" test "$got" = "policy=active spin=-"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
