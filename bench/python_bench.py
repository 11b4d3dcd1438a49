#!/usr/bin/env python3
"""The Python binding's two figures (not a test: nothing here asserts a timing).

1. InferenceSession.run's cost per call on Silero VAD v5 (one 512-sample chunk, one
   thread): the median of --calls timed calls, against onnxruntime's InferenceSession when
   Python's onnxruntime is importable, and always against our own in-process figure
   (`transmuter bench`, the same model and inputs run by the C API): the difference is what
   the binding adds per call (argument conversion, the plan cache lookup, the output
   arrays).
2. transmuter.dask: --n sentences (100,000 by default; bench/run.py's seeded sentences)
   embedded with the MiniLM bench model (bench/models/minilm-l6, mean pooling, normalized)
   on a LocalCluster of 1 and then 2 worker processes of 1 thread each (the pipeline loaded
   with threads=1), batches of 32, partitions of --partition sentences; each cluster warms
   up (loads its pipeline per worker) before the timed run. Throughput of both, their ratio
   (the goal: 2 workers at least 1.8x one), and the results compared: the two runs with
   each other, and --check partitions (spread over the run) with a single-process run of
   the same batches in this process.

Results go to bench/PYTHON_RESULTS.md (with the machine and its load), or to
bench/.work/PYTHON_RESULTS-partial.md for a run with another --n.
Usage: bench/python_bench.py [--n N] [--partition P] [--calls C] [--check K] [--skip-dask]
"""
import argparse
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BUILD = os.environ.get("TM_BUILD", os.path.join(ROOT, "build"))
sys.path.insert(0, os.path.join(BUILD, "python"))
os.environ["PYTHONPATH"] = os.path.join(BUILD, "python") + os.pathsep + os.environ.get("PYTHONPATH", "")
TM = os.path.join(BUILD, "transmuter")
SHARED = os.environ.get("SHARED", os.path.join(ROOT, "..", "shared"))
SILERO = os.path.join(SHARED, "models", "real", "silero-vad")

import transmuter  # noqa: E402
import transmuter.dask as tmd  # noqa: E402


def bench_module():
    spec = importlib.util.spec_from_file_location("bench_run", os.path.join(HERE, "run.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def machine():
    cpu = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return f"{cpu}, {os.cpu_count()} logical CPUs, {platform.system()} {platform.release()}, " \
           f"Python {platform.python_version()}, NumPy {np.__version__}"


def run_overhead(calls):
    model = os.path.join(SILERO, "silero_vad_v5.onnx")
    inputs = os.path.join(SILERO, "silero_vad_v5.cases", "default", "inputs")
    r = subprocess.run([TM, "bench", model, "--inputs", inputs, "--threads", "1", "--repeat", str(calls)],
                       capture_output=True, text=True, check=True)
    cli = json.loads(r.stdout.strip().splitlines()[-1])["median_ms"]
    opts = transmuter.SessionOptions()
    opts.intra_op_num_threads = 1
    s = transmuter.InferenceSession(model, opts)
    feed = {a.name: np.load(os.path.join(inputs, a.name + ".npy")) for a in s.get_inputs()}

    def timed(run):
        for _ in range(20):
            run()
        ts = []
        for _ in range(calls):
            t0 = time.perf_counter_ns()
            run()
            ts.append((time.perf_counter_ns() - t0) / 1e6)
        return statistics.median(ts)
    ours = timed(lambda: s.run(None, feed))
    names, values = s._values(feed)
    raw = timed(lambda: s._model.run(names, values))   # the extension's call: tm_model_run
    row = {"cli_ms": cli, "python_ms": ours, "raw_ms": raw, "overhead_us": (ours - cli) * 1000}
    try:
        import onnxruntime as ort
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        o = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
        row["ort_ms"] = timed(lambda: o.run(None, feed))
    except ImportError:
        row["ort_ms"] = None
    return row


def embed_run(workers, bag_items, partition, repo):
    import dask.bag as db
    from distributed import Client, LocalCluster
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=None) as cluster, Client(cluster) as client:
        warm = db.from_sequence(bag_items[:2 * workers], npartitions=2 * workers)
        tmd.map_pipeline(warm, "feature-extraction", repo, batch_size=32, load={"threads": 1},
                         pooling="mean", normalize=True).compute()
        bag = db.from_sequence(bag_items, partition_size=partition)
        t0 = time.perf_counter()
        out = tmd.map_pipeline(bag, "feature-extraction", repo, batch_size=32, load={"threads": 1},
                               pooling="mean", normalize=True).compute()
        secs = time.perf_counter() - t0
        loads = sum(s["loads"] for s in client.run(tmd.stats).values())
    return out, secs, loads


def run_dask(n, partition, check):
    br = bench_module()
    model = os.path.join(HERE, "models", "minilm-l6", "model.onnx")
    if not os.path.exists(model):
        subprocess.run(["sh", os.path.join(HERE, "materialize.sh"), "minilm"], check=True)
    case = {"repo": "minilm-fp32-python", "task": "feature-extraction", "model": model, "file": "model.onnx"}
    repo = br.make_repo(case)
    texts = br.sentences(n)
    one, t1, loads1 = embed_run(1, texts, partition, repo)
    two, t2, loads2 = embed_run(2, texts, partition, repo)
    same_runs = len(one) == len(two) == n and all(a.tobytes() == b.tobytes() for a, b in zip(one, two))
    parts = list(range(0, n, partition))
    picked = sorted(set(parts[:: max(1, len(parts) // max(1, check))][:check] + [parts[-1]]))
    checked = 0
    same_single = True
    for start in picked:
        items = texts[start:start + partition]
        want = tmd.run_pipeline_batches(items, "feature-extraction", repo, 32, {"threads": 1},
                                        {"pooling": "mean", "normalize": True})
        same_single &= all(a.tobytes() == b.tobytes() for a, b in zip(one[start:start + partition], want))
        checked += len(items)
    return {"n": n, "partition": partition, "one_s": t1, "two_s": t2, "one_per_s": n / t1,
            "two_per_s": n / t2, "ratio": t1 / t2, "same_runs": same_runs,
            "same_single": same_single, "checked": checked, "loads": (loads1, loads2)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100000)
    ap.add_argument("--partition", type=int, default=2048)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--check", type=int, default=4)
    ap.add_argument("--skip-dask", action="store_true")
    a = ap.parse_args()
    load0 = os.getloadavg()[0]
    ov = run_overhead(a.calls)
    print(f"silero chunk: InferenceSession.run {ov['python_ms']:.4f} ms, CLI in-process {ov['cli_ms']:.4f} ms, "
          f"binding adds {ov['overhead_us']:.1f} us; onnxruntime: {ov['ort_ms'] or 'not installed'}", flush=True)
    dk = None if a.skip_dask else run_dask(a.n, a.partition, a.check)
    if dk:
        print(f"dask: {dk['n']} sentences, 1 worker {dk['one_per_s']:.1f}/s, 2 workers {dk['two_per_s']:.1f}/s, "
              f"ratio {dk['ratio']:.2f}; runs equal: {dk['same_runs']}, single-process equal on "
              f"{dk['checked']}: {dk['same_single']}", flush=True)
    full = a.n == 100000 and not a.skip_dask
    out = os.path.join(HERE, "PYTHON_RESULTS.md") if full else os.path.join(HERE, ".work", "PYTHON_RESULTS-partial.md")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        f.write("# Python binding: per-call cost and transmuter.dask scaling\n\n")
        f.write(f"Written by bench/python_bench.py on {time.strftime('%Y-%m-%d %H:%M')}.\n\n")
        f.write(f"Machine: {machine()}; load average {load0:.1f} at the start, "
                f"{os.getloadavg()[0]:.1f} at the end (other jobs share this machine).\n\n")
        f.write("## InferenceSession.run per call (Silero VAD v5, one 512-sample chunk, 1 thread)\n\n")
        f.write(f"| what | median ms per call |\n|---|---|\n")
        f.write(f"| `transmuter bench` (C API in-process) | {ov['cli_ms']:.4f} |\n")
        f.write(f"| the extension's call alone (tm_model_run through its plan cache) | {ov['raw_ms']:.4f} |\n")
        f.write(f"| `InferenceSession.run` (this binding) | {ov['python_ms']:.4f} |\n")
        f.write(f"| onnxruntime `InferenceSession.run` | {('%.4f' % ov['ort_ms']) if ov['ort_ms'] else 'not installed here'} |\n\n")
        f.write(f"The binding adds {ov['overhead_us']:.1f} µs per call to the C API's fixed plan "
                f"({a.calls} calls each): {(ov['python_ms'] - ov['raw_ms']) * 1000:.1f} µs in Python "
                f"(feed conversion, output arrays), the rest is tm_model_run's plan-cache path "
                f"against `transmuter bench`'s one plan and session.\n\n")
        if dk:
            f.write(f"## Embedding {dk['n']:,} sentences through transmuter.dask (MiniLM fp32, 1 thread a worker)\n\n")
            f.write("| workers | seconds | sentences/s |\n|---|---|---|\n")
            f.write(f"| 1 | {dk['one_s']:.1f} | {dk['one_per_s']:.1f} |\n")
            f.write(f"| 2 | {dk['two_s']:.1f} | {dk['two_per_s']:.1f} |\n\n")
            f.write(f"2 workers / 1 worker: {dk['ratio']:.2f}x (goal: at least 1.8x). Partitions of "
                    f"{dk['partition']}, batches of 32; pipelines loaded {dk['loads'][0]} and "
                    f"{dk['loads'][1]} times (once per worker). Results of the two runs equal bit for "
                    f"bit: {'yes' if dk['same_runs'] else 'NO'}; equal to a single-process run on "
                    f"{dk['checked']} sentences checked: {'yes' if dk['same_single'] else 'NO'}.\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
