#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# A character-level language model of Tiny Shakespeare (the last 10% held out) trained for a
# fixed budget of minutes, once with softmax attention and once with linear attention; prints
# each model's held-out loss and a sample. The settings of docs/language-models.md: d_model 192,
# 6 heads, FFN 768, 4 pre-norm blocks, tied embeddings, GELU, context 128, 32 windows a step,
# AdamW at 4e-3 (weight decay 0.3, 100 warm-up steps, cosine to lr/10), no dropout, bf16
# products where the CPU has AVX512-BF16.
# Usage: [OUT=DIR] [MINUTES=10] [THREADS=2] [PRECISION=bf16|fp32] [QKV_DATA_DIR=data]
#        examples/tiny_shakespeare.sh [QKV_BINARY]
# The text: QKV_DATA_DIR/tinyshakespeare/input.txt, from `scripts/get-data.sh tinyshakespeare`
# (docs/data.md).
set -euo pipefail
QKV=${1:-build/qkv}
DATA=${QKV_DATA_DIR:-data}/tinyshakespeare/input.txt
need() {  # the corpus, or how to get it
  [ -r "$1" ] || { echo "$(basename "$0"): no $1: get it with scripts/get-data.sh $2 (docs/data.md)" >&2; exit 1; }
}
need "$DATA" tinyshakespeare
OUT=${OUT:-shakespeare}
PRECISION=${PRECISION:-$(grep -q avx512_bf16 /proc/cpuinfo 2>/dev/null && echo bf16 || echo fp32)}
mkdir -p "$OUT"
for attention in softmax linear; do
  "$QKV" train-lm --data "$DATA" --out "$OUT/$attention" --attention "$attention" \
    --d-model 192 --heads 6 --ffn 768 --layers 4 --context 128 --batch 32 --dropout 0 \
    --pre-norm --tie --act gelu --lr 4e-3 --weight-decay 0.3 --warmup 100 --cosine \
    --minutes "${MINUTES:-10}" --threads "${THREADS:-2}" --precision "$PRECISION"
  "$QKV" generate --model "$OUT/$attention" --prompt "ROMEO:" --tokens 300 --temperature 0.8 \
    --top-k 0 --seed 1 --threads "${THREADS:-2}"
  echo
done
