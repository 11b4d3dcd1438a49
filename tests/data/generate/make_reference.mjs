#!/usr/bin/env node
// make_reference.mjs: writes the reference token ids that tests/generate.sh checks
// `transmuter generate` against. It runs the same greedy loop with ONNX Runtime
// (onnxruntime-node 1.30, graph optimizations off): prefill with an empty cache, then one
// token at a time with present.* fed back as past_key_values.*.
// Run it again when the models or the prompt change. `make test` does not run it, since the
// tests must pass without ONNX Runtime.
// Usage: node tests/data/generate/make_reference.mjs [ORT_DIR]   (default bench/.ort,
//        where bench/run.py installs onnxruntime-node)
import { createRequire } from 'node:module';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const ROOT = path.resolve(HERE, '..', '..', '..');
const ORT_DIR = path.resolve(process.argv[2] ?? path.join(ROOT, 'bench', '.ort'));
const ort = createRequire(path.join(ORT_DIR, 'package.json'))('onnxruntime-node');

const PROMPT = [999, 1, 998, 2];
const MAX_NEW = 16;
const MODELS = {
  gpt2: 'tests/data/tiny/gpt2/decoder_model_merged.onnx',
  gpt2_q4: 'tests/data/tiny/gpt2/decoder_model_merged_q4.onnx',
  llama: 'tests/data/tiny/llama/decoder_model_merged.onnx',
  llama_q4: 'tests/data/tiny/llama/decoder_model_merged_q4.onnx',
};

// An integer row [1, n] in the input's declared type.
function intRow(meta, values) {
  return meta.type === 'int32'
    ? new ort.Tensor('int32', Int32Array.from(values), [1, values.length])
    : new ort.Tensor('int64', BigInt64Array.from(values.map(BigInt)), [1, values.length]);
}

// An empty cache entry: declared dims, batch 1, length 0 along the past axis (the dim named
// like a past length, else the second last), as tools/generate.c makes it.
function emptyPast(meta) {
  let axis = meta.shape.length - 2;
  meta.shape.forEach((d, k) => { if (typeof d === 'string' && d.includes('past')) axis = k; });
  const dims = meta.shape.map((d, k) => {
    if (k === axis) return 0;
    if (typeof d === 'number' && d >= 0) return d;
    if (typeof d === 'string' && d.includes('batch')) return 1;
    throw new Error(`cannot tell dim ${d} of ${meta.name}`);
  });
  const Array_ = meta.type === 'float16' ? Uint16Array : Float32Array;
  return new ort.Tensor(meta.type, new Array_(0), dims);
}

// The first maximum of the last position's logits, and its gap to the runner-up.
function argmaxLast(t) {
  const vocab = t.dims[t.dims.length - 1], start = t.data.length - vocab;
  let best = 0, top = -Infinity, second = -Infinity;
  for (let k = 0; k < vocab; k++) {
    const v = t.data[start + k];
    if (v > top) { second = top; top = v; best = k; } else if (v > second) second = v;
  }
  return { id: best, gap: top - second };
}

async function generate(file) {
  const session = await ort.InferenceSession.create(path.join(ROOT, file), {
    executionProviders: ['cpu'], graphOptimizationLevel: 'disabled', intraOpNumThreads: 1,
    interOpNumThreads: 1, executionMode: 'sequential', logSeverityLevel: 3,
  });
  const meta = Object.fromEntries(session.inputMetadata.map((m) => [m.name, m]));
  const past = {};
  for (const name of session.inputNames)
    if (name.startsWith('past')) past[name] = emptyPast(meta[name]);
  const ids = [];
  let tokens = PROMPT, pastLen = 0, minGap = Infinity;
  while (ids.length < MAX_NEW) {
    const feeds = { ...past, input_ids: intRow(meta.input_ids, tokens) };
    if (meta.attention_mask) feeds.attention_mask = intRow(meta.attention_mask, Array(pastLen + tokens.length).fill(1));
    if (meta.position_ids) feeds.position_ids = intRow(meta.position_ids, tokens.map((_, k) => pastLen + k));
    if (meta.use_cache_branch) feeds.use_cache_branch = new ort.Tensor('bool', Uint8Array.from([pastLen > 0 ? 1 : 0]), [1]);
    const out = await session.run(feeds);
    const { id, gap } = argmaxLast(out.logits);
    ids.push(id);
    minGap = Math.min(minGap, gap);
    for (const name of Object.keys(past)) past[name] = out[name.replace(/^past_key_values|^past/, 'present')];
    pastLen += tokens.length;
    tokens = [id];
  }
  await session.release();
  return { ids, minGap };
}

for (const [name, file] of Object.entries(MODELS)) {
  const { ids, minGap } = await generate(file);
  const text = `# prompt ${PROMPT.join(',')} max-new ${MAX_NEW}: ${file}, greedy, ONNX Runtime ${ort.env.versions?.common ?? '1.30'} ` +
    `(optimizations off); smallest gap between the top two logits ${minGap.toPrecision(3)}\n${ids.join(',')}\n`;
  fs.writeFileSync(path.join(HERE, `${name}.ids`), text);
  process.stdout.write(`${name}: ${ids.join(',')} (smallest top-2 gap ${minGap.toPrecision(3)})\n`);
}
