"""ONNX's own backend test runner (onnx.backend.test.BackendTest, Debian's python3-onnx)
over transmuter.backend, on the suite data the repository ships (tests/data/onnx-backend):
Debian strips the package's data folder, so the runner's loader is pointed at ours; node
cases are node/ plus node-post-1.22/. Prints one line per case that does not pass and
writes the outcome of every case as TSV (name, outcome, detail) when --tsv is given.

Two things of the runner are worked around, neither touching how it judges a case:
- NumPy 1.24 removed np.object, which its output comparison still reads: it is set back
  to `object` (what it was an alias of).
- Its loader needs a `real` kind (models downloaded from the network): an empty one.

Usage: onnx_backend_run.py [--kinds node,simple,...] [--eager] [--tsv FILE] [PATTERN...]
"""
import argparse
import functools
import os
import sys
import tempfile
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DATA = os.path.join(ROOT, "tests", "data", "onnx-backend")
KIND_FOLDERS = {"node": ["node", "node-post-1.22"], "simple": ["simple"],
                "pytorch-converted": ["pytorch-converted"], "pytorch-operator": ["pytorch-operator"]}


def data_dir(tmp, kinds):
    """A folder in the loader's layout: a folder per kind of symlinks to our cases."""
    for kind in list(KIND_FOLDERS) + ["real"]:
        os.makedirs(os.path.join(tmp, kind))
    for kind in kinds:
        for folder in KIND_FOLDERS[kind]:
            src = os.path.join(DATA, folder)
            for case in sorted(os.listdir(src)):
                if os.path.isdir(os.path.join(src, case)):
                    os.symlink(os.path.join(src, case), os.path.join(tmp, kind, case))
    return tmp


def expected_failures():
    """Case names of tests/expected_failures.txt and their reasons."""
    out = {}
    with open(os.path.join(ROOT, "tests", "expected_failures.txt"), encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            key, _, reason = line.partition(" ")
            out[key.split("/")[-1].split(":")[0]] = reason.strip()
    return out


class Outcomes(unittest.TextTestResult):
    """Keeps each test's outcome by case name."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.outcomes = {}

    def _case(self, test):
        name = test.id().split(".")[-1]
        return name[:-len("_cpu")] if name.endswith("_cpu") else name

    def addSuccess(self, test):
        super().addSuccess(test)
        self.outcomes[self._case(test)] = ("pass", "")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self.outcomes[self._case(test)] = ("fail", str(err[1]).strip().split("\n")[0][:300])

    def addError(self, test, err):
        super().addError(test, err)
        self.outcomes[self._case(test)] = ("error", f"{err[0].__name__}: {str(err[1]).strip().splitlines()[0][:300] if str(err[1]).strip() else ''}")

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        if not test.id().endswith("_cuda"):
            self.outcomes[self._case(test)] = ("skip", reason)

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self.outcomes[self._case(test)] = ("xfail", str(err[1]).strip().split("\n")[0][:200])

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self.outcomes[self._case(test)] = ("xpass", "")


def run(kinds, eager=False, patterns=(), stream=None):
    """Runs the runner; returns {case: (outcome, detail)}."""
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if not hasattr(np, "object"):
            np.object = object
    import onnx.backend.test.runner as runner_mod
    from onnx.backend.test.loader import load_model_tests
    import transmuter.backend as tb

    class Backend(tb.TransmuterBackend):
        @classmethod
        def prepare(cls, model, device="CPU", **kw):
            return super().prepare(model, device, eager=eager, **kw)

    with tempfile.TemporaryDirectory() as tmp:
        runner_mod.load_model_tests = functools.partial(load_model_tests, data_dir(tmp, kinds))
        bt = runner_mod.Runner(Backend, __name__)
        for p in patterns:
            bt.include(p)
        for name in expected_failures():
            bt.xfail(f"^{name}_cpu$")
        # (the runner's own test_suite sorts classes, which Python 3 refuses)
        suite = unittest.TestSuite()
        for _, case in sorted(bt.test_cases.items()):
            suite.addTests(unittest.defaultTestLoader.loadTestsFromTestCase(case))
        res = unittest.TextTestRunner(stream=stream or open(os.devnull, "w"), resultclass=Outcomes,
                                      verbosity=0).run(suite)
    return {k: v for k, v in res.outcomes.items() if v[1] != "no matched include pattern"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kinds", default="node")
    ap.add_argument("--eager", action="store_true")
    ap.add_argument("--tsv")
    ap.add_argument("patterns", nargs="*")
    a = ap.parse_args()
    outcomes = run(a.kinds.split(","), a.eager, a.patterns)
    counts = {}
    for name, (o, why) in sorted(outcomes.items()):
        counts[o] = counts.get(o, 0) + 1
        if o not in ("pass", "xfail"):
            print(f"{o.upper()} {name}: {why}")
    if a.tsv:
        with open(a.tsv, "w", encoding="utf-8") as f:
            for name, (o, why) in sorted(outcomes.items()):
                f.write(f"{name}\t{o}\t{why}\n")
    print(", ".join(f"{v} {k}" for k, v in sorted(counts.items())))


if __name__ == "__main__":
    main()
