#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# End-to-end tests of bounded reads and output errors: every text input of every command
# (corpora, translate's input and stdin, a language model's text) refuses /dev/zero, a FIFO
# that never ends and a directory with a message naming the file and the limit, instead of
# growing until the kernel kills it, and a FIFO without a writer instead of waiting for one;
# a model's, a run's or a configuration's file (vocabularies, subword and SentencePiece
# files, config.json, train.json, model.safetensors, metrics.jsonl, --config, --spm) that is a
# FIFO or a device is refused unread; config.json dimensions past their limits fail at once; every command
# whose standard output is lost (> /dev/full) says so and exits nonzero; metrics.jsonl is
# never appended through a link. Tiny models on a generated corpus; each bad read stops at
# its limit (at most 256 MiB of zeros): seconds.
# Usage: test_bad_input.sh QKV_BINARY
set -u
QKV=$(realpath "$1")
. "$(dirname "$0")/lib.sh" # $T, ok, bad, check (expect_fail: its own, below, with a time limit)
# seconds any one command may take: a reader that never stops fails here. Generous: a FIFO
# delivers its 64 MiB (a vocabulary's limit) in 64 KiB pipe loads, one scheduling round each,
# and under ASan on a loaded 2-core machine that once took over 60 s.
LIMIT=300

# expect_fail NAME PATTERN CMD...: CMD exits nonzero (within LIMIT seconds) and stderr
# matches PATTERN
expect_fail() {
  local name=$1 pat=$2 rc; shift 2
  timeout "$LIMIT" "$@" >"$T/out" 2>"$T/err" </dev/null; rc=$?
  if [ "$rc" -eq 0 ]; then bad "$name (exit 0)"; return; fi
  if [ "$rc" -eq 124 ]; then bad "$name (still running after ${LIMIT}s)"; return; fi
  if grep -qE -- "$pat" "$T/err"; then ok "$name"; else bad "$name: stderr was: $(head -c 400 "$T/err")"; fi
}

# endless_fifo PATH: a FIFO at PATH that a writer fills with zeros for as long as it is read
# (stopped by stop_fifo, or by SIGPIPE when the reader closes it)
FIFO_PIDS=()
endless_fifo() {
  rm -f "$1" && mkfifo "$1"
  (exec cat /dev/zero >"$1") 2>/dev/null &
  FIFO_PIDS+=($!)
}
stop_fifos() {
  local p
  for p in "${FIFO_PIDS[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  FIFO_PIDS=()
}
trap 'stop_fifos; rm -rf "$T"' EXIT

# a reversal corpus, a text for the language model, and tiny models of each kind
awk 'BEGIN { srand(7); for (i = 0; i < 60; i++) { n = 3 + int(rand() * 4); s = ""; r = "";
       for (j = 0; j < n; j++) { w = substr("abcdefghij", 1 + int(rand() * 10), 1);
         s = s (j ? " " : "") w; r = w (j ? " " : "") r }
       print s "\t" r } }' >"$T/rev.tsv"
cut -f1 "$T/rev.tsv" >"$T/rev.src"
cut -f2 "$T/rev.tsv" >"$T/rev.tgt"
head -3 "$T/rev.src" >"$T/in.txt"
awk 'BEGIN { for (i = 0; i < 200; i++) print "the cat sat on the mat, line " i "." }' >"$T/text.txt"
TRAIN=(--d-model 8 --heads 2 --ffn 16 --layers 1 --batch 16 --num-steps 8 --epochs 1 --threads 1
       --quiet)
LM=(--d-model 8 --heads 2 --ffn 16 --layers 1 --context 8 --batch 4 --steps 4 --log-every 2
    --threads 1 --quiet)
"$QKV" train --data "$T/rev.tsv" "${TRAIN[@]}" --out "$T/m" >/dev/null 2>"$T/err" || bad "train a model: $(cat "$T/err")"
"$QKV" train --data "$T/rev.tsv" "${TRAIN[@]}" --tokenizer bpe --vocab-size 20 --out "$T/bpe" >/dev/null \
  2>"$T/err" || bad "train a subword model: $(cat "$T/err")"
"$QKV" train-lm --data "$T/text.txt" "${LM[@]}" --out "$T/lm" >/dev/null 2>"$T/err" || bad "train a language model: $(cat "$T/err")"
"$QKV" train --data "$T/rev.tsv" "${TRAIN[@]}" --tokenizer spm --vocab-size 16 --out "$T/spm" \
  >/dev/null 2>"$T/err" || bad "train a SentencePiece model: $(cat "$T/err")"
mkdir -p "$T/dir"
# copy_model SRC NAME: a copy of model SRC at $T/NAME, for one file to be replaced
copy_model() { rm -rf "$T/$2" && cp -r "$1" "$T/$2"; }

# ---- corpora, read line by line: a line may hold at most QKV_MAX_LINE_BYTES (4 MiB)
LINE="a line of more than 4194304 bytes \(the limit QKV_MAX_LINE_BYTES\) \(not a regular file: it may never end\)"
expect_fail "train --data /dev/zero" "/dev/zero:1: $LINE" \
  "$QKV" train --data /dev/zero "${TRAIN[@]}" --out "$T/o1"
endless_fifo "$T/fifo"
expect_fail "train --data FIFO" "$T/fifo:1: $LINE" \
  "$QKV" train --data "$T/fifo" "${TRAIN[@]}" --out "$T/o2"
stop_fifos
expect_fail "train --src /dev/zero --tgt FILE" "/dev/zero:1: $LINE" \
  "$QKV" train --src /dev/zero --tgt "$T/rev.tgt" "${TRAIN[@]}" --out "$T/o3"
endless_fifo "$T/fifo"
expect_fail "train --src FILE --tgt FIFO" "$T/fifo:1: $LINE" \
  "$QKV" train --src "$T/rev.src" --tgt "$T/fifo" "${TRAIN[@]}" --out "$T/o4"
stop_fifos
expect_fail "train --valid /dev/zero" "/dev/zero:1: $LINE" \
  "$QKV" train --data "$T/rev.tsv" --valid /dev/zero "${TRAIN[@]}" --out "$T/o5"
expect_fail "eval --data /dev/zero" "/dev/zero:1: $LINE" \
  "$QKV" eval --model "$T/m" --data /dev/zero
endless_fifo "$T/fifo"
expect_fail "eval --src FIFO --tgt FILE" "$T/fifo:1: $LINE" \
  "$QKV" eval --model "$T/m" --src "$T/fifo" --tgt "$T/rev.tgt"
stop_fifos

# ---- texts read whole: at most QKV_MAX_TEXT_BYTES (256 MiB)
TEXT="more than 268435456 bytes \(not a regular file: it may never end\)"
# translate reads a pipe or a device line by line (it streams): each line at most
# QKV_MAX_LINE_BYTES
# (/dev/zero's first byte is a NUL, which a line of text never holds: refused at once; a line
# of endless 'x' meets the line limit)
NUL="a NUL byte in the line: text holds none"
expect_fail "translate --input /dev/zero" "/dev/zero:1: $NUL" \
  "$QKV" translate --model "$T/m" --input /dev/zero
expect_fail "translate from stdin = /dev/zero" "stdin:1: $NUL" \
  bash -c "exec '$QKV' translate --model '$T/m' </dev/zero"
endless_fifo "$T/fifo"
expect_fail "translate --input FIFO" "$T/fifo:1: $NUL" \
  "$QKV" translate --model "$T/m" --input "$T/fifo"
stop_fifos
expect_fail "tokenize from stdin = /dev/zero" "stdin:1: $NUL" \
  bash -c "exec '$QKV' tokenize --d2l </dev/zero"
expect_fail "translate from stdin = an endless line" "stdin:1: $LINE" \
  bash -c "exec '$QKV' translate --model '$T/m' < <(tr '\\0' x </dev/zero)"
expect_fail "tokenize from stdin = an endless line" "stdin:1: $LINE" \
  bash -c "exec '$QKV' tokenize --d2l < <(tr '\\0' x </dev/zero)"
expect_fail "train-lm --data /dev/zero" "/dev/zero: $TEXT" \
  "$QKV" train-lm --data /dev/zero "${LM[@]}" --out "$T/o6"
expect_fail "eval-lm --data /dev/zero" "/dev/zero: $TEXT" \
  "$QKV" eval-lm --model "$T/lm" --data /dev/zero
copy_model "$T/lm" lmz && rm "$T/lmz/metrics.jsonl" && ln -s /dev/zero "$T/lmz/metrics.jsonl"
expect_fail "plot of a metrics.jsonl that is /dev/zero" "metrics.jsonl: is a character device, not a regular file" \
  "$QKV" plot "$T/lmz" --out "$T/o7.png"

# ---- a model's files are regular files: a device or a FIFO there (endless or without a
# writer) is refused before a byte is read, and never waited on
REG="is a (FIFO or pipe|character device), not a regular file"
copy_model "$T/m" mz && ln -sf /dev/zero "$T/mz/tgt_vocab.txt"
expect_fail "a target vocabulary that is /dev/zero" "tgt_vocab.txt: $REG" \
  "$QKV" translate --model "$T/mz" --input "$T/in.txt"
copy_model "$T/m" mf && endless_fifo "$T/mf/src_vocab.txt.fifo" && rm "$T/mf/src_vocab.txt" &&
  ln -s src_vocab.txt.fifo "$T/mf/src_vocab.txt"
expect_fail "a source vocabulary that is an endless FIFO" "src_vocab.txt: $REG" \
  "$QKV" eval --model "$T/mf" --data "$T/rev.tsv"
stop_fifos
copy_model "$T/bpe" bz && ln -sf /dev/zero "$T/bz/src_bpe.txt"
expect_fail "a subword file that is /dev/zero" "src_bpe.txt: $REG" \
  "$QKV" translate --model "$T/bz" --input "$T/in.txt"
copy_model "$T/m" cz && ln -sf /dev/zero "$T/cz/config.json"
expect_fail "a config.json that is /dev/zero" "config.json: $REG" \
  "$QKV" info --model "$T/cz"
copy_model "$T/lm" lv && ln -sf /dev/zero "$T/lv/vocab.txt"
expect_fail "a language model's vocabulary that is /dev/zero" "vocab.txt: $REG" \
  "$QKV" generate --model "$T/lv" --tokens 2
# a FIFO that no process writes to, as each file of a model, for each command that reads it
# (a reader that opened it blocking would wait here until the time limit)
for f in config.json model.safetensors src_vocab.txt tgt_vocab.txt train.json; do
  copy_model "$T/m" "fifo-$f" && rm -f "$T/fifo-$f/$f" && mkfifo "$T/fifo-$f/$f"
  expect_fail "translate: $f a FIFO" "$f: $REG" \
    "$QKV" translate --model "$T/fifo-$f" --input "$T/in.txt"
  expect_fail "info: $f a FIFO" "$f: $REG" "$QKV" info --model "$T/fifo-$f"
  expect_fail "average: $f a FIFO" "$f: $REG" \
    "$QKV" average --out "$T/avg-$f" "$T/fifo-$f" "$T/m"
  check "... said once (not also as a vocabulary that differs)" \
    bash -c "! grep -q 'only models with the same vocabularies' '$T/err'"
done
for f in src_vocab.txt tgt_vocab.txt; do
  expect_fail "average: the second model's $f a FIFO" "$f: $REG" \
    "$QKV" average --out "$T/avg2-$f" "$T/m" "$T/fifo-$f"
  check "... said once" bash -c "! grep -q 'only models with the same vocabularies' '$T/err'"
done
copy_model "$T/spm" fifo-spm && rm "$T/fifo-spm/source.spm" && mkfifo "$T/fifo-spm/source.spm"
expect_fail "translate: source.spm a FIFO" "source.spm: $REG" \
  "$QKV" translate --model "$T/fifo-spm" --input "$T/in.txt"
copy_model "$T/spm" zero-spm && ln -sf /dev/zero "$T/zero-spm/target.spm"
expect_fail "translate: target.spm /dev/zero" "target.spm: $REG" \
  "$QKV" translate --model "$T/zero-spm" --input "$T/in.txt"
mkfifo "$T/model.fifo"
expect_fail "tokenize --spm FIFO" "model.fifo: $REG" "$QKV" tokenize --spm "$T/model.fifo"
expect_fail "tokenize --spm /dev/zero" "/dev/zero: $REG" "$QKV" tokenize --spm /dev/zero
mkfifo "$T/config.fifo"
expect_fail "--config FIFO" "config.fifo: $REG" \
  "$QKV" train --config "$T/config.fifo" --data "$T/rev.tsv" "${TRAIN[@]}" --out "$T/o-cfg"
expect_fail "--config /dev/zero" "/dev/zero: $REG" \
  "$QKV" translate --config /dev/zero --model "$T/m" --input "$T/in.txt"
copy_model "$T/m" fifo-ckpt && rm "$T/fifo-ckpt/checkpoint.safetensors" &&
  mkfifo "$T/fifo-ckpt/checkpoint.safetensors"
expect_fail "--resume with a FIFO as the checkpoint names it" \
  "checkpoint.safetensors:? is (a FIFO or pipe, )?not a regular file" \
  "$QKV" train --out "$T/fifo-ckpt" --resume
# a text may come through a pipe, but a FIFO that no process writes to is refused, not waited on
mkfifo "$T/text.fifo"
NOWRITER="text.fifo: a FIFO or pipe that no process writes to"
expect_fail "translate --input FIFO without a writer" "$NOWRITER" \
  "$QKV" translate --model "$T/m" --input "$T/text.fifo"
expect_fail "train --data FIFO without a writer" "$NOWRITER" \
  "$QKV" train --data "$T/text.fifo" "${TRAIN[@]}" --out "$T/o-nw"
expect_fail "eval --hyp FIFO without a writer" "$NOWRITER" \
  "$QKV" eval --hyp "$T/text.fifo" --tgt "$T/rev.tgt"
expect_fail "train-lm --data FIFO without a writer" "$NOWRITER" \
  "$QKV" train-lm --data "$T/text.fifo" "${LM[@]}" --out "$T/o-lmnw"

# ---- a NUL byte in a line of text is refused the same way by every command (it cut the line
# short for all that read it as a string: tokenize dropped the rest, eval scored the prefix)
expect_fail "tokenize --spm: a NUL in a line" "stdin:1: $NUL" \
  bash -c "printf 'Ein Hund.\\0 Zwei\\n' | exec '$QKV' tokenize --spm '$T/spm/source.spm'"
expect_fail "tokenize --spm --ids: a NUL in a line" "stdin:2: $NUL" \
  bash -c "printf 'a\\nEin Hund.\\0 Zwei\\n' | exec '$QKV' tokenize --spm '$T/spm/source.spm' --ids"
expect_fail "tokenize --d2l: a NUL in a line" "stdin:1: $NUL" \
  bash -c "printf 'go\\0 away\\n' | exec '$QKV' tokenize --d2l"
expect_fail "translate: a NUL in a line" "stdin:2: $NUL" \
  bash -c "printf 'a b\\nc\\0d\\n' | exec '$QKV' translate --model '$T/m'"
head -3 "$T/rev.tgt" >"$T/ref3.txt"
{ sed -n 1p "$T/rev.tgt"; sed -n 2p "$T/rev.tgt" | tr -d '\n'; printf '\0 x\n'; sed -n 3p "$T/rev.tgt"; } >"$T/hyp-nul.txt"
expect_fail "eval --hyp: a NUL in a hypothesis" "hyp-nul.txt:2: $NUL" \
  "$QKV" eval --hyp "$T/hyp-nul.txt" --tgt "$T/ref3.txt"
expect_fail "eval --hyp: a NUL in a reference" "hyp-nul.txt:2: $NUL" \
  "$QKV" eval --hyp "$T/ref3.txt" --tgt "$T/hyp-nul.txt"

# ---- weights past float's range (finite, so every reader loads them) give logits that are
# not finite: an error naming the model, never a translation scored NaN (beam search printed
# "<unk> ... ||| -nan" with exit 0)
# overflow SRC DST: a copy of model SRC at $T/DST, every weight matrix scaled by 1e30
overflow() {
  copy_model "$1" "$2"
  /usr/bin/python3 - "$T/$2/model.safetensors" <<'PY' || bad "scale the weights of $2"
import sys
from safetensors import safe_open
from safetensors.numpy import save_file
with safe_open(sys.argv[1], "numpy") as f:
    meta = f.metadata()
    t = {k: f.get_tensor(k) for k in f.keys()}
t = {k: (v * 1e30).astype("float32") if v.ndim == 2 else v for k, v in t.items()}
save_file(t, sys.argv[1], metadata=meta)
PY
}
overflow "$T/m" big
NONFINITE="big: the model's logits are not finite"
expect_fail "translate: logits past float's range name the model" "$NONFINITE" \
  "$QKV" translate --model "$T/big" --input "$T/in.txt"
expect_fail "translate --beam 2 --n-best 2: the same" "$NONFINITE" \
  "$QKV" translate --model "$T/big" --input "$T/in.txt" --beam 2 --n-best 2
expect_fail "translate a pipe: the same" "$NONFINITE" \
  bash -c "exec '$QKV' translate --model '$T/big' <'$T/in.txt'"
expect_fail "eval: the same" "$NONFINITE" "$QKV" eval --model "$T/big" --data "$T/rev.tsv"
overflow "$T/lm" lmbig
expect_fail "generate: the same" "lmbig: the model's logits are not finite" \
  "$QKV" generate --model "$T/lmbig" --tokens 3
expect_fail "eval-lm: its loss, naming the model" "lmbig: the loss is not finite .*overflow" \
  "$QKV" eval-lm --model "$T/lmbig" --data "$T/text.txt" --all

# ---- a directory where a file is expected
DIR="is a directory"
expect_fail "train --data DIR" "$T/dir: $DIR" "$QKV" train --data "$T/dir" "${TRAIN[@]}" --out "$T/o8"
expect_fail "train --src DIR --tgt FILE" "$T/dir: $DIR" \
  "$QKV" train --src "$T/dir" --tgt "$T/rev.tgt" "${TRAIN[@]}" --out "$T/o9"
expect_fail "eval --data DIR" "$T/dir: $DIR" "$QKV" eval --model "$T/m" --data "$T/dir"
expect_fail "translate --input DIR" "$T/dir: $DIR" "$QKV" translate --model "$T/m" --input "$T/dir"
expect_fail "train-lm --data DIR" "$T/dir: $DIR" "$QKV" train-lm --data "$T/dir" "${LM[@]}" --out "$T/o10"
expect_fail "eval-lm --data DIR" "$T/dir: $DIR" "$QKV" eval-lm --model "$T/lm" --data "$T/dir"
copy_model "$T/m" md && rm "$T/md/tgt_vocab.txt" && mkdir "$T/md/tgt_vocab.txt"
expect_fail "a vocabulary that is a directory" "tgt_vocab.txt: $DIR" \
  "$QKV" translate --model "$T/md" --input "$T/in.txt"

# ---- dimensions in config.json past their limits fail at once, before any allocation
copy_model "$T/m" huge
sed -i 's/"src_vocab":[^,]*/"src_vocab":\t10000000/' "$T/huge/config.json"
expect_fail "huge src_vocab in config.json fails fast" "config.json: src_vocab = 10000000 is over the limit QKV_MAX_VOCAB" \
  "$QKV" translate --model "$T/huge" --input "$T/in.txt"
copy_model "$T/m" long
sed -i 's/"max_len":[^,]*/"max_len":\t2000000000/' "$T/long/config.json"
expect_fail "huge max_len in config.json fails fast" "config.json: max_len = 2000000000 is over the limit QKV_MAX_LEN" \
  "$QKV" info --model "$T/long"
copy_model "$T/lm" lmhuge
sed -i 's/"vocab":[^,]*/"vocab":\t10000000/' "$T/lmhuge/config.json"
expect_fail "huge vocab in a language model's config.json fails fast" "vocab = 10000000 is over the limit QKV_MAX_VOCAB" \
  "$QKV" generate --model "$T/lmhuge" --tokens 2

# ---- output errors are errors: every command writing to a full device says so, exit 1
# full_stdout NAME CMD...: CMD prints something (so that the check means something), and
# with its standard output on /dev/full exits nonzero saying so
FULL="cannot write the (output|translations|text)[^:]*: No space left on device"
full_stdout() {
  local name=$1; shift
  if ! timeout "$LIMIT" "$@" >"$T/out" 2>/dev/null </dev/null || [ ! -s "$T/out" ]; then
    bad "$name: prints nothing (or fails) with a working stdout"; return
  fi
  expect_fail "$name > /dev/full" "$FULL" bash -c 'exec "$@" >/dev/full' full "$@"
}
full_stdout "--version" "$QKV" --version
full_stdout "--help" "$QKV" --help
full_stdout "info" "$QKV" info
full_stdout "info --model" "$QKV" info --model "$T/m"
full_stdout "translate" "$QKV" translate --model "$T/m" --input "$T/in.txt"
awk '{ for (i = 0; i < 100; i++) print }' "$T/rev.src" >"$T/many.txt" # more than a buffer
full_stdout "translate (6000 lines)" "$QKV" translate --model "$T/m" --input "$T/many.txt"
full_stdout "translate --n-best" "$QKV" translate --model "$T/m" --input "$T/in.txt" --beam 2 --n-best 2
full_stdout "eval" "$QKV" eval --model "$T/m" --data "$T/rev.tsv" --show 2
full_stdout "plot" "$QKV" plot "$T/m" --out "$T/plot.png"
full_stdout "generate" "$QKV" generate --model "$T/lm" --tokens 3
full_stdout "eval-lm" "$QKV" eval-lm --model "$T/lm" --data "$T/text.txt"
full_stdout "bench" "$QKV" bench sgemm --m 8 --n 8 --k 8 --steps 1 --warmup 0 --threads 1
expect_fail "train-lm > /dev/full" "$FULL" \
  bash -c "exec '$QKV' train-lm --data '$T/text.txt' ${LM[*]} --out '$T/full-lm' >/dev/full"
expect_fail "demo > /dev/full" "$FULL" \
  bash -c "exec '$QKV' demo --train 100 --epochs 1 --threads 1 --out '$T/full-demo' >/dev/full"
# stderr lost: nowhere to say so, but the status tells (train reports progress on stderr)
"$QKV" train --data "$T/rev.tsv" "${TRAIN[@]/--quiet/}" --out "$T/full-train" >/dev/null 2>/dev/full
check "train with its stderr on /dev/full exits nonzero" test $? -ne 0

# ---- a file qkv writes is replaced atomically, so a device or FIFO in its place is refused
# (never test this on /dev: run as root, a rename over /dev/full replaces the device)
rm -f "$T/out.fifo" && mkfifo "$T/out.fifo"
expect_fail "plot --out a FIFO is refused" "out.fifo: is a device, FIFO or socket" \
  "$QKV" plot "$T/m" --out "$T/out.fifo"
check "... and the FIFO is left as it is" test -p "$T/out.fifo"

# ---- metrics.jsonl is appended, never through a link
copy_model "$T/lm" lmlink
echo "not a log" >"$T/outside.txt"
rm "$T/lmlink/metrics.jsonl" && ln -s "$T/outside.txt" "$T/lmlink/metrics.jsonl"
expect_fail "train-lm --resume with metrics.jsonl a link to another file is refused" "metrics.jsonl" \
  "$QKV" train-lm --data "$T/text.txt" "${LM[@]}" --steps 6 --resume --out "$T/lmlink"
check "... and the file it points at is untouched" test "$(cat "$T/outside.txt")" = "not a log"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
