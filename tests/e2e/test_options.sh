#!/usr/bin/env bash
# Every option of every command is checked against its range at parse time, and --help shows
# that range: --help of each command exits 0 on stdout and names a range for every numeric
# option, and each out-of-range value of issue #17 is refused with a message naming it.
# Usage: test_options.sh QKV_BINARY
set -u
QKV=$(realpath "$1")
. "$(dirname "$0")/lib.sh" # $T, ok, bad, check
# expect_fail NAME PATTERN CMD...: CMD exits nonzero and stderr matches PATTERN
expect_fail() {
  local name=$1 pat=$2; shift 2
  if "$@" >"$T/out" 2>"$T/err"; then bad "$name (exit 0)"; return; fi
  if grep -qE -- "$pat" "$T/err"; then ok "$name"; else bad "$name: stderr was: $(head -c 300 "$T/err")"; fi
}

# ---- --help: stdout, exit 0, a range for every numeric option (N or X after its name)
COMMANDS=$("$QKV" --help | sed -n 's/^  \([a-z-]*\)  .*/\1/p')
[ -n "$COMMANDS" ] || bad "qkv --help lists no command"
for c in $COMMANDS "bench train" "bench decode" "bench attention" "bench generate" "bench sgemm"; do
  # shellcheck disable=SC2086  # "bench train" is two words
  if ! "$QKV" $c --help >"$T/help" 2>"$T/err"; then bad "$c --help exits 0 ($(head -c 200 "$T/err"))"; continue; fi
  check "$c --help is on stdout, nothing on stderr" test -s "$T/help" -a ! -s "$T/err"
  numeric=$(grep -cE '^  --[a-z0-9-]+ [NX] ' "$T/help")
  ranged=$(grep -cE '^  --[a-z0-9-]+ [NX] .*\([NX] (in [[(][-0-9.e]+, [-0-9.e]+[])]|[<>]=? [-0-9.e]+); default [^)]*\)$' "$T/help")
  if [ "$numeric" -eq "$ranged" ]; then ok "$c --help: a range for each of its $numeric numeric options"
  else bad "$c --help: $ranged of $numeric numeric options show a range: $(grep -E '^  --[a-z0-9-]+ [NX] ' "$T/help" | grep -vE '\([NX] (in|[<>])')"; fi
done

# ---- values outside their range (issue #17's list): nonzero exit, a message naming the range
expect_fail "--lr -0.1" "--lr must be > 0 \(got -0.1\)" "$QKV" train --lr -0.1
expect_fail "--beta2 2" "--beta2 must be in \[0, 1\)" "$QKV" train --beta2 2
expect_fail "--beta1 1" "--beta1 must be in \[0, 1\) \(got 1\)" "$QKV" train --beta1 1
expect_fail "--adam-eps 0" "--adam-eps must be > 0" "$QKV" train --adam-eps 0
expect_fail "--clip -1" "--clip must be >= 0" "$QKV" train --clip -1
expect_fail "--label-smoothing 1" "--label-smoothing must be in \[0, 1\)" "$QKV" train --label-smoothing 1
expect_fail "--label-smoothing -0.5" "--label-smoothing must be in" "$QKV" train --label-smoothing -0.5
expect_fail "--weight-decay -1" "--weight-decay must be >= 0" "$QKV" train --weight-decay -1
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

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
