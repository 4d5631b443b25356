#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# make bench-ct2's pipeline on its --tiny models (bench/ct2_bench.py: train, convert, tokenize,
# translate with both engines, score; and a random-weight MarianMT model built with
# transformers, imported by qkv and converted by CTranslate2's own converter): CTranslate2
# float32 gives exactly qkv fp32's greedy and beam-4 output on every held-out sentence of both
# (the premise of comparing their speeds), the tables and the JSON have every setting, and a
# model the converter would misread is refused.
# Usage: test_bench_ct2.sh QKV_BINARY. Needs ../shared/ct2, fra.txt, Multi30k and a python3
# with ctranslate2, transformers, torch and sentencepiece (CT2_PY, default $QKV_PY: build/venv,
# where make test-deps installs them); else skipped. About a minute.
set -u
QKV=$(realpath "$1")
HERE=$(dirname "$0")
ROOT=$(cd "$HERE/../.." && pwd)
CT2_DIR=${QKV_CT2_DIR:-$ROOT/../shared/ct2}
FRA=${QKV_DATA_DIR:-$ROOT/../shared/data}/fra-eng/fra.txt
PY=${CT2_PY:-${QKV_PY:-python3}}
. "$HERE/lib.sh" # $T, ok, bad, check
M30K=${QKV_DATA_DIR:-$ROOT/../shared/data}/multi30k/val.de
if [ ! -r "$CT2_DIR/qkv2ct2.py" ] || [ ! -r "$FRA" ] || [ ! -r "$M30K" ] ||
   ! "$PY" -c "import ctranslate2, safetensors, transformers, torch, sentencepiece" 2>/dev/null; then
  echo "skip: no ../shared/ct2, fra.txt or Multi30k, or no ctranslate2/transformers/torch"
  echo "$pass passed, $fail failed"; exit 0
fi

"$PY" "$ROOT/bench/ct2_bench.py" --qkv "$QKV" --ct2-dir "$CT2_DIR" --data "$FRA" --out "$T/out" \
  --marian-data "$M30K" --hf-python "$PY" --tiny --reps 1 --env unset --lock '' >"$T/table" 2>"$T/err"
json=$T/out/results-tiny+marian-tiny.json
check "the --tiny run succeeds" test -s "$json"
check "the tables have the four settings" test "$(grep -cE '^\| (greedy|beam 4), batch (1|32) \|' "$T/table")" = 8
check "CT2 float32 = qkv fp32, greedy and beam 4, every sentence; every setting timed" "$PY" - "$json" <<'PYEOF'
import json, sys
m = json.load(open(sys.argv[1]))["models"]
r = m["tiny"]["results"]["OPENBLAS_CORETYPE unset"]
q = r["quality"]
ok = all(q[b]["ct2 float32"]["same_as_qkv_fp32"] == 1.0 for b in ("beam1", "beam4"))
ok &= all(q[b]["qkv fp32"]["bleu"] is not None for b in ("beam1", "beam4"))
ok &= [(s["beam"], s["batch"]) for s in r["settings"]] == [(1, 1), (1, 32), (4, 1), (4, 32)]
ok &= all(s["runs"]["ct2 float32"] and s["runs"]["qkv fp32"] for s in r["settings"])
# the Marian model: its own converter's CTranslate2 model translates as qkv's import does
r = m["marian-tiny"]["results"]["OPENBLAS_CORETYPE unset"]
ok &= all(r["quality"][b]["qkv fp32"]["same_as_ct2_float32"] == 1.0 for b in ("beam1", "beam4"))
ok &= [(s["beam"], s["batch"]) for s in r["settings"]] == [(1, 1), (1, 32), (4, 1), (4, 32)]
ok &= all(s["runs"]["ct2 float32"] and s["runs"]["qkv int8"] for s in r["settings"])
sys.exit(0 if ok else 1)
PYEOF

# --settings: only the settings asked for, and the quality rows of the beams among them
"$PY" "$ROOT/bench/ct2_bench.py" --qkv "$QKV" --ct2-dir "$CT2_DIR" --data "$FRA" --out "$T/out" \
  --marian-data "$M30K" --hf-python "$PY" --tiny --reps 1 --env unset --lock '' \
  --settings 4x32 >"$T/table4" 2>"$T/err4"
check "--settings 4x32 times beam 4, batch 32 alone" "$PY" - "$json" <<'PYEOF'
import json, sys
m = json.load(open(sys.argv[1]))["models"]
ok = True
for name in ("tiny", "marian-tiny"):
    r = m[name]["results"]["OPENBLAS_CORETYPE unset"]
    ok &= [(s["beam"], s["batch"]) for s in r["settings"]] == [(4, 32)]
    ok &= list(r["quality"]) == ["beam4"]
ok &= m["marian-tiny"]["results"]["OPENBLAS_CORETYPE unset"]["quality"]["beam4"]["qkv fp32"]["same_as_ct2_float32"] == 1.0
sys.exit(0 if ok else 1)
PYEOF
"$PY" "$ROOT/bench/ct2_bench.py" --settings 3x3 --dry-run >/dev/null 2>"$T/settings.err" &&
  bad "--settings 3x3 refused" ||
  check "--settings 3x3 refused with a message" grep -q "one of 1x1, 1x32, 4x1, 4x32" "$T/settings.err"

# a model whose config.json means something qkv2ct2.py does not know is refused, not converted
m=$(ls -d "$T"/out/models/tiny-*/ | head -n 1)
mkdir -p "$T/odd" && cp "$m"/*.txt "$m"/model.safetensors "$m"/train.json "$T/odd/"
sed 's/"pos_layout":[^,]*/"pos_layout": "halves"/' "$m/config.json" >"$T/odd/config.json"
PYTHONPATH="$ROOT/bench" "$PY" -c "import ct2_bench, sys; ct2_bench.converter_view(sys.argv[1])" "$T/odd" \
  2>"$T/odd.err" && bad "pos_layout halves refused" || \
  check "pos_layout halves refused with a message" grep -q "pos_layout is not 'interleaved'" "$T/odd.err"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
