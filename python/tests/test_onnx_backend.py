"""ONNX's backend test runner (Debian's python3-onnx) over transmuter.backend must pass
every case `transmuter test-onnx` passes on the same data, in both modes, apart from two
gaps that are not ours to close here, each recognised by its cause:
- the runner cannot read the case's data: onnx 1.12 predates the 8-bit floats, 4- and
  2-bit integers and float4/float8e8m0 (element types 17 to 26), and its loader fails
  with KeyError before our backend is called;
- the case has sequence or optional inputs or outputs, which the public C API does not
  carry (test-onnx reaches them through internal entry points).
Expected failures are tests/expected_failures.txt's, marked xfail in the runner."""
import os
import re
import unittest

import onnx

import onnx_backend_run as obr
from common import DATA, cli, ROOT

NEW_TYPES = set(range(17, 27))


def elem_types(tp):
    k = tp.WhichOneof("value")
    if k == "tensor_type":
        return {tp.tensor_type.elem_type}
    if k in ("sequence_type", "optional_type"):
        return elem_types(getattr(tp, k).elem_type) | {-1}
    return set()


def case_types(name):
    for folder in obr.KIND_FOLDERS["node"]:
        path = os.path.join(DATA, "onnx-backend", folder, name, "model.onnx")
        if os.path.exists(path):
            g = onnx.load(path, load_external_data=False).graph
            out = set()
            for v in list(g.input) + list(g.output):
                out |= elem_types(v.type)
            return out
    return set()


def test_onnx_passes(mode):
    """Case names `transmuter test-onnx` passes on node + node-post-1.22 in mode."""
    folders = [os.path.join(DATA, "onnx-backend", f) for f in obr.KIND_FOLDERS["node"]]
    r = cli("test-onnx", *folders, "--mode", mode, "--expected-failures",
            os.path.join(ROOT, "tests", "expected_failures.txt"), check=False)
    failed = set(re.findall(r"^FAIL \S+/(\S+) ", r.stdout, re.M))
    skipped = set(re.findall(r"^SKIP \S+/(\S+) ", r.stdout, re.M))
    random = set(re.findall(r"^RANDOM \S+/(\S+) ", r.stdout, re.M))
    names = set()
    for f in folders:
        names |= {c for c in os.listdir(f) if os.path.isdir(os.path.join(f, c))}
    return names - failed - skipped - random, random


class TestOnnxBackendRunner(unittest.TestCase):
    def check(self, mode):
        ours, random = test_onnx_passes(mode)
        self.assertGreater(len(ours), 1700)
        outcomes = obr.run(["node"], eager=(mode == "eager"))
        gaps = {"runner-data": 0, "sequence/optional": 0}
        for name in sorted(ours):
            o, why = outcomes.get(name, ("missing", ""))
            if o == "pass":
                continue
            with self.subTest(name):
                types = case_types(name)
                if o == "error" and why.startswith("KeyError") and types & NEW_TYPES:
                    gaps["runner-data"] += 1
                elif o == "error" and "carries tensors only" in why and -1 in types:
                    gaps["sequence/optional"] += 1
                else:
                    self.fail(f"{name}: {o}: {why}")
        for name in random:   # values from numpy's generator: expected to fail, as in test-onnx
            self.assertIn(outcomes.get(name, ("missing",))[0], ("xfail", "error"), name)
        passed = sum(1 for o, _ in outcomes.values() if o == "pass")
        print(f"\n[{mode}] runner: {passed} pass of {len(outcomes)}; test-onnx passes {len(ours)} "
              f"(+{len(random)} random); gaps {gaps}")

    def test_node_compiled(self):
        self.check("plan")

    def test_node_eager(self):
        self.check("eager")

    def test_other_suites(self):
        outcomes = obr.run(["simple", "pytorch-converted", "pytorch-operator"])
        bad = {k: v for k, v in outcomes.items() if v[0] != "pass"}
        self.assertEqual(bad, {})
        self.assertGreater(len(outcomes), 130)


if __name__ == "__main__":
    unittest.main()
