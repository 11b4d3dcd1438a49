#!/bin/sh
# Bad input must give a clear error and a non-zero exit status, never a crash: each case
# runs the CLI and checks the exit status (1, not a signal) and the message.
# Usage: tests/errors.sh TRANSMUTER
TM=$1
D=tests/data/bad
pass=0; fail=0
out=$(mktemp -d)

expect() { # name, expected message fragment, command...
    name=$1; want=$2; shift 2
    "$@" > "$out/log" 2>&1
    rc=$?
    if [ $rc -eq 0 ]; then
        echo "FAIL $name: exit status 0"; fail=$((fail + 1)); return
    fi
    if [ $rc -ge 124 ]; then
        echo "FAIL $name: crashed (exit status $rc)"; cat "$out/log"; fail=$((fail + 1)); return
    fi
    if ! grep -q -- "$want" "$out/log"; then
        echo "FAIL $name: message lacks '$want':"; cat "$out/log"; fail=$((fail + 1)); return
    fi
    pass=$((pass + 1))
}

expect truncated-onnx "truncated\|exceeds the buffer" $TM run $D/truncated.onnx --inputs $D/inputs_ok --out $out/o
expect corrupted-onnx "add.onnx\|corrupted.onnx" $TM run $D/corrupted.onnx --inputs $D/inputs_ok --out $out/o
expect missing-file "no-such-model.onnx" $TM run $D/no-such-model.onnx --inputs $D/inputs_ok --out $out/o
expect escape-dotdot "escapes\|outside" $TM run $D/escape_dotdot.onnx --inputs $D/inputs_ok --out $out/o
expect escape-absolute "absolute\|outside\|escapes" $TM run $D/escape_absolute.onnx --inputs $D/inputs_ok --out $out/o
expect unknown-op "ai.onnx:NoSuchOp@13, com.example:AlsoMissing@1" $TM run $D/unknown_op.onnx --inputs $D/inputs_ok --out $out/o
expect unknown-op-info "missing ops: ai.onnx:NoSuchOp@13" sh -c "$TM info $D/unknown_op.onnx && exit 1"
expect missing-input "missing input 'x'" $TM run $D/add.onnx --inputs $D/inputs_missing --out $out/o
expect wrong-dtype "input 'x' has dtype float64, the model expects float32" $TM run $D/add.onnx --inputs $D/inputs_dtype --out $out/o
expect wrong-rank "input 'x' has rank 3, the model expects rank 2" $TM run $D/add.onnx --inputs $D/inputs_rank --out $out/o
expect bad-npy-header "x.npy" $TM run $D/add.onnx --inputs $D/inputs_badnpy --out $out/o
expect wrong-dtype-eager "input 'x' has dtype float64" $TM run $D/add.onnx --inputs $D/inputs_dtype --out $out/o --eager
expect bad-command "unknown command" $TM frobnicate
expect sampling-negative-seed "(Sampling): input 8 (seed) is -1" $TM run tests/data/contrib/sampling_custom/model.onnx --inputs $D/inputs_sampling_seed --out $out/o
# And the good case works, so the failures above are about the input.
if $TM run $D/add.onnx --inputs $D/inputs_ok --out $out/o > "$out/log" 2>&1 && [ -f $out/o/y.npy ]; then
    pass=$((pass + 1))
else
    echo "FAIL good-case: $(cat "$out/log")"; fail=$((fail + 1))
fi
rm -rf "$out"
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
