#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The documentation as a user follows it: every sh/bash block of README.md and docs/**/*.md runs,
# page by page in a fresh directory, in order, each block as one `bash -e -o pipefail` script
# (files carry over, shell variables do not), with `qkv` on the PATH. docs/testing.md describes
# the rules for writers; tests/e2e/doc_blocks.py reads the pages.
#   - Blocks marked <!-- doc-test: skip (REASON) --> are listed with their reason, not run
#     (downloads, the set-up commands, several machines). What the downloads would give is there
#     instead: data/ holds the first lines of each corpus (from $QKV_DATA_DIR, default
#     ../shared/data) and opus-mt-de-en/ a small random-weight Marian model of the same layout
#     (from $QKV_PARITY_DIR).
#   - Blocks marked <!-- doc-test: file NAME[, as PATH] --> are written to NAME (and must equal
#     the program PATH from its first #include on).
#   - So that a page runs in seconds, the qkv on the PATH is a wrapper that cuts training short
#     (train: at most 2 epochs; train-lm: at most 10 steps, 5 of warm-up; vocabularies at most 500; time
#     budgets dropped), falls back to fp32 where the CPU lacks bf16 or int8, and moves serve's
#     ports to free ones; curl is a wrapper that follows the move and waits for the server;
#     make runs the repository's make for all/install/examples only.
#   - And every page's links and anchors resolve, every page is reachable from the README, the
#     README has at most 250 lines, and no page speaks of issues, sessions or ../shared.
# Usage: test_docs.sh QKV_BINARY. QKV_E2E_QUICK=1 (the sanitizer run): the checks of the pages
# only, no commands. QKV_DOCS="README.md docs/x.md": only those pages. A few minutes.
set -u
QKV=$(realpath "$1")
. "$(dirname "$0")/lib.sh" # $T, ok, bad, check, expect_fail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
HERE=$ROOT/tests/e2e
PY=python3
cd "$ROOT" || exit 1
if [ -n "${QKV_DOCS:-}" ]; then read -r -a PAGES <<<"$QKV_DOCS"
else mapfile -t PAGES < <({ echo README.md; echo THIRD_PARTY.md; find docs -name '*.md' | sort; }); fi

# ---- the pages
if [ -z "${QKV_DOCS:-}" ]; then
  out=$("$PY" "$HERE/doc_blocks.py" lint "$ROOT" "${PAGES[@]}")
  printf '%s\n' "$out"
  pass=$((pass + $(printf '%s\n' "$out" | grep -c '^ok '))); fail=$((fail + $(printf '%s\n' "$out" | grep -c '^FAIL ')))
fi
if [ -n "${QKV_E2E_QUICK:-}" ]; then
  echo "quick: the pages' commands are not run"; echo; echo "$pass passed, $fail failed"; [ $fail -eq 0 ]; exit
fi
DATA=${QKV_DATA_DIR:-$ROOT/../shared/data}
MARIAN=${QKV_PARITY_DIR:-build/parity}/marian_shared_swish
if [ ! -r "$DATA/fra-eng/fra.txt" ] || [ ! -r "$DATA/multi30k/train.de" ] ||
   [ ! -r "$DATA/tinyshakespeare/input.txt" ] || [ ! -r "$MARIAN/config.json" ]; then
  echo "skip the commands: no corpora in $DATA or no $MARIAN"
  echo; echo "$pass passed, $fail failed"; [ $fail -eq 0 ]; exit
fi

# ---- what a page starts with: small corpora, the Marian model, build/ with the wrapper as qkv
F=$T/fixture
mkdir -p "$F/data/fra-eng" "$F/data/multi30k" "$F/data/tinyshakespeare" "$F/build"
head -n 1500 "$DATA/fra-eng/fra.txt" >"$F/data/fra-eng/fra.txt"
for l in de en; do
  head -n 600 "$DATA/multi30k/train.$l" >"$F/data/multi30k/train.$l"
  head -n 50 "$DATA/multi30k/val.$l" >"$F/data/multi30k/val.$l"
  head -n 50 "$DATA/multi30k/test_2016_flickr.$l" >"$F/data/multi30k/test_2016_flickr.$l"
done
head -n 2000 "$DATA/tinyshakespeare/input.txt" >"$F/data/tinyshakespeare/input.txt"
cp -r "$MARIAN" "$F/opus-mt-de-en"
for e in "$ROOT"/build/*; do ln -s "$e" "$F/build/$(basename "$e")"; done
rm -f "$F/build/qkv"
for d in examples scripts tools include; do ln -s "$ROOT/$d" "$F/$d"; done

BIN=$T/bin
mkdir -p "$BIN"
OFFSET=$((20000 + RANDOM % 20000))   # serve's ports 8080.. become OFFSET + 8080..
cat >"$BIN/qkv" <<EOF
#!/usr/bin/env bash
# qkv, with training cut short (test_docs.sh)
QKV='$QKV' OFFSET=$OFFSET
EOF
cat >>"$BIN/qkv" <<'EOF'
cpu=$(grep -m1 '^flags' /proc/cpuinfo)
cmd=${1:-}; out=(); steps=0; warmup=0; i=0
args=("$@")
while [ $i -lt ${#args[@]} ]; do
  a=${args[$i]} v=${args[$((i + 1))]:-}
  case "$cmd $a" in
    "train --epochs") out+=("$a" "$((v < 2 ? v : 2))"); i=$((i + 2)); continue ;;
    "train-lm --steps") out+=("$a" "$((v < 10 ? v : 10))"); steps=1; i=$((i + 2)); continue ;;
    "train-lm --warmup") out+=("$a" "$((v < 5 ? v : 5))"); warmup=1; i=$((i + 2)); continue ;;
    "train --minutes"|"train-lm --minutes") i=$((i + 2)); continue ;;
    "train --vocab-size") out+=("$a" "$((v < 500 ? v : 500))"); i=$((i + 2)); continue ;;
    "serve --port") out+=("$a" "$((v + OFFSET))"); i=$((i + 2)); continue ;;
  esac
  case "$a $v" in
    "--precision bf16") [[ $cpu == *avx512_bf16* ]] || v=fp32; out+=("$a" "$v"); i=$((i + 2)); continue ;;
    "--precision int8") [[ $cpu == *avx512_vnni* ]] || v=fp32; out+=("$a" "$v"); i=$((i + 2)); continue ;;
  esac
  out+=("$a"); i=$((i + 1))
done
if [ "$cmd" = train-lm ] && [[ " $* " != *" --resume "* ]]; then
  [ $steps = 0 ] && out+=(--steps 10)
  [ $warmup = 0 ] && out+=(--warmup 5)
fi
exec "$QKV" "${out[@]}"
EOF
cat >"$BIN/curl" <<EOF
#!/usr/bin/env bash
# curl to serve's moved ports, waiting for the server to listen (test_docs.sh)
OFFSET=$OFFSET REAL='$(command -v curl)'
EOF
cat >>"$BIN/curl" <<'EOF'
out=()
for a; do
  if [[ $a =~ ^(https?://)?(localhost|127\.0\.0\.1):(80[0-9][0-9])(/.*)?$ ]]; then
    a="${BASH_REMATCH[1]}${BASH_REMATCH[2]}:$((BASH_REMATCH[3] + OFFSET))${BASH_REMATCH[4]}"
  fi
  out+=("$a")
done
exec "$REAL" --retry 60 --retry-connrefused --retry-delay 1 "${out[@]}"
EOF
cat >"$BIN/make" <<EOF
#!/usr/bin/env bash
# the repository's make, for all, install and examples only (test_docs.sh)
ROOT='$ROOT' REAL='$(command -v make)'
EOF
cat >>"$BIN/make" <<'EOF'
for a; do
  case $a in -j*|*=*) ;; all|install|examples) ;;
    *) echo "make $a: not something the doc test runs (mark the block doc-test: skip)" >&2; exit 1 ;;
  esac
done
exec env -u MAKEFLAGS -u MAKELEVEL -u MFLAGS "$REAL" --no-print-directory -C "$ROOT" "$@"
EOF
chmod +x "$BIN/qkv" "$BIN/curl" "$BIN/make"
ln -s "$BIN/qkv" "$F/build/qkv"

# ---- run each page
skipped=0
for page in "${PAGES[@]}"; do
  name=$(printf '%s' "$page" | tr '/.' '__')
  S=$T/pages/$name
  mkdir -p "$T/pages" && cp -a "$F" "$S" && mkdir -p "$S/home"
  manifest=$("$PY" "$HERE/doc_blocks.py" extract "$page" "$T/blocks/$name") ||
    { bad "$page: cannot read its blocks"; continue; }
  [ -n "$manifest" ] || continue
  while IFS=$'\t' read -r kind line a b c; do
    where="$page:$line"
    case $kind in
      skip) skipped=$((skipped + 1)); echo "skip $where: $a" ;;
      file)
        cp "$b" "$S/$a"
        if [ -n "$c" ]; then
          if cmp -s <(sed -n '/^#include/,$p' "$ROOT/$c") <(sed -n '/^#include/,$p' "$b"); then
            ok "$where: $a is $c"
          else bad "$where: $a differs from $c (from its first #include on)"; fi
        fi ;;
      run)
        {
          echo "trap 'rc=\$?; kill \$(jobs -p) 2>/dev/null || true; wait; exit \$rc' EXIT"
          cat "$a"
        } >"$a.run"
        t0=$SECONDS
        if (cd "$S" && env HOME="$S/home" PATH="$BIN:$PATH" OMPI_ALLOW_RUN_AS_ROOT=1 \
              OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
              timeout 600 bash -e -o pipefail "$a.run") >"$a.out" 2>&1 </dev/null; then
          ok "$where ($(grep -c . "$a") lines, $((SECONDS - t0)) s)"
        else
          bad "$where: exit $? after: $(grep -v '^$' "$a.out" | tail -n 8 | cut -c1-200 | tr '\n' '|')"
        fi ;;
    esac
  done <<<"$manifest"
done
echo "$skipped blocks not run (the skip lines above, each with its reason)"

echo
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
