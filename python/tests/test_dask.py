"""transmuter.dask on a distributed.LocalCluster of 2 worker processes (1 thread each) on
loopback: a bag, a dataframe Series and an array give, in order, what one process gives
with the same batches, and each worker process loads its pipeline or model once."""
import glob
import json
import os
import unittest

import numpy as np

from common import DATA

try:
    import dask.bag as db
    import dask.array as da
    import dask.dataframe as dd
    import pandas as pd
    from distributed import Client, LocalCluster
except ImportError:
    db = None

import transmuter
import transmuter.dask as tmd

PIPES = os.path.join(DATA, "pipelines")


def texts(n):
    words = []
    with open(os.path.join(PIPES, "minilm-embed.cases.jsonl"), encoding="utf-8") as f:
        for line in f:
            for x in json.loads(line)["inputs"]:
                for t in (x if isinstance(x, list) else [x]):
                    if isinstance(t, str):
                        words += t.split()
    return [" ".join(words[(i * 7 + k) % len(words)] for k in range(3 + i % 9)) for i in range(n)]


@unittest.skipIf(db is None, "python3-distributed (Dask) is not installed")
class TestDask(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                   host="127.0.0.1", dashboard_address=None)
        cls.client = Client(cls.cluster)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.cluster.close()

    def test_bag_embeddings_in_order_one_load_per_worker(self):
        xs = texts(48)
        repo = os.path.join(PIPES, "minilm-embed")
        bag = db.from_sequence(xs, partition_size=8)   # partitions of 8, batches of 4
        got = tmd.map_pipeline(bag, "feature-extraction", repo, batch_size=4,
                               pooling="mean", normalize=True).compute()
        want = tmd.run_pipeline_batches(xs, "feature-extraction", repo, batch_size=4,
                                        options={"pooling": "mean", "normalize": True})
        self.assertEqual(len(got), 48)
        for g, w in zip(got, want):
            self.assertEqual(g.tobytes(), w.tobytes())
        st = self.client.run(tmd.stats)
        self.assertEqual(len(st), 2)
        for s in st.values():
            self.assertNotEqual(s["pid"], os.getpid())
            self.assertLessEqual(sum(1 for k in s["keys"] if k == ("pipeline", "feature-extraction")), 1)
        self.assertGreaterEqual(sum(s["loads"] for s in st.values()), 1)

    def test_series_classification(self):
        xs = texts(20)
        repo = os.path.join(PIPES, "bert-sentiment")
        s = dd.from_pandas(pd.Series(xs, name="text"), npartitions=2)
        got = tmd.map_pipeline(s, "text-classification", repo, batch_size=5).compute()
        want = transmuter.pipeline("text-classification", repo)
        self.assertEqual(list(got.index), list(range(20)))
        for i in range(0, 20, 5):
            self.assertEqual(list(got.iloc[i:i + 5]), want(xs[i:i + 5]))

    def test_array_through_a_model(self):
        model = os.path.join(DATA, "tiny", "bert", "model.onnx")
        rng = np.random.default_rng(5)
        ids = rng.integers(0, 100, size=(12, 7)).astype(np.int64)
        arr = da.from_array(ids, chunks=(4, 7))
        extra = {"attention_mask": np.ones_like, "token_type_ids": np.zeros_like}
        got = tmd.map_model(arr, model, "input_ids", "last_hidden_state", (7, 32),
                            batch_size=2, extra_inputs=extra).compute()
        s = transmuter.InferenceSession(model)
        for i in range(0, 12, 2):
            b = ids[i:i + 2]
            want, = s.run(None, {"input_ids": b, "attention_mask": np.ones_like(b),
                                 "token_type_ids": np.zeros_like(b)})
            self.assertEqual(got[i:i + 2].tobytes(), want.tobytes())


if __name__ == "__main__":
    unittest.main()
