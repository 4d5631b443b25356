#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# End-to-end tests of translation quality features: subword (BPE) models, beam search and
# n-best lists, batches by tokens with the noam schedule, validation with the best model and
# early stopping, exact resume of all of it, and checkpoint averaging.
# Usage: test_subwords_beam.sh QKV_BINARY. QKV_E2E_QUICK=1 (the sanitizer run) is smaller.
set -u
QKV=$(realpath "$1")
DATA=${QKV_DATA_DIR:-../shared/data}
FRA=$DATA/fra-eng/fra.txt
M30=$DATA/multi30k
. "$(dirname "$0")/lib.sh" # $T, ok, bad, check, expect_fail
if [ ! -r "$FRA" ] || [ ! -r "$M30/train.de" ]; then
  echo "skip: $FRA or $M30 not found (set QKV_DATA_DIR)"; echo "$pass passed, $fail failed"; exit 0
fi

# ---- bad options say what is wrong
expect_fail "unknown tokenizer" "tokenizer" "$QKV" train --data "$FRA" --out "$T/x" --tokenizer chars
expect_fail "vocabulary too small" "vocab-size" "$QKV" train --data "$FRA" --out "$T/x" --tokenizer bpe --vocab-size 4
expect_fail "--valid-src needs --valid-tgt" "valid-tgt" "$QKV" train --data "$FRA" --out "$T/x" --valid-src "$FRA"
expect_fail "unknown schedule" "schedule" "$QKV" train --data "$FRA" --out "$T/x" --schedule cosine
expect_fail "--tie all needs a joint encoding" "joint-bpe" "$QKV" train --data "$FRA" --num-examples 50 \
  --out "$T/x" --tokenizer bpe --vocab-size 100 --tie all --epochs 1 --quiet
expect_fail "--beam 0" "beam" "$QKV" translate --model "$T/x" --beam 0
expect_fail "--n-best above --beam" "n-best" "$QKV" translate --model "$T/x" --beam 2 --n-best 3
expect_fail "unknown --beam-stop" "beam-stop 'first': expected bound, count, hf, hf-early or hf-never" \
  "$QKV" translate --model "$T/x" --beam-stop first
expect_fail "negative --length-penalty" "length-penalty" "$QKV" translate --model "$T/x" --length-penalty -1
expect_fail "average needs models" "model directory" "$QKV" average --out "$T/avg"

# ---- a subword model on fra.txt: batches by tokens, noam warmup, validation
N=1500; EPOCHS=8
[ -n "${QKV_E2E_QUICK:-}" ] && N=400 && EPOCHS=3
sed -n '1,200p' "$FRA" >"$T/valid.tsv" # seen in training: BLEU rises quickly
TRAIN=(--data "$FRA" --num-examples $N --tokenizer bpe --vocab-size 500 --joint-bpe --tie all
       --d-model 32 --heads 2 --ffn 64 --layers 1 --batch-tokens 512 --num-steps 14
       --schedule noam --warmup 40 --lr-factor 2 --epochs $EPOCHS --valid "$T/valid.tsv"
       --keep-epochs 2 --threads 2 --quiet)
"$QKV" train "${TRAIN[@]}" --out "$T/m" 2>"$T/err"
check "train writes subword files, best/ and the validation history" test -s "$T/m/src_bpe.txt" \
  -a -s "$T/m/tgt_bpe.txt" -a -s "$T/m/best/model.safetensors" -a -s "$T/m/validation.json"
check "joint encoding: one vocabulary of at most 500 tokens" \
  bash -c "cmp -s '$T/m/src_vocab.txt' '$T/m/tgt_vocab.txt' && [ \$(wc -l <'$T/m/src_vocab.txt') -le 500 ]"
check "text.json names the tokenizer" grep -q '"bpe"' "$T/m/text.json"
check "metrics have val_loss and bleu every epoch" \
  test "$(grep -c '"val_loss": .*"bleu": ' "$T/m/metrics.jsonl")" -eq $EPOCHS
for key in tokenizer vocab_size joint_bpe batch_tokens schedule warmup lr_factor valid patience keep_epochs; do
  grep -q "\"$key\"" "$T/m/train.json" || bad "train.json records $key"
done
ok "train.json records every new option"
check "the last --keep-epochs models are kept" \
  bash -c "ls -d '$T/m'/epoch-* | wc -l | grep -qx 2 && test -s '$T/m/epoch-$(printf %03d $EPOCHS)/model.safetensors'"

printf 'je suis content .\nil est grand .\nnous partons !\nbonjour\n' >"$T/in.txt"
"$QKV" translate --model "$T/m" <"$T/in.txt" >"$T/greedy"
check "translate prints words, not pieces" bash -c "[ \$(wc -l <'$T/greedy') -eq 4 ] && ! grep -q $'\xe2\x96\x81' '$T/greedy'"
"$QKV" translate --model "$T/m" --beam 1 <"$T/in.txt" >"$T/beam1"
check "--beam 1 is greedy decoding" cmp -s "$T/greedy" "$T/beam1"
"$QKV" translate --model "$T/m" --beam 4 --alpha 0.6 --batch 32 <"$T/in.txt" >"$T/b4"
"$QKV" translate --model "$T/m" --beam 4 --alpha 0.6 --batch 1 <"$T/in.txt" >"$T/b4one"
check "beam search: a sentence translates the same alone and in a batch" cmp -s "$T/b4" "$T/b4one"
"$QKV" translate --model "$T/m" --beam 4 --n-best 3 <"$T/in.txt" >"$T/nbest"
check "--n-best 3 prints 3 hypotheses a sentence" test "$(grep -c ' ||| ' "$T/nbest")" -eq 12
check "n-best scores fall within each sentence" awk -F' \\|\\|\\| ' '
  $1 == prev && $3 > last + 1e-9 { bad = 1 } { prev = $1; last = $3 } END { exit bad }' "$T/nbest"
check "the first of the n best is the beam's translation" \
  bash -c "diff <(awk -F' \\\\|\\\\|\\\\| ' '!seen[\$1]++ { print \$2 }' '$T/nbest') <('$QKV' translate --model '$T/m' --beam 4 <'$T/in.txt')"
for rule in bound count hf hf-early hf-never; do
  "$QKV" translate --model "$T/m" --beam 3 --n-best 2 --beam-stop $rule <"$T/in.txt" >"$T/rule_$rule"
done
check "--beam-stop bound, count, hf, hf-early and hf-never each give 2 hypotheses a sentence" \
  test "$(cat "$T"/rule_* | grep -c ' ||| ')" -eq 40
check "the exact rule's best scores at least the count rule's, sentence by sentence" \
  awk -F' \\|\\|\\| ' 'FNR == 1 { f++ } !seen[f, $1]++ { best[f, $1] = $3 }
    END { for (i = 0; i < 4; i++) if (best[1, i] < best[2, i] - 1e-9) exit 1 }' "$T/rule_bound" "$T/rule_count"
"$QKV" translate --model "$T/m/best" <"$T/in.txt" >"$T/best"
check "best/ loads as a model (vocabularies from its parent)" test "$(wc -l <"$T/best")" -eq 4
"$QKV" eval --model "$T/m" --data "$T/valid.tsv" --metric all >"$T/eval" && \
"$QKV" eval --model "$T/m" --data "$T/valid.tsv" --metric all --beam 4 >"$T/eval4"
check "eval reports word BLEU and sacreBLEU, greedy and beam" \
  bash -c "grep -qE '^corpus BLEU-4: [0-9.]+' '$T/eval' && grep -qE '^corpus BLEU-4: [0-9.]+' '$T/eval4' && grep -q '^BLEU|nrefs:1' '$T/eval4'"

# ---- validation BLEU is qkv eval's greedy BLEU (a copy task of words, learnt in a few epochs;
# accented, for the NFD checks below)
awk 'BEGIN { srand(7); split("red café blue été dog crème moon über car book", w, " ")
             for (i = 0; i < 3000; i++) { n = 4 + int(rand() * 5); s = ""
               for (k = 0; k < n; k++) s = s (k ? " " : "") w[1 + int(rand() * 10)]
               print s "\t" s } }' >"$T/copy.tsv"
head -n 200 "$T/copy.tsv" >"$T/copy_valid.tsv"
"$QKV" train --data "$T/copy.tsv" --tokenizer bpe --vocab-size 60 --joint-bpe --tie all \
  --d-model 32 --heads 2 --ffn 64 --layers 2 --batch-tokens 512 --num-steps 24 --lr 0.005 \
  --epochs 4 --valid "$T/copy_valid.tsv" --threads 2 --quiet --out "$T/copy"
last_bleu=$(tail -n 1 "$T/copy/metrics.jsonl" | sed 's/.*"bleu": \([0-9.]*\).*/\1/')
# validation decodes to --num-steps tokens, eval by default to 1.5 n + 10: the same limit here
eval_bleu=$("$QKV" eval --model "$T/copy" --data "$T/copy_valid.tsv" --max-len 24 --max-len-a 0 \
  --max-len-b 0 --metric d2l | sed -n 's/^corpus BLEU-4: //p')
check "validation BLEU ($last_bleu) = qkv eval's ($eval_bleu), and above 5" \
  awk -v a="$last_bleu" -v b="$eval_bleu" 'BEGIN { d = a - b; exit !(d < 0.006 && d > -0.006 && a > 5) }'

# ---- exact resume with subwords, token batches, noam and validation
"$QKV" train "${TRAIN[@]}" --out "$T/r" --stop-after-steps 7 2>/dev/null
"$QKV" train "${TRAIN[@]}" --out "$T/r" --resume 2>/dev/null
check "stop + resume == uninterrupted: model" cmp -s "$T/m/model.safetensors" "$T/r/model.safetensors"
check "stop + resume == uninterrupted: best model" cmp -s "$T/m/best/model.safetensors" "$T/r/best/model.safetensors"
check "stop + resume == uninterrupted: validation history" cmp -s "$T/m/validation.json" "$T/r/validation.json"

# ---- checkpoint averaging
"$QKV" average --out "$T/avg" "$T/m"/epoch-* 2>/dev/null
check "average writes a model that translates" \
  bash -c "'$QKV' translate --model '$T/avg' <'$T/in.txt' | wc -l | grep -qx 4"
"$QKV" average --out "$T/self" "$T/m" "$T/m" 2>/dev/null
check "the average of a model with itself is the model" cmp -s "$T/m/model.safetensors" "$T/self/model.safetensors"

# ---- early stopping: a rate that wrecks the model stops after --patience epochs
"$QKV" train --data "$FRA" --num-examples 300 --d-model 16 --heads 2 --ffn 32 --layers 1 \
  --num-steps 8 --lr 2 --epochs 30 --valid "$T/valid.tsv" --no-bleu --patience 2 --threads 2 \
  --out "$T/es" 2>"$T/es.err"
lines=$(wc -l <"$T/es/metrics.jsonl")
check "--patience 2 stopped early ($lines of 30 epochs)" test "$lines" -lt 30
check "early stopping says so" grep -q "stopping" "$T/es.err"

# ---- Multi30k-shaped input: --src/--tgt with --valid-src/--valid-tgt, per-language BPE
head -n 600 "$M30/train.de" >"$T/tr.de"; head -n 600 "$M30/train.en" >"$T/tr.en"
head -n 100 "$M30/val.de" >"$T/va.de"; head -n 100 "$M30/val.en" >"$T/va.en"
"$QKV" train --src "$T/tr.de" --tgt "$T/tr.en" --valid-src "$T/va.de" --valid-tgt "$T/va.en" \
  --tokenizer bpe --vocab-size 300 --d-model 16 --heads 2 --ffn 32 --layers 1 --num-steps 24 \
  --batch-tokens 400 --epochs 2 --threads 2 --quiet --out "$T/de"
check "per-language encodings differ" bash -c "! cmp -s '$T/de/src_bpe.txt' '$T/de/tgt_bpe.txt'"
check "both validations logged" test "$(grep -c '"bleu"' "$T/de/metrics.jsonl")" -eq 2
"$QKV" eval --model "$T/de" --src "$T/va.de" --tgt "$T/va.en" --beam 3 >"$T/de.eval"
check "eval on aligned files" grep -q '^sentences: 100$' "$T/de.eval"

# ---- text typed in NFD ("ä" as a + U+0308, as macOS writes it) reads as the NFC it means
nfd() { perl -CSD -MUnicode::Normalize -pe '$_ = NFD($_)' "$@"; }
grep -m 8 '[äöüÄÖÜ]' "$T/va.de" >"$T/nfc.de"; nfd "$T/nfc.de" >"$T/nfd.de"
nfd "$T/tr.de" >"$T/nfd_tr.de"; nfd "$T/tr.en" >"$T/nfd_tr.en"
nfd "$T/va.de" >"$T/nfd_va.de"; nfd "$T/va.en" >"$T/nfd_va.en"
check "the NFD test lines differ from the NFC ones in bytes" bash -c "! cmp -s '$T/nfc.de' '$T/nfd.de'"
"$QKV" translate --model "$T/de" --beam 3 --n-best 3 <"$T/nfc.de" >"$T/nfc.out"
"$QKV" translate --model "$T/de" --beam 3 --n-best 3 <"$T/nfd.de" >"$T/nfd.out"
check "translate: NFD lines give the NFC lines' translations and scores" \
  bash -c "[ -s '$T/nfc.out' ] && cmp -s '$T/nfc.out' '$T/nfd.out'"
nfd "$T/copy_valid.tsv" >"$T/nfd_copy_valid.tsv" # the copy model: scores that can differ
"$QKV" eval --model "$T/copy" --data "$T/copy_valid.tsv" --metric d2l >"$T/nfc.eval"
"$QKV" eval --model "$T/copy" --data "$T/nfd_copy_valid.tsv" --metric d2l >"$T/nfd.eval"
check "eval: NFD sources and references score as the NFC ones ($(sed -n 's/^corpus //p' "$T/nfc.eval"))" \
  bash -c "! cmp -s '$T/copy_valid.tsv' '$T/nfd_copy_valid.tsv' && cmp -s '$T/nfc.eval' '$T/nfd.eval'"
"$QKV" train --src "$T/nfd_tr.de" --tgt "$T/nfd_tr.en" --valid-src "$T/nfd_va.de" \
  --valid-tgt "$T/nfd_va.en" --tokenizer bpe --vocab-size 300 --d-model 16 --heads 2 --ffn 32 \
  --layers 1 --num-steps 24 --batch-tokens 400 --epochs 2 --threads 2 --quiet --out "$T/de_nfd"
check "train: an NFD corpus learns the NFC corpus's encodings, model and validation" bash -c \
  "for f in src_bpe.txt tgt_bpe.txt model.safetensors validation.json; do
     cmp -s '$T/de/'\$f '$T/de_nfd/'\$f || exit 1; done"
expect_fail "average refuses two configurations" "configuration" "$QKV" average --out "$T/y" "$T/m" "$T/de"

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
