# kvlm build. `make` builds build/kvlm, build/libkvlm.a and build/libkvlm.so;
# `make test` runs the test suite; `make test SANITIZE=1` runs it under ASan
# and UBSan; `make test SANITIZE=thread` the threaded tests under TSan and
# `make test-tsan-ci` CI's short selection of them; `make test-browser` the
# web page in headless chromium; `make install PREFIX=...` installs the CLI, both libraries, the
# public headers and kvlm.pc (`make test-install` checks that and builds
# examples/ against it); `make abi-check` compares libkvlm.so's ABI with
# the one recorded in abi/ for its soname; `make bench` runs the benchmarks; `make fixtures`
# regenerates the reference fixtures with PyTorch (needs `scripts/setup.sh --dev`).
# `make CROSS=aarch64` builds for aarch64 with aarch64-linux-gnu-gcc in
# build-aarch64/ (`scripts/setup.sh --arm64` installs the cross toolchain,
# QEMU and the arm64 libraries); `make test-aarch64` runs its tests under
# QEMU user-mode emulation (docs/arm64.md).

CC      ?= cc
SANITIZE ?= 0
OPT     ?= -O3

# The target architecture: the host's, or aarch64 with CROSS=aarch64. It
# decides which kernel files are built (x86-64: the AVX2 / AVX-512 ones;
# aarch64: the NEON ones; anything else: the scalar reference only).
CROSS   ?=
ifeq ($(CROSS),aarch64)
CC      := aarch64-linux-gnu-gcc
ARCH    := aarch64
else ifneq ($(CROSS),)
$(error CROSS=$(CROSS): only CROSS=aarch64 is known)
else
ARCH    := $(patsubst arm64,aarch64,$(patsubst amd64,x86_64,$(shell uname -m)))
endif
# Programs run on the build machine while building (tools/embed_files).
HOSTCC  ?= cc

ifeq ($(SANITIZE),1)
BUILD   := build-san
SANFLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined
OPT     := -O1 -g -fno-omit-frame-pointer $(SANFLAGS)
else ifeq ($(SANITIZE),thread)
# ThreadSanitizer: the server, scheduler and thread-pool tests (TSAN_TESTS)
# in build-tsan/, run by tests/run_tsan.sh, which fails on any report,
# including one from a kvlm serve child process. OpenMP pragmas (the model
# loaders' parallel transposes) are compiled out: libgomp is not
# instrumented, so TSan cannot see its barriers and would report every
# parallel loop. The threads kvlm owns (engine, thread pool, HTTP) are all
# pthreads and all instrumented.
BUILD   := build-tsan
SANFLAGS := -fsanitize=thread
OPT     := -O1 -g -fno-omit-frame-pointer $(SANFLAGS)
OMPFLAGS := -Wno-unknown-pragmas -Wno-unused-variable -Wno-unused-but-set-variable
OMPLIBS := -lgomp
else ifeq ($(SANITIZE),abi)
# The library with debug information, for the ABI check (make abi-check):
# abidw reads the public types from its DWARF. Not a sanitizer; it shares
# the switch so that it gets a build directory of its own.
BUILD   := build-abi
SANFLAGS :=
OPT     := -O1 -g
else
BUILD   := build
SANFLAGS :=
endif
ifneq ($(CROSS),)
BUILD   := $(BUILD)-$(CROSS)
endif
# The portable forms get build directories of their own (build-posix,
# build-noomp, build-posix-noomp), so they never mix with the default's.
ifeq ($(KVLM_POSIX_ONLY),1)
BUILD   := $(BUILD)-posix
endif
ifeq ($(OPENMP),0)
BUILD   := $(BUILD)-noomp
endif

# OPENMP=0 builds without OpenMP (a compiler without it, such as Apple's
# clang without libomp): the model loaders' parallel loops and the
# bandwidth probes then run on one thread (src/omp_compat.h).
OPENMP  ?= 1
ifeq ($(OPENMP),0)
OMPFLAGS := -Wno-unknown-pragmas -Wno-unused-variable -Wno-unused-but-set-variable -DKVLM_NO_OPENMP
OMPLIBS :=
endif
OMPFLAGS ?= -fopenmp
# gcc 12 for aarch64 stops with an internal compiler error when it
# vectorises a reduction over double fmax at -O3 (stats.c, the tests);
# fmax stays a call to libm there.
ifeq ($(ARCH),aarch64)
ARCH_CFLAGS := -fno-builtin-fmax
endif
# KVLM_POSIX_ONLY=1 builds the POSIX forms of the Linux-only calls that
# have one on Linux too, to test them there: close-on-exec and non-blocking
# descriptors with fcntl (src/server/posix_fd.h), the default thread count
# from the online processors and no thread placement (cpu_mask.h: no
# sched_getaffinity / sched_setaffinity / sched_getcpu), the thread pool's
# polling sleep instead of futexes (team.c).
ifeq ($(KVLM_POSIX_ONLY),1)
ARCH_CFLAGS += -DKVLM_POSIX_ONLY
endif
CFLAGS  := -std=c17 $(OPT) $(OMPFLAGS) -Wall -Wextra -Werror -D_GNU_SOURCE $(ARCH_CFLAGS) -Iinclude -Isrc
LDFLAGS := $(filter-out -W% -D%,$(OMPFLAGS)) $(SANFLAGS)
LDLIBS  := -ljansson -lpcre2-8 -lxxhash -lmicrohttpd -lpthread -lm $(OMPLIBS)

# SIMD kernels are compiled per file for their ISA and chosen at run time.
# x86-64: *_avx2.c, *_avx512.c; aarch64: *_neon.c (Advanced SIMD, part of
# every aarch64 CPU: no flag), *_dotprod.c (Armv8.2 SDOT/UDOT) and
# *_i8mm.c (Armv8.6 SMMLA, with SDOT), *_arm_bf16.c (Armv8.6 BFDOT). Each
# architecture's files, and the x86 ones that only dispatch to x86 kernels
# (X86_ONLY), are left out of the other's build.
AVX2_FLAGS   := -mavx2 -mfma -mf16c
AVX512_FLAGS := -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512bf16 -mfma -mf16c
DOTPROD_FLAGS := -march=armv8.2-a+dotprod
I8MM_FLAGS    := -march=armv8.2-a+dotprod+i8mm
BF16_FLAGS    := -march=armv8.2-a+dotprod+i8mm+bf16
X86_ONLY     := %_avx2.c %_avx512.c src/kernels/quant_int8_prep.c
ARM_ONLY     := %_neon.c %_dotprod.c %_i8mm.c %_arm_bf16.c
# Tests of one architecture's kernels (their sources name them directly).
X86_ONLY_TESTS := tests/test_quant_int8_decode.c tests/test_quant_int8.c tests/test_quant_int8_batch.c
ARM_ONLY_TESTS := tests/test_quant_int8_dotprod.c
# Tests of kernels both architectures have (test_bf16_dot: avx512-bf16, neon-bf16).
SIMD_TESTS     := tests/test_bf16_dot.c

# Three floors: the library (libkvlm, everything below src/app), the code
# the programs share on top of it (libkvlm_app.a: chat templates, the OpenAI
# codecs, tool-call parsing, KV sizing), and the programs (src/cli,
# src/server), which use the library only through include/ (make
# check-boundary).
LIB_SRC  := $(wildcard src/*.c src/formats/*.c src/kernels/*.c src/tokenizer/*.c src/model/*.c src/runtime/*.c src/measure/*.c src/grammar/*.c)
APP_SRC  := $(wildcard src/app/*.c src/app/template/*.c)
CLI_SRC  := $(wildcard src/cli/*.c src/server/*.c)
TEST_SRC := $(wildcard tests/test_*.c)
ifeq ($(ARCH),x86_64)
LIB_SRC  := $(filter-out $(ARM_ONLY),$(LIB_SRC))
TEST_SRC := $(filter-out $(ARM_ONLY_TESTS),$(TEST_SRC))
else ifeq ($(ARCH),aarch64)
LIB_SRC  := $(filter-out $(X86_ONLY),$(LIB_SRC))
TEST_SRC := $(filter-out $(X86_ONLY_TESTS),$(TEST_SRC))
else
LIB_SRC  := $(filter-out $(X86_ONLY) $(ARM_ONLY),$(LIB_SRC))
TEST_SRC := $(filter-out $(X86_ONLY_TESTS) $(ARM_ONLY_TESTS) $(SIMD_TESTS),$(TEST_SRC))
endif

LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o)
APP_OBJ  := $(APP_SRC:%.c=$(BUILD)/%.o)
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/%.o)
TESTS    := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
TSAN_TESTS := test_server test_chat_server test_run_server test_scheduler test_team test_threads test_stop \
              test_openai_request test_server_race test_server_ops test_server_conns test_engine_view \
              test_server_replica test_agent_check test_speculative_server
# CI's ThreadSanitizer run (make test-tsan-ci, about 2 minutes with the
# build): the tests that put concurrent load on the server (mixed requests,
# cancels, 429s, log reopening; the loading thread; connection storms), the
# scheduler and the thread pool, the agent check and speculative serving.
# The full list above takes about 18 minutes.
TSAN_CI_TESTS := test_server_race test_server_ops test_server_conns test_scheduler test_team test_threads \
                 test_server_replica test_agent_check test_speculative_server
ifeq ($(SANITIZE),thread)
TESTS    := $(TSAN_TESTS:%=$(BUILD)/tests/%)
endif

# The library objects are compiled once for both libkvlm.a and libkvlm.so:
# position-independent, and hidden unless declared in a public header
# (include/*.h wrap their declarations in a default-visibility block), so
# the .so exports only kvlm_* and calls inside the library stay direct.
LIB_CFLAGS := -fPIC -fvisibility=hidden -fno-semantic-interposition
$(LIB_OBJ): CFLAGS += $(LIB_CFLAGS)

.PHONY: all test test-tsan-ci bench run fixtures clean setup
.SECONDARY:
all: $(BUILD)/kvlm $(BUILD)/libkvlm.so

# Objects built with other LIB_CFLAGS (an older tree) are rebuilt.
$(LIB_OBJ): $(BUILD)/lib_cflags
$(BUILD)/lib_cflags: FORCE
	@mkdir -p $(dir $@)
	@echo '$(LIB_CFLAGS)' | cmp -s - $@ || echo '$(LIB_CFLAGS)' > $@
.PHONY: FORCE

# The int8-activation kernels also use the dot-product extensions.
$(BUILD)/src/kernels/quant_int8_avx512.o: AVX512_FLAGS += -mavx512vnni
$(BUILD)/src/kernels/quant_int8_avx2.o: AVX2_FLAGS += -mavxvnni
$(BUILD)/src/kernels/quant_int8_decode_avx512.o: AVX512_FLAGS += -mavx512vnni
$(BUILD)/src/kernels/quant_int8_decode_avx2.o: AVX2_FLAGS += -mavxvnni
$(BUILD)/src/kernels/quant_int8_q4_0_avx512.o: AVX512_FLAGS += -mavx512vnni
$(BUILD)/src/kernels/quant_int8_lut_avx512.o: AVX512_FLAGS += -mavx512vnni
$(BUILD)/src/kernels/quant_int8_lut_vbmi_avx512.o: AVX512_FLAGS += -mavx512vnni -mavx512vbmi
$(BUILD)/src/kernels/quant_int8_q4_0_packed_avx512.o: AVX512_FLAGS += -mavx512vnni
$(BUILD)/src/kernels/quant_int8_q4_0_vbmi_avx512.o: AVX512_FLAGS += -mavx512vnni -mavx512vbmi -mgfni

$(BUILD)/%_avx2.o: %_avx2.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(AVX2_FLAGS) -MMD -MP -c $< -o $@

$(BUILD)/%_avx512.o: %_avx512.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(AVX512_FLAGS) -MMD -MP -c $< -o $@

$(BUILD)/%_dotprod.o: %_dotprod.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(DOTPROD_FLAGS) -MMD -MP -c $< -o $@

$(BUILD)/%_i8mm.o: %_i8mm.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(I8MM_FLAGS) -MMD -MP -c $< -o $@

$(BUILD)/%_arm_bf16.o: %_arm_bf16.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(BF16_FLAGS) -MMD -MP -c $< -o $@

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/libkvlm.a: $(LIB_OBJ)
	rm -f $@
	ar rcs $@ $^

$(BUILD)/libkvlm_app.a: $(APP_OBJ)
	rm -f $@
	ar rcs $@ $^

$(BUILD)/kvlm: $(CLI_OBJ) $(BUILD)/web_files.o $(BUILD)/libkvlm_app.a $(BUILD)/libkvlm.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# The library/app boundary (docs/architecture.md): `make check-boundary`
# links the kvlm program against libkvlm.so, which exports only the public
# API, so a program or src/app calling a library-internal function fails the
# link; and scripts/check_boundary.sh fails when src/cli, src/server or
# src/app includes a library header other than include/*.h. A few seconds;
# `make test` runs it first.
.PHONY: check-boundary
$(BUILD)/kvlm-shared: $(CLI_OBJ) $(BUILD)/web_files.o $(BUILD)/libkvlm_app.a $(BUILD)/libkvlm.so
	$(CC) $(LDFLAGS) -o $@ $(CLI_OBJ) $(BUILD)/web_files.o $(BUILD)/libkvlm_app.a -L$(BUILD) -l:libkvlm.so $(LDLIBS)
check-boundary: $(BUILD)/kvlm-shared
	./scripts/check_boundary.sh
	@echo "check-boundary: kvlm links against libkvlm.so; src/cli, src/server and src/app include only include/*.h from the library"

# The web page (web/, docs/web.md) is compiled into kvlm: tools/embed_files
# writes its files as C arrays with their entity tags into
# $(BUILD)/web_files.c. The list of files is a prerequisite of its own, so
# removing a file rebuilds the table too.
WEB_FILES := $(sort $(wildcard web/*.html web/*.css web/*.js web/*.svg web/*.png))
$(BUILD)/tools/embed_files: tools/embed_files.c | setup
	@mkdir -p $(dir $@)
	$(HOSTCC) -std=c17 -O2 -Wall -Wextra -Werror -o $@ $<
$(BUILD)/web_files.list: FORCE
	@mkdir -p $(dir $@)
	@echo '$(WEB_FILES)' | cmp -s - $@ || echo '$(WEB_FILES)' > $@
$(BUILD)/web_files.c: $(BUILD)/tools/embed_files $(BUILD)/web_files.list $(WEB_FILES)
	$(BUILD)/tools/embed_files $@ web $(WEB_FILES)
$(BUILD)/web_files.o: $(BUILD)/web_files.c
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@
-include $(BUILD)/web_files.d

$(BUILD)/tests/%: $(BUILD)/tests/%.o $(BUILD)/tests/helpers.o $(BUILD)/libkvlm_app.a $(BUILD)/libkvlm.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) -lcmocka

# The agent-check responder is the server's own (a TCP socket of its own,
# docs/deploy.md), not shared code: its unit test links that one object.
$(BUILD)/tests/test_agent_check: $(BUILD)/tests/test_agent_check.o $(BUILD)/tests/helpers.o \
		$(BUILD)/src/server/agent_check.o $(BUILD)/libkvlm_app.a $(BUILD)/libkvlm.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) -lcmocka

# The API shapes' parsers with the server's response store (one object).
$(BUILD)/tests/test_api_shapes: $(BUILD)/tests/test_api_shapes.o $(BUILD)/tests/helpers.o \
		$(BUILD)/src/server/responses_store.o $(BUILD)/libkvlm_app.a $(BUILD)/libkvlm.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) -lcmocka

$(BUILD)/tests/%.o: tests/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests -MMD -MP -c $< -o $@

# llama.cpp's tokenizer test vocabularies (tests/fixtures/llama_vocab, see
# its README) are committed xz-compressed; tests/test_tokenizer_vectors
# reads them decompressed from $(BUILD)/tests/vocab.
VOCAB_XZ   := $(wildcard tests/fixtures/llama_vocab/*.gguf.xz)
VOCAB_GGUF := $(VOCAB_XZ:tests/fixtures/llama_vocab/%.xz=$(BUILD)/tests/vocab/%)
$(VOCAB_GGUF): $(BUILD)/tests/vocab/%: tests/fixtures/llama_vocab/%.xz | setup
	@mkdir -p $(dir $@)
	xz -dc $< > $@.tmp && mv $@.tmp $@

ifeq ($(SANITIZE),thread)
test: $(BUILD)/kvlm $(TESTS)
	@KVLM=$(BUILD)/kvlm ./tests/run_tsan.sh $(BUILD)
test-tsan-ci: $(BUILD)/kvlm $(TSAN_CI_TESTS:%=$(BUILD)/tests/%)
	@KVLM=$(BUILD)/kvlm ./tests/run_tsan.sh $(BUILD) $(TSAN_CI_TESTS)
else
test-tsan-ci:
	@$(MAKE) --no-print-directory SANITIZE=thread test-tsan-ci

test: $(BUILD)/kvlm $(TESTS) $(VOCAB_GGUF) check-boundary
	@KVLM=$(BUILD)/kvlm ./tests/run_all.sh $(BUILD)
	@$(MAKE) --no-print-directory test-sdk
endif

# kvlm serve against the official SDKs from npm, @anthropic-ai/sdk (Messages)
# and openai (Responses): tests/sdk/sdk.test.mjs, about 5 seconds; the
# pinned node modules are installed first (scripts/setup.sh --sdk: npm ci in
# tests/sdk when its package-lock.json changed). Part of `make test`.
.PHONY: test-sdk setup-sdk
setup-sdk:
	@./scripts/setup.sh --sdk
test-sdk: $(BUILD)/kvlm setup-sdk
	KVLM=$(BUILD)/kvlm node --test --test-concurrency=1 --test-reporter=spec tests/sdk/sdk.test.mjs

# The web page in headless chromium (tests/browser/web.test.mjs, driven by
# playwright-core; about 15 seconds): `make test-browser`. `make screenshots`
# writes docs/img/web-*.png with the same harness. Both install chromium and
# the pinned node modules first (scripts/setup.sh --browser); neither is part
# of `make test`.
.PHONY: test-browser screenshots setup-browser
setup-browser:
	./scripts/setup.sh --browser
test-browser: $(BUILD)/kvlm setup-browser
	KVLM=$(BUILD)/kvlm node --test --test-concurrency=1 --test-reporter=spec tests/browser/web.test.mjs
screenshots: $(BUILD)/kvlm setup-browser
	KVLM=$(BUILD)/kvlm node tests/browser/screenshots.mjs docs/img

# Every compile waits for scripts/setup.sh, which installs the Debian
# packages (headers, cmocka) still missing and returns at once when all are
# present, so `make`, `make test` or `make run` work first on a fresh
# machine. Order-only: running it never makes an object out of date.
$(LIB_OBJ) $(APP_OBJ) $(CLI_OBJ) $(TESTS:=.o) $(BUILD)/tests/helpers.o: | setup

bench: $(BUILD)/kvlm
	./bench/run.sh $(BUILD)/kvlm

RUN_PROMPT ?= ROMEO:
run:
	./scripts/setup.sh
	$(MAKE) $(BUILD)/kvlm
	$(BUILD)/kvlm run -m models/shakespeare-gpt2 -p "$(RUN_PROMPT)" -n 100 --temp 0.8 --top-k 40 --top-p 0.9 \
		--frequency-penalty 0.7 --penalty-window 6 --stats

setup:
	./scripts/setup.sh

fixtures:
	/usr/bin/python3 tools/make_gpt2_fixtures.py tests/fixtures/gpt2

clean:
	rm -rf build build-san build-tsan build-fuzz build-abi build-aarch64 build-san-aarch64 build-posix build-noomp build-posix-noomp

-include $(LIB_OBJ:.o=.d) $(APP_OBJ:.o=.d) $(CLI_OBJ:.o=.d) $(TESTS:=.d)

# ---------------------------------------------------------------------------
# Tokenizer benchmark (bench/tokenizer_bench.c): encode MB/s on one thread,
# word cache off / cold / warm. `make bench-tokenizer`; never part of `make test`.
.PHONY: bench-tokenizer
$(BUILD)/bench/tokenizer_bench: bench/tokenizer_bench.c $(BUILD)/libkvlm.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libkvlm.a $(LDFLAGS) $(LDLIBS)

bench-tokenizer: $(BUILD)/bench/tokenizer_bench
	./$(BUILD)/bench/tokenizer_bench

# Speculative verification cost (bench/verify_step_bench.c): one engine step
# of T rows against the one-row decode step. `make bench-verify MODEL=PATH
# [THREADS=N]`; never part of `make test`.
.PHONY: bench-verify
$(BUILD)/bench/verify_step_bench: bench/verify_step_bench.c $(BUILD)/libkvlm.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libkvlm.a $(LDFLAGS) $(LDLIBS)

bench-verify: $(BUILD)/bench/verify_step_bench
	./$(BUILD)/bench/verify_step_bench $(MODEL) $(THREADS)

# Regenerates the tokenizer fixture and the Unicode class table from the
# Python reference (standard library only; deterministic).
.PHONY: tokenizer-fixtures
tokenizer-fixtures:
	/usr/bin/python3 tools/tokenizer_reference.py selftest
	/usr/bin/python3 tools/tokenizer_reference.py fixture tests/fixtures/tokenizer/gpt2_cases.json
	/usr/bin/python3 tools/tokenizer_reference.py unicode-table src/tokenizer/unicode_classes.c

# ---------------------------------------------------------------------------
# Llama-family reference fixtures (tests/fixtures/llama): tiny random Llama,
# Mistral and Qwen2 models in the Hugging Face layout with float64 expected
# logits from tools/llama_reference.py. Deterministic; needs python3-torch.
.PHONY: llama-fixtures
llama-fixtures:
	/usr/bin/python3 tools/llama_reference.py selftest
	/usr/bin/python3 tools/make_llama_fixtures.py tests/fixtures/llama

.PHONY: layers-fixtures
layers-fixtures:
	/usr/bin/python3 tools/layers_reference.py make tests/fixtures/layers

.PHONY: layers-gguf-fixtures
layers-gguf-fixtures:
	/usr/bin/python3 tools/make_layers_gguf.py /tmp/kvlm-layers-gguf --llama-cpp $(or $(LLAMA_CPP),/tmp/peer/llama.cpp) \
	    --commit tests/fixtures/layers_gguf

# Q4_K_M files of the same families widened to K-quant rows (hidden 256),
# with the float64 reference of their dequantised weights and
# llama-perplexity's figure (tools/make_layers_kquant.py, a few minutes);
# the two smallest are committed to tests/fixtures/layers_gguf.
.PHONY: layers-kquant-fixtures
layers-kquant-fixtures:
	/usr/bin/python3 tools/make_layers_kquant.py /tmp/kvlm-layers-kquant --llama-cpp $(or $(LLAMA_CPP),/tmp/peer/llama.cpp) \
	    --commit tests/fixtures/layers_gguf

# ---------------------------------------------------------------------------
# GGUF and quantised weights. `make bench-quant`: decode (1-row) matmul
# throughput per weight dtype and ISA against the measured read bandwidth
# (bench/quant_bench.c; never part of `make test`). `make gguf-fixtures`:
# converts the Hugging Face test fixtures to GGUF (tools/write_gguf.py) with
# expected logits from the dequantised weights; needs python3-torch.
.PHONY: bench-quant gguf-fixtures
$(BUILD)/bench/quant_bench: bench/quant_bench.c bench/bench_weights.h $(BUILD)/libkvlm.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libkvlm.a $(LDFLAGS) $(LDLIBS)

bench-quant: $(BUILD)/bench/quant_bench
	./$(BUILD)/bench/quant_bench

# `make bench-batch`: matmul time per call against the activation rows
# (1..16, a decode step of that many sequences) per weight dtype
# (bench/batch_bench.c; never part of `make test`).
.PHONY: bench-batch
$(BUILD)/bench/batch_bench: bench/batch_bench.c bench/bench_weights.h $(BUILD)/libkvlm.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libkvlm.a $(LDFLAGS) $(LDLIBS)

bench-batch: $(BUILD)/bench/batch_bench
	./$(BUILD)/bench/batch_bench

gguf-fixtures:
	/usr/bin/python3 tools/write_gguf.py selftest
	/usr/bin/python3 tools/make_gguf_fixtures.py tests/fixtures/llama_gguf

# ---------------------------------------------------------------------------
# Cross-engine fixtures (tests/fixtures/llamacpp, see its README.md): tiny
# gpt2 / llama / qwen2 / qwen3 GGUFs written with llama.cpp's gguf-py,
# quantised with its llama-quantize, expected logits from a float64 NumPy
# reference and perplexities from llama-perplexity. Needs a llama.cpp source
# tree built with CMake in $(LLAMA_CPP)/build and python3-numpy; the full set
# goes to $(LLAMACPP_OUT), the committed subset to tests/fixtures/llamacpp.
# `make test` checks kvlm against the committed subset (`make test-llamacpp`
# runs only that test).
LLAMA_CPP    ?= /tmp/peer/llama.cpp
LLAMACPP_OUT ?= build/llamacpp-fixtures
.PHONY: fixtures-llamacpp test-llamacpp
fixtures-llamacpp:
	/usr/bin/python3 tools/make_llamacpp_fixtures.py $(LLAMACPP_OUT) --llama-cpp $(LLAMA_CPP) --commit tests/fixtures/llamacpp

test-llamacpp: $(BUILD)/kvlm $(BUILD)/tests/test_llamacpp_files
	KVLM=$(BUILD)/kvlm $(BUILD)/tests/test_llamacpp_files

# kvlm vs llama.cpp on the same files, alternated (bench/vs_llamacpp_suite.sh):
# `make bench-vs-llamacpp LLAMA_CPP=/path/to/llama.cpp`. Needs a llama.cpp
# build; never part of `make test`.
.PHONY: bench-vs-llamacpp
bench-vs-llamacpp: $(BUILD)/kvlm $(VOCAB_GGUF)
	./bench/vs_llamacpp_suite.sh $(LLAMA_CPP)

# ---------------------------------------------------------------------------
# The measurement report of the shipped model (kvlm report): KV sizes, prefill
# vs decode, cache on vs off, next-token statistics, repetition; markdown with
# SVG charts and the raw JSON, committed in docs/report/ (see docs/report.md).
# `make report` regenerates it; REPORT_MODEL, REPORT_PROMPT and REPORT_DIR
# choose another model, prompt or directory (REPORT_FLAGS: extra options).
REPORT_MODEL  ?= models/shakespeare-gpt2
REPORT_PROMPT ?= JULIET: O Romeo, Romeo! wherefore art thou
REPORT_DIR    ?= docs/report
REPORT_FLAGS  ?=
.PHONY: report
report: $(BUILD)/kvlm
	$(BUILD)/kvlm report -m $(REPORT_MODEL) -p "$(REPORT_PROMPT)" -o $(REPORT_DIR) $(REPORT_FLAGS)

# ---------------------------------------------------------------------------
# Embeddable library: libkvlm.so with a versioned soname, `make install` /
# `make uninstall` (PREFIX, default /usr/local; DESTDIR honoured), kvlm.pc
# for pkg-config, and `make test-install`, which installs into a temporary
# prefix and builds and runs examples/ against it (never part of `make test`).
# The version comes from include/kvlm.h (KVLM_VERSION). Until 1.0 every
# minor version may change the ABI, so the soname carries MAJOR.MINOR
# (libkvlm.so.0.17); from 1.0 on, MAJOR alone (docs/embedding.md,
# "Versions"; make abi-check holds each soname to its recorded ABI).
VERSION    := $(shell sed -n 's/^\#define KVLM_VERSION "\(.*\)"/\1/p' include/kvlm.h)
VERSION_MAJOR := $(word 1,$(subst ., ,$(VERSION)))
VERSION_MINOR := $(word 2,$(subst ., ,$(VERSION)))
SONAME     := libkvlm.so.$(if $(filter 0,$(VERSION_MAJOR)),$(VERSION_MAJOR).$(VERSION_MINOR),$(VERSION_MAJOR))
SHLIB      := libkvlm.so.$(VERSION)
# What the library itself links against (the HTTP server is in the CLI).
LIB_LIBS   := -ljansson -lpcre2-8 -lxxhash -lpthread -lm
PUBLIC_HEADERS := include/kvlm.h include/kvlm_tokenizer.h include/kvlm_measure.h

PREFIX     ?= /usr/local
BINDIR     ?= $(PREFIX)/bin
LIBDIR     ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig

.PHONY: lib install uninstall test-install
lib: $(BUILD)/libkvlm.a $(BUILD)/libkvlm.so

$(BUILD)/$(SHLIB): $(LIB_OBJ)
	$(CC) -shared -Wl,-soname,$(SONAME) -Wl,--no-undefined -Wl,--as-needed $(LDFLAGS) -o $@ $^ $(LIB_LIBS)

$(BUILD)/libkvlm.so: $(BUILD)/$(SHLIB)
	ln -sf $(SHLIB) $(BUILD)/$(SONAME)
	ln -sf $(SONAME) $@

# kvlm.pc: jansson, PCRE2 and xxHash have .pc files of their own
# (Requires.private); OpenMP (libgomp), pthreads and libm do not.
define KVLM_PC
prefix=$(PREFIX)
libdir=$(LIBDIR)
includedir=$(INCLUDEDIR)

Name: kvlm
Description: CPU-first LLM inference: paged KV cache, continuous batching, sampling
Version: $(VERSION)
Requires.private: jansson libpcre2-8 libxxhash
Cflags: -I$${includedir}
Libs: -L$${libdir} -lkvlm
Libs.private: -lgomp -lpthread -lm
endef
export KVLM_PC

install: $(BUILD)/kvlm $(BUILD)/libkvlm.a $(BUILD)/libkvlm.so
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(PKGCONFIGDIR)
	install -m 755 $(BUILD)/kvlm $(DESTDIR)$(BINDIR)/kvlm
	install -m 644 $(BUILD)/libkvlm.a $(DESTDIR)$(LIBDIR)/libkvlm.a
	install -m 755 $(BUILD)/$(SHLIB) $(DESTDIR)$(LIBDIR)/$(SHLIB)
	ln -sf $(SHLIB) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(LIBDIR)/libkvlm.so
	install -m 644 $(PUBLIC_HEADERS) $(DESTDIR)$(INCLUDEDIR)/
	printf '%s\n' "$$KVLM_PC" > $(DESTDIR)$(PKGCONFIGDIR)/kvlm.pc

uninstall:
	rm -f $(DESTDIR)$(BINDIR)/kvlm $(DESTDIR)$(LIBDIR)/libkvlm.a $(DESTDIR)$(LIBDIR)/$(SHLIB) \
		$(DESTDIR)$(LIBDIR)/$(SONAME) $(DESTDIR)$(LIBDIR)/libkvlm.so $(DESTDIR)$(PKGCONFIGDIR)/kvlm.pc \
		$(addprefix $(DESTDIR)$(INCLUDEDIR)/,$(notdir $(PUBLIC_HEADERS)))

test-install: $(BUILD)/kvlm $(BUILD)/libkvlm.a $(BUILD)/libkvlm.so
	MAKE="$(MAKE)" ./tests/install_check.sh

# ABI check (scripts/abi.sh, docs/embedding.md "Versions"): builds
# libkvlm.so with debug information in build-abi/, dumps the ABI its public
# headers declare with abidw (abigail-tools) and compares it with abidiff
# against abi/<soname>.abi, the ABI recorded for this soname. Added
# functions pass; any change to an existing function or type, or a removal,
# fails until the soname changes (the version's minor number before 1.0).
# `make abi-baseline` records the baseline of the current soname.
.PHONY: abi-check abi-baseline abi-lib
abi-lib:
	@$(MAKE) --no-print-directory SANITIZE=abi build-abi/libkvlm.so
abi-check: abi-lib
	./scripts/abi.sh check build-abi/libkvlm.so
abi-baseline: abi-lib
	./scripts/abi.sh baseline build-abi/libkvlm.so

# ---------------------------------------------------------------------------
# Chat-template fixtures (tests/fixtures/templates): real models' templates
# copied from a llama.cpp checkout with their provenance, and their expected
# renderings by Python's jinja2 configured as transformers configures it
# (tools/template_reference.py; needs python3-jinja2). LLAMA_CPP names the
# checkout; without it only the expectations are regenerated.
# TEMPLATE_PYTHON names a Python that has jinja2 (python3-jinja2 for
# Debian's /usr/bin/python3, the default).
.PHONY: fixtures-templates
LLAMA_CPP ?=
TEMPLATE_PYTHON ?= /usr/bin/python3
fixtures-templates:
	$(if $(LLAMA_CPP),$(TEMPLATE_PYTHON) tools/import_chat_templates.py $(LLAMA_CPP) tests/fixtures/templates)
	$(TEMPLATE_PYTHON) tools/template_reference.py tests/fixtures/templates

# The sampler's vector kernels promise the same bits on every ISA: no
# multiply-add may be fused in them.
$(patsubst %.c,$(BUILD)/%.o,$(wildcard src/kernels/vec_*.c)): CFLAGS += -ffp-contract=off

# Sampler benchmark (bench/sampler_bench.c): microseconds per sample at 50k
# and 150k vocabularies, and the exp kernels per ISA. `make bench-sampler`;
# never part of `make test`.
.PHONY: bench-sampler
$(BUILD)/bench/sampler_bench: bench/sampler_bench.c $(BUILD)/libkvlm.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libkvlm.a $(LDFLAGS) $(LDLIBS)

bench-sampler: $(BUILD)/bench/sampler_bench
	./$(BUILD)/bench/sampler_bench

# ---------------------------------------------------------------------------
# Fuzzing (docs/fuzzing.md): libFuzzer harnesses in fuzz/, one per parser,
# built with clang under ASan and UBSan in build-fuzz/ (needs
# `scripts/setup.sh --fuzz`). `make fuzz TARGET=gguf SECONDS=60` runs one
# target from its committed seed corpus fuzz/corpus/<target>/ (new inputs go
# to build-fuzz/corpus/<target>/, crashes to build-fuzz/crashes/<target>/);
# `make fuzz-smoke` runs every target for FUZZ_SMOKE_SECONDS each;
# `make -j2 fuzz-campaign` gives each FUZZ_CAMPAIGN_SECONDS of CPU time
# (1 CPU-hour; fuzz/campaign.sh, resumable), two targets at a time;
# `make fuzz-keep` adds the campaign's new-coverage inputs to the committed
# fuzz/found/<target>/ (fuzz/keep.sh), read by every later run.
FUZZ_CC      ?= clang
FUZZ_BUILD   := build-fuzz
FUZZ_SAN     := -fsanitize=address,undefined -fno-sanitize-recover=undefined
FUZZ_CFLAGS  := -std=c17 -O1 -g -fno-omit-frame-pointer -fopenmp -Wall -Wextra -Werror -D_GNU_SOURCE \
                -Iinclude -Isrc -DKVLM_FUZZING $(FUZZ_SAN)
FUZZ_TARGETS := $(patsubst fuzz/fuzz_%.c,%,$(wildcard fuzz/fuzz_*.c))
# The kernels and every per-ISA file (SIMD, run-time dispatch, their own
# target flags) are no parser: the fuzz targets link the regular build's
# objects of them (gcc, uninstrumented).
FUZZ_NATIVE_SRC := $(filter src/kernels/% %_avx2.c %_avx512.c,$(LIB_SRC))
FUZZ_LIB_OBJ := $(patsubst %.c,$(FUZZ_BUILD)/%.o,$(filter-out $(FUZZ_NATIVE_SRC),$(LIB_SRC)))
FUZZ_KERN_OBJ := $(patsubst %.c,build/%.o,$(FUZZ_NATIVE_SRC))
# The programs' shared code (src/app: the request parser, chat templates,
# tool-call parsing) is instrumented like the library and goes in the same
# archive.
FUZZ_APP_OBJ := $(APP_SRC:%.c=$(FUZZ_BUILD)/%.o)
TARGET       ?= gguf
SECONDS      ?= 60
FUZZ_SMOKE_SECONDS    ?= 8
FUZZ_CAMPAIGN_SECONDS ?= 3600
FUZZ_JOBS    ?= 1

$(FUZZ_BUILD)/%.o: %.c | setup-fuzz
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -Ifuzz -MMD -MP -c $< -o $@
$(FUZZ_BUILD)/libkvlm-fuzz.a: $(FUZZ_LIB_OBJ) $(FUZZ_APP_OBJ) $(FUZZ_KERN_OBJ)
	rm -f $@
	ar rcs $@ $^
$(FUZZ_BUILD)/fuzz_%: $(FUZZ_BUILD)/fuzz/fuzz_%.o $(FUZZ_BUILD)/libkvlm-fuzz.a
	$(FUZZ_CC) -fopenmp $(FUZZ_SAN) -fsanitize=fuzzer -o $@ $^ $(LDLIBS) -lgomp

.PHONY: fuzz fuzz-build fuzz-smoke fuzz-campaign fuzz-keep $(FUZZ_TARGETS:%=fuzz-campaign-%) setup-fuzz
setup-fuzz:
	./scripts/setup.sh --fuzz
fuzz-build: $(FUZZ_TARGETS:%=$(FUZZ_BUILD)/fuzz_%)
fuzz: $(FUZZ_BUILD)/fuzz_$(TARGET)
	./fuzz/run.sh $(FUZZ_BUILD) $(TARGET) $(SECONDS) $(FUZZ_JOBS)
fuzz-smoke: fuzz-build
	@for t in $(FUZZ_TARGETS); do ./fuzz/run.sh $(FUZZ_BUILD) $$t $(FUZZ_SMOKE_SECONDS) 1 || exit 1; done
fuzz-campaign: $(FUZZ_TARGETS:%=fuzz-campaign-%)
$(FUZZ_TARGETS:%=fuzz-campaign-%): fuzz-campaign-%: $(FUZZ_BUILD)/fuzz_%
	./fuzz/campaign.sh $(FUZZ_BUILD) $* $(FUZZ_CAMPAIGN_SECONDS)
fuzz-keep: fuzz-build
	@for t in $(FUZZ_TARGETS); do ./fuzz/keep.sh $(FUZZ_BUILD) $$t || exit 1; done

-include $(FUZZ_LIB_OBJ:.o=.d) $(FUZZ_APP_OBJ:.o=.d) $(FUZZ_TARGETS:%=$(FUZZ_BUILD)/fuzz/fuzz_%.d)

# ---------------------------------------------------------------------------
# Soak (bench/soak.py, docs/server.md "Soak"): mixed load against kvlm serve
# of the shipped model for SOAK_SECONDS, then leak and hang checks. Minutes
# long; never part of `make test` or CI.
SOAK_SECONDS ?= 600
.PHONY: soak
soak: $(BUILD)/kvlm
	SOAK_SECONDS=$(SOAK_SECONDS) nice -n 19 /usr/bin/python3 bench/soak.py --kvlm $(BUILD)/kvlm

# ---------------------------------------------------------------------------
# Constrained decoding benchmark (bench/grammar_bench.c): mask cost per
# token under a JSON Schema at 50k, 128k and 152k vocabularies (the last two
# unpacked by `make test`). `make bench-grammar`; never part of `make test`.
.PHONY: bench-grammar
$(BUILD)/bench/grammar_bench: bench/grammar_bench.c $(BUILD)/libkvlm.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libkvlm.a $(LDFLAGS) $(LDLIBS)

bench-grammar: $(BUILD)/bench/grammar_bench $(VOCAB_GGUF)
	./$(BUILD)/bench/grammar_bench

# ---------------------------------------------------------------------------
# Replicas behind HAProxy (docs/deploy.md): `make test-cluster` installs
# haproxy (scripts/setup.sh --cluster), checks deploy/haproxy.cfg, then runs
# three replicas of the shipped model behind it (tests/cluster/cluster_test.py,
# under a minute): prefix affinity against round robin, replicas sharing one
# --kv-cache-dir (the others served from disk what one replica wrote), a
# replica killed and one drained mid-run. Not part of `make test`; CI runs it.
.PHONY: test-cluster setup-cluster
setup-cluster:
	./scripts/setup.sh --cluster
test-cluster: $(BUILD)/kvlm setup-cluster
	haproxy -c -q -f deploy/haproxy.cfg
	/usr/bin/python3 tests/cluster/cluster_test.py --kvlm $(BUILD)/kvlm

# ---------------------------------------------------------------------------
# aarch64 under emulation (docs/arm64.md): `make test-aarch64` installs the
# cross toolchain, QEMU and the arm64 libraries (scripts/setup.sh --arm64),
# builds kvlm and AARCH64_TESTS for aarch64 in build-aarch64/ and the native
# kvlm, then runs tests/run_aarch64.sh: AARCH64_TESTS under qemu -cpu max
# (every ARM level), AARCH64_FALLBACK_TESTS under -cpu cortex-a53 (no dot
# product), AARCH64_NO_I8MM_TESTS under -cpu neoverse-n1 (dot product, no
# i8mm), and the ROMEO: text at every ARM level against the native
# build's. The kernels, the float and quantised parity (Hugging Face and
# GGUF fixtures; the llama.cpp files' logits and perplexity, neon-dotprod
# and neon-i8mm included; the per-layer attention families and the
# mixtures of experts), the
# CLI and the server: several minutes of CPU time (test_kernels 22 s,
# test_kv_q8 70 s, test_llamacpp_files 75 s of them), longer on a busy machine.
AARCH64_TESTS := test_kernels test_quant test_quant_blocks test_quant_int8_dotprod test_bf16_dot test_vec_softmax \
                 test_attention_tile test_kv_q8 test_read_sum test_public_api test_gpt2_parity \
                 test_llama_parity test_layer_archs test_moe test_llamacpp_files test_sampler test_server \
                 test_run_server
AARCH64_FALLBACK_TESTS := test_kernels test_quant_int8_dotprod test_bf16_dot test_vec_softmax test_attention_tile \
                          test_public_api test_gpt2_parity
AARCH64_NO_I8MM_TESTS := test_quant_int8_dotprod
.PHONY: test-aarch64 setup-arm64
setup-arm64:
	./scripts/setup.sh --arm64
test-aarch64: setup-arm64
	$(MAKE) --no-print-directory CROSS=aarch64 build-aarch64/kvlm $(AARCH64_TESTS:%=build-aarch64/tests/%)
	$(MAKE) --no-print-directory CROSS= build/kvlm
	./tests/run_aarch64.sh build-aarch64 build/kvlm "$(AARCH64_TESTS)" "$(AARCH64_FALLBACK_TESTS)" \
	    "$(AARCH64_NO_I8MM_TESTS)"
