#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# End-to-end tests of data-parallel training over MPI (issue 20), on this one machine over
# loopback: `mpirun --oversubscribe -np 2` and `-np 3`, one thread per rank, tiny models,
# seconds in all.
#   same math     train and train-lm on N ranks against one process (no mpirun), 50 steps:
#                 every step's loss within 1e-5 relative, the final parameters within 1e-6
#   resume        a checkpoint written by N ranks continues on M ranks (3 -> 1, 2 -> 3) on
#                 the one-process trajectory
#   accumulation  --accum N on ranks: the one-process run of a batch N times larger, with one
#                 gradient allreduce per step
#   bucketed      --allreduce bucketed (the sums overlapping the backward pass): the same
#                 losses and parameters
#   faults        a rank killed with SIGKILL ends the job within seconds with a message
#                 naming it; the last checkpoint resumes
#   options       ranks started with different options stop at once, saying so; without
#                 --threads the ranks of a machine share its cores
# Usage: test_mpi.sh QKV_BINARY. QKV_E2E_QUICK=1 (the sanitizer run): 20 steps, not 50.
# Skipped without mpirun. Runs as root too (Open MPI's
# OMPI_ALLOW_RUN_AS_ROOT*). Under ASan, Open MPI's own allocations at exit are suppressed
# (lsan_mpi.supp: libmpi and libopen-pal only).
set -u
QKV=$(realpath "$1")
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${QKV_PY:-/usr/bin/python3}
. "$HERE/lib.sh" # $T, ok, bad, check
if ! command -v mpirun >/dev/null; then
  echo "skip: mpirun not found (scripts/install-deps.sh installs openmpi-bin)"
  echo "$pass passed, $fail failed"; exit 0
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export LSAN_OPTIONS="suppressions=$HERE/lsan_mpi.supp:fast_unwind_on_malloc=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
# no binding: with 3 ranks on 2 cores they share them
MPI=(mpirun --oversubscribe --bind-to none)
# run_ok NAME CMD...: CMD exits 0
run_ok() {
  local name=$1; shift
  if "$@" >"$T/run.out" 2>"$T/run.err"; then ok "$name"; else bad "$name (exit $?): $(tail -c 400 "$T/run.err")"; fi
}

STEPS=50; STOP=20
[ -n "${QKV_E2E_QUICK:-}" ] && STEPS=20 && STOP=10

# ---- the data: 40 short sentence pairs and 300 lines of text (lib.sh)
mpi_data "$T"

# One step per epoch (--batch = all 40 pairs, reshuffled every epoch, so the shards change),
# 50 epochs: metrics.jsonl has every step's loss. Dropout 0.1 as by default. lr 1e-3: at
# d2l's 5e-3 this tiny model's training is chaotic enough that rounding differences (the
# ranks' partial gradients are added in another order) grow past 1e-5 after ~30 steps.
TRAIN=(train --data "$T/pairs.tsv" --d-model 16 --heads 2 --ffn 32 --layers 1 --batch 40
       --epochs $STEPS --num-steps 8 --min-freq 1 --lr 0.001 --seed 3 --threads 1 --quiet)
# B = 7 windows: shards of 4 + 3 and 3 + 2 + 2
LM=(train-lm --data "$T/text.txt" --d-model 16 --heads 2 --ffn 32 --layers 1 --context 16
    --batch 7 --steps $STEPS --log-every 1 --seed 3 --threads 1 --quiet)

# ---- same math
run_ok "train, one process" "$QKV" "${TRAIN[@]}" --out "$T/t1"
run_ok "train, 2 ranks" "${MPI[@]}" -np 2 "$QKV" "${TRAIN[@]}" --out "$T/t2"
run_ok "train, 3 ranks" "${MPI[@]}" -np 3 "$QKV" "${TRAIN[@]}" --out "$T/t3"
same_runs "train: 2 ranks = one process" "$T/t1" "$T/t2"
same_runs "train: 3 ranks = one process" "$T/t1" "$T/t3"
check "train: rank 0 alone wrote the run directory (the same files as one process)" \
  test "$(cd "$T/t1" && ls)" = "$(cd "$T/t2" && ls)"
run_ok "train-lm, one process" "$QKV" "${LM[@]}" --out "$T/l1"
run_ok "train-lm, 2 ranks" "${MPI[@]}" -np 2 "$QKV" "${LM[@]}" --out "$T/l2"
run_ok "train-lm, 3 ranks" "${MPI[@]}" -np 3 "$QKV" "${LM[@]}" --out "$T/l3"
# The language model's key bias b_k has no gradient but rounding: softmax ignores a shift
# shared by all keys, q.(k + b) - q.k being the same for every key. Adam divides that noise
# by its own size and moves b_k by ~lr per step in a direction rounding decides, so it is left
# out (it changes no output); every other tensor is held to 1e-6.
same_runs "train-lm: 2 ranks = one process" "$T/l1" "$T/l2" 1 .b_k
same_runs "train-lm: 3 ranks = one process" "$T/l1" "$T/l3" 1 .b_k

# ---- resume on another number of ranks: stop at step 20, continue to 50 (quick: 10, 20)
run_ok "train: 3 ranks stop at step $STOP" "${MPI[@]}" -np 3 "$QKV" "${TRAIN[@]}" --out "$T/r31" --stop-after-steps $STOP
run_ok "train: one process resumes them" "$QKV" "${TRAIN[@]}" --out "$T/r31" --resume
same_runs "train: 3 ranks then one process = one process" "$T/t1" "$T/r31"
run_ok "train-lm: 2 ranks stop at step $STOP" "${MPI[@]}" -np 2 "$QKV" "${LM[@]}" --out "$T/r23" --stop-after-steps $STOP
run_ok "train-lm: 3 ranks resume them" "${MPI[@]}" -np 3 "$QKV" "${LM[@]}" --out "$T/r23" --resume
same_runs "train-lm: 2 ranks then 3 = one process" "$T/l1" "$T/r23" 1 .b_k

# ---- gradient accumulation: each rank sums its shards of the step's micro-batches, one
# allreduce per step (4 micro-batches of 10 pairs: the batch of 40 above)
run_ok "train --batch 10 --accum 4, 2 ranks" "${MPI[@]}" -np 2 "$QKV" "${TRAIN[@]:0:${#TRAIN[@]}-1}" \
  --batch 10 --accum 4 --out "$T/a2"
same_runs "train: 2 ranks x 4 micro-batches of 10 = one process, batch 40" "$T/t1" "$T/a2"
check "train --accum 4: one allreduce per step ($STEPS steps)" \
  grep -q "MB, $STEPS steps)" "$T/run.err"
run_ok "train-lm --batch 14, one process" "$QKV" "${LM[@]}" --batch 14 --out "$T/l14"
run_ok "train-lm --batch 7 --accum 2, 3 ranks" "${MPI[@]}" -np 3 "$QKV" "${LM[@]}" --accum 2 --out "$T/la3"
same_runs "train-lm: 3 ranks x 2 micro-batches of 7 = one process, batch 14" "$T/l14" "$T/la3" 1 .b_k

# ---- the gradients summed in buckets while the backward pass goes on (--allreduce bucketed;
# small buckets, so that several overlap)
run_ok "train --allreduce bucketed, 3 ranks, 2 micro-batches" "${MPI[@]}" -np 3 "$QKV" "${TRAIN[@]}" \
  --batch 20 --accum 2 --allreduce bucketed --bucket-kb 4 --out "$T/b3"
same_runs "train: 3 ranks, bucketed = one process" "$T/t1" "$T/b3"
run_ok "train-lm --allreduce bucketed, 2 ranks" "${MPI[@]}" -np 2 "$QKV" "${LM[@]}" \
  --allreduce bucketed --bucket-kb 4 --out "$T/lb2"
same_runs "train-lm: 2 ranks, bucketed = one process" "$T/l1" "$T/lb2" 1 .b_k

# ---- a rank killed: the job ends within seconds, saying which; the checkpoint resumes
KILL=(train-lm --data "$T/text.txt" --d-model 32 --heads 2 --ffn 64 --layers 2 --context 32
      --batch 8 --steps 100000 --log-every 5 --eval-every 0 --seed 3 --threads 1 --quiet)
"${MPI[@]}" -np 2 "$QKV" "${KILL[@]}" --out "$T/k" </dev/null >"$T/k.out" 2>"$T/k.err" &
job=$!
for _ in $(seq 100); do # until two checkpoints are written (metrics lines), 20 s at most
  [ "$(cat "$T/k/metrics.jsonl" 2>/dev/null | wc -l)" -ge 2 ] && break
  sleep 0.2
done
victim=""
for p in $(pgrep -P $job); do # the ranks are mpirun's children; rank 1 by its environment
  tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=1 && victim=$p
done
if [ -z "$victim" ]; then
  bad "kill: rank 1 not found among mpirun's children"; kill $job 2>/dev/null; wait $job
else
  kill -KILL "$victim"
  t0=$(date +%s.%N)
  for _ in $(seq 150); do kill -0 $job 2>/dev/null || break; sleep 0.1; done
  if kill -0 $job 2>/dev/null; then
    bad "kill: the job still runs 15 s after rank 1 was killed"; kill $job; wait $job
  else
    wait $job; status=$?
    secs=$(echo "$(date +%s.%N) - $t0" | bc)
    if [ $status -ne 0 ] && grep -qiE "signal 9|killed" "$T/k.err"; then
      ok "kill: the job ended in ${secs}s (exit $status): $(grep -iE -m1 "signal 9|killed" "$T/k.err")"
    else
      bad "kill: exit $status, stderr: $(tail -c 400 "$T/k.err")"
    fi
    last=$(tail -n 1 "$T/k/metrics.jsonl" | sed -n 's/.*"step": \([0-9]*\).*/\1/p')
    run_ok "kill: --resume continues from the last checkpoint (step $last)" \
      "${MPI[@]}" -np 2 "$QKV" "${KILL[@]}" --out "$T/k" --resume --steps $((last + 10))
    check "kill: the resumed run reached step $((last + 10))" \
      grep -q "\"step\": $((last + 10))," "$T/k/metrics.jsonl"
  fi
fi

# ---- without --threads, the ranks of a machine share its cores
want=$(( $(nproc) / 2 )); [ $want -lt 1 ] && want=1
"${MPI[@]}" -np 2 "$QKV" train-lm --data "$T/text.txt" --d-model 16 --heads 2 --ffn 32 --layers 1 \
  --context 16 --batch 4 --steps 2 --out "$T/th" >/dev/null 2>"$T/th.err"
check "no --threads: 2 ranks on $(nproc) cores take $want thread(s) each" \
  grep -q "data-parallel over 2 ranks (MPI), $want threads each" "$T/th.err"

# ---- ranks with different options
if "${MPI[@]}" -np 1 "$QKV" "${LM[@]}" --out "$T/m" --seed 1 : -np 1 "$QKV" "${LM[@]}" --out "$T/m" --seed 2 \
     >"$T/m.out" 2>"$T/m.err"; then
  bad "different options: exit 0"
elif grep -q "differ from rank 0" "$T/m.err" && [ ! -e "$T/m/checkpoint.safetensors" ]; then
  ok "different options: stopped at start: $(grep -m1 "differ from rank 0" "$T/m.err")"
else
  bad "different options: stderr: $(tail -c 400 "$T/m.err")"
fi

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
