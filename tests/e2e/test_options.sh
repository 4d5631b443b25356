#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Every option of every command is checked against its range at parse time, and --help shows
# that range: --help of each command exits 0 on stdout and names a range for every numeric
# option, and each out-of-range value of issue #17 is refused with a message naming it.
# Usage: test_options.sh QKV_BINARY
set -u
QKV=$(realpath "$1")
. "$(dirname "$0")/lib.sh" # $T, ok, bad, check, expect_fail

# ---- --help: stdout, exit 0, a range for every numeric option (N or FLOAT after its name; an
# option's other name, "the same as --NAME", shows its option's)
COMMANDS=$("$QKV" --help | sed -n 's/^  \([a-z-]*\)  .*/\1/p')
[ -n "$COMMANDS" ] || bad "qkv --help lists no command"
for c in $COMMANDS "bench train" "bench decode" "bench attention" "bench generate" "bench sgemm"; do
  # shellcheck disable=SC2086  # "bench train" is two words
  if ! "$QKV" $c --help >"$T/help" 2>"$T/err"; then bad "$c --help exits 0 ($(head -c 200 "$T/err"))"; continue; fi
  check "$c --help is on stdout, nothing on stderr" test -s "$T/help" -a ! -s "$T/err"
  opt='^  (-[a-z], |    )--[a-z0-9-]+ (N|FLOAT) +'
  numeric=$(grep -E "$opt" "$T/help" | grep -vc '  the same as --')
  ranged=$(grep -cE "$opt"'.*\((N|FLOAT) (in [[(][-0-9.e]+, [-0-9.e]+[])]|[<>]=? [-0-9.e]+); default [^)]*\)$' "$T/help")
  if [ "$numeric" -gt 0 ] && [ "$numeric" -eq "$ranged" ]; then ok "$c --help: a range for each of its $numeric numeric options"
  elif [ "$numeric" -eq 0 ] && ! grep -qE '(N|FLOAT) (in|[<>])' "$T/help"; then ok "$c --help: no numeric option"
  else bad "$c --help: $ranged of $numeric numeric options show a range: $(grep -E "$opt" "$T/help" | grep -v '  the same as --' | grep -vE '\((N|FLOAT) (in|[<>])')"; fi
done

# every default shown lies inside its range ("unset" where the option's absence means
# something else, as --enc-layers: --layers's value)
if python3 - "$QKV" "$(dirname "$0")/../fuzz" $COMMANDS >"$T/defaults" 2>&1 <<'PY'
import re, subprocess, sys
sys.path.insert(0, sys.argv[2])
import cli_fuzz
bad = 0
for c in sys.argv[3:]:
    for words in ([c, k] for k in cli_fuzz.BENCH_KINDS) if c == "bench" else [[c]]:
        text = subprocess.run([sys.argv[1]] + words + ["--help"], capture_output=True, text=True).stdout
        for o in cli_fuzz.read_help(sys.argv[1], words):
            if o.kind not in "NX":
                continue
            line = next(l for l in text.splitlines()
                        if re.match(r"  (-[a-z], |    )--%s " % re.escape(o.name), l))
            if "  the same as --" in line:  # another name: its option's line says it
                continue
            d = re.search(r"; default ([^)]*)\)$", line).group(1)
            if d != "unset" and not o.inside(float(d)):
                print("%s --%s: default %s outside its range" % (" ".join(words), o.name, d))
                bad += 1
sys.exit(1 if bad else 0)
PY
then ok "every default shown lies inside its option's range"; else bad "defaults: $(cat "$T/defaults")"; fi

# ---- values outside their range (issue #17's list): nonzero exit, a message naming the range
expect_fail "--lr -0.1" "--lr must be in \(0, 10\] \(got -0.1\)" "$QKV" train --lr -0.1
expect_fail "--beta2 2" "--beta2 must be in \[0, 1\)" "$QKV" train --beta2 2
expect_fail "--beta1 1" "--beta1 must be in \[0, 1\) \(got 1\)" "$QKV" train --beta1 1
expect_fail "--adam-eps 0" "--adam-eps must be in \(0, 1\]" "$QKV" train --adam-eps 0
expect_fail "--clip -1" "--clip must be >= 0" "$QKV" train --clip -1
expect_fail "--label-smoothing 1" "--label-smoothing must be in \[0, 1\)" "$QKV" train --label-smoothing 1
expect_fail "--label-smoothing -0.5" "--label-smoothing must be in" "$QKV" train --label-smoothing -0.5
expect_fail "--weight-decay -1" "--weight-decay must be in \[0, 1\]" "$QKV" train --weight-decay -1
expect_fail "--threads -5" "--threads must be in \[0, " "$QKV" train --threads -5
expect_fail "--num-examples -5" "--num-examples must be >= 0" "$QKV" train --num-examples -5
expect_fail "--enc-layers -5" "--enc-layers must be in \[0, " "$QKV" train --enc-layers -5
expect_fail "--checkpoint-every -1" "--checkpoint-every must be >= 0" "$QKV" train --checkpoint-every -1
expect_fail "--stop-after-steps -1" "--stop-after-steps must be >= 0" "$QKV" train --stop-after-steps -1
expect_fail "--max-len 2147483647" "--max-len must be in \[2, 65536\]" "$QKV" train --max-len 2147483647
expect_fail "translate --max-len -1" "--max-len must be in \[0, " "$QKV" translate --max-len -1
expect_fail "generate --top-p 2" "--top-p must be in \(0, 1\] \(got 2\)" "$QKV" generate --top-p 2
expect_fail "demo --train 2147483647" "--train must be in \[1, " "$QKV" demo --train 2147483647
expect_fail "train-lm --beta2 1" "qkv train-lm: --beta2 must be in" "$QKV" train-lm --beta2 1
expect_fail "the --name=value form is checked too" "--dropout must be in" "$QKV" train --dropout=1
expect_fail "bench --steps 0" "--steps must be in \[1, " "$QKV" bench train --steps 0
# upper bounds where no run learns (the weights went to 1e30 and translate printed -nan, exit 0)
expect_fail "--lr 1e30 is refused" "--lr must be in \(0, 10\] \(got 1e\+30\)" "$QKV" train --lr 1e30
expect_fail "--weight-decay 1e30 is refused" "--weight-decay must be in \[0, 1\]" \
  "$QKV" train --weight-decay 1e30
expect_fail "train-lm --lr 1e30 is refused" "--lr must be in \(0, 10\]" "$QKV" train-lm --lr 1e30
expect_fail "train-lm --weight-decay 1e30 is refused" "--weight-decay must be in \[0, 1\]" \
  "$QKV" train-lm --weight-decay 1e30
expect_fail "--lr-factor 1e30 is refused" "--lr-factor must be in \(0, 100\]" \
  "$QKV" train --schedule noam --lr-factor 1e30
expect_fail "--adam-eps 10 is refused" "--adam-eps must be in \(0, 1\]" "$QKV" train --adam-eps 10
# a float is a decimal number; one a float cannot hold is said to be too small or too large
expect_fail "--lr 0x10 is not a number" "--lr: '0x10' is not a valid number" "$QKV" train --lr 0x10
expect_fail "--lr inf is not a number" "--lr: 'inf' is not a valid number" "$QKV" train --lr inf
expect_fail "--lr 1e-45 is too small" "--lr: '1e-45' is too small for a float" "$QKV" train --lr 1e-45
expect_fail "--lr 1e39 is too large" "--lr: '1e39' is too large for a float" "$QKV" train --lr 1e39
# the size options' ranges are the library's limits
check "--d-model's help says 16384" bash -c "'$QKV' train --help | grep -q -- '--d-model N.*in \[1, 16384\]'"
expect_fail "--d-model 20000 is refused by the parser" "--d-model must be in \[1, 16384\]" \
  "$QKV" train --d-model 20000

# ---- contradictory combinations and misleading messages (issue #17): refused, saying why
printf 'go .\tva !\nhi .\tsalut !\nrun !\tcours !\nwho ?\tqui ?\n' >"$T/pairs.tsv"
cut -f1 "$T/pairs.tsv" >"$T/src.txt"; cut -f2 "$T/pairs.tsv" >"$T/tgt.txt"
printf 'the cat sat on the mat. the dog sat on the log.\n' >"$T/text.txt"
TINY=(--d-model 8 --heads 2 --ffn 16 --layers 1 --batch 2 --num-steps 6 --epochs 1 --min-freq 1
      --threads 1 --quiet)
"$QKV" train --data "$T/pairs.tsv" "${TINY[@]}" --out "$T/m" 2>"$T/err" || bad "tiny model: $(cat "$T/err")"
"$QKV" train-lm --data "$T/text.txt" --d-model 8 --heads 2 --ffn 16 --layers 1 --context 8 --batch 2 \
  --steps 2 --threads 1 --quiet --out "$T/lm" >/dev/null 2>"$T/err" || bad "tiny LM: $(cat "$T/err")"
expect_fail "train --data with --src" "--data is the pairs in one file, --src with --tgt" \
  "$QKV" train --data "$T/pairs.tsv" --src "$T/src.txt" --out "$T/x"
expect_fail "train --data with --tgt" "give one" "$QKV" train --data "$T/pairs.tsv" --tgt "$T/tgt.txt" --out "$T/x"
expect_fail "eval --data with --src/--tgt" "either --data or --src with --tgt" \
  "$QKV" eval --model "$T/m" --data "$T/pairs.tsv" --src "$T/src.txt" --tgt "$T/tgt.txt"
expect_fail "--joint-bpe with the word tokenizer" "--joint-bpe and --vocab-size are for --tokenizer bpe" \
  "$QKV" train --data "$T/pairs.tsv" --joint-bpe --out "$T/x"
expect_fail "--vocab-size with the word tokenizer" "for --tokenizer bpe" \
  "$QKV" train --data "$T/pairs.tsv" --vocab-size 100 --out "$T/x"
expect_fail "--patience without validation" "need validation" "$QKV" train --data "$T/pairs.tsv" --patience 2 --out "$T/x"
expect_fail "--no-bleu without validation" "need validation" "$QKV" train --data "$T/pairs.tsv" --no-bleu --out "$T/x"
expect_fail "--lr with the noam schedule" "--lr sets the constant schedule's rate.*this run's is noam" \
  "$QKV" train --data "$T/pairs.tsv" --schedule noam --lr 0.1 --out "$T/x"
expect_fail "--warmup with the constant schedule" "this run's is constant" "$QKV" train --data "$T/pairs.tsv" --warmup 10 --out "$T/x"
expect_fail "--lr-factor with the constant schedule" "shape the noam schedule" "$QKV" train --data "$T/pairs.tsv" --lr-factor 2 --out "$T/x"
expect_fail "--max-len x --d-model over 1 GiB of positions" "needs a 2.0 GiB positional table" \
  "$QKV" train --data "$T/pairs.tsv" --max-len 65536 --d-model 8192 --out "$T/x"
expect_fail "--min-freq leaving only the reserved tokens" "no source word occurs --min-freq 1000000 times" \
  "$QKV" train --data "$T/pairs.tsv" "${TINY[@]}" --min-freq 1000000 --out "$T/mf"
check "... and no model is written" test ! -e "$T/mf/model.safetensors"
expect_fail "info --model with configuration flags" "--model describes a saved model, --d-model" \
  "$QKV" info --model "$T/m" --d-model 64
expect_fail "plot DIR with --positions" "are for --positional" "$QKV" plot "$T/m" --positions 5
expect_fail "plot --positional with --out" "--out names the training-curve figure" \
  "$QKV" plot --positional "$T/p" --out "$T/x.png"
expect_fail "generate --temperature 0 with --top-k" "greedy decoding" \
  "$QKV" generate --model "$T/lm" --temperature 0 --top-k 3
python3 - "$T/m/config.json" "$T/big/config.json" <<'PY'
import json, os, sys
d = json.load(open(sys.argv[1])); d["max_len"] = 2000000000
os.makedirs(os.path.dirname(sys.argv[2]), exist_ok=True); json.dump(d, open(sys.argv[2], "w"))
PY
cp "$T/m/"*.txt "$T/m/"*.safetensors "$T/big/" 2>/dev/null
expect_fail '"max_len": 2000000000 in config.json' 'max_len = 2000000000 is over the limit QKV_MAX_LEN' \
  "$QKV" translate --model "$T/big" --input "$T/src.txt"
"$QKV" train --data "$T/pairs.tsv" "${TINY[@]}" --epochs 2 --stop-after-steps 1 --out "$T/r" 2>/dev/null
python3 - "$T/r/train.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); d["beta1"] = 1; json.dump(d, open(sys.argv[1], "w"))
PY
expect_fail "--resume: a recorded value out of range names the file" "--beta1 must be in \[0, 1\) \(got 1\) in .*r/train.json" \
  "$QKV" train --out "$T/r" --resume
mkdir -p "$T/dir"
expect_fail "train --data DIR" "directory" "$QKV" train --data "$T/dir" --out "$T/x"
expect_fail "translate --input DIR" "is a directory" "$QKV" translate --model "$T/m" --input "$T/dir"

# ---- presets (--preset) and the schedule by steps: a preset's values are said and recorded,
# and every one of them is overridden by the option given
"$QKV" train --data "$T/pairs.tsv" --preset transformer-base --d-model 8 --heads 2 --ffn 16 \
  --layers 1 --tokenizer word --tie none --batch-tokens 0 --batch 2 --max-tokens 6 --epochs 1 \
  --min-freq 1 --threads 1 --out "$T/pre" 2>"$T/err"
check "--preset transformer-base trains ($(head -c 300 "$T/err"))" test -s "$T/pre/model.safetensors"
check "... and says its values" grep -q "preset transformer-base: --d-model 512 --ffn 2048 .*--warmup 4000 .*--beta2 0.98 .*--label-smoothing 0.1\|preset transformer-base: .*--beta2 0.98" "$T/err"
check "... train.json records it with the paper's recipe" python3 -c '
import json, sys
t = json.load(open(sys.argv[1])); c = json.load(open(sys.argv[2]))
assert t["preset"] == "transformer-base" and t["schedule"] == "noam" and t["warmup"] == 4000
assert t["beta2"] == 0.98 and t["adam_eps"] == 1e-09 and t["label_smoothing"] == 0.1, t
assert c["d_model"] == 8 and c["enc_layers"] == 1 and abs(c["dropout"] - 0.1) < 1e-7, c
' "$T/pre/train.json" "$T/pre/config.json"
"$QKV" train --data "$T/pairs.tsv" --preset d2l --d-model 8 --heads 2 --ffn 16 --layers 1 --epochs 1 \
  --min-freq 1 --threads 1 --quiet --out "$T/pre-d2l" 2>"$T/err"
check "--preset d2l: d2l's loss scaling, overridden epochs ($(head -c 200 "$T/err"))" \
  bash -c "grep -q '\"loss\":[[:space:]]*\"d2l\"' '$T/pre-d2l/train.json' && grep -q '\"epochs\":[[:space:]]*1,' '$T/pre-d2l/train.json'"
expect_fail "--preset of no such name names the presets" "no preset 'transformer-huge'; the presets are transformer-base, transformer-big, d2l" \
  "$QKV" train --data "$T/pairs.tsv" --preset transformer-huge --out "$T/x"
"$QKV" train --data "$T/pairs.tsv" "${TINY[@]}" --epochs 2 --stop-after-steps 1 --out "$T/rp" 2>/dev/null
expect_fail "--resume with a preset the run did not have is refused" "--preset d2l differs from this run's \\(none\\)" \
  "$QKV" train --out "$T/rp" --resume --preset d2l
expect_fail "--valid-every without validation" "--valid-every needs validation" \
  "$QKV" train --data "$T/pairs.tsv" --valid-every 10 --out "$T/x"
expect_fail "--keep-last without --save-every" "--keep-last keeps the models of --save-every" \
  "$QKV" train --data "$T/pairs.tsv" --keep-last 2 --out "$T/x"
expect_fail "--accum 0" "--accum must be in \[1, 1024\]" "$QKV" train --accum 0
"$QKV" train --data "$T/pairs.tsv" "${TINY[@]}" --accum 2 --save-every 1 --keep-last 1 --epochs 2 \
  --valid "$T/pairs.tsv" --valid-every 1 --out "$T/steps" 2>"$T/err"
# 4 pairs, batches of 2, 2 batches a step: one step an epoch, 2 in all
check "--accum, --valid-every, --save-every, --keep-last: recorded, the last step-NNNNNNN kept, a validation per step ($(head -c 200 "$T/err"))" \
  bash -c "grep -q '\"accum\":[[:space:]]*2' '$T/steps/train.json' && test \"\$(ls '$T/steps' | grep -c '^step-')\" = 1 && test -s '$T/steps/step-0000002/model.safetensors' && test \"\$(grep -c '\"step\"' '$T/steps/validation.json')\" = 2"

# ---- --config FILE.json: a run's train.json fed back gives the same run; the command line
# wins; the file's values are checked like the command line's, naming the file and key
strip_history() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); d.pop("history",None); print(json.dumps(d,sort_keys=True))' "$1"; }
"$QKV" train --config "$T/m/train.json" --d-model 8 --heads 2 --ffn 16 --layers 1 --quiet --out "$T/again" 2>"$T/err"
check "train --config train.json: exit 0 ($(head -c 200 "$T/err"))" test -s "$T/again/model.safetensors"
check "... records the same train.json" test "$(strip_history "$T/m/train.json")" = "$(strip_history "$T/again/train.json")"
check "... and trains the same model" cmp -s "$T/m/model.safetensors" "$T/again/model.safetensors"
"$QKV" train --src "$T/src.txt" --tgt "$T/tgt.txt" "${TINY[@]}" --valid "$T/pairs.tsv" --no-bleu --out "$T/al" 2>/dev/null
"$QKV" train --config "$T/al/train.json" --d-model 8 --heads 2 --ffn 16 --layers 1 --quiet --out "$T/al2" 2>"$T/err"
check "aligned files and --no-bleu round trip (\"src\" and \"tgt\", valid_bleu false is --no-bleu)" \
  test "$(strip_history "$T/al/train.json")" = "$(strip_history "$T/al2/train.json")"
# a train.json written before runs recorded "src": its "data" with "tgt" is the source file,
# as a --config and when the run is resumed
python3 - "$T/al/train.json" "$T/old.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); d["data"] = d.pop("src"); json.dump(d, open(sys.argv[2], "w"))
PY
"$QKV" train --config "$T/old.json" --d-model 8 --heads 2 --ffn 16 --layers 1 --quiet --out "$T/al3" 2>"$T/err"
check "an older train.json's \"data\" with \"tgt\" is --src ($(head -c 200 "$T/err"))" \
  test "$(strip_history "$T/al/train.json")" = "$(strip_history "$T/al3/train.json")"
"$QKV" train --src "$T/src.txt" --tgt "$T/tgt.txt" "${TINY[@]}" --epochs 2 --stop-after-steps 1 --out "$T/ra" 2>/dev/null
python3 - "$T/ra/train.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); d["data"] = d.pop("src"); json.dump(d, open(sys.argv[1], "w"))
PY
"$QKV" train --out "$T/ra" --resume --quiet 2>"$T/err"
check "... and resumes ($(head -c 200 "$T/err"))" \
  bash -c "test -s '$T/ra/model.safetensors' && grep -q '\"src\":' '$T/ra/train.json'"
"$QKV" train-lm --config "$T/lm/train.json" --d-model 8 --heads 2 --ffn 16 --layers 1 --threads 1 --quiet \
  --out "$T/lm2" >/dev/null 2>"$T/err"
check "train-lm --config train.json round trip ($(head -c 200 "$T/err"))" \
  test "$(strip_history "$T/lm/train.json")" = "$(strip_history "$T/lm2/train.json")"
printf '{"lr": 0.5, "clip": 0.5, "quiet": true}\n' >"$T/c.json"
"$QKV" train --data "$T/pairs.tsv" "${TINY[@]}" --lr 0.25 --config "$T/c.json" --out "$T/cl" 2>/dev/null
check "the command line wins over --config, wherever it stands" grep -q '"lr":[[:space:]]*0.25' "$T/cl/train.json"
check "... and the file sets what the command line does not" grep -q '"clip":[[:space:]]*0.5' "$T/cl/train.json"
printf '{"label_smoothing": 1}' >"$T/ls.json"
expect_fail "a value out of range in --config names the file" "--label-smoothing must be in \[0, 1\) \(got 1\) in .*ls.json" \
  "$QKV" train --config "$T/ls.json"
printf '{"frobnicate": 3}' >"$T/unk.json"
for c in demo train translate eval info plot train-lm generate eval-lm "bench train" average "import marian"; do
  # shellcheck disable=SC2086
  expect_fail "$c --config: an unknown key names the file and the key" 'unk.json: unknown key "frobnicate"' "$QKV" $c --config "$T/unk.json"
done
printf '{"lr": [0.1]}' >"$T/arr.json"
expect_fail "--config: an array value" '"lr" must be a number, a string, true or false' "$QKV" train --config "$T/arr.json"
printf '{"lr": true}' >"$T/bool.json"
expect_fail "--config: true for an option with a value" '"lr" is true, but --lr takes a value' "$QKV" train --config "$T/bool.json"
printf '[1, 2]' >"$T/list.json"
expect_fail "--config: not an object" "not a JSON object" "$QKV" train --config "$T/list.json"
expect_fail "--config: a missing file" "cannot open" "$QKV" train --config "$T/absent.json"
expect_fail "--config without a file" "--config needs a file" "$QKV" train --config

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
