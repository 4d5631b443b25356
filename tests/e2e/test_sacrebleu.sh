#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# qkv eval's scores against pip's sacrebleu on Multi30k: the references (English and German
# test/validation lines) against hypotheses damaged systematically (tests/e2e/sacrebleu_pairs.py):
# the corpus lines `qkv eval --hyp` prints are exactly `sacrebleu -f text -w 2`'s, and every
# sentence's BLEU (sentence_bleu) and chrF2 agree to 1e-4. Then a model's eval: the default
# prints sacreBLEU's lines, --metric d2l the word-level BLEU, --metric all both.
# Usage: test_sacrebleu.sh QKV_BINARY. Needs a python3 with sacrebleu ($QKV_PY) (else skipped).
set -u
QKV=$(realpath "$1")
DATA=${QKV_DATA_DIR:-../shared/data}
M30=$DATA/multi30k
PY=${QKV_PY:-/usr/bin/python3}
HERE=$(dirname "$0")
. "$HERE/lib.sh" # $T, ok, bad, check
if [ ! -r "$M30/test_2016_flickr.en" ] || ! "$PY" -c "import sacrebleu" 2>/dev/null; then
  echo "skip: no Multi30k or no sacrebleu"; echo "$pass passed, $fail failed"; exit 0
fi

# ---- damaged hypotheses against their references, corpus and sentence level
for ref in test_2016_flickr.en val.de; do
  R=$M30/$ref
  [ -n "${QKV_E2E_QUICK:-}" ] && head -n 200 "$M30/$ref" >"$T/ref" && R=$T/ref
  "$PY" "$HERE/sacrebleu_pairs.py" "$R" "$T/hyp" 7
  "$QKV" eval --hyp "$T/hyp" --tgt "$R" --per-sentence >"$T/qkv" 2>"$T/err"
  "$PY" -m sacrebleu "$R" -i "$T/hyp" -m bleu chrf -f text -w 2 2>/dev/null | sed 's/^ *//' >"$T/want"
  check "$ref: corpus BLEU and chrF2 lines are sacrebleu's: $(head -c 80 "$T/want")" \
    diff <(grep -E '^(BLEU|chrF2)\|' "$T/qkv") "$T/want"
  check "$ref: every sentence's BLEU and chrF2 within 1e-4 of sacrebleu's" "$PY" - "$T/hyp" "$R" "$T/qkv" <<'PYEOF'
import sys
import sacrebleu
hyps = [l.rstrip("\n") for l in open(sys.argv[1], encoding="utf-8")]
refs = [l.rstrip("\n") for l in open(sys.argv[2], encoding="utf-8")]
rows = [l.split("\t") for l in open(sys.argv[3], encoding="utf-8") if "\t" in l]
assert len(rows) == len(hyps) == len(refs), (len(rows), len(hyps), len(refs))
bad = 0
for (i, b, c), h, r in zip(rows, hyps, refs):
    wb, wc = sacrebleu.sentence_bleu(h, [r]).score, sacrebleu.sentence_chrf(h, [r]).score
    if abs(float(b) - wb) > 1e-4 or abs(float(c) - wc) > 1e-4:
        bad += 1
        if bad <= 3:
            print(f"line {i}: {h!r} vs {r!r}: BLEU {b} / {wb}, chrF {c} / {wc}")
sys.exit(bad > 0)
PYEOF
done
[ -z "${QKV_E2E_QUICK:-}" ] && # 200 lines have fewer than 100 such endings
  check "the damaged hypotheses trip the ' .' warning, as sacrebleu's" grep -q "tokenised period" "$T/err"

# ---- bad inputs
head -n 3 "$M30/val.en" >"$T/three"
expect_fail "--hyp and references of other lengths" "3 lines, the references" \
  "$QKV" eval --hyp "$T/three" --tgt "$M30/val.en"
expect_fail "--hyp with --model" "no --model" "$QKV" eval --hyp "$T/three" --tgt "$T/three" --model x
expect_fail "unknown --metric" "metric 'rouge'" "$QKV" eval --hyp "$T/three" --tgt "$T/three" --metric rouge
expect_fail "--num-examples beyond the file" "has 3 lines, 5 needed" \
  "$QKV" eval --hyp "$T/three" --tgt "$T/three" --num-examples 5
expect_fail "eval's scores to a full disk" "cannot write the output" \
  bash -c "exec '$QKV' eval --hyp '$T/three' --tgt '$T/three' >/dev/full"

# ---- a model's eval: sacreBLEU by default, d2l's on request
head -n 300 "$M30/train.de" >"$T/src"; head -n 300 "$M30/train.en" >"$T/tgt"
head -n 20 "$T/src" >"$T/s20"; head -n 20 "$T/tgt" >"$T/t20"
"$QKV" train --src "$T/src" --tgt "$T/tgt" --d-model 16 --heads 2 --ffn 32 --layers 1 \
  --num-steps 40 --epochs 2 --threads 2 --quiet --valid-src "$T/s20" --valid-tgt "$T/t20" \
  --out "$T/m" 2>"$T/err"
check "validation records sacrebleu and chrf every epoch" \
  test "$(grep -c '"bleu": .*"sacrebleu": [0-9.]*, "chrf": [0-9.]*' "$T/m/metrics.jsonl")" -eq 2
# validation decodes greedily to --num-steps tokens: eval with that limit scores the same
v=$(tail -n 1 "$T/m/metrics.jsonl" | sed 's/.*"sacrebleu": \([0-9.]*\), "chrf": \([0-9.]*\).*/\1 \2/')
e=$("$QKV" eval --model "$T/m" --src "$T/s20" --tgt "$T/t20" --max-len 40 --max-len-a 0 \
  --max-len-b 0 2>/dev/null | sed -n 's/^BLEU|[^ ]* = \([0-9.]*\) .*/\1/p; s/^chrF2|[^ ]* = \([0-9.]*\)$/\1/p' | tr '\n' ' ')
check "validation's sacrebleu and chrf ($v) are qkv eval's ($e)" \
  awk -v v="$v" -v e="$e" 'BEGIN { split(v, a, " "); split(e, b, " ")
    exit !(a[1] - b[1] < 0.006 && b[1] - a[1] < 0.006 && a[2] - b[2] < 0.006 && b[2] - a[2] < 0.006) }'
"$QKV" eval --model "$T/m" --src "$T/s20" --tgt "$T/t20" >"$T/e_default" 2>/dev/null
"$QKV" eval --model "$T/m" --src "$T/s20" --tgt "$T/t20" --metric d2l >"$T/e_d2l" 2>/dev/null
"$QKV" eval --model "$T/m" --src "$T/s20" --tgt "$T/t20" --metric all >"$T/e_all" 2>/dev/null
check "eval prints sacreBLEU's BLEU and chrF2 by default" \
  bash -c "grep -q '^BLEU|nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp' '$T/e_default' && grep -q '^chrF2|' '$T/e_default' && ! grep -q 'corpus BLEU-4' '$T/e_default'"
check "--metric d2l prints d2l's, --metric all both" \
  bash -c "grep -q '^corpus BLEU-4: ' '$T/e_d2l' && ! grep -q '^BLEU|' '$T/e_d2l' && grep -q '^corpus BLEU-4: ' '$T/e_all' && grep -q '^BLEU|' '$T/e_all'"
"$QKV" translate --model "$T/m" --input "$T/s20" >"$T/trans" 2>/dev/null
check "a model's eval scores its translations as --hyp does" \
  diff <(grep -E '^(BLEU|chrF2)\|' "$T/e_default") <("$QKV" eval --hyp "$T/trans" --tgt "$T/t20" | grep -E '^(BLEU|chrF2)\|')
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
