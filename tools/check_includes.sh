#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Checks the library's include graph against the order of its folders (README, "Architecture"):
#
#   core  text  ops/cpu  ops/cuda  backend  layers  models  io  training  inference  viz  cli
#
# A file may include a header of its own folder or of a folder before it, never after it: the
# kernels (ops/) know nothing of the backend table that points at them, the table nothing of the
# layers that call through it, the models nothing of decoding or training. Two rules more:
#   - inference/ reaches a model through its decoder interface (models/decoder.h), never
#     through a model's internals (models/model.h, models/*_internal.h, ...);
#   - cli/ is a client of the library like any other: public headers (qkv.h, qkv/*.h) and
#     its own, nothing of src/.
# Prints one line per offending include (file:line: the include and why) and exits 1 if any.
# Usage: tools/check_includes.sh [SRC_DIR]   (default: src)
set -euo pipefail
src=${1:-$(cd "$(dirname "$0")/.." && pwd)/src}
order=(core text ops/cpu ops/cuda backend layers models io training inference viz cli)

rank_of() { # the folder's place in the order, or -1 for a folder not in it
  local i
  for i in "${!order[@]}"; do [ "${order[$i]}" = "$1" ] && { echo "$i"; return; }; done
  echo -1
}

# The folder of a path under src/: ops/cpu (ops/cuda) is one folder, everything else its first
# part.
folder_of() {
  case "$1" in
    ops/*/*) echo "${1%/*}" ;;
    */*) echo "${1%%/*}" ;;
    *) echo "" ;;
  esac
}

bad=0
report() { echo "$1: $2"; bad=$((bad + 1)); }

while IFS= read -r file; do
  rel=${file#"$src"/}
  own=$(folder_of "$rel")
  own_rank=$(rank_of "$own")
  if [ "$own_rank" -lt 0 ]; then
    report "$rel" "folder '$own' is not in the order (tools/check_includes.sh)"
    continue
  fi
  while IFS=: read -r line inc; do
    # inc: the quoted path of an #include "..." (system headers <...> are not checked)
    case "$inc" in
      qkv.h|qkv/*) continue ;; # the public API: anyone may include it
    esac
    dep=$(folder_of "$inc")
    if [ "$own" = cli ]; then
      [ "$dep" = cli ] || report "$rel:$line" "#include \"$inc\": cli/ uses public headers only"
      continue
    fi
    if [ -z "$dep" ]; then
      report "$rel:$line" "#include \"$inc\": not a path under src/ (folder/header.h)"
      continue
    fi
    dep_rank=$(rank_of "$dep")
    if [ "$dep_rank" -lt 0 ]; then
      report "$rel:$line" "#include \"$inc\": folder '$dep' is not in the order"
    elif [ "$dep_rank" -gt "$own_rank" ]; then
      report "$rel:$line" "#include \"$inc\": $dep/ comes after $own/ in the order"
    elif [ "$own" = inference ] && [ "$dep" = models ] && [ "$inc" != models/decoder.h ]; then
      report "$rel:$line" "#include \"$inc\": inference/ reaches models through models/decoder.h"
    fi
  done < <(grep -n -E '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$file" |
           sed -E 's/^([0-9]+):[^"]*"([^"]*)".*/\1:\2/')
done < <(find "$src" -type f \( -name '*.c' -o -name '*.h' -o -name '*.cc' -o -name '*.cu' \
                                 -o -name '*.cuh' \) | sort)

if [ "$bad" -gt 0 ]; then
  echo "check_includes: $bad include(s) against the folder order"
  exit 1
fi
files=$(find "$src" -type f \( -name '*.c' -o -name '*.h' -o -name '*.cc' -o -name '*.cu' \
                              -o -name '*.cuh' \) | wc -l)
echo "check_includes: $files files follow the folder order"
