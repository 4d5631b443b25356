#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Installs the Debian packages qkv needs to build and test, if any are missing.
# Quiet and quick when everything is present; needs root (or sudo) otherwise.
set -euo pipefail
pkgs=(
  build-essential pkg-config
  libopenblas-openmp-dev   # CBLAS GEMM; the OpenMP build shares the threads of our kernels
  libcjson-dev             # JSON: config files, safetensors headers
  libcmocka-dev            # unit-test framework
  libpng-dev libfreetype-dev fonts-dejavu-core  # figures: PNG encoding, text rendering, a font
  python3-torch python3-numpy  # PyTorch parity references (tests only)
  clang libclang-rt-14-dev libomp-dev  # make fuzz: libFuzzer and sanitizer runtimes, clang's OpenMP (tests only)
  libutf8proc-dev          # Unicode normalisation and case folding of raw text
  zlib1g-dev               # deflated zip entries: PyTorch checkpoints, .npz files, OPUS-MT zips
  libsentencepiece-dev sentencepiece  # SentencePiece models (.spm): reading, applying, training
  libmicrohttpd-dev        # qkv serve: the HTTP server
  libopenmpi-dev openmpi-bin  # data-parallel training over MPI (mpirun)
  wrk                      # qkv serve: load tests and benchmarks (tests only)
  nginx-light              # qkv serve behind a reverse proxy: tests/e2e/test_serve_nginx.sh (tests only)
  python3-pip              # installs the Python test tools below
)
# Python test tools (never runtime dependencies), for Debian's python3 (the one with python3-torch):
# transformers builds the Marian reference models, sentencepiece and sacrebleu check ours.
# transformers 4.38 is the newest that runs on Debian's torch 1.13.
# ctranslate2 runs the models qkv export ct2 writes (tests/e2e/test_ct2.sh); libretranslatepy
# and openai are the clients qkv serve is tested with (test_serve_libre.sh, test_serve_openai.sh).
py_pkgs=(transformers==4.38.2 sentencepiece sacrebleu safetensors ctranslate2 libretranslatepy openai)
# Tests only: OpenBLAS's pthreads build, which tests/e2e/test_blas.sh loads on purpose to see qkv
# refuse it. Installed as it is, it would become every program's libopenblas.so.0, libblas.so.3
# and liblapack.so.3 (Debian's alternatives rank it above the OpenMP build, 100 to 95), PyTorch's
# included. So it is installed last, after those alternatives have been fixed (manual mode) to
# what they are then: the machine keeps the BLAS it had. qkv itself would not care (it finds the
# OpenMP build through its RUNPATH), other programs would.
pinned=(libopenblas0-pthread)

is_missing() { ! dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
missing=(); missing_pinned=()
for p in "${pkgs[@]}"; do is_missing "$p" && missing+=("$p"); done
for p in "${pinned[@]}"; do is_missing "$p" && missing_pinned+=("$p"); done
install_python_tools() {
  /usr/bin/python3 -c 'import transformers, sentencepiece, sacrebleu, safetensors, ctranslate2, libretranslatepy, openai' 2>/dev/null && return 0
  echo "install-deps: installing Python test tools ${py_pkgs[*]}" >&2
  $SUDO /usr/bin/python3 -m pip install --quiet --break-system-packages --root-user-action=ignore "${py_pkgs[@]}"
}
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
if [ ${#missing[@]} -eq 0 ] && [ ${#missing_pinned[@]} -eq 0 ]; then install_python_tools; exit 0; fi
all=("${missing[@]}" "${missing_pinned[@]}")
echo "install-deps: installing ${all[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
if [ ${#missing[@]} -gt 0 ]; then
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if [ ${#missing_pinned[@]} -gt 0 ]; then
  ma=$(gcc -print-multiarch)
  for alt in libopenblas.so.0 libblas.so.3 liblapack.so.3; do
    value=$(update-alternatives --query "$alt-$ma" 2>/dev/null | sed -n 's/^Value: //p')
    if [ -n "$value" ]; then
      echo "install-deps: keeping $alt at $value" >&2
      $SUDO update-alternatives --quiet --set "$alt-$ma" "$value"
    fi
  done
  $SUDO apt-get install -y -qq --no-install-recommends "${missing_pinned[@]}" >/dev/null
fi
install_python_tools
