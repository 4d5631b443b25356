# SPDX-License-Identifier: MIT
# What every end-to-end script shares: a temporary directory $T, removed on exit, and the
# counters behind the closing line "N passed, M failed" that each script prints (tests/run.sh
# reads it).
#   ok NAME / bad NAME      count a check that passed / failed
#   check NAME CMD...       ok if CMD exits 0, else bad
#   expect_fail NAME PATTERN CMD...   ok if CMD exits nonzero with stderr matching PATTERN
# For the data-parallel tests (test_mpi.sh, test_netns.sh; $PY and $HERE set before sourcing):
#   mpi_data DIR            40 short sentence pairs (DIR/pairs.tsv) and 300 lines of text
#                           (DIR/text.txt), the same every time
#   same_runs NAME A B [FROM] [SKIP]   run directories A and B: every loss of metrics.jsonl
#                           within 1e-5 relative, the parameters within 1e-6 (mpi_compare.py)
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
mpi_data() {
  "$PY" - "$1" <<'PYEOF'
import random, sys
random.seed(1)
en = "the a cat dog sat ran on under big red mat hat sun moon".split()
fr = "le un chat chien assis couru sur sous grand rouge tapis chapeau soleil lune".split()
with open(sys.argv[1] + "/pairs.tsv", "w") as f:
    for _ in range(40):
        idx = [random.randrange(len(en)) for _ in range(random.randint(2, 6))]
        f.write(" ".join(en[j] for j in idx) + " .\t" + " ".join(fr[j] for j in reversed(idx)) + " .\n")
with open(sys.argv[1] + "/text.txt", "w") as f:
    for _ in range(300):
        f.write(" ".join(random.choice(en) for _ in range(8)) + ".\n")
PYEOF
}
same_runs() {
  local name=$1; shift
  if out=$("$PY" "$HERE/mpi_compare.py" "$1" "$2" 1e-5 1e-6 "${@:3}" 2>&1); then ok "$name: $out"; else bad "$name: $out"; fi
}
