#!/usr/bin/env python3
"""The gradient step against the forward, on 1 and 2 threads (`make grad-bench`).

Runs build/grad_bench (bench/grad_bench.c) PROCESSES times per thread count, the thread
counts alternating, each process timing the frozen model's forward plan, the trainable
model's forward plan and the value-and-gradient plan in alternation (medians of --repeat
runs each). Prints each process's ratios and, last, one line per thread count with the
median over the processes of the ratio of the gradient step's median to the forward's,
and their range; writes the table to bench/GRAD_RESULTS.md with the machine's
description. On a shared machine one process's memory can be slower than the next one's,
so one process should not decide (as bench/run.py's GEMM profile). Not a test: nothing
here asserts a timing.

The default model (MiniLM-L6, 128 tokens) runs at each of --batches (1 and 8: the bar is
judged at 1, and fine-tuning runs at 8 or more); its batch-8 runs take --repeat-large
runs of each plan. Arguments after -- replace the default model's and run as given.

Usage: grad_run.py [--processes N] [--repeat N] [--repeat-large N] [--threads 1,2]
                   [--batches 1,8] [-- GRAD_BENCH_ARGS...]
"""
import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
GRAD_BENCH = os.path.join(ROOT, "build", "grad_bench")
DEFAULT_MODEL = "bench/models/minilm-l6/model.onnx"


def default_args(batch):
    return [DEFAULT_MODEL, "--dim", f"batch_size={batch}", "--dim", "sequence_length=128",
            "--loss", "mse", "--output", "last_hidden_state"]


def cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def git_commit():
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                              capture_output=True, text=True).stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def run_config(bench_args, threads, processes, repeat):
    """Per thread count, the processes' results (thread counts alternating)."""
    runs = {t: [] for t in threads}
    for p in range(processes):
        for t in threads:
            cmd = [GRAD_BENCH] + bench_args + ["--threads", str(t), "--repeat", str(repeat)]
            res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
            if res.returncode != 0:
                sys.exit(f"grad_bench failed ({res.returncode}): {res.stderr.strip()}")
            d = json.loads(res.stdout.strip().splitlines()[-1])
            runs[t].append(d)
            print(f"threads {t} process {p + 1}: forward {d['forward_ms']:.2f} ms, trainable "
                  f"forward {d['trainable_forward_ms']:.2f} ms, gradient step {d['grad_ms']:.2f} "
                  f"ms: ratio {d['ratio']:.3f} (to the trainable forward "
                  f"{d['ratio_to_trainable_forward']:.3f}); peak RSS {d['peak_rss_mb']:.0f} MB",
                  flush=True)
    lines = []
    for t in threads:
        r = [d["ratio"] for d in runs[t]]
        rt = [d["ratio_to_trainable_forward"] for d in runs[t]]
        lines.append((t, statistics.median(r), min(r), max(r), statistics.median(rt), runs[t]))
    return lines


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--processes", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--repeat-large", type=int, default=8)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("rest", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    given = [a for a in args.rest if a != "--"]
    if given:
        configs = [(given, args.repeat)]
    else:
        configs = [(default_args(int(b)), args.repeat if int(b) == 1 else args.repeat_large)
                   for b in args.batches.split(",")]
    if not os.path.exists(GRAD_BENCH):
        sys.exit(f"{GRAD_BENCH} is missing: make build/grad_bench")
    model = configs[0][0][0]
    if not os.path.exists(os.path.join(ROOT, model)) and not os.path.exists(model):
        sys.exit(f"{model} is missing: bench/materialize.sh makes the bench models "
                 "from ../shared/models/bench (see bench/models)")
    threads = [int(t) for t in args.threads.split(",")]
    results = []
    for bench_args, repeat in configs:
        print(f"grad_bench {' '.join(bench_args)}", flush=True)
        results.append((bench_args, repeat, run_config(bench_args, threads, args.processes,
                                                       repeat)))
    path = os.path.join(HERE, "GRAD_RESULTS.md")
    with open(path, "w") as f:
        f.write("# The gradient step against the forward (`make grad-bench`)\n\n")
        f.write(f"Written by bench/grad_run.py on {datetime.date.today()}, commit {git_commit()}: "
                f"{cpu_name()}, {os.cpu_count()} cores. {args.processes} processes a thread "
                "count (alternating), each the median of its runs of each plan. The ratio is "
                "the gradient step's median over the frozen model's forward plan's (the "
                "inference plan, weights packed at plan time); beside it, over the forward "
                "plan of the same trainable model.\n")
        for bench_args, repeat, lines in results:
            f.write(f"\n## `grad_bench {' '.join(bench_args)}`, {repeat} runs of each plan\n\n")
            f.write("| threads | process | forward ms | trainable forward ms | gradient step ms | "
                    "ratio | ratio to the trainable forward | peak RSS MB |\n")
            f.write("|---|---|---|---|---|---|---|---|\n")
            for t, _, _, _, _, ds in lines:
                for i, d in enumerate(ds):
                    f.write(f"| {t} | {i + 1} | {d['forward_ms']:.2f} | "
                            f"{d['trainable_forward_ms']:.2f} | {d['grad_ms']:.2f} | "
                            f"{d['ratio']:.3f} | {d['ratio_to_trainable_forward']:.3f} | "
                            f"{d['peak_rss_mb']:.0f} |\n")
            f.write("\n")
            for t, med, lo, hi, medt, _ in lines:
                f.write(f"- {t} thread{'s' if t > 1 else ''}: ratio {med:.2f} (median of the "
                        f"processes; {lo:.2f}-{hi:.2f}), {medt:.2f} to the trainable forward.\n")
    print(f"results: {os.path.relpath(path, ROOT)}")
    for bench_args, _, lines in results:
        label = next((a for a in bench_args if a.startswith("batch_size=")), bench_args[0])
        for t, med, lo, hi, medt, _ in lines:
            print(f"{label}: gradient step / forward, {t} thread{'s' if t > 1 else ''}: "
                  f"{med:.2f} (processes {lo:.2f}-{hi:.2f}; to the trainable forward {medt:.2f})")


if __name__ == "__main__":
    main()
