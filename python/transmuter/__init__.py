"""Transmuter from Python: ONNX models, tokenizers, pipelines and fine-tuning.

A layer over the library's public C API (the `_transmuter` extension). NumPy arrays go in
and come out without copies where their layout allows. Not ONNX Runtime: its common
surface (InferenceSession, get_inputs, run, IOBinding) is followed where it is cheap.
"""
import json
import os
import threading

import numpy as np

from . import _transmuter as _c

__all__ = ["InferenceSession", "SessionOptions", "RunOptions", "NodeArg", "IOBinding", "Model",
           "Tokenizer", "Encoding", "Pipeline", "pipeline", "Optimizer", "Error", "version",
           "get_available_providers"]


# ---- Errors -----------------------------------------------------------------------------

class Error(RuntimeError):
    """An error of the library: str(e) is its message; .status its short name ("parse",
    "unsupported", ...), .code the tm_status number, .node / .op / .value where it happened
    (empty when not known)."""
    status = "error"
    code = -1
    node = op = value = ""


class InvalidArgument(Error, ValueError): pass
class IOFailure(Error, OSError): pass
class ParseError(Error, ValueError): pass
class Unsupported(Error, NotImplementedError): pass
class ShapeError(Error, ValueError): pass
class DtypeError(Error, TypeError): pass
class OutOfMemory(Error, MemoryError): pass
class RunError(Error): pass
class NotFound(Error, LookupError): pass
class NetworkError(Error, OSError): pass


_c._set_error_classes(Error, {1: InvalidArgument, 2: IOFailure, 3: ParseError, 4: Unsupported,
                              5: ShapeError, 6: DtypeError, 7: OutOfMemory, 8: RunError,
                              9: NotFound, 10: NetworkError})


def version():
    """The linked library's version, e.g. "0.1.0"."""
    return _c.version()


# ---- Element types ------------------------------------------------------------------------

FLOAT, UINT8, INT8, UINT16, INT16, INT32, INT64, STRING, BOOL, FLOAT16, DOUBLE = range(1, 12)
UINT32, UINT64, COMPLEX64, COMPLEX128, BFLOAT16 = range(12, 17)

_NP_OF = {FLOAT: np.float32, UINT8: np.uint8, INT8: np.int8, UINT16: np.uint16,
          INT16: np.int16, INT32: np.int32, INT64: np.int64, BOOL: np.bool_,
          FLOAT16: np.float16, DOUBLE: np.float64, UINT32: np.uint32, UINT64: np.uint64,
          COMPLEX64: np.complex64, COMPLEX128: np.complex128}
# Types NumPy has no dtype for come out as their storage: bfloat16 as uint16 bits, the
# 8-bit floats and the sub-byte integers (one element per byte) as uint8 or int8.
_NP_STORAGE = {BFLOAT16: np.uint16, 17: np.uint8, 18: np.uint8, 19: np.uint8, 20: np.uint8,
               21: np.uint8, 22: np.int8, 23: np.uint8, 24: np.uint8, 25: np.uint8, 26: np.int8}
_TM_OF = {np.dtype(v): k for k, v in _NP_OF.items()}
_ORT_NAMES = {FLOAT: "float", UINT8: "uint8", INT8: "int8", UINT16: "uint16", INT16: "int16",
              INT32: "int32", INT64: "int64", STRING: "string", BOOL: "bool",
              FLOAT16: "float16", DOUBLE: "double", UINT32: "uint32", UINT64: "uint64",
              COMPLEX64: "complex64", COMPLEX128: "complex128", BFLOAT16: "bfloat16"}


def _dtype_code(arr):
    if arr.dtype.kind in "OUS":
        return STRING
    code = _TM_OF.get(arr.dtype)
    if code is None:
        raise DtypeError(f"no ONNX element type for NumPy dtype {arr.dtype}")
    return code


def _to_value(x, dtype=None):
    """A NumPy-compatible value as the (buffer, dtype, shape) triple the C layer wraps.
    C-contiguous arrays are passed as they are (no copy); others are made contiguous.
    dtype forces an ONNX element type for the raw bytes (bfloat16 given as uint16 bits)."""
    arr = np.asarray(x)
    if dtype is None:
        dtype = _dtype_code(arr)
    if dtype == STRING:
        flat = [s.encode("utf-8") if isinstance(s, str) else bytes(s) for s in arr.reshape(-1)]
        return (flat, STRING, arr.shape)
    if not arr.flags.c_contiguous:
        arr = np.ascontiguousarray(arr)
    return (arr, dtype, arr.shape)


def _to_numpy(t):
    """A library tensor as a NumPy array viewing its memory (the array keeps it alive)."""
    if t is None:
        return None
    code, shape = t.dtype, t.shape
    if code == STRING:
        return np.array([s.decode("utf-8", "replace") for s in t.strings()],
                        dtype=object).reshape(shape)
    np_type = _NP_OF.get(code) or _NP_STORAGE.get(code)
    if np_type is None:
        raise DtypeError(f"no NumPy dtype for {_c.dtype_name(code)}")
    return np.frombuffer(t, dtype=np_type).reshape(shape)


# ---- Models and sessions ---------------------------------------------------------------------

# Declared kinds of graph inputs and outputs (tm_kind): 0 neither (a map, or untyped).
_KIND_TENSOR, _KIND_SEQUENCE = 1, 2


class NodeArg:
    """A graph input or output as ONNX Runtime describes it: name, type ("tensor(float)",
    "seq(tensor(float))", "optional(tensor(int64))", ...) and shape (ints, dim_param names,
    or None for unknown dims; None for a sequence)."""
    __slots__ = ("name", "type", "shape", "dtype", "kind", "optional")

    def __init__(self, name, dtype, dims, params, kind=_KIND_TENSOR, optional=0):
        self.name = name
        self.dtype = dtype
        self.kind = kind
        self.optional = bool(optional)
        t = f"tensor({_ORT_NAMES.get(dtype, _c.dtype_name(dtype))})"
        if kind == _KIND_SEQUENCE:
            t = f"seq({t})"
        elif kind != _KIND_TENSOR:
            t = "unknown"
        self.type = f"optional({t})" if self.optional else t
        if dims is None:
            self.shape = None
        else:
            self.shape = [d if d is not None else p for d, p in zip(dims, params)]

    def __repr__(self):
        return f"NodeArg(name={self.name!r}, type={self.type!r}, shape={self.shape!r})"


class SessionOptions:
    """ONNX Runtime's SessionOptions fields that mean something here; others are accepted
    and ignored. Ours: compute_type ("float32": half-precision runs in f32), eager (node by
    node instead of compiled plans), plan_cache_limit."""

    def __init__(self):
        self.intra_op_num_threads = 0
        self.inter_op_num_threads = 0
        self.graph_optimization_level = None
        self.compute_type = None
        self.eager = False
        self.plan_cache_limit = 0
        # 4-bit MatMulNBits: 0 follows each node's accuracy_level (4: int8 activations),
        # 1 takes the int8 path everywhere, -1 nowhere (tm_load_options.nbits_int8)
        self.nbits_int8 = 0
        self.log_severity_level = 2


class RunOptions:
    """Accepted for ONNX Runtime's signature; nothing in it changes a run here."""

    def __init__(self):
        self.log_severity_level = 2
        self.terminate = False


def get_available_providers():
    return ["CPUExecutionProvider"]


def _load_model(source, threads=0, compute_type=None, trainable=False, trainable_names=None,
                plan_cache_limit=0, base_dir=None, nbits_int8=0):
    ct = 0
    if compute_type in ("float32", "f32", np.float32, FLOAT):
        ct = FLOAT
    elif compute_type is not None:
        raise InvalidArgument(f"compute_type {compute_type!r}: only float32 is known")
    if isinstance(source, (bytes, bytearray, memoryview)):
        source = bytes(source)
    else:
        source = os.fspath(source)
    return _c.Model(source, threads=threads, compute_type=ct, trainable=int(bool(trainable)),
                    trainable_names=trainable_names, plan_cache_limit=plan_cache_limit,
                    base_dir=base_dir, nbits_int8=int(nbits_int8))


class InferenceSession:
    """A loaded model run as ONNX Runtime's InferenceSession is: a path, an hf://OWNER/REPO
    source, or the model's bytes. Runs go through the model's plan cache (a plan per input
    shape, or one generic plan for shapes that grow along a line), or node by node when
    sess_options.eager is set. Thread-safe: several threads may call run() at once (the GIL
    is released while the library computes)."""

    def __init__(self, path_or_bytes, sess_options=None, providers=None, provider_options=None,
                 **kwargs):
        for p in providers or []:
            name = p[0] if isinstance(p, tuple) else p
            if name not in ("CPUExecutionProvider", "TransmuterExecutionProvider"):
                raise InvalidArgument(f"provider {name!r} is not available (only the CPU)")
        o = sess_options or SessionOptions()
        self._options = o
        self._eager = bool(getattr(o, "eager", False))
        self._model = _load_model(path_or_bytes, threads=getattr(o, "intra_op_num_threads", 0) or 0,
                                  compute_type=getattr(o, "compute_type", None),
                                  plan_cache_limit=getattr(o, "plan_cache_limit", 0) or 0,
                                  base_dir=kwargs.get("base_dir"),
                                  nbits_int8=getattr(o, "nbits_int8", 0) or 0)
        self._inputs = [NodeArg(*d) for d in self._model.inputs()]
        self._outputs = [NodeArg(*d) for d in self._model.outputs()]
        self._out_index = {a.name: i for i, a in enumerate(self._outputs)}
        self._in_dtype = {a.name: a.dtype for a in self._inputs}
        self._in_arg = {a.name: a for a in self._inputs}
        # Tensors only: runs take the tensor path (tm_model_run), with output buffers;
        # otherwise the values path (tm_model_run_values: sequences, empty optionals).
        self._plain = all(a.kind == _KIND_TENSOR and not a.optional
                          for a in self._inputs + self._outputs)

    def get_inputs(self):
        return list(self._inputs)

    def get_outputs(self):
        return list(self._outputs)

    def get_providers(self):
        return ["CPUExecutionProvider"]

    def get_session_options(self):
        return self._options

    def get_modelmeta(self):
        return {"opsets": self._model.opsets()}

    @property
    def missing_ops(self):
        """Operators of the model we cannot run ("domain:op@opset, ..."), or None."""
        return self._model.missing_ops()

    def plan_stats(self):
        """What the plan cache has done: runs, plans, generic plans."""
        return self._model.plan_stats()

    def _values(self, input_feed):
        names, values = [], []
        for name, x in input_feed.items():
            names.append(name)
            dt = self._in_dtype.get(name)
            arr = np.asarray(x)
            # bfloat16 inputs travel as their uint16 bits
            values.append(_to_value(arr, BFLOAT16 if dt == BFLOAT16 and arr.dtype == np.uint16 else None))
        return names, values

    def _pick(self, outs, output_names):
        if not output_names:
            return outs
        try:
            return [outs[self._out_index[n]] for n in output_names]
        except KeyError as e:
            raise NotFound(f"no output named {e.args[0]!r}") from None

    def _seq_values(self, input_feed):
        """input_feed for the values path: None for an empty optional, a list (or tuple) of
        arrays for an input declared a sequence, arrays otherwise."""
        names, values = [], []
        for name, x in input_feed.items():
            names.append(name)
            arg = self._in_arg.get(name)
            if x is None:
                values.append(None)
            elif arg is not None and arg.kind == _KIND_SEQUENCE and not isinstance(x, np.ndarray):
                items = [np.asarray(e) for e in x]
                dt = arg.dtype or (_dtype_code(items[0]) if items else 0)
                if not dt:
                    raise InvalidArgument(f"input {name!r}: an empty sequence of an element type "
                                          "the model does not declare")
                values.append((dt, [_to_value(e, BFLOAT16 if dt == BFLOAT16 and e.dtype == np.uint16
                                              else None) for e in items]))
            else:
                values.append(self._values({name: x})[1][0])
        return names, values

    def run(self, output_names, input_feed, run_options=None):
        """Runs the model on input_feed (name -> array; for a sequence input, a list of
        arrays; None for an empty optional); returns the outputs named (all when
        output_names is None or empty) as NumPy arrays viewing the library's results, a
        list of arrays for a sequence, None for an empty optional."""
        if self._plain:
            names, values = self._values(input_feed)
            ts = self._model.run(names, values, eager=self._eager)
            return self._pick([_to_numpy(t) for t in ts], output_names)
        names, values = self._seq_values(input_feed)
        outs = self._model.run_values(names, values, eager=self._eager)
        return self._pick([[_to_numpy(t) for t in o] if isinstance(o, list) else _to_numpy(o)
                           for o in outs], output_names)

    def io_binding(self):
        return IOBinding(self)

    def run_with_iobinding(self, iobinding, run_options=None):
        if not self._plain:
            if iobinding._given:
                raise Unsupported("output arrays (bind_output(array=)) need a model whose inputs "
                                  "and outputs are all tensors")
            iobinding._results = self.run(None, iobinding._raw)
            return
        names = list(iobinding._inputs)
        values = [iobinding._inputs[n] for n in names]
        given = None
        if iobinding._given:
            given = [None] * len(self._outputs)
            for n, arr in iobinding._given.items():
                given[self._out_index[n]] = _to_value(arr)
        ts = self._model.run(names, values, outputs=given, eager=self._eager)
        outs = []
        for i, t in enumerate(ts):
            n = self._outputs[i].name
            outs.append(iobinding._given[n] if n in iobinding._given else _to_numpy(t))
        iobinding._results = outs

    def __getstate__(self):
        raise TypeError("an InferenceSession cannot be pickled: load the model in each process "
                        "(transmuter.dask does)")


class IOBinding:
    """ONNX Runtime's IOBinding for the CPU: inputs bound once and reused; outputs either
    made by the run, or written in place into arrays bound with bind_output(name, array)
    (then the run allocates nothing for them)."""

    def __init__(self, session):
        self._session = session
        self._inputs = {}
        self._raw = {}          # as given: the values path converts them itself
        self._given = {}
        self._results = None

    def bind_cpu_input(self, name, arr):
        if self._session._plain:
            self._inputs[name] = self._session._values({name: arr})[1][0]
        else:
            self._raw[name] = arr

    def bind_input(self, name, device_type="cpu", device_id=0, element_type=None, shape=None,
                   buffer_ptr=None):
        raise Unsupported("bind_input with a raw pointer is not supported: use bind_cpu_input")

    def bind_output(self, name, device_type="cpu", device_id=0, element_type=None, shape=None,
                    buffer_ptr=None, array=None):
        if name not in self._session._out_index:
            raise NotFound(f"no output named {name!r}")
        if buffer_ptr is not None:
            raise Unsupported("bind_output with a raw pointer is not supported: pass array=")
        if array is not None:
            if not (isinstance(array, np.ndarray) and array.flags.c_contiguous and array.flags.writeable):
                raise InvalidArgument("an output array must be a writable C-contiguous ndarray")
            self._given[name] = array
        else:
            self._given.pop(name, None)

    def clear_binding_inputs(self):
        self._inputs = {}
        self._raw = {}

    def clear_binding_outputs(self):
        self._given = {}

    def get_outputs(self):
        return list(self._results or [])

    def copy_outputs_to_cpu(self):
        return [None if r is None else [np.array(e) for e in r] if isinstance(r, list) else np.array(r)
                for r in (self._results or [])]


class Model:
    """A model loaded for training (or inspection): its trainable parameters as NumPy arrays
    viewing the model's own storage (an update in place is seen by the next run), value
    and gradient plans, and saving with new parameter values.

    trainable: True for every float initializer, or a list of names / glob patterns."""

    def __init__(self, source, trainable=False, threads=0, compute_type=None):
        names = None
        if isinstance(trainable, (list, tuple)):
            names, trainable = list(trainable), True
        self._model = _load_model(source, threads=threads, compute_type=compute_type,
                                  trainable=trainable, trainable_names=names)
        self._params = [(n, t, _to_numpy(t)) for n, t in self._model.params()]
        self._session = None

    @property
    def params(self):
        """name -> ndarray over the parameter's storage (writable)."""
        return {n: a for n, _, a in self._params}

    def inputs(self):
        return [NodeArg(*d) for d in self._model.inputs()]

    def outputs(self):
        return [NodeArg(*d) for d in self._model.outputs()]

    def run(self, input_feed, eager=False):
        """Runs the forward graph: a dict of outputs by name."""
        names = list(input_feed)
        ts = self._model.run(names, [_to_value(input_feed[n]) for n in names], eager=eager)
        return {a[0]: _to_numpy(t) for a, t in zip(self._model.outputs(), ts)}

    def value_and_grad(self, input_feed, loss="output", output=None, target=None,
                       ignore_index=-100, params=None, with_outputs=False):
        """A GradientPlan for the shapes of input_feed (the target included, under its
        name — "target" unless told). loss: "output" (a scalar output), "mse",
        "cross_entropy", "soft_cross_entropy", "bce_with_logits"."""
        return GradientPlan(self, input_feed, loss, output, target, ignore_index, params,
                            with_outputs)

    def save(self, path, params=None, external_data="auto"):
        """Writes the model with the given parameters (name -> array; default: every
        trainable parameter's current value). external_data: auto, never, always."""
        if params is None:
            params = self.params
        ext = {"auto": 0, "never": 1, "always": 2}[external_data]
        names = list(params)
        self._model.save(os.fspath(path), names, [_to_value(params[n]) for n in names], ext)


_LOSSES = {"output": 0, "mse": 1, "cross_entropy": 2, "soft_cross_entropy": 3,
           "bce_with_logits": 4}


class GradientPlan:
    """A compiled value-and-gradient plan (tm_grad_plan_create) for fixed input shapes.
    Calling it gives (loss, {param name: gradient}[, outputs])."""

    def __init__(self, model, input_feed, loss, output, target, ignore_index, params,
                 with_outputs):
        if loss not in _LOSSES:
            raise InvalidArgument(f"loss {loss!r}: one of {', '.join(_LOSSES)}")
        self._model = model
        names = list(input_feed)
        self._plan = _c.GradPlan(model._model, names, [_to_value(input_feed[n]) for n in names],
                                 loss=_LOSSES[loss], output=output, target=target,
                                 ignore_index=ignore_index,
                                 params=None if params is None else list(params),
                                 with_outputs=with_outputs)
        all_names = [p[0] for p in model._params]
        self.param_names = [all_names[j] for j in self._plan.params()]
        self._with_outputs = with_outputs

    def __call__(self, input_feed):
        names = list(input_feed)
        ts = self._plan.run(names, [_to_value(input_feed[n]) for n in names])
        arrays = [_to_numpy(t) for t in ts]
        k = len(self.param_names)
        loss = float(arrays[0])
        grads = dict(zip(self.param_names, arrays[1:1 + k]))
        if self._with_outputs:
            return loss, grads, arrays[1 + k:]
        return loss, grads


class Optimizer:
    """SGD or AdamW (PyTorch's update rules) over a Model's parameters, updated in place.
    kind: "sgd" or "adamw"; settings: lr, weight_decay, momentum, dampening, nesterov,
    beta1, beta2 (or betas=(b1, b2)), eps, amsgrad, maximize, schedule ("constant",
    "linear", "cosine"), warmup_steps, total_steps, max_grad_norm, threads."""

    def __init__(self, model, kind="adamw", params=None, **settings):
        kinds = {"sgd": 1, "adamw": 2}
        if kind not in kinds:
            raise InvalidArgument(f"optimizer {kind!r}: sgd or adamw")
        if "betas" in settings:
            settings["beta1"], settings["beta2"] = settings.pop("betas")
        if "schedule" in settings:
            settings["schedule"] = {"constant": 0, "linear": 1, "cosine": 2}[settings["schedule"]]
        for k in ("maximize", "nesterov", "amsgrad"):
            if k in settings:
                settings[k] = int(bool(settings[k]))
        chosen = [p for p in model._params if params is None or p[0] in params]
        self.param_names = [p[0] for p in chosen]
        self._opt = _c.Optimizer(kinds[kind], self.param_names, [p[1] for p in chosen], settings)

    def step(self, grads):
        """grads: name -> array (a parameter missing from it is left alone this step)."""
        self._opt.step([None if grads.get(n) is None else _to_value(grads[n])
                        for n in self.param_names])

    def set_weight_decay(self, name, weight_decay):
        self._opt.set_weight_decay(self.param_names.index(name), weight_decay)

    @property
    def step_count(self):
        return self._opt.info()["step_count"]

    @property
    def lr(self):
        return self._opt.info()["lr"]

    @property
    def grad_norm(self):
        return self._opt.info()["grad_norm"]

    def save_state(self, path):
        self._opt.save_state(os.fspath(path))

    def load_state(self, path):
        self._opt.load_state(os.fspath(path))


# ---- Tokenizers -------------------------------------------------------------------------------

class Encoding:
    """One encoded text, as Hugging Face's tokenizers.Encoding: ids, tokens, attention_mask,
    type_ids, special_tokens_mask, word_ids (None for none), sequence_ids, offsets (in
    characters), byte_offsets, overflowing."""

    def __init__(self, d):
        self.ids = d["ids"]
        self.tokens = d["tokens"]
        self.attention_mask = d["attention_mask"]
        self.type_ids = d["type_ids"]
        self.special_tokens_mask = d["special_tokens_mask"]
        self.word_ids = [None if w < 0 else w for w in d["word_ids"]]
        self.sequence_ids = [None if s < 0 else s for s in d["sequence_ids"]]
        self.offsets = d["offsets"]
        self.byte_offsets = d["byte_offsets"]
        self.overflowing = [Encoding(o) for o in d["overflowing"]]

    def __len__(self):
        return len(self.ids)

    def __repr__(self):
        return f"Encoding(num_tokens={len(self.ids)})"


_TRUNC = {None: 0, False: 0, True: 1, "longest_first": 1, "only_first": 2, "only_second": 3}
_PAD = {None: 0, False: 0, True: 1, "longest": 1, "max_length": 2}
_SIDE = {None: 0, "right": 1, "left": 2}


class Tokenizer:
    """A tokenizer.json tokenizer (outputs equal Hugging Face's tokenizers). Immutable:
    share one between threads."""

    def __init__(self, source, ignore_config=False):
        self._tok = _c.Tokenizer(os.fspath(source), ignore_config=ignore_config)
        self._info = self._tok.info()

    @classmethod
    def from_pretrained(cls, name_or_path, revision=None, ignore_config=False):
        """A folder, a tokenizer.json, hf://OWNER/REPO[@REV], or OWNER/REPO (the Hub)."""
        src = os.fspath(name_or_path)
        if "://" not in src and not os.path.exists(src) and src.count("/") == 1:
            src = "hf://" + src + (f"@{revision}" if revision else "")
        return cls(src, ignore_config=ignore_config)

    @classmethod
    def from_file(cls, path):
        return cls(path, ignore_config=True)

    def _options(self, add_special_tokens, truncation, max_length, stride, padding,
                 pad_to_multiple_of, padding_side, truncation_side, threads):
        return {"add_special_tokens": int(bool(add_special_tokens)),
                "truncation": _TRUNC[truncation], "max_length": max_length or 0,
                "stride": stride, "padding": _PAD[padding],
                "pad_to_multiple_of": pad_to_multiple_of or 0,
                "padding_side": _SIDE[padding_side], "truncation_side": _SIDE[truncation_side],
                "threads": threads}

    def encode(self, text, pair=None, add_special_tokens=True, truncation=None, max_length=None,
               stride=0, padding=None, pad_to_multiple_of=None, padding_side=None,
               truncation_side=None):
        """An Encoding of text (and pair)."""
        o = self._options(add_special_tokens, truncation, max_length, stride, padding,
                          pad_to_multiple_of, padding_side, truncation_side, 1)
        return Encoding(self._tok.encode([text], None if pair is None else [pair], o)[0])

    def encode_batch(self, texts, pairs=None, add_special_tokens=True, truncation=None,
                     max_length=None, stride=0, padding=None, pad_to_multiple_of=None,
                     padding_side=None, truncation_side=None, threads=0):
        """Encodings of texts (each a str, or a (text, pair) tuple), on threads threads."""
        texts = list(texts)
        if pairs is None and texts and isinstance(texts[0], (tuple, list)):
            texts, pairs = [t[0] for t in texts], [t[1] for t in texts]
        o = self._options(add_special_tokens, truncation, max_length, stride, padding,
                          pad_to_multiple_of, padding_side, truncation_side, threads)
        return [Encoding(d) for d in self._tok.encode(texts, pairs, o)]

    def __call__(self, texts, pairs=None, padding=True, truncation=None, max_length=None,
                 return_tensors="np", **kw):
        """A batch as arrays, as transformers' tokenizers give: input_ids, attention_mask,
        token_type_ids (int64, padded to the longest unless told)."""
        single = isinstance(texts, str)
        encs = self.encode_batch([texts] if single else texts,
                                 None if pairs is None else ([pairs] if single else pairs),
                                 padding=padding, truncation=truncation, max_length=max_length,
                                 **kw)
        return {"input_ids": np.array([e.ids for e in encs], dtype=np.int64),
                "attention_mask": np.array([e.attention_mask for e in encs], dtype=np.int64),
                "token_type_ids": np.array([e.type_ids for e in encs], dtype=np.int64)}

    def decode(self, ids, skip_special_tokens=False, clean_up_tokenization_spaces=None):
        cleanup = -1 if clean_up_tokenization_spaces is None else int(bool(clean_up_tokenization_spaces))
        return self._tok.decode([int(i) for i in ids], bool(skip_special_tokens), cleanup)

    def decode_batch(self, sequences, skip_special_tokens=False, clean_up_tokenization_spaces=None):
        return [self.decode(s, skip_special_tokens, clean_up_tokenization_spaces) for s in sequences]

    def token_to_id(self, token):
        return self._tok.token_to_id(token.encode("utf-8"))

    def id_to_token(self, i):
        return self._tok.id_to_token(int(i))

    def get_vocab_size(self, with_added_tokens=True):
        return self._info["vocab_size"]

    @property
    def model_max_length(self):
        m = self._info["model_max_length"]
        return None if m < 0 else m

    @property
    def special_tokens(self):
        """role ("bos", "eos", "unk", "sep", "pad", "cls", "mask") -> (token, id)."""
        return dict(self._info["special"])

    @property
    def chat_template(self):
        return self._info["chat_template"]


# ---- Pipelines ------------------------------------------------------------------------------

class Pipeline:
    """A task on a repository (transformers.js's pipeline): call it with the task's
    positional arguments and options; results are transformers.js's, as Python values.
    One call at a time (concurrent calls wait for each other)."""

    def __init__(self, task, repo, **load_options):
        repo = os.fspath(repo)
        if "://" not in repo and not os.path.exists(repo) and repo.count("/") == 1:
            repo = "hf://" + repo
        self._p = _c.Pipeline(task, repo, json.dumps(load_options) if load_options else None)
        self.task, self.model_file = self._p.info()

    def __call__(self, *inputs, **options):
        return json.loads(self._p.call(json.dumps(list(inputs)),
                                       json.dumps(options) if options else None))

    def __getstate__(self):
        raise TypeError("a Pipeline cannot be pickled: create it in each process "
                        "(transmuter.dask does)")


def pipeline(task, repo, **options):
    """A Pipeline for task on repo (a folder, hf://OWNER/REPO[@REV] or OWNER/REPO). Load
    options as transformers.js's: dtype ("fp32", "fp16", "q8", "q4", ...),
    model_file_name, subfolder, threads."""
    return Pipeline(task, repo, **options)


def tasks():
    """The tasks known, as one line."""
    return _c.tasks()
