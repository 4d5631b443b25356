#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Issue 20's acceptance run: `mpirun -np 2 qkv train` on Multi30k reaches the validation BLEU of
# one process after the same number of steps. The configuration of examples/multi30k.sh (joint
# SentencePiece on raw, cased text, d_model 256, 3+3 layers, 8 heads, FFN 512, label smoothing
# 0.1, batches of up to 3,000 tokens, Adam at 5e-4, clipping at 1) for a fixed number of epochs
# (no time budget, no early stopping: both runs take the same steps), trained twice with the
# same global batch, seed and data order: one process with 2 threads, and 2 ranks x 1 thread.
# Then the comparison: every epoch's training loss, validation loss and sacreBLEU/chrF of both,
# the largest differences, the final parameters; and, for reporting only, beam search (K 4,
# length penalty 0.6) on test_2016_flickr with both models, scored by sacreBLEU's defaults.
# CONCURRENT=1 (the default) runs the two trainings side by side under `nice -n 10` (the math is
# compared here, not the speed); CONCURRENT=0 one after the other.
# Usage: [OUT=DIR] [EPOCHS=4] [PRECISION=bf16|fp32] [CONCURRENT=1] bench/mpi_acceptance.sh [QKV]
set -euo pipefail
QKV=$(realpath "${1:-build/qkv}")
HERE=$(cd "$(dirname "$0")" && pwd)
D=${QKV_DATA_DIR:-$HERE/../../shared/data}/multi30k
OUT=${OUT:-mpi-acceptance}
PY=${PYTHON:-/usr/bin/python3}
PRECISION=${PRECISION:-$(grep -q avx512_bf16 /proc/cpuinfo 2>/dev/null && echo bf16 || echo fp32)}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# 3 threads on 2 cores when run side by side: waiting threads sleep instead of spinning
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
mkdir -p "$OUT"
TRAIN=(train --src "$D/train.de" --tgt "$D/train.en" --valid-src "$D/val.de" --valid-tgt "$D/val.en"
  --tokenizer spm --joint-bpe --vocab-size 8000 --tie all
  --d-model 256 --heads 8 --ffn 512 --layers 3 --dropout 0.1 --label-smoothing 0.1
  --batch-tokens 3000 --num-steps 64 --lr 5e-4 --clip 1 --seed 0
  --epochs "${EPOCHS:-4}" --log-every 1 --precision "$PRECISION" --overwrite)
one() { nice -n 10 "$QKV" "${TRAIN[@]}" --threads 2 --out "$OUT/one" > "$OUT/one.log" 2>&1; }
two() {
  nice -n 10 mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 -np 2 \
    "$QKV" "${TRAIN[@]}" --threads 1 --out "$OUT/two" > "$OUT/two.log" 2>&1
}
start=$(date +%s)
if [ "${CONCURRENT:-1}" = 1 ]; then
  one & p1=$!; two & p2=$!
  wait $p1; wait $p2
else
  one; two
fi
echo "trained in $(( ($(date +%s) - start) / 60 )) min ($PRECISION)"
tail -n 3 "$OUT/two.log"
for r in one two; do
  "$QKV" translate --model "$OUT/$r/best" --beam 4 --length-penalty 0.6 --threads 2 \
    --precision "$PRECISION" --input "$D/test_2016_flickr.de" > "$OUT/$r.test_2016_flickr.hyp"
done
"$PY" "$HERE/mpi_acceptance.py" "$OUT" "$D"
