#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The command line as a user meets it: every --help names its values FILE, DIR, TEXT, N, FLOAT
# or by their choices (a|b|c), never S or X, and prints no raw control character; the man
# page and the bash completion made from --help at build time list every command and option;
# other names of options (--num-steps, --max-batch-tokens, -m) do what their option does;
# training warns, with the count, when --max-tokens cuts sentences; translate --input and eval
# draw a progress line on stderr when it is a terminal (script(1) gives them one), and never
# otherwise.
# Usage: test_help.sh QKV_BINARY (the man page and completion are QKV's directory's qkv.1 and
# qkv.bash).
set -u
QKV=$(realpath "$1")
BUILD=$(dirname "$QKV")
. "$(dirname "$0")/lib.sh" # $T, ok, bad, check, expect_fail

commands=$("$QKV" --help | awk '/^  [a-z][a-z-]*  /{print $1}')
check "qkv --help lists the commands" test "$(wc -w <<<"$commands")" -ge 14

# ---- --help: placeholders, and nothing raw
bad_lines=""
for c in $commands; do
  "$QKV" "$c" --help >"$T/help" 2>&1 || bad_lines+="$c: --help failed; "
  # an option line: "  -m, --model DIR   ..." or "      --port N   ..."
  while IFS= read -r line; do
    [[ $line =~ ^\ \ (-[a-z],\ |\ \ \ \ )--[a-z0-9-]+\ ([^ ]+)\ \  ]] || continue
    case ${BASH_REMATCH[2]} in
      N|FLOAT|TEXT|FILE|DIR) ;;
      *\|*) ;; # choices
      *) bad_lines+="$c: $line; " ;;
    esac
  done <"$T/help"
  LC_ALL=C grep -q $'[\x01-\x08\x0b-\x1f]' "$T/help" && bad_lines+="$c: a control character; "
  # every line but the usage's own is an option, a heading or text: no line is a bare value
  # (generate's default prompt, a newline, once broke its line in two)
  awk 'NR > 1 && /^[^ a-zA-Z"(-]/ {exit 1}' "$T/help" || bad_lines+="$c: a broken line; "
done
check "every --help names values FILE, DIR, TEXT, N, FLOAT or a|b|c ($bad_lines)" test -z "$bad_lines"
check "generate --help shows its default prompt as \\n" \
  bash -c "'$QKV' generate --help | grep -qF -- '(default \\n)'"
check "serve's usage says --timeout N, as its options do" \
  bash -c "'$QKV' serve --help | head -1 | grep -q -- '--timeout N' &&
           ! '$QKV' serve --help | grep -q -- '--timeout S'"
check "serve --max-batch-size, and --max-batch-tokens as its older name" \
  bash -c "'$QKV' serve --help | grep -q -- '--max-batch-size N' &&
           '$QKV' serve --help | grep -qE -- '--max-batch-tokens N +the same as --max-batch-size'"

# ---- the man page lists every command and every option of each
if [ -s "$BUILD/qkv.1" ]; then
  man_text=$(MANWIDTH=200 man -l "$BUILD/qkv.1" 2>/dev/null || groff -man -Tutf8 "$BUILD/qkv.1")
  missing=""
  for c in $commands; do
    grep -q "^ *qkv $c\$" <<<"$man_text" || missing+=" qkv $c"
    for o in $("$QKV" "$c" --help | sed -nE 's/^  (-[a-z], |    )(--[a-z0-9-]+).*/\2/p'); do
      awk -v c="qkv $c" -v o="$o" '$0 ~ "^ *" c "$" {in_c = 1; next} /^ *qkv [a-z-]+$/ {in_c = 0}
        in_c && index($0, o) {found = 1} END {exit !found}' <<<"$man_text" || missing+=" $c $o"
    done
  done
  check "the man page lists every command and option (missing:$missing)" test -z "$missing"
  check "the man page reads without roff warnings" \
    bash -c "! groff -man -ww -z '$BUILD/qkv.1' 2>&1 | grep -q ."
else
  bad "the man page $BUILD/qkv.1 was not built"
fi

# ---- bash completion: commands, options, choices, files for FILE, directories for DIR
if [ -s "$BUILD/qkv.bash" ]; then
  complete_words() { # the completions of the words given, the last being completed
    bash -c 'source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); COMPREPLY=()
             _qkv; printf "%s\n" "${COMPREPLY[@]}"' _ "$BUILD/qkv.bash" "$@"
  }
  offers() { complete_words "${@:2}" | grep -qxF -- "$1"; } # offers WORD QKV_WORDS...
  mkdir -p "$T/c/adir" && touch "$T/c/afile"
  check "completion offers every command" \
    test "$(complete_words qkv "" | grep -vc '^--')" -eq "$(wc -w <<<"$commands")"
  check "... and the commands that begin with what is typed" \
    test "$(complete_words qkv tr | sort | tr '\n' ' ')" = "train train-lm translate "
  check "... a command's options" offers --max-tokens qkv train --max-
  check "... their short names" offers -m qkv serve -
  check "... a choice's names" test "$(complete_words qkv train --act "" | tr '\n' ' ')" = "relu gelu silu "
  check "... bench's kinds" offers sgemm qkv bench ""
  check "... files for a FILE" offers "$T/c/afile" qkv train --data "$T/c/a"
  check "... directories alone for a DIR" test "$(complete_words qkv translate -m "$T/c/a")" = "$T/c/adir"
else
  bad "the completion $BUILD/qkv.bash was not built"
fi

# ---- other names: --num-steps is --max-tokens (recorded as num_steps), short options
printf 'a b c\tc b a\nb c d e\te d c b\nd e\te d\n' >"$T/pairs.tsv"
small=(--d-model 8 --heads 2 --ffn 16 --layers 1 --epochs 1 --min-freq 1 --threads 1 --quiet)
"$QKV" train -d "$T/pairs.tsv" -o "$T/m1" --num-steps 4 "${small[@]}" 2>"$T/err1"
check "train -d -o --num-steps: a model" test -s "$T/m1/model.safetensors"
check "... train.json records num_steps 4" grep -qE '"num_steps":[[:space:]]*4,' "$T/m1/train.json"
check "truncation: a warning with the count (1 of 3 pairs longer than 4 tokens with <eos>)" \
  grep -q 'warning: 1 of 3 sentence pairs are longer than --max-tokens 4 (counting <eos>)' "$T/err1"
"$QKV" train --data "$T/pairs.tsv" --out "$T/m2" --max-tokens 6 "${small[@]}" 2>"$T/err2"
check "no warning when nothing is cut" bash -c "test -s '$T/m2/model.safetensors' && ! grep -q warning '$T/err2'"
expect_fail "--max-tokens and --num-steps are one option: its range and name in the message" \
  "--max-tokens must be in \[2, 65536\] \(got 1\)" "$QKV" train --num-steps 1 --data x --out y

# ---- progress: on a terminal's stderr only
"$QKV" demo --out "$T/tm" --epochs 1 --train 300 --threads 1 >/dev/null 2>&1
for i in $(seq 70); do echo "a b c d"; done >"$T/in.txt"
printf 'a b c\tc b a\nd e f\tf e d\n' >"$T/eval.tsv"
"$QKV" translate -m "$T/tm" -i "$T/in.txt" --batch 16 -t 1 >"$T/plain.txt" 2>"$T/plain.err"
check "translate --input to a file: no progress line on a stderr that is not a terminal" \
  bash -c "test \$(wc -l <'$T/plain.txt') -eq 70 && ! grep -q 'sentences' '$T/plain.err'"
script -qec "'$QKV' translate -m '$T/tm' -i '$T/in.txt' --batch 16 -t 1 >'$T/tty.txt'" \
  /dev/null >"$T/tty.err" 2>&1
check "... on a terminal: the progress line, to 70/70 sentences" \
  bash -c "grep -q 'qkv translate: 16/70 sentences' '$T/tty.err' &&
           grep -q 'qkv translate: 70/70 sentences' '$T/tty.err'"
check "... and the same translations either way" cmp -s "$T/plain.txt" "$T/tty.txt"
"$QKV" eval -m "$T/tm" -d "$T/eval.tsv" -t 1 >"$T/eval.out" 2>"$T/eval.err"
check "eval: no progress line off a terminal" bash -c "! grep -q 'sentences' '$T/eval.err'"
script -qec "'$QKV' eval -m '$T/tm' -d '$T/eval.tsv' -t 1 >/dev/null" /dev/null >"$T/eval.tty" 2>&1
check "... on a terminal: one" grep -q 'qkv eval: 2/2 sentences' "$T/eval.tty"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
