#!/usr/bin/python3
"""Small models for tests/test_write.c (the ONNX writer), written to tests/data/write/:

features.onnx      every place a tensor can hide: a raw_data initializer, one in float_data,
                   a sparse initializer, a Constant's tensor attribute, an If whose branch has
                   its own initializer, a model-local function, metadata and doc strings.
features_ext.onnx  the same with every tensor of 12 bytes or more in features_ext.onnx.data
                   (onnx's external-data writer, attribute tensors included).
int4.onnx          an int4 initializer (packed two per byte, odd count) feeding a Cast
                   (opset 21; made by hand, as this python3-onnx predates int4).
inputs/x.npy       the graph input of the features models.

Needs Debian's python3-onnx and python3-numpy; run only to regenerate the data:
    /usr/bin/python3 tests/gen_write_models.py tests/data/write
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def features_model():
    rng = np.random.default_rng(7)
    f32 = lambda *s: rng.standard_normal(s).astype(np.float32)
    W = numpy_helper.from_array(f32(3, 3), "W")
    B = helper.make_tensor("B", TensorProto.FLOAT, [3], f32(3).tolist())  # float_data
    S = helper.make_sparse_tensor(
        numpy_helper.from_array(np.array([0.5], dtype=np.float32), "S"),
        numpy_helper.from_array(np.array([1], dtype=np.int64), "S_indices"), [3])
    cond = numpy_helper.from_array(np.array(True), "cond")
    C = helper.make_node("Constant", [], ["C"], value=numpy_helper.from_array(f32(3), "C_value"))
    then_g = helper.make_graph(
        [helper.make_node("Add", ["h5", "T"], ["then_out"])], "then",
        [], [helper.make_tensor_value_info("then_out", TensorProto.FLOAT, [2, 3])],
        initializer=[numpy_helper.from_array(f32(3), "T")])
    else_g = helper.make_graph(
        [helper.make_node("Sub", ["h5", "T2"], ["else_out"])], "else",
        [], [helper.make_tensor_value_info("else_out", TensorProto.FLOAT, [2, 3])],
        initializer=[numpy_helper.from_array(f32(3), "T2")])
    addmul = helper.make_function(
        "local", "AddMul", ["a", "b"], ["c"],
        [helper.make_node("Add", ["a", "b"], ["s"]), helper.make_node("Mul", ["s", "a"], ["c"])],
        [helper.make_opsetid("", 17)])
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["h"]),
        helper.make_node("Add", ["h", "B"], ["h2"]),
        helper.make_node("Add", ["h2", "S"], ["h4"]),
        C,
        helper.make_node("Mul", ["h4", "C"], ["h5"]),
        helper.make_node("If", ["cond"], ["h6"], then_branch=then_g, else_branch=else_g),
        helper.make_node("AddMul", ["h6", "B"], ["y"], domain="local"),
    ]
    graph = helper.make_graph(
        nodes, "features", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        initializer=[W, B, cond], sparse_initializer=[S], doc_string="the writer's test graph")
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("local", 1)],
                              functions=[addmul], producer_name="gen_write_models",
                              producer_version="1", doc_string="a model for tests/test_write.c")
    model.ir_version = 8
    helper.set_model_props(model, {"purpose": "writer test", "owner": "transmuter"})
    onnx.checker.check_model(model)
    return model


def int4_model():
    values = np.array([-8, -3, 0, 1, 7, 5, -1], dtype=np.int8)  # 7: the last byte is half used
    nib = (values & 0xF).astype(np.uint8)
    nib = np.append(nib, 0)
    packed = (nib[0::2] | (nib[1::2] << 4)).astype(np.uint8)
    q = TensorProto(name="q", data_type=22, dims=[7], raw_data=packed.tobytes())
    node = helper.make_node("Cast", ["q"], ["y"], to=TensorProto.FLOAT)
    graph = helper.make_graph([node], "int4", [],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [7])],
                              initializer=[q])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    return model


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/data/write"
    os.makedirs(os.path.join(out, "inputs"), exist_ok=True)
    m = features_model()
    onnx.save(m, os.path.join(out, "features.onnx"))
    onnx.save_model(m, os.path.join(out, "features_ext.onnx"), save_as_external_data=True,
                    all_tensors_to_one_file=True, location="features_ext.onnx.data",
                    size_threshold=12, convert_attribute=True)
    onnx.checker.check_model(os.path.join(out, "features_ext.onnx"))
    with open(os.path.join(out, "int4.onnx"), "wb") as f:
        f.write(int4_model().SerializeToString())
    np.save(os.path.join(out, "inputs", "x.npy"),
            np.arange(6, dtype=np.float32).reshape(2, 3) / 4 - 0.5)


if __name__ == "__main__":
    main()
