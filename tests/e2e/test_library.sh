#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# libqkv.so as a library people link: with libqkv-viz.so (the figures) it exports exactly the
# functions include/qkv/*.h declare (each marked QKV_API, each in one of the two), all named
# qkv_*; libqkv.so does not load libpng or FreeType; it has a SONAME and the OpenMP OpenBLAS's
# directory as RUNPATH; `make install` into a fresh prefix gives the versioned libraries, their
# links, the headers, qkv.pc and qkv-viz.pc, the man page and the bash completion; a small
# program built with `pkg-config --cflags --libs qkv` links against the shared library, runs,
# and cannot reach an internal function; one built with `pkg-config --libs qkv-viz` draws a
# figure.
# Usage: test_library.sh QKV_BINARY (the library beside it is tested; the sanitizer build has
# none, and then there is nothing to do).
set -u
QKV=$(realpath "$1")
DIR=$(dirname "$QKV")
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PYTHON=${PYTHON:-python3}
. "$(dirname "$0")/lib.sh" # $T, ok, bad, check, expect_fail

if [ ! -e "$DIR/libqkv.so" ]; then
  echo "no libqkv.so beside $QKV: nothing to test"
  echo; echo "0 passed, 0 failed"; exit 0
fi
LIB=$(realpath "$DIR/libqkv.so")
VERSION=$(sed -n 's/^#define QKV_VERSION "\(.*\)"/\1/p' "$ROOT/include/qkv/core.h")
MAJOR=${VERSION%%.*}
MA=$(gcc -print-multiarch)

# ---- what it exports
check "every function declared in qkv.h and its parts is marked QKV_API" \
  "$PYTHON" "$ROOT/tools/mark_exports.py" --check "$ROOT"/include/qkv.h "$ROOT"/include/qkv/*.h
VIZ=$(realpath "$DIR/libqkv-viz.so")
nm -D --defined-only "$LIB" | awk '{ print $3 }' | sort >"$T/exported_lib"
nm -D --defined-only "$VIZ" | awk '{ print $3 }' | sort >"$T/exported_viz"
sort "$T/exported_lib" "$T/exported_viz" >"$T/exported"
awk '/^QKV_API$/ { getline; print }' "$ROOT"/include/qkv/*.h |
  sed -E 's/^[^(]*[ *](qkv_[a-z0-9_]+)\(.*/\1/' | sort >"$T/declared"
others=$(grep -v '^qkv_' "$T/exported" | head -n 5 | tr '\n' ' ')
check "only qkv_ symbols exported ($(wc -l <"$T/exported") symbols${others:+; not: $others})" [ -z "$others" ]
check "the exports of libqkv.so and libqkv-viz.so are the $(wc -l <"$T/declared") functions qkv.h's parts declare, each once" \
  bash -c "diff '$T/declared' '$T/exported' >'$T/diff'"
[ -s "$T/diff" ] && head -n 5 "$T/diff"
check "the figures are libqkv-viz.so's ($(wc -l <"$T/exported_viz") functions, qkv_canvas_write_png among them)" \
  grep -qx qkv_canvas_write_png "$T/exported_viz"
check "libqkv.so does not load libpng or FreeType" \
  bash -c "! readelf -d '$LIB' | grep NEEDED | grep -q -E 'libpng|libfreetype'"

# ---- its dynamic section
check "$(basename "$LIB") (QKV_VERSION $VERSION)" [ "$(basename "$LIB")" = "libqkv.so.$VERSION" ]
check "SONAME libqkv.so.$MAJOR" bash -c "readelf -d '$LIB' | grep SONAME | grep -q -F '[libqkv.so.$MAJOR]'"
check "RUNPATH /usr/lib/$MA/openblas-openmp" \
  bash -c "readelf -d '$LIB' | grep RUNPATH | grep -q -F '[/usr/lib/$MA/openblas-openmp'"
check "libqkv.so.$MAJOR -> $(basename "$LIB")" [ "$(readlink "$DIR/libqkv.so.$MAJOR")" = "libqkv.so.$VERSION" ]

# ---- make install, then a program against the installed library
P=$T/prefix
if (cd "$ROOT" && env -u MAKEFLAGS -u MAKELEVEL -u MFLAGS -u MAKEOVERRIDES \
      make -s install PREFIX="$P" BUILD="$DIR") >"$T/install.out" 2>&1; then
  ok "make install PREFIX=$P"
else
  bad "make install: $(tail -n 3 "$T/install.out")"
fi
for f in lib/libqkv.so.$VERSION lib/libqkv.so.$MAJOR lib/libqkv.so lib/libqkv.a include/qkv.h include/qkv/core.h \
         lib/pkgconfig/qkv.pc lib/libqkv-viz.so.$VERSION lib/libqkv-viz.so lib/libqkv-viz.a \
         lib/pkgconfig/qkv-viz.pc bin/qkv share/man/man1/qkv.1 share/bash-completion/completions/qkv; do
  check "installed $f" [ -e "$P/$f" ]
done
check "installed links: libqkv.so -> libqkv.so.$MAJOR -> libqkv.so.$VERSION" \
  [ "$(readlink "$P/lib/libqkv.so")" = "libqkv.so.$MAJOR" \
    -a "$(readlink "$P/lib/libqkv.so.$MAJOR")" = "libqkv.so.$VERSION" ]

cat >"$T/prog.c" <<'EOF'
#include <stdio.h>

#include <qkv.h>

int main(void)
{
    qkv_error err;
    if (qkv_blas_check(&err)) return fprintf(stderr, "%s\n", err.msg), 1;
    /* y = x W^T + b for one row: (1 2) (3 4; 5 6)^T + (1 1) = (12 18) */
    float x[2] = {1, 2}, W[4] = {3, 4, 5, 6}, b[2] = {1, 1}, y[2];
    qkv_linear_forward(y, x, W, b, 1, 2, 2);
    printf("%s %g %g\n", qkv_status_name(QKV_OK), y[0], y[1]);
    return !(y[0] == 12 && y[1] == 18);
}
EOF
export PKG_CONFIG_PATH=$P/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
# shellcheck disable=SC2046 # pkg-config answers with several words
if cc -std=c11 -Wall -Wextra -o "$T/prog" "$T/prog.c" $(pkg-config --cflags --libs qkv) \
     -Wl,-rpath,"$P/lib" 2>"$T/cc.err"; then
  ok "a program builds with pkg-config --cflags --libs qkv"
  check "it needs libqkv.so.$MAJOR" \
    bash -c "readelf -d '$T/prog' | grep NEEDED | grep -q -F '[libqkv.so.$MAJOR]'"
  check "it loads the installed libqkv.so.$MAJOR" \
    bash -c "ldd '$T/prog' | grep -q -F '$P/lib/libqkv.so.$MAJOR'"
  check "it gets OpenBLAS's OpenMP build through libqkv.so's RUNPATH" \
    bash -c "ldd '$T/prog' | grep -q -F 'libopenblas.so.0 => /usr/lib/$MA/openblas-openmp/'"
  out=$("$T/prog" 2>&1)
  check "it runs: $out" [ "$out" = "ok 12 18" ]
else
  bad "a program against the installed library: $(head -c 300 "$T/cc.err")"
fi

# a figure, through libqkv-viz
cat >"$T/fig.c" <<'EOF'
#include <qkv.h>

int main(int argc, char **argv)
{
    (void)argc;
    qkv_canvas c;
    qkv_error err;
    if (qkv_canvas_init(&c, 8, 4, qkv_rgb_hex(0x336699), &err)) return 1;
    const int rc = qkv_canvas_write_png(&c, argv[1], &err) != QKV_OK;
    qkv_canvas_free(&c);
    return rc;
}
EOF
# shellcheck disable=SC2046
if cc -std=c11 -Wall -Wextra -o "$T/fig" "$T/fig.c" $(pkg-config --cflags --libs qkv-viz) \
     -Wl,-rpath,"$P/lib" 2>"$T/cc.err"; then
  ok "a program builds with pkg-config --cflags --libs qkv-viz"
  check "it writes a PNG" bash -c "'$T/fig' '$T/fig.png' && head -c 4 '$T/fig.png' | grep -q PNG"
else
  bad "a program against the installed libqkv-viz: $(head -c 300 "$T/cc.err")"
fi

# an internal function (declared here by hand) is not there to link
cat >"$T/internal.c" <<'EOF'
void linear_forward(void);
int main(void) { linear_forward(); return 0; }
EOF
# shellcheck disable=SC2046
if cc -o "$T/internal" "$T/internal.c" $(pkg-config --libs qkv) 2>"$T/cc.err"; then
  bad "a program links against the internal linear_forward"
elif grep -q "undefined reference to .linear_forward" "$T/cc.err"; then
  ok "the internal linear_forward cannot be linked"
else
  bad "linking linear_forward failed otherwise: $(head -c 300 "$T/cc.err")"
fi

echo
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
