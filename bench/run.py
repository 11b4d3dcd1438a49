#!/usr/bin/env python3
"""Transmuter vs ONNX Runtime, side by side in one run.

For each case (a model and an input shape) and each thread count (1 and 2), this runs
Transmuter's compiled plan (`transmuter bench`) and ONNX Runtime (`ort-run.mjs --opt all
--repeat`, sequential execution, the same intra-op threads) alternately for a few rounds
after warm-up, takes the median latency of each, and reports their ratio (ours / theirs:
below 1.0 means faster), plus our load and plan-creation times and peak RSS. It checks
that both runtimes' outputs still match. Results go to bench/RESULTS.md; the last line
printed is `worst ratio R (CASE)`.

Models come from bench/materialize.sh (bench/models/) and ../shared/models/real.
ONNX Runtime comes from the npm package onnxruntime-node, installed into bench/.ort/.
Usage: bench/run.py [--cases NAME,...] [--rounds N] [--repeat N] [--threads 1,2] [--large]
Not a test: nothing here asserts a timing.
"""
import argparse, json, os, platform, shutil, subprocess, sys, time
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SHARED = os.environ.get("SHARED", os.path.join(ROOT, "..", "shared"))
MODELS = os.path.join(HERE, "models")
TM = os.path.join(ROOT, "build", "transmuter")
ORT_DIR = os.path.join(HERE, ".ort")
WORK = os.path.join(HERE, ".work")


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


def ensure_ort():
    runner = os.path.join(ORT_DIR, "ort-run.mjs")
    if not os.path.exists(os.path.join(ORT_DIR, "node_modules", "onnxruntime-node")):
        os.makedirs(ORT_DIR, exist_ok=True)
        env = dict(os.environ, ONNXRUNTIME_NODE_INSTALL="skip")
        subprocess.run(["npm", "install", "--prefix", ORT_DIR, "onnxruntime-node@1.30.0"],
                       check=True, env=env, stdout=subprocess.DEVNULL)
    shutil.copy(os.path.join(SHARED, "tools", "ort-run.mjs"), runner)
    return runner


def ensure_model(path, recipe):
    """Materialise a benchmark model (and its variants) when absent."""
    if os.path.exists(path):
        return True
    tools = os.path.join(SHARED, "tools")
    if not os.path.isdir(tools):
        print(f"skip: {path} is absent and {tools} is not there to make it", file=sys.stderr)
        return False
    kind, base, args = recipe
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if kind == "inflate":
        sh(["/usr/bin/python3", os.path.join(tools, "skeleton.py"), "inflate", base, path])
    else:
        src = base
        sh(["/usr/bin/python3", os.path.join(tools, "quantize_variants.py"), kind, src, path] + args)
    return True


def encode(name):
    return "".join(c if c.isalnum() or c in "._-" else "%%%02X" % ord(c) for c in name)


def model_inputs(path):
    import onnx
    m = onnx.load(path, load_external_data=False)
    inits = {t.name for t in m.graph.initializer}
    out = []
    for v in m.graph.input:
        if v.name in inits:
            continue
        t = v.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else d.dim_param for d in t.shape.dim]
        out.append((v.name, t.elem_type, dims))
    return out


NP = {1: np.float32, 10: np.float16, 7: np.int64, 6: np.int32, 9: np.bool_, 11: np.float64}


def make_inputs(model, spec, out_dir):
    """Inputs for a case: token ids, a mask of ones, positions, random past and features."""
    os.makedirs(out_dir, exist_ok=True)
    rng = np.random.default_rng(1)
    b, s, past = spec.get("batch", 1), spec.get("seq", 1), spec.get("past", 0)
    sizes = {"batch_size": b, "sequence_length": s, "past_sequence_length": past,
             "past_sequence_length + 1": past + s, "total_sequence_length": past + s}
    for name, et, dims in model_inputs(model):
        if name in spec.get("shape", {}):
            arr = rng.random(spec["shape"][name])
            np.save(os.path.join(out_dir, encode(name) + ".npy"), arr.astype(NP.get(et, np.float32)))
            continue
        if name in spec.get("values", {}):
            arr = np.array(spec["values"][name], dtype=NP[et])
            np.save(os.path.join(out_dir, encode(name) + ".npy"), arr)
            continue
        shape = []
        for d in dims:
            if isinstance(d, int) and d > 0:
                shape.append(d)
            elif d in sizes:
                shape.append(sizes[d])
            elif isinstance(d, str) and "past" in d:
                shape.append(past)
            elif isinstance(d, str) and "sequence" in d and "past" not in d:
                shape.append(s if "attention" not in name else past + s)
            else:
                shape.append(spec.get("dims", {}).get(d, 1))
        if name == "input_ids":
            arr = rng.integers(1, spec.get("vocab", 1000), size=shape)
        elif name == "attention_mask":
            shape = [b, past + s]
            arr = np.ones(shape)
        elif name == "position_ids":
            arr = np.tile(np.arange(past, past + s), (b, 1))
        elif name == "token_type_ids":
            arr = np.zeros(shape)
        elif name == "use_cache_branch":
            arr = np.array([past > 0])
        else:
            arr = rng.standard_normal(shape) * 0.5
        np.save(os.path.join(out_dir, encode(name) + ".npy"), arr.astype(NP.get(et, np.float32)))


def case_list(large):
    mini = os.path.join(MODELS, "minilm-l6")
    small = os.path.join(MODELS, "llama-small")
    big = os.path.join(MODELS, "llama-600m")
    sk = os.path.join(SHARED, "models", "bench")
    mini_fp32 = os.path.join(mini, "model.onnx")
    small_fp32 = os.path.join(small, "decoder_model_merged.onnx")
    cases = []
    mini_variants = [("fp32", mini_fp32, ("inflate", os.path.join(sk, "minilm-l6", "model.skeleton.onnx"), [])),
                     ("int8", os.path.join(mini, "model_quantized.onnx"), ("int8", mini_fp32, [])),
                     ("q4", os.path.join(mini, "model_q4.onnx"), ("q4", mini_fp32, ["--block", "32"]))]
    for var, path, recipe in mini_variants:
        for b in (1, 8):
            cases.append(dict(name=f"minilm-{var}-{b}x128", model=path, recipe=recipe,
                              deps=[mini_variants[0]], spec=dict(batch=b, seq=128, vocab=30522),
                              tol=1e-4 if var == "fp32" else 1e-2))
    small_variants = [("fp32", small_fp32, ("inflate", os.path.join(sk, "llama-small", "decoder_model_merged.skeleton.onnx"), [])),
                      ("q4", os.path.join(small, "decoder_model_merged_q4.onnx"), ("q4", small_fp32, ["--block", "32", "--gbq", "--dedupe"])),
                      ("int8", os.path.join(small, "decoder_model_merged_quantized.onnx"), ("int8", small_fp32, ["--dedupe"]))]
    for var, path, recipe in small_variants:
        for label, spec in (("decode-past32", dict(seq=1, past=32)), ("decode-past512", dict(seq=1, past=512)),
                            ("prefill32", dict(seq=32, past=0))):
            spec["vocab"] = 32000
            cases.append(dict(name=f"llama-small-{var}-{label}", model=path, recipe=recipe,
                              deps=[small_variants[0]], spec=spec, static=["use_cache_branch"],
                              tol=1e-4 if var == "fp32" else 1e-2))
    if large:
        big_fp32 = os.path.join(big, "decoder_model_merged.onnx")
        big_variants = [("fp32", big_fp32, ("inflate", os.path.join(sk, "llama-600m", "decoder_model_merged.skeleton.onnx"), [])),
                        ("q4", os.path.join(big, "decoder_model_merged_q4.onnx"), ("q4", big_fp32, ["--block", "32", "--gbq", "--dedupe"]))]
        for var, path, recipe in big_variants:
            for label, spec in (("decode-past32", dict(seq=1, past=32)), ("prefill32", dict(seq=32, past=0))):
                spec["vocab"] = 151936
                cases.append(dict(name=f"llama-600m-{var}-{label}", model=path, recipe=recipe,
                                  deps=[big_variants[0]], spec=spec, static=["use_cache_branch"],
                                  tol=1e-4 if var == "fp32" else 1e-2))
    real = os.path.join(SHARED, "models", "real")
    cases.append(dict(name="ppocr-det-640", model=os.path.join(real, "ppocr", "ch_PP-OCRv4_det_infer.onnx"),
                      spec=dict(dims={"x": 1}, shape={"x": [1, 3, 640, 640]}), tol=1e-3))
    cases.append(dict(name="silero-vad-v5-chunk512", model=os.path.join(real, "silero-vad", "silero_vad_v5.onnx"),
                      spec=dict(), inputs_from=os.path.join(real, "silero-vad", "silero_vad_v5.cases", "default", "inputs"),
                      tol=1e-4))
    return cases


def run_ours(case, inputs, threads, repeat, out_dir=None):
    cmd = [TM, "bench", case["model"], "--inputs", inputs, "--threads", str(threads),
           "--repeat", str(repeat), "--warmup", "3"]
    for s in case.get("static", []):
        cmd += ["--static", s]
    if out_dir:
        cmd += ["--out", out_dir]
    return json.loads(sh(cmd).stdout.strip().splitlines()[-1])


def run_ort(runner, case, inputs, threads, repeat, out_dir=None):
    cmd = ["node", runner, case["model"], "-i", inputs, "--opt", "all", "--threads", str(threads),
           "--no-spin", "--repeat", str(repeat), "--warmup", "3"]
    if out_dir:
        cmd += ["-o", out_dir, "--format", "npy"]
    lines = sh(cmd).stdout.strip().splitlines()
    for line in reversed(lines):
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError("ort-run printed no timing: " + "\n".join(lines[-3:]))


def compare(ours, theirs, tol):
    """All outputs within atol = tol, rtol = 10 * tol; returns (ok, max abs difference).
    ONNX Runtime with optimizations "all" fuses and reorders sums, so even its own fp32
    outputs move by ~1e-6 against its unoptimized run."""
    worst, ok = 0.0, True
    for f in os.listdir(theirs):
        if not f.endswith(".npy"):
            continue
        a, b = np.load(os.path.join(ours, f)).astype(np.float64), np.load(os.path.join(theirs, f)).astype(np.float64)
        if a.shape != b.shape:
            return False, float("inf")
        if b.size:
            d = np.abs(a - b)
            worst = max(worst, float(d.max()))
            ok = ok and bool(np.all(d <= tol + 10 * tol * np.abs(b)))
    return ok, worst


def machine():
    cpu = "unknown CPU"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} logical CPUs, {platform.platform()}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default="")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--large", action="store_true", help="include the 0.6B LLaMA (2.6 GB, minutes to make)")
    args = ap.parse_args()
    runner = ensure_ort()
    wanted = set(filter(None, args.cases.split(",")))
    rows, worst = [], (0.0, "")
    for case in case_list(args.large):
        if wanted and case["name"] not in wanted:
            continue
        ok = True
        for _, dep_path, dep_recipe in case.get("deps", []):
            ok = ok and ensure_model(dep_path, dep_recipe)
        if "recipe" in case:
            ok = ok and ensure_model(case["model"], case["recipe"])
        if not ok or not os.path.exists(case["model"]):
            print(f"skip {case['name']}: model absent", file=sys.stderr)
            continue
        inputs = os.path.join(WORK, case["name"], "inputs")
        if case.get("inputs_from"):
            shutil.rmtree(inputs, ignore_errors=True)
            shutil.copytree(case["inputs_from"], inputs)
        else:
            make_inputs(case["model"], case["spec"], inputs)
        for threads in [int(t) for t in args.threads.split(",")]:
            label = f"{case['name']} t{threads}"
            try:
                ours_out, ort_out = os.path.join(WORK, case["name"], "ours"), os.path.join(WORK, case["name"], "ort")
                first = run_ours(case, inputs, threads, 1, ours_out)
                run_ort(runner, case, inputs, threads, 1, ort_out)
                match, err = compare(ours_out, ort_out, case["tol"])
                ours_med, ort_med = [], []
                for _ in range(args.rounds):
                    ours_med.append(run_ours(case, inputs, threads, args.repeat)["median_ms"])
                    ort_med.append(run_ort(runner, case, inputs, threads, args.repeat)["median_ms"])
                o, r = float(np.median(ours_med)), float(np.median(ort_med))
                ratio = o / r
                rows.append((label, o, r, ratio, first["load_ms"], first["plan_ms"], first["peak_rss_mb"],
                             ("yes" if match else "NO") + f" (max abs {err:.2g})"))
                print(f"{label}: ours {o:.3f} ms, ORT {r:.3f} ms, ratio {ratio:.2f}, outputs match: {rows[-1][-1]}")
                if ratio > worst[0]:
                    worst = (ratio, label)
            except (subprocess.CalledProcessError, RuntimeError, ValueError) as e:
                msg = getattr(e, "stderr", "") or str(e)
                print(f"{label}: FAILED: {msg.strip().splitlines()[-1] if msg.strip() else e}")
                rows.append((label, float("nan"), float("nan"), float("inf"), 0, 0, 0, "run failed"))
                worst = (float("inf"), label)
    with open(os.path.join(HERE, "RESULTS.md"), "w") as f:
        f.write("# Transmuter vs ONNX Runtime\n\n")
        f.write(f"Machine: {machine()}. Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.\n")
        f.write(f"ONNX Runtime 1.30 (onnxruntime-node, graph optimizations all, sequential, no spinning); "
                f"{args.rounds} alternating rounds of {args.repeat} timed runs after 3 warm-up runs; medians.\n")
        f.write("Ratio = our median / ONNX Runtime's median (below 1.0: we are faster). Regenerate: `make bench`.\n\n")
        f.write("| case | threads | ours ms | ORT ms | ratio | our load ms | our plan ms | our peak RSS MB | outputs match |\n")
        f.write("|---|---|---|---|---|---|---|---|---|\n")
        for label, o, r, ratio, load, plan, rss, match in rows:
            name, t = label.rsplit(" t", 1)
            f.write(f"| {name} | {t} | {o:.3f} | {r:.3f} | {ratio:.2f} | {load:.1f} | {plan:.1f} | {rss:.0f} | {match} |\n")
        f.write(f"\nworst ratio {worst[0]:.2f} ({worst[1]})\n")
    print(f"worst ratio {worst[0]:.2f} ({worst[1]})")


if __name__ == "__main__":
    main()
