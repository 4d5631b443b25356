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
# Then: make demo (also with -j2), make install and make test succeed; the stand-in install ran
# before the first compiler command, asked for the build packages only (demo, install) or for the
# test tools too (test); every compile has pkg-config's cflags and every link its libs; the real
# compiles succeeded; the demo ran; the install wrote its files. And a plain `make` without the
# packages stops with a message that says how to install them.
# Then scripts/install-deps.sh itself, on a machine played by stand-ins for dpkg-query, apt-get,
# dpkg-deb, gcc and Python (tests/e2e/setup_standins/): without --test it installs the build and
# runtime packages and nothing else; with --test it adds the test packages, makes build/venv with
# the system's site packages and pip-installs the Python tools into it, and unpacks OpenBLAS's
# pthreads build into build/deps; run again, it does nothing; it never touches the alternatives
# or the system's Python. And docs/install.md names every package the script installs.
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
check() { local name=$1; shift; if "$@"; then ok "$name"; else bad "$name"; fi; }

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
ln -s cc "$T/bin/clang++"

# A fresh copy of the tree (what git tracks or would track; the whole directory when SRC is not a
# git checkout), with scripts/install-deps.sh, tests/run.sh and tests/python.sh replaced by
# stand-ins.
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
  printf '#!/bin/sh\necho "DEPS${1:+ $1}" >>"$QKV_SETUP_LOG"\ntouch "$QKV_SETUP_MARK"\n' \
    >"$dst/scripts/install-deps.sh"
  printf '#!/bin/sh\necho "RAN tests/run.sh" >>"$QKV_SETUP_LOG"\necho "tests: 0 passed, 0 failed"\n' \
    >"$dst/tests/run.sh"
  printf '#!/bin/sh\necho "RAN tests/python.sh" >>"$QKV_SETUP_LOG"\necho "tests: 0 passed, 0 failed"\n' \
    >"$dst/tests/python.sh"
  chmod +x "$dst/scripts/install-deps.sh" "$dst/tests/run.sh" "$dst/tests/python.sh"
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
     make "$@" CC="$T/bin/cc" FUZZ_CC="$T/bin/clang" FUZZ_CXX="$T/bin/clang++" PY=true) >"$T/$name.out" 2>&1
  rc=$?
}

# check_first_run NAME TARGET [DEPS_ARG]: the assertions about a run of `make TARGET`, whose
# install-deps.sh ran once, with DEPS_ARG (none: the build and runtime packages only)
check_first_run() {
  local name=$1 target=$2 log=$T/$1.log want="DEPS${3:+ $3}" n
  if [ $rc -eq 0 ]; then ok "$name: make $target succeeds on its first run"
  else bad "$name: make $target failed ($rc): $(grep -m2 -E 'error:|\*\*\*' "$T/$name.out" | tr '\n' ' ')"; fi
  if [ "$(head -n 1 "$log")" = "$want" ]; then
    ok "$name: install-deps.sh${3:+ $3} ran before the first compiler command"
  else bad "$name: the first command was not install-deps.sh${3:+ $3}: $(head -n 1 "$log" | cut -c1-160)"; fi
  n=$(grep -c '^DEPS' "$log")
  [ "$n" -eq 1 ] || bad "$name: install-deps.sh ran $n times"
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

run_make install install PREFIX="$T/prefix"
check_first_run install install
if [ -x "$T/prefix/bin/qkv" ] && [ -f "$T/prefix/include/qkv.h" ] && [ -f "$T/prefix/lib/libqkv.a" ] &&
   grep -q "^prefix=$T/prefix" "$T/prefix/lib/pkgconfig/qkv.pc"; then
  ok "install: qkv, qkv.h, libqkv.a and qkv.pc are under PREFIX"
else bad "install: files missing under PREFIX: $(cd "$T/prefix" 2>/dev/null && find . | head -20 | tr '\n' ' ')"; fi

run_make test test
check_first_run test test --test
n=$(grep -c '^RAN tests/run.sh' "$T/test.log")
if [ "$n" -eq 2 ]; then ok "test: the unit and the sanitizer test runs started"
else bad "test: tests/run.sh ran $n times, not 2"; fi
if grep -q '^RAN tests/python.sh' "$T/test.log"; then ok "test: the Python package's tests started"
else bad "test: tests/python.sh did not run"; fi
if grep -q '^RAN build-fuzz/fuzz_' "$T/test.log"; then ok "test: the fuzz regressions ran"
else bad "test: no fuzz harness ran"; fi

# Without the packages and without deps, a plain make says what to do.
run_make no-deps all
if [ $rc -ne 0 ] && grep -q 'make deps' "$T/no-deps.out"; then ok "make without the packages asks for make deps"
else bad "make without the packages (status $rc): $(tail -n 2 "$T/no-deps.out" | tr '\n' ' ')"; fi

# ---- scripts/install-deps.sh on a machine of stand-ins
D=$T/deps
mkdir -p "$D/tree/scripts"
cp "$SRC/scripts/install-deps.sh" "$D/tree/scripts/"
cp -r "$ROOT/tests/e2e/setup_standins" "$D/bin"
: >"$D/installed"
# run_deps NAME ARGS...: install-deps.sh ARGS in $D/tree on the stand-in machine; its commands
# are in $D/log, its output in $D/NAME.out, its status in $rc
run_deps() {
  local name=$1; shift
  : >"$D/log"
  (cd "$D/tree" && PATH="$D/bin:$PATH" QKV_STANDIN_DIR="$D" PYTHON="$D/bin/system-python" \
     scripts/install-deps.sh "$@") >"$D/$name.out" 2>&1
  rc=$?
}
runtime_pkgs="libopenblas-openmp-dev libcjson-dev libpng-dev libfreetype-dev fonts-dejavu-core
  libsentencepiece-dev libutf8proc-dev libmicrohttpd-dev libopenmpi-dev"
test_pkgs="libcmocka-dev python3-torch clang wrk valgrind python3-venv sentencepiece"
# installed LIST / not_installed LIST: whether apt-get was asked to install each package
installed() { local p; for p in $1; do grep -qE "^apt-get install.* $p( |$)" "$D/log" || { echo "$p"; return 1; }; done; }
not_installed() { local p; for p in $1; do ! grep -qE "^apt-get install.* $p( |$)" "$D/log" || { echo "$p"; return 1; }; done; }

run_deps plain
[ $rc -eq 0 ] || bad "install-deps.sh failed ($rc): $(tail -n 3 "$D/plain.out" | tr '\n' ' ')"
if p=$(installed "$runtime_pkgs"); then ok "install-deps.sh installs the build and runtime packages"
else bad "install-deps.sh does not install $p"; fi
if p=$(not_installed "$test_pkgs"); then ok "install-deps.sh installs no test package"
else bad "install-deps.sh installs $p, a test package"; fi
if grep -qE '^(system-python|venv-python|pip|apt-get download)' "$D/log" || [ -e "$D/tree/build" ]; then
  bad "install-deps.sh made a venv, ran pip or unpacked a package: $(grep -E 'python|pip|download' "$D/log" | head -n 3 | tr '\n' ' ')"
else ok "install-deps.sh makes no venv, installs no Python package, unpacks nothing"; fi

run_deps test --test
[ $rc -eq 0 ] || bad "install-deps.sh --test failed ($rc): $(tail -n 3 "$D/test.out" | tr '\n' ' ')"
if p=$(installed "$test_pkgs"); then ok "install-deps.sh --test installs the test packages"
else bad "install-deps.sh --test does not install $p"; fi
check "install-deps.sh --test makes build/venv with the system's site packages" \
  grep -qx "system-python -m venv --system-site-packages build/venv" "$D/log"
check "... and pip-installs transformers, sentencepiece, sacrebleu and safetensors into it" \
  bash -c "grep '^venv-python -m pip install' '$D/log' | grep transformers== | grep sentencepiece | grep sacrebleu | grep -q safetensors"
check "... and unpacks OpenBLAS's pthreads build into build/deps" \
  test -e "$D/tree/build/deps/openblas-pthread/usr/lib/qkv-test-arch/openblas-pthread/libopenblas.so.0"
if grep -qE '^(update-alternatives|pip|pip3) |^system-python -m pip' "$D/log"; then
  bad "install-deps.sh --test touched the alternatives or the system's pip: $(grep -E '^(update-alternatives|pip|system-python -m pip)' "$D/log" | head -n 2 | tr '\n' ' ')"
else ok "install-deps.sh --test leaves the alternatives and the system's Python alone"; fi
run_deps again --test
if [ $rc -eq 0 ] && [ ! -s "$D/log" ]; then ok "install-deps.sh --test run again does nothing"
else bad "install-deps.sh --test run again ($rc): $(head -n 3 "$D/log" | tr '\n' ' ')"; fi

# docs/install.md lists every package the script installs, in the table of its set
pkgs_of() { sed -n "/^$1=(/,/^)/p" "$SRC/scripts/install-deps.sh" | sed 's/#.*//; s/^[a-z_]*=(//; s/)//' | tr -s ' \n' '\n' | grep -v '^$'; }
missing=
for p in $(pkgs_of runtime) $(pkgs_of test_only); do
  grep -q -F "\`$p\`" "$SRC/docs/install.md" || missing="$missing $p"
done
if [ -z "$missing" ]; then ok "docs/install.md names every package install-deps.sh installs"
else bad "docs/install.md does not name:$missing"; fi

echo
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
