// bench.mjs — `make bench-tokenizers`: encode throughput (MB/s of UTF-8 text) on the
// generated corpus (corpus.mjs, ~20 MB), per tokenizer of tests/data/tokenizers: ours
// (bench/tok_bench.c, linked with the library), Hugging Face's Rust `tokenizers` binding
// (encode / encodeBatch) and transformers.js, one text per call and in batches, on 1 and 2
// threads (transformers.js: 1), each measurement a fresh process, the engines alternating
// within each round, medians over the rounds; and the load time of each tokenizer.json.
// Writes bench/TOKENIZER_RESULTS.md. Not a test: nothing here asserts a timing.
// Usage: node bench/tok/bench.mjs [--ours build/tok_bench] [--mb 20] [--rounds 3]
//        [--only a,b] [--batch 32] [--no-js] [--out bench/TOKENIZER_RESULTS.md]
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { ROOT, unpackAll, version } from './common.mjs';
import { buildCorpus, writeCorpus } from './corpus.mjs';

const args = process.argv.slice(2);
const opt = (k, d) => { const i = args.indexOf(k); return i >= 0 ? args[i + 1] : d; };
const OURS = path.resolve(ROOT, opt('--ours', 'build/tok_bench'));
const MB = Number(opt('--mb', 20));
const ROUNDS = Number(opt('--rounds', 3));
const ONLY = opt('--only', null)?.split(',');
const BATCH = Number(opt('--batch', 32));
const NO_JS = args.includes('--no-js');
const OUT = path.resolve(ROOT, opt('--out', 'bench/TOKENIZER_RESULTS.md'));
const BUILD = path.dirname(OURS);
const WORKER = path.join(ROOT, 'bench/tok/worker.mjs');

const FAMILY = {
  'all-minilm-l6-v2': 'WordPiece (BERT uncased)',
  'gpt-3.5-turbo': 'byte-level BPE (cl100k, Split regex)',
  llama2: 'SentencePiece BPE, byte fallback',
  'marian-nmt': 'Unigram (Precompiled charsmap)',
  'phi-2': 'byte-level BPE (CodeGen)',
  'phi-3-vision': 'SentencePiece BPE, byte fallback, 48 added',
  qwen3: 'byte-level BPE (NFC, Qwen regex)',
  'roberta-base': 'byte-level BPE (GPT-2)',
  'whisper-tiny': 'byte-level BPE, 1,608 added tokens',
};

const median = (v) => { const s = [...v].sort((a, b) => a - b); return s.length ? s[(s.length - 1) >> 1] : NaN; };

function run(engine, dir, corpus, mode, threads) {
  const env = { ...process.env, RAYON_NUM_THREADS: String(threads), TOKENIZERS_PARALLELISM: 'true',
    UV_THREADPOOL_SIZE: String(Math.max(threads, 1)) };
  const out = engine === 'ours'
    ? execFileSync(OURS, [dir, corpus, '--mode', mode, '--threads', String(threads), '--batch', String(BATCH), '--repeat', mode === 'load' ? '5' : '1'], { env })
    : execFileSync(process.execPath, [WORKER, engine, dir, corpus, mode, String(threads), String(BATCH)], { env, maxBuffer: 1 << 26 });
  return JSON.parse(out.toString().trim().split('\n').pop());
}

const corpus = path.join(BUILD, 'tokbench', `corpus-${MB}mb.bin`);
fs.mkdirSync(path.dirname(corpus), { recursive: true });
if (!fs.existsSync(corpus)) writeCorpus(corpus, buildCorpus(MB));
const corpusBytes = fs.statSync(corpus).size;
const toks = unpackAll(BUILD, 'tokcheck', ONLY);
const CONFIGS = [['single', 1], ['single', 2], ['batch', 1], ['batch', 2]];
const results = {};
console.log(`bench-tokenizers: ${path.relative(ROOT, corpus)} (${(corpusBytes / 1e6).toFixed(1)} MB), ${ROUNDS} round(s), batch ${BATCH}`);
for (const t of toks) {
  const r = (results[t.name] = { load: {}, tp: {} });
  for (const e of ['ours', 'rust', ...(NO_JS ? [] : ['js'])]) r.load[e] = run(e, t.dir, corpus, 'load', 1).ms;
  for (let round = 0; round < ROUNDS; round++) {
    for (const [mode, threads] of CONFIGS) {
      let engines = ['ours', 'rust'];
      if (!NO_JS && threads === 1) engines.push('js');
      if (round % 2) engines = engines.reverse();   // alternate who goes first
      for (const e of engines) {
        const res = run(e, t.dir, corpus, mode, threads);
        const key = `${e} ${mode} ${threads}`;
        (r.tp[key] ??= []).push(res.mbps);
        (r.tokens ??= {})[key] = res.tokens;
      }
    }
  }
  const m = (k) => median(r.tp[k] ?? []);
  console.log(`${t.name.padEnd(18)} load ours ${r.load.ours.toFixed(0)} ms, rust ${r.load.rust.toFixed(0)} ms | single 1t: ours ${m('ours single 1').toFixed(2)} rust ${m('rust single 1').toFixed(2)} js ${m('js single 1').toFixed(2)} MB/s | x${(m('ours single 1') / m('rust single 1')).toFixed(2)}`);
  const toks_ = new Set(Object.values(r.tokens));
  if (toks_.size !== 1) console.log(`  note: token counts differ between engines: ${JSON.stringify(r.tokens)}`);
}

// ---- bench/TOKENIZER_RESULTS.md ----
const f = (x) => (Number.isFinite(x) ? x.toFixed(2) : '–');
const cpu = os.cpus()[0]?.model ?? 'unknown CPU';
const lines = [];
lines.push('# Tokenizer throughput: ours vs Hugging Face tokenizers (Rust) vs transformers.js', '');
lines.push(`Written by \`make bench-tokenizers\` (bench/tok/bench.mjs). Corpus: ${(corpusBytes / 1e6).toFixed(1)} MB of UTF-8 in ` +
  `generated documents (bench/tok/corpus.mjs: prose from the conformance texts' words in many scripts, ` +
  `the conformance texts, harsh random texts), encoded with add_special_tokens, no padding nor truncation. ` +
  `MB/s of input text, the median of ${ROUNDS} round(s), each measurement a fresh process, engines alternating. ` +
  `Machine: ${cpu}, ${os.cpus().length} logical CPUs (shared with other work while this ran). ` +
  `Versions: tokenizers ${version('tokenizers')} (Node binding; \`encode\` per text, \`encodeBatch\` per batch, ` +
  `threads by RAYON_NUM_THREADS / calls in flight), @huggingface/transformers ${version('@huggingface/transformers')} ` +
  `(one thread; \`tokenizer(text)\` and \`tokenizer(batch)\`). Batches of ${BATCH} texts.`, '');
lines.push('"single": one text per call (on 2 threads: two callers, each one text at a time). ' +
  '"batch": the batch API on 1 or 2 threads. "x Rust": ours / the Rust binding, same configuration.', '');
lines.push('| tokenizer | family | single 1t ours | Rust | t.js | x Rust | single 2t ours | Rust | x Rust | batch 1t ours | Rust | t.js | x Rust | batch 2t ours | Rust | x Rust |');
lines.push('|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|');
for (const t of toks) {
  const r = results[t.name];
  const m = (k) => median(r.tp[k] ?? []);
  const row = [t.name, FAMILY[t.name] ?? ''];
  for (const [mode, th] of CONFIGS) {
    row.push(f(m(`ours ${mode} ${th}`)), f(m(`rust ${mode} ${th}`)));
    if (th === 1) row.push(NO_JS ? '–' : f(m(`js ${mode} ${th}`)));
    row.push('**' + f(m(`ours ${mode} ${th}`) / m(`rust ${mode} ${th}`)) + '**');
  }
  lines.push('| ' + row.join(' | ') + ' |');
}
lines.push('', '## Load time of tokenizer.json (ms, median of 5 loads in one process)', '');
lines.push('| tokenizer | tokenizer.json | ours | Rust | transformers.js | ours / Rust |', '|---|---|---|---|---|---|');
for (const t of toks) {
  const r = results[t.name];
  lines.push(`| ${t.name} | ${(fs.statSync(t.json).size / 1e6).toFixed(1)} MB | ${r.load.ours.toFixed(1)} | ${r.load.rust.toFixed(1)} | ${r.load.js ? r.load.js.toFixed(1) : '–'} | ${(r.load.ours / r.load.rust).toFixed(2)} |`);
}
lines.push('');
fs.writeFileSync(OUT, lines.join('\n'));
console.log(`wrote ${path.relative(ROOT, OUT)}`);
