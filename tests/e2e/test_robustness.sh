#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Training safety: a NaN never reaches a checkpoint, a full disk or an unwritable directory
# is reported and the previous checkpoint survives, and a train + translate run is clean
# under valgrind memcheck.
# Usage: test_robustness.sh QKV_BINARY   (QKV_E2E_QUICK=1: skip the valgrind run)
set -u
QKV=$(realpath "$1")
FRA=${QKV_DATA_DIR:-../shared/data}/fra-eng/fra.txt
. "$(dirname "$0")/lib.sh" # $T, ok, bad, check, expect_fail
if [ ! -r "$FRA" ]; then echo "skip: no $FRA"; echo "0 passed, 0 failed"; exit 0; fi
TRAIN=(--data "$FRA" --num-examples 200 --d-model 16 --heads 2 --ffn 32 --layers 1 --batch 32
       --num-steps 8 --threads 2 --quiet)
finite_params() {  # every float of a checkpoint is finite
  /usr/bin/python3 - "$1" <<'PY'
import json, struct, sys, math
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head = json.loads(raw[8:8 + n])
data = raw[8 + n:]
for name, t in head.items():
    if name == "__metadata__" or t["dtype"] != "F32":
        continue
    b, e = t["data_offsets"]
    vals = struct.unpack("<%df" % ((e - b) // 4), data[b:e])
    if not all(math.isfinite(v) for v in vals):
        sys.exit("non-finite values in " + name)
PY
}

# ---- a diverging run stops at the first non-finite loss or gradient. Weights that overflow
# float at the first step come from a checkpoint scaled by 1e30 (finite, so it loads; a
# learning rate of 1e30, which did this once, is refused now)
blow_up() {  # every parameter of checkpoint $1 times 1e30 (Adam's moments as they are)
  /usr/bin/python3 - "$1" <<'PY'
import sys
from safetensors import safe_open
from safetensors.numpy import save_file
with safe_open(sys.argv[1], "numpy") as f:
    meta = f.metadata()
    t = {k: f.get_tensor(k) for k in f.keys()}
t = {k: v if k.startswith("adam.") else (v * 1e30).astype("float32") for k, v in t.items()}
save_file(t, sys.argv[1], metadata=meta)
PY
}
"$QKV" train "${TRAIN[@]}" --epochs 2 --out "$T/nan" 2>/dev/null
blow_up "$T/nan/checkpoint.safetensors"
cp "$T/nan/checkpoint.safetensors" "$T/blown.safetensors"
if "$QKV" train "${TRAIN[@]}" --epochs 6 --clip 0 --out "$T/nan" --resume 2>"$T/err"; then
  bad "training from weights that overflow should stop on a non-finite value"
else
  check "the NaN/Inf is reported" grep -qiE "not finite|non-finite|NaN" "$T/err"
fi
check "no NaN reached the checkpoint" finite_params "$T/nan/checkpoint.safetensors"
"$QKV" train "${TRAIN[@]}" --epochs 2 --out "$T/skip" 2>/dev/null
cp "$T/blown.safetensors" "$T/skip/checkpoint.safetensors"
"$QKV" train "${TRAIN[@]}" --epochs 3 --clip 0 --skip-nonfinite --out "$T/skip" --resume 2>"$T/err"
check "--skip-nonfinite finishes the run" test $? -eq 0
check "--skip-nonfinite keeps non-finite values out of the checkpoint" finite_params "$T/skip/checkpoint.safetensors"

# ---- a full disk (file size limit) while checkpointing: reported, previous checkpoint intact
"$QKV" train "${TRAIN[@]}" --epochs 1 --out "$T/disk" 2>/dev/null
cp "$T/disk/checkpoint.safetensors" "$T/before.safetensors"
size=$(stat -c %s "$T/before.safetensors")
( trap '' XFSZ; ulimit -f $(( size / 1024 / 2 )); exec "$QKV" train "${TRAIN[@]}" --epochs 2 --out "$T/disk" --resume ) 2>"$T/err"
rc=$?
check "a write failure stops training with an error (exit $rc)" test $rc -ne 0
check "the error names the file" grep -q "checkpoint.safetensors" "$T/err"
check "the previous checkpoint is intact" cmp -s "$T/before.safetensors" "$T/disk/checkpoint.safetensors"
check "no temporary file is left behind" bash -c "! ls '$T/disk' | grep -q tmp"

# ---- an output directory that cannot be created
printf 'x' >"$T/afile"
if "$QKV" train "${TRAIN[@]}" --epochs 1 --out "$T/afile/model" 2>"$T/err"; then
  bad "training into a path below a file should fail"
else
  check "an impossible output directory is reported by name" grep -q "afile/model" "$T/err"
fi

# ---- valgrind memcheck of a train + translate run
if [ -z "${QKV_E2E_QUICK:-}" ] && command -v valgrind >/dev/null; then
  VG=(valgrind --quiet --error-exitcode=9 --leak-check=full --errors-for-leak-kinds=definite
      --show-leak-kinds=definite)
  OMP_NUM_THREADS=1 QKV_NO_REEXEC=1 "${VG[@]}" "$QKV" train --data "$FRA" --num-examples 40 \
    --d-model 8 --heads 2 --ffn 16 --layers 1 --batch 16 --num-steps 6 --epochs 1 --threads 1 \
    --quiet --out "$T/vg" 2>"$T/vg.err"
  check "valgrind: train is clean" test $? -eq 0
  printf 'go .\ni lost .\n' | OMP_NUM_THREADS=1 QKV_NO_REEXEC=1 "${VG[@]}" "$QKV" translate \
    --model "$T/vg" --threads 1 >/dev/null 2>>"$T/vg.err"
  check "valgrind: translate is clean" test $? -eq 0
  [ -s "$T/vg.err" ] && head -n 30 "$T/vg.err"
fi

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
