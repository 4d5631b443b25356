#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# End-to-end tests of the qkv command line: train -> translate -> eval on real data, exact
# resume after a stop and after kill -9, parameter accounting, and clear errors on bad input.
# Usage: test_cli.sh QKV_BINARY. QKV_E2E_QUICK=1 (the sanitizer run) uses smaller workloads.
set -u
QKV=$(realpath "$1")
DATA=${QKV_DATA_DIR:-../shared/data}
FRA=$DATA/fra-eng/fra.txt
. "$(dirname "$0")/lib.sh" # $T, ok, bad, check, expect_fail

# ---- the tool itself
check "--version" bash -c "'$QKV' --version | grep -q '^qkv [0-9]'"
check "--help lists commands" bash -c "'$QKV' --help | grep -q translate"
expect_fail "unknown command" "unknown command" "$QKV" frobnicate
expect_fail "train needs --out" "needs --out" "$QKV" train --data "$FRA"
expect_fail "bad number" "not a valid integer" "$QKV" train --data "$FRA" --out "$T/x" --epochs ten
expect_fail "unknown option" "unknown option" "$QKV" translate --model "$T/x" --frobnicate 4
check "train --help" bash -c "'$QKV' train --help 2>&1 | grep -q -- --num-steps"

# ---- parameter accounting: BERT-base and BERT-large shaped encoders
"$QKV" info --d-model 768 --heads 12 --ffn 3072 --enc-layers 12 --dec-layers 0 --vocab 30000 --bias >"$T/base"
"$QKV" info --d-model 1024 --heads 16 --ffn 4096 --enc-layers 24 --dec-layers 0 --vocab 30000 --bias >"$T/large"
m_base=$(sed -n 's/^encoder + source embedding: [0-9]* (\([0-9.]*\)M).*/\1/p' "$T/base")
m_large=$(sed -n 's/^encoder + source embedding: [0-9]* (\([0-9.]*\)M).*/\1/p' "$T/large")
check "BERT-base about 110M ($m_base M)" awk -v m="$m_base" 'BEGIN { exit !(m > 105 && m < 112) }'
check "BERT-large about 340M ($m_large M)" awk -v m="$m_large" 'BEGIN { exit !(m > 325 && m < 342) }'

# ---- the README's main job: qkv demo learns to reverse (about 40 s on 2 cores)
if [ -z "${QKV_E2E_QUICK:-}" ]; then
  "$QKV" demo --out "$T/demo" >"$T/demo.out" 2>/dev/null
  exact=$(sed -n 's/^held-out: \([0-9]*\)\/200 exactly reversed.*/\1/p' "$T/demo.out")
  bleu=$(sed -n 's/.*corpus BLEU-4 \([0-9.]*\)$/\1/p' "$T/demo.out")
  check "qkv demo reverses held-out sequences (${exact:-?}/200 exact, BLEU ${bleu:-?}; need 170, 90)" \
    awk -v e="${exact:-0}" -v b="${bleu:-0}" 'BEGIN { exit !(e >= 170 && b >= 90) }'
  check "qkv demo shows five example translations" test "$(grep -c ' => ' "$T/demo.out")" -eq 5
fi

if [ ! -r "$FRA" ]; then
  echo "skip: $FRA not found (set QKV_DATA_DIR)"; echo "$pass passed, $fail failed"; [ $fail -eq 0 ]; exit
fi

# ---- train -> translate -> eval
N=300; EPOCHS=4
[ -n "${QKV_E2E_QUICK:-}" ] && N=120 && EPOCHS=2
TRAIN=(--data "$FRA" --num-examples $N --d-model 16 --heads 2 --ffn 32 --layers 1 --batch 32
       --num-steps 8 --epochs $EPOCHS --threads 2 --quiet)
"$QKV" train "${TRAIN[@]}" --out "$T/m" 2>"$T/err"
check "train writes the model directory" test -s "$T/m/config.json" -a -s "$T/m/model.safetensors" \
  -a -s "$T/m/src_vocab.txt" -a -s "$T/m/tgt_vocab.txt" -a -s "$T/m/checkpoint.safetensors"
check "metrics log has one line per epoch" test "$(wc -l <"$T/m/metrics.jsonl")" -eq $EPOCHS
check "vocabulary starts with the reserved tokens" \
  test "$(head -n 4 "$T/m/src_vocab.txt" | tr '\n' ' ')" = "<unk> <pad> <bos> <eos> "
printf 'go .\ni lost .\nhello zyzzyva\n\n' >"$T/in.txt"
"$QKV" translate --model "$T/m" <"$T/in.txt" >"$T/t1"
"$QKV" translate --model "$T/m" --input "$T/in.txt" --batch 1 >"$T/t2"
check "translate prints one line per input line" test "$(wc -l <"$T/t1")" -eq 4
check "stdin and --input, batch 32 and 1, agree" cmp -s "$T/t1" "$T/t2"
"$QKV" eval --model "$T/m" --data "$FRA" --num-examples 50 --metric all >"$T/eval"
check "eval reports corpus BLEU (d2l's words) and sacreBLEU" \
  bash -c "grep -qE '^corpus BLEU-4: [0-9]+\.[0-9]+' '$T/eval' && grep -qE '^BLEU\|nrefs:1.* = [0-9]+\.[0-9]{2} ' '$T/eval'"

# a sentence longer than the model accepts is truncated with a warning (documented behaviour)
"$QKV" train "${TRAIN[@]}" --epochs 1 --max-len 10 --out "$T/short" 2>/dev/null
echo "i i i i i i i i i i i i i i i i i i i i ." | "$QKV" translate --model "$T/short" >"$T/long.out" 2>"$T/long.err"
check "an over-long sentence is translated (truncated)" test "$(wc -l <"$T/long.out")" -eq 1
check "the truncation is announced on stderr" grep -q "truncated" "$T/long.err"
# a time budget stops at an epoch end: a budget shorter than one epoch trains exactly one
"$QKV" train "${TRAIN[@]}" --epochs 50 --minutes 0.00001 --out "$T/budget" 2>/dev/null
check "--minutes stops at the end of the first epoch that exhausts it" \
  test "$(wc -l <"$T/budget/metrics.jsonl")" -eq 1 -a -s "$T/budget/model.safetensors"
check "unknown words map to <unk> without error" bash -c "echo 'zyzzyva qwxz .' | '$QKV' translate --model '$T/m' >/dev/null"

# ---- exact resume: after a clean stop, and after kill -9 at random moments
"$QKV" train "${TRAIN[@]}" --out "$T/r" --stop-after-steps 5 2>/dev/null
"$QKV" train "${TRAIN[@]}" --out "$T/r" --resume 2>/dev/null
check "stop + resume == uninterrupted (bit for bit)" cmp -s "$T/m/model.safetensors" "$T/r/model.safetensors"
# kill -9 at random moments of a longer run (the killed run must really be cut short)
KILLS=3; KEPOCHS=30
[ -n "${QKV_E2E_QUICK:-}" ] && KILLS=1
KTRAIN=("${TRAIN[@]}" --epochs $KEPOCHS --checkpoint-every 3)
"$QKV" train "${KTRAIN[@]}" --out "$T/ref" 2>/dev/null
for k in $(seq 1 $KILLS); do
  # kill when a random number of epochs is done (plus a random fraction of the next one);
  # if the run still finished first (a very fast machine), try again
  for attempt in 1 2 3; do
    rm -rf "$T/k"
    target=$((1 + RANDOM % (KEPOCHS - 5)))
    "$QKV" train "${KTRAIN[@]}" --out "$T/k" 2>/dev/null &
    pid=$!
    while kill -0 $pid 2>/dev/null && [ "$(cat "$T/k/metrics.jsonl" 2>/dev/null | wc -l)" -lt $target ]; do
      sleep 0.01
    done
    sleep "$(awk -v s=$RANDOM 'BEGIN { srand(s); printf "%.3f", rand() * 0.05 }')"
    kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
    epochs_done=0; [ -f "$T/k/metrics.jsonl" ] && epochs_done=$(wc -l <"$T/k/metrics.jsonl")
    [ "$epochs_done" -lt $KEPOCHS ] && break
  done
  check "kill -9 #$k cut the run short (after $epochs_done of $KEPOCHS epochs)" test "$epochs_done" -lt $KEPOCHS
  "$QKV" train "${KTRAIN[@]}" --out "$T/k" --resume 2>/dev/null
  check "kill -9 #$k + resume == uninterrupted (bit for bit)" cmp -s "$T/ref/model.safetensors" "$T/k/model.safetensors"
done

# ---- bad input: clear messages, nothing lost
printf 'hello world\n' >"$T/notab.tsv"
expect_fail "corpus line without a tab names file:line" "notab.tsv:1" "$QKV" train --data "$T/notab.tsv" --out "$T/y"
: >"$T/empty.tsv"
expect_fail "empty corpus" "empty|no lines|no sentence" "$QKV" train --data "$T/empty.tsv" --out "$T/y"
cp -r "$T/m" "$T/broken"
head -c 1000 "$T/m/model.safetensors" >"$T/broken/model.safetensors"
expect_fail "truncated model file names the file" "model.safetensors" "$QKV" translate --model "$T/broken" --input "$T/in.txt"
cp -r "$T/m" "$T/badvocab"
sed -i '$d' "$T/badvocab/tgt_vocab.txt"
expect_fail "vocabulary size mismatch" "vocabular" "$QKV" translate --model "$T/badvocab" --input "$T/in.txt"
expect_fail "missing model directory" "config.json" "$QKV" translate --model "$T/nowhere" --input "$T/in.txt"

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
