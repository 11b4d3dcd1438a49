#!/usr/bin/env node
// ONNX Runtime's side of bench/run.py: one long-lived process per case and thread count,
// so that the bench can alternate timed rounds between the two runtimes without
// reloading either. Not a general runner (that is ../shared/tools/ort-run.mjs, which
// writes the outputs the bench compares).
//
// Usage: node ort_bench.mjs MODEL.onnx INPUT_DIR THREADS WARMUP [--no-spin] [--out DIR]
// Prints one JSON line once the session is made and warmed up (session_ms: the time of
// InferenceSession.create, first_run_ms, rss_before_mb: Node's own footprint before the
// session), then answers each stdin line `run N` with one JSON line (median_ms, min_ms,
// times, peak_rss_mb) and exits on `quit` or end of input, writing the last run's
// outputs as DIR/NAME.npy with --out.
// Sessions use the CPU provider, graph optimizations "all", sequential execution, one
// inter-op thread and THREADS intra-op threads, as run.py documents.

import { createRequire } from 'node:module';
import fs from 'node:fs';
import path from 'node:path';
import readline from 'node:readline';

const require = createRequire(path.join(path.dirname(new URL(import.meta.url).pathname), '.ort', 'x.js'));
const ort = require('onnxruntime-node');

// .npy dtype descriptors to onnxruntime-node tensor types.
const NPY = {
  '<f4': ['float32', Float32Array, 4], '<f8': ['float64', Float64Array, 8],
  '<f2': ['float16', Uint16Array, 2], '<i8': ['int64', BigInt64Array, 8],
  '<i4': ['int32', Int32Array, 4], '<i2': ['int16', Int16Array, 2], '|i1': ['int8', Int8Array, 1],
  '<u8': ['uint64', BigUint64Array, 8], '<u4': ['uint32', Uint32Array, 4],
  '<u2': ['uint16', Uint16Array, 2], '|u1': ['uint8', Uint8Array, 1], '|b1': ['bool', Uint8Array, 1],
};

function readNpy(file) {
  const buf = fs.readFileSync(file);
  if (buf.toString('latin1', 1, 6) !== 'NUMPY') throw new Error(`${file}: not a .npy file`);
  const major = buf[6];
  const hlen = major >= 2 ? buf.readUInt32LE(8) : buf.readUInt16LE(8);
  const start = (major >= 2 ? 12 : 10);
  const header = buf.toString('latin1', start, start + hlen);
  const descr = /'descr':\s*'([^']+)'/.exec(header)?.[1];
  const fortran = /'fortran_order':\s*True/.test(header);
  const shape = (/'shape':\s*\(([^)]*)\)/.exec(header)?.[1] ?? '').split(',').map((s) => s.trim()).filter(Boolean).map(Number);
  if (!NPY[descr] || fortran) throw new Error(`${file}: unsupported .npy (${descr}${fortran ? ', Fortran order' : ''})`);
  const [type, Arr, size] = NPY[descr];
  const n = shape.reduce((a, b) => a * b, 1);
  const off = start + hlen;
  const bytes = new Uint8Array(n * size);
  bytes.set(buf.subarray(off, off + n * size));
  let data = new Arr(bytes.buffer, 0, n);
  if (type === 'bool') data = Uint8Array.from(data, (v) => (v ? 1 : 0));
  return new ort.Tensor(type, type === 'bool' ? Array.from(data, Boolean) : data, shape);
}

// File names are tensor names with every byte outside [A-Za-z0-9._-] written %XX.
const encode = (n) => Array.from(Buffer.from(n, 'utf8'), (b) => (/[A-Za-z0-9._-]/.test(String.fromCharCode(b)) ? String.fromCharCode(b) : '%' + b.toString(16).toUpperCase().padStart(2, '0'))).join('');
const decode = (f) => f.replace(/\.npy$/, '').replace(/%([0-9A-Fa-f]{2})/g, (_, h) => String.fromCharCode(parseInt(h, 16)));
const mb = (bytes) => +(bytes / 1048576).toFixed(1);
// VmHWM, not getrusage: after exec, ru_maxrss still remembers the parent's footprint.
const peakRssMb = () => {
  const m = /VmHWM:\s+(\d+) kB/.exec(fs.readFileSync('/proc/self/status', 'latin1'));
  return m ? mb(+m[1] * 1024) : 0;
};

function writeNpy(file, t) {
  const descr = Object.keys(NPY).find((d) => NPY[d][0] === t.type);
  if (!descr) throw new Error(`cannot write a ${t.type} output as .npy`);
  const shape = t.dims.length === 1 ? `(${t.dims[0]},)` : `(${t.dims.join(', ')})`;
  let header = `{'descr': '${descr}', 'fortran_order': False, 'shape': ${shape}, }`;
  header += ' '.repeat((64 - ((10 + header.length + 1) % 64)) % 64) + '\n';
  const pre = Buffer.alloc(10);
  pre.write('\x93NUMPY', 0, 'latin1');
  pre[6] = 1; pre[7] = 0; pre.writeUInt16LE(header.length, 8);
  const data = t.type === 'bool' ? Uint8Array.from(t.data, (v) => (v ? 1 : 0)) : t.data;
  fs.writeFileSync(file, Buffer.concat([pre, Buffer.from(header, 'latin1'), Buffer.from(data.buffer, data.byteOffset, data.byteLength)]));
}

async function main() {
  const [model, inDir, threadsArg, warmupArg, ...rest] = process.argv.slice(2);
  if (!model || !inDir) throw new Error('usage: node ort_bench.mjs MODEL.onnx INPUT_DIR THREADS WARMUP [--no-spin]');
  const threads = +threadsArg || 1, warmup = +(warmupArg ?? 3);
  const outDir = rest.includes('--out') ? rest[rest.indexOf('--out') + 1] : null;
  const rssBefore = peakRssMb();
  const opts = {
    executionProviders: ['cpu'], graphOptimizationLevel: 'all', intraOpNumThreads: threads,
    interOpNumThreads: 1, executionMode: 'sequential', logSeverityLevel: 3, extra: {},
  };
  if (rest.includes('--no-spin')) opts.extra['session.intra_op.allow_spinning'] = '0';
  let t0 = process.hrtime.bigint();
  const session = await ort.InferenceSession.create(model, opts);
  const sessionMs = Number(process.hrtime.bigint() - t0) / 1e6;
  const feeds = {};
  for (const f of fs.readdirSync(inDir)) {
    if (!f.endsWith('.npy')) continue;
    const name = decode(f);
    if (session.inputNames.includes(name)) feeds[name] = readNpy(path.join(inDir, f));
  }
  for (const n of session.inputNames) if (!feeds[n]) throw new Error(`no ${n}.npy in ${inDir}`);
  t0 = process.hrtime.bigint();
  let last = await session.run(feeds);
  const firstMs = Number(process.hrtime.bigint() - t0) / 1e6;
  for (let i = 1; i < warmup; i++) await session.run(feeds);
  process.stdout.write(JSON.stringify({ session_ms: +sessionMs.toFixed(3), first_run_ms: +firstMs.toFixed(3),
    rss_before_mb: rssBefore, peak_rss_mb: peakRssMb() }) + '\n');
  const rl = readline.createInterface({ input: process.stdin });
  for await (const line of rl) {
    const [cmd, arg] = line.trim().split(/\s+/);
    if (cmd === 'quit') break;
    if (cmd !== 'run') throw new Error(`unknown command '${line}'`);
    const times = [];
    for (let i = 0; i < +arg; i++) {
      const a = process.hrtime.bigint();
      last = await session.run(feeds);
      times.push(Number(process.hrtime.bigint() - a) / 1e6);
    }
    const s = [...times].sort((x, y) => x - y);
    const med = s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
    process.stdout.write(JSON.stringify({ median_ms: +med.toFixed(4), min_ms: +s[0].toFixed(4),
      times: times.map((t) => +t.toFixed(4)), peak_rss_mb: peakRssMb() }) + '\n');
  }
  if (outDir) {
    fs.mkdirSync(outDir, { recursive: true });
    for (const [name, t] of Object.entries(last)) writeNpy(path.join(outDir, encode(name) + '.npy'), t);
  }
  await session.release();
}

main().catch((e) => { process.stderr.write(`ort_bench: ${e && e.stack ? e.stack : e}\n`); process.exit(1); });
