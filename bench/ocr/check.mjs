// make ocr-check: our OCR against @gutenye/ocr-node (ONNX Runtime, sharp, OpenCV.js) on the
// images tests/ocr_images.py renders. Prints per image the character error rate (CER) of
// both against the text drawn, and the IoU of our boxes with theirs (their detector's
// boxes, before it merges boxes of one row into a line; words one side splits where the
// other does not are compared as the box around them), then the totals. Fails when our
// total CER is above theirs, a matched box's IoU is under 0.9 or a box has no partner. With --write,
// the table goes into bench/OCR_RESULTS.md. Not a test.
//
// usage: node bench/ocr/check.mjs --tm build/transmuter [--dir DIR] [--only NAME,...]
//        [--verbose] [--write]
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {
  cer, loadReference, machine, matchBoxes, median, referenceVersions, renderImages, runOurs, writeSection,
} from './common.mjs';

const args = process.argv.slice(2);
const opt = (name, dflt) => (args.includes(name) ? args[args.indexOf(name) + 1] : dflt);
const tm = opt('--tm', 'build/transmuter');
const dir = opt('--dir', null) ?? fs.mkdtempSync(path.join(os.tmpdir(), 'ocr-check-'));
const only = opt('--only', null);
const out = [];
const say = (line) => {
  console.log(line);
  out.push(line);
};

const cases = renderImages(dir, ['--bench-page', ...(only ? ['--only', only] : [])]);
const ours = runOurs(tm, cases.map((c) => c.file));
const { Ocr, Detection } = await loadReference();
const ocr = await Ocr.create();
const detection = await Detection.create({});

// The reference letterboxes an image to sides that are multiples of 32 (sharp's resize
// with fit contain, centred) and reports boxes in those pixels: back to the image's.
function unletterbox(box, w, h) {
  const W = Math.max(Math.ceil(w / 32) * 32, 32), H = Math.max(Math.ceil(h / 32) * 32, 32);
  if (W === w && H === h) return box;
  const s = Math.min(W / w, H / h), nw = Math.round(w * s), nh = Math.round(h * s);
  const ox = Math.floor((W - nw) / 2), oy = Math.floor((H - nh) / 2);
  return box.map(([x, y]) => [(x - ox) / s, (y - oy) / s]);
}

const pct = (e) => (e.length ? ((100 * e.edits) / e.length).toFixed(1) + '%' : '-');
let oursTotal = { edits: 0, length: 0 }, theirsTotal = { edits: 0, length: 0 };
const allIous = [];
let unmatched = 0;
say('image                 CER ours  CER theirs  boxes ours/theirs  IoU mean   min');
for (let i = 0; i < cases.length; i++) {
  const c = cases[i];
  const mine = ours[i];
  const theirs = await ocr.detect(c.file);
  const eo = cer(c.lines, mine.map((l) => l.text));
  const et = cer(c.lines, theirs.map((l) => l.text));
  oursTotal.edits += eo.edits, oursTotal.length += eo.length;
  theirsTotal.edits += et.edits, theirsTotal.length += et.length;
  const raw = (await detection.run(c.file)).map((li) => unletterbox(li.box, c.width, c.height));
  const m = matchBoxes(mine.map((l) => l.box), raw);
  allIous.push(...m.ious);
  unmatched += m.unmatchedOurs + m.unmatchedTheirs;
  const mean = m.ious.length ? m.ious.reduce((a, b) => a + b, 0) / m.ious.length : NaN;
  say(`${c.name.padEnd(20)} ${pct(eo).padStart(9)} ${pct(et).padStart(11)}  ${String(mine.length).padStart(8)}/${String(raw.length).padEnd(8)}` +
    `  ${mean.toFixed(3).padStart(8)} ${(m.ious.length ? Math.min(...m.ious) : NaN).toFixed(3).padStart(6)}`);
  if (args.includes('--verbose')) {
    console.log('   truth :', JSON.stringify(c.lines));
    console.log('   ours  :', JSON.stringify(mine.map((l) => l.text)));
    console.log('   theirs:', JSON.stringify(theirs.map((l) => l.text)));
  }
}
const cerOurs = oursTotal.edits / oursTotal.length, cerTheirs = theirsTotal.edits / theirsTotal.length;
const meanIou = allIous.reduce((a, b) => a + b, 0) / allIous.length;
say(`\nreference: ${JSON.stringify(referenceVersions())}`);
say(`total CER: ours ${(100 * cerOurs).toFixed(2)}% (${oursTotal.edits}/${oursTotal.length}), ` +
  `theirs ${(100 * cerTheirs).toFixed(2)}% (${theirsTotal.edits}/${theirsTotal.length})`);
say(`box IoU over ${allIous.length} matched boxes: mean ${meanIou.toFixed(3)}, median ` +
  `${median(allIous).toFixed(3)}, min ${Math.min(...allIous).toFixed(3)}; ${unmatched} boxes without a partner`);
const ok = cerOurs <= cerTheirs && Math.min(...allIous) >= 0.9 && unmatched === 0;
say(ok ? 'ok: our CER is at most theirs, every matched box at IoU 0.9 or more, none unmatched'
  : 'FAIL: our CER above theirs, a matched box under IoU 0.9, or a box without a partner');
if (args.includes('--write')) {
  const body = `## Accuracy (\`make ocr-check\`)

The images tests/ocr_images.py renders with ImageMagick (${cases.length}; the bench's page
among them), read by ours (\`transmuter ocr --json\`) and by @gutenye/ocr-node; character
error rate against the text drawn (lines joined by a space, runs of white space as one),
and the IoU of our boxes with their detector's. Machine: ${machine()}.

\`\`\`
${out.join('\n')}
\`\`\`
`;
  console.log('written to', writeSection('accuracy', body));
}
if (!opt('--dir', null)) fs.rmSync(dir, { recursive: true, force: true });
process.exit(ok ? 0 : 1);
