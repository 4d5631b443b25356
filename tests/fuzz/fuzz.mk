# SPDX-License-Identifier: MIT
# libFuzzer harnesses for the readers of untrusted input (tests/fuzz/fuzz_*.c), built with
# clang into their own directory. Included by the main Makefile; on its own:
#   make -f Makefile -f tests/fuzz/fuzz.mk fuzz
#
#   make fuzz           each harness for FUZZ_SECONDS (default 30), starting from a copy of its
#                       seeds (tests/fuzz/corpus/<target>) in $(FUZZ_BUILD)/corpus/<target>,
#                       which keeps what the fuzzer finds between runs
#   make fuzz-<target>  one of them (safetensors config checkpoint vocab corpus args bpe
#                       lm_config lm_model lm_vocab lm_text pytorch npz json yml)
#   make fuzz-cli       the command-line fuzzer (cli_fuzz.py): random option vectors and values
#                       against every command of $(BUILD)/qkv for FUZZ_SECONDS, each run under a
#                       memory and a time limit; part of make fuzz
#   make fuzz-regress   each harness once over tests/fuzz/regressions/<target>/* and its seeds
#   make fuzz-seeds     regenerate the binary seeds (safetensors, config, checkpoint,
#                       lm_config, lm_model)
#   make fuzz-clean     remove $(FUZZ_BUILD), the accumulated corpus included
# Any crash, leak, timeout, out-of-memory or sanitizer report makes the target fail; the input
# is saved under $(FUZZ_BUILD)/artifacts/<target>/ (copy it to tests/fuzz/regressions/<target>/
# once fixed).
FUZZ_SAVED_GOAL := $(.DEFAULT_GOAL)
FUZZ_CC      ?= clang
FUZZ_CXX     ?= clang++
FUZZ_BUILD   ?= build-fuzz
FUZZ_SECONDS ?= 30
FUZZ_TARGETS := safetensors config checkpoint vocab corpus args bpe lm_config lm_model lm_vocab \
                lm_text pytorch npz json yml

LIB_SRC ?= $(sort $(foreach d,$(LIB_DIRS),$(wildcard src/$(d)/*.c)))

FUZZ_SAN    := -fsanitize=address,undefined -fno-sanitize-recover=all
# -Wno-pass-failed: clang would report the "#pragma omp simd" loops -O1 does not vectorise.
# PKG_CFLAGS, PKG_LIBS, OPENBLAS_RPATH: the main Makefile's, asked of pkg-config when a recipe
# first needs them.
FUZZ_CFLAGS  = -std=c11 -O1 -g -fno-omit-frame-pointer -Wall -Wextra -Wno-pass-failed -fopenmp \
               -D_POSIX_C_SOURCE=200809L -Iinclude -Isrc -Itests/fuzz $(PKG_CFLAGS) $(FUZZ_SAN)
FUZZ_CXXFLAGS = -std=c++17 -O1 -g -fno-omit-frame-pointer -Wall -Wextra -Iinclude -Isrc \
                $(PKG_CFLAGS) $(FUZZ_SAN)
FUZZ_LDLIBS  = $(OPENBLAS_RPATH) $(PKG_LIBS) -lstdc++ -fopenmp -lm

# Inputs longer than this are not generated: a little over the largest seed of each target.
FUZZ_MAXLEN_safetensors := 16384
FUZZ_MAXLEN_config      := 4096
FUZZ_MAXLEN_checkpoint  := 32768
FUZZ_MAXLEN_vocab       := 4096
FUZZ_MAXLEN_corpus      := 8192
FUZZ_MAXLEN_args        := 1024
FUZZ_MAXLEN_bpe         := 4096
FUZZ_MAXLEN_lm_config   := 4096
FUZZ_MAXLEN_lm_model    := 8192
FUZZ_MAXLEN_lm_vocab    := 4096
FUZZ_MAXLEN_lm_text     := 4096
FUZZ_MAXLEN_pytorch     := 8192
FUZZ_MAXLEN_npz         := 4096
FUZZ_MAXLEN_json        := 4096
FUZZ_MAXLEN_yml         := 4096
# args_parse reports on stderr and prints --help on stdout; libFuzzer keeps its own output and
# crash reports.
FUZZ_FLAGS_args         := -close_fd_mask=3

FUZZ_ENV  := ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
             OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
FUZZ_OPTS  = -timeout=5 -rss_limit_mb=2048 -max_len=$(FUZZ_MAXLEN_$*) \
             -artifact_prefix=$(FUZZ_BUILD)/artifacts/$*/ \
             $(if $(wildcard tests/fuzz/dict/$*.dict),-dict=tests/fuzz/dict/$*.dict) \
             $(FUZZ_FLAGS_$*)

FUZZ_LIB_OBJ := $(LIB_SRC:%.c=$(FUZZ_BUILD)/%.o) \
                $(patsubst %.cc,$(FUZZ_BUILD)/%.o,$(LIB_CXX))
FUZZ_BIN     := $(FUZZ_TARGETS:%=$(FUZZ_BUILD)/fuzz_%)

.PHONY: fuzz fuzz-build fuzz-regress fuzz-seeds fuzz-clean fuzz-cli $(FUZZ_TARGETS:%=fuzz-%) \
        $(FUZZ_TARGETS:%=fuzz-regress-%)

fuzz-build: $(FUZZ_BIN)
fuzz: $(FUZZ_TARGETS:%=fuzz-%) fuzz-cli
fuzz-regress: $(FUZZ_TARGETS:%=fuzz-regress-%)

# The library, instrumented for coverage (fuzzer-no-link) and sanitizers.
$(FUZZ_BUILD)/src/%.o: src/%.c Makefile tests/fuzz/fuzz.mk
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -MMD -MP -c $< -o $@

$(FUZZ_BUILD)/src/%.o: src/%.cc Makefile tests/fuzz/fuzz.mk
	@mkdir -p $(dir $@)
	$(FUZZ_CXX) $(FUZZ_CXXFLAGS) -fsanitize=fuzzer-no-link -MMD -MP -c $< -o $@

$(FUZZ_BUILD)/libqkv.a: $(FUZZ_LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(FUZZ_BUILD)/tests/fuzz/%.o: tests/fuzz/%.c Makefile tests/fuzz/fuzz.mk
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -MMD -MP -c $< -o $@

# linked by the C++ driver: the SentencePiece shim's UBSan checks (vptr) need its C++ runtime
$(FUZZ_BUILD)/fuzz_%: $(FUZZ_BUILD)/tests/fuzz/fuzz_%.o $(FUZZ_BUILD)/libqkv.a
	$(FUZZ_CXX) -fsanitize=fuzzer $(FUZZ_SAN) -o $@ $< $(FUZZ_BUILD)/libqkv.a $(FUZZ_LDLIBS)

$(FUZZ_TARGETS:%=fuzz-%): fuzz-%: $(FUZZ_BUILD)/fuzz_%
	@mkdir -p $(FUZZ_BUILD)/corpus/$* $(FUZZ_BUILD)/artifacts/$*
	cp -R tests/fuzz/corpus/$*/. $(FUZZ_BUILD)/corpus/$*/
	$(FUZZ_ENV) $< $(FUZZ_OPTS) -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 \
	  $(FUZZ_BUILD)/corpus/$*

# Every regression input and seed, once each (files given one by one are run, not fuzzed).
$(FUZZ_TARGETS:%=fuzz-regress-%): fuzz-regress-%: $(FUZZ_BUILD)/fuzz_%
	@mkdir -p $(FUZZ_BUILD)/artifacts/$*
	@files=$$(find tests/fuzz/regressions/$* tests/fuzz/corpus/$* -type f ! -name '.*' \
	  2>/dev/null | sort); \
	echo "fuzz-regress-$*: $$(echo "$$files" | grep -c .) inputs"; \
	[ -z "$$files" ] || $(FUZZ_ENV) $< $(FUZZ_OPTS) $$files

# The qkv tool as built (not instrumented: RLIMIT_AS bounds its memory, which ASan's shadow
# would not fit in). Failing runs are written to $(FUZZ_BUILD)/artifacts/cli/.
BUILD ?= build
PY ?= python3
fuzz-cli: $(BUILD)/qkv
	$(PY) tests/fuzz/cli_fuzz.py $(BUILD)/qkv --seconds $(FUZZ_SECONDS) \
	  --artifacts $(FUZZ_BUILD)/artifacts/cli

$(FUZZ_BUILD)/make_seeds: $(FUZZ_BUILD)/tests/fuzz/make_seeds.o $(FUZZ_BUILD)/libqkv.a
	$(FUZZ_CC) -fsanitize=fuzzer-no-link $(FUZZ_SAN) -o $@ $< $(FUZZ_BUILD)/libqkv.a \
	  $(FUZZ_LDLIBS)

fuzz-seeds: $(FUZZ_BUILD)/make_seeds
	$(FUZZ_ENV) $< tests/fuzz/corpus

fuzz-clean:
	rm -rf $(FUZZ_BUILD)

-include $(FUZZ_LIB_OBJ:.o=.d) $(FUZZ_TARGETS:%=$(FUZZ_BUILD)/tests/fuzz/fuzz_%.d) \
  $(FUZZ_BUILD)/tests/fuzz/make_seeds.d

# Being included changes nothing about which target a bare `make` builds.
.DEFAULT_GOAL := $(FUZZ_SAVED_GOAL)
