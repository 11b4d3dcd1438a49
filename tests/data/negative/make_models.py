#!/usr/bin/python3
"""Writes the hand-built hostile models of tests/data/negative/ and, for every model there
(these and the copies of ONNX Runtime's rejected test models in ort-testdata/), a folder
MODEL.inputs/ of zero-filled .npy inputs made from its input spec (symbolic dims 1), so
that `transmuter run` gets past reading inputs and meets the model's own problem.
Not a test: tests/negative.sh runs the models. Needs Debian's python3-onnx and numpy.
Usage: /usr/bin/python3 tests/data/negative/make_models.py"""
import glob
import os
import shutil

import numpy as np
import onnx
from onnx import TensorProto, helper

HERE = os.path.dirname(os.path.abspath(__file__))
F = TensorProto.FLOAT


def save(name, graph, functions=(), opsets=(("", 13),)):
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets],
                          functions=list(functions))
    m.ir_version = 8
    with open(os.path.join(HERE, name + ".onnx"), "wb") as f:
        f.write(m.SerializeToString())   # no checker: these models are wrong on purpose


def vec(name, n=2, t=F):
    return helper.make_tensor_value_info(name, t, [n])


def cycles():
    # A node that reads its own output.
    save("cycle_self", helper.make_graph(
        [helper.make_node("Add", ["x", "y"], ["y"], name="self_add")],
        "cycle_self", [vec("x")], [vec("y")]))
    # Two nodes feeding each other.
    save("cycle_two", helper.make_graph(
        [helper.make_node("Add", ["x", "b"], ["a"], name="node_a"),
         helper.make_node("Relu", ["a"], ["b"], name="node_b")],
        "cycle_two", [vec("x")], [vec("b")]))
    # Three nodes, written in a plausible order, closing a loop.
    save("cycle_three", helper.make_graph(
        [helper.make_node("Add", ["x", "c"], ["a"], name="node_a"),
         helper.make_node("Relu", ["a"], ["b"], name="node_b"),
         helper.make_node("Neg", ["b"], ["c"], name="node_c")],
        "cycle_three", [vec("x")], [vec("c")]))
    # A loop through a subgraph: the If's branch reads 'later', which reads the If.
    then_g = helper.make_graph([helper.make_node("Identity", ["later"], ["t"])], "then", [],
                               [vec("t")])
    else_g = helper.make_graph([helper.make_node("Identity", ["x"], ["e"])], "else", [],
                               [vec("e")])
    save("cycle_subgraph", helper.make_graph(
        [helper.make_node("If", ["cond"], ["if_out"], name="the_if", then_branch=then_g,
                          else_branch=else_g),
         helper.make_node("Relu", ["if_out"], ["later"], name="later_relu")],
        "cycle_subgraph", [vec("x"), helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
        [vec("later")]))


def missing_input():
    # MatMul with one input: the lowering meets an absent value and must fail, not read it.
    save("missing_input", helper.make_graph(
        [helper.make_node("MatMul", ["x"], ["y"], name="lonely_matmul")], "missing_input",
        [vec("x")], [vec("y")]))


def unsorted():
    # Acyclic but written backwards: loads (sorted at load) and runs, y = relu(-x).
    save("unsorted", helper.make_graph(
        [helper.make_node("Relu", ["a"], ["y"], name="second"),
         helper.make_node("Neg", ["x"], ["a"], name="first")],
        "unsorted", [vec("x")], [vec("y")]))
    d = os.path.join(HERE, "unsorted.expected")
    os.makedirs(d, exist_ok=True)
    np.save(os.path.join(d, "y.npy"), np.array([0, 2], dtype=np.float32))


def deep_nesting(levels=100):
    # If inside If inside If ... past the loader's bound of 64 nested subgraphs.
    g = helper.make_graph([helper.make_node("Identity", ["x"], ["o%d" % levels])], "leaf", [],
                          [vec("o%d" % levels)])
    for k in range(levels - 1, -1, -1):
        other = helper.make_graph([helper.make_node("Identity", ["x"], ["e%d" % k])], "e%d" % k,
                                  [], [vec("e%d" % k)])
        node = helper.make_node("If", ["cond"], ["o%d" % k], then_branch=g, else_branch=other)
        g = helper.make_graph([node], "g%d" % k, [], [vec("o%d" % k)])
    g.input.extend([vec("x"), helper.make_tensor_value_info("cond", TensorProto.BOOL, [])])
    g.name = "deep_if"
    save("deep_if", g)
    # A type nested as deep: sequence(sequence(... tensor)).
    t = helper.make_tensor_type_proto(F, [2])
    for _ in range(levels):
        t = helper.make_sequence_type_proto(t)
    x = helper.make_value_info("x", t)
    save("deep_type", helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "deep_type",
                                        [x], [helper.make_value_info("y", t)]))


def functions():
    ops = [("", 13), ("local", 1)]
    fops = [helper.make_opsetid("", 13), helper.make_opsetid("local", 1)]
    main = lambda name: helper.make_graph(
        [helper.make_node("F", ["x"], ["y"], domain="local")], name, [vec("x")], [vec("y")])
    f = helper.make_function("local", "F", ["a"], ["b"],
                             [helper.make_node("F", ["a"], ["b"], domain="local")], fops)
    save("function_recursive", main("function_recursive"), [f], ops)
    f = helper.make_function("local", "F", ["a"], ["b"],
                             [helper.make_node("G", ["a"], ["b"], domain="local")], fops)
    g = helper.make_function("local", "G", ["a"], ["b"],
                             [helper.make_node("Relu", ["a"], ["t"]),
                              helper.make_node("F", ["t"], ["b"], domain="local")], fops)
    save("function_mutual", main("function_mutual"), [f, g], ops)
    # F0 calls F1 twice, F1 calls F2 twice, ...: 30 levels inline to 2^30 nodes from a
    # file of a few kilobytes.
    fns = []
    for i in range(30):
        callee = "F%d" % (i + 1)
        fns.append(helper.make_function("local", "F%d" % i, ["a"], ["b"], [
            helper.make_node(callee, ["a"], ["t"], domain="local"),
            helper.make_node(callee, ["t"], ["b"], domain="local")], fops))
    fns.append(helper.make_function("local", "F30", ["a"], ["b"],
                                    [helper.make_node("Relu", ["a"], ["b"])], fops))
    save("function_bomb", helper.make_graph(
        [helper.make_node("F0", ["x"], ["y"], domain="local")], "function_bomb", [vec("x")],
        [vec("y")]), fns, ops)


def raw_initializer(name, dims, raw, dtype=F):
    t = TensorProto()
    t.name = name
    t.data_type = dtype
    t.dims.extend(dims)
    t.raw_data = raw
    return t


def sizes():
    def one(model, init):
        save(model, helper.make_graph([helper.make_node("Identity", ["w"], ["y"])], model, [],
                                      [vec("y", init.dims[0], init.data_type)], initializer=[init]))
    # dims whose product overflows 64 bits
    one("size_overflow", raw_initializer("w", [1 << 40, 1 << 40], b"\0" * 4))
    # 2^20 floats declared, 16 bytes present
    one("size_exceeds_data", raw_initializer("w", [1 << 20], b"\0" * 16))
    # typed data: 3 int64 values for 1000 elements
    t = helper.make_tensor("w", TensorProto.INT64, [3], [1, 2, 3])
    del t.dims[:]
    t.dims.append(1000)
    one("size_typed_count", t)
    # external data: 1024 floats wanted, the file holds 16 bytes
    ext = TensorProto()
    ext.name = "w"
    ext.data_type = F
    ext.dims.append(1024)
    ext.data_location = TensorProto.EXTERNAL
    for k, v in (("location", "size_external_short.bin"), ("offset", "0"), ("length", "4096")):
        e = ext.external_data.add()
        e.key, e.value = k, v
    one("size_external_short", ext)
    with open(os.path.join(HERE, "size_external_short.bin"), "wb") as f:
        f.write(b"\0" * 16)
    # external data through a symlink that negative.sh plants beside a copy of the model
    ext.external_data[0].value = "link_out.bin"
    ext.external_data[2].value = "16"
    del ext.dims[:]
    ext.dims.append(4)
    one("escape_symlink", ext)


NP = {TensorProto.FLOAT: np.float32, TensorProto.FLOAT16: np.float16, TensorProto.DOUBLE: np.float64,
      TensorProto.INT64: np.int64, TensorProto.INT32: np.int32, TensorProto.INT8: np.int8,
      TensorProto.UINT8: np.uint8, TensorProto.BOOL: np.bool_, TensorProto.STRING: np.str_,
      TensorProto.INT16: np.int16, TensorProto.UINT16: np.uint16}


def encode(name):
    ok = set(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")
    return "".join(chr(b) if b in ok else "%%%02X" % b for b in name.encode())


def make_inputs(path):
    m = onnx.load(path, load_external_data=False)
    inits = {i.name for i in m.graph.initializer}
    d = path[:-len(".onnx")] + ".inputs"
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    for vi in m.graph.input:
        tt = vi.type.tensor_type
        if vi.name in inits or vi.type.WhichOneof("value") != "tensor_type" or tt.elem_type not in NP:
            continue
        dims = [x.dim_value if x.HasField("dim_value") and x.dim_value >= 0 else 1
                for x in tt.shape.dim]
        np.save(os.path.join(d, encode(vi.name) + ".npy"), np.zeros(dims, dtype=NP[tt.elem_type]))


def main():
    cycles()
    missing_input()
    unsorted()
    deep_nesting()
    functions()
    sizes()
    for path in sorted(glob.glob(os.path.join(HERE, "*.onnx")) +
                       glob.glob(os.path.join(HERE, "ort-testdata", "*.onnx"))):
        try:
            make_inputs(path)
        except Exception as e:   # a model the onnx package cannot read: no inputs folder
            print("no inputs for %s: %s" % (os.path.basename(path), e))
    np.save(os.path.join(HERE, "unsorted.inputs", "x.npy"), np.array([1, -2], dtype=np.float32))


if __name__ == "__main__":
    main()
