"""The llama.cpp engine's per-op trace of one (artifact, query) pair: the SHA-256 of every ggml op's output as the
CPU backend computes it, each layer's K and V cells after the artifact, and the query's logits (the steps of
:mod:`graftbench.eval.layer_trace`, as the torch engine's trace writes them).

The artifact is prefilled into a fresh context in the pin's batch schedule (as a deposit is), its sequence state
read for the K and V steps, then the query is prefilled after it with every position's logits (as ``check-exact``'s
fresh side is). The ops are seen through llama.cpp's eval callback (the context's ``cb_eval``,
``bool cb(struct ggml_tensor * t, bool ask, void * user_data)``): ggml's scheduler asks it, node by node, whether
it wants a node; it computes the nodes up to the one wanted as one graph, then hands it over to be read.

Invariants:

- the callback only reads: it copies a computed tensor's bytes out with ``ggml_backend_tensor_get`` and never
  writes a tensor or stops the graph (tests check the traced logits equal the untraced ones byte for byte);
- it asks for no node that computes nothing (``NONE``, ``VIEW``, ``RESHAPE``, ``PERMUTE``, ``TRANSPOSE``: their
  bytes are their source's) and for no ``RMS_NORM``: the CPU backend fuses an ``RMS_NORM`` with the ``MUL`` after
  it when both are computed in one graph (``ggml_cpu_try_fuse_ops``), and does not write the norm's own output
  then; asking for the norm would split them and compute another kernel than an untraced run does. The ``MUL``'s
  step covers both;
- ``struct ggml_tensor`` is read through ctypes as the shipped ``ggml.h`` of the vendored llama.cpp lays it out
  (:class:`GgmlTensor`); the layout is checked on the first tensor against ggml's own ``ggml_get_name`` and
  ``ggml_nelements``, so another layout raises instead of misreading.

A step's ``op`` is the tensor's name in llama.cpp's graph and its ggml op (``ffn_out-3 MUL_MAT``); ``call`` counts
that op's steps from the first (one per micro-batch holding it); ``input_sha256`` is the SHA-256 of its sources'
output hashes where the trace recorded them in this micro-batch (a source it did not record, such as a weight or a
cache view, counts as ``-``), ``output_sha256`` that of its bytes in row-major order (a non-contiguous view
gathered element by element; a non-contiguous view of a block-quantized type cannot be and is recorded with its
``skipped`` reason and an empty hash), ``shape`` its dimensions outermost first and ``dtype`` ggml's type name.

Needs llama-cpp-python (the ``llama`` extra); imports no torch.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .engine import LlamaCppEngine, _lib
from .state_layout import KEY_TYPES, layer_blocks

GGML_MAX_DIMS, GGML_MAX_SRC, GGML_MAX_OP_PARAMS, GGML_MAX_NAME = 4, 10, 64, 64  # ggml.h of the vendored llama.cpp
NO_COMPUTE_OPS = frozenset({"NONE", "VIEW", "RESHAPE", "PERMUTE", "TRANSPOSE"})  # ggml_op_desc: no bytes computed
FUSED_FIRST_OPS = frozenset({"RMS_NORM"})  # computed with the next op by the CPU backend: never asked for alone


class GgmlTensor(ctypes.Structure):
    """``struct ggml_tensor`` as ``ggml.h`` of llama-cpp-python 0.3.36's vendored llama.cpp declares it."""

    _fields_ = [
        ("type", ctypes.c_int),
        ("buffer", ctypes.c_void_p),
        ("ne", ctypes.c_int64 * GGML_MAX_DIMS),  # elements per dimension, innermost first
        ("nb", ctypes.c_size_t * GGML_MAX_DIMS),  # bytes between consecutive elements of each dimension
        ("op", ctypes.c_int),
        ("op_params", ctypes.c_int32 * (GGML_MAX_OP_PARAMS // 4)),
        ("flags", ctypes.c_int32),
        ("src", ctypes.c_void_p * GGML_MAX_SRC),
        ("view_src", ctypes.c_void_p),
        ("view_offs", ctypes.c_size_t),
        ("data", ctypes.c_void_p),
        ("name", ctypes.c_char * GGML_MAX_NAME),
        ("extra", ctypes.c_void_p),
        ("padding", ctypes.c_char * 8),
    ]


def ggml_library() -> ctypes.CDLL:
    """The ggml base library llama-cpp-python's ``libllama`` loaded in this process (the same copy: opened with
    ``RTLD_NOLOAD`` from the folder the bindings load from, native or portable build), its functions typed.

    Raises ``OSError`` when that library is not loaded there."""
    folder = Path(_lib().llama_cpp._base_path)
    ggml = ctypes.CDLL(str(folder / "libggml-base.so.0"), mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
    typed = {
        "ggml_nbytes": (ctypes.c_size_t, [ctypes.c_void_p]),
        "ggml_nelements": (ctypes.c_int64, [ctypes.c_void_p]),
        "ggml_is_contiguous": (ctypes.c_bool, [ctypes.c_void_p]),
        "ggml_n_dims": (ctypes.c_int, [ctypes.c_void_p]),
        "ggml_get_name": (ctypes.c_void_p, [ctypes.c_void_p]),
        "ggml_op_name": (ctypes.c_char_p, [ctypes.c_int]),
        "ggml_op_desc": (ctypes.c_char_p, [ctypes.c_void_p]),
        "ggml_type_name": (ctypes.c_char_p, [ctypes.c_int]),
        "ggml_type_size": (ctypes.c_size_t, [ctypes.c_int]),
        "ggml_blck_size": (ctypes.c_int64, [ctypes.c_int]),
        "ggml_backend_tensor_get": (None, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t]),
    }
    for name, (restype, argtypes) in typed.items():
        function = getattr(ggml, name)
        function.restype, function.argtypes = restype, argtypes
    return ggml


@dataclass
class OpRecorder:
    """The eval callback's state through one trace: the steps so far, each op's step count, the output hash of
    each node recorded (by tensor address, with the node's identity: a graph's tensors are reused by the next),
    and the first error the callback met (a callback cannot raise into llama.cpp: the trace raises it after the
    decode)."""

    ggml: ctypes.CDLL
    steps: list[dict] = field(default_factory=list)
    calls: dict[str, int] = field(default_factory=dict)
    recorded: dict[int, tuple[tuple, str]] = field(default_factory=dict)
    layout_checked: bool = False
    error: BaseException | None = None

    def wanted(self, address: int) -> bool:
        """Whether the node at ``address`` is one to read (:data:`NO_COMPUTE_OPS` and :data:`FUSED_FIRST_OPS` are
        not). The first node asked about checks :class:`GgmlTensor`'s layout before any field is read through it;
        the op's name comes from ggml itself (``ggml_op_desc`` on the node), never from a field read here."""
        if not self.layout_checked:
            self._check_layout(address, GgmlTensor.from_address(address))
        op = self.ggml.ggml_op_desc(address).decode()
        return op not in NO_COMPUTE_OPS and op not in FUSED_FIRST_OPS

    def read(self, address: int) -> None:
        """Record the computed node at ``address`` as the next step."""
        tensor = GgmlTensor.from_address(address)
        if not self.layout_checked:
            self._check_layout(address, tensor)
        name = tensor.name.decode("utf-8", "replace")
        op = f"{name} {self.ggml.ggml_op_desc(address).decode()}"
        self.calls[op] = self.calls.get(op, -1) + 1
        data, skipped = self._bytes(address, tensor)
        output = hashlib.sha256(data).hexdigest() if data is not None else ""
        dims = max(1, self.ggml.ggml_n_dims(address))
        step = {"op": op, "call": self.calls[op], "input_sha256": self._inputs(tensor), "output_sha256": output,
                "shape": [int(n) for n in reversed(tensor.ne[:dims])],
                "dtype": self.ggml.ggml_type_name(tensor.type).decode()}
        if skipped:
            step["skipped"] = skipped
        self.steps.append(step)
        self.recorded[address] = (_identity(tensor), output)

    def recorded_output(self, address: int) -> str:
        """The output hash recorded for the node now at ``address``, ``-`` when none was: a node is recorded
        before any node that reads it (graph order), so an entry whose identity (name, op, type, shape) is not the
        node's now is another graph's."""
        identity, output = self.recorded.get(address, (None, "-"))
        return output if identity == _identity(GgmlTensor.from_address(address)) else "-"

    def _check_layout(self, address: int, tensor: GgmlTensor) -> None:
        """Raise ``RuntimeError`` when :class:`GgmlTensor` is not this ggml's ``struct ggml_tensor`` layout."""
        name_at = address + GgmlTensor.name.offset
        elements = int(np.prod([int(n) for n in tensor.ne], dtype=np.int64))
        if self.ggml.ggml_get_name(address) != name_at or self.ggml.ggml_nelements(address) != elements:
            raise RuntimeError("ggml's struct ggml_tensor is not laid out as graftbench reads it (another llama.cpp "
                               "version?): no layer trace")
        self.layout_checked = True

    def _inputs(self, tensor: GgmlTensor) -> str:
        """SHA-256 of the sources' recorded output hashes (``-`` for one not recorded), ``""`` without sources."""
        parts = [self._source_output(source) for source in tensor.src if source]
        return hashlib.sha256(" ".join(parts).encode()).hexdigest() if parts else ""

    def _source_output(self, address: int) -> str:
        """The recorded output hash of the source at ``address``: its own, else its view's root's, else (a norm
        fused into this op, never recorded) its own first source's; ``-`` when none was recorded."""
        found = self.recorded_output(address)
        source = GgmlTensor.from_address(address)
        if found == "-" and source.view_src:
            found = self.recorded_output(source.view_src)
        if found == "-" and source.src[0] and self.ggml.ggml_op_name(source.op).decode() in FUSED_FIRST_OPS:
            found = self.recorded_output(source.src[0])
        return found

    def _bytes(self, address: int, tensor: GgmlTensor) -> tuple[bytes | None, str]:
        """The tensor's bytes in row-major order and ``""``, or ``None`` and why they cannot be read."""
        if not tensor.data or not tensor.buffer:
            return None, "no data allocated"
        size = int(self.ggml.ggml_nbytes(address))
        raw = np.empty(size, dtype=np.uint8)
        if size:
            self.ggml.ggml_backend_tensor_get(address, raw.ctypes.data, 0, size)
        if self.ggml.ggml_is_contiguous(address):
            return raw.tobytes(), ""
        if self.ggml.ggml_blck_size(tensor.type) != 1:
            return None, "a non-contiguous view of a block-quantized type"
        element = int(self.ggml.ggml_type_size(tensor.type))
        shape = [int(n) for n in reversed(tensor.ne)] + [element]
        strides = [int(n) for n in reversed(tensor.nb)] + [1]
        gathered = np.lib.stride_tricks.as_strided(raw, shape=shape, strides=strides, writeable=False)
        return np.ascontiguousarray(gathered).tobytes(), ""


def _identity(tensor: GgmlTensor) -> tuple:
    return tensor.name, tensor.op, tensor.type, tuple(tensor.ne)


def eval_callback(recorder: OpRecorder):
    """A ``ggml_backend_sched_eval_callback`` around ``recorder``: asked (``ask`` true), it wants the nodes
    :meth:`OpRecorder.wanted` names; handed a computed node, it records it and returns true (false would stop the
    graph). It keeps its first error in ``recorder.error`` and then wants no more nodes. Keep the returned object
    alive while a context holds it."""
    lib = _lib()

    def callback(address, ask, _user_data):
        try:
            if recorder.error is None:
                if ask:
                    return recorder.wanted(address)
                recorder.read(address)
        except Exception as exc:  # raised by trace_pair after the decode: llama.cpp cannot take an exception
            recorder.error = exc
        if recorder.error is not None:
            return not ask  # no more nodes wanted, and the graph never stopped
        return True

    return lib.ggml_backend_sched_eval_callback(callback)


def _kv_steps(state: bytes) -> list[dict]:
    """``kv.<layer>.k`` and ``kv.<layer>.v`` per layer of a sequence state (``kv.<cache>.<layer>.*`` for a second
    cache, a sliding-window model's): the SHA-256 of each block's bytes as the state holds them."""
    steps = []
    for keys, values in layer_blocks(state):
        prefix = f"kv.{keys.layer}" if keys.cache == 0 else f"kv.{keys.cache}.{keys.layer}"
        key_data = state[keys.offset:keys.offset + keys.row_bytes * len(keys.positions)]
        value_data = state[values.offset:values.offset + values.size]
        cells = len(keys.positions)
        steps.append({"op": f"{prefix}.k", "call": 0, "input_sha256": "",
                      "output_sha256": hashlib.sha256(key_data).hexdigest(), "shape": [cells, keys.row_bytes],
                      "dtype": _type_name(keys.key_type)})
        steps.append({"op": f"{prefix}.v", "call": 0, "input_sha256": "",
                      "output_sha256": hashlib.sha256(value_data).hexdigest(),
                      "shape": [values.size // cells, cells] if values.transposed else [cells, values.size // cells],
                      "dtype": _type_name(values.value_type)})
    return steps


def _type_name(type_id: int) -> str:
    return KEY_TYPES[type_id][0] if type_id in KEY_TYPES else f"ggml type {type_id}"


def trace_pair(engine: LlamaCppEngine, artifact: list[int], query: list[int]) -> list[dict]:
    """The steps of one pair on ``engine`` with its pinned context (chunk size, threads, KV cache type, flash
    attention): every op's step per micro-batch over the artifact's prefill (in ``llama_decode`` calls of the chunk
    size, as a deposit makes them), ``kv.<layer>.k`` / ``kv.<layer>.v`` (each layer's K rows ``[cells, row bytes]``
    and V block, as llama.cpp's sequence state holds them), the query's prefill (every position an output) and
    ``logits.query`` (``[len(query), vocab]`` float32).

    Raises ``ValueError`` for an empty artifact or query, ``RuntimeError`` when the callback could not read a
    tensor (the layout check), ``OSError`` when ggml's library cannot be found and
    :class:`graftbench.engine.llama_cpp.engine.LlamaCppError` when a decode fails."""
    if not artifact or not query:
        raise ValueError("a trace needs a non-empty artifact and query")
    recorder = OpRecorder(ggml_library())
    callback = eval_callback(recorder)
    cache = engine.new_cache(eval_callback=callback)
    try:
        engine.prefill(cache, artifact)
        _raise_recorded(recorder)
        recorder.steps.extend(_kv_steps(engine.capture(cache).state))
        logits = engine.prefill(cache, query, all_logits=True)
        _raise_recorded(recorder)
    finally:
        cache.close()
    recorder.steps.append({"op": "logits.query", "call": 0, "input_sha256": "",
                           "output_sha256": engine.logits_sha256(logits), "shape": list(logits.shape),
                           "dtype": "float32"})
    return recorder.steps


def _raise_recorded(recorder: OpRecorder) -> None:
    """Raise the first error the callback met during the last prefill, if any."""
    if recorder.error is not None:
        raise recorder.error
