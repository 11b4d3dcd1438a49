#!/bin/sh
# Runs every test of the repository: the unit-test programs, the ONNX backend suite in
# both modes, the tiny Hugging Face exports against ONNX Runtime's outputs, and the
# error-handling checks. Each suite prints "N passed, N failed[, N skipped]" last; this
# script sums them and ends with the same line. Usage: tests/run.sh [BUILD_DIR]
BUILD=${1:-build}
TM=$BUILD/transmuter
LOG=${TMPDIR:-/tmp}/transmuter-tests.$$
mkdir -p "$LOG"
total_pass=0; total_fail=0; total_skip=0; bad_suites=""

suite() {
    name=$1; shift
    printf '%-28s ' "$name"
    "$@" > "$LOG/$name.log" 2>&1
    rc=$?
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$LOG/$name.log" | tail -1)
    if [ -z "$line" ]; then
        echo "no result line (exit $rc)"; tail -20 "$LOG/$name.log"
        total_fail=$((total_fail + 1)); bad_suites="$bad_suites $name"; return
    fi
    p=$(echo "$line" | sed -E 's/^([0-9]+) passed.*/\1/')
    f=$(echo "$line" | sed -E 's/^[0-9]+ passed, ([0-9]+) failed.*/\1/')
    s=$(echo "$line" | sed -n -E 's/.*, ([0-9]+) skipped.*/\1/p')
    s=${s:-0}
    echo "$line"
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
    if [ "$f" -ne 0 ]; then
        grep -E '^(FAIL|not ok)' "$LOG/$name.log" | head -30
        bad_suites="$bad_suites $name"
    fi
    total_pass=$((total_pass + p)); total_fail=$((total_fail + f)); total_skip=$((total_skip + s))
}

for t in "$BUILD"/tests/test_*; do
    [ -x "$t" ] || continue
    suite "$(basename "$t")" "$t"
done
suite test_api-reference-gemm env TM_REFERENCE_KERNELS=1 "$BUILD/tests/test_api"
suite test_grad-reference env TM_REFERENCE_KERNELS=1 "$BUILD/tests/test_grad"
suite test_fusion-reference env TM_REFERENCE_KERNELS=1 "$BUILD/tests/test_fusion"
# The AVX2 micro-kernels and the scalar maths, which a CPU without AVX-512 runs, on this
# one too.
suite test_prims_linalg-avx2 env TM_SGEMM_ARCH=avx2 "$BUILD/tests/test_prims_linalg"
suite test_fusion-avx2 env TM_SGEMM_ARCH=avx2 "$BUILD/tests/test_fusion"
suite test_kvmath-avx2 env TM_KERNEL_ISA=avx2 "$BUILD/tests/test_kvmath"
suite test_kvmath-scalar env TM_KERNEL_ISA=scalar "$BUILD/tests/test_kvmath"
suite test_decoder-avx2 env TM_KERNEL_ISA=avx2 "$BUILD/tests/test_decoder"
suite onnx-backend "$TM" test-onnx tests/data/onnx-backend --mode both --quiet \
    --expected-failures tests/expected_failures.txt
suite gradient-op "$TM" test-onnx tests/data/grad/gradient-op --mode both
suite tiny-models sh tests/models.sh "$TM" tests/data/tiny
suite contrib-ops sh tests/contrib.sh "$TM" tests/data/contrib
suite generate sh tests/generate.sh "$TM"
suite errors sh tests/errors.sh "$TM"
suite chat-template-cli sh tests/chat_template.sh "$TM" "$BUILD"
suite tokenize-cli sh tests/tokenize_cli.sh "$BUILD"
suite pipelines sh tests/pipelines.sh "$TM"
suite serve sh tests/serve.sh "$TM"
suite serve-chaos sh tests/serve_chaos.sh "$TM"
suite audio sh tests/audio.sh "$TM"
suite vad sh tests/vad.sh "$TM"
suite vision sh tests/vision.sh "$TM"
suite ocr sh tests/ocr.sh "$TM"
suite hub sh tests/hub.sh "$TM"
suite negative-models sh tests/negative.sh "$TM"
suite write-ort sh tests/write_ort.sh "$BUILD"
suite python sh tests/python.sh "$BUILD" test_session test_values test_text test_train test_dask
suite python-onnx-backend sh tests/python.sh "$BUILD" test_onnx_backend
case "$BUILD" in
    *asan*|*tsan*)
        echo "valgrind                     skipped: $BUILD is a sanitizer build"
        echo "tsan-threads                 skipped: $BUILD is a sanitizer build" ;;
    *)
        suite valgrind sh tests/valgrind.sh "$TM"
        suite tsan-threads sh tests/tsan.sh ;;
esac

echo "logs in $LOG"
[ -n "$bad_suites" ] && echo "failing suites:$bad_suites"
echo "$total_pass passed, $total_fail failed, $total_skip skipped"
[ "$total_fail" -eq 0 ]
