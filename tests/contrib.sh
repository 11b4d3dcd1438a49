#!/bin/sh
# Runs each ONNX Runtime contrib-operator case under DIR (tests/data/contrib/<name>/ with
# model.onnx, inputs/*.npy and ONNX Runtime 1.30's outputs in ort/*.npy, or in ref/*.npy
# another reference that README.md names, where ONNX Runtime is wrong) with
# `transmuter run`, eager and compiled, and compares the outputs. Tolerance: rtol 1e-4,
# atol 1e-5 unless the case has a file `tol` holding other compare flags (with the reason
# beside them in README.md). Usage: tests/contrib.sh TRANSMUTER DIR
TM=$1; DIR=$2
pass=0; fail=0
tmp=$(mktemp -d)
for case in "$DIR"/*/; do
    case=${case%/}
    [ -f "$case/model.onnx" ] || continue
    name=${case##*/}
    ref=$case/ort
    [ -d "$ref" ] || ref=$case/ref
    tol="--rtol 1e-4 --atol 1e-5"
    [ -f "$case/tol" ] && tol=$(cat "$case/tol")
    for mode in eager plan; do
        flags=""
        [ $mode = eager ] && flags="--eager"
        out=$tmp/out; rm -rf "$out"
        if ! "$TM" run "$case/model.onnx" --inputs "$case/inputs" --out "$out" $flags \
                > "$tmp/log" 2>&1; then
            echo "FAIL $name [$mode]: $(tail -1 "$tmp/log")"; fail=$((fail + 1)); continue
        fi
        if "$TM" compare "$out" "$ref" $tol > "$tmp/log" 2>&1; then
            pass=$((pass + 1))
        else
            echo "FAIL $name [$mode]: $(grep FAIL "$tmp/log" | head -3 | tr '\n' ' ')"
            fail=$((fail + 1))
        fi
    done
done
rm -rf "$tmp"
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
