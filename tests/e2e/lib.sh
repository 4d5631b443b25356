# SPDX-License-Identifier: MIT
# What every end-to-end script shares: a temporary directory $T, removed on exit, and the
# counters behind the closing line "N passed, M failed" that each script prints (tests/run.sh
# reads it).
#   ok NAME / bad NAME      count a check that passed / failed
#   check NAME CMD...       ok if CMD exits 0, else bad
#   expect_fail NAME PATTERN CMD...   ok if CMD exits nonzero with stderr matching PATTERN
# Sourced: . "$(dirname "$0")/lib.sh"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
pass=0; fail=0
ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; }
check() { local name=$1; shift; if "$@"; then ok "$name"; else bad "$name"; fi; }
expect_fail() {
  local name=$1 pat=$2; shift 2
  if "$@" >"$T/out" 2>"$T/err"; then bad "$name (exit 0)"; return; fi
  if grep -qE -- "$pat" "$T/err"; then ok "$name"; else bad "$name: stderr was: $(head -c 400 "$T/err")"; fi
}
