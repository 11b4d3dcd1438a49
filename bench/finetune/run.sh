#!/bin/sh
# Issue 8's fine-tuning check end to end (`make finetune-check`), writing what it prints to
# bench/finetune/RESULTS.md with the machine and the command:
#   1. PyTorch's run (torch_ref.py: forward checked against ONNX Runtime first, then 30
#      AdamW steps on the fixed batch) and a float64 run of it (the noise floor);
#   2. `transmuter finetune` with the same hyperparameters on the same batch, dumped;
#   3. our AdamW replaying PyTorch's gradients, and the model tm_model_save wrote from them
#      (finetune_replay);
#   4. the model `transmuter finetune` saved, in ONNX Runtime (when bench/.ort has it)
#      against Transmuter on the same file and against PyTorch's final logits;
#   5. compare.py of ours against PyTorch float32 (and float64), whose last line is
#      `max gradient rel err E, max loss diff D`: it fails the check above 1e-4 / 1e-5.
# Needs Debian's python3-torch and python3-onnx; skips when they are missing.
# Usage: bench/finetune/run.sh BUILD_DIR [MODEL.onnx]
BUILD=${1:-build}
MODEL=${2:-../shared/models/tiny/bert-seqcls/model.onnx}
OUT=bench/finetune/out
DATA=bench/finetune/data/batch.jsonl
if ! /usr/bin/python3 -c 'import torch, onnx' 2>/dev/null; then
    echo "skipped: needs python3-torch and python3-onnx"; exit 0
fi
[ -f "$MODEL" ] || MODEL=tests/data/tiny/bert-seqcls/model.onnx
mkdir -p "$OUT"
LOG=$OUT/run.log

check() {
set -e
# The hyperparameters README.md states; torch_ref.py's defaults are the same.
HP="--steps 30 --batch-size 4 --lr 1e-3 --beta1 0.9 --beta2 0.999 --eps 1e-6 --weight-decay 0.01"
echo "## PyTorch"
echo "\$ /usr/bin/python3 bench/finetune/torch_ref.py --model $MODEL --data $DATA --out $OUT/torch $HP"
/usr/bin/python3 bench/finetune/torch_ref.py --model "$MODEL" --data "$DATA" --out "$OUT/torch" $HP \
    | grep -v '^step'
/usr/bin/python3 bench/finetune/torch_ref.py --model "$MODEL" --data "$DATA" --out "$OUT/torch64" \
    --double $HP > /dev/null
echo
echo "## transmuter finetune"
rm -rf "$OUT/ours"
# Constant schedule, no clipping, file order: what torch_ref.py does (the command's own
# defaults are Hugging Face Trainer's).
FT="$BUILD/transmuter finetune $MODEL --data $DATA --out $OUT/ours/model.onnx $HP --schedule constant --max-grad-norm 0 --threads 1 --dump $OUT/ours --quiet"
echo "\$ $FT"
$FT | tail -2
echo
echo "## Our AdamW on PyTorch's gradients (finetune_replay)"
"$BUILD/finetune_replay" "$MODEL" "$OUT/torch" "$OUT/replay"
echo
echo "## The fine-tuned model in ONNX Runtime"
ORT_DIR=${ORT_DIR:-bench/.ort}
if command -v node > /dev/null 2>&1 && [ -d "$ORT_DIR/node_modules/onnxruntime-node" ]; then
    [ -f "$ORT_DIR/ort-run.mjs" ] || cp tools/ort-run.mjs "$ORT_DIR/"
    rm -rf "$OUT/ort" "$OUT/tm" "$OUT/torch_final" "$OUT/inputs" && mkdir -p "$OUT/torch_final" "$OUT/inputs"
    cp "$OUT/torch/final_logits.npy" "$OUT/torch_final/logits.npy"
    cp bench/finetune/data/batch_npy/input_ids.npy bench/finetune/data/batch_npy/attention_mask.npy \
        bench/finetune/data/batch_npy/token_type_ids.npy "$OUT/inputs/"
    node "$ORT_DIR/ort-run.mjs" "$OUT/ours/model.onnx" -i "$OUT/inputs" -o "$OUT/ort" --format npy > /dev/null
    "$BUILD/transmuter" run "$OUT/ours/model.onnx" --inputs "$OUT/inputs" --out "$OUT/tm" > /dev/null
    diff() { /usr/bin/python3 -c 'import sys, numpy as np
a, b = np.load(sys.argv[1]).astype(np.float64), np.load(sys.argv[2]).astype(np.float64)
print("max |difference| %.3e (max |logit| %.3f)" % (np.abs(a - b).max(), np.abs(b).max()))' "$1" "$2"; }
    printf "ONNX Runtime against Transmuter on the model transmuter finetune saved: "
    diff "$OUT/ort/logits.npy" "$OUT/tm/logits.npy"
    "$BUILD/transmuter" compare "$OUT/ort" "$OUT/tm" --rtol 1e-5 --atol 1e-6 > /dev/null
    printf "ONNX Runtime on it against PyTorch's final logits: "
    diff "$OUT/ort/logits.npy" "$OUT/torch_final/logits.npy"
    "$BUILD/transmuter" compare "$OUT/ort" "$OUT/torch_final" --rtol 1e-4 --atol 1e-5 > /dev/null
else
    echo "skipped: no onnxruntime-node in $ORT_DIR (ONNXRUNTIME_NODE_INSTALL=skip npm install" \
         "--prefix $ORT_DIR onnxruntime-node@1.30.0)"
fi
echo
echo "## PyTorch float32 against float64 (the noise floor of any float32 run)"
/usr/bin/python3 bench/finetune/compare.py "$OUT/torch" "$OUT/torch64" | tail -1
echo "## Ours against PyTorch float64"
/usr/bin/python3 bench/finetune/compare.py "$OUT/ours" "$OUT/torch64" --grad-tol 1 --loss-tol 1 | tail -1
echo
echo "## Ours against PyTorch float32 (bench/finetune/compare.py)"
/usr/bin/python3 bench/finetune/compare.py "$OUT/ours" "$OUT/torch"
}

check 2>&1 | tee "$LOG"
ok=1
tail -1 "$LOG" | grep -q '^max gradient rel err' || ok=0
# compare.py's own verdict: rerun it quietly for its exit status.
/usr/bin/python3 bench/finetune/compare.py "$OUT/ours" "$OUT/torch" > /dev/null 2>&1 || ok=0
grep -q 'replay ok' "$LOG" || ok=0
{
    echo "# make finetune-check"
    echo
    echo "Written by bench/finetune/run.sh (\`make finetune-check\`) on $(date -u +%Y-%m-%d),"
    echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), model \`$MODEL\`:"
    echo "$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(nproc) cores, $(uname -sr)."
    echo "PyTorch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)'), one thread."
    echo
    echo '```'
    cat "$LOG"
    echo '```'
} > bench/finetune/RESULTS.md
[ $ok = 1 ] && echo "finetune-check: ok" && exit 0
echo "finetune-check: FAILED (see $LOG)"
exit 1
