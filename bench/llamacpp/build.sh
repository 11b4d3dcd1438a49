#!/bin/sh
# Fetches llama.cpp's source as bundled in the npm package node-llama-cpp@3.22.1 (a git bundle,
# llama/gitRelease.bundle; its postinstall and prebuilt binaries are never used) and builds it
# for this CPU into bench/.llamacpp/. Not a test; used by bench/llamacpp/run.py (issue 40) and
# later by `make bench-serve` (llama-server). Idempotent: each step is skipped when done.
#
# Usage: bench/llamacpp/build.sh [--print-bin]   (the last line printed is the bin folder)
# Env: LLAMACPP_JOBS (default 2), LLAMACPP_NICE (default 5).
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
BENCH=$(dirname "$HERE")
DIR=${LLAMACPP_DIR:-$BENCH/.llamacpp}
PKG=node-llama-cpp@3.22.1
JOBS=${LLAMACPP_JOBS:-2}
NICE=${LLAMACPP_NICE:-5}
SRC=$DIR/src
BUILD=$DIR/build
BIN=$BUILD/bin
# What the bench needs; llama-server is for issue 37's `make bench-serve`.
TARGETS="llama-bench llama-simple llama-completion llama-quantize llama-server"

mkdir -p "$DIR"

# 1. The npm package's tarball, without running anything of it (npm pack runs no scripts).
if [ ! -f "$DIR/package/llama/gitRelease.bundle" ]; then
    echo "llamacpp: fetching $PKG from npm" >&2
    rm -rf "$DIR/pack" && mkdir -p "$DIR/pack"
    (cd "$DIR/pack" && npm pack --silent "$PKG" > /dev/null)
    tar xzf "$DIR"/pack/node-llama-cpp-*.tgz -C "$DIR" package/llama package/package.json
    rm -rf "$DIR/pack"
fi

# 2. The source: a clone of the bundle, with the package's own patches applied the way the
# package applies them (a patch is skipped when the source already has its change).
if [ ! -f "$SRC/CMakeLists.txt" ]; then
    echo "llamacpp: extracting the llama.cpp source ($(cat "$DIR/package/llama/llama.cpp.info.json" | tr -d ' \n'))" >&2
    rm -rf "$SRC"
    git clone --quiet "$DIR/package/llama/gitRelease.bundle" "$SRC" 2> /dev/null
    if ! grep -q "n_tensors = gguf_get_n_tensors(metadata);" "$SRC/src/llama-model-loader.cpp"; then
        for p in "$DIR"/package/llama/patches/*.diff; do
            [ -f "$p" ] && (cd "$SRC" && git apply "$p") && echo "llamacpp: applied $(basename "$p")" >&2
        done
    fi
fi

# 3. Configure: Release, native instructions, AMX off (explicitly, whatever the CPU), no GPU
# backend, no network (no OpenSSL/curl model downloads, no prebuilt web UI), no tests.
if [ ! -f "$BUILD/build.ninja" ]; then
    echo "llamacpp: configuring" >&2
    cmake -S "$SRC" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DGGML_NATIVE=ON -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF \
        -DGGML_CUDA=OFF -DGGML_VULKAN=OFF -DGGML_METAL=OFF -DGGML_HIP=OFF -DGGML_SYCL=OFF \
        -DGGML_OPENCL=OFF -DGGML_RPC=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
        -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_APP=OFF \
        > "$DIR/configure.log" 2>&1 || { tail -30 "$DIR/configure.log" >&2; exit 1; }
fi

# 4. Build only the tools used (ninja itself skips what is up to date).
missing=""
for t in $TARGETS; do [ -x "$BIN/$t" ] || missing="$missing $t"; done
if [ -n "$missing" ]; then
    echo "llamacpp: building$missing (-j$JOBS, nice $NICE; log: $DIR/build.log)" >&2
    nice -n "$NICE" cmake --build "$BUILD" -j "$JOBS" --target $missing > "$DIR/build.log" 2>&1 \
        || { tail -40 "$DIR/build.log" >&2; exit 1; }
fi

# 5. Our generation-loop driver (bench/llamacpp/llama_gen.cpp) against the built libllama.
GEN=$BIN/tm-llama-gen
if [ -f "$HERE/llama_gen.cpp" ] && { [ ! -x "$GEN" ] || [ "$HERE/llama_gen.cpp" -nt "$GEN" ]; }; then
    echo "llamacpp: building $GEN" >&2
    nice -n "$NICE" g++ -O2 -std=c++17 -o "$GEN.tmp" "$HERE/llama_gen.cpp" \
        -I"$SRC/include" -I"$SRC/ggml/include" -L"$BIN" -lllama -lggml -lggml-base \
        -Wl,-rpath,"$BIN" && mv -f "$GEN.tmp" "$GEN"
fi

for t in llama-bench llama-completion llama-quantize llama-server tm-llama-gen; do
    echo "llamacpp: $t: $BIN/$t" >&2
done
echo "$BIN"
