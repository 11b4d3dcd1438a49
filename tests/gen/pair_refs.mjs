// Reference text-classification outputs on sentence pairs: transformers.js 4.3.2's
// text-classification pipeline on the shipped tests/data/pipelines repositories, its
// tokenizer called with text_pair. (The 4.3.2 pipeline passes {text, text_pair} objects to
// its tokenizer as they are and gets wrong ids, so this wraps the pipeline's tokenizer:
// the objects become the tokenizer's text and text_pair arrays; the pipeline's own
// padding, truncation, model run, softmax/sigmoid, top_k and labels are unchanged.)
// function_to_apply "none" (Python transformers' option; not in transformers.js) is
// written from the same run's logits, sorted as the pipeline sorts scores.
// Writes tests/data/pipelines/<repo>.pairs.jsonl in the cases format, read by
// tests/pipelines.sh.
//
// Usage: TJS_DIR=bench/.tjs node tests/gen/pair_refs.mjs
import fs from 'fs';
import path from 'path';
import { createRequire } from 'module';
import { fileURLToPath } from 'url';

const here = path.dirname(fileURLToPath(import.meta.url));
const data = path.join(here, '..', 'data', 'pipelines');
const tjs = process.env.TJS_DIR || 'bench/.tjs';
const req = createRequire(path.resolve(tjs, 'package.json'));
const { pipeline, env } = await import(req.resolve('@huggingface/transformers'));
env.allowRemoteModels = false;
env.localModelPath = data;

const premise = 'A man is playing a guitar on a small stage while people listen.';
const long = Array.from({ length: 140 }, (_, i) => ['the', 'music', 'was', 'loud', 'and', 'bright'][i % 6]).join(' ');
const cases = [
  [{ text: 'A man eats.', text_pair: 'Someone is eating.' }, null],
  [{ text: 'A man eats.', text_pair: 'Someone is eating.' }, { top_k: null }],
  [[{ text: premise, text_pair: 'A person plays music.' },
    { text: premise, text_pair: 'Nobody is on the stage.' },
    { text: 'Short.', text_pair: 'Also short, but the second text is longer.' }], { top_k: null }],
  // pairs and single texts mixed in one batch, a pair cut at 512 tokens. (No empty
  // text_pair: transformers.js's tokenizer takes '' as no pair; ours, as the Rust library
  // and Python transformers, encodes it as an empty second sequence.)
  [[{ text: 'The cat sat.', text_pair: 'A cat is sitting.' }, 'A plain text alone.',
    { text: 'Null pair:', text_pair: null }, { text: premise }], { top_k: 2 }],
  [[{ text: long, text_pair: long }, { text: 'x', text_pair: 'y' }], { top_k: null }],
  [{ text: 'Café naïve résumé', text_pair: 'Zürich 東京' }, { top_k: 3 }],
];

function wrapTokenizer(pipe) {
  const tok = pipe.tokenizer;
  pipe.tokenizer = (texts, options) => {
    const one = (x) => (typeof x === 'string' ? [x, null] : [x.text, x.text_pair ?? null]);
    if (!Array.isArray(texts)) {
      const [t, p] = one(texts);
      return tok(t, { ...options, text_pair: p });
    }
    const tp = texts.map(one);
    return tok(tp.map((x) => x[0]), { ...options, text_pair: tp.map((x) => x[1]) });
  };
  // the logits of the last run, for function_to_apply "none"
  const model = pipe.model;
  const run = model._call.bind(model);
  model._call = async (inputs) => (pipe.lastOutputs = await run(inputs));
}

function rawOutput(pipe, inputs, topK) {
  const { id2label } = pipe.model.config;
  const logits = pipe.lastOutputs.logits;
  const [B, L] = logits.dims;
  const rows = [];
  for (let b = 0; b < B; b++) {
    const v = Array.from(logits.data.slice(b * L, (b + 1) * L));
    const order = v.map((x, i) => i).sort((i, j) => v[j] - v[i] || i - j);
    const k = topK === null ? L : Math.min(topK, L);
    rows.push(order.slice(0, k).map((i) => ({ label: id2label ? id2label[i] : `LABEL_${i}`, score: v[i] })));
  }
  if (topK === 1) return rows.flat();
  return Array.isArray(inputs) ? rows : rows[0];
}

for (const repo of ['bert-nli', 'bert-sentiment', 'bert-multilabel']) {
  const pipe = await pipeline('text-classification', repo, { dtype: 'fp32' });
  wrapTokenizer(pipe);
  const lines = [];
  const line = (options, inputs, output) =>
    lines.push(JSON.stringify({ task: 'text-classification', repo, load: { dtype: 'fp32' }, options, inputs: [inputs], output }));
  for (const [inputs, options] of cases) {
    const output = await pipe(inputs, options ?? undefined);
    line(options, inputs, output);
    const topK = options && 'top_k' in options ? options.top_k : 1;
    line({ ...(options ?? {}), function_to_apply: 'none' }, inputs, rawOutput(pipe, inputs, topK));
  }
  if (repo === 'bert-nli') {
    // sigmoid: the pipeline's multi-label branch on the same model
    pipe.model.config.problem_type = 'multi_label_classification';
    for (const [inputs, options] of cases.slice(1, 3))
      line({ ...(options ?? {}), function_to_apply: 'sigmoid' }, inputs, await pipe(inputs, options ?? undefined));
  }
  fs.writeFileSync(path.join(data, `${repo}.pairs.jsonl`), lines.join('\n') + '\n');
  console.log(`${repo}: wrote ${lines.length} cases`);
}
