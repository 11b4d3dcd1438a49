# A copy of a model whose LayerNormalization and SkipLayerNormalization nodes compute in
# float64 (Cast, then ReduceMean, Sub, Mul, Sqrt, Div in double, Cast back): ONNX Runtime
# run on it gives a reference in which only its normalisations are made exact (cases
# gpt2_attention_past and mha_skip_layer_norm, see ../README.md). Opsets before 18 (axes as
# attributes); nodes whose mean/inv_std outputs are used are left alone.
# /usr/bin/python3 f64_norms.py IN.onnx OUT.onnx
import sys
import onnx, numpy as np
from onnx import helper as h, numpy_helper as nh, TensorProto as T

def main():
    m = onnx.load(sys.argv[1])
    g = m.graph
    used = {i for n in g.node for i in n.input} | {o.name for o in g.output}
    nodes, k = [], 0
    for n in g.node:
        skip = n.op_type == "SkipLayerNormalization" and n.domain == "com.microsoft"
        if not (skip or (n.op_type == "LayerNormalization" and n.domain in ("", "ai.onnx"))):
            nodes.append(n)
            continue
        if any(o in used for o in n.output[1:3] if o):
            nodes.append(n)
            continue
        k += 1
        p = f"f64n{k}_"
        a = {x.name: h.get_attribute_value(x) for x in n.attribute}
        eps = a.get("epsilon", 1e-12 if skip else 1e-5)
        axis = a.get("axis", -1)
        ins = list(n.input) + [""] * 5
        x = ins[0]
        if skip:                      # input + skip (+ bias) in float, as the op's output 3
            nodes.append(h.make_node("Add", [ins[0], ins[1]], [p + "s"]))
            x = p + "s"
            if ins[4]:
                nodes.append(h.make_node("Add", [x, ins[4]], [p + "sb"]))
                x = p + "sb"
            if len(n.output) > 3 and n.output[3]:
                nodes.append(h.make_node("Identity", [x], [n.output[3]]))
            gamma, beta = ins[2], ins[3]
        else:
            gamma, beta = ins[1], ins[2]
        c = lambda name, src: nodes.append(h.make_node("Cast", [src], [p + name], to=T.DOUBLE))
        c("x", x)
        c("g", gamma)
        nodes += [h.make_node("ReduceMean", [p + "x"], [p + "m"], axes=[axis]),
                  h.make_node("Sub", [p + "x", p + "m"], [p + "d"]),
                  h.make_node("Mul", [p + "d", p + "d"], [p + "d2"]),
                  h.make_node("ReduceMean", [p + "d2"], [p + "v"], axes=[axis])]
        g.initializer.append(nh.from_array(np.array(eps, np.float64), p + "eps"))
        nodes += [h.make_node("Add", [p + "v", p + "eps"], [p + "ve"]),
                  h.make_node("Sqrt", [p + "ve"], [p + "sd"]),
                  h.make_node("Div", [p + "d", p + "sd"], [p + "z"]),
                  h.make_node("Mul", [p + "z", p + "g"], [p + "zg"])]
        y = p + "zg"
        if beta:
            c("b", beta)
            nodes.append(h.make_node("Add", [y, p + "b"], [p + "y"]))
            y = p + "y"
        nodes.append(h.make_node("Cast", [y], [n.output[0]], to=T.FLOAT))
    del g.node[:]
    g.node.extend(nodes)
    onnx.save(m, sys.argv[2])
    print(f"{k} normalisations in float64")

main()
