#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The OpenBLAS qkv runs on is the one it was built for, OpenBLAS's OpenMP build:
#   - qkv (and libqkv.so, test_blas) carry that build's directory as RUNPATH, and load it;
#   - with the pthreads build forced in (LD_LIBRARY_PATH, LD_PRELOAD), qkv refuses to run with a
#     message naming the build and its file, and tests/unit/test_blas fails;
#   - where Debian's alternatives rank the pthreads build first and point libopenblas.so.0 at it
#     (as they do when libopenblas0-pthread is installed and nothing is pinned), qkv still loads
#     the OpenMP build. Played in a private mount namespace, with a copy of /etc/alternatives in
#     which libopenblas.so.0 is the pthreads build: nothing changes for the rest of the machine.
#     A program without qkv's RUNPATH (Python's ctypes) loads the pthreads build there, which
#     shows the situation is real.
# Needs OpenBLAS's pthreads build: the system's (libopenblas0-pthread) where it is installed, else
# the copy `scripts/install-deps.sh --test` unpacks into build/deps (never installed, so that it
# does not become the machine's libopenblas.so.0). Usage: test_blas.sh QKV_BINARY.
set -u
QKV=$(realpath "$1")
DIR=$(dirname "$QKV")
PYTHON=${PYTHON:-python3}
. "$(dirname "$0")/lib.sh" # $T, ok, bad, check, expect_fail

MA=$(gcc -print-multiarch)
OPENMP_DIR=/usr/lib/$MA/openblas-openmp
PTHREAD_DIR=/usr/lib/$MA/openblas-pthread
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
UNPACKED=$ROOT/build/deps/openblas-pthread/usr/lib/$MA/openblas-pthread
[ ! -e "$PTHREAD_DIR/libopenblas.so.0" ] && [ -e "$UNPACKED/libopenblas.so.0" ] && PTHREAD_DIR=$UNPACKED
INFO=(info --d-model 32 --heads 4 --ffn 64 --layers 2 --vocab 100)   # a command that needs no data

# the file ldd says PROGRAM's libopenblas.so.0 comes from
blas_of() { ldd "$1" | awk '$1 == "libopenblas.so.0" { print $3 }'; }
# qkv_refuses NAME ENV...: qkv, run with ENV, exits nonzero and names the pthreads build's file
qkv_refuses() {
  local name=$1; shift
  if env "$@" "$QKV" "${INFO[@]}" >"$T/out" 2>"$T/err"; then bad "$name: qkv ran"; return; fi
  if grep -q "pthreads build ($PTHREAD_DIR/libopenblas.so.0), but qkv needs its OpenMP build" "$T/err"
  then ok "$name: qkv refuses, naming the pthreads build"
  else bad "$name: qkv failed without the message: $(head -c 300 "$T/err")"; fi
}

# ---- what qkv is built to load
for f in "$QKV" "$DIR/libqkv.so" "$DIR/tests/test_blas"; do
  [ -e "$f" ] || continue
  check "$(basename "$f") has RUNPATH $OPENMP_DIR" \
    bash -c "readelf -d '$f' | grep RUNPATH | grep -q -F '[$OPENMP_DIR'"
done
got=$(blas_of "$QKV")
check "qkv loads libopenblas.so.0 from $OPENMP_DIR (ldd: $got)" [ "$got" = "$OPENMP_DIR/libopenblas.so.0" ]
check "qkv runs" bash -c "'$QKV' ${INFO[*]} >/dev/null"

# ---- the pthreads build forced in
if [ ! -e "$PTHREAD_DIR/libopenblas.so.0" ]; then
  bad "no $PTHREAD_DIR/libopenblas.so.0 nor $UNPACKED/libopenblas.so.0: run scripts/install-deps.sh --test"
  echo; echo "$pass passed, $fail failed"; exit 1
fi
check "with LD_LIBRARY_PATH, qkv loads the pthreads build" \
  [ "$(LD_LIBRARY_PATH=$PTHREAD_DIR blas_of "$QKV")" = "$PTHREAD_DIR/libopenblas.so.0" ]
qkv_refuses "LD_LIBRARY_PATH=$PTHREAD_DIR" LD_LIBRARY_PATH="$PTHREAD_DIR"
# (a sanitizer runtime must come first in LD_PRELOAD)
asan=$(ldd "$QKV" | awk '$1 ~ /^libasan/ { print $3 }')
qkv_refuses "LD_PRELOAD=$PTHREAD_DIR/libopenblas.so.0" \
  LD_PRELOAD="${asan:+$asan }$PTHREAD_DIR/libopenblas.so.0"
if [ -x "$DIR/tests/test_blas" ]; then
  if LD_LIBRARY_PATH=$PTHREAD_DIR "$DIR/tests/test_blas" >"$T/out" 2>&1; then
    bad "test_blas passes on the pthreads build"
  elif grep -q "FAILED.*test_openmp_build_loaded" "$T/out"; then
    ok "test_blas fails on the pthreads build"
  else bad "test_blas failed otherwise: $(tail -c 300 "$T/out")"; fi
fi

# ---- libopenblas.so.0 pointing at the pthreads build, as Debian's alternatives do in auto mode
# in_pthreads_world CMD...: CMD where /usr/lib/$MA/libopenblas.so.0 resolves to the pthreads build
ALT=libopenblas.so.0-$MA
best=$(update-alternatives --query "$ALT" | sed -n 's/^Best: //p')
prio() { update-alternatives --query "$ALT" | awk -v p="$1/libopenblas.so.0" \
  '$1 == "Alternative:" { a = $2 } $1 == "Priority:" && a == p { print $2 }'; }
echo "     alternatives: the pthreads build has priority $(prio "$PTHREAD_DIR"), the OpenMP build" \
  "$(prio "$OPENMP_DIR"); auto mode would choose $best"
current=$(readlink -f "/usr/lib/$MA/libopenblas.so.0")
if [ "$current" = "$PTHREAD_DIR/libopenblas.so.0" ]; then
  in_pthreads_world() { "$@"; }
  how="on this machine, whose libopenblas.so.0 is the pthreads build"
else
  cp -a /etc/alternatives "$T/alternatives"
  ln -sfn "$PTHREAD_DIR/libopenblas.so.0" "$T/alternatives/$ALT"
  ns=(unshare -m); [ "$(id -u)" -ne 0 ] && ns=(unshare -rm)
  in_pthreads_world() {
    "${ns[@]}" sh -c 'mount --bind "$0" /etc/alternatives && exec "$@"' "$T/alternatives" "$@"
  }
  how="in a mount namespace whose /etc/alternatives points libopenblas.so.0 at the pthreads build"
  if ! in_pthreads_world true 2>"$T/err"; then
    echo "skip the alternatives case: no private mount namespace here ($(head -c 200 "$T/err"))"
    in_pthreads_world() { return 1; }
    how=
  fi
fi
if [ -n "$how" ]; then
  echo "     $how:"
  control=$(in_pthreads_world "$PYTHON" -c \
    'import ctypes; print(ctypes.CDLL("libopenblas.so.0").openblas_get_parallel())' 2>&1)
  check "a program without qkv's RUNPATH gets the pthreads build (openblas_get_parallel $control)" \
    [ "$control" = 1 ]
  got=$(in_pthreads_world ldd "$QKV" | awk '$1 == "libopenblas.so.0" { print $3 }')
  check "qkv still loads the OpenMP build ($got)" [ "$got" = "$OPENMP_DIR/libopenblas.so.0" ]
  if in_pthreads_world "$QKV" "${INFO[@]}" >/dev/null 2>"$T/err"; then ok "qkv runs"
  else bad "qkv does not run: $(head -c 300 "$T/err")"; fi
fi

echo
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
