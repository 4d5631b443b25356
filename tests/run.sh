#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Runs the test programs given on the command line and prints one closing line for the whole
# suite. A cmocka binary is run as it is; a tests/e2e/*.sh script is run with the qkv binary
# ($QKV) as its argument and must end with a line "N passed, M failed". Exits nonzero if any
# test failed or any program crashed.
set -u
# Waiting OpenMP threads sleep instead of spinning: on a machine shared with other work,
# spinning waits make the parallel kernels many times slower (see src/cli/main.c).
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
# The Python of the test tools (torch, transformers, sacrebleu, ...): QKV_PY as make passes it,
# else build/venv's (scripts/install-deps.sh --test), else Debian's; absolute, since tests cd.
if [ -z "${QKV_PY:-}" ]; then
  QKV_PY=/usr/bin/python3
  [ -x build/venv/bin/python3 ] && QKV_PY=build/venv/bin/python3
fi
case $QKV_PY in /*) ;; */*) QKV_PY=$PWD/$QKV_PY ;; esac
export QKV_PY
passed=0; failed=0
for prog in "$@"; do
  echo "== $prog"
  case "$prog" in
    *.sh)
      out=$(bash "$prog" "${QKV:?QKV must name the qkv binary}" 2>&1); rc=$?
      printf '%s\n' "$out"
      line=$(printf '%s\n' "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed' | tail -n 1)
      p=$(printf '%s' "$line" | sed -n 's/^\([0-9]*\) passed.*/\1/p'); p=${p:-0}
      f=$(printf '%s' "$line" | sed -n 's/^[0-9]* passed, \([0-9]*\) failed.*/\1/p'); f=${f:-0}
      ;;
    *)
      out=$("$prog" 2>&1); rc=$?
      printf '%s\n' "$out"
      p=$(printf '%s\n' "$out" | sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' | awk '{s+=$1} END {print s+0}')
      f=$(printf '%s\n' "$out" | sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' | awk '{s+=$1} END {print s+0}')
      ;;
  esac
  passed=$((passed + p)); failed=$((failed + f))
  if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then
    echo "!! $prog exited with status $rc"; failed=$((failed + 1))
  fi
done
echo
echo "tests: $passed passed, $failed failed"
[ $failed -eq 0 ]
