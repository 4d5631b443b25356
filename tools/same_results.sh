#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Runs a fixed set of short training and decoding jobs with one qkv binary and keeps what they
# write (trained weights, checkpoints, translations, beam scores, generated text, eval lines)
# in OUTDIR. Two binaries are bit-identical on these paths when `diff -r` of their OUTDIRs
# (less the timing lines, which the script strips) finds nothing:
#
#   tools/same_results.sh build-before/qkv /tmp/before
#   tools/same_results.sh build/qkv /tmp/after
#   diff -r /tmp/before /tmp/after && echo identical
#
# The jobs cover both models, post- and pre-norm, final norms, biases, GELU, tied and learned
# embeddings, word and BPE tokenizers, validation BLEU, greedy and beam decoding, checkpoint
# averaging, fp32, (where the CPU has AVX512-BF16) bf16 and (AVX512-VNNI) int8, float32 and bf16
# key-value caches, softmax and linear attention, and attention long enough for the flash kernel. About two minutes on 2 cores. Needs ../shared.
set -euo pipefail
qkv=$(realpath "${1:?usage: same_results.sh QKV OUTDIR}")
out=${2:?usage: same_results.sh QKV OUTDIR}
data=${QKV_DATA:-$(cd "$(dirname "$0")/.." && pwd)/../shared/data}
rm -rf "$out" && mkdir -p "$out"
out=$(realpath "$out")
export OMP_WAIT_POLICY=passive OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
cd "$out"
fra=$data/fra-eng/fra.txt
m30=$data/multi30k
bf16=0
grep -q avx512_bf16 /proc/cpuinfo && bf16=1
strip_times() { sed -E 's/[0-9.]+ ?(s|ms|min|tok\/s|(target )?tokens\/s|chars\/s|characters\/s)\b/T/g; s/"(elapsed_s|seconds|tokens_per_s|tok_per_s|time_s)": *[0-9.e+-]+/"\1": T/g'; }
untimed_safetensors() { # the file with its header's "elapsed_s" replaced (a checkpoint's clock)
  python3 -c '
import json, re, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = re.sub(rb"\"elapsed_s\": *\"[^\"]*\"", b"\"elapsed_s\": \"T\"", b[8:8 + n])
sys.stdout.buffer.write(h.rstrip() + b"\n" + b[8 + n:])' "$1"
}
keep() { # keep NAME: the model directory's files, less what records wall-clock time
  for f in "$1"/*; do
    case "$f" in *.png) continue ;; esac
    if [ -f "$f" ]; then
      case "$f" in
        *.json|*.jsonl) strip_times <"$f" >"$f.kept" ;;
        *.safetensors) untimed_safetensors "$f" >"$f.kept" ;;
        *) cp "$f" "$f.kept" ;;
      esac
    fi
  done
}
q() { "$qkv" "$@" --quiet 2>&1 | strip_times; }
head -n 800 "$fra" > fra800.tsv
printf "go .\ni lost .\nhe's calm .\ni'm home .\nwe are here .\nthey are tall .\n" > en.txt

# 1. the demo (post-norm, word-level reversal task), smaller than its default
"$qkv" demo --out demo --train 2000 --epochs 2 2>&1 | strip_times > demo.log
# 2. d2l's fra-eng setting, post-norm, word vocabularies
q train --data fra800.tsv --out fra --d-model 32 --heads 4 --ffn 64 --layers 2 --dropout 0.1 \
  --batch 64 --num-steps 10 --lr 0.005 --epochs 6 --loss d2l > fra.log
"$qkv" translate --model fra --input en.txt > fra.greedy
"$qkv" translate --model fra --input en.txt --beam 4 --alpha 0.6 --n-best 2 > fra.beam
"$qkv" eval --model fra --data fra800.tsv --num-examples 200 2>&1 | strip_times > fra.eval
# 3. pre-norm, final norms, biases, GELU, learned positions, noam, label smoothing, checkpoints
q train --data fra800.tsv --out pre --d-model 48 --heads 4 --ffn 96 --enc-layers 1 --dec-layers 2 \
  --pre-norm --final-norm --bias --act gelu --learned-pos --schedule noam --warmup 20 \
  --label-smoothing 0.1 --epochs 4 --num-steps 12 --keep-epochs 2 --checkpoint-every 5 > pre.log
"$qkv" translate --model pre --input en.txt --beam 3 > pre.beam
"$qkv" average --out pre-avg pre/epoch-003 pre/epoch-004 > /dev/null 2>&1
"$qkv" translate --model pre-avg --input en.txt > pre-avg.greedy
# 4. joint BPE, all embeddings tied, validation BLEU every epoch (the library's BLEU path)
head -n 600 "$m30/train.de" > tr.de; head -n 600 "$m30/train.en" > tr.en
head -n 60 "$m30/val.de" > va.de; head -n 60 "$m30/val.en" > va.en
q train --src tr.de --tgt tr.en --out bpe --tokenizer bpe --vocab-size 600 --joint-bpe --tie all \
  --d-model 32 --heads 4 --ffn 64 --layers 2 --epochs 3 --num-steps 20 --batch-tokens 600 \
  --valid-src va.de --valid-tgt va.en --patience 2 > bpe.log
"$qkv" translate --model bpe --input va.de --beam 2 > bpe.beam
"$qkv" eval --model bpe --src va.de --tgt va.en 2>&1 | strip_times > bpe.eval
# 5. long sequences: attention over 256+ keys runs the flash kernel in training
awk -F'\t' 'NR <= 64 { s = $1; t = $2; while (length(s) < 700) s = s " " $1;
  while (length(t) < 700) t = t " " $2; print s "\t" t }' fra800.tsv > long.tsv
q train --data long.tsv --out long --d-model 32 --heads 2 --ffn 32 --layers 1 --num-steps 300 \
  --batch 8 --epochs 1 --min-freq 1 > long.log
# 6. language models: softmax and linear attention, generation
head -c 60000 "$data/tinyshakespeare/input.txt" > shake.txt
q train-lm --data shake.txt --out lm-soft --attention softmax --d-model 32 --heads 4 --ffn 64 \
  --layers 2 --context 32 --batch 8 --steps 30 --log-every 10 --eval-every 15 > lm-soft.log
q train-lm --data shake.txt --out lm-lin --attention linear --d-model 32 --heads 4 --ffn 64 \
  --layers 2 --context 32 --batch 8 --steps 30 --pre-norm --tie --act gelu --learned-pos \
  --weight-decay 0.1 --warmup 5 --cosine --log-every 10 --eval-every 15 > lm-lin.log
for m in lm-soft lm-lin; do
  "$qkv" generate --model $m --prompt "ROMEO:" --tokens 80 --temperature 0.8 --seed 3 > $m.gen
  "$qkv" generate --model $m --prompt "ROMEO:" --tokens 40 --temperature 0 > $m.greedy
  "$qkv" eval-lm --model $m --data shake.txt 2>&1 | strip_times > $m.eval
done
# 7. bf16 products (training, decoding, generation)
if [ $bf16 = 1 ]; then
  q train --data fra800.tsv --out fra16 --d-model 32 --heads 4 --ffn 64 --layers 2 --epochs 3 \
    --precision bf16 > fra16.log
  "$qkv" translate --model fra16 --input en.txt --precision bf16 --beam 2 > fra16.beam
  "$qkv" translate --model fra --input en.txt --precision bf16 > fra.bf16
  q train-lm --data shake.txt --out lm16 --d-model 32 --heads 4 --ffn 64 --layers 2 \
    --context 32 --batch 8 --steps 20 --precision bf16 > lm16.log
  "$qkv" generate --model lm16 --prompt "ROMEO:" --tokens 40 --seed 1 --precision bf16 > lm16.gen
fi
# 8. int8 products (decoding, generation) and an explicit bf16 key-value cache
int8=0
grep -q avx512_vnni /proc/cpuinfo && int8=1
if [ $int8 = 1 ]; then
  "$qkv" translate --model fra --input en.txt --precision int8 > fra.int8.greedy
  "$qkv" translate --model pre --input en.txt --precision int8 --beam 3 --n-best 2 > pre.int8.beam
  "$qkv" generate --model lm-soft --prompt "ROMEO:" --tokens 60 --seed 5 --precision int8 > lm-soft.int8.gen
  "$qkv" generate --model lm-lin --prompt "ROMEO:" --tokens 60 --seed 5 --precision int8 > lm-lin.int8.gen
fi
"$qkv" generate --model lm-soft --prompt "ROMEO:" --tokens 60 --seed 7 --kv-cache bf16 > lm-soft.kv16.gen
for d in demo fra pre pre-avg pre/epoch-003 bpe long lm-soft lm-lin fra16 lm16; do
  [ -d "$d" ] && keep "$d"
done
# the directories' remaining files are not compared: only *.kept and the logs
find . -type f ! -name '*.kept' ! -name '*.log' ! -name '*.greedy' ! -name '*.beam' \
  ! -name '*.eval' ! -name '*.gen' ! -name '*.bf16' -delete
echo "same_results: $(find . -type f | wc -l) files in $out"
