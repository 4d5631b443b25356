#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Installs what is missing of what qkv needs; quiet and quick when everything is there.
#   scripts/install-deps.sh          to build and run qkv (make demo, make install: `make deps`)
#   scripts/install-deps.sh --test   and to test it (make test: `make test-deps`)
# Debian packages go through apt-get (as root, or through sudo). The Python test tools go into a
# virtual environment of the project's own, build/venv (made with --system-site-packages, so that
# Debian's python3-torch is seen in it), never into the system's Python. OpenBLAS's pthreads
# build, which one test loads on purpose, is unpacked into build/ rather than installed: installed,
# it would become the machine's libopenblas.so.0 and libblas.so.3 (Debian's alternatives rank it
# first), and this script changes no alternatives.
# Environment: PYTHON (default /usr/bin/python3, the Python that has Debian's torch),
# QKV_VENV (default build/venv), QKV_DEPS_DIR (default build/deps).
set -euo pipefail
cd "$(dirname "$0")/.."
want_test=0
case "${1:-}" in
  "") ;;
  --test) want_test=1 ;;
  -h|--help) sed -n '3,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "install-deps: unknown argument '$1' (--test or nothing)" >&2; exit 2 ;;
esac

# To build and to run: libqkv links OpenBLAS, cJSON, SentencePiece, utf8proc and zlib, libqkv-viz
# (the figures) libpng and FreeType; the qkv tool also libmicrohttpd (qkv serve) and Open MPI
# (data-parallel training).
runtime=(
  build-essential pkg-config
  libopenblas-openmp-dev   # CBLAS GEMM; the OpenMP build shares the threads of qkv's kernels
  libcjson-dev             # JSON: config files, safetensors headers
  libpng-dev libfreetype-dev fonts-dejavu-core  # figures: PNG encoding, text rendering, a font
  libutf8proc-dev          # Unicode normalisation and case folding of raw text
  zlib1g-dev               # deflated zip entries: PyTorch checkpoints, .npz files, OPUS-MT zips
  libsentencepiece-dev     # SentencePiece models (.spm): reading, applying, training
  libmicrohttpd-dev        # qkv serve: the HTTP server
  libopenmpi-dev openmpi-bin  # data-parallel training (the qkv tool links libmpi; mpirun)
)
# To test, besides: each is named by the tests that need it.
test_only=(
  libcmocka-dev            # the unit-test framework
  python3-torch python3-numpy  # PyTorch writes the parity references
  python3-venv             # build/venv, for the Python test tools below
  python3-pip python3-dev  # the Python package's wheel built and tested (tests/python.sh)
  clang libclang-rt-14-dev libomp-dev  # libFuzzer and the sanitizer runtimes, clang's OpenMP
  sentencepiece            # spm_train: a model made by SentencePiece's own trainer (test_spm)
  wrk curl                 # qkv serve: load test and requests (test_serve)
  nginx-light              # qkv serve behind a reverse proxy (test_serve_nginx)
  valgrind                 # a train + translate run under memcheck (test_robustness)
  file                     # test_setup looks at what the compiler wrote
)
# Python test tools, pip-installed into build/venv: transformers builds the Marian reference
# models (4.38 is the newest that runs on Debian's torch 1.13), sentencepiece and sacrebleu
# check qkv's pieces and scores, safetensors reads and writes reference files, ctranslate2 runs
# the models qkv export ct2 writes (test_ct2), libretranslatepy and openai are the clients qkv
# serve is tested with (test_serve_libre, test_serve_openai).
py_test=(transformers==4.38.2 sentencepiece sacrebleu safetensors ctranslate2 libretranslatepy openai)
py_modules="transformers, sentencepiece, sacrebleu, safetensors, ctranslate2, libretranslatepy, openai"

PYTHON=${PYTHON:-/usr/bin/python3}
VENV=${QKV_VENV:-build/venv}
DEPS_DIR=${QKV_DEPS_DIR:-build/deps}
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"

is_missing() { ! dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
wanted=("${runtime[@]}")
[ $want_test = 1 ] && wanted+=("${test_only[@]}")
missing=()
for p in "${wanted[@]}"; do is_missing "$p" && missing+=("$p"); done
updated=0
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  updated=1
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
[ $want_test = 1 ] || exit 0

# ---- the Python test tools, in build/venv
if [ ! -x "$VENV/bin/python3" ]; then
  echo "install-deps: creating $VENV (with the system's site packages)" >&2
  "$PYTHON" -m venv --system-site-packages "$VENV"
fi
if ! "$VENV/bin/python3" -c "import $py_modules" 2>/dev/null; then
  echo "install-deps: installing ${py_test[*]} into $VENV" >&2
  "$VENV/bin/python3" -m pip install --quiet --disable-pip-version-check "${py_test[@]}"
fi

# ---- OpenBLAS's pthreads build, unpacked (tests/e2e/test_blas.sh loads it on purpose)
ma=$(gcc -print-multiarch)
if [ ! -e "/usr/lib/$ma/openblas-pthread/libopenblas.so.0" ] &&
   [ ! -e "$DEPS_DIR/openblas-pthread/usr/lib/$ma/openblas-pthread/libopenblas.so.0" ]; then
  echo "install-deps: unpacking libopenblas0-pthread into $DEPS_DIR/openblas-pthread" >&2
  mkdir -p "$DEPS_DIR"
  rm -f "$DEPS_DIR"/libopenblas0-pthread_*.deb
  if ! (cd "$DEPS_DIR" && apt-get download -qq libopenblas0-pthread 2>/dev/null); then
    [ $updated = 1 ] || $SUDO apt-get update -qq
    (cd "$DEPS_DIR" && apt-get download -qq libopenblas0-pthread)
  fi
  rm -rf "$DEPS_DIR/openblas-pthread"
  dpkg-deb -x "$DEPS_DIR"/libopenblas0-pthread_*.deb "$DEPS_DIR/openblas-pthread"
fi
