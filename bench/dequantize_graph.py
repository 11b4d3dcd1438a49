#!/usr/bin/python3
"""A q4 export with its 4-bit weights dequantized in the graph, for the bench's
"q4 dequantized" cases: every com.microsoft MatMulNBits (4 bits, no g_idx, no bias)
becomes a MatMul whose weight is computed from the same packed nibbles by standard
ONNX operators (opset 14): BitShift and Sub split each byte into its two nibbles,
Concat and Reshape interleave them, Cast, (q - zero point) * scale per block, Transpose
to (K, N). The nibbles stay packed in the file; a runtime dequantizes them with the
graph, as a runtime without a 4-bit kernel would. One dequantization per weight, in
the main graph, shared by both branches of a merged decoder's If.
GatherBlockQuantized (the embedding) is left as it is.

Usage: dequantize_graph.py IN.onnx OUT.onnx   (Debian's python3-onnx and numpy)
"""
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def all_graphs(g):
    yield g
    for n in g.node:
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield from all_graphs(a.g)
            for sub in a.graphs:
                yield from all_graphs(sub)


def main(src, dst):
    model = onnx.load(src)
    main_graph = model.graph
    inits = {t.name: t for t in main_graph.initializer}
    made = {}          # packed weight name -> its dequantized (K, N) value
    prologue = []      # nodes added to the main graph, ahead of everything
    new_inits = []
    names = set(t.name for t in main_graph.initializer)

    def fresh(base):
        name, i = base, 0
        while name in names:
            i += 1
            name = f"{base}_{i}"
        names.add(name)
        return name

    def const(value, base):
        name = fresh(base)
        new_inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    four = None
    for g in all_graphs(main_graph):
        for node in g.node:
            if node.op_type != "MatMulNBits" or node.domain != "com.microsoft":
                continue
            at = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            if at.get("bits", 4) != 4 or len(node.input) > 4 or any(i not in inits for i in node.input[1:]):
                raise SystemExit(f"{node.name}: only 4-bit MatMulNBits with initializer weights, "
                                 "scales and zero points (no g_idx, no bias)")
            K, N, block = at["K"], at["N"], at["block_size"]
            b_name = node.input[1]
            if b_name not in made:
                packed = numpy_helper.to_array(inits[b_name])            # (N, blocks, block / 2)
                blocks = packed.shape[1]
                if blocks * block != K:
                    raise SystemExit(f"{node.name}: K {K} is not a whole number of blocks")
                scale = numpy_helper.to_array(inits[node.input[2]]).astype(np.float32).reshape(N, blocks, 1)
                if len(node.input) > 3 and node.input[3]:
                    zpp = numpy_helper.to_array(inits[node.input[3]]).reshape(N, -1)
                    zp = np.stack([zpp & 15, zpp >> 4], axis=-1).reshape(N, -1)[:, :blocks]
                else:
                    zp = np.full((N, blocks), 8, np.uint8)
                if four is None:
                    four = const(np.array(4, np.uint8), "dq_four")
                    axis3 = const(np.array([3], np.int64), "dq_axis3")
                base = b_name + "_dq"
                hi, hi_back, lo = fresh(base + "_hi"), fresh(base + "_hi4"), fresh(base + "_lo")
                lo3, hi3, pair = fresh(base + "_lo3"), fresh(base + "_hi3"), fresh(base + "_pair")
                q, qf, centred = fresh(base + "_q"), fresh(base + "_qf"), fresh(base + "_centred")
                w, wk, wt = fresh(base + "_w"), fresh(base + "_wk"), fresh(base + "_wt")
                shape3 = const(np.array([N, blocks, block], np.int64), base + "_shape3")
                shape2 = const(np.array([N, K], np.int64), base + "_shape2")
                zp_f = const(zp.astype(np.float32).reshape(N, blocks, 1), base + "_zero_points")
                scale_f = const(scale, base + "_scale")
                prologue += [
                    helper.make_node("BitShift", [b_name, four], [hi], direction="RIGHT"),
                    helper.make_node("BitShift", [hi, four], [hi_back], direction="LEFT"),
                    helper.make_node("Sub", [b_name, hi_back], [lo]),
                    helper.make_node("Unsqueeze", [lo, axis3], [lo3]),
                    helper.make_node("Unsqueeze", [hi, axis3], [hi3]),
                    helper.make_node("Concat", [lo3, hi3], [pair], axis=3),
                    helper.make_node("Reshape", [pair, shape3], [q]),
                    helper.make_node("Cast", [q], [qf], to=TensorProto.FLOAT),
                    helper.make_node("Sub", [qf, zp_f], [centred]),
                    helper.make_node("Mul", [centred, scale_f], [w]),
                    helper.make_node("Reshape", [w, shape2], [wk]),
                    helper.make_node("Transpose", [wk], [wt], perm=[1, 0]),
                ]
                made[b_name] = wt
            node.op_type, node.domain = "MatMul", ""
            del node.attribute[:]
            inp = [node.input[0], made[b_name]]
            del node.input[:]
            node.input.extend(inp)
    if not made:
        raise SystemExit("no MatMulNBits in " + src)
    main_graph.initializer.extend(new_inits)
    rest = list(main_graph.node)
    del main_graph.node[:]
    main_graph.node.extend(prologue + rest)
    # Initializers no node reads any more (the scales and zero points MatMulNBits took).
    used = set()
    for g in all_graphs(main_graph):
        for n in g.node:
            used.update(n.input)
    keep = [t for t in main_graph.initializer if t.name in used]
    del main_graph.initializer[:]
    main_graph.initializer.extend(keep)
    onnx.save(model, dst)
    print(f"{dst}: {len(made)} weights dequantized in the graph")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    main(sys.argv[1], sys.argv[2])
