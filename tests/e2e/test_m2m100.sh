#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# End-to-end tests of qkv import nllb / m2m100 and qkv translate --source-lang/--target-lang:
# the small random-weight NLLB-200 and M2M100 directories of
# tests/parity/make_m2m100_reference.py (tokenizers built by transformers at test time; the
# numbers against transformers are tests/unit/test_m2m100.c's) translate, as text, exactly
# as transformers' generate(forced_bos_token_id=...) decoded by NllbTokenizer or
# M2M100Tokenizer does: greedy, and beam 4 under transformers' stopping rule (early_stopping
# False, and True and "never" for several beams, also as generation_config.json chooses them).
# Refusals: an unknown language, no target language, another architecture, the other
# importer's tokenizer, an early_stopping transformers does not have.
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
langs() { "${QKV_PY:-/usr/bin/python3}" -c "
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
# transformers' other stopping rules: --beam-stop hf-early (early_stopping=True) and hf-never
# ("never") give generate()'s text for each beam of the reference, and generation_config.json's
# early_stopping chooses the rule at import
meta() { "${QKV_PY:-/usr/bin/python3}" -c "
from safetensors import safe_open
print(safe_open('$P/m2m100_$1.safetensors', 'np').metadata()['$2'])"; }
read -r SRC TGT < <(langs nllb_tied)
for rule in $(meta nllb_tied rules | tr , ' '); do
  k=${rule#*_}; stop=hf-${rule%_*}; es=True; [ "$stop" = hf-never ] && es='"never"'
  check "nllb_tied: --beam $k --beam-stop $stop gives generate(num_beams=$k, early_stopping=$es)'s text" \
    bash -c "'$QKV' translate --model '$T/nllb_tied' --source-lang $SRC --target-lang $TGT ${LIM[*]} \
      --beam $k --beam-stop $stop <'$P/m2m100_nllb_tied.src' 2>/dev/null | cmp -s - '$P/m2m100_nllb_tied.$rule.txt'"
done
# at beam 2, early_stopping=True and False translate some sentences of nllb_tied differently
# (the reference counts them), so these checks tell the rules apart
"$QKV" translate --model "$T/nllb_tied" --source-lang $SRC --target-lang $TGT ${LIM[*]} --beam 2 \
  --beam-stop hf <"$P/m2m100_nllb_tied.src" >"$T/hf2.txt" 2>/dev/null
check "... where --beam-stop hf translates $(meta nllb_tied early_2_differ) of 24 otherwise at beam 2" \
  bash -c "! cmp -s '$T/hf2.txt' '$P/m2m100_nllb_tied.early_2.txt'"
early_variant() { # NAME EARLY_STOPPING (a JSON value) BEAMS
  rm -rf "$T/$1"; cp -r "$P/m2m100_nllb_tied" "$T/$1"
  /usr/bin/python3 - "$T/$1/generation_config.json" "$2" "$3" <<'PY'
import json, sys
g = json.load(open(sys.argv[1]))
g.update(num_beams=int(sys.argv[3]), length_penalty=1.0, early_stopping=json.loads(sys.argv[2]))
json.dump(g, open(sys.argv[1], "w"))
PY
}
for v in true '"never"'; do
  n=early k=2; [ "$v" = true ] || n=never k=4
  early_variant "gc_$n" "$v" $k
  "$QKV" import nllb "$T/gc_$n" --out "$T/gc_${n}_q" 2>"$T/err" || bad "import gc_$n: $(cat "$T/err")"
  check "generation_config.json's \"early_stopping\": $v (num_beams $k) is --beam-stop hf-$n by default" bash -c "
    grep -q '\"beam_stop\": \"hf-$n\"' '$T/gc_${n}_q/generation.json' &&
    '$QKV' translate --model '$T/gc_${n}_q' --source-lang $SRC --target-lang $TGT ${LIM[*]} \
      <'$P/m2m100_nllb_tied.src' 2>/dev/null | cmp -s - '$P/m2m100_nllb_tied.${n}_$k.txt'"
done
early_variant gc_bad '"sometimes"' 4
expect_fail "\"early_stopping\": \"sometimes\" is refused naming the file" \
  'generation_config.json: "early_stopping" must be true, false or "never"' \
  "$QKV" import nllb "$T/gc_bad" --out "$T/gc_bad_q"
check "... and nothing is written" test ! -e "$T/gc_bad_q"
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
# what every reader of the imported model would refuse is refused at import, by the checks all
# importers share (src/io/hf_dir.c), and nothing is written
variant() { rm -rf "$T/$1"; cp -r "$P/m2m100_nllb_tied" "$T/$1"; }
variant nullact
/usr/bin/python3 - "$T/nullact/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["activation_function"] = None; json.dump(c, open(sys.argv[1], "w"))
PY
expect_fail "\"activation_function\": null" '"activation_function" must be a string \(it is null\)' \
  "$QKV" import nllb "$T/nullact" --out "$T/o3"
variant junkspm; echo junk >"$T/junkspm/sentencepiece.bpe.model"
expect_fail "a junk SentencePiece model" "sentencepiece.bpe.model: not a SentencePiece model" \
  "$QKV" import nllb "$T/junkspm" --out "$T/o4"
variant fifospm; rm "$T/fifospm/sentencepiece.bpe.model"; mkfifo "$T/fifospm/sentencepiece.bpe.model"
expect_fail "a FIFO as the SentencePiece model" "sentencepiece.bpe.model: is a FIFO or pipe" \
  timeout 120 "$QKV" import nllb "$T/fifospm" --out "$T/o5"
variant nan
/usr/bin/python3 - "$T/nan/model.safetensors" <<'PY'
import sys
from safetensors import safe_open
from safetensors.numpy import save_file
with safe_open(sys.argv[1], "numpy") as f:
    meta = f.metadata(); t = {k: f.get_tensor(k) for k in f.keys()}
k = next(k for k in sorted(t) if k.endswith("fc1.weight")); w = t[k].copy(); w.flat[3] = float("nan"); t[k] = w
save_file(t, sys.argv[1], metadata=meta)
PY
expect_fail "a NaN weight" "the weights of qkv's tensor '.*' hold nan" "$QKV" import nllb "$T/nan" --out "$T/o6"
check "... and nothing is written by any of them" bash -c "! ls -d '$T'/o3 '$T'/o4 '$T'/o5 '$T'/o6 2>/dev/null"
variant self
expect_fail "--out the input itself is refused" "is the input" \
  "$QKV" import nllb "$T/self" --out "$T/self" --overwrite
check "... and the input is whole" cmp -s "$T/self/model.safetensors" "$P/m2m100_nllb_tied/model.safetensors"

# ---- served: /languages lists the model's languages, and each request's source and target
# choose the language tokens (set when its sentences join the batch), as qkv translate
# --source-lang/--target-lang gives them, two targets at once
read -r SRC TGT < <(langs nllb_tied)
"$QKV" serve --port 0 --threads 2 --model nllb="$T/nllb_tied" >"$T/serve.out" 2>"$T/serve.err" &
SPID=$!
URL=
for _ in $(seq 600); do URL=$(sed -n 's|.* on \(http://[^ ]*\)$|\1|p' "$T/serve.out"); [ -n "$URL" ] && break; sleep 0.05; done
if [ -n "$URL" ]; then
  curl -s "$URL/languages" >"$T/languages.json"
  OTHER=$(/usr/bin/python3 -c "
import json, sys
d = json.load(open(sys.argv[1])); src = [l for l in d if l['code'] == sys.argv[2]]
ok = src and sys.argv[3] in src[0]['targets'] and len(src[0]['targets']) > 100
print(next(t for t in src[0]['targets'] if t != sys.argv[3]) if ok else '')" "$T/languages.json" "$SRC" "$TGT")
  check "served: /languages lists $SRC with the model's targets ($TGT, $OTHER, ...)" test -n "$OTHER"
  head -n 3 "$P/m2m100_nllb_tied.src" >"$T/three.src"
  for t in "$TGT" "$OTHER"; do
    "$QKV" translate --model "$T/nllb_tied" --source-lang "$SRC" --target-lang "$t" <"$T/three.src" >"$T/want.$t" 2>/dev/null
    /usr/bin/python3 -c "
import json, sys
print(json.dumps({'q': open(sys.argv[1]).read().splitlines(), 'source': sys.argv[2], 'target': sys.argv[3]}))" \
      "$T/three.src" "$SRC" "$t" >"$T/req.$t"
    ( curl -s -X POST "$URL/translate" -H 'Content-Type: application/json' --data-binary "@$T/req.$t" |
        /usr/bin/python3 -c "import json,sys; print('\n'.join(json.load(sys.stdin)['translatedText']))" >"$T/got.$t" ) &
  done
  wait $(jobs -p | grep -vx "$SPID")
  check "served: two targets at once, each as qkv translate --target-lang gives it" \
    bash -c "[ -n '$OTHER' ] && [ -s '$T/want.$OTHER' ] && cmp -s '$T/got.$TGT' '$T/want.$TGT' && cmp -s '$T/got.$OTHER' '$T/want.$OTHER' && ! cmp -s '$T/want.$TGT' '$T/want.$OTHER'"
  code=$(curl -s -o "$T/body" -w '%{http_code}' -X POST "$URL/translate" --data-binary '{"q": "a", "source": "'"$SRC"'", "target": "xx_Xxxx"}')
  check "served: a target the model lacks: 400 naming the pairs" bash -c "[ $code = 400 ] && grep -q 'no model translates' '$T/body'"
else
  bad "served: the server did not start: $(head -c 300 "$T/serve.err")"
fi
kill -TERM "$SPID" 2>/dev/null; wait "$SPID" 2>/dev/null

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
