#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Data-parallel training across machines, tested as machines: two network namespaces (each its
# own network stack, interfaces and host name) joined by a veth pair, made inside the test's
# own mount and network namespaces (unshare), so that nothing leaves them and nothing of them
# outlives the test. mpirun runs in the first and starts the second rank's daemon in the other
# through an rsh agent (ip netns exec) instead of ssh; the ranks talk over TCP on the veth pair
# only (--mca btl tcp,self: no shared memory between them).
#   across        qkv train and train-lm on 2 "machines" against one process: every step's
#                 loss within 1e-5 relative, the parameters within 1e-6 (test_mpi.sh's
#                 tolerances); the gradients went over the link (the veth's byte counters)
#   shaped        the link limited to 1 Gbit/s with tc (tbf), and 1 ms each way where the
#                 kernel has netem: the same losses; the step time is printed, not checked
#                 (timing belongs in bench/netns_allreduce.sh)
#   bucketed      --allreduce bucketed (the sums overlapped with the backward pass) over the
#                 shaped link: the same losses as the flat sum
# Usage: test_netns.sh QKV_BINARY. Needs root, iproute2 (ip, tc), unshare and mpirun; skipped,
# saying which is missing, without them, and in the sanitizer run (QKV_E2E_QUICK=1: test_mpi.sh
# runs the same sums there). Each run is stopped after QKV_NETNS_TIMEOUT seconds (300), so that
# a link that never carries a byte fails the test instead of hanging it. A few seconds.
set -u
QKV=$(realpath "$1")
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${QKV_PY:-/usr/bin/python3}
skip() {
  echo "skip: $1"
  echo "0 passed, 0 failed"
  exit 0
}
if [ -z "${QKV_NETNS_INSIDE:-}" ]; then
  [ -z "${QKV_E2E_QUICK:-}" ] || skip "the sanitizer run (test_mpi.sh runs the sums under the sanitizers)"
  [ "$(id -u)" = 0 ] || skip "network namespaces need root (this runs as $(id -un))"
  for tool in ip tc unshare mpirun timeout; do
    command -v $tool >/dev/null || skip "$tool not found (iproute2, util-linux, openmpi-bin)"
  done
  unshare --mount --net true 2>/dev/null || skip "unshare --mount --net fails here (no namespaces in this container?)"
  exec unshare --mount --net env QKV_NETNS_INSIDE=1 bash "$0" "$@"
fi
. "$HERE/lib.sh" # $T, ok, bad, check

# ---- two machines: n0 (10.77.0.1) and n1 (10.77.0.2), a veth pair between them
. "$HERE/../../tools/netns_pair.sh"
netns_make "$T" 2>"$T/ns.err" || skip "cannot make the network namespaces: $(head -c 300 "$T/ns.err")"
export OMP_WAIT_POLICY=passive
export NETNS_TIMEOUT=${QKV_NETNS_TIMEOUT:-300}
across() { netns_mpirun "$@"; }
# run_ok NAME CMD...: CMD exits 0 within the time limit (exit 124: it did not)
run_ok() {
  local name=$1; shift
  [ "$(type -t "$1")" = function ] || set -- timeout -k 10 "$NETNS_TIMEOUT" "$@"
  if "$@" >"$T/run.out" 2>"$T/run.err"; then ok "$name"
  else bad "$name (exit $?): $(tail -c 400 "$T/run.err")"; fi
}

mpi_data "$T"
# test_mpi.sh's runs: one step per epoch over all 40 pairs, 30 steps; 7 windows a step
STEPS=30
TRAIN=(train --data "$T/pairs.tsv" --d-model 16 --heads 2 --ffn 32 --layers 1 --batch 40
       --epochs $STEPS --num-steps 8 --min-freq 1 --lr 0.001 --seed 3 --threads 1 --quiet)
LM=(train-lm --data "$T/text.txt" --d-model 16 --heads 2 --ffn 32 --layers 1 --context 16
    --batch 7 --steps $STEPS --log-every 1 --seed 3 --threads 1 --quiet)

# ---- across: two machines against one process
run_ok "train, one process" "$QKV" "${TRAIN[@]}" --out "$T/t1"
before=$(netns_tx_bytes)
run_ok "train, 2 machines over TCP" across "$QKV" "${TRAIN[@]:0:${#TRAIN[@]}-1}" --out "$T/t2"
sent=$(( $(netns_tx_bytes) - before ))
same_runs "train: 2 machines = one process" "$T/t1" "$T/t2"
params=$(grep -o '[0-9]* parameters' "$T/run.err" | head -1 | cut -d' ' -f1)
check "the gradients crossed the link: $sent bytes out of n0 for $STEPS steps of ${params:-?} parameters" \
  test "$sent" -ge $(( ${params:-1} * 4 * STEPS / 2 ))
run_ok "train-lm, one process" "$QKV" "${LM[@]}" --out "$T/l1"
run_ok "train-lm, 2 machines over TCP" across "$QKV" "${LM[@]}" --out "$T/l2"
# the key bias b_k has no gradient but rounding (test_mpi.sh says why it is left out)
same_runs "train-lm: 2 machines = one process" "$T/l1" "$T/l2" 1 .b_k

# ---- shaped: 1 Gbit/s each way (tbf), 1 ms each way where netem exists
if shaped=$(netns_shape 1gbit 1ms 2>"$T/tc.err"); then
  case "$shaped" in *ms*) ;; *) echo "note: no netem in this kernel: the link is limited to 1 Gbit/s, no latency added" ;; esac
  check "tc shapes the link ($shaped)" bash -c "ip netns exec n0 tc qdisc show dev v0 | grep -q tbf"
  run_ok "train, 2 machines, $shaped" across "$QKV" "${TRAIN[@]:0:${#TRAIN[@]}-1}" --out "$T/t3"
  same_runs "train over the shaped link = one process" "$T/t1" "$T/t3"
  echo "   (step time, flat sum: $(grep -o 'gradient allreduce.*' "$T/run.err"))"
else
  echo "skip: the shaped link: tc cannot limit it here (no tbf qdisc?): $(head -c 300 "$T/tc.err")"
  shaped="unshaped"
fi

# ---- bucketed: the sums overlapped with the backward pass, small buckets (several per step)
run_ok "train, 2 machines, $shaped, --allreduce bucketed" across "$QKV" "${TRAIN[@]:0:${#TRAIN[@]}-1}" \
  --allreduce bucketed --bucket-kb 4 --out "$T/t4"
same_runs "bucketed over the link ($shaped) = one process" "$T/t1" "$T/t4"
echo "   (step time, bucketed: $(grep -o 'gradient allreduce.*' "$T/run.err"))"
run_ok "train-lm, 2 machines, $shaped, --allreduce bucketed" across "$QKV" "${LM[@]}" \
  --allreduce bucketed --bucket-kb 4 --out "$T/l4"
same_runs "train-lm bucketed = one process" "$T/l1" "$T/l4" 1 .b_k

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
