#!/bin/sh
# Runs every tiny Hugging Face export under DIR with `transmuter run` (eager, compiled,
# and compiled with the merged decoders' use_cache_branch as a static input) and
# compares each output with ONNX Runtime's (rtol 1e-4, atol 1e-5).
# Usage: tests/models.sh TRANSMUTER DIR
TM=$1; DIR=$2
pass=0; fail=0
tmp=$(mktemp -d)
for cases in $(find "$DIR" -name '*.cases' -type d | sort); do
    model=${cases%.cases}.onnx
    for case in "$cases"/*/; do
        case=${case%/}
        for mode in eager plan static; do
            flags=""
            [ $mode = eager ] && flags="--eager"
            if [ $mode = static ]; then
                [ -f "$case/inputs/use_cache_branch.npy" ] || continue
                flags="--static use_cache_branch"
            fi
            out=$tmp/out; rm -rf "$out"
            label="${model#$DIR/} [${case##*/}, $mode]"
            if ! "$TM" run "$model" --inputs "$case/inputs" --out "$out" $flags > "$tmp/log" 2>&1; then
                echo "FAIL $label: $(tail -1 "$tmp/log")"; fail=$((fail + 1)); continue
            fi
            if "$TM" compare "$out" "$case/ort" --rtol 1e-4 --atol 1e-5 > "$tmp/log" 2>&1; then
                pass=$((pass + 1))
            else
                echo "FAIL $label: $(grep FAIL "$tmp/log" | head -3 | tr '\n' ' ')"; fail=$((fail + 1))
            fi
        done
    done
done
rm -rf "$tmp"
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
