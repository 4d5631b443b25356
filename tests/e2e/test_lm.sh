#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# End-to-end tests of the language-model commands: train-lm on the start of Tiny Shakespeare
# (softmax and linear attention, character and byte vocabularies), generate (reproducible for
# a seed, greedy = top-k 1), eval-lm (perplexity = exp(loss), the held-out split as training
# made it), exact resume after a stop, a time budget, and clear errors on bad input.
# Usage: test_lm.sh QKV_BINARY. QKV_E2E_QUICK=1 (the sanitizer run) trains for fewer steps.
# The data is $QKV_DATA_DIR/tinyshakespeare/input.txt (QKV_DATA_DIR defaults to ../shared/data).
set -u
QKV=$(realpath "$1")
DATA=${QKV_DATA_DIR:-../shared/data}
SHAKESPEARE=$DATA/tinyshakespeare/input.txt
. "$(dirname "$0")/lib.sh" # $T, ok, bad, check, expect_fail
# run_ok NAME CMD...: CMD exits 0 (a sanitizer report fails it)
run_ok() {
  local name=$1; shift
  if "$@" >"$T/run.out" 2>"$T/run.err"; then ok "$name"; else bad "$name (exit $?): $(head -c 300 "$T/run.err")"; fi
}
# The "loss" of metrics line N (1-based; "$" the last) of a model directory.
metric() { sed -n "${2}p" "$1/metrics.jsonl" | sed -n 's/.*"loss": \([0-9.]*\).*/\1/p'; }

# ---- arguments and bad input, no data needed
check "--help lists train-lm, generate, eval-lm" \
  bash -c "'$QKV' --help | grep -q train-lm && '$QKV' --help | grep -q generate && '$QKV' --help | grep -q eval-lm"
check "train-lm --help" bash -c "'$QKV' train-lm --help 2>&1 | grep -q -- --minutes"
: >"$T/empty.txt"
expect_fail "train-lm on an empty file" "empty.txt is empty" "$QKV" train-lm --data "$T/empty.txt" --out "$T/x" --steps 5
expect_fail "train-lm needs --steps or --minutes" "steps N or --minutes" "$QKV" train-lm --data "$T/empty.txt" --out "$T/x"
expect_fail "train-lm --attention must be softmax or linear" "softmax|linear" "$QKV" train-lm --data "$T/empty.txt" --out "$T/x" --steps 5 --attention cosine
expect_fail "generate from a missing model names config.json" "nowhere/config.json" "$QKV" generate --model "$T/nowhere"
expect_fail "eval-lm on a missing model" "config.json" "$QKV" eval-lm --model "$T/nowhere" --data "$T/empty.txt"
printf 'abc\xff\n' >"$T/latin1.txt"
expect_fail "a character vocabulary refuses invalid UTF-8, naming the byte" "byte 3" "$QKV" train-lm --data "$T/latin1.txt" --out "$T/x" --steps 5 --context 2
printf 'short text\n' >"$T/short.txt"
expect_fail "a text shorter than the context" "context 32 needs at least 33" "$QKV" train-lm --data "$T/short.txt" --out "$T/x" --steps 5 --context 32

if [ ! -r "$SHAKESPEARE" ]; then
  echo "skip: $SHAKESPEARE not found (set QKV_DATA_DIR)"; echo "$pass passed, $fail failed"; [ $fail -eq 0 ]; exit
fi

# ---- train -> generate -> eval on the first 20 KB
BYTES=20000; STEPS=200
[ -n "${QKV_E2E_QUICK:-}" ] && BYTES=8000 && STEPS=40
head -c $BYTES "$SHAKESPEARE" >"$T/tiny.txt"
TRAIN=(--data "$T/tiny.txt" --d-model 32 --heads 2 --ffn 64 --layers 2 --context 32 --batch 16
       --lr 3e-3 --warmup 10 --steps $STEPS --log-every 10 --eval-every 20 --threads 2 --quiet)
run_ok "train-lm (softmax)" "$QKV" train-lm "${TRAIN[@]}" --out "$T/m"
cp "$T/run.out" "$T/train.out"
check "train-lm writes the model directory" test -s "$T/m/config.json" -a -s "$T/m/model.safetensors" \
  -a -s "$T/m/vocab.txt" -a -s "$T/m/train.json" -a -s "$T/m/checkpoint.safetensors" -a -s "$T/m/training.png"
check "metrics: a line every 10 steps" test "$(wc -l <"$T/m/metrics.jsonl")" -eq $((STEPS / 10))
check "vocabulary: reserved tokens, then escaped newline and space" \
  test "$(head -n 6 "$T/m/vocab.txt" | tr '\n' ' ')" = '<unk> <pad> <bos> <eos> \n \s '
first=$(metric "$T/m" 1); last=$(metric "$T/m" '$')
check "training loss falls ($first -> $last)" awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.4) }'
check "held-out loss is printed" grep -qE '^held-out loss [0-9.]+ nats per token, perplexity [0-9.]+' "$T/train.out"

GEN=(--model "$T/m" --prompt "ROMEO:" --tokens 120 --threads 2)
"$QKV" generate "${GEN[@]}" --seed 7 >"$T/g1" 2>"$T/gerr"
"$QKV" generate "${GEN[@]}" --seed 7 --threads 1 >"$T/g2" 2>>"$T/gerr"
"$QKV" generate "${GEN[@]}" --seed 8 >"$T/g3" 2>>"$T/gerr"
check "generate: the same seed gives the same text" cmp -s "$T/g1" "$T/g2"
check "generate: another seed another text" bash -c "! cmp -s '$T/g1' '$T/g3'"
check "generate prints the prompt, then exactly 120 characters and a newline" \
  bash -c "head -c 6 '$T/g1' | grep -q '^ROMEO:' && test \$(wc -c <'$T/g1') -eq 127"
"$QKV" generate "${GEN[@]}" --temperature 0 >"$T/greedy" 2>>"$T/gerr"
"$QKV" generate "${GEN[@]}" --top-k 1 --temperature 1.3 --seed 99 >"$T/top1" 2>>"$T/gerr"
check "generate: top-k 1 is greedy" cmp -s "$T/greedy" "$T/top1"
"$QKV" generate "${GEN[@]}" --top-p 0.5 --seed 7 >"$T/nucleus" 2>>"$T/gerr"
check "generate: top-p runs and differs from full sampling" bash -c "test -s '$T/nucleus' && ! cmp -s '$T/g1' '$T/nucleus'"
"$QKV" generate "${GEN[@]}" --kv-cache fp32 --seed 7 >"$T/g32" 2>>"$T/gerr"
"$QKV" generate "${GEN[@]}" --kv-cache bf16 --temperature 0 >"$T/greedy16" 2>>"$T/gerr"
check "generate: --kv-cache fp32 is the fp32 default's text" cmp -s "$T/g1" "$T/g32"
check "generate: --kv-cache bf16 greedy prints 120 characters" test "$(wc -c <"$T/greedy16")" -eq 127
expect_fail "generate: an unknown --kv-cache names the choices" "auto, fp32 or bf16" "$QKV" generate "${GEN[@]}" --kv-cache int4
check "generate: no errors on stderr" test ! -s "$T/gerr"

"$QKV" eval-lm --model "$T/m" --data "$T/tiny.txt" --threads 2 >"$T/eval" 2>&1
loss=$(sed -n 's/^loss: \([0-9.]*\) nats per token/\1/p' "$T/eval")
ppl=$(sed -n 's/^perplexity: \([0-9.]*\)/\1/p' "$T/eval")
check "eval-lm prints loss ($loss) and perplexity ($ppl) = exp(loss)" \
  awk -v l="$loss" -v p="$ppl" 'BEGIN { exit !(l > 0 && p > 1 && (p - exp(l))^2 < (1e-5 * p)^2) }'
held=$(sed -n 's/^held-out loss \([0-9.]*\) .*/\1/p' "$T/train.out")
check "eval-lm's held-out split is train-lm's ($loss vs $held)" \
  awk -v a="$loss" -v b="$held" 'BEGIN { d = a - b; exit !(d < 6e-5 && d > -6e-5) }'
check "eval-lm counts the held-out tokens" grep -q "^tokens: $((BYTES / 10 - 1)) (the held-out end)" "$T/eval"
"$QKV" eval-lm --model "$T/m" --data "$T/tiny.txt" --all >"$T/eval_all" 2>&1
check "eval-lm --all counts every token after the first" grep -q "^tokens: $((BYTES - 1)) (the whole file)" "$T/eval_all"

# ---- exact resume: stop at step 33 (between checkpoints), resume, compare bit for bit
"$QKV" train-lm "${TRAIN[@]}" --out "$T/r" --stop-after-steps 33 >/dev/null 2>&1
check "--stop-after-steps leaves a checkpoint of step 33 (metrics at 10, 20, 30, 33)" \
  bash -c "head -c 4096 '$T/r/checkpoint.safetensors' | grep -aq '\"step\":\"33\"' && test \$(wc -l <'$T/r/metrics.jsonl') -eq 4"
"$QKV" train-lm "${TRAIN[@]}" --out "$T/r" --resume >/dev/null 2>&1
check "stop + resume == uninterrupted (bit for bit)" cmp -s "$T/m/model.safetensors" "$T/r/model.safetensors"
expect_fail "resume with another context is refused" "--context 16 differs from this run's 32" \
  "$QKV" train-lm "${TRAIN[@]}" --out "$T/r" --resume --context 16

# ---- linear attention
run_ok "train-lm (linear)" "$QKV" train-lm "${TRAIN[@]}" --attention linear --pre-norm --tie --out "$T/lin"
first=$(metric "$T/lin" 1); last=$(metric "$T/lin" '$')
check "linear: training loss falls ($first -> $last)" awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.4) }'
check "linear: config says so" grep -q '"attention":.*"linear"' "$T/lin/config.json"
"$QKV" generate --model "$T/lin" --prompt "The " --tokens 300 --seed 5 >"$T/l1" 2>/dev/null
"$QKV" generate --model "$T/lin" --prompt "The " --tokens 300 --seed 5 >"$T/l2" 2>/dev/null
check "linear: generate past the context (300 > 32 tokens) is reproducible" \
  bash -c "cmp -s '$T/l1' '$T/l2' && test \$(wc -c <'$T/l1') -eq 305"
"$QKV" train-lm "${TRAIN[@]}" --attention linear --pre-norm --tie --out "$T/linr" --stop-after-steps 17 >/dev/null 2>&1
"$QKV" train-lm "${TRAIN[@]}" --attention linear --pre-norm --tie --out "$T/linr" --resume >/dev/null 2>&1
check "linear: stop + resume == uninterrupted" cmp -s "$T/lin/model.safetensors" "$T/linr/model.safetensors"

# ---- bytes and a time budget
run_ok "train-lm --vocab byte" "$QKV" train-lm --data "$T/tiny.txt" --out "$T/b" --vocab byte --d-model 16 \
  --heads 2 --ffn 32 --layers 1 --context 16 --batch 8 --steps 10 --threads 2 --quiet
check "byte vocabulary: 4 reserved + 256 bytes, newline as <0x0A>" \
  bash -c "test \$(wc -l <'$T/b/vocab.txt') -eq 260 && sed -n 15p '$T/b/vocab.txt' | grep -qx '<0x0A>'"
run_ok "generate from a byte model" "$QKV" generate --model "$T/b" --prompt "é" --tokens 10 --seed 1
t0=$(date +%s.%N)
run_ok "train-lm --minutes stops on time" "$QKV" train-lm "${TRAIN[@]}" --out "$T/t" --steps 1000000 --minutes 0.02
took=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')
check "the time budget (1.2 s) ends the run ($took s) and saves the model" \
  bash -c "test -s '$T/t/model.safetensors' && awk -v t=$took 'BEGIN { exit !(t < 20) }'"

# ---- damaged model directories
cp -r "$T/m" "$T/badvocab"
sed -i '$d' "$T/badvocab/vocab.txt"
expect_fail "vocabulary size mismatch" "vocabulary has" "$QKV" generate --model "$T/badvocab"
"$QKV" generate --model "$T/m" --prompt "aZ" --tokens 3 >/dev/null 2>"$T/err"
check "a prompt character outside the vocabulary is reported" grep -q "1 character is not in" "$T/err"
cp -r "$T/m" "$T/broken"
head -c 500 "$T/m/model.safetensors" >"$T/broken/model.safetensors"
expect_fail "truncated model file names the file" "model.safetensors" "$QKV" eval-lm --model "$T/broken" --data "$T/tiny.txt"

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
