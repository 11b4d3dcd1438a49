# A float64 numpy reference for MultiHeadAttention over a shared KV buffer with more than
# one new token (case mha_shared_kv_prompt, see ../README.md), as the contrib-op doc defines
# it: the new keys and values are written into rows [past, past + S) of the
# (B, N, max_sequence_length, H) buffers, attention reads rows [0, past + S), causal.
# ONNX Runtime's CPU kernel takes its shared-buffer path only for S = 1; for S > 1 it reads
# the whole buffer as the past and appends, which this reference does not follow.
# /usr/bin/python3 mha_shared_reference.py INPUTS_DIR OUT_DIR   (model: dmmha_inside_mha_self_attn)
import os, sys
import numpy as np
ins, out = sys.argv[1:3]
L = lambda n: np.load(os.path.join(ins, n + ".npy")).astype(np.float64)
q, k, v, b, pk, pv = L("q"), L("k"), L("v"), L("b"), L("past_k"), L("past_v")
past = int(np.load(os.path.join(ins, "past_seq_len.npy"))[0])
B, S, D = q.shape
N = pk.shape[1]
H = D // N
split = lambda x: x.reshape(B, S, N, H).transpose(0, 2, 1, 3)
Q, K, V = split(q + b[:D]), split(k + b[D:2 * D]), split(v + b[2 * D:])
Kc, Vc = pk.copy(), pv.copy()
Kc[:, :, past:past + S], Vc[:, :, past:past + S] = K, V
T = past + S
s = Q @ Kc[:, :, :T].transpose(0, 1, 3, 2) / np.sqrt(H)
s = np.where(np.arange(T)[None, :] <= past + np.arange(S)[:, None], s, -np.finfo(np.float32).max)
p = np.exp(s - s.max(-1, keepdims=True))
p /= p.sum(-1, keepdims=True)
o = (p @ Vc[:, :, :T]).transpose(0, 2, 1, 3).reshape(B, S, D)
os.makedirs(out, exist_ok=True)
np.save(os.path.join(out, "o.npy"), o.astype(np.float32))
np.save(os.path.join(out, "present_k.npy"), Kc.astype(np.float32))
np.save(os.path.join(out, "present_v.npy"), Vc.astype(np.float32))
