#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The Python package's tests (python/tests, pytest) under each Python given: the package is
# built once as a wheel (abi3: one for every Python >= 3.11), installed into a virtual
# environment of each Python (made once under $BUILD/python-venv, with pytest and numpy from
# PyPI; Debian's /usr/bin/python3 sees its system packages, torch among them, for the PyTorch
# comparisons), and tested there from outside the source tree. Prints one closing line for
# all of them, "tests: N passed, M failed", as tests/run.sh does.
# Usage: QKV=build/qkv QKV_PARITY_DIR=build/parity tests/python.sh PYTHON...
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD:-build}
case "$build" in /*) ;; *) build=$root/$build ;; esac
export QKV=$(realpath "${QKV:?QKV must name the qkv binary}")
export QKV_PARITY_DIR=$(realpath "${QKV_PARITY_DIR:-$build/parity}")
export QKV_ROOT=$root
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
wheels=$build/python-wheel
rm -rf "$wheels" "$root/python/build"
first=${1:-python3}
echo "== building the wheel ($first)"
if ! "$first" -m pip wheel --quiet --no-deps --no-build-isolation -w "$wheels" "$root/python" \
    >"$build/python-wheel.log" 2>&1 &&
   ! "$first" -m pip wheel --quiet --no-deps -w "$wheels" "$root/python" >>"$build/python-wheel.log" 2>&1; then
  cat "$build/python-wheel.log"
  echo "!! the wheel did not build"; echo; echo "tests: 0 passed, 1 failed"; exit 1
fi
if grep -q "warning:" "$build/python-wheel.log"; then
  grep "warning:" "$build/python-wheel.log"; echo "!! the extension compiles with warnings"
  echo; echo "tests: 0 passed, 1 failed"; exit 1
fi
wheel=$(ls "$wheels"/qkv-*.whl)
export QKV_WHEEL=$wheel
passed=0; failed=0
for py in "$@"; do
  name=$(basename "$(dirname "$(dirname "$(realpath "$(command -v "$py")")")")")-$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  venv=$build/python-venv/$name
  echo "== $py ($venv)"
  site=""
  "$py" -c 'import torch' 2>/dev/null && site=--system-site-packages
  if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import pytest, numpy' 2>/dev/null; then
    rm -rf "$venv"
    "$py" -m venv $site "$venv" && "$venv/bin/python" -m pip install --quiet pytest numpy ||
      { echo "!! cannot make $venv"; failed=$((failed + 1)); continue; }
  fi
  "$venv/bin/python" -m pip install --quiet --force-reinstall --no-deps "$wheel" ||
    { echo "!! cannot install $wheel"; failed=$((failed + 1)); continue; }
  # from outside the tree, so that `import qkv` is the installed package
  out=$(cd /tmp && "$venv/bin/python" -m pytest -p no:cacheprovider -q -rs "$root/python/tests" 2>&1)
  rc=$?
  printf '%s\n' "$out"
  line=$(printf '%s\n' "$out" | grep -E '^=* ?[0-9]+ (passed|failed)|^=* .*(passed|failed)' | tail -n 1)
  p=$(printf '%s' "$line" | grep -oE '[0-9]+ passed' | grep -oE '[0-9]+'); p=${p:-0}
  f=$(printf '%s' "$line" | grep -oE '[0-9]+ (failed|error)' | grep -oE '[0-9]+' | awk '{s+=$1} END {print s+0}')
  passed=$((passed + p)); failed=$((failed + f))
  if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then echo "!! pytest exited with status $rc"; failed=$((failed + 1)); fi
done
echo
echo "tests: $passed passed, $failed failed"
[ $failed -eq 0 ]
