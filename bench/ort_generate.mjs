#!/usr/bin/env node
// ONNX Runtime's side of bench/run.py's `generate` cases: greedy decoding with a merged
// decoder (decoder_model_merged.onnx), the loop transformers.js runs. Prefill with the
// prompt and an empty cache (every past_key_values.* of length 0, use_cache_branch false,
// attention_mask ones, position_ids 0..n-1 where the model takes them), then one token a
// step with the previous step's present.* fed back as past_key_values.*; the next token is
// the argmax of the last position's logits (the first maximum).
//
// Usage: node ort_generate.mjs MODEL.onnx --prompt-ids 1,2,3 --max-new N [--threads T]
//                              [--no-spin] [--prealloc]
// Prints one JSON line: session_ms (InferenceSession.create), prefill_ms, decode_ms (per new
// token after the first: each decode step's time, session.run and the argmax), its median
// decode_ms_median, tokens_per_s (decode steps over their total time), tokens (the
// generated ids), peak_rss_mb (VmHWM; process.resourceUsage().maxRSS where /proc is not
// there), rss_before_mb (Node's own footprint before the session), prealloc.
//
// The session is made as bench/ort_bench.mjs makes it: CPU provider, graph optimizations
// "all", sequential execution, one inter-op thread, T intra-op threads.
//
// IO binding: onnxruntime-node exposes no IoBinding object; its only means of binding
// outputs is `fetches` with pre-allocated tensors (and preferredOutputLocation, which takes
// GPU locations only). --prealloc hands ONNX Runtime an output tensor of the right shape for
// every output each step (logits and every present.*), so that it writes into JavaScript's
// buffers instead of copying its own results into new ones. Inputs are never copied: a
// typed array is wrapped as it is.

import { createRequire } from 'node:module';
import fs from 'node:fs';
import path from 'node:path';

const require = createRequire(path.join(path.dirname(new URL(import.meta.url).pathname), '.ort', 'x.js'));
const ort = require('onnxruntime-node');

const mb = (bytes) => +(bytes / 1048576).toFixed(1);
// VmHWM: after exec, ru_maxrss may still remember the parent's footprint.
const peakRssMb = () => {
  try {
    const m = /VmHWM:\s+(\d+) kB/.exec(fs.readFileSync('/proc/self/status', 'latin1'));
    if (m) return mb(+m[1] * 1024);
  } catch { /* no /proc */ }
  return mb(process.resourceUsage().maxRSS * 1024);
};
const nowMs = () => Number(process.hrtime.bigint()) / 1e6;
const median = (a) => {
  const s = [...a].sort((x, y) => x - y);
  return s.length ? (s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2) : 0;
};

function parseArgs(argv) {
  const o = { model: null, prompt: null, maxNew: 16, threads: 1, noSpin: false, prealloc: false };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--prompt-ids') o.prompt = argv[++i].split(',').map((s) => {
      if (!/^\s*-?\d+\s*$/.test(s)) throw new Error(`--prompt-ids takes integers separated by commas, not '${s}'`);
      return BigInt(s.trim());
    });
    else if (a === '--max-new') o.maxNew = +argv[++i];
    else if (a === '--threads') o.threads = +argv[++i];
    else if (a === '--no-spin') o.noSpin = true;
    else if (a === '--prealloc') o.prealloc = true;
    else if (!a.startsWith('-') && !o.model) o.model = a;
    else throw new Error(`unknown argument '${a}'`);
  }
  if (!o.model || !o.prompt || !o.prompt.length || !(o.maxNew >= 1))
    throw new Error('usage: node ort_generate.mjs MODEL.onnx --prompt-ids 1,2,3 --max-new N [--threads T] [--no-spin] [--prealloc]');
  return o;
}

// An integer row [1, n] of the input's declared type (int64, or int32).
function intRow(meta, values) {
  const n = values.length;
  if (meta && meta.type === 'int32') return new ort.Tensor('int32', Int32Array.from(values, Number), [1, n]);
  return new ort.Tensor('int64', BigInt64Array.from(values, BigInt), [1, n]);
}

const TYPED = { float32: Float32Array, float16: Uint16Array, float64: Float64Array };

// The first maximum of the last position's logits.
function argmaxLast(t) {
  const vocab = t.dims[t.dims.length - 1];
  const d = t.data, start = d.length - vocab;
  let best = 0, bestV = -Infinity;
  if (t.type === 'float16') throw new Error('float16 logits are not supported here');
  for (let k = 0; k < vocab; k++) if (d[start + k] > bestV || k === 0) { bestV = d[start + k]; best = k; }
  return best;
}

async function main() {
  const o = parseArgs(process.argv.slice(2));
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
  const has = (n) => session.inputNames.includes(n);
  // past_key_values.X <- present.X (Optimum's names); past.X <- present.X.
  const pastNames = session.inputNames.filter((n) => n.startsWith('past'));
  const presentOf = {};
  for (const n of pastNames) {
    const rest = n.startsWith('past_key_values') ? n.slice('past_key_values'.length) : n.slice('past'.length);
    const out = 'present' + rest;
    if (!session.outputNames.includes(out)) throw new Error(`no output ${out} for the cache input ${n}`);
    presentOf[n] = out;
  }
  if (!pastNames.length) throw new Error('the model takes no past_key_values.* inputs');
  for (const n of session.inputNames)
    if (!presentOf[n] && !['input_ids', 'attention_mask', 'position_ids', 'use_cache_branch'].includes(n))
      throw new Error(`input '${n}' is not one a merged decoder takes`);
  if (!session.outputNames.includes('logits')) throw new Error('the model has no output logits');

  // The empty cache: declared dims, batch 1, 0 along the past axis (the dim named like a
  // past length, else the second last).
  const past = {}, pastAxis = {};
  for (const n of pastNames) {
    const m = meta[n];
    if (!m || !m.shape) throw new Error(`no shape for ${n} (onnxruntime-node too old for inputMetadata)`);
    let axis = m.shape.length - 2;
    m.shape.forEach((d, k) => { if (typeof d === 'string' && d.includes('past')) axis = k; });
    pastAxis[n] = axis;
    const dims = m.shape.map((d, k) => (k === axis ? 0 : typeof d === 'number' && d >= 0 ? d : 1));
    const T = TYPED[m.type];
    if (!T) throw new Error(`cache input ${n} of type ${m.type}`);
    past[n] = new ort.Tensor(m.type, new T(0), dims);
  }
  const vocabDims = (() => {
    const om = (session.outputMetadata || [])[session.outputNames.indexOf('logits')];
    const v = om && om.shape ? om.shape[om.shape.length - 1] : null;
    return typeof v === 'number' && v > 0 ? v : null;
  })();
  if (o.prealloc && !vocabDims) throw new Error('--prealloc: the logits have no declared vocabulary size');

  const step = async (tokens, pastLen) => {
    const n = tokens.length, feeds = {};
    feeds.input_ids = intRow(meta.input_ids, tokens);
    if (has('attention_mask')) feeds.attention_mask = intRow(meta.attention_mask, new Array(pastLen + n).fill(1));
    if (has('position_ids')) feeds.position_ids = intRow(meta.position_ids, Array.from({ length: n }, (_, k) => pastLen + k));
    if (has('use_cache_branch')) feeds.use_cache_branch = new ort.Tensor('bool', [pastLen > 0], [1]);
    for (const p of pastNames) feeds[p] = past[p];
    let fetches;
    if (o.prealloc) {
      fetches = { logits: new ort.Tensor('float32', new Float32Array(n * vocabDims), [1, n, vocabDims]) };
      for (const p of pastNames) {
        const dims = [...past[p].dims];
        dims[pastAxis[p]] += n;
        const T = TYPED[past[p].type];
        fetches[presentOf[p]] = new ort.Tensor(past[p].type, new T(dims.reduce((a, b) => a * b, 1)), dims);
      }
      for (const out of session.outputNames) if (!(out in fetches)) fetches[out] = null;
    }
    const res = fetches ? await session.run(feeds, fetches) : await session.run(feeds);
    for (const p of pastNames) past[p] = res[presentOf[p]];
    return argmaxLast(res.logits);
  };

  const tokens = [];
  t0 = nowMs();
  tokens.push(await step(o.prompt, 0));
  const prefillMs = nowMs() - t0;
  const decode = [];
  for (let k = 1; k < o.maxNew; k++) {
    const a = nowMs();
    tokens.push(await step([BigInt(tokens[k - 1])], o.prompt.length + k - 1));
    decode.push(nowMs() - a);
  }
  const total = decode.reduce((a, b) => a + b, 0);
  process.stdout.write(JSON.stringify({
    session_ms: +sessionMs.toFixed(3), prefill_ms: +prefillMs.toFixed(3),
    decode_ms: decode.map((t) => +t.toFixed(4)), decode_ms_median: +median(decode).toFixed(4),
    tokens_per_s: decode.length ? +(decode.length / (total / 1e3)).toFixed(3) : 0,
    tokens, peak_rss_mb: peakRssMb(), rss_before_mb: rssBefore, prealloc: o.prealloc,
  }) + '\n');
  await session.release();
}

main().catch((e) => { process.stderr.write(`ort_generate: ${e && e.stack ? e.stack : e}\n`); process.exit(1); });
