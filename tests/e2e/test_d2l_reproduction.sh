#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# d2l-zh's English->French Transformer (examples/d2l_fra_eng.sh) over seeds 0..9: d2l's four
# example sentences must translate as d2l reports, at least 3 of 4 on average.
# Which sentences a seed gets right is chaotic: d2l's own PyTorch code gets 4/4 for about two
# seeds in three and 3/4 with torch.manual_seed(0), and the same run on another CPU (another
# summation order inside the BLAS) can end with another answer. So the assertion is about
# the distribution, over ten seeds (on the project's machine the mean is 3.2, and a mean
# below 3 over ten seeds would be about 1 chance in 30 if nothing were wrong), and seed 0's
# result is printed, not asserted.
# Skipped in the sanitizer run (QKV_E2E_QUICK): it trains for about 100 s on 2 cores.
set -u
QKV=$(realpath "$1")
if [ -n "${QKV_E2E_QUICK:-}" ]; then echo "skip: d2l reproduction in quick mode"; echo "0 passed, 0 failed"; exit 0; fi
DATA=${QKV_DATA_DIR:-../shared/data}
if [ ! -r "$DATA/fra-eng/fra.txt" ]; then echo "skip: no fra.txt"; echo "0 passed, 0 failed"; exit 0; fi
out=$(QKV_DATA_DIR=$DATA JOBS=$(nproc) bash examples/d2l_fra_eng.sh "$QKV" 0 1 2 3 4 5 6 7 8 9)
printf '%s\n' "$out"
pass=0; fail=0
total=$(printf '%s\n' "$out" | sed -n 's/^seed [0-9]*: \([0-4]\)\/4 as d2l$/\1/p' | awk '{ t += $1; n++ } END { print (n == 10 ? t : -1) }')
if [ "$total" -ge 30 ]; then
  pass=1; echo "ok   seeds 0-9 translate $total/40 as d2l (at least 30)"
else
  fail=1; echo "FAIL seeds 0-9 translate $total/40 as d2l (need 30; -1: a seed did not finish)"
fi
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
