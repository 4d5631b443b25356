#!/usr/bin/env bash
# d2l-zh's English->French Transformer, trained with qkv's default seed (examples/d2l_fra_eng.sh):
# d2l's four example sentences must translate as d2l reports. Across seeds 0..4 qkv gets
# 3, 4, 4, 2 and 3 of 4 (mean 3.2; README), so this asserts at least 3 of 4 for seed 0.
# Skipped in the sanitizer run (QKV_E2E_QUICK): it trains for about 40 s.
set -u
QKV=$(realpath "$1")
if [ -n "${QKV_E2E_QUICK:-}" ]; then echo "skip: d2l reproduction in quick mode"; echo "0 passed, 0 failed"; exit 0; fi
if [ ! -r "${QKV_DATA_DIR:-../shared/data}/fra-eng/fra.txt" ]; then echo "skip: no fra.txt"; echo "0 passed, 0 failed"; exit 0; fi
out=$(bash examples/d2l_fra_eng.sh "$QKV" 0)
printf '%s\n' "$out"
right=$(printf '%s\n' "$out" | sed -n 's/^seed 0: \([0-9]\)\/4 as d2l$/\1/p')
pass=0; fail=0
if [ "${right:-0}" -ge 3 ]; then pass=1; echo "ok   seed 0 translates $right/4 as d2l"; else fail=1; echo "FAIL seed 0 translates ${right:-0}/4 as d2l"; fi
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
