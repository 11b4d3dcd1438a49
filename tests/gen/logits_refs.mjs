// Reference outputs of the logits processors and warpers for tests/test_generator.c:
// fixed logit rows (seeded), each processed by one processor or a chain, saved with their
// inputs as tests/data/generation/logits_refs.json (-Infinity written as null).
//
// The processors are @huggingface/transformers 4.3.2's own classes (RepetitionPenalty,
// NoRepeatNGram, NoBadWords, MinLength, MinNewTokensLength, ForcedBOS, ForcedEOS,
// Temperature, SuppressTokens, SuppressTokensAtBegin, WhisperTimeStamp). Where transformers.js differs from Python transformers, Python is the
// reference and is ported here line by line (float32 arithmetic kept with Math.fround):
//   - TopKLogitsWarper and TopPLogitsWarper exist in transformers.js 4.3.2 but have no
//     _call (sampling there draws from its own top-k); MinPLogitsWarper and
//     TypicalLogitsWarper do not exist: the four are ports of Python's
//     (transformers/generation/logits_process.py).
//   - NoBadWordsLogitsProcessor: Python drops a bad word that is a single EOS id before
//     applying; transformers.js does not. The cases here avoid that difference except one,
//     'bad_words_eos', which follows Python.
//
// Usage: mkdir -p /tmp/tjs && cd /tmp/tjs && npm init -y &&
//        ONNXRUNTIME_NODE_INSTALL=skip npm install @huggingface/transformers@4.3.2
//        TJS_DIR=/tmp/tjs node tests/gen/logits_refs.mjs
import fs from 'fs';
import path from 'path';
import { createRequire } from 'module';
import { fileURLToPath, pathToFileURL } from 'url';

const here = path.dirname(fileURLToPath(import.meta.url));
const tjs = process.env.TJS_DIR || '/tmp/tjs';
const req = createRequire(path.join(tjs, 'package.json'));
const T = await import(pathToFileURL(req.resolve('@huggingface/transformers')).href);
const { Tensor } = T;

// A seeded row of logits: an LCG (Numerical Recipes), values in [-8, 8) rounded to float32,
// with a few ties.
function row(seed, vocab) {
    let x = seed >>> 0;
    const out = new Float32Array(vocab);
    for (let i = 0; i < vocab; i++) {
        x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
        out[i] = Math.fround((x / 4294967296) * 16 - 8);
    }
    out[vocab - 1] = out[3];        // a tie
    return out;
}

// transformers.js processors take input_ids as bigint[][] and a (1, vocab) logits Tensor.
function apply_js(proc, ids, logits) {
    const t = new Tensor('float32', Float32Array.from(logits), [1, logits.length]);
    const out = proc([ids.map(BigInt)], t);
    return Float32Array.from(out.data);
}

// ---- Python transformers' warpers, ported ----
const f32 = Math.fround;
function softmax32(s) {            // torch softmax in float32: exp(x - max) / sum
    let mx = -Infinity;
    for (const v of s) mx = Math.max(mx, v);
    let sum = 0;
    const e = s.map((v) => Math.exp(v - mx));
    for (const v of e) sum += v;
    return e.map((v) => f32(v / sum));
}
function argsort(s, descending) {  // stable
    const idx = [...s.keys()];
    idx.sort((a, b) => (descending ? s[b] - s[a] : s[a] - s[b]) || a - b);
    return idx;
}
function top_k(s, k, min_keep = 1) {
    k = Math.min(Math.max(k, min_keep), s.length);
    const kth = [...s].sort((a, b) => b - a)[k - 1];
    return s.map((v) => (v < kth ? -Infinity : v));
}
function top_p(s, p, min_keep = 1) {
    const order = argsort(s, false);
    const probs = softmax32(order.map((i) => s[i]));
    const out = Float32Array.from(s);
    let cum = 0;
    for (let r = 0; r < order.length; r++) {
        cum = f32(cum + probs[r]);
        const remove = cum <= f32(1 - p) && r < order.length - min_keep;
        if (remove) out[order[r]] = -Infinity;
    }
    return out;
}
function min_p(s, p, min_keep = 1) {
    const probs = softmax32(s);
    const top = Math.max(...probs);
    const scaled = f32(p * top);
    const order = argsort(s, true);
    const out = Float32Array.from(s);
    for (let r = min_keep; r < order.length; r++)
        if (probs[order[r]] < scaled) out[order[r]] = -Infinity;
    return out;
}
function typical(s, mass, min_keep = 1) {
    let mx = -Infinity;
    for (const v of s) mx = Math.max(mx, v);
    let sum = 0;
    for (const v of s) sum += Math.exp(v - mx);
    const lse = mx + Math.log(sum);
    const norm = s.map((v) => v - lse);
    let ent = 0;
    for (const l of norm) if (Number.isFinite(l)) ent -= l * Math.exp(l);
    const shifted = norm.map((l) => f32(Math.abs(-l - ent)));
    const order = argsort(shifted, false);
    const probs = softmax32(order.map((i) => s[i]));
    let cum = 0, last = 0;
    for (let r = 0; r < order.length; r++) {
        cum = f32(cum + probs[r]);
        if (cum < f32(mass)) last++;
    }
    last = Math.min(last, order.length - 1);
    const cut = shifted[order[last]];
    const out = Float32Array.from(s);
    for (let r = min_keep; r < order.length; r++)
        if (shifted[order[r]] > cut) out[order[r]] = -Infinity;
    return out;
}

// ---- The cases ----
const V = 32;
const ids = [5, 9, 5, 17, 3, 9, 21, 5, 9];         // "5 9" repeats: n-grams to ban
const steps = {
    repetition_penalty: (o, ids, s) => apply_js(new T.RepetitionPenaltyLogitsProcessor(o.penalty), ids, s),
    no_repeat_ngram: (o, ids, s) => apply_js(new T.NoRepeatNGramLogitsProcessor(o.size), ids, s),
    bad_words: (o, ids, s) => apply_js(new T.NoBadWordsLogitsProcessor(
        o.bad_words.filter((w) => !(w.length === 1 && o.eos.includes(w[0]))), o.eos), ids, s),
    min_length: (o, ids, s) => apply_js(new T.MinLengthLogitsProcessor(o.min_length, o.eos), ids, s),
    min_new_tokens: (o, ids, s) => apply_js(new T.MinNewTokensLengthLogitsProcessor(o.prompt_length, o.min_new_tokens, o.eos), ids, s),
    forced_bos: (o, ids, s) => apply_js(new T.ForcedBOSTokenLogitsProcessor(o.bos), ids, s),
    forced_eos: (o, ids, s) => apply_js(new T.ForcedEOSTokenLogitsProcessor(o.max_length, o.eos), ids, s),
    temperature: (o, ids, s) => apply_js(new T.TemperatureLogitsWarper(o.temperature), ids, s),
    suppress: (o, ids, s) => apply_js(new T.SuppressTokensLogitsProcessor(o.ids), ids, s),
    begin_suppress: (o, ids, s) => apply_js(new T.SuppressTokensAtBeginLogitsProcessor(o.ids, o.begin), ids, s),
    // init_tokens of length `begin`: the processor's first position
    whisper_timestamps: (o, ids, s) => apply_js(new T.WhisperTimeStampLogitsProcessor(
        { eos_token_id: o.eos, no_timestamps_token_id: o.no_timestamps, max_initial_timestamp_index: 1 },
        ids.slice(0, o.begin)), ids, s),
    top_k: (o, ids, s) => top_k(s, o.k),
    top_p: (o, ids, s) => top_p(s, o.p),
    min_p: (o, ids, s) => min_p(s, o.p),
    typical_p: (o, ids, s) => typical(s, o.p),
};
const cases = [
    ['repetition_penalty', ids, [{ op: 'repetition_penalty', penalty: 1.3 }]],
    ['repetition_reward', ids, [{ op: 'repetition_penalty', penalty: 0.7 }]],
    ['no_repeat_ngram_1', ids, [{ op: 'no_repeat_ngram', size: 1 }]],
    ['no_repeat_ngram_2', ids, [{ op: 'no_repeat_ngram', size: 2 }]],
    ['no_repeat_ngram_3', ids, [{ op: 'no_repeat_ngram', size: 3 }]],
    ['no_repeat_ngram_long', ids.slice(0, 2), [{ op: 'no_repeat_ngram', size: 4 }]],
    ['bad_words', ids, [{ op: 'bad_words', bad_words: [[7], [5, 9, 12], [9, 14], [1, 2, 3]], eos: [31] }]],
    ['bad_words_eos', ids, [{ op: 'bad_words', bad_words: [[31], [9, 2]], eos: [31] }]],
    ['min_length_below', ids, [{ op: 'min_length', min_length: 12, eos: [2, 30] }]],
    ['min_length_reached', ids, [{ op: 'min_length', min_length: 9, eos: [2, 30] }]],
    ['min_new_tokens', ids, [{ op: 'min_new_tokens', prompt_length: 5, min_new_tokens: 6, eos: [2] }]],
    ['forced_bos', [0], [{ op: 'forced_bos', bos: 4 }]],
    ['forced_bos_later', ids, [{ op: 'forced_bos', bos: 4 }]],
    ['forced_eos', ids, [{ op: 'forced_eos', max_length: 10, eos: [2, 30] }]],
    ['temperature', ids, [{ op: 'temperature', temperature: 0.7 }]],
    ['temperature_hot', ids, [{ op: 'temperature', temperature: 1.9 }]],
    ['top_k', ids, [{ op: 'top_k', k: 5 }]],
    ['top_k_tie', ids, [{ op: 'top_k', k: 31 }]],
    ['top_p', ids, [{ op: 'top_p', p: 0.8 }]],
    ['top_p_small', ids, [{ op: 'top_p', p: 0.05 }]],
    ['min_p', ids, [{ op: 'min_p', p: 0.1 }]],
    ['typical_p', ids, [{ op: 'typical_p', p: 0.6 }]],
    ['typical_p_small', ids, [{ op: 'typical_p', p: 0.1 }]],
    // transformers' order: processors, then warpers.
    ['chain_greedy', ids, [{ op: 'repetition_penalty', penalty: 1.2 }, { op: 'no_repeat_ngram', size: 2 },
        { op: 'bad_words', bad_words: [[9, 14]], eos: [2] }, { op: 'min_length', min_length: 12, eos: [2] }]],
    ['chain_sampling', ids, [{ op: 'repetition_penalty', penalty: 1.5 }, { op: 'temperature', temperature: 0.8 },
        { op: 'top_k', k: 10 }, { op: 'top_p', p: 0.9 }, { op: 'min_p', p: 0.05 }]],
    ['chain_typical', ids, [{ op: 'temperature', temperature: 1.3 }, { op: 'top_k', k: 20 }, { op: 'typical_p', p: 0.7 }]],
    ['suppress', ids, [{ op: 'suppress', ids: [0, 5, 9, 31, 40] }]],
    ['begin_suppress_first', ids, [{ op: 'begin_suppress', ids: [9, 2], begin: 9 }]],
    ['begin_suppress_later', ids, [{ op: 'begin_suppress', ids: [9, 2], begin: 4 }]],
    // Whisper's timestamps: eos 20, <|notimestamps|> 23, timestamps 24-31; a prompt of 3.
    ['timestamps_first', [1, 2, 3], [{ op: 'whisper_timestamps', begin: 3, eos: 20, no_timestamps: 23 }]],
    ['timestamps_after_text', [1, 2, 3, 24, 7, 8], [{ op: 'whisper_timestamps', begin: 3, eos: 20, no_timestamps: 23 }]],
    ['timestamps_after_one', [1, 2, 3, 24, 7, 26], [{ op: 'whisper_timestamps', begin: 3, eos: 20, no_timestamps: 23 }]],
    ['timestamps_after_pair', [1, 2, 3, 24, 7, 26, 27], [{ op: 'whisper_timestamps', begin: 3, eos: 20, no_timestamps: 23 }]],
    ['timestamps_one_new', [1, 2, 3, 25], [{ op: 'whisper_timestamps', begin: 3, eos: 20, no_timestamps: 23 }]],
    ['timestamps_win', [1, 2, 3, 24, 7], [{ op: 'suppress', ids: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14] },
        { op: 'whisper_timestamps', begin: 3, eos: 20, no_timestamps: 23 }]],
    ['timestamps_text_wins', [1, 2, 3, 24, 7, 8], [{ op: 'suppress', ids: [25, 26, 27, 28, 29, 30, 31] },
        { op: 'whisper_timestamps', begin: 3, eos: 20, no_timestamps: 23 }]],
    ['timestamps_after_one_eos', [1, 2, 3, 24, 7, 24], [{ op: 'suppress', ids: [25, 26, 27, 28, 29, 30, 31] },
        { op: 'whisper_timestamps', begin: 3, eos: 20, no_timestamps: 23 }]],
    ['chain_whisper', [1, 2, 3], [{ op: 'suppress', ids: [4, 6, 22] }, { op: 'begin_suppress', ids: [20, 5], begin: 3 },
        { op: 'whisper_timestamps', begin: 3, eos: 20, no_timestamps: 23 }]],
];
const out = [];
cases.forEach(([name, input_ids, chain], k) => {
    const logits = row(1000 + k, V);
    let s = Float32Array.from(logits);
    for (const st of chain) s = Float32Array.from(steps[st.op](st, input_ids, s));
    const enc = (a) => Array.from(a, (v) => (v === -Infinity ? null : v));
    out.push({ name, input_ids, steps: chain, logits: enc(logits), expected: enc(s) });
});
const dest = path.join(here, '..', 'data', 'generation', 'logits_refs.json');
fs.writeFileSync(dest, JSON.stringify({ made_by: 'tests/gen/logits_refs.mjs with @huggingface/transformers 4.3.2', cases: out }) + '\n');
console.log(`${out.length} cases -> ${dest}`);
