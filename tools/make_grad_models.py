#!/usr/bin/python3
"""Writes the small float64 models of tests/data/grad that tests/test_grad.c
differentiates (tests/data/grad/README.md says what each is for):
  convnet.onnx: reflect pad, convolutions (grouped, strided, transposed), max and average
    pools, tanh, strided and reversed slices, concat, Gemm, softmax, LayerNormalization,
    a scalar output "score" (ReduceMean) and "features" (2, 5);
  nonzero.onnx: a data-dependent shape (NonZero), which a plan cannot hold;
  gradient-op/CASE: ai.onnx.preview.training Gradient nodes in the backend-test layout
    (model.onnx, test_data_set_0/{input,output}_K.pb), their expected outputs computed by
    PyTorch's autograd in float64, for `transmuter test-onnx --mode both`.
Weights and inputs are random with a fixed seed. Usage: tools/make_grad_models.py OUT_DIR"""
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


TRAINING = helper.make_opsetid("ai.onnx.preview.training", 1)


def write_case(root, name, graph, inputs, outputs):
    """A backend-layout case: the model and one data set."""
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), TRAINING])
    model.ir_version = 8
    d = os.path.join(root, name)
    os.makedirs(os.path.join(d, "test_data_set_0"), exist_ok=True)
    onnx.save(model, os.path.join(d, "model.onnx"))
    for kind, values in (("input", inputs), ("output", outputs)):
        for k, v in enumerate(values):
            t = numpy_helper.from_array(np.asarray(v, dtype=np.float64), f"{kind}_{k}")
            with open(os.path.join(d, "test_data_set_0", f"{kind}_{k}.pb"), "wb") as f:
                f.write(t.SerializeToString())


def gradient_cases(root):
    import torch
    n = helper.make_node
    vi = helper.make_tensor_value_info
    os.makedirs(root, exist_ok=True)
    x = rng.uniform(-1, 1, (3, 4))
    w = rng.uniform(-1, 1, (4, 5))
    z = rng.uniform(-1, 1, (5,))

    # y = sum(softmax(x w + z) * tanh(x w)): xs x and the initializer w, zs z.
    tx, tw, tz = (torch.tensor(a, requires_grad=True) for a in (x, w, z))
    h = tx @ tw
    y = (torch.softmax(h + tz, dim=-1) * torch.tanh(h)).sum()
    y.backward()
    g = helper.make_graph(
        [n("MatMul", ["x", "w"], ["h"]), n("Add", ["h", "z"], ["hz"]),
         n("Softmax", ["hz"], ["p"], axis=-1), n("Tanh", ["h"], ["t"]),
         n("Mul", ["p", "t"], ["pt"]), n("ReduceSum", ["pt"], ["y"], keepdims=0),
         n("Gradient", ["x", "w", "z"], ["dy_dx", "dy_dw"], domain="ai.onnx.preview.training",
           xs=["x", "w"], zs=["z"], y="y")],
        "gradient_of_matmul_softmax", [vi("x", D, [3, 4]), vi("w", D, [4, 5]), vi("z", D, [5])],
        [vi("y", D, []), vi("dy_dx", D, [3, 4]), vi("dy_dw", D, [4, 5])])
    write_case(root, "test_gradient_of_matmul_softmax", g, [x, w, z],
               [y.item(), tx.grad.numpy(), tw.grad.numpy()])

    # Gradient with respect to an intermediate H at a value given to the node (H_1), a
    # non-scalar y (the gradient of its sum), and an omitted first output.
    h1 = rng.uniform(-1, 1, (3, 5))
    th1, tb = torch.tensor(h1, requires_grad=True), torch.tensor(z, requires_grad=True)
    yy = torch.sigmoid(th1 * th1 + tb)
    yy.sum().backward()
    g = helper.make_graph(
        [n("MatMul", ["x", "w"], ["h"]), n("Mul", ["h", "h"], ["hh"]),
         n("Add", ["hh", "b"], ["s"]), n("Sigmoid", ["s"], ["yy"]),
         n("Gradient", ["h1", "b", "x"], ["", "dyy_db"], domain="ai.onnx.preview.training",
           xs=["h", "b"], zs=["x"], y="yy"),
         n("Gradient", ["h1", "b"], ["dyy_dh"], domain="ai.onnx.preview.training",
           xs=["h", "b"], y="yy")],
        "gradient_at_an_intermediate",
        [vi("x", D, [3, 4]), vi("h1", D, [3, 5])],
        [vi("dyy_db", D, [5]), vi("dyy_dh", D, [3, 5])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(z, "b")])
    write_case(root, "test_gradient_at_an_intermediate", g, [x, h1],
               [tb.grad.numpy(), th1.grad.numpy()])
    with open(os.path.join(root, "MANIFEST.tsv"), "w") as f:
        f.write("folder\tcase\trtol\tatol\n")
        for case in ("test_gradient_of_matmul_softmax", "test_gradient_at_an_intermediate"):
            f.write(f"gradient-op\t{case}\t1e-10\t1e-12\n")


def main():
    out = sys.argv[1]
    for name, model in (("convnet.onnx", convnet()), ("nonzero.onnx", nonzero())):
        model.ir_version = 8
        onnx.checker.check_model(model)
        onnx.save(model, os.path.join(out, name))
    gradient_cases(os.path.join(out, "gradient-op"))


if __name__ == "__main__":
    main()
