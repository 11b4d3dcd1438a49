#!/bin/sh
# The fine-tuning reference end to end (`make finetune-check`): the PyTorch run (forward
# checked against ONNX Runtime first), then our AdamW replaying PyTorch's gradients and the
# saved model's logits (finetune_replay), then compare.py of the PyTorch float32 run with a
# float64 one: the noise floor any float32 implementation is judged within.
# Needs Debian's python3-torch and python3-onnx; skips when they are missing.
# Usage: bench/finetune/run.sh BUILD_DIR [MODEL.onnx]
BUILD=${1:-build}
MODEL=${2:-../shared/models/tiny/bert-seqcls/model.onnx}
OUT=bench/finetune/out
if ! /usr/bin/python3 -c 'import torch, onnx' 2>/dev/null; then
    echo "skipped: needs python3-torch and python3-onnx"; exit 0
fi
[ -f "$MODEL" ] || MODEL=tests/data/tiny/bert-seqcls/model.onnx
set -e
/usr/bin/python3 bench/finetune/torch_ref.py --model "$MODEL" --out "$OUT/torch"
"$BUILD/finetune_replay" "$MODEL" "$OUT/torch" "$OUT/replay"
# The saved model in ONNX Runtime too (when installed): PyTorch's final logits on the batch.
ORT_DIR=${ORT_DIR:-bench/.ort}
if [ -f "$ORT_DIR/ort-run.mjs" ] && [ -d "$ORT_DIR/node_modules/onnxruntime-node" ]; then
    rm -rf "$OUT/ort" "$OUT/torch_final" && mkdir -p "$OUT/torch_final"
    cp "$OUT/torch/final_logits.npy" "$OUT/torch_final/logits.npy"
    node "$ORT_DIR/ort-run.mjs" "$OUT/replay/model.onnx" -i bench/finetune/data/batch_npy \
        -o "$OUT/ort" --format npy > /dev/null
    echo "the saved model in ONNX Runtime against PyTorch's final logits:"
    "$BUILD/transmuter" compare "$OUT/ort" "$OUT/torch_final" --rtol 1e-5 --atol 1e-6 | tail -1
else
    echo "skipped: the saved model in ONNX Runtime (none in $ORT_DIR)"
fi
/usr/bin/python3 bench/finetune/torch_ref.py --model "$MODEL" --out "$OUT/torch64" --double > /dev/null
echo "PyTorch float32 against float64 (the noise floor):"
/usr/bin/python3 bench/finetune/compare.py "$OUT/torch" "$OUT/torch64" | tail -1
