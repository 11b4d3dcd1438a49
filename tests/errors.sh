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
# transmuter finetune: the model, the dataset, the options, the optimizer state.
FT="$TM finetune tests/data/tiny/bert-seqcls/model.onnx --out $out/ft.onnx --steps 1 --quiet"
FD=tests/data/finetune/train.jsonl
expect finetune-no-logits "no logits-like output" $TM finetune tests/data/tiny/bert/model.onnx --data $FD --out $out/ft.onnx
expect finetune-logits-rank "output 'logits' is float32 of rank 3" $TM finetune tests/data/tiny/gpt2/decoder_model.onnx --data $FD --out $out/ft.onnx
expect finetune-inputs "model input 'x' is not one of input_ids" $TM finetune $D/add.onnx --data $FD --out $out/ft.onnx --logits y
expect finetune-label "label_range.jsonl:2: field 'label' is 3; the model has 3 labels" $FT --data $D/finetune/label_range.jsonl
expect finetune-label-type "bad_label.jsonl:2" $FT --data $D/finetune/bad_label.jsonl
expect finetune-vocab "vocab.jsonl:2: field 'input_ids' holds 1000 at position 1; the vocabulary has 1000 ids" $FT --data $D/finetune/vocab.jsonl
expect finetune-positions "too_long.jsonl line 1 has 65 tokens, and the model has 64 positions" $FT --data $D/finetune/too_long.jsonl
expect finetune-max-length "batches would be 80 tokens long, and the model has 64 positions" $FT --data $FD --max-length 80
expect finetune-no-data "no-such.jsonl" $FT --data $D/finetune/no-such.jsonl
expect finetune-bad-lr "\-\-lr takes a number >= 0, not 'fast'" $FT --data $FD --lr fast
expect finetune-bad-option "unknown argument '--frobnicate'" $FT --data $FD --frobnicate
expect finetune-no-out "MODEL, --data and --out are required" $TM finetune tests/data/tiny/bert-seqcls/model.onnx --data $FD
expect finetune-trainable "the pattern 'nothing.*' selects no float initializer" $FT --data $FD --trainable 'nothing.*'
expect finetune-no-decay "\-\-no-decay 'nothing.\*' matches no parameter" $FT --data $FD --no-decay 'nothing.*'
expect finetune-out-folder "is not a folder" $FT --data $FD --out $D/add.onnx/ft.onnx
expect finetune-out-is-folder "is a folder: give the file to write" $FT --data $FD --out $out
# A state saved over the classifier alone does not fit an optimizer over every parameter.
$FT --data $FD --trainable 'model.classifier.*' --save-state $out/cls.state > /dev/null 2>&1
expect finetune-resume-mismatch "cls.state" $FT --data $FD --resume $out/cls.state
printf 'TMOPTIM' > $out/short.state
expect finetune-resume-truncated "short.state" $FT --data $FD --resume $out/short.state
# And the good case works, so the failures above are about the input.
if $TM run $D/add.onnx --inputs $D/inputs_ok --out $out/o > "$out/log" 2>&1 && [ -f $out/o/y.npy ]; then
    pass=$((pass + 1))
else
    echo "FAIL good-case: $(cat "$out/log")"; fail=$((fail + 1))
fi
rm -rf "$out"
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
