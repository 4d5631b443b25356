#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# d2l-zh's English->French Transformer (chapter 10.7): the first 600 pairs of fra.txt, d_model 32,
# 2+2 layers, 4 heads, FFN 64, dropout 0.1, batch 64, num_steps 10, lr 0.005, 200 epochs,
# min_freq 2, gradient clipping at 1, d2l's loss scaling. Trains one model per seed and
# translates d2l's four example sentences; d2l reports "va !", "j'ai perdu .", "il est calme .",
# "je suis chez moi ." each with BLEU 1.000.
# Usage: [OUT=DIR] [JOBS=N] [QKV_DATA_DIR=data] examples/d2l_fra_eng.sh [QKV_BINARY] [SEEDS...]
#   (default: build/qkv, seeds 0..4; JOBS seeds train at once, one thread each, default 1 job
#   with every core; qkv's result does not depend on the thread count)
# The corpus: QKV_DATA_DIR/fra-eng/fra.txt, from `scripts/get-data.sh fra-eng` (docs/data.md).
set -euo pipefail
QKV=${1:-build/qkv}; shift || true
SEEDS=("$@"); [ ${#SEEDS[@]} -eq 0 ] && SEEDS=(0 1 2 3 4)
JOBS=${JOBS:-1}
DATA=${QKV_DATA_DIR:-data}/fra-eng/fra.txt
need() {  # the corpus, or how to get it
  [ -r "$1" ] || { echo "$(basename "$0"): no $1: get it with scripts/get-data.sh $2 (docs/data.md)" >&2; exit 1; }
}
need "$DATA" fra-eng
if [ -z "${OUT:-}" ]; then OUT=$(mktemp -d); trap 'rm -rf "$OUT"' EXIT; fi  # OUT=DIR keeps the models
mkdir -p "$OUT"
EN=("go ." "i lost ." "he's calm ." "i'm home .")
FR=("va !" "j'ai perdu ." "il est calme ." "je suis chez moi .")
threads=0; [ "$JOBS" -gt 1 ] && threads=1

# one seed: train, translate, write the report lines to $OUT/seedN.txt
one_seed() {
  local seed=$1 right=0 i mark
  # d2l's load_data_nmt(num_examples=600) keeps 601 pairs (its loop stops at i > 600)
  "$QKV" train --data "$DATA" --num-examples 601 --out "$OUT/seed$seed" --seed "$seed" \
    --d-model 32 --heads 4 --ffn 64 --layers 2 --dropout 0.1 --batch 64 --num-steps 10 \
    --lr 0.005 --epochs 200 --min-freq 2 --clip 1 --loss d2l --threads "$threads" --quiet
  mapfile -t got < <(printf '%s\n' "${EN[@]}" | "$QKV" translate --model "$OUT/seed$seed")
  {
    for i in 0 1 2 3; do
      mark="x"; [ "${got[$i]}" = "${FR[$i]}" ] && mark="=" && right=$((right + 1))
      printf '  seed %s: %-12s => %-22s %s\n' "$seed" "${EN[$i]}" "${got[$i]}" "$mark"
    done
    echo "seed $seed: $right/4 as d2l"
  } > "$OUT/seed$seed.txt"
}

running=0
for seed in "${SEEDS[@]}"; do
  one_seed "$seed" &
  running=$((running + 1))
  if [ "$running" -ge "$JOBS" ]; then wait -n; running=$((running - 1)); fi
done
wait
total=0
for seed in "${SEEDS[@]}"; do
  cat "$OUT/seed$seed.txt"
  total=$((total + $(sed -n 's/^seed [0-9]*: \([0-4]\)\/4 as d2l$/\1/p' "$OUT/seed$seed.txt")))
done
awk -v t=$total -v n=${#SEEDS[@]} 'BEGIN { printf "mean over %d seeds: %.2f/4\n", n, t / n }'
