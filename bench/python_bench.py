#!/usr/bin/env python3
"""The Python binding's two figures (not a test: nothing here asserts a timing).

1. InferenceSession.run's cost per call on Silero VAD v5 (one 512-sample chunk, one
   thread), in --rounds alternating rounds of --calls calls each, medians:
   - ours in C, in-process: `transmuter bench --serve` (one plan and session, caller
     output buffers): the same engine without the binding, so the difference is what the
     binding adds per call (feed conversion, tm_model_run's cache lookup, new output
     arrays, the GIL released and taken back);
   - the extension's call alone (names and values already converted);
   - InferenceSession.run;
   - onnxruntime's InferenceSession.run when Python's onnxruntime is importable (not in
     Debian), and onnxruntime-node's session.run (bench/ort_bench.mjs over bench/.ort)
     when node has it: ONNX Runtime's engine and its own binding together, per call. It is
     a peer for the total per call, not for the binding's overhead (ONNX Runtime's C figure
     is not measured here).
2. transmuter.dask: --n sentences (100,000 by default; bench/run.py's seeded sentences)
   embedded with the MiniLM bench model (bench/models/minilm-l6, mean pooling, normalized)
   on a LocalCluster of 1 and of 2 worker processes of 1 thread each (the pipeline loaded
   with threads=1), batches of 32, partitions of --partition sentences; each cluster warms
   up (loads its pipeline on every worker) before the timed run; --dask-rounds alternates
   1, 2, 1, 2, ... clusters. For each timed run: wall time, the load average (uptime) before
   and after, each worker process's CPU seconds over the run (time.process_time on the
   worker: all its threads) and this process's (the scheduler and client). Reported:
   - the wall-clock throughputs and their ratio (the goal: 2 workers >= 1.8x one), which a
     machine shared with other jobs depresses;
   - CPU seconds per sentence on each side, and two ratios that the CPU times give, the
     2-worker speed-up on two idle cores if each sentence costs what it did here: with the
     work split evenly (twice one worker's CPU time over the two workers' total), and as
     this run split it (one worker's CPU time over the busier worker's of two; on a loaded
     machine the worker that got more of a core takes more partitions). Both leave out the
     scheduler's CPU and any wait that is not CPU;
   - the results: the runs against each other bit for bit, and against a single-process run
     of the same batches in this process on --check partitions (all: every one).

Results go to --out (bench/PYTHON_RESULTS.md), with the machine and its load; a run with
another --n says so there.
Usage: bench/python_bench.py [--n N] [--partition P] [--calls C] [--rounds R]
                             [--dask-rounds D] [--check K|all] [--skip-dask] [--skip-calls]
"""
import argparse
import importlib.util
import json
import os
import platform
import shutil
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
DEFAULT_N = 100000

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


def load():
    """The load averages over 1, 5 and 15 minutes, as uptime prints them."""
    return "%.2f, %.2f, %.2f" % os.getloadavg()


# ---- 1. Per call ---------------------------------------------------------------------------

class Served:
    """A long-lived timing process answering `run N` with a JSON line holding median_ms."""

    def __init__(self, cmd):
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = self.p.stdout.readline()
        if not line:
            raise RuntimeError(f"{' '.join(cmd)}: no ready line")

    def run(self, n):
        self.p.stdin.write(f"run {n}\n")
        self.p.stdin.flush()
        return json.loads(self.p.stdout.readline())["median_ms"]

    def close(self):
        try:
            self.p.stdin.write("quit\n")
            self.p.stdin.close()
        except OSError:
            pass
        self.p.wait()


def ort_node(model, inputs):
    """onnxruntime-node through bench/ort_bench.mjs, or None where node or bench/.ort is missing."""
    if not shutil.which("node") or not os.path.isdir(os.path.join(HERE, ".ort", "node_modules",
                                                                   "onnxruntime-node")):
        return None
    return Served(["node", os.path.join(HERE, "ort_bench.mjs"), model, inputs, "1", "20"])


def timed_median(run, calls):
    ts = []
    for _ in range(calls):
        t0 = time.perf_counter_ns()
        run()
        ts.append((time.perf_counter_ns() - t0) / 1e6)
    return statistics.median(ts)


def run_overhead(calls, rounds):
    model = os.path.join(SILERO, "silero_vad_v5.onnx")
    inputs = os.path.join(SILERO, "silero_vad_v5.cases", "default", "inputs")
    opts = transmuter.SessionOptions()
    opts.intra_op_num_threads = 1
    s = transmuter.InferenceSession(model, opts)
    feed = {a.name: np.load(os.path.join(inputs, a.name + ".npy")) for a in s.get_inputs()}
    names, values = s._values(feed)
    engines = {
        "python": lambda n: timed_median(lambda: s.run(None, feed), n),
        "raw": lambda n: timed_median(lambda: s._model.run(names, values), n),
    }
    served = {"cli": Served([TM, "bench", model, "--inputs", inputs, "--threads", "1",
                             "--repeat", str(calls), "--serve"])}
    node = ort_node(model, inputs)
    if node:
        served["ort_node"] = node
    for k, srv in served.items():
        engines[k] = srv.run
    try:
        import onnxruntime as ort
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        o = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
        engines["ort_python"] = lambda n: timed_median(lambda: o.run(None, feed), n)
    except ImportError:
        pass
    for run in engines.values():   # warm-up
        run(min(calls, 50))
    per = {k: [] for k in engines}
    order = list(engines)
    try:
        for r in range(rounds):
            for k in order[r % len(order):] + order[:r % len(order)]:   # rotated each round
                per[k].append(engines[k](calls))
    finally:
        for srv in served.values():
            srv.close()
    row = {k: statistics.median(v) for k, v in per.items()}
    row["spread"] = {k: (min(v), max(v)) for k, v in per.items()}
    row["overhead_us"] = (row["python"] - row["cli"]) * 1000
    return row


# ---- 2. Dask ---------------------------------------------------------------------------------

def _cpu():
    return time.process_time()


def embed_run(workers, texts, partition, repo):
    """One cluster's timed run: (vectors, a dict of what was measured)."""
    import dask.bag as db
    from distributed import Client, LocalCluster
    opts = dict(batch_size=32, load={"threads": 1}, pooling="mean", normalize=True)
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=None) as cluster, Client(cluster) as client:
        warm = db.from_sequence(texts[:2 * workers], npartitions=2 * workers)
        tmd.map_pipeline(warm, "feature-extraction", repo, **opts).compute()
        bag = db.from_sequence(texts, partition_size=partition)
        load_before = load()
        cpu0 = client.run(_cpu)
        me0 = time.process_time()
        t0 = time.perf_counter()
        out = tmd.map_pipeline(bag, "feature-extraction", repo, **opts).compute()
        secs = time.perf_counter() - t0
        me = time.process_time() - me0
        cpu1 = client.run(_cpu)
        stats = client.run(tmd.stats)
    cpu = sorted(cpu1[w] - cpu0[w] for w in cpu1)
    return out, {"workers": workers, "secs": secs, "per_s": len(texts) / secs, "cpu": cpu,
                 "client_cpu": me, "load_before": load_before, "load_after": load(),
                 "loads": sum(v["loads"] for v in stats.values())}


def run_dask(n, partition, check, rounds):
    br = bench_module()
    model = os.path.join(HERE, "models", "minilm-l6", "model.onnx")
    if not os.path.exists(model):
        subprocess.run(["sh", os.path.join(HERE, "materialize.sh"), "minilm"], check=True)
    case = {"repo": "minilm-fp32-python", "task": "feature-extraction", "model": model, "file": "model.onnx"}
    repo = br.make_repo(case)
    texts = br.sentences(n)
    runs, first = [], {}
    for r in range(rounds):
        for workers in (1, 2):
            out, m = embed_run(workers, texts, partition, repo)
            print(f"dask: {workers} worker(s): {m['secs']:.1f} s, {m['per_s']:.1f}/s, worker CPU "
                  f"{', '.join('%.1f' % c for c in m['cpu'])} s, load {m['load_before']} -> "
                  f"{m['load_after']}", flush=True)
            runs.append(m)
            if workers not in first:
                first[workers] = out
            else:   # later rounds must repeat the first one's bits
                m["same_as_first"] = all(a.tobytes() == b.tobytes() for a, b in zip(out, first[workers]))
    one, two = first[1], first[2]
    same_runs = len(one) == len(two) == n and all(a.tobytes() == b.tobytes() for a, b in zip(one, two))
    parts = list(range(0, n, partition))
    if check == "all":
        picked = parts
    else:
        k = int(check)
        picked = sorted(set(parts[:: max(1, len(parts) // max(1, k))][:k] + [parts[-1]]))
    checked, same_single = 0, True
    t0 = time.perf_counter()
    for start in picked:
        items = texts[start:start + partition]
        want = tmd.run_pipeline_batches(items, "feature-extraction", repo, 32, {"threads": 1},
                                        {"pooling": "mean", "normalize": True})
        same_single &= len(want) == len(items) and all(
            a.tobytes() == b.tobytes() for a, b in zip(one[start:start + partition], want))
        checked += len(items)
    single_s = time.perf_counter() - t0
    return {"n": n, "partition": partition, "runs": runs, "same_runs": same_runs,
            "same_single": same_single, "checked": checked, "single_s": single_s,
            "repeats_equal": all(m.get("same_as_first", True) for m in runs)}


def summarize(dk):
    """Medians over the rounds of each side's figures."""
    side = {}
    for w in (1, 2):
        rs = [m for m in dk["runs"] if m["workers"] == w]
        side[w] = {
            "secs": statistics.median(m["secs"] for m in rs),
            "per_s": statistics.median(m["per_s"] for m in rs),
            "cpu_total": statistics.median(sum(m["cpu"]) for m in rs),
            "cpu_max": statistics.median(max(m["cpu"]) for m in rs),
            "client_cpu": statistics.median(m["client_cpu"] for m in rs),
        }
        side[w]["cpu_per_sentence_ms"] = side[w]["cpu_total"] / dk["n"] * 1000
        side[w]["cpu_share"] = side[w]["cpu_total"] / side[w]["secs"]
    wall_ratio = side[2]["per_s"] / side[1]["per_s"]
    cpu_ratio = {"even": 2 * side[1]["cpu_total"] / side[2]["cpu_total"],
                 "split": side[1]["cpu_total"] / side[2]["cpu_max"]}
    return side, wall_ratio, cpu_ratio


# ---- Report ----------------------------------------------------------------------------------

def write(out, a, load0, ov, dk):
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    with open(out, "w") as f:
        f.write("# Python binding: per-call cost and transmuter.dask scaling\n\n")
        f.write(f"Written by bench/python_bench.py on {time.strftime('%Y-%m-%d %H:%M')} "
                f"(`{' '.join(sys.argv[1:]) or 'no arguments'}`).\n\n")
        f.write(f"Machine: {machine()}. Load averages (1, 5, 15 min) {load0} at the start, "
                f"{load()} at the end. The machine is shared with other jobs: these are "
                "loaded-machine figures.\n\n")
        if ov:
            f.write(f"## InferenceSession.run per call (Silero VAD v5, one 512-sample chunk, 1 thread)\n\n")
            f.write(f"{a.rounds} rounds of {a.calls} calls per engine, engines alternating (the order "
                    "rotated each round); the median of the rounds' medians, and the range of the "
                    "rounds' medians.\n\n")
            f.write("| what | median ms per call | rounds' range |\n|---|---|---|\n")
            names = {"cli": "ours in C: `transmuter bench --serve` (one plan and session, outputs reused)",
                     "raw": "ours: the extension's call alone (tm_model_run, new output tensors)",
                     "python": "ours: `InferenceSession.run` (this binding)",
                     "ort_node": "onnxruntime-node 1.30 `session.run` (ONNX Runtime and its Node binding)",
                     "ort_python": "onnxruntime `InferenceSession.run` (Python)"}
            for k, label in names.items():
                if k in ov:
                    lo, hi = ov["spread"][k]
                    f.write(f"| {label} | {ov[k]:.4f} | {lo:.4f} – {hi:.4f} |\n")
            if "ort_python" not in ov:
                f.write("| onnxruntime `InferenceSession.run` (Python) | not installed here | |\n")
            f.write(f"\nThe binding adds {ov['overhead_us']:.1f} µs a call to the same engine in C: "
                    f"{(ov['python'] - ov['raw']) * 1000:.1f} µs in Python (the feed's conversion, the "
                    f"output arrays) and {(ov['raw'] - ov['cli']) * 1000:.1f} µs in the extension's call "
                    "(buffers wrapped, the plan-cache lookup, new output tensors, the GIL).")
            if "ort_node" in ov:
                f.write(f" onnxruntime-node takes {ov['ort_node']:.4f} ms a call in all, its engine and "
                        f"binding together: ours through Python is {ov['ort_node'] / ov['python']:.2f}x "
                        "its speed. It is the nearest ONNX Runtime binding here, not a measure of "
                        "its binding's overhead (its engine alone is not timed).")
            f.write("\n\n")
        if dk:
            side, wall_ratio, cpu_ratio = summarize(dk)
            f.write(f"## Embedding {dk['n']:,} sentences through transmuter.dask (MiniLM fp32, 1 thread a worker)\n\n")
            if dk["n"] != DEFAULT_N:
                f.write(f"This run used {dk['n']:,} sentences, not the default {DEFAULT_N:,}: "
                        "see the command above.\n\n")
            f.write(f"Partitions of {dk['partition']}, batches of 32; {len(dk['runs']) // 2} round(s) of "
                    "1 then 2 workers.\n\n")
            f.write("| run | workers | seconds | sentences/s | CPU s of each worker | scheduler + client CPU s "
                    "| load before | load after |\n|---|---|---|---|---|---|---|---|\n")
            for i, m in enumerate(dk["runs"]):
                f.write(f"| {i + 1} | {m['workers']} | {m['secs']:.1f} | {m['per_s']:.1f} | "
                        f"{', '.join('%.1f' % c for c in m['cpu'])} | {m['client_cpu']:.1f} | "
                        f"{m['load_before']} | {m['load_after']} |\n")
            f.write("\n| | 1 worker | 2 workers |\n|---|---|---|\n")
            f.write(f"| sentences/s (wall clock) | {side[1]['per_s']:.1f} | {side[2]['per_s']:.1f} |\n")
            f.write(f"| CPU ms per sentence (workers) | {side[1]['cpu_per_sentence_ms']:.3f} | "
                    f"{side[2]['cpu_per_sentence_ms']:.3f} |\n")
            f.write(f"| cores the workers got (CPU s / wall s) | {side[1]['cpu_share']:.2f} | "
                    f"{side[2]['cpu_share']:.2f} |\n\n")
            f.write(f"- Wall-clock ratio, 2 workers / 1: **{wall_ratio:.2f}x** (goal: at least 1.8x). "
                    f"The workers got {side[2]['cpu_share']:.2f} cores of the 2 between them: "
                    "other jobs had the rest.\n")
            f.write(f"- The ratios the CPU times give, the speed-up on two idle cores if each sentence "
                    f"costs what it did here: **{cpu_ratio['even']:.2f}x** with the work split evenly "
                    f"(CPU per sentence, 2 workers against 1: "
                    f"{side[2]['cpu_per_sentence_ms'] / side[1]['cpu_per_sentence_ms']:.3f}), "
                    f"**{cpu_ratio['split']:.2f}x** as this run split it (one worker's CPU time over "
                    "the busier worker's of two: on a loaded machine the worker that gets more of a "
                    "core takes more partitions).\n")
            f.write(f"- Pipelines loaded once per worker: {', '.join(str(m['loads']) for m in dk['runs'])} "
                    "loads in the runs.\n")
            f.write(f"- Results: the 1- and 2-worker runs equal bit for bit: "
                    f"{'yes' if dk['same_runs'] else 'NO'}; repeated rounds equal the first: "
                    f"{'yes' if dk['repeats_equal'] else 'NO'}; equal to a single-process run "
                    f"(the same batches in this process) on {dk['checked']:,} of {dk['n']:,} "
                    f"sentences: {'yes' if dk['same_single'] else 'NO'}.\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=DEFAULT_N)
    ap.add_argument("--partition", type=int, default=2048)
    ap.add_argument("--calls", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--dask-rounds", type=int, default=1)
    ap.add_argument("--check", default="4", help="partitions checked against one process, or all")
    ap.add_argument("--skip-dask", action="store_true")
    ap.add_argument("--skip-calls", action="store_true")
    ap.add_argument("--out", default=os.path.join(HERE, "PYTHON_RESULTS.md"))
    a = ap.parse_args()
    load0 = load()
    ov = None
    if not a.skip_calls:
        ov = run_overhead(a.calls, a.rounds)
        print(f"silero chunk: InferenceSession.run {ov['python']:.4f} ms, C in-process {ov['cli']:.4f} ms, "
              f"binding adds {ov['overhead_us']:.1f} us; onnxruntime-node "
              f"{ov.get('ort_node', 'not available')}", flush=True)
    dk = None
    if not a.skip_dask:
        dk = run_dask(a.n, a.partition, a.check, a.dask_rounds)
        side, wall_ratio, cpu_ratio = summarize(dk)
        print(f"dask: {dk['n']} sentences, 1 worker {side[1]['per_s']:.1f}/s, 2 workers "
              f"{side[2]['per_s']:.1f}/s: wall ratio {wall_ratio:.2f}, CPU-time ratios "
              f"{cpu_ratio['even']:.2f} (even) {cpu_ratio['split']:.2f} (as split); "
              f"runs equal: {dk['same_runs']}, single-process equal on {dk['checked']}: "
              f"{dk['same_single']}", flush=True)
    write(a.out, a, load0, ov, dk)
    os.makedirs(os.path.join(HERE, ".work"), exist_ok=True)
    with open(os.path.join(HERE, ".work", "python_bench.json"), "w") as f:   # the raw figures
        json.dump({"args": vars(a), "load_start": load0, "calls": ov, "dask": dk}, f, indent=1)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
