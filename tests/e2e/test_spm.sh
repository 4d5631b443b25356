#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# End-to-end tests of SentencePiece: `qkv tokenize` (libsentencepiece through qkv's shim)
# against pip's sentencepiece, the reference implementation, on every line of Multi30k (all
# six files) and of both columns of fra.txt, with a unigram and a BPE model trained by the
# reference library at test time: pieces and ids identical line for line, and decoding (of
# every tenth line) gives the reference's text back. Then the command's options and errors.
# Usage: test_spm.sh QKV_BINARY. QKV_E2E_QUICK=1 (the sanitizer run) checks a sample of lines.
set -u
QKV=$(realpath "$1")
PY=${QKV_PY:-/usr/bin/python3}
DATA=${QKV_DATA_DIR:-../shared/data}
FRA=$DATA/fra-eng/fra.txt
M30=$DATA/multi30k
. "$(dirname "$0")/lib.sh" # $T, ok, bad, check, expect_fail
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

# ---- d2l's preprocessing (the word-level models' text) lower-cases as Python's str.lower:
# every line of the corpora, and every character of U+0020..U+1FFF (Latin, Greek, Cyrillic...)
# with Σ in every context
"$PY" - "$T" <<'PY' || bad "the reference preprocessing"
import sys
T = sys.argv[1]
def preprocess_nmt(text):  # d2l's, one line at a time
    text = text.replace("\u202f", " ").replace("\xa0", " ").lower()
    return "".join(" " + c if i > 0 and c in ",.!?" and text[i - 1] != " " else c
                   for i, c in enumerate(text))
chars = [chr(c) for c in range(0x20, 0x2000) if chr(c).isprintable()]
lines = ["".join(chars[i:i + 64]) for i in range(0, len(chars), 64)]
lines += ["ΟΔΟΣ ΚΑΙ ΣΟΦΙΑ.", "ΑΣ'Σ Σ:Σ ΑΣΑ Σ", "ΣΑΣ, ΣΑΣ! ΑΣ\u0301 ΑΣ\u0301Α", "İSTANBUL DİL"]
corpus = open(f"{T}/all.txt", encoding="utf-8").read().split("\n")[:-1]
with open(f"{T}/chars.txt", "w", encoding="utf-8") as f:
    f.writelines(l + "\n" for l in lines + corpus)
with open(f"{T}/chars.want", "w", encoding="utf-8") as f:
    f.writelines(preprocess_nmt(l) + "\n" for l in lines + corpus)
PY
"$QKV" tokenize --d2l <"$T/chars.txt" >"$T/chars.out" 2>"$T/err"
check "d2l preprocessing is Python's str.lower (Greek, Latin, Cyrillic; all corpus lines)" \
  cmp -s "$T/chars.out" "$T/chars.want"
if ! cmp -s "$T/chars.out" "$T/chars.want"; then diff "$T/chars.out" "$T/chars.want" | head -4; fi

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

# ---- qkv train --tokenizer spm: models learned by libsentencepiece's trainer, stored beside
# the model; translate reads raw text and writes detokenised text
N=1500; [ -n "${QKV_E2E_QUICK:-}" ] && N=300
SMALL=(--d-model 32 --heads 2 --ffn 64 --layers 1 --num-steps 24 --epochs 1 --batch 64
       --threads 1 --quiet)
"$QKV" train --src "$M30/train.de" --tgt "$M30/train.en" --num-examples $N --tokenizer spm \
  --vocab-size 400 "${SMALL[@]}" --out "$T/m" 2>"$T/err"
check "train --tokenizer spm" test -s "$T/m/model.safetensors"
check "the SentencePiece models are stored in the model directory" \
  test -s "$T/m/source.spm" -a -s "$T/m/target.spm"
check "text.json records them" grep -q '"tokenizer": "spm", "source_spm": "source.spm", "target_spm": "target.spm"' "$T/m/text.json"
check "train.json records the tokenizer" grep -qE '"spm_type":[[:space:]]*"unigram"' "$T/m/train.json"
# the vocabulary is the model's pieces, id for id
"$PY" - "$T/m" <<'PY' && ok "the vocabularies are the SentencePiece models' pieces, id for id" || bad "vocabularies vs pieces"
import sys, sentencepiece as spm
d = sys.argv[1]
for side, model in (("src", "source"), ("tgt", "target")):
    sp = spm.SentencePieceProcessor(model_file=f"{d}/{model}.spm")
    vocab = open(f"{d}/{side}_vocab.txt", encoding="utf-8").read().split("\n")[:-1]
    assert vocab == [sp.id_to_piece(i) for i in range(sp.get_piece_size())], side
    assert vocab[:4] == ["<unk>", "<pad>", "<bos>", "<eos>"]
    assert sp.get_piece_size() == 400
PY
# the training text is raw: capitals and punctuation are pieces of the source model
"$QKV" tokenize --spm "$T/m/source.spm" <<<"Ein Mann." >"$T/p"
check "the source model keeps case (pieces of 'Ein Mann.')" grep -q "▁E.*\." "$T/p"
printf 'Ein Mann fährt Fahrrad.\nZwei Hunde spielen im Schnee.\n' >"$T/de"
"$QKV" translate --model "$T/m" --input "$T/de" --max-len 8 >"$T/en" 2>"$T/err"
check "translate with a SentencePiece model: one line per line" test "$(wc -l <"$T/en")" -eq 2
check "its output is detokenised text (no ▁)" test "$(grep -c "▁" "$T/en")" -eq 0
# translate streams: through a fifo, the first translation arrives before the input ends
rm -f "$T/in"; mkfifo "$T/in"
"$QKV" translate --model "$T/m" --max-len 6 <"$T/in" >"$T/stream" 2>"$T/err" &
pid=$!
exec 3>"$T/in"
echo "Ein Mann fährt Fahrrad." >&3
for _ in $(seq 100); do [ -s "$T/stream" ] && break; sleep 0.1; done
check "translate streams (the first line is out before stdin closes)" test "$(wc -l <"$T/stream")" -eq 1
echo "Zwei Hunde." >&3
exec 3>&-
wait $pid
check "translate streams: one line out per line in" test "$(wc -l <"$T/stream")" -eq 2
"$QKV" translate --model "$T/m" --max-len 6 --input "$T/de" >"$T/batch" 2>/dev/null
printf 'Ein Mann fährt Fahrrad.\nZwei Hunde.\n' | "$QKV" translate --model "$T/m" --max-len 6 >"$T/piped"
check "a pipe and a file give the same translations" cmp -s <(head -1 "$T/batch") <(head -1 "$T/piped")
# a line that is mostly <unk> is translated, with a warning naming it
printf 'Ein Mann.\n☃☃☃ ☂☂ ☄\nEin Hund.\n' | "$QKV" translate --model "$T/m" --max-len 4 >"$T/out" 2>"$T/err"
check "a line mostly <unk>: a warning naming its line" grep -q "stdin:2: .* unknown to the model" "$T/err"
check "... and only that line" test "$(grep -c "unknown to the model" "$T/err")" -eq 1
check "... still translated, one line per line" test "$(wc -l <"$T/out")" -eq 3

# BPE type, one model for both languages, shared embeddings
"$QKV" train --src "$M30/train.de" --tgt "$M30/train.en" --num-examples $N --tokenizer spm \
  --spm-type bpe --joint-bpe --tie all --vocab-size 400 "${SMALL[@]}" --out "$T/j" 2>"$T/err"
check "train --spm-type bpe --joint-bpe --tie all" cmp -s "$T/j/source.spm" "$T/j/target.spm"
check "train.json records the BPE type" grep -qE '"spm_type":[[:space:]]*"bpe"' "$T/j/train.json"
"$QKV" translate --model "$T/j" --input "$T/de" --max-len 8 >"$T/en" 2>"$T/err"
check "translate with a joint BPE SentencePiece model" test "$(wc -l <"$T/en")" -eq 2
"$QKV" eval --model "$T/j" --src "$M30/val.de" --tgt "$M30/val.en" --num-examples 20 --max-len 8 \
  >"$T/eval" 2>"$T/err"
check "eval of a SentencePiece model" grep -q "^BLEU|nrefs:1|case:mixed" "$T/eval"
# resume: the stored SentencePiece models are read back, bit for bit the same training
"$QKV" train --src "$M30/train.de" --tgt "$M30/train.en" --num-examples $N --tokenizer spm \
  --spm-type bpe --joint-bpe --tie all --vocab-size 400 "${SMALL[@]}" --out "$T/r" \
  --stop-after-steps 2 2>"$T/err"
"$QKV" train --out "$T/r" --resume --threads 1 --quiet 2>"$T/err"
check "spm: stop + resume == uninterrupted (bit for bit)" cmp -s "$T/j/model.safetensors" "$T/r/model.safetensors"
expect_fail "spm: resume with another --spm-type is refused" "spm-type unigram differs" \
  "$QKV" train --out "$T/r" --resume --spm-type unigram
expect_fail "--spm-type other than unigram|bpe" "spm-type" "$QKV" train --src "$M30/train.de" \
  --tgt "$M30/train.en" --tokenizer spm --spm-type char --out "$T/x"
expect_fail "a vocabulary the text cannot fill" "source.spm: SentencePiece training failed.*ocabulary size" \
  "$QKV" train --src "$M30/train.de" --tgt "$M30/train.en" --num-examples 20 --tokenizer spm \
  --vocab-size 5000 "${SMALL[@]}" --out "$T/x"
# texts on which libsentencepiece's trainer ends its own process (normalisation leaves no
# character): qkv says so and exits 1 (it was sentencepiece's exit 255 from inside qkv)
"$PY" -c "import sys; d = sys.argv[1]
open(d + '/ws.txt', 'w').write('\u3000\n' * 50)
open(d + '/ctl.txt', 'w').write('\x01\x02\x03\n' * 50)
open(d + '/zw.txt', 'w').write('\u200b\u200c\n' * 50)" "$T"
for f in ws ctl zw; do
  "$QKV" train --src "$T/$f.txt" --tgt "$T/$f.txt" --tokenizer spm --vocab-size 60 \
    "${SMALL[@]}" --out "$T/doomed-$f" >/dev/null 2>"$T/err"
  rc=$?
  check "a $f text the trainer cannot take: exit 1 (got $rc)" test "$rc" -eq 1
  check "... qkv's message naming source.spm and the trainer's reason" \
    grep -q "source.spm: SentencePiece's trainer stopped on this text .*required_chars" "$T/err"
  check "... and no model" test ! -e "$T/doomed-$f/model.safetensors"
done
cp -r "$T/m" "$T/broken" && rm "$T/broken/target.spm"
expect_fail "a SentencePiece model directory without target.spm" "target.spm: cannot open" \
  "$QKV" translate --model "$T/broken" --input "$T/de"
printf '{"tokenizer": "spm", "source_spm": "../../etc/passwd"}\n' >"$T/broken/text.json"
expect_fail "text.json naming a path out of the directory" "source_spm.*file name" \
  "$QKV" translate --model "$T/broken" --input "$T/de"

# ---- qkv's own byte-pair models keep case too (text.json "case": "keep"); an older
# directory without it reads d2l's lower-cased words as before
"$QKV" train --data "$FRA" --num-examples 400 --tokenizer bpe --vocab-size 200 "${SMALL[@]}" \
  --out "$T/b" 2>"$T/err"
check "a new byte-pair model records \"case\": \"keep\"" grep -q '"case": "keep"' "$T/b/text.json"
check "... and learns from cased text (capitals in its alphabet)" grep -q '^[A-Z]$' "$T/b/src_bpe.txt"
echo "Go away!" | "$QKV" translate --model "$T/b" --max-len 4 >"$T/out" 2>"$T/err"
check "... and translates raw text" test "$(wc -l <"$T/out")" -eq 1
cp -r "$T/b" "$T/old" && printf '{"tokenizer": "bpe", "joint": false}\n' >"$T/old/text.json"
echo "Go away!" | "$QKV" translate --model "$T/old" --max-len 4 >"$T/out" 2>"$T/err"
check "an older byte-pair directory (no \"case\") still translates" test "$(wc -l <"$T/out")" -eq 1

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
