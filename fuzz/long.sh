#!/bin/sh
# Long fuzzing runs toward an execution-count goal, one target at a time, each resumed
# from its corpus until it has run GOAL inputs in total (counted across runs in
# BUILD/counts.tsv: target, runs, seconds, exit status, date, commit). A run stops at its
# first finding (exit status non-zero; the input lands in BUILD/crashes/<target>/); fix it,
# add it to tests/data/fuzz-regressions/<target>/, rebuild (make fuzz-build), and run this
# again: the count goes on from where it was. Random seed per run (unlike the CI smoke run).
# Interrupting a run (kill -INT the fuzzer) ends it cleanly: libFuzzer prints its count and
# exits 72, which counts as a run without a finding.
# Usage: fuzz/long.sh [BUILD_DIR] [GOAL] [TARGET...]   (defaults: build-fuzz 10000000 all)
# FUZZ_MAX_LEN=N caps the input length (libFuzzer's -max_len; default: its own, the longest
# seed or 4096): the encoders' cost grows with the text, so a cap trades long inputs for
# inputs per second. Two instances may run at once on different targets (one ledger).
# FUZZ_TIMEOUT=S: seconds one input may take before it counts as a hang (default 10). It is
# wall time: on a machine loaded far beyond its cores a niced fuzzer can wait longer than
# that for the CPU (this happened: inputs that run in 0.7-1.4 s alone were written out as
# timeouts at load 12), so give more there.
BUILD=${1:-build-fuzz}
GOAL=${2:-10000000}
[ $# -gt 2 ] && shift 2 && TARGETS="$*"
TARGETS=${TARGETS:-"onnx model npy tensor_pb external optim_state jsonl"}
LEDGER=$BUILD/counts.tsv
[ -f "$LEDGER" ] || printf 'target\truns\tseconds\tstatus\tdate\tcommit\n' > "$LEDGER"
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
sh fuzz/run.sh "$BUILD" 0 none > /dev/null 2>&1   # makes the seed folders only
for t in $TARGETS; do
    # status 0: the goal was reached; 72: interrupted (SIGINT / SIGTERM), no finding
    done_runs=$(awk -F'\t' -v t="$t" '$1 == t && ($4 == 0 || $4 == 72) { s += $2 } END { print s + 0 }' "$LEDGER")
    left=$((GOAL - done_runs))
    if [ "$left" -le 0 ]; then echo "fuzz_$t: $done_runs executions, goal reached"; continue; fi
    dict=fuzz/onnx.dict
    [ "$t" = npy ] && dict=fuzz/npy.dict
    [ "$t" = optim_state ] && dict=fuzz/optim_state.dict
    [ "$t" = jsonl ] && dict=fuzz/jsonl.dict
    [ "$t" = tokenizer_load ] && dict=fuzz/tokenizer.dict
    [ "$t" = chat_template ] && dict=fuzz/chat_template.dict
    [ "$t" = audio ] && dict=fuzz/audio.dict
    [ "$t" = image ] && dict=fuzz/image.dict
    [ "$t" = pipeline ] && dict=fuzz/pipeline.dict
    case $t in tokenizer_encode|tokenizer_decode) dict= ;; esac   # no dictionary
    mkdir -p "$BUILD/corpus/$t" "$BUILD/crashes/$t" tests/data/fuzz-regressions/$t
    log=$BUILD/long_$t.log
    start=$(date +%s)
    ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1:max_allocation_size_mb=256 \
    LSAN_OPTIONS=suppressions=fuzz/lsan.supp \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
        "$BUILD/fuzz_$t" -runs="$left" -timeout="${FUZZ_TIMEOUT:-10}" -rss_limit_mb=2048 ${dict:+-dict="$dict"} \
            -artifact_prefix="$BUILD/crashes/$t/" -print_final_stats=1 ${FUZZ_MAX_LEN:+-max_len=$FUZZ_MAX_LEN} \
            "$BUILD/corpus/$t" "$BUILD/seeds/$t" tests/data/fuzz-regressions/$t > "$log" 2>&1
    rc=$?
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    [ -z "$runs" ] && runs=$(grep -o '#[0-9]*' "$log" | tail -1 | tr -d '#')
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$t" "${runs:-0}" $(( $(date +%s) - start )) "$rc" \
        "$(date -u +%Y-%m-%dT%H:%MZ)" "$commit" >> "$LEDGER"
    echo "fuzz_$t: exit $rc after ${runs:-0} more executions (log $log)"
done
