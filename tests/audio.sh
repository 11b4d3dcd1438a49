#!/bin/sh
# The audio tasks against transformers.js 4.3.2 (tests/data/pipelines, copied from the
# project's shared references): every call of audio-cls.cases.jsonl (audio-classification,
# AST), wav2vec2-ctc.cases.jsonl (CTC speech recognition) and whisper-asr.cases.jsonl
# (Whisper: language and task, max_new_tokens, timestamps, a 45 s clip in chunks, and
# whisper-asr.more.jsonl's further calls) replayed through `transmuter pipeline TASK REPO
# --call` (labels and texts exact, scores and timestamps within 1e-4); the processors'
# outputs (`transmuter audio-features`) against its feature extractors' (log-mel within 1e-4,
# waveform values within 1e-5, masks exact); the decoded and resampled waveforms against
# the ones it was fed; the CLI's positional and batch forms; errors (a truncated, empty,
# missing or unreadable file, a bad .npy, a Moonshine or AST repo for speech recognition,
# Whisper's bad options: an unknown language, a task the model lacks, word timestamps, bad
# chunk lengths, a language for an English-only model, timestamps without their token);
# and, where `sox` is installed, decoding against sox's (WAV, FLAC, OGG). Prints the largest
# differences seen. Usage: tests/audio.sh TRANSMUTER
TM=${1:-build/transmuter}
exec /usr/bin/python3 - "$TM" tests/data/pipelines <<'PY'
import json, os, shutil, struct, subprocess, sys, tempfile
import numpy as np
tm, data = sys.argv[1], sys.argv[2]
tmp = tempfile.mkdtemp(prefix='tm-audio-')
sys.path.insert(0, 'tests')
from media_checks import Checks
checks = Checks(tm)
ok, note, diff, run_json = checks.ok, checks.note, checks.diff, checks.run_json

# ---- transformers.js's calls -------------------------------------------------------------
cases = {}
for repo in ('audio-cls', 'wav2vec2-ctc', 'whisper-asr'):
    for n, line in enumerate(open(f'{data}/{repo}.cases.jsonl', encoding='utf-8'), 1):
        case = json.loads(line)
        cases[(repo, n)] = case
        call = json.dumps({'inputs': [f'{data}/{case["input"]}'], 'options': case.get('options') or {}})
        r, got = run_json(['pipeline', case['task'], f'{data}/{repo}', '--call', call])
        ok(f'{repo}.cases.jsonl:{n} ({case["id"]})',
           f'no JSON (exit {r.returncode}): {r.stderr.strip()[:200]}' if got is None
           else diff(case['output'], got, f'{repo} scores'))

# Whisper's further calls (tests/gen/whisper_refs.mjs): defaults up to the length limit,
# the seek loop of timestamps without max_new_tokens, language names and tokens, chunking
# with the default stride, many short chunks, a clip over 30 s whole, a batch.
for n, line in enumerate(open(f'{data}/whisper-asr.more.jsonl', encoding='utf-8'), 1):
    case = json.loads(line)
    paths = [f'{data}/{p}' for p in case['inputs']] if 'inputs' in case else f'{data}/{case["input"]}'
    r, got = run_json(['pipeline', case['task'], f'{data}/whisper-asr', '--call',
                       json.dumps({'inputs': [paths], 'options': case['options']})])
    ok(f'whisper-asr.more.jsonl:{n} ({json.dumps(case["options"])})',
       f'no JSON (exit {r.returncode}): {r.stderr.strip()[:200]}' if got is None
       else diff(case['output'], got, 'whisper-asr scores'))

# The same calls on the waveforms transformers.js was fed (.npy input: no decoding).
for (repo, n), case in cases.items():
    npy = case['audio_decoding']['decoded_npy']
    if not os.path.exists(f'{data}/{npy}'):
        continue
    call = json.dumps({'inputs': [f'{data}/{npy}'], 'options': case.get('options') or {}})
    r, got = run_json(['pipeline', case['task'], f'{data}/{repo}', '--call', call])
    ok(f'{repo}.cases.jsonl:{n} on {npy}', f'no JSON: {r.stderr.strip()[:200]}' if got is None
       else diff(case['output'], got, f'{repo} scores'))

# ---- the CLI's forms -----------------------------------------------------------------------
A, W = f'{data}/audio-cls', f'{data}/wav2vec2-ctc'
speech, tone = f'{data}/media/speech_en_16k.wav', f'{data}/media/tone_440_44k1.wav'
r, got = run_json(['pipeline', 'audio-classification', A, speech, '--json'])
ok('audio-classification positional (top_k 5 by default)', diff(cases[('audio-cls', 9)]['output'], got, 'audio-cls scores'))
r, got = run_json(['pipeline', 'audio-classification', A, speech, '--options', '{"top_k":null}', '--json'])
ok('audio-classification top_k null: all 12 labels', None if got and len(got) == 12 else r.stdout[:200])
r, got = run_json(['pipeline', 'automatic-speech-recognition', W, speech, tone, '--json'])
ok('automatic-speech-recognition batch of two',
   diff([cases[('wav2vec2-ctc', 1)]['output'], cases[('wav2vec2-ctc', 3)]['output']], got, 'wav2vec2-ctc scores'))
r = subprocess.run([tm, 'pipeline', 'automatic-speech-recognition', W, speech], capture_output=True, text=True)
ok('automatic-speech-recognition readable', None if r.returncode == 0 and
   cases[('wav2vec2-ctc', 1)]['output']['text'] in r.stdout else r.stdout[:200] + r.stderr[:200])

r = subprocess.run([tm, 'pipeline', 'automatic-speech-recognition', f'{data}/whisper-asr', speech, '--options',
                    json.dumps(cases[('whisper-asr', 9)]['options'])], capture_output=True, text=True)
ok('Whisper readable: the text, then one line per chunk', None if r.returncode == 0 and
   r.stdout.startswith('text:  Programm') and '\n    timestamp: 3.12, null  text:  Programm' in r.stdout
   else r.stdout[:200] + r.stderr[:200])

# ---- processors and decoding ---------------------------------------------------------------
def max_diff(got, want):
    return float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64)))) if want.size else 0.0

def features(repo, proc, clip, names, tol):
    out = f'{tmp}/{repo}-{clip}'
    r = subprocess.run([tm, 'audio-features', f'{data}/media/{clip}.wav', '--processor', proc, '--out', out],
                       capture_output=True, text=True)
    for name in names:
        ref = f'{data}/{repo}.features/processor.{clip}.{name}.npy'
        if r.returncode != 0:
            ok(f'{repo} features of {clip}', r.stderr.strip()[:200]); continue
        got, want = np.load(f'{out}/{name}.npy'), np.load(ref)
        if got.shape != want.shape or got.dtype != want.dtype:
            ok(f'{repo} {name} of {clip}', f'{got.dtype}{got.shape} != {want.dtype}{want.shape}'); continue
        d = max_diff(got, want)
        note(f'{repo} {name}', d)
        ok(f'{repo} {name} of {clip}', None if d <= tol else f'max |diff| {d:.3g} > {tol}')

for clip in ('speech_en_16k', 'tone_440_44k1'):
    features('audio-cls', A, clip, ['input_values'], 1e-4)
    features('wav2vec2-ctc', W, clip, ['input_values', 'attention_mask'], 1e-5)
features('whisper-asr', f'{data}/whisper-asr/preprocessor_config.json', 'stereo_48k', ['input_features'], 1e-4)

for name in sorted(os.listdir(f'{data}/media/decoded')):
    clip = name.split('.')[0]
    out = f'{tmp}/decoded-{clip}'
    r = subprocess.run([tm, 'audio-features', f'{data}/media/{clip}.wav', '--rate', '16000', '--out', out],
                       capture_output=True, text=True)
    if r.returncode != 0:
        ok(f'decoding {clip}', r.stderr.strip()[:200]); continue
    got, want = np.load(f'{out}/waveform.npy'), np.load(f'{data}/media/decoded/{name}')
    if got.shape != want.shape:
        ok(f'decoding {clip}', f'{got.shape[0]} samples != {want.shape[0]}'); continue
    d = max_diff(got, want)
    note('decoded waveforms', d)
    ok(f'decoding {clip} (mono mix, resampling to 16 kHz)', None if d <= 1e-6 else f'max |diff| {d:.3g}')

# ---- errors --------------------------------------------------------------------------------
def expect_error(name, args, want):
    r = subprocess.run([tm] + args, capture_output=True, text=True)
    text = r.stdout + r.stderr
    if r.returncode == 0: ok(name, 'exit status 0')
    elif r.returncode >= 124 or r.returncode < 0: ok(name, f'crashed (exit {r.returncode})')
    else: ok(name, None if want in text else f'message {text.strip()[:200]!r} lacks {want!r}')

wav = open(speech, 'rb').read()
open(f'{tmp}/truncated.wav', 'wb').write(wav[:len(wav) // 3])
open(f'{tmp}/header_cut.wav', 'wb').write(wav[:30])
# a valid WAV header with a data chunk of 0 bytes
fmt = struct.pack('<4sIHHIIHH', b'fmt ', 16, 1, 1, 16000, 32000, 2, 16)
open(f'{tmp}/empty.wav', 'wb').write(b'RIFF' + struct.pack('<I', 4 + len(fmt) + 8) + b'WAVE' + fmt + b'data' + struct.pack('<I', 0))
open(f'{tmp}/text.wav', 'w').write('this is not audio\n' * 20)
np.save(f'{tmp}/ints.npy', np.arange(100, dtype=np.int64))
np.save(f'{tmp}/empty.npy', np.zeros(0, dtype=np.float32))
np.save(f'{tmp}/image.npy', np.zeros((3, 4, 5), dtype=np.float32))
for task, repo in (('audio-classification', A), ('automatic-speech-recognition', W)):
    expect_error(f'{task}: truncated WAV', ['pipeline', task, repo, f'{tmp}/truncated.wav'], f'{tmp}/truncated.wav: truncated or corrupt')
    expect_error(f'{task}: zero-length WAV', ['pipeline', task, repo, f'{tmp}/empty.wav'], f'{tmp}/empty.wav: the clip has no samples')
    expect_error(f'{task}: missing file', ['pipeline', task, repo, f'{tmp}/nothing.wav'], f"cannot open audio file '{tmp}/nothing.wav'")
    expect_error(f'{task}: not audio', ['pipeline', task, repo, f'{tmp}/text.wav'], f'{tmp}/text.wav: not an audio file we can read')
expect_error('a WAV cut inside its header', ['pipeline', 'audio-classification', A, f'{tmp}/header_cut.wav'], f'{tmp}/header_cut.wav: not an audio file')
expect_error('an int64 .npy', ['pipeline', 'audio-classification', A, f'{tmp}/ints.npy'], 'must be float32 or float64')
expect_error('an empty .npy', ['pipeline', 'audio-classification', A, f'{tmp}/empty.npy'], 'the waveform has no samples')
expect_error('a 3-d .npy', ['pipeline', 'audio-classification', A, f'{tmp}/image.npy'], 'of shape (N) or (1, N)')
expect_error('--json error', ['pipeline', 'audio-classification', A, f'{tmp}/empty.wav', '--json'], '{"error":')
WH = f'{data}/whisper-asr'
def whisper_error(name, options, want, repo=WH):
    expect_error(f'Whisper: {name}', ['pipeline', 'automatic-speech-recognition', repo, speech, '--options',
                                      json.dumps(options)], want)
whisper_error('an unknown language', {'language': 'klingon'}, 'Language "klingon" is not supported. Must be one of: ["english",')
whisper_error('an unknown language code', {'language': 'XX'}, 'Language "xx" is not supported. Must be one of: ["en",')
whisper_error('a task the model lacks', {'task': 'summarize'}, 'task "summarize" is not in the generation config')
whisper_error('word timestamps', {'return_timestamps': 'word'}, 'return_timestamps "word"')
whisper_error('return_timestamps a number', {'return_timestamps': 1}, 'return_timestamps must be true, false')
whisper_error('a chunk no longer than its stride', {'chunk_length_s': 10, 'stride_length_s': 10},
              '`chunk_length_s` must be larger than `stride_length_s`')
whisper_error('strides that leave no step', {'chunk_length_s': 10, 'stride_length_s': 6}, 'more than twice stride_length_s')
whisper_error('chunk_length_s as text', {'chunk_length_s': '30'}, 'chunk_length_s must be a number of seconds')
whisper_error('a negative stride', {'chunk_length_s': 30, 'stride_length_s': -1}, 'stride_length_s must be a number')
whisper_error('max_new_tokens as text', {'max_new_tokens': 'ten'}, "key 'max_new_tokens'")
whisper_error('force_full_sequences without an ending timestamp', {'return_timestamps': True, 'max_new_tokens': 12,
              'force_full_sequences': True}, 'Whisper did not predict an ending timestamp')
# repositories whose generation config lacks what an option needs
def whisper_variant(name, change):
    d = f'{tmp}/{name}'
    os.makedirs(d)
    for f in os.listdir(WH):
        if f != 'generation_config.json':
            os.symlink(os.path.abspath(f'{WH}/{f}'), f'{d}/{f}')
    g = json.load(open(f'{WH}/generation_config.json'))
    change(g)
    json.dump(g, open(f'{d}/generation_config.json', 'w'))
    return d
english = whisper_variant('whisper-en', lambda g: g.update(is_multilingual=False))
whisper_error('a language for an English-only model', {'language': 'en'},
              'Cannot specify `task` or `language` for an English-only model', english)
r, got = run_json(['pipeline', 'automatic-speech-recognition', english, speech, '--options', '{"max_new_tokens":3}', '--json'])
ok('Whisper: an English-only model runs without language and task', None if got and 'text' in got else r.stderr[:200])
no_ts = whisper_variant('whisper-no-ts', lambda g: g.pop('no_timestamps_token_id'))
whisper_error('timestamps without no_timestamps_token_id', {'return_timestamps': True}, 'needs the generation config\'s no_timestamps_token_id', no_ts)
no_german = whisper_variant('whisper-no-de', lambda g: g['lang_to_id'].pop('<|de|>'))
whisper_error('a language missing from lang_to_id', {'language': 'german'}, 'language "german": the model has no <|de|>', no_german)
moonshine = f'{tmp}/moonshine'
os.makedirs(moonshine)
json.dump({'model_type': 'moonshine'}, open(f'{moonshine}/config.json', 'w'))
expect_error('Moonshine speech recognition', ['pipeline', 'automatic-speech-recognition', moonshine, speech],
             'with a moonshine model is not supported yet')
expect_error('speech recognition on an AST repo', ['pipeline', 'automatic-speech-recognition', A, speech],
             "does not support model type 'audio-spectrogram-transformer'")
expect_error('audio-classification without preprocessor_config.json',
             ['pipeline', 'audio-classification', f'{data}/bert-sentiment', speech], 'no preprocessor_config.json')
expect_error('an audio task given a number', ['pipeline', 'audio-classification', A, '--call', '{"inputs":[3]}'],
             'a path to a sound file')
expect_error('audio-features without a processor file', ['audio-features', speech, '--processor', f'{tmp}/none.json', '--out', tmp],
             'cannot open')

# ---- sox, when installed -------------------------------------------------------------------
sox = shutil.which('sox')
if not sox:
    checks.skipped += 1
    print('skip: sox is not installed (decoding of FLAC/OGG and the sox comparisons)')
else:
    def ours(path, rate):
        out = f'{tmp}/sox-{os.path.basename(path)}-{rate}'
        r = subprocess.run([tm, 'audio-features', path, '--rate', str(rate), '--out', out], capture_output=True, text=True)
        return np.load(f'{out}/waveform.npy') if r.returncode == 0 else r.stderr
    def sox_raw(args):
        r = subprocess.run([sox] + args + ['-t', 'f32', '-e', 'floating-point', '-'], capture_output=True)
        return np.frombuffer(r.stdout, dtype=np.float32) if r.returncode == 0 else None
    # decoding: sox's float samples of the same file, at its own rate
    for clip, rate in (('speech_fr_8k', 8000), ('tone_440_44k1', 44100), ('chirp_22k05', 22050)):
        got, want = ours(f'{data}/media/{clip}.wav', rate), sox_raw([f'{data}/media/{clip}.wav'])
        ok(f'sox: decoding {clip}', got if isinstance(got, str) else
           None if want is not None and got.shape == want.shape and max_diff(got, want) <= 1e-7 else 'differs from sox')
    # the stereo mix: sox's average of the two channels times sqrt(2)
    got, want = ours(f'{data}/media/stereo_48k.wav', 48000), sox_raw([f'{data}/media/stereo_48k.wav', '-c', '1'])
    ok('sox: stereo mix is sqrt(2) x the channel average', got if isinstance(got, str) else
       None if want is not None and got.shape == want.shape and max_diff(got, want * np.sqrt(2)) <= 1e-4 else 'differs')
    # FLAC and OGG written by sox: FLAC decodes as the WAV did, both as sox decodes them
    for ext in ('flac', 'ogg'):
        path = f'{tmp}/speech.{ext}'
        r = subprocess.run([sox, speech, path], capture_output=True)
        if r.returncode != 0:
            checks.skipped += 1
            print(f'skip: sox cannot write .{ext}')
            continue
        got, want = ours(path, 16000), sox_raw([path])
        if isinstance(got, str): ok(f'sox: .{ext} decodes', got); continue
        d = max_diff(got, want) if want is not None and got.shape == want.shape else None
        if d is not None: note(f'.{ext} decoding vs sox', d)
        ok(f'sox: .{ext} decodes as sox decodes it', None if d is not None and d <= 1e-4 else
           f'{got.shape[0]} samples vs {None if want is None else want.shape[0]}, max |diff| {d}')
        if ext == 'flac':
            d = max_diff(got, ours(speech, 16000))
            ok('sox: .flac decodes exactly as the .wav', None if d == 0 else f'max |diff| {d:.3g}')
    # resampling: linear interpolation vs sox's band-limited rate effect on a 440 Hz tone
    got, want = ours(tone, 16000), sox_raw([tone, '-r', '16000'])
    if isinstance(got, str) or want is None: ok('sox: resampling', 'failed')
    else:
        n = min(got.shape[0], want.shape[0])
        rms = float(np.sqrt(np.mean((got[:n].astype(np.float64) - want[:n]) ** 2)) / np.sqrt(np.mean(want[:n].astype(np.float64) ** 2)))
        note('resampling vs sox (relative RMS, 440 Hz tone)', rms)
        ok('sox: 44.1 -> 16 kHz resampling near sox\'s', None if abs(got.shape[0] - want.shape[0]) <= 1 and rms < 0.02 else f'relative RMS {rms:.3g}')

shutil.rmtree(tmp, ignore_errors=True)
sys.exit(checks.summary())
PY
