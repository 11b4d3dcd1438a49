#!/bin/sh
# Load, compile, run and free tiny exports under valgrind: no leak, no memory error.
# Skips (saying so) when valgrind is not installed. Usage: tests/valgrind.sh TRANSMUTER
TM=$1
if ! command -v valgrind >/dev/null 2>&1; then
    echo "skipped: valgrind is not installed"; echo "0 passed, 0 failed, 1 skipped"; exit 0
fi
pass=0; fail=0
out=$(mktemp -d)
vg() { # name, args...
    name=$1; shift
    valgrind --leak-check=full --errors-for-leak-kinds=definite,indirect \
        --error-exitcode=99 "$TM" "$@" > "$out/log" 2>&1
    rc=$?
    if [ $rc -eq 99 ] || grep -q "definitely lost: [1-9]\|indirectly lost: [1-9]" "$out/log"; then
        echo "FAIL $name:"; grep -A12 "ERROR SUMMARY\|lost in" "$out/log" | head -40; fail=$((fail + 1))
    else
        pass=$((pass + 1))
    fi
}
B=tests/data/tiny/bert/model
G=tests/data/tiny/gpt2/decoder_model_merged
vg bert-plan run $B.onnx --inputs $B.cases/default/inputs --out "$out/o1"
vg bert-eager run $B.onnx --inputs $B.cases/default/inputs --out "$out/o2" --eager
vg gpt2-merged-graph-break run $G.onnx --inputs $G.cases/default/inputs --out "$out/o3"
vg gpt2-merged-static run $G.onnx --inputs $G.cases/nocache/inputs --out "$out/o4" --static use_cache_branch
vg truncated-model run tests/data/bad/truncated.onnx --inputs tests/data/bad/inputs_ok --out "$out/o5"
vg wrong-dtype run tests/data/bad/add.onnx --inputs tests/data/bad/inputs_dtype --out "$out/o6"
P=tests/data/pipelines
vg audio-classification pipeline audio-classification $P/audio-cls $P/media/stereo_48k.wav
vg speech-recognition pipeline automatic-speech-recognition $P/wav2vec2-ctc $P/media/speech_fr_8k.wav \
    $P/media/decoded/tone_440_44k1.16000.npy
vg audio-features-whisper audio-features $P/media/chirp_22k05.wav --processor $P/whisper-asr --out "$out/o7"
head -c 3000 $P/media/speech_en_16k.wav > "$out/cut.wav"
vg audio-truncated pipeline audio-classification $P/audio-cls "$out/cut.wav"
vg audio-whisper-refused pipeline automatic-speech-recognition $P/whisper-asr "$out/cut.wav"
rm -rf "$out"
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
