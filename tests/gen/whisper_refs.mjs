// More references for Whisper speech recognition than the shared whisper-asr.cases.jsonl
// holds, from transformers.js 4.3.2 on the same tiny random-weight repository
// (tests/data/pipelines/whisper-asr):
//   - tests/data/pipelines/whisper-asr.more.jsonl: pipeline calls in the cases' format
//     (default options up to the 448-token limit, timestamps without max_new_tokens, which
//     take its seek loop, language names, aliases and tokens, translate, chunking with the
//     default stride (chunk_length_s / 6, a fraction of a sample), many short chunks with
//     timestamps, a clip longer than 30 s without chunking, a batch of two clips);
//   - tests/data/pipelines/whisper-asr.decode_asr.jsonl: the tokenizer's _decode_asr on
//     hand-made token sequences and strides (timestamp pairs, a repeated start, timestamps
//     inside strides, overlapping chunks joined, a change of language), what the merge does
//     with sequences the random model never produces.
// Clips are fed as the pipeline's references were: 16-bit PCM WAV read as s / 32768 (the
// clips used here are mono), linearly resampled to 16 kHz where their rate differs.
//
// Usage: TJS_DIR=/tmp/tjs node tests/gen/whisper_refs.mjs   (see logits_refs.mjs for /tmp/tjs)
import fs from 'fs';
import path from 'path';
import { createRequire } from 'module';
import { fileURLToPath, pathToFileURL } from 'url';

const here = path.dirname(fileURLToPath(import.meta.url));
const data = path.join(here, '..', 'data', 'pipelines');
const tjs = process.env.TJS_DIR || '/tmp/tjs';
const req = createRequire(path.join(tjs, 'package.json'));
const T = await import(pathToFileURL(req.resolve('@huggingface/transformers')).href);
T.env.allowRemoteModels = false;
T.env.localModelPath = data + '/';
T.env.useBrowserCache = false;

// A mono 16-bit PCM WAV at 16 kHz, as the pipeline's references fed it.
function clip(name) {
    const b = fs.readFileSync(path.join(data, 'media', name));
    let at = 12, rate = 0, channels = 0, bits = 0, samples = null;
    while (at + 8 <= b.length) {
        const id = b.toString('latin1', at, at + 4), size = b.readUInt32LE(at + 4);
        if (id === 'fmt ') [channels, rate, bits] = [b.readUInt16LE(at + 10), b.readUInt32LE(at + 12), b.readUInt16LE(at + 22)];
        if (id === 'data') samples = b.subarray(at + 8, at + 8 + size);
        at += 8 + size + (size & 1);
    }
    if (channels !== 1 || bits !== 16) throw new Error(`${name}: only mono 16-bit clips here`);
    const n = samples.length / 2, x = new Float32Array(n);
    for (let i = 0; i < n; i++) x[i] = samples.readInt16LE(2 * i) / 32768;
    if (rate === 16000) return x;
    const m = Math.round((n * 16000) / rate), y = new Float32Array(m);
    for (let i = 0; i < m; i++) {
        const t = (i * rate) / 16000, j = Math.floor(t);
        y[i] = x[j] + (x[Math.min(j + 1, n - 1)] - x[j]) * (t - j);
    }
    return y;
}

const pipe = await T.pipeline('automatic-speech-recognition', 'whisper-asr', { dtype: 'fp32' });
const round = (v) => (typeof v === 'number' && !Number.isInteger(v) ? Number(v.toPrecision(9)) : v);
const clean = (o) => JSON.parse(JSON.stringify(o, (k, v) => round(v)));

const calls = [
    ['speech_en_16k.wav', {}],
    ['speech_en_16k.wav', { return_timestamps: true }],
    ['speech_fr_8k.wav', { language: 'French', task: 'translate', max_new_tokens: 6 }],
    ['noise_16k.wav', { language: '<|de|>', max_new_tokens: 5 }],
    ['chirp_22k05.wav', { language: 'castilian', max_new_tokens: 5 }],
    ['speech_en_16k.wav', { task: 'translate', max_new_tokens: 5 }],
    ['silence_16k.wav', { language: 'EN', return_timestamps: true, max_new_tokens: 3 }],
    ['long_45s_16k.wav', { language: 'en', chunk_length_s: 20, max_new_tokens: 6 }],
    ['long_45s_16k.wav', { language: 'en', chunk_length_s: 10, stride_length_s: 2, return_timestamps: true, max_new_tokens: 8 }],
    ['long_45s_16k.wav', { language: 'en', chunk_length_s: 20, stride_length_s: 4, return_timestamps: true }],
    ['long_45s_16k.wav', { language: 'en', chunk_length_s: 30, stride_length_s: 5 }],
    ['long_45s_16k.wav', { language: 'english' }],
    ['long_45s_16k.wav', { return_timestamps: true }],
    ['speech_fr_8k.wav', { language: 'fr', chunk_length_s: 1, stride_length_s: 0.25, max_new_tokens: 4 }],
    [['speech_en_16k.wav', 'tone_440_44k1.wav'], { language: 'en', max_new_tokens: 4 }],
];
const lines = [];
for (const [k, [input, options]] of calls.entries()) {
    const names = Array.isArray(input) ? input : [input];
    const audio = names.map(clip);
    const output = await pipe(Array.isArray(input) ? audio : audio[0], { ...options });
    const rec = { task: 'automatic-speech-recognition', model: 'whisper-asr', id: `more_${String(k).padStart(2, '0')}` };
    if (Array.isArray(input)) rec.inputs = names.map((f) => `media/${f}`);
    else rec.input = `media/${input}`;
    rec.options = options;
    rec.output = clean(output);
    lines.push(JSON.stringify(rec));
    console.log(rec.id, JSON.stringify(rec.output).slice(0, 100));
}
fs.writeFileSync(path.join(data, 'whisper-asr.more.jsonl'), lines.join('\n') + '\n');

// ---- _decode_asr on hand-made sequences ----
const tb = 50364, ts = (s) => tb + Math.round(s / 0.02);            // <|s|>
const [eos, sot, en, fr, transcribe, nots] = [50257, 50258, 50259, 50265, 50359, 50363];
const words = (...a) => a.map((w) => 1000 + w);                        // ordinary text tokens
const one = (tokens, stride) => ({ tokens, stride });
const merges = [
    ['two segments', true, [one([sot, en, transcribe, ts(0), ...words(1, 2), ts(1), ts(1), ...words(3, 4), ts(2.5), eos], [10, 0, 0])]],
    ['two segments, text only', false, [one([sot, en, transcribe, ts(0), ...words(1, 2), ts(1), ts(1), ...words(3, 4), ts(2.5), eos], [10, 0, 0])]],
    ['a repeated start', true, [one([ts(0.2), ...words(1), ts(0.2), ...words(2), ts(0.6), eos], [5, 0, 0])]],
    ['no closing timestamp', true, [one([ts(0.2), ...words(1, 2), ts(0.6), ts(0.6), ...words(3)], [5, 0, 0])]],
    ['only special tokens', true, [one([sot, en, transcribe, eos], [5, 0, 0])]],
    ['no tokens at all', false, [one([], [5, 0, 0]), one([sot, eos], [5, 0, 0])]],
    ['a change of language', false, [one([sot, en, transcribe, nots, ...words(1, 2), eos], [30, 0, 5]),
        one([sot, fr, transcribe, nots, ...words(3), eos], [25, 5, 0])]],
    ['a change of language with timestamps', true, [one([sot, en, transcribe, ts(0), ...words(1, 2), ts(20), eos], [30, 0, 5]),
        one([sot, fr, transcribe, ts(0), ...words(3), ts(10), eos], [25, 5, 0])]],
    ['overlapping text joined', false, [one([sot, en, nots, ...words(1, 2, 3, 4, 5, 6, 7), eos], [30, 0, 5]),
        one([sot, en, nots, ...words(5, 6, 7, 8, 9), eos], [30, 5, 5]),
        one([sot, en, nots, ...words(9, 10, 11), eos], [12, 5, 0])]],
    ['overlap with one match only', false, [one([...words(1, 2, 3)], [30, 0, 5]), one([...words(3, 4)], [20, 5, 0])]],
    ['timestamps in the strides', true, [one([ts(0), ...words(1, 2), ts(10), ts(10), ...words(3, 4), ts(28), ts(28), ...words(5), ts(29.5)], [30, 0, 5]),
        one([ts(0), ...words(4, 5), ts(3), ts(3), ...words(6, 7), ts(12), ts(12), ...words(8), ts(19)], [25, 5, 0])]],
    ['timestamps in the strides, text only', false, [one([ts(0), ...words(1, 2), ts(10), ts(10), ...words(3, 4), ts(28), ts(28), ...words(5), ts(29.5)], [30, 0, 5]),
        one([ts(0), ...words(4, 5), ts(3), ts(3), ...words(6, 7), ts(12), ts(12), ...words(8), ts(19)], [25, 5, 0])]],
    ['a start before the left stride', true, [one([ts(0), ...words(1, 2, 3), ts(24), ts(24), ...words(4, 5)], [30, 0, 5]),
        one([ts(1), ...words(4, 5), ts(6), ts(6), ...words(6), ts(9)], [20, 5, 0])]],
    ['three chunks', true, [one([ts(0), ...words(1), ts(4), ts(4), ...words(2), ts(9.5)], [10, 0, 2]),
        one([ts(0), ...words(2), ts(2.5), ts(2.5), ...words(3, 4), ts(8.8)], [10, 2, 2]),
        one([ts(1), ...words(4, 5), ts(5), eos], [7, 2, 0])]],
];
const out = [];
for (const [name, return_timestamps, chunks] of merges) {
    const [text, optional] = pipe.tokenizer._decode_asr(chunks.map((c) => ({ ...c, tokens: [...c.tokens] })),
        { time_precision: 0.02, return_timestamps, force_full_sequences: false });
    out.push(JSON.stringify({ name, return_timestamps, chunks, output: JSON.stringify({ text, ...optional }) }));
    console.log(name, out.at(-1).slice(-120));
}
fs.writeFileSync(path.join(data, 'whisper-asr.decode_asr.jsonl'), out.join('\n') + '\n');
