#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# scripts/get-data.sh, the download the docs tell users to run, without the network: a stand-in
# curl serves each URL from the corpora in $QKV_DATA_DIR (default ../shared/data), packed as its
# source publishes it (d2l's zip, Multi30k's .gz files, char-rnn's plain text), and records the
# URLs asked for. Checks: the URLs are the published ones (pinned commits); every file lands in
# data/NAME with the published SHA-256; a second run downloads nothing; a download that differs
# from the published file is an error and is not left behind; --dir and the corpus names.
# Usage: test_get_data.sh [QKV_BINARY] (not used). A few seconds.
set -u
. "$(dirname "$0")/lib.sh" # $T, ok, bad, check, expect_fail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SRC=$(cd "${QKV_DATA_DIR:-$ROOT/../shared/data}" 2>/dev/null && pwd)
if [ -z "$SRC" ] || [ ! -r "$SRC/fra-eng/fra.txt" ] || [ ! -r "$SRC/multi30k/train.de" ] ||
   [ ! -r "$SRC/tinyshakespeare/input.txt" ]; then
  echo "skip: the corpora are not in \$QKV_DATA_DIR"; echo "$pass passed, $fail failed"; exit 0
fi

mkdir -p "$T/bin" "$T/home"
cat >"$T/bin/curl" <<'CURL'
#!/usr/bin/env bash
# curl ... -o FILE URL, served from $STANDIN_SRC; STANDIN_CORRUPT=1 appends a byte
out=; url=
while [ $# -gt 0 ]; do case $1 in -o) out=$2; shift 2 ;; -*) shift ;; *) url=$1; shift ;; esac; done
echo "$url" >>"$STANDIN_LOG"
case $url in
  */fra-eng.zip)
    python3 - "$STANDIN_SRC" "$out" <<'PY' || exit 22
import sys, zipfile
src, out = sys.argv[1:]
with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
    for f in ("fra.txt", "_about.txt"):
        z.write(f"{src}/fra-eng/{f}", f"fra-eng/{f}")
PY
    ;;
  */data/task1/raw/*.gz) f=$(basename "$url" .gz); gzip -c "$STANDIN_SRC/multi30k/$f" >"$out" || exit 22 ;;
  */data/tinyshakespeare/input.txt) cp "$STANDIN_SRC/tinyshakespeare/input.txt" "$out" || exit 22 ;;
  *) echo "curl: (22) The requested URL returned error: 404" >&2; exit 22 ;;
esac
[ -n "${STANDIN_CORRUPT:-}" ] && [ "${url##*.}" = txt ] && printf x >>"$out"
exit 0
CURL
chmod +x "$T/bin/curl"
# get NAME ARGS...: scripts/get-data.sh ARGS in $T/home; URLs in $T/NAME.urls, output $T/NAME.out
get() {
  local name=$1; shift
  : >"$T/$name.urls"
  (cd "$T/home" && PATH="$T/bin:$PATH" STANDIN_SRC="$SRC" STANDIN_LOG="$T/$name.urls" \
     "$ROOT/scripts/get-data.sh" "$@") >"$T/$name.out" 2>&1
  rc=$?
}
same() { cmp -s "$SRC/$1" "$T/home/${2:-data}/$1"; }

get all
check "get-data.sh succeeds" [ $rc -eq 0 ]
M=https://raw.githubusercontent.com/multi30k/dataset/a3d2e0d26b56f3846f66a952536ffed4e401d05a/data/task1/raw
cat >"$T/want.urls" <<EOF
http://d2l-data.s3-accelerate.amazonaws.com/fra-eng.zip
$M/train.de.gz
$M/train.en.gz
$M/val.de.gz
$M/val.en.gz
$M/test_2016_flickr.de.gz
$M/test_2016_flickr.en.gz
https://raw.githubusercontent.com/karpathy/char-rnn/6f9487a6fe5b420b7ca9afb0d7c078e37c1d1b4e/data/tinyshakespeare/input.txt
EOF
if diff "$T/want.urls" "$T/all.urls" >"$T/diff"; then ok "it asks for the published URLs"
else bad "other URLs: $(tr '\n' ' ' <"$T/diff")"; fi
check "data/fra-eng/fra.txt and _about.txt" bash -c "$(declare -f same); SRC='$SRC' T='$T'; same fra-eng/fra.txt && same fra-eng/_about.txt"
check "data/multi30k: the six files" bash -c "$(declare -f same); SRC='$SRC' T='$T'; for f in train val test_2016_flickr; do same multi30k/\$f.de && same multi30k/\$f.en || exit 1; done"
check "data/tinyshakespeare/input.txt" bash -c "$(declare -f same); SRC='$SRC' T='$T'; same tinyshakespeare/input.txt"
check "no archive is left behind" bash -c "! find '$T/home/data' -name '*.zip' -o -name '*.gz' | grep -q ."

get again
check "run again, it downloads nothing" bash -c "[ $rc -eq 0 ] && [ ! -s '$T/again.urls' ]"

rm -f "$T/home/data/tinyshakespeare/input.txt"
get one tinyshakespeare
check "a corpus by name: only its file is fetched" \
  bash -c "[ $rc -eq 0 ] && [ \$(wc -l <'$T/one.urls') -eq 1 ] && grep -q input.txt '$T/one.urls'"

get dir --dir "$T/elsewhere" multi30k
check "--dir DIR: the files are in DIR/multi30k" \
  bash -c "[ $rc -eq 0 ] && cmp -s '$SRC/multi30k/val.en' '$T/elsewhere/multi30k/val.en'"

rm -f "$T/home/data/tinyshakespeare/input.txt"
: >"$T/bad.urls"
(cd "$T/home" && PATH="$T/bin:$PATH" STANDIN_SRC="$SRC" STANDIN_LOG="$T/bad.urls" STANDIN_CORRUPT=1 \
   "$ROOT/scripts/get-data.sh" tinyshakespeare) >"$T/bad.out" 2>&1
rc=$?
check "a download that is not the published file fails, naming the file" \
  bash -c "[ $rc -ne 0 ] && grep -q 'input.txt does not have the published SHA-256' '$T/bad.out'"
check "... and is not left behind" test ! -e "$T/home/data/tinyshakespeare/input.txt"

expect_fail "an unknown corpus" "unknown corpus or option 'wmt14'" "$ROOT/scripts/get-data.sh" wmt14

echo
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
