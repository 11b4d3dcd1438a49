#!/usr/bin/env node
// ONNX Runtime's side of bench/run.py's `encoder-stream` cases: one session, a stream of
// requests of changing shapes run one after the other, as a server would see them.
//
// Usage: node ort_stream.mjs MODEL.onnx --requests FILE.jsonl [--threads T] [--no-spin]
// FILE has one request a line, {"input_ids": [[...], ...]} (the batch's rows, of equal
// length); attention_mask is ones and token_type_ids zeros of the same shape, fed where the
// model takes them. Prints one JSON line: requests, session_ms (InferenceSession.create),
// total_ms (the sum over requests of building the input tensors and session.run; reading
// the file and the checksums are outside it), first_ms (the first request's time),
// checksums (per request, the sum of every element of the model's first output, as a
// double), peak_rss_mb (VmHWM), rss_before_mb.
//
// The session is made as bench/ort_bench.mjs makes it: CPU provider, graph optimizations
// "all", sequential execution, one inter-op thread, T intra-op threads; nothing is run
// before the stream starts.

import { createRequire } from 'node:module';
import fs from 'node:fs';
import path from 'node:path';

const require = createRequire(path.join(path.dirname(new URL(import.meta.url).pathname), '.ort', 'x.js'));
const ort = require('onnxruntime-node');

const mb = (bytes) => +(bytes / 1048576).toFixed(1);
const peakRssMb = () => {
  try {
    const m = /VmHWM:\s+(\d+) kB/.exec(fs.readFileSync('/proc/self/status', 'latin1'));
    if (m) return mb(+m[1] * 1024);
  } catch { /* no /proc */ }
  return mb(process.resourceUsage().maxRSS * 1024);
};
const nowMs = () => Number(process.hrtime.bigint()) / 1e6;

function parseArgs(argv) {
  const o = { model: null, requests: null, threads: 1, noSpin: false };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--requests') o.requests = argv[++i];
    else if (a === '--threads') o.threads = +argv[++i];
    else if (a === '--no-spin') o.noSpin = true;
    else if (!a.startsWith('-') && !o.model) o.model = a;
    else throw new Error(`unknown argument '${a}'`);
  }
  if (!o.model || !o.requests) throw new Error('usage: node ort_stream.mjs MODEL.onnx --requests FILE.jsonl [--threads T] [--no-spin]');
  return o;
}

async function main() {
  const o = parseArgs(process.argv.slice(2));
  const requests = fs.readFileSync(o.requests, 'utf8').split('\n').filter((l) => l.trim()).map((l, i) => {
    const rows = JSON.parse(l).input_ids;
    if (!Array.isArray(rows) || !rows.length || !rows.every((r) => Array.isArray(r) && r.length === rows[0].length && r.length))
      throw new Error(`${o.requests}:${i + 1}: input_ids is not a batch of rows of equal length`);
    return rows;
  });
  const rssBefore = peakRssMb();
  const opts = {
    executionProviders: ['cpu'], graphOptimizationLevel: 'all', intraOpNumThreads: o.threads,
    interOpNumThreads: 1, executionMode: 'sequential', logSeverityLevel: 3, extra: {},
  };
  if (o.noSpin) opts.extra['session.intra_op.allow_spinning'] = '0';
  let t0 = nowMs();
  const session = await ort.InferenceSession.create(o.model, opts);
  const sessionMs = nowMs() - t0;
  const meta = {};
  (session.inputMetadata || []).forEach((m, i) => { meta[session.inputNames[i]] = m; });
  for (const n of session.inputNames)
    if (!['input_ids', 'attention_mask', 'token_type_ids'].includes(n)) throw new Error(`input '${n}' is not one an encoder stream feeds`);
  const first = session.outputNames[0];
  const filled = (name, dims, f) => {
    const n = dims[0] * dims[1];
    if (meta[name] && meta[name].type === 'int32') return new ort.Tensor('int32', Int32Array.from({ length: n }, (_, k) => Number(f(k))), dims);
    return new ort.Tensor('int64', BigInt64Array.from({ length: n }, (_, k) => BigInt(f(k))), dims);
  };
  const checksums = [], times = [];
  for (const rows of requests) {
    const a = nowMs();
    const dims = [rows.length, rows[0].length];
    const feeds = { input_ids: filled('input_ids', dims, (k) => rows[Math.floor(k / dims[1])][k % dims[1]]) };
    if (session.inputNames.includes('attention_mask')) feeds.attention_mask = filled('attention_mask', dims, () => 1);
    if (session.inputNames.includes('token_type_ids')) feeds.token_type_ids = filled('token_type_ids', dims, () => 0);
    const res = await session.run(feeds);
    times.push(nowMs() - a);
    let sum = 0;
    for (const v of res[first].data) sum += Number(v);
    checksums.push(sum);
  }
  process.stdout.write(JSON.stringify({
    requests: requests.length, session_ms: +sessionMs.toFixed(3),
    total_ms: +times.reduce((x, y) => x + y, 0).toFixed(3), first_ms: +(times[0] ?? 0).toFixed(3),
    checksums, peak_rss_mb: peakRssMb(), rss_before_mb: rssBefore,
  }) + '\n');
  await session.release();
}

main().catch((e) => { process.stderr.write(`ort_stream: ${e && e.stack ? e.stack : e}\n`); process.exit(1); });
