#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# End-to-end tests of output directories (src/io/run_dir.c) and explicit resumes
# (src/training/run_record.c): a directory belongs to one run, nothing trained is written over without
# --resume or --overwrite, a second run on a locked directory is refused naming the first, no
# file is written through a link, stale temporaries are removed, an unfinished or mixed model
# directory is refused by its readers, average never writes onto its inputs nor mixes
# vocabularies, and a resumed run keeps the options that define its model and data while the
# others are applied and recorded. Tiny models on a generated corpus: a few seconds in all.
# Usage: test_run_dirs.sh QKV_BINARY
set -u
QKV=$(realpath "$1")
. "$(dirname "$0")/lib.sh" # $T, ok, bad, check, expect_fail
same() { cmp -s "$1" "$2"; }

# a reversal corpus of 80 pairs and a text for the language model
awk 'BEGIN { srand(7); for (i = 0; i < 80; i++) { n = 3 + int(rand() * 4); s = ""; r = "";
       for (j = 0; j < n; j++) { w = substr("abcdefghij", 1 + int(rand() * 10), 1);
         s = s (j ? " " : "") w; r = w (j ? " " : "") r }
       print s "\t" r } }' >"$T/rev.tsv"
awk 'BEGIN { for (i = 0; i < 300; i++) print "the cat sat on the mat, line " i "." }' >"$T/text.txt"
TRAIN=(--data "$T/rev.tsv" --d-model 8 --heads 2 --ffn 16 --layers 1 --batch 16 --num-steps 8
       --epochs 2 --threads 1 --quiet)
LM=(--data "$T/text.txt" --d-model 8 --heads 2 --ffn 16 --layers 1 --context 8 --batch 4
    --steps 12 --log-every 4 --threads 1 --quiet)
"$QKV" train "${TRAIN[@]}" --out "$T/m" 2>"$T/err" || bad "train a model: $(cat "$T/err")"
cp -r "$T/m" "$T/m.orig"

# ---- a trained model is never written over by accident
expect_fail "train onto a trained model is refused" "already holds a trained model.*--resume.*--overwrite" \
  "$QKV" train "${TRAIN[@]}" --out "$T/m"
check "... and the model and its metrics are untouched" \
  bash -c "cmp -s '$T/m/model.safetensors' '$T/m.orig/model.safetensors' && cmp -s '$T/m/metrics.jsonl' '$T/m.orig/metrics.jsonl'"
"$QKV" train "${TRAIN[@]}" --epochs 3 --out "$T/m" --overwrite 2>"$T/err"
check "--overwrite starts over: metrics.jsonl holds the new run's 3 epochs only" \
  test "$(wc -l <"$T/m/metrics.jsonl")" -eq 3
expect_fail "--resume and --overwrite together are refused" "give one" \
  "$QKV" train "${TRAIN[@]}" --out "$T/m" --resume --overwrite

# ---- a directory holding anything else
mkdir -p "$T/notes" && echo "my notes" >"$T/notes/notes.txt"
expect_fail "a directory with an unrelated file is refused, naming it" "notes.txt, which is not part of" \
  "$QKV" train "${TRAIN[@]}" --out "$T/notes"
check "... and nothing is written there" test "$(ls -A "$T/notes" | grep -v '^.qkv.lock$')" = notes.txt
"$QKV" train "${TRAIN[@]}" --out "$T/notes" --overwrite 2>/dev/null
check "--overwrite trains there and leaves the unrelated file alone" \
  bash -c "test -s '$T/notes/model.safetensors' && grep -qx 'my notes' '$T/notes/notes.txt'"
mkdir -p "$T/userconf" && echo '{"learning_rate": 3}' >"$T/userconf/config.json"
expect_fail "a user's own config.json is refused" "config.json" \
  "$QKV" train "${TRAIN[@]}" --out "$T/userconf"
check "... and left as it was" grep -q learning_rate "$T/userconf/config.json"
expect_fail "train-lm refuses an encoder-decoder run's directory" "format qkv-transformer|not part of" \
  "$QKV" train-lm "${LM[@]}" --out "$T/m"

# ---- --resume needs a readable checkpoint of the same kind
expect_fail "--resume of a directory that does not exist" "no run to continue" \
  "$QKV" train "${TRAIN[@]}" --out "$T/nowhere" --resume
check "... creates nothing" test ! -e "$T/nowhere"
cp -r "$T/m.orig" "$T/nock" && rm "$T/nock/checkpoint.safetensors"
expect_fail "--resume without a checkpoint is an error, not a fresh start" "checkpoint.safetensors" \
  "$QKV" train "${TRAIN[@]}" --out "$T/nock" --resume
check "... and the model is untouched" same "$T/nock/model.safetensors" "$T/m.orig/model.safetensors"
cp -r "$T/m.orig" "$T/badck" && head -c 100 "$T/m.orig/checkpoint.safetensors" >"$T/badck/checkpoint.safetensors"
expect_fail "--resume with a truncated checkpoint is an error naming it" "badck/checkpoint.safetensors" \
  "$QKV" train "${TRAIN[@]}" --out "$T/badck" --resume
check "... and the model is untouched" same "$T/badck/model.safetensors" "$T/m.orig/model.safetensors"

# ---- resume is explicit: model and data options are compared, the others recorded
"$QKV" train "${TRAIN[@]}" --out "$T/r" --stop-after-steps 3 2>/dev/null
cp "$T/r/checkpoint.safetensors" "$T/r.ckpt"
expect_fail "resume with another --d-model names the option and both values" \
  "--d-model 16 differs from this run's 8" "$QKV" train "${TRAIN[@]}" --out "$T/r" --resume --d-model 16
expect_fail "resume with another --seed is refused" "--seed 5 differs from this run's 0" \
  "$QKV" train "${TRAIN[@]}" --out "$T/r" --resume --seed 5
expect_fail "resume on other data is refused" "--data .*other.tsv differs" \
  "$QKV" train "${TRAIN[@]}" --out "$T/r" --resume --data "$T/other.tsv"
check "... and the checkpoint is untouched" same "$T/r/checkpoint.safetensors" "$T/r.ckpt"
"$QKV" train --out "$T/r" --resume --lr 0.001 2>"$T/err"
check "resume with another --lr says so" grep -q "resuming with --lr 0.001 (was 0.005)" "$T/err"
check "... train.json records the lr in force" grep -q '"lr":[[:space:]]*0.001,' "$T/r/train.json"
check "... and the change in its history, at the step it was made" \
  bash -c "tr -d ' \t\n' <'$T/r/train.json' | grep -q '\"history\":\[{\"resumed_at_step\":3,\"changed\":{\"lr\":{\"was\":0.005,\"now\":0.001}}}\]'"
check "... and it is applied (the last epoch's lr in metrics.jsonl)" \
  grep -q '"lr": 0.001}' <(tail -n 1 "$T/r/metrics.jsonl")
cp -r "$T/r" "$T/hostile" && sed -i 's/"lr":[^,]*,/"lr": "fast",/' "$T/hostile/train.json"
expect_fail "a recorded option of the wrong type is an error naming the file and key" \
  "hostile/train.json: \"lr\" must be a number" "$QKV" train --out "$T/hostile" --resume
sed -i 's/"lr": "fast",/"lr": 0.005,/; s/"batch":[^,]*,/"batch": 1e300,/' "$T/hostile/train.json"
expect_fail "... or out of its range" "\"batch\" must be a number in the option's range" \
  "$QKV" train --out "$T/hostile" --resume
# only --out and --resume: every other option comes from the directory (d_model 8, not 32)
"$QKV" train "${TRAIN[@]}" --out "$T/u" 2>/dev/null
"$QKV" train "${TRAIN[@]}" --out "$T/s" --stop-after-steps 4 2>/dev/null
"$QKV" train --out "$T/s" --resume 2>/dev/null
check "resume with only --out takes the recorded options (== uninterrupted, bit for bit)" \
  same "$T/s/model.safetensors" "$T/u/model.safetensors"
# a 64-bit seed beyond 2^53 is recorded digit for digit: resume and --config keep it
BIG=123456789012345678 # a double holds 123456789012345680
"$QKV" train "${TRAIN[@]}" --seed $BIG --out "$T/bigseed-u" 2>/dev/null
"$QKV" train "${TRAIN[@]}" --seed $BIG --out "$T/bigseed" --stop-after-steps 4 2>/dev/null
check "a seed above 2^53 is recorded exactly in train.json" \
  grep -qE "\"seed\":[[:space:]]*$BIG," "$T/bigseed/train.json"
"$QKV" train --out "$T/bigseed" --resume 2>/dev/null
check "... resume accepts its own run" \
  same "$T/bigseed/model.safetensors" "$T/bigseed-u/model.safetensors"
"$QKV" train "${TRAIN[@]}" --config "$T/bigseed-u/train.json" --out "$T/bigseed-c" 2>/dev/null
check "... and --config train.json trains the same model" \
  same "$T/bigseed-c/model.safetensors" "$T/bigseed-u/model.safetensors"
check "... recording the same seed" grep -qE "\"seed\":[[:space:]]*$BIG," "$T/bigseed-c/train.json"
"$QKV" train-lm "${LM[@]}" --seed 18446744073709551615 --out "$T/lmseed" >/dev/null 2>&1
check "train-lm records 2^64 - 1 exactly" \
  grep -qE "\"seed\":[[:space:]]*18446744073709551615," "$T/lmseed/train.json"
expect_fail "a train.json with text after its object is refused on resume" \
  "train.json: more after the JSON value" \
  bash -c "cp -r '$T/bigseed' '$T/trail' && echo '{}' >>'$T/trail/train.json' && '$QKV' train --out '$T/trail' --resume"

# ---- an unfinished or mixed model directory is refused by its readers
"$QKV" train "${TRAIN[@]}" --out "$T/stopped" --stop-after-steps 2 2>/dev/null
check "a run stopped before its end leaves no model.safetensors" test ! -e "$T/stopped/model.safetensors"
echo "a b c" >"$T/in.txt"
expect_fail "translate refuses an unfinished run" "holds no trained model yet.*--resume" \
  "$QKV" translate --model "$T/stopped" --input "$T/in.txt"
expect_fail "eval refuses an unfinished run" "holds no trained model yet" \
  "$QKV" eval --model "$T/stopped" --data "$T/rev.tsv"
expect_fail "info refuses an unfinished run" "holds no trained model yet" "$QKV" info --model "$T/stopped"
expect_fail "average refuses an unfinished run" "holds no trained model yet" \
  "$QKV" average --out "$T/avg0" "$T/m.orig" "$T/stopped"
"$QKV" train-lm "${LM[@]}" --out "$T/lmstop" --stop-after-steps 5 >/dev/null 2>&1
expect_fail "generate refuses an unfinished language model" "holds no trained model yet" \
  "$QKV" generate --model "$T/lmstop" --tokens 3
"$QKV" train "${TRAIN[@]}" --tokenizer bpe --vocab-size 20 --out "$T/bpe" 2>/dev/null
check "a subword model translates" bash -c "'$QKV' translate --model '$T/bpe' --input '$T/in.txt' >/dev/null"
rm "$T/bpe/text.json"
expect_fail "a subword model without its text.json is refused" "src_bpe.txt: a subword encoding, but text.json" \
  "$QKV" translate --model "$T/bpe" --input "$T/in.txt"

# ---- one run at a time
"$QKV" train "${TRAIN[@]}" --epochs 1000000 --out "$T/busy" 2>/dev/null &
holder=$!
for _ in $(seq 100); do grep -q "pid $holder:" "$T/busy/.qkv.lock" 2>/dev/null && break; sleep 0.1; done
expect_fail "a second run on a directory in use is refused, naming the holder" \
  "busy is in use by another run \(pid $holder: .*qkv train .*--epochs 1000000" \
  "$QKV" train "${TRAIN[@]}" --out "$T/busy" --overwrite
expect_fail "... also when resuming" "in use by another run \(pid $holder" \
  "$QKV" train "${TRAIN[@]}" --out "$T/busy" --resume
expect_fail "average onto a directory in use is refused" "in use by another run" \
  "$QKV" average --out "$T/busy" "$T/m.orig" --overwrite
kill -9 $holder; wait $holder 2>/dev/null
for _ in $(seq 100); do test -e "$T/busy/checkpoint.safetensors" && break; sleep 0.1; done
"$QKV" train "${TRAIN[@]}" --epochs 1000000 --out "$T/busy" --resume --epochs 2 2>"$T/err"
check "the lock dies with its holder: the killed run resumes" test -s "$T/busy/model.safetensors"

# ---- no file is written through a link; temporaries of dead runs are removed
"$QKV" train "${TRAIN[@]}" --out "$T/link" --stop-after-steps 2 2>/dev/null
echo "outside" >"$T/outside.txt"
rm -f "$T/link/metrics.jsonl" && ln -s "$T/outside.txt" "$T/link/metrics.jsonl"
expect_fail "resume with metrics.jsonl a symbolic link is refused" "metrics.jsonl is a symbolic link" \
  "$QKV" train "${TRAIN[@]}" --out "$T/link" --resume
check "... and the file it points at is untouched" grep -qx outside "$T/outside.txt"
mkdir "$T/link2" && ln -s "$T/outside.txt" "$T/link2/metrics.jsonl"
expect_fail "a new run over a linked metrics.jsonl is refused" "metrics.jsonl, which is not part of" \
  "$QKV" train "${TRAIN[@]}" --out "$T/link2"
"$QKV" train "${TRAIN[@]}" --out "$T/link2" --overwrite 2>/dev/null
check "--overwrite replaces the link, not the file it points at" \
  bash -c "test ! -L '$T/link2/metrics.jsonl' && test \$(wc -l <'$T/link2/metrics.jsonl') -eq 2"
check "the file outside is untouched" grep -qx outside "$T/outside.txt"
sh -c 'exit 0' & dead=$!; wait $dead
cp -r "$T/m.orig" "$T/tmp" && rm "$T/tmp/model.safetensors"
echo partial >"$T/tmp/checkpoint.safetensors.tmp.$dead.0"
echo partial >"$T/tmp/config.json.tmp.$$.0" # the test's own shell: alive
echo mine >"$T/tmp/notes.txt.tmp.$dead.0"   # not a name qkv writes
echo partial >"$T/tmp/model.safetensors.tmp.$dead" # an older qkv's checkpoint writer's name
echo partial >"$T/tmp/train.json.tmp.$$"           # ... of a live process
"$QKV" train "${TRAIN[@]}" --out "$T/tmp" --resume 2>"$T/err"
check "a dead run's temporary is removed (and said so)" \
  bash -c "test ! -e '$T/tmp/checkpoint.safetensors.tmp.$dead.0' && grep -q 'removed .*tmp.$dead.0' '$T/err'"
check "... also one an older qkv named FILE.tmp.PID" \
  bash -c "test ! -e '$T/tmp/model.safetensors.tmp.$dead' && grep -q 'removed .*model.safetensors.tmp.$dead,' '$T/err'"
check "... but not a live process's FILE.tmp.PID" test -e "$T/tmp/train.json.tmp.$$"
check "a live process's temporary stays" test -e "$T/tmp/config.json.tmp.$$.0"
check "a file of another name that looks like one stays" test -e "$T/tmp/notes.txt.tmp.$dead.0"
echo partial >"$T/tmp/checkpoint.safetensors.tmp.$dead"
"$QKV" train "${TRAIN[@]}" --out "$T/tmp" --overwrite 2>"$T/err"
check "--overwrite removes an older qkv's FILE.tmp.PID too" \
  test ! -e "$T/tmp/checkpoint.safetensors.tmp.$dead"
# the temporaries qkv's writers really leave when killed before their rename (a preloaded
# rename that ends the process when it would put FILE in place) are the ones a claim removes,
# on --resume and on --overwrite: the checkpoint's (its writer named them otherwise once, and
# they were never removed) and a figure's
cat >"$T/die.c" <<'C'
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
int rename(const char *from, const char *to)
{
    const char *f = getenv("DIE_RENAMING");
    if (f && strlen(to) >= strlen(f) && !strcmp(to + strlen(to) - strlen(f), f)) _exit(137);
    int (*real)(const char *, const char *) = (int (*)(const char *, const char *))dlsym(RTLD_NEXT, "rename");
    return real(from, to);
}
C
if cc -shared -fPIC -o "$T/die.so" "$T/die.c" -ldl 2>"$T/err"; then
  for f in checkpoint.safetensors training.png; do
    for mode in --resume --overwrite; do
      rm -rf "$T/killed"
      ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0 LD_PRELOAD="$T/die.so" \
        DIE_RENAMING=$f "$QKV" train "${TRAIN[@]}" --out "$T/killed" >/dev/null 2>&1
      left=$(cd "$T/killed" && ls -d $f.tmp.* 2>/dev/null)
      check "a run killed writing $f leaves $f.tmp.PID.K (${left:-nothing})" \
        bash -c "[[ '$left' =~ ^$f\.tmp\.[0-9]+\.[0-9]+\$ ]]"
      "$QKV" train "${TRAIN[@]}" --out "$T/killed" $mode >/dev/null 2>"$T/err"
      check "... which train $mode removes" \
        bash -c "test ! -e '$T/killed/$left' && grep -q 'removed .*$left' '$T/err'"
    done
  done
else
  bad "cannot build the rename shim: $(cat "$T/err")"
fi

# ---- average: never onto an input, never across vocabularies
"$QKV" train "${TRAIN[@]}" --seed 1 --out "$T/m2" 2>/dev/null
expect_fail "average --out A A B is refused (even with --overwrite)" "the input" \
  "$QKV" average --out "$T/m2" --overwrite "$T/m2" "$T/m.orig"
ln -s "$T/m2" "$T/m2link"
expect_fail "... also through another path to A" "the input" \
  "$QKV" average --out "$T/m2link/../m2" --overwrite "$T/m.orig" "$T/m2link"
expect_fail "... and onto the directory above an input" "directory above" \
  "$QKV" average --out "$T" --overwrite "$T/m2"
check "... and the input is untouched" bash -c "test -s '$T/m2/model.safetensors' && test -s '$T/m2/metrics.jsonl'"
"$QKV" average --out "$T/avg" "$T/m.orig" "$T/m2" 2>/dev/null
check "average writes a model that translates" \
  bash -c "'$QKV' translate --model '$T/avg' --input '$T/in.txt' >/dev/null"
expect_fail "average onto an existing model is refused" "already holds a trained model" \
  "$QKV" average --out "$T/avg" "$T/m.orig" "$T/m2"
check "average --overwrite replaces it" \
  bash -c "'$QKV' average --out '$T/avg' --overwrite '$T/m.orig' '$T/m2' 2>/dev/null"
# overwriting a trained run leaves only the new model's files: the old run's checkpoint,
# metrics and figure would be read as part of it (--resume continued the old checkpoint and
# replaced the average with exit 0)
"$QKV" train "${TRAIN[@]}" --valid "$T/rev.tsv" --no-bleu --keep-epochs 1 --out "$T/ow" \
  2>/dev/null
check "a trained run to overwrite (checkpoint, metrics, figure, best/, epoch-NNN/)" \
  bash -c "cd '$T/ow' && test -e checkpoint.safetensors -a -e metrics.jsonl -a -e training.png -a -d best && ls -d epoch-* >/dev/null"
"$QKV" average --out "$T/ow" --overwrite "$T/m.orig" "$T/m2" 2>/dev/null
check "average --overwrite over a trained run leaves only the average's files ($(ls "$T/ow" | tr '\n' ' '))" \
  test "$(ls "$T/ow" | tr '\n' ' ')" = "config.json model.safetensors src_vocab.txt tgt_vocab.txt train.json "
expect_fail "... so --resume finds no checkpoint to continue" "checkpoint.safetensors is missing" \
  "$QKV" train --out "$T/ow" --resume
check "... and the average stays" \
  bash -c "'$QKV' translate --model '$T/ow' --input '$T/in.txt' >/dev/null"
# a refused or failed run leaves no directory behind (it left one holding only .qkv.lock)
expect_fail "a run refused for its data leaves no directory" "nope.tsv" \
  "$QKV" train --data "$T/nope.tsv" --d-model 8 --heads 2 --ffn 16 --layers 1 --out "$T/refused"
check "... (none: $(ls -A "$T/refused" 2>&1 | head -c 80))" test ! -e "$T/refused"
mkdir "$T/empty"
expect_fail "... nor a lock in a directory that was there" "nope.tsv" \
  "$QKV" train --data "$T/nope.tsv" --d-model 8 --heads 2 --ffn 16 --layers 1 --out "$T/empty"
check "... (the directory stays, empty)" \
  bash -c "test -d '$T/empty' && test -z \"\$(ls -A '$T/empty')\""
cp -r "$T/m2" "$T/perm"
awk 'NR == 5 { keep = $0; next } NR == 6 { print; print keep; next } { print }' \
  "$T/m2/tgt_vocab.txt" >"$T/perm/tgt_vocab.txt" # tokens 5 and 6 swapped
expect_fail "average of models with another vocabulary order is refused" "tgt_vocab.txt is not" \
  "$QKV" average --out "$T/avg2" "$T/m.orig" "$T/perm"
check "... and leaves no directory" test ! -e "$T/avg2"

# ---- train-lm: the same rules
"$QKV" train-lm "${LM[@]}" --out "$T/lm" >/dev/null 2>&1
expect_fail "train-lm onto a trained model is refused" "already holds a trained model" \
  "$QKV" train-lm "${LM[@]}" --out "$T/lm"
expect_fail "train-lm resume with another --attention is refused" "--attention linear differs from this run's softmax" \
  "$QKV" train-lm "${LM[@]}" --out "$T/lm" --resume --attention linear
"$QKV" train-lm --out "$T/lm" --resume --steps 16 --lr 0.002 >/dev/null 2>"$T/err"
check "train-lm resume with another --lr is applied and recorded" \
  bash -c "grep -q 'resuming with --lr 0.002 (was 0.001)' '$T/err' && tr -d ' \t\n' <'$T/lm/train.json' | grep -q '\"resumed_at_step\":12,\"changed\":{\"steps\":{\"was\":12,\"now\":16},\"lr\":{\"was\":0.001,\"now\":0.002}}'"
cp -r "$T/lm" "$T/nolm" && rm "$T/nolm/checkpoint.safetensors"
expect_fail "train-lm --resume without a checkpoint" "nolm/checkpoint.safetensors is missing" \
  "$QKV" train-lm "${LM[@]}" --out "$T/nolm" --resume

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
