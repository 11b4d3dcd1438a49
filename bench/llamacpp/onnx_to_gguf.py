#!/usr/bin/env python3
"""Our bench's LLaMA exports (Optimum's decoder_model_merged.onnx, fp32) as a llama.cpp GGUF
(architecture "llama", every tensor F32), written with llama.cpp's own gguf-py (run with
PYTHONPATH=<llama.cpp source>/gguf-py; nothing from PyPI), so that llama.cpp runs the very
network our bench cases run and greedy tokens can be compared. Not a general converter: it
knows the TorchScript export's node names of transformers' LlamaForCausalLM only.

The weights are the export's own fp32 initializers, found through the nodes that use them
(`/model/model/layers.{i}/self_attn/q_proj/MatMul` etc.; the MatMul weights are stored [in,
out], transposed back here), q and k permuted from rotate-half to llama.cpp's interleaved
rotary layout as llama.cpp's convert_hf_to_gguf.py does. The 0.6B's tied embedding is two
independent tensors after inflating (README of the bench models), so output.weight is written
from the lm_head MatMul's own copy. The vocabulary is synthetic (llama.cpp needs one): LLaMA's
layout (<unk>, <s>, </s>, 256 byte tokens, then "▁t<id>"), the exact size; prompts are given as
token ids. Large weights are read with numpy.memmap (external data) and written one at a time.

Usage: onnx_to_gguf.py MODEL.onnx OUT.gguf --config llama-small|llama-600m
"""
import argparse, os, re, sys
import numpy as np
import onnx
from onnx import numpy_helper
import gguf

# The bench models' hyper-parameters (../../shared/models/bench/README.md); checked against the
# weights' shapes below.
CONFIGS = {
    "llama-small": dict(vocab=32000, hidden=768, layers=8, heads=12, kv_heads=4, ff=2048,
                        ctx=2048, eps=1e-6, theta=1e4),
    "llama-600m": dict(vocab=151936, hidden=1024, layers=28, heads=16, kv_heads=8, ff=3072,
                       ctx=4096, eps=1e-6, theta=1e6),
}


def weights_by_module(model):
    """{module path: initializer name} from every node (in the If branches too) that reads a
    main-graph initializer: '/model/model/layers.0/self_attn/q_proj/MatMul' ->
    '/model/model/layers.0/self_attn/q_proj'."""
    inits = {t.name for t in model.graph.initializer}
    found = {}

    def walk(graph):
        # The 0.6B's 57 RMSNorm weights (all ones) are one initializer, renamed per use by
        # Identity nodes inside the branches: follow those back to the initializer.
        alias = {n.output[0]: n.input[0] for n in graph.node if n.op_type == "Identity"}
        for n in graph.node:
            for i in n.input:
                while i not in inits and i in alias:
                    i = alias[i]
                if i in inits and n.name and n.op_type != "Identity":
                    found.setdefault(n.name.rsplit("/", 1)[0], i)
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    walk(a.g)
    walk(model.graph)
    return found


class Tensors:
    """Reads initializers by name, inline or external (mapped, not copied)."""

    def __init__(self, path, model):
        self.dir = os.path.dirname(os.path.abspath(path))
        self.by_name = {t.name: t for t in model.graph.initializer}

    def get(self, name):
        t = self.by_name[name]
        if t.data_location == onnx.TensorProto.EXTERNAL:
            info = {e.key: e.value for e in t.external_data}
            assert t.data_type == onnx.TensorProto.FLOAT, name
            n = int(np.prod(t.dims))
            return np.memmap(os.path.join(self.dir, info["location"]), np.float32, "r",
                             int(info.get("offset", 0)), (n,)).reshape(tuple(t.dims))
        return numpy_helper.to_array(t)


def rope_permute(w, n_head):
    """HF's rotate-half q/k rows -> llama.cpp's interleaved pairs (convert_hf_to_gguf.py)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("--config", required=True, choices=sorted(CONFIGS))
    args = ap.parse_args()
    c = CONFIGS[args.config]
    model = onnx.load(args.model, load_external_data=False)
    mods = weights_by_module(model)
    src = Tensors(args.model, model)
    hd = c["hidden"] // c["heads"]

    def w(module):
        if module not in mods:
            sys.exit(f"onnx_to_gguf: {args.model} has no node of {module} reading a weight")
        return src.get(mods[module])

    def linear(module, rows, cols):
        """A MatMul weight [in, out] as llama.cpp's [out, in] (ggml ne = [in, out])."""
        a = w(module)
        if a.shape != (cols, rows):
            sys.exit(f"onnx_to_gguf: {module}: shape {a.shape}, expected {(cols, rows)}")
        return lambda: np.ascontiguousarray(a.T, dtype=np.float32)

    def vector(module, n):
        a = w(module)
        if a.shape != (n,):
            sys.exit(f"onnx_to_gguf: {module}: shape {a.shape}, expected {(n,)}")
        return lambda: np.ascontiguousarray(a, dtype=np.float32)

    H, F, KV = c["hidden"], c["ff"], c["kv_heads"] * hd
    plan = []   # (gguf name, numpy shape, producer)
    emb = w("/model/model/embed_tokens")
    if emb.shape != (c["vocab"], H):
        sys.exit(f"onnx_to_gguf: embedding shape {emb.shape}, expected {(c['vocab'], H)}")
    plan.append(("token_embd.weight", (c["vocab"], H), lambda: np.ascontiguousarray(emb, dtype=np.float32)))
    for i in range(c["layers"]):
        p = f"/model/model/layers.{i}"
        q, k = linear(f"{p}/self_attn/q_proj", H, H), linear(f"{p}/self_attn/k_proj", KV, H)
        plan += [
            (f"blk.{i}.attn_norm.weight", (H,), vector(f"{p}/input_layernorm", H)),
            (f"blk.{i}.attn_q.weight", (H, H), lambda q=q: rope_permute(q(), c["heads"])),
            (f"blk.{i}.attn_k.weight", (KV, H), lambda k=k: rope_permute(k(), c["kv_heads"])),
            (f"blk.{i}.attn_v.weight", (KV, H), linear(f"{p}/self_attn/v_proj", KV, H)),
            (f"blk.{i}.attn_output.weight", (H, H), linear(f"{p}/self_attn/o_proj", H, H)),
            (f"blk.{i}.ffn_norm.weight", (H,), vector(f"{p}/post_attention_layernorm", H)),
            (f"blk.{i}.ffn_gate.weight", (F, H), linear(f"{p}/mlp/gate_proj", F, H)),
            (f"blk.{i}.ffn_up.weight", (F, H), linear(f"{p}/mlp/up_proj", F, H)),
            (f"blk.{i}.ffn_down.weight", (H, F), linear(f"{p}/mlp/down_proj", H, F)),
        ]
    plan.append(("output_norm.weight", (H,), vector("/model/model/norm", H)))
    plan.append(("output.weight", (c["vocab"], H), linear("/model/lm_head", c["vocab"], H)))

    tmp = args.out + ".tmp"
    wr = gguf.GGUFWriter(tmp, "llama")
    wr.add_name(f"transmuter-bench-{args.config}")
    wr.add_vocab_size(c["vocab"])
    wr.add_context_length(c["ctx"])
    wr.add_embedding_length(H)
    wr.add_block_count(c["layers"])
    wr.add_feed_forward_length(F)
    wr.add_rope_dimension_count(hd)
    wr.add_head_count(c["heads"])
    wr.add_head_count_kv(c["kv_heads"])
    wr.add_layer_norm_rms_eps(c["eps"])
    wr.add_rope_freq_base(c["theta"])
    wr.add_file_type(gguf.LlamaFileType.ALL_F32)
    # A synthetic vocabulary in LLaMA's layout, the model's exact size.
    toks = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL] + [gguf.TokenType.BYTE] * 256
    toks += [f"\u2581t{i}" for i in range(len(toks), c["vocab"])]
    types += [gguf.TokenType.NORMAL] * (c["vocab"] - len(types))
    wr.add_tokenizer_model("llama")
    wr.add_token_list(toks)
    wr.add_token_scores([0.0] * 259 + [-float(i) for i in range(c["vocab"] - 259)])
    wr.add_token_types(types)
    wr.add_unk_token_id(0)
    wr.add_bos_token_id(1)
    wr.add_eos_token_id(2)
    wr.add_add_bos_token(False)
    for name, shape, _ in plan:
        wr.add_tensor_info(name, shape, np.dtype(np.float32), int(np.prod(shape)) * 4)
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_ti_data_to_file()
    for name, shape, make in plan:
        a = make()
        assert a.shape == shape and a.dtype == np.float32, name
        wr.write_tensor_data(a)
        del a
    wr.close()
    os.replace(tmp, args.out)
    print(f"onnx_to_gguf: {args.out}: {len(plan)} tensors, "
          f"{sum(int(np.prod(s)) for _, s, _ in plan):,} weights (F32)")


if __name__ == "__main__":
    main()
