#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# English->French on d2l's fra.txt with a held-out set: of the first 40,000 pairs (fra.txt is
# ordered by length, so these are the short sentences d2l trains on), every 50th is held out
# (800 pairs) and the rest (39,200) are trained on with the paper's recipe (word vocabularies,
# min_freq 2, label smoothing 0.1, token-budget batches), for a time budget; the held-out pairs
# are then translated with beam 4 and scored with qkv's corpus BLEU-4 (d2l's preprocessed words) and sacreBLEU.
# bf16 products where the CPU has AVX512-BF16 (more epochs in the budget).
# Usage: [OUT=DIR] [MINUTES=10] [THREADS=2] [PRECISION=bf16|fp32] [QKV_DATA_DIR=data]
#        examples/fra_eng_heldout.sh [QKV_BINARY]
# The corpus: QKV_DATA_DIR/fra-eng/fra.txt, from `scripts/get-data.sh fra-eng` (docs/data.md).
set -euo pipefail
QKV=${1:-build/qkv}
DATA=${QKV_DATA_DIR:-data}/fra-eng/fra.txt
need() {  # the corpus, or how to get it
  [ -r "$1" ] || { echo "$(basename "$0"): no $1: get it with scripts/get-data.sh $2 (docs/data.md)" >&2; exit 1; }
}
need "$DATA" fra-eng
OUT=${OUT:-fra-eng-model}
PRECISION=${PRECISION:-$(grep -q avx512_bf16 /proc/cpuinfo 2>/dev/null && echo bf16 || echo fp32)}
mkdir -p "$OUT"
head -n 40000 "$DATA" | awk -F'\t' 'NR % 50 != 0 { print $1 "\t" $2 }' > "$OUT/train.tsv"
head -n 40000 "$DATA" | awk -F'\t' 'NR % 50 == 0 { print $1 "\t" $2 }' > "$OUT/heldout.tsv"
"$QKV" train --data "$OUT/train.tsv" --out "$OUT/model" --min-freq 2 --num-steps 16 \
  --d-model 256 --heads 8 --ffn 512 --layers 3 --dropout 0.1 --label-smoothing 0.1 \
  --batch-tokens 2048 --lr 5e-4 --clip 1 --epochs 100 --minutes "${MINUTES:-10}" \
  --log-every 1 --threads "${THREADS:-2}" --precision "$PRECISION"
"$QKV" eval --model "$OUT/model" --data "$OUT/heldout.tsv" --beam 4 --alpha 0.6 --metric all \
  --threads "${THREADS:-2}"
