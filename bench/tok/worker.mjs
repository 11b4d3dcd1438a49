// worker.mjs — one measurement for bench.mjs, in a process of its own (so that the Rust
// binding's thread count, fixed by RAYON_NUM_THREADS at start-up, can differ per run):
//   node worker.mjs rust|js TOKENIZER_DIR CORPUS single|batch|load THREADS BATCH
// Prints one JSON line: seconds, MB/s, tokens (or load ms). Not a benchmark by itself.
import fs from 'node:fs';
import path from 'node:path';
import { requirePkg, importPkg, readJSON } from './common.mjs';
import { readCorpus } from './corpus.mjs';

const [engine, dir, corpusFile, mode, threadsArg, batchArg] = process.argv.slice(2);
const threads = Number(threadsArg ?? 1), batch = Number(batchArg ?? 32);

async function loadJS() {
  const tf = await importPkg('@huggingface/transformers');
  const tj = readJSON(path.join(dir, 'tokenizer.json'));
  const cfg = readJSON(path.join(dir, 'tokenizer_config.json'), {});
  const name = cfg.tokenizer_class?.replace(/Fast$/, '') ?? 'PreTrainedTokenizer';
  let cls = tf[name];
  if (typeof cls !== 'function' || !(cls.prototype instanceof tf.PreTrainedTokenizer || cls === tf.PreTrainedTokenizer))
    cls = tf.PreTrainedTokenizer;
  return new cls(tj, cfg);
}

function loadRust() {
  const { Tokenizer } = requirePkg('tokenizers');
  const t = Tokenizer.fromFile(path.join(dir, 'tokenizer.json'));
  t.disablePadding();
  t.disableTruncation();
  return t;
}

if (mode === 'load') {
  // the file read and the parse, as ours (tm_tokenizer_load reads the file too)
  const times = [];
  for (let i = 0; i < 5; i++) {
    const t0 = performance.now();
    if (engine === 'rust') loadRust();
    else await loadJS();
    times.push(performance.now() - t0);
  }
  times.sort((a, b) => a - b);
  console.log(JSON.stringify({ mode, ms: times[2] }));
  process.exit(0);
}

const tok = engine === 'rust' ? loadRust() : await loadJS();
const docs = readCorpus(corpusFile);
const bytes = docs.reduce((a, d) => a + Buffer.byteLength(d, 'utf8'), 0);
let tokens = 0;
const t0 = performance.now(), c0 = process.cpuUsage();
if (engine === 'rust' && mode === 'single') {
  // one text per call; THREADS calls in flight (the binding runs each on libuv's pool)
  let next = 0;
  const lane = async () => {
    while (next < docs.length) {
      const e = await tok.encode(docs[next++], null, { addSpecialTokens: true });
      tokens += e.getLength();
    }
  };
  await Promise.all(Array.from({ length: threads }, lane));
} else if (engine === 'rust') {
  for (let i = 0; i < docs.length; i += batch) {
    const encs = await tok.encodeBatch(docs.slice(i, i + batch), { addSpecialTokens: true });
    for (const e of encs) tokens += e.getLength();
  }
} else if (mode === 'single') {
  for (const d of docs) tokens += tok(d, { add_special_tokens: true, return_tensor: false }).input_ids.length;
} else {
  for (let i = 0; i < docs.length; i += batch) {
    const out = tok(docs.slice(i, i + batch), { add_special_tokens: true, return_tensor: false, padding: false });
    for (const ids of out.input_ids) tokens += ids.length;
  }
}
const seconds = (performance.now() - t0) / 1000;
const cu = process.cpuUsage(c0), cpu_seconds = (cu.user + cu.system) / 1e6;   // all threads
console.log(JSON.stringify({ mode, threads, texts: docs.length, bytes, tokens, seconds, mbps: bytes / 1e6 / seconds,
  cpu_seconds, cpu_mbps: bytes / 1e6 / cpu_seconds }));
