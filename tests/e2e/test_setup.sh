#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The set-up on a fresh machine: the README's `make demo` and `make test` must work on their first
# run, when scripts/install-deps.sh installs the packages during that very run, so the compiler
# must get pkg-config's flags as they are after the installation, not as they were when make
# read the Makefile. Simulated without touching the machine, in copies of the tree:
#   - pkg-config answers nothing (exit 1) until a stand-in for scripts/install-deps.sh has run
#     (it leaves a marker file); after that it is the real pkg-config;
#   - the compiler is a wrapper that records every command; it really compiles the sources that
#     include cJSON.h, png.h and FreeType's headers, and fakes the rest (empty objects, and for
#     each link a stand-in program that records that it ran), so a full run takes seconds.
# Then: make demo (also with -j2) and make test succeed; the stand-in install ran before the
# first compiler command; every compile has pkg-config's cflags and every link its libs; the
# real compiles succeeded; the demo ran. And a plain `make` without the packages stops with a
# message that says how to install them.
# Usage: test_setup.sh [QKV_BINARY] (not used). QKV_SETUP_SRC=DIR checks the Makefile of another
# tree, e.g. an older commit from `git archive` (the Makefile before 80f9f09 fails here).
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SRC=${QKV_SETUP_SRC:-$ROOT}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
pass=0; fail=0
ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; }

REAL_PC=$(command -v pkg-config) || { echo "FAIL no pkg-config on this machine"; echo "0 passed, 1 failed"; exit 1; }
REAL_CC=$(command -v cc)
PKGS="libcjson libpng freetype2"   # openblas's flags depend on which of its builds is chosen
REAL_SOURCES="src/core/json_fields.c src/viz/png.c src/viz/text.c"
want_cflags=$("$REAL_PC" --cflags $PKGS)
want_libs="$("$REAL_PC" --libs libcjson) -lopenblas" # every link but libqkv-viz.so's
viz_libs=$("$REAL_PC" --libs libpng freetype2)       # every link of the figures, and only those

# ---- the stand-ins
mkdir -p "$T/bin"
cat >"$T/bin/pkg-config" <<EOF
#!/bin/sh
# A machine without the packages until install-deps.sh has run.
[ -e "\$QKV_SETUP_MARK" ] && exec "$REAL_PC" "\$@"
exit 1
EOF
cat >"$T/bin/cc" <<'EOF'
#!/usr/bin/env bash
# Records the command line; compiles for real the sources in QKV_SETUP_REAL (when called as cc),
# fakes every other output.
printf 'CMD %s \n' "$*" >>"$QKV_SETUP_LOG"
out=; src=; compile=0; prev=
for a in "$@"; do
  [ "$prev" = -o ] && out=$a
  [ "$a" = -c ] && compile=1
  case $a in *.c) src=$a ;; esac
  prev=$a
done
[ -z "$out" ] && exec "$QKV_SETUP_REAL_CC" "$@"   # a question such as -print-multiarch
if [ $compile = 1 ]; then
  if [ "$(basename "$0")" = cc ] && [[ " $QKV_SETUP_REAL " == *" $src "* ]]; then
    "$QKV_SETUP_REAL_CC" "$@"; rc=$?
    echo "REAL $src $rc" >>"$QKV_SETUP_LOG"
    exit $rc
  fi
  : >"$out"
  exit 0
fi
printf '#!/bin/sh\necho "RAN $0 $*" >>"%s"\n' "$QKV_SETUP_LOG" >"$out"
chmod +x "$out"
EOF
chmod +x "$T/bin/pkg-config" "$T/bin/cc"
ln -s cc "$T/bin/clang"

# A fresh copy of the tree (what git tracks or would track; the whole directory when SRC is not a
# git checkout), with scripts/install-deps.sh and tests/run.sh replaced by stand-ins.
copy_tree() {
  local dst=$1
  mkdir -p "$dst"
  if git -C "$SRC" rev-parse --show-toplevel >/dev/null 2>&1; then
    (cd "$SRC" && git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf -) |
      tar -xf - -C "$dst"
  else
    (cd "$SRC" && tar --exclude=./build --exclude=./build-asan --exclude=./build-fuzz -cf - .) |
      tar -xf - -C "$dst"
  fi
  printf '#!/bin/sh\necho DEPS >>"$QKV_SETUP_LOG"\ntouch "$QKV_SETUP_MARK"\n' \
    >"$dst/scripts/install-deps.sh"
  printf '#!/bin/sh\necho "RAN tests/run.sh" >>"$QKV_SETUP_LOG"\necho "tests: 0 passed, 0 failed"\n' \
    >"$dst/tests/run.sh"
  chmod +x "$dst/scripts/install-deps.sh" "$dst/tests/run.sh"
}

# run_make NAME MAKE-ARGS...: make in a fresh copy on a machine without the packages; the
# commands are in $T/NAME.log, make's output in $T/NAME.out, its status in $rc.
run_make() {
  local name=$1; shift
  copy_tree "$T/$name"
  : >"$T/$name.log"
  (cd "$T/$name" && env -u MAKEFLAGS -u MAKELEVEL -u MFLAGS -u MAKEOVERRIDES \
     PATH="$T/bin:$PATH" QKV_SETUP_MARK="$T/$name.installed" QKV_SETUP_LOG="$T/$name.log" \
     QKV_SETUP_REAL="$REAL_SOURCES" QKV_SETUP_REAL_CC="$REAL_CC" \
     make "$@" CC="$T/bin/cc" FUZZ_CC="$T/bin/clang" PY=true) >"$T/$name.out" 2>&1
  rc=$?
}

# check_first_run NAME TARGET: the assertions about a run of `make TARGET`
check_first_run() {
  local name=$1 target=$2 log=$T/$1.log
  if [ $rc -eq 0 ]; then ok "$name: make $target succeeds on its first run"
  else bad "$name: make $target failed ($rc): $(grep -m2 -E 'error:|\*\*\*' "$T/$name.out" | tr '\n' ' ')"; fi
  if [ "$(head -n 1 "$log")" = DEPS ]; then ok "$name: install-deps.sh ran before the first compiler command"
  else bad "$name: the compiler ran before install-deps.sh: $(head -n 1 "$log" | cut -c1-160)"; fi
  local compiles links missing=0 m
  compiles=$(grep '^CMD .* -c ' "$log" | grep -v -- '-print-')
  links=$(grep '^CMD ' "$log" | grep -v -- ' -c ' | grep -v -- '-print-')
  if [ -z "$compiles" ]; then bad "$name: no compile was recorded"; missing=1
  else
    for f in $want_cflags; do
      m=$(printf '%s\n' "$compiles" | grep -c -v -F -- " $f ")
      [ "$m" -eq 0 ] || { bad "$name: $m of $(printf '%s\n' "$compiles" | wc -l) compiles lack $f"; missing=1; }
    done
  fi
  if [ -z "$links" ]; then bad "$name: no link was recorded"; missing=1
  else
    # libqkv-viz.so links only the figures' packages; what links libqkv-viz links them too;
    # libqkv.so never does
    local core_links viz_links lib_links
    core_links=$(printf '%s\n' "$links" | grep -v -- '-o [^ ]*libqkv-viz\.so')
    viz_links=$(printf '%s\n' "$links" | grep -F 'libqkv-viz')
    lib_links=$(printf '%s\n' "$links" | grep -- '-o [^ ]*/libqkv\.so\.')
    for f in $want_libs; do
      m=$(printf '%s\n' "$core_links" | grep -c -v -F -- " $f ")
      [ "$m" -eq 0 ] || { bad "$name: $m of $(printf '%s\n' "$core_links" | wc -l) links lack $f"; missing=1; }
    done
    for f in $viz_libs; do
      m=$(printf '%s\n' "$viz_links" | grep -c -v -F -- " $f ")
      [ "$m" -eq 0 ] || { bad "$name: $m of $(printf '%s\n' "$viz_links" | wc -l) links of the figures lack $f"; missing=1; }
      if [ -n "$lib_links" ] && printf '%s\n' "$lib_links" | grep -q -F -- " $f "; then
        bad "$name: libqkv.so links $f"; missing=1
      fi
    done
    [ -n "$lib_links" ] || { bad "$name: libqkv.so was not linked"; missing=1; }
  fi
  [ $missing -eq 0 ] && ok "$name: all $(printf '%s\n' "$compiles" | wc -l) compiles have pkg-config's cflags, all $(printf '%s\n' "$links" | wc -l) links its libs"
  local s
  for s in $REAL_SOURCES; do
    if grep -q "^REAL $s 0$" "$log" && file -L "$T/$name/build/${s%.c}.o" | grep -q 'ELF.*relocatable'; then
      ok "$name: $s really compiled"
    else
      bad "$name: $s: $(grep -q "^REAL $s " "$log" && echo "the compiler failed" || echo "never compiled")"
    fi
  done
}

run_make demo demo
check_first_run demo demo
if grep -q '^RAN \./build/qkv demo' "$T/demo.log"; then ok "demo: the demo ran"; else bad "demo: the demo did not run"; fi

run_make demo-j2 -j2 demo
check_first_run demo-j2 "-j2 demo"

run_make test test
check_first_run test test
n=$(grep -c '^RAN tests/run.sh' "$T/test.log")
if [ "$n" -eq 2 ]; then ok "test: the unit and the sanitizer test runs started"
else bad "test: tests/run.sh ran $n times, not 2"; fi
if grep -q '^RAN build-fuzz/fuzz_' "$T/test.log"; then ok "test: the fuzz regressions ran"
else bad "test: no fuzz harness ran"; fi

# Without the packages and without deps, a plain make says what to do.
run_make no-deps all
if [ $rc -ne 0 ] && grep -q 'make deps' "$T/no-deps.out"; then ok "make without the packages asks for make deps"
else bad "make without the packages (status $rc): $(tail -n 2 "$T/no-deps.out" | tr '\n' ' ')"; fi

echo
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
