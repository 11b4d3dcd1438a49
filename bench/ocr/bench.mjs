// make bench-ocr: OCR of the 1280 x 960 page tests/ocr_images.py renders (24 lines, Latin
// and Chinese, four fonts), ours (bench/ocr_bench.c: tm_ocr_create once, tm_ocr_run per
// round) against @gutenye/ocr-node (Ocr.create once, detect per round), both in the same
// run on the same model files, alternating which goes first, after one warm-up run each.
// Prints and (with --write) puts into bench/OCR_RESULTS.md the medians of wall time and of
// process CPU time, and their ratios. Not a test: nothing here asserts a timing.
//
// usage: node bench/ocr/bench.mjs [--ours build/ocr_bench] [--tm build/transmuter] [--rounds 7]
//        [--threads N] [--write]
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import {
  MODELS_DIR, cer, loadReference, machine, median, referenceVersions, renderImages, runOurs, writeSection,
} from './common.mjs';

const args = process.argv.slice(2);
const opt = (name, dflt) => (args.includes(name) ? args[args.indexOf(name) + 1] : dflt);
const oursBin = opt('--ours', 'build/ocr_bench');
const tm = opt('--tm', 'build/transmuter');
const rounds = Number(opt('--rounds', 7));
const threads = opt('--threads', null);

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ocr-bench-'));
const [page] = renderImages(dir, ['--bench-page', '--only', 'bench-page']);
const loadBefore = machine();

// ours: a process that answers each "run" line with one JSON line
const child = spawn(oursBin, [MODELS_DIR, page.file, ...(threads ? ['--threads', threads] : [])],
  { stdio: ['pipe', 'pipe', 'inherit'] });
const replies = readline.createInterface({ input: child.stdout })[Symbol.asyncIterator]();
const reply = async () => JSON.parse((await replies.next()).value);
const oursLoad = (await reply()).load_ms;
async function ours() {
  child.stdin.write('run\n');
  return reply();
}

const { Ocr } = await loadReference();
const t0 = performance.now();
const ocr = await Ocr.create(threads ? { onnxOptions: { intraOpNumThreads: Number(threads) } } : {});
const theirsLoad = performance.now() - t0;
let theirsLines = [];
async function theirs() {
  const w0 = performance.now(), c0 = process.cpuUsage();
  theirsLines = await ocr.detect(page.file);
  const c = process.cpuUsage(c0);
  return { ms: performance.now() - w0, cpu_ms: (c.user + c.system) / 1000, lines: theirsLines.length };
}

await ours();
await theirs();
const o = [], t = [];
for (let r = 0; r < rounds; r++) {
  if (r % 2 === 0) {
    o.push(await ours());
    t.push(await theirs());
  } else {
    t.push(await theirs());
    o.push(await ours());
  }
  process.stderr.write(`round ${r + 1}/${rounds}: ours ${o.at(-1).ms.toFixed(0)} ms, theirs ${t.at(-1).ms.toFixed(0)} ms\n`);
}
child.stdin.end();
const loadAfter = machine();

const ourText = runOurs(tm, [page.file])[0].map((l) => l.text);
const e = (lines) => cer(page.lines, lines);
const pct = (x) => `${((100 * x.edits) / x.length).toFixed(2)}%`;
const med = (xs, k) => median(xs.map((x) => x[k]));
const ow = med(o, 'ms'), tw = med(t, 'ms'), oc = med(o, 'cpu_ms'), tc = med(t, 'cpu_ms');
const title = threads ? `## Speed on ${threads} thread${threads === '1' ? '' : 's'} (\`make bench-ocr OCRBENCH_ARGS="--threads ${threads}"\`)`
  : '## Speed (`make bench-ocr`)';
const body = `${title}

OCR of the rendered 1280 x 960 page (${page.lines.length} lines, Latin and Chinese), one
process each, same model files, ${rounds} rounds alternating which goes first, after a
warm-up run each; medians. Threads: ${threads ?? 'each runtime\'s default (all cores)'}.
CPU time is the process's (all threads); on a machine shared with other work it is the
steadier measure of the work done, wall time the one a user waits for.

| | ours | @gutenye/ocr-node | ours / theirs |
|---|---|---|---|
| wall time, ms | ${ow.toFixed(0)} | ${tw.toFixed(0)} | ${(ow / tw).toFixed(2)}x |
| CPU time, ms | ${oc.toFixed(0)} | ${tc.toFixed(0)} | ${(oc / tc).toFixed(2)}x |
| load (create), ms | ${oursLoad.toFixed(0)} | ${theirsLoad.toFixed(0)} | |
| lines read, CER | ${o.at(-1).lines}, ${pct(e(ourText))} | ${theirsLines.length}, ${pct(e(theirsLines.map((l) => l.text)))} | |

Machine: ${loadBefore.replace(/; load.*/, '')}; load average before ${loadBefore.replace(/.*load average /, '')},
after ${loadAfter.replace(/.*load average /, '')}. Reference: ${JSON.stringify(referenceVersions())}.
Every round, wall ms (ours / theirs): ${o.map((x, i) => `${x.ms.toFixed(0)}/${t[i].ms.toFixed(0)}`).join(', ')}.
`;
console.log(body);
if (args.includes('--write')) console.log('written to', writeSection(threads ? `speed-${threads}` : 'speed', body));
fs.rmSync(dir, { recursive: true, force: true });
