#!/usr/bin/python3
"""Writes the VAD test clips of tests/data/vad: espeak-ng sentences (resampled to 16 kHz by
sox, cut to their first and last sample above 1e-3) joined by digital silences of known
lengths, as 16-bit mono WAV at 16 kHz, and the same clips at 8 kHz (sox), with
clips.json: each clip's speech spans in seconds, the boundaries the VAD must find.
Needs espeak-ng and sox (tools/install-deps.sh). Usage: tests/gen/vad_clips.py [OUT_DIR]"""
import json, os, subprocess, sys, tempfile, wave
import numpy as np

OUT = sys.argv[1] if len(sys.argv) > 1 else 'tests/data/vad'
RATE = 16000

# (name, [silence seconds, (voice, words per minute, text), silence, ...])
CLIPS = [
    ('two_sentences', [1.0, ('en', 150, 'Our old yellow umbrella is broken again'), 1.5,
                       ('en', 150, 'Many young animals are waiting near the water'), 0.8]),
    ('three_voices', [0.4, ('en+f3', 170, 'I really enjoy learning languages online'), 0.7,
                      ('en-us+m3', 140, 'a mile or more along the road'), 2.0,
                      ('en+f2', 160, 'remember me'), 1.2]),
]


def read_wav(path):
    with wave.open(path) as w:
        assert w.getsampwidth() == 2 and w.getnchannels() == 1, path
        return np.frombuffer(w.readframes(w.getnframes()), dtype='<i2'), w.getframerate()


def write_wav(path, x, rate):
    with wave.open(path, 'wb') as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(x.astype('<i2').tobytes())


def speak(voice, speed, text, tmp):
    raw, res = f'{tmp}/raw.wav', f'{tmp}/res.wav'
    subprocess.run(['espeak-ng', '-v', voice, '-s', str(speed), '-w', raw, text], check=True)
    subprocess.run(['sox', '-D', raw, '-r', str(RATE), '-b', '16', res, 'gain', '-1'], check=True)
    x, rate = read_wav(res)
    assert rate == RATE
    loud = np.nonzero(np.abs(x.astype(np.float64)) / 32768 > 1e-3)[0]
    return x[loud[0]:loud[-1] + 1]


def main():
    os.makedirs(OUT, exist_ok=True)
    spans = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, parts in CLIPS:
            pieces, at, speech = [], 0, []
            for part in parts:
                if isinstance(part, float):
                    n = int(round(part * RATE))
                    pieces.append(np.zeros(n, dtype=np.int16))
                else:
                    x = speak(*part, tmp)
                    speech.append([at / RATE, (at + len(x)) / RATE])
                    pieces.append(x)
                    n = len(x)
                at += n
            clip = np.concatenate(pieces)
            write_wav(f'{OUT}/{name}.wav', clip, RATE)
            subprocess.run(['sox', '-D', f'{OUT}/{name}.wav', '-r', '8000', f'{OUT}/{name}_8k.wav'], check=True)
            spans[name] = {'seconds': len(clip) / RATE, 'speech': speech}
    with open(f'{OUT}/clips.json', 'w') as f:
        json.dump(spans, f, indent=1)
        f.write('\n')


main()
