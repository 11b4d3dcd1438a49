#!/usr/bin/env python3
"""Transmuter against llama.cpp on the bench's LLaMA decoders (issue 40), side by side.

llama.cpp is the one bundled in the npm package node-llama-cpp@3.22.1, built for this CPU by
bench/llamacpp/build.sh (Release, native, AMX off, no GPU) into bench/.llamacpp/. Both sides
run the same network: bench/llamacpp/onnx_to_gguf.py writes our fp32 export's own weights as
an F32 GGUF with llama.cpp's gguf-py, and llama-quantize (--pure: every tensor, embedding and
output included, in the one type, as in our q4 and int8 exports) makes Q4_0 and Q8_0 of it.

For the small LLaMA and the 0.6B, each format (ours fp32 / q4 / int8 against F32 / Q4_0 /
Q8_0) and each thread count (1, 2), --rounds rounds alternate (ours first in even rounds,
llama.cpp first in odd ones), each side a fresh process per run:
  * the real generation loop: a 32-token prompt (bench/run.py's seeded ids), then 128 new
    tokens, greedy. Ours: `transmuter generate MODEL.onnx --prompt-ids ... --max-new 128
    --threads T --json` (bench/run.py's generate cases); llama.cpp: build/bin/tm-llama-gen
    (bench/llamacpp/llama_gen.cpp: the same loop over libllama, llama_decode per token, its
    default KV cache (F16) and flash-attention choice). Median ms per new token over every
    step of every run, the prefill of the 32 tokens (the first, cold one of each process),
    peak RSS (VmHWM, both sides alike).
  * time to first token: the wall time of a process that loads, plans and prefills the same
    prompt and makes 1 token (--max-new 1), from its start to its exit.
  * llama-bench, for reference: pp32 at depth 0 and tg128 at depth 32 (-d), -r --bench-reps.
The fp32 tokens are compared (ours against llama.cpp's F32 with its default F16 cache, and
once per model against F32 with an F32 cache: the same arithmetic up to summation order).

OMP_WAIT_POLICY=PASSIVE is set for llama.cpp's processes only where the host is loaded (the
1-minute load average before a case above --loaded, 0.5 by default; --omp-passive on/off
forces it), and each row says which. Writes bench/LLAMACPP_RESULTS.md (a run of a subset
writes bench/.work/LLAMACPP_RESULTS-partial.md). Not a test: nothing here asserts a timing.

Usage: bench/llamacpp/run.py [--models small,600m] [--formats fp32,q4,int8] [--threads 1,2]
                             [--rounds 3] [--big-fp32-rounds N] [--bench-reps 3]
                             [--omp-passive auto|on|off] [--no-llama-bench]
"""
import argparse, json, os, subprocess, sys, time
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)
ROOT = os.path.dirname(BENCH)
sys.dont_write_bytecode = True   # no __pycache__ beside the scripts
sys.path.insert(0, BENCH)
import run as tmbench   # bench/run.py: the same prompt ids, models, commands and helpers

DIR = os.path.join(BENCH, ".llamacpp")
GGUF = os.path.join(DIR, "gguf")
SK = os.path.join(tmbench.SHARED, "models", "bench")
NEW = tmbench.GEN_NEW
WARM_REPS = 5          # timed warm prefills per process (after 2 warm-up runs on our side)
MODEL_VOCAB = {"small": 32000, "600m": 151936}
PROMPT = tmbench.GEN_PROMPT

MODELS = {
    "small": dict(config="llama-small", folder=os.path.join(tmbench.MODELS, "llama-small")),
    "600m": dict(config="llama-600m", folder=os.path.join(tmbench.MODELS, "llama-600m")),
}
# ours (file, recipe as bench/run.py's) and llama.cpp's type for each format.
FORMATS = {
    "fp32": ("decoder_model_merged.onnx", None, "F32"),
    "q4": ("decoder_model_merged_q4.onnx", ["--block", "32", "--gbq", "--dedupe"], "Q4_0"),
    "int8": ("decoder_model_merged_quantized.onnx", ["--dedupe"], "Q8_0"),
}


def build():
    """bench/llamacpp/build.sh: its last line is the bin folder."""
    out = subprocess.run(["sh", os.path.join(HERE, "build.sh")], check=True, stdout=subprocess.PIPE,
                         text=True).stdout
    return out.strip().splitlines()[-1]


def ours_model(model, fmt):
    m = MODELS[model]
    fp32 = os.path.join(m["folder"], FORMATS["fp32"][0])
    ok = tmbench.ensure_model(fp32, ("inflate", os.path.join(SK, m["config"], "decoder_model_merged.skeleton.onnx"), []))
    file, args, _ = FORMATS[fmt]
    path = os.path.join(m["folder"], file)
    if ok and args is not None:
        ok = tmbench.ensure_model(path, (fmt, fp32, args))
    return path if ok and os.path.exists(path) else None


def gguf_model(bin_dir, model, fmt):
    """The F32 GGUF from our fp32 export, then llama-quantize --pure for Q4_0 / Q8_0."""
    m = MODELS[model]
    os.makedirs(GGUF, exist_ok=True)
    f32 = os.path.join(GGUF, f"{m['config']}-f32.gguf")
    if not os.path.exists(f32):
        onnx = ours_model(model, "fp32")
        if not onnx:
            return None
        print(f"writing {f32}", file=sys.stderr)
        env = dict(os.environ, PYTHONPATH=os.path.join(DIR, "src", "gguf-py"))
        subprocess.run(["/usr/bin/python3", os.path.join(HERE, "onnx_to_gguf.py"), onnx, f32,
                        "--config", m["config"]], check=True, env=env, stdout=subprocess.DEVNULL)
    t = FORMATS[fmt][2]
    if t == "F32":
        return f32
    out = os.path.join(GGUF, f"{m['config']}-{t.lower()}.gguf")
    if not os.path.exists(out):
        print(f"writing {out}", file=sys.stderr)
        subprocess.run([os.path.join(bin_dir, "llama-quantize"), "--pure", f32, out + ".tmp", t],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.replace(out + ".tmp", out)
    return out


def llama_env(passive):
    env = dict(os.environ)
    if passive:
        env["OMP_WAIT_POLICY"] = "PASSIVE"
    else:
        env.pop("OMP_WAIT_POLICY", None)
    return env


def wall(cmd, env=None):
    """One process, timed from before its start to after its exit; returns (ms, JSON)."""
    t0 = time.perf_counter()
    out = tmbench.run_json(cmd, env)
    return (time.perf_counter() - t0) * 1e3, out


def llama_bench(bin_dir, gguf, threads, reps, passive):
    """llama-bench's pp32 at depth 0 and tg128 at depth 32: ms for the 32 tokens, ms a token."""
    res = {}
    for key, args in (("pp", ["-p", str(PROMPT), "-n", "0", "-d", "0"]),
                      ("tg", ["-p", "0", "-n", str(NEW), "-d", str(PROMPT)])):
        cmd = [os.path.join(bin_dir, "llama-bench"), "-m", gguf, "-t", str(threads), "-r", str(reps),
               "-o", "json"] + args
        p = subprocess.run(cmd, capture_output=True, text=True, env=llama_env(passive))
        if p.returncode != 0:
            raise RuntimeError("llama-bench: " + (p.stderr.strip().splitlines() or ["failed"])[-1])
        r = json.loads(p.stdout)[0]
        ts = r["avg_ts"]
        res[key] = PROMPT / ts * 1e3 if key == "pp" else 1e3 / ts
        res[key + "_sd"] = r.get("stddev_ts", 0.0)
    return res


def run_case(bin_dir, model, fmt, threads, rounds, args):
    onnx, gguf = ours_model(model, fmt), gguf_model(bin_dir, model, fmt)
    if not onnx or not gguf:
        raise RuntimeError("model absent")
    load = os.getloadavg()[0]
    passive = args.omp_passive == "on" or (args.omp_passive == "auto" and load > args.loaded)
    ids = ",".join(str(i) for i in tmbench.prompt_ids())
    gen = os.path.join(bin_dir, "tm-llama-gen")
    ours = [tmbench.TM, "generate", onnx, "--prompt-ids", ids, "--threads", str(threads), "--json"]
    theirs = [gen, gguf, "--prompt-ids", ids, "--threads", str(threads)]
    # Ours warm prefill: `transmuter bench` on the prompt at past 0 (bench/run.py's prefill32
    # inputs, the prompt's ids), a plan made once, then timed runs.
    pf = os.path.join(tmbench.WORK, "llamacpp", f"{model}-{fmt}-prefill{PROMPT}")
    tmbench.make_inputs(onnx, dict(seq=PROMPT, past=0, vocab=MODEL_VOCAB[model]), pf)
    np.save(os.path.join(pf, "input_ids.npy"), np.array([tmbench.prompt_ids()], np.int64))
    ours_warm = [tmbench.TM, "bench", onnx, "--inputs", pf, "--static", "use_cache_branch",
                 "--threads", str(threads), "--repeat", str(WARM_REPS), "--warmup", "2"]
    runs = {"ours": [], "llama": []}
    ttft = {"ours": [], "llama": []}
    warm = {"ours": [], "llama": []}
    for r in range(rounds):
        order = ["ours", "llama"] if r % 2 == 0 else ["llama", "ours"]
        for who in order:
            time.sleep(tmbench.SWITCH_PAUSE)
            if who == "ours":
                runs[who].append(tmbench.run_json(ours + ["--max-new", str(NEW)], tmbench.ours_env()))
                time.sleep(tmbench.SWITCH_PAUSE)
                warm[who] += tmbench.run_json(ours_warm, tmbench.ours_env())["times"]
            else:
                x = tmbench.run_json(theirs + ["--max-new", str(NEW), "--prefill-reps", str(WARM_REPS)],
                                     llama_env(passive))
                runs[who].append(x)
                warm[who].append(x["warm_prefill_ms"])
        for who in order:
            time.sleep(tmbench.SWITCH_PAUSE)
            cmd, env = (ours, tmbench.ours_env()) if who == "ours" else (theirs, llama_env(passive))
            ttft[who].append(wall(cmd + ["--max-new", "1"], env)[0])
    row = dict(model=model, fmt=fmt, gguf_type=FORMATS[fmt][2], threads=threads, rounds=rounds,
               load=load, passive=passive, onnx_mb=size_mb(onnx), gguf_mb=size_mb(gguf))
    for who in ("ours", "llama"):
        rs = runs[who]
        row[who + "_ms"] = tmbench.median([t for x in rs for t in x["decode_ms"]])
        row[who + "_prefill"] = tmbench.median([x["prefill_ms"] for x in rs])
        row[who + "_rss"] = max(x["peak_rss_mb"] for x in rs)
        row[who + "_ttft"] = tmbench.median(ttft[who])
        row[who + "_load_ms"] = tmbench.median([x["load_ms"] + x.get("context_ms", 0.0) for x in rs])
        row[who + "_warm"] = tmbench.median(warm[who])
    row["steady"] = all(x["tokens"] == runs["ours"][0]["tokens"] for x in runs["ours"]) and \
        all(x["tokens"] == runs["llama"][0]["tokens"] for x in runs["llama"])
    row["tokens"] = tmbench.agreement(runs["ours"][0]["tokens"], runs["llama"][0]["tokens"])
    if fmt == "fp32" and threads == min(int(t) for t in args.threads.split(",")):
        exact = tmbench.run_json(theirs + ["--max-new", str(NEW), "--kv-f32", "--margins"], llama_env(passive))
        row["tokens_kv_f32"] = g = tmbench.agreement(runs["ours"][0]["tokens"], exact["tokens"])
        if not g["identical"] and g["first_diff"] < len(exact.get("margins", [])):
            # A near tie there (random weights: logits within a few units of each other)
            # shows a summation-order difference, not a different network.
            row["gap_at_diff"] = exact["margins"][g["first_diff"]]
    if not args.no_llama_bench:
        row["bench"] = llama_bench(bin_dir, gguf, threads, args.bench_reps, passive)
    row["load_after"] = os.getloadavg()[0]
    return row


def size_mb(path):
    n = os.path.getsize(path)
    if os.path.exists(path + "_data"):
        n += os.path.getsize(path + "_data")
    return n / 1e6


def ratio(a, b):
    return a / b if b else float("nan")


def fmt_tokens(row):
    if row["fmt"] != "fp32":
        return "-"
    t = tmbench.agreement_text(row["tokens"])
    if "tokens_kv_f32" in row:
        t += f"; with an F32 cache: {tmbench.agreement_text(row['tokens_kv_f32'])}"
    if "gap_at_diff" in row:
        t += (f" (llama.cpp's top two logits at that step {row['gap_at_diff']:.2g} apart: a near "
              f"tie, summation order decides it)")
    return t


def write(rows, failed, args, path, started):
    def r2(a, b):
        return f"{ratio(a, b):.2f}"
    with open(path + ".tmp", "w") as f:
        f.write("# Transmuter against llama.cpp (issue 40)\n\n")
        f.write(f"Written by `make bench-llamacpp` (bench/llamacpp/run.py), started {started}; "
                f"{tmbench.machine()}.\n\n")
        f.write("llama.cpp: the source bundled in the npm package node-llama-cpp@3.22.1 (llama.cpp "
                "release v0.5.0 with the package's patch), built by bench/llamacpp/build.sh: Release, "
                "GGML_NATIVE, AMX off, no GPU backend, OpenMP. Both sides run the same network: "
                "the GGUF files hold our fp32 export's own weights (bench/llamacpp/onnx_to_gguf.py, "
                "with llama.cpp's gguf-py), quantized by `llama-quantize --pure` (every tensor, the "
                "embedding and the output included, in the one type, as our q4 / int8 exports "
                "quantize every MatMul and the embedding). Ours q4 is MatMulNBits, 4-bit blocks of "
                "32 with zero points (`quantize_variants.py q4 --gbq`), llama.cpp's Q4_0 blocks of 32 "
                "without; ours int8 is dynamic int8 activations with per-tensor int8 weights, Q8_0 "
                "blocks of 32 with a scale each. The GGUF's vocabulary is synthetic (the weights are "
                "random anyway); prompts are token ids.\n\n")
        f.write(f"Each case: {args.rounds} rounds (the 0.6B fp32: {big_rounds(args)}), alternating "
                f"which side runs first, each run a fresh process. Ratios are ours / llama.cpp: below "
                f"1.0 we are faster (smaller).\n\n"
                f"* **decode**: the median ms per new token over every step of every run of a "
                f"{PROMPT}-token prompt then {NEW} new tokens, greedy (ours: `transmuter generate "
                f"MODEL.onnx --prompt-ids ... --json`; llama.cpp: `tm-llama-gen`, "
                f"bench/llamacpp/llama_gen.cpp, the same loop over libllama: llama_decode per token, "
                f"its default F16 KV cache and flash-attention choice).\n"
                f"* **prefill 32, warm**: ours `transmuter bench` on the prompt at past 0 (a plan made "
                f"once, 2 warm-up runs, then {WARM_REPS} timed; it computes the logits of all 32 "
                f"positions), llama.cpp the same prompt again {WARM_REPS} times on an emptied cache "
                f"after the loop (last position's logits only); medians.\n"
                f"* **prefill 32, cold**: the loop's own prefill (the first of the process: ours "
                f"includes making and packing the plan, llama.cpp's repacking happens at load), "
                f"median.\n"
                f"* **peak RSS**: VmHWM of the loop's process, the highest. **TTFT**: wall time of a "
                f"process that loads, plans, prefills the prompt and makes one token (`--max-new 1`), "
                f"start to exit, median. **load**: the loop processes' own load time (ours "
                f"tm_model_load; llama.cpp model + context).\n"
                f"* **llama-bench**: pp{PROMPT} at depth 0 (ms for the {PROMPT} tokens) and tg{NEW} "
                f"at depth {PROMPT} (`-d {PROMPT}`, ms a token), -r {args.bench_reps}, after the "
                f"rounds, for reference.\n"
                f"* OMP_WAIT_POLICY=PASSIVE for llama.cpp's processes where the last column says so "
                f"(the host's 1-minute load average above {args.loaded} before the case: other work "
                f"was running).\n\n")
        f.write("## Generation loop and prefill\n\n")
        f.write("| model | ours / llama.cpp | threads | decode ms/token ours | llama.cpp | ratio | "
                "prefill 32 warm, ms ours | llama.cpp | ratio | prefill 32 cold, ms ours | llama.cpp | "
                "ratio | llama-bench pp32 ms / tg128@d32 ms | load before / after | OMP passive |\n")
        f.write("|" + "---|" * 15 + "\n")
        for r in rows:
            b = r.get("bench")
            bt = f"{b['pp']:.2f} / {b['tg']:.3f}" if b else "-"
            f.write(f"| {r['model']} | {r['fmt']} / {r['gguf_type']} | {r['threads']} | "
                    f"{r['ours_ms']:.3f} | {r['llama_ms']:.3f} | {r2(r['ours_ms'], r['llama_ms'])} | "
                    f"{r['ours_warm']:.2f} | {r['llama_warm']:.2f} | {r2(r['ours_warm'], r['llama_warm'])} | "
                    f"{r['ours_prefill']:.1f} | {r['llama_prefill']:.1f} | "
                    f"{r2(r['ours_prefill'], r['llama_prefill'])} | {bt} | "
                    f"{r['load']:.1f} / {r['load_after']:.1f} | {'yes' if r['passive'] else 'no'} |\n")
        for name, why in failed:
            f.write(f"| {name} | FAILED: {why} |" + " |" * 13 + "\n")
        f.write("\n## Memory and time to first token\n\n")
        f.write("| model | ours / llama.cpp | threads | peak RSS MB ours | llama.cpp | ratio | "
                "TTFT ms ours | llama.cpp | ratio | load ms ours | llama.cpp | files MB ours / llama.cpp |\n")
        f.write("|" + "---|" * 12 + "\n")
        for r in rows:
            f.write(f"| {r['model']} | {r['fmt']} / {r['gguf_type']} | {r['threads']} | "
                    f"{r['ours_rss']:.0f} | {r['llama_rss']:.0f} | {r2(r['ours_rss'], r['llama_rss'])} | "
                    f"{r['ours_ttft']:.0f} | {r['llama_ttft']:.0f} | {r2(r['ours_ttft'], r['llama_ttft'])} | "
                    f"{r['ours_load_ms']:.0f} | {r['llama_load_ms']:.0f} | "
                    f"{r['onnx_mb']:.0f} / {r['gguf_mb']:.0f} |\n")
        f.write("\n## Tokens\n\nThe fp32 loops' 128 greedy tokens, ours against llama.cpp's F32 "
                "(the same prompt ids):\n\n")
        for r in rows:
            if r["fmt"] == "fp32":
                f.write(f"* {r['model']}, {r['threads']} thread(s): {fmt_tokens(r)}"
                        f"{'' if r['steady'] else ' (runs of one side disagree)'}\n")
        f.write("\nThe host is shared with other work (the load columns): expect noise of several "
                "percent, much more where the load is high; rerun on a quiet machine before quoting. "
                "Regenerate: `make bench-llamacpp` (LLAMACPP_ARGS=\"--rounds 5\" etc.).\n")
    os.replace(path + ".tmp", path)


def big_rounds(args):
    return args.big_fp32_rounds or args.rounds


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="small,600m")
    ap.add_argument("--formats", default="q4,int8,fp32")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--big-fp32-rounds", type=int, default=0, help="rounds of the 0.6B fp32 (default --rounds)")
    ap.add_argument("--bench-reps", type=int, default=3)
    ap.add_argument("--omp-passive", choices=("auto", "on", "off"), default="auto")
    ap.add_argument("--loaded", type=float, default=0.5, help="load average above which the host counts as loaded")
    ap.add_argument("--no-llama-bench", action="store_true")
    ap.add_argument("--no-build", action="store_true", help="use bench/.llamacpp/build/bin as it is")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    started = time.strftime("%Y-%m-%d %H:%M")
    bin_dir = os.path.join(DIR, "build", "bin") if args.no_build else build()
    models = [m for m in args.models.split(",") if m]
    formats = [f for f in args.formats.split(",") if f]
    threads = [int(t) for t in args.threads.split(",")]
    full = set(models) == set(MODELS) and set(formats) == set(FORMATS) and sorted(threads) == [1, 2]
    out = args.out or (os.path.join(BENCH, "LLAMACPP_RESULTS.md") if full
                       else os.path.join(tmbench.WORK, "LLAMACPP_RESULTS-partial.md"))
    os.makedirs(os.path.dirname(out), exist_ok=True)
    rows, failed = [], []
    for model in models:
        for fmt in formats:
            rounds = big_rounds(args) if (model, fmt) == ("600m", "fp32") else args.rounds
            for t in threads:
                label = f"{model} {fmt} t{t}"
                try:
                    r = run_case(bin_dir, model, fmt, t, rounds, args)
                except (subprocess.CalledProcessError, RuntimeError, ValueError, OSError, KeyError) as e:
                    print(f"{label}: FAILED: {e}")
                    failed.append((label, str(e)))
                    continue
                rows.append(r)
                b = r.get("bench")
                print(f"{label}: decode {r['ours_ms']:.3f} / {r['llama_ms']:.3f} ms "
                      f"({ratio(r['ours_ms'], r['llama_ms']):.2f}); prefill32 {r['ours_prefill']:.1f} / "
                      f"{r['llama_prefill']:.1f} ms; RSS {r['ours_rss']:.0f} / {r['llama_rss']:.0f} MB; "
                      f"TTFT {r['ours_ttft']:.0f} / {r['llama_ttft']:.0f} ms"
                      + (f"; llama-bench pp32 {b['pp']:.2f} ms tg128@d32 {b['tg']:.3f} ms" if b else "")
                      + f"; tokens {fmt_tokens(r)}; load {r['load']:.1f}, OMP passive "
                      f"{'yes' if r['passive'] else 'no'}", flush=True)
                write(rows, failed, args, out, started)
    write(rows, failed, args, out, started)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
