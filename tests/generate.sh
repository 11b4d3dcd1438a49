#!/bin/sh
# Runs `transmuter generate` (compiled, --eager, and with a float16 cache) on the merged decoders named in
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
    # kv-f16: the cache kept in float16 (--kv-dtype f16); the tiny exports' greedy tokens
    # stay ONNX Runtime's (their logits move by about 1e-4, tests/test_decoder.c)
    for mode in plan eager kv-f16; do
        flags=""
        [ $mode = eager ] && flags="--eager"
        [ $mode = kv-f16 ] && flags="--kv-dtype f16"
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

# Text in, text out on the repositories of tests/data/pipelines: the streamed text against
# transformers.js's pipeline output (tests/data/pipelines/*.cases.jsonl).
P=$ROOT/tests/data/pipelines
check_text() {   # name, expected text, command...
    name=$1; want=$2; shift 2
    got=$("$@" 2> "$tmp")
    if [ $? -ne 0 ]; then
        echo "FAIL $name: $(tail -1 "$tmp")"; fail=$((fail + 1))
    elif [ "$got" != "$want" ]; then
        echo "FAIL $name: got '$got', want '$want'"; fail=$((fail + 1))
    else
        echo "ok   $name: $(tail -1 "$tmp")"; pass=$((pass + 1))
    fi
}
check_text "gpt2-gen --prompt" \
    "speakWorld cyanHolyWorld MILLARY OpenGL xWorldWorldWorldベ RiotPolicy Riot colonialismmmaWorld cyan" \
    "$TM" generate "$P/gpt2-gen" --prompt "Hello, my name is" --max-new 20
check_text "gpt2-gen --repetition-penalty" \
    "World Map Gamma Riot Hin MILL incre () distantmma remains creditsAb unspecifiedベ WRITEacio dehydstood reprinted" \
    "$TM" generate "$P/gpt2-gen" --prompt "The quick brown fox" --max-new 20 --repetition-penalty 1.5
chat=$(mktemp)
printf '[{"role": "user", "content": "Write a haiku about autumn."}]' > "$chat"
check_text "llama-chat --chat --dtype q4" \
    "！TRANLayoutParamsтериdocs attemptсов ca anhomhomhom� katolभoses dreamsharp streamielle" \
    "$TM" generate "$P/llama-chat" --chat "$chat" --max-new 20 --dtype q4
rm -f "$chat"
check_text "t5-text2text --prompt" \
    "informatiiawaawaawaawaawaawa Ap days festgestelltlotte raiseawaawaawaawaawaawaawaawa" \
    "$TM" generate "$P/t5-text2text" --prompt "translate English to German: The house is wonderful." --max-new 20
# Sampling: one seed, one text.
a=$("$TM" generate "$P/gpt2-gen" --prompt "Hello" --do-sample --seed 3 --temperature 0.8 --top-k 40 --top-p 0.95 --max-new 12 2>/dev/null)
check_text "gpt2-gen --do-sample --seed" "$a" \
    "$TM" generate "$P/gpt2-gen" --prompt "Hello" --do-sample --seed 3 --temperature 0.8 --top-k 40 --top-p 0.95 --max-new 12
# Errors name what is wrong and exit non-zero.
for args in "--dtype q9" "--max-new x" "--num-beams 2 --do-sample"; do
    # shellcheck disable=SC2086
    if "$TM" generate "$P/gpt2-gen" --prompt "Hi" $args > /dev/null 2> "$tmp"; then
        echo "FAIL generate $args: no error"; fail=$((fail + 1))
    else
        echo "ok   generate $args: $(head -1 "$tmp")"; pass=$((pass + 1))
    fi
done
rm -f "$tmp"
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
