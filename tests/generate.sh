#!/bin/sh
# Runs `transmuter generate` (compiled, and --eager) on the merged decoders named in
# tests/data/generate/*.ids (tiny GPT-2 and LLaMA, and their q4 variants) and compares the
# greedy token ids with ONNX Runtime's. The references were made once by
# tests/data/generate/make_reference.mjs, so no ONNX Runtime is needed here. This checks
# tokens only, not speed.
# Each .ids file: "# prompt IDS max-new N: MODEL, ..." then the expected ids.
# Usage: tests/generate.sh TRANSMUTER
TM=$1
ROOT=$(dirname "$0")/..
pass=0; fail=0
tmp=$(mktemp)
for ref in "$ROOT"/tests/data/generate/*.ids; do
    name=$(basename "$ref" .ids)
    prompt=$(head -1 "$ref" | awk '{print $3}')
    max_new=$(head -1 "$ref" | awk '{print $5}' | tr -d ':')
    model=$ROOT/$(head -1 "$ref" | awk '{print $6}' | tr -d ',')
    want=$(sed -n 2p "$ref")
    for mode in plan eager; do
        flags=""
        [ $mode = eager ] && flags="--eager"
        got=$("$TM" generate "$model" --prompt-ids "$prompt" --max-new "$max_new" $flags 2> "$tmp")
        if [ $? -ne 0 ]; then
            echo "FAIL $name [$mode]: $(tail -1 "$tmp")"; fail=$((fail + 1))
        elif [ "$got" != "$want" ]; then
            echo "FAIL $name [$mode]: got $got, ONNX Runtime $want"; fail=$((fail + 1))
        else
            echo "ok   $name [$mode]: $(tail -1 "$tmp")"; pass=$((pass + 1))
        fi
    done
done
rm -f "$tmp"
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
