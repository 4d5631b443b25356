#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Data-parallel training across two "machines" (network namespaces on this one, joined by a
# veth pair shaped with tc: tools/netns_pair.sh) against docs/distributed.md's model of the
# step: the flat sum after the backward pass (t = t_fwd + t_bwd + t_ar) and the bucketed sums
# overlapping it (t = t_fwd + max(t_bwd, t_ar of all buckets but the last) + t_ar of the last),
# with t_ar = 2 (N - 1)/N x S / bandwidth + 2 (N - 1) x latency for S bytes of gradients on N
# nodes. For each link rate: the step time of one process on half the batch (the compute a rank
# does), of 2 machines with the flat sum and with buckets, the allreduce time qkv reports, and
# the model's prediction from the measured compute and the link's rate. Needs root, iproute2,
# unshare, mpirun; runs under `flock /work/cpu.lock` where the caller takes it.
# Usage: bench/netns_allreduce.sh [QKV]   RATES="1gbit 200mbit" STEPS=12 DELAY=1ms
set -eu
QKV=$(realpath "${1:-build/qkv}")
HERE=$(cd "$(dirname "$0")" && pwd)
DATA=${QKV_DATA_DIR:-$HERE/../../shared/data}/multi30k
if [ -z "${QKV_NETNS_INSIDE:-}" ]; then
  exec unshare --mount --net env QKV_NETNS_INSIDE=1 bash "$0" "$@"
fi
. "$HERE/../tools/netns_pair.sh"
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
netns_make "$T"
export OMP_WAIT_POLICY=passive
STEPS=${STEPS:-12}
B=64
head -n $((B * STEPS)) "$DATA/train.de" >"$T/src"; head -n $((B * STEPS)) "$DATA/train.en" >"$T/tgt"
# the small configuration of bench.py: d256, 3 + 3 layers, FFN 1024; word vocabularies of
# Multi30k (min-freq 1); one epoch of STEPS steps of B pairs
MODEL=(train --src "$T/src" --tgt "$T/tgt" --d-model 256 --heads 4 --ffn 1024 --layers 3
       --min-freq 1 --max-tokens 32 --epochs 1 --seed 1 --threads 1 --log-every 1)
step_time() { sed -n 's/.*wrote .* in \([0-9.]*\)s.*/\1/p' "$1" | awk -v s="$STEPS" '{printf "%.3f", $1 / s}'; }
# one process on half the batch: a rank's compute without communication
"$QKV" "${MODEL[@]}" --batch $((B / 2)) --out "$T/one" 2>"$T/one.err"
params=$(grep -o '[0-9]* parameters' "$T/one.err" | cut -d' ' -f1)
t_c=$(step_time "$T/one.err")
# the last bucket: the source embedding, whose gradient is final only at the end of the pass
last=$(python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); print(c["src_vocab"]*c["d_model"]/int(sys.argv[2]))' "$T/one/config.json" "$params")
echo "model: $params parameters ($(awk -v p="$params" 'BEGIN {printf "%.1f", p * 4 / 1e6}') MB of gradients); one process, half the batch: $t_c s/step"
for rate in ${RATES:-1gbit 200mbit}; do
  said=$(netns_shape "$rate" "${DELAY:-1ms}")
  bits=$(echo "$rate" | sed 's/gbit/e9/; s/mbit/e6/; s/kbit/e3/')
  lat=0; case "$said" in *ms*) lat=$(echo "${DELAY:-1ms}" | sed 's/ms//'); lat=$(awk -v l="$lat" 'BEGIN {print l / 1000}') ;; esac
  netns_mpirun "$QKV" "${MODEL[@]}" --batch $B --out "$T/flat-$rate" 2>"$T/flat.err"
  netns_mpirun "$QKV" "${MODEL[@]}" --batch $B --allreduce bucketed --out "$T/b-$rate" 2>"$T/b.err"
  t_flat=$(step_time "$T/flat.err"); t_b=$(step_time "$T/b.err")
  # the model: t_ar = S / bandwidth + 2 latency (N = 2); backward = 2/3 of the compute; the last
  # bucket (the source embedding) is summed after the pass
  awk -v p="$params" -v bw="$bits" -v lat="$lat" -v tc="$t_c" -v tf="$t_flat" -v tb="$t_b" \
      -v rate="$said" -v last="$last" 'BEGIN {
    S = p * 4 * 8; ar = S / bw + 2 * lat
    flat = tc + ar
    bwd = tc * 2 / 3; over = tc / 3 + (bwd > ar * (1 - last) ? bwd : ar * (1 - last)) + ar * last
    printf "%s: t_ar (model) %.3f s; flat %.3f s/step (model %.3f), bucketed %.3f s/step (model %.3f)\n",
           rate, ar, tf, flat, tb, over }'
  grep -h -o 'gradient allreduce.*' "$T/flat.err" "$T/b.err" | sed 's/^/  qkv: /'
done
netns_unshape
