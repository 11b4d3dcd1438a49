"""InferenceSession on sequence and optional inputs and outputs (tm_model_run_values): lists
of arrays in and out, None for an empty optional, ONNX Runtime's type strings, both modes,
errors with the library's message, threads, IOBinding. Models are node cases of the
shipped ONNX backend data; expected values are computed here with NumPy."""
import os
import threading
import unittest

import numpy as np

import transmuter
from common import DATA

NODE = os.path.join(DATA, "onnx-backend", "node")


def session(case, eager=False):
    o = transmuter.SessionOptions()
    o.eager = eager
    return transmuter.InferenceSession(os.path.join(NODE, case, "model.onnx"), o)


class TestDescriptions(unittest.TestCase):
    def test_types(self):
        s = session("test_identity_opt")
        self.assertEqual(s.get_inputs()[0].type, "optional(seq(tensor(float)))")
        self.assertEqual(s.get_outputs()[0].type, "optional(seq(tensor(float)))")
        s = session("test_sequence_insert_at_back")
        self.assertEqual([a.type for a in s.get_inputs()], ["seq(tensor(int64))", "tensor(int64)"])
        self.assertIsNone(s.get_inputs()[0].shape)
        self.assertEqual(s.get_inputs()[1].shape, [3])
        s = session("test_optional_has_element_empty_optional_input")
        self.assertEqual(s.get_inputs()[0].type, "optional(tensor(int32))")
        self.assertEqual(s.get_outputs()[0].type, "tensor(bool)")


class ModesMixin:
    eager = False

    def s(self, case):
        return session(case, self.eager)

    def test_sequence_in_and_out(self):
        s = self.s("test_sequence_insert_at_back")
        seq = [np.arange(3, dtype=np.int64), np.arange(3, dtype=np.int64) * 7]
        x = np.array([5, 6, 7], dtype=np.int64)
        out, = s.run(None, {"sequence": seq, "tensor": x})
        self.assertIsInstance(out, list)
        self.assertEqual(len(out), 3)
        for got, want in zip(out, seq + [x]):
            self.assertEqual(got.dtype, np.int64)
            np.testing.assert_array_equal(got, want)
            self.assertFalse(got.flags.owndata)   # views the library's tensor, no copy
        # a tuple is a sequence too; an empty one takes the declared element type
        out, = s.run(["output_sequence"], {"sequence": (), "tensor": x})
        self.assertEqual(len(out), 1)
        np.testing.assert_array_equal(out[0], x)

    def test_sequence_out(self):
        s = self.s("test_split_to_sequence_1")
        data = np.arange(18, dtype=np.float32).reshape(3, 6) * 0.5
        out, = s.run(None, {"data": data, "split": np.array(2, dtype=np.int64)})
        want = np.split(data, 3, axis=1)
        self.assertEqual(len(out), len(want))
        for got, w in zip(out, want):
            self.assertEqual(got.dtype, np.float32)
            np.testing.assert_array_equal(got, w)

    def test_optional_input(self):
        s = self.s("test_optional_has_element_empty_optional_input")
        for feed, want in (({"optional_input": None}, False), ({}, False),
                           ({"optional_input": np.array(4, dtype=np.int32)}, True)):
            with self.subTest(feed=list(feed.items())):
                out, = s.run(None, feed)
                self.assertEqual(out.dtype, np.bool_)
                self.assertEqual(bool(out), want)

    def test_optional_output(self):
        s = self.s("test_if_opt")
        empty, = s.run(None, {"cond": np.array(True)})
        self.assertIsNone(empty)
        seq, = s.run(None, {"cond": np.array(False)})
        self.assertIsInstance(seq, list)
        self.assertEqual([e.shape for e in seq], [(5,)])
        self.assertEqual(seq[0].dtype, np.float32)

    def test_optional_sequence_through(self):
        s = self.s("test_identity_opt")
        seq = [np.linspace(0, 1, 5, dtype=np.float32), np.full(5, -2, dtype=np.float32)]
        out, = s.run(None, {"opt_in": seq})
        for got, want in zip(out, seq):
            np.testing.assert_array_equal(got, want)
        self.assertIsNone(s.run(None, {"opt_in": None})[0])

    def test_errors(self):
        s = self.s("test_identity_opt")
        with self.assertRaises(transmuter.DtypeError) as e:
            s.run(None, {"opt_in": [np.zeros(5, dtype=np.int64)]})
        self.assertIn("int64", str(e.exception))
        self.assertIn("float32", str(e.exception))
        with self.assertRaises(transmuter.DtypeError) as e:
            s.run(None, {"opt_in": np.zeros(5, dtype=np.float32)})
        self.assertIn("sequence", str(e.exception))
        self.assertEqual(e.exception.value, "opt_in")
        s = self.s("test_sequence_insert_at_back")
        with self.assertRaises(transmuter.InvalidArgument) as e:
            s.run(None, {"sequence": None, "tensor": np.zeros(3, dtype=np.int64)})
        self.assertIn("not optional", str(e.exception))
        with self.assertRaises(transmuter.NotFound):
            s.run(None, {"sequence": [], "tensr": np.zeros(3, dtype=np.int64)})

    def test_threads(self):
        s = self.s("test_sequence_insert_at_back")
        errors, results = [], {}

        def work(k):
            try:
                for i in range(20):
                    seq = [np.full(3, k * 100 + i, dtype=np.int64)]
                    out, = s.run(None, {"sequence": seq, "tensor": np.full(3, -k, dtype=np.int64)})
                    results[(k, i)] = [int(o[0]) for o in out]
            except Exception as e:   # reported below
                errors.append(e)

        ts = [threading.Thread(target=work, args=(k,)) for k in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        self.assertEqual(errors, [])
        self.assertEqual(results, {(k, i): [k * 100 + i, -k] for k in range(4) for i in range(20)})

    def test_iobinding(self):
        s = self.s("test_sequence_insert_at_back")
        b = s.io_binding()
        b.bind_cpu_input("sequence", [np.ones(3, dtype=np.int64)])
        b.bind_cpu_input("tensor", np.zeros(3, dtype=np.int64))
        b.bind_output("output_sequence")
        s.run_with_iobinding(b)
        out, = b.get_outputs()
        self.assertEqual([list(o) for o in out], [[1, 1, 1], [0, 0, 0]])
        self.assertEqual([list(o) for o in b.copy_outputs_to_cpu()[0]], [[1, 1, 1], [0, 0, 0]])
        with self.assertRaises(transmuter.InvalidArgument):
            b.bind_output("output_sequence", array=np.zeros(3, dtype=np.int64)[::2])
        b.bind_output("output_sequence", array=np.zeros(3, dtype=np.int64))
        with self.assertRaises(transmuter.Unsupported):
            s.run_with_iobinding(b)


class TestCompiled(ModesMixin, unittest.TestCase):
    eager = False


class TestEager(ModesMixin, unittest.TestCase):
    eager = True


if __name__ == "__main__":
    unittest.main()
