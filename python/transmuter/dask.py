"""transmuter.dask: a pipeline or a model over a Dask collection — a bag, an array, or a
dataframe's Series — with one pipeline (or model) per worker process, loaded by the first
task that needs it and kept for every later task there; each partition is run in batches;
results come back in the collection's order.

    import dask.bag as db
    from distributed import Client
    import transmuter.dask as tmd
    client = Client("tcp://scheduler:8786")      # or LocalCluster(n_workers=2, threads_per_worker=1)
    texts = db.from_sequence(sentences, npartitions=64)
    vectors = tmd.map_pipeline(texts, "feature-extraction", "/models/minilm",
                               batch_size=32, pooling="mean", normalize=True).compute()

On a real cluster the repository (a folder, or hf://OWNER/REPO with the Hub's cache) must
be readable by every worker under the same name; start workers with --nthreads 1 and give
the library its threads with threads= (the pipeline's load option), so that one worker
process runs one batch at a time on the cores it was given. Not a scheduler of its own:
Dask decides where partitions run.
"""
import os
import threading

import numpy as np

_loaded = {}            # per process: key -> Pipeline / InferenceSession
_loads = {"count": 0}
_lock = threading.Lock()


def _cached(key, make):
    with _lock:
        obj = _loaded.get(key)
        if obj is None:
            obj = make()
            _loaded[key] = obj
            _loads["count"] += 1
        return obj


def stats():
    """What this process has loaded: its pid, how many loads, and their keys (for
    client.run(transmuter.dask.stats) on the workers)."""
    with _lock:
        return {"pid": os.getpid(), "loads": _loads["count"], "keys": [k[:2] for k in _loaded]}


def _pipeline(task, repo, load):
    import transmuter
    key = ("pipeline", task, repo, tuple(sorted(load.items())))
    return _cached(key, lambda: transmuter.pipeline(task, repo, **load))


def _session(source, threads):
    import transmuter
    key = ("session", source, threads)

    def make():
        o = transmuter.SessionOptions()
        o.intra_op_num_threads = threads
        return transmuter.InferenceSession(source, o)
    return _cached(key, make)


def _split(result, n):
    """A batch call's result as n per-input results: a tensor result ({"_type": "Tensor"})
    becomes n arrays along its first axis, a list n items."""
    if isinstance(result, dict) and result.get("_type") == "Tensor":
        a = np.asarray(result["data"], dtype=np.float32).reshape(result["dims"])
        return list(a)
    if isinstance(result, list) and len(result) == n:
        return result
    raise ValueError(f"a batch of {n} inputs gave a result of another length")


def run_pipeline_batches(items, task, repo, batch_size=32, load=None, options=None):
    """The pipeline's result for each of items (a list), calling it on batch_size at a time
    in this process (the function every partition runs; usable without Dask)."""
    p = _pipeline(task, repo, dict(load or {}))
    out = []
    for i in range(0, len(items), batch_size):
        batch = list(items[i:i + batch_size])
        out += _split(p(batch, **(options or {})), len(batch))
    return out


def _bag_partition(part, task, repo, batch_size, load, options):
    return run_pipeline_batches(list(part), task, repo, batch_size, load, options)


def _series_partition(s, task, repo, batch_size, load, options):
    import pandas as pd
    return pd.Series(run_pipeline_batches(list(s), task, repo, batch_size, load, options),
                     index=s.index, name=s.name, dtype=object)


def map_pipeline(collection, task, repo, batch_size=32, load=None, **options):
    """The pipeline's result for every element of collection, as a collection of the same
    kind and order: a dask.bag.Bag of texts (or of a task's argument lists) gives a Bag of
    results; a dask.dataframe.Series a Series of results (object dtype). Tensor results
    (feature-extraction) become one NumPy vector per element. load: the pipeline's load
    options (dtype, threads, ...); options: the call's."""
    import dask.bag as db
    load = dict(load or {})
    if isinstance(collection, db.Bag):
        return collection.map_partitions(_bag_partition, task, repo, batch_size, load, options)
    import dask.dataframe as dd
    if isinstance(collection, dd.Series):
        return collection.map_partitions(_series_partition, task, repo, batch_size, load, options,
                                         meta=(collection.name, object))
    raise TypeError("map_pipeline takes a dask Bag or a dask dataframe Series "
                    f"(got {type(collection).__name__}); use map_model for arrays")


def _array_block(block, source, input_name, output_name, batch_size, threads, extra):
    s = _session(source, threads)
    outs = []
    for i in range(0, block.shape[0], batch_size):
        feed = {input_name: block[i:i + batch_size]}
        for name, make in extra.items():
            feed[name] = make(feed[input_name])
        outs.append(s.run([output_name], feed)[0])
    return np.concatenate(outs, axis=0) if outs else np.zeros((0,), np.float32)


def map_model(array, source, input_name, output_name, out_shape, dtype=np.float32,
              batch_size=32, threads=1, extra_inputs=None):
    """A model's output over a dask.array.Array split along axis 0 only: each block is run
    in batches of batch_size rows through one InferenceSession per worker process.
    out_shape: the output's dims after the first (the batch) axis; extra_inputs: name ->
    function of the batch giving another input (e.g. an attention mask of ones)."""
    import dask.array as da
    if not isinstance(array, da.Array):
        raise TypeError("map_model takes a dask Array")
    if len(array.chunks) > 1 and any(len(c) > 1 for c in array.chunks[1:]):
        array = array.rechunk({i: -1 for i in range(1, array.ndim)})
    out_shape = tuple(out_shape)
    chunks = (array.chunks[0],) + tuple((d,) for d in out_shape)
    kw = {}
    if array.ndim < 1 + len(out_shape):
        kw["new_axis"] = list(range(array.ndim, 1 + len(out_shape)))
    elif array.ndim > 1 + len(out_shape):
        kw["drop_axis"] = list(range(1 + len(out_shape), array.ndim))
    return da.map_blocks(_array_block, array, source, input_name, output_name, batch_size, threads,
                         dict(extra_inputs or {}), dtype=dtype, chunks=chunks, **kw)
