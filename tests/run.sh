#!/usr/bin/env bash
# Runs each cmocka test binary given on the command line and prints one closing line for the
# whole suite. Exits nonzero if any test failed or any binary crashed.
set -u
passed=0; failed=0; crashed=0
for bin in "$@"; do
  echo "== $bin"
  out=$("$bin" 2>&1); rc=$?
  printf '%s\n' "$out"
  p=$(printf '%s\n' "$out" | sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' | awk '{s+=$1} END {print s+0}')
  f=$(printf '%s\n' "$out" | sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' | awk '{s+=$1} END {print s+0}')
  passed=$((passed + p)); failed=$((failed + f))
  if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then
    echo "!! $bin exited with status $rc"; crashed=$((crashed + 1)); failed=$((failed + 1))
  fi
done
echo
echo "tests: $passed passed, $failed failed"
[ $failed -eq 0 ] && [ $crashed -eq 0 ]
