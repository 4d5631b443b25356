#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Multi30k German->English in under an hour on 2 cores, raw text in and raw text out: one joint
# SentencePiece model (unigram, 8000 pieces) learned on the cased training text, a small
# Transformer (d_model 256, 3+3 layers, 8 heads, FFN 512 -- the size of the well-known PyTorch
# Multi30k tutorials), label smoothing 0.1, token-budget batches, validation on val every epoch
# (the best model kept), training stopped by a time budget or after 6 epochs without a better
# validation BLEU; then beam search (K 4, length penalty 0.6) on test_2016_flickr, its output
# scored by sacreBLEU with its own defaults (13a, cased) against the references as they are:
# no pre- or post-processing. The test split is only scored at the end, never used for a choice.
# bf16 products where the CPU has AVX512-BF16 (more steps in the budget). The scores are qkv's
# (`qkv eval --hyp`, sacreBLEU's algorithm in C); where a python3 with sacrebleu is at hand, they
# are printed by sacreBLEU itself too.
# Usage: [OUT=DIR] [MINUTES=52] [PRECISION=bf16|fp32] [PYTHON=python3] [QKV_DATA_DIR=data]
#        examples/multi30k.sh [QKV_BINARY]
# The corpus: QKV_DATA_DIR/multi30k/, from `scripts/get-data.sh multi30k` (docs/data.md).
set -euo pipefail
QKV=${1:-build/qkv}
D=${QKV_DATA_DIR:-data}/multi30k
OUT=${OUT:-multi30k-model}
PY=${PYTHON:-python3}
PRECISION=${PRECISION:-$(grep -q avx512_bf16 /proc/cpuinfo 2>/dev/null && echo bf16 || echo fp32)}
need() {  # the corpus, or how to get it
  [ -r "$1" ] || { echo "$(basename "$0"): no $1: get it with scripts/get-data.sh $2 (docs/data.md)" >&2; exit 1; }
}
for f in train.de train.en val.de val.en test_2016_flickr.de test_2016_flickr.en; do need "$D/$f" multi30k; done
start=$(date +%s)
"$QKV" train --src "$D/train.de" --tgt "$D/train.en" --valid-src "$D/val.de" --valid-tgt "$D/val.en" \
  --tokenizer spm --joint-bpe --vocab-size 8000 --tie all \
  --d-model 256 --heads 8 --ffn 512 --layers 3 --dropout 0.1 --label-smoothing 0.1 \
  --batch-tokens 3000 --num-steps 64 --lr 5e-4 --clip 1 \
  --epochs 100 --minutes "${MINUTES:-52}" --patience 6 --log-every 1 --threads 2 --precision "$PRECISION" --out "$OUT"
trained=$(date +%s)
"$QKV" translate --model "$OUT/best" --beam 4 --length-penalty 0.6 --threads 2 --precision "$PRECISION" \
  --input "$D/test_2016_flickr.de" > "$OUT/test_2016_flickr.hyp"
end=$(date +%s)
echo "training $(( (trained - start) / 60 )) min, test translation $(( end - trained )) s, total $(( (end - start) / 60 )) min"
echo "sacreBLEU's BLEU and chrF2 (13a, cased) on test_2016_flickr, by qkv eval --hyp:"
"$QKV" eval --hyp "$OUT/test_2016_flickr.hyp" --tgt "$D/test_2016_flickr.en"
if "$PY" -c "import sacrebleu" 2>/dev/null; then
  echo "the same by sacreBLEU itself:"
  "$PY" -m sacrebleu "$D/test_2016_flickr.en" -i "$OUT/test_2016_flickr.hyp" -m bleu chrf -w 2
fi
