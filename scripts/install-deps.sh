#!/usr/bin/env bash
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
)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "install-deps: installing ${missing[*]}" >&2
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
