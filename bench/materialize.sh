#!/bin/sh
# Makes the benchmark-size models from the skeletons in ../shared/models/bench (random
# weights regenerated deterministically) into bench/models/. Needs python3-onnx and
# python3-numpy. Usage: bench/materialize.sh [minilm|llama-small|llama-600m|all]
set -e
SHARED=${SHARED:-$(dirname "$0")/../../shared}
T=$SHARED/tools
B=$SHARED/models/bench
OUT=$(dirname "$0")/models
what=${1:-minilm}
if [ ! -d "$B" ]; then echo "no $B: set SHARED to the shared data folder" >&2; exit 1; fi
if [ "$what" = minilm ] || [ "$what" = all ]; then
    mkdir -p "$OUT/minilm-l6"
    /usr/bin/python3 "$T/skeleton.py" inflate "$B/minilm-l6/model.skeleton.onnx" "$OUT/minilm-l6/model.onnx"
fi
if [ "$what" = llama-small ] || [ "$what" = all ]; then
    mkdir -p "$OUT/llama-small"
    /usr/bin/python3 "$T/skeleton.py" inflate "$B/llama-small/decoder_model_merged.skeleton.onnx" "$OUT/llama-small/decoder_model_merged.onnx"
fi
if [ "$what" = llama-600m ] || [ "$what" = all ]; then
    mkdir -p "$OUT/llama-600m"
    /usr/bin/python3 "$T/skeleton.py" inflate "$B/llama-600m/decoder_model_merged.skeleton.onnx" "$OUT/llama-600m/decoder_model_merged.onnx"
fi
