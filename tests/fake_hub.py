#!/usr/bin/env python3
"""A fake Hugging Face Hub on 127.0.0.1 for tests/hub.sh, Python standard library only.

Serves what huggingface.co serves to a download client -- HEAD/GET
/{owner}/{repo}/resolve/{revision}/{path} with X-Repo-Commit, ETag, X-Linked-Etag,
X-Linked-Size and X-Error-Code; LFS files redirected (302) to a second server, the "CDN",
on another port; Range requests; the tree API with Link pagination -- from the repository's
tiny test models. Not a real Hub: no uploads, no Xet, fixed repos.

Usage: fake_hub.py serve STATE_DIR DATA_DIR   writes STATE_DIR/ports ("HUB CDN"), logs
           every request to STATE_DIR/requests.log ("hub|cdn METHOD PATH range=R auth=A"),
           and takes test controls on /_admin/... (not logged).
       fake_hub.py check-cache CACHE_DIR REPO_ID REVISION FILENAME
           huggingface_hub's try_to_load_from_cache rules: prints the cached path or exits 1.
"""
import hashlib
import json
import os
import socket
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOKEN = "hf_test_secret"
PAGE_SIZE = 3  # small, so that listings need several pages (Link: rel="next")


# ---- Protobuf, just enough to split a model's external data over two files -------------

def read_varint(b, i):
    shift = value = 0
    while True:
        byte = b[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, i


def varint(v):
    out = bytearray()
    while True:
        if v < 0x80:
            out.append(v)
            return bytes(out)
        out.append((v & 0x7F) | 0x80)
        v >>= 7


def fields(b):
    """(number, wire, value) for each field; value is bytes for LEN fields."""
    i, out = 0, []
    while i < len(b):
        tag, i = read_varint(b, i)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            v, i = read_varint(b, i)
        elif wire == 1:
            v, i = b[i:i + 8], i + 8
        elif wire == 5:
            v, i = b[i:i + 4], i + 4
        elif wire == 2:
            n, i = read_varint(b, i)
            v, i = b[i:i + n], i + n
        else:
            raise ValueError("group fields are not expected here")
        out.append((number, wire, v))
    return out


def encode(fs):
    out = bytearray()
    for number, wire, v in fs:
        out += varint(number << 3 | wire)
        if wire == 0:
            out += varint(v)
        elif wire == 2:
            out += varint(len(v)) + v
        else:
            out += v
    return bytes(out)


def entry(key, value):
    return encode([(1, 2, key.encode()), (2, 2, value.encode())])


def split_external(model, data, names):
    """The model with each external initializer moved, in turn, to one of `names`;
    returns (model bytes, {name: bytes})."""
    files = {n: bytearray() for n in names}
    turn = [0]

    def tensor(t):
        fs = fields(t)
        ext = {}
        for number, wire, v in fs:
            if number == 13:
                kv = dict((k, val) for k, _, val in fields(v))
                ext[kv[1].decode()] = kv[2].decode()
        if "location" not in ext:
            return t
        off, n = int(ext.get("offset", "0")), int(ext["length"])
        name = names[turn[0] % len(names)]
        turn[0] += 1
        out = files[name]
        new = [f for f in fs if f[0] != 13]
        new += [(13, 2, entry("location", name)), (13, 2, entry("offset", str(len(out)))),
                (13, 2, entry("length", str(n)))]
        out += data[off:off + n]
        return encode(new)

    def graph(g):
        return encode([(n, w, tensor(v) if n == 5 else v) for n, w, v in fields(g)])

    m = encode([(n, w, graph(v) if n == 7 else v) for n, w, v in fields(model)])
    return m, {k: bytes(v) for k, v in files.items()}


# ---- The repositories -------------------------------------------------------------------

def git_blob_sha1(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def lfs_pointer(data):
    return ("version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n"
            % (hashlib.sha256(data).hexdigest(), len(data))).encode()


def commit_hash(repo, n):
    return hashlib.sha1(("%s commit %d" % (repo, n)).encode()).hexdigest()


class Repo:
    def __init__(self, rid, commits, branches=None, tags=None, access="public"):
        self.id = rid
        self.commits = commits            # hash -> {path: bytes}
        self.refs = dict(branches or {})  # branch or tag -> hash
        self.refs.update(tags or {})
        self.access = access              # public, private, gated


def read(data_dir, rel):
    with open(os.path.join(data_dir, rel), "rb") as f:
        return f.read()


def build_repos(data_dir):
    bert = {
        "onnx/model.onnx": read(data_dir, "bert/model.onnx"),
        "onnx/model_fp16.onnx": read(data_dir, "bert/model_fp16.onnx"),
        "onnx/model_q4.onnx": read(data_dir, "bert/model_q4.onnx"),
        "onnx/model_quantized.onnx": read(data_dir, "bert/model_quantized.onnx"),
        "config.json": b'{"model_type": "bert"}\n',
        "README.md": b"# tiny bert for tests\n",
    }
    c1, c2 = commit_hash("tiny-bert", 1), commit_hash("tiny-bert", 2)
    bert2 = dict(bert)
    bert2["onnx/model.onnx"] = read(data_dir, "bert-seqcls/model.onnx")
    ext_model = read(data_dir, "bert-external-data/model.onnx")
    ext_data = read(data_dir, "bert-external-data/model.onnx_data")
    ext = {"onnx/model.onnx": ext_model, "onnx/model.onnx_data": ext_data,
           "onnx/unrelated.onnx_data": b"not referenced by any model\n" * 10}
    split_model, split_files = split_external(ext_model, ext_data,
                                              ["model.onnx.data", "weights/extra.bin"])
    split = {"onnx/model.onnx": split_model, "onnx/decoy.bin": b"never fetched\n"}
    for name, blob in split_files.items():
        split["onnx/" + name] = blob
    # A pipeline repository (tests/data/pipelines/bert-sentiment) with a file no task needs.
    sentiment_dir = os.path.join(data_dir, "..", "pipelines", "bert-sentiment")
    sentiment = {rel: read(sentiment_dir, rel) for rel in
                 ("config.json", "tokenizer.json", "tokenizer_config.json",
                  "special_tokens_map.json", "onnx/model.onnx")}
    sentiment["onnx/model_fp16.onnx"] = b"never fetched by an fp32 pipeline\n"
    # An audio pipeline repository (tests/data/pipelines/audio-cls): no tokenizer files.
    audio_dir = os.path.join(data_dir, "..", "pipelines", "audio-cls")
    audio = {rel: read(audio_dir, rel) for rel in ("config.json", "preprocessor_config.json", "onnx/model.onnx")}
    repos = [
        Repo("tm-test/bert-sentiment", {commit_hash("sentiment", 1): sentiment},
             {"main": commit_hash("sentiment", 1)}),
        Repo("tm-test/audio-cls", {commit_hash("audio", 1): audio}, {"main": commit_hash("audio", 1)}),
        Repo("tm-test/tiny-bert", {c1: bert, c2: bert2}, {"main": c1}, {"v1": c1}),
        Repo("tm-test/tiny-bert-external", {commit_hash("ext", 1): ext},
             {"main": commit_hash("ext", 1)}),
        Repo("tm-test/split-external", {commit_hash("split", 1): split},
             {"main": commit_hash("split", 1)}),
        Repo("tm-test/private", {commit_hash("private", 1): bert},
             {"main": commit_hash("private", 1)}, access="private"),
        Repo("tm-test/gated", {commit_hash("gated", 1): bert},
             {"main": commit_hash("gated", 1)}, access="gated"),
    ]
    return {r.id: r for r in repos}, {"tiny-bert-main-next": c2}


# ---- The servers ------------------------------------------------------------------------

class State:
    def __init__(self, state_dir, data_dir):
        self.dir = state_dir
        self.repos, self.next_commit = build_repos(data_dir)
        self.blobs = {}      # sha256 -> bytes, what the CDN serves
        for repo in self.repos.values():
            for files in repo.commits.values():
                for data in files.values():
                    self.blobs[hashlib.sha256(data).hexdigest()] = data
        self.faults = {}     # kind -> [remaining count, argument]
        self.lock = threading.Lock()
        self.cdn_port = 0

    def log(self, server, handler):
        line = "%s %s %s range=%s auth=%s\n" % (
            server, handler.command, handler.path, handler.headers.get("Range", "-"),
            "yes" if handler.headers.get("Authorization") else "no")
        with self.lock, open(os.path.join(self.dir, "requests.log"), "a") as f:
            f.write(line)

    def take_fault(self, kind):
        """The fault's argument when one of kind is armed (and counts it down), else None."""
        with self.lock:
            f = self.faults.get(kind)
            if not f or f[0] <= 0:
                return None
            f[0] -= 1
            return f[1] if f[1] is not None else ""


def is_lfs(path):
    return path.endswith((".onnx", ".onnx_data", ".data", ".bin"))


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    state = None
    server_name = "hub"

    def log_message(self, *args):
        pass

    def reply(self, status, headers=(), body=b""):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def error(self, status, code, message, extra=()):
        body = json.dumps({"error": message}).encode()
        self.reply(status, [("X-Error-Code", code), ("X-Error-Message", message),
                            ("Content-Type", "application/json")] + list(extra), body)

    def do_HEAD(self):
        self.route()

    def do_GET(self):
        self.route()


class HubHandler(Handler):
    def route(self):
        url = urllib.parse.urlsplit(self.path)
        if url.path.startswith("/_admin/"):
            return self.admin(url)
        self.state.log("hub", self)
        stall = self.state.take_fault("stall_head")
        if stall is not None:
            time.sleep(float(stall))
        if self.state.take_fault("error503") is not None:
            return self.error(503, "ServiceUnavailable", "try again later")
        raw = url.path.split("/")
        if len(raw) > 6 and raw[1:3] == ["api", "models"] and raw[5] == "tree":
            return self.tree(url, raw)
        if len(raw) > 5 and raw[3] == "resolve":
            return self.resolve(raw)
        self.error(404, "NotFound", "no such page")

    def repo_access(self, rid):
        """The repo, or None after answering the way huggingface.co does."""
        if rid == "tm-test/old-name":
            return "renamed"
        repo = self.state.repos.get(rid)
        auth = self.headers.get("Authorization", "")
        good = auth == "Bearer " + TOKEN
        if repo is None or (repo.access == "private" and not good):
            # The Hub hides private repos: without a valid token, "not found" is a 401.
            if auth and repo is None:
                self.error(404, "RepoNotFound", "Repository not found")
            else:
                self.error(401, "RepoNotFound", "Repository not found")
            return None
        if repo.access == "gated" and not good:
            self.error(401, "GatedRepo", "Access to model %s is restricted." % rid)
            return None
        return repo

    def commit_of(self, repo, revision):
        if revision in repo.refs:
            return repo.refs[revision]
        if revision in repo.commits:
            return revision
        return None

    def resolve(self, raw):
        rid = raw[1] + "/" + raw[2]
        revision = urllib.parse.unquote(raw[4])
        path = urllib.parse.unquote("/".join(raw[5:]))
        repo = self.repo_access(rid)
        if repo == "renamed":
            # A renamed repo redirects, relatively, to its new name.
            return self.reply(307, [("Location", "/tm-test/tiny-bert/resolve/%s/%s"
                                     % (raw[4], "/".join(raw[5:])))])
        if repo is None:
            return
        commit = self.commit_of(repo, revision)
        if commit is None:
            return self.error(404, "RevisionNotFound", "Invalid rev id: " + revision)
        files = repo.commits[commit]
        if path not in files:
            return self.error(404, "EntryNotFound", "Entry not found",
                              [("X-Repo-Commit", commit)])
        data = files[path]
        headers = [("X-Repo-Commit", commit), ("Accept-Ranges", "bytes")]
        if is_lfs(path):
            sha = hashlib.sha256(data).hexdigest()
            location = "http://127.0.0.1:%d/cdn/%s?signature=abc" % (self.state.cdn_port, sha)
            headers += [("Location", location), ("X-Linked-Etag", '"%s"' % sha),
                        ("X-Linked-Size", str(len(data))),
                        ("ETag", '"%s"' % git_blob_sha1(lfs_pointer(data)))]
            return self.reply(302, headers, b"Found. Redirecting to " + location.encode())
        headers.append(("ETag", '"%s"' % git_blob_sha1(data)))
        send_range(self, data, headers)

    def tree(self, url, raw):
        rid = raw[3] + "/" + raw[4]
        revision = urllib.parse.unquote(raw[6]) if len(raw) > 6 else "main"
        repo = self.repo_access(rid)
        if repo is None or repo == "renamed":
            return None if repo is None else self.error(404, "RepoNotFound", "renamed")
        commit = self.commit_of(repo, revision)
        if commit is None:
            return self.error(404, "RevisionNotFound", "Invalid rev id: " + revision)
        query = urllib.parse.parse_qs(url.query)
        entries = []
        for path, data in sorted(repo.commits[commit].items()):
            e = {"type": "file", "oid": git_blob_sha1(data), "size": len(data), "path": path}
            if is_lfs(path):
                e["oid"] = git_blob_sha1(lfs_pointer(data))
                e["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data),
                            "pointerSize": len(lfs_pointer(data))}
            entries.append(e)
        folders = sorted({p.rsplit("/", 1)[0] for p in repo.commits[commit] if "/" in p})
        entries += [{"type": "directory", "oid": "0" * 40, "size": 0, "path": f} for f in folders]
        start = int(query.get("cursor", ["0"])[0])
        page = entries[start:start + PAGE_SIZE]
        headers = [("Content-Type", "application/json")]
        if start + PAGE_SIZE < len(entries):
            nxt = "http://127.0.0.1:%d%s?recursive=true&cursor=%d" % (
                self.server.server_address[1], url.path, start + PAGE_SIZE)
            headers.append(("Link", '<%s>; rel="next"' % nxt))
        self.reply(200, headers, json.dumps(page).encode())

    def admin(self, url):
        q = {k: v[0] for k, v in urllib.parse.parse_qs(url.query).items()}
        what = url.path[len("/_admin/"):]
        if what == "fault":
            with self.state.lock:
                self.state.faults[q["kind"]] = [int(q.get("count", "1")), q.get("arg")]
        elif what == "clear":
            with self.state.lock:
                self.state.faults.clear()
        elif what == "push":
            self.state.repos["tm-test/tiny-bert"].refs["main"] = \
                self.state.next_commit["tiny-bert-main-next"]
        elif what == "commits":
            out = {rid: r.refs for rid, r in self.state.repos.items()}
            return self.reply(200, [("Content-Type", "application/json")],
                              json.dumps(out).encode())
        self.reply(200, [], b"ok\n")


def send_range(handler, data, headers):
    """200 with the whole body, or 206 from the Range header's start."""
    rng = handler.headers.get("Range")
    start = 0
    if rng and rng.startswith("bytes=") and rng.endswith("-"):
        start = int(rng[6:-1])
        if start >= len(data):
            return handler.reply(416, headers + [("Content-Range", "bytes */%d" % len(data))])
        headers = headers + [("Content-Range", "bytes %d-%d/%d" % (start, len(data) - 1,
                                                                    len(data)))]
    status = 206 if rng else 200
    body = data[start:]
    faults = handler.state
    if handler.command == "GET" and handler.server_name == "cdn":
        if faults.take_fault("corrupt") is not None:
            body = bytes(b ^ 0x5A for b in body)
        if faults.take_fault("drop") is not None:
            return cut(handler, status, headers, body)
        pause = faults.take_fault("stall_body")
        if pause is not None:
            return stall(handler, status, headers, body, float(pause))
        slow = faults.take_fault("slow")
        if slow is not None:
            return trickle(handler, status, headers, body, float(slow))
    handler.reply(status, headers, body)


def start_body(handler, status, headers, size):
    handler.send_response(status)
    for k, v in headers:
        handler.send_header(k, v)
    handler.send_header("Content-Length", str(size))
    handler.end_headers()


def cut(handler, status, headers, body):
    """Half the body, then the connection is dropped."""
    start_body(handler, status, headers, len(body))
    handler.wfile.write(body[:len(body) // 2])
    handler.wfile.flush()
    handler.close_connection = True
    handler.connection.shutdown(socket.SHUT_RDWR)


def stall(handler, status, headers, body, seconds):
    """Half the body, then silence, then the rest (if the client is still there)."""
    start_body(handler, status, headers, len(body))
    handler.wfile.write(body[:len(body) // 2])
    handler.wfile.flush()
    time.sleep(seconds)
    handler.close_connection = True
    try:
        handler.wfile.write(body[len(body) // 2:])
    except OSError:
        pass


def trickle(handler, status, headers, body, seconds):
    """The body in ten pieces over `seconds`."""
    start_body(handler, status, headers, len(body))
    step = max(1, len(body) // 10)
    for i in range(0, len(body), step):
        handler.wfile.write(body[i:i + step])
        handler.wfile.flush()
        time.sleep(seconds / 10)


class CdnHandler(Handler):
    server_name = "cdn"

    def route(self):
        self.state.log("cdn", self)
        url = urllib.parse.urlsplit(self.path)
        sha = url.path.rsplit("/", 1)[-1]
        data = self.state.blobs.get(sha)
        if data is None or "signature=" not in url.query:
            return self.reply(403, [], b"<Error>AccessDenied</Error>")
        send_range(self, data, [("ETag", '"%s"' % sha), ("Accept-Ranges", "bytes")])


def serve(state_dir, data_dir):
    state = State(state_dir, data_dir)
    HubHandler.state = state
    CdnHandler.state = state
    hub = ThreadingHTTPServer(("127.0.0.1", 0), HubHandler)
    cdn = ThreadingHTTPServer(("127.0.0.1", 0), CdnHandler)
    hub.daemon_threads = cdn.daemon_threads = True
    state.cdn_port = cdn.server_address[1]
    threading.Thread(target=cdn.serve_forever, daemon=True).start()
    open(os.path.join(state_dir, "requests.log"), "w").close()
    with open(os.path.join(state_dir, "ports.tmp"), "w") as f:
        f.write("%d %d\n" % (hub.server_address[1], cdn.server_address[1]))
    os.rename(os.path.join(state_dir, "ports.tmp"), os.path.join(state_dir, "ports"))
    # Bounded: a test run that forgets to stop us ends anyway.
    threading.Timer(900, lambda: os._exit(0)).start()
    hub.serve_forever()


# ---- huggingface_hub's reading rules, to check the cache we write --------------------------

def check_cache(cache_dir, repo_id, revision, filename):
    """try_to_load_from_cache (file_download.py), for models."""
    repo_cache = os.path.join(cache_dir, "models--" + repo_id.replace("/", "--"))
    if not os.path.isdir(repo_cache):
        return None
    refs_dir = os.path.join(repo_cache, "refs")
    snapshots_dir = os.path.join(repo_cache, "snapshots")
    if os.path.isdir(refs_dir):
        revision_file = os.path.join(refs_dir, revision)
        if os.path.isfile(revision_file):
            with open(revision_file) as f:
                revision = f.read()
    if not os.path.exists(snapshots_dir) or revision not in os.listdir(snapshots_dir):
        return None
    cached_file = os.path.join(snapshots_dir, revision, filename)
    return cached_file if os.path.isfile(cached_file) else None


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "serve":
        serve(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 6 and sys.argv[1] == "check-cache":
        path = check_cache(*sys.argv[2:])
        if path is None:
            sys.exit(1)
        print(path)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
