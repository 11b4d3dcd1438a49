#!/usr/bin/env python3
"""`make bench-serve`: `transmuter serve` under load, side by side in one run. Not a test:
nothing here asserts a timing; the bars of issue 37 are reported, not enforced.

Embeddings: the MiniLM-L6 bench model (bench/models/minilm-l6/model.onnx, fp32, in a
repository folder made under bench/.work/serve with minilm-embed's tokenizer and
sentence-transformers files: mean pooling, normalized), one seeded sentence (5 to 60
words) per request to POST /v1/embeddings, from 1, 8 and 64 concurrent clients for
--seconds (30) each, against
  (a) transmuter serve with dynamic batching (--max-batch 64, --max-wait-ms 5),
  (b) transmuter serve with batches of one (--max-batch 1),
  (c) transformers.js's feature-extraction pipeline in a minimal Node HTTP server
      (bench/serve_tjs.mjs, onnxruntime-node; each request its own pipeline call),
all three started once and measured in turn at each concurrency (the order rotating from
one level to the next), after a warm-up of each. Every server gets the same intra-op
threads (--threads, 2). One output of each is compared first (cosine of the embeddings).

Load: wrk (Debian's wrk 4.1; bench/serve_wrk.lua posts the bodies and prints throughput,
errors and the p50/p99 latency wrk measured), keep-alive connections = clients, 1 wrk thread
for 1 client and 2 otherwise. wrk rather than a Node or Python client: it is C with an
event loop, so on this 2-core machine the load generator takes the least CPU from the
servers it measures, and its latency histogram is per request. The machine load (1-minute
load average) before and after each measurement, and each server's CPU seconds during it,
are reported with the figures: other work on the machine counts in them.

Chat: with LLAMA_SERVER=path/to/llama-server and GGUF=path/to/model.gguf (a GGUF of the
small LLaMA's shape; see issue 37), 1, 4 and 16 concurrent streams of --chat-tokens (128)
new tokens to /v1/chat/completions on ours (the small LLaMA q4 export) and on llama-server
(the same streaming client for both, a warm-up of each first, who goes first alternating):
aggregate tokens/s and time to first token. Without both it prints why it skips the chat
part. (Dry-run with a stand-in script that serves the same repository with transmuter on
the port it is given: the driver, warm-up and table work; no llama-server figure yet.)

Results go to bench/SERVE_RESULTS.md (or --out). Usage:
  bench/serve_bench.py [--seconds 30] [--clients 1,8,64] [--threads 2] [--out FILE]
                       [--skip-embeddings] [--chat-tokens 128] [--streams 1,4,16]
"""
import argparse, json, os, platform, re, shutil, signal, subprocess, sys, tempfile, threading, time
import http.client
import random

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TM = os.environ.get("TM_BENCH_BIN") or os.path.join(ROOT, "build", "transmuter")
WORK = os.path.join(HERE, ".work", "serve")
TJS_DIR = os.path.join(HERE, ".tjs")
DATA = os.path.join(ROOT, "tests", "data", "pipelines")


def load():
    return os.getloadavg()[0]


def cpu_seconds(pid):
    """User + system CPU seconds of a process (and its threads)."""
    try:
        f = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return float("nan")


def rss_mb(pid):
    try:
        m = re.search(r"VmRSS:\s+(\d+) kB", open("/proc/%d/status" % pid).read())
        return int(m.group(1)) / 1024 if m else float("nan")
    except OSError:
        return float("nan")


def sentences(n, seed=3701):
    """n seeded sentences of 5 to 60 words from the shipped test texts' words."""
    rng = random.Random(seed)
    words = []
    with open(os.path.join(DATA, "minilm-embed.cases.jsonl"), encoding="utf-8") as f:
        for line in f:
            for x in json.loads(line)["inputs"]:
                for t in (x if isinstance(x, list) else [x]):
                    if isinstance(t, str):
                        words += t.split()
    words = [w for w in words if w] or ["word"]
    return [" ".join(rng.choice(words) for _ in range(rng.randint(5, 60))) for _ in range(n)]


def make_embed_repo():
    repo = os.path.join(WORK, "repos", "minilm-l6")
    shutil.rmtree(repo, ignore_errors=True)
    os.makedirs(os.path.join(repo, "onnx"))
    src = os.path.join(DATA, "minilm-embed")
    for name in os.listdir(src):
        p = os.path.join(src, name)
        if name == "onnx":
            continue
        (shutil.copytree if os.path.isdir(p) else shutil.copy)(p, os.path.join(repo, name))
    model = os.path.join(HERE, "models", "minilm-l6", "model.onnx")
    if not os.path.exists(model):
        sys.exit("bench/models/minilm-l6/model.onnx is missing (bench/materialize.sh makes it)")
    os.symlink(os.path.abspath(model), os.path.join(repo, "onnx", "model.onnx"))
    return repo


class Server:
    def __init__(self, name, argv, env=None):
        self.name = name
        self.log = tempfile.NamedTemporaryFile("w+", prefix="serve-bench-", suffix=".log", delete=False)
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=self.log, env=env)
        self.port = None
        for _ in range(1200):
            self.log.seek(0)
            m = re.search(r"listening on http://[^:]+:(\d+)", self.log.read())
            if m:
                self.port = int(m.group(1))
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        self.log.seek(0)
        raise SystemExit("%s did not start: %s" % (name, self.log.read()[-2000:]))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def post(port, path, body, timeout=120):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, json.loads(data)


def wrk(port, clients, seconds, bodies_file, path="/v1/embeddings"):
    env = dict(os.environ, BODIES=bodies_file, URL_PATH=path)
    threads = 1 if clients == 1 else 2
    r = subprocess.run(["wrk", "-t%d" % threads, "-c%d" % clients, "-d%ds" % seconds, "--timeout", "60s",
                        "-s", os.path.join(HERE, "serve_wrk.lua"), "http://127.0.0.1:%d%s" % (port, path)],
                       capture_output=True, text=True, env=env)
    for line in r.stdout.splitlines():
        if line.startswith("{"):
            return json.loads(line)
    raise SystemExit("wrk gave no result: " + r.stdout[-1000:] + r.stderr[-1000:])


def cosine(a, b):
    import math
    dot = sum(x * y for x, y in zip(a, b))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def bench_embeddings(args, lines):
    os.makedirs(WORK, exist_ok=True)
    repo = make_embed_repo()
    texts = sentences(512)
    bodies = os.path.join(WORK, "bodies.jsonl")
    with open(bodies, "w", encoding="utf-8") as f:
        for t in texts:
            f.write(json.dumps({"model": "minilm-l6", "input": t}) + "\n")
    t = str(args.threads)
    servers = [
        Server("ours, dynamic batching", [TM, "serve", repo, "--port", "0", "--threads", t, "--max-batch", "64",
                                          "--max-wait-ms", "5", "--queue", "4096"]),
        Server("ours, batch size 1", [TM, "serve", repo, "--port", "0", "--threads", t, "--max-batch", "1",
                                      "--queue", "4096"]),
        Server("transformers.js in Node", ["node", os.path.join(HERE, "serve_tjs.mjs"), repo, "0", t]),
    ]
    try:
        # the same embedding from each
        ref = None
        check = []
        for s in servers:
            st, js = post(s.port, "/v1/embeddings", {"model": "minilm-l6", "input": texts[0]})
            e = js["data"][0]["embedding"] if st == 200 else None
            if ref is None:
                ref = e
            check.append("%s: %s" % (s.name, "%.6f" % cosine(ref, e) if e else "status %d" % st))
        print("cosine of one embedding against ours:", "; ".join(check))
        for s in servers:
            wrk(s.port, 8, 3, bodies)   # warm-up: plans for the batch shapes, onnxruntime's arenas
        results = {}
        for k, clients in enumerate(args.clients):
            order = servers[k % 3:] + servers[:k % 3]
            for s in order:
                before_load, before_cpu = load(), cpu_seconds(s.proc.pid)
                r = wrk(s.port, clients, args.seconds, bodies)
                r["cpu_s"] = cpu_seconds(s.proc.pid) - before_cpu
                r["load_before"], r["load_after"] = before_load, load()
                r["rss_mb"] = rss_mb(s.proc.pid)
                results[(s.name, clients)] = r
                print("%-26s %3d clients: %8.1f req/s  p50 %8.2f ms  p99 %8.2f ms  errors %d/%d  server CPU %.0f s  "
                      "load %.2f -> %.2f" % (s.name, clients, r["requests"] / r["seconds"], r["p50_us"] / 1e3,
                                            r["p99_us"] / 1e3, r["errors"], r["non2xx"], r["cpu_s"],
                                            r["load_before"], r["load_after"]), flush=True)
    finally:
        for s in servers:
            s.stop()
    lines.append("## Embeddings: MiniLM-L6 fp32, one sentence (5-60 words) per request, POST /v1/embeddings\n")
    lines.append("%d s per measurement; %d intra-op threads for every server; wrk keep-alive connections = "
                 "clients. Same embedding from each: %s.\n" % (args.seconds, args.threads, "; ".join(check)))
    lines.append("| clients | server | req/s | p50 ms | p99 ms | errors (socket / non-2xx) | server CPU s | "
                 "requests per server CPU s | RSS MB | load before -> after |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|")
    for clients in args.clients:
        for s in servers:
            r = results[(s.name, clients)]
            lines.append("| %d | %s | %.1f | %.2f | %.2f | %d / %d | %.1f | %.1f | %.0f | %.2f -> %.2f |" % (
                clients, s.name, r["requests"] / r["seconds"], r["p50_us"] / 1e3, r["p99_us"] / 1e3, r["errors"],
                r["non2xx"], r["cpu_s"], r["requests"] / r["cpu_s"] if r["cpu_s"] > 0 else float("nan"),
                r["rss_mb"], r["load_before"], r["load_after"]))
    top = max(args.clients)
    tput = {s.name: results[(s.name, top)]["requests"] / results[(s.name, top)]["seconds"] for s in servers}
    a, b, c = (tput[s.name] for s in servers)
    lines.append("")
    lines.append("Bars of issue 37 at %d clients (reported, not asserted):\n" % top)
    lines.append("- dynamic batching / batch size 1: **%.2fx** (bar: at least 3x)" % (a / b if b else float("inf")))
    lines.append("- ours (dynamic batching) / transformers.js in Node: **%.2fx** (bar: at least 2x)" %
                 (a / c if c else float("inf")))
    eff = {s.name: results[(s.name, top)]["requests"] / results[(s.name, top)]["cpu_s"] for s in servers}
    ea, eb, ec = (eff[s.name] for s in servers)
    lines.append("- per server CPU second (the machine is shared, so each server got what the others left): "
                 "batching / batch size 1 %.2fx, ours / transformers.js %.2fx\n" % (ea / eb, ea / ec))


# ---- chat ----------------------------------------------------------------------------------------

def stream_chat(port, model, tokens, out, i):
    """One streamed chat completion of up to `tokens` new tokens (exactly, where the server
    honours ignore_eos): time to first token, tokens (the usage count), seconds."""
    body = {"model": model, "messages": [{"role": "user", "content": "Tell me a story number %d." % i}],
            "max_tokens": tokens, "temperature": 0, "stream": True, "stream_options": {"include_usage": True},
            "ignore_eos": True}   # llama-server's; ours ignores it (random weights rarely choose the end)
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.time()
    c.request("POST", "/v1/chat/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    first, n = None, 0
    buf = b""
    while True:
        chunk = r.read1(65536) if hasattr(r, "read1") else r.read(4096)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            ev, buf = buf.split(b"\n\n", 1)
            if not ev.startswith(b"data: ") or ev == b"data: [DONE]":
                continue
            js = json.loads(ev[6:])
            if js.get("usage"):
                n = js["usage"].get("completion_tokens", n)
            if js.get("choices") and js["choices"][0].get("delta", {}).get("content") and first is None:
                first = time.time() - t0
    c.close()
    out[i] = (first if first is not None else float("nan"), n, time.time() - t0)


def bench_chat_server(port, model, streams, tokens):
    out = [None] * streams
    t0 = time.time()
    threads = [threading.Thread(target=stream_chat, args=(port, model, tokens, out, i)) for i in range(streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.time() - t0
    ttft = sorted(o[0] for o in out)
    return sum(o[1] for o in out) / wall, ttft[len(ttft) // 2], sum(o[1] for o in out)


def bench_chat(args, lines):
    llama, gguf = os.environ.get("LLAMA_SERVER"), os.environ.get("GGUF")
    if not (llama and gguf and os.path.exists(llama) and os.path.exists(gguf)):
        msg = ("chat part skipped: set LLAMA_SERVER=path/to/llama-server and GGUF=path/to/model.gguf (llama.cpp "
               "from node-llama-cpp@3.22.1's bundle, a GGUF of the small LLaMA's shape) to run it")
        print(msg)
        lines.append("## Chat\n\n%s%s.\n" % (msg[0].upper(), msg[1:]))
        return
    sys.path.insert(0, HERE)
    import run as bench_run   # bench/run.py: the small LLaMA's repository folder, as its pipeline cases make it
    q4 = os.path.join(HERE, "models", "llama-small", "decoder_model_merged_q4.onnx")
    repo = bench_run.make_repo({"repo": "llama-small-q4", "task": "text-generation", "model": q4,
                                "file": "decoder_model_merged.onnx"})
    ours = Server("ours", [TM, "serve", repo, "--port", "0", "--threads", str(args.threads)])
    theirs = Server("llama-server", [llama, "-m", gguf, "--host", "127.0.0.1", "--port", str(args.llama_port),
                                     "-t", str(args.threads), "-np", str(max(args.streams)), "-c",
                                     str(max(args.streams) * (args.chat_tokens + 64))])
    rows = []
    try:
        for port, model in [(ours.port, "llama-small-q4"), (args.llama_port, "model")]:
            bench_chat_server(port, model, 2, 8)   # warm-up: plans, caches
        for k, streams in enumerate(args.streams):
            pair = [("ours", ours.port, "llama-small-q4"), ("llama-server", args.llama_port, "model")]
            for name, port, model in (pair if k % 2 == 0 else pair[::-1]):   # who goes first alternates
                before = load()
                tps, ttft, n = bench_chat_server(port, model, streams, args.chat_tokens)
                rows.append((streams, name, tps, ttft, n, before, load()))
                print("chat %-12s %2d streams: %7.1f tokens/s  TTFT p50 %.3f s  (%d tokens)" % (name, streams, tps,
                                                                                              ttft, n), flush=True)
    finally:
        ours.stop()
        theirs.stop()
    lines.append("## Chat: %d new tokens per stream, greedy\n" % args.chat_tokens)
    lines.append("| streams | server | tokens/s (all streams) | TTFT p50 s | tokens | load before -> after |")
    lines.append("|---|---|---|---|---|---|")
    for r in rows:
        lines.append("| %d | %s | %.1f | %.3f | %d | %.2f -> %.2f |" % r)
    lines.append("")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=int, default=30)
    ap.add_argument("--clients", default="1,8,64")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=os.path.join(HERE, "SERVE_RESULTS.md"))
    ap.add_argument("--skip-embeddings", action="store_true")
    ap.add_argument("--chat-tokens", type=int, default=128)
    ap.add_argument("--streams", default="1,4,16")
    ap.add_argument("--llama-port", type=int, default=18480)
    args = ap.parse_args()
    args.clients = [int(x) for x in args.clients.split(",")]
    args.streams = [int(x) for x in args.streams.split(",")]
    if not shutil.which("wrk"):
        sys.exit("wrk is needed (apt-get install wrk)")
    if not os.path.exists(os.path.join(TJS_DIR, "node_modules", "@huggingface", "transformers")):
        sys.exit("transformers.js is needed in bench/.tjs (npm install --prefix bench/.tjs @huggingface/transformers@4.3.2)")
    cpu = ""
    try:
        cpu = re.search(r"model name\s*:\s*(.*)", open("/proc/cpuinfo").read()).group(1)
    except (OSError, AttributeError):
        pass
    lines = ["# transmuter serve under load (`make bench-serve`)", "",
             "Made by bench/serve_bench.py on %s, %s (%d cores), %s; load average at the start %.2f. "
             "A loaded-machine figure: other work shares the cores (see each row's load)." % (
                 time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), cpu, os.cpu_count(), platform.platform(), load()),
             ""]
    if not args.skip_embeddings:
        bench_embeddings(args, lines)
    bench_chat(args, lines)
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote", args.out)


if __name__ == "__main__":
    main()
