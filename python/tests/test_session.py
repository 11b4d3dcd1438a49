"""InferenceSession: the tiny Hugging Face exports give the CLI's outputs bit for bit
(compiled and eager), descriptions, errors as exceptions, no copies, IOBinding, threads."""
import glob
import os
import tempfile
import threading
import unittest

import numpy as np

import transmuter
from common import DATA, cli

TINY = os.path.join(DATA, "tiny")


def tiny_cases():
    """(model path, case folder) of every tiny export with ONNX Runtime's reference."""
    out = []
    for cases in sorted(glob.glob(os.path.join(TINY, "*", "*.cases"))):
        model = cases[:-len(".cases")] + ".onnx"
        for case in sorted(glob.glob(os.path.join(cases, "*", ""))):
            out.append((model, case.rstrip("/")))
    return out


def feed_of(session, inputs_dir):
    return {a.name: np.load(os.path.join(inputs_dir, a.name + ".npy")) for a in session.get_inputs()}


class TestBitForBit(unittest.TestCase):
    """Every output equals `transmuter run`'s .npy: same dtype, shape and bytes."""

    def check(self, eager):
        cases = tiny_cases()
        self.assertGreater(len(cases), 30)
        opts = transmuter.SessionOptions()
        opts.eager = eager
        with tempfile.TemporaryDirectory() as tmp:
            for model, case in cases:
                label = f"{os.path.relpath(model, TINY)} [{os.path.basename(case)}]"
                with self.subTest(label):
                    out = os.path.join(tmp, "out")
                    args = ["run", model, "--inputs", os.path.join(case, "inputs"), "--out", out]
                    cli(*(args + (["--eager"] if eager else [])))
                    s = transmuter.InferenceSession(model, opts)
                    got = s.run(None, feed_of(s, os.path.join(case, "inputs")))
                    for arg, g in zip(s.get_outputs(), got):
                        want = np.load(os.path.join(out, arg.name + ".npy"))
                        self.assertEqual(g.dtype, want.dtype, arg.name)
                        self.assertEqual(g.shape, want.shape, arg.name)
                        self.assertEqual(g.tobytes(), want.tobytes(), arg.name)
                    for f in glob.glob(os.path.join(out, "*")):
                        os.remove(f)

    def test_compiled(self):
        self.check(eager=False)

    def test_eager(self):
        self.check(eager=True)


BERT = os.path.join(TINY, "bert", "model.onnx")
BERT_IN = os.path.join(TINY, "bert", "model.cases", "default", "inputs")


class TestSession(unittest.TestCase):
    def setUp(self):
        self.s = transmuter.InferenceSession(BERT)
        self.feed = feed_of(self.s, BERT_IN)

    def test_describes_inputs_and_outputs(self):
        ins, outs = self.s.get_inputs(), self.s.get_outputs()
        self.assertEqual([a.name for a in ins], ["input_ids", "attention_mask", "token_type_ids"])
        self.assertEqual(ins[0].type, "tensor(int64)")
        self.assertEqual(ins[0].shape, ["batch_size", "sequence_length"])
        self.assertEqual(outs[0].type, "tensor(float)")
        self.assertEqual(outs[0].shape, ["batch_size", "sequence_length", 32])
        self.assertEqual(self.s.get_providers(), ["CPUExecutionProvider"])

    def test_matches_onnx_runtime(self):
        ref = np.load(os.path.join(TINY, "bert", "model.cases", "default", "ort", "last_hidden_state.npy"))
        got, = self.s.run(["last_hidden_state"], self.feed)
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)

    def test_nbits_int8(self):
        """The tiny BERT's q4 export leaves accuracy_level unset: nbits_int8 = 1 takes the
        int8-activation kernels (close to, not equal to, the f32 path), -1 equals the default."""
        q4 = os.path.join(TINY, "bert", "model_q4.onnx")
        runs = {}
        for v in (0, 1, -1):
            o = transmuter.SessionOptions()
            o.nbits_int8 = v
            s = transmuter.InferenceSession(q4, sess_options=o)
            runs[v], = s.run(["last_hidden_state"], self.feed)
        self.assertEqual(runs[-1].tobytes(), runs[0].tobytes())
        self.assertNotEqual(runs[1].tobytes(), runs[0].tobytes())
        np.testing.assert_allclose(runs[1], runs[0], rtol=5e-2, atol=5e-2)
        o = transmuter.SessionOptions()
        o.nbits_int8 = 2
        with self.assertRaises(ValueError):
            transmuter.InferenceSession(q4, sess_options=o)

    def test_from_bytes(self):
        with open(BERT, "rb") as f:
            s = transmuter.InferenceSession(f.read())
        self.assertEqual(s.run(None, self.feed)[0].tobytes(), self.s.run(None, self.feed)[0].tobytes())

    def test_outputs_view_the_library_memory(self):
        out, = self.s.run(None, self.feed)
        self.assertFalse(out.flags.owndata)   # a view of the tm_tensor, not a copy
        self.assertTrue(out.flags.writeable and out.flags.c_contiguous)
        base = out
        while isinstance(base, np.ndarray) and base.base is not None:
            base = base.base
        if isinstance(base, memoryview):
            base = base.obj
        self.assertEqual(type(base).__name__, "Tensor")

    def test_iobinding_writes_in_place(self):
        b = self.s.io_binding()
        for k, v in self.feed.items():
            b.bind_cpu_input(k, v)
        dest = np.zeros((2, 7, 32), np.float32)
        b.bind_output("last_hidden_state", array=dest)
        self.s.run_with_iobinding(b)
        self.assertIs(b.get_outputs()[0], dest)
        self.assertEqual(dest.tobytes(), self.s.run(None, self.feed)[0].tobytes())
        b.clear_binding_outputs()
        b.bind_output("last_hidden_state")
        self.s.run_with_iobinding(b)
        self.assertEqual(b.copy_outputs_to_cpu()[0].tobytes(), dest.tobytes())

    def test_non_contiguous_inputs(self):
        feed = {k: np.asfortranarray(np.repeat(v, 2, axis=0))[::2] for k, v in self.feed.items()}
        self.assertFalse(feed["input_ids"].flags.c_contiguous)
        self.assertEqual(self.s.run(None, feed)[0].tobytes(), self.s.run(None, self.feed)[0].tobytes())

    def test_errors_are_exceptions_with_our_message(self):
        with self.assertRaises(transmuter.IOFailure) as cm:
            transmuter.InferenceSession("/nonexistent/model.onnx")
        self.assertIn("/nonexistent/model.onnx", str(cm.exception))
        self.assertEqual(cm.exception.status, "i/o error")
        with self.assertRaises(transmuter.Error) as cm:
            self.s.run(None, {"input_ids": self.feed["input_ids"]})
        self.assertIn("attention_mask", str(cm.exception))
        bad = dict(self.feed, input_ids=self.feed["input_ids"].astype(np.float32))
        with self.assertRaises(transmuter.Error) as cm:
            self.s.run(None, bad)
        self.assertTrue(str(cm.exception))
        with self.assertRaises(transmuter.NotFound):
            self.s.run(["nope"], self.feed)
        with self.assertRaises(transmuter.ParseError):
            transmuter.InferenceSession(b"not a model")
        with self.assertRaises(transmuter.InvalidArgument):
            transmuter.InferenceSession(BERT, providers=["CUDAExecutionProvider"])

    def test_threads_share_a_session(self):
        want = self.s.run(None, self.feed)[0].tobytes()
        results, errors = [], []

        def work():
            try:
                for _ in range(20):
                    results.append(self.s.run(None, self.feed)[0].tobytes())
            except Exception as e:  # reported below
                errors.append(e)
        ts = [threading.Thread(target=work) for _ in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        self.assertEqual(errors, [])
        self.assertEqual(len(results), 80)
        self.assertTrue(all(r == want for r in results))

    def test_plan_cache_serves_sizes(self):
        for n in (3, 4, 5, 6):
            feed = {k: v[:, :n] for k, v in self.feed.items()}
            self.assertEqual(self.s.run(None, feed)[0].shape, (2, n, 32))
        st = self.s.plan_stats()
        self.assertEqual(st["runs"], 4)
        self.assertLess(st["plans"], 4)

    def test_string_tensors(self):
        path = os.path.join(DATA, "onnx-backend", "node", "test_string_concat", "model.onnx")
        if not os.path.exists(path):
            self.skipTest("no string case")
        s = transmuter.InferenceSession(path)
        names = [a.name for a in s.get_inputs()]
        x = np.array(["abc", "d"], dtype=object)
        y = np.array(["1", "é2"], dtype=object)
        out, = s.run(None, dict(zip(names, (x, y))))
        self.assertEqual(list(out), ["abc1", "dé2"])


if __name__ == "__main__":
    unittest.main()
