#!/usr/bin/env bash
# Multi30k German->English in one hour on 2 cores: joint BPE, a small Transformer (d_model 256,
# 3+3 layers, 8 heads, FFN 512 -- the size of the well-known PyTorch Multi30k tutorials), label
# smoothing 0.1, token-budget batches, validation BLEU on val every epoch (the best model kept),
# training stopped by a 52-minute budget or after 6 epochs without a better validation BLEU
# (2026-11-24, bf16: the latter, after 27 minutes); then beam search (K 4, alpha 0.6) on test_2016_flickr,
# scored as sacreBLEU does by default (13a, BLEU-4, brevity penalty, cased). The test split is
# only scored at the end, never used for a choice.
# qkv lower-cases its input as d2l does and separates . , ! ?, so the output is detokenised and
# its first letter upper-cased before scoring; the lower-cased score (sacreBLEU -lc) is printed too.
# bf16 products where the CPU has AVX512-BF16 (more steps in the budget).
# Usage: [OUT=DIR] [MINUTES=52] [PRECISION=bf16|fp32] [PYTHON=python3] examples/multi30k.sh [QKV_BINARY]
# (scoring needs sacreBLEU from PyPI; the script installs it with pip when it is missing)
set -euo pipefail
QKV=${1:-build/qkv}
D=${QKV_DATA_DIR:-../shared/data}/multi30k
OUT=${OUT:-multi30k-model}
PY=${PYTHON:-python3}
PRECISION=${PRECISION:-$(grep -q avx512_bf16 /proc/cpuinfo 2>/dev/null && echo bf16 || echo fp32)}
"$PY" -c "import sacrebleu" 2>/dev/null || "$PY" -m pip install --quiet sacrebleu
start=$(date +%s)
"$QKV" train --src "$D/train.de" --tgt "$D/train.en" --valid-src "$D/val.de" --valid-tgt "$D/val.en" \
  --tokenizer bpe --joint-bpe --vocab-size 8000 --tie all \
  --d-model 256 --heads 8 --ffn 512 --layers 3 --dropout 0.1 --label-smoothing 0.1 \
  --batch-tokens 3000 --num-steps 64 --lr 5e-4 --clip 1 \
  --epochs 100 --minutes "${MINUTES:-52}" --patience 6 --log-every 1 --threads 2 --precision "$PRECISION" --out "$OUT"
trained=$(date +%s)
"$QKV" translate --model "$OUT/best" --beam 4 --alpha 0.6 --max-len 80 --threads 2 --precision "$PRECISION" \
  --input "$D/test_2016_flickr.de" > "$OUT/test_2016_flickr.hyp"
end=$(date +%s)
"$PY" - "$OUT/test_2016_flickr.hyp" "$OUT/test_2016_flickr.detok" <<'PYEOF'
import re, sys
with open(sys.argv[1], encoding="utf-8") as f, open(sys.argv[2], "w", encoding="utf-8") as g:
    for line in f:
        s = re.sub(r" ([.,!?])", r"\1", line.strip())
        g.write(s[:1].upper() + s[1:] + "\n")
PYEOF
echo "training $(( (trained - start) / 60 )) min, test translation $(( end - trained )) s, total $(( (end - start) / 60 )) min"
echo "sacreBLEU (13a, cased) on test_2016_flickr:"
"$PY" -m sacrebleu "$D/test_2016_flickr.en" -i "$OUT/test_2016_flickr.detok" -m bleu -b -w 2
echo "sacreBLEU (13a, lower-cased) on test_2016_flickr:"
"$PY" -m sacrebleu "$D/test_2016_flickr.en" -i "$OUT/test_2016_flickr.detok" -m bleu -b -w 2 -lc
