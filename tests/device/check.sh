#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The device check: everything about the CUDA device that needs a GPU, in one run of at most
# 8 minutes on a machine with one (an H200 here), where nothing can be downloaded. Stages, each
# under its own time limit; a stage that fails or runs out of time is reported and the next
# one runs all the same:
#   env        the GPU, driver, nvcc and compute-sanitizer this machine has
#   build      make CUDA=1 (sm_90 and PTX) with the device tests; where the library's packages
#              are missing, the programs tests/device/prepare.sh packed in .device instead
#   ops        test_backend_ops over every table, the CUDA ones included (fp32, bf16; a CUDA
#              table it skips fails the stage)
#   parity     tests/device/parity.c: 20 training steps, greedy, beam, attention maps, bf16,
#              a language model, each against the CPU
#   sanitizer  compute-sanitizer memcheck on a short parity run
#   bench      qkv bench train on the README's small (d256 3+3, batch 64) and d512 (6+6, batch
#              32) configurations, and decode (d512) at batch 1, 32 and 128: GPU fp32 and bf16
#              against the CPU
# Results: $OUT/device-check.jsonl (one JSON object a stage, then one per benchmark run, then
# a summary) and $OUT/device-check.log (every stage's output). Exits 1 if a stage failed.
# Usage: tests/device/check.sh   (OUT defaults to build-cuda/device-check; CHECK_BUDGET, in
# seconds, to 480; CHECK_BUILD=0 takes the bundle without trying to build)
set -u
cd "$(dirname "$0")/../.." || exit 1
ROOT=$(pwd)
OUT=${OUT:-$ROOT/build-cuda/device-check}
mkdir -p "$OUT" || exit 1
RESULTS=$OUT/device-check.jsonl LOG=$OUT/device-check.log
: >"$RESULTS"
: >"$LOG"
BUDGET=${CHECK_BUDGET:-480}
T0=$(date +%s)
failures=0

json_string() { # stdin -> one JSON string (backslashes, quotes, control characters escaped)
  sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/\t/ /g' | tr -d '\r' | awk 'BEGIN { ORS = "" }
    { gsub(/[\001-\037]/, " "); if (NR > 1) print "\\n"; print }' | sed -e 's/^/"/' -e 's/$/"/'
}

left() { echo $((BUDGET - ($(date +%s) - T0))); }

# stage NAME LIMIT CMD...: runs CMD with at most LIMIT seconds (less if the budget is short),
# its output into the log and $OUT/NAME.out; records status (ok, fail, timeout, skipped),
# seconds and the output's last lines.
stage() {
  local name=$1 limit=$2 rc status t1 secs
  shift 2
  if [ "$(left)" -lt "$limit" ]; then limit=$(left); fi
  if [ "$limit" -lt 10 ]; then
    printf '{"stage": "%s", "status": "skipped", "why": "the 8-minute budget is spent"}\n' \
      "$name" >>"$RESULTS"
    echo "== $name: skipped (budget spent)" | tee -a "$LOG"
    failures=$((failures + 1))
    return 1
  fi
  echo "== $name (at most ${limit}s): $*" | tee -a "$LOG"
  t1=$(date +%s)
  if [ "$(type -t "$1")" = function ]; then # a function of this script (exported below)
    timeout -k 5 "$limit" bash -c "$*" >"$OUT/$name.out" 2>&1
  else
    timeout -k 5 "$limit" "$@" >"$OUT/$name.out" 2>&1
  fi
  rc=$?
  secs=$(($(date +%s) - t1))
  cat "$OUT/$name.out" >>"$LOG"
  case $rc in
    0) status=ok ;;
    124 | 137) status=timeout ;;
    *) status=fail ;;
  esac
  [ "$status" = ok ] || failures=$((failures + 1))
  printf '{"stage": "%s", "status": "%s", "exit": %d, "seconds": %d, "tail": %s}\n' "$name" \
    "$status" "$rc" "$secs" "$(tail -n 15 "$OUT/$name.out" | json_string)" >>"$RESULTS"
  echo "== $name: $status (exit $rc, ${secs}s)" | tee -a "$LOG"
  [ "$status" = ok ]
}

skip() { # skip NAME WHY
  printf '{"stage": "%s", "status": "skipped", "why": %s}\n' "$1" "$(echo "$2" | json_string)" \
    >>"$RESULTS"
  echo "== $1: skipped: $2" | tee -a "$LOG"
  failures=$((failures + 1))
}

# The stages' functions run in a shell of their own, under timeout.
export -f json_string
export ROOT RESULTS
# the toolkit where nvcc is, if not in /usr/local/cuda
if [ -z "${CUDA_HOME:-}" ] && command -v nvcc >/dev/null 2>&1; then
  CUDA_HOME=$(dirname "$(dirname "$(command -v nvcc)")")
  export CUDA_HOME
fi

# ---- env -----------------------------------------------------------------------------------
env_report() {
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv || true
  nvcc --version | tail -n 2 || true
  command -v compute-sanitizer && compute-sanitizer --version | tail -n 1 || true
  echo "cores: $(nproc)"
  if [ -f .device/bundle.tar.xz ]; then echo "bundle: $(tar -xJOf .device/bundle.tar.xz ./commit)"; fi
  git rev-parse HEAD 2>/dev/null || true
}
export -f env_report
stage env 30 env_report

# ---- build ---------------------------------------------------------------------------------
BIN=$ROOT/build-cuda
build() {
  make CUDA=1 -j"$(nproc)" all device-tests &&
    { [ ! -f tests/unit/test_backend_ops.c ] || make CUDA=1 -j"$(nproc)" build-cuda/tests/test_backend_ops; }
}
export -f build
if [ "${CHECK_BUILD:-1}" = 0 ]; then
  skip build "CHECK_BUILD=0: the carried bundle"
  built=0
else
  stage build 240 build && built=1 || built=0
fi
if [ "$built" = 0 ]; then
  if [ -f .device/bundle.tar.xz ]; then # the programs prepare.sh built, with their libraries
    rm -rf /tmp/qkv-device && mkdir -p /tmp/qkv-device &&
      tar -C /tmp/qkv-device -xJf .device/bundle.tar.xz
    BIN=/tmp/qkv-device/bin
    mkdir -p "$BIN/tests"
    for p in device_parity test_backend_ops; do [ -f "$BIN/$p" ] && ln -sf "$BIN/$p" "$BIN/tests/$p"; done
    export LD_LIBRARY_PATH=/tmp/qkv-device/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    echo "== build: using the carried bundle, commit $(cat /tmp/qkv-device/commit)" | tee -a "$LOG"
    printf '{"stage": "bundle", "status": "ok", "commit": %s}\n' \
      "$(json_string </tmp/qkv-device/commit)" >>"$RESULTS"
  else
    skip bundle "no .device/bundle.tar.xz (tests/device/prepare.sh makes it; carry .device)"
  fi
fi
QKV=$BIN/qkv
have() { [ -x "$1" ]; }
# cuBLAS where the loader does not find it: the toolkit's, or pip's nvidia-cublas beside PyTorch
if have "$QKV" && ldd "$QKV" 2>/dev/null | grep -q 'libcublas.*not found'; then
  for d in "${CUDA_HOME:-/usr/local/cuda}/lib64" /usr/local/cuda*/lib64 \
    "$(python3 -c 'import nvidia.cublas, os; print(os.path.dirname(nvidia.cublas.__file__) + "/lib")' 2>/dev/null)"; do
    if [ -n "$d" ] && ls "$d"/libcublas.so.* >/dev/null 2>&1; then
      export LD_LIBRARY_PATH=$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
      echo "== cuBLAS from $d" | tee -a "$LOG"
      break
    fi
  done
fi

# ---- ops, parity, sanitizer ----------------------------------------------------------------
# the backend-ops test; here a CUDA table it skips (no GPU found) is a failure
ops_run() {
  local out rc
  out=$("$BIN/tests/test_backend_ops" 2>&1)
  rc=$?
  printf '%s\n' "$out"
  if printf '%s\n' "$out" | grep -q 'SKIPPED  \] table cuda'; then
    echo "ops: a CUDA table was skipped"
    return 1
  fi
  return $rc
}
export -f ops_run
export BIN
if have "$BIN/tests/test_backend_ops"; then
  stage ops 90 ops_run
else
  skip ops "no test_backend_ops in this tree or bundle"
fi
if have "$BIN/tests/device_parity"; then
  stage parity 120 "$BIN/tests/device_parity"
  if command -v compute-sanitizer >/dev/null 2>&1; then
    stage sanitizer 90 compute-sanitizer --tool memcheck --error-exitcode 99 \
      "$BIN/tests/device_parity" --quick
  else
    skip sanitizer "no compute-sanitizer on this machine"
  fi
else
  skip parity "no device_parity built"
  skip sanitizer "no device_parity built"
fi

# ---- bench ---------------------------------------------------------------------------------
SMALL="--d-model 256 --heads 4 --layers 3 --ffn 1024 --vocab 10000"
BIG="--d-model 512 --heads 8 --layers 6 --ffn 2048 --vocab 10000"
bench_all() {
  local runs=() dev
  for dev in "cuda fp32" "cuda bf16" "cpu fp32"; do
    set -- $dev
    local steps="--steps 10 --warmup 2"
    [ "$1" = cpu ] && steps="--steps 2 --warmup 1"
    runs+=("train small $1 $2|train $SMALL --batch 64 --src-len 32 --tgt-len 32 $steps --device $1 --precision $2")
    runs+=("train d512 $1 $2|train $BIG --batch 32 --src-len 32 --tgt-len 32 $steps --device $1 --precision $2")
    for b in 1 32 128; do
      runs+=("decode d512 b$b $1 $2|decode $BIG --batch $b --src-len 32 --new-tokens 32 $steps --device $1 --precision $2")
    done
  done
  local r name args line errors=0
  for r in "${runs[@]}"; do
    name=${r%%|*} args=${r#*|}
    # shellcheck disable=SC2086
    line=$(timeout -k 5 60 "$QKV" bench $args 2>&1 | tail -n 1)
    echo "$name: $line"
    case $line in
      \{*) printf '{"run": "%s", "result": %s}\n' "$name" "$line" >>"$RESULTS" ;;
      *)
        printf '{"run": "%s", "error": %s}\n' "$name" "$(echo "$line" | json_string)" >>"$RESULTS"
        errors=$((errors + 1))
        ;;
    esac
  done
  [ "$errors" -eq 0 ]
}
export -f bench_all
export QKV SMALL BIG
if have "$QKV"; then
  stage bench 200 bench_all
else
  skip bench "no qkv built"
fi

# ---- summary: the GPU against the CPU, and training against the H200's bf16 tensor rate ----
summary() {
  awk -F'"' '
    /"run": / {
      name = $4; tps = ""; gf = ""
      if (match($0, /"tokens_per_s": [0-9.]+/)) tps = substr($0, RSTART + 16, RLENGTH - 16)
      if (match($0, /"gflops": [0-9.]+/)) gf = substr($0, RSTART + 10, RLENGTH - 10)
      split(name, w, " "); key = w[1] " " w[2] (w[1] == "decode" ? " " w[3] : "")
      dev = w[1] == "decode" ? w[4] " " w[5] : w[3] " " w[4]
      t[key, dev] = tps; g[key, dev] = gf; keys[key] = 1
    }
    END {
      for (k in keys) {
        c = t[k, "cpu fp32"]
        printf "%s: tok/s cuda fp32 %s, cuda bf16 %s, cpu fp32 %s", k, t[k, "cuda fp32"], t[k, "cuda bf16"], c
        if (c > 0 && t[k, "cuda bf16"] > 0) printf " (bf16 %.1fx the CPU)", t[k, "cuda bf16"] / c
        if (g[k, "cuda bf16"] > 0) printf "; bf16 %.1f TFLOP/s = %.1f%% of 989 (H200 dense bf16)", g[k, "cuda bf16"] / 1000, g[k, "cuda bf16"] / 9890
        printf "\n"
      }
    }' "$RESULTS" | sort
}
summary | tee "$OUT/summary.txt" | tee -a "$LOG"
printf '{"summary": %s, "failed_stages": %d, "seconds": %d}\n' "$(json_string <"$OUT/summary.txt")" \
  "$failures" "$(($(date +%s) - T0))" >>"$RESULTS"
echo "device check: $failures stage(s) failed or skipped; results in $RESULTS" | tee -a "$LOG"
[ "$failures" -eq 0 ]
