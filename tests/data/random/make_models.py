#!/usr/bin/python3
"""Writes the small random-operator models of tests/test_random_ops.c into this folder:
each op with and without a seed attribute. Needs Debian's python3-onnx. The models hold
no data: their inputs are made by the test."""
import os
from onnx import TensorProto as T, helper as h, save

HERE = os.path.dirname(os.path.abspath(__file__))


def model(name, nodes, inputs, outputs, opset=15):
    g = h.make_graph(nodes, name, inputs, outputs)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)], producer_name="transmuter-tests")
    m.ir_version = 8
    save(m, os.path.join(HERE, name + ".onnx"))


def vi(name, dt, shape):
    return h.make_tensor_value_info(name, dt, shape)


for seeded in (0, 1):
    sfx = "_seeded" if seeded else ""
    seed = {"seed": 7.0} if seeded else {}
    iseed = {"seed": 7} if seeded else {}
    model("bernoulli" + sfx, [h.make_node("Bernoulli", ["p"], ["y"], **seed)],
          [vi("p", T.FLOAT, ["n"])], [vi("y", T.FLOAT, ["n"])])
    model("dropout" + sfx,
          [h.make_node("Dropout", ["x", "ratio", "training_mode"], ["y", "mask"], **iseed)],
          [vi("x", T.FLOAT, ["n"]), vi("ratio", T.FLOAT, []), vi("training_mode", T.BOOL, [])],
          [vi("y", T.FLOAT, ["n"]), vi("mask", T.BOOL, ["n"])], opset=13)
    model("multinomial" + sfx,
          [h.make_node("Multinomial", ["logits"], ["k"], sample_size=20000, dtype=T.INT64, **seed)],
          [vi("logits", T.FLOAT, [2, 4])], [vi("k", T.INT64, [2, 20000])])
    model("random_normal_like" + sfx,
          [h.make_node("RandomNormalLike", ["x"], ["y"], mean=1.5, scale=2.0, **seed)],
          [vi("x", T.FLOAT, ["n"])], [vi("y", T.FLOAT, ["n"])])
    model("random_uniform" + sfx,
          [h.make_node("RandomUniform", [], ["y"], shape=[50000], low=-2.0, high=3.0,
                       dtype=T.DOUBLE, **seed),
           h.make_node("Identity", ["x"], ["x_out"])],
          [vi("x", T.FLOAT, [1])], [vi("y", T.DOUBLE, [50000]), vi("x_out", T.FLOAT, [1])])
