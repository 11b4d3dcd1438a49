// Writes tests/data/lanczos/refs.txt, the references tests/test_image_lanczos.c compares
// tm__image_resize(..., TM__RESAMPLE_LANCZOS) with: transformers.js's RawImage.resize(w, h,
// {resample: 1}) in node (sharp's resize, kernel lanczos3, fit fill) on the media test
// images and on synthetic ones, one line per output: `name in_w in_h channels out_w out_h
// sha256` (sha256 of the raw interleaved uint8 pixels). Synthetic inputs are made by the
// formula synth() below, which the C test repeats. Also writes processor.txt: the sha256,
// shape, min and max of a ViTImageProcessor's pixel_values with resample 1 (the config in
// tests/data/lanczos/vit-lanczos/preprocessor_config.json) for a few media images.
// LANCZOS_DUMP=DIR also writes each output's pixels to DIR/<line number from 0>.raw.
// Usage: node tests/gen/lanczos_refs.mjs [node_modules folder]  (from the repository root;
// defaults to bench/.tjs/node_modules, used read-only)
import { createRequire } from 'node:module';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';

const modules = path.resolve(process.argv[2] ?? 'bench/.tjs/node_modules');
const require = createRequire(modules + '/');
const tjs = await import(path.join(modules, '@huggingface/transformers/dist/transformers.node.mjs'));
const { RawImage, AutoProcessor } = tjs;
const DATA = 'tests/data/lanczos';
const MEDIA = 'tests/data/pipelines/media';

// The synthetic image: smooth ramps plus a hash-like pattern, alpha from 0 to 255.
function synth(w, h, c) {
    const d = new Uint8ClampedArray(w * h * c);
    for (let y = 0; y < h; y++)
        for (let x = 0; x < w; x++)
            for (let z = 0; z < c; z++)
                d[(y * w + x) * c + z] = (x * 29 + y * 53 + z * 71 + ((x * y * 7 + z) % 13) * 17) % 256;
    return new RawImage(d, w, h, c);
}

const sha = (b) => crypto.createHash('sha256').update(Buffer.from(b.buffer, b.byteOffset, b.byteLength)).digest('hex');
const lines = [];
async function add(name, im, w, h) {
    const out = await im.resize(w, h, { resample: 1 });
    if (out.width !== w || out.height !== h || out.channels !== im.channels)
        throw new Error(`${name}: got ${out.width}x${out.height}x${out.channels}`);
    if (process.env.LANCZOS_DUMP) fs.writeFileSync(`${process.env.LANCZOS_DUMP}/${lines.length}.raw`, out.data);
    lines.push(`${name} ${im.width} ${im.height} ${im.channels} ${w} ${h} ${sha(out.data)}`);
}

// sizes relative to (w, h): down by small and large factors (libvips's box shrink starts at
// 4x with its gap of 2), up (by 5-6x for the small ones), one axis each way, and a square
function targets(w, h) {
    const t = [[Math.round(w / 2), Math.round(h / 2)], [Math.round(w * 0.7) + 1, Math.round(h * 0.45)],
        [Math.max(1, Math.round(w / 5.3)), Math.max(1, Math.round(h / 9.1))], [Math.round(w * 1.9) + 1, Math.round(h * 2.3)],
        [Math.round(w * 1.5), Math.round(h / 3)], [Math.round(w / 3) + 1, h * 3 - 1], [224, 224], [w, h + 1], [w + 7, h],
        [Math.max(1, Math.round(w / 17.3)), Math.max(1, Math.round(h / 41))], [w - 1, h - 1],
        [Math.round(w / 3.999), Math.round(h / 4.001)], [Math.max(1, Math.round(w / 8)), Math.max(1, Math.round(h / 2.5))]];
    if (w * h <= 50000) t.push([w * 6 + 5, h * 5 + 3]);
    return t.filter(([a, b]) => a >= 1 && b >= 1 && !(a === w && b === h));
}

for (const file of fs.readdirSync(MEDIA).filter((f) => /\.(png|jpg)$/.test(f)).sort()) {
    const im = await RawImage.read(`${MEDIA}/${file}`);
    for (const [w, h] of targets(im.width, im.height)) await add(file, im, w, h);
}
for (const [w, h, c] of [[5, 7, 1], [13, 9, 3], [31, 17, 4], [97, 61, 3], [40, 300, 4]]) {
    const im = synth(w, h, c);
    for (const [a, b] of [...targets(w, h), [1, 1], [2, 1], [w * 5, h * 4], [Math.max(1, w >> 3), h * 2]])
        await add(`synth`, im, a, b);
}
fs.mkdirSync(DATA, { recursive: true });
fs.writeFileSync(`${DATA}/refs.txt`, lines.join('\n') + '\n');

const proc = await AutoProcessor.from_pretrained(path.resolve(`${DATA}/vit-lanczos`), { local_files_only: true });
const plines = [];
for (const file of ['rgb_640x480.jpg', 'rgb_37x211.png', 'gray_128x96.png', 'rgba_200x150.png']) {
    const { pixel_values } = await proc(await RawImage.read(`${MEDIA}/${file}`));
    const d = pixel_values.data;
    let lo = Infinity, hi = -Infinity;
    for (const v of d) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
    plines.push(`${file} ${pixel_values.dims.join('x')} ${sha(d)} ${lo} ${hi}`);
}
fs.writeFileSync(`${DATA}/processor.txt`, plines.join('\n') + '\n');
console.log(`${lines.length} resizes, ${plines.length} processor outputs`);
