#!/usr/bin/env bash
# End-to-end tests of SentencePiece: `qkv tokenize` (libsentencepiece through qkv's shim)
# against pip's sentencepiece, the reference implementation, on every line of Multi30k (all
# six files) and of both columns of fra.txt, with a unigram and a BPE model trained by the
# reference library at test time: pieces and ids identical line for line, and decoding (of
# every tenth line) gives the reference's text back. Then the command's options and errors.
# Usage: test_spm.sh QKV_BINARY. QKV_E2E_QUICK=1 (the sanitizer run) checks a sample of lines.
set -u
QKV=$(realpath "$1")
PY=${PY:-/usr/bin/python3}
DATA=${QKV_DATA_DIR:-../shared/data}
FRA=$DATA/fra-eng/fra.txt
M30=$DATA/multi30k
. "$(dirname "$0")/lib.sh" # $T, ok, bad, check
expect_fail() {
  local name=$1 pat=$2; shift 2
  if "$@" >"$T/out" 2>"$T/err"; then bad "$name (exit 0)"; return; fi
  if grep -qE -- "$pat" "$T/err"; then ok "$name"; else bad "$name: stderr was: $(head -c 300 "$T/err")"; fi
}
if [ ! -r "$FRA" ] || [ ! -r "$M30/train.de" ] || ! "$PY" -c 'import sentencepiece' 2>/dev/null; then
  echo "skip: $FRA, $M30 or pip's sentencepiece not found"; echo "$pass passed, $fail failed"; exit 0
fi

# ---- the lines: every line of every file (a sample of each in the quick run)
for f in train.de train.en val.de val.en test_2016_flickr.de test_2016_flickr.en; do
  cat "$M30/$f"
done >"$T/m30.txt"
cut -f1 "$FRA" >"$T/fra.txt"
cut -f2 "$FRA" >>"$T/fra.txt"
if [ -n "${QKV_E2E_QUICK:-}" ]; then
  awk 'NR % 40 == 1' "$T/m30.txt" >"$T/x" && mv "$T/x" "$T/m30.txt"
  awk 'NR % 200 == 1' "$T/fra.txt" >"$T/x" && mv "$T/x" "$T/fra.txt"
fi
cat "$T/m30.txt" "$T/fra.txt" >"$T/all.txt"
awk 'NR % 10 == 1' "$T/all.txt" >"$T/some.txt" # decoding is checked on every tenth line
echo "lines: $(wc -l <"$T/all.txt")"

# ---- models from the reference trainer, and its pieces, ids and decodings of every line
"$PY" - "$T" <<'PY' || bad "the reference library trains and encodes"
import sys, sentencepiece as spm
T = sys.argv[1]
common = dict(vocab_size=2000, minloglevel=2, input_sentence_size=20000, shuffle_input_sentence=False)
spm.SentencePieceTrainer.train(input=f"{T}/m30.txt", model_prefix=f"{T}/unigram",
                               model_type="unigram", **common)
spm.SentencePieceTrainer.train(input=f"{T}/fra.txt", model_prefix=f"{T}/bpe",
                               model_type="bpe", **common)
def read(name):
    return open(f"{T}/{name}", encoding="utf-8", newline="").read().split("\n")[:-1]
lines, some = read("all.txt"), read("some.txt")
for kind in ("unigram", "bpe"):
    sp = spm.SentencePieceProcessor(model_file=f"{T}/{kind}.model")
    for name, out in (("pieces", str), ("ids", int)):
        with open(f"{T}/{kind}.{name}.want", "w", encoding="utf-8") as f:
            f.writelines(" ".join(map(str, p)) + "\n" for p in sp.encode(lines, out_type=out))
    pieces, ids = sp.encode(some, out_type=str), sp.encode(some)
    with open(f"{T}/{kind}.text.want", "w", encoding="utf-8") as f:
        f.writelines(sp.decode(i) + "\n" for i in ids)
    # pieces decode by their strings: an unknown piece is its own text, not " ⁇ "
    with open(f"{T}/{kind}.text2.want", "w", encoding="utf-8") as f:
        f.writelines(sp.decode(p) + "\n" for p in pieces)
PY

for kind in unigram bpe; do
  M=$T/$kind.model
  "$QKV" tokenize --spm "$M" <"$T/all.txt" >"$T/$kind.pieces" 2>"$T/err"
  check "$kind: pieces of every line are the reference's" cmp -s "$T/$kind.pieces" "$T/$kind.pieces.want"
  "$QKV" tokenize --spm "$M" --ids <"$T/all.txt" >"$T/$kind.ids" 2>"$T/err"
  check "$kind: ids of every line are the reference's" cmp -s "$T/$kind.ids" "$T/$kind.ids.want"
  awk 'NR % 10 == 1' "$T/$kind.ids" >"$T/$kind.some.ids"
  awk 'NR % 10 == 1' "$T/$kind.pieces" >"$T/$kind.some.pieces"
  "$QKV" tokenize --spm "$M" --ids --decode <"$T/$kind.some.ids" >"$T/$kind.text" 2>"$T/err"
  check "$kind: ids decode to the reference's text" cmp -s "$T/$kind.text" "$T/$kind.text.want"
  "$QKV" tokenize --spm "$M" --decode <"$T/$kind.some.pieces" >"$T/$kind.text2" 2>"$T/err"
  check "$kind: pieces decode to the reference's text" cmp -s "$T/$kind.text2" "$T/$kind.text2.want"
  # the first differing line, to say what differs
  if ! cmp -s "$T/$kind.pieces" "$T/$kind.pieces.want"; then
    diff "$T/$kind.pieces" "$T/$kind.pieces.want" | head -4
  fi
done
# text is what people write: case and punctuation survive the round trip
check "a cased sentence comes back as it was" \
  test "$(echo 'Ein Mann fährt Fahrrad.' | "$QKV" tokenize --spm "$T/unigram.model" |
          "$QKV" tokenize --spm "$T/unigram.model" --decode)" = "Ein Mann fährt Fahrrad."

# ---- a filter: the first line comes out before the input ends
mkfifo "$T/in"
"$QKV" tokenize --spm "$T/unigram.model" <"$T/in" >"$T/stream" &
pid=$!
exec 3>"$T/in"
echo "Ein Hund." >&3
for _ in $(seq 50); do [ -s "$T/stream" ] && break; sleep 0.1; done
check "tokenize streams (output before stdin closes)" test -s "$T/stream"
exec 3>&-
wait $pid

# ---- bad input
expect_fail "needs --spm" "spm" "$QKV" tokenize
expect_fail "--pieces and --ids together" "not both" "$QKV" tokenize --spm "$T/bpe.model" --pieces --ids
expect_fail "a missing model" "nope.model: cannot open" "$QKV" tokenize --spm "$T/nope.model"
expect_fail "a text file is no model" "all.txt: not a SentencePiece model" "$QKV" tokenize --spm "$T/all.txt"
printf '5 99999\n' >"$T/bad_ids"
expect_fail "an id outside the model" "stdin:1: .*99999.* not an id" sh -c \
  "'$QKV' tokenize --spm '$T/bpe.model' --ids --decode <'$T/bad_ids'"
printf '5 x7\n' >"$T/bad_ids"
expect_fail "an id that is no number" "x7" sh -c \
  "'$QKV' tokenize --spm '$T/bpe.model' --ids --decode <'$T/bad_ids'"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
