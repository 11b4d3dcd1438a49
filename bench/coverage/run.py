#!/usr/bin/env python3
"""Coverage bench: every model of a folder run by ONNX Runtime and by Transmuter (eager and
compiled), every output compared (max abs, max rel, cosine; NaN-aware), one matrix written
to bench/coverage/RESULTS.md and results.json. Not a test (it asserts nothing; `make test`
does) and not a speed bench (bench/run.py times; nothing here does).

Usage: bench/coverage/run.py [DIR or MODEL.onnx ...] [--modes eager,plan,static] [--debug]
                             [--only SUBSTRING] [--tm PATH]
Default: ../shared/models (bench skeletons excluded) and bench/models when materialised.
Tolerances and the int8 noise rule: bench/coverage/README.md.
"""
import argparse, hashlib, json, os, re, shutil, subprocess, sys, tempfile, time, zlib
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SHARED = os.environ.get("SHARED", os.path.join(ROOT, "..", "shared"))
ORT_DIR = os.path.join(ROOT, "bench", ".ort")          # shared with bench/run.py
CACHE = os.path.join(HERE, ".cache")
ORT_VERSION = "1.30.0"
ORT_TIMEOUT, OURS_TIMEOUT = 300, 300
CACHE_VERSION = "1"
ORT_RUNS = {"made": 0, "cached": 0}   # for the report's header             # bump when a reference copy or ORT's invocation changes

# Symbolic dims of made-up inputs (the tiny exports were traced at these sizes too).
BATCH, SEQ, PAST = 2, 7, 5
# Tolerances by precision class (README.md justifies each).
TOL = {"fp32": (1e-4, 1e-5), "fp16": (1e-2, 1e-2), "q4": (1e-3, 5e-3), "int8": (1e-4, 1e-5)}
# ONNX Runtime's own noise on int8 graphs: every float weight scaled by each of these.
NOISE_SCALES, NOISE_FACTOR = (1 + 1e-7, 1 - 1e-7, 1 + 2e-7, 1 - 2e-7), 2.0
INT8_OPS = {"DynamicQuantizeLinear", "MatMulInteger", "ConvInteger", "QuantizeLinear",
            "DynamicQuantizeMatMul", "MatMulIntegerToFloat", "QLinearMatMul", "QLinearConv",
            "QLinearAdd", "QLinearMul", "QLinearSigmoid", "QLinearLeakyRelu", "QLinearConcat",
            "QLinearAveragePool", "QLinearGlobalAveragePool", "QAttention", "QGemm",
            "DynamicQuantizeLSTM", "QLinearSoftmax", "QLinearWhere", "QOrderedMatMul"}
Q4_OPS = {"MatMulNBits", "GatherBlockQuantized", "MatMulBnb4", "MatMulFpQ4"}
# Node domains ONNX Runtime's CPU build knows; any other needs a custom-op library.
ORT_DOMAINS = {"", "ai.onnx", "ai.onnx.ml", "com.microsoft", "com.microsoft.nchwc",
               "com.microsoft.experimental", "ai.onnx.training", "ai.onnx.preview.training",
               "com.ms.internal.nhwc", "org.pytorch.aten", "com.microsoft.dml"}
NP_OF = {1: np.float32, 2: np.uint8, 3: np.int8, 4: np.uint16, 5: np.int16, 6: np.int32,
         7: np.int64, 9: np.bool_, 10: np.float16, 11: np.float64, 12: np.uint32, 13: np.uint64}


SAFE = set(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")


def encode(name):
    """A value name as a file name: every byte outside [A-Za-z0-9._-] written %XX."""
    return "".join(chr(b) if b in SAFE else "%%%02X" % b for b in name.encode())


def decode(fname):
    return re.sub(rb"%([0-9A-Fa-f]{2})", lambda m: bytes([int(m.group(1), 16)]),
                  fname.encode()).decode("utf-8", "replace")


def first_line(text, limit=300):
    """The line of a tool's stderr that says what went wrong (not a JS stack frame)."""
    lines = [l.strip() for l in (text or "").splitlines() if l.strip()]
    lines = [l for l in lines if not l.startswith("at ") and not l.startswith("^")]
    for l in lines:
        if "Error" in l or "error" in l or l.startswith("transmuter:") or l.startswith("ort-run:"):
            return l[:limit]
    return (lines[-1] if lines else "")[:limit]


# ---- ONNX Runtime ---------------------------------------------------------------------

def ensure_ort():
    runner = os.path.join(ORT_DIR, "ort-run.mjs")
    if not os.path.exists(os.path.join(ORT_DIR, "node_modules", "onnxruntime-node")):
        os.makedirs(ORT_DIR, exist_ok=True)
        env = dict(os.environ, ONNXRUNTIME_NODE_INSTALL="skip")
        subprocess.run(["npm", "install", "--prefix", ORT_DIR, "onnxruntime-node@" + ORT_VERSION],
                       check=True, env=env, stdout=subprocess.DEVNULL)
    src = os.path.join(ROOT, "tools", "ort-run.mjs")   # vendored from ../shared/tools
    if os.path.exists(src):
        shutil.copy(src, runner)
    return runner


def file_key(path, h):
    st = os.stat(path)
    h.update(f"{os.path.basename(path)}:{st.st_size}".encode())
    if st.st_size < 64 << 20:
        with open(path, "rb") as f:
            h.update(hashlib.sha256(f.read()).digest())
    else:                        # big weights: size and mtime stand for the bytes
        h.update(str(st.st_mtime_ns).encode())


def model_key(model, h):
    file_key(model, h)
    folder, stem = os.path.dirname(model), os.path.splitext(os.path.basename(model))[0]
    for f in sorted(os.listdir(folder)):          # external data beside the model
        p = os.path.join(folder, f)
        if f.startswith(stem) and not f.endswith(".onnx") and os.path.isfile(p):
            file_key(p, h)


def ort_run(runner, model, inputs, expose=False, gen=False):
    """ONNX Runtime's outputs for `inputs` (a folder of .npy), cached by the bytes of model,
    inputs and runner. Optimizations off; only when a session cannot be made so, basic,
    then all (as ../shared/models did for its fp16 merged decoders). Returns (folder or None, level, error)."""
    h = hashlib.sha256()
    model_key(model, h)
    for f in sorted(os.listdir(inputs)):
        file_key(os.path.join(inputs, f), h)
    file_key(runner, h)
    h.update(f"{ORT_VERSION} {CACHE_VERSION} expose={expose} gen={gen}".encode())
    out = os.path.join(CACHE, "ort", h.hexdigest()[:32])
    meta_path = os.path.join(out, "meta.json")
    if os.path.exists(meta_path):
        ORT_RUNS["cached"] += 1
        with open(meta_path) as f:
            meta = json.load(f)
        return (out if meta["ok"] else None), meta["opt"], meta["error"]
    ORT_RUNS["made"] += 1
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    error, level = "", "disabled"
    for level in ("disabled", "basic", "all"):
        cmd = ["node", runner, model, "-i", inputs, "-o", out, "--format", "npy", "--opt", level, "-q"]
        if expose:
            cmd += ["--expose", "all"]
        if gen:
            cmd += ["--gen-inputs"]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=ORT_TIMEOUT)
            ok, err = r.returncode == 0, first_line(r.stderr)
        except subprocess.TimeoutExpired:
            ok, err = False, f"timed out after {ORT_TIMEOUT} s"
        if ok:
            error = ""
            break
        error = error or err
    meta = {"ok": ok, "opt": level if ok else "disabled", "error": error}
    with open(meta_path, "w") as f:
        json.dump(meta, f)
    return (out if ok else None), meta["opt"], meta["error"]


# ---- Models ---------------------------------------------------------------------------

def walk_graphs(g):
    yield g
    for n in g.node:
        for a in n.attribute:
            if a.type == a.GRAPH:
                yield from walk_graphs(a.g)
            elif a.type == a.GRAPHS:
                for sub in a.graphs:
                    yield from walk_graphs(sub)


def inspect(path):
    """What the bench needs to know of a model, from its protobuf (weights not read)."""
    import onnx
    m = onnx.load(path, load_external_data=False)
    g = m.graph
    inits = {t.name for t in g.initializer}
    ins = []
    for v in g.input:
        if v.name in inits:
            continue
        tt = v.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                for d in tt.shape.dim] if tt.HasField("shape") else None
        ins.append({"name": v.name, "elem": tt.elem_type, "dims": dims,
                    "tensor": v.type.HasField("tensor_type")})
    ops, domains, init_dims, nodes, elems = {}, set(), {}, [], set()
    for sub in walk_graphs(g):
        for t in sub.initializer:
            init_dims[t.name] = list(t.dims)
            elems.add(t.data_type)
        for n in sub.node:
            ops[n.op_type] = ops.get(n.op_type, 0) + 1
            domains.add(n.domain)
            nodes.append(n)
    for v in list(g.input) + list(g.output):
        elems.add(v.type.tensor_type.elem_type)
    if ops.keys() & INT8_OPS:
        cls = "int8"
    elif ops.keys() & Q4_OPS:
        cls = "q4f16" if 10 in elems or 16 in elems else "q4"
    elif 10 in elems or 16 in elems:
        cls = "fp16"
    else:
        cls = "fp32"
    custom = sorted(d for d in domains if d not in ORT_DOMAINS)
    return {"inputs": ins, "class": cls, "custom": custom,
            "decode_only": any(op.startswith("DecoderMasked") for op in ops) or any(
                n.op_type == "MultiHeadAttention" and len(n.input) > 8 and n.input[8] for n in nodes),
            "vocab": vocab_size(nodes, init_dims), "n_nodes": len(g.node)}


def vocab_size(nodes, init_dims):
    """Rows of the embedding table that input_ids index (through casts and reshapes)."""
    consumers = {}
    for n in nodes:
        for i, name in enumerate(n.input):
            consumers.setdefault(name, []).append((n, i))
    seen, todo = set(), ["input_ids"]
    while todo:
        v = todo.pop()
        if v in seen:
            continue
        seen.add(v)
        for n, i in consumers.get(v, []):
            if n.op_type in ("Gather", "GatherBlockQuantized") and i == 1 and n.input[0] in init_dims:
                return init_dims[n.input[0]][0]
            if n.op_type == "EmbedLayerNormalization" and i == 0 and len(n.input) > 2:
                if n.input[2] in init_dims:
                    return init_dims[n.input[2]][0]
            if n.op_type in ("Cast", "Reshape", "Unsqueeze", "Squeeze", "Flatten", "Identity"):
                todo.extend(n.output)
    return None


# Folders of bench models so big (llama-600m: 2.7 GB in fp32, 7 minutes of ONNX Runtime
# runs with the int8 noise copies) that a folder walk takes them only with --large.
LARGE_DIRS = {"llama-600m"}


def discover(paths, large=False):
    models = []
    for p in paths:
        if os.path.isfile(p):
            models.append(os.path.abspath(p))
            continue
        for dirpath, dirnames, files in os.walk(p):
            dirnames[:] = sorted(d for d in dirnames if not d.endswith(".cases") and d != ".cache"
                                 and (large or d not in LARGE_DIRS))
            for f in sorted(files):
                if f.endswith(".onnx") and not f.endswith(".skeleton.onnx"):
                    models.append(os.path.abspath(os.path.join(dirpath, f)))
    return models


def label_of(model):
    """A model's name in the matrix: relative to ../shared/models, else to the repository."""
    base = os.path.abspath(os.path.join(SHARED, "models"))
    if model.startswith(base + os.sep):
        return os.path.relpath(model, base)
    return os.path.relpath(model, ROOT)


def tidy(msg, label=""):
    """A message without absolute paths and the runners' prefixes."""
    msg = msg or ""
    msg = re.sub(r"^(transmuter|ort-run): (Error: )?", "", msg)
    msg = re.sub(r"^Load model from \S+ failed:", "load failed: ", msg)
    msg = msg.replace(os.path.abspath(os.path.join(SHARED, "models")) + os.sep, "")
    msg = msg.replace(os.path.abspath(SHARED) + os.sep, "../shared/").replace(ROOT + os.sep, "")
    if label and msg.startswith(label + ": "):
        msg = msg[len(label) + 2:]
    return msg


# ---- Inputs ---------------------------------------------------------------------------

def dim_value(param, input_name, size, unknown):
    """A value for a symbolic dim, by its name: batch, sequence, past, total..."""
    p = (param or "").lower()
    total = size["past"] + size["seq"]
    if "batch" in p and "plus" not in p:
        return size["batch"]
    if "beam" in p:
        return 1
    if "total" in p or ("past" in p and ("+" in p or "plus" in p)):
        return total
    if "past" in p:
        return size["past"]
    if "mask" in p or "max_seq" in p or "max_sequence" in p or ("mask" in input_name.lower() and "seq" in p):
        return total
    if "seq" in p or "length" in p or "token" in p:
        return size["seq"]
    return unknown


def make_value(v, shape, info, rng, size):
    name, et, lname = v["name"], v["elem"], v["name"].lower()
    if et == 8:
        words = np.array(["a", "b", "c", "hello", "world"])
        return words[rng.integers(0, len(words), size=shape)]
    dtype = NP_OF.get(et)
    if dtype is None:
        raise ValueError(f"cannot make an input of ONNX type {et} ({name})")
    past, total = size["past"], size["past"] + size["seq"]
    if lname == "use_cache_branch":
        return np.full(shape, past > 0, dtype=dtype)
    if "input_ids" in lname or lname in ("ids", "tokens"):
        return rng.integers(0, min(info["vocab"] or 10, 1 << 30), size=shape).astype(dtype)
    if "position_ids" in lname:
        return np.broadcast_to(np.arange(past, past + shape[-1]) if shape else np.array(past),
                               shape).astype(dtype)
    if "token_type" in lname or "segment" in lname or lname == "cache_indir":
        return np.zeros(shape, dtype)
    if lname == "max_length":                          # BeamSearch, GreedySearch, Sampling
        return np.full(shape, total + 4, dtype)
    if lname in ("min_length", "num_beams", "num_return_sequences", "beam_width", "temperature",
                 "top_p") or "penalty" in lname:
        return np.full(shape, 2 if lname == "num_beams" else 1, dtype)
    if lname == "seqlens_k":
        return np.full(shape, total - 1, dtype)
    if lname in ("total_sequence_length", "total_seq_len"):
        return np.full(shape, total, dtype)
    if lname in ("past_seq_len", "past_sequence_length", "past_sequence_size"):
        return np.full(shape, past, dtype)
    if "mask" in lname:
        if len(shape) == 1 and np.issubdtype(dtype, np.integer):
            return np.full(shape, total, dtype)       # mask_index: lengths
        return np.ones(shape, dtype)
    if dtype == np.bool_:
        return np.ones(shape, dtype)
    if np.issubdtype(dtype, np.floating):
        # Weights given as inputs get the spread of trained ones; activations about 0.5.
        weight = "weight" in lname or "bias" in lname or lname in ("w", "b", "r")
        x = rng.standard_normal(shape) * (0.02 if weight else 0.5)
        if "scale" in lname:
            x = np.abs(x) + 0.01
        return x.astype(dtype)
    if "zero_point" in lname:
        return np.full(shape, 128 if dtype == np.uint8 else 0, dtype)
    if dtype == np.uint8:
        return rng.integers(0, 256, size=shape).astype(dtype)
    if dtype == np.int8:
        # 7-bit, as ONNX Runtime's quantizer makes weights with reduce_range: its u8s8
        # kernels without VNNI saturate pairs of 8-bit products at int16.
        return rng.integers(-64, 64, size=shape).astype(dtype)
    return rng.integers(0, 2, size=shape).astype(dtype)        # indices, counts: small


def make_inputs(info, out_dir, past, unknown, seed):
    """Inputs from the model's input spec. Decoders with past inputs get past `past`;
    decode-only attention gets sequence 1: DecoderMasked*, and MultiHeadAttention over a
    shared KV buffer (past_sequence_length given), which ONNX Runtime's CPU kernel
    implements for one new token only (README.md)."""
    has_past = any("past" in v["name"].lower() for v in info["inputs"])
    size = {"batch": BATCH, "seq": 1 if info["decode_only"] else SEQ, "past": past if has_past else 0}
    rng = np.random.default_rng(seed)
    os.makedirs(out_dir, exist_ok=True)
    used_unknown = False
    for v in info["inputs"]:
        if not v["tensor"]:
            raise ValueError(f"input '{v['name']}' is not a tensor")
        if v["dims"] is None:
            shape = []
        else:
            shape = [(d if d >= 0 else None) if isinstance(d, int) else
                     dim_value(d, v["name"], size, None) for d in v["dims"]]
            used_unknown = used_unknown or None in shape
            shape = [unknown if d is None else d for d in shape]
        np.save(os.path.join(out_dir, encode(v["name"]) + ".npy"),
                np.array(make_value(v, shape, info, rng, size), order="C"))
    return used_unknown


def cases_of(model, info, work):
    """[(case name, inputs folder, past or None when stored)]: the stored cases, or made-up inputs ('gen'; merged
    decoders also 'gen-nocache', past of length 0 and use_cache_branch false)."""
    stored = model[:-5] + ".cases"
    if os.path.isdir(stored):
        out = [(c, os.path.join(stored, c, "inputs"), None) for c in sorted(os.listdir(stored))
               if os.path.isdir(os.path.join(stored, c, "inputs"))]
        if out:
            return out
    names = {v["name"] for v in info["inputs"]}
    variants = [("gen", PAST)] + ([("gen-nocache", 0)] if "use_cache_branch" in names else [])
    return [(name, os.path.join(work, name), past) for name, past in variants]


# ---- Transmuter -----------------------------------------------------------------------

def ours_run(tm, model, inputs, out, mode, info, dump=None):
    """Returns (status, message): ok, unsupported, error, crash or timeout."""
    cmd = [tm, "run", model, "--inputs", inputs, "--out", out, "--quiet"]
    if mode == "eager":
        cmd.append("--eager")
    if mode == "static":
        cmd += ["--static", "use_cache_branch"]
    if dump:
        cmd += ["--dump", dump]
    return classify_run(cmd)


def classify_run(cmd):
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=OURS_TIMEOUT)
    except subprocess.TimeoutExpired:
        return "timeout", f"timed out after {OURS_TIMEOUT} s"
    msg = first_line(r.stderr)
    if r.returncode < 0 or r.returncode >= 128:
        return "crash", f"killed by signal {-r.returncode if r.returncode < 0 else r.returncode - 128}: {msg}"
    if r.returncode != 0:
        low = msg.lower()
        return ("unsupported" if "not support" in low or "unsupported" in low else "error"), msg
    return "ok", ""


def missing_ops(tm, model):
    """(missing ops or '', load error or '', crashed) from `transmuter info`."""
    try:
        r = subprocess.run([tm, "info", model, "--quiet"], capture_output=True, text=True,
                           timeout=OURS_TIMEOUT)
    except subprocess.TimeoutExpired:
        return "", "info timed out", False
    if r.returncode < 0 or r.returncode >= 128:
        return "", first_line(r.stderr), True
    if r.returncode != 0:
        return "", first_line(r.stderr), False
    m = re.search(r"^missing ops: (.*)$", r.stdout, re.M)
    missing = m.group(1).strip() if m else ""
    return ("" if missing == "none" else missing), "", False


# ---- Comparison -----------------------------------------------------------------------

def compare(a, b, rtol, atol):
    """One output: ours `a` against the reference `b`. NaN must meet NaN, infinities must
    be equal; max abs over the finite rest, max rel where |b| > atol (elsewhere a relative
    difference says nothing), cosine over all finite values."""
    r = {"shape": list(b.shape), "max_abs": 0.0, "max_rel": 0.0, "cosine": 1.0, "bad": 0, "ok": True}
    if a.shape != b.shape:
        r.update(ok=False, why=f"shape {list(a.shape)} vs {list(b.shape)}")
        return r
    if a.dtype.kind in "USO" or b.dtype.kind in "USO":
        r["bad"] = int(np.sum(a.astype(str) != b.astype(str)))
        r["ok"] = r["bad"] == 0
        return r
    x, y = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    nx, ny = np.isnan(x), np.isnan(y)
    bad_nan = int(np.sum(nx != ny))
    finite = np.isfinite(x) & np.isfinite(y)
    inf = ~finite & ~nx & ~ny
    bad_inf = int(np.sum(x[inf] != y[inf]))
    both_nan_or_inf = (nx & ny) | (inf & (x == y))
    bad_nonfinite = int(np.sum(~finite & ~both_nan_or_inf)) - bad_nan - bad_inf
    d = np.abs(x[finite] - y[finite])
    ref = np.abs(y[finite])
    if d.size:
        r["max_abs"] = float(d.max())
        big = ref > max(atol, 1e-30)
        r["max_rel"] = float((d[big] / ref[big]).max()) if big.any() else 0.0
        na, nb = np.linalg.norm(x[finite]), np.linalg.norm(y[finite])
        r["cosine"] = float(np.dot(x[finite], y[finite]) / (na * nb)) if na > 0 and nb > 0 else \
            (1.0 if na == nb else 0.0)
    r["bad"] = int(np.sum(d > atol + rtol * ref)) + bad_nan + bad_inf + max(bad_nonfinite, 0)
    r["ok"] = r["bad"] == 0
    if bad_nan:
        r["why"] = f"NaN in {bad_nan} places where the other has a number"
    return r


def load_dir(d):
    out = {}
    for f in os.listdir(d):
        if f.endswith(".npy"):
            try:
                out[decode(f[:-4])] = np.load(os.path.join(d, f), allow_pickle=False)
            except ValueError:
                pass
    return out


def noise_of(ref, perturbed_runs):
    """Per output, the largest difference of ONNX Runtime to itself over the perturbed runs."""
    return {n: max(compare(p[n], ref[n], 0, 0)["max_abs"] for p in perturbed_runs if n in p)
            for n in ref if any(n in p for p in perturbed_runs)}


def judge(cls, ours, ref, noise=None, exact=None):
    """Every output of one run. cls picks the tolerance; `noise` (output name to max abs)
    is ONNX Runtime against itself with perturbed weights: an output outside tolerance
    passes within 2x of it; `exact` (q4) is ONNX Runtime with accuracy_level 0: an output
    passes within fp32 tolerance of it. Returns (ok, per-output results)."""
    rtol, atol = TOL["fp16" if cls == "q4f16" else cls]
    outs, ok = [], True
    for name in sorted(ref):
        if name not in ours:
            outs.append({"name": name, "ok": False, "why": "no such output from Transmuter"})
            ok = False
            continue
        c = compare(ours[name], ref[name], rtol, atol)
        c["name"] = name
        if noise and name in noise and not c["ok"] and "why" not in c:
            c["noise_abs"] = noise[name]
            c["ok"] = c["max_abs"] <= NOISE_FACTOR * noise[name]
            c["rule"] = f"within {NOISE_FACTOR:g}x ONNX Runtime's own noise"
        if cls == "q4" and exact is not None and name in exact:
            e = compare(ours[name], exact[name], *TOL["fp32"])
            c["vs_level0_abs"] = e["max_abs"]
            if not c["ok"] and e["ok"]:
                c["ok"] = True
                c["rule"] = "fp32 tolerance against accuracy_level 0"
        ok = ok and c["ok"]
        outs.append(c)
    return ok, outs


# ---- Reference copies: ONNX Runtime's noise (int8), exact arithmetic (q4, int8) --------

def save_model(m, path):
    big = sum(len(t.raw_data) for g in walk_graphs(m.graph) for t in g.initializer) > 1800 << 20
    onnx_save = __import__("onnx").save
    onnx_save(m, path, save_as_external_data=big, location=os.path.basename(path) + "_data" if big else None)


def rewrite_u8u8(m):
    """int8 weights of MatMulInteger, ConvInteger, DynamicQuantizeMatMul and
    MatMulIntegerToFloat with uint8 activations become uint8 weights with zero point + 128:
    the same integers, but ONNX Runtime then takes its u8u8 kernel, which is exact. Its u8s8
    kernel on x86 without VNNI (vpmaddubsw) saturates pairs of products at int16."""
    from onnx import numpy_helper
    graphs = list(walk_graphs(m.graph))
    inits = {t.name: t for g in graphs for t in g.initializer}   # subgraphs see outer names
    dql = {n.output[0] for g in graphs for n in g.node if n.op_type == "DynamicQuantizeLinear"}
    made, changed = set(), False
    for g in graphs:
        for n in g.node:
            if n.op_type not in ("MatMulInteger", "ConvInteger", "DynamicQuantizeMatMul",
                                 "MatMulIntegerToFloat"):
                continue
            w = inits.get(n.input[1])
            if w is None or w.data_type != 3:
                continue
            if n.op_type in ("MatMulInteger", "ConvInteger") and n.input[0] not in dql:
                continue
            zp_name = n.input[3] if len(n.input) > 3 else ""
            zp = inits.get(zp_name) if zp_name else None
            if zp_name and zp is None:
                continue                          # a computed zero point: leave it
            w_u8, zp_u8 = w.name + "__u8", (zp_name or w.name) + "__zp_u8"
            if w_u8 not in made:
                made.add(w_u8)
                m.graph.initializer.append(numpy_helper.from_array(
                    (numpy_helper.to_array(w).astype(np.int16) + 128).astype(np.uint8), w_u8))
            if zp_u8 not in made:
                made.add(zp_u8)
                z = numpy_helper.to_array(zp).astype(np.int16) if zp is not None else np.zeros((), np.int16)
                m.graph.initializer.append(numpy_helper.from_array((z + 128).astype(np.uint8), zp_u8))
            inputs = list(n.input) + [""] * (4 - len(n.input))
            inputs[1], inputs[3] = w_u8, zp_u8
            del n.input[:]
            n.input.extend(inputs)
            changed = True
    return changed


def derived_copy(model, kind, scale=1.0):
    """A copy of `model` for a reference run, cached by the model's key; `model` itself
    when the copy would change nothing. 'perturbed': every float initializer scaled by
    `scale`; 'level0': MatMulNBits at accuracy_level 0; 'u8u8': see rewrite_u8u8."""
    import onnx
    from onnx import numpy_helper
    h = hashlib.sha256()
    model_key(model, h)
    h.update(f"{kind} {scale!r} {CACHE_VERSION}".encode())
    folder = os.path.join(CACHE, kind, h.hexdigest()[:32])
    path = os.path.join(folder, "model.onnx")
    if os.path.exists(path):
        return path
    if os.path.exists(os.path.join(folder, "same")):
        return model
    m = onnx.load(model)
    changed = False
    if kind == "u8u8":
        changed = rewrite_u8u8(m)
    for g in walk_graphs(m.graph):
        if kind == "perturbed":
            for t in g.initializer:
                if t.data_type in (1, 10, 11):
                    a = numpy_helper.to_array(t)
                    t.CopyFrom(numpy_helper.from_array((a.astype(np.float64) * scale).astype(a.dtype), t.name))
                    changed = True
        elif kind == "level0":
            for n in g.node:
                for a in n.attribute:
                    if n.op_type == "MatMulNBits" and a.name == "accuracy_level" and a.i != 0:
                        a.i = 0
                        changed = True
    os.makedirs(folder, exist_ok=True)
    if not changed:
        open(os.path.join(folder, "same"), "w").close()
        return model
    save_model(m, path + ".tmp.onnx")
    os.replace(path + ".tmp.onnx", path)
    return path


# ---- Debug: the first node whose output differs --------------------------------------

def flatten_if(model, inputs, dst):
    """For --debug: the model with each top-level If whose condition is a graph input
    replaced by its taken branch, so that the walk sees inside merged decoders."""
    import onnx
    from onnx import helper
    m = onnx.load(model)
    g = m.graph
    names = {v.name for v in g.input}
    nodes, changed = [], False
    for n in g.node:
        cond = n.input[0] if n.op_type == "If" else None
        f = os.path.join(inputs, encode(cond) + ".npy") if cond in names else None
        if not f or not os.path.exists(f):
            nodes.append(n)
            continue
        taken = "then_branch" if bool(np.load(f).ravel()[0]) else "else_branch"
        branch = next(a.g for a in n.attribute if a.name == taken)
        nodes.extend(branch.node)
        g.initializer.extend(branch.initializer)
        for out, bout in zip(n.output, branch.output):
            if out != bout.name:
                nodes.append(helper.make_node("Identity", [bout.name], [out], name=out + "/flattened"))
        changed = True
    if not changed:
        return model
    del g.node[:]
    g.node.extend(nodes)
    save_model(m, dst)
    return dst


def topological(g):
    """(index, node) in an order where each node follows its producers, file order kept
    where the file is already sorted (some test models are not)."""
    import heapq
    produced = {o: i for i, n in enumerate(g.node) for o in n.output if o}
    users = [[] for _ in g.node]
    waiting = [0] * len(g.node)
    for i, n in enumerate(g.node):
        for p in {produced[x] for x in n.input if x in produced and produced[x] != i}:
            users[p].append(i)
            waiting[i] += 1
    ready = [i for i, w in enumerate(waiting) if w == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for u in users[i]:
            waiting[u] -= 1
            if waiting[u] == 0:
                heapq.heappush(ready, u)
    order += [i for i in range(len(g.node)) if waiting[i] > 0]   # a cycle: file order
    return [(i, g.node[i]) for i in order]


def debug_case(runner, tm, model, refs, info, inputs, work):
    """Walks the main graph in order and names the first node whose output differs between
    ONNX Runtime (--expose all, on the reference copies `refs` that run_case used) and
    Transmuter (run --dump, eager)."""
    import onnx
    flat = flatten_if(model, inputs, os.path.join(work, "flat.onnx"))
    exposed = {}
    for kind, paths in refs.items():
        runs = []
        for k, path in enumerate(paths):
            d, _, err = ort_run(runner, flatten_if(path, inputs, os.path.join(work, f"flat-{kind}{k}.onnx")),
                                inputs, expose=True)
            if not d and kind == "ref":
                return {"error": f"ONNX Runtime with every value exposed: {err}"}
            if d:
                runs.append(load_dir(d))
        exposed[kind] = runs
    dump = os.path.join(work, "dump")
    shutil.rmtree(dump, ignore_errors=True)
    st, msg = ours_run(tm, flat, inputs, os.path.join(work, "dump-out"), "eager", info, dump=dump)
    if st != "ok":
        return {"error": f"Transmuter --dump: {msg}"}
    ref, ours = exposed["ref"][0], load_dir(dump)
    pick = lambda kind, o: {o: exposed[kind][0][o]} if exposed[kind] and o in exposed[kind][0] else None
    g = onnx.load(flat, load_external_data=False).graph
    compared = 0
    for i, n in topological(g):
        for o in n.output:
            if not o or o not in ref or o not in ours:
                continue
            noise = noise_of({o: ref[o]}, exposed["noise"]) if exposed["noise"] else None
            ok, res = judge(info["class"], {o: ours[o]}, {o: ref[o]}, noise, pick("exact", o))
            compared += 1
            if not ok:
                r = res[0]
                return {"node": n.name, "op": n.op_type, "index": i, "value": o,
                        "inputs": list(n.input), "max_abs": r.get("max_abs"),
                        "max_rel": r.get("max_rel"), "cosine": r.get("cosine"),
                        "why": r.get("why", ""), "compared": compared,
                        "flattened": flat != model}
    return {"node": None, "compared": compared, "flattened": flat != model}


# ---- The float64 rule: ONNX Runtime's less exact normalisations ------------------------

# Normalisations whose float32 arithmetic in ONNX Runtime can lose more than the
# tolerance on ill-conditioned rows (its SkipLayerNormalization forms the variance as
# E[x^2] - E[x]^2 in float32). The bench evaluates these nodes in float64.
EXACT_OPS = {"SkipLayerNormalization", "SkipSimplifiedLayerNormalization", "LayerNormalization",
             "SimplifiedLayerNormalization"}
MAX_CUTS = 6


def attr_of(node, name, default):
    from onnx import helper
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def eval64(node, value):
    """The float64 outputs {name: array} of a normalisation node from its float inputs
    (value(name) gives them), or None when the op is not one of EXACT_OPS."""
    op = node.op_type
    if op not in EXACT_OPS:
        return None
    get = lambda i: (value(node.input[i]) if i < len(node.input) and node.input[i] else None)
    f64 = lambda a: None if a is None else np.asarray(a, np.float64)
    out = {}
    if op.startswith("Skip"):
        rms = op == "SkipSimplifiedLayerNormalization"
        x, skip, gamma = f64(get(0)), f64(get(1)), f64(get(2))
        beta, bias = (None, f64(get(3))) if rms else (f64(get(3)), f64(get(4)))
        x = x + skip + (bias if bias is not None else 0.0)
        axes, eps = (-1,), attr_of(node, "epsilon", 1e-12)
        names = {0: "y", 1: "mean", 2: "inv_std", 3: "sum"}
    else:
        rms = op == "SimplifiedLayerNormalization"
        x, gamma, beta = f64(get(0)), f64(get(1)), (None if rms else f64(get(2)))
        axis = attr_of(node, "axis", -1) % x.ndim
        axes, eps = tuple(range(axis, x.ndim)), attr_of(node, "epsilon", 1e-5)
        names = {0: "y", 1: "mean", 2: "inv_std"} if not rms else {0: "y", 1: "inv_std"}
    mean = 0.0 if rms else x.mean(axis=axes, keepdims=True)
    inv_std = 1.0 / np.sqrt(((x - mean) ** 2).mean(axis=axes, keepdims=True) + eps)
    y = (x - mean) * inv_std * gamma + (beta if beta is not None else 0.0)
    parts = {"y": y, "mean": np.broadcast_to(mean, inv_std.shape), "inv_std": inv_std, "sum": x}
    for k, name in names.items():
        if k < len(node.output) and node.output[k]:
            out[node.output[k]] = parts[name]
    return out


def first_difference(model, ref, ours, cls):
    """(index, node, value name) of the first main-graph node, in topological order, with
    an output outside the class's tolerance between ref and ours; None if there is none."""
    import onnx
    g = onnx.load(model, load_external_data=False).graph
    for i, n in topological(g):
        for o in n.output:
            if o and o in ref and o in ours and not judge(cls, {o: ours[o]}, {o: ref[o]})[0]:
                return i, n, o
    return None


def cut_at(model, index, values, inputs, dst_model, dst_inputs):
    """A copy of the model without node `index`, whose outputs become graph inputs fed
    with `values` (float32), and the inputs folder for it."""
    import onnx
    from onnx import helper, TensorProto
    m = onnx.load(model)
    g = m.graph
    node = g.node[index]
    del g.node[index]
    shutil.rmtree(dst_inputs, ignore_errors=True)
    shutil.copytree(inputs, dst_inputs)
    for name, v in values.items():
        v = np.ascontiguousarray(v, np.float32)
        g.input.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, list(v.shape)))
        np.save(os.path.join(dst_inputs, encode(name) + ".npy"), v)
    del g.value_info[:]
    save_model(m, dst_model)
    return node


def exactness_rule(runner, args, model, info, inputs, modes, work):
    """The rule for outputs outside tolerance whose difference starts at a normalisation:
    when our output of that node is no farther from its float64 evaluation (each runtime
    from its own inputs) than ONNX Runtime's, the node is cut out and both runtimes run the
    rest of the graph from the float64 values; repeated until the outputs match, another
    kind of node differs first, or we are the less exact one. Returns (cuts, per-mode
    results on the final cut model) when every mode then matches, else (cuts, None)."""
    cls, cur, cur_in, cuts = info["class"], model, inputs, []
    import onnx
    for k in range(MAX_CUTS):
        d, _, err = ort_run(runner, cur, cur_in, expose=True)
        dump = os.path.join(work, f"exact{k}-dump")
        shutil.rmtree(dump, ignore_errors=True)
        st, _ = ours_run(args.tm, cur, cur_in, os.path.join(work, f"exact{k}-out"), "eager", info,
                         dump=dump)
        if not d or st != "ok":
            return cuts, None
        ref, ours = load_dir(d), load_dir(dump)
        hit = first_difference(cur, ref, ours, cls)
        if hit is None:
            return cuts, None
        index, node, _ = hit
        g = onnx.load(cur).graph
        inits = {t.name: t for t in g.initializer}
        given = load_dir(cur_in)

        def lookup(src):
            def value(name):
                if name in src:
                    return src[name]
                if name in given:
                    return given[name]
                if name in inits:
                    from onnx import numpy_helper
                    return numpy_helper.to_array(inits[name])
                raise KeyError(name)
            return value
        try:
            exact_ref, exact_ours = eval64(node, lookup(ref)), eval64(node, lookup(ours))
        except KeyError:
            return cuts, None
        if exact_ref is None:
            return cuts, None
        err_ref = max(np.abs(ref[o].astype(np.float64) - e).max() for o, e in exact_ref.items() if o in ref)
        err_ours = max(np.abs(ours[o].astype(np.float64) - e).max() for o, e in exact_ours.items() if o in ours)
        cuts.append({"node": node.name, "op": node.op_type, "ours_vs_exact": float(err_ours),
                     "ort_vs_exact": float(err_ref)})
        if err_ours > err_ref:
            return cuts, None
        nxt, nxt_in = os.path.join(work, f"exact{k}.onnx"), os.path.join(work, f"exact{k}-in")
        cut_at(cur, index, exact_ref, cur_in, nxt, nxt_in)
        cur, cur_in = nxt, nxt_in
        cut_ref = ort_outputs(runner, cur, cur_in)
        if cut_ref is None:
            return cuts, None
        results, all_ok = {}, True
        for mode in modes:
            out = os.path.join(work, f"exact{k}-{mode}")
            shutil.rmtree(out, ignore_errors=True)
            st, msg = ours_run(args.tm, cur, cur_in, out, mode, info)
            ok, outs = judge(cls, load_dir(out), cut_ref) if st == "ok" else (False, [])
            results[mode] = {"status": "match" if ok else "mismatch", "outputs": outs}
            all_ok = all_ok and ok
        if all_ok:
            return cuts, results
    return cuts, None


# ---- One model ------------------------------------------------------------------------

def run_model(model, args, runner):
    label = label_of(model)
    row = {"model": label, "class": None, "cases": [], "status": None, "note": ""}
    missing, load_err, crashed = missing_ops(args.tm, model)
    row["missing_ops"] = missing
    try:
        info = inspect(model)
    except Exception as e:                     # not a model python-onnx can read
        info, inspect_err = None, f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
    if info is None or load_err or crashed:
        # Nothing to feed: record what each runtime says about the file itself.
        row["class"] = info["class"] if info else "-"
        with tempfile.TemporaryDirectory(prefix="transmuter-coverage-") as made:
            try:
                if info is not None:
                    make_inputs(info, made, PAST, 1, 0)
                _, _, ort_err = ort_run(runner, model, made, gen=info is None)
            except ValueError as e:
                ort_err = f"no inputs: {e}"
        if info is None and ort_err:
            ort_err += f" (python-onnx: {inspect_err})"
        row["ort_error"] = ort_err
        row["ours"] = "crash" if crashed else ("error" if load_err else "ok")
        row["ours_message"] = load_err
        row["status"] = "crash" if crashed else ("ort-fails" if row["ort_error"] else "error")
        return row
    row["class"], row["custom_ops"] = info["class"], info["custom"]
    seed = zlib.crc32(label.encode())
    work = tempfile.mkdtemp(prefix="transmuter-coverage-")
    try:
        for case, inputs, past in cases_of(model, info, work):
            row["cases"].append(run_case(model, info, case, inputs, past, seed, args, runner, work))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    row["status"], row["note"] = model_status(row)
    return row


def ort_outputs(runner, path, inputs):
    d, _, _ = ort_run(runner, path, inputs)
    return load_dir(d) if d else None


def max_diff(a, b):
    return max((compare(a[n], b[n], 0, 0)["max_abs"] for n in b if n in a), default=0.0)


def fp32_twin(model):
    """The float32 model a half-precision variant was made from, beside it: the q4 model
    for q4f16 (same 4-bit weights, float32 activations), else the fp32 one."""
    folder, name = os.path.split(model)
    for a, b in (("_q4f16", "_q4"), ("_fp16", ""), ("_fp16", "_fp32")):
        if a in name:
            twin = os.path.join(folder, name.replace(a, b))
            if twin != model and os.path.exists(twin):
                return twin
    return None


def as_float32(src, dst):
    """A copy of an inputs folder with float16 arrays made float32."""
    shutil.rmtree(dst, ignore_errors=True)
    os.makedirs(dst)
    for f in os.listdir(src):
        a = np.load(os.path.join(src, f))
        np.save(os.path.join(dst, f), a.astype(np.float32) if a.dtype == np.float16 else a)


def run_case(model, info, case, inputs, past, seed, args, runner, work):
    res = {"case": case, "modes": {}}
    cls = info["class"]
    # The reference: the model as exported, or for int8 its exact u8u8 copy.
    ref_model = derived_copy(model, "u8u8") if cls == "int8" else model
    ref_dir, level, err, unknown_used = None, "disabled", "", None
    if past is not None:
        # Made-up inputs: dims of unknown meaning 4 first, then 1 if ONNX Runtime rejects that.
        for unknown in (4, 1):
            shutil.rmtree(inputs, ignore_errors=True)
            try:
                unknown_used = unknown if make_inputs(info, inputs, past, unknown, seed) else None
            except ValueError as e:
                err = f"cannot make inputs: {e}"
                shutil.rmtree(inputs, ignore_errors=True)
                break
            ref_dir, level, e = ort_run(runner, ref_model, inputs)
            err = err or e
            if ref_dir:
                err = ""
                break
            if not unknown_used:                # nothing else to try
                break
        res["inputs"] = "made up" + (f" (unknown dims {unknown_used})" if unknown_used else "")
    else:
        ref_dir, level, err = ort_run(runner, ref_model, inputs)
        res["inputs"] = "stored"
    res["ort_opt"] = level
    if not ref_dir:
        res["ort_error"] = err
    ref = load_dir(ref_dir) if ref_dir else None
    refs = {"ref": [ref_model], "noise": [], "exact": []}
    noise = exact = None
    def measure_noise():
        refs["noise"] = [derived_copy(ref_model, "perturbed", s) for s in NOISE_SCALES]
        runs = [r for r in (ort_outputs(runner, p, inputs) for p in refs["noise"]) if r is not None]
        if not runs:
            return None
        res["ort_noise_abs"] = max(noise_of(ref, runs).values(), default=0.0)
        return noise_of(ref, runs)

    try:
        if ref is not None and cls == "int8":
            if ref_model != model:
                as_exported = ort_outputs(runner, model, inputs)
                if as_exported is not None:
                    res["ort_u8s8_vs_u8u8_abs"] = max_diff(as_exported, ref)
            noise = measure_noise()
        if ref is not None and cls == "q4":
            level0 = derived_copy(model, "level0")
            if level0 != model:
                refs["exact"] = [level0]
                exact = ort_outputs(runner, level0, inputs)
                if exact is not None:
                    res["ort_level4_vs_level0_abs"] = max_diff(ref, exact)
    except Exception as e:                      # a copy python-onnx cannot write
        res["reference_copy_error"] = f"{type(e).__name__}: {e}"[:300]
    has_branch = any(v["name"] == "use_cache_branch" for v in info["inputs"])
    for mode in args.modes:
        if mode == "static" and not has_branch:
            continue
        if not os.path.isdir(inputs):
            res["modes"][mode] = {"status": "not-run", "message": "not run: no inputs could be made"}
            continue
        out = os.path.join(work, f"{case}-{mode}")
        shutil.rmtree(out, ignore_errors=True)
        st, msg = ours_run(args.tm, model, inputs, out, mode, info)
        m = {"status": st, "message": msg}
        if st == "ok" and ref is not None:
            ok, outs = judge(cls, load_dir(out), ref, noise if cls == "int8" else None, exact)
            m["status"] = "match" if ok else "mismatch"
            m["outputs"], m["dir"] = outs, out
        elif st == "ok":
            m["status"] = "runs"              # no reference to compare with
            m["dir"] = out
        res["modes"][mode] = m
    off = [mode for mode, m in res["modes"].items() if m["status"] == "mismatch"]
    if off and cls in ("fp32", "fp16"):
        # Outside tolerance where ONNX Runtime's normalisation is the less exact one?
        try:
            cuts, cut_results = exactness_rule(runner, args, model, info, inputs, off, work)
        except Exception as e:                  # a model python-onnx cannot cut
            cuts, cut_results = [], None
            res["exact_rule_error"] = f"{type(e).__name__}: {e}"[:300]
        if cuts:
            res["exact_cuts"] = cuts
        for mode in off if cut_results else []:
            m = res["modes"][mode]
            m["status"], m["rule"] = "match", "float64"
            m["after_cuts"] = worst(cut_results[mode]["outputs"])
    for mode in [mode for mode in off if res["modes"][mode]["status"] == "mismatch"]:
        if cls == "int8":
            continue
        # Is the output so ill-conditioned that ONNX Runtime moves as much against itself?
        # Then say so apart from a mismatch.
        m = res["modes"][mode]
        if noise is None:
            try:
                noise = measure_noise() or {}
            except Exception as e:
                noise, res["reference_copy_error"] = {}, f"{type(e).__name__}: {e}"[:300]
        ok, outs = judge(cls, load_dir(m["dir"]), ref, noise, exact) if noise else (False, None)
        if ok:
            m["status"], m["outputs"] = "within-noise", outs
    twin = fp32_twin(model) if cls in ("fp16", "q4f16") and ref is not None else None
    if twin:
        # How far each runtime's half-precision run is from the float32 model's.
        try:
            twin_in = os.path.join(work, f"{case}-twin-in")
            as_float32(inputs, twin_in)
            twin_ref = ort_outputs(runner, twin, twin_in)
            mine = next((load_dir(m["dir"]) for m in res["modes"].values() if m.get("dir")), None)
            if twin_ref is not None and mine is not None:
                res["vs_fp32_twin"] = {"model": label_of(twin), "ours": max_diff(mine, twin_ref),
                                       "ort": max_diff(ref, twin_ref)}
        except Exception as e:
            res["twin_error"] = f"{type(e).__name__}: {e}"[:300]
    for m in res["modes"].values():
        if m["status"] != "runs":
            m.pop("dir", None)
    ran = [m for m in res["modes"].values() if m["status"] == "runs"]
    if len(ran) > 1:                          # no reference: do our modes agree at least?
        first = load_dir(ran[0]["dir"])
        res["modes_agree_abs"] = max(max_diff(load_dir(m["dir"]), first) for m in ran[1:])
    for m in ran:
        del m["dir"]
    if args.debug and ref is not None and any(m["status"] in ("mismatch", "within-noise")
                                              for m in res["modes"].values()):
        dwork = os.path.join(work, f"{case}-debug")
        os.makedirs(dwork, exist_ok=True)
        if cls != "int8":                     # walk against the tolerance alone
            refs["noise"] = []
        res["debug"] = debug_case(runner, args.tm, model, refs, info, inputs, dwork)
    # ONNX Runtime's outputs stay cached; big reference copies are remade when needed.
    for path in refs["ref"] + refs["noise"] + refs["exact"]:
        if path != model and os.path.exists(path) and os.path.getsize(path) > 64 << 20:
            shutil.rmtree(os.path.dirname(path), ignore_errors=True)
    return res


def model_status(row):
    """One word for a model across its cases and modes, and a note."""
    modes = [m for c in row["cases"] for m in c["modes"].values()]
    ort_errors = [c["ort_error"] for c in row["cases"] if c.get("ort_error")]
    if ort_errors:
        ours = [m for m in modes if m["status"] != "runs"]
        note = ours[0]["message"] if ours else "runs"
        agree = [c["modes_agree_abs"] for c in row["cases"] if "modes_agree_abs" in c]
        if not ours and agree:
            note += f" (eager and compiled agree to {fmt(max(agree))})"
        return ("custom-op" if row.get("custom_ops") else "ort-fails"), note
    for bad in ("crash", "timeout", "unsupported", "error", "not-run", "mismatch", "within-noise"):
        hit = [m for m in modes if m["status"] == bad]
        if hit:
            return bad, hit[0].get("message", "")
    return ("match" if modes else "error"), ""


# ---- Report ---------------------------------------------------------------------------

def built_from():
    """Which source the measured Transmuter was built from: $COVERAGE_SOURCE, else the
    repository's commit (and whether its C sources have local changes)."""
    if os.environ.get("COVERAGE_SOURCE"):
        return os.environ["COVERAGE_SOURCE"]
    try:
        head = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--", "src", "include", "tools"],
                               capture_output=True, text=True).stdout.strip()
        return f"commit {head}" + (" with local changes" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "an unknown source"


def machine():
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), cpu)
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} logical CPUs"


def fmt(x):
    if x is None:
        return "-"
    if isinstance(x, float) and (x != x or x in (float("inf"), float("-inf"))):
        return str(x)
    return "0" if x == 0 else f"{x:.2g}"


def worst(outs):
    """(max abs, max rel, min cosine) over the outputs of one run."""
    outs = [o for o in outs or [] if "max_abs" in o]
    if not outs:
        return None, None, None
    return (max(o["max_abs"] for o in outs), max(o["max_rel"] for o in outs),
            min(o["cosine"] for o in outs))


def cell(m):
    s = m["status"]
    if s in ("match", "mismatch", "within-noise"):
        a, r, c = worst(m.get("outputs"))
        word = {"match": "ok", "mismatch": "**DIFF**", "within-noise": "noise"}[s]
        if m.get("rule") == "float64":
            word = "ok (f64)"
        return f"{word} {fmt(a)} / {fmt(r)} / {c:.6f}"
    return {"unsupported": "unsupported", "error": "**error**", "crash": "**CRASH**",
            "timeout": "**timeout**", "runs": "runs"}.get(s, s)


def md_escape(s):
    return (s or "").replace("|", "\\|").replace("\n", " ")


def rounded(x):
    if isinstance(x, float):
        return float(f"{x:.4g}") if x == x and abs(x) != float("inf") else str(x)
    if isinstance(x, dict):
        return {k: rounded(v) for k, v in x.items()}
    if isinstance(x, list):
        return [rounded(v) for v in x]
    return x


def compact(row):
    """A row for results.json: messages tidied; per mode the worst numbers, and only the
    outputs that failed."""
    row = json.loads(json.dumps(row, default=float))
    for key in ("note", "ours_message", "ort_error"):
        if key in row:
            row[key] = tidy(row[key], row["model"])
    for c in row["cases"]:
        if "ort_error" in c:
            c["ort_error"] = tidy(c["ort_error"], row["model"])
        for m in c["modes"].values():
            m["message"] = tidy(m.get("message"), row["model"])
            outs = m.pop("outputs", None)
            if outs:
                a, r, cos = worst(outs)
                m["worst"] = {"max_abs": a, "max_rel": r, "cosine": cos}
                failed = [o for o in outs if not o["ok"] or o.get("rule")]
                if failed:
                    m["outputs"] = failed
    return rounded(row)


def write_report(rows, args, elapsed):
    with open(os.path.join(HERE, "results.json"), "w") as f:
        head = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                "onnxruntime": ORT_VERSION, "modes": args.modes, "tolerances": TOL,
                "noise": {"scales": NOISE_SCALES, "factor": NOISE_FACTOR}}
        f.write(json.dumps(head)[:-1] + ', "models": [\n')
        f.write(",\n".join(json.dumps(compact(r), ensure_ascii=False) for r in rows))
        f.write("\n]}\n")
    corpora = {}
    for r in rows:
        corpora.setdefault(r["model"].split("/")[0], []).append(r)
    order = ["match", "within-noise", "mismatch", "unsupported", "error", "not-run", "crash", "timeout",
             "ort-fails", "custom-op"]
    count = lambda rs, s: sum(1 for r in rs if r["status"] == s)
    L = ["# Coverage: Transmuter against ONNX Runtime", ""]
    argv = " ".join(a for a in sys.argv[1:] if not a.startswith("--tm") and "/transmuter" not in a)
    L.append(f"Generated by `make coverage{' COVERAGE_ARGS=' + repr(argv) if argv else ''}` "
             f"(`bench/coverage/run.py`) with Transmuter built from {built_from()}, "
             f"on {time.strftime('%Y-%m-%d', time.gmtime())} in "
             f"{elapsed / 60:.0f} min, on {machine()} ({ORT_RUNS['made']} ONNX Runtime runs made, "
             f"{ORT_RUNS['cached']} taken from `.cache`). Modes: {', '.join(args.modes)}. Reference: ONNX "
             f"Runtime {ORT_VERSION} (onnxruntime-node, CPU, graph optimizations off). Tolerances, the "
             "noise rule and how inputs are made: [README.md](README.md).")
    L.append("")
    total = len(rows)
    runnable = [r for r in rows if r["status"] not in ("ort-fails", "custom-op")]
    by_rule = sum(1 for r in rows if r["status"] == "match" and any(
        m.get("rule") == "float64" for c in r["cases"] for m in c["modes"].values()))
    L.append(f"**{count(rows, 'match')} of the {len(runnable)} models that ONNX Runtime runs match in "
             f"every mode** ({by_rule} by the float64 rule); within ONNX Runtime's own noise but "
             f"outside tolerance: "
             f"{count(rows, 'within-noise')}; differ: {count(rows, 'mismatch')}; lack an operator: "
             f"{count(rows, 'unsupported')}; fail with another error: "
             f"{count(rows, 'error') + count(rows, 'timeout') + count(rows, 'not-run')}; crash: "
             f"{count(rows, 'crash')}. ONNX Runtime cannot run "
             f"{count(rows, 'ort-fails') + count(rows, 'custom-op')} of the {total} "
             f"({count(rows, 'custom-op')} need custom-op libraries).")
    L += ["", "| corpus | models | " + " | ".join(order) + " |", "|---|---" + "|---" * len(order) + "|"]
    for name, rs in sorted(corpora.items()):
        L.append(f"| {name} | {len(rs)} | " + " | ".join(str(count(rs, s)) for s in order) + " |")
    L.append(f"| **all** | {total} | " + " | ".join(str(count(rows, s)) for s in order) + " |")
    L += ["", "A model counts under its worst case and mode. `match`: every output within tolerance "
          "(int8: or within 2x ONNX Runtime's own noise, which is its rule; `ok (f64)`: by the float64 "
          "rule, where the difference starts at a normalisation that ONNX Runtime computes less "
          "exactly than Transmuter, and the rest of the graph matches once that node is replaced by "
          "its float64 value); `within-noise`: some output "
          "outside tolerance, but within 2x of what ONNX Runtime moves against itself when every weight "
          "is scaled by 1 ± 1e-7 (an ill-conditioned output, not a wrong one); `mismatch`: outside both; "
          "`unsupported`: Transmuter lacks an operator (listed below); `error`, `crash`, `timeout`: "
          "Transmuter failed otherwise; `not-run`: no inputs could be made; `ort-fails`: ONNX Runtime "
          "cannot load or run the model (deliberately broken test models among them); `custom-op`: it "
          "needs an ONNX Runtime custom-op library.", ""]
    L += ["## Matrix", "",
          "Each mode's cell: worst max abs / max rel / min cosine over all outputs, against ONNX "
          "Runtime. `made up` inputs come from the model's input spec "
          f"(batch {BATCH}, sequence {SEQ}, past {PAST}).", ""]
    modes = args.modes
    L.append("| model | class | case | inputs | " + " | ".join(modes) + " | note |")
    L.append("|---|---|---|---|" + "---|" * len(modes) + "---|")
    for r in rows:
        if r["status"] in ("ort-fails", "custom-op"):
            continue
        if not r["cases"]:
            L.append(f"| {r['model']} | {r['class']} | - | - | " + " | ".join(
                "**CRASH**" if r["status"] == "crash" else "**error**" for _ in modes)
                + f" | {md_escape(tidy(r.get('ours_message') or r['note'], r['model']))} |")
        for c in r["cases"]:
            cells = [cell(c["modes"][m]) if m in c["modes"] else "" for m in modes]
            note = []
            if "ort_noise_abs" in c:
                note.append(f"ORT's own noise {fmt(c['ort_noise_abs'])}")
            if "ort_level4_vs_level0_abs" in c:
                note.append(f"ORT accuracy_level 4 vs 0: {fmt(c['ort_level4_vs_level0_abs'])}")
            if "ort_u8s8_vs_u8u8_abs" in c:
                note.append(f"ORT u8s8 vs u8u8: {fmt(c['ort_u8s8_vs_u8u8_abs'])}")
            if c.get("ort_opt", "disabled") != "disabled":
                note.append(f"ORT opt {c['ort_opt']}")
            if "vs_fp32_twin" in c:
                t = c["vs_fp32_twin"]
                note.append(f"vs the float32 `{os.path.basename(t['model'])}`: ours {fmt(t['ours'])}, "
                            f"ORT {fmt(t['ort'])}")
            msgs = {tidy(m.get("message"), r["model"]) for m in c["modes"].values() if m.get("message")}
            note += sorted(msgs)
            if c.get("exact_cuts"):
                ruled = [m for m in c["modes"].values() if m.get("rule") == "float64"]
                cuts = "; ".join(f"`{x['node']}` ({x['op']}) ours {fmt(x['ours_vs_exact'])}, ORT "
                                 f"{fmt(x['ort_vs_exact'])}" for x in c["exact_cuts"])
                if ruled:
                    after = max(m["after_cuts"][0] for m in ruled)
                    note.append(f"float64 rule: from the float64 value of {cuts}; with "
                                f"{'that node' if len(c['exact_cuts']) == 1 else 'those nodes'} cut "
                                f"out, the rest matches (max abs {fmt(after)})")
                else:
                    note.append(f"float64 rule does not hold: {cuts}")
            if c.get("debug"):
                d = c["debug"]
                if d.get("node"):
                    note.append(f"first difference: node `{d['node']}` ({d['op']}), value `{d['value']}`, "
                                f"max abs {fmt(d['max_abs'])}")
                elif "error" in d:
                    note.append("debug: " + d["error"])
                else:
                    note.append(f"debug: all {d['compared']} intermediate values match")
            L.append(f"| {r['model']} | {r['class']} | {c['case']} | {c.get('inputs', '')} | "
                     + " | ".join(cells) + f" | {md_escape('; '.join(note))} |")
    missing = {}
    for r in rows:
        if r["status"] in ("ort-fails", "custom-op"):
            continue                          # broken or custom-op test models: listed below
        for op in filter(None, (r.get("missing_ops") or "").split(", ")):
            missing.setdefault(op, []).append(r["model"])
    if missing:
        L += ["", "## Operators Transmuter lacks", "",
              "In models that ONNX Runtime runs.", "", "| operator | models |", "|---|---|"]
        for op, ms in sorted(missing.items(), key=lambda kv: (-len(kv[1]), kv[0])):
            L.append(f"| `{op}` | {', '.join(ms)} |")
    bad = [r for r in rows if r["status"] in ("ort-fails", "custom-op")]
    if bad:
        L += ["", "## Models ONNX Runtime cannot run", "",
              "With what ONNX Runtime says, and what Transmuter prints (a clear error is expected; "
              "`runs` when we run what ONNX Runtime will not).", "",
              "| model | ONNX Runtime | Transmuter |", "|---|---|---|"]
        for r in bad:
            ort_err = r.get("ort_error") or next((c["ort_error"] for c in r["cases"] if c.get("ort_error")), "")
            ort_err, ours = tidy(ort_err, r["model"]), tidy(r.get("ours_message") or r["note"], r["model"])
            if r.get("ours") == "crash":
                ours = "**CRASH** " + ours
            L.append(f"| {r['model']} | {md_escape(ort_err[:200])} | {md_escape(ours[:200]) or 'runs'} |")
    with open(os.path.join(HERE, "RESULTS.md"), "w") as f:
        f.write("\n".join(L) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="*")
    ap.add_argument("--modes", default="eager,plan,static",
                    help="static: compiled with use_cache_branch static (merged decoders only)")
    ap.add_argument("--debug", action="store_true", help="name the first differing node")
    ap.add_argument("--only", default="", help="models whose path contains this")
    ap.add_argument("--large", action="store_true",
                    help="also the bench models of " + ", ".join(sorted(LARGE_DIRS)))
    ap.add_argument("--tm", default=os.environ.get("TM", os.path.join(ROOT, "build", "transmuter")))
    args = ap.parse_args()
    args.modes = [m for m in args.modes.split(",") if m]
    for m in args.modes:
        if m not in ("eager", "plan", "static"):
            ap.error(f"unknown mode {m} (eager, plan, static)")
    if not os.path.exists(args.tm):
        ap.error(f"{args.tm} is not built (make all)")
    paths = args.paths or [os.path.join(SHARED, "models")] + (
        [os.path.join(ROOT, "bench", "models")] if os.path.isdir(os.path.join(ROOT, "bench", "models")) else [])
    models = [m for m in discover(paths, args.large) if args.only in m]
    os.makedirs(CACHE, exist_ok=True)
    runner = ensure_ort()
    rows, t0 = [], time.time()
    for i, model in enumerate(models):
        try:
            row = run_model(model, args, runner)
        except Exception as e:                 # a bench bug must not lose the other rows
            row = {"model": label_of(model), "class": "-", "cases": [], "status": "error",
                   "note": f"coverage bench: {type(e).__name__}: {e}"[:300]}
        rows.append(row)
        print(f"[{i + 1}/{len(models)}] {row['model']}: {row['status']} {row['note'][:120]}", flush=True)
        for c in row["cases"]:
            if c.get("debug"):
                print(f"    {c['case']}: debug {json.dumps(c['debug'])[:300]}", flush=True)
    write_report(rows, args, time.time() - t0)
    n_match = sum(r["status"] == "match" for r in rows)
    print(f"{n_match} of {len(rows)} models match; see {os.path.relpath(os.path.join(HERE, 'RESULTS.md'))}")


if __name__ == "__main__":
    main()
