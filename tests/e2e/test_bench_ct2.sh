#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# make bench-ct2's pipeline on its --tiny model (bench/ct2_bench.py: train, convert, tokenize,
# translate with both engines, score): CTranslate2 float32 gives exactly qkv fp32's greedy and
# beam-4 output on every held-out sentence (the premise of comparing their speeds), the table
# and the JSON have every setting, and a model the converter would misread is refused.
# Usage: test_bench_ct2.sh QKV_BINARY. Needs ../shared/ct2, fra.txt and a python3 with
# ctranslate2 (CT2_PY, default $QKV_PY: build/venv, where make bench-ct2 installs it); else skipped. About 20 s.
set -u
QKV=$(realpath "$1")
HERE=$(dirname "$0")
ROOT=$(cd "$HERE/../.." && pwd)
CT2_DIR=${QKV_CT2_DIR:-$ROOT/../shared/ct2}
FRA=${QKV_DATA_DIR:-$ROOT/../shared/data}/fra-eng/fra.txt
PY=${CT2_PY:-${QKV_PY:-python3}}
. "$HERE/lib.sh" # $T, ok, bad, check
if [ ! -r "$CT2_DIR/qkv2ct2.py" ] || [ ! -r "$FRA" ] || ! "$PY" -c "import ctranslate2, safetensors" 2>/dev/null; then
  echo "skip: no ../shared/ct2, no fra.txt or no ctranslate2"; echo "$pass passed, $fail failed"; exit 0
fi

"$PY" "$ROOT/bench/ct2_bench.py" --qkv "$QKV" --ct2-dir "$CT2_DIR" --data "$FRA" --out "$T/out" \
  --tiny --reps 1 --env unset --lock '' >"$T/table" 2>"$T/err"
check "the --tiny run succeeds" test -s "$T/out/results-tiny.json"
check "the table has the four settings" test "$(grep -cE '^\| (greedy|beam 4), batch (1|32) \|' "$T/table")" = 4
check "CT2 float32 = qkv fp32, greedy and beam 4, every sentence; every setting timed" "$PY" - "$T/out/results-tiny.json" <<'PYEOF'
import json, sys
r = json.load(open(sys.argv[1]))["models"]["tiny"]["results"]["OPENBLAS_CORETYPE unset"]
q = r["quality"]
ok = all(q[b]["ct2 float32"]["same_as_qkv_fp32"] == 1.0 for b in ("beam1", "beam4"))
ok &= all(q[b]["qkv fp32"]["bleu"] is not None for b in ("beam1", "beam4"))
ok &= [(s["beam"], s["batch"]) for s in r["settings"]] == [(1, 1), (1, 32), (4, 1), (4, 32)]
ok &= all(s["runs"]["ct2 float32"] and s["runs"]["qkv fp32"] for s in r["settings"])
sys.exit(0 if ok else 1)
PYEOF

# a model whose config.json means something qkv2ct2.py does not know is refused, not converted
m=$(ls -d "$T"/out/models/tiny-*/ | head -n 1)
mkdir -p "$T/odd" && cp "$m"/*.txt "$m"/model.safetensors "$m"/train.json "$T/odd/"
sed 's/"pos_layout":[^,]*/"pos_layout": "halves"/' "$m/config.json" >"$T/odd/config.json"
PYTHONPATH="$ROOT/bench" "$PY" -c "import ct2_bench, sys; ct2_bench.converter_view(sys.argv[1])" "$T/odd" \
  2>"$T/odd.err" && bad "pos_layout halves refused" || \
  check "pos_layout halves refused with a message" grep -q "pos_layout is not 'interleaved'" "$T/odd.err"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
