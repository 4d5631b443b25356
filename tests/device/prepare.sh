#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Prepares what tests/device/check.sh takes to a GPU machine where nothing can be fetched and
# the library's packages (OpenBLAS, cJSON, SentencePiece, ...) may be missing: the CUDA
# build's programs (qkv, tests/device_parity, tests/test_backend_ops when the tree has it)
# and every shared library they load beyond what such a machine has (glibc, the C++ runtime,
# CUDA's own libraries and the driver), packed in .device/bundle.tar.xz with the commit it
# was built from. check.sh builds on the GPU machine first and falls back to this bundle.
# Run here, on an x86-64 machine with nvcc and the packages; a few minutes on 2 cores.
# Usage: tests/device/prepare.sh   (then run check.sh there with .device carried)
set -euo pipefail
cd "$(dirname "$0")/../.."
jobs=$(nproc)
make CUDA=1 -j"$jobs" all device-tests
progs=(build-cuda/qkv build-cuda/tests/device_parity)
if [ -f tests/unit/test_backend_ops.c ]; then
  make CUDA=1 -j"$jobs" build-cuda/tests/test_backend_ops
  progs+=(build-cuda/tests/test_backend_ops)
fi
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib" .device
cp "${progs[@]}" "$stage/bin/"
# what the GPU machine brings: the C library, the compiler's runtime, CUDA and its driver
system='^(linux-vdso|ld-linux|libc|libm|libdl|librt|libpthread|libresolv|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libcublasLt|libnvidia)[.-]'
for p in "${progs[@]}"; do
  ldd "$p" | awk '/=> \// { print $3 }'
done | sort -u | while read -r lib; do
  base=$(basename "$lib")
  if ! [[ $base =~ $system ]]; then cp -L "$lib" "$stage/lib/$base"; fi
done
git rev-parse HEAD >"$stage/commit" 2>/dev/null || echo unknown >"$stage/commit"
if ! git diff --quiet HEAD 2>/dev/null; then echo "(with uncommitted changes)" >>"$stage/commit"; fi
tar -C "$stage" -cJf .device/bundle.tar.xz .
echo "prepare: .device/bundle.tar.xz ($(du -h .device/bundle.tar.xz | cut -f1)): ${progs[*]##*/}" \
  "and $(ls "$stage/lib" | wc -l) libraries, commit $(head -c 12 "$stage/commit")"
