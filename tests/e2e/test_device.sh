#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# --device on the commands that take it (train, translate, eval, serve, bench train, decode and
# generate). --device cpu changes nothing. --device cuda where it cannot run, from a qkv built
# without CUDA or on a machine without a driver or a GPU, is refused at once (exit 1) with the
# library's reason, before any input is read or any model made; a name that is no device is a
# usage error (exit 2). With QKV_CUDA set to a CUDA build's qkv (make cuda-check does), the
# same for it, whose reason is then the missing driver or GPU. On a machine with a GPU this
# script has nothing to refuse: tests/device/check.sh runs there.
# Usage: test_device.sh QKV
set -u
QKV=${1:?usage: test_device.sh QKV}
. "$(dirname "$0")/lib.sh"
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  ok "skipped: this machine has a GPU (tests/device/check.sh)"
  echo "$pass passed, $fail failed"
  exit 0
fi

"$QKV" demo --out "$T/tm" --epochs 1 --train 300 --threads 1 >/dev/null 2>&1
printf 'go .\ni lost .\n' >"$T/en.txt"
printf 'go .\tva !\ni lost .\tj ai perdu .\n' >"$T/pairs.tsv"
printf 'some text to learn from.\n' >"$T/text.txt"

"$QKV" translate --model "$T/tm" --input "$T/en.txt" --threads 1 >"$T/plain" 2>/dev/null
"$QKV" translate --model "$T/tm" --input "$T/en.txt" --threads 1 --device cpu >"$T/cpu" 2>/dev/null
check "translate --device cpu: the same translations" cmp -s "$T/plain" "$T/cpu"
[ -s "$T/cpu" ] && ok "translate --device cpu translated" || bad "translate --device cpu translated"

why='built without CUDA|no NVIDIA driver|no usable GPU'
for q in "$QKV" ${QKV_CUDA:+"$QKV_CUDA"}; do
  b=$(basename "$(dirname "$q")")/$(basename "$q")
  expect_fail "$b translate --device cuda" "^qkv translate: --device cuda: .*($why)" \
    "$q" translate --model "$T/tm" --input "$T/en.txt" --device cuda
  expect_fail "$b eval --device cuda" "^qkv eval: --device cuda: .*($why)" \
    "$q" eval --model "$T/tm" --data "$T/pairs.tsv" --device cuda
  expect_fail "$b train --device cuda" "^qkv train: --device cuda: .*($why)" \
    "$q" train --data "$T/pairs.tsv" --out "$T/new" --epochs 1 --device cuda
  [ ! -e "$T/new" ] && ok "$b train --device cuda made no run directory" ||
    bad "$b train --device cuda made no run directory"
  expect_fail "$b serve --device cuda" "^qkv serve: --device cuda: .*($why)" \
    "$q" serve --model "$T/tm" --port 0 --device cuda
  for what in train decode generate; do
    expect_fail "$b bench $what --device cuda" "^qkv bench: --device cuda: .*($why)" \
      "$q" bench "$what" --d-model 32 --heads 4 --ffn 64 --layers 1 --device cuda
  done
  # refused before the input is read: a missing file is not what it reports
  expect_fail "$b translate --device cuda before its input" "($why)" \
    "$q" translate --model "$T/tm" --input "$T/missing.txt" --device cuda
done
if [ -n "${QKV_CUDA:-}" ]; then # a CUDA build names what this machine lacks
  expect_fail "CUDA build: the driver or GPU named" "no NVIDIA driver|no usable GPU" \
    "$QKV_CUDA" translate --model "$T/tm" --input "$T/en.txt" --device cuda
fi

expect_fail "--device gpu is no device" "--device 'gpu': expected cpu or cuda" \
  "$QKV" translate --model "$T/tm" --input "$T/en.txt" --device gpu
expect_fail "bench sgemm --device cuda: not a model's benchmark" "is for train, decode and generate" \
  "$QKV" bench sgemm --device cuda
"$QKV" translate --model "$T/tm" --input "$T/en.txt" --device gpu >/dev/null 2>&1
[ $? -eq 2 ] && ok "--device gpu exits 2" || bad "--device gpu exits 2"
echo "$pass passed, $fail failed"
