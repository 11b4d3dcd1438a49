#!/bin/sh
# Models that must be refused cleanly: ONNX Runtime's own test models that ONNX Runtime
# rejects (tests/data/negative/ort-testdata, MIT, see the LICENSE there) and hand-built
# hostile ones (tests/data/negative/*.onnx, from make_models.py: cycles, deep nesting,
# recursive functions, sizes that overflow or exceed the file, external data that escapes).
# For each, `info` and `run` must exit with status 1 (not a signal, not a hang) and a
# message naming the problem; a model that loads but uses operators we lack must list them
# in `info` (status 0) and fail in `run`. Under strace, loading the ones with external
# data must open nothing outside the model's folder. Not a test of results.
# Usage: tests/negative.sh [TRANSMUTER]
TM=${1:-build/transmuter}
D=tests/data/negative
pass=0; fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/empty"

ok() { pass=$((pass + 1)); }
bad() { echo "FAIL $*"; fail=$((fail + 1)); }

# run_expect NAME STATUS WANT CMD...: the exit status and a message fragment.
run_expect() { # its own variable names: sh has no locals, and callers use $want
    x_name=$1; x_rc=$2; x_want=$3; shift 3
    timeout 120 "$@" > "$tmp/log" 2>&1
    rc=$?
    if [ $rc -eq 124 ]; then bad "$x_name: timed out after 120 s"; return; fi
    if [ $rc -gt 128 ]; then bad "$x_name: killed by signal $((rc - 128))"; cat "$tmp/log"; return; fi
    if [ $rc -ne "$x_rc" ]; then
        bad "$x_name: exit status $rc, expected $x_rc"; tail -3 "$tmp/log"; return
    fi
    if ! grep -qF -- "$x_want" "$tmp/log"; then
        bad "$x_name: the message lacks '$x_want':"; tail -3 "$tmp/log"; return
    fi
    ok
}

# What each model must say. `load`: loading fails (info and run exit 1); `ops`: it loads,
# info lists missing operators, run exits 1; `run`: it loads, and running fails.
EXPECT="$tmp/expect"
cat > "$EXPECT" <<'EOF'
cycle_self.onnx load reads its own output
cycle_two.onnx load has a cycle: node 'node_b' (Relu) -> node 'node_a' (Add)
cycle_three.onnx load has a cycle: node 'node_b' (Relu) -> node 'node_c' (Neg) -> node 'node_a' (Add)
cycle_subgraph.onnx load has a cycle: node 'later_relu' (Relu) -> node 'the_if' (If)
deep_if.onnx load subgraphs nested deeper than 64 levels
deep_type.onnx load types nested deeper than 64 levels
function_recursive.onnx load function 'F' calls itself ('F' -> 'F')
function_mutual.onnx load function 'F' calls itself ('F' -> 'G' -> 'F')
function_bomb.onnx load expands to more than 16777216 nodes
size_overflow.onnx load element count overflows
size_exceeds_data.onnx load raw_data has 16 bytes, but 1048576 elements of float32 need 4194304
size_typed_count.onnx load has 3 values in int64_data, but 1000 elements of int64 need 1000
size_external_short.onnx load lies outside
escape_symlink.onnx load external data file
missing_input.onnx run is a required input missing?
ort-testdata/VariedInputCustomOp.onnx ops abc:Slice@1
ort-testdata/add_opset_314159.onnx ops ai.onnx:Add@314159
ort-testdata/avoid_reuse_of_buffer_for_node_output_with_no_consumers.onnx ops com.microsoft:ConcatTraining@1
ort-testdata/custom_mul.onnx ops test:Custom_Mul@1
ort-testdata/custom_op_negpos.onnx ops ai.onnx.contrib:NegPos@1
ort-testdata/custom_op_single_schema_multi_kernel.onnx ops v2:MulTop@1
ort-testdata/custom_op_string_lower.onnx ops ai.onnx.contrib:StringLower@1
ort-testdata/custom_op_variadic_io.onnx ops test:VariadicNode@1
ort-testdata/custom_op_variadic_undef_io.onnx ops test:VariadicNode@1
ort-testdata/foo_1.onnx ops test:Foo@1
ort-testdata/foo_1_clip_11.onnx ops ai.onnx:Foo@12
ort-testdata/foo_3.onnx ops test:Foo@1
ort-testdata/foo_bar_1.onnx ops test:FooBar@1
ort-testdata/foo_bar_2.onnx ops test:FooBar@1
ort-testdata/foo_bar_3.onnx ops test:FooBar_Attr@1
ort-testdata/function_opset_test.onnx ops com.microsoft:Fake_FunctionOp@1
ort-testdata/fuse_select_filter.onnx ops v2:Fuse@17
ort-testdata/fuse_select_filter_opset_8.onnx ops v2:Fuse@8
ort-testdata/icm-31000000518082.onnx load has no op_type
ort-testdata/merge.onnx ops v2:Merge@1
ort-testdata/model_with_external_initializer_come_from_user.onnx load Pads_not_on_disk.bin': No such file
ort-testdata/mul_1.noopset.onnx load the model imports no operator set
ort-testdata/mul_16.onnx ops ai.onnx:Mul16@7
ort-testdata/optional_1.onnx ops test:OptionalOp@1
ort-testdata/optional_2.onnx ops v2:Box@1
ort-testdata/optional_3.onnx ops v2:Box@1
ort-testdata/pyop_1.onnx ops pyopfloat:PyOp@1
ort-testdata/pyop_2.onnx ops pyop_multi_1:PyOp@1, pyop_multi_2:PyOp@1
ort-testdata/pyop_3.onnx ops pyop_kwarg_1:PyOp@1, pyop_kwarg_2:PyOp@1
ort-testdata/test_arbitrary_external_file.onnx load '../../../../../../../etc/passwd' escapes the model folder
ort-testdata/test_evil_weights.onnx load in-memory address marker
ort-testdata/test_kernel_info_get_const_input.onnx ops test.customop:custom op@1
ort-testdata/trt_plugin_custom_op_test.onnx ops trt.plugins:DisentangledAttention_TRT@1
EOF

while read -r model kind want; do
    m=$D/$model
    if [ ! -f "$m" ]; then bad "$model: missing from $D"; continue; fi
    inputs=${m%.onnx}.inputs
    [ -d "$inputs" ] || inputs=$tmp/empty
    if [ "$kind" = load ]; then
        run_expect "$model info" 1 "$want" "$TM" info "$m"
    elif [ "$kind" = run ]; then
        run_expect "$model info" 0 "missing ops: none" "$TM" info "$m"
    else
        run_expect "$model info" 0 "missing ops: " "$TM" info "$m"
        run_expect "$model info lists" 0 "$want" "$TM" info "$m"
    fi
    run_expect "$model run" 1 "$want" "$TM" run "$m" --inputs "$inputs" --out "$tmp/out"
    run_expect "$model run --eager" 1 "$want" "$TM" run "$m" --inputs "$inputs" --out "$tmp/out" --eager
done < "$EXPECT"

# Every model in the folders has an expectation: a new file cannot go unchecked.
for m in $D/*.onnx $D/ort-testdata/*.onnx; do
    rel=${m#$D/}
    [ "$rel" = unsorted.onnx ] && continue
    grep -q "^$rel " "$EXPECT" || bad "$rel: no expectation in tests/negative.sh"
done

# A graph written out of order (but without a cycle) is sorted at load and runs.
if "$TM" run $D/unsorted.onnx --inputs $D/unsorted.inputs --out "$tmp/unsorted" > "$tmp/log" 2>&1 &&
   "$TM" compare "$tmp/unsorted" $D/unsorted.expected > "$tmp/log" 2>&1; then
    ok
else
    bad "unsorted.onnx: $(tail -2 "$tmp/log")"
fi

# A symlink inside the model's folder that leads out of it: plant it beside a copy.
mkdir -p "$tmp/link/model"
cp $D/escape_symlink.onnx "$tmp/link/model/"
printf '0123456789abcdef' > "$tmp/link/secret.bin"
ln -s ../secret.bin "$tmp/link/model/link_out.bin"
run_expect "escape_symlink.onnx (planted link) info" 1 "escapes the model folder" \
    "$TM" info "$tmp/link/model/escape_symlink.onnx"
run_expect "escape_symlink.onnx (planted link) run" 1 "escapes the model folder" \
    "$TM" run "$tmp/link/model/escape_symlink.onnx" --inputs "$tmp/empty" --out "$tmp/out"

# Under strace: the files a load opens are the model, files in its folder, and the
# system's libraries; never the escaping targets. Skipped without a working strace.
opened_outside() { # MODEL: prints every path opened outside the model folder and the system
    dir=$(cd "$(dirname "$1")" && pwd -P)
    strace -f -qq -e trace=open,openat -o "$tmp/strace" "$TM" info "$1" > /dev/null 2>&1
    sed -n 's/^[0-9]* *open[at]*([^"]*"\([^"]*\)".*/\1/p' "$tmp/strace" | while read -r p; do
        case $p in
            /lib/*|/usr/lib/*|/usr/share/*|/etc/ld.so.*|/proc/*|/sys/*|/dev/*) ;;
            "$dir"/*) ;;
            "$1") ;;
            *) [ "$(cd "$(dirname "$p")" 2>/dev/null && pwd -P)" = "$dir" ] || echo "$p" ;;
        esac
    done
}
if command -v strace > /dev/null 2>&1 && strace -qq -o /dev/null true 2> /dev/null; then
    for m in ort-testdata/test_arbitrary_external_file.onnx ort-testdata/test_evil_weights.onnx \
             ort-testdata/model_with_external_initializer_come_from_user.onnx \
             size_external_short.onnx escape_symlink.onnx; do
        out=$(opened_outside "$D/$m")
        if [ -n "$out" ]; then bad "$m: opened outside its folder: $out"; else ok; fi
    done
    out=$(opened_outside "$tmp/link/model/escape_symlink.onnx")
    if [ -n "$out" ]; then bad "escape_symlink.onnx (planted link): opened $out"; else ok; fi
else
    echo "strace is missing or not permitted here: the open() checks are skipped"
fi

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
