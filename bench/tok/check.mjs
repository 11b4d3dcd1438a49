// check.mjs — `make tokenizer-check`: our tokenizers against Hugging Face's Rust
// `tokenizers` binding (npm tokenizers@0.23.2) on 10,000 generated texts per tokenizer of
// tests/data/tokenizers (texts.mjs: many scripts, whitespace runs, emoji, combining marks,
// digits, the tokenizer's added tokens embedded; a pair in a quarter), each with
// add_special_tokens true and false, through `transmuter tokenize DIR --jsonl -`.
// Compares ids, tokens, attention masks, type ids (where our CLI gives them: BERT-like
// classes), offsets (characters) and both decodes. Prints per-tokenizer agreement and the
// mismatches (the first 20 in full). Exit status 1 when anything differs.
// Usage: node bench/tok/check.mjs [--tm build/transmuter] [--n 10000] [--only a,b] [--seed S]
//
// Rules where the two are not meant to be equal byte for byte (as tests/data/tokenizers'
// README and tests/test_tokenizer_cases.c):
//  * tokens: for an added token with lstrip/rstrip the Rust encoding reports the matched
//    text with the stripped whitespace ("<|user|>\n"), we report the token's content; such a
//    token agrees when the Rust string, whitespace trimmed, is ours.
//  * decode: the Rust library has no clean_up_tokenization_spaces step (Python and
//    transformers.js apply it in the tokenizer class); ours applies it as
//    tokenizer_config.json says (default true), so the Rust decode is compared after the
//    same clean-up (" ." -> "." ...).
//  * an empty pair is no pair (Python's `if text_pair:`), on both sides.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { ROOT, requirePkg, version, unpackAll, readJSON, seedOf } from './common.mjs';
import { cases, specialsOf } from './texts.mjs';

const args = process.argv.slice(2);
const opt = (k, d) => { const i = args.indexOf(k); return i >= 0 ? args[i + 1] : d; };
const TM = path.resolve(ROOT, opt('--tm', 'build/transmuter'));
const N = Number(opt('--n', 10000));
const ONLY = opt('--only', null)?.split(',');
const SEED = Number(opt('--seed', 34));
const DUMP = opt('--dump', null);   // writes the mismatching inputs there, one JSON line each
const dumped = [];
const BUILD = path.dirname(TM);
const { Tokenizer } = requirePkg('tokenizers');

const CLEANUP = [[' .', '.'], [' ?', '?'], [' !', '!'], [' ,', ','], [" ' ", "'"], [" n't", "n't"],
  [" 'm", "'m"], [" 's", "'s"], [" 've", "'ve"], [" 're", "'re"]];
const cleanup = (s) => CLEANUP.reduce((a, [f, t]) => a.split(f).join(t), s);
const js = JSON.stringify;

// Runs our CLI over the JSON lines; resolves to its output lines.
function ours(dir, lines) {
  return new Promise((resolve, reject) => {
    const p = spawn(TM, ['tokenize', dir, '--jsonl', '-'], { stdio: ['pipe', 'pipe', 'inherit'] });
    const chunks = [];
    p.stdout.on('data', (d) => chunks.push(d));
    p.on('error', reject);
    p.on('close', (code) => {
      const out = Buffer.concat(chunks).toString('utf8').split('\n');
      out.pop();
      if (out.length !== lines.length) reject(new Error(`${TM} exited ${code} after ${out.length} of ${lines.length} lines`));
      else resolve(out.map((l) => JSON.parse(l)));
    });
    p.stdin.end(lines.join('\n') + '\n');
  });
}

// The Rust binding's encodings and decodes of the same inputs, in batches.
async function rust(tok, inputs) {
  const res = [];
  for (let i = 0; i < inputs.length; i += 512) {
    const part = inputs.slice(i, i + 512);
    for (const add of [true, false]) {
      const sub = part.filter((c) => c.add_special_tokens === add);
      // encode (not encodeBatch: a batch cannot mix single texts and pairs)
      const encs = await Promise.all(sub.map((c) => tok.encode(c.text, c.pair ?? null, { addSpecialTokens: add })));
      const ids = encs.map((e) => e.getIds());
      const dec = await tok.decodeBatch(ids, false);
      const decs = await tok.decodeBatch(ids, true);
      sub.forEach((c, k) => {
        const e = encs[k];
        c.rust = { ids: ids[k], tokens: e.getTokens(), attention_mask: e.getAttentionMask(), token_type_ids: e.getTypeIds(),
          offsets: e.getOffsets(), decoded: dec[k], decoded_skip_special: decs[k] };
      });
    }
    for (const c of part) res.push(c.rust);
  }
  return res;
}

function stripAddedRule(addedStrip, ours_, rust_, ids) {
  if (ours_.length !== rust_.length) return false;
  for (let i = 0; i < ours_.length; i++) {
    if (ours_[i] === rust_[i]) continue;
    if (!addedStrip.has(ids[i]) || rust_[i].trim() !== ours_[i]) return false;
  }
  return true;
}

async function checkOne(t) {
  const tj = readJSON(t.json);
  const cfg = readJSON(path.join(t.dir, 'tokenizer_config.json'), {});
  const clean = cfg.clean_up_tokenization_spaces ?? true;
  const addedStrip = new Set((tj.added_tokens ?? []).filter((a) => a.lstrip || a.rstrip).map((a) => a.id));
  const rt = Tokenizer.fromFile(t.json);
  rt.disablePadding();
  rt.disableTruncation();
  const gen = cases(seedOf(t.name, SEED), specialsOf(tj), N);
  const inputs = [];
  for (const c of gen)
    for (const add of [true, false]) {
      const x = { text: c.text, add_special_tokens: add };
      if (c.pair) x.pair = c.pair;   // "" never reaches here: both sides read it as no pair
      inputs.push(x);
    }
  const t0 = Date.now();
  const [o, r] = await Promise.all([ours(t.dir, inputs.map((x) => js(x))), rust(rt, inputs)]);
  const fields = ['ids', 'tokens', 'attention_mask', 'token_type_ids', 'offsets', 'decoded', 'decoded_skip_special'];
  const agree = Object.fromEntries(fields.map((f) => [f, 0]));
  let all = 0, tokensByRule = 0;
  const bad = [];
  inputs.forEach((x, i) => {
    const a = o[i], b = r[i];
    const diff = [];
    if (a.error) diff.push('error');
    const same = {
      ids: js(a.ids) === js(b.ids),
      tokens: js(a.tokens) === js(b.tokens),
      attention_mask: js(a.attention_mask) === js(b.attention_mask),
      token_type_ids: !a.token_type_ids || js(a.token_type_ids) === js(b.token_type_ids),
      offsets: js(a.offsets) === js(b.offsets),
      decoded: a.decoded === (clean ? cleanup(b.decoded) : b.decoded),
      decoded_skip_special: a.decoded_skip_special === (clean ? cleanup(b.decoded_skip_special) : b.decoded_skip_special),
    };
    if (!same.tokens && a.tokens && stripAddedRule(addedStrip, a.tokens, b.tokens, b.ids)) {
      same.tokens = true;
      tokensByRule++;
    }
    for (const f of fields) if (same[f]) agree[f]++; else diff.push(f);
    if (!diff.length) all++;
    else bad.push({ i, diff, x, a, b });
  });
  return { name: t.name, n: inputs.length, all, agree, tokensByRule, bad, seconds: (Date.now() - t0) / 1000, clean };
}

// Where two arrays first differ, with a few entries around it.
function firstDiff(a, b) {
  if (!Array.isArray(a) || !Array.isArray(b)) return null;
  let i = 0;
  while (i < a.length && i < b.length && js(a[i]) === js(b[i])) i++;
  const from = Math.max(0, i - 3);
  return { i, ours: a.slice(from, i + 4), rust: b.slice(from, i + 4), from, na: a.length, nb: b.length };
}

function showMismatch(m, full) {
  const { x, a, b, diff } = m;
  const head = `  [${m.i}] differs in ${diff.join(', ')}: ${js(x)}`;
  if (!full) return head.length > 300 ? head.slice(0, 300) + '…' : head;
  const out = [head];
  for (const f of diff) {
    if (f === 'error') { out.push(`    ours: ${a.error}`); continue; }
    const d = firstDiff(a[f], b[f]);
    if (d) {
      out.push(`    ${f}: first differ at ${d.i} (lengths ours ${d.na}, rust ${d.nb}); from ${d.from}: ours ${js(d.ours)} rust ${js(d.rust)}`);
      if (f !== 'tokens') out.push(`    tokens from ${d.from}: ${js((a.tokens ?? []).slice(d.from, d.i + 4))}`);
    } else {
      out.push(`    ours.${f}: ${js(a[f])}`);
      out.push(`    rust.${f}: ${js(b[f])}`);
    }
  }
  return out.join('\n');
}

const toks = unpackAll(BUILD, 'tokcheck', ONLY);
console.log(`tokenizer-check: ${N} texts x add_special_tokens true/false per tokenizer, seed ${SEED}; ours ${path.relative(ROOT, TM)} vs tokenizers ${version('tokenizers')} (Rust)`);
let total = 0, agreeing = 0;
const summary = [];
for (const t of toks) {
  const res = await checkOne(t);
  total += res.n;
  agreeing += res.all;
  const pct = (k) => ((100 * k) / res.n).toFixed(k === res.n ? 0 : 3);
  summary.push(`${res.name.padEnd(18)} ${String(res.all).padStart(6)}/${res.n} agree (${pct(res.all)}%)  ` +
    Object.entries(res.agree).filter(([, v]) => v !== res.n).map(([k, v]) => `${k} ${v}`).join(' ') +
    (res.tokensByRule ? `  [${res.tokensByRule} by the lstrip/rstrip token rule]` : ''));
  console.log(summary[summary.length - 1] + `  (${res.seconds.toFixed(1)} s)`);
  res.bad.slice(0, 20).forEach((m) => console.log(showMismatch(m, true)));
  res.bad.slice(20).forEach((m) => console.log(showMismatch(m, false)));
  for (const m of res.bad) dumped.push(js({ tokenizer: res.name, ...m.x }));
}
if (DUMP) fs.writeFileSync(DUMP, dumped.map((l) => l + '\n').join(''));
console.log(`\n${agreeing} of ${total} encodings agree in every field (${((100 * agreeing) / total).toFixed(3)}%)`);
console.log(`${agreeing} passed, ${total - agreeing} failed`);
process.exit(agreeing === total ? 0 : 1);
