#!/bin/sh
# The writer's files judged by other readers: tests/test_write keeps the models it saved
# (TM_WRITE_TEST_OUT), then each one must pass python3-onnx's onnx.checker.check_model
# (external data included, and full_check whenever the file it was saved from passes it: this
# python3-onnx's shape inference rejects sparse initializers) and run in ONNX Runtime 1.30
# (onnxruntime-node) with outputs equal to ours on the same file (rtol 1e-4, atol 1e-5, as
# tests/models.sh; its float16 tolerance for the float16 model). What is not installed is
# skipped, and said so.
# ONNX Runtime: $ORT_DIR (default bench/.ort, where `make bench` installs it) holding
# node_modules/onnxruntime-node and ort-run.mjs (copied from tools/ when absent).
# Usage: tests/write_ort.sh BUILD_DIR
BUILD=${1:-build}
TM=$BUILD/transmuter
ORT_DIR=${ORT_DIR:-bench/.ort}
pass=0; fail=0; skip=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if ! TM_WRITE_TEST_OUT="$tmp/saved" "$BUILD/tests/test_write" > "$tmp/log" 2>&1; then
    echo "FAIL test_write: $(tail -3 "$tmp/log" | tr '\n' ' ')"
    echo "0 passed, 1 failed"; exit 1
fi

have_onnx=0
/usr/bin/python3 -c 'import onnx' 2>/dev/null && have_onnx=1
[ $have_onnx = 1 ] || echo "skipped: onnx.checker (Debian's python3-onnx is not installed)"
runner=""
if command -v node >/dev/null 2>&1 && [ -d "$ORT_DIR/node_modules/onnxruntime-node" ]; then
    [ -f "$ORT_DIR/ort-run.mjs" ] || cp tools/ort-run.mjs "$ORT_DIR/" 2>/dev/null
    [ -f "$ORT_DIR/ort-run.mjs" ] && runner=$ORT_DIR/ort-run.mjs
fi
[ -n "$runner" ] || echo "skipped: ONNX Runtime (no onnxruntime-node in $ORT_DIR; make bench installs it)"

TINY=tests/data/tiny
SEQ=tests/data/tiny/bert-seqcls
EXT=tests/data/tiny/bert-external-data
W=tests/data/write
mkdir -p "$tmp/none"
# saved model | the model it was saved from | its inputs
while read -r saved source inputs; do
    model=$tmp/saved/$saved
    if [ ! -f "$model" ]; then
        echo "FAIL $saved: test_write did not leave it"; fail=$((fail + 1)); continue
    fi
    if [ $have_onnx = 1 ]; then
        case $saved in
        int4.onnx) echo "skipped: onnx.checker on $saved (int4 is newer than this python3-onnx)"
            skip=$((skip + 1)) ;;
        *)
            if /usr/bin/python3 - "$model" "$source" > "$tmp/check" 2>&1 <<'EOF'
import sys, onnx
# check_model(PATH, full_check=True) writes the shape-inferred model back over PATH:
# full checks run on models loaded into memory (onnx.load reads the external data too).
saved, source = sys.argv[1], sys.argv[2]
try:
    onnx.checker.check_model(onnx.load(source), full_check=True)
    full = True
except Exception:
    full = False
onnx.checker.check_model(saved)
onnx.checker.check_model(onnx.load(saved), full_check=full)
EOF
            then pass=$((pass + 1))
            else echo "FAIL onnx.checker $saved: $(tail -1 "$tmp/check")"; fail=$((fail + 1)); fi ;;
        esac
    fi
    [ -n "$runner" ] || continue
    in=$inputs; [ "$in" = none ] && in=$tmp/none
    rm -rf "$tmp/ort" "$tmp/tm"
    if ! node "$runner" "$model" -i "$in" -o "$tmp/ort" --format npy > "$tmp/run" 2>&1; then
        echo "FAIL ONNX Runtime $saved: $(tail -1 "$tmp/run")"; fail=$((fail + 1)); continue
    fi
    if ! "$TM" run "$model" --inputs "$in" --out "$tmp/tm" > "$tmp/run" 2>&1; then
        echo "FAIL transmuter $saved: $(tail -1 "$tmp/run")"; fail=$((fail + 1)); continue
    fi
    # float16 models: both runtimes round every intermediate to half, so they differ by
    # half-precision ulps (tests/models.sh's rule for *_fp16).
    tol="--rtol 1e-4 --atol 1e-5"
    case $saved in half_*) tol="--rtol 1e-2 --atol 1e-2" ;; esac
    if "$TM" compare "$tmp/tm" "$tmp/ort" $tol > "$tmp/run" 2>&1; then
        pass=$((pass + 1))
    else
        echo "FAIL $saved: ours and ONNX Runtime's outputs differ: $(grep FAIL "$tmp/run" | head -2 | tr '\n' ' ')"
        fail=$((fail + 1))
    fi
done <<EOF
seqcls.onnx $SEQ/model.onnx $SEQ/model.cases/default/inputs
seqcls_always.onnx $SEQ/model.onnx $SEQ/model.cases/default/inputs
seqcls_auto.onnx $SEQ/model.onnx $SEQ/model.cases/default/inputs
bert_ext.onnx $EXT/model.onnx $EXT/model.cases/default/inputs
bert_ext_inline.onnx $EXT/model.onnx $EXT/model.cases/default/inputs
features.onnx $W/features.onnx $W/inputs
features_w.onnx $W/features.onnx $W/inputs
features_ext.onnx $W/features_ext.onnx $W/inputs
features_inline.onnx $W/features_ext.onnx $W/inputs
int4.onnx $W/int4.onnx none
half_params.onnx $TINY/bert/model_fp16.onnx $TINY/bert/model_fp16.cases/default/inputs
EOF
[ $have_onnx = 1 ] || skip=$((skip + 1))
[ -n "$runner" ] || skip=$((skip + 1))
echo "$pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ]
