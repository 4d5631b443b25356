# SPDX-License-Identifier: MIT
"""Compares two qkv run directories for the data-parallel tests (test_mpi.sh): the per-line
"loss" of metrics.jsonl (lines FROM.. of both) within a relative tolerance, and the
parameters of model.safetensors within an absolute one. Prints the largest differences;
exits 1 if a tolerance is exceeded. numpy only (the safetensors layout read by hand).

Usage: mpi_compare.py DIR_A DIR_B LOSS_RTOL PARAM_ATOL [FROM] [SKIP_SUFFIX]
SKIP_SUFFIX: tensors whose names end so are left out of the parameter check (see
test_mpi.sh for why the key bias is)."""
import json
import struct
import sys

import numpy as np


def tensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        assert t["dtype"] == "F32", name
        a, b = t["data_offsets"]
        out[name] = np.frombuffer(data[a:b], dtype="<f4").reshape(t["shape"])
    return out


def losses(d):
    return [json.loads(line)["loss"] for line in open(d + "/metrics.jsonl")]


def main():
    a, b, rtol, atol = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
    first = int(sys.argv[5]) if len(sys.argv) > 5 else 1
    skip = sys.argv[6] if len(sys.argv) > 6 else None
    la, lb = losses(a)[first - 1:], losses(b)[first - 1:]
    if len(la) != len(lb) or not la:
        print(f"metrics: {len(la)} and {len(lb)} lines")
        return 1
    rel = max(abs(x - y) / abs(x) for x, y in zip(la, lb))
    pa, pb = tensors(a + "/model.safetensors"), tensors(b + "/model.safetensors")
    if pa.keys() != pb.keys():
        print("the models have different tensors")
        return 1
    worst, where = 0.0, ""
    for k in pa:
        if skip and k.endswith(skip):
            continue
        d = float(np.max(np.abs(pa[k] - pb[k])))
        if d > worst:
            worst, where = d, k
    print(f"{len(la)} losses: max relative difference {rel:.3g}; "
          f"parameters: max absolute difference {worst:.3g} ({where})")
    return 0 if rel <= rtol and worst <= atol else 1


if __name__ == "__main__":
    sys.exit(main())
