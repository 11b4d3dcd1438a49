#!/usr/bin/python3
"""Rewrites an ONNX model computing in float32 to compute in float64: initializers,
Constant values, Cast targets, and the graph's declared types. For tests that need
double precision end to end (finite differences through a whole model); not a general
converter (attributes holding float tensors of other ops are converted, subgraphs are
not). Usage: tools/onnx_to_f64.py IN.onnx OUT.onnx"""
import sys

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper


def to_f64(t):
    if t.data_type != TensorProto.FLOAT:
        return t
    arr = numpy_helper.to_array(t).astype(np.float64)
    return numpy_helper.from_array(arr, t.name)


def retype(values):
    for v in values:
        tt = v.type.tensor_type
        if tt.elem_type == TensorProto.FLOAT:
            tt.elem_type = TensorProto.DOUBLE


def main():
    model = onnx.load(sys.argv[1])
    g = model.graph
    inits = [to_f64(t) for t in g.initializer]
    del g.initializer[:]
    g.initializer.extend(inits)
    for node in g.node:
        for a in node.attribute:
            if a.type == onnx.AttributeProto.TENSOR:
                a.t.CopyFrom(to_f64(a.t))
            if node.op_type == "Cast" and a.name == "to" and a.i == TensorProto.FLOAT:
                a.i = TensorProto.DOUBLE
    retype(g.input)
    retype(g.output)
    retype(g.value_info)
    onnx.save(model, sys.argv[2])


if __name__ == "__main__":
    main()
