# A numpy reference for the Sampling case sampling_table (see ../README.md): the whole
# generation loop of com.microsoft Sampling written out from ONNX Runtime's CPU kernel
# for a decoder whose logits are table[position_ids], so that no network is needed.
# /usr/bin/python3 sampling_reference.py MODEL.onnx INPUTS_DIR OUT_DIR [--ort-presence]
# --ort-presence copies ONNX Runtime's presence-penalty loop (its pointer never moves, so
# the whole mask times the penalty comes off the first score of the batch); with it the
# result must equal ONNX Runtime's, which checks this script. Without it, each token
# whose mask is 1 loses the penalty, as the operator's documentation says.
import os, sys
import numpy as np, onnx
from onnx import numpy_helper as nh

f32 = np.float32
LOWEST = np.finfo(np.float32).min

class MinStd:                       # std::minstd_rand0, as libstdc++ seeds it
    def __init__(self, seed):
        self.x = seed % 2147483647 or 1
    def next(self):
        self.x = self.x * 16807 % 2147483647
        return self.x
    def canonical(self):            # generate_canonical<double, 53>: two draws
        r = 2147483646.0
        s = float(self.next() - 1)
        s += float(self.next() - 1) * r
        u = s / (r * r)
        return u if u < 1.0 else np.nextafter(1.0, 0.0)

def attrs_of(node):
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}

def main():
    model, ins, out = sys.argv[1:4]
    ort_presence = "--ort-presence" in sys.argv
    m = onnx.load(model)
    node = m.graph.node[0]
    at = attrs_of(node)
    table = nh.to_array(next(t for t in at["decoder"].initializer if t.name == "table"))
    I = lambda n: np.load(os.path.join(ins, n + ".npy"))
    ids, max_len = I("input_ids"), int(I("max_length")[0])
    min_len, rep = int(I("min_length")[0]), f32(I("repetition_penalty")[0])
    vocab_mask, prefix, presence = I("vocab_mask"), I("prefix_vocab_mask"), I("presence_mask")
    gen = MinStd(int(I("seed")[0]))
    eos, pad, ngram = at["eos_token_id"], at["pad_token_id"], at["no_repeat_ngram_size"]
    temp, top_p, keep = f32(at["temperature"]), f32(at["top_p"]), max(at["min_tokens_to_keep"], 1)
    penalty = f32(at["presence_penalty"])
    B, S = ids.shape
    V = table.shape[1]
    seqs = np.zeros((B, max_len), np.int32)
    seqs[:, :S] = ids
    cur, done, step, last = S, np.zeros(B, bool), 1, None
    while cur < max_len:
        scores = np.array([table[S - 1 + step - 1] for _ in range(B)], f32)   # positions
        for b in range(B):
            s, seq = scores[b], seqs[b, :cur]
            if rep != 1:
                for t in set(seq.tolist()):
                    s[t] = s[t] * rep if s[t] < 0 else s[t] / rep
            if ngram and ngram <= cur:
                pre = seq[cur - ngram + 1:]
                for j in range(cur - ngram + 1):
                    if ngram == 1 or (seq[j:j + ngram - 1] == pre).all():
                        s[seq[j + ngram - 1]] = LOWEST
            s[vocab_mask == 0] = LOWEST
            if step == 1:
                s[prefix[b] == 0] = LOWEST
            if cur < min_len:
                s[eos] = LOWEST
            if temp > 0 and temp != 1:
                s[:] = s / temp
        if penalty != 0:
            if ort_presence:
                scores[0, 0] -= sum(f32(p) * penalty for p in presence.ravel())
            else:
                scores -= presence.astype(f32) * penalty
        for b in range(B):          # top-p: ascending, float32 softmax and running sum
            s = scores[b]
            order = sorted(range(V), key=lambda k: (s[k], k))
            srt = s[order]
            e = np.exp(srt - srt[-1]).astype(f32)
            total = f32(0)
            for x in e:
                total = f32(total + x)
            p = (e / total).astype(f32)
            cum = f32(0)
            for j in range(V - keep):
                cum = f32(cum + p[j])
                if cum <= f32(1) - top_p:
                    s[order[j]] = f32(at.get("filter_value", -np.inf))
        tokens = []
        for b in range(B):          # multinomial, in double
            s = scores[b]
            fin = np.isfinite(s)
            mx = max(float(x) for x in s[fin])
            cdf, run = [], 0.0
            for k in range(V):
                if fin[k]:
                    run += float(np.exp(float(s[k]) - mx))
                cdf.append(run)
            target = gen.canonical() * run
            tokens.append(int(np.searchsorted(np.array(cdf), target, side="right")))
        last = scores.copy()
        for b in range(B):
            if done[b] or tokens[b] == eos:
                done[b], tokens[b] = True, pad
            seqs[b, cur] = tokens[b]
        cur += 1
        step += 1
        if done.all():
            break
    os.makedirs(out, exist_ok=True)
    np.save(os.path.join(out, "sequences.npy"), seqs)
    np.save(os.path.join(out, "filtered_logits.npy"), last)

main()
