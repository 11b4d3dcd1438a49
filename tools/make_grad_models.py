#!/usr/bin/python3
"""Writes the small float64 models of tests/data/grad that tests/test_grad.c
differentiates (tests/data/grad/README.md says what each is for):
  convnet.onnx: reflect pad, convolutions (grouped, strided, transposed), max and average
    pools, tanh, strided and reversed slices, concat, Gemm, softmax, LayerNormalization,
    a scalar output "score" (ReduceMean) and "features" (2, 5);
  nonzero.onnx: a data-dependent shape (NonZero), which a plan cannot hold.
Weights are random with a fixed seed. Usage: tools/make_grad_models.py OUT_DIR"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

D = TensorProto.DOUBLE
rng = np.random.default_rng(20240611)


def init(name, *shape, scale=0.3):
    return numpy_helper.from_array(rng.uniform(-scale, scale, shape).astype(np.float64), name)


def ints(name, values):
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


def convnet():
    n = helper.make_node
    nodes = [
        n("Pad", ["x", "pads"], ["p"], mode="reflect"),
        n("Conv", ["p", "w1", "b1"], ["c1"], kernel_shape=[3, 3]),
        n("Tanh", ["c1"], ["t1"]),
        n("MaxPool", ["t1"], ["m1"], kernel_shape=[2, 2], strides=[2, 2]),
        n("Conv", ["m1", "w2"], ["c2"], kernel_shape=[3, 3], group=2, pads=[1, 1, 1, 1]),
        n("AveragePool", ["c2"], ["a2"], kernel_shape=[3, 3], strides=[2, 2],
          pads=[1, 1, 1, 1], count_include_pad=0),
        n("ConvTranspose", ["a2", "w3", "b3"], ["u3"], kernel_shape=[3, 3], strides=[2, 2], group=2,
          pads=[1, 1, 1, 1], output_padding=[1, 1]),
        n("Slice", ["u3", "s_starts", "s_ends", "s_axes", "s_steps"], ["s1"]),
        n("Slice", ["u3", "r_starts", "r_ends", "r_axes", "r_steps"], ["s2"]),
        n("Concat", ["s1", "s2"], ["cat"], axis=2),
        n("Flatten", ["cat"], ["flat"], axis=1),
        n("Gemm", ["flat", "w4", "b4"], ["features"], transB=1),
        n("Softmax", ["features"], ["sm"], axis=-1),
        n("LayerNormalization", ["sm", "ln_scale", "ln_bias"], ["ln"], axis=-1, epsilon=1e-5),
        n("Mul", ["ln", "ln"], ["sq"]),
        n("ReduceMean", ["sq"], ["score"], keepdims=0),
    ]
    inits = [
        ints("pads", [0, 0, 1, 1, 0, 0, 1, 1]),
        init("w1", 4, 3, 3, 3), init("b1", 4),
        init("w2", 6, 2, 3, 3),
        init("w3", 6, 1, 3, 3), init("b3", 2),
        ints("s_starts", [1, 0]), ints("s_ends", [6, 6]), ints("s_axes", [2, 3]),
        ints("s_steps", [2, 1]),
        ints("r_starts", [5, 5]), ints("r_ends", [3, -100]), ints("r_axes", [2, 3]),
        ints("r_steps", [-1, -1]),
        init("w4", 5, 2 * 5 * 6), init("b4", 5),
        init("ln_scale", 5, scale=1.0), init("ln_bias", 5),
    ]
    g = helper.make_graph(
        nodes, "convnet", [helper.make_tensor_value_info("x", D, [2, 3, 10, 10])],
        [helper.make_tensor_value_info("score", D, []),
         helper.make_tensor_value_info("features", D, [2, 5])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def nonzero():
    n = helper.make_node
    nodes = [
        n("Mul", ["x", "w"], ["y"]),
        n("NonZero", ["x"], ["nz"]),
        n("Squeeze", ["nz", "axis0"], ["idx"]),
        n("Gather", ["y", "idx"], ["picked"], axis=0),
        n("ReduceSum", ["picked"], ["total"], keepdims=0),
    ]
    g = helper.make_graph(
        nodes, "nonzero", [helper.make_tensor_value_info("x", D, [4])],
        [helper.make_tensor_value_info("total", D, [])], [init("w", 4), ints("axis0", [0])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def main():
    out = sys.argv[1]
    for name, model in (("convnet.onnx", convnet()), ("nonzero.onnx", nonzero())):
        model.ir_version = 8
        onnx.checker.check_model(model)
        onnx.save(model, os.path.join(out, name))


if __name__ == "__main__":
    main()
