#!/usr/bin/python3
"""PyTorch reference for the fine-tuning check of issue 8: an interpreter that runs an ONNX
sequence-classification export as torch operations (python3-onnx reads the graph, each node
becomes torch ops, every float initializer a torch.nn.Parameter), trained with
torch.optim.AdamW on cross-entropy of the logits against the labels. Per step it records
the loss and every parameter's gradient, in the folder layout bench/finetune/compare.py
reads (see README.md). Not a general ONNX runtime: only the operators of the exports we
fine-tune, and it says which are missing.

Before training it checks itself: the forward pass on every case stored beside the model
(MODEL.cases/*/inputs) must equal ONNX Runtime's stored outputs (MODEL.cases/*/ort).

    /usr/bin/python3 bench/finetune/torch_ref.py --out bench/finetune/out/torch
Needs only Debian's python3-torch, python3-onnx and python3-numpy.
"""
import argparse
import json
import math
import os
import sys

import numpy as np
import onnx
import torch
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
DEFAULT_MODEL = os.path.join(REPO, "..", "shared", "models", "tiny", "bert-seqcls", "model.onnx")
DEFAULT_DATA = os.path.join(HERE, "data", "batch.jsonl")

ONNX_TO_TORCH = {
    onnx.TensorProto.FLOAT: torch.float32, onnx.TensorProto.DOUBLE: torch.float64,
    onnx.TensorProto.FLOAT16: torch.float16, onnx.TensorProto.BFLOAT16: torch.bfloat16,
    onnx.TensorProto.INT64: torch.int64, onnx.TensorProto.INT32: torch.int32,
    onnx.TensorProto.INT8: torch.int8, onnx.TensorProto.UINT8: torch.uint8,
    onnx.TensorProto.BOOL: torch.bool,
}


def encode_name(name):
    """File names as the repository writes them: bytes outside [A-Za-z0-9._-] as %XX."""
    ok = set(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")
    return "".join(chr(b) if b in ok else "%%%02X" % b for b in name.encode())


def attrs(node):
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def ints(t):
    return [int(v) for v in t.reshape(-1).tolist()]


class Interpreter:
    """Runs the main graph of an ONNX model with torch ops. `float_dtype` is the dtype float
    tensors are computed in (float32 as exported, or float64 for a noise-floor run)."""

    def __init__(self, path, float_dtype=torch.float32):
        self.model = onnx.load(path)
        self.float_dtype = float_dtype
        opsets = {o.domain: o.version for o in self.model.opset_import}
        self.opset = opsets.get("", opsets.get("ai.onnx", 0))
        self.params = {}      # name -> Parameter, in initializer order
        self.constants = {}
        for init in self.model.graph.initializer:
            t = self.tensor(numpy_helper.to_array(init))
            if t.is_floating_point():
                self.params[init.name] = torch.nn.Parameter(t)
            else:
                self.constants[init.name] = t
        missing = sorted({n.op_type for n in self.model.graph.node
                          if n.domain not in ("", "ai.onnx") or not hasattr(self, "op_" + n.op_type)})
        if missing:
            raise SystemExit(f"torch_ref: no torch lowering for {', '.join(missing)}")

    def tensor(self, array):
        t = torch.from_numpy(np.array(array, copy=True))
        return t.to(self.float_dtype) if t.is_floating_point() else t

    def float_type(self, onnx_type):
        dt = ONNX_TO_TORCH[onnx_type]
        return self.float_dtype if dt.is_floating_point else dt

    def run(self, feeds):
        env = dict(self.constants)
        env.update(self.params)
        env.update(feeds)
        for node in self.model.graph.node:
            args = [env[i] if i else None for i in node.input]
            outs = getattr(self, "op_" + node.op_type)(args, attrs(node))
            if not isinstance(outs, (list, tuple)):
                outs = [outs]
            for name, value in zip(node.output, outs):
                if name:
                    env[name] = value
        return {o.name: env[o.name] for o in self.model.graph.output}

    # ---- operators (the export's opset: Unsqueeze takes axes as an input from 13,
    # ReduceMean as an attribute until 18) ----

    def op_Constant(self, a, at):
        if "value" in at:
            return self.tensor(numpy_helper.to_array(at["value"]))
        for key, dtype in (("value_float", np.float32), ("value_floats", np.float32),
                           ("value_int", np.int64), ("value_ints", np.int64)):
            if key in at:
                return self.tensor(np.array(at[key], dtype=dtype))
        raise SystemExit(f"torch_ref: Constant with attributes {sorted(at)}")

    def op_Identity(self, a, at): return a[0]
    def op_Add(self, a, at): return a[0] + a[1]
    def op_Sub(self, a, at): return a[0] - a[1]
    def op_Mul(self, a, at): return a[0] * a[1]

    def op_Div(self, a, at):
        if a[0].is_floating_point():
            return a[0] / a[1]
        return torch.div(a[0], a[1], rounding_mode="trunc")   # ONNX integer division truncates

    def op_Pow(self, a, at): return torch.pow(a[0], a[1].to(a[0].dtype))
    def op_Sqrt(self, a, at): return torch.sqrt(a[0])
    def op_Erf(self, a, at): return torch.erf(a[0])
    def op_Tanh(self, a, at): return torch.tanh(a[0])
    def op_MatMul(self, a, at): return torch.matmul(a[0], a[1])

    def op_Gemm(self, a, at):
        x = a[0].t() if at.get("transA", 0) else a[0]
        w = a[1].t() if at.get("transB", 0) else a[1]
        y = x @ w
        if at.get("alpha", 1.0) != 1.0:
            y = y * at["alpha"]
        if len(a) > 2 and a[2] is not None:
            y = y + (a[2] * at["beta"] if at.get("beta", 1.0) != 1.0 else a[2])
        return y

    def op_Gather(self, a, at):
        data, idx = a
        axis = at.get("axis", 0) % data.dim()
        idx = torch.where(idx < 0, idx + data.shape[axis], idx)
        flat = data.index_select(axis, idx.reshape(-1))
        return flat.reshape(data.shape[:axis] + idx.shape + data.shape[axis + 1:])

    def op_Unsqueeze(self, a, at):
        axes = ints(a[1]) if len(a) > 1 else at["axes"]
        rank = a[0].dim() + len(axes)
        y = a[0]
        for ax in sorted(x % rank for x in axes):
            y = y.unsqueeze(ax)
        return y

    def op_Shape(self, a, at):
        dims = list(a[0].shape)[at.get("start", 0):at.get("end", None)]
        return torch.tensor(dims, dtype=torch.int64)

    def op_Concat(self, a, at): return torch.cat(a, dim=at["axis"])

    def op_Reshape(self, a, at):
        shape = ints(a[1])
        if not at.get("allowzero", 0):
            shape = [a[0].shape[i] if s == 0 else s for i, s in enumerate(shape)]
        return a[0].reshape(shape)

    def op_Transpose(self, a, at):
        perm = at.get("perm", list(range(a[0].dim()))[::-1])
        return a[0].permute(*perm)

    def op_ReduceMean(self, a, at):
        axes = at.get("axes") if self.opset < 18 else (ints(a[1]) if len(a) > 1 and a[1] is not None else None)
        keep = bool(at.get("keepdims", 1))
        if not axes:
            return a[0].mean().reshape([1] * a[0].dim() if keep else [])
        return a[0].mean(dim=axes, keepdim=keep)

    def op_Softmax(self, a, at):
        if self.opset < 13:
            raise SystemExit("torch_ref: Softmax before opset 13 (flattening semantics) is not lowered")
        return torch.softmax(a[0], dim=at.get("axis", -1))

    def op_Cast(self, a, at): return a[0].to(self.float_type(at["to"]))

    def op_Slice(self, a, at):
        data = a[0]
        starts, ends = ints(a[1]), ints(a[2])
        axes = ints(a[3]) if len(a) > 3 and a[3] is not None else list(range(len(starts)))
        steps = ints(a[4]) if len(a) > 4 and a[4] is not None else [1] * len(starts)
        index = [slice(None)] * data.dim()
        for s, e, ax, st in zip(starts, ends, axes, steps):
            if st <= 0:
                raise SystemExit("torch_ref: Slice with a non-positive step is not lowered")
            n = data.shape[ax]
            s = min(max(s + n if s < 0 else s, 0), n)
            e = min(max(e + n if e < 0 else e, 0), n)
            index[ax % data.dim()] = slice(s, e, st)
        return data[tuple(index)]


# ---- the dataset, batched as src/train/dataset.c batches it ----

def load_dataset(path):
    """Examples as dicts of lists (input_ids, attention_mask, token_type_ids, label)."""
    examples = []
    if os.path.isdir(path):
        ids = np.load(os.path.join(path, "input_ids.npy"))
        mask = np.load(os.path.join(path, "attention_mask.npy")) \
            if os.path.exists(os.path.join(path, "attention_mask.npy")) else np.ones_like(ids)
        types = np.load(os.path.join(path, "token_type_ids.npy")) \
            if os.path.exists(os.path.join(path, "token_type_ids.npy")) else np.zeros_like(ids)
        lp = os.path.join(path, "labels.npy")
        labels = np.load(lp if os.path.exists(lp) else os.path.join(path, "label.npy"))
        for r in range(ids.shape[0]):
            n = int(np.nonzero(mask[r])[0].max()) + 1
            examples.append({"input_ids": ids[r, :n].tolist(), "attention_mask": mask[r, :n].tolist(),
                             "token_type_ids": types[r, :n].tolist(), "label": int(labels[r])})
        return examples
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            e = json.loads(line)
            n = len(e["input_ids"])
            examples.append({"input_ids": e["input_ids"],
                             "attention_mask": e.get("attention_mask") or [1] * n,
                             "token_type_ids": e.get("token_type_ids") or [0] * n,
                             "label": e["label"] if "label" in e else e["labels"]})
    return examples


class Rng:
    """xoshiro256** seeded through splitmix64: the order src/train/dataset.c shuffles in."""
    M = (1 << 64) - 1

    def __init__(self, seed):
        self.s = []
        x = seed & self.M
        for _ in range(4):
            x = (x + 0x9E3779B97F4A7C15) & self.M
            z = x
            z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & self.M
            z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & self.M
            self.s.append(z ^ (z >> 31))

    def next(self):
        s, M = self.s, self.M
        rotl = lambda x, k: ((x << k) | (x >> (64 - k))) & M
        result = (rotl((s[1] * 5) & M, 7) * 9) & M
        t = (s[1] << 17) & M
        s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3]; s[2] ^= t
        s[3] = rotl(s[3], 45)
        return result


def batches(examples, batch_size, shuffle=False, seed=0, pad_id=0):
    rng = Rng(seed)
    while True:
        order = list(range(len(examples)))
        if shuffle:
            for i in range(len(order) - 1, 0, -1):
                j = rng.next() % (i + 1)
                order[i], order[j] = order[j], order[i]
        for start in range(0, len(order), batch_size):
            chosen = [examples[k] for k in order[start:start + batch_size]]
            t = max(len(e["input_ids"]) for e in chosen)
            pad = lambda key, fill: torch.tensor(
                [e[key] + [fill] * (t - len(e[key])) for e in chosen], dtype=torch.int64)
            yield ({"input_ids": pad("input_ids", pad_id), "attention_mask": pad("attention_mask", 0),
                    "token_type_ids": pad("token_type_ids", 0)},
                   torch.tensor([e["label"] for e in chosen], dtype=torch.int64))


# ---- checks and training ----

def check_forward(interp, model_path, tol):
    cases = os.path.splitext(model_path)[0] + ".cases"
    if not os.path.isdir(cases):
        print(f"forward check: no {cases}; skipped")
        return
    worst = 0.0
    for case in sorted(os.listdir(cases)):
        d = os.path.join(cases, case)
        feeds = {}
        for f in os.listdir(os.path.join(d, "inputs")):
            name = f[:-4].encode().decode()  # names of the tiny exports need no decoding
            feeds[name] = torch.from_numpy(np.load(os.path.join(d, "inputs", f)))
        with torch.no_grad():
            outs = interp.run(feeds)
        for name, value in outs.items():
            ref = np.load(os.path.join(d, "ort", encode_name(name) + ".npy"))
            diff = float(np.abs(value.double().numpy() - ref).max())
            worst = max(worst, diff)
            print(f"forward check {case}/{name}: max |torch - ONNX Runtime| = {diff:.3g}")
    if worst > tol:
        raise SystemExit(f"torch_ref: the interpreter's forward pass differs from ONNX Runtime's "
                         f"stored outputs by {worst:.3g} > {tol:g}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--data", default=DEFAULT_DATA, help="JSONL file or NPY folder")
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--shuffle", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--beta1", type=float, default=0.9)
    ap.add_argument("--beta2", type=float, default=0.999)
    ap.add_argument("--eps", type=float, default=1e-6,
                    help="1e-6, not PyTorch's 1e-8: see README.md (noise floor)")
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--double", action="store_true",
                    help="compute in float64 (the float32 run's noise floor)")
    ap.add_argument("--forward-tol", type=float, default=1e-5)
    args = ap.parse_args()

    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    dtype = torch.float64 if args.double else torch.float32
    interp = Interpreter(args.model, dtype)
    check_forward(interp, args.model, args.forward_tol)

    names = list(interp.params)
    opt = torch.optim.AdamW(list(interp.params.values()), lr=args.lr,
                            betas=(args.beta1, args.beta2), eps=args.eps,
                            weight_decay=args.weight_decay)
    os.makedirs(os.path.join(args.out, "params"), exist_ok=True)
    data = batches(load_dataset(args.data), args.batch_size, args.shuffle, args.seed)
    losses, lrs = [], []
    for step in range(args.steps):
        feeds, labels = next(data)
        opt.zero_grad(set_to_none=True)
        logits = interp.run(feeds)["logits"]
        loss = torch.nn.functional.cross_entropy(logits, labels)
        loss.backward()
        gdir = os.path.join(args.out, "grads", "%04d" % step)
        os.makedirs(gdir, exist_ok=True)
        for name in names:
            g = interp.params[name].grad
            g = torch.zeros_like(interp.params[name]) if g is None else g
            np.save(os.path.join(gdir, encode_name(name) + ".npy"), g.detach().numpy())
        losses.append(float(loss))
        lrs.append(opt.param_groups[0]["lr"])
        print(f"step {step + 1:3d}  loss {float(loss):.8f}")
        opt.step()
    for name in names:
        np.save(os.path.join(args.out, "params", encode_name(name) + ".npy"),
                interp.params[name].detach().numpy())
    # the trained model's logits on the first batch, for the saved model's check (replay.c)
    feeds, _ = next(batches(load_dataset(args.data), args.batch_size, args.shuffle, args.seed))
    with torch.no_grad():
        np.save(os.path.join(args.out, "final_logits.npy"), interp.run(feeds)["logits"].numpy())
    np.save(os.path.join(args.out, "loss.npy"), np.array(losses, dtype=np.float64))
    np.save(os.path.join(args.out, "lr.npy"), np.array(lrs, dtype=np.float64))
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump({"producer": f"bench/finetune/torch_ref.py, torch {torch.__version__}",
                   "model": os.path.relpath(args.model, REPO), "data": os.path.relpath(args.data, REPO),
                   "steps": args.steps, "batch_size": args.batch_size, "shuffle": args.shuffle,
                   "seed": args.seed, "optimizer": "AdamW", "lr": args.lr,
                   "betas": [args.beta1, args.beta2], "eps": args.eps,
                   "weight_decay": args.weight_decay, "loss": "cross_entropy (mean)",
                   "dtype": "float64" if args.double else "float32", "parameters": names},
                  f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
