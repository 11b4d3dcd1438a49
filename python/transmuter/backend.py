"""transmuter.backend: ONNX's Python backend interface (onnx.backend.base.Backend) over
InferenceSession, so that onnx.backend.test.BackendTest can run its suites against us.

    import onnx.backend.test
    import transmuter.backend
    globals().update(onnx.backend.test.BackendTest(transmuter.backend, __name__).test_cases)

CPU only. Values NumPy has no dtype for travel as onnx.numpy_helper gives them: bfloat16
as float32 (rounded to bfloat16 on the way in, widened on the way out). Sequences travel
as lists of arrays and an empty optional as None, as numpy_helper gives them
(tm_model_run_values underneath). Maps are refused. Not a test runner.
"""
import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep, Device, DeviceType

from . import BFLOAT16, InferenceSession, SessionOptions, Unsupported


def _bf16_bits(x):
    """float32 -> bfloat16 bits, rounded to nearest even (NaN kept a NaN)."""
    x = np.array(x, dtype=np.float32, order="C")   # (ascontiguousarray makes a scalar 1-d)
    u = x.view(np.uint32)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return np.where(np.isnan(x), (u >> 16) | 0x40, rounded).astype(np.uint16)


def _bf16_widen(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def _kind(type_proto):
    return type_proto.WhichOneof("value")


class TransmuterRep(BackendRep):
    """A prepared model: run(inputs) with inputs a list (in graph-input order) or a dict."""

    def __init__(self, model, eager=False, threads=0):
        opts = SessionOptions()
        opts.eager = eager
        opts.intra_op_num_threads = threads
        self.session = InferenceSession(model.SerializeToString(), opts)
        inits = {t.name for t in model.graph.initializer}
        self._graph_inputs = [v.name for v in model.graph.input]
        self._fed = {a.name for a in self.session.get_inputs()} | inits
        self._dtypes = {a.name: a.dtype for a in self.session.get_inputs()}
        for v in list(model.graph.input) + list(model.graph.output):
            if _kind(v.type) in ("map_type", "sparse_tensor_type"):
                raise Unsupported(f"'{v.name}' is a {_kind(v.type).replace('_type', '')}: the C API "
                                  "carries tensors, sequences and optionals")

    def _value(self, name, x):
        if x is None:
            return None
        if isinstance(x, list):
            return [self._value(name, e) for e in x]
        x = np.asarray(x)
        if self._dtypes.get(name) == BFLOAT16 and x.dtype != np.uint16:
            x = _bf16_bits(x)
        return x

    def run(self, inputs, **kwargs):
        if isinstance(inputs, dict):
            items = list(inputs.items())
        else:
            if not isinstance(inputs, (list, tuple)):
                inputs = [inputs]
            items = list(zip(self._graph_inputs, inputs))
        feed = {n: self._value(n, x) for n, x in items}
        outs = self.session.run(None, feed)
        result = []
        for arg, out in zip(self.session.get_outputs(), outs):
            if arg.dtype == BFLOAT16 and isinstance(out, list):
                out = [_bf16_widen(e) for e in out]
            elif arg.dtype == BFLOAT16 and out is not None:
                out = _bf16_widen(out)
            result.append(out)
        return tuple(result)


class TransmuterBackend(Backend):
    @classmethod
    def is_compatible(cls, model, device="CPU", **kwargs):
        return cls.supports_device(device)

    @classmethod
    def prepare(cls, model, device="CPU", **kwargs):
        """A TransmuterRep of model (a ModelProto, or a path or the bytes of one). Our own
        loader checks the model (the onnx package's checker knows only its own opsets).
        kwargs: eager (node by node), threads."""
        if isinstance(model, (str, bytes)):
            model = onnx.load_model_from_string(model) if isinstance(model, bytes) else onnx.load(model)
        if not cls.supports_device(device):
            raise Unsupported(f"device {device}: only the CPU")
        return TransmuterRep(model, eager=kwargs.get("eager", False), threads=kwargs.get("threads", 0))

    @classmethod
    def run_model(cls, model, inputs, device="CPU", **kwargs):
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node, inputs, device="CPU", outputs_info=None, **kwargs):
        raise Unsupported("run_node: give a model (prepare / run_model)")

    @classmethod
    def supports_device(cls, device):
        return Device(device).type == DeviceType.CPU


prepare = TransmuterBackend.prepare
run_model = TransmuterBackend.run_model
run_node = TransmuterBackend.run_node
supports_device = TransmuterBackend.supports_device
is_compatible = TransmuterBackend.is_compatible
