#!/usr/bin/python3
"""Writes a copy of an ONNX model whose com.microsoft MatMulNBits nodes all carry
accuracy_level LEVEL (4: activations may be quantized to int8, as ONNX Runtime's MLAS
CompInt8 does; our --nbits-int8 kernels), so that both runtimes of a bench case run the
same 4-bit arithmetic. Weights and everything else are copied unchanged.
Usage: /usr/bin/python3 bench/accuracy_level.py IN.onnx OUT.onnx [LEVEL]"""
import sys
import onnx
from onnx import helper


def set_level(graph, level):
    """Sets the attribute on the graph's MatMulNBits nodes and those of its subgraphs (a
    merged decoder's are inside its If's branches); returns how many."""
    n = 0
    for node in graph.node:
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                n += set_level(a.g, level)
            elif a.type == onnx.AttributeProto.GRAPHS:
                n += sum(set_level(g, level) for g in a.graphs)
        if node.op_type != "MatMulNBits" or node.domain != "com.microsoft":
            continue
        kept = [a for a in node.attribute if a.name != "accuracy_level"]
        del node.attribute[:]
        node.attribute.extend(kept + [helper.make_attribute("accuracy_level", level)])
        n += 1
    return n


def main():
    src, dst = sys.argv[1], sys.argv[2]
    level = int(sys.argv[3]) if len(sys.argv) > 3 else 4
    m = onnx.load(src)
    n = set_level(m.graph, level)
    if n == 0:
        sys.exit(f"{src}: no com.microsoft MatMulNBits node")
    onnx.save(m, dst)
    print(f"{dst}: accuracy_level {level} on {n} MatMulNBits nodes")


if __name__ == "__main__":
    main()
