#!/bin/sh
# Runs every libFuzzer target built in BUILD_DIR (by `make fuzz`) for SECONDS each, one
# process at a time, on a corpus that persists in BUILD_DIR/corpus/<target>, seeded from
# the repository's test data and the inputs of past findings (tests/data/fuzz-regressions),
# which therefore run first. Crashes land in BUILD_DIR/crashes/<target>/. Not a test of
# behaviour: each target only asserts "no crash, no leak, errors carry a message".
# Usage: fuzz/run.sh [BUILD_DIR] [SECONDS] [TARGET...]
BUILD=${1:-build-fuzz}
SECONDS_PER=${2:-60}
[ $# -gt 2 ] && shift 2 && TARGETS="$*"
TARGETS=${TARGETS:-"onnx model npy tensor_pb external optim_state jsonl chat_template tokenizer_load tokenizer_encode tokenizer_decode generation audio image pipeline serve_request"}
SEEDS=$BUILD/seeds
REG=tests/data/fuzz-regressions

# Copies the files of `find` arguments into a seed folder, under names made from their
# paths (many are called model.onnx or input_0.pb).
collect() {
    dest=$1; shift
    mkdir -p "$dest"
    find "$@" -type f 2>/dev/null | while read -r f; do
        cp "$f" "$dest/$(echo "$f" | tr '/' '_')"
    done
}

# A .pb prefixed with the selector byte of fuzz_tensor_pb (0 tensor, 1 sequence, 2 optional).
collect_pb() {
    sel=$1; dest=$2; shift 2
    mkdir -p "$dest"
    find "$@" -type f -name '*.pb' -size -2k 2>/dev/null | while read -r f; do
        { printf "\\$sel"; cat "$f"; } > "$dest/$sel$(echo "$f" | tr '/' '_')"
    done
}

make_seeds() {
    [ -f "$SEEDS/.done" ] && return
    rm -rf "$SEEDS"
    B=tests/data/onnx-backend
    collect "$SEEDS/onnx" tests/data/bad tests/data/tiny/bert-external-data -name '*.onnx' -size -64k
    collect "$SEEDS/onnx" $B -name '*.onnx' -size -8k
    # The whole load path runs plans: small models only, so a short run gets past them.
    collect "$SEEDS/model" tests/data/bad -name '*.onnx'
    collect "$SEEDS/model" $B/node $B/simple $B/light -name '*.onnx' -size -3k
    collect "$SEEDS/npy" tests/data -name '*.npy' -size -4k
    collect_pb 0 "$SEEDS/tensor_pb" $B/node/test_add $B/node/test_cast_FLOAT_to_STRING \
        $B/node/test_reshape_zero_dim $B/simple $B/node/test_dequantizelinear_int4 \
        $B/node/test_cast_FLOAT_to_FLOAT8E4M3FN $B/node/test_constant_pad
    collect_pb 1 "$SEEDS/tensor_pb" $B/node/test_sequence_* $B/node/test_split_to_sequence_*
    collect_pb 2 "$SEEDS/tensor_pb" $B/node/test_optional_*
    collect "$SEEDS/external" fuzz/seeds/external tests/data/bad -name '*.onnx'
    collect "$SEEDS/optim_state" fuzz/seeds/optim_state -name '*.state'
    collect "$SEEDS/jsonl" fuzz/seeds/jsonl bench/finetune/data -name '*.jsonl'
    collect "$SEEDS/generation" tests/data/pipelines -name '*config.json'
    # fuzz_audio: the first byte picks the rate and extractors; the shipped clips' first
    # 6,000 bytes (their headers and some samples), and FLAC and OGG clips when sox is here
    mkdir -p "$SEEDS/audio"
    for f in tests/data/pipelines/media/*.wav; do
        [ -f "$f" ] && { printf '\000'; head -c 6000 "$f"; } > "$SEEDS/audio/$(basename "$f")"
    done
    # fuzz_image: three selector bytes, then each shipped image under 24 KB
    mkdir -p "$SEEDS/image"
    find tests/data/pipelines/media -type f \( -name '*.png' -o -name '*.jpg' -o -name '*.webp' \) \
        -size -24k 2>/dev/null | while read -r f; do
        { printf '\001\037\027'; cat "$f"; } > "$SEEDS/image/$(basename "$f")"
    done
    if command -v sox >/dev/null 2>&1; then
        for spec in "8000 1 flac" "22050 2 ogg" "16000 1 ogg" "44100 2 flac"; do
            set -- $spec
            sox -n -r "$1" -c "$2" "$SEEDS/audio/t.$3" synth 0.1 sine 440 2>/dev/null &&
                { printf '\021'; cat "$SEEDS/audio/t.$3"; } > "$SEEDS/audio/sox_$1_$2.$3" &&
                rm -f "$SEEDS/audio/t.$3"
        done
    fi
    touch "$SEEDS/.done"
}

# fuzz_chat_template: every real template of tests/data/templates (73, from templates.json.xz).
make_template_seeds() {
    [ -d "$SEEDS/chat_template" ] && return
    mkdir -p "$SEEDS/chat_template"
    xz -dc tests/data/templates/templates.json.xz | python3 -c '
import json, sys
for i, t in enumerate(json.load(sys.stdin).values()):
    open(sys.argv[1] + "/real%02d.jinja" % i, "w").write(t["chat_template"])
' "$SEEDS/chat_template" || echo "fuzz/run.sh: no template seeds (needs xz and python3)"
}

# The tokenizer targets: small tokenizer.json files (fuzz/make_tok_seeds.py) for the loader;
# the conformance texts (with a selector byte) and their ids for encode and decode.
make_tokenizer_seeds() {
    [ -d "$SEEDS/tokenizer_load" ] && return
    python3 fuzz/make_tok_seeds.py "$SEEDS/tokenizer_load" >/dev/null &&
    mkdir -p "$SEEDS/tokenizer_encode" "$SEEDS/tokenizer_decode" &&
    xz -dc tests/data/tokenizers/qwen3/cases.jsonl.xz | python3 -c '
import json, sys
seen = set()
for line in sys.stdin:
    c = json.loads(line)
    if c["id"] in seen: continue
    seen.add(c["id"]); i = len(seen)
    t = c["text"].encode()[:2000] + (b"\xff" + c["pair"].encode()[:500] if c.get("pair") else b"")
    open("%s/tokenizer_encode/%s" % (sys.argv[1], c["id"]), "wb").write(bytes([i % 256]) + t)
    ids = b"".join((x % 65536).to_bytes(2, "little") for x in c["ids"][:200])
    open("%s/tokenizer_decode/%s" % (sys.argv[1], c["id"]), "wb").write(bytes([i % 5]) + ids)
' "$SEEDS" || echo "fuzz/run.sh: no tokenizer seeds (needs xz and python3)"
}

# fuzz_pipeline: the calls of the text pipelines' reference cases (tests/data/pipelines),
# each as the target's task byte, the inputs JSON, the separator and the options JSON.
make_pipeline_seeds() {
    [ -d "$SEEDS/pipeline" ] && return
    mkdir -p "$SEEDS/pipeline"
    python3 -c '
import json, sys
tasks = ["text-classification", "token-classification", "question-answering", "fill-mask",
         "zero-shot-classification", "feature-extraction"]
n = 0
for name in ["bert-sentiment", "bert-ner", "distilbert-qa", "bert-mlm", "bert-nli", "minilm-embed"]:
    for line in open("tests/data/pipelines/%s.cases.jsonl" % name):
        c = json.loads(line)
        if c["task"] not in tasks or len(line) > 4000: continue
        n += 1
        data = bytes([tasks.index(c["task"])]) + json.dumps(c["inputs"]).encode() + b"\n\0\n" + \
            json.dumps(c["options"]).encode()
        open("%s/case%03d" % (sys.argv[1], n), "wb").write(data)
' "$SEEDS/pipeline" || echo "fuzz/run.sh: no pipeline seeds (needs python3)"
}

# fuzz_serve_request: one request of each route (the route byte, then the body).
make_serve_seeds() {
    [ -d "$SEEDS/serve_request" ] && return
    mkdir -p "$SEEDS/serve_request"
    python3 -c '
import json, sys
chat = {"model": "llama-chat", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
ids = {"name": "input_ids", "shape": [1, 3], "datatype": "INT64", "data": [101, 7592, 102]}
seeds = [(0, {"model": "minilm-embed", "input": ["hello world", "a"], "encoding_format": "base64"}),
         (1, chat), (1, dict(chat, stream=True, n=2, temperature=0.8, seed=1, stop=["x"])),
         (2, {"model": "llama-chat", "prompt": "Hello", "max_tokens": 2, "stream": True}),
         (3, None), (4, {"inputs": ["a", "b"], "normalize": False}), (5, {"inputs": "I love this"}),
         (6, {"query": "q", "texts": ["a"]}),
         (7, {"inputs": [ids, dict(ids, name="attention_mask", data=[1, 1, 1]),
                         dict(ids, name="token_type_ids", data=[0, 0, 0])]}), (8, None), (9, None),
         (1, dict(chat, logprobs=True, top_logprobs=2, stream=True)),
         (2, {"model": "llama-chat", "prompt": "Hello", "max_tokens": 2, "logprobs": 2}),
         (5, {"inputs": [["a", "b"], ["c"]], "raw_scores": True, "truncate": True})]
for i, (route, body) in enumerate(seeds):
    open("%s/seed%02d" % (sys.argv[1], i), "wb").write(bytes([route]) + (json.dumps(body).encode() if body else b""))
# route 12: OIP infer with binary data (two bytes of Inference-Header-Content-Length first)
bin_ids = {k: v for k, v in ids.items() if k != "data"}
head = json.dumps({"inputs": [dict(bin_ids, parameters={"binary_data_size": 24}),
                              dict(ids, name="attention_mask", data=[1, 1, 1]),
                              dict(ids, name="token_type_ids", data=[0, 0, 0])],
                   "outputs": [{"name": "last_hidden_state", "parameters": {"binary_data": True}}]}).encode()
blob = b"".join(x.to_bytes(8, "little") for x in (101, 7592, 102))
open(sys.argv[1] + "/binary", "wb").write(bytes([12]) + len(head).to_bytes(2, "big") + head + blob)
open(sys.argv[1] + "/path", "wb").write(b"\xff/v2/models/model\n")
' "$SEEDS/serve_request" || echo "fuzz/run.sh: no serve seeds (needs python3)"
}

make_seeds
make_serve_seeds
make_template_seeds
make_tokenizer_seeds
make_pipeline_seeds
status=0; passed=0; failed=0
# FUZZ_RUNS=N: a fixed number of inputs with a fixed seed instead of a time budget, so
# that a smoke run (CI) is reproducible: the same corpus and binary give the same inputs.
if [ -n "$FUZZ_RUNS" ]; then
    LIMIT="-runs=$FUZZ_RUNS -seed=1"
else
    LIMIT="-max_total_time=$SECONDS_PER"
fi
for t in $TARGETS; do
    bin=$BUILD/fuzz_$t
    [ -x "$bin" ] || { echo "missing $bin (run make fuzz)"; failed=$((failed + 1)); continue; }
    dict=fuzz/onnx.dict
    [ "$t" = npy ] && dict=fuzz/npy.dict
    [ "$t" = optim_state ] && dict=fuzz/optim_state.dict
    [ "$t" = jsonl ] && dict=fuzz/jsonl.dict
    [ "$t" = chat_template ] && dict=fuzz/chat_template.dict
    [ "$t" = audio ] && dict=fuzz/audio.dict
    [ "$t" = image ] && dict=fuzz/image.dict
    [ "$t" = pipeline ] && dict=fuzz/pipeline.dict
    [ "$t" = serve_request ] && dict=fuzz/serve.dict
    # Text and id sequences take no dictionary (libFuzzer refuses an empty one).
    case $t in tokenizer_load) dict=fuzz/tokenizer.dict ;; tokenizer_encode|tokenizer_decode) dict= ;; esac
    mkdir -p "$BUILD/corpus/$t" "$BUILD/crashes/$t" "$REG/$t"
    log=$BUILD/fuzz_$t.log
    # -timeout: one input running this long is a finding (a hang); rss limit as default.
    # max_allocation_size_mb: any single allocation over 256 MB returns NULL instead of
    # tripping libFuzzer's malloc limit: a model may legitimately ask for a huge tensor
    # (its attributes say so); what must hold is that a refused allocation ends in an
    # error, never a crash.
    ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1:max_allocation_size_mb=256 \
    LSAN_OPTIONS=suppressions=fuzz/lsan.supp \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
        "$bin" $LIMIT -timeout=10 -rss_limit_mb=2048 \
            ${dict:+-dict="$dict"} -artifact_prefix="$BUILD/crashes/$t/" -print_final_stats=1 \
            "$BUILD/corpus/$t" "$SEEDS/$t" "$REG/$t" > "$log" 2>&1
    rc=$?
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    if [ $rc -eq 0 ]; then
        echo "fuzz_$t: ${runs:-?} executions, no finding"
        passed=$((passed + 1))
    else
        echo "FAIL fuzz_$t: exit status $rc after ${runs:-?} executions; see $log"
        grep -E '^(==[0-9]+==ERROR|SUMMARY|.*runtime error)' "$log" | head -5
        grep -E 'Test unit written to' "$log" | head -3
        failed=$((failed + 1)); status=1
    fi
done
echo "$passed passed, $failed failed"
exit $status
