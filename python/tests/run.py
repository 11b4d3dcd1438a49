"""Runs the binding's test modules (python/tests/test_*.py, or those named) with unittest
and ends with the line tests/run.sh reads: "N passed, N failed, N skipped".
Usage: run.py [MODULE...]   (the package comes from PYTHONPATH: build/python)"""
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def main(names):
    if not names:
        names = sorted(f[:-3] for f in os.listdir(HERE) if f.startswith("test_") and f.endswith(".py"))
    suite = unittest.defaultTestLoader.loadTestsFromNames(names)
    result = unittest.TextTestRunner(verbosity=2, stream=sys.stdout).run(suite)
    # a test with failing subtests counts once
    failed_ids = {t.id().split(" ")[0] for t, _ in result.failures + result.errors}
    failed = len(failed_ids) + len(result.unexpectedSuccesses)
    for test, why in result.skipped:
        print(f"skipped {test.id()}: {why}")
    passed = result.testsRun - failed - len(result.skipped)
    print(f"{passed} passed, {failed} failed, {len(result.skipped)} skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
