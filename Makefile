# SPDX-License-Identifier: MIT
# qkv — GNU make build.
#   make            library (static + shared) and the qkv command-line tool
#   make demo       the main job on its built-in default (installs the build packages first)
#   make test       every test: unit + gradient checks + PyTorch parity, then an ASan+UBSan build
#                   (installs the build packages and the test tools first)
#   make install PREFIX=/usr/local   (installs the build packages first)
#   make deps / make test-deps       only the installation (scripts/install-deps.sh)
.SUFFIXES:
.SECONDARY:
CC      ?= cc
CXX     ?= c++
PREFIX  ?= /usr/local
# make CUDA=1: libqkv with the CUDA device (backend/cuda.c, ops/cuda; docs/gpu.md), built in
# build-cuda so that it never mixes with the CPU build's objects.
CUDA    ?=
BUILD   ?= $(if $(filter 1,$(CUDA)),build-cuda,build)
OPT     ?= -O2 -march=x86-64-v3 -mtune=native
SAN     ?=
# The Python of the tests and benchmarks: build/venv (scripts/install-deps.sh --test makes it,
# with the system's site packages, so Debian's torch is in it), else Debian's own.
VENV    := build/venv
PY      ?= $(if $(wildcard $(VENV)/bin/python3),$(VENV)/bin/python3,/usr/bin/python3)

PKGS    := openblas libcjson sentencepiece libutf8proc zlib
# The figures' packages (PNG encoding, text rendering): libqkv-viz links them, libqkv does not,
# so a program that only translates never loads them.
VIZ_PKGS := libpng freetype2

# pkg-config's flags are asked for the first time a recipe needs them, and once only: not when
# this file is read, since on a fresh machine the packages are not there yet. `make demo`,
# `make install` and `make test` first install what is missing (scripts/install-deps.sh, the
# `deps` and `test-deps` targets) and only then build, in a second make (see `demo` below), so
# they work on their first run; a plain `make` on a machine without the packages stops with a
# message saying so.
pkg_query   = $(shell PKG_CONFIG_PATH=$(OPENBLAS_PC)$${PKG_CONFIG_PATH:+:$$PKG_CONFIG_PATH} \
                pkg-config $1 || echo __failed__)
pkg_checked = $(if $(filter __failed__,$1),$(error pkg-config does not find $(PKGS); \
                run `make deps` (scripts/install-deps.sh) to install them),$1)
PKG_CFLAGS  = $(eval PKG_CFLAGS := $(call pkg_checked,$(call pkg_query,--cflags $(PKGS) \
                $(VIZ_PKGS))))$(PKG_CFLAGS)
PKG_LIBS    = $(eval PKG_LIBS := $(call pkg_checked,$(call pkg_query,--libs $(PKGS))))$(PKG_LIBS)
VIZ_LIBS    = $(eval VIZ_LIBS := $(call pkg_checked,$(call pkg_query,--libs $(VIZ_PKGS))))$(VIZ_LIBS)
# The command-line tool's own packages (qkv serve's HTTP server); libqkv does not link them.
CLI_PKGS    := libmicrohttpd
CLI_PKG_LIBS = $(eval CLI_PKG_LIBS := $(call pkg_checked,$(call pkg_query,--libs $(CLI_PKGS))))$(CLI_PKG_LIBS)
# MPI (Open MPI) for data-parallel training: the qkv tool links it, libqkv does not (the
# library takes its communication as a qkv_reducer). Asked for as lazily as the rest.
MPI_PKG     := ompi-c
MPI_CFLAGS  = $(eval MPI_CFLAGS := $(call mpi_checked,$(call pkg_query,--cflags $(MPI_PKG))))$(MPI_CFLAGS)
MPI_LIBS    = $(eval MPI_LIBS := $(call mpi_checked,$(call pkg_query,--libs $(MPI_PKG))))$(MPI_LIBS)
mpi_checked = $(if $(filter __failed__,$1),$(error pkg-config does not find $(MPI_PKG) (Open \
                MPI); run `make deps` (scripts/install-deps.sh) to install it),$1)

# OpenBLAS: its OpenMP build, the one qkv's threads need (docs/install.md). pkg-config
# reads that build's own openblas.pc, not the one Debian's alternatives point at, and everything
# linked here (libqkv.so, qkv, tests, examples) carries that build's directory as RUNPATH, so
# libopenblas.so.0 is the OpenMP one even where the alternatives rank the pthreads build first.
# (LD_LIBRARY_PATH still comes first; qkv_blas_check, which the CLI calls at start-up, catches it.)
MULTIARCH   = $(eval MULTIARCH := $(shell $(CC) -print-multiarch))$(MULTIARCH)
OPENBLAS_PC ?= /usr/lib/$(MULTIARCH)/openblas-openmp/pkgconfig
OPENBLAS_LIBDIR = $(eval OPENBLAS_LIBDIR := $(patsubst %/,%,$(call pkg_checked,$(call pkg_query,\
                    --variable=libdir openblas))))$(OPENBLAS_LIBDIR)
OPENBLAS_RPATH  = $(if $(OPENBLAS_LIBDIR),-Wl$(comma)-rpath$(comma)$(OPENBLAS_LIBDIR))
comma := ,

# -fvisibility=hidden: only what include/qkv/*.h mark QKV_API leaves libqkv.so (the tests and the
# CLI link the static library, so they still reach the internal functions).
CFLAGS  = -std=c11 $(OPT) -g -Wall -Wextra -fno-math-errno -fopenmp -fPIC -fvisibility=hidden \
          -D_POSIX_C_SOURCE=200809L -Iinclude -Isrc -Itests/common $(PKG_CFLAGS) $(SAN) \
          $(CUDA_CFLAGS) $(EXTRA_CFLAGS)
# The C++ of the SentencePiece shim (src/text/*.cc): the same warnings, visibility and position
# independence; everything that links libqkv links the C++ runtime too (-lstdc++).
CXXFLAGS = -std=c++17 $(OPT) -g -Wall -Wextra -fPIC -fvisibility=hidden -Iinclude -Isrc \
           $(PKG_CFLAGS) $(SAN) $(EXTRA_CXXFLAGS)
LDLIBS  = $(OPENBLAS_RPATH) $(PKG_LIBS) $(CUDA_LIBS) -lstdc++ -fopenmp -lm $(SAN)

# The shared library: libqkv.so.$(VERSION), SONAME libqkv.so.$(SOVERSION) (QKV_VERSION's major
# number), exports limited to qkv_* by a version script.
VERSION   := $(shell sed -n 's/^.define QKV_VERSION "\(.*\)"/\1/p' include/qkv/core.h)
SOVERSION := $(firstword $(subst ., ,$(VERSION)))
SONAME    := libqkv.so.$(SOVERSION)
LIB_SO    := $(BUILD)/libqkv.so.$(VERSION)

# The library's folders in the order of its seam (docs/architecture.md; tools/check_includes.sh).
LIB_DIRS := core text ops/cpu backend layers models io training inference
LIB_SRC := $(sort $(foreach d,$(LIB_DIRS),$(wildcard src/$(d)/*.c)))
# The CUDA device: backend/cuda.c and the kernels of ops/cuda with CUDA=1, else
# backend/no_cuda.c (which says there is no GPU to move to).
CUDA_HOME ?= /usr/local/cuda
NVCC      ?= $(CUDA_HOME)/bin/nvcc
# Hopper's machine code, and its PTX for the driver to compile on any later GPU.
CUDA_ARCH ?= -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90
NVCCFLAGS  = -std=c++17 -O2 -lineinfo $(CUDA_ARCH) \
             -Xcompiler -Wall,-Wextra,-fPIC,-fvisibility=hidden -Iinclude -Isrc $(EXTRA_NVCCFLAGS)
CUDA_SRC  := $(sort $(wildcard src/ops/cuda/*.cu))
ifeq ($(CUDA),1)
LIB_SRC   := $(filter-out src/backend/no_cuda.c,$(LIB_SRC))
CUDA_OBJ  := $(CUDA_SRC:%.cu=$(BUILD)/%.o)
CUDA_CFLAGS = -DQKV_CUDA -I$(CUDA_HOME)/include
CUDA_LIBS   = -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublas -lcudart_static \
              -ldl -lrt -lpthread
else
LIB_SRC   := $(filter-out src/backend/cuda.c,$(LIB_SRC))
endif
# The figures (heatmaps, line plots) are a library of their own, libqkv-viz, over libqkv's
# public types; its shared build carries private copies of the error and file helpers it uses
# (src/viz/libqkv-viz.map keeps them local).
VIZ_CORE := $(BUILD)/src/core/error.o $(BUILD)/src/core/atomic_file.o $(BUILD)/src/core/read_file.o
VIZ_SRC := $(sort $(wildcard src/viz/*.c))
VIZ_OBJ := $(VIZ_SRC:%.c=$(BUILD)/%.o)
VIZ_A   := $(BUILD)/libqkv-viz.a
VIZ_SO  := $(BUILD)/libqkv-viz.so.$(VERSION)
VIZ_SONAME := libqkv-viz.so.$(SOVERSION)
CLI_SRC := $(sort $(wildcard src/cli/*.c))
LIB_CXX := $(sort $(foreach d,$(LIB_DIRS),$(wildcard src/$(d)/*.cc)))
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/%.o) $(LIB_CXX:%.cc=$(BUILD)/%.o) $(CUDA_OBJ)
CLI_OBJ := $(CLI_SRC:%.c=$(BUILD)/%.o)

TEST_COMMON := $(sort $(wildcard tests/common/*.c))
TEST_SRC := $(sort $(wildcard tests/unit/test_*.c))
# test_cuda_host runs backend/cuda.c over the CUDA stand-in of tests/cuda (no GPU): built where
# the CUDA toolkit's headers are, in the CPU builds (a CUDA=1 build has the real thing).
CUDA_TESTABLE := $(if $(filter 1,$(CUDA)),,$(wildcard $(CUDA_HOME)/include/cublas_v2.h))
TEST_SRC := $(if $(CUDA_TESTABLE),$(TEST_SRC),$(filter-out tests/unit/test_cuda_host.c,$(TEST_SRC)))
TEST_BIN := $(TEST_SRC:tests/unit/%.c=$(BUILD)/tests/%)
# and the backend-ops test over the same stand-in: the CUDA tables' every entry, on the CPU
TEST_BIN += $(if $(CUDA_TESTABLE),$(BUILD)/tests/test_backend_ops_cuda)
TEST_COMMON_OBJ := $(TEST_COMMON:%.c=$(BUILD)/%.o)
E2E_TESTS := $(sort $(wildcard tests/e2e/test_*.sh))

.PHONY: all deps test-deps demo check test unit parity-data test-asan test-python install \
        install-built clean bench bench-attention bench-serve bench-ct2 bench-python
all: $(BUILD)/libqkv.a $(LIB_SO) $(BUILD)/$(SONAME) $(BUILD)/libqkv.so $(VIZ_A) $(VIZ_SO) \
     $(BUILD)/$(VIZ_SONAME) $(BUILD)/libqkv-viz.so $(BUILD)/qkv $(BUILD)/qkv.1 $(BUILD)/qkv.bash

# deps: the packages to build and run qkv; test-deps: those and the test tools (apt packages,
# build/venv's Python tools, OpenBLAS's pthreads build unpacked into build/deps).
deps:
	@scripts/install-deps.sh

test-deps:
	@scripts/install-deps.sh --test

# Objects depend on the Makefile too: a change of flags (visibility, RUNPATH) rebuilds them and
# everything linked from them.
$(BUILD)/%.o: %.c Makefile
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/%.o: %.cc Makefile
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/%.o: %.cu Makefile
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/libqkv.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(LIB_SO): $(LIB_OBJ) src/libqkv.map
	$(CC) -shared -Wl,-soname,$(SONAME) -Wl,--version-script=src/libqkv.map -o $@ $(LIB_OBJ) \
	  $(LDLIBS)

$(BUILD)/$(SONAME) $(BUILD)/libqkv.so: $(LIB_SO)
	ln -sf $(notdir $<) $@

$(VIZ_A): $(VIZ_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(VIZ_SO): $(VIZ_OBJ) $(VIZ_CORE) src/viz/libqkv-viz.map
	$(CC) -shared -Wl,-soname,$(VIZ_SONAME) -Wl,--version-script=src/viz/libqkv-viz.map \
	  -o $@ $(VIZ_OBJ) $(VIZ_CORE) $(VIZ_LIBS) -fopenmp -lm $(SAN)

$(BUILD)/$(VIZ_SONAME) $(BUILD)/libqkv-viz.so: $(VIZ_SO)
	ln -sf $(notdir $<) $@

$(BUILD)/src/cli/mpi_reducer.o: CFLAGS += $(MPI_CFLAGS)

$(BUILD)/qkv: $(CLI_OBJ) $(VIZ_A) $(BUILD)/libqkv.a
	$(CC) -o $@ $(CLI_OBJ) $(VIZ_A) $(BUILD)/libqkv.a $(LDLIBS) $(VIZ_LIBS) $(MPI_LIBS) \
	  $(CLI_PKG_LIBS) -lpthread

# The man page and the bash completion, made from the tool's own --help (tools/help2*.sh).
$(BUILD)/qkv.1: $(BUILD)/qkv tools/help2man.sh
	tools/help2man.sh $(BUILD)/qkv > $@.tmp && mv $@.tmp $@

$(BUILD)/qkv.bash: $(BUILD)/qkv tools/help2completion.sh
	tools/help2completion.sh $(BUILD)/qkv > $@.tmp && mv $@.tmp $@

$(BUILD)/tests/%: $(BUILD)/tests/unit/%.o $(TEST_COMMON_OBJ) $(VIZ_A) $(BUILD)/libqkv.a
	@mkdir -p $(dir $@)
	$(CC) -o $@ $< $(TEST_COMMON_OBJ) $(VIZ_A) $(BUILD)/libqkv.a $(LDLIBS) $(VIZ_LIBS) -lcmocka

# backend/cuda.c compiled against the toolkit's headers, and linked with the stand-in, not
# the toolkit's libraries
SHIM_CFLAGS = -DQKV_CUDA -I$(CUDA_HOME)/include -Itests/cuda
$(BUILD)/tests/unit/test_cuda_host.o $(BUILD)/tests/cuda/shim.o: CFLAGS += $(SHIM_CFLAGS)
$(BUILD)/tests/cuda/backend_cuda.o: src/backend/cuda.c Makefile
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(SHIM_CFLAGS) -MMD -MP -c $< -o $@
$(BUILD)/tests/test_cuda_host: $(BUILD)/tests/unit/test_cuda_host.o $(BUILD)/tests/cuda/shim.o \
                               $(BUILD)/tests/cuda/backend_cuda.o $(TEST_COMMON_OBJ) $(VIZ_A) \
                               $(BUILD)/libqkv.a
	@mkdir -p $(dir $@)
	$(CC) -o $@ $(filter %.o,$^) $(VIZ_A) $(BUILD)/libqkv.a $(LDLIBS) $(VIZ_LIBS) -lcmocka

# test_backend_ops.c with the CUDA tables' rows (QKV_CUDA), over the stand-in; a CUDA=1
# build's own test_backend_ops runs them on a GPU (tests/device/check.sh).
$(BUILD)/tests/cuda/test_backend_ops.o: tests/unit/test_backend_ops.c Makefile
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(SHIM_CFLAGS) -MMD -MP -c $< -o $@
$(BUILD)/tests/test_backend_ops_cuda: $(BUILD)/tests/cuda/test_backend_ops.o \
                                      $(BUILD)/tests/cuda/shim.o $(BUILD)/tests/cuda/backend_cuda.o \
                                      $(TEST_COMMON_OBJ) $(VIZ_A) $(BUILD)/libqkv.a
	@mkdir -p $(dir $@)
	$(CC) -o $@ $(filter %.o,$^) $(VIZ_A) $(BUILD)/libqkv.a $(LDLIBS) $(VIZ_LIBS) -lcmocka

# The GPU's whole-model parity with the CPU and the backend-ops test with the CUDA tables
# (tests/device/check.sh runs them; built in CI by cuda-check so that they never rot).
.PHONY: device-tests
device-tests: $(BUILD)/tests/device_parity $(BUILD)/tests/test_backend_ops
$(BUILD)/tests/device_parity: tests/device/parity.c $(VIZ_A) $(BUILD)/libqkv.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(VIZ_A) $(BUILD)/libqkv.a $(LDLIBS) $(VIZ_LIBS)
# the same program over the CUDA stand-in (tests/cuda): cuda-check runs it on the CPU
$(BUILD)/tests/device_parity_shim: tests/device/parity.c $(BUILD)/tests/cuda/shim.o \
                                   $(BUILD)/tests/cuda/backend_cuda.o $(VIZ_A) $(BUILD)/libqkv.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(SHIM_CFLAGS) -o $@ $(filter %.c %.o,$^) $(VIZ_A) $(BUILD)/libqkv.a $(LDLIBS) \
	  $(VIZ_LIBS)

# deps first, then the build in a second make that asks pkg-config only now (also with -j).
demo: deps
	$(MAKE) all
	./$(BUILD)/qkv demo --out $(BUILD)/demo-model

# PyTorch writes reference tensors (inputs, weights, outputs, gradients) for the parity tests.
$(BUILD)/parity/.stamp: $(wildcard tests/parity/*.py) $(wildcard tools/*.py)
	@mkdir -p $(BUILD)/parity
	$(PY) tests/parity/make_reference.py $(BUILD)/parity
	@touch $@

unit: all $(TEST_BIN) $(BUILD)/parity/.stamp
	QKV_PARITY_DIR=$(BUILD)/parity QKV=$(BUILD)/qkv QKV_PY=$(PY) tests/run.sh $(TEST_BIN) $(E2E_TESTS)

# The code's shape, before any test runs: every include in the folder order of the seam, and
# every function over 80 lines saying why (docs/architecture.md).
check:
	tools/check_includes.sh
	$(PY) tools/check_functions.py

test: test-deps
	$(MAKE) check
	$(MAKE) unit
	$(MAKE) test-python
	$(MAKE) test-asan
	$(MAKE) fuzz-regress

# The Python package (python/): its wheel built once, installed in a virtual environment of each
# Python here and tested there with pytest (tests/python.sh): the pyenv-style python3 first on
# PATH and Debian's, whose torch the comparisons of qkv.ops need.
PYTHONS ?= python3 /usr/bin/python3
test-python: all $(BUILD)/parity/.stamp
	QKV=$(BUILD)/qkv QKV_PARITY_DIR=$(BUILD)/parity BUILD=$(BUILD) tests/python.sh $(PYTHONS)

# The same tests built with AddressSanitizer and UndefinedBehaviorSanitizer (reference data
# is shared with the normal build).
test-asan: $(BUILD)/parity/.stamp
	$(MAKE) BUILD=build-asan OPT="-O1 -fno-omit-frame-pointer" \
	  SAN="-fsanitize=address,undefined -fno-sanitize-recover=all" \
	  build-asan/qkv build-asan/qkv.1 build-asan/qkv.bash $(TEST_BIN:$(BUILD)/%=build-asan/%) \
	  $(EXAMPLES:$(BUILD)/%=build-asan/%)
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 QKV_E2E_QUICK=1 \
	  QKV_PARITY_DIR=$(BUILD)/parity QKV=build-asan/qkv QKV_PY=$(PY) \
	  tests/run.sh $(TEST_BIN:$(BUILD)/%=build-asan/%) $(E2E_TESTS)

# The CPU's arithmetic roofs (AVX-512 FMA, VDPBF16PS): OMP_NUM_THREADS=2 build/peak
$(BUILD)/peak: bench/peak.c
	@mkdir -p $(@D)
	$(CC) -std=c11 -O2 -Wall -Wextra -fopenmp $< -o $@

# qkv beside PyTorch, same shapes and threads, alternating; prints tables of ratios.
bench: test-deps
	$(MAKE) all
	$(PY) bench/bench.py --qkv $(BUILD)/qkv

# softmax (materialised, flash) vs linear attention and KV-cache vs recurrent generation,
# qkv and PyTorch side by side (about 30 minutes on 2 cores; --quick: N <= 2048)
bench-attention: test-deps
	$(MAKE) all
	$(PY) bench/attention_bench.py --qkv $(BUILD)/qkv

# qkv serve under load (concurrency 1, 8, 64) beside the offline CLI (docs/benchmarks/serving.md).
bench-serve: test-deps
	$(MAKE) all
	$(PY) bench/serve_bench.py --qkv $(BUILD)/qkv

# qkv translate against CTranslate2 on two fra-eng models it trains itself and on random-weight
# MarianMT models of OPUS-MT's shapes it builds with transformers (cached in build/bench-ct2;
# docs/benchmarks/ctranslate2.md). CT2_PY: a python3 with ctranslate2, safetensors,
# transformers, torch and sentencepiece (build/venv, which make test-deps makes with them and
# sees Debian's torch; pip-installed into it here when missing: bench tools, not qkv's
# dependencies). REPS=N sets the repetitions; BENCH_CT2_ARGS passes options (--env, --models,
# --tiny, ...).
CT2_PY ?= $(VENV)/bin/python3
bench-ct2: test-deps
	$(MAKE) all
	$(CT2_PY) -c 'import ctranslate2, safetensors, transformers, torch, sentencepiece' \
	  2>/dev/null || $(CT2_PY) -m pip install ctranslate2 safetensors transformers==4.38.2 \
	  sentencepiece
	$(CT2_PY) bench/ct2_bench.py --qkv $(BUILD)/qkv --hf-python $(CT2_PY) $(BENCH_CT2_ARGS)

# Translator.translate_batch beside `qkv translate` on the same sentences (bench/python_bench.py).
bench-python: test-deps
	$(MAKE) all
	$(PY) bench/python_bench.py --qkv $(BUILD)/qkv $(BENCH_PYTHON_ARGS)

# install: the build packages first (deps), then install-built in a second make (as demo).
install: deps
	$(MAKE) install-built

install-built: all
	install -d $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/bin \
	  $(DESTDIR)$(PREFIX)/lib/pkgconfig
	install -m 644 $(BUILD)/libqkv.a $(VIZ_A) $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(LIB_SO) $(VIZ_SO) $(DESTDIR)$(PREFIX)/lib/
	ln -sf $(notdir $(LIB_SO)) $(DESTDIR)$(PREFIX)/lib/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(PREFIX)/lib/libqkv.so
	ln -sf $(notdir $(VIZ_SO)) $(DESTDIR)$(PREFIX)/lib/$(VIZ_SONAME)
	ln -sf $(VIZ_SONAME) $(DESTDIR)$(PREFIX)/lib/libqkv-viz.so
	install -d $(DESTDIR)$(PREFIX)/include/qkv
	install -m 644 include/qkv.h $(DESTDIR)$(PREFIX)/include/
	install -m 644 include/qkv/*.h $(DESTDIR)$(PREFIX)/include/qkv/
	install -m 755 $(BUILD)/qkv $(DESTDIR)$(PREFIX)/bin/
	install -d $(DESTDIR)$(PREFIX)/share/man/man1 \
	  $(DESTDIR)$(PREFIX)/share/bash-completion/completions
	install -m 644 $(BUILD)/qkv.1 $(DESTDIR)$(PREFIX)/share/man/man1/qkv.1
	install -m 644 $(BUILD)/qkv.bash $(DESTDIR)$(PREFIX)/share/bash-completion/completions/qkv
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(VERSION)|' \
	  -e 's|@OPENBLAS_LIBDIR@|$(OPENBLAS_LIBDIR)|' qkv.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/qkv.pc
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(VERSION)|' \
	  qkv-viz.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/qkv-viz.pc

# The CUDA build (build-cuda: make CUDA=1) with zero warnings from nvcc and the host compiler,
# and what its --device cuda says on a machine without a GPU (tests/e2e/test_device.sh). CI
# runs it on every submission; on a GPU, tests/device/check.sh runs the device itself.
.PHONY: cuda-check
cuda-check:
	@command -v $(NVCC) >/dev/null 2>&1 || { echo "cuda-check: no nvcc ($(NVCC))"; exit 1; }
	@mkdir -p build-cuda
	$(MAKE) CUDA=1 all device-tests >build-cuda/build.log 2>&1 || \
	  { cat build-cuda/build.log; exit 1; }
	@if grep -nE 'warning[:# ]' build-cuda/build.log; then \
	  echo "cuda-check: the CUDA build has warnings"; exit 1; fi
	$(MAKE) all $(BUILD)/tests/device_parity_shim
	$(BUILD)/tests/device_parity_shim --quick
	QKV=$(BUILD)/qkv QKV_CUDA=build-cuda/qkv tests/run.sh tests/e2e/test_device.sh

clean:
	rm -rf build build-asan build-cuda

-include $(LIB_OBJ:.o=.d) $(VIZ_OBJ:.o=.d) $(CLI_OBJ:.o=.d) \
  $(TEST_SRC:tests/unit/%.c=$(BUILD)/tests/unit/%.d) $(TEST_COMMON_OBJ:.o=.d) \
  $(BUILD)/tests/cuda/shim.d $(BUILD)/tests/cuda/backend_cuda.d $(BUILD)/tests/cuda/test_backend_ops.d

# libFuzzer harnesses of every reader: make fuzz (FUZZ_SECONDS each), make fuzz-regress
-include tests/fuzz/fuzz.mk

# ---- examples: programs built on the library (examples/*.c -> $(BUILD)/examples/*) ----------
EXAMPLES := $(patsubst examples/%.c,$(BUILD)/examples/%,$(wildcard examples/*.c))
.PHONY: examples
all: examples
examples: $(EXAMPLES)

$(BUILD)/examples/%: examples/%.c $(VIZ_A) $(BUILD)/libqkv.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -MF $@.d -o $@ $< $(VIZ_A) $(BUILD)/libqkv.a $(LDLIBS) $(VIZ_LIBS)

-include $(EXAMPLES:=.d)
