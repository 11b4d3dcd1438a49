#!/usr/bin/env node
// transformers.js's side of bench/run.py's `pipeline` cases: one pipeline() on a local
// Hub-style repository, then the same calls ours makes, timed.
//
// Usage:
//   node tjs_pipeline.mjs feature-extraction REPO_DIR --texts FILE.json [--batch 32]
//        [--threads T] [--dtype fp32] [--options JSON]
//   node tjs_pipeline.mjs text-generation REPO_DIR --chat FILE.json [--max-new 128]
//        [--threads T] [--dtype fp32] [--model-file-name decoder_model_merged]
// FILE.json: an array of strings (feature-extraction: called in batches of --batch), or
// an array of chat messages (text-generation: one call, greedy, exactly --max-new new
// tokens: min_new_tokens = max_new_tokens, so that an end token does not stop it early).
// Prints one JSON line: load_ms (pipeline()), total_ms (the calls), calls, and
// feature-extraction: checksum (the sum of every embedding value) and dims;
// text-generation: new_tokens, tokens_per_s, text (the generated continuation).
// Threads: onnxruntime-node's intra-op threads (inter-op 1, sequential), as
// bench/ort_bench.mjs makes its sessions.
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';

const here = path.dirname(new URL(import.meta.url).pathname);
const require = createRequire(path.join(here, '.tjs', 'x.js'));
const { pipeline, env } = require('@huggingface/transformers');

const [task, repoDir, ...rest] = process.argv.slice(2);
if (!task || !repoDir) {
  console.error('usage: node tjs_pipeline.mjs TASK REPO_DIR [options] (see the file\'s head)');
  process.exit(2);
}
const opt = (name, dflt) => {
  const i = rest.indexOf(name);
  return i >= 0 && i + 1 < rest.length ? rest[i + 1] : dflt;
};
const threads = +opt('--threads', '1');
const dtype = opt('--dtype', 'fp32');
const modelFileName = opt('--model-file-name', null);

const repo = path.resolve(repoDir);
env.allowRemoteModels = false;
env.allowLocalModels = true;
env.localModelPath = path.dirname(repo) + path.sep;
env.useFSCache = false;
env.useBrowserCache = false;

const t0 = performance.now();
const pipe = await pipeline(task, path.basename(repo), {
  dtype,
  ...(modelFileName ? { model_file_name: modelFileName } : {}),
  session_options: { intraOpNumThreads: threads, interOpNumThreads: 1, executionMode: 'sequential' },
});
const loadMs = performance.now() - t0;

if (task === 'feature-extraction') {
  const texts = JSON.parse(fs.readFileSync(opt('--texts'), 'utf8'));
  const batch = +opt('--batch', '32');
  const options = JSON.parse(opt('--options', '{"pooling":"mean","normalize":true}'));
  let checksum = 0, calls = 0, dims = null;
  const t1 = performance.now();
  for (let i = 0; i < texts.length; i += batch) {
    const out = await pipe(texts.slice(i, i + batch), options);
    calls++;
    dims = dims ? [dims[0] + out.dims[0], ...out.dims.slice(1)] : out.dims;
    for (const v of out.data) checksum += v;
  }
  const totalMs = performance.now() - t1;
  console.log(JSON.stringify({ load_ms: loadMs, total_ms: totalMs, calls, texts: texts.length, dims, checksum }));
} else if (task === 'text-generation') {
  const messages = JSON.parse(fs.readFileSync(opt('--chat'), 'utf8'));
  const maxNew = +opt('--max-new', '128');
  const t1 = performance.now();
  const out = await pipe(messages, { max_new_tokens: maxNew, min_new_tokens: maxNew, do_sample: false });
  const totalMs = performance.now() - t1;
  const turns = out[0].generated_text;
  const text = Array.isArray(turns) ? turns[turns.length - 1].content : turns;
  console.log(JSON.stringify({ load_ms: loadMs, total_ms: totalMs, calls: 1, new_tokens: maxNew,
                               tokens_per_s: maxNew / (totalMs / 1000), text }));
} else {
  console.error(`tjs_pipeline.mjs: task ${task} is not one of the bench's`);
  process.exit(2);
}
