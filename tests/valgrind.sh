#!/bin/sh
# Load, compile, run and free tiny exports under valgrind: no leak, no memory error.
# Skips (saying so) when valgrind is not installed. Usage: tests/valgrind.sh TRANSMUTER
TM=$1
if ! command -v valgrind >/dev/null 2>&1; then
    echo "skipped: valgrind is not installed"; echo "0 passed, 0 failed, 1 skipped"; exit 0
fi
pass=0; fail=0
out=$(mktemp -d)
B=tests/data/tiny/bert/model
# valgrind (3.19 in Debian 12) decodes x86 up to AVX2: a binary built with -march=native
# on an AVX-512 machine stops at its first AVX-512 instruction (SIGILL, exit 132), and
# every run would "pass" without having run. Then the suite builds its own copy for
# x86-64-v3 (AVX2 + FMA, the kernels the run-time dispatch picks on valgrind's CPU).
valgrind "$TM" run $B.onnx --inputs $B.cases/default/inputs --out "$out/probe" > "$out/log" 2>&1
if [ $? -ge 128 ] || grep -q "unhandled instruction\|Illegal instruction\|SIGILL" "$out/log"; then
    echo "valgrind cannot run $TM (AVX-512): building build-vg/transmuter for x86-64-v3"
    if make -s BUILD=build-vg OPT="-O1 -march=x86-64-v3" build-vg/transmuter > "$out/make" 2>&1; then
        TM=build-vg/transmuter
    else
        echo "FAIL: cannot build build-vg/transmuter:"; tail -20 "$out/make"; fail=$((fail + 1))
    fi
fi
vg() { # name, args...
    name=$1; shift
    valgrind --leak-check=full --errors-for-leak-kinds=definite,indirect \
        --error-exitcode=99 "$TM" "$@" > "$out/log" 2>&1
    rc=$?
    # 99: valgrind found errors; 128 and above: a signal (valgrind could not run it);
    # no ERROR SUMMARY: valgrind did not finish. Any other status is the program's own.
    if [ $rc -eq 99 ] || [ $rc -ge 128 ] || ! grep -q "ERROR SUMMARY: 0 errors" "$out/log" ||
        grep -q "definitely lost: [1-9]\|indirectly lost: [1-9]" "$out/log"; then
        echo "FAIL $name (exit $rc):"; grep -B4 -A12 "ERROR SUMMARY\|lost in\|unhandled\|Illegal" "$out/log" | head -40
        fail=$((fail + 1))
    else
        pass=$((pass + 1))
    fi
}
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
vg audio-whisper-truncated pipeline automatic-speech-recognition $P/whisper-asr "$out/cut.wav"
vg whisper-chunks-timestamps pipeline automatic-speech-recognition $P/whisper-asr $P/media/long_45s_16k.wav \
    --options '{"chunk_length_s": 30, "stride_length_s": 5, "return_timestamps": true, "max_new_tokens": 3}'
vg whisper-seek-resampled pipeline automatic-speech-recognition $P/whisper-asr $P/media/speech_fr_8k.wav \
    --options '{"language": "fr", "return_timestamps": true, "max_length": 8}'
vg whisper-bad-language pipeline automatic-speech-recognition $P/whisper-asr $P/media/silence_16k.wav \
    --options '{"language": "klingon"}'
rm -rf "$out"
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
