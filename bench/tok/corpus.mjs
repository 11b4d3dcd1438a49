// corpus.mjs — builds the benchmark corpus of `make bench-tokenizers` deterministically
// (about 20 MB of UTF-8 by default): documents of many scripts and lengths, made of
//   * prose: sentences drawn from the words of the conformance texts of
//     tests/data/tokenizers (English, accented Latin, many scripts, CJK, code, URLs,
//     numbers, emoji), by category, so word frequencies stay natural; short (a line) to
//     long (several paragraphs);
//   * the conformance texts themselves;
//   * the harsh random texts of texts.mjs (mixed scripts, whitespace runs, added tokens).
// Writes a file of records: 4-byte little-endian length, then that many bytes of UTF-8.
// The generator is stored, not the corpus. Usage: node corpus.mjs OUT [MB]
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { DATA } from './common.mjs';
import { rng, text } from './texts.mjs';

export function conformanceTexts() {
  const raw = execFileSync('xz', ['-dc', path.join(DATA, 'qwen3/cases.jsonl.xz')], { maxBuffer: 1 << 28 }).toString('utf8');
  const seen = new Set();
  const out = [];
  for (const line of raw.split('\n')) {
    if (!line) continue;
    const c = JSON.parse(line);
    if (seen.has(c.id)) continue;
    seen.add(c.id);
    out.push({ cat: c.id.replace(/-\d+$/, ''), text: c.text });
    if (c.pair) out.push({ cat: c.id.replace(/-\d+$/, ''), text: c.pair });
  }
  return out;
}

// Words per category; CJK and Thai-like texts without spaces are cut into 1-4 character runs.
function wordPools(texts) {
  const pools = {};
  for (const { cat, text: t } of texts) {
    if (!t || cat === 'ctrl' || cat === 'empty' || cat === 'long' || cat === 'special') continue;
    const p = (pools[cat] ??= []);
    for (const w of t.split(/\s+/u)) {
      if (!w) continue;
      const cps = [...w];
      if (cps.length > 12 && /[\u3040-\u9fff\uac00-\ud7af\u0e00-\u0e7f]/u.test(w)) {
        for (let i = 0; i < cps.length;) {
          const n = 1 + ((i * 7 + cps.length) % 4);
          p.push(cps.slice(i, i + n).join(''));
          i += n;
        }
      } else {
        p.push(w);
      }
    }
  }
  return pools;
}

const PROSE_CATS = [['ascii', 30], ['para', 10], ['accent', 8], ['script', 14], ['cjk', 10], ['code', 8],
  ['url', 3], ['num', 4], ['emoji', 3], ['punct', 3], ['misc', 4], ['longword', 1], ['combining', 1],
  ['accent_nfd', 1]];

function weighted(r, list) {
  const total = list.reduce((a, [, w]) => a + w, 0);
  let x = r.next() * total;
  for (const [k, w] of list) if ((x -= w) < 0) return k;
  return list[list.length - 1][0];
}

function prose(r, pools, targetChars) {
  const cat = weighted(r, PROSE_CATS.filter(([c]) => pools[c]?.length));
  const pool = pools[cat];
  const cjk = cat === 'cjk';
  let s = '';
  while (s.length < targetChars) {
    const n = 4 + r.int(22);
    const words = [];
    for (let i = 0; i < n; i++) words.push(r.pick(pool));
    s += words.join(cjk && r.chance(0.7) ? '' : ' ') + (cjk ? '。' : r.pick(['.', '.', '.', '?', '!', ';', ':']));
    s += r.chance(0.15) ? '\n\n' : r.chance(0.05) ? '\n' : ' ';
  }
  return s.trimEnd();
}

export function buildCorpus(mb, seed = 20) {
  const texts = conformanceTexts();
  const pools = wordPools(texts);
  const specials = ['<s>', '</s>', '<|endoftext|>', '[CLS]', '[SEP]', '<mask>', '<unk>'];
  const r = rng(seed);
  const docs = [];
  let bytes = 0;
  const want = mb * 1e6;
  while (bytes < want) {
    const k = r.next();
    let d;
    if (k < 0.75) {
      // short (a line), medium (a paragraph) or long (an article)
      const len = r.chance(0.4) ? 20 + r.int(200) : r.chance(0.7) ? 300 + r.int(1500) : 3000 + r.int(12000);
      d = prose(r, pools, len);
    } else if (k < 0.87) {
      d = r.pick(texts).text;
    } else {
      d = text(r, specials, r.chance(0.5) ? 1 + r.int(150) : 200 + r.int(2000));
    }
    if (!d) continue;
    docs.push(d);
    bytes += Buffer.byteLength(d, 'utf8');
  }
  return docs;
}

export function writeCorpus(file, docs) {
  const parts = [];
  for (const d of docs) {
    const b = Buffer.from(d, 'utf8');
    const h = Buffer.alloc(4);
    h.writeUInt32LE(b.length);
    parts.push(h, b);
  }
  fs.writeFileSync(file, Buffer.concat(parts));
}

export function readCorpus(file) {
  const buf = fs.readFileSync(file);
  const docs = [];
  for (let o = 0; o < buf.length;) {
    const n = buf.readUInt32LE(o);
    docs.push(buf.toString('utf8', o + 4, o + 4 + n));
    o += 4 + n;
  }
  return docs;
}

if (process.argv[1] && path.resolve(process.argv[1]) === path.resolve(new URL(import.meta.url).pathname)) {
  const out = process.argv[2];
  const mb = Number(process.argv[3] ?? 20);
  const docs = buildCorpus(mb);
  writeCorpus(out, docs);
  const bytes = docs.reduce((a, d) => a + Buffer.byteLength(d, 'utf8'), 0);
  console.log(`${out}: ${docs.length} documents, ${(bytes / 1e6).toFixed(1)} MB`);
}
