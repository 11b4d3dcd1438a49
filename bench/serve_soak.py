#!/usr/bin/env python3
"""A soak of `transmuter serve` (not a test, not in make test): requests at a fixed rate
for --minutes (10), open loop (a request starts on schedule whether or not earlier ones
have ended, as clients do; --connections keep-alive workers carry them), with the
server's RSS and the window's p50/p99 latency and errors sampled every --every seconds.
At the end: errors (the bar: none), RSS from the first sample after warm-up to the last
(the bar: within 5%), and the p99 of each window against the first (steady). The figures
are printed and, with --out, written as Markdown. Load: one seeded sentence per request to
POST /v1/embeddings on the MiniLM-L6 bench repository (bench/serve_bench.py makes it), or
--url/--model for a server already running (any OpenAI-compatible embeddings route).

--rate auto measures the maximum first (wrk, 64 clients, 15 s) and soaks at --fraction
(0.8) of it.

Usage: bench/serve_soak.py [--rate 20|auto] [--minutes 10] [--every 30] [--connections 64]
                           [--threads 2] [--url http://127.0.0.1:PORT --model NAME] [--out FILE]
"""
import argparse, http.client, json, os, queue, re, sys, threading, time
from urllib.parse import urlparse

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import serve_bench as sb  # noqa: E402  (the repository, the sentences, the server wrapper, wrk)


def percentile(xs, q):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q / 100 * len(xs)))]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", default="auto")
    ap.add_argument("--fraction", type=float, default=0.8)
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--every", type=float, default=30)
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--url")
    ap.add_argument("--model", default="minilm-l6")
    ap.add_argument("--out")
    args = ap.parse_args()

    server = None
    if args.url:
        u = urlparse(args.url)
        host, port, pid = u.hostname, u.port, None
    else:
        repo = sb.make_embed_repo()
        server = sb.Server("ours", [sb.TM, "serve", repo, "--port", "0", "--threads", str(args.threads),
                                    "--max-batch", "64", "--queue", "8192"])
        host, port, pid = "127.0.0.1", server.port, server.proc.pid
    texts = sb.sentences(512)
    bodies = [json.dumps({"model": args.model, "input": t}) for t in texts]
    try:
        if args.rate == "auto":
            path = os.path.join(sb.WORK, "soak-bodies.jsonl")
            os.makedirs(sb.WORK, exist_ok=True)
            with open(path, "w") as f:
                f.write("\n".join(bodies) + "\n")
            if host != "127.0.0.1":
                sys.exit("--rate auto needs a local server")
            sb.wrk(port, 8, 3, path)
            r = sb.wrk(port, 64, 15, path)
            top = r["requests"] / r["seconds"]
            rate = args.fraction * top
            print("maximum measured: %.1f req/s (64 clients, 15 s, load %.2f); soaking at %.1f req/s" % (
                top, sb.load(), rate), flush=True)
        else:
            rate = float(args.rate)
        work = queue.Queue()
        lock = threading.Lock()
        window = {"lat": [], "errors": 0, "late": 0}
        total = {"requests": 0, "errors": 0}

        def worker():
            c = None
            while True:
                item = work.get()
                if item is None:
                    return
                due, body = item
                t0 = time.time()
                ok = False
                try:
                    if c is None:
                        c = http.client.HTTPConnection(host, port, timeout=120)
                    c.request("POST", "/v1/embeddings", body=body, headers={"Content-Type": "application/json"})
                    r = c.getresponse()
                    r.read()
                    ok = r.status == 200
                except (OSError, http.client.HTTPException):
                    c = None
                # latency from the scheduled start: queueing in the client counts (no coordinated omission)
                lat = time.time() - due
                with lock:
                    window["lat"].append(lat)
                    total["requests"] += 1
                    if not ok:
                        window["errors"] += 1
                        total["errors"] += 1
                    if t0 - due > 1.0:
                        window["late"] += 1

        workers = [threading.Thread(target=worker, daemon=True) for _ in range(args.connections)]
        for w in workers:
            w.start()
        samples = []
        start = time.time()
        end = start + args.minutes * 60
        next_sample = start + args.every
        k = 0
        print("%8s %9s %8s %8s %7s %6s %8s %6s" % ("t s", "requests", "p50 ms", "p99 ms", "errors", "late",
                                                 "RSS MB", "load"), flush=True)
        while True:
            now = time.time()
            if now >= end:
                break
            due = start + k / rate
            if due > now:
                time.sleep(min(due - now, max(0.0, next_sample - now), 0.05))
            else:
                work.put((due, bodies[k % len(bodies)]))
                k += 1
            if time.time() >= next_sample:
                with lock:
                    lat, errs, late = window["lat"], window["errors"], window["late"]
                    window.update(lat=[], errors=0, late=0)
                s = dict(t=time.time() - start, n=len(lat), p50=percentile(lat, 50) * 1e3, p99=percentile(lat, 99) * 1e3,
                         errors=errs, late=late, rss=sb.rss_mb(pid) if pid else float("nan"), load=sb.load())
                samples.append(s)
                print("%8.0f %9d %8.2f %8.2f %7d %6d %8.1f %6.2f" % (s["t"], s["n"], s["p50"], s["p99"], s["errors"],
                                                                    s["late"], s["rss"], s["load"]), flush=True)
                next_sample += args.every
        for _ in workers:
            work.put(None)
        for w in workers:
            w.join(timeout=180)
    finally:
        if server:
            server.stop()
    if len(samples) < 2:
        sys.exit("too short to judge: fewer than two samples")
    first, last = samples[1] if len(samples) > 2 else samples[0], samples[-1]   # the first window warms up
    rss_change = (last["rss"] - first["rss"]) / first["rss"] * 100 if first["rss"] == first["rss"] else float("nan")
    p99s = [s["p99"] for s in samples[1:]] or [samples[0]["p99"]]
    lines = ["# transmuter serve soak", "",
             "%.1f req/s for %.0f min, open loop on %d connections, one sentence per request to /v1/embeddings "
             "(%s). A loaded-machine figure: see each window's load." % (rate, args.minutes, args.connections,
                                                                       "MiniLM-L6 fp32" if server else args.url), "",
             "| t s | requests | p50 ms | p99 ms | errors | started > 1 s late | RSS MB | load |",
             "|---|---|---|---|---|---|---|---|"]
    lines += ["| %.0f | %d | %.2f | %.2f | %d | %d | %.1f | %.2f |" % (s["t"], s["n"], s["p50"], s["p99"], s["errors"],
                                                                    s["late"], s["rss"], s["load"]) for s in samples]
    lines += ["", "- requests %d, errors %d (bar: none)" % (total["requests"], total["errors"]),
              "- RSS %.1f MB after the first window, %.1f MB at the end: %+.1f%% (bar: within 5%%)" % (
                  first["rss"], last["rss"], rss_change),
              "- p99 per window after the first: min %.2f ms, max %.2f ms (max / min %.2f)" % (
                  min(p99s), max(p99s), max(p99s) / min(p99s) if min(p99s) > 0 else float("inf"))]
    print("\n".join(lines[-3:]))
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")
        print("wrote", args.out)


if __name__ == "__main__":
    main()
