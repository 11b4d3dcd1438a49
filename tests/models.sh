#!/bin/sh
# Runs every tiny Hugging Face export under DIR with `transmuter run` (eager, compiled,
# and compiled with the merged decoders' use_cache_branch as a static input) and
# compares each output with ONNX Runtime's: fp32 exports within rtol 1e-4, atol 1e-5.
# Variants get the tolerance their arithmetic allows:
# - *_fp16, *_q4f16: rtol 1e-2, atol 1e-2. Both runtimes round every intermediate to
#   half precision (11-bit significand) but at different points (we accumulate in f32
#   inside each primitive), so outputs of magnitude ~1 differ by a few half-precision
#   ulps (4e-3 seen on BERT).
#   With --compute-type f32 (every half-precision value computed in f32, outputs rounded
#   back to their declared half type, as ONNX Runtime's CPU build computes them):
#   rtol 2e-3, atol 2e-3, i.e. within about two half-precision ulps.
# - *_q4: rtol 1e-3, atol 5e-3. Both runtimes honour MatMulNBits' accuracy_level: 4
#   (GPT-2's export) quantizes activations to int8 per block (within 2e-7 of ONNX
#   Runtime; in f32, --no-nbits-int8, it differs by up to 3e-3), unset keeps f32.
#   Mode int8 (--nbits-int8: int8 activations for every 4-bit node, against ONNX
#   Runtime's f32 accuracy): rtol 1e-2, atol 1e-2 (3.4e-3 at most seen, whisper's).
# - *_quantized (dynamic int8): rtol 1e-3, atol 2e-3. DynamicQuantizeLinear rounds
#   activations to int8; a value on a rounding tie can land one step apart.
# Usage: tests/models.sh TRANSMUTER DIR
TM=$1; DIR=$2
pass=0; fail=0
tmp=$(mktemp -d)
for cases in $(find "$DIR" -name '*.cases' -type d | sort); do
    model=${cases%.cases}.onnx
    for case in "$cases"/*/; do
        case=${case%/}
        for mode in eager plan static f32 int8; do
            flags=""
            [ $mode = eager ] && flags="--eager"
            if [ $mode = f32 ]; then
                case "$model" in *_fp16.onnx|*_q4f16.onnx) ;; *) continue ;; esac
                flags="--compute-type f32"
            fi
            if [ $mode = int8 ]; then
                case "$model" in *_q4.onnx) ;; *) continue ;; esac
                flags="--nbits-int8"
            fi
            if [ $mode = static ]; then
                [ -f "$case/inputs/use_cache_branch.npy" ] || continue
                flags="--static use_cache_branch"
            fi
            out=$tmp/out; rm -rf "$out"
            label="${model#$DIR/} [${case##*/}, $mode]"
            if ! "$TM" run "$model" --inputs "$case/inputs" --out "$out" $flags > "$tmp/log" 2>&1; then
                echo "FAIL $label: $(tail -1 "$tmp/log")"; fail=$((fail + 1)); continue
            fi
            tol="--rtol 1e-4 --atol 1e-5"
            case "$model" in
                *_fp16.onnx|*_q4f16.onnx) tol="--rtol 1e-2 --atol 1e-2"
                    [ $mode = f32 ] && tol="--rtol 2e-3 --atol 2e-3" ;;
                *_q4.onnx) tol="--rtol 1e-3 --atol 5e-3"
                    [ $mode = int8 ] && tol="--rtol 1e-2 --atol 1e-2" ;;
                *_quantized.onnx) tol="--rtol 1e-3 --atol 2e-3" ;;
            esac
            if "$TM" compare "$out" "$case/ort" $tol > "$tmp/log" 2>&1; then
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
