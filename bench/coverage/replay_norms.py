#!/usr/bin/env python3
"""Replays ONNX Runtime's float32 normalisation loops in numpy on ONNX Runtime's own inputs
(the coverage bench's made-up ones), to show where its error against float64 comes from:
SkipLayerNormalization as a Welford running mean/M2 in float32 (and, for comparison, the
E[x^2] - E[x]^2 formula of older ONNX Runtime versions), LayerNormalization with double
statistics and the mean rounded to float32. Not part of the bench's verdict (run.py's
float64 rule is); README.md quotes its output.

Usage: /usr/bin/python3 bench/coverage/replay_norms.py [MODEL.onnx NODE ...]
Default: the normalisations of ONNX Runtime's transformer test graphs that README.md lists.
"""
import os, sys, tempfile, zlib
import numpy as np
import onnx
from onnx import numpy_helper
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run as R

TT = os.path.join(R.SHARED, "models", "ort-testdata", "transformers-test-data")
DEFAULT = [("gpt2_embedlayer_one_attn_exp", "attn_skip_layernorm"),
           ("gpt2_attention_add_opt_skiplayernorm", "SkipLayerNorm_AddBias_0"),
           ("attention_opt", "SkipLayerNorm_AddBias_0"), ("bert_3d_attention_opt", "SkipLayerNorm_1"),
           ("gpt2_attention_opt_no_skiplayernorm", "layernorm2")]
f32 = np.float32


def welford(rows, gamma, beta, eps):
    """ONNX Runtime 1.30's SkipLayerNorm ComputeJob for float, element by element."""
    out = np.empty_like(rows)
    h_count = rows.shape[1]
    for r, row in enumerate(rows):
        mean, m2 = f32(0), f32(0)
        for h, v in enumerate(row):
            delta = f32(v - mean)
            mean = f32(mean + f32(delta / f32(h + 1)))
            m2 = f32(m2 + f32(delta * f32(v - mean)))
        std = f32(np.sqrt(f32(f32(m2 / f32(h_count)) + f32(eps))))
        y = (f32(1) * (row - mean) / std).astype(f32) * gamma
        out[r] = (y + beta).astype(f32) if beta is not None else y
    return out


def moments(rows, gamma, beta, eps):
    """The older E[x^2] - E[x]^2 loop in float32, for comparison."""
    out = np.empty_like(rows)
    n = f32(rows.shape[1])
    for r, row in enumerate(rows):
        s, q = f32(0), f32(0)
        for v in row:
            s, q = f32(s + v), f32(q + f32(v * v))
        mean = f32(s / n)
        std = f32(np.sqrt(max(f32(f32(q / n) - f32(mean * mean)), f32(0)) + f32(eps)))
        y = ((row - mean) / std).astype(f32) * gamma
        out[r] = (y + beta).astype(f32) if beta is not None else y
    return out


def rounded_mean(rows, gamma, beta, eps):
    """Statistics in double, then (x - float(mean)) * float(inv_std) in float32."""
    x = rows.astype(np.float64)
    mean = x.mean(1, keepdims=True)
    inv = 1.0 / np.sqrt(((x - mean) ** 2).mean(1, keepdims=True) + eps)
    y = ((rows - mean.astype(f32)).astype(f32) * inv.astype(f32)).astype(f32) * gamma
    return (y + beta).astype(f32) if beta is not None else y


def replay(path, node_name, runner, work):
    info = R.inspect(path)
    inputs = os.path.join(work, "in")
    R.make_inputs(info, inputs, R.PAST, 4, zlib.crc32(R.label_of(path).encode()))
    d, _, err = R.ort_run(runner, path, inputs, expose=True)
    if not d:
        return print(f"{R.label_of(path)}: ONNX Runtime failed: {err}")
    ort, given = R.load_dir(d), R.load_dir(inputs)
    g = onnx.load(path).graph
    inits = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    value = lambda n: ort[n] if n in ort else given[n] if n in given else inits[n]
    node = next(n for n in g.node if n.name == node_name)
    get = lambda i: value(node.input[i]) if i < len(node.input) and node.input[i] else None
    eps = R.attr_of(node, "epsilon", 1e-12 if node.op_type.startswith("Skip") else 1e-5)
    if node.op_type == "SkipLayerNormalization":
        x, gamma, beta, bias = get(0), get(2), get(3), get(4)
        rows = (x + get(1)).astype(f32)
        rows = (rows + bias).astype(f32) if bias is not None else rows
        ways = {"Welford in float32": welford, "E[x^2] - E[x]^2 in float32": moments}
    else:
        x, gamma, beta = get(0), get(1), get(2)
        rows = x.astype(f32)
        ways = {"double statistics, float32 mean": rounded_mean}
    rows = rows.reshape(-1, rows.shape[-1])
    got = ort[node.output[0]].reshape(rows.shape).astype(np.float64)
    exact = R.eval64(node, value)[node.output[0]].reshape(rows.shape)
    t = rows.astype(np.float64)
    print(f"{R.label_of(path)} {node_name} ({node.op_type}): |mean| {np.abs(t.mean(1)).max():.6g}, "
          f"sigma {t.std(1).min():.3g}..{t.std(1).max():.3g}; ONNX Runtime vs float64 "
          f"{np.abs(got - exact).max():.3g}")
    for name, fn in ways.items():
        y = fn(rows, gamma.astype(f32), None if beta is None else beta.astype(f32), eps)
        print(f"    replay, {name}: vs ONNX Runtime {np.abs(y.astype(np.float64) - got).max():.3g}")


def main():
    pairs = [(sys.argv[i], sys.argv[i + 1]) for i in range(1, len(sys.argv) - 1, 2)] or \
            [(os.path.join(TT, m + ".onnx"), n) for m, n in DEFAULT]
    runner = R.ensure_ort()
    os.makedirs(R.CACHE, exist_ok=True)
    for path, node in pairs:
        with tempfile.TemporaryDirectory(prefix="transmuter-replay-") as work:
            replay(os.path.abspath(path), node, runner, work)


if __name__ == "__main__":
    main()
