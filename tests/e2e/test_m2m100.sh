#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# End-to-end tests of qkv import nllb / m2m100 and qkv translate --source-lang/--target-lang:
# the small random-weight NLLB-200 and M2M100 directories of
# tests/parity/make_m2m100_reference.py (tokenizers built by transformers at test time; the
# numbers against transformers are tests/unit/test_m2m100.c's) translate, as text, exactly
# as transformers' generate(forced_bos_token_id=...) decoded by NllbTokenizer or
# M2M100Tokenizer does: greedy, and beam 4 under transformers' stopping rule. Refusals: an
# unknown language, no target language, another architecture, the other importer's
# tokenizer.
# Usage: test_m2m100.sh QKV_BINARY
set -u
QKV=$(realpath "$1")
. "$(dirname "$0")/lib.sh" # $T, ok, bad, check, expect_fail
P=${QKV_PARITY_DIR:-build/parity}
if [ ! -f "$P/m2m100_nllb_tied/config.json" ]; then
  echo "no $P/m2m100_nllb_tied (make build/parity/.stamp writes it)"; bad "reference directories present"
  echo "$pass passed, $fail failed"; exit 1
fi
LIM=(--max-len 23 --max-len-a 0 --max-len-b 23)
langs() { /usr/bin/python3 -c "
from safetensors import safe_open
m = safe_open('$P/m2m100_$1.safetensors', 'np').metadata(); print(m['src_lang'], m['tgt_lang'])"; }
for n in nllb_tied nllb_untied_gelu m2m100_unscaled; do
  kind=nllb; [ "$n" = m2m100_unscaled ] && kind=m2m100
  read -r SRC TGT < <(langs "$n")
  "$QKV" import "$kind" "$P/m2m100_$n" --out "$T/$n" 2>"$T/err" || bad "import $n: $(cat "$T/err")"
  check "$n: qkv translate --source-lang $SRC --target-lang $TGT gives transformers' greedy text" bash -c "
    '$QKV' translate --model '$T/$n' --source-lang $SRC --target-lang $TGT ${LIM[*]} \
      <'$P/m2m100_$n.src' 2>/dev/null | cmp -s - '$P/m2m100_$n.greedy.txt'"
  check "$n: --beam 4 --beam-stop hf --length-penalty 1 gives generate(num_beams=4)'s text" bash -c "
    '$QKV' translate --model '$T/$n' --source-lang $SRC --target-lang $TGT ${LIM[*]} --beam 4 \
      --beam-stop hf --length-penalty 1 <'$P/m2m100_$n.src' 2>/dev/null |
      cmp -s - '$P/m2m100_$n.beam4.txt'"
done
check "the tokenizer's default languages (tokenizer_config.json's src_lang, tgt_lang) need no options" \
  bash -c "'$QKV' translate --model '$T/nllb_tied' ${LIM[*]} <'$P/m2m100_nllb_tied.src' 2>/dev/null |
    cmp -s - '$P/m2m100_nllb_tied.greedy.txt'"
check "config.json keeps fairseq's model: pre-norm, final norms, its positions, decoding from <eos>" \
  bash -c "grep -q '\"pos_layout\":.*\"fairseq\"' '$T/nllb_tied/config.json' &&
           grep -q '\"pre_norm\":.*true' '$T/nllb_tied/config.json' &&
           grep -q '\"decoder_start\":.*\"<eos>\"' '$T/nllb_tied/config.json'"
expect_fail "an unknown target language names a few the model has" \
  "target language 'xxx_Latn' is not one of the model's 202 \(ace_Arab, " \
  "$QKV" translate --model "$T/nllb_tied" --target-lang xxx_Latn
/usr/bin/python3 - "$T/nllb_tied/text.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1])); j.pop("target_lang", None); json.dump(j, open(sys.argv[1], "w"))
PY
expect_fail "a multilingual model without a target language asks for one" "which one \(--target-lang\)" \
  bash -c "echo 'Ein Mann.' | '$QKV' translate --model '$T/nllb_tied'"
rm -rf "$T/bart"; cp -r "$P/m2m100_nllb_tied" "$T/bart"
sed -i 's/"model_type": "m2m_100"/"model_type": "bart"/' "$T/bart/config.json"
expect_fail "another architecture" '"model_type" is "bart", not "m2m_100"' \
  "$QKV" import nllb "$T/bart" --out "$T/o1"
expect_fail "an M2M100 directory given to the NLLB importer" 'import it with qkv import m2m100' \
  "$QKV" import nllb "$P/m2m100_m2m100_unscaled" --out "$T/o2"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
