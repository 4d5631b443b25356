#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Downloads the public corpora that the examples and docs/ use, into DIR/NAME (default data/),
# and checks every file against its SHA-256; a file already there with the right checksum is not
# downloaded again. docs/data.md says where each comes from and under which terms.
#   scripts/get-data.sh [--dir DIR] [fra-eng] [multi30k] [tinyshakespeare]   (none named: all)
#   fra-eng          d2l's English-French pairs from Tatoeba (fra.txt, 11.7 MB; CC-BY 2.0 FR)
#   multi30k         Multi30k German-English, raw text (train, val, test_2016_flickr; 4.2 MB)
#   tinyshakespeare  Tiny Shakespeare (input.txt, 1.1 MB; public domain)
# Needs curl (or wget), gzip, and unzip or python3.
set -euo pipefail
DIR=data
names=()
while [ $# -gt 0 ]; do
  case $1 in
    --dir) DIR=${2:?--dir needs a directory}; shift 2 ;;
    -h|--help) sed -n '3,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    fra-eng|multi30k|tinyshakespeare) names+=("$1"); shift ;;
    *) echo "get-data: unknown corpus or option '$1' (fra-eng, multi30k, tinyshakespeare, --dir DIR)" >&2
       exit 2 ;;
  esac
done
[ ${#names[@]} -gt 0 ] || names=(fra-eng multi30k tinyshakespeare)

D2L=http://d2l-data.s3-accelerate.amazonaws.com
M30K=https://raw.githubusercontent.com/multi30k/dataset/a3d2e0d26b56f3846f66a952536ffed4e401d05a/data/task1/raw
CHARRNN=https://raw.githubusercontent.com/karpathy/char-rnn/6f9487a6fe5b420b7ca9afb0d7c078e37c1d1b4e/data/tinyshakespeare

fetch() {  # fetch URL FILE
  if command -v curl >/dev/null; then curl -fsSL --retry 3 -o "$2" "$1"
  elif command -v wget >/dev/null; then wget -q -O "$2" "$1"
  else echo "get-data: needs curl or wget" >&2; return 1; fi
}
good() { [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]; }
check() {  # check FILE SHA256: the file as published, or an error naming it
  good "$1" "$2" && return 0
  echo "get-data: $1 does not have the published SHA-256 ($2); removed" >&2
  rm -f "$1"; return 1
}
unzip_to() {  # unzip_to ZIP DIR
  if command -v unzip >/dev/null; then unzip -q -o "$1" -d "$2"
  else python3 -m zipfile -e "$1" "$2"; fi
}

for name in "${names[@]}"; do
  mkdir -p "$DIR/$name"
  case $name in
    fra-eng)
      f=$DIR/fra-eng/fra.txt sum=0bb85dbaa1c896844649094d7eaf2e34bee34e84fe362b26ce7e8f2e12aae104
      if ! good "$f" $sum; then
        echo "get-data: $D2L/fra-eng.zip -> $f" >&2
        fetch "$D2L/fra-eng.zip" "$DIR/fra-eng.zip"
        unzip_to "$DIR/fra-eng.zip" "$DIR"   # the zip holds fra-eng/fra.txt and fra-eng/_about.txt
        rm -f "$DIR/fra-eng.zip"
        check "$f" $sum
      fi ;;
    multi30k)
      while read -r file sum; do
        f=$DIR/multi30k/$file
        good "$f" "$sum" && continue
        echo "get-data: $M30K/$file.gz -> $f" >&2
        fetch "$M30K/$file.gz" "$f.gz"
        gzip -dc "$f.gz" >"$f" && rm -f "$f.gz"
        check "$f" "$sum"
      done <<'SUMS'
train.de 2c2b73fd2b548fbcde3a875e0a78d6ee94d498bfdee6bd3eae3945779e9ddf72
train.en 460a15fbd157e34a7a9957ee388c1ca247fe47af3ef25fb50442af6c274e0fc6
val.de 660e09eb7e1da2f856ea13ee5ad3cf6d36b3d5b0b733c857e94c5747a3dfc660
val.en 1f2a23d992769b5b3d209b0a10dd0b77c08cceb1f20dfb97ed0aafa49d107227
test_2016_flickr.de 4be6b5b3236b79c25475c6bb829800a7ce559e9ba7a1f6c2394fe4d40be46d16
test_2016_flickr.en 399a4382932c1aadd3ceb9bef1008d388a64c76d4ae4e9d4728c6f4301cac182
SUMS
      ;;
    tinyshakespeare)
      f=$DIR/tinyshakespeare/input.txt sum=86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed
      if ! good "$f" $sum; then
        echo "get-data: $CHARRNN/input.txt -> $f" >&2
        fetch "$CHARRNN/input.txt" "$f"
        check "$f" $sum
      fi ;;
  esac
  echo "get-data: $DIR/$name ready" >&2
done
