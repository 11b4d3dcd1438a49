// Reference feature-extraction outputs for batches larger than one run's group of texts
// (src/pipelines/feature_extraction.c runs a batch of more than 4 texts as groups of similar
// lengths): transformers.js 4.3.2's pipeline('feature-extraction') on the shipped
// tests/data/pipelines/minilm-embed, which runs every batch padded to its longest text.
// Writes tests/data/pipelines/minilm-embed.batches.jsonl in the format of the cases files
// (task, repo, load, options, inputs, output), read by tests/pipelines.sh.
//
// Usage: TJS_DIR=bench/.tjs node tests/gen/embed_batch_refs.mjs
//   (TJS_DIR: a folder where `npm install @huggingface/transformers@4.3.2` was run)
import fs from 'fs';
import path from 'path';
import { createRequire } from 'module';
import { fileURLToPath } from 'url';

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.join(here, '..', 'data', 'pipelines', 'minilm-embed');
const tjs = process.env.TJS_DIR || 'bench/.tjs';
const req = createRequire(path.resolve(tjs, 'package.json'));
const { pipeline, env } = await import(req.resolve('@huggingface/transformers'));
env.allowRemoteModels = false;
env.localModelPath = path.dirname(repo);

// Texts of many lengths (1 to about 90 tokens), unsorted, with duplicates and an empty one.
const words = ('the quick brown fox jumps over a lazy dog while seven wizards quietly hex ' +
               'every jovial bystander near the old harbour of Zürich café naïve résumé').split(' ');
let seed = 7;
const rand = () => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648;
const texts = [];
for (let i = 0; i < 21; i++) {
  const n = 1 + Math.floor(rand() * 70);
  texts.push(Array.from({ length: n }, () => words[Math.floor(rand() * words.length)]).join(' '));
}
texts.push('');
texts.push(texts[3]);

const extractor = await pipeline('feature-extraction', 'minilm-embed', { dtype: 'fp32' });
const cases = [
  [{ pooling: 'mean', normalize: true }, texts],
  [{ pooling: 'mean', normalize: false }, texts.slice(0, 9)],
  [{ pooling: 'cls', normalize: true }, texts.slice(2, 19)],
  [{ pooling: 'first_token', normalize: false }, texts.slice(0, 16)],
];
const out = [];
for (const [options, inputs] of cases) {
  const t = await extractor(inputs, options);
  out.push(JSON.stringify({
    task: 'feature-extraction', repo: 'minilm-embed', load: { dtype: 'fp32' }, options, inputs: [inputs],
    output: { _type: 'Tensor', type: t.type, dims: t.dims, data: Array.from(t.data) },
  }));
}
fs.writeFileSync(path.join(repo, '..', 'minilm-embed.batches.jsonl'), out.join('\n') + '\n');
console.log(`wrote ${out.length} cases`);
