"""Gradients and fine-tuning from Python: a value-and-gradient plan against central finite
differences (the float64 BERT of tests/data/grad), AdamW steps lowering the loss, the
parameters seen in place by runs, saving the model and the optimizer state."""
import os
import tempfile
import unittest

import numpy as np

import transmuter
from common import DATA

MODEL = os.path.join(DATA, "grad", "bert-seqcls-f64.onnx")


def batch():
    ids = np.array([[1, 5, 9, 13, 2], [1, 7, 3, 2, 0]], dtype=np.int64)
    return {"input_ids": ids, "attention_mask": (ids != 0).astype(np.int64),
            "token_type_ids": np.zeros_like(ids), "target": np.array([2, 0], dtype=np.int64)}


class TestTrain(unittest.TestCase):
    def test_gradient_matches_finite_differences(self):
        m = transmuter.Model(MODEL, trainable=["*classifier*"])
        feed = batch()
        g = m.value_and_grad(feed, loss="cross_entropy")
        self.assertTrue(all("classifier" in n for n in g.param_names))
        loss, grads = g(feed)
        name = g.param_names[0]
        p = m.params[name]          # the model's own storage: written in place
        flat, gflat = p.reshape(-1), grads[name].reshape(-1)
        for i in (0, flat.size // 2, flat.size - 1):
            keep = flat[i]
            flat[i] = keep + 1e-5
            up, _ = g(feed)
            flat[i] = keep - 1e-5
            down, _ = g(feed)
            flat[i] = keep
            self.assertAlmostEqual((up - down) / 2e-5, gflat[i], delta=1e-6 + 1e-5 * abs(gflat[i]))
        self.assertEqual(g(feed)[0], loss)

    def test_adamw_lowers_the_loss_and_saves(self):
        m = transmuter.Model(MODEL, trainable=True)
        feed = batch()
        g = m.value_and_grad(feed, loss="cross_entropy")
        opt = transmuter.Optimizer(m, "adamw", lr=1e-2, weight_decay=0.0)
        first, grads = g(feed)
        for _ in range(5):
            opt.step(grads)
            loss, grads = g(feed)
        self.assertLess(loss, first)
        self.assertEqual(opt.step_count, 5)
        self.assertGreater(opt.grad_norm, 0)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "tuned.onnx")
            m.save(path)
            back = transmuter.Model(path, trainable=True)
            for n, a in m.params.items():
                self.assertEqual(back.params[n].tobytes(), a.tobytes(), n)
            run = {k: v for k, v in feed.items() if k != "target"}
            self.assertEqual(back.run(run)["logits"].tobytes(), m.run(run)["logits"].tobytes())
            state = os.path.join(tmp, "adamw.state")
            opt.save_state(state)
            again = transmuter.Optimizer(m, "adamw", lr=1e-2, weight_decay=0.0)
            again.load_state(state)
            self.assertEqual(again.step_count, 5)
            with open(state, "r+b") as f:
                f.seek(40)
                f.write(b"\xff")
            with self.assertRaises(transmuter.Error):
                again.load_state(state)

    def test_errors(self):
        with self.assertRaises(transmuter.Error):
            transmuter.Model(MODEL, trainable=["no.such.weight"])
        m = transmuter.Model(MODEL, trainable=True)
        with self.assertRaises(transmuter.InvalidArgument):
            m.value_and_grad(batch(), loss="hinge")


if __name__ == "__main__":
    unittest.main()
