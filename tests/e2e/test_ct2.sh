#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# End-to-end tests of qkv export ct2: CTranslate2 (ctranslate2 from pip, a test tool) runs
# the directory qkv writes and translates every test sentence as qkv translate does, greedy
# in float32, its log-probabilities of reference targets within 1e-4 of transformers'
# (tests/e2e/ct2_check.py): imported Marian models (one embedding tied
# everywhere, separate vocabularies, an untied output, an output tied to the target
# embedding; swish, gelu, relu; scaled and unscaled embeddings; decoding from <pad>) and
# models qkv trained (post-norm and pre-norm with final LayerNorms, learned positions, d2l's
# interleaved table, biases or none). --quantization int8 writes what CTranslate2's own
# quantisation of the float32 file computes. Refusals: a directory in the way, an unknown
# quantisation, a language model.
# Usage: test_ct2.sh QKV_BINARY
set -u
QKV=$(realpath "$1")
. "$(dirname "$0")/lib.sh" # $T, ok, bad, check, expect_fail
P=${QKV_PARITY_DIR:-build/parity}
PY=${QKV_PY:-/usr/bin/python3}   # with ctranslate2 (tests/run.sh: build/venv)
CHECK="$PY $(dirname "$0")/ct2_check.py"
if ! "$PY" -c 'import ctranslate2' 2>/dev/null; then
  echo "no ctranslate2 for $PY (scripts/install-deps.sh --test installs it)"
  bad "ctranslate2 importable"; echo "$pass passed, $fail failed"; exit 1
fi
LIM=(--max-len 23 --max-len-a 0 --max-len-b 23)

# ---- imported Marian models
for n in shared_swish separate_gelu shared_relu_untied release_separate; do
  "$QKV" import marian "$P/marian_$n" --out "$T/m_$n" 2>/dev/null || bad "import $n"
  "$QKV" translate --model "$T/m_$n" "${LIM[@]}" --beam 1 <"$P/marian_$n.de" >"$T/q_$n" 2>/dev/null
  check "$n: qkv export ct2 writes a directory CTranslate2 loads" \
    "$QKV" export ct2 "$T/m_$n" --out "$T/c_$n"
  check "$n: CTranslate2 translates every sentence as qkv (greedy, float32)" \
    $CHECK "$T/m_$n" "$T/c_$n" "$P/marian_$n.de" "$T/q_$n" 23
  hf=$P/marian_$n; [ -d "${hf}_hf" ] && hf=${hf}_hf
  tv=(); [ -f "$hf/target_vocab.json" ] && tv=("$hf/target_vocab.json")
  check "$n: CTranslate2's log-probabilities of the reference targets within 1e-4 of transformers'" \
    $CHECK --logits "$P/marian_$n.safetensors" "$hf/vocab.json" "$T/c_$n" "${tv[@]}"
done
check "--quantization int8: the weights as CTranslate2 quantises the float32 model itself" bash -c "
  '$QKV' export ct2 '$T/m_shared_swish' --out '$T/c8' --quantization int8 2>/dev/null &&
  $CHECK '$T/m_shared_swish' '$T/c8' '$P/marian_shared_swish.de' - 23 --compute-type int8 \
    --same-as '$T/c_shared_swish' --compute-type2 int8"
check "... and stores them as int8 (a smaller model.bin)" bash -c "
  [ \$(stat -c %s '$T/c8/model.bin') -lt \$(stat -c %s '$T/c_shared_swish/model.bin') ]"

# ---- an imported NLLB model: CTranslate2 with the source language token and the target's
# as its target prefix gives transformers' text (qkv's, tests/e2e/test_m2m100.sh)
N=$P/m2m100_nllb_tied
if [ -d "$N" ]; then
  "$QKV" import nllb "$N" --out "$T/nllb" 2>/dev/null && "$QKV" export ct2 "$T/nllb" --out "$T/c_nllb" 2>/dev/null ||
    bad "import and export nllb_tied"
  check "nllb_tied: CTranslate2 (target_prefix = the target language) translates every sentence as transformers" \
    /usr/bin/python3 - "$T/nllb" "$T/c_nllb" "$N.src" "$N.greedy.txt" <<'PY'
import sys, ctranslate2, sentencepiece as spm
model, ct2, src, want = sys.argv[1:]
sp = spm.SentencePieceProcessor(model_file=model + "/source.spm")
known = {l.rstrip("\n") for l in open(model + "/src_vocab.txt", encoding="utf-8")}
lines = open(src, encoding="utf-8").read().splitlines()
want = open(want, encoding="utf-8").read().splitlines()
toks = [["deu_Latn"] + [p if p in known else "<unk>" for p in sp.encode(l, out_type=str)] for l in lines]
res = ctranslate2.Translator(ct2, intra_threads=1).translate_batch(
    toks, target_prefix=[["eng_Latn"]] * len(toks), beam_size=1, max_decoding_length=23,
    min_decoding_length=0)
got = ["".join(r.hypotheses[0][1:]).replace("\u2581", " ").strip() for r in res]
sys.exit(0 if got == want else 1)
PY
fi

# ---- models qkv trained: copy tasks of words
awk 'BEGIN { srand(5); for (i = 0; i < 60; i++) { s = ""; n = 3 + int(rand() * 4);
       for (j = 0; j < n; j++) s = s (j ? " " : "") substr("abcdefgh", 1 + int(rand() * 8), 1);
       print s "\t" s } }' >"$T/copy.tsv"
cut -f1 "$T/copy.tsv" | head -30 >"$T/copy.src"
train() { # NAME OPTIONS...
  local name=$1; shift
  "$QKV" train --data "$T/copy.tsv" --d-model 16 --heads 2 --ffn 32 --layers 2 --batch 8 \
    --num-steps 12 --epochs 3 --threads 1 --quiet --out "$T/$name" "$@" >/dev/null 2>&1
}
train post_tied --tie all --act gelu --bias
train pre_learned --pre-norm --final-norm --learned-pos --tie output --act silu
train plain
for n in post_tied pre_learned plain; do
  if [ ! -s "$T/$n/model.safetensors" ]; then bad "train $n"; continue; fi
  "$QKV" translate --model "$T/$n" --max-len 12 --max-len-a 0 --max-len-b 12 \
    <"$T/copy.src" >"$T/q_$n" 2>/dev/null
  "$QKV" export ct2 "$T/$n" --out "$T/c_$n" 2>/dev/null || bad "export $n"
  check "trained $n: CTranslate2 translates every sentence as qkv (greedy, float32)" \
    $CHECK "$T/$n" "$T/c_$n" "$T/copy.src" "$T/q_$n" 12
done

# ---- refusals
mkdir -p "$T/full" && touch "$T/full/x"
expect_fail "an output directory that holds files" "is not empty" \
  "$QKV" export ct2 "$T/plain" --out "$T/full"
check "... replaced with --overwrite" "$QKV" export ct2 "$T/plain" --out "$T/full" --overwrite
# the output is never the model, nor inside it, nor above it (CTranslate2's config.json
# replaced the model's, with --overwrite)
cp -r "$T/plain" "$T/self"
for out in self self/. self/sub .; do
  expect_fail "export ct2 self --out $out is refused (with --overwrite)" \
    "is the model|is inside the model|holds the model" \
    bash -c "cd '$T' && exec '$QKV' export ct2 self --out '$out' --overwrite"
done
check "... and the model is whole" bash -c "cmp -s '$T/plain/config.json' '$T/self/config.json' && test ! -e '$T/self/model.bin' && test ! -e '$T/model.bin'"
expect_fail "an unknown quantisation" "--quantization 'int4': expected float32 or int8" \
  "$QKV" export ct2 "$T/plain" --out "$T/x1" --quantization int4
expect_fail "an unknown format" "unknown format 'onnx'" "$QKV" export onnx "$T/plain" --out "$T/x2"
"$QKV" train-lm --data "$T/copy.src" --d-model 8 --heads 2 --ffn 16 --layers 1 --batch 4 \
  --num-steps 2 --epochs 1 --threads 1 --quiet --out "$T/lm" >/dev/null 2>&1
expect_fail "a language model (CTranslate2's Translator needs an encoder-decoder)" "config.json" \
  "$QKV" export ct2 "$T/lm" --out "$T/x3"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
