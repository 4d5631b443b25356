#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# PyTorch interop through the command line: a model of PyTorch's tutorial "Language Translation
# with nn.Transformer", converted by tools/torch2qkv.py, translates with `qkv translate` exactly
# as the tutorial's translate() does; and the converter refuses bad input with a clear message.
# Usage: test_torch2qkv.sh QKV_BINARY. Reads $QKV_PARITY_DIR/t2q (default build/parity/t2q),
# written by tests/parity/make_torch2qkv_reference.py: qkv_model/ and translations.tsv, one
# sentence a line: source<TAB>max_len<TAB>ended with <eos> (1/0)<TAB>the tutorial's translation.
# QKV_E2E_QUICK=1 (the sanitizer run) skips the converter checks, which do not run qkv.
set -u
QKV=$(realpath "$1")
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
REF=${QKV_PARITY_DIR:-build/parity}/t2q
M=$REF/qkv_model
PY=${QKV_PY:-/usr/bin/python3}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
pass=0; fail=0
ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; }

if [ ! -r "$REF/translations.tsv" ] || [ ! -r "$M/config.json" ]; then
  bad "references missing in $REF (run tests/parity/make_reference.py)"
  echo "$pass passed, $fail failed"; exit 1
fi
check_file() { # NAME GOT WANT
  if cmp -s "$2" "$3"; then ok "$1"; else bad "$1: $(diff "$2" "$3" | head -n 6 | tr '\n' ' ')"; fi
}
cut -f1 "$REF/translations.tsv" >"$T/src.txt"
cut -f4 "$REF/translations.tsv" >"$T/want.txt"
n=$(wc -l <"$T/src.txt")

# ---- each sentence alone, capped as the tutorial caps it (max_len = num_tokens + 5 in
# greedy_decode: at most source tokens with <bos> and <eos>, + 4)
k=0
while IFS=$'\t' read -r src max eos want; do
  k=$((k + 1))
  got=$(printf '%s\n' "$src" | "$QKV" translate --model "$M" --max-len "$max" 2>"$T/err")
  if [ "$got" = "$want" ]; then
    ok "sentence $k alone (--max-len $max, $([ "$eos" = 1 ] && echo '<eos>' || echo capped)): $want"
  else
    bad "sentence $k '$src': qkv '$got', PyTorch '$want' $(head -c 200 "$T/err")"
  fi
done <"$REF/translations.tsv"

# ---- all sentences in one batch under the default cap (100): a sentence that ended with <eos>
# is the same, a capped one starts with the tutorial's words
"$QKV" translate --model "$M" <"$T/src.txt" >"$T/got.txt" 2>"$T/err"
if [ "$(wc -l <"$T/got.txt")" -ne "$n" ]; then
  bad "batch: $(wc -l <"$T/got.txt") lines for $n sentences: $(head -c 200 "$T/err")"
else
  same=0; k=0
  while IFS=$'\t' read -r eos want <&3 && IFS= read -r got <&4; do
    k=$((k + 1))
    if [ "$eos" = 1 ]; then [ "$got" = "$want" ] && same=$((same + 1))
    else case "$got" in "$want" | "$want "*) same=$((same + 1)) ;; esac
    fi
  done 3< <(cut -f3,4 "$REF/translations.tsv") 4<"$T/got.txt"
  if [ "$same" -eq "$n" ]; then ok "all $n sentences in one batch"
  else bad "batch: $((n - same)) of $n sentences differ from the tutorial"; fi
fi
"$QKV" translate --model "$M" --input "$T/src.txt" --batch 1 >"$T/got1.txt"
check_file "--input and --batch 1 give the same" "$T/got1.txt" "$T/got.txt"

# ---- text.json is what makes it the tutorial's pipeline: without it qkv preprocesses as d2l
# (lower case, split punctuation) and starts the source without <bos>, and the translations
# change
mkdir "$T/no_text_json"
cp "$M"/config.json "$M"/model.safetensors "$M"/src_vocab.txt "$M"/tgt_vocab.txt "$T/no_text_json/"
"$QKV" translate --model "$T/no_text_json" <"$T/src.txt" >"$T/d2l.txt"
if cmp -s "$T/d2l.txt" "$T/got.txt"; then bad "translations do not depend on text.json"
else ok "without text.json the translations differ (the checks above can fail)"; fi
printf '{"tokenizer": "whitespace", "source_bos": false}\n' >"$T/no_text_json/text.json"
"$QKV" translate --model "$T/no_text_json" <"$T/src.txt" >"$T/nobos.txt"
if cmp -s "$T/nobos.txt" "$T/got.txt"; then bad "translations do not depend on source_bos"
else ok "without <bos> on the source the translations differ"; fi

# ---- the converter: bad input is refused clearly; equivalent input gives the same files
if [ -z "${QKV_E2E_QUICK:-}" ]; then
  mkdir "$T/conv"
  "$PY" "$ROOT/tests/e2e/torch2qkv_errors.py" "$REF" "$T/conv" >"$T/conv.log" 2>&1
  rc=$?
  cat "$T/conv.log"
  pass=$((pass + $(grep -c '^ok ' "$T/conv.log")))
  fail=$((fail + $(grep -c '^FAIL ' "$T/conv.log")))
  if [ $rc -ne 0 ] || ! grep -q '^ok ' "$T/conv.log"; then
    bad "torch2qkv_errors.py exited with $rc"
  fi
fi

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
