// Reference beam searches for tests/test_generator.c: Python transformers' beam search
// (generation/utils.py _beam_search with BeamSearchScorer and BeamHypotheses, 4.4x),
// ported line by line, on logits from ONNX Runtime (onnxruntime-node, as installed with
// @huggingface/transformers 4.3.2) running the tiny repositories of tests/data/pipelines
// without a cache (every step runs each beam's whole sequence). transformers.js 4.3.2 has
// no beam search (its BeamSearchSampler keeps the top tokens of one sequence), so Python
// is the reference. Writes tests/data/generation/beams.jsonl: per case the model file,
// the prompt's ids (t5: the encoder's; whisper: the decoder's prompt, the encoder's
// input_features from a stored .npy), the options, and the returned sequences (ids) and
// scores, best first.
//
// Scores are kept in float32 as torch keeps them (Math.fround after every operation);
// log_softmax is computed in double and rounded.
//
// Usage: TJS_DIR=/tmp/tjs node tests/gen/beam_refs.mjs   (see logits_refs.mjs for /tmp/tjs)
import fs from 'fs';
import path from 'path';
import { createRequire } from 'module';
import { fileURLToPath } from 'url';

const here = path.dirname(fileURLToPath(import.meta.url));
const pipes = path.join(here, '..', 'data', 'pipelines');
const tjs = process.env.TJS_DIR || '/tmp/tjs';
const req = createRequire(path.join(tjs, 'package.json'));
const ort = req('onnxruntime-node');
const f32 = Math.fround;

const i64 = (a) => new ort.Tensor('int64', BigInt64Array.from(a.map(BigInt)), [1, a.length]);
const empty = (h, d) => new ort.Tensor('float32', new Float32Array(0), [1, h, 0, d]);

// The last position's logits of one sequence, no cache.
async function decoder_logits(kind, sess, seq, enc) {
    const feeds = {};
    const T = seq.length;
    feeds.input_ids = i64(seq);
    if (kind === 't5') {
        feeds.encoder_attention_mask = i64(enc.ids.map(() => 1));
        feeds.encoder_hidden_states = enc.hidden;
        for (let l = 0; l < 2; l++)
            for (const w of ['decoder', 'encoder'])
                for (const kv of ['key', 'value']) feeds[`past_key_values.${l}.${w}.${kv}`] = empty(4, 8);
    } else if (kind === 'whisper') {
        feeds.encoder_hidden_states = enc.hidden;
        for (let l = 0; l < 2; l++)
            for (const w of ['decoder', 'encoder'])
                for (const kv of ['key', 'value']) feeds[`past_key_values.${l}.${w}.${kv}`] = empty(2, 16);
    } else {
        feeds.attention_mask = i64(seq.map(() => 1));
        feeds.position_ids = i64(seq.map((_, i) => i));
        const heads = kind === 'llama' ? 2 : 4;
        for (let l = 0; l < 2; l++)
            for (const kv of ['key', 'value']) feeds[`past_key_values.${l}.${kv}`] = empty(heads, 8);
    }
    if (sess.inputNames.includes('use_cache_branch'))
        feeds.use_cache_branch = new ort.Tensor('bool', [false], [1]);
    const out = await sess.run(feeds);
    const lg = out.logits, V = lg.dims[2];
    return Float32Array.from(lg.data.subarray((T - 1) * V, T * V));
}

function log_softmax(s) {
    let mx = -Infinity;
    for (const v of s) mx = Math.max(mx, v);
    let sum = 0;
    for (const v of s) sum += Math.exp(v - mx);
    const lse = mx + Math.log(sum);
    return Float32Array.from(s, (v) => f32(v - lse));
}

// The processors the cases use, as Python applies them (on log-probs in beam search).
function apply_processors(s, ids, o, prompt_len) {
    if (o.repetition_penalty && o.repetition_penalty !== 1)
        for (const t of new Set(ids)) s[t] = f32(s[t] < 0 ? s[t] * o.repetition_penalty : s[t] / o.repetition_penalty);
    if (o.no_repeat_ngram_size > 0) {
        const n = o.no_repeat_ngram_size, L = ids.length;
        if (L + 1 >= n)
            for (let j = 0; j + n - 1 < L; j++) {
                let same = true;
                for (let q = 0; q < n - 1 && same; q++) same = ids[j + q] === ids[L - n + 1 + q];
                if (same) s[ids[j + n - 1]] = -Infinity;
            }
    }
    if (o.min_new_tokens > 0 && ids.length - prompt_len < o.min_new_tokens)
        for (const e of o.eos) s[e] = -Infinity;
    for (const t of o.suppress_tokens ?? []) s[t] = -Infinity;
    if (ids.length === prompt_len) for (const t of o.begin_suppress_tokens ?? []) s[t] = -Infinity;
}

// A float32 .npy (version 1.0, C order) as an ONNX Runtime tensor.
function npy(file) {
    const b = fs.readFileSync(file), header_len = b.readUInt16LE(8), header = b.toString('latin1', 10, 10 + header_len);
    const dims = header.match(/'shape': \(([^)]*)\)/)[1].split(',').filter((x) => x.trim()).map(Number);
    const data = new Float32Array(b.buffer.slice(b.byteOffset + 10 + header_len, b.byteOffset + b.length));
    return new ort.Tensor('float32', data, dims);
}

class BeamHypotheses {
    constructor(num_beams, length_penalty, early_stopping, max_length) {
        Object.assign(this, { num_beams, length_penalty, early_stopping, max_length });
        this.beams = [];
        this.worst_score = 1e9;
    }
    add(hyp, sum_logprobs, generated_len) {
        const score = f32(sum_logprobs / generated_len ** this.length_penalty);
        if (this.beams.length < this.num_beams || score > this.worst_score) {
            this.beams.push([score, hyp]);
            if (this.beams.length > this.num_beams) {
                const sorted = this.beams.map(([s], idx) => [s, idx]).sort((a, b) => a[0] - b[0] || a[1] - b[1]);
                this.beams.splice(sorted[0][1], 1);
                this.worst_score = sorted[1][0];
            } else {
                this.worst_score = Math.min(score, this.worst_score);
            }
        }
    }
    is_done(best_sum_logprobs, cur_len, decoder_prompt_len) {
        if (this.beams.length < this.num_beams) return false;
        if (this.early_stopping === true) return true;
        let len = cur_len - decoder_prompt_len;
        if (this.early_stopping === 'never' && this.length_penalty > 0) len = this.max_length - decoder_prompt_len;
        return this.worst_score >= f32(best_sum_logprobs / len ** this.length_penalty);
    }
}

async function beam_search(kind, sess, prompt, o, enc) {
    const nb = o.num_beams, eos = o.eos, prompt_len = prompt.length;
    const max_length = prompt_len + o.max_new_tokens;
    let seqs = Array.from({ length: nb }, () => prompt.slice());
    let beam_scores = Array.from({ length: nb }, (_, b) => (b ? f32(-1e9) : 0));
    const hyps = new BeamHypotheses(nb, o.length_penalty ?? 1, o.early_stopping ?? false, max_length);
    let done = false;
    for (;;) {
        const cur = seqs[0].length;
        const cand = [];
        let V = 0;
        for (let b = 0; b < nb; b++) {
            const lp = log_softmax(await decoder_logits(kind, sess, seqs[b], enc));
            V = lp.length;
            apply_processors(lp, seqs[b], o, prompt_len);
            for (let v = 0; v < V; v++) cand.push(f32(lp[v] + beam_scores[b]));
        }
        const keep = Math.max(2, 1 + eos.length) * nb;
        const top = [...cand.keys()].sort((a, b) => cand[b] - cand[a] || a - b).slice(0, keep);
        const next = [];
        for (let rank = 0; rank < top.length && next.length < nb; rank++) {
            const token = top[rank] % V, src = Math.floor(top[rank] / V), score = cand[top[rank]];
            if (eos.includes(token)) {
                if (rank >= nb) continue;
                hyps.add(seqs[src].slice(), score, cur + 1 - prompt_len);
            } else {
                next.push({ token, src, score });
            }
        }
        done = done || hyps.is_done(cand[top[0]], cur + 1, prompt_len);
        seqs = next.map((n) => [...seqs[n.src], n.token]);
        beam_scores = next.map((n) => n.score);
        if (done || seqs[0].length >= max_length) break;
    }
    if (!done) for (let b = 0; b < nb; b++) hyps.add(seqs[b], beam_scores[b], seqs[b].length - prompt_len);
    const sorted = hyps.beams.map((x, i) => [...x, i]).sort((a, b) => a[0] - b[0] || a[2] - b[2]);
    const best = [];
    for (let j = 0; j < (o.num_return_sequences ?? 1); j++) best.push(sorted.pop());
    const longest = Math.max(...best.map((x) => x[1].length));
    const max_out = Math.min(longest + 1, max_length);
    return best.map(([score, hyp]) => ({ ids: hyp.length < max_out && eos.length ? [...hyp, eos[0]] : hyp, score }));
}

const whisper_suppress = JSON.parse(fs.readFileSync(path.join(pipes, 'whisper-asr', 'generation_config.json'))).suppress_tokens;
const cases = [
    { repo: 'gpt2-gen', file: 'onnx/decoder_model_merged.onnx', kind: 'gpt2', prompt: [464, 2068, 7586, 21831],
      options: { num_beams: 3, max_new_tokens: 10, eos: [50256] } },
    { repo: 'gpt2-gen', file: 'onnx/decoder_model_merged.onnx', kind: 'gpt2', prompt: [464, 2068, 7586, 21831],
      options: { num_beams: 4, max_new_tokens: 12, eos: [12687], num_return_sequences: 3 } },
    { repo: 'gpt2-gen', file: 'onnx/decoder_model_merged.onnx', kind: 'gpt2', prompt: [464, 2068, 7586, 21831],
      options: { num_beams: 2, max_new_tokens: 12, eos: [12687], early_stopping: true } },
    { repo: 'gpt2-gen', file: 'onnx/decoder_model_merged.onnx', kind: 'gpt2', prompt: [464, 2068, 7586, 21831],
      options: { num_beams: 3, max_new_tokens: 8, eos: [12687, 50256], early_stopping: 'never', length_penalty: 0.5, num_return_sequences: 2 } },
    { repo: 'gpt2-gen', file: 'onnx/decoder_model_merged.onnx', kind: 'gpt2', prompt: [15496, 11, 616, 1438, 318],
      options: { num_beams: 3, max_new_tokens: 10, eos: [50256], repetition_penalty: 1.3, no_repeat_ngram_size: 2, min_new_tokens: 3 } },
    { repo: 'llama-chat', file: 'onnx/model.onnx', kind: 'llama', prompt: [9038, 2501, 263, 931],
      options: { num_beams: 3, max_new_tokens: 8, eos: [32000, 32001, 32007], length_penalty: 2.0 } },
    { repo: 't5-text2text', file: 'onnx/decoder_model_merged.onnx', kind: 't5', prompt: [0],
      encoder_ids: [13959, 1566, 12, 2968, 10, 37, 629, 19, 1627, 5, 1],
      options: { num_beams: 4, max_new_tokens: 10, eos: [1], num_return_sequences: 2 } },
    // Whisper: its generation_config.json's suppressions; no timestamps (transformers.js's
    // timestamp processor is not Python's).
    { repo: 'whisper-asr', file: 'onnx/decoder_model_merged.onnx', kind: 'whisper', prompt: [50258, 50259, 50359, 50363],
      encoder_features: 'whisper-asr.features/processor.stereo_48k.input_features.npy',
      options: { num_beams: 3, max_new_tokens: 8, eos: [50257], suppress_tokens: whisper_suppress, begin_suppress_tokens: [220, 50257] } },
    { repo: 'whisper-asr', file: 'onnx/decoder_model_merged.onnx', kind: 'whisper', prompt: [50258, 50265, 50358, 50363],
      encoder_features: 'whisper-asr.features/processor.stereo_48k.input_features.npy',
      options: { num_beams: 4, max_new_tokens: 6, eos: [50257], num_return_sequences: 2, length_penalty: 0.8,
                 suppress_tokens: whisper_suppress, begin_suppress_tokens: [220, 50257] } },
];

const lines = [];
for (const c of cases) {
    const sess = await ort.InferenceSession.create(path.join(pipes, c.repo, c.file));
    let enc = null;
    if (c.kind === 't5') {
        const es = await ort.InferenceSession.create(path.join(pipes, c.repo, 'onnx/encoder_model.onnx'));
        const out = await es.run({ input_ids: i64(c.encoder_ids), attention_mask: i64(c.encoder_ids.map(() => 1)) });
        enc = { ids: c.encoder_ids, hidden: out.last_hidden_state };
    } else if (c.kind === 'whisper') {
        const es = await ort.InferenceSession.create(path.join(pipes, c.repo, 'onnx/encoder_model.onnx'));
        const out = await es.run({ input_features: npy(path.join(pipes, c.encoder_features)) });
        enc = { hidden: out.last_hidden_state };
    }
    const results = await beam_search(c.kind, sess, c.prompt, c.options, enc);
    lines.push(JSON.stringify({ ...c, kind: undefined, expected: results }));
    console.log(c.repo, JSON.stringify(c.options), results.map((r) => `${r.score.toFixed(4)}:${r.ids.slice(c.prompt.length).join(',')}`).join(' | '));
}
fs.writeFileSync(path.join(here, '..', 'data', 'generation', 'beams.jsonl'), lines.join('\n') + '\n');
