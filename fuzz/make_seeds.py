#!/usr/bin/python3
"""Writes the seed models of fuzz_external (fuzz/seeds/external/*.onnx): one initializer
with external data pointing at each entry of the folder fuzz_external.c makes (inside,
outside, through symlinks, a FIFO, ONNX Runtime's in-memory marker), with offsets and
lengths in and out of range. Not a test: the fuzzer mutates these.
Usage: /usr/bin/python3 fuzz/make_seeds.py (needs Debian's python3-onnx)."""
import os
import onnx
from onnx import TensorProto, helper

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "seeds", "external")


def model(location, n=16, offset=None, length=None, dtype=TensorProto.FLOAT, extra=None):
    w = TensorProto()
    w.name = "w"
    w.data_type = dtype
    w.dims.append(n)
    w.data_location = TensorProto.EXTERNAL
    entries = [("location", location)]
    if offset is not None:
        entries.append(("offset", str(offset)))
    if length is not None:
        entries.append(("length", str(length)))
    entries += extra or []
    for k, v in entries:
        e = w.external_data.add()
        e.key = k
        e.value = v
    node = helper.make_node("Identity", ["w"], ["y"])
    graph = helper.make_graph([node], "g", [], [helper.make_tensor_value_info("y", dtype, [n])],
                              initializer=[w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


CASES = {
    "inside": model("weights.bin"),
    "inside_offset": model("weights.bin", offset=64, length=64),
    "inside_end": model("weights.bin", n=1024, offset=0, length=4096),
    "past_end": model("weights.bin", n=16, offset=4090, length=64),
    "huge_offset": model("weights.bin", offset=18446744073709551615, length=64),
    "bad_length": model("weights.bin", length=65),
    "sub": model("sub/w.bin", n=64),
    "sub_dotdot": model("sub/../weights.bin"),
    "backslash": model("sub\\w.bin", n=64),
    "empty_file": model("empty.bin", n=0),
    "empty_file_nonzero": model("empty.bin"),
    "missing": model("no_such.bin"),
    "folder": model("sub"),
    "fifo": model("fifo"),
    "dotdot": model("../secret.bin"),
    "absolute": model("/etc/passwd"),
    "link_out": model("link_out"),
    "link_in": model("link_in"),
    "dir_out": model("dir_out/secret.bin"),
    "link_abs": model("link_abs"),
    "link_loop": model("loop_a"),
    "ort_mem_addr": model("*/_ORT_MEM_ADDR_/*", offset=140737488355328, length=64),
    "int4": model("weights.bin", n=7, dtype=22, length=4),
    "string": model("weights.bin", dtype=TensorProto.STRING),
    "checksum": model("weights.bin", extra=[("checksum", "0" * 40)]),
}


def main():
    os.makedirs(OUT, exist_ok=True)
    for name, m in CASES.items():
        with open(os.path.join(OUT, name + ".onnx"), "wb") as f:
            f.write(m.SerializeToString())


if __name__ == "__main__":
    main()
