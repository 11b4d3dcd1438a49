"""tests/serve.sh's checks of `transmuter serve` over loopback HTTP: each route against the
library called through the CLI (`transmuter pipeline ... --call`, `generate ... --json`,
`run`), bad requests (4xx JSON errors, the server alive after them), the API key,
back-pressure, a client that goes away, concurrent streams, the official openai npm client
when bench/.serve has it, and SIGTERM. No timing assertions: waits poll with long limits.
Usage: serve_checks.py TRANSMUTER"""
import base64
import http.client
import json
import os
import re
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

TM = sys.argv[1]
P = "tests/data/pipelines"
ONNX = "tests/data/tiny/bert/model.onnx"
passed = failed = skipped = 0


def check(name, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
        print("ok  ", name)
    else:
        failed += 1
        print("FAIL", name, detail)


def skip(name, why):
    global skipped
    skipped += 1
    print("skip", name, "-", why)


def cli(*args):
    return subprocess.run([TM, *args], capture_output=True, text=True, check=True).stdout


def start(*args):
    log = tempfile.NamedTemporaryFile("w+", prefix="serve-", suffix=".log", delete=False)
    proc = subprocess.Popen([TM, "serve", *args, "--port", "0", "--threads", "1"], stderr=log,
                            stdout=subprocess.DEVNULL)
    for _ in range(600):
        log.seek(0)
        m = re.search(r"listening on http://[^:]+:(\d+)", log.read())
        if m:
            return proc, int(m.group(1)), log.name
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    log.seek(0)
    raise SystemExit("the server did not start: " + log.read())


def request(port, method, path, body=None, headers=None, conn=None, raw=None):
    """(status, headers, parsed JSON or text) on a new connection or conn (kept alive)."""
    c = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    h = {"Content-Type": "application/json", **(headers or {})}
    c.request(method, path, body=data, headers=h)
    r = c.getresponse()
    text = r.read().decode()
    if not conn:
        c.close()
    try:
        return r.status, dict(r.getheaders()), json.loads(text)
    except ValueError:
        return r.status, dict(r.getheaders()), text


def sse(port, path, body, headers=None):
    """The JSON events of a streamed answer, and whether it ended with [DONE]."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json", **(headers or {})})
    r = c.getresponse()
    events, done = [], False
    for line in r.read().decode().split("\n"):
        if line.startswith("data: "):
            if line == "data: [DONE]":
                done = True
            else:
                events.append(json.loads(line[6:]))
    c.close()
    return r.status, r.getheader("Content-Type"), events, done


def close(a, b, tol=1e-5):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return a.shape == b.shape and np.allclose(a, b, rtol=tol, atol=tol)


def metric(port, name):
    _, _, text = request(port, "GET", "/metrics")
    m = re.search(r"^%s (\S+)$" % re.escape(name), text, re.M)
    return float(m.group(1)) if m else None


def library_embeddings(texts, options):
    out = json.loads(cli("pipeline", "feature-extraction", P + "/minilm-embed", "--call",
                         json.dumps({"inputs": [texts], "options": options})))
    return np.array(out["data"], dtype=np.float32).reshape(out["dims"])


def library_generate(*args):
    return json.loads(cli("generate", P + "/llama-chat", *args, "--json"))["text"]


def model_logprobs(ids):
    """log-softmax of llama-chat's logits at every position of ids, from `transmuter run`
    on the model alone (no generator, no cache: empty past tensors)."""
    d = tempfile.mkdtemp()
    n = len(ids)
    np.save(d + "/input_ids.npy", np.array([ids], dtype=np.int64))
    np.save(d + "/attention_mask.npy", np.ones((1, n), dtype=np.int64))
    np.save(d + "/position_ids.npy", np.arange(n, dtype=np.int64)[None])
    for layer in range(2):
        for kv in ("key", "value"):
            np.save("%s/past_key_values.%d.%s.npy" % (d, layer, kv), np.zeros((1, 2, 0, 8), dtype=np.float32))
    cli("run", P + "/llama-chat/onnx/model.onnx", "--inputs", d, "--out", d + "/out")
    x = np.load(d + "/out/logits.npy")[0].astype(np.float64)
    m = x.max(axis=1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=1, keepdims=True))


def logprob_checks(port, ref_chat, ref_cmpl):
    """logprobs against log-softmax of the model's own logits, in both endpoints' formats."""
    st, _, c = request(port, "POST", "/v1/completions", {"model": "llama-chat", "prompt": "Hello", "max_tokens": 6,
                                                         "temperature": 0, "logprobs": 3})
    lp = c["choices"][0]["logprobs"] if st == 200 else None
    check("/v1/completions logprobs: four lists of one item per token, text = the tokens joined",
          lp and len(lp["tokens"]) == 6 and len(lp["token_logprobs"]) == 6 and len(lp["top_logprobs"]) == 6 and
          "".join(lp["tokens"]) == c["choices"][0]["text"] == ref_cmpl and lp["text_offset"][0] == len("Hello"), c)
    prompt = json.loads(cli("tokenize", P + "/llama-chat", "Hello", "--json"))["ids"]
    # the raw decoder's greedy ids (generate on the model file: no tm_generator)
    new_ids = [int(x) for x in cli("generate", P + "/llama-chat/onnx/model.onnx", "--prompt-ids",
                                   ",".join(map(str, prompt)), "--max-new", "6").split(",")]
    ref = model_logprobs(prompt + new_ids[:-1])[len(prompt) - 1:]
    want = [ref[t][tok] for t, tok in enumerate(new_ids)]
    check("... token_logprobs = log-softmax of the model's logits at each chosen token (1e-4)",
          lp and close(lp["token_logprobs"], want, 1e-4), (lp and lp["token_logprobs"], want))
    tops_ok = lp and all(len(t) == 3 and close(sorted(t.values(), reverse=True), np.sort(ref[i])[::-1][:3], 1e-4)
                         for i, t in enumerate(lp["top_logprobs"]))
    check("... top_logprobs: the 3 best of each position, their log-probabilities", tops_ok, lp and lp["top_logprobs"])

    body = chat_body(max_tokens=8, temperature=0, logprobs=True, top_logprobs=2)
    st, _, c = request(port, "POST", "/v1/chat/completions", body)
    ch = c["choices"][0] if st == 200 else {}
    content = (ch.get("logprobs") or {}).get("content") or []
    check("chat logprobs: a content item per token, joined = the message",
          len(content) == 8 and "".join(x["token"] for x in content) == ch["message"]["content"] == ref_chat, ch)
    check("chat logprobs: greedy picks the best, bytes are the token's UTF-8, top 2 sorted, all <= 0",
          content and all(x["top_logprobs"][0]["logprob"] == x["logprob"] and len(x["top_logprobs"]) == 2 and
                          x["top_logprobs"][0]["logprob"] >= x["top_logprobs"][1]["logprob"] and x["logprob"] <= 0 and
                          bytes(x["bytes"]) == x["token"].encode() for x in content), content[:2])
    st, _, ev, done = sse(port, "/v1/chat/completions", dict(body, stream=True))
    streamed = [x for e in ev if e["choices"] and e["choices"][0].get("logprobs") for x in
                e["choices"][0]["logprobs"]["content"]]
    check("chat logprobs streamed: the same items, spread over the chunks",
          done and [(x["token"], x["logprob"]) for x in streamed] == [(x["token"], x["logprob"]) for x in content],
          streamed[:2])
    st, _, c = request(port, "POST", "/v1/chat/completions", chat_body(max_tokens=4, temperature=0.8, seed=3, n=2,
                                                                       logprobs=True))
    check("chat logprobs with n=2 sampled: each choice its own items, no top_logprobs asked",
          st == 200 and all(len(ch["logprobs"]["content"]) == 4 and all(x["top_logprobs"] == [] for x in
                                                                        ch["logprobs"]["content"]) for ch in c["choices"]), c)
    st, _, c = request(port, "POST", "/v1/chat/completions", chat_body(max_tokens=2, temperature=0))
    check("no logprobs asked: null", st == 200 and c["choices"][0]["logprobs"] is None, c)


def binary_request(port, path, header, blob, extra_headers=None):
    """POST JSON header + binary data (Inference-Header-Content-Length); (status, headers,
    JSON part, binary part)."""
    js = json.dumps(header).encode()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    h = {"Content-Type": "application/octet-stream", "Inference-Header-Content-Length": str(len(js)),
         **(extra_headers or {})}
    c.request("POST", path, body=js + blob, headers=h)
    r = c.getresponse()
    data = r.read()
    headers = {k.lower(): v for k, v in r.getheaders()}
    c.close()
    n = int(headers.get("inference-header-content-length", len(data)))
    return r.status, headers, json.loads(data[:n]), data[n:]


def oip_binary_checks(port, inputs, ref_h):
    """The binary tensor data extension: inputs as raw bytes, outputs asked as binary."""
    arrays = [np.array(i["data"], dtype="<i8").reshape(i["shape"]) for i in inputs]
    head = {"id": "b1", "inputs": [{"name": i["name"], "shape": i["shape"], "datatype": "INT64",
                                    "parameters": {"binary_data_size": a.nbytes}} for i, a in zip(inputs, arrays)]}
    blob = b"".join(a.tobytes() for a in arrays)
    st, h, js, rest = binary_request(port, "/v2/models/model/infer", head, blob)
    o = js["outputs"][0] if st == 200 else {}
    check("OIP binary inputs (Inference-Header-Content-Length, binary_data_size) = transmuter run",
          st == 200 and rest == b"" and close(np.array(o.get("data", [])).reshape(o.get("shape", [0])), ref_h), js)
    head["outputs"] = [{"name": "last_hidden_state", "parameters": {"binary_data": True}}]
    st, h, js, rest = binary_request(port, "/v2/models/model/infer", head, blob)
    o = js["outputs"][0] if st == 200 else {}
    got = np.frombuffer(rest, dtype="<f4").reshape(o["shape"]) if st == 200 and "shape" in o else None
    check("OIP binary output: its header length, octet-stream, binary_data_size, float32 bytes = transmuter run",
          st == 200 and h.get("content-type") == "application/octet-stream" and
          o["parameters"]["binary_data_size"] == len(rest) == ref_h.size * 4 and "data" not in o and
          close(got, ref_h), (st, h, js))
    # JSON inputs, every output binary by the request's binary_data_output; one input binary
    mixed = {"inputs": [inputs[0], inputs[1], {"name": inputs[2]["name"], "shape": inputs[2]["shape"],
                                                 "datatype": "INT64", "parameters": {"binary_data_size": arrays[2].nbytes}}],
             "parameters": {"binary_data_output": True}}
    st, h, js, rest = binary_request(port, "/v2/models/model/infer", mixed, arrays[2].tobytes())
    check("OIP: JSON and binary inputs mixed, binary_data_output for all outputs",
          st == 200 and close(np.frombuffer(rest, dtype="<f4").reshape(ref_h.shape), ref_h), (st, js))
    bad = [
        ("a header length over the body", {"inputs": inputs}, b"", {"Inference-Header-Content-Length": "999999"},
         "Inference-Header-Content-Length"),
        ("a header length that is not a number", {"inputs": inputs}, b"", {"Inference-Header-Content-Length": "12x"},
         "Inference-Header-Content-Length"),
        ("binary_data_size that is not the tensor's bytes", dict(head, outputs=[]), blob[:-8] + b"\0" * 8, None, None),
        ("binary bytes left over", head, blob + b"\0" * 8, None, "add up to"),
        ("binary data missing", head, blob[:16], None, "past the end"),
        ("both data and binary_data_size", {"inputs": [dict(inputs[0], parameters={"binary_data_size": 8})]}, b"",
         None, "both"),
        ("binary_data_size a string", {"inputs": [{"name": "input_ids", "shape": [1, 1], "datatype": "INT64",
                                                  "parameters": {"binary_data_size": "8"}}]}, b"\0" * 8, None,
         "binary_data_size"),
        ("binary_data not a boolean", dict(head, outputs=[{"name": "last_hidden_state",
                                                          "parameters": {"binary_data": 1}}]), blob, None, "binary_data"),
    ]
    for what, hd, data, hdrs, say in bad:
        if what.startswith("binary_data_size that"):
            hd = {"inputs": [dict(x, parameters={"binary_data_size": x["parameters"]["binary_data_size"] - 8})
                             for x in head["inputs"][:1]] + head["inputs"][1:]}
            say = "binary_data_size is"
        try:
            st, _, js, _ = binary_request(port, "/v2/models/model/infer", hd, data, hdrs)
        except (ValueError, http.client.HTTPException, OSError) as e:
            st, js = None, str(e)
        check("OIP binary: %s -> 400 naming it" % what, st == 400 and say in js.get("error", ""), (st, js))
    st, _, meta = request(port, "GET", "/v2")
    check("GET /v2 lists the binary_tensor_data extension", st == 200 and "binary_tensor_data" in meta["extensions"], meta)


def chat_body(**kw):
    return {"model": "llama-chat", "messages": [{"role": "user", "content": "Hi"}], **kw}


def make_reranker(dst):
    """A cross-encoder (a sequence classifier with one label) from bert-nli: its classifier's
    first row (entailment) alone, so that its logit is bert-nli's entailment logit."""
    import onnx
    from onnx import numpy_helper
    src = P + "/bert-nli"
    os.makedirs(dst + "/onnx")
    for f in ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"]:
        with open(f"{src}/{f}", "rb") as a, open(f"{dst}/{f}", "wb") as b:
            b.write(a.read())
    cfg = json.load(open(src + "/config.json"))
    cfg["id2label"], cfg["label2id"] = {"0": "LABEL_0"}, {"LABEL_0": 0}
    json.dump(cfg, open(dst + "/config.json", "w"))
    m = onnx.load(src + "/onnx/model.onnx")
    for t in m.graph.initializer:
        if t.name in ("m.classifier.weight", "m.classifier.bias"):
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t)[:1], t.name))
    m.graph.output[0].type.tensor_type.shape.dim[1].dim_value = 1
    onnx.save(m, dst + "/onnx/model.onnx")
    return dst


def library_pairs(repo, pairs, options):
    call = {"inputs": [[{"text": a, "text_pair": b} for a, b in pairs]], "options": options}
    return json.loads(cli("pipeline", "text-classification", repo, "--call", json.dumps(call)))


def same_labels(got, want):
    """Lists of lists of {label, score}: the same labels in the same order, scores within 1e-5
    (a text batched with a longer one gets its padding)."""
    flat = lambda rows: [(x["label"], x["score"]) for row in rows for x in row]
    g, w = flat(got), flat(want)
    return [a for a, _ in g] == [a for a, _ in w] and close([b for _, b in g], [b for _, b in w])


def tei_checks(port):
    """/predict (texts, pairs, batches, raw_scores, truncate) and /rerank against the
    text-classification pipeline on the same pairs."""
    ref_cls = json.loads(cli("pipeline", "text-classification", P + "/bert-sentiment", "--call",
                             json.dumps({"inputs": [["I love this", "I hate it"]], "options": {"top_k": None}})))
    st, _, pr = request(port, "POST", "/predict", {"inputs": "I love this"})
    check("/predict one text = pipeline text-classification (top_k null)", st == 200 and pr == ref_cls[0], (pr, ref_cls))
    st, _, pr = request(port, "POST", "/predict", {"inputs": [["I love this"], ["I hate it"]]})
    check("/predict a batch [[a], [b]] = the pipeline's batch", st == 200 and pr == ref_cls, pr)
    ref_pair = library_pairs(P + "/bert-sentiment", [("I love this", "I hate it")], {"top_k": None})
    st, _, pr = request(port, "POST", "/predict", {"inputs": ["I love this", "I hate it"]})
    check("/predict [a, b] is one pair (TEI) = the pipeline's {text, text_pair}", st == 200 and pr == ref_pair[0],
          (pr, ref_pair))
    ref_raw = library_pairs(P + "/bert-sentiment", [("I love this", "I hate it")],
                            {"top_k": None, "function_to_apply": "none"})
    st, _, pr = request(port, "POST", "/predict", {"inputs": [["I love this", "I hate it"], ["I hate it"]],
                                                   "raw_scores": True})
    ref_raw1 = json.loads(cli("pipeline", "text-classification", P + "/bert-sentiment", "--call", json.dumps(
        {"inputs": [["I hate it"]], "options": {"top_k": None, "function_to_apply": "none"}})))
    check("/predict raw_scores: the logits (function_to_apply none), a batch mixing a pair and a text",
          st == 200 and same_labels(pr, [ref_raw[0], ref_raw1[0]]), (pr, ref_raw, ref_raw1))
    long_text = " ".join(["word"] * 600)
    st, _, pr = request(port, "POST", "/predict", {"inputs": long_text})
    check("/predict over 512 tokens, truncate false (TEI's default) -> 413", st == 413 and "512" in pr["error"], pr)
    st, _, pr = request(port, "POST", "/predict", {"inputs": long_text, "truncate": True})
    check("/predict truncate true cuts it", st == 200 and len(pr) == 2, pr)

    if "rerank" not in reranker_models:
        skip("/rerank", "python3-onnx is missing (the cross-encoder is made from bert-nli with it)")
        st, _, rr = request(port, "POST", "/rerank", {"query": "q", "texts": ["a"]})
        check("/rerank without a cross-encoder: 404 saying so", st == 404 and "cross-encoder" in rr["error"], rr)
        return
    query = "A man is playing a guitar on stage."
    docs = ["A person plays music.", "Nobody is on the stage.", "A cat sleeps.", "A man plays an instrument."]
    raw = [r[0]["score"] for r in [[x for x in row if x["label"] == "entailment"] for row in
           library_pairs(P + "/bert-nli", [(query, d) for d in docs], {"top_k": None, "function_to_apply": "none"})]]
    want = sorted(range(len(docs)), key=lambda i: (-raw[i], i))
    st, _, rr = request(port, "POST", "/rerank", {"query": query, "texts": docs, "raw_scores": True})
    check("/rerank raw_scores: bert-nli's entailment logits of (query, text), best first",
          st == 200 and [r["index"] for r in rr] == want and close([r["score"] for r in rr], [raw[i] for i in want]) and
          all("text" not in r for r in rr), (rr, raw))
    st, _, rr = request(port, "POST", "/rerank", {"query": query, "texts": docs, "return_text": True})
    sig = [1 / (1 + np.exp(-x)) for x in raw]
    check("/rerank: sigmoid scores, best first, return_text",
          st == 200 and [r["index"] for r in rr] == want and close([r["score"] for r in rr], [sig[i] for i in want]) and
          [r["text"] for r in rr] == [docs[i] for i in want], rr)
    st, _, pr = request(port, "POST", "/predict", {"model": "rerank", "inputs": [query, docs[0]]})
    check("/predict on the cross-encoder: its sigmoid score", st == 200 and close([pr[0]["score"]], [sig[0]]), pr)
    for body, want_st, what in [
        ({"query": query, "texts": []}, 400, "empty"),
        ({"query": query}, 400, "texts"),
        ({"texts": ["a"]}, 400, "query"),
        ({"query": query, "texts": ["a", 3]}, 400, "texts"),
        ({"query": query, "texts": ["a"], "raw_scores": "yes"}, 422, "raw_scores"),
        ({"query": query, "texts": ["a"], "truncation_direction": "Left"}, 422, "Left"),
        ({"query": long_text, "texts": ["a"]}, 413, "512"),
        ({"model": "bert-sentiment", "query": query, "texts": ["a"]}, 400, "re-ranker"),
    ]:
        st, _, rr = request(port, "POST", "/rerank", body)
        check("/rerank %s -> %d" % (json.dumps(body)[:60], want_st), st == want_st and what in rr.get("error", ""),
              (st, rr))
    st, _, rr = request(port, "POST", "/rerank", {"query": long_text, "texts": ["a", "b"], "truncate": True})
    check("/rerank truncate true cuts the pairs", st == 200 and len(rr) == 2, rr)


reranker_models = []


def main():
    models = [P + "/minilm-embed", P + "/llama-chat", P + "/bert-sentiment", ONNX]
    try:
        models.append("rerank=" + make_reranker(tempfile.mkdtemp() + "/rerank"))
        reranker_models.append("rerank")
    except ImportError:
        pass
    # a long grace period: SIGTERM below must not cut the stream in flight, however slow
    # this machine (sanitizers, other work) is
    proc, port, log = start(*models, "--max-wait-ms", "50", "--max-body-mb", "1", "--grace-s", "120")

    # ---- probes and listings
    check("GET /health", request(port, "GET", "/health")[0] == 200)
    st, _, live = request(port, "GET", "/v2/health/live")
    check("GET /v2/health/live", st == 200 and live == {"live": True})
    check("GET /v2/health/ready", request(port, "GET", "/v2/health/ready")[0] == 200)
    st, _, ms = request(port, "GET", "/v1/models")
    check("GET /v1/models lists them", st == 200 and [m["id"] for m in ms["data"]] ==
          ["minilm-embed", "llama-chat", "bert-sentiment", "model"] + reranker_models, ms)

    # ---- embeddings: float and base64 against the pipeline
    texts = ["hello world", "The quick brown fox jumps over the lazy dog."]
    ref = library_embeddings(texts, {"pooling": "auto"})
    st, _, e = request(port, "POST", "/v1/embeddings", {"model": "minilm-embed", "input": texts})
    got = [d["embedding"] for d in e["data"]] if st == 200 else None
    check("/v1/embeddings float = pipeline feature-extraction (pooling auto)", st == 200 and close(got, ref), e)
    ids = json.loads(cli("tokenize", P + "/minilm-embed", texts[0], "--json"))["ids"]
    ids2 = json.loads(cli("tokenize", P + "/minilm-embed", texts[1], "--json"))["ids"]
    check("/v1/embeddings usage counts the tokens", st == 200 and e["usage"]["prompt_tokens"] == len(ids) + len(ids2),
          e.get("usage"))
    st, _, e = request(port, "POST", "/v1/embeddings", {"model": "minilm-embed", "input": texts[0],
                                                        "encoding_format": "base64"})
    vec = np.frombuffer(base64.b64decode(e["data"][0]["embedding"]), dtype="<f4") if st == 200 else None
    check("/v1/embeddings base64 = little-endian float32 of the same", st == 200 and close(vec, ref[0]), e)

    # ---- dynamic batching: concurrent requests, each its own rows
    words = ["one", "two words", "three little words", "and four of them", "five", "six six", "seven", "eight!"]
    refs = [library_embeddings([w], {"pooling": "auto"})[0] for w in words]
    before = metric(port, "transmuter_batch_size_sum") or 0
    results = [None] * len(words)

    def one(i):
        results[i] = request(port, "POST", "/v1/embeddings", {"model": "minilm-embed", "input": words[i]})

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(words))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    check("concurrent embeddings each equal the text alone",
          all(r[0] == 200 and close(r[2]["data"][0]["embedding"], refs[i]) for i, r in enumerate(results)))
    after = metric(port, "transmuter_batch_size_sum")
    batches = metric(port, "transmuter_batch_size_count")
    check("/metrics counts every input in a batch", after - before == len(words), (before, after))
    print("     (%d concurrent requests ran in batches; %d batches in all so far)" % (len(words), batches))

    # one request's bad text (not UTF-8) fails alone, not the requests batched with it
    pair = [None, None]

    def bad_one():
        pair[0] = request(port, "POST", "/v1/embeddings", raw=b'{"model":"minilm-embed","input":"bad \xff\xfe"}')

    def good_one():
        pair[1] = request(port, "POST", "/v1/embeddings", {"model": "minilm-embed", "input": words[0]})

    threads = [threading.Thread(target=bad_one), threading.Thread(target=good_one)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    check("a text that is not UTF-8 -> 400, and the request batched with it still succeeds",
          pair[0][0] == 400 and "UTF-8" in pair[0][2]["error"]["message"] and pair[1][0] == 200 and
          close(pair[1][2]["data"][0]["embedding"], refs[0]), pair)

    # ---- TEI
    st, _, emb = request(port, "POST", "/embed", {"inputs": texts})
    ref_n = library_embeddings(texts, {"pooling": "auto", "normalize": True})
    check("/embed = pipeline (normalized)", st == 200 and close(emb, ref_n), emb)
    tei_checks(port)

    # ---- chat and completions against generate (greedy)
    msgs = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
    json.dump([{"role": "user", "content": "Hi"}], msgs)
    msgs.close()
    ref_chat = library_generate("--chat", msgs.name, "--max-new", "8")
    st, _, c = request(port, "POST", "/v1/chat/completions", chat_body(max_tokens=8, temperature=0))
    check("/v1/chat/completions greedy = generate --chat", st == 200 and
          c["choices"][0]["message"]["content"] == ref_chat, (c, ref_chat))
    check("chat usage and finish_reason", st == 200 and c["usage"] == {"prompt_tokens": 4, "completion_tokens": 8,
          "total_tokens": 12} and c["choices"][0]["finish_reason"] == "length", c)
    st, ctype, ev, done = sse(port, "/v1/chat/completions",
                              chat_body(max_tokens=8, temperature=0, stream=True,
                                        stream_options={"include_usage": True}))
    text = "".join(e["choices"][0]["delta"].get("content", "") for e in ev if e["choices"])
    check("chat streamed: text/event-stream, deltas = generate --chat, [DONE]",
          st == 200 and ctype == "text/event-stream" and done and text == ref_chat, (text, ref_chat))
    check("chat streamed: role first, usage last", ev[0]["choices"][0]["delta"].get("role") == "assistant" and
          ev[-1]["choices"] == [] and ev[-1]["usage"]["completion_tokens"] == 8, ev[-1])
    ref_cmpl = library_generate("--prompt", "Hello", "--max-new", "6")
    st, _, c = request(port, "POST", "/v1/completions", {"model": "llama-chat", "prompt": "Hello", "max_tokens": 6,
                                                         "temperature": 0})
    check("/v1/completions greedy = generate --prompt", st == 200 and c["choices"][0]["text"] == ref_cmpl, (c, ref_cmpl))
    st, _, ev, done = sse(port, "/v1/completions", {"model": "llama-chat", "prompt": "Hello", "max_tokens": 6,
                                                    "temperature": 0, "stream": True})
    check("/v1/completions streamed", done and "".join(e["choices"][0]["text"] for e in ev) == ref_cmpl)
    # stop: the text ends before the first stop string
    word = ref_chat.split()[1]
    st, _, c = request(port, "POST", "/v1/chat/completions", chat_body(max_tokens=8, temperature=0, stop=[word]))
    check("stop ends the text before the stop string", st == 200 and
          c["choices"][0]["message"]["content"] == ref_chat[:ref_chat.index(word)] and
          c["choices"][0]["finish_reason"] == "stop", c)
    st, _, ev, done = sse(port, "/v1/chat/completions", chat_body(max_tokens=8, temperature=0, stop=word, stream=True))
    text = "".join(e["choices"][0]["delta"].get("content", "") for e in ev)
    check("stop while streaming", done and text == ref_chat[:ref_chat.index(word)], text)
    # sampling: n choices, seed i for choice i, as generate --do-sample --seed
    body = chat_body(max_tokens=6, temperature=0.9, top_p=0.95, seed=7, n=2)
    st, _, c1 = request(port, "POST", "/v1/chat/completions", body)
    st2, _, c2 = request(port, "POST", "/v1/chat/completions", body)
    ref_s = [library_generate("--chat", msgs.name, "--max-new", "6", "--do-sample", "--temperature", "0.9",
                              "--top-p", "0.95", "--top-k", "0", "--seed", str(7 + i)) for i in range(2)]
    got = [ch["message"]["content"] for ch in c1["choices"]] if st == 200 else None
    check("n=2 sampled with a seed = generate --do-sample --seed 7 and 8", got == ref_s, (got, ref_s))
    check("the same seed gives the same choices", st2 == 200 and c1["choices"] == c2["choices"])
    check("n=2 usage counts both choices", c1["usage"]["completion_tokens"] == 12, c1.get("usage"))

    logprob_checks(port, ref_chat, ref_cmpl)

    # ---- concurrent streams all finish
    outs = [None] * 4

    def stream(i):
        outs[i] = sse(port, "/v1/chat/completions", chat_body(max_tokens=24 + 8 * i, temperature=0, stream=True))

    threads = [threading.Thread(target=stream, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    long_ref = library_generate("--chat", msgs.name, "--max-new", "48")
    texts_c = ["".join(e["choices"][0]["delta"].get("content", "") for e in o[2]) for o in outs]
    check("4 concurrent chat streams all end with [DONE]", all(o[3] for o in outs))
    check("... each the greedy text of its length", all(long_ref.startswith(t) and t for t in texts_c), texts_c)
    # ---- continuous batching: 6 concurrent completions of different prompts step together
    prompts = ["Hello", "The quick brown fox", "Once upon a time there was", "1 2 3", "Why", "A B C D E F G"]
    steps_before = metric(port, "transmuter_generation_batch_size_count") or 0
    sum_before = metric(port, "transmuter_generation_batch_size_sum") or 0
    got_c = [None] * len(prompts)

    def complete(i):
        st_i, _, c_i = request(port, "POST", "/v1/completions", {"model": "llama-chat", "prompt": prompts[i],
                                                                 "max_tokens": 10 + i, "temperature": 0})
        got_c[i] = c_i["choices"][0]["text"] if st_i == 200 else None

    threads = [threading.Thread(target=complete, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    want_c = [library_generate("--prompt", p, "--max-new", str(10 + i)) for i, p in enumerate(prompts)]
    check("6 concurrent completions of different prompts: each = generate --prompt alone", got_c == want_c,
          (got_c, want_c))
    steps = (metric(port, "transmuter_generation_batch_size_count") or 0) - steps_before
    rows = (metric(port, "transmuter_generation_batch_size_sum") or 0) - sum_before
    check("... stepped together: more sequences than steps (%d rows in %d steps)" % (rows, steps),
          steps > 0 and rows > steps * 1.5)

    # ---- Open Inference Protocol v2 on the raw model
    case = "tests/data/tiny/bert/model.cases/default/inputs"
    inputs = []
    for name in ["input_ids", "attention_mask", "token_type_ids"]:
        a = np.load("%s/%s.npy" % (case, name))
        inputs.append({"name": name, "shape": list(a.shape), "datatype": "INT64", "data": a.flatten().tolist()})
    out_dir = tempfile.mkdtemp()
    cli("run", ONNX, "--inputs", case, "--out", out_dir)
    ref_h = np.load(out_dir + "/last_hidden_state.npy")
    st, _, inf = request(port, "POST", "/v2/models/model/infer", {"id": "r1", "inputs": inputs})
    o = inf["outputs"][0] if st == 200 else {}
    check("/v2/models/model/infer = transmuter run", st == 200 and inf["id"] == "r1" and o["datatype"] == "FP32" and
          o["shape"] == list(ref_h.shape) and close(np.array(o["data"]).reshape(o["shape"]), ref_h), inf)
    nested = [dict(i, data=np.array(i["data"]).reshape(i["shape"]).tolist()) for i in inputs]
    st, _, inf2 = request(port, "POST", "/v2/models/model/infer", {"inputs": nested, "outputs": [{"name": "last_hidden_state"}]})
    check("infer takes nested data too", st == 200 and inf2["outputs"][0]["data"] == o.get("data"))
    oip_binary_checks(port, inputs, ref_h)
    st, _, md = request(port, "GET", "/v2/models/model")
    check("/v2/models/model metadata", st == 200 and [i["name"] for i in md["inputs"]] ==
          ["input_ids", "attention_mask", "token_type_ids"] and md["outputs"][0]["datatype"] == "FP32", md)

    # ---- bad requests: 4xx with a JSON error, never a crash
    big = b'{"model":"minilm-embed","input":"' + b"a" * (1 << 20) + b'"}'
    bad = [
        ("POST", "/v1/embeddings", b"{not json", 400),
        ("POST", "/v1/embeddings", b"[1,2]", 400),
        ("POST", "/v1/embeddings", b"", 400),
        ("POST", "/v1/embeddings", b'{"model":"minilm-embed","input":5}', 400),
        ("POST", "/v1/embeddings", b'{"model":"minilm-embed","input":[]}', 400),
        ("POST", "/v1/embeddings", b'{"model":"minilm-embed","input":["a",[1,2]]}', 400),
        ("POST", "/v1/embeddings", b'{"model":"minilm-embed","input":"a","encoding_format":"hex"}', 400),
        ("POST", "/v1/embeddings", b'{"model":"nope","input":"a"}', 404),
        ("POST", "/v1/embeddings", b'{"model":"llama-chat","input":"a"}', 400),
        ("POST", "/v1/embeddings", b'{"input":"a"}', 400),
        ("POST", "/v1/embeddings", big, 413),
        ("GET", "/v1/embeddings", None, 405),
        ("POST", "/v1/chat/completions", b'{"model":"llama-chat","messages":"hi"}', 400),
        ("POST", "/v1/chat/completions", b'{"model":"llama-chat","messages":[{"content":"x"}]}', 400),
        ("POST", "/v1/chat/completions", b'{"model":"llama-chat","messages":[{"role":"user","content":"x"}],"max_tokens":"8"}', 400),
        ("POST", "/v1/chat/completions", b'{"model":"llama-chat","messages":[{"role":"user","content":"x"}],"max_tokens":0}', 400),
        ("POST", "/v1/chat/completions", b'{"model":"llama-chat","messages":[{"role":"user","content":"x"}],"temperature":9}', 400),
        ("POST", "/v1/chat/completions", b'{"model":"llama-chat","messages":[{"role":"user","content":"x"}],"n":1000}', 400),
        ("POST", "/v1/chat/completions", b'{"model":"llama-chat","messages":[{"role":"user","content":"x"}],"stop":[1]}', 400),
        ("POST", "/v1/chat/completions", b'{"model":"llama-chat","messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":21}', 400),
        ("POST", "/v1/chat/completions", b'{"model":"llama-chat","messages":[{"role":"user","content":"x"}],"top_logprobs":2}', 400),
        ("POST", "/v1/chat/completions", b'{"model":"llama-chat","messages":[{"role":"user","content":"x"}],"logprobs":1}', 400),
        ("POST", "/v1/completions", b'{"model":"llama-chat","prompt":"a","logprobs":6}', 400),
        ("POST", "/v1/completions", b'{"model":"llama-chat","prompt":"a","logprobs":true}', 400),
        ("POST", "/v1/chat/completions", b'{"model":"llama-chat","messages":[{"role":"user","content":"x"}],"max_tokens":5000}', 400),
        ("POST", "/v1/chat/completions", b'{"model":"minilm-embed","messages":[{"role":"user","content":"x"}]}', 400),
        ("POST", "/v1/completions", b'{"model":"llama-chat","prompt":42}', 400),
        ("POST", "/v1/completions", b'{"model":"llama-chat","prompt":"a","seed":1.5}', 400),
        ("POST", "/predict", b'{"inputs":7}', 400),
        ("POST", "/predict", b'{"inputs":"a","raw_scores":1}', 422),
        ("POST", "/predict", b'{"inputs":["a","b","c"]}', 400),
        ("POST", "/predict", b'{"inputs":[["a"],["b","c","d"]]}', 400),
        ("POST", "/predict", b'{"inputs":[]}', 400),
        ("POST", "/embed", b'{"inputs":"a","normalize":"yes"}', 422),
        ("POST", "/v2/models/model/infer", b'{"inputs":[{"name":"input_ids","shape":[1,2],"datatype":"INT64","data":[1]}]}', 400),
        ("POST", "/v2/models/model/infer", b'{"inputs":[{"name":"input_ids","shape":[1,1],"datatype":"FP32","data":[1]}]}', 400),
        ("POST", "/v2/models/model/infer", b'{"inputs":[{"name":"nope","shape":[1],"datatype":"INT64","data":[1]}]}', 400),
        ("POST", "/v2/models/model/infer", b'{"inputs":[{"name":"input_ids","shape":[-1],"datatype":"INT64","data":[]}]}', 400),
        ("POST", "/v2/models/model/infer", b'{"inputs":[{"name":"input_ids","shape":[1,1],"datatype":"INT64","data":[1.5]}]}', 400),
        ("POST", "/v2/models/model/infer", b'{"inputs":[{"name":"input_ids","shape":[100000,100000],"datatype":"INT64","data":[1]}]}', 413),
        ("POST", "/v2/models/model/infer", b'{"inputs":[{"name":"input_ids","shape":[1,1],"datatype":"INT64","data":[1]}]}', 400),
        ("POST", "/v2/models/minilm-embed/infer", b'{}', 404),
        ("GET", "/v2/models/nope", None, 404),
        ("GET", "/nowhere", None, 404),
        ("GET", "/../../etc/passwd", None, 404),
    ]
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    for method, path, raw, want in bad:
        try:
            st, _, js = request(port, method, path, raw=raw, conn=conn if want != 413 else None)
        except (http.client.HTTPException, OSError) as e:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            st, js = None, str(e)
        label = (raw or b"")[:70].decode(errors="replace")
        check("%s %s %s -> %d JSON error" % (method, path, label, want),
              st == want and isinstance(js, dict) and "error" in js, (st, js))
    conn.close()
    # a chunked body over the limit (no Content-Length up front)
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
    chunk = b"a" * 65536
    try:
        for _ in range(20):
            s.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        s.sendall(b"0\r\n\r\n")
    except OSError:
        pass
    reply = s.recv(4096).decode(errors="replace")
    s.close()
    check("a chunked body over the limit -> 413", reply.startswith("HTTP/1.1 413"), reply[:80])
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Length: 5000000\r\nExpect: 100-continue\r\n\r\n")
    reply = s.recv(4096).decode(errors="replace")
    s.close()
    check("Expect: 100-continue over the limit -> 413 before the body", reply.startswith("HTTP/1.1 413"), reply[:80])
    check("keep-alive: several requests on one connection", conn is not None)
    check("the server is still up after the bad requests", proc.poll() is None)

    # ---- a client that goes away cancels its work
    s = socket.create_connection(("127.0.0.1", port))
    body = json.dumps(chat_body(max_tokens=4000, temperature=0, stream=True)).encode()
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    s.recv(1024)
    s.close()
    for _ in range(600):
        if metric(port, "transmuter_queue_depth") == 0:
            break
        time.sleep(0.05)
    tokens_then = metric(port, "transmuter_generated_tokens_total")
    time.sleep(0.3)
    check("a closed stream's generation stops (queue empty, no more tokens)",
          metric(port, "transmuter_queue_depth") == 0 and metric(port, "transmuter_generated_tokens_total") == tokens_then)

    _, _, text = request(port, "GET", "/metrics")
    check("/metrics: requests by route and status, latency histogram, tokens",
          'transmuter_requests_total{route="/v1/embeddings",status="200"}' in text and
          'transmuter_request_seconds_bucket{route="/v1/chat/completions",le="+Inf"}' in text and
          "transmuter_generated_tokens_total" in text, text[:300])

    # ---- the openai npm client
    node_dir = "bench/.serve/node_modules/openai"
    if os.path.isdir(node_dir) and subprocess.run(["node", "--version"], capture_output=True).returncode == 0:
        r = subprocess.run(["node", "tests/serve_openai.mjs", str(port)], capture_output=True, text=True)
        try:
            got = json.loads(r.stdout)
        except ValueError:
            got = None
            print(r.stdout, r.stderr)
        if got:
            check("openai client: embeddings = pipeline", close(got["embeddings"], ref))
            check("openai client: chat = generate --chat", got["chat"] == ref_chat, got["chat"])
            check("openai client: chat streamed = generate --chat", got["stream"] == ref_chat, got["stream"])
            check("openai client: an unknown model is its NotFoundError", got["not_found"] == 404, got["not_found"])
            check("openai client: chat logprobs, 8 tokens joined = generate --chat, top 2 each",
                  len(got["logprobs"]) == 8 and "".join(t for t, _, _ in got["logprobs"]) == ref_chat and
                  all(k == 2 and lp <= 0 for _, lp, k in got["logprobs"]), got["logprobs"])
        else:
            check("openai client ran", False, r.stderr[-500:])
    else:
        skip("the openai npm client", "not installed (npm install --prefix bench/.serve openai)")

    # ---- SIGTERM: the stream running finishes, then exit 0
    result = {}

    def long_stream():
        try:
            result["r"] = sse(port, "/v1/chat/completions", chat_body(max_tokens=60, temperature=0, stream=True))
        except (http.client.HTTPException, OSError) as e:
            result["r"] = (str(e), None, [], False)

    t = threading.Thread(target=long_stream)
    t.start()
    for _ in range(600):
        if metric(port, "transmuter_queue_depth") == 1:
            break
        time.sleep(0.01)
    proc.send_signal(15)
    t.join()
    rc = proc.wait(timeout=60)
    st, _, ev, done = result["r"]
    check("SIGTERM: the stream in flight ends with [DONE]", st == 200 and done)
    check("SIGTERM: exit status 0", rc == 0, (rc, open(log).read()[-3000:]))
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        check("SIGTERM: no longer listening", False)
    except OSError:
        check("SIGTERM: no longer listening", True)

    # ---- a second server: the API key, and a queue of one
    proc, port, log = start(P + "/llama-chat", "--api-key", "sekrit", "--queue", "1")
    st, h, js = request(port, "GET", "/v1/models")
    check("no key -> 401 in OpenAI's shape", st == 401 and js["error"]["code"] == "invalid_api_key" and
          "Bearer" in h.get("WWW-Authenticate", ""), js)
    check("a wrong key -> 401", request(port, "GET", "/v1/models", headers={"Authorization": "Bearer nope"})[0] == 401)
    auth = {"Authorization": "Bearer sekrit"}
    check("the key -> 200", request(port, "GET", "/v1/models", headers=auth)[0] == 200)
    check("health without the key -> 200", request(port, "GET", "/health")[0] == 200)
    st, _, rr = request(port, "POST", "/rerank", {"query": "q", "texts": ["a"]}, headers=auth)
    check("/rerank without a cross-encoder: 404 saying so", st == 404 and "cross-encoder" in rr["error"], rr)
    s = socket.create_connection(("127.0.0.1", port))
    body = json.dumps(chat_body(max_tokens=4000, temperature=0, stream=True)).encode()
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sekrit\r\n"
              b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    s.recv(1024)
    st, h, js = request(port, "POST", "/v1/chat/completions", chat_body(max_tokens=4), headers=auth)
    check("a full queue -> 429 with Retry-After", st == 429 and "Retry-After" in h and "error" in js, (st, js))
    s.close()
    proc.send_signal(15)
    rc = proc.wait(timeout=60)
    check("second server: exit status 0", rc == 0, (rc, open(log).read()[-3000:]))

    print("%d passed, %d failed, %d skipped" % (passed, failed, skipped))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
